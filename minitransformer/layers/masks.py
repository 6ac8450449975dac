"""Attention masks (§3.2.3): which keys each query may look at.

Convention for the whole package: boolean, **True = may attend**.
``attention_forward`` (attention.py) gives every False position the score
MASK_FILL (-1e9, not -inf) before the softmax, so it gets weight exactly 0, and
a query row with no True key at all gets output 0 instead of NaN.
(PyTorch's ``nn.MultiheadAttention`` uses the opposite: True = blocked.)

* ``padding_mask(ids)`` (B, 1, 1, S): True where the token is real. It masks
  *keys*; the two size-1 axes broadcast over the h heads and over the query
  positions, because no query should look at padding.
* ``causal_mask(T)`` (1, 1, T, T): query i may see key j only if j <= i, so a
  prediction for position i depends only on the outputs before it (§3.2.3).
  The decoder's self-attention uses ``padding_mask(tgt_in) & causal_mask(T)``.
"""

from __future__ import annotations

import numbers
import types

from .. import backend


def causal_mask(T: int, xp: types.ModuleType | None = None):
    """(1, 1, T, T) bool, lower triangular: entry [0, 0, i, j] is True iff j <= i.

    Query position i may look at itself and the positions before it, never
    ahead: at inference the later tokens do not exist yet (§3.2.3).
    ``xp``: the array module to build it with (default: the current backend).
    """
    if isinstance(T, bool) or not isinstance(T, numbers.Integral) or T < 1:   # int or a NumPy integer
        raise ValueError(f"causal_mask: T must be a positive integer, got {T!r}")
    xp = xp or backend.xp_default()
    return xp.tril(xp.ones((int(T), int(T)), dtype=bool))[None, None, :, :]


def padding_mask(ids, pad_id: int):
    """ids: (B, S) token ids -> (B, 1, 1, S) bool, True where the token is not padding.

    Works on whichever backend ``ids`` lives on (a comparison needs no xp).
    """
    if getattr(ids, "ndim", None) != 2:
        raise ValueError(f"padding_mask: ids must have shape (B, S), got {getattr(ids, 'shape', type(ids))}")
    return (ids != pad_id)[:, None, None, :]


def decoder_mask(tgt_in, pad_id: int):
    """tgt_in: (B, T) decoder input ids -> (B, 1, T, T) bool: causal AND key not padding.

    (B, 1, 1, T) & (1, 1, T, T) broadcasts to (B, 1, T, T). No query row is all
    False when tgt_in starts with <bos>: key 0 is never padding and 0 <= i.
    """
    xp = backend.get_array_module(tgt_in)
    return padding_mask(tgt_in, pad_id) & causal_mask(tgt_in.shape[1], xp)


__all__ = ["causal_mask", "padding_mask", "decoder_mask"]
