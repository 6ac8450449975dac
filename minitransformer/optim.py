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
import warnings
from collections.abc import Callable, Sequence

from . import backend
from .errors import NonFiniteError
from .layers.parameter import Parameter


class NonFiniteGradientError(NonFiniteError):
    """Adam skipped ``max_consecutive_skips`` updates in a row because of non-finite gradients."""


class NonFiniteGradientWarning(RuntimeWarning):
    """Adam skipped one update because a gradient was NaN, infinite or too large to square."""


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
    """sqrt(sum over all params of sum(grad**2)): the L2 norm of all gradients as one vector.

    inf or NaN when a gradient holds inf or NaN. A finite float32 gradient whose
    squares overflow float32 (entries above ~1.8e19) still gets its true, finite
    norm: that parameter's sum is redone in float64 (so clipping can scale it).
    """
    total = 0.0
    for p in params:
        xp = backend.get_array_module(p.grad)
        g = p.grad.reshape(-1)
        # vdot(g, g) = sum(g*g) without materializing g*g; accumulated in float64 as an
        # array scalar, not float(): on a GPU every float() waits for the device, and this
        # would wait once per parameter.
        total += xp.vdot(g, g).astype(xp.float64)
    total = float(total)                              # the one wait for the device
    if total == math.inf:
        # Rare: a real inf, or a float32 sum of squares that overflowed (entries above
        # ~1.8e19). Redo each sum in float64: a finite gradient then gets its finite norm.
        total = 0.0
        for p in params:
            xp = backend.get_array_module(p.grad)
            g64 = p.grad.reshape(-1).astype(xp.float64)
            total += float(xp.vdot(g64, g64))
    return math.sqrt(total)


