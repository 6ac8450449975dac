"""Token embedding scaled by sqrt(d_model), and the output projection tied to it (§3.4).

The paper shares one matrix between the source embedding, the target
embedding and the pre-softmax linear layer ("three-way tying"), and multiplies
the embedding by sqrt(d_model). Here the matrix is one ``Parameter`` that
several layers hold; each layer *adds* its gradient into ``Parameter.grad``, so
after backward the shared gradient is the sum over every use.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .. import backend
from ..backend import Array
from ..errors import check_input, check_token_ids
from .parameter import Layer, Parameter, checked_backward, checked_forward


class EmbeddingCache(NamedTuple):
    ids: object     # (B, S) the token ids looked up
    scale: float    # sqrt(d_model)


def embedding_forward(ids: Array, E: Array, scale: float) -> tuple[Array, EmbeddingCache]:
    """ids: (B, S) ints, E: (V, d_model) -> out: (B, S, d_model) = E[ids] * sqrt(d_model), cache."""
    return E[ids] * scale, EmbeddingCache(ids, scale)


def embedding_backward(dout: Array, cache: EmbeddingCache, dE: Array) -> None:
    """Add dL/dE into ``dE`` (V, d_model) in place, given dout = dL/dout: (B, S, d_model).

    Returns nothing: token ids have no gradient, and E's gradient is *added*
    into ``dE`` (the tied E collects one such sum per use).

    Each output row out[b, s] = scale · E[ids[b, s]], so row v of dE receives
    scale · dout[b, s] for every position where ids[b, s] == v. A token that
    appears twice gets both contributions: a scatter-*add*, not an assignment,
    and no (B·S, V) one-hot matrix is ever built.
    """
    ids, scale = cache
    d = dE.shape[1]
    backend.scatter_add(dE, ids.reshape(-1), dout.reshape(-1, d) * scale)


def init_embedding(V: int, d_model: int, rng, xp=None, dtype=None):
    """N(0, d_model^-1/2): after the sqrt(d_model) scale the embedded vectors
    have entries of size about 1, comparable to the positional encoding's."""
    xp = xp or backend.xp_default()
    dtype = dtype or backend.default_dtype()
    return xp.asarray(rng.normal(0.0, d_model ** -0.5, size=(V, d_model)), dtype=dtype)


class Embedding(Layer):
    """Token ids (B, S) -> vectors (B, S, d_model), scaled by sqrt(d_model) (§3.4).

    Pass ``weight=`` an existing Parameter to tie this embedding to another.
    """

    def __init__(self, vocab_size: int, d_model: int, rng=None, weight: Parameter | None = None,
                 name: str = "embedding"):
        super().__init__()
        if weight is None:
            if rng is None:
                raise ValueError("Embedding needs an rng to initialise a new weight, or weight= to share one")
            weight = Parameter(init_embedding(vocab_size, d_model, rng), f"{name}.E")
        if tuple(weight.shape) != (vocab_size, d_model):
            raise ValueError(
                f"Embedding: shared weight must have shape (V, d_model) = {(vocab_size, d_model)}, "
                f"got {tuple(weight.shape)}"
            )
        self.E = weight
        self.vocab_size, self.d_model = vocab_size, d_model
        self.scale = math.sqrt(d_model)
        self._name = name

    def _check_input(self, ids):
        check_token_ids(f"Embedding {self._name!r}", ids, self.vocab_size)

    @checked_forward(_check_input)
    def forward(self, ids: Array) -> Array:
        """ids: (B, S) ints in [0, V) -> (B, S, d_model)."""
        out, self._cache = embedding_forward(ids, self.E.data, self.scale)
        return out

    @checked_backward
    def backward(self, dout: Array) -> None:
        """dout: (B, S, d_model). Adds into E.grad; token ids have no gradient."""
        embedding_backward(dout, self._cache, self.E.grad)


class TiedOutputProjection(Layer):
    """Pre-softmax linear layer sharing the embedding matrix (§3.4): logits = x E^T.

    x: (B, T, d_model) -> logits: (B, T, V). No sqrt(d_model) here: the paper
    scales only the embedding side.
    """

    def __init__(self, weight: Parameter):
        super().__init__()
        self.E = weight
        self.vocab_size, self.d_model = weight.shape

    def _check_input(self, x):
        check_input("TiedOutputProjection", "x", x, self.d_model, self.E.data.dtype)

    @checked_forward(_check_input)
    def forward(self, x: Array) -> Array:
        """x: (B, T, d_model) -> logits: (B, T, V)."""
        rows = x.reshape(-1, self.d_model)                     # (B·T, d_model): every position at once
        logits = backend.matmul(rows, self.E.data.T)           # (B·T, V); E.T is a view, not a copy
        self._cache = x
        return logits.reshape(*x.shape[:-1], self.vocab_size)  # (B, T, V)

    @checked_backward
    def backward(self, dlogits: Array) -> Array:
        """dlogits: (B, T, V) -> dx: (B, T, d_model); adds dlogits^T x into E.grad."""
        x = self._cache
        V, d = self.E.shape
        dlogits2 = dlogits.reshape(-1, V)                      # (B·T, V)
        # logits = x E^T  =>  dE = dlogits^T x (summed over batch and position), dx = dlogits E
        backend.add_matmul(self.E.grad, dlogits2.T, x.reshape(-1, d))   # E.grad += dlogits^T x
        return backend.matmul(dlogits2, self.E.data).reshape(x.shape)
