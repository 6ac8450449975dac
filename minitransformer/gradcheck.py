"""A small numerical gradient checker: is my hand-written backward right?

For a scalar function f and an array x, the central difference

    df/dx_i  ≈  (f(x + h·e_i) - f(x - h·e_i)) / (2h)

has error O(h²). In float64 with h = 1e-5 it agrees with a correct analytic
gradient to about 1e-9 relative, and with a wrong one hardly at all.

Typical use (a lesson does exactly this):

    layer = Linear(4, 3, rng)          # built with float64 parameters
    x = rng.standard_normal((2, 5, 4))
    report = check_layer(layer, x)     # random upstream gradient, every input and parameter
    print(report)                      # one line per tensor with its max relative error
    report.assert_ok()                 # raises naming the tensor that failed

Relative error of a tensor = max_i |analytic_i - numeric_i| / max_i max(|analytic_i|, |numeric_i|):
the largest disagreement, measured against the size of the gradient itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import backend

DEFAULT_TOL = 1e-6


def rel_error(analytic, numeric) -> float:
    """max |a - n| / max(|a|, |n|) over the tensor (0 when both are all zero)."""
    xp = backend.get_array_module(analytic, numeric)
    diff = float(xp.max(xp.abs(analytic - numeric))) if analytic.size else 0.0
    scale = max(float(xp.max(xp.abs(analytic))), float(xp.max(xp.abs(numeric)))) if analytic.size else 0.0
    return 0.0 if diff == 0.0 else diff / max(scale, 1e-300)


def numerical_gradient(f, x, h: float = 1e-5):
    """Central differences of the scalar f() with respect to every entry of x.

    x is perturbed *in place* (and restored), so f must read x itself.
    """
    if x.dtype.name != "float64":
        raise TypeError(f"numerical_gradient needs float64 arrays (got {x.dtype}); float32 is too coarse")
    xp = backend.get_array_module(x)
    grad = xp.zeros_like(x)
    if not x.flags.c_contiguous:
        raise ValueError("numerical_gradient: x must be C-contiguous, so that reshape(-1) is a view")
    flat, gflat = x.reshape(-1), grad.reshape(-1)    # views into x and grad
    for i in range(flat.size):
        old = float(flat[i])
        flat[i] = old + h
        f_plus = float(f())
        flat[i] = old - h
        f_minus = float(f())
        flat[i] = old
        gflat[i] = (f_plus - f_minus) / (2 * h)
    return grad


@dataclass
class GradcheckReport:
    """Max relative error per named tensor, and the tolerance it is judged by."""

    errors: dict[str, float] = field(default_factory=dict)
    tol: float = DEFAULT_TOL

    @property
    def ok(self) -> bool:
        return all(e <= self.tol for e in self.errors.values())

    @property
    def max_error(self) -> float:
        return max(self.errors.values(), default=0.0)

    def __str__(self) -> str:
        width = max((len(n) for n in self.errors), default=4)
        lines = [f"{'tensor':<{width}}  max rel error   (tol {self.tol:.0e})"]
        for name, err in self.errors.items():
            lines.append(f"{name:<{width}}  {err:.3e}   {'ok' if err <= self.tol else 'FAIL'}")
        return "\n".join(lines)

    def assert_ok(self) -> None:
        bad = {n: e for n, e in self.errors.items() if e > self.tol}
        if bad:
            worst = ", ".join(f"{n!r}: {e:.3e}" for n, e in bad.items())
            raise AssertionError(f"gradient check failed (tol {self.tol:.0e}) for {worst}\n{self}")


def gradcheck(f, wrt: dict, analytic: dict, h: float = 1e-5, tol: float = DEFAULT_TOL) -> GradcheckReport:
    """Compare analytic gradients with central differences of the scalar f().

    wrt:      name -> float64 array that f reads (perturbed in place)
    analytic: name -> your backward's gradient for that array
    """
    report = GradcheckReport(tol=tol)
    for name, x in wrt.items():
        if name not in analytic or analytic[name] is None:
            raise KeyError(f"gradcheck: no analytic gradient given for {name!r}")
        if analytic[name].shape != x.shape:
            raise ValueError(
                f"gradcheck: analytic gradient for {name!r} has shape {tuple(analytic[name].shape)}, "
                f"the array has {tuple(x.shape)}"
            )
        report.errors[name] = rel_error(analytic[name], numerical_gradient(f, x, h))
    return report


def check_layer(layer, *inputs, names=None, seed: int = 0, before_forward=None,
                h: float = 1e-5, tol: float = DEFAULT_TOL) -> GradcheckReport:
    """Gradient-check a Layer for every float input and every parameter.

    The checked scalar is L = Σ forward(*inputs) ⊙ G with a fixed random G, so
    dL/d(output) = G is what backward receives. ``before_forward`` is called
    before every forward (for example to re-seed dropout so every call draws
    the same mask). Layer.backward must return the input gradient (or a tuple
    of them, one per input; None for integer inputs such as token ids).
    """
    xp = backend.get_array_module(*inputs)
    names = names or [f"input{i}" if len(inputs) > 1 else "x" for i in range(len(inputs))]

    def run_forward():
        if before_forward is not None:
            before_forward()
        return layer.forward(*inputs)

    out = run_forward()
    G = xp.asarray(backend.seeded_rng(seed, xp).standard_normal(out.shape), dtype=out.dtype)
    layer.zero_grad()
    dinputs = layer.backward(G)
    if not isinstance(dinputs, tuple):
        dinputs = (dinputs,)

    wrt, analytic = {}, {}
    for name, x, dx in zip(names, inputs, dinputs):
        if getattr(x, "dtype", None) is not None and x.dtype.kind == "f":
            wrt[name], analytic[name] = x, dx
    for name, p in layer.named_parameters():
        wrt[name], analytic[name] = p.data, p.grad.copy()

    def f():
        return (run_forward() * G).sum()

    return gradcheck(f, wrt, analytic, h, tol)
