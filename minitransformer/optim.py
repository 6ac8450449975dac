"""The optimizer of §5.3: Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9, and a
learning rate that warms up linearly and then decays as 1/sqrt(step) (the default of the
schedules a run chooses by name, ``SCHEDULES``).

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

import functools
import math
import operator
from collections.abc import Callable, Sequence

from . import backend, threads
from .errors import NonFiniteError
from .layers import fast
from .layers.parameter import Parameter


class NonFiniteGradientError(NonFiniteError):
    """Training stopped: too many updates in a row were skipped for non-finite gradients.

    Adam itself only skips (``step()`` returns False); the caller that counts the
    skips (``train.Trainer``) raises this when there have been too many in a row.
    """


# -- learning-rate schedules: chosen by name (TrainSettings.schedule, train --schedule) ---------------

def _positive_int(owner: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")
    return value


def _step(owner: str, step) -> int:
    """``step`` as an int ≥ 1 (an int or a NumPy integer; 1.5 and True are refused)."""
    if isinstance(step, bool):
        raise ValueError(f"{owner}: step must be an integer, got {step!r}")
    try:
        step = operator.index(step)
    except TypeError:
        raise ValueError(f"{owner}: step must be an integer, got {type(step).__name__}: {step!r}") from None
    if step < 1:
        # step^-0.5 is undefined at 0: steps are counted from 1.
        raise ValueError(f"{owner}: step must be >= 1 (steps count from 1), got {step}")
    return step


class NoamSchedule:
    """lr(step) = factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (§5.3).

    The two terms are equal at step == warmup_steps, where the rate peaks at
    factor * (d_model * warmup_steps)^-0.5: linear growth before, 1/sqrt(step)
    decay after. (Named after Noam Shazeer, who proposed it.)
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, factor: float = 1.0):
        self.d_model = _positive_int("NoamSchedule", "d_model", d_model)
        self.warmup_steps = _positive_int("NoamSchedule", "warmup_steps", warmup_steps)
        if not (isinstance(factor, int | float) and math.isfinite(factor) and factor > 0):
            raise ValueError(f"NoamSchedule: factor must be a positive number, got {factor!r}")
        self.factor = float(factor)

    @classmethod
    def from_settings(cls, d_model: int, settings) -> NoamSchedule:
        """The schedule of a run's TrainSettings: its warmup_steps and lr_factor."""
        return cls(d_model, settings.warmup_steps, settings.lr_factor)

    def __call__(self, step: int) -> float:
        step = _step("NoamSchedule", step)
        return self.factor * self.d_model ** -0.5 * min(step ** -0.5, step * self.warmup_steps ** -1.5)

    @property
    def peak_lr(self) -> float:
        """The largest rate, reached at step == warmup_steps."""
        return self(self.warmup_steps)

    def __repr__(self) -> str:
        return f"NoamSchedule(d_model={self.d_model}, warmup_steps={self.warmup_steps}, factor={self.factor})"


class CosineSchedule:
    """Linear warm-up to the §5.3 peak, then a cosine decay to zero at the run's last step.

        lr(step) = peak · step / warmup_steps                                   step ≤ warmup_steps
                 = peak · ½ (1 + cos(π · (step − warmup_steps) / (total_steps − warmup_steps)))
                                                                                warmup_steps < step
        peak = factor · (d_model · warmup_steps)^-0.5

    The peak is NoamSchedule's, so ``lr_factor`` and ``warmup_steps`` mean the same under either;
    after it the rate falls smoothly to 0 at ``total_steps`` (the run's ``steps``) instead of
    as 1/√step (Loshchilov & Hutter's cosine annealing, with a warm-up). A step past
    ``total_steps`` (a run resumed with more steps keeps its first length) has rate 0.
    """

    def __init__(self, d_model: int, warmup_steps: int, factor: float, total_steps: int):
        self.d_model = _positive_int("CosineSchedule", "d_model", d_model)
        self.warmup_steps = _positive_int("CosineSchedule", "warmup_steps", warmup_steps)
        self.total_steps = _positive_int("CosineSchedule", "total_steps", total_steps)
        if not (isinstance(factor, int | float) and math.isfinite(factor) and factor > 0):
            raise ValueError(f"CosineSchedule: factor must be a positive number, got {factor!r}")
        self.factor = float(factor)
        self.peak_lr = self.factor * (self.d_model * self.warmup_steps) ** -0.5

    @classmethod
    def from_settings(cls, d_model: int, settings) -> CosineSchedule:
        """The schedule of a run's TrainSettings: warmup_steps, lr_factor, and its steps as the length."""
        return cls(d_model, settings.warmup_steps, settings.lr_factor, settings.steps)

    def __call__(self, step: int) -> float:
        step = _step("CosineSchedule", step)
        if step <= self.warmup_steps:
            return self.peak_lr * step / self.warmup_steps
        done = min(1.0, (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps))
        return self.peak_lr * 0.5 * (1.0 + math.cos(math.pi * done))

    def __repr__(self) -> str:
        return (f"CosineSchedule(d_model={self.d_model}, warmup_steps={self.warmup_steps}, factor={self.factor}, "
                f"total_steps={self.total_steps})")