def clip_grad_norm(params: Sequence[Parameter], max_norm: float, norm: float | None = None) -> float:
    """Scale all gradients together so their global L2 norm is at most ``max_norm``.

    Returns the norm *before* clipping (worth logging: a norm that keeps
    hitting the limit means the learning rate is too high). Scaling all
    gradients by one factor keeps the update's direction; clipping each
    separately would not. A non-finite norm (inf or NaN) is returned as is and
    the gradients are left alone: scaling cannot repair them, and the caller
    should skip the step. ``norm``: the global norm if already measured.
    """
    if not (isinstance(max_norm, int | float) and max_norm > 0):
        raise ValueError(f"clip_grad_norm: max_norm must be a positive number, got {max_norm!r}")
    if norm is None:
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

    Non-finite gradients (the policy). One NaN would spread to every parameter
    it touches, and one float32 gradient above ~1.8e19 squares to inf in v, after
    which that parameter's update is 0 forever: silent damage either way. So
    before updating, ``step()`` measures the global gradient norm (the pass
    clipping needs anyway). If a gradient is NaN or inf, or (without clipping)
    too large to square in its dtype, the step is *skipped*: no parameter, no
    moment and no step count changes, ``step()`` returns False, the skip is
    counted (``skipped_steps``, ``consecutive_skips``), described in
    ``last_skip`` (naming the tensor), and reported through ``on_skip(message)``
    (default: a ``NonFiniteGradientWarning``). After ``max_consecutive_skips``
    skips in a row (default 5; None: never) it raises NonFiniteGradientError
    instead: the run has diverged and skipping will not save it.
    """

    def __init__(
        self,
        params: Sequence[Parameter],
        lr: float | Callable[[int], float],
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9,
        clip_norm: float | None = None,
        max_consecutive_skips: int | None = 5,
        on_skip: Callable[[str], None] | None = None,
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
        if max_consecutive_skips is not None and (isinstance(max_consecutive_skips, bool)
                                                  or not isinstance(max_consecutive_skips, int)
                                                  or max_consecutive_skips < 1):
            raise ValueError(f"Adam: max_consecutive_skips must be an integer ≥ 1 or None, "
                             f"got {max_consecutive_skips!r}")

        self.params = params
        self.schedule = schedule
        # Python floats, not NumPy scalars: see the module docstring on dtypes.
        self.betas = (float(beta1), float(beta2))
        self.eps = float(eps)
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        self.step_count = 0
        self.last_lr: float | None = None
        self.last_grad_norm: float | None = None
        # The non-finite policy (see the class docstring).
        self.max_consecutive_skips = max_consecutive_skips
        self.on_skip = on_skip
        self.skipped_steps = 0            # updates skipped in all
        self.consecutive_skips = 0        # ... since the last update that was applied
        self.last_skip: str | None = None
        # One m and one v per parameter, same shape, dtype and device.
        self.m = [backend.get_array_module(p.data).zeros_like(p.data) for p in params]
        self.v = [backend.get_array_module(p.data).zeros_like(p.data) for p in params]

    def zero_grad(self) -> None:
        """Set every gradient to 0 (backward passes add into them)."""
        # A write of every gradient (250 MB at the base size): in blocks, spread over the CPU threads.
        xp = backend.get_array_module(self.params[0].grad)
        blocks = [g for p in self.params for (g,) in _blocks(p.grad)]
        backend.run_in_threads(_fill_zero, blocks, xp)

    # -- the non-finite policy --------------------------------------------------------
    def _gradient_problem(self) -> tuple[float, str | None]:
        """(global gradient norm, None) when the update is safe to apply, else (norm, what is wrong)."""
        norm = global_grad_norm(self.params)
        if math.isfinite(norm):
            if self.clip_norm is not None:
                return norm, None                    # clipping brings every entry into range
            # Without clipping, an entry g with g² beyond its dtype's range makes v = inf.
            # The norm bounds every entry, so only a norm that large needs a closer look.
            for p in self.params:
                xp = backend.get_array_module(p.grad)
                big = math.sqrt(float(xp.finfo(p.grad.dtype).max))
                if norm <= big or not p.grad.size:
                    continue
                largest = float(xp.abs(p.grad).max())
                if largest > big:
                    return norm, (f"the gradient of {p.name!r} has entries up to {largest:.3g}, "
                                  f"whose square overflows {p.grad.dtype} in Adam's second moment v")
            return norm, None
        for p in self.params:                       # rare: find the tensor to name
            xp = backend.get_array_module(p.grad)
            if not bool(xp.isfinite(p.grad).all()):
                kind = "NaN" if bool(xp.isnan(p.grad).any()) else "inf"
                return norm, f"the gradient of {p.name!r} contains {kind}"
        return norm, f"the global gradient norm is {norm}"

    def _skip(self, problem: str, norm: float) -> None:
        """Count a skipped update, report it, and stop after too many in a row."""
        self.skipped_steps += 1
        self.consecutive_skips += 1
        self.last_skip = problem
        self.last_grad_norm = norm
        message = (f"Adam: skipped update {self.step_count + 1}: {problem}; parameters and moments unchanged "
                   f"({self.consecutive_skips} skipped in a row, {self.skipped_steps} in all)")
        if self.max_consecutive_skips is not None and self.consecutive_skips >= self.max_consecutive_skips:
            raise NonFiniteGradientError(
                f"{message}; stopping after {self.consecutive_skips} consecutive skips: the run has diverged "
                "(try a smaller learning rate, or clipping)"
            )
        if self.on_skip is not None:
            self.on_skip(message)
        else:
            warnings.warn(message, NonFiniteGradientWarning, stacklevel=3)

    def step(self) -> bool:
        """One update of every parameter from its current ``grad``.

        Returns True, or False when the update was skipped because of a
        non-finite gradient (the policy in the class docstring).
        """
        grad_norm, problem = self._gradient_problem()
        if problem is not None:
            self._skip(problem, grad_norm)
            return False
        self.consecutive_skips = 0
        self.step_count += 1  # once per call, however many parameters: the schedule's clock
        t = self.step_count
        lr = float(self.schedule(t))
        self.last_lr = lr

        # The norm was measured above (the non-finite check needs it); it is logged, and
        # the gradients are clipped to clip_norm if asked.
        self.last_grad_norm = grad_norm
        if self.clip_norm is not None:
            clip_grad_norm(self.params, self.clip_norm, norm=grad_norm)

        beta1, beta2 = self.betas
        # The bias corrections are the same for every parameter: compute once.
        correction1 = 1.0 - beta1**t
        sqrt_correction2 = math.sqrt(1.0 - beta2**t)
        # p -= lr · m_hat / (sqrt(v_hat) + eps), with m_hat = m / correction1 and
        # sqrt(v_hat) = sqrt(v) / sqrt_correction2, is the same as
        # p -= step_size · m / (sqrt(v) + eps_hat) with:
        step_size = lr * sqrt_correction2 / correction1
        eps_hat = self.eps * sqrt_correction2

        def update(blocks) -> None:
            """Adam on a list of (p, grad, m, v) blocks, in place."""
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
                buf *= 1.0 - beta2
                v += buf
                # p -= step_size * m / (sqrt(v) + eps_hat)
                xp.sqrt(v, out=buf)
                buf += eps_hat
                xp.divide(m, buf, out=buf)
                buf *= step_size
                p -= buf

        # Block by block (see ADAM_BLOCK): the ~12 passes of the update then run on data in
        # cache instead of streaming every parameter through memory each time. The blocks
        # are independent, so they are also spread over the CPU threads.
        blocks = [b for p, m, v in zip(self.params, self.m, self.v) for b in _blocks(p.data, p.grad, m, v)]
        backend.run_in_threads(update, blocks, backend.get_array_module(self.params[0].data))
        return True

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
