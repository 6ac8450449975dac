"""Scaled dot-product attention (§3.2.1, Eq. 1) and multi-head attention (§3.2.2).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                        (Eq. 1)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
        head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i)

Masks are boolean with **True = may attend**. They broadcast against the
scores (B, h, S_q, S_k): a key-padding mask is (B, 1, 1, S_k), a causal mask
(1, 1, S_q, S_k), a decoder's combined mask (B, 1, S_q, S_k).

Letters: B batch, h heads, S_q query positions, S_k key positions,
d_k = d_v = d_model / h.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .. import backend
from ..backend import Array
from ..errors import ShapeError, check_input, check_mask
from .linear import init_weight
from .parameter import Layer, Parameter, checked_backward, checked_forward

# A large negative number instead of -inf for masked scores: exp() of it is
# exactly 0, but a row with *every* key masked stays finite (no inf - inf = NaN).
MASK_FILL = -1e9


class AttentionCache(NamedTuple):
    Q: object       # (B, h, S_q, d_k)
    K: object       # (B, h, S_k, d_k)
    V: object       # (B, h, S_k, d_v)
    A: object       # (B, h, S_q, S_k) attention weights (rows sum to 1, or 0 if fully masked)
    scale: float    # 1 / sqrt(d_k)


def softmax_lastaxis(scores: Array) -> Array:
    """Numerically stable softmax over the last axis, computed in place.

    Subtracting the row max first keeps exp() from overflowing; ``out=`` reuses
    the scores' buffer instead of allocating a new (B, h, S_q, S_k) array.
    """
    xp = backend.get_array_module(scores)
    scores -= scores.max(axis=-1, keepdims=True)
    xp.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores


def attention_scores(Q: Array, K: Array, mask: Array | None = None) -> Array:
    """The scaled, masked scores S = Q K^T / sqrt(d_k) of Eq. (1), before the softmax.

    Q: (B, h, S_q, d_k), K: (B, h, S_k, d_k), mask: bool broadcastable to
    (B, h, S_q, S_k), True = may attend. Returns S: (B, h, S_q, S_k), a new array,
    with masked entries set to MASK_FILL: S ⊙ mask + MASK_FILL · (1 - mask).
    ``attention_forward`` computes the softmax in S's own buffer, so S is gone
    after it; call this to look at S.
    """
    S = backend.matmul(Q, K.swapaxes(-1, -2))       # (B, h, S_q, S_k); swapaxes is a view, not a copy
    S *= 1.0 / math.sqrt(Q.shape[-1])               # the 1/sqrt(d_k) of §3.2.1
    if mask is not None:
        S *= mask                                   # masked scores to 0 ...
        S += ~mask * MASK_FILL                      # ... then to exactly MASK_FILL (~mask is small: it broadcasts)
    return S


def attention_forward(Q: Array, K: Array, V: Array, mask: Array | None = None) -> tuple[Array, AttentionCache]:
    """Eq. (1). Q: (B, h, S_q, d_k), K: (B, h, S_k, d_k), V: (B, h, S_k, d_v),
    mask: bool, broadcastable to (B, h, S_q, S_k), True = may attend.
    Returns out: (B, h, S_q, d_v) and the cache for the backward.

    Names, as a debugger shows them: S the scaled, masked scores; A = softmax(S)
    the attention weights; out = A V.
    """
    scale = 1.0 / math.sqrt(Q.shape[-1])
    S = attention_scores(Q, K, mask)                 # (B, h, S_q, S_k)
    # The softmax runs in S's buffer (saves one (B, h, S_q, S_k) array): after the
    # next line S and A are the same array, and S's values are gone. To see the
    # scores, `p S.copy()` before this line, or call attention_scores(Q, K, mask).
    A = softmax_lastaxis(S)                          # (B, h, S_q, S_k)
    # A query row that may attend to nothing gets a softmax uniform over masked keys;
    # zeroing it gives an output of 0 (and a gradient of 0). Every other row has A = 0
    # at its masked keys already (exp(MASK_FILL - max) is exactly 0), so this changes nothing there.
    if mask is not None:
        A *= mask
    out = backend.matmul(A, V)                       # (B, h, S_q, d_v)
    return out, AttentionCache(Q, K, V, A, scale)


def attention_backward(dout: Array, cache: AttentionCache) -> tuple[Array, Array, Array]:
    """dout: (B, h, S_q, d_v) -> dQ, dK, dV with the shapes of Q, K, V.

    Forward, step by step:  S = Q K^T · scale;  A = softmax(S);  out = A V.
    Backward, in reverse:
        dA = dout V^T,   dV = A^T dout                       (out = A V)
        dS = A ⊙ (dA - rowsum(dA ⊙ A))                        (softmax Jacobian)
        dQ = dS K · scale,   dK = dS^T Q · scale               (S = Q K^T · scale)
    Masked entries have A = 0, so their dS is 0: no gradient leaks through a mask.

    Returns:
        dQ: (B, h, S_q, d_k), dK: (B, h, S_k, d_k), dV: (B, h, S_k, d_v)
    """
    Q, K, V, A, scale = cache
    dA = backend.matmul(dout, V.swapaxes(-1, -2))    # (B, h, S_q, S_k)
    dV = backend.matmul(A.swapaxes(-1, -2), dout)    # (B, h, S_k, d_v)
    # The softmax backward runs in dA's buffer (saves one (B, h, S_q, S_k) array):
    # once the next two lines have run, the buffer holds dS and `dA` no longer
    # holds dA. To keep dA, `p dA.copy()` before them.
    dA -= backend.rowdot(dA, A)                      # dA - rowsum(dA ⊙ A); rowdot builds no dA ⊙ A
    dA *= A
    dS = dA                                          # the same buffer, now holding dS: `p dS` from here
    dQ = backend.matmul(dS, K)                       # (B, h, S_q, d_k)
    dQ *= scale                                      # the scale on the small arrays, so dS stays dS
    dK = backend.matmul(dS.swapaxes(-1, -2), Q)      # (B, h, S_k, d_k)
    dK *= scale
    return dQ, dK, dV


def split_heads(x: Array, h: int) -> Array:
    """(B, S, d_model) -> (B, h, S, d_k), as a strided view (no copy)."""
    B, S, d_model = x.shape
    return x.reshape(B, S, h, d_model // h).transpose(0, 2, 1, 3)


def merge_heads(x: Array) -> Array:
    """(B, h, S, d_k) -> (B, S, h·d_k): the Concat of §3.2.2 (one copy)."""
    B, h, S, d_k = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, S, h * d_k)


def merge_qkv(*grads: Array) -> Array:
    """dQ, dK, dV (or dK, dV), each (B, h, S, d_k) -> (B·S, n·d_model), side by side as the
    fused projection's columns: the gradient of the projection's output (one copy)."""
    B, h, S, d_k = grads[0].shape
    xp = backend.get_array_module(grads[0])
    out = xp.empty((B, S, len(grads), h, d_k), dtype=grads[0].dtype)
    for i, g in enumerate(grads):
        out[:, :, i] = g.transpose(0, 2, 1, 3)                           # (B, S, h, d_k)
    return out.reshape(B * S, len(grads) * h * d_k)


class MHACache(NamedTuple):
    x_q: object        # (B, S_q, d_model) query input
    x_kv: object       # (B, S_k, d_model) key/value input, or None for self-attention
    concat: object     # (B·S_q, d_model) the concatenated heads, input of W^O
    attn: AttentionCache   # what the heads' scaled dot-product attention saved


class MultiHeadAttention(Layer):
    """Multi-head attention (§3.2.2), usable in all three ways of §3.2.3.

    Parameters, in the paper's terms:
      W_qkv (d_model, 3·d_model): columns [0, d) hold W^Q for every head,
          [d, 2d) W^K and [2d, 3d) W^V; head i uses columns i·d_k .. (i+1)·d_k
          of each block. Storing them side by side lets self-attention
          project Q, K and V with one matrix product instead of three.
      b_qkv (3·d_model,)
      W_o (d_model, d_model), b_o (d_model,): the output projection W^O.

    Calls:
      forward(x, mask=mask)            encoder self-attention, or masked
                                       decoder self-attention with a causal mask
      forward(x, memory, mask=mask)    encoder-decoder attention: queries from
                                       the decoder, keys/values from the encoder
      step(x_t, K, V, t=t)             one decoder position at inference, with
      step(x_t, K, V, mask=mask)       a key/value cache (no backward)

    After a forward (or step), ``attention_weights`` holds the softmax weights A
    of Eq. (1), (B, h, S_q, S_k): row i is how much query i looks at each key.
    It is the array the backward uses: read it, do not write into it.
    """

    def __init__(self, d_model: int, h: int, rng, name: str = "attn"):
        super().__init__()
        if h <= 0 or d_model % h != 0:
            raise ValueError(
                f"MultiHeadAttention: d_model={d_model} must be divisible by the number of heads h={h} "
                f"(d_k = d_model / h must be a whole number)"
            )
        xp, dtype = backend.xp_default(), backend.default_dtype()
        self.d_model, self.h, self.d_k = d_model, h, d_model // h
        # Initialise each of W^Q, W^K, W^V as its own (d_model, d_model) block.
        blocks = [init_weight(d_model, d_model, rng, xp, dtype) for _ in range(3)]
        self.W_qkv = Parameter(xp.concatenate(blocks, axis=1), f"{name}.W_qkv")
        self.b_qkv = Parameter(xp.zeros(3 * d_model, dtype=dtype), f"{name}.b_qkv")
        self.W_o = Parameter(init_weight(d_model, d_model, rng, xp, dtype), f"{name}.W_o")
        self.b_o = Parameter(xp.zeros(d_model, dtype=dtype), f"{name}.b_o")
        self.attention_weights = None       # A of the last forward/step: (B, h, S_q, S_k)
        self._name = name

    # -- projections, shared by training and by cached decoding ---------------
    def project_qkv(self, x: Array) -> tuple[Array, Array, Array]:
        """Self-attention: x (B, S, d_model) -> Q, K, V each (B, h, S, d_k), one matmul."""
        B, S, d = x.shape
        qkv = backend.matmul(x.reshape(B * S, d), self.W_qkv.data)      # (B·S, 3·d_model): every position at once
        qkv += self.b_qkv.data                                           # in place: no second array
        qkv = qkv.reshape(B, S, 3, self.h, self.d_k).transpose(2, 0, 3, 1, 4)  # (3, B, h, S, d_k) view
        return qkv[0], qkv[1], qkv[2]

    def project_q(self, x: Array) -> Array:
        """x (B, S_q, d_model) -> Q (B, h, S_q, d_k)."""
        B, S, d = x.shape
        q = backend.matmul(x.reshape(B * S, d), self.W_qkv.data[:, :d])   # (B·S_q, d_model)
        q += self.b_qkv.data[:d]                                        # in place: no second array
        return split_heads(q.reshape(B, S, d), self.h)

    def project_kv(self, memory: Array) -> tuple[Array, Array]:
        """memory (B, S_k, d_model) -> K, V each (B, h, S_k, d_k)."""
        B, S, d = memory.shape
        kv = backend.matmul(memory.reshape(B * S, d), self.W_qkv.data[:, d:])   # (B·S_k, 2·d_model)
        kv += self.b_qkv.data[d:]                                       # in place: no second array
        kv = kv.reshape(B, S, 2, self.h, self.d_k).transpose(2, 0, 3, 1, 4)
        return kv[0], kv[1]

    def output(self, heads: Array) -> Array:
        """heads (B, h, S_q, d_k) -> Concat(head_1..head_h) W^O + b: (B, S_q, d_model)."""
        B, h, S_q, d_k = heads.shape
        concat = merge_heads(heads).reshape(B * S_q, h * d_k)            # (B·S_q, d_model)
        y = backend.matmul(concat, self.W_o.data)
        y += self.b_o.data                                               # in place: no second array
        return y.reshape(B, S_q, h * d_k)

    # -- checks -----------------------------------------------------------------
    def _check_input(self, x_q: Array, x_kv: Array | None = None, mask: Array | None = None):
        where = f"MultiHeadAttention {self._name!r}"
        check_input(where, "query input", x_q, self.d_model, self.W_qkv.data.dtype)
        if x_q.ndim != 3:
            raise ShapeError(f"{where}: query input must have shape (B, S_q, d_model), got {tuple(x_q.shape)}")
        S_k = x_q.shape[1]
        if x_kv is not None:
            check_input(where, "key/value input (memory)", x_kv, self.d_model, self.W_qkv.data.dtype)
            if x_kv.ndim != 3 or x_kv.shape[0] != x_q.shape[0]:
                raise ShapeError(
                    f"{where}: key/value input must have shape (B={x_q.shape[0]}, S_k, d_model={self.d_model}), "
                    f"got {tuple(x_kv.shape)}"
                )
            S_k = x_kv.shape[1]
        if x_q.shape[1] == 0 or S_k == 0:
            # Softmax over no keys (or no queries at all) has no meaning; NumPy would say
            # "zero-size array to reduction operation" from deep inside it.
            raise ShapeError(f"{where}: the sequences must have at least one position; got S_q={x_q.shape[1]}, "
                             f"S_k={S_k}")
        if mask is not None:
            check_mask(where, "mask", mask, (x_q.shape[0], self.h, x_q.shape[1], S_k))

    # -- forward and backward ---------------------------------------------------
    @checked_forward(_check_input)
    def forward(self, x_q: Array, x_kv: Array | None = None, mask: Array | None = None) -> Array:
        """x_q: (B, S_q, d_model); x_kv: (B, S_k, d_model) or None for self-attention;
        mask: bool broadcastable to (B, h, S_q, S_k). Returns (B, S_q, d_model)."""
        if x_kv is None:
            Q, K, V = self.project_qkv(x_q)                              # each (B, h, S_q, d_k)
        else:
            Q, (K, V) = self.project_q(x_q), self.project_kv(x_kv)
        heads, attn_cache = attention_forward(Q, K, V, mask)             # (B, h, S_q, d_k)
        self.attention_weights = attn_cache.A                            # (B, h, S_q, S_k)
        B, S_q, d = x_q.shape
        concat = merge_heads(heads).reshape(B * S_q, d)                  # (B·S_q, d_model): Concat(heads)
        y = backend.matmul(concat, self.W_o.data)                        # Concat(heads) W^O
        y += self.b_o.data                                               # + b_o, in place
        self._cache = MHACache(x_q, x_kv, concat, attn_cache)
        return y.reshape(B, S_q, d)

    def step(self, x_t: Array, K: Array, V: Array, t: int | None = None, mask: Array | None = None) -> Array:
        """One decoder position at inference, attending over cached keys and values.

        x_t: (B, 1, d_model), the new position's input.
        Masked self-attention (``t`` given): K, V are the cache's buffers, each
            (B, h, T_max, d_k), holding positions 0..t-1. The new position's key
            and value are written at t, and its query attends to positions 0..t:
            no causal mask is needed, the future is not in the cache yet.
        Encoder-decoder attention (``t`` None): K, V are the memory's keys and
            values, (B, h, S, d_k), projected once per sentence (``project_kv``);
            ``mask`` is the source padding mask (B, 1, 1, S).
        Returns (B, 1, d_model). Inference only: keeps no cache for a backward.
        """
        if t is None:
            Q = self.project_q(x_t)                                      # (B, h, 1, d_k)
        else:
            Q, k_t, v_t = self.project_qkv(x_t)                          # each (B, h, 1, d_k)
            K[:, :, t: t + 1] = k_t
            V[:, :, t: t + 1] = v_t
            K, V = K[:, :, : t + 1], V[:, :, : t + 1]                    # positions 0..t (views)
        heads, attn_cache = attention_forward(Q, K, V, mask)             # (B, h, 1, d_k)
        self.attention_weights = attn_cache.A                            # (B, h, 1, S_k)
        return self.output(heads)

    @checked_backward
    def backward(self, dy: Array) -> Array | tuple[Array, Array]:
        """dy: (B, S_q, d_model), the gradient of the output.

        Adds into the gradients of W_qkv, b_qkv, W_o, b_o.

        Returns:
            self-attention: dx: (B, S_q, d_model)
            encoder-decoder attention: (dx_q: (B, S_q, d_model), dx_kv: (B, S_k, d_model))
        """
        x_q, x_kv, concat, attn_cache = self._cache
        B, S_q, d = dy.shape
        dy2 = dy.reshape(B * S_q, d)                                     # (B·S_q, d_model): one row per position
        # output projection: y = concat W^O + b_o
        self.W_o.grad += backend.matmul(concat.T, dy2)
        self.b_o.grad += dy2.sum(axis=0)
        dconcat = backend.matmul(dy2, self.W_o.data.T)                   # (B·S_q, d_model)
        dheads = split_heads(dconcat.reshape(B, S_q, d), self.h)         # (B, h, S_q, d_k)
        dQ, dK, dV = attention_backward(dheads, attn_cache)
        if x_kv is None:
            # Undo the fused projection: dQ, dK, dV side by side, one row per position: (B·S, 3·d_model).
            dqkv = merge_qkv(dQ, dK, dV)                                 # (B·S_q, 3·d_model)
            self.W_qkv.grad += backend.matmul(x_q.reshape(B * S_q, d).T, dqkv)
            self.b_qkv.grad += dqkv.sum(axis=0)
            return backend.matmul(dqkv, self.W_qkv.data.T).reshape(B, S_q, d)
        # encoder-decoder attention: Q from x_q, K and V from x_kv
        S_k = x_kv.shape[1]
        dq = merge_heads(dQ).reshape(B * S_q, d)                         # (B·S_q, d_model)
        dkv = merge_qkv(dK, dV)                                          # (B·S_k, 2·d_model)
        self.W_qkv.grad[:, :d] += backend.matmul(x_q.reshape(B * S_q, d).T, dq)
        self.b_qkv.grad[:d] += dq.sum(axis=0)
        self.W_qkv.grad[:, d:] += backend.matmul(x_kv.reshape(B * S_k, d).T, dkv)
        self.b_qkv.grad[d:] += dkv.sum(axis=0)
        dx_q = backend.matmul(dq, self.W_qkv.data[:, :d].T).reshape(B, S_q, d)
        dx_kv = backend.matmul(dkv, self.W_qkv.data[:, d:].T).reshape(B, S_k, d)
        return dx_q, dx_kv
