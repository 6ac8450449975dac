"""The optimizer of §5.3: Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9, and a
learning rate that warms up linearly and then decays as 1/sqrt(step).

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)      (§5.3)

Why warm up: early in training Adam's second-moment estimate v is built from
very few gradients and is noisy, so its steps can be huge; a small learning
rate for the first ``warmup_steps`` steps keeps them in check. Why the
d_model^-0.5: wider models get smaller steps.

Like the layers, this module gets its array library from its inputs
(``xp = backend.get_array_module(p.data)``), so it runs on NumPy or CuPy, and
it updates parameters in place: ``Parameter.data`` is the same array object
before and after a step.

dtype: a float32 parameter stays float32. All scalars below are Python floats,
which NumPy 2 (NEP 50) and CuPy treat as "weak" and never let upcast a float32
array; a NumPy float64 scalar would (float64 scalar times float32 array gives float64).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence

from . import backend
from .layers.parameter import Parameter


class NoamSchedule:
    """lr(step) = factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (§5.3).

    The two terms are equal at step == warmup_steps, where the rate peaks at
    factor * (d_model * warmup_steps)^-0.5: linear growth before, 1/sqrt(step)
    decay after. (Named after Noam Shazeer, who proposed it.)
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, factor: float = 1.0):
        if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 1:
            raise ValueError(f"NoamSchedule: d_model must be a positive integer, got {d_model!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 1:
            raise ValueError(f"NoamSchedule: warmup_steps must be a positive integer, got {warmup_steps!r}")
        if not (isinstance(factor, int | float) and math.isfinite(factor) and factor > 0):
            raise ValueError(f"NoamSchedule: factor must be a positive number, got {factor!r}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.factor = float(factor)

    def __call__(self, step: int) -> float:
        if isinstance(step, bool):
            raise ValueError(f"NoamSchedule: step must be an integer, got {step!r}")
        try:
            step = operator.index(step)  # int or a NumPy integer; refuses 1.5
        except TypeError:
            raise ValueError(f"NoamSchedule: step must be an integer, got {type(step).__name__}: {step!r}") from None
        if step < 1:
            # step^-0.5 is undefined at 0: steps are counted from 1.
            raise ValueError(f"NoamSchedule: step must be >= 1 (steps count from 1), got {step}")
        return self.factor * self.d_model ** -0.5 * min(step ** -0.5, step * self.warmup_steps ** -1.5)

    @property
    def peak_lr(self) -> float:
        """The largest rate, reached at step == warmup_steps."""
        return self(self.warmup_steps)

    def __repr__(self) -> str:
        return f"NoamSchedule(d_model={self.d_model}, warmup_steps={self.warmup_steps}, factor={self.factor})"


def global_grad_norm(params: Sequence[Parameter]) -> float:
    """sqrt(sum over all params of sum(grad**2)): the L2 norm of all gradients as one vector."""
    total = 0.0
    for p in params:
        xp = backend.get_array_module(p.grad)
        g = p.grad.reshape(-1)
        # vdot(g, g) = sum(g*g) without materializing g*g; summed in Python floats
        # so many float32 parameters add up without float32 rounding.
        total += float(xp.vdot(g, g))
    return math.sqrt(total)


def clip_grad_norm(params: Sequence[Parameter], max_norm: float) -> float:
    """Scale all gradients together so their global L2 norm is at most ``max_norm``.

    Returns the norm *before* clipping (worth logging: a norm that keeps
    hitting the limit means the learning rate is too high). Scaling all
    gradients by one factor keeps the update's direction; clipping each
    separately would not. A non-finite norm (inf or NaN) is returned as is and
    the gradients are left alone: scaling cannot repair them, and the caller
    should skip the step.
    """
    if not (isinstance(max_norm, int | float) and max_norm > 0):
        raise ValueError(f"clip_grad_norm: max_norm must be a positive number, got {max_norm!r}")
    norm = global_grad_norm(params)
    if math.isfinite(norm) and norm > max_norm:
        scale = float(max_norm) / norm  # a Python float: keeps float32 grads float32
        for p in params:
            p.grad *= scale
    return norm


# Adam updates each parameter in blocks of this many elements. A block of p, grad,
# m, v and one scratch array (5 × 256 KiB) stays in the 1-2 MiB L2 cache through
# all the passes of one update; on the benchmark machine this made Adam about
# 1.5x faster than whole-array passes at the base size (32k to 256k all within 5%).
# On a GPU, blocks would only multiply kernel launches: there each array is one block.
ADAM_BLOCK = 1 << 16


def _blocks(*arrays):
    """Yield matching flat blocks of same-shaped arrays (views: writes go to the arrays).

    A non-contiguous array cannot be flattened without a copy, and GPU arrays gain
    nothing from blocks: those are yielded whole.
    """
    if not (backend.on_cpu(arrays[0]) and all(a.flags.c_contiguous for a in arrays)):
        yield arrays
        return
    flat = [a.reshape(-1) for a in arrays]
    n = flat[0].size
    for start in range(0, n, ADAM_BLOCK):
        yield tuple(a[start: start + ADAM_BLOCK] for a in flat)


def _fill_zero(arrays) -> None:
    for a in arrays:
        a[...] = 0


class _Constant:
    """A learning rate that does not depend on the step (a plain float given as lr)."""

    def __init__(self, lr: float):
        self.lr = lr

    def __call__(self, step: int) -> float:
        return self.lr

    def __repr__(self) -> str:
        return repr(self.lr)


class Adam:
    """Adam (Kingma & Ba, 2015, Algorithm 1), with the paper's settings as defaults (§5.3).

    For each parameter p with gradient g, at step t = 1, 2, ...:

        m = beta1 * m + (1 - beta1) * g            first moment: running mean of g
        v = beta2 * v + (1 - beta2) * g**2         second moment: running mean of g^2
        m_hat = m / (1 - beta1**t)                 bias correction: m and v start at 0
        v_hat = v / (1 - beta2**t)                 and would be too small early on
        p = p - lr(t) * m_hat / (sqrt(v_hat) + eps)

    lr: a float, or a callable step -> float such as :class:`NoamSchedule`.
    clip_norm: if set, the global gradient norm is clipped to it before the
        update (not in the paper; it helps tiny models on synthetic tasks).

    ``step()`` does not zero the gradients; call ``zero_grad()`` before the
    next backward (backward passes add into ``grad``).
    """

    def __init__(
        self,
        params: Sequence[Parameter],
        lr: float | Callable[[int], float],
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9,
        clip_norm: float | None = None,
    ):
        params = list(params)
        if not params:
            raise ValueError("Adam: got an empty parameter list")
        seen: set[int] = set()
        for i, p in enumerate(params):
            if not isinstance(p, Parameter):
                raise TypeError(f"Adam: params[{i}] must be a Parameter, got {type(p).__name__}")
            if id(p) in seen:
                # It would be updated twice per step.
                raise ValueError(f"Adam: parameter {i} ({p.name!r}) appears more than once in params")
            seen.add(id(p))
        if callable(lr):
            schedule = lr
        elif isinstance(lr, int | float) and not isinstance(lr, bool) and lr > 0:
            schedule = _Constant(float(lr))
        else:
            raise ValueError(f"Adam: lr must be a positive number or a callable step -> lr, got {lr!r}")
        beta1, beta2 = betas
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise ValueError(f"Adam: betas must each be in [0, 1), got {betas!r}")
        if not eps >= 0:
            raise ValueError(f"Adam: eps must be >= 0, got {eps!r}")
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(f"Adam: clip_norm must be positive or None, got {clip_norm!r}")

        self.params = params
        self.schedule = schedule
        # Python floats, not NumPy scalars: see the module docstring on dtypes.
        self.betas = (float(beta1), float(beta2))
        self.eps = float(eps)
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        self.step_count = 0
        self.last_lr: float | None = None
        self.last_grad_norm: float | None = None
        # One m and one v per parameter, same shape, dtype and device.
        self.m = [backend.get_array_module(p.data).zeros_like(p.data) for p in params]
        self.v = [backend.get_array_module(p.data).zeros_like(p.data) for p in params]

    def zero_grad(self) -> None:
        """Set every gradient to 0 (backward passes add into them)."""
        # A write of every gradient (250 MB at the base size): in blocks, spread over the CPU threads.
        xp = backend.get_array_module(self.params[0].grad)
        blocks = [g for p in self.params for (g,) in _blocks(p.grad)]
        backend.run_in_threads(_fill_zero, blocks, xp)

    def step(self) -> None:
        """One update of every parameter from its current ``grad``."""
        self.step_count += 1  # once per call, however many parameters: the schedule's clock
        t = self.step_count
        lr = float(self.schedule(t))
        self.last_lr = lr

        # The norm is measured every step (for logging), clipped only if asked. Without
        # clipping it is summed inside the update below from the g^2 computed there
        # (saves a pass over every gradient).
        if self.clip_norm is not None:
            self.last_grad_norm = clip_grad_norm(self.params, self.clip_norm)

        beta1, beta2 = self.betas
        # The bias corrections are the same for every parameter: compute once.
        correction1 = 1.0 - beta1**t
        sqrt_correction2 = math.sqrt(1.0 - beta2**t)
        # p -= lr · m_hat / (sqrt(v_hat) + eps), with m_hat = m / correction1 and
        # sqrt(v_hat) = sqrt(v) / sqrt_correction2, is the same as
        # p -= step_size · m / (sqrt(v) + eps_hat) with:
        step_size = lr * sqrt_correction2 / correction1
        eps_hat = self.eps * sqrt_correction2

        def update(blocks) -> float:
            """Adam on a list of (p, grad, m, v) blocks; returns their sum of grad^2."""
            sum_sq = 0.0
            scratch = None                               # one work array, reused for every block
            for p, g, m, v in blocks:
                xp = backend.get_array_module(p)
                if scratch is None or scratch.size < g.size or scratch.dtype != g.dtype:
                    scratch = xp.empty(max(g.size, ADAM_BLOCK), dtype=g.dtype)
                buf = scratch[: g.size].reshape(g.shape)
                # m = beta1 * m + (1 - beta1) * g
                m *= beta1
                xp.multiply(g, 1.0 - beta1, out=buf)
                m += buf
                # v = beta2 * v + (1 - beta2) * g^2
                v *= beta2
                xp.multiply(g, g, out=buf)
                if self.clip_norm is None:
                    sum_sq += float(buf.sum())           # the norm's sum of g^2, from the g^2 at hand
                buf *= 1.0 - beta2
                v += buf
                # p -= step_size * m / (sqrt(v) + eps_hat)
                xp.sqrt(v, out=buf)
                buf += eps_hat
                xp.divide(m, buf, out=buf)
                buf *= step_size
                p -= buf
            return sum_sq

        # Block by block (see ADAM_BLOCK): the ~12 passes of the update then run on data in
        # cache instead of streaming every parameter through memory each time. The blocks
        # are independent, so they are also spread over the CPU threads.
        blocks = [b for p, m, v in zip(self.params, self.m, self.v) for b in _blocks(p.data, p.grad, m, v)]
        sum_sq = sum(backend.run_in_threads(update, blocks, backend.get_array_module(self.params[0].data)))
        if self.clip_norm is None:
            self.last_grad_norm = math.sqrt(sum_sq)

    # -- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The optimizer's state as host arrays and ints: ``step_count``, ``m.<i>``, ``v.<i>``.

        i is the parameter's position in ``params``, so the optimizer must be
        rebuilt with the parameters in the same order. The arrays are copies:
        later steps do not change a saved state dict.
        """
        state: dict = {"step_count": self.step_count}
        for i, (m, v) in enumerate(zip(self.m, self.v)):
            state[f"m.{i}"] = backend.to_numpy(m).copy()
            state[f"v.{i}"] = backend.to_numpy(v).copy()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore a :meth:`state_dict`, onto each parameter's backend and dtype."""
        if "step_count" not in state:
            raise KeyError("Adam.load_state_dict: the state has no 'step_count' (is it from Adam.state_dict?)")
        n_saved = sum(1 for key in state if key.startswith("m."))
        if n_saved != len(self.params):
            raise ValueError(
                f"Adam.load_state_dict: the state has moments for {n_saved} parameters, "
                f"this optimizer has {len(self.params)}"
            )
        new_m, new_v = [], []
        for i, p in enumerate(self.params):
            xp = backend.get_array_module(p.data)
            for key, out in ((f"m.{i}", new_m), (f"v.{i}", new_v)):
                if key not in state:
                    raise KeyError(f"Adam.load_state_dict: the state has no {key!r} (parameter {i}, {p.name!r})")
                saved = backend.to_numpy(state[key])
                if tuple(saved.shape) != tuple(p.data.shape):
                    raise ValueError(
                        f"Adam.load_state_dict: {key!r} has shape {tuple(saved.shape)} but parameter {i} "
                        f"({p.name!r}) has shape {tuple(p.data.shape)}"
                    )
                # xp.array copies, so later steps never write into the caller's dict.
                out.append(xp.array(saved, dtype=p.data.dtype))
        # Assign only after every check has passed: a failed load changes nothing.
        self.m, self.v = new_m, new_v
        self.step_count = int(state["step_count"])

    def __repr__(self) -> str:
        return (
            f"Adam({len(self.params)} params, lr={self.schedule!r}, betas={self.betas}, "
            f"eps={self.eps}, clip_norm={self.clip_norm}, step_count={self.step_count})"
        )
