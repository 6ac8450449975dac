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
# # Lesson 2 — Multi-head attention (§3.2.2–3.2.3)
#
# One attention (lesson 1) gives each query one set of weights over the keys: one way of
# deciding what is relevant. Section 3.2.2 runs **$h$ attentions side by side**, each in its own
# smaller space. Each head projects the model-width vectors (size $d_\text{model}$) down to
# $d_k = d_\text{model}/h$ dimensions with its own learned matrices, attends there, and the $h$
# results are concatenated and mixed by one more matrix $W^O$:
#
# $$\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\, W^O,
# \qquad \mathrm{head}_i = \mathrm{Attention}(Q W_i^Q,\ K W_i^K,\ V W_i^V)$$
#
# with $W_i^Q, W_i^K \in \mathbb{R}^{d_\text{model} \times d_k}$,
# $W_i^V \in \mathbb{R}^{d_\text{model} \times d_v}$ and
# $W^O \in \mathbb{R}^{h d_v \times d_\text{model}}$. The base model uses $h = 8$ and
# $d_k = d_v = 512/8 = 64$. Different heads can follow different relations (the previous word,
# the verb of this subject, ...), and because each head is $h$ times narrower, the cost stays
# that of a single full-width head (§3 below counts it).
#
# Section 3.2.3 then lists the three places the model uses this layer; §4 below builds the mask
# each one needs.
#
# | in this lesson | package |
# | --- | --- |
# | the layer, forward and backward | `minitransformer.layers.attention.MultiHeadAttention` |
# | splitting into heads, and Concat | `minitransformer.layers.attention.split_heads`, `merge_heads` |
# | Eq. (1) inside each head | `minitransformer.layers.attention.attention_forward`, `attention_backward` |
# | the masks of §3.2.3 | `minitransformer.layers.masks.causal_mask`, `padding_mask` |
#
# The package, like most implementations, also adds a bias after each projection (the paper's
# equations have none); the check in §1 shows it.
#
# The derivations in full: [docs/derivations.md §6, multi-head attention](docs/derivations.md#6-multi-head-attention-projections-split-and-concat-322),
# including [the fused projection](docs/derivations.md#the-fused-projection) that exercise 2.4 asks you to differentiate.
#
# **What it trains:** nothing; it times one attention layer for several head counts. The cell below says how long the whole lesson takes.
#
# **Terms:** each term of these lessons, in English and as Korean texts write it, is in [the glossary](docs/glossary.md).

# %%
from lessonkit.runtimes import show_cost

show_cost("02")

# %%
import os

# §3 times matrix products on one core: one BLAS thread gives steadier timings on a shared
# machine. This only works before NumPy is first imported (restart the kernel otherwise).
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

# %%
import numpy as np
import matplotlib.pyplot as plt

from minitransformer import backend

backend.set_default_dtype("float64")   # new parameters in float64: gradient checks need it (lesson 0)
np.set_printoptions(precision=4, suppress=True, linewidth=100)
plt.rcParams.update({"figure.dpi": 80, "axes.grid": True, "grid.alpha": 0.3})

# %%
import time

from lessonkit.i18n import tr        # printed prose in the notebook's language (lessons/ko/)
from minitransformer.gradcheck import check_layer, gradcheck
from minitransformer.layers.masks import causal_mask, padding_mask
from minitransformer.layers.attention import (MultiHeadAttention, attention_backward, attention_forward,
                                              merge_heads, split_heads)

# %% [markdown]
# ## 1. Split and concat are reshapes and transposes
#
# The $h$ matrices $W_1^Q, \dots, W_h^Q$ (each $d_\text{model} \times d_k$) placed side by side
# form one $d_\text{model} \times d_\text{model}$ matrix $W^Q$. So one product $X W^Q$ computes
# every head's queries at once: head $i$'s are columns $i\,d_k$ to $(i+1)\,d_k$ of the result.
# Giving the heads their own axis is then only a matter of bookkeeping:
#
# $$(B, S, d_\text{model}) \xrightarrow{\text{reshape}} (B, S, h, d_k) \xrightarrow{\text{swap axes 1, 2}} (B, h, S, d_k).$$
#
# That is `split_heads`. `merge_heads` is the reverse — swap back to `(B, S, h, d_k)`, then
# reshape to `(B, S, h·d_k)` — and it *is* the Concat of the equation. The reshape only
# regroups the last axis ($d_\text{model} = h \times d_k$, heads outermost), so neither
# computes anything. With a tiny array whose entries are their own column numbers:

# %%
x = np.tile(np.arange(8), (1, 3, 1))                 # (B=1, S=3, d_model=8): entry = column index
heads = split_heads(x, h=2)                          # (1, 2, 3, 4)
print("x[0]:\n", x[0])
print(tr("head 0:\n"), heads[0, 0], tr("\nhead 1:\n"), heads[0, 1])
print(tr("split_heads is a view (no copy):"), np.shares_memory(x, heads))
back = merge_heads(heads)
print("merge_heads(split_heads(x)) == x:", np.array_equal(back, x), tr("| a copy:"), not np.shares_memory(back, x))

