# ---
# jupyter:
#   jupytext:
#     formats: ipynb,src//py:percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 8 — Why self-attention (§1, §2, §4, Table 1)
#
# Before the Transformer, a model read a sentence in one of two ways. A **recurrent**
# network reads it one word at a time and carries a summary forward: the summary after word
# $t$ is computed from the summary after word $t-1$. A **convolutional** network looks at
# every position at once, but each position only sees a small window of its neighbours.
# **Self-attention** lets every position look at every other position directly.
#
# The paper argues for self-attention in three places: §1 (recurrence is sequential), §2
# (convolutions need many layers to connect distant words) and §4, which compares the three
# layer types on three counts and summarises them in Table 1:
#
# | layer type | complexity per layer | sequential operations | maximum path length |
# | --- | --- | --- | --- |
# | self-attention | $O(n^2 \cdot d)$ | $O(1)$ | $O(1)$ |
# | recurrent | $O(n \cdot d^2)$ | $O(n)$ | $O(n)$ |
# | convolutional | $O(k \cdot n \cdot d^2)$ | $O(1)$ | $O(\log_k n)$ |
# | self-attention (restricted) | $O(r \cdot n \cdot d)$ | $O(1)$ | $O(n/r)$ |
#
# with $n$ the sequence length, $d$ the width of the representation, $k$ the kernel width of
# a convolution and $r$ the size of the neighbourhood a restricted self-attention looks at.
#
# A table of $O(\cdot)$ is a claim we can test at toy scale. In this lesson we write a small
# recurrent layer and a small convolution, take self-attention from the package, and
# **measure** every column: the cost (matrix-product FLOPs counted exactly, and wall time),
# the number of operations that must run one after another, and the path length (by
# computing gradients and watching when one end of the sequence first reaches the other).
# Along the way we correct two entries that popular explanations of the table get wrong,
# and time the two attention functions §3.2.1 compares (additive and dot-product).
#
# | in this lesson | where |
# | --- | --- |
# | self-attention layer (§3.2.2) | `minitransformer.layers.attention.MultiHeadAttention` (lesson 2) |
# | Eq. (1), also on windows of keys | `minitransformer.layers.attention.attention_forward` (lesson 1) |
# | every matrix product, counted here | `minitransformer.backend.matmul` |
# | gradient checks | `minitransformer.gradcheck.gradcheck` |
# | weights (Glorot) | `minitransformer.layers.linear.init_weight` |
# | recurrent layer, causal convolution, restricted and additive attention | written in this lesson: small reference versions, not part of the package (the Transformer does not use them) |
# | the long sweeps behind the plots | `lessons/experiments/lesson08_table1.py`, which writes `lesson08_table1.json` |
#
# The section numbers here and in every lesson are the paper's own: §1 Introduction, §2 Background, §3 Model
# Architecture, §4 Why Self-Attention, §5 Training, §6 Results, §7 Conclusion; the abstract has no number. A
# summary that counts the abstract as its first section puts every later one a number too high (its "§5" on
# why self-attention is the paper's §4).
#
# Background: the package's paper-to-code table is in the
# [paper map](docs/paper_map.md); the backward rules we reuse are
# derived in [docs/derivations.md](docs/derivations.md) (the linear layer, §1, for every
# $xW$ product below; the softmax, §4, and attention, §5, for the exercise).
#
# **What it trains:** nothing; it times and counts small layers, and loads the offline sweep of `lessons/experiments/lesson08_table1.py`. The cell below says how long the whole lesson takes.
#
# **Terms:** each term of these lessons, in English and as Korean texts write it, is in [the glossary](docs/glossary.md).

# %%
from lessonkit.runtimes import show_cost

show_cost("08")

# %%
import importlib.util
import math
import pathlib
import sys
import time
from typing import NamedTuple

import matplotlib.pyplot as plt
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from threadpoolctl import threadpool_limits

from minitransformer import backend

backend.set_default_dtype("float64")   # new parameters in float64: gradient checks need it (lesson 0)
np.set_printoptions(precision=4, suppress=True, linewidth=100)
plt.rcParams.update({"figure.dpi": 80, "axes.grid": True, "grid.alpha": 0.3})

# %%
from minitransformer.gradcheck import gradcheck
from minitransformer.layers.attention import (MultiHeadAttention, attention_forward,
                                              softmax_lastaxis)
from minitransformer.layers.linear import init_weight

# %% [markdown]
# ## 1. The problem: a word that points many words back
#
# §1 of the paper: a recurrent network produces a hidden state $h_t$ from $h_{t-1}$ and the
# input at position $t$. To compute $h_t$ you must already have $h_{t-1}$, so the positions
# of one sentence cannot be computed at the same time, and the longer the sentence, the
# longer the chain; batching more sentences helps only until memory runs out (§12 below
# measures it; §11 measures the tricks that made recurrence cheaper without removing the chain).
#
# §2: convolutional models (the Extended Neural GPU, ByteNet, ConvS2S) compute every
# position at once, but one layer only relates positions within its kernel. To relate two
# distant positions the signal has to climb through layers, and the number of operations
# grows with the distance: linearly for ConvS2S, logarithmically for ByteNet's dilated
# convolutions. In the Transformer it is a constant: one self-attention layer relates any two
# positions. (The paper names the price too: averaging many positions blurs them, which
# multi-head attention counteracts; lesson 2, §6, measures both.)
#
# Why care? Which word does *he* refer to in this sentence?

# %%
sentence = ("The old fisherman , who had sold his catch at the harbour market every morning for "
            "forty years , through winter storms and quiet summers alike , finally told his "
            "daughter that he would sell the boat .")
words = sentence.split()
i_ref, i_he = words.index("fisherman"), words.index("he")
print(" ".join(f"[{w}]" if i in (i_ref, i_he) else w for i, w in enumerate(words)))
print(f"'fisherman' is token {i_ref}, 'he' is token {i_he}: {i_he - i_ref} tokens apart")
# The text below: 30 tokens apart, so 30 recurrent steps, or 15 convolutions of width 3 (each reaches 2 further).
assert i_he - i_ref == 30 and math.ceil((i_he - i_ref) / (3 - 1)) == 15


# %% [markdown]
# To resolve *he*, the model must bring information from *fisherman* to the position of
# *he*, 30 tokens later. In a recurrent network that information is handed from state to
# state 30 times, squeezed each time through the same fixed-size vector; in a stack of
# convolutions of width 3 it must climb 15 layers; in self-attention it is one step.
# Section 5 measures these numbers.
#
# ## 2. Three layers, written small
#
# Every layer below maps a sequence $x$ of $n$ vectors to a sequence $y$ of $n$ vectors of
# width $d$. Shapes follow the package: `x: (B, n, d)` for $B$ sentences.
#
# ### 2.1 A recurrent layer
#
# The simplest recurrent layer (Elman's): for $t = 0, 1, \dots, n-1$,
#
# $$z_t = x_t W_x + h_{t-1} W_h + b,\qquad h_t = \tanh(z_t),\qquad h_{-1} = 0,$$
#
# with $W_x \in \mathbb{R}^{d_\text{in} \times d}$, $W_h \in \mathbb{R}^{d \times d}$. The
# input products $x_t W_x$ do not depend on each other, so they are one matrix product for
# all positions. The recurrent products $h_{t-1} W_h$ are a loop: there is no way to start
# step $t$ before step $t-1$ has finished. (The recurrent networks §1 names, LSTMs and gated
# recurrent units, compute four or three gates per step, each with its own $W_x$ and $W_h$;
# the loop is the same.)

# %%
class RecurrentCache(NamedTuple):
    x: object      # (B, n, d_in)
    H: object      # (B, n, d)  the hidden states h_0 .. h_{n-1}
    W_x: object    # (d_in, d)
    W_h: object    # (d, d)


def recurrent_forward(x, W_x, W_h, b):
    """x: (B, n, d_in) -> H: (B, n, d), with h_t = tanh(x_t W_x + h_{t-1} W_h + b), h_{-1} = 0."""
    B, n, _ = x.shape
    d = W_h.shape[0]
    U = backend.matmul(x, W_x)                       # (B, n, d): x_t W_x for every t, one product
    U += b
    H = np.empty((B, n, d), dtype=x.dtype)
    h = np.zeros((B, d), dtype=x.dtype)
    for t in range(n):                               # the sequential part: step t needs h_{t-1}
        h = np.tanh(U[:, t] + backend.matmul(h, W_h))    # (B, d)
        H[:, t] = h
    return H, RecurrentCache(x, H, W_x, W_h)


# %% [markdown]
# **Backward through time.** The loss $L$ reads the outputs $H$; call $\delta H_t = \partial L /
# \partial h_t$ what arrives *directly* from above. But $h_t$ also feeds step $t+1$, through
# $z_{t+1} = \dots + h_t W_h$, so the whole gradient of $h_t$ has two parts:
#
# $$\bar h_t = \delta H_t + \delta z_{t+1} W_h^\top \quad(\bar h_{n-1} = \delta H_{n-1}),\qquad
# \delta z_t = \bar h_t \odot (1 - h_t^2),$$
#
# using $\tanh'(z) = 1 - \tanh^2(z)$, written with the output $h_t$ we saved. The backward is a
# loop too, from $t = n-1$ down to $0$: $\bar h_t$ needs $\delta z_{t+1}$. Once every
# $\delta z_t$ is known, the rest is the linear layer's rule
# ([derivations §1](docs/derivations.md#1-linear-layer)) summed over time, because the
# same weights are used at every step:
#
# $$\delta W_x = \sum_t x_t^\top \delta z_t,\qquad \delta W_h = \sum_t h_{t-1}^\top \delta z_t,
# \qquad \delta b = \sum_t \delta z_t,\qquad \delta x_t = \delta z_t W_x^\top .$$
#
# Note $h_{t-1}$, not $h_t$, in $\delta W_h$: step $t$ multiplied $W_h$ by the state it received.

# %%
def recurrent_backward_step(dh, t, cache):
    """One step back through time. dh: (B, d), the whole dL/dh_t (direct + through step t+1).
    Returns dz_t and dL/dh_{t-1} through step t (what step t hands back to step t-1)."""
    dz = dh * (1.0 - cache.H[:, t] ** 2)             # tanh'(z_t) = 1 - h_t²
    return dz, backend.matmul(dz, cache.W_h.T)       # z_t = ... + h_{t-1} W_h


def recurrent_backward(dH, cache):
    """dH = dL/dH: (B, n, d) -> dx (B, n, d_in), dW_x (d_in, d), dW_h (d, d), db (d,)."""
    x, H, W_x, _ = cache                             # W_h is read in recurrent_backward_step
    B, n, d = H.shape
    dZ = np.empty_like(H)                            # dz_t for every t
    dh_from_later = np.zeros((B, d), dtype=H.dtype)  # nothing comes after the last step
    for t in reversed(range(n)):                     # sequential too: t needs t+1
        dZ[:, t], dh_from_later = recurrent_backward_step(dH[:, t] + dh_from_later, t, cache)
    H_prev = np.concatenate([np.zeros((B, 1, d), dtype=H.dtype), H[:, :-1]], axis=1)   # h_{t-1}
    dW_h = backend.matmul(H_prev.reshape(-1, d).T, dZ.reshape(-1, d))
    dW_x = backend.matmul(x.reshape(-1, x.shape[-1]).T, dZ.reshape(-1, d))
    db = dZ.sum(axis=(0, 1))
    dx = backend.matmul(dZ, W_x.T)
    return dx, dW_x, dW_h, db


# %% [markdown]
# The gradient check: $L = \sum H \odot G$ for a fixed random $G$, every entry of every
# input and parameter compared with its central difference (float64).

# %%
rng = np.random.default_rng(0)
B, n, d_in, d = 2, 6, 3, 4
x = rng.standard_normal((B, n, d_in))
W_x, W_h, b = init_weight(d_in, d, rng), init_weight(d, d, rng), 0.1 * rng.standard_normal(d)
H, cache = recurrent_forward(x, W_x, W_h, b)
G = rng.standard_normal(H.shape)
report = gradcheck(lambda: (recurrent_forward(x, W_x, W_h, b)[0] * G).sum(),
                   {"x": x, "W_x": W_x, "W_h": W_h, "b": b},
                   dict(zip(["x", "W_x", "W_h", "b"], recurrent_backward(G, cache))))
print(report)
report.assert_ok()


# %% [markdown]
# ### 2.2 A causal 1-D convolution
#
# A convolution of kernel width $k$ mixes each position with its $k-1$ predecessors, with
# one weight matrix per offset. We write the **causal** form (the output at $t$ reads only
# inputs at $t$ and before), as a decoder needs and as ByteNet's decoder and WaveNet use;
# a centred kernel reaches half as far on each side. With dilation $\delta$ the taps are
# $\delta$ apart:
#
# $$y_t = b + \sum_{j=0}^{k-1} x_{t - j\delta}\, W_j,\qquad x_s = 0 \text{ for } s < 0,
# \qquad W_j \in \mathbb{R}^{d_\text{in} \times d_\text{out}}.$$
#
# Each tap $j$ is one matrix product over all positions at once (the inputs shifted by
# $j\delta$), and no tap needs another tap's result.
#
# **Backward.** $x_s$ reaches $y_{s + j\delta}$ through $W_j$, for every $j$ with
# $s + j\delta < n$; $W_j$ is used at every $t \ge j\delta$:
#
# $$\delta x_s = \sum_{j:\ s + j\delta < n} \delta y_{s + j\delta}\, W_j^\top,\qquad
# \delta W_j = \sum_{t \ge j\delta} x_{t - j\delta}^\top\, \delta y_t,\qquad \delta b = \sum_t \delta y_t .$$

# %%
class ConvCache(NamedTuple):
    x: object        # (B, n, d_in)
    W: object        # (k, d_in, d_out)
    dilation: int


def conv1d_forward(x, W, b, dilation=1):
    """Causal convolution. x: (B, n, d_in), W: (k, d_in, d_out), b: (d_out,) -> y: (B, n, d_out)."""
    B, n, _ = x.shape
    y = np.zeros((B, n, W.shape[2]), dtype=x.dtype)
    y += b
    for j in range(W.shape[0]):                      # k products over all positions; none waits for another
        s = j * dilation
        if s < n:
            y[:, s:] += backend.matmul(x[:, :n - s], W[j])    # y_t += x_{t-s} W_j
    return y, ConvCache(x, W, dilation)


def conv1d_backward(dy, cache):
    """dy: (B, n, d_out) -> dx (B, n, d_in), dW (k, d_in, d_out), db (d_out,)."""
    x, W, dilation = cache
    _, n, d_in = x.shape
    dx, dW = np.zeros_like(x), np.zeros_like(W)
    for j in range(W.shape[0]):
        s = j * dilation
        if s < n:
            dx[:, :n - s] += backend.matmul(dy[:, s:], W[j].T)                      # x_t fed y_{t+s}
            dW[j] = backend.matmul(x[:, :n - s].reshape(-1, d_in).T, dy[:, s:].reshape(-1, W.shape[2]))
    return dx, dW, dy.sum(axis=(0, 1))


for dilation in (1, 2):
    k, d_out = 3, 5
    x = rng.standard_normal((2, 7, 4))
    W, b = rng.standard_normal((k, 4, d_out)) / np.sqrt(k * 4), rng.standard_normal(d_out)
    y, cache = conv1d_forward(x, W, b, dilation)
    G = rng.standard_normal(y.shape)
    report = gradcheck(lambda: (conv1d_forward(x, W, b, dilation)[0] * G).sum(),
                       {"x": x, "W": W, "b": b}, dict(zip(["x", "W", "b"], conv1d_backward(G, cache))))
    print(f"dilation {dilation}:\n{report}")
    report.assert_ok()


