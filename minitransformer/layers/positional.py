"""Sinusoidal positional encoding (§3.5).

    PE(pos, 2i)   = sin(pos / 10000^(2i/d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))

Added to the scaled embeddings; it has no parameters, so its backward passes
the gradient straight through.
"""

from __future__ import annotations

from .. import backend
from ..backend import Array
from ..errors import ShapeError, check_input
from .parameter import Layer


def sinusoidal_table(max_len: int, d_model: int, xp=None, dtype=None):
    """The (max_len, d_model) table of §3.5, computed in float64 then cast."""
    xp = xp or backend.xp_default()
    dtype = dtype or backend.default_dtype()
    pos = xp.arange(max_len, dtype=xp.float64)[:, None]              # (max_len, 1)
    two_i = xp.arange(0, d_model, 2, dtype=xp.float64)[None, :]      # (1, ceil(d_model/2))
    angle = pos / xp.power(10000.0, two_i / d_model)                  # (max_len, ceil(d_model/2))
    pe = xp.zeros((max_len, d_model), dtype=xp.float64)
    pe[:, 0::2] = xp.sin(angle)
    pe[:, 1::2] = xp.cos(angle[:, : d_model // 2])                    # odd d_model: one fewer cos column
    return pe.astype(dtype)


class PositionalEncoding(Layer):
    """x: (B, S, d_model) -> x + PE[:S], for any S up to ``max_len``."""

    def __init__(self, d_model: int, max_len: int = 5000, table=None):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        # ``table=`` lets the encoder and decoder share one precomputed table.
        self._table = sinusoidal_table(max_len, d_model) if table is None else table

    @property
    def table(self):
        return self._table

    def encoding(self, S: int, offset: int = 0):
        """Rows offset .. offset+S-1 of the table: (S, d_model)."""
        if offset + S > self.max_len:
            raise ShapeError(
                f"PositionalEncoding: sequence positions up to {offset + S} exceed max_len={self.max_len}; "
                "build the model with a larger max_len"
            )
        return self._table[offset: offset + S]

    def forward(self, x: Array, offset: int = 0) -> Array:
        """x: (B, S, d_model) -> x + PE[offset : offset + S]. ``offset`` shifts the
        positions (one-position decoding feeds position t alone, with offset t)."""
        check_input("PositionalEncoding", "x", x, self.d_model)       # keeps x's float dtype
        if x.ndim != 3:
            raise ShapeError(f"PositionalEncoding: x must have shape (B, S, d_model), got {tuple(x.shape)}")
        pe = self.encoding(x.shape[1], offset)
        xp = backend.get_array_module(x)
        if backend.get_array_module(pe) is not xp:    # table follows the input's device
            self._table = backend.to_backend(self._table, xp)
            pe = self.encoding(x.shape[1], offset)
        out = x + pe.astype(x.dtype, copy=False)
        self._save_cache(None, out)                     # nothing to keep: the backward is the identity
        return out

    def backward(self, dout: Array) -> Array:
        """dout: (B, S, d_model) -> dx: (B, S, d_model).

        d(x + PE)/dx is the identity: the gradient passes through unchanged.
        """
        self._pop_cache(dout)
        return dout