# %% [markdown]
# The package stores $W^Q, W^K, W^V$ side by side in one matrix `W_qkv` of shape
# $(d_\text{model}, 3 d_\text{model})$, so self-attention makes all three projections with a
# single product. Is the layer really the paper's equation? Compute every head *literally*,
# one at a time with its own slice of the weights, concatenate, multiply by $W^O$, and compare:

# %%
rng = np.random.default_rng(0)
d_model, h = 8, 2
d_k = d_model // h
mha = MultiHeadAttention(d_model, h, rng)
mha.b_qkv.data[:] = 0.1 * rng.standard_normal(3 * d_model)   # non-zero biases, so they are tested too
x = rng.standard_normal((2, 5, d_model))                       # (B, S, d_model)

W, b = mha.W_qkv.data, mha.b_qkv.data
W_Q, W_K, W_V = W[:, :d_model], W[:, d_model:2 * d_model], W[:, 2 * d_model:]
b_Q, b_K, b_V = b[:d_model], b[d_model:2 * d_model], b[2 * d_model:]
head_outputs = []
for i in range(h):
    cols = slice(i * d_k, (i + 1) * d_k)                       # head i's columns
    q = x @ W_Q[:, cols] + b_Q[cols]                           # (B, S, d_k)
    k = x @ W_K[:, cols] + b_K[cols]
    v = x @ W_V[:, cols] + b_V[cols]
    o, _ = attention_forward(q[:, None], k[:, None], v[:, None])   # one head: (B, 1, S, d_k)
    head_outputs.append(o[:, 0])
literal = np.concatenate(head_outputs, axis=-1) @ mha.W_o.data + mha.b_o.data

print(tr("max |layer - literal Eq.|:"), np.abs(mha.forward(x) - literal).max())

# %% [markdown]
# ## 2. The backward of split and concat
#
# Both functions only move entries around: $y = P x$ for a permutation $P$ of the entries. The
# backward of a linear map is its transpose, $\delta x = P^\top \delta y$, and the transpose of
# a permutation is its inverse. So
#
# * the backward of `merge_heads` (Concat) is `split_heads`, and
# * the backward of `split_heads` is `merge_heads`.
#
# The gradient is routed back to where each entry came from, unchanged. In
# `MultiHeadAttention.backward` you can see this in the line
#
# ```python
# dheads = split_heads(dconcat.reshape(B, S_q, d), self.h)         # (B, h, S_q, d_k)
# ```
#
# (the backward of `concat = merge_heads(heads)`), and in `merge_qkv`, which writes `dQ`, `dK`,
# `dV` side by side into one `(B·S, 3·d_model)` array: the backward of the fused `W_qkv` product
# and its reshape/transpose into three heads' worth of Q, K and V (exercise 2.4 asks you to write
# it). A gradient check on `merge_heads` alone:

# %%
rng = np.random.default_rng(1)
heads = rng.standard_normal((2, 3, 4, 2))             # (B, h, S, d_k)
G = rng.standard_normal((2, 4, 6))                    # dL/d(concat): (B, S, h*d_k)
report = gradcheck(lambda: float((merge_heads(heads) * G).sum()),
                   {"heads": heads}, {"heads": split_heads(G, 3)})
print(report)
report.assert_ok()

# %% [markdown]
# **Predict**, before section 3. A multi-head attention layer with $d_\text{model} = 512$: (1) with $h = 8$ heads, how many times the parameters of the same layer with one head does it hold? (2) For $B = 2$ sentences of $S = 128$ positions, how many times the memory of its attention weights at $h = 8$ does it need at $h = 128$?

# %% tags=["predict"]
my_prediction_2_1 = None   # a number: parameters at h = 8 over h = 1


# %% tags=["predict"]
my_prediction_2_2 = None   # a number: memory of the weights at h = 128 over h = 8


# %% tags=["reveal"]
from lessonkit.predict import reveal

from minitransformer.layers.attention import MultiHeadAttention, attention_forward


def n_parameters(h):
    return sum(p.data.size for p in MultiHeadAttention(512, h, np.random.default_rng(0)).parameters())