# The schedules a run can name (TrainSettings.schedule; train --schedule NAME): each a class whose
# from_settings(d_model, settings) makes the callable step -> lr that Adam reads once per step.
# A new schedule is a class here and its name in this table.
SCHEDULES = {"noam": NoamSchedule, "cosine": CosineSchedule}


def schedule_for(d_model: int, settings):
    """The learning-rate schedule ``settings.schedule`` names, for a model of width ``d_model``."""
    return SCHEDULES[settings.schedule].from_settings(d_model, settings)


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


class _Constant:
    """A learning rate that does not depend on the step (a plain float given as lr)."""

    def __init__(self, lr: float):
        self.lr = lr

    def __call__(self, step: int) -> float:
        return self.lr

    def __repr__(self) -> str:
        return repr(self.lr)


def _skips_nonfinite_gradients(step):
    """Adam.step's non-finite policy (the class docstring), run before the update starts.

    Measures the global gradient norm; if a gradient is NaN or inf (or too large to
    square), records why in ``last_skip`` and returns False without calling the update;
    otherwise clips (with ``clip_norm``) and runs it. With pdb, `s` on
    ``optimizer.step()`` stops here first: `n` runs the policy, `s` on the last line
    steps into the update itself.
    """
    @functools.wraps(step)
    def checked(self) -> bool:
        threads.check()          # the BLAS thread policy, once per step: a hand-written training loop gets it too
        self.last_grad_norm, self.last_skip = self._gradient_problem()   # the policy: `n` steps over it
        if self.last_skip is not None:
            return False
        if self.clip_norm is not None:
            clip_grad_norm(self.params, self.clip_norm, norm=self.last_grad_norm)
        return step(self)                                                 # the update: `s` steps in
    return checked


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
    too large to square in its dtype, the update is *skipped*: no parameter, no
    moment and no step count changes, ``step()`` returns False and ``last_skip``
    says what was wrong, naming the tensor. Counting skips, warning and deciding
    when a run has diverged are the caller's (``train.Trainer`` does all three).
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
        self.last_skip: str | None = None     # what was wrong when step() last returned False
        # One m and one v per parameter, same shape, dtype and device.
        self.m = [backend.get_array_module(p.data).zeros_like(p.data) for p in params]
        self.v = [backend.get_array_module(p.data).zeros_like(p.data) for p in params]

    def zero_grad(self) -> None:
        """Set every gradient to 0 (backward passes add into them)."""
        for p in self.params:
            p.zero_grad()

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

    @_skips_nonfinite_gradients
    def step(self) -> bool:
        """One update of every parameter from its current ``grad``: the five lines of the
        class docstring, for each parameter, on whole arrays.

        Returns True, or False when the update was skipped because of a non-finite
        gradient (the policy in the class docstring, run by the wrapper before this
        method starts; ``last_skip`` says why).
        """
        self.step_count += 1                           # t = t + 1: once per call, however many parameters
        t = self.step_count
        lr = self.last_lr = float(self.schedule(t))    # lr(t), the schedule's rate for step t
        beta1, beta2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v):
            g = p.grad
            if p.data.size >= fast.ADAM_MIN and backend.on_cpu(p.data):
                # A large parameter on a CPU: the same update, block by block (layers/fast.py says why)
                fast.adam_update_in_blocks(p.data, g, m, v, lr, beta1, beta2, self.eps, t)
                continue
            xp = backend.get_array_module(p.data)
            # m and v are this optimizer's state: updated in place, so each name keeps its array
            m *= beta1
            m += (1.0 - beta1) * g                     # m = beta1 * m + (1 - beta1) * g
            v *= beta2
            v += (1.0 - beta2) * (g * g)               # v = beta2 * v + (1 - beta2) * g**2
            m_hat = m / (1.0 - beta1**t)               # bias corrections: m and v start at 0
            v_hat = v / (1.0 - beta2**t)
            p.data -= lr * m_hat / (xp.sqrt(v_hat) + self.eps)
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