# %% [markdown]
# ### 2.3 Self-attention, full and restricted
#
# Self-attention is the package's `MultiHeadAttention` (lesson 2) with queries, keys and
# values all projected from the same $x$:
# $Q = xW^Q$, $K = xW^K$, $V = xW^V$, then Eq. (1), $\mathrm{softmax}(QK^\top/\sqrt{d_k})V$,
# then $W^O$. Every query scores every key: $n^2$ dot products of length $d$.
#
# **Restricted self-attention** (§4) lets query $i$ look only at the keys near it. We take
# the neighbourhood to be the keys $j$ with $|i - j| \le r$: $r$ on each side, a window of
# $2r+1$. (The paper's $r$ is the size of the neighbourhood, so its $r$ is our $2r+1$; the
# $O(\cdot)$ are the same.) There are two ways to compute it:
#
# * **a band mask** on full attention: correct, and the package's backward works unchanged,
#   but it still computes all $n^2$ scores and throws most away;
# * **windows**: give each query its own $2r+1$ keys (a strided view, no copy) and run the
#   package's `attention_forward` on the windows: $O(r \cdot n \cdot d)$ work. The ends of
#   the sequence are padded, and the padding masked.

# %%
def band_mask(n, r):
    """(1, 1, n, n) bool, True where |i - j| <= r: query i may attend to key j."""
    i = np.arange(n)
    return (np.abs(i[:, None] - i[None, :]) <= r)[None, None]


def restricted_attention_forward(Q, K, V, r):
    """Q, K, V: (B, h, n, d_k); query i attends to the keys j with |i - j| <= r. -> (B, h, n, d_k)."""
    n, w = Q.shape[-2], 2 * r + 1
    pad = [(0, 0)] * (Q.ndim - 2) + [(r, r), (0, 0)]
    K_win = sliding_window_view(np.pad(K, pad), w, axis=-2).swapaxes(-1, -2)   # (B, h, n, w, d_k)
    V_win = sliding_window_view(np.pad(V, pad), w, axis=-2).swapaxes(-1, -2)
    j = np.arange(n)[:, None] - r + np.arange(w)[None, :]                      # key index of each slot
    inside = ((j >= 0) & (j < n))[None, None, :, None, :]                      # (1, 1, n, 1, w)
    out, _ = attention_forward(Q[..., None, :], K_win, V_win, inside)          # one query per window
    return out[..., 0, :]


def restricted_mha_forward(mha, x, r):
    """MultiHeadAttention's projections (public methods) around windowed attention."""
    Q, K, V = mha.project_qkv(x)
    return mha.output(restricted_attention_forward(Q, K, V, r))


mha = MultiHeadAttention(8, 2, rng)
x = rng.standard_normal((2, 12, 8))
r = 2
banded = mha.forward(x, mask=band_mask(12, r))
windowed = restricted_mha_forward(mha, x, r)
print(f"windows vs band mask: max |difference| = {np.abs(banded - windowed).max():.1e}")

# The band mask's backward is the package's; check it, and see where the gradient goes.
G = np.zeros_like(banded)
G[:, -1] = rng.standard_normal((2, 8))              # a loss that reads only the last position
mha.zero_grad()
dx = mha.backward(G)
report = gradcheck(lambda: (mha.forward(x, mask=band_mask(12, r)) * G).sum(), {"x": x}, {"x": dx})
print(report)
report.assert_ok()
reached = np.flatnonzero(np.abs(dx).sum(axis=(0, 2)))
print("positions whose input gets a gradient from output 11:", reached)
assert list(reached) == [9, 10, 11]                   # as the text below says


# %% [markdown]
# One restricted layer connects output 11 to inputs 9, 10, 11 only. Keep that in mind for
# the path length (§5).
#
# ## 3. Counting: FLOPs and sequential operations
#
# Every matrix product in these layers, ours and the package's, goes through
# `backend.matmul`. Wrapping that one function counts the calls and their FLOPs exactly
# (a multiply-add is 2 FLOPs; the elementwise work, `tanh`, softmax, is left out: it is
# $O(n \cdot d)$ or $O(n^2)$, small next to the products):
#
# $$\text{FLOPs}\big((m \times p)\cdot(p \times q)\big) = 2\,m\,p\,q .$$

# %%
def matmul_flops(a_shape, b_shape):
    """FLOPs of backend.matmul(a, b), batch axes included."""
    if len(b_shape) == 2:
        return 2 * math.prod(a_shape[:-1]) * a_shape[-1] * b_shape[-1]
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    return 2 * math.prod(batch) * a_shape[-2] * a_shape[-1] * b_shape[-1]


class count_matmuls:
    """with count_matmuls() as c: ...  -> c.calls, c.flops of every backend.matmul inside."""

    def __enter__(self):
        self.calls, self.flops, self._original = 0, 0, backend.matmul

        def counting(a, b):
            self.calls += 1
            self.flops += matmul_flops(a.shape, b.shape)
            return self._original(a, b)

        backend.matmul = counting
        return self

    def __exit__(self, *exc):
        backend.matmul = self._original


# %% [markdown]
# Each layer below has width $d$ and one sentence ($B = 1$); self-attention has $h = 1$ head
# (the FLOPs do not depend on $h$: lesson 2). What our code does, product by product:
#
# | layer | products | FLOPs |
# | --- | --- | --- |
# | recurrent | $xW_x$ once; $h_{t-1}W_h$ at each of $n$ steps | $2nd^2 + 2nd^2 = 4nd^2$ |
# | convolution, width $k$ | one per tap; tap $j$ skips the $j\delta$ padded rows | $2d^2\,(kn - \delta\,k(k-1)/2)$ for $n > (k-1)\delta$ |
# | self-attention | $xW^{QKV}$, $QK^\top$, $AV$, $\cdot W^O$ | $6nd^2 + 2n^2d + 2n^2d + 2nd^2 = 8nd^2 + 4n^2d$ |
# | restricted, $r$ per side | the same projections; scores and sum over $2r+1$ slots | $8nd^2 + 4n(2r+1)d$ |

# %%
def make_layers(d, k, r, rng):
    """One layer of each kind, width d; name -> function of x (1, n, d)."""
    W_x, W_h, b = init_weight(d, d, rng), init_weight(d, d, rng), np.zeros(d, dtype=backend.default_dtype())
    W_conv = np.stack([init_weight(d, d, rng) for _ in range(k)]) / math.sqrt(k)   # a Python float keeps the dtype
    mha = MultiHeadAttention(d, 1, rng)
    return {
        "recurrent": lambda x: recurrent_forward(x, W_x, W_h, b)[0],
        "conv": lambda x: conv1d_forward(x, W_conv, b)[0],
        "attention": lambda x: mha.forward(x),
        "restricted": lambda x: restricted_mha_forward(mha, x, r),
    }


