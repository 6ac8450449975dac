"""Positional information added to the scaled embeddings (§3.5).

The paper's choice, a fixed sinusoidal table:

    PE(pos, 2i)   = sin(pos / 10000^(2i/d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))

It has no parameters, so its backward passes the gradient straight through.

The alternative the paper tried (Table 3, row E), a learned table P with one
row per position, is ``LearnedPositionalEmbedding``: the same x + P[pos], but P
is a Parameter, so its backward also adds the gradient into P's rows.
"""

from __future__ import annotations

from .. import backend
from ..backend import Array
from ..errors import ShapeError, check_input
from .parameter import Layer, Parameter, checked_backward, checked_forward


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

    def _check_input(self, x, offset=0):
        check_input("PositionalEncoding", "x", x, self.d_model)       # keeps x's float dtype
        if x.ndim != 3:
            raise ShapeError(f"PositionalEncoding: x must have shape (B, S, d_model), got {tuple(x.shape)}")
        self.encoding(x.shape[1], offset)                               # raises past max_len

    @checked_forward(_check_input)
    def forward(self, x: Array, offset: int = 0) -> Array:
        """x: (B, S, d_model) -> x + PE[offset : offset + S]. ``offset`` shifts the
        positions (one-position decoding feeds position t alone, with offset t)."""
        if backend.on_cpu(self._table) != backend.on_cpu(x):            # the table follows the input's device
            self._table = backend.to_backend(self._table, backend.get_array_module(x))
        pe = self._table[offset: offset + x.shape[1]]                   # (S, d_model)
        return x + pe.astype(x.dtype, copy=False)       # nothing to keep: the backward is the identity

    @checked_backward
    def backward(self, dout: Array) -> Array:
        """dout: (B, S, d_model) -> dx: (B, S, d_model).

        d(x + PE)/dx is the identity: the gradient passes through unchanged.
        """
        return dout


# -- the learned alternative (Table 3, row E) -------------------------------------------


def init_positional(max_len: int, d_model: int, rng, xp=None, dtype=None):
    """A (max_len, d_model) table with entries N(0, 1/2).

    Variance 1/2 gives each row the expected squared norm d_model/2, which is
    exactly the squared norm of every row of the sinusoidal table: the learned
    table starts at the same size as the fixed one, and of the same size as the
    scaled token embeddings (entries about 1, see ``embedding.init_embedding``).
    """
    xp = xp or backend.xp_default()
    dtype = dtype or backend.default_dtype()
    return xp.asarray(rng.normal(0.0, 0.5 ** 0.5, size=(max_len, d_model)), dtype=dtype)


class LearnedPositionalEmbedding(Layer):
    """x: (B, S, d_model) -> x + P[offset : offset + S], with P a learned (max_len, d_model) table.

    Table 3, row E: "positional embedding instead of sinusoids". Forward and
    ``forward(x, offset)`` work exactly like ``PositionalEncoding``'s, so the
    model's one-position decoding (offset t) needs no change.

    Pass ``weight=`` an existing Parameter to share one table between layers
    (the Transformer shares one between the source and target sides, as it
    shares the sinusoidal table); each layer *adds* its gradient into it.

    A learned table has rows only for positions 0 .. max_len-1, and a row is
    trained only if some training sequence reached that position. Positions
    past max_len raise a ShapeError; positions inside max_len but longer than
    any training sequence silently use their untrained (random) rows.
    """

    def __init__(self, d_model: int, max_len: int, rng=None, weight: Parameter | None = None,
                 name: str = "pos"):
        super().__init__()
        if weight is None:
            if rng is None:
                raise ValueError("LearnedPositionalEmbedding needs an rng to initialise a new table, "
                                 "or weight= to share one")
            weight = Parameter(init_positional(max_len, d_model, rng), f"{name}.P")
        if tuple(weight.shape) != (max_len, d_model):
            raise ValueError(
                f"LearnedPositionalEmbedding: shared table must have shape (max_len, d_model) = "
                f"{(max_len, d_model)}, got {tuple(weight.shape)}"
            )
        self.P = weight
        self.d_model, self.max_len = d_model, max_len
        self._name = name

    def _check_input(self, x, offset=0):
        where = f"LearnedPositionalEmbedding {self._name!r}"
        check_input(where, "x", x, self.d_model, self.P.data.dtype)   # a layer computes in its parameters' dtype
        if x.ndim != 3:
            raise ShapeError(f"{where}: x must have shape (B, S, d_model), got {tuple(x.shape)}")
        S = x.shape[1]
        if offset < 0 or offset + S > self.max_len:
            raise ShapeError(
                f"{where}: positions {offset}..{offset + S - 1} do not fit the learned table of "
                f"max_len={self.max_len} rows; a learned table has no row for a position it was not "
                "built with (it cannot extrapolate, unlike the sinusoids): build and train the model "
                "with a larger max_len"
            )

    @checked_forward(_check_input)
    def forward(self, x: Array, offset: int = 0) -> Array:
        """x: (B, S, d_model) -> x + P[offset : offset + S], broadcast over the batch."""
        S = x.shape[1]
        self._cache = (offset, S)
        return x + self.P.data[offset: offset + S]          # (B, S, d_model); P's rows broadcast over B

    @checked_backward
    def backward(self, dout: Array) -> Array:
        """dout: (B, S, d_model) -> dx: (B, S, d_model); adds into P.grad[offset : offset + S].

        out[b, s] = x[b, s] + P[offset + s], so dx = dout (the identity, as for
        the sinusoids) and row offset+s of P receives the sum over the batch of
        dout[b, s]. The rows are distinct, a slice, so no scatter is needed;
        ``+=`` because the table may be shared (source and target sides).
        """
        offset, S = self._cache
        self.P.grad[offset: offset + S] += dout.sum(axis=0)     # (S, d_model)
        return dout
