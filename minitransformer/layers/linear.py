"""Linear layer: y = x W + b (or y = x W, without a bias).

Used for the two layers of the feed-forward network (§3.3, Eq. 2). W is stored
(d_in, d_out), so the forward reads exactly like the paper's xW + b.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .. import backend
from ..backend import Array
from ..errors import check_input
from .parameter import Layer, Parameter, checked_backward, checked_forward


class LinearCache(NamedTuple):
    x: object  # (..., d_in) the input, needed for dW
    W: object  # (d_in, d_out) the weight, needed for dx


def linear_forward(x: Array, W: Array, b: Array | None) -> tuple[Array, LinearCache]:
    """x: (..., d_in), W: (d_in, d_out), b: (d_out,) or None -> y: (..., d_out), cache."""
    rows = x.reshape(-1, W.shape[0])               # (B·S, d_in): one product for every position at once
    y = backend.matmul(rows, W).reshape(*x.shape[:-1], W.shape[1])     # x W: (..., d_out)
    if b is not None:
        y += b                                     # + b in place: no second (..., d_out) array
    return y, LinearCache(x, W)


def linear_backward(dy: Array, cache: LinearCache) -> tuple[Array, Array, Array]:
    """The gradients of y = x W + b, given dy = dL/dy: (..., d_out).

    Forward was y = x W + b, so dL/dx = dy W^T, dL/dW = x^T dy summed over
    every leading (batch, position) index, and dL/db = dy summed the same way.

    Returns:
        dx: (..., d_in), dW: (d_in, d_out), db: (d_out,)
    """
    x, W = cache
    d_in, d_out = W.shape
    x2 = x.reshape(-1, d_in)      # (B·S, d_in): fold batch and position into one axis
    dy2 = dy.reshape(-1, d_out)   # (B·S, d_out)
    dx = backend.matmul(dy2, W.T).reshape(x.shape)    # (..., d_in); W.T is a view: BLAS reads W transposed
    dW = backend.matmul(x2.T, dy2)  # (d_in, d_out)
    db = dy2.sum(axis=0)          # (d_out,)
    return dx, dW, db


def init_weight(d_in: int, d_out: int, rng, xp=None, dtype=None):
    """Glorot/Xavier uniform init (as PyTorch's nn.Transformer uses): keeps the
    variance of activations roughly constant from layer to layer."""
    xp = xp or backend.xp_default()
    dtype = dtype or backend.default_dtype()
    limit = math.sqrt(6.0 / (d_in + d_out))
    return xp.asarray(rng.uniform(-limit, limit, size=(d_in, d_out)), dtype=dtype)


def linear_parameter_count(d_in: int, d_out: int, bias: bool = True) -> int:
    """The learnable scalars of ``Linear(d_in, d_out, bias=bias)``: W, and b if it has one."""
    return d_in * d_out + (d_out if bias else 0)


class Linear(Layer):
    """y = x W + b with W: (d_in, d_out), b: (d_out,); ``bias=False``: y = x W, and no b at all."""

    def __init__(self, d_in: int, d_out: int, rng, name: str = "linear", bias: bool = True):
        super().__init__()
        xp, dtype = backend.xp_default(), backend.default_dtype()
        self.d_in, self.d_out = d_in, d_out
        self.W = Parameter(init_weight(d_in, d_out, rng, xp, dtype), f"{name}.W")
        self.b = Parameter(xp.zeros(d_out, dtype=dtype), f"{name}.b") if bias else None
        self._name = name

    def _check_input(self, x):
        check_input(f"Linear {self._name!r}", "x", x, self.d_in, self.W.data.dtype, "d_in")

    @checked_forward(_check_input)
    def forward(self, x: Array) -> Array:
        """x: (..., d_in) -> (..., d_out)."""
        y, self._cache = linear_forward(x, self.W.data, None if self.b is None else self.b.data)
        return y

    @checked_backward
    def backward(self, dy: Array) -> Array:
        """dy: (..., d_out) -> dx: (..., d_in); adds into W.grad (and b.grad)."""
        dx, dW, db = linear_backward(dy, self._cache)
        self.W.grad += dW
        if self.b is not None:
            self.b.grad += db
        return dx