def formula_flops(name, n, d, k, r):
    return {"recurrent": 4 * n * d * d,
            "conv": 2 * d * d * (k * n - k * (k - 1) // 2),
            "attention": 8 * n * d * d + 4 * n * n * d,
            "restricted": 8 * n * d * d + 4 * n * (2 * r + 1) * d}[name]


k, r, d = 3, 8, 64
layers = make_layers(d, k, r, rng)
print(f"d = {d}, k = {k}, r = {r}       counted FLOPs (= formula?)          matmul calls")
for n in (16, 64, 256):
    x = rng.standard_normal((1, n, d))
    row = []
    for name, layer in layers.items():
        with count_matmuls() as c:
            layer(x)
        assert c.flops == formula_flops(name, n, d, k, r), (name, n, c.flops)
        row.append((name, c.flops, c.calls))
    print(f"n = {n:3d}: " + "  ".join(f"{name} {fl / 1e6:6.2f}M" for name, fl, _ in row)
          + "  | " + " ".join(f"{calls}" for _, _, calls in row))
print("every count equals its formula exactly")

# %% [markdown]
# The FLOPs grow as Table 1 says: the recurrent layer and the convolution linearly in $n$,
# attention's $4n^2d$ quadratically. The last column is the number of matrix-product calls
# of one forward: **$n + 1$ for the recurrent layer, and a constant for the others.**
#
# ### Sequential operations
#
# A call count alone is not the point: the convolution's 3 calls could run at the same time
# (each reads only $x$), attention's 4 calls form a fixed chain (projections, scores,
# weighted sum, output) whatever $n$ is, while the recurrent layer's $n$ calls form a chain
# in which **each call needs the previous call's result**. That chain is what §4 calls
# sequential operations: $O(n)$ for recurrence, $O(1)$ for the rest.
#
# A direct test of "needs the previous result": split the sentence in two halves and compute
# the second half's outputs *without waiting for the first half's outputs*, from the inputs
# alone. A convolution needs the $k-1$ inputs before the cut; attention needs all inputs (as
# keys and values); the recurrent layer needs $h$ at the cut, which is an output of the first
# half, so starting from $h = 0$ gives wrong answers.

# %%
n, d, half = 64, 16, 32
x = rng.standard_normal((1, n, d))
W_x, W_h, b = init_weight(d, d, rng), init_weight(d, d, rng), np.zeros(d)
W_conv = np.stack([init_weight(d, d, rng) for _ in range(k)])
mha = MultiHeadAttention(d, 1, rng)

full = {"recurrent": recurrent_forward(x, W_x, W_h, b)[0][:, half:],
        "conv": conv1d_forward(x, W_conv, b)[0][:, half:],
        "attention": mha.forward(x)[:, half:]}
second_half_alone = {
    "recurrent": recurrent_forward(x[:, half:], W_x, W_h, b)[0],             # h starts at 0: it must not
    "conv": conv1d_forward(x[:, half - (k - 1):], W_conv, b)[0][:, k - 1:],  # k-1 inputs of overlap
    "attention": mha.forward(x[:, half:], x)}                                # queries: second half; keys: all inputs
for name in full:
    err = np.abs(full[name] - second_half_alone[name]).max()
    print(f"{name:9s}: second half computed from inputs only, max |error| = {err:.1e}")

# %% [markdown]
# The convolution and attention can hand the two halves (or $n$ pieces) to different
# processors; the recurrent layer cannot: its second half starts from the wrong state, and
# the right one exists only after the first half has run.
#
# ## 4. Cost per layer: time, FLOPs, and where $n < d$ favours attention
#
# Timing on a shared machine is noisy, so: **one BLAS thread** (in a trial on this shared
# 2-core machine, with the other core busy, two threads made the same layer calls anywhere
# from as fast as one thread to far slower, by a different amount on every run); the **CPU time of that thread**
# (`time.thread_time`), a clock that stops while the operating system runs someone else's
# process, so it measures the layer's own work (on an idle core it equals wall time); and
# the **minimum** over repeats, each repeat looping the call for a few milliseconds (noise
# only ever adds time). Float32 as in training, one sentence. The full sweep ran offline with
# `lessons/experiments/lesson08_table1.py`; here we load its JSON and re-run a small part
# live, with the layers of this notebook. First, a check that the script measured the same
# layers we wrote:

# %%
spec = importlib.util.spec_from_file_location("lesson08_table1", "experiments/lesson08_table1.py")
table1 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(table1)

x = rng.standard_normal((2, 9, 6))
W_x, W_h, b = init_weight(6, 6, rng), init_weight(6, 6, rng), rng.standard_normal(6)
W_conv = rng.standard_normal((3, 6, 6))
mha = MultiHeadAttention(6, 2, rng)
same = {
    "recurrent": np.abs(recurrent_forward(x, W_x, W_h, b)[0] - table1.recurrent_forward(x, W_x, W_h, b)).max(),
    "conv (dilation 2)": np.abs(conv1d_forward(x, W_conv, b, 2)[0] - table1.conv1d_forward(x, W_conv, b, 2)).max(),
    "restricted": np.abs(restricted_mha_forward(mha, x, 2) - table1.restricted_mha_forward(mha, x, 2)).max(),
}
print("script vs notebook, max |difference|:", {name: float(v) for name, v in same.items()})
assert max(same.values()) < 1e-12

# %%
import json

with open("experiments/lesson08_table1.json") as f:
    sweep = json.load(f)
made = sweep["provenance"][0]                    # commit, command, dates, machine, BLAS threads, load
print("offline sweep:", made["command"], "at commit", made["commit"][:10])
print(f"  {made['started']} on {made['machine']['cpu']}, {made['machine']['cores']} cores, "
      f"NumPy {made['machine']['numpy']}, {sweep['settings']['dtype']}, "
      f"{sweep['settings']['blas_threads']} BLAS thread, load average "
      f"{made['load_average']['start'][0]:.1f} -> {made['load_average']['end'][0]:.1f}, "
      f"{made['wall_seconds']} s")
wall_over_cpu = np.concatenate([np.ravel(np.array(sweep["n_sweep"]["wall_s"][name])
                                         / np.array(sweep["n_sweep"]["time_s"][name]))
                                for name in sweep["n_sweep"]["time_s"]])
print(f"  wall-clock minima / CPU-time minima, measured separately: median {np.median(wall_over_cpu):.2f}, "
      f"from {wall_over_cpu.min():.2f} to {wall_over_cpu.max():.2f} (above 1: time other processes took)")

# The live piece: the same layers of this notebook, d = 64, n up to 256, float32, one BLAS thread, measured by
# the script's own function (FLOPs and calls counted, CPU time timed).
names = table1.LIVE["names"]
live_n, d = table1.LIVE["n"], table1.LIVE["d"]
backend.set_default_dtype("float32")
layers = make_layers(d, k, r, rng)
backend.set_default_dtype("float64")

# The record's live checks (lessons/experiments/README.md): FLOPs and calls exactly, and the growth of the
# time from n = 64 to 256 as a log-log slope, within the tolerance the script measured by re-running it.
sys.path.insert(0, str(pathlib.Path("experiments").resolve()))
import _record  # lessons/experiments/_record.py

slope_check = next(c for c in sweep["live_check"] if c["metric"].startswith("log-log slope"))


def live_slopes(piece):
    """The live piece's slopes from n = 64 to 256, in the record's order of layers."""
    by_layer = table1.growth_slopes(live_n, piece["time_s"])
    return [by_layer[name] for name in names]


with threadpool_limits(1):
    live = table1.live_piece(layers, rng)
    rounds = 1
    # A busy machine only ever adds time, and one slow repeat bends a slope (a run of lesson 8 beside
    # two busy processes moved the recurrent slope by 0.29 in one round of five). So on a disagreement,
    # measure again, keeping each point's minimum, up to 5 rounds.
    while rounds < 5 and not _record.agrees(slope_check, live_slopes(live)):
        live = table1.keep_minimum(live, table1.live_piece(layers, rng))
        rounds += 1
live_time = live["time_s"]
for name in names:
    print(f"live {name:10s}" + "".join(f"  n={n}: {t * 1e3:6.3f} ms" for n, t in zip(live_n, live_time[name])))
print(f"(each time: the minimum over {rounds} round{'s' if rounds > 1 else ''} of {table1.LIVE['repeats']} repeats)")

slopes = live_slopes(live)
for check in sweep["live_check"]:
    key = "flops" if check["metric"].startswith("matmul FLOPs") else "calls" if check["metric"].startswith("matmul calls") else "slope"
    value = slopes if key == "slope" else [v for name in names for v in live[key][name]]
    _record.assert_live(check, value)
print("the live piece agrees with the record: FLOPs and calls exactly; time slopes n = 64 -> 256 "
      + ", ".join(f"{name} {p:.2f}" for name, p in zip(names, slopes))
      + f" (record: {', '.join(f'{v:.2f}' for v in slope_check['recorded'])}, "
      f"tolerance ±{slope_check['tolerance']})")

# %% [markdown]
# Time and FLOPs against $n$ (at $d = 64$), time against $d$ (at $n = 64$), and the
# matrix-product calls of §3 against $n$ (the sequential operations). Solid lines and
# dots: the offline sweep; open circles: the live run (another moment, another load: only
# its shape should agree). Dashed: Table 1's formula for each layer, $c \cdot n^2 d$,
# $c \cdot n d^2$, $c \cdot k n d^2$, $c \cdot r n d$, with the one constant $c$ chosen to
# pass through the largest measurement.

# %%
colors = {"recurrent": "C0", "conv": "C1", "attention": "C2", "restricted": "C3"}
table1_cost = {"recurrent": lambda n, d: n * d * d, "conv": lambda n, d: k * n * d * d,
               "attention": lambda n, d: n * n * d, "restricted": lambda n, d: r * n * d}
ns = np.array(sweep["n_sweep"]["n"])
ds = np.array(sweep["d_sweep"]["d"])
d_fixed, n_fixed = sweep["n_sweep"]["d"], sweep["d_sweep"]["n"]

fig, axes = plt.subplots(1, 4, figsize=(19, 4.2))
for name in names:
    t_n = np.array(sweep["n_sweep"]["time_s"][name][0])
    t_d = np.array([row[0] for row in sweep["d_sweep"]["time_s"][name]])
    f_n = np.array(sweep["n_sweep"]["flops"][name][0])
    c = colors[name]
    axes[0].loglog(ns, t_n * 1e3, "o-", color=c, label=name)
    axes[0].loglog(ns, t_n[-1] * 1e3 * table1_cost[name](ns, d_fixed) / table1_cost[name](ns[-1], d_fixed), "--", color=c)
    axes[0].loglog(live_n, np.array(live_time[name]) * 1e3, "o", mfc="none", color=c, ms=9)
    axes[1].loglog(ns, f_n, "o-", color=c, label=name)
    axes[3].loglog(ns, sweep["n_sweep"]["calls"][name][0], "o-", color=c, label=name)
    axes[2].loglog(ds, t_d * 1e3, "o-", color=c, label=name)
    axes[2].loglog(ds, t_d[-1] * 1e3 * table1_cost[name](n_fixed, ds) / table1_cost[name](n_fixed, ds[-1]), "--", color=c)
t_one = np.array(sweep["n_sweep"]["time_s"]["recurrent FLOPs as one product"][0])
axes[0].loglog(ns, t_one * 1e3, "x:", color="C0", label="recurrent FLOPs\nas one product")
axes[0].set(title=f"time per layer, d = {d_fixed}", xlabel="n", ylabel="ms")
axes[1].set(title=f"matrix-product FLOPs (counted), d = {d_fixed}", xlabel="n", ylabel="FLOPs")
axes[2].set(title=f"time per layer, n = {n_fixed}", xlabel="d", ylabel="ms")
axes[3].loglog(ns, ns, ":", color="gray", label="n")
axes[3].set(title="matmul calls per layer (counted);\nthe recurrent ones form a chain", xlabel="n", ylabel="calls")
axes[0].legend(fontsize=8)
axes[3].legend(fontsize=8)
fig.tight_layout()
plt.show()


def slope(xs, ys, last=4):
    """The exponent p of y ∝ x^p over the last points (a least-squares line in log-log)."""
    return np.polyfit(np.log(xs[-last:]), np.log(ys[-last:]), 1)[0]


p_n = {name: slope(ns, np.array(sweep["n_sweep"]["time_s"][name][0])) for name in names}
q_d = {name: slope(ds, np.array([row[0] for row in sweep["d_sweep"]["time_s"][name]])) for name in names}
p_n_small = {name: slope(ns[:4], np.array(sweep["n_sweep"]["time_s"][name][0][:4])) for name in names}
for name in names:
    print(f"{name:10s} time ∝ n^{p_n[name]:.2f} (n = {ns[-4]}..{ns[-1]}), n^{p_n_small[name]:.2f} (n = {ns[0]}..{ns[3]}),"
          f"  ∝ d^{q_d[name]:.2f} (d = {ds[-4]}..{ds[-1]})")
ratio = np.array(sweep["n_sweep"]["time_s"]["recurrent"][0]) / t_one
print(f"the recurrent loop vs the same FLOPs as one product: {ratio.min():.0f}x to {ratio.max():.0f}x slower")

# %% [markdown]
# What the plots show, read against Table 1 (the exponents are the fits printed above, over
# the largest four $n$ or $d$ of the offline sweep; the sentences are rendered from them):

# %%
from lessonkit.prose import claim, claim_true, show_markdown


def exponent_words(p, table_p):
    """How a measured exponent reads against the table's."""
    if abs(p - table_p) <= 0.15:
        return f"close to Table 1's {table_p}"
    return f"{'below' if p < table_p else 'above'} Table 1's {table_p}"


claim_true("attention's time grows faster than linearly in n at large n", p_n["attention"] > 1.3, f"p = {p_n['attention']:.2f}")
claim_true("restricted attention grows more slowly than full attention", p_n["restricted"] < p_n["attention"],
           f"{p_n['restricted']:.2f} vs {p_n['attention']:.2f}")
show_markdown("\n".join([
    f"* **Attention** grows like $n^{{{p_n['attention']:.2f}}}$ at the largest $n$ ({exponent_words(p_n['attention'], 2)}), "
    f"and like $n^{{{p_n_small['attention']:.2f}}}$ at the smallest ($n = {ns[0]}..{ns[3]}$), where its FLOPs are "
    "mostly the projections, $8nd^2$, linear in $n$ (and the fixed cost of each call flattens the time further): "
    "Table 1's row lists only the $n^2 d$ part, the part that relates positions to each other.",
    f"* **Recurrent** and **convolution** grow as $n^{{{p_n['recurrent']:.2f}}}$ and $n^{{{p_n['conv']:.2f}}}$, "
    f"{exponent_words(p_n['recurrent'], 1)} and {exponent_words(p_n['conv'], 1)}. Against $d$ (at $n = {n_fixed}$, "
    f"$d = {ds[-4]}..{ds[-1]}$) they grow as $d^{{{q_d['recurrent']:.2f}}}$ ({exponent_words(q_d['recurrent'], 2)}) "
    f"and $d^{{{q_d['conv']:.2f}}}$ ({exponent_words(q_d['conv'], 2)}), although the FLOPs of both grow as $d^2$ "
    "(counted, §3): a time exponent below 2 is a fixed cost per matrix-product call that still counts at these "
    "widths, and the recurrent layer pays it $n$ times per forward, the convolution $k$ times.",
    f"* Against $d$ at $n = {n_fixed}$, attention grows as $d^{{{q_d['attention']:.2f}}}$, not like Table 1's "
    "$n^2 d$ (exponent 1 in $d$): with $n < d$ its projections, $8nd^2$, are most of its work. That is the regime "
    "the paper argues for.",
    f"* **Restricted** attention grows as $n^{{{p_n['restricted']:.2f}}}$ over $n = {ns[-4]}..{ns[-1]}$: "
    f"{exponent_words(p_n['restricted'], 1)}, since its FLOPs, $8nd^2 + 4n(2r+1)d$, are linear in $n$ but each "
    "window is a tiny product whose fixed cost is paid per query, and that share shrinks as $n$ grows. At "
    f"$n = {ns[-1]}$ it is {sweep['n_sweep']['time_s']['attention'][0][-1] / sweep['n_sweep']['time_s']['restricted'][0][-1]:.1f}"
    " times faster than full attention.",
    f"* The dotted line is the recurrent layer's FLOPs done as one product, as if every $h_{{t-1}}$ were known in "
    f"advance (it is not; this is not a recurrent layer, only a lower bound). The real loop is {ratio.min():.0f} to "
    f"{ratio.max():.0f} times slower: the price of the sequential operations, on one core. With more cores the "
    "one product could be spread over them and the loop could not, so there the gap can only grow.",
]))

# %% [markdown]
# ### When is self-attention cheaper than recurrence?
#
# §4 says a self-attention layer is faster than a recurrent one when the sequence length $n$
# is below the representation width $d$. Compare the exact counts:
#
# $$\frac{\text{FLOPs(attention)}}{\text{FLOPs(recurrent)}} = \frac{8nd^2 + 4n^2d}{4nd^2} = 2 + \frac{n}{d}.$$
#
# Counted this way, with its four projections, our attention layer always does more than
# twice the FLOPs of our plain recurrent layer. The paper's comparison is about the part
# that grows: attention's cost for relating positions, $4n^2d$, is smaller than a whole
# recurrent layer, $4nd^2$, exactly when $n < d$. Its recurrent models were LSTMs, four gates
# with two products each: $16nd^2$. Against that, attention's $n^2$ part ($4n^2d$) is smaller
# while $n < 4d$, and the whole attention layer ($8nd^2 + 4n^2d$) while $n < 2d$. (The paper adds that
# $n < d$ is the usual case for sentences cut into word pieces or byte pairs, with
# $d_\text{model} = 512$.)
# Measured time tells a different story again, because the recurrent layer's FLOPs run as
# $n$ small products in a row. The map below is the measured ratio, attention over
# recurrent, on the offline $n \times d$ grid:

# %%
grid_n, grid_d = np.array(sweep["grid"]["n"]), np.array(sweep["grid"]["d"])
t_att = np.array(sweep["grid"]["time_s"]["attention"])       # (d, n)
t_rec = np.array(sweep["grid"]["time_s"]["recurrent"])
flops_ratio = 2 + grid_n[None, :] / grid_d[:, None]

fig, axes = plt.subplots(1, 2, figsize=(13, 4.4), layout="constrained")
for ax, values, title in ((axes[0], flops_ratio, "FLOPs: attention / recurrent = 2 + n/d"),
                          (axes[1], t_att / t_rec, "measured time: attention / recurrent")):
    im = ax.imshow(np.log2(values), origin="lower", cmap="RdBu_r", vmin=-6, vmax=6, aspect="auto")
    for i in range(len(grid_d)):
        for j in range(len(grid_n)):
            ax.text(j, i, f"{values[i, j]:.2g}", ha="center", va="center", fontsize=7)
    ax.plot(np.arange(len(grid_n)), np.log2(grid_n / grid_d[0]), "k--", label="n = d")
    ax.set(title=title, xticks=range(len(grid_n)), xticklabels=grid_n, yticks=range(len(grid_d)),
           yticklabels=grid_d, xlabel="n", ylabel="d", ylim=(-0.5, len(grid_d) - 0.5))
    ax.grid(False)
    ax.legend(loc="upper left", fontsize=8)
fig.colorbar(im, ax=axes, shrink=0.85, label="log2 of the ratio (blue: attention cheaper)")
plt.show()
for i, d_ in enumerate(grid_d):
    faster = grid_n[t_att[i] < t_rec[i]]
    print(f"d = {d_:3d}: attention measured faster at n = {', '.join(map(str, faster)) or 'none'}")

time_ratio = t_att / t_rec
claim_true("measured, attention is relatively cheaper than its FLOPs say, in every cell of the grid",
           (time_ratio < flops_ratio).all(), f"cells where not: {int((time_ratio >= flops_ratio).sum())}")
band = {int(d_): grid_n[t_att[i] < t_rec[i]] for i, d_ in enumerate(grid_d)}
with_band = [d_ for d_, f in band.items() if len(f)]
without = [d_ for d_, f in band.items() if not len(f)]
claim_true("the narrowest layers have a band of n where attention is faster", grid_d[0] in with_band, str(band))
show_markdown(
    "In FLOPs the ratio never drops below 2. In time it is below the FLOP ratio in every cell: the recurrent "
    "layer's $n$ small products in a row run far below the speed of attention's few large ones (the dotted line "
    f"above: the same FLOPs as one product ran {ratio.min():.0f} to {ratio.max():.0f} times faster than the loop). "
    f"For the narrow layers, $d$ = {', '.join(map(str, with_band))}, that is enough to make attention the faster "
    "layer over a band of $n$ (printed above), which for the narrowest reaches far above the diagonal, $n \\gg d$: "
    "the loop's cost per step is mostly the fixed cost of a call, not FLOPs. At the smallest $n$ the two are closer "
    "(attention pays for its extra projections), and at the largest $n$ attention's $n^2$ takes over. "
    + (f"For the wide layers, $d$ = {', '.join(map(str, without))}, attention is slower at every $n$ of the grid, "
       "though by less than its FLOPs predict: there the loop's slowness per FLOP no longer outweighs attention's "
       "extra projections. " if without else "")
    + "So the paper's $n < d$ describes how the FLOPs grow; how efficiently each kind of work runs moves the "
    "measured boundary, on this CPU in attention's favour for narrow layers. (Cells near a ratio of 1 change "
    "between runs on a shared machine; read the pattern, not single cells.)")


# %% [markdown]
# ### "More expensive than recurrent layers, by a factor of $k$"
#
# §4: "Convolutional layers are generally more expensive than recurrent layers, by a factor of
# $k$." In Table 1's terms, $O(k \cdot n \cdot d^2)$ against $O(n \cdot d^2)$. Counted (§3), our
# convolution does $2d^2(kn - k(k-1)/2) \approx 2knd^2$ FLOPs and our recurrent layer $4nd^2$
# (its cell has two products, $x_tW_x$ and $h_{t-1}W_h$), so the counted ratio tends to $k/2$;
# a recurrent cell with more products (an LSTM's eight) moves the constant, not the factor $k$.
# Yet in the timings above the convolution is the *fastest* of the four layers. Both hold: the
# factor $k$ is a statement about arithmetic, and the timing adds how fast each layer's
# arithmetic runs. The sweep's three lines for the recurrent FLOPs tell them apart:

# %%
t_conv = np.array(sweep["n_sweep"]["time_s"]["conv"][0])
t_rec_loop = np.array(sweep["n_sweep"]["time_s"]["recurrent"][0])
f_conv = np.array(sweep["n_sweep"]["flops"]["conv"][0])
f_rec = np.array(sweep["n_sweep"]["flops"]["recurrent"][0])
print(f"d = {d_fixed}, k = {k}   FLOPs conv/recurrent   time conv/recurrent loop   time conv/(recurrent FLOPs as "
      "one product)   GFLOP/s: loop, one product, conv")
for i, n_ in enumerate(ns):
    print(f"n = {n_:5d}   {f_conv[i] / f_rec[i]:20.2f}   {t_conv[i] / t_rec_loop[i]:24.2f}   "
          f"{t_conv[i] / t_one[i]:38.2f}   {f_rec[i] / t_rec_loop[i] / 1e9:7.1f} {f_rec[i] / t_one[i] / 1e9:6.1f} "
          f"{f_conv[i] / t_conv[i] / 1e9:6.1f}")
as_one = t_conv[-4:] / t_one[-4:]
claim("the counted FLOP ratio tends to k/2", f_conv[-1] / f_rec[-1], k / 2, tol=0.01)
claim_true("the convolution is faster than the recurrent loop at every n", (t_conv < t_rec_loop).all(),
           str(np.round(t_conv / t_rec_loop, 2)))
show_markdown(
    f"Against the recurrent layer as it must run, one step after another, the convolution takes between "
    f"{(t_conv / t_rec_loop).min():.2f} and {(t_conv / t_rec_loop).max():.2f} of its time, although it does "
    f"{f_conv[-1] / f_rec[-1]:.2f} times the FLOPs: the loop's small vector-matrix products run at "
    f"{(f_rec / t_rec_loop).min() / 1e9:.0f} to {(f_rec / t_rec_loop).max() / 1e9:.0f} GFLOP/s, the convolution's "
    f"$k$ products over all positions at up to {(f_conv / t_conv).max() / 1e9:.0f}. Against the same recurrent FLOPs "
    f"done as one large product (which a recurrent layer cannot do), the convolution takes {as_one.min():.2f} to "
    f"{as_one.max():.2f} times as long at $n = {ns[-4]}..{ns[-1]}$: close to the FLOP ratio $k/2 = {k / 2:g}$. So the "
    "paper's factor $k$ is what the convolution costs when both layers' arithmetic runs equally fast (as on "
    "hardware that parallelizes the recurrent cell as well as a big product, or counted in FLOPs); on one CPU "
    "core the recurrent layer's sequential operations cost far more than the factor $k$.")

# %% [markdown]
# ### Separable convolutions
#
# §4 continues: separable convolutions "decrease the complexity considerably, to
# $O(k \cdot n \cdot d + n \cdot d^2)$", and "even with $k = n$" that equals "the combination of
# a self-attention layer and a point-wise feed-forward layer", the Transformer's own pair. A
# depthwise-separable convolution splits the $k$ full $d \times d$ matrices $W_j$ into a
# *depthwise* step, one kernel of width $k$ per channel (channel $c$ of $y$ reads only channel
# $c$ of $x$), and a *pointwise* $d \times d$ product that mixes the channels:
#
# $$z_{t,c} = \sum_{j=0}^{k-1} x_{t-j,\,c}\, w_{j,c}, \qquad y_t = z_t\, W_p + b .$$
#
# It is the full convolution of §2.2 with $W_j = \mathrm{diag}(w_j)\, W_p$, a constrained
# case. We write the depthwise step as a batched matrix product (for each channel, the
# $n \times k$ matrix of its causal windows times its $k$ weights) so that the counter of §3
# counts it like every other product.

# %%
def separable_conv_forward(x, w_depth, W_point, b):
    """Causal depthwise-separable convolution. x: (B, n, d), w_depth: (k, d), W_point: (d, d_out),
    b: (d_out,) -> y: (B, n, d_out), y_t = (sum_j x_{t-j} * w_depth[j]) W_point + b."""
    k_ = w_depth.shape[0]
    padded = np.pad(x, ((0, 0), (k_ - 1, 0), (0, 0)))                       # x_s = 0 for s < 0
    windows = sliding_window_view(padded, k_, axis=1)                      # (B, n, d, k): x_{t-k+1} .. x_t
    taps = w_depth[::-1].T[None, :, :, None]                                # (1, d, k, 1): x_{t-j} meets w_j
    z = backend.matmul(windows.transpose(0, 2, 1, 3), taps)[..., 0]        # (B, d, n): depthwise, per channel
    return backend.matmul(z.transpose(0, 2, 1), W_point) + b              # (B, n, d_out): pointwise


x = rng.standard_normal((2, 9, 6))
w_depth, W_point, b = rng.standard_normal((3, 6)), rng.standard_normal((6, 5)), rng.standard_normal(5)
as_full = conv1d_forward(x, w_depth[:, :, None] * W_point[None], b)[0]    # W_j = diag(w_j) W_p
err = np.abs(separable_conv_forward(x, w_depth, W_point, b) - as_full).max()
print(f"separable vs the full convolution with W_j = diag(w_j) W_p: max |difference| = {err:.1e}")
assert err < 1e-12

# %% [markdown]
# Counted, the depthwise step is $2knd$ FLOPs (the padded taps included) and the pointwise one
# $2nd^2$: $2knd + 2nd^2$, the paper's $O(k \cdot n \cdot d + n \cdot d^2)$. Against it, the
# package's self-attention layer ($h = 1$) and its position-wise feed-forward layer with
# $d_{ff} = 4d$ (the paper's ratio, 2048 / 512), counted by the same wrapper: $8nd^2 + 4n^2d$
# and $2 \cdot 2 \cdot n \cdot d \cdot 4d = 16nd^2$. At $k = n$:

# %%
from minitransformer.layers.feedforward import FeedForward


def counted(fn):
    with count_matmuls() as c:
        fn()
    return c.flops


d = 64
mha, ffn = MultiHeadAttention(d, 1, rng), FeedForward(d, 4 * d, rng)
W_full = np.stack([init_weight(d, d, rng) for _ in range(3)])
print(f"d = {d}: matrix-product FLOPs of one forward (one sentence), counted")
print(f"{'n':>5s} {'separable, k = 3':>17s} {'conv, k = 3':>12s} {'separable, k = n':>17s} {'attention + FFN':>16s}"
      f" {'ratio':>6s}")
sep_rows = []
for n_ in (16, 64, 256):
    x = rng.standard_normal((1, n_, d))
    sep3 = counted(lambda: separable_conv_forward(x, rng.standard_normal((3, d)), W_point=init_weight(d, d, rng),
                                                  b=np.zeros(d)))
    conv3 = counted(lambda: conv1d_forward(x, W_full, np.zeros(d)))
    sep_n = counted(lambda: separable_conv_forward(x, rng.standard_normal((n_, d)), init_weight(d, d, rng), np.zeros(d)))
    att_ffn = counted(lambda: ffn.forward(mha.forward(x)))
    assert sep3 == 2 * 3 * n_ * d + 2 * n_ * d * d and sep_n == 2 * n_ * n_ * d + 2 * n_ * d * d
    assert att_ffn == 8 * n_ * d * d + 4 * n_ * n_ * d + 16 * n_ * d * d
    sep_rows.append((n_, sep3 / conv3, sep_n / att_ffn))
    print(f"{n_:5d} {sep3:17,d} {conv3:12,d} {sep_n:17,d} {att_ffn:16,d} {sep_n / att_ffn:6.2f}")
print("every count equals its formula: separable 2knd + 2nd², attention 8nd² + 4n²d, FFN 16nd²")
claim_true("the separable convolution at k = 3 costs a fraction of the full one", all(a < 0.5 for _, a, _ in sep_rows),
           str(sep_rows))

# %% [markdown]
# The separable convolution at $k = 3$ costs less than half of the full one (asserted above; its depthwise step is
# $O(knd)$, not $O(knd^2)$). At $k = n$ it is $2n^2d + 2nd^2$ against attention + feed-forward's
# $4n^2d + 24nd^2$: the same two terms, $n^2 d$ and $n d^2$, which is the paper's "equal"; the
# constants differ (the ratio column), and they are ours to count, not Table 1's. What the
# counts cannot show is the difference the paper cares about: a separable convolution with
# $k = n$ has one fixed kernel per channel, the same weights at every position whatever the
# words, while attention computes its weights from the words themselves.

# %% [markdown]
# **Predict.** (1) After one self-attention layer over $n = 10$ positions, does output 9 depend on input 0 (is the gradient of one with respect to the other nonzero)? `"yes"` or `"no"`. (2) After one causal convolution of kernel width 3 over the same positions, on how many inputs does output 9 depend?

# %% tags=["predict"]
my_prediction_8_1 = None   # "yes" or "no"


# %% tags=["predict"]
my_prediction_8_2 = None   # a whole number


# %% tags=["reveal"]
from lessonkit.predict import reveal

from minitransformer.layers.attention import MultiHeadAttention

probe = MultiHeadAttention(8, 2, np.random.default_rng(0))
x10 = np.random.default_rng(1).standard_normal((1, 10, 8)).astype(probe.W_o.data.dtype)
probe.forward(x10)
grad_out_9 = np.zeros_like(x10)
grad_out_9[0, 9] = 1.0                                                # the gradient of output 9 alone
grad_in_9 = probe.backward(grad_out_9)
reveal(my_prediction_8_1, "yes" if np.abs(grad_in_9[0, 0]).max() > 0 else "no",
       what="output 9 depends on input 0 after one self-attention layer", choices=("yes", "no"))
kernel3 = np.random.default_rng(2).standard_normal(3)           # output t reads inputs t - 2, t - 1, t
d_conv = np.zeros(10)
d_conv[7:10] = kernel3[::-1]                                     # d output_9 / d input_j
reveal(my_prediction_8_2, int(np.count_nonzero(d_conv)), what="inputs output 9 depends on after one causal convolution of width 3")


# %% [markdown]
# ## 5. Maximum path length, measured with gradients
#
# §4's third column: the length of the shortest path a signal travels between two positions,
# input and output, through the network. The shorter, the easier it is to learn that two
# distant words belong together (the gradient that teaches it travels the same path back).
#
# We measure it for input position $0$ and output position $n-1$, the two ends. For stacks of
# layers: build a stack, run it forward, send a gradient back from output $n-1$ alone, and
# look at the gradient on input $0$. If it is exactly zero, output $n-1$ does not depend on
# input $0$; add a layer and try again. The path length is the first stack that connects them.
# Exact zeros are trustworthy here: a masked attention weight is exactly 0 (lesson 1), and a
# convolution never touches positions outside its taps.

# %%
class Conv:
    """A causal convolution layer (width d), with the forward/backward pair of §2.2."""

    def __init__(self, d, k, dilation, rng):
        self.W = np.stack([init_weight(d, d, rng) for _ in range(k)]) / math.sqrt(k)   # k taps add up
        self.b, self.dilation = np.zeros(d), dilation

    def forward(self, x):
        y, self.cache = conv1d_forward(x, self.W, self.b, self.dilation)
        return y

    def backward(self, dy):
        return conv1d_backward(dy, self.cache)[0]


class SelfAttention:
    """The package's MultiHeadAttention, optionally with a band mask (restricted to r per side)."""

    def __init__(self, d, r, rng):
        self.mha, self.r = MultiHeadAttention(d, 2, rng), r

    def forward(self, x):
        return self.mha.forward(x, mask=None if self.r is None else band_mask(x.shape[1], self.r))

    def backward(self, dy):
        return self.mha.backward(dy)


def gradient_at_input(stack, x, rng):
    """dL/dx for L = g · (output n-1 of the stack), g random: (B, n, d)."""
    y = x
    for layer in stack:
        y = layer.forward(y)
    dy = np.zeros_like(y)
    dy[:, -1] = rng.standard_normal(y.shape[-1])
    for layer in reversed(stack):
        dy = layer.backward(dy)
    return dy


def layers_until_connected(make_layer, n, d, rng, L_max=1000):
    """The smallest stack (layer L is make_layer(L)) whose output n-1 has a gradient on input 0."""
    x, stack = rng.standard_normal((1, n, d)), []
    for L in range(1, L_max + 1):
        stack.append(make_layer(L))
        if np.any(gradient_at_input(stack, x, rng)[:, 0] != 0):
            return L
    raise RuntimeError("not connected")


def recurrent_steps_until_connected(n, d, rng):
    """Back through time one step at a time from h_{n-1}: the steps taken when x_0 first gets a gradient."""
    x = rng.standard_normal((1, n, d))
    W_x, W_h = init_weight(d, d, rng), init_weight(d, d, rng)
    _, cache = recurrent_forward(x, W_x, W_h, np.zeros(d))
    dh = rng.standard_normal((1, d))                  # dL/dh_{n-1}; nothing else reads H
    for steps, t in enumerate(reversed(range(n)), start=1):
        dz, dh = recurrent_backward_step(dh, t, cache)
        if t == 0 and np.any(backend.matmul(dz, W_x.T) != 0):   # dx_0 = dz_0 W_xᵀ
            return steps
    raise RuntimeError("not connected")


# %% [markdown]
# For the recurrent layer the "path" lives inside one layer: from $x_0$ to $h_{n-1}$ the signal
# passes through the steps $t = 0, 1, \dots, n-1$, and backward through time takes the same
# steps in reverse; we count the steps. For the stacks we count layers. Five architectures,
# $n$ from 4 to 128, width $d = 8$, kernel $k = 3$, restricted attention with $r = 4$:

# %%
def path_lengths(n, k=3, r=4, d=8, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "recurrent (steps)": recurrent_steps_until_connected(n, d, rng),
        "conv, contiguous": layers_until_connected(lambda L: Conv(d, k, 1, rng), n, d, rng),
        "conv, dilated k^(l-1)": layers_until_connected(lambda L: Conv(d, k, k ** (L - 1), rng), n, d, rng),
        "restricted attention": layers_until_connected(lambda L: SelfAttention(d, r, rng), n, d, rng),
        "self-attention": layers_until_connected(lambda L: SelfAttention(d, None, rng), n, d, rng),
    }


path_n = [4, 8, 16, 32, 64, 128]
t0 = time.perf_counter()
measured = [path_lengths(n) for n in path_n]
print(f"measured in {time.perf_counter() - t0:.1f} s")
print(f"{'n':>22s}" + "".join(f"{n:6d}" for n in path_n))
for name in measured[0]:
    print(f"{name:>22s}" + "".join(f"{m[name]:6d}" for m in measured))


# %% [markdown]
# Against the formulas (solid lines, not fitted: counted from the layer definitions),
# with $k = 3$ and $r = 4$:
#
# | architecture | path length, measured as above | Table 1 / §4 |
# | --- | --- | --- |
# | recurrent | $n$ steps | $O(n)$ |
# | contiguous convolutions | $\lceil (n-1)/(k-1) \rceil$ layers | $O(n/k)$ |
# | dilated convolutions, dilation $k^{l-1}$ in layer $l$ | $\lceil \log_k n \rceil$ layers | $O(\log_k n)$ |
# | restricted self-attention, $r$ per side | $\lceil (n-1)/r \rceil$ layers | $O(n/r)$ |
# | self-attention | 1 layer | $O(1)$ |

# %%
def ceil_log(n, k):
    """The smallest L with k^L >= n, in integers (no floating-point log)."""
    L, span = 0, 1
    while span < n:
        span, L = span * k, L + 1
    return L


formulas = {
    "recurrent (steps)": lambda n: n,
    "conv, contiguous": lambda n: math.ceil((n - 1) / 2),
    "conv, dilated k^(l-1)": lambda n: ceil_log(n, 3),
    "restricted attention": lambda n: math.ceil((n - 1) / 4),
    "self-attention": lambda n: 1,
}
fine_n = np.arange(2, 129)
fig, ax = plt.subplots(figsize=(7, 4.5))
for i, name in enumerate(formulas):
    ax.plot(fine_n, [formulas[name](n) for n in fine_n], "-", color=f"C{i}", alpha=0.6)
    ax.plot(path_n, [m[name] for m in measured], "o", color=f"C{i}", label=name)
    assert all(m[name] == formulas[name](n) for n, m in zip(path_n, measured)), name
ax.set(xscale="log", yscale="log", xlabel="n (positions apart: n - 1)",
       ylabel="path length (layers, or recurrent steps)",
       title="output n-1 depends on input 0 after ... (dots: measured)")
ax.set_xticks(path_n, labels=path_n)
ax.legend(fontsize=8)
plt.show()
print("every measured path length equals its formula")

# %% [markdown]
# **What the gradient looks like.** For $n = 32$, the gradient reaching each input position
# from output $n-1$ of stacks of 1 to 10 layers: white means exactly zero (no path yet).
# The contiguous stack's reach grows by $k-1 = 2$ positions a layer, the dilated stack's
# triples, restricted attention's grows by $r = 3$, and full attention covers everything at
# once. Note the colours too: in the restricted stack the far positions are reached, but
# with far smaller gradients than the near ones (the orders of magnitude are printed under
# the picture; the colour scale stops at $10^{-6}$); every extra hop on the path multiplies
# the signal by one more attention weight, about $1/(2r+1)$ when the weights are spread over
# the window.

# %%
n, d, k_demo, r_demo, L_show = 32, 8, 3, 3, 10
rng_demo = np.random.default_rng(1)
makers = {
    "conv, contiguous (k = 3)": lambda L: Conv(d, k_demo, 1, rng_demo),
    "conv, dilated (k = 3)": lambda L: Conv(d, k_demo, k_demo ** (L - 1), rng_demo),
    "restricted attention (r = 3)": lambda L: SelfAttention(d, r_demo, rng_demo),
    "self-attention": lambda L: SelfAttention(d, None, rng_demo),
}
x = rng_demo.standard_normal((1, n, d))
grads = {}
fig, axes = plt.subplots(1, 4, figsize=(16, 3.8), layout="constrained")
for ax, (title, make) in zip(axes, makers.items()):
    stack, rows = [], []
    for L in range(1, L_show + 1):
        stack.append(make(L))
        rows.append(np.linalg.norm(gradient_at_input(stack, x, rng_demo)[0], axis=-1))
    g = np.array(rows)
    grads[title] = g
    im = ax.imshow(np.ma.masked_invalid(np.log10(np.where(g > 0, g, np.nan))),   # exact zeros: white
                   cmap="viridis", aspect="auto", vmin=-6, vmax=1,
                   extent=(-0.5, n - 0.5, L_show + 0.5, 0.5))
    ax.set(title=title, xlabel="input position j", yticks=range(1, L_show + 1))
    ax.grid(False)
axes[0].set_ylabel("layers in the stack")
fig.colorbar(im, ax=axes, shrink=0.9, label=r"$\log_{10} \|\partial (g \cdot y_{n-1}) / \partial x_j\|$")
plt.show()
g_top = grads["restricted attention (r = 3)"][-1]              # the 10-layer restricted stack
orders = np.log10(g_top.max() / g_top[g_top > 0].min())
print(f"restricted stack, {L_show} layers: gradient norms from {g_top[g_top > 0].min():.1e} (farthest reached) "
      f"to {g_top.max():.1e}: {orders:.1f} orders of magnitude")

# %% [markdown]
# **Why the length matters.** Connected is not the same as learnable. In the recurrent layer
# the gradient from $h_{n-1}$ to $x_j$ is multiplied, once per step, by
# $\mathrm{diag}(1 - h_t^2)\,W_h^\top$: over a long path it shrinks or grows geometrically.
# Below, $n = 64$, $d = 32$: the size of the gradient reaching each input from output $n-1$,
# for a recurrent layer with $W_h$ at the Glorot scale and at 3x that scale, and for one
# self-attention layer.

# %%
n, d = 64, 32
rng_g = np.random.default_rng(2)
x = rng_g.standard_normal((1, n, d))
g_last = np.zeros((1, n, d))
g_last[0, -1] = rng_g.standard_normal(d)
fig, ax = plt.subplots(figsize=(7, 4))
W_x = init_weight(d, d, rng_g)
W_h0 = init_weight(d, d, rng_g)
norms = {}                                          # gradient norm at input j, by distance (n - 1) - j
for scale in (1, 3):
    _, cache = recurrent_forward(x, W_x, scale * W_h0, np.zeros(d))
    dx = recurrent_backward(g_last, cache)[0]
    norms[f"recurrent, W_h at {scale}x Glorot"] = np.linalg.norm(dx[0], axis=-1)[::-1]
attention = MultiHeadAttention(d, 4, rng_g)
attention.forward(x)
dx = attention.backward(g_last)
norms["self-attention, one layer"] = np.linalg.norm(dx[0], axis=-1)[::-1]
for label, norm in norms.items():
    ax.semilogy(np.arange(n), norm, "o-", ms=3, label=label)
ax.set(xlabel="distance (n - 1) - j", ylabel=r"$\|\partial (g \cdot y_{n-1}) / \partial x_j\|$",
       title="gradient reaching input j from output n-1")
ax.legend(fontsize=8)
plt.show()

fade = {label: np.log10(norm[-1] / norm[0]) for label, norm in norms.items()}   # farthest input against the nearest
glorot, larger, attn = norms.values()
near, far = attn[1:n // 2].mean(), attn[n // 2:].mean()
claim_true("with Glorot weights the recurrent gradient vanishes, with 3x it explodes", fade[
    "recurrent, W_h at 1x Glorot"] < -3 and fade["recurrent, W_h at 3x Glorot"] > 3, str(fade))
claim_true("attention's farthest inputs get as much gradient as its nearest, within a factor of 2",
           0.5 < far / near < 2, f"{far:.2g} against {near:.2g}")
show_markdown(f"With Glorot weights the recurrent gradient falls by {-fade['recurrent, W_h at 1x Glorot']:.0f} "
              f"orders of magnitude over {n - 1} steps (the vanishing gradient); with $W_h$ at 3x that scale it "
              f"grows by {fade['recurrent, W_h at 3x Glorot']:.0f} instead. Attention's gradient does not care "
              f"about distance: every input is one layer away, and the farthest half of them gets "
              f"{far / near:.1f} times what the nearest half gets.")

# %% [markdown]
# **Back to the sentence.** *fisherman* and *he* are 30 tokens apart, so a path from one to the
# other spans $n = 31$ positions. Measured with the same functions:

# %%
n_sentence = i_he - i_ref + 1
assert (i_he - i_ref, n_sentence) == (30, 31)                    # the text above
for name, length in path_lengths(n_sentence).items():
    unit = "step" if "steps" in name else "layer"
    print(f"{name:22s} {length:3d} {unit}{'s' if length != 1 else ''}")

# %% [markdown]
# ## 6. Restricted self-attention: cheaper, but longer paths
#
# §4 offers restricted attention for very long sequences: look only at $r$ neighbours on each
# side. Its two Table 1 entries, measured: the cost is $8nd^2 + 4n(2r+1)d$ FLOPs (counted in §3),
# linear in $n$ and in $r$; the path length is $\lceil (n-1)/r \rceil$ layers (measured in §5).
# Below, at $n = 1024$, $d = 64$: the time against $r$ (offline sweep), and the path length
# against $r$ at $n = 64$ (measured now).

# %%
rs = np.array(sweep["r_sweep"]["r"])
fig, axes = plt.subplots(1, 2, figsize=(13, 4))
axes[0].loglog(rs, np.array(sweep["r_sweep"]["time_s"]) * 1e3, "o-", color="C3", label="restricted, measured")
axes[0].axhline(sweep["r_sweep"]["full_attention_time_s"] * 1e3, color="C2", ls="--", label="full attention, measured")
axes[0].set(title=f"time per layer, n = {sweep['r_sweep']['n']}, d = {sweep['r_sweep']['d']}",
            xlabel="r (keys on each side)", ylabel="ms")
axes[0].legend(fontsize=8)
flops_r = np.array(sweep["r_sweep"]["flops"])
assert all(f == formula_flops("restricted", sweep["r_sweep"]["n"], sweep["r_sweep"]["d"], 3, r_)
           for f, r_ in zip(flops_r, rs))

r_list, n_path = [1, 2, 4, 8, 16, 32, 63], 64
rng_r = np.random.default_rng(3)
path_r = [layers_until_connected(lambda L: SelfAttention(8, r_, rng_r), n_path, 8, rng_r) for r_ in r_list]
axes[1].loglog(r_list, path_r, "o", color="C3", label="restricted, measured")
axes[1].loglog(r_list, [math.ceil((n_path - 1) / r_) for r_ in r_list], "-", color="C3", alpha=0.5,
               label="⌈(n−1)/r⌉")
axes[1].axhline(1, color="C2", ls="--", label="full self-attention (measured: 1)")
axes[1].set(title=f"path length, n = {n_path}", xlabel="r (keys on each side)", ylabel="layers")
axes[1].set_xticks(r_list, labels=r_list)
axes[1].legend(fontsize=8)
fig.tight_layout()
plt.show()
print("path length vs r at n = 64:", dict(zip(r_list, path_r)))

# %% [markdown]
# The trade is plain: a smaller $r$ buys a cheaper layer (until the projections, $8nd^2$,
# dominate and the time flattens), and pays with a longer path. With $r = n - 1$ the window
# covers the whole sequence and restricted attention is full attention again: path length 1.
# (With windows half as wide as the sequence the windowed code is already slower than plain
# attention: fewer FLOPs, but spread over $n$ small products instead of one large one.)
#
# ## 7. Two corrections, with measurements
#
# Two of Table 1's entries are misquoted in some popular explanations of the paper. Our
# measurements settle both.
#
# **"A convolutional layer needs $O(\log_k n)$ sequential operations."** No: one
# convolutional layer needs $O(1)$. Its $k$ products read only the layer's input, so they
# (and all $n$ positions) can run at once; §3 measured a constant number of calls, and the
# second-half test above computed the later positions without waiting for the earlier
# outputs. $\log_k n$ is the *maximum path length* of a stack of dilated convolutions: the
# number of layers needed to connect the two ends (§5). The layers of a stack do run one after
# another, but that is true of every architecture's stack; Table 1 counts per layer.
#
# **"Restricting attention to $r$ neighbours reduces the maximum path length."** No: it
# *raises* it, from $O(1)$ to $O(n/r)$. What restriction reduces is the cost per layer, from
# $O(n^2 d)$ to $O(r n d)$. Full attention connects any two positions in one layer; with a
# window, a signal must hop $r$ positions per layer (§5 and §6).

# %%
calls_conv = sweep["n_sweep"]["calls"]["conv"][0]
calls_rec = sweep["n_sweep"]["calls"]["recurrent"][0]
print(f"matrix-product calls per layer, n = {ns[0]} .. {ns[-1]}:")
print(f"  convolution: {calls_conv}")
print(f"  recurrent:   {calls_rec}")
print(f"path length (layers) of dilated convolutions, k = 3, n = {path_n}: {[m['conv, dilated k^(l-1)'] for m in measured]}")
print(f"path length (layers), n = {path_n}:")
print(f"  self-attention:               {[m['self-attention'] for m in measured]}")
print(f"  restricted self-attention, r = 4: {[m['restricted attention'] for m in measured]}")


# %% [markdown]
# ## 8. Additive vs dot-product attention (§3.2.1)
#
# §3.2.1 compares the two usual attention functions. **Dot-product** (multiplicative)
# attention scores a query against a key with $q \cdot k$ (scaled by $1/\sqrt{d_k}$ in the
# Transformer). **Additive** attention (Bahdanau et al., 2014) scores them with a small
# feed-forward network with one hidden layer of width $d_a$:
#
# $$e_{ij} = v^\top \tanh(q_i W_q + k_j W_k),\qquad A = \mathrm{softmax}_\text{rows}(e),\qquad O = AV,$$
#
# with $W_q, W_k \in \mathbb{R}^{d_k \times d_a}$, $v \in \mathbb{R}^{d_a}$. The paper: the two
# have similar theoretical complexity, but dot-product attention is much faster and more
# space-efficient in practice, because it is one matrix product. Count both for $n$ queries
# and $n$ keys, $d_a = d_k = d_v$:
#
# | | dot-product | additive |
# | --- | --- | --- |
# | scores | $QK^\top$: $2n^2d_k$ (one product) | $qW_q$, $kW_k$: $4nd_k^2$; add and $\tanh$ on $n^2 d_a$ entries; $\cdot v$: $2n^2 d_a$ |
# | largest intermediate | scores, $n^2$ numbers | $\tanh(\dots)$, $n^2 d_a$ numbers |
#
# Both are $O(n^2 d)$. But additive attention builds an $n \times n \times d_a$ tensor, $d_a$
# times the memory, and most of its work is elementwise (`tanh` of every entry), which runs far
# slower per FLOP than a matrix product.

# %%
class AdditiveCache(NamedTuple):
    Q: object       # (B, n_q, d_k)
    K: object       # (B, n_k, d_k)
    V: object       # (B, n_k, d_v)
    W_q: object     # (d_k, d_a)
    W_k: object     # (d_k, d_a)
    v: object       # (d_a,)
    T: object       # (B, n_q, n_k, d_a)  tanh(q_i W_q + k_j W_k), for every pair (i, j)
    A: object       # (B, n_q, n_k)       the attention weights


def additive_attention_forward(Q, K, V, W_q, W_k, v):
    """Additive attention. Q: (B, n_q, d_k), K: (B, n_k, d_k), V: (B, n_k, d_v) -> (B, n_q, d_v)."""
    Qa = backend.matmul(Q, W_q)                      # (B, n_q, d_a)
    Ka = backend.matmul(K, W_k)                      # (B, n_k, d_a)
    T = Qa[:, :, None, :] + Ka[:, None, :, :]        # (B, n_q, n_k, d_a): one vector per pair
    np.tanh(T, out=T)
    E = backend.matmul(T, v[:, None])[..., 0]        # (B, n_q, n_k) scores
    A = softmax_lastaxis(E)                          # in place: E's buffer now holds A
    return backend.matmul(A, V), AdditiveCache(Q, K, V, W_q, W_k, v, T, A)


B, n, d_k = 2, 5, 4
Q, K, V = (rng.standard_normal((B, n, d_k)) for _ in range(3))
W_q, W_k, v = init_weight(d_k, d_k, rng), init_weight(d_k, d_k, rng), rng.standard_normal(d_k)
out, cache = additive_attention_forward(Q, K, V, W_q, W_k, v)
print("rows of A sum to 1:", np.allclose(cache.A.sum(-1), 1), "| output", out.shape,
      "| the same as the sweep script's:",
      np.allclose(out, table1.additive_attention_forward(Q, K, V, W_q, W_k, v)))

# Live: time and peak memory, n = 128 and 256, d_k = 64, float32, one BLAS thread.
import tracemalloc


def peak_bytes(fn):
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


d_k = 64
W_q, W_k = (init_weight(d_k, d_k, rng).astype(np.float32) for _ in range(2))
v = rng.standard_normal(d_k).astype(np.float32)
with threadpool_limits(1):
    for n in (128, 256):
        Q, K, V = (rng.standard_normal((1, n, d_k)).astype(np.float32) for _ in range(3))
        fns = {"additive": lambda: additive_attention_forward(Q, K, V, W_q, W_k, v),
               "dot-product": lambda: attention_forward(Q[:, None], K[:, None], V[:, None])}
        t = {name: table1.min_time(fn, repeats=5) for name, fn in fns.items()}
        m = {name: peak_bytes(fn) for name, fn in fns.items()}
        print(f"n = {n}, d_k = {d_k}: additive {t['additive'] * 1e3:.2f} ms, {m['additive'] / 2**20:.1f} MiB | "
              f"dot-product {t['dot-product'] * 1e3:.2f} ms, {m['dot-product'] / 2**20:.2f} MiB | "
              f"{t['additive'] / t['dot-product']:.0f}x the time, {m['additive'] / m['dot-product']:.0f}x the memory")

# %%
add = sweep["additive"]
add_n, add_dk = np.array(add["n"]), np.array(add["d_k"])
t_add, t_dot = np.array(add["time_s"]["additive"]), np.array(add["time_s"]["dot-product"])    # (d_k, n)
m_add, m_dot = np.array(add["peak_bytes"]["additive"]), np.array(add["peak_bytes"]["dot-product"])
fig, axes = plt.subplots(1, 3, figsize=(15, 4))
for i, dk in enumerate(add_dk):
    if dk in (8, 64, 256):
        axes[0].loglog(add_n, t_add[i] * 1e3, "o-", color=f"C{i}", label=f"additive, d_k = {dk}")
        axes[0].loglog(add_n, t_dot[i] * 1e3, "s--", color=f"C{i}", label=f"dot-product, d_k = {dk}")
j = list(add_n).index(128)
axes[1].loglog(add_dk, t_add[:, j] / t_dot[:, j], "o-", color="k", label="time")
axes[1].loglog(add_dk, m_add[:, j] / m_dot[:, j], "s--", color="C4", label="peak memory")
axes[2].loglog(add_n, m_add[list(add_dk).index(64)] / 2**20, "o-", label="additive, d_k = 64")
axes[2].loglog(add_n, m_dot[list(add_dk).index(64)] / 2**20, "s--", label="dot-product, d_k = 64")
axes[0].set(title="time", xlabel="n", ylabel="ms")
axes[1].set(title="additive / dot-product at n = 128", xlabel="d_k = d_a", ylabel="ratio")
axes[2].set(title="peak memory of one call", xlabel="n", ylabel="MiB")
for ax in axes:
    ax.legend(fontsize=7)
fig.tight_layout()
plt.show()
print(f"n = 128: additive takes {t_add[0, j] / t_dot[0, j]:.0f}x (d_k = {add_dk[0]}) to "
      f"{t_add[-1, j] / t_dot[-1, j]:.0f}x (d_k = {add_dk[-1]}) the time of dot-product attention, "
      f"and {m_add[0, j] / m_dot[0, j]:.0f}x to {m_add[-1, j] / m_dot[-1, j]:.0f}x the peak memory")
tensor = 4 * 128 * 128 * 64                                                  # float32 bytes of (n, n, d_k)
claim("the (n, n, d_k) tensor is most of additive attention's peak memory at n = 128, d_k = 64 (its share)",
      tensor / m_add[list(add_dk).index(64), j], low=0.5, high=1.0)

# %% [markdown]
# Both grow like $n^2$; additive attention's constant is larger, and grows with $d_k$, in
# time and in memory. The FLOP counts alone would not predict the time gap: it comes from how
# the work is done: one matrix product, against an elementwise `tanh` over a large
# intermediate tensor ($n^2 d_k$ numbers: at $n = 128$, $d_k = 64$ most of the peak memory measured above). This is the
# paper's reason for dot-product attention. §3.2.1 also notes the one thing additive
# attention did better: without the scale $1/\sqrt{d_k}$, it beat dot-product attention at
# large $d_k$, which is why the scale is there (lesson 1).
#
# ## 9. Table 1, measured at toy scale
#
# All the numbers in one table (time slopes from the offline sweep, $d = 64$ or $n = 64$;
# path lengths from §5; the restricted row with $r = 8$ for cost and $r = 4$ for the path):

# %%
from IPython.display import Markdown

path_key = {"recurrent": "recurrent (steps)", "conv": "conv, contiguous", "attention": "self-attention",
            "restricted": "restricted attention"}
paper = {"recurrent": ("O(n·d²)", "O(n)", "O(n)"), "conv": ("O(k·n·d²)", "O(1)", "O(log_k n) / O(n/k)"),
         "attention": ("O(n²·d)", "O(1)", "O(1)"), "restricted": ("O(r·n·d)", "O(1)", "O(n/r)")}
flops_formula = {"recurrent": "4nd²", "conv": "2d²(kn − k(k−1)/2)", "attention": "8nd² + 4n²d",
                 "restricted": "8nd² + 4n(2r+1)d"}
lines = ["| layer | Table 1: cost, sequential ops, path | FLOPs (counted = formula) | time ∝ n^p, p = | "
         f"time ∝ d^q, q = | matmul calls, n = {ns[0]} / {ns[-1]} | path length, n = 16 / 64 / 128 |",
         "| --- | --- | --- | ---: | ---: | --- | --- |"]
for name in names:
    t_n = np.array(sweep["n_sweep"]["time_s"][name][0])
    t_d = np.array([row[0] for row in sweep["d_sweep"]["time_s"][name]])
    calls = sweep["n_sweep"]["calls"][name][0]
    paths = [m[path_key[name]] for n_, m in zip(path_n, measured) if n_ in (16, 64, 128)]
    lines.append(f"| {name} | {', '.join(paper[name])} | {flops_formula[name]} | {slope(ns, t_n):.2f} | "
                 f"{slope(ds, t_d):.2f} | {calls[0]} / {calls[-1]} | {' / '.join(map(str, paths))} |")
Markdown("\n".join(lines))


# %% [markdown]
# Read across (the sentence below is rendered from the table's numbers):

# %%
claim_true("only the recurrent layer's matmul calls grow with n",
           all(sweep["n_sweep"]["calls"][nm][0][0] == sweep["n_sweep"]["calls"][nm][0][-1] for nm in names
               if nm != "recurrent") and sweep["n_sweep"]["calls"]["recurrent"][0][-1] > sweep["n_sweep"]["calls"]["recurrent"][0][0],
           str({nm: sweep["n_sweep"]["calls"][nm][0] for nm in names}))
fastest_in_n = max(names, key=lambda nm: p_n[nm])
show_markdown(
    "Only the recurrent layer's calls grow with $n$ (sequential operations $O(n)$); "
    f"the time exponent in $n$ is largest for {fastest_in_n} ($p = {p_n[fastest_in_n]:.2f}$; Table 1's $O(n^2 d)$), "
    "and against $d$ the exponents are " + ", ".join(f"{nm} {q_d[nm]:.2f}" for nm in names)
    + ": the FLOPs of the first three grow as $d^2$, their measured times more slowly, at these widths. Only full "
    "self-attention keeps its path at one layer. The time exponents are measured on one shared CPU core and "
    "drift with the machine's load; the FLOPs and the path lengths are exact.")

# %% [markdown]
# ## 10. A side benefit: heads you can read (§4)
#
# §4 ends with a benefit that is not a cost: "self-attention could yield more interpretable
# models". Each head's weights $A$ (Eq. 1) say, for every query, which positions it reads, and
# the paper's appendix shows heads that "clearly learn to perform different tasks". A recurrent
# state or a convolution's channels offer nothing so direct to look at. Lesson 10 draws the
# maps of a trained translation model (its §6) and measures, over many test sentences, which heads
# align with the source word being translated, which look at the previous output token, and
# which park on `<bos>` or `<eos>`.
#
# A picture of where a head reads is not yet proof that the model *uses* what it reads. The
# direct test is to remove the head and measure what the model loses: its output with that
# head's $\mathrm{head}_i$ set to zero before $W^O$ (Eq. of §3.2.2):
#
# $$y = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_{i-1}, 0, \mathrm{head}_{i+1}, \dots, \mathrm{head}_h)\, W^O + b^O .$$
#
# Exercise 8.4 asks for that function. On a random layer the heads are interchangeable, and the
# solution's last cell shows it: every head, removed, changes the output by a similar amount.
# In lesson 10's trained model they need not be. After its training cell, remove each head of
# the encoder-decoder attention in turn: head $i$ of `model.decoder.layers[l].cross_attn` meets
# only rows $i \cdot d_k \dots (i+1) \cdot d_k$ of that layer's `W_o.data`, so zeroing those
# rows (and restoring them afterwards) is the same ablation inside the whole model. Compare
# the validation loss without each head with that lesson's head table: does the head whose map
# aligns best matter most?

# %% [markdown]
# ## 11. What came before: tricks that made recurrence cheaper, not less sequential (§1)
#
# §1 of the paper grants that recurrent models had become more efficient: "factorization tricks" (Kuchaiev
# and Ginsburg, 2017, who split an LSTM's big matrix into a product of two thin ones, or into groups) and
# "conditional computation" (Shazeer et al., 2017, who put a mixture of many expert networks between LSTM
# layers and let a gate send each position to one of them), and then says what neither changed: "the
# fundamental constraint of sequential computation, however, remains." Both claims can be measured on the
# recurrent layer of §2.1:
#
# * **factorized**: $h_t = \tanh\big(x_t W_x + (h_{t-1} U) V + b\big)$ with $U \in \mathbb{R}^{d \times r}$,
#   $V \in \mathbb{R}^{r \times d}$ in place of $W_h$: the recurrent product costs $4dr$ FLOPs per position
#   instead of $2d^2$;
# * **conditional computation**: a recurrent layer, then a mixture of $E$ experts (each a feed-forward
#   network as in §3.3 of the paper; a gate $xW_g$ sends each position to the one expert it scores highest),
#   then a second recurrent layer. The mixture holds $E$ experts' parameters but runs one per position.
#
# For each: the parameters, the matrix-product FLOPs and calls of one forward (counted as in §3), the
# time (one BLAS thread, minimum of repeats, as in §4), and the test of §3 for sequential operations: compute
# the second half of the outputs from the inputs alone.

# %%
def factorized_recurrent_forward(x, W_x, U, V, b):
    """h_t = tanh(x_t W_x + (h_{t-1} U) V + b): W_h = U V of rank r. x: (B, n, d_in) -> H: (B, n, d)."""
    B, n, _ = x.shape
    d = V.shape[1]
    pre = backend.matmul(x, W_x) + b                             # every x_t W_x at once
    H = np.empty((B, n, d), dtype=x.dtype)
    h = np.zeros((B, d), dtype=x.dtype)
    for t in range(n):                                           # still a loop: step t needs h_{t-1}
        h = np.tanh(pre[:, t] + backend.matmul(backend.matmul(h, U), V))
        H[:, t] = h
    return H


def moe_forward(x, W_gate, W1, W2):
    """Top-1 mixture of E feed-forward experts, position by position. x: (B, n, d), W_gate: (d, E),
    W1: (E, d, d_ff), W2: (E, d_ff, d) -> (B, n, d): each position goes to the expert its gate scores highest."""
    rows = x.reshape(-1, x.shape[-1])
    choice = backend.matmul(rows, W_gate).argmax(axis=-1)         # (B·n,): one expert per position
    y = np.zeros_like(rows)
    for e in range(W1.shape[0]):                                  # no expert waits for another
        mine = np.flatnonzero(choice == e)
        if mine.size:
            y[mine] = backend.matmul(np.maximum(backend.matmul(rows[mine], W1[e]), 0), W2[e])
    return y.reshape(x.shape)


n_tr, d_tr, rank, n_experts = 64, 256, 32, 8
rng_tr = np.random.default_rng(11)
f32 = lambda a: a.astype(np.float32)                              # noqa: E731  (float32, as in training)
W_x, W_h = f32(init_weight(d_tr, d_tr, rng_tr)), f32(init_weight(d_tr, d_tr, rng_tr))
W_x2, W_h2 = f32(init_weight(d_tr, d_tr, rng_tr)), f32(init_weight(d_tr, d_tr, rng_tr))
U, V = f32(init_weight(d_tr, rank, rng_tr)), f32(init_weight(rank, d_tr, rng_tr))
b_tr = np.zeros(d_tr, dtype=np.float32)
W_gate = f32(rng_tr.standard_normal((d_tr, n_experts)))
W1 = f32(rng_tr.standard_normal((n_experts, d_tr, 4 * d_tr)) / math.sqrt(d_tr))
W2 = f32(rng_tr.standard_normal((n_experts, 4 * d_tr, d_tr)) / math.sqrt(4 * d_tr))
variants_tr = {
    "recurrent (W_h full)": (lambda x: recurrent_forward(x, W_x, W_h, b_tr)[0], 2 * d_tr * d_tr + d_tr),
    f"factorized, rank {rank}": (lambda x: factorized_recurrent_forward(x, W_x, U, V, b_tr),
                                 d_tr * d_tr + 2 * d_tr * rank + d_tr),
    f"recurrent, {n_experts} experts, recurrent": (
        lambda x: recurrent_forward(moe_forward(recurrent_forward(x, W_x, W_h, b_tr)[0], W_gate, W1, W2),
                                    W_x2, W_h2, b_tr)[0],
        2 * (2 * d_tr * d_tr + d_tr) + d_tr * n_experts + n_experts * 8 * d_tr * d_tr),
}
x_tr = f32(rng_tr.standard_normal((1, n_tr, d_tr)))
half_tr = n_tr // 2
rows_tr = []
with threadpool_limits(1):
    for name, (fn, params) in variants_tr.items():
        with count_matmuls() as c:
            full_out = fn(x_tr)
        second_alone = fn(x_tr[:, half_tr:])                   # the second half from its inputs only
        err = float(np.abs(full_out[:, half_tr:] - second_alone).max())
        rows_tr.append((name, params, c.flops / n_tr, c.calls, table1.min_time(lambda: fn(x_tr), repeats=5), err))
print(f"n = {n_tr}, d = {d_tr}, one sentence, float32, 1 BLAS thread")
print(f"{'layer':34s}{'parameters':>12s}{'FLOPs/position':>16s}{'matmul calls':>14s}{'time (ms)':>11s}"
      f"{'2nd half alone: max error':>28s}")
for name, params, flops, calls, t, err in rows_tr:
    print(f"{name:34s}{params:12,d}{flops:16,.0f}{calls:14d}{1e3 * t:11.2f}{err:28.2f}")

# %%
(_, p_full, f_full, c_full, t_full, e_full), (_, p_fac, f_fac, c_fac, t_fac, e_fac), \
    (_, p_moe, f_moe, c_moe, t_moe, e_moe) = rows_tr
claim_true("the factorized layer makes fewer FLOPs and more calls than the full one", f_fac < f_full and c_fac > c_full)
claim_true("every variant still gets the second half wrong without the first", min(e_full, e_fac, e_moe) > 0.1,
           f"{e_full:.2f}, {e_fac:.2f}, {e_moe:.2f}")
claim("the mixture runs one expert per position: FLOPs per position independent of E",
      f_moe - 2 * f_full - 2 * d_tr * n_experts, 2 * 2 * d_tr * 4 * d_tr, tol=0.5)
show_markdown(
    f"The factorized layer does {f_full / f_fac:.1f} times fewer FLOPs per position than the full one, but it makes "
    f"{c_fac} matrix-product calls instead of {c_full}, two per step, each waiting for the one before: in this run its "
    f"time is {t_fac / t_full:.2f} of the full layer's. The mixture of experts holds {p_moe / p_full:.0f} times the "
    f"parameters of one recurrent layer and spends {f_moe / f_full:.1f} times its FLOPs per position (two recurrent "
    "layers, the gate and one expert, whatever the number of experts). And all three compute the second half of the "
    f"sentence wrongly without the first (errors of {e_full:.2f}, {e_fac:.2f}, {e_moe:.2f} on outputs of size one): "
    "the state at the cut exists only after the first half has run. Cheaper steps, or more parameters per FLOP; "
    "the same number of steps in a row. Removing those steps is what self-attention does (§3).")

# %% [markdown]
# ## 12. Memory limits batching (§1)
#
# §1 again: the sequential nature "precludes parallelization within training examples, which becomes
# critical at longer sequence lengths, as memory constraints limit batching across examples." A recurrent
# layer can only be kept busy by many sentences at once: each of its steps is one product of
# (sentences × $d$) by ($d$ × $d$). But training keeps every step's state for the backward pass (§2.1's
# cache holds all $h_t$), so a sentence of $n$ positions costs memory in proportion to $n$, and with a fixed
# memory the number of sentences that fit falls as $1/n$: the longer the sentences, the thinner each of the
# $n$ products. Self-attention has the positions of one sentence to work on at once, so its products stay
# large; its own memory grows with $n^2$ (the scores), which is §4's and §6's subject.
#
# Measured: the peak memory of one forward and backward pass per sentence (`tracemalloc`, which sees
# NumPy's allocations), the number of sentences that fit a fixed budget, and, at that batch, the time per
# token of a forward and backward pass (one BLAS thread, minimum of repeats).

# %%
d_mem, budget = 64, 64 * 2**20
lengths_mem = [16, 64, 256, 1024]
rng_mem = np.random.default_rng(12)
W_x_m, W_h_m = f32(init_weight(d_mem, d_mem, rng_mem)), f32(init_weight(d_mem, d_mem, rng_mem))
b_m = np.zeros(d_mem, dtype=np.float32)
backend.set_default_dtype("float32")
mha_mem = MultiHeadAttention(d_mem, 4, rng_mem)
backend.set_default_dtype("float64")


def rec_train_pass(x):
    H, cache = recurrent_forward(x, W_x_m, W_h_m, b_m)
    recurrent_backward(np.ones_like(H), cache)


def att_train_pass(x):
    mha_mem.backward(np.ones_like(mha_mem.forward(x)))


mem_rows = []
with threadpool_limits(1):
    for n_m in lengths_mem:
        for name, fn in (("recurrent", rec_train_pass), ("self-attention", att_train_pass)):
            one = f32(rng_mem.standard_normal((1, n_m, d_mem)))
            per_sentence = table1.peak_bytes(lambda: fn(one))            # tracemalloc sees NumPy's buffers
            B_fit = budget // per_sentence                              # 0: not even one sentence fits
            xb = f32(rng_mem.standard_normal((max(B_fit, 1), n_m, d_mem)))
            t = table1.min_time(lambda: fn(xb), repeats=3) if B_fit else math.nan
            mem_rows.append((name, n_m, per_sentence, B_fit, t / (max(B_fit, 1) * n_m)))
print(f"d = {d_mem}, a memory budget of {budget / 2**20:.0f} MiB, float32, 1 BLAS thread")
print(f"{'layer':16s}{'n':>6s}{'KiB per sentence':>18s}{'sentences that fit':>20s}{'µs per token':>14s}")
for name, n_m, per, B_fit, tpt in mem_rows:
    print(f"{name:16s}{n_m:6d}{per / 2**10:18.1f}{B_fit:20d}{1e6 * tpt:14.2f}")

# %%
rec_mem = [(n_m, per, B_fit, tpt) for name, n_m, per, B_fit, tpt in mem_rows if name == "recurrent"]
att_mem = [(n_m, per, B_fit, tpt) for name, n_m, per, B_fit, tpt in mem_rows if name == "self-attention"]
growth = [(b[1] / a[1]) / (b[0] / a[0]) for a, b in zip(rec_mem, rec_mem[1:])]
claim("the recurrent layer's memory per sentence grows in proportion to n (ratio of ratios near 1)",
      max(abs(g - 1) for g in growth[1:]), high=0.25)
claim_true("fewer sentences fit as n grows, for both layers",
           all(a[2] > b[2] for a, b in zip(rec_mem, rec_mem[1:])) and att_mem[0][2] > att_mem[-1][2])
fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
for rows_, name, c in ((rec_mem, "recurrent", "C0"), (att_mem, "self-attention", "C2")):
    axes[0].loglog([r[0] for r in rows_], [r[2] for r in rows_], "o-", color=c, label=name)
    axes[1].loglog([r[0] for r in rows_], [1e6 * r[3] for r in rows_], "o-", color=c, label=name)
axes[0].set(xlabel="sentence length n", ylabel="sentences per batch", title=f"what fits {budget / 2**20:.0f} MiB")
axes[1].set(xlabel="sentence length n", ylabel="µs per token (forward + backward)",
            title="time per token at that batch (one core)")
for ax in axes:
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
first, last = rec_mem[0], rec_mem[-1]
att_first, att_last = att_mem[0], att_mem[-1]
show_markdown(
    f"In this run a sentence costs the recurrent layer {first[1] / 2**10:.0f} KiB at $n = {first[0]}$ and "
    f"{last[1] / 2**10:.0f} KiB at $n = {last[0]}$, so the budget holds {first[2]} sentences of the first and "
    f"{last[2]} of the second: each of the {last[0]} steps in a row then multiplies {last[2]} rows, where each of the "
    f"{first[0]} steps multiplied {first[2]}. That is §1's point: in a recurrent layer the only work that can run at "
    "once is the batch, and memory shrinks the batch as the sentences grow. On one core it costs little (time per "
    f"token {1e6 * first[3]:.2f} µs, then {1e6 * last[3]:.2f} µs): a core runs a product of a few dozen rows nearly "
    "as efficiently as one of a thousand. On hardware with thousands of parallel lanes it is the difference between "
    "a busy machine and a mostly idle one, which a laptop cannot show. Self-attention has the opposite trouble at "
    f"long $n$: each of its products covers every position of the batch ({att_first[2] * att_first[0]:,} rows at "
    f"$n = {att_first[0]}$, {max(att_last[2], 1) * att_last[0]:,} at $n = {att_last[0]}$), but its $n^2$ scores make "
    f"the memory per sentence ({att_first[1] / 2**10:.0f} KiB, then {att_last[1] / 2**20:.0f} MiB) and the time per "
    f"token ({1e6 * att_first[3]:.2f} µs, then {1e6 * max(r[3] for r in att_mem if r[2]):.2f} µs) grow; "
    + ("" if all(r[2] for r in att_mem) else f"at $n = {att_last[0]}$ not one sentence fits the budget; ")
    + "that is what §4's restricted attention is for (sections 6 and 14).")

# %% [markdown]
# ## 13. The recurrent encoder–decoder, trained beside the Transformer (§1, §6.1)
#
# The models §1 describes as the state of the art were recurrent encoder–decoders, LSTMs or gated recurrent
# units, with an attention between encoder and decoder: "attention mechanisms are used in conjunction with a
# recurrent network". The paper's claim against them is about time: the Transformer "allows for significantly
# more parallelization" (§1), and "can be trained significantly faster than architectures based on recurrent
# or convolutional layers" (§7; Table 2 gives the costs, lesson 10 reads them). A claim about training time
# can be measured, if the comparison is fair. `lessons/experiments/rnn_seq2seq.py` is such a model written
# small, every backward by hand as in this package: LSTM layers (four gates, the cell state of Hochreiter and
# Schmidhuber) read the source; LSTM layers started from the encoder's final states read the target shifted
# right; each decoder output attends to the encoder's outputs with Eq. (1); one embedding matrix is tied three
# ways and scaled by $\sqrt{d}$, as in the Transformer. Its gradient check, in float64:

# %%
import rnn_seq2seq                                                      # lessons/experiments/rnn_seq2seq.py

rnn_small = rnn_seq2seq.RNNSeq2Seq(vocab_size=11, d=4, L=2, seed=1)
src_small = np.array([[3, 4, 5, 2], [6, 7, 2, 0]])                        # padded, as batches are
tgt_small = np.array([[1, 3, 4, 8, 0], [1, 9, 5, 0, 0]])
G_small = np.random.default_rng(13).standard_normal((2, 5, 11))
rnn_small.zero_grad()
rnn_small.forward(src_small, tgt_small)
rnn_small.backward(G_small)
named = dict(rnn_small.named_parameters())
report = gradcheck(lambda: (rnn_small.forward(src_small, tgt_small) * G_small).sum(),
                   {k: p.data for k, p in named.items()}, {k: p.grad.copy() for k, p in named.items()})
print(report)
report.assert_ok()

# %% [markdown]
# **The comparison, and how it is kept fair.** `lessons/experiments/lesson08_rnn_vs_transformer.py` trains it
# beside lesson 11's toy Transformer on lesson 11's task (numbers-en-fr: English number names to French), with
# the recurrent model's width chosen so that the two have the same number of parameters. Both see the same
# batches in the same order, use the package's label-smoothed loss, Adam with the warm-up schedule of §5.3 and
# gradient clipping, each at the learning-rate factor that did best for it on a grid the two share (the
# record's pilot), in float32 on one CPU core with one BLAS thread; time is the CPU time of the training steps
# alone. A third model is the same Transformer without dropout, because the recurrent model has none. The
# record says what it used:

# %%
with open("experiments/lesson08_rnn_vs_transformer.json") as f:
    race = json.load(f)
made = race["provenance"][-1]
print("record:", made["command"], "at commit", made["commit"][:10], "on", made["machine"]["cpu"],
      f"({made['machine']['cores']} cores), load average {made['load_average']['start'][0]:.1f} at the start")
print(f"task {race['task']}, {race['steps']} steps of {race['batch']} sentence pairs; learning-rate factors tried "
      f"{race['factors']}, chosen {race['chosen_factor']}")
print(f"Transformer: {race['transformer_params']:,} parameters (d_model {race['transformer']['d_model']}, "
      f"N {race['transformer']['N']}, h {race['transformer']['h']}, d_ff {race['transformer']['d_ff']}); "
      f"recurrent: {race['rnn']['params']:,} (width {race['rnn']['width']}, {race['rnn']['layers']} LSTM layers "
      "each side)")

# %% [markdown]
# **What must run in a row.** One training step of each, counted as in §3 on a batch of the task: every
# matrix-product call, and for the recurrent model the products that wait for the one before (each LSTM layer
# steps through its sentence forward, and back again for the gradient).

# %%
from minitransformer import runsetup, train as train_module
from minitransformer.data.batching import make_batch
from minitransformer.data.registry import load_task
from minitransformer.layers.loss import LabelSmoothedCrossEntropy

race_task = load_task(race["task"])
rv = race_task.vocab
race_pairs = train_module.encode_pairs(rv, race_task.train)
backend.set_default_dtype("float32")
race_models = {
    "Transformer": runsetup.build_model(race_task, "copy", seed=0, **race["transformer"]),
    "recurrent": rnn_seq2seq.RNNSeq2Seq(len(rv), race["rnn"]["width"], race["rnn"]["layers"], seed=0, pad_id=rv.pad_id),
}
backend.set_default_dtype("float64")
assert race_models["recurrent"].num_parameters() == race["rnn"]["params"]
race_loss = LabelSmoothedCrossEntropy(rv.pad_id, race["eps_ls"])
by_length = sorted(race_pairs, key=lambda p: len(p[0]) + len(p[1]))
step_counts = {}
race_limits = threadpool_limits(1)                                         # one BLAS thread, as the record
for label, pairs_ in (("short", by_length[:race["batch"]]), ("long", by_length[-race["batch"]:])):
    b = make_batch([s for s, _ in pairs_], [t for _, t in pairs_], rv.pad_id, rv.bos_id, rv.eos_id, np)
    for name, net in race_models.items():
        with count_matmuls() as c:
            if name == "Transformer":
                logits = net.forward(b.src, b.tgt_in, b.src_mask, b.tgt_mask)
            else:
                logits = net.forward(b.src, b.tgt_in, b.src_mask[:, 0, 0, :])
            race_loss.forward(logits, b.tgt_out)
            net.backward(race_loss.backward())
        chain = rnn_seq2seq.recurrent_steps(b.src.shape[1], b.tgt_in.shape[1], race["rnn"]["layers"]) \
            if name == "recurrent" else None
        step_counts[name, label] = (b.src.shape[1], b.tgt_in.shape[1], c.calls, chain, c.flops)
race_limits.unregister()
for (name, label), (S_, T_, calls, chain, flops) in step_counts.items():
    print(f"{name:12s} {label:5s} batch (S = {S_}, T = {T_}): {calls:4d} matmul calls, "
          f"{'' if chain is None else f'{chain} of them in one chain, '}{flops / 1e9:.2f} GFLOPs")
claim_true("the Transformer's calls per step do not depend on the sentence length; the recurrent model's grow",
           step_counts["Transformer", "short"][2] == step_counts["Transformer", "long"][2]
           and step_counts["recurrent", "short"][2] < step_counts["recurrent", "long"][2])

# %% [markdown]
# **The race.** Dev-set token accuracy (teacher-forced) against training steps and against training CPU
# seconds, every model and seed of the record:

# %%
race_runs = race["runs"]
race_names = {"transformer": "Transformer", "transformer-p0": "Transformer, no dropout", "rnn": "recurrent (LSTM)"}
race_colors = {"transformer": "C2", "transformer-p0": "C1", "rnn": "C0"}
fig, axes = plt.subplots(1, 2, figsize=(13, 4))
for r in race_runs:
    steps_ = [p["step"] for p in r["curve"]]
    acc_ = [p["dev_token_acc"] for p in r["curve"]]
    label_ = race_names[r["model"]] if r["seed"] == race_runs[0]["seed"] else None
    axes[0].plot(steps_, acc_, "-", color=race_colors[r["model"]], alpha=0.8, label=label_)
    axes[1].plot([p["train_cpu_s"] for p in r["curve"]], acc_, "-", color=race_colors[r["model"]], alpha=0.8, label=label_)
for ax, xlabel in zip(axes, ("training step", "training CPU seconds (one core)")):
    ax.axhline(race["target_dev_token_acc"], color="gray", ls=":", lw=1)
    ax.set(xlabel=xlabel, ylabel="dev token accuracy", ylim=(0.5, 1.0))
    ax.legend(fontsize=8)
axes[0].set_title(f"{race['task']}: {len(set(r['seed'] for r in race_runs))} seeds per model")
axes[1].set_title("the same runs against time")
fig.tight_layout()
plt.show()


def race_summary(kind):
    """Per model: the medians over seeds of ms per step, steps and CPU seconds to the target, final exact match."""
    rs = [r for r in race_runs if r["model"] == kind]
    reached = [next(({"step": p["step"], "cpu": p["train_cpu_s"]} for p in r["curve"]
                     if p["dev_token_acc"] >= race["target_dev_token_acc"]), None) for r in rs]
    return {"ms": float(np.median([r["step_cpu_ms_median"] for r in rs])),
            "steps": [x["step"] if x else None for x in reached], "cpu": [x["cpu"] if x else None for x in reached],
            "exact": [r["test_exact_match"] for r in rs], "n": len(rs)}


summary = {kind: race_summary(kind) for kind in race_names}
print(f"{'model':26s}{'ms/step':>9s}{'steps to ' + str(race['target_dev_token_acc']):>18s}"
      f"{'CPU s to it':>22s}{'test exact match':>26s}")
for kind, s_ in summary.items():
    print(f"{race_names[kind]:26s}{s_['ms']:9.1f}{str(s_['steps']):>18s}{str(s_['cpu']):>22s}"
          f"{str([round(e, 3) for e in s_['exact']]):>26s}")

# %%
tr, p0, rn = summary["transformer"], summary["transformer-p0"], summary["rnn"]
per_rnn = {r["seed"]: r["step_cpu_ms_median"] for r in race_runs if r["model"] == "rnn"}
per_tr = {r["seed"]: r["step_cpu_ms_median"] for r in race_runs if r["model"] == "transformer"}
claim_true("in the record, a recurrent step cost less CPU time than a Transformer step on every seed",
           all(per_rnn[s_] < per_tr[s_] for s_ in per_rnn), f"{per_rnn} vs {per_tr}")
claim_true("in the record, every model reached the target on every seed",
           all(None not in s_["steps"] for s_ in summary.values()))
claim_true("in the record, the Transformer reached the target in fewer steps on every seed",
           max(tr["steps"]) < min(rn["steps"]) and max(p0["steps"]) < min(rn["steps"]))
flops_tr, flops_rn = step_counts["Transformer", "long"][4], step_counts["recurrent", "long"][4]
faster = "less" if np.median(tr["cpu"]) < np.median(rn["cpu"]) else "more"
target = race["target_dev_token_acc"]
show_markdown("\n".join([
    f"* **Per step, the recurrent model is cheaper here**: {rn['ms']:.0f} ms against {tr['ms']:.0f} ms for the "
    f"Transformer (medians over seeds), {rn['ms'] / tr['ms']:.2f} of its time. Their matrix products cost about the "
    f"same ({flops_rn / 1e9:.2f} against {flops_tr / 1e9:.2f} GFLOPs on the long batch above: equal parameters, "
    f"equal arithmetic), and with {race['batch']} sentences per batch each product of the recurrent chain is large "
    "enough to run near full speed on one core; what the Transformer spends beyond is the work a FLOP count leaves "
    "out (softmaxes, layer normalizations, dropout masks) and its larger number of calls.",
    f"* **Per unit of progress, the Transformer is ahead**: it reached a dev token accuracy of {target} after "
    f"{int(np.median(tr['steps']))} steps ({int(np.median(p0['steps']))} without dropout) against "
    f"{int(np.median(rn['steps']))} for the recurrent model, in {np.median(tr['cpu']):.1f} and "
    f"{np.median(p0['cpu']):.1f} CPU seconds against {np.median(rn['cpu']):.1f}: {faster} time for the Transformer "
    "with dropout, and the least without it.",
    f"* **At the end, all three translate the test set almost perfectly** (exact match: Transformer "
    f"{min(tr['exact']):.3f} to {max(tr['exact']):.3f}, without dropout {min(p0['exact']):.3f} to {max(p0['exact']):.3f}, "
    f"recurrent {min(rn['exact']):.3f} to {max(rn['exact']):.3f}): the task is too easy to separate them on quality.",
]))

# %% [markdown]
# So, at toy scale on one core, the claim "trains significantly faster" shows only as fewer steps to the same
# accuracy, and it is not significant. That is not a refutation: the paper's claim is about the hardware it
# trained on, GPUs (§5.2) that run thousands of multiply-adds at once. There, what limits a recurrent model is the
# chain counted above: every training step waits for each LSTM layer to walk its sentence forward and back, a
# product at a time, and a longer sentence makes the chain longer (§12 shows the memory pressure that keeps the
# batch from covering it). A Transformer step is a fixed, short chain of products that each cover every
# position of the batch. On one CPU core both kinds of products run at about the same speed, so the chain costs
# little; the measurement shows what a laptop can, and the counts show what the paper's hardware exploits.
# Convolutional models, the other family §1 and Table 2 compare against, are not trained here.
#
# The record is checked live: the first steps of the Transformer and of the recurrent model, re-run here, must
# give the recorded dev loss within the tolerance the script measured by re-running them on four processors'
# arithmetic (their BLAS kernels and SIMD code; lessons/experiments/README.md): so few steps leave another
# processor's rounding no time to grow, and a larger difference means the arithmetic changed.

# %%
spec_race = importlib.util.spec_from_file_location("lesson08_rnn_vs_transformer",
                                                   "experiments/lesson08_rnn_vs_transformer.py")
race_script = importlib.util.module_from_spec(spec_race)
spec_race.loader.exec_module(race_script)
with threadpool_limits(1):
    race_live = race_script.live_values(race)      # model -> dev loss after race["live"]["steps"] steps, seed 0
backend.set_default_dtype("float64")                                       # train_one set float32
print("the live steps agree with the record:", *race_script.check_live(race, race_live), sep="\n  ")

# %% [markdown]
# ## 14. Long inputs: what the paper proposes, and what came later (§4, §7)
#
# For very long sequences §4 suggests that self-attention "could be restricted to considering only a
# neighborhood of size $r$" and adds: "We plan to investigate this approach further in future work"; §7
# repeats the plan, for "large inputs and outputs such as images, audio and video". So restricted attention
# is a direction the paper names, not a method it proposes or evaluates: it reports no experiment with it
# (§6 of this lesson measured our own version of it).
#
# **The paper does not say this**, but readers often meet it next to the paper: sparse attention (Child et
# al., 2019), Longformer (Beltagy et al., 2020: a sliding window like §6's plus a few positions that attend
# everywhere), Linformer (Wang et al., 2020: keys and values projected down to a fixed length) and linear
# attention (Katharopoulos et al., 2020) all came later, as answers to the cost of $n^2$ scores. They are
# other layers, not the paper's. One of them, measured: linear attention replaces
# $\mathrm{softmax}(q_i \cdot k_j)$ by $\phi(q_i) \cdot \phi(k_j)$ with $\phi(z) = \mathrm{elu}(z) + 1$, so that
#
# $$\text{out}_i = \frac{\phi(q_i)^\top \sum_j \phi(k_j)\, v_j^\top}{\phi(q_i)^\top \sum_j \phi(k_j)}:$$
#
# the $d_k \times d_v$ sum is built once for all queries, and no $n \times n$ matrix exists. Its FLOPs
# (counted as in §3) against Eq. (1)'s, and how far its output is from Eq. (1)'s on the same $Q, K, V$:

# %%
def linear_attention_forward(Q, K, V):
    """Linear attention (Katharopoulos et al., 2020). Q, K: (B, h, n, d_k), V: (B, h, n, d_v) -> (B, h, n, d_v)."""
    phi = lambda z: np.where(z > 0, z + 1.0, np.exp(np.minimum(z, 0)))     # noqa: E731  elu(z) + 1 > 0
    Qf, Kf = phi(Q), phi(K)
    KV = backend.matmul(Kf.swapaxes(-1, -2), V)                             # (B, h, d_k, d_v): sum_j phi(k_j) v_jᵀ
    Z = backend.matmul(Qf, Kf.sum(axis=-2)[..., None])                      # (B, h, n, 1): the normalizers
    return backend.matmul(Qf, KV) / Z


d_lin = 64
rng_lin = np.random.default_rng(14)
lin_rows = []
for n_l in (64, 256, 1024, 4096):
    Q, K, V = (rng_lin.standard_normal((1, 1, n_l, d_lin)) / d_lin ** 0.25 for _ in range(3))
    with count_matmuls() as c_soft:
        soft = attention_forward(Q, K, V)[0]
    with count_matmuls() as c_lin:
        lin = linear_attention_forward(Q, K, V)
    assert c_soft.flops == 4 * n_l * n_l * d_lin and c_lin.flops == 4 * n_l * d_lin * d_lin + 2 * n_l * d_lin
    lin_rows.append((n_l, c_soft.flops, c_lin.flops, np.linalg.norm(lin - soft) / np.linalg.norm(soft)))
print(f"one head, d_k = d_v = {d_lin}: FLOPs of Eq. (1) = 4n²d, of linear attention = 4nd² + 2nd (counted, asserted)")
for n_l, fs, fl, diff in lin_rows:
    print(f"n = {n_l:5d}: Eq. (1) {fs:14,d}   linear {fl:12,d}   ratio {fs / fl:6.2f}   "
          f"|linear - Eq. (1)| / |Eq. (1)| = {diff:.2f}")
claim_true("linear attention is a different function: its output is far from Eq. (1)'s",
           min(r[3] for r in lin_rows) > 0.1, str([round(r[3], 3) for r in lin_rows]))
show_markdown(
    f"Linear attention's FLOPs grow like $n$, Eq. (1)'s like $n^2$: they cross where $n$ is about $d_k$, and at "
    f"$n = {lin_rows[-1][0]}$ Eq. (1) costs {lin_rows[-1][1] / lin_rows[-1][2]:.0f} times more. But it is not "
    f"Eq. (1) computed faster: on the same random $Q, K, V$ its output differs from Eq. (1)'s by "
    f"{min(r[3] for r in lin_rows):.0%} to {max(r[3] for r in lin_rows):.0%} of the output's size. A model trained with "
    "it is another model, whose quality has to be measured again, which is what the papers above do.")

# %% [markdown]
# ## 15. Other kinds of input: an image as a sequence (§7)
#
# §7's other plan: "to extend the Transformer to problems involving input and output modalities other than
# text". Nothing in the encoder knows about words: it reads a sequence of $d_\text{model}$-wide vectors. So
# cut an image into patches, map each patch to a vector with a linear layer (as the embedding maps a token),
# add the positional encoding (§3.5), and the package's `Encoder` reads it unchanged. A toy: small noisy
# images of a line in one of four orientations (horizontal, vertical, the two diagonals) at a random place,
# cut into square patches; the encoder's outputs are averaged over the positions and a linear layer names
# the orientation. Everything is trained here with the package's backward passes and `Adam`. (The paper
# does not do this; later work did, on pixels with restricted attention and on patches, as here.)

# %%
from minitransformer.layers.linear import Linear
from minitransformer.layers.positional import sinusoidal_table
from minitransformer.model import Encoder, TransformerConfig
from minitransformer.optim import Adam

SIDE, PATCH, N_CLASSES = 8, 2, 4


def line_images(rng, B, noise=0.3):
    """B images (SIDE x SIDE) with a line of length SIDE - 2: horizontal, vertical, diagonal or anti-diagonal."""
    images = noise * rng.standard_normal((B, SIDE, SIDE))
    labels = rng.integers(0, N_CLASSES, B)
    L = SIDE - 2
    for img, label, (r, c) in zip(images, labels, rng.integers(0, SIDE - L + 1, (B, 2))):
        k = np.arange(L)
        rows, cols = {0: (r + 0 * k, c + k), 1: (r + k, c + 0 * k), 2: (r + k, c + k), 3: (r + k, c + L - 1 - k)}[label]
        img[rows, cols] += 1.0
    return images, labels


def to_patches(images):
    """(B, SIDE, SIDE) -> (B, n, PATCH²): the patches in reading order, each flattened."""
    B = images.shape[0]
    g = SIDE // PATCH
    return images.reshape(B, g, PATCH, g, PATCH).transpose(0, 1, 3, 2, 4).reshape(B, g * g, PATCH * PATCH)


cfg_img = TransformerConfig(vocab_size=1, d_model=32, h=4, N=1, d_ff=64, P_drop=0.0, max_len=16)
rng_img = np.random.default_rng(15)
patch_embed = Linear(PATCH * PATCH, cfg_img.d_model, rng_img)
encoder = Encoder(cfg_img, rng_img, backend.seeded_rng(15))
head = Linear(cfg_img.d_model, N_CLASSES, rng_img)
n_patches = (SIDE // PATCH) ** 2
pe = sinusoidal_table(cfg_img.max_len, cfg_img.d_model)[:n_patches]
all_ones = np.ones((1, 1, 1, n_patches), dtype=bool)                   # no padding: every patch is real
opt = Adam(patch_embed.parameters() + encoder.parameters() + head.parameters(), 1e-3)


def classify(images):
    """images (B, SIDE, SIDE) -> logits (B, N_CLASSES)."""
    x = patch_embed.forward(to_patches(images)) + pe                    # (B, n, d_model): patches as tokens
    return head.forward(encoder.forward(x, all_ones).mean(axis=1))


data_rng = np.random.default_rng(150)
t0 = time.perf_counter()
with threadpool_limits(1):                                              # small products: one thread is fastest
    for _step in range(300):
        images, labels = line_images(data_rng, 64)
        logits = classify(images)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        opt.zero_grad()
        dlogits = p.copy()
        dlogits[np.arange(len(labels)), labels] -= 1                    # softmax cross-entropy: p - onehot
        dlogits /= len(labels)
        dpooled = head.backward(dlogits)                                # (B, d_model)
        dx = encoder.backward(np.repeat(dpooled[:, None], n_patches, axis=1) / n_patches)
        patch_embed.backward(dx)
        opt.step()
    test_images, test_labels = line_images(np.random.default_rng(151), 1000)
    accuracy = float((classify(test_images).argmax(axis=1) == test_labels).mean())
print(f"trained in {time.perf_counter() - t0:.1f} s; test accuracy on 1,000 new images: {accuracy:.1%} "
      f"(chance: {1 / N_CLASSES:.0%})")
# Float64: the OpenBLAS kernels Haswell, SkylakeX and Sandybridge gave the same accuracy (measured: 97.2%).
claim("the unchanged encoder learns to read images (test accuracy above 90%)", accuracy, low=0.9)

# %%
PHOTO, BIG_PATCH = 224, 16                    # a common photograph size, and a common patch size for it
pixels, patches = PHOTO * PHOTO, (PHOTO // BIG_PATCH) ** 2
show_markdown(
    f"The encoder reads {n_patches} patches of {PATCH}×{PATCH} pixels as it reads {n_patches} tokens, and names the "
    f"orientation of {accuracy:.1%} of new images. The catch is the length: a {PHOTO}×{PHOTO} photograph read pixel "
    f"by pixel is a sequence of {pixels:,} positions, and one head of one layer would hold {pixels ** 2:.1e} scores "
    f"({4 * pixels ** 2 / 2**30:.0f} GiB in float32), the $n^2$ of Table 1. In patches of {BIG_PATCH}×{BIG_PATCH} "
    f"pixels it is {patches} positions and {patches ** 2:,} scores. That is why §7 pairs other modalities with "
    "restricted attention.")

# %% [markdown]
# ## Exercises
#
# Each exercise has a cell with a stub to fill in and a checking cell below it. While the
# stub still returns `None` the checker prints *not attempted yet*; a wrong answer raises a
# `WrongAnswer` (an `AssertionError`) that says what is wrong and, for the usual mistakes, names
# it; a right one prints `correct`. The checkers live in `lessonkit.exercises.lesson_08`.
# In the full notebook the solutions follow at the very end; the student edition a teacher hands out leaves them out.
#
# ### Exercise 8.1 — the backward of additive attention
#
# Given the cache of `additive_attention_forward` (§8) and `dout` $= \partial L / \partial O$,
# return `(dQ, dK, dV, dW_q, dW_k, dv)`. Go back through the forward one line at a time:
# $O = AV$ (as in lesson 1), the softmax (lesson 1's row-sum rule), $e_{ij} = T_{ij} \cdot v$,
# $T = \tanh(U)$ with $U_{ij} = q_iW_q + k_jW_k$. The last one is the new part: $q_iW_q$ is
# added to every pair $(i, j)$, so its gradient sums over $j$, and $k_jW_k$'s over $i$. The
# checker compares with a reference and with central differences.

# %% tags=["stub"]
def my_additive_attention_backward(dout, cache):
    Q, K, V, W_q, W_k, v, T, A = cache
    # YOUR CODE HERE: return (dQ, dK, dV, dW_q, dW_k, dv)
    return None


# %% tags=["check"]
from lessonkit.exercises.lesson_08 import check_additive_attention_backward

check_additive_attention_backward(my_additive_attention_backward)


# %% [markdown]
# ### Exercise 8.2 — how many layers?
#
# Write `my_layers_needed(kind, n, k)`: the number of stacked layers after which output
# position $n-1$ depends on input position $0$, for
#
# * `"conv"`: causal convolutions of kernel width `k` (output $t$ reads inputs $t-k+1 \dots t$);
# * `"dilated_conv"`: the same with dilation $k^{l-1}$ in layer $l$ (ByteNet);
# * `"restricted_attention"`: attention to the positions within `k` on each side ($k = r$).
#
# §5 measured these for a few $n$; the checker tests more, including sizes where a
# floating-point logarithm rounds the wrong way.

# %% tags=["stub"]
def my_layers_needed(kind, n, k):
    # YOUR CODE HERE: return a whole number of layers
    return None


# %% tags=["check"]
from lessonkit.exercises.lesson_08 import check_layers_needed

check_layers_needed(my_layers_needed)


# %% [markdown]
# ### Exercise 8.3 — count the FLOPs
#
# Write `my_layer_flops(kind, n, d, r)`: the matrix-product FLOPs (a multiply-add is 2) of
# one forward of one sentence through a `"recurrent"` layer (§2.1, $d_\text{in} = d$), a
# self-`"attention"` layer (the package's `MultiHeadAttention`, projections included) or a
# `"restricted_attention"` layer (§2.3, windows of $2r+1$ keys, padding included). Try it
# without looking at the table in §3. The checker counts the attention layer's FLOPs by running the
# package's layer under a wrapped `backend.matmul`, as §3 did.

# %% tags=["stub"]
def my_layer_flops(kind, n, d, r):
    # YOUR CODE HERE: return the number of FLOPs
    return None


# %% tags=["check"]
from lessonkit.exercises.lesson_08 import check_layer_flops

check_layer_flops(my_layer_flops)


# %% [markdown]
# ### Exercise 8.4 — remove one head
#
# Write `my_ablate_head(mha, x, head)`: the self-attention output of the package's
# `MultiHeadAttention` `mha` on `x` (B, n, d_model), with head `head` (counted from 0)
# removed as in §10: its output set to zero before $W^O$, the other heads and the bias $b^O$
# unchanged. Use the layer's public steps (`mha.project_qkv`, `attention_forward` from
# `minitransformer.layers.attention`, `mha.output`), and leave `mha` as it was: the next head
# must find the layer intact. The checker compares with another route to the same answer
# (zeroing the head's $d_k$ rows of $W^O$).

# %% tags=["stub"]
def my_ablate_head(mha, x, head):
    # YOUR CODE HERE: return y, (B, n, d_model)
    return None


# %% tags=["check"]
from lessonkit.exercises.lesson_08 import check_head_ablation

check_head_ablation(my_ablate_head)


# %% [markdown] tags=["solution"]
# ---
# ## Solutions
#
# Try the exercises first. Each solution is followed by the checking cell that proves it.

# %% tags=["solution"]
def solution_additive_attention_backward(dout, cache):
    Q, K, V, W_q, W_k, v, T, A = cache
    dA = dout @ V.swapaxes(-1, -2)                               # O = A V
    dV = A.swapaxes(-1, -2) @ dout
    dE = A * (dA - (dA * A).sum(axis=-1, keepdims=True))         # A = softmax(E), rows
    dv = np.einsum("bij,bija->a", dE, T)                          # E_ij = T_ij · v
    dU = dE[..., None] * v * (1.0 - T ** 2)                       # T = tanh(U)
    dQa, dKa = dU.sum(axis=2), dU.sum(axis=1)                     # U_ij = (q_i W_q) + (k_j W_k)
    d_k, d_a = W_q.shape
    dW_q = Q.reshape(-1, d_k).T @ dQa.reshape(-1, d_a)
    dW_k = K.reshape(-1, d_k).T @ dKa.reshape(-1, d_a)
    return dQa @ W_q.T, dKa @ W_k.T, dV, dW_q, dW_k, dv


check_additive_attention_backward(solution_additive_attention_backward)


# %% tags=["solution"]
def solution_layers_needed(kind, n, k):
    if kind == "conv":
        return math.ceil((n - 1) / (k - 1))        # each layer reaches k-1 further back
    if kind == "dilated_conv":
        layers, span = 0, 1                        # after L layers: k^L positions, t-k^L+1 .. t
        while span < n:
            span, layers = span * k, layers + 1
        return layers
    return math.ceil((n - 1) / k)                  # restricted: r further per layer


check_layers_needed(solution_layers_needed)


# %% tags=["solution"]
def solution_layer_flops(kind, n, d, r):
    if kind == "recurrent":
        return 2 * n * d * d + 2 * n * d * d                      # x W_x, and h W_h at n steps
    projections = 2 * n * d * (3 * d) + 2 * n * d * d             # x W^QKV, Concat(heads) W^O
    keys = n if kind == "attention" else 2 * r + 1                # keys scored per query
    return projections + 2 * n * keys * d + 2 * n * keys * d      # Q Kᵀ and A V


check_layer_flops(solution_layer_flops)

# %% tags=["solution"]
from minitransformer.layers.attention import attention_forward


def solution_ablate_head(mha, x, head):
    Q, K, V = mha.project_qkv(x)                                  # (B, h, n, d_k) each
    heads, _ = attention_forward(Q, K, V, None)                   # Eq. (1), every head: (B, h, n, d_k)
    heads = heads.copy()                                          # a new array: the layer is not touched
    heads[:, head] = 0                                            # head_i = 0 before Concat(...) W^O
    return mha.output(heads)                                      # Concat(heads) W^O + b^O


check_head_ablation(solution_ablate_head)

# %% [markdown] tags=["solution"]
# On a random layer every head matters about equally (within a factor of 2, asserted below): the change each removal makes to the
# output, relative to the output's size (the same for a trained model: replace `mha` by one of
# lesson 10's layers and `x` by its input, or zero the head's rows of `mha.W_o.data` in a copy of
# the model and measure the validation loss):

# %% tags=["solution"]
mha = MultiHeadAttention(16, 4, np.random.default_rng(8))
x = np.random.default_rng(9).standard_normal((2, 10, 16))
full = mha.forward(x)
change = [np.linalg.norm(solution_ablate_head(mha, x, i) - full) / np.linalg.norm(full) for i in range(mha.h)]
print("relative change of the output, head removed:", ", ".join(f"head {i}: {c:.2f}" for i, c in enumerate(change)))
claim("every head, removed, changes the output by a similar amount (within a factor of 2)", max(change) / min(change),
      low=1, high=2)