def weights_bytes(h):
    Q = np.zeros((2, h, 128, 512 // h), dtype=np.float32)
    return attention_forward(Q, Q, Q)[1].A.nbytes


reveal(my_prediction_2_1, n_parameters(8) / n_parameters(1), what="parameters with h = 8 over h = 1, d_model = 512")
reveal(my_prediction_2_2, weights_bytes(128) / weights_bytes(8), what="bytes of attention weights at h = 128 over h = 8")


# %% [markdown]
# ## 3. $h$ heads of size $d_\text{model}/h$ cost what one head of size $d_\text{model}$ costs
#
# Count the floating-point operations (a multiply-add is 2 FLOPs) of the two products inside
# Eq. (1). For one head of width $d_k$ on one sentence:
# $QK^\top$ is $(S_q \times d_k)(d_k \times S_k)$: $2 S_q S_k d_k$ FLOPs, and $AV$ is
# $(S_q \times S_k)(S_k \times d_k)$: another $2 S_q S_k d_k$. For $h$ heads of width
# $d_k = d_\text{model}/h$ and a batch of $B$:
#
# $$h \cdot B \cdot 4\, S_q S_k \frac{d_\text{model}}{h} = 4\, B\, S_q S_k\, d_\text{model}\qquad\text{— no } h \text{ left.}$$
#
# The projections $W^Q, W^K, W^V, W^O$ are $d_\text{model} \times d_\text{model}$ whatever $h$ is,
# so they do not depend on $h$ either (exercise 2.2 counts the whole layer). What does grow with
# $h$ is everything done *per score*: there are $B \cdot h \cdot S_q \cdot S_k$ scores, each
# scaled, masked, exponentiated, summed and divided (a handful of operations each), and each
# stored — $h$ times the memory of one head.
#
# Counted, then timed: the package's `attention_forward` + `attention_backward` for
# $B = 2$, $S = 128$, $d_\text{model} = 512$, float32, on one CPU core, and $h$ from 1 to 128.
# Each setting is timed several times, interleaved with the others, and the fastest run kept
# (the fastest is the one least disturbed by whatever else the machine is doing).

# %%
B, S, d_model = 2, 128, 512
hs = [1, 2, 4, 8, 16, 32, 64, 128]
rng = np.random.default_rng(0)
inputs = {}
for h in hs:
    shape = (B, h, S, d_model // h)
    inputs[h] = [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]   # Q, K, V, dout

best = {h: np.inf for h in hs}
for _ in range(7):
    for h in hs:
        Q, K, V, dout = inputs[h]
        t0 = time.perf_counter()
        out, cache = attention_forward(Q, K, V)
        attention_backward(dout, cache)
        best[h] = min(best[h], time.perf_counter() - t0)

matmul_flops = {h: 3 * 4 * B * S * S * d_model for h in hs}   # forward 2 products, backward 4: 3x the forward's
score_ops = {h: 10 * B * h * S * S for h in hs}                # ~10 elementwise ops per score, forward + backward
print(tr(" h   d_k   matmul GFLOP   per-score Mops   scores (MB)   time (ms)"))
for h in hs:
    print(f"{h:3d} {d_model // h:5d}   {matmul_flops[h] / 1e9:9.3f}   {score_ops[h] / 1e6:11.1f}   "
          f"{B * h * S * S * 4 / 2**20:10.1f}   {best[h] * 1e3:9.2f}")

fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
axes[0].loglog(hs, [matmul_flops[h] for h in hs], "o-", label=tr("matrix products (counted)"))
axes[0].loglog(hs, [score_ops[h] for h in hs], "s--", label=tr("per-score work (estimated)"))
axes[0].set(xlabel=tr("heads h  (d_k = 512 / h)"), ylabel=tr("operations, forward + backward"),
            title=tr("What is counted"))
axes[1].semilogx(hs, [best[h] * 1e3 for h in hs], "o-", color="tab:green")
axes[1].set(xlabel=tr("heads h  (d_k = 512 / h)"), ylabel=tr("ms (fastest of 7)"), ylim=(0, None),
            title=tr("Measured: attention_forward + backward"))
for ax in axes:
    ax.set_xticks(hs, [str(h) for h in hs])
axes[0].legend(fontsize=8)
fig.tight_layout()
plt.show()

# %%
from lessonkit.prose import claim, claim_true, show_markdown

claim_true("where the heads get narrow the time climbs (h = 128 over 1.5 times h = 8)", best[hs[-1]] > 1.5 * best[8],
           f"{1e3 * best[hs[-1]]:.1f} ms against {1e3 * best[8]:.1f} ms")
moderate = [h for h in hs if h <= 8]
spread = max(best[h] for h in moderate) / min(best[h] for h in moderate)
show_markdown(
    f"The matrix-product FLOPs are the same for every $h$. In this run the time from $h = 1$ to $h = 8$ "
    f"stays within a factor of {spread:.2f} of its fastest, and at $h = {hs[-1]}$ ($d_k = {d_model // hs[-1]}$) "
    f"it is {best[hs[-1]] / best[8]:.1f} times the time at $h = 8$.")

# %% [markdown]
# Where the heads get narrow, the time climbs, although the count of matrix-product FLOPs does
# not change: the per-score work and memory grow with $h$, and many tiny matrix products run far
# below a CPU's peak speed (where exactly it starts depends on the machine, and on a shared one
# on its load at the moment). The paper's $h = 8$, $d_k = 64$ (its Table 3 also shows quality
# dropping with too many heads) is among the moderate settings.
#
# ## 4. The three uses of attention and their masks (§3.2.3)
#
# The same layer appears three times in the model; what changes is where the queries, keys
# and values come from and which mask applies. With `src` the source sentence (length $S$) and
# `tgt` the target sentence so far (length $T$), both padded:
#
# | use | queries | keys, values | mask (True = may attend) | mask shape |
# | --- | --- | --- | --- | --- |
# | encoder self-attention | encoder | encoder (same positions) | source padding | `(B, 1, 1, S)` |
# | decoder masked self-attention | decoder | decoder | causal AND target padding | `(B, 1, T, T)` |
# | encoder–decoder attention | decoder | encoder output ("memory") | source padding | `(B, 1, 1, S)` |
#
# * In the **encoder** every position may look at every real position, before or after it.
# * In the **decoder's self-attention** position $i$ must not look at positions after $i$: the
#   model is trained to predict word $i+1$ from words up to $i$, and during generation the later
#   words do not exist. The paper describes this as setting the illegal scores to $-\infty$
#   before the softmax.
# * In **encoder–decoder attention** every target position may look at every real source word:
#   this is where the translation reads the input sentence. The queries come from the decoder
#   layer below; the keys and values from the encoder's final output.
#
# In code, `forward(x, mask=...)` is self-attention and `forward(x_dec, memory, mask=...)` is
# encoder–decoder attention. The masks for a batch of two sentences (pad id 0):

# %%
pad = 0
src = np.array([[5, 8, 3, 9, 4], [6, 2, 7, 0, 0]])     # (B, S): sentence 1 has two pads
tgt = np.array([[1, 4, 4, 7], [1, 3, 0, 0]])           # (B, T): sentence 1 has two pads
S_len, T_len = src.shape[1], tgt.shape[1]
enc_mask = padding_mask(src, pad)                              # (B, 1, 1, S)
dec_mask = causal_mask(T_len, np) & padding_mask(tgt, pad)     # (B, 1, T, T)
cross_mask = padding_mask(src, pad)                            # (B, 1, 1, S), queries from tgt

rng = np.random.default_rng(0)
d_model, h = 8, 2
enc_x = rng.standard_normal((2, S_len, d_model))       # stand-ins for the embedded sentences
dec_x = rng.standard_normal((2, T_len, d_model))
uses = {
    tr("encoder self-attention"): (MultiHeadAttention(d_model, h, rng), (enc_x,), enc_mask),
    tr("decoder masked self-attention"): (MultiHeadAttention(d_model, h, rng), (dec_x,), dec_mask),
    tr("encoder-decoder attention"): (MultiHeadAttention(d_model, h, rng), (dec_x, enc_x), cross_mask),
}
weights = {}
for name, (layer, args, mask) in uses.items():
    y = layer.forward(*args, mask=mask)
    weights[name] = layer.attention_weights           # (B, h, S_q, S_k): public after every forward
    print(tr(f"{name:31s} mask {str(mask.shape):14s} -> output {y.shape}, weights {weights[name].shape}"))

def tokens(ids):
    return ["pad" if t == pad else str(t) for t in ids]

b = 1                                                  # sentence 1, the padded one; head 0
axis_tokens = {tr("encoder self-attention"): (tokens(src[b]), tokens(src[b])),
               tr("decoder masked self-attention"): (tokens(tgt[b]), tokens(tgt[b])),
               tr("encoder-decoder attention"): (tokens(tgt[b]), tokens(src[b]))}
fig, axes = plt.subplots(2, 3, figsize=(12, 6.6), layout="constrained")
for col, (name, (_, _, mask)) in enumerate(uses.items()):
    A = weights[name][b, 0]
    q_tok, k_tok = axis_tokens[name]
    axes[0, col].imshow(np.broadcast_to(mask[b, 0], A.shape), cmap="gray", vmin=0, vmax=1)
    im = axes[1, col].imshow(A, cmap="viridis", vmin=0, vmax=1)
    axes[0, col].set_title(tr(f"{name}\nmask (white = may attend)"))
    axes[1, col].set_title(tr("weights A, head 0"))
    for ax in axes[:, col]:
        ax.set_xticks(range(len(k_tok)), k_tok)
        ax.set_yticks(range(len(q_tok)), q_tok)
        ax.set(xlabel=tr("key token"), ylabel=tr("query token"))
        ax.grid(False)
fig.colorbar(im, ax=axes[1, :], shrink=0.8, label=tr("weight"))
plt.show()

# %% [markdown]
# In the middle column the last two *rows* are padded target positions: the mask hides pad
# **keys** only, so those rows still attend to the real positions; their outputs are simply
# ignored by the loss. Masking rows too would make them attend to nothing at all, which the
# package handles (lesson 1) but does not need.
#
# ## 5. Gradient check of the whole layer
#
# `check_layer` compares the gradients of the layer's input(s) and of all four parameters
# (`W_qkv`, `b_qkv`, `W_o`, `b_o`) with central differences, for masked self-attention and for
# encoder–decoder attention (which returns two input gradients: for the decoder states and for
# the memory). The extra positional arguments are passed on to `forward(x_q, x_kv, mask)`;
# gradients are checked for the float inputs that backward returns a gradient for.

# %%
rng = np.random.default_rng(2)
d_model, h, B, T, S_src = 8, 2, 2, 3, 4
x = rng.standard_normal((B, T, d_model))
memory = rng.standard_normal((B, S_src, d_model))
src_pad = np.ones((B, 1, 1, S_src), dtype=bool)
src_pad[1, ..., -1] = False

mha = MultiHeadAttention(d_model, h, rng)
report = check_layer(mha, x, None, causal_mask(T, np), names=["x", "x_kv", "mask"])
print(tr("masked self-attention\n") + str(report))
report.assert_ok()

mha = MultiHeadAttention(d_model, h, rng)
report = check_layer(mha, x, memory, src_pad, names=["x_q", "memory", "mask"])
print(tr("\nencoder-decoder attention\n") + str(report))
report.assert_ok()


# %% [markdown]
# ## 6. What one head cannot do: it averages (§2, §3.2.2)
#
# §2 of the paper pays for self-attention's one-step path between any two positions with a
# price: "reduced effective resolution due to averaging attention-weighted positions", which
# multi-head attention counteracts; §3.2.2 says it again: "with a single attention head,
# averaging inhibits" attending to different subspaces at different positions. Why averaging?
# Write one head's output at query $i$ with its value projection pulled out of the sum:
#
# $$\mathrm{head}(x)_i = \sum_j \alpha_{ij}\,(x_j W^V) = \Big(\sum_j \alpha_{ij}\, x_j\Big) W^V .$$
#
# Every position the head reads goes through the **same** $W^V$, and what comes out is **one**
# weighted average of them. If a query needs the contents of two positions $a$ and $b$ *kept
# apart* (say, the subject in one slot of its output and the object in another), one head can
# only hand it $\alpha_a c_a + \alpha_b c_b$: the two contents mixed in the same coordinates. With
# $h$ heads there are $h$ averages, each with its own $W_i^V$ into its own $d_v$ columns of the
# Concat, so one head can take $a$ and another $b$.
#
# **How much does a mixture lose?** Let $c_a, c_b$ be independent, each coordinate of unit variance,
# and let the readout see only $m = \alpha c_a + \beta c_b$. The best linear estimate of $c_a$ from
# $m$ leaves an error of variance $\beta^2/(\alpha^2+\beta^2)$ per coordinate, and that of $c_b$
# $\alpha^2/(\alpha^2+\beta^2)$: on average **one half**, whatever the weights. Checked by least
# squares on random draws, in float64 (the error relative to the targets' variance):

# %%
rng = np.random.default_rng(0)
c_a, c_b = rng.standard_normal((2, 200_000, 4))
targets = np.concatenate([c_a, c_b], axis=1)                          # what the query wants: both, apart
for alpha in (0.5, 0.7, 0.9, 1.0):
    m = alpha * c_a + (1 - alpha) * c_b                                # all that one average hands on
    coef, *_ = np.linalg.lstsq(m, targets, rcond=None)                # the best linear readout of the pair
    rel = ((m @ coef - targets) ** 2).mean() / (targets ** 2).mean()
    print(tr(f"weights {alpha:.1f} / {1 - alpha:.1f}: relative error of the best readout {rel:.4f}"))
    assert abs(rel - 0.5) < 0.01                                      # one half, whatever the weights

# %% [markdown]
# **An experiment.** Random sequences in which every position holds a random content vector $c_j$ and a
# one-hot code of its position $j$; the last position's output must be $(c_a, c_b)$, the contents of two
# fixed positions $a$ and $b$, side by side. The model is the package's `MultiHeadAttention`
# (self-attention, as in an encoder) followed by a `Linear` readout, trained with the package's `Adam`
# on the squared error, on fresh random sequences at every step, in float64. Only $h$ changes, with
# $d_k = d_\text{model}/h$, so every model has the same parameters (§3 above). A last variant keeps one
# head but blinds its queries and keys to the contents (their rows of $W^Q$ and $W^K$ held at zero), so
# its weights cannot depend on what the positions hold. The sizes, from the code below:

# %%
from minitransformer.layers.linear import Linear
from minitransformer.optim import Adam

N_POS, D_C, POS_A, POS_B, D_MODEL = 8, 4, 1, 2, 16
STEPS, BATCH, LR = 500, 64, 6e-3


def resolution_batch(rng, B):
    """x: (B, n, d_model) = [content c_j | one-hot j | 0]; target: (B, 2 d_c) = (c_a, c_b)."""
    c = rng.standard_normal((B, N_POS, D_C))
    x = np.zeros((B, N_POS, D_MODEL))
    x[..., :D_C] = c
    x[..., D_C:D_C + N_POS] = np.eye(N_POS)
    return x, np.concatenate([c[:, POS_A], c[:, POS_B]], axis=-1)


def train_resolution(h, seed, blind=False, steps=STEPS, B=BATCH, lr=LR):
    """Train MultiHeadAttention(16, h) + Linear(16, 8); return (relative test error, mean weights of the
    last query on positions a and b per head: (h, 2))."""
    init = np.random.default_rng(seed)
    mha, readout = MultiHeadAttention(D_MODEL, h, init), Linear(D_MODEL, 2 * D_C, init)
    opt = Adam(mha.parameters() + readout.parameters(), lr)
    data = np.random.default_rng(1000 + seed)

    def predict(x):
        if blind:                                                     # queries and keys cannot see c_j
            mha.W_qkv.data[:D_C, :2 * D_MODEL] = 0
        return readout.forward(mha.forward(x)[:, -1:])[:, 0]          # (B, 2 d_c): the last query's output

    for _ in range(steps):
        x, y = resolution_batch(data, B)
        err = predict(x) - y
        opt.zero_grad()
        dz = np.zeros((B, N_POS, D_MODEL))
        dz[:, -1:] = readout.backward((2 * err / err.size)[:, None])   # d(mean squared error)
        mha.backward(dz)
        opt.step()
    x, y = resolution_batch(np.random.default_rng(7), 2000)
    rel = ((predict(x) - y) ** 2).mean() / (y ** 2).mean()
    weights = mha.attention_weights[:, :, -1][:, :, [POS_A, POS_B]].mean(axis=0)
    return float(rel), weights


variants = [(1, False), (2, False), (8, False), (1, True)]
seeds = (0, 1, 2)
show_markdown(f"$n = {N_POS}$ positions, contents of {D_C} numbers, positions $a = {POS_A}$ and $b = {POS_B}$, "
              f"$d_\\text{{model}} = {D_MODEL}$; $h$ = {', '.join(str(h) for h, blind in variants if not blind)}; "
              f"seeds {', '.join(map(str, seeds))}; {STEPS:,} Adam steps (learning rate {LR:g}) of {BATCH} "
              "sequences each.")
t0 = time.perf_counter()
results = {(h, blind): [train_resolution(h, s, blind) for s in seeds] for h, blind in variants}
print(tr(f"{len(variants) * len(seeds)} models trained in {time.perf_counter() - t0:.0f} s"))
print(tr(" h   queries/keys      relative test error, seeds 0 1 2     weights of the last query on (a, b), seed 0"))
for (h, blind), runs in results.items():
    errs = "  ".join(f"{r:.4f}" for r, _ in runs)
    w = "  ".join(f"({wa:.2f}, {wb:.2f})" for wa, wb in runs[0][1])
    print(f"{h:2d}   {tr('blind to c_j') if blind else tr('see everything'):15s}   {errs}       {w}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
labels = [f"h = {h}" + (tr(", blind") if blind else "") for h, blind in variants]
for i, v in enumerate(variants):
    errs = [r for r, _ in results[v]]
    axes[0].scatter([i] * len(errs), errs, color="C3" if v[0] == 1 else "C0", zorder=3)
axes[0].axhline(0.5, color="gray", ls="--", label=tr("best readout of one average: 1/2"))
axes[0].set(xticks=range(len(variants)), xticklabels=labels, yscale="log", ylim=(1e-5, 1.5),
            ylabel=tr("relative squared error"), title=tr(f"the last query must output (c_a, c_b): {len(seeds)} seeds each"))
axes[0].legend(fontsize=8)
w1, w2 = results[(1, False)][0][1], results[(2, False)][0][1]
bars = np.concatenate([w1, w2])                                       # (1 + 2 heads, 2)
names = [tr("h = 1: head 1"), tr("h = 2: head 1"), tr("h = 2: head 2")]
axes[1].bar(np.arange(3) - 0.2, bars[:, 0], 0.4, label=tr("weight on position a"))
axes[1].bar(np.arange(3) + 0.2, bars[:, 1], 0.4, label=tr("weight on position b"))
axes[1].set(xticks=range(3), xticklabels=names, ylim=(0, 1), ylabel=tr("mean attention weight of the last query"),
            title=tr("where the heads look (seed 0)"))
axes[1].legend(fontsize=8)
fig.tight_layout()
plt.show()

# %%
err = {v: np.array([r for r, _ in runs]) for v, runs in results.items()}
one, blind = err[(1, False)], err[(1, True)]
many = np.concatenate([err[(h, False)] for h, blind in variants if h > 1])
# Margins: float64, so the four OpenBLAS kernels (OPENBLAS_CORETYPE=Haswell, SkylakeX, Zen, Sandybridge) agreed
# to 1e-12 on every error (measured when this section was written): one head 0.381-0.392, the blinded head
# 0.505-0.508, two or eight heads below 3e-4. The bounds below leave a wide margin on each side.
claim("one head: the error stays far from zero (at least 0.25 on every seed)", one.min(), low=0.25)
claim("several heads: the error is near zero (at most 0.02 on every seed and h)", many.max(), high=0.02)
claim("a head whose weights ignore the contents sits at one half", np.abs(blind - 0.5).max(), high=0.05)
claim_true("the seeing head does better than the blinded one, on every seed", bool((one < blind).all()),
           f"{one} against {blind}")
w_one = np.array([w[0] for _, w in results[(1, False)]])               # (seed, (a, b)) of the single head
claim_true("the single head splits its weight between a and b, on every seed",
           bool((w_one.min(axis=1) > 0.3).all()), str(np.round(w_one, 2)))
show_markdown(
    f"One head ends at a relative error of {one.mean():.2f} (seeds {one.min():.2f} to {one.max():.2f}), with its "
    f"weight split between the two positions it needs ({w_one[:, 0].mean():.2f} and {w_one[:, 1].mean():.2f} on "
    f"average): it averages them, as §2 says. Two heads or more reach {many.max():.0e} or less: each head takes "
    f"its own mixture through its own $W_i^V$, and two different mixtures are enough to pull the two contents "
    f"apart again. The blinded head sits at {blind.mean():.3f}, the one half of a fixed average; the seeing one "
    "does a little better because its weights depend on the contents (the keys see them), which lets a little "
    "of each content through the weights themselves.")

# %% [markdown]
# This is a task built to need two positions at once for one query, the situation §3.2.2 describes; it shows
# the mechanism, not how much it matters in translation. Lesson 11 trains row A of Table 3 on a toy translation
# task, where a model of several layers and many positions has other ways to keep information apart (another
# layer, another query position). Its record, read here:

# %%
import json

with open("experiments/table3.json") as f:
    table3 = json.load(f)
row_a = {label: np.array([r["exact_match"] for r in table3["runs"] if r["label"] == label
                          and r["task"] == table3["task"] and r["steps"] == table3["steps"]])
         for label in ("base", "h=1, d_k=64")}
eight, one_wide = row_a["base"], row_a["h=1, d_k=64"]
paper_bleu = {st["label"]: st["paper"]["bleu"] for st in table3["settings"] if st["label"] in row_a}   # Table 3
gap = eight.mean() - one_wide.mean()
noise = max(eight.std(ddof=1), one_wide.std(ddof=1))
claim_true("on lesson 11's task the gap between one head and eight is within about two seed standard deviations",
           abs(gap) < 2 * noise, f"gap {gap:.3f}, largest standard deviation {noise:.3f}")
show_markdown(
    f"There one head as wide as the model reaches an exact match of {one_wide.mean():.3f} ± {one_wide.std(ddof=1):.3f} "
    f"against {eight.mean():.3f} ± {eight.std(ddof=1):.3f} for eight heads ({len(eight)} seeds each): lower on "
    f"average, by {gap:.3f}, but by no more than about {abs(gap) / noise:.1f} times the spread between seeds, so that "
    f"task does not settle the question; the one above does. (In the paper's own row A, one head scores "
    f"{paper_bleu['h=1, d_k=64']} BLEU on its development set against {paper_bleu['base']} for eight.) Lesson 8 "
    "(§1, §4) comes back to why a one-step path is worth this price.")

# %% [markdown]
# ## Exercises
#
# Each exercise has a cell with a stub to fill in and a checking cell below it. The checker
# runs your function on fixed random inputs and compares it with the package's answer **and**,
# for a gradient, with a numerical gradient. While the stub still returns `None` it prints
# *not attempted yet*; a wrong answer raises a `WrongAnswer` (an `AssertionError`) that says what is wrong (a
# shape, or how far off the values are, with one tolerance, $10^{-6}$, in every lesson) and,
# when your answer matches a common mistake, a `hint:` line naming it; a right one prints
# `correct` with the measured errors. The checkers live in `lessonkit.exercises.lessons_0_3`.
# Exercises are numbered *lesson.exercise*. In the full notebook the solutions follow at the very
# end, if you want to peek; the student edition a teacher hands out leaves them out.

# %% [markdown]
# ### Exercise 2.1 — the backward of Concat
#
# `merge_heads` maps `heads` of shape `(B, h, S, d_k)` to `concat` of shape `(B, S, h·d_k)`.
# Given `dconcat` $= \partial L / \partial\,\mathrm{concat}$ and `h`, return `dheads`, using only
# `reshape` and `transpose` (not the package's `split_heads`).

# %% tags=["stub"]
def my_merge_heads_backward(dconcat, h):
    # YOUR CODE HERE: return dheads of shape (B, h, S, d_model // h)
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_0_3 import check_merge_heads_backward

check_merge_heads_backward(my_merge_heads_backward)


# %% [markdown]
# ### Exercise 2.2 — FLOPs of the whole layer
#
# Return the FLOPs of the matrix products in one forward pass of `MultiHeadAttention` with
# `B` sentences, `S_q` query positions, `S_k` key/value positions (encoder–decoder attention:
# they differ), width `d_model` and `h` heads. Count the projections to $Q$, $K$, $V$, the
# two products of Eq. (1) in every head, and the output projection $W^O$; a multiply-add is
# 2 FLOPs; leave out biases, the scaling and the softmax. (An $(m \times n)(n \times p)$ product
# is $2mnp$ FLOPs.)

# %% tags=["stub"]
def my_attention_flops(B, S_q, S_k, d_model, h):
    # YOUR CODE HERE: return the number of FLOPs (an int)
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_0_3 import check_attention_flops

check_attention_flops(my_attention_flops)


# %% [markdown]
# ### Exercise 2.3 — the decoder's self-attention mask
#
# Given target token ids `tgt_ids` of shape `(B, T)` and the padding id, return the boolean
# mask of shape `(B, 1, T, T)` for the decoder's masked self-attention: query `i` may attend to
# key `j` if `j <= i` **and** token `j` is not padding. Build it yourself with NumPy (without
# the package's `causal_mask`/`padding_mask`).

# %% tags=["stub"]
def my_decoder_mask(tgt_ids, pad_id):
    # YOUR CODE HERE: return a (B, 1, T, T) boolean array
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_0_3 import check_decoder_mask

check_decoder_mask(my_decoder_mask)


# %% [markdown]
# ### Exercise 2.4 — the backward of the fused projection
#
# Self-attention makes $Q$, $K$ and $V$ with one product (§1 above): for $x$ of shape
# `(B, S, d_model)`,
#
# $$[\,Q_\text{all} \mid K_\text{all} \mid V_\text{all}\,] = x\,W_\text{qkv} + b_\text{qkv},
# \qquad W_\text{qkv} = [\,W^Q \mid W^K \mid W^V\,] \in \mathbb{R}^{d_\text{model} \times 3 d_\text{model}},$$
#
# and then splits each of the three blocks into heads with `split_heads`. Given the gradients
# `dQ`, `dK`, `dV` of shape `(B, h, S, d_k)` (what `attention_backward` returns), `x` and
# `W_qkv`, return `(dx, dW_qkv, db_qkv)`. Undo the split (exercise 2.1), put the three blocks
# side by side in the right order, then it is a linear layer's backward (lesson 0, exercise 0.2).
# The derivation: [docs/derivations.md, the fused projection](docs/derivations.md#the-fused-projection).
# Use NumPy only (not `merge_heads`).

# %% tags=["stub"]
def my_qkv_projection_backward(dQ, dK, dV, x, W_qkv):
    # YOUR CODE HERE: return (dx, dW_qkv, db_qkv) with the shapes of x, W_qkv and b_qkv
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_0_3 import check_qkv_projection_backward

check_qkv_projection_backward(my_qkv_projection_backward)


# %% [markdown] tags=["solution"]
# ---
# ## Solutions
#
# Try the exercises first. Each solution is followed by the checking cell that proves it.

# %% tags=["solution"]
def solution_merge_heads_backward(dconcat, h):
    B, S, d_model = dconcat.shape
    return dconcat.reshape(B, S, h, d_model // h).transpose(0, 2, 1, 3)   # = split_heads

check_merge_heads_backward(solution_merge_heads_backward)


# %% tags=["solution"]
def solution_attention_flops(B, S_q, S_k, d_model, h):
    d_k = d_model // h
    q_proj = 2 * B * S_q * d_model * d_model           # x_q W^Q (all heads at once)
    kv_proj = 2 * 2 * B * S_k * d_model * d_model      # x_kv W^K and x_kv W^V
    scores = h * 2 * B * S_q * S_k * d_k               # Q Kᵀ in every head
    mix = h * 2 * B * S_q * S_k * d_k                  # A V in every head
    out_proj = 2 * B * S_q * d_model * d_model         # Concat(heads) W^O
    return q_proj + kv_proj + scores + mix + out_proj  # = 4 B d² (S_q + S_k) + 4 B S_q S_k d: no h

check_attention_flops(solution_attention_flops)


# %% tags=["solution"]
def solution_decoder_mask(tgt_ids, pad_id):
    T = tgt_ids.shape[1]
    causal = np.tril(np.ones((T, T), dtype=bool))[None, None, :, :]   # (1, 1, T, T)
    keys_ok = (tgt_ids != pad_id)[:, None, None, :]                  # (B, 1, 1, T): padding on the key axis
    return causal & keys_ok                                          # broadcasts to (B, 1, T, T)

check_decoder_mask(solution_decoder_mask)


# %% tags=["solution"]
def solution_qkv_projection_backward(dQ, dK, dV, x, W_qkv):
    B, h, S, d_k = dQ.shape
    d_model = h * d_k

    def merge(g):                                       # (B, h, S, d_k) -> (B·S, d_model): undo split_heads
        return g.transpose(0, 2, 1, 3).reshape(B * S, d_model)

    dqkv = np.concatenate([merge(dQ), merge(dK), merge(dV)], axis=-1)   # (B·S, 3·d_model), blocks Q | K | V
    dW_qkv = x.reshape(-1, d_model).T @ dqkv                            # (d_model, 3·d_model)
    db_qkv = dqkv.sum(axis=0)                                           # the bias is added at every position
    dx = (dqkv @ W_qkv.T).reshape(B, S, d_model)                        # the three paths into x, summed
    return dx, dW_qkv, db_qkv

check_qkv_projection_backward(solution_qkv_projection_backward)
