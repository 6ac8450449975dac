"""Layer normalization (Ba et al., 2016), applied after every residual sum (§3.1).

    mu = mean(x),  var = mean((x - mu)^2)     (biased: divide by d_model, not d_model - 1)
    x_hat = (x - mu) / sqrt(var + eps)         (eps *inside* the square root)
    y = gamma ⊙ x_hat + beta

All statistics are over the last axis (the d_model features of one position).
A mean is the sum over that axis divided by d_model, the sum written ``xp.add.reduce``:
exactly what ``.sum()`` and ``.mean()`` compute, without their Python wrappers in NumPy
(a learner stepping through with pdb would walk through NumPy's own code, and decoding,
which runs LayerNorm on one position at a time, would pay ~10 us a call for them).
"""

from __future__ import annotations

from typing import NamedTuple

from .. import backend
from ..backend import Array
from ..errors import check_input
from .parameter import Layer, Parameter, checked_backward, checked_forward


class LayerNormCache(NamedTuple):
    x_hat: object   # (..., d_model) the normalized input
    rstd: object    # (..., 1) 1 / sqrt(var + eps)
    gamma: object   # (d_model,)


def layernorm_forward(x: Array, gamma: Array, beta: Array, eps: float) -> tuple[Array, LayerNormCache]:
    """x: (..., d_model), gamma, beta: (d_model,) -> y: (..., d_model), cache.

    The formulas of the module docstring, one line each, on whole arrays.
    """
    xp = backend.get_array_module(x)
    n = x.shape[-1]                                          # d_model
    mu = xp.add.reduce(x, axis=-1, keepdims=True) / n        # (..., 1)  mean(x): the sum over d_model, / n
    xc = x - mu                                              # (..., d_model)  x - mu
    var = xp.add.reduce(xc * xc, axis=-1, keepdims=True) / n     # (..., 1)  mean((x - mu)^2): biased
    rstd = 1.0 / xp.sqrt(var + eps)                  # (..., 1)  eps inside the square root
    x_hat = xc * rstd                                # (..., d_model)
    y = gamma * x_hat + beta                         # (..., d_model)
    return y, LayerNormCache(x_hat, rstd, gamma)


def layernorm_backward(dy: Array, cache: LayerNormCache) -> tuple[Array, Array, Array]:
    """The gradients of y = gamma ⊙ x_hat + beta, given dy = dL/dy: (..., d_model).

    With g = dy ⊙ gamma (the gradient reaching x_hat), differentiating through
    the mean and the variance gives (n = d_model):
        dx = rstd · (g - mean(g) - x_hat ⊙ mean(g ⊙ x_hat))
    The two subtracted means are what normalizing removes: a shift of all
    features, and a stretch along x_hat. docs/derivations.md has the steps.

    Returns:
        dx: (..., d_model), dgamma: (d_model,), dbeta: (d_model,)
    """
    x_hat, rstd, gamma = cache
    xp = backend.get_array_module(dy)
    n = x_hat.shape[-1]                                                # d_model
    g = dy * gamma                                                     # (..., d_model)  dL/dx_hat
    mean_g = xp.add.reduce(g, axis=-1, keepdims=True) / n              # (..., 1)  mean(g)
    mean_g_xhat = xp.add.reduce(g * x_hat, axis=-1, keepdims=True) / n     # (..., 1)  mean(g ⊙ x_hat)
    dx = rstd * (g - mean_g - x_hat * mean_g_xhat)                     # (..., d_model)
    # gamma and beta act on every position: their gradients sum over all of them
    dgamma = xp.add.reduce((dy * x_hat).reshape(-1, n), axis=0)        # (d_model,)
    dbeta = xp.add.reduce(dy.reshape(-1, n), axis=0)                   # (d_model,)
    return dx, dgamma, dbeta


class LayerNorm(Layer):
    """Learnable gain gamma (init 1) and bias beta (init 0), both (d_model,)."""

    def __init__(self, d_model: int, eps: float = 1e-5, name: str = "norm"):
        super().__init__()
        xp, dtype = backend.xp_default(), backend.default_dtype()
        self.d_model, self.eps = d_model, eps
        self.gamma = Parameter(xp.ones(d_model, dtype=dtype), f"{name}.gamma")
        self.beta = Parameter(xp.zeros(d_model, dtype=dtype), f"{name}.beta")
        self._name = name

    def _check_input(self, x):
        check_input(f"LayerNorm {self._name!r}", "x", x, self.d_model, self.gamma.data.dtype)

    @checked_forward(_check_input)
    def forward(self, x: Array) -> Array:
        """x: (..., d_model) -> (..., d_model)."""
        y, self._cache = layernorm_forward(x, self.gamma.data, self.beta.data, self.eps)
        return y

    @checked_backward
    def backward(self, dy: Array) -> Array:
        """dy: (..., d_model) -> dx: (..., d_model); adds into gamma.grad and beta.grad."""
        dx, dgamma, dbeta = layernorm_backward(dy, self._cache)
        self.gamma.grad += dgamma
        self.beta.grad += dbeta
        return dx
