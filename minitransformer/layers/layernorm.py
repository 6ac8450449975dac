"""Layer normalization (Ba et al., 2016), applied after every residual sum (§3.1).

    mu = mean(x),  var = mean((x - mu)^2)     (biased: divide by d_model, not d_model - 1)
    x_hat = (x - mu) / sqrt(var + eps)         (eps *inside* the square root)
    y = gamma ⊙ x_hat + beta

All statistics are over the last axis (the d_model features of one position).
"""

from __future__ import annotations

from typing import NamedTuple

from .. import backend
from ..backend import Array
from ..errors import check_input
from .parameter import Layer, Parameter


class LayerNormCache(NamedTuple):
    x_hat: object   # (..., d_model) the normalized input
    rstd: object    # (..., 1) 1 / sqrt(var + eps)
    gamma: object   # (d_model,)


def layernorm_forward(x: Array, gamma: Array, beta: Array, eps: float) -> tuple[Array, LayerNormCache]:
    """x: (..., d_model), gamma, beta: (d_model,) -> y: (..., d_model), cache."""
    xp = backend.get_array_module(x)
    d = x.shape[-1]
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = backend.rowdot(xc, xc) / d                 # mean((x - mu)^2), without a (..., d) temporary
    rstd = 1.0 / xp.sqrt(var + eps)
    x_hat = xc                                       # normalize in place: xc is not needed again
    x_hat *= rstd
    y = x_hat * gamma
    y += beta                                        # in place: one new array for y, not two
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
    d = x_hat.shape[-1]
    dgamma = (dy * x_hat).reshape(-1, d).sum(axis=0)
    dbeta = dy.reshape(-1, d).sum(axis=0)
    g = dy * gamma
    mean_g = g.mean(axis=-1, keepdims=True)
    mean_g_xhat = backend.rowdot(g, x_hat) / d       # mean(g ⊙ x_hat) without a (..., d) temporary
    # dx = rstd · (g - mean(g) - x_hat ⊙ mean(g ⊙ x_hat)), built in one buffer (in-place ops)
    dx = x_hat * mean_g_xhat
    dx -= g
    dx += mean_g
    dx *= -rstd
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

    def forward(self, x: Array) -> Array:
        """x: (..., d_model) -> (..., d_model)."""
        check_input(f"LayerNorm {self._name!r}", "x", x, self.d_model, self.gamma.data.dtype)
        y, cache = layernorm_forward(x, self.gamma.data, self.beta.data, self.eps)
        self._save_cache(cache, y)
        return y

    def backward(self, dy: Array) -> Array:
        """dy: (..., d_model) -> dx: (..., d_model); adds into gamma.grad and beta.grad."""
        cache = self._pop_cache(dy, "dy")
        dx, dgamma, dbeta = layernorm_backward(dy, cache)
        self.gamma.grad += dgamma
        self.beta.grad += dbeta
        return dx
