"""Dropout (Srivastava et al., 2014), as the paper applies it (§5.4, "Residual Dropout").

The paper drops out each sub-layer's output before the residual sum, and the
sum of embeddings and positional encodings, with rate P_drop = 0.1. Each place
is its own ``Dropout`` object, so each draws its own independent mask.

Inverted dropout: kept units are scaled by 1/(1 - P_drop) during training, so
nothing needs rescaling at evaluation time, when dropout is the identity.
"""

from __future__ import annotations

from .. import backend
from ..backend import Array
from ..errors import ShapeError, check_input
from .parameter import Layer, checked_backward, checked_forward


def dropout_mask(shape, P_drop: float, rng, dtype):
    """A mask of 0 and 1/(1-P_drop), each unit kept with probability 1 - P_drop."""
    u = rng.random(shape, dtype=dtype)               # uniform in [0, 1)
    xp = backend.get_array_module(u)
    # keep = (u >= P_drop) as 0/1, then times 1/(1-P_drop), both written over u: the comparison's
    # True/False lands in u as 1.0/0.0 (a safe cast), so no boolean array is built at all
    xp.greater_equal(u, P_drop, out=u)
    u *= 1.0 / (1.0 - P_drop)
    return u


class Dropout(Layer):
    """x: any shape -> x ⊙ mask (training) or x (eval, or P_drop = 0).

    ``rng`` is a random generator (``numpy.random.Generator`` or CuPy's); the
    model passes one shared generator to all its Dropout layers, so one seed
    fixes every mask. ``forward(x, mask=...)`` uses a given mask instead of
    drawing one (the gradient checks do this).
    """

    def __init__(self, P_drop: float, rng=None):
        super().__init__()
        if not 0.0 <= P_drop < 1.0:
            raise ValueError(f"Dropout: P_drop must be in [0, 1), got {P_drop}")
        self.P_drop = P_drop
        self.rng = rng

    def _check_input(self, x, mask=None):
        check_input("Dropout", "x", x)     # float, any dtype: the output keeps it (no parameters)
        if mask is not None and mask.shape != x.shape:
            raise ShapeError(f"Dropout: mask must have the input's shape {tuple(x.shape)}, got {tuple(mask.shape)}")
        if mask is None and self.training and self.P_drop > 0.0 and self.rng is None:
            raise RuntimeError("Dropout: no rng was given; pass rng= or set layer.rng")

    @checked_forward(_check_input)
    def forward(self, x: Array, mask: Array | None = None) -> Array:
        """x: any shape -> same shape. ``mask``: use this mask (x's shape) instead of drawing one."""
        if mask is None and (not self.training or self.P_drop == 0.0):
            self._cache = None             # identity: no mask, backward passes dout through
            return x
        if mask is None:
            mask = dropout_mask(x.shape, self.P_drop, self.rng, x.dtype)
        self._cache = mask
        return x * mask

    @checked_backward
    def backward(self, dout: Array) -> Array:
        """dout: the forward output's shape -> dx: the same shape.

        d(x ⊙ mask)/dx = mask: the same units are dropped on the way back.
        """
        mask = self._cache
        return dout if mask is None else dout * mask
