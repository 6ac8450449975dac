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
    x2 = x.reshape(-1, d)                            # (n, d_model): one row per position
    y, x_hat = xp.empty_like(x2), xp.empty_like(x2)
    rstd = xp.empty((x2.shape[0], 1), dtype=x.dtype)

    def rows(r):                                     # the formulas above, for the rows r
        mu = backend.rowsum(x2[r]) / d               # mean(x), one BLAS call for all rows
        xc = xp.subtract(x2[r], mu, out=x_hat[r])    # x - mu, written where x_hat goes
        var = backend.rowdot(xc, xc) / d             # mean((x - mu)^2), without a (..., d) temporary
        rstd[r] = 1.0 / xp.sqrt(var + eps)
        xc *= rstd[r]                                # now x_hat, in place
        xp.multiply(xc, gamma, out=y[r])
        y[r] += beta                                 # in place: one array for y, not two

    # Blocks of rows (see backend.for_row_blocks), spread over the CPU cores; each row is
    # computed as it would be alone, so the results do not depend on the blocks.
    backend.for_row_blocks(rows, *x2.shape, xp=xp)
    return y.reshape(x.shape), LayerNormCache(x_hat.reshape(x.shape), rstd.reshape(x.shape[:-1] + (1,)), gamma)


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
    d = x_hat.shape[-1]
    dy2, x_hat2, rstd2 = dy.reshape(-1, d), x_hat.reshape(-1, d), rstd.reshape(-1, 1)
    dx = xp.empty_like(dy2)

    def rows(r):                                     # the formula above, for the rows r
        dy_r, x_hat_r = dy2[r], x_hat2[r]
        g = dy_r * gamma
        mean_g = backend.rowsum(g) / d               # mean(g), one BLAS call for all rows
        mean_g_xhat = backend.rowdot(g, x_hat_r) / d     # mean(g ⊙ x_hat) without a (..., d) temporary
        # dx = rstd · (g - mean(g) - x_hat ⊙ mean(g ⊙ x_hat)), built in one buffer (in-place ops)
        dx_r = xp.multiply(x_hat_r, mean_g_xhat, out=dx[r])
        dx_r -= g
        dx_r += mean_g
        dx_r *= -rstd2[r]
        # this block's share of dgamma and dbeta (sums over every position)
        dy_xhat = xp.multiply(dy_r, x_hat_r, out=g)  # dy ⊙ x_hat, in g's buffer (g is done)
        return dy_xhat.sum(axis=0), dy_r.sum(axis=0)

    # Blocks of rows on all CPU cores (see backend.for_row_blocks); the blocks' partial
    # sums are added in block order, the same on any number of threads.
    parts = backend.for_row_blocks(rows, *dy2.shape, xp=xp)
    dgamma = parts[0][0] if len(parts) == 1 else sum(p[0] for p in parts)
    dbeta = parts[0][1] if len(parts) == 1 else sum(p[1] for p in parts)
    return dx.reshape(dy.shape), dgamma, dbeta


def layernorm_reference(x: Array, gamma: Array, beta: Array, eps: float, dy: Array | None = None):
    """The formulas above on whole arrays, plainly: y (and, given dy, dx, dgamma, dbeta).

    ``layernorm_forward`` and ``layernorm_backward`` compute the same numbers block by
    block; tests/test_perf_helpers.py compares them with this.
    """
    d = x.shape[-1]
    mu = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / (((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps) ** 0.5    # biased variance, eps inside
    x_hat = (x - mu) * rstd
    y = gamma * x_hat + beta
    if dy is None:
        return y
    g = dy * gamma
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - x_hat * (g * x_hat).mean(axis=-1, keepdims=True))
    return y, dx, (dy * x_hat).reshape(-1, d).sum(axis=0), dy.reshape(-1, d).sum(axis=0)


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
