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
# # Lesson 1 — Scaled dot-product attention (§3.2.1, Eq. 1)
#
# Attention is how a Transformer lets each position gather information from the others.
# Every position issues a **query**: a vector saying what it is looking for. Every position
# also offers a **key**, a vector saying what it contains, and a **value**, what it will hand
# over if chosen. The query is compared with every key by a dot product; the scores are
# turned into weights that are positive and sum to one (a softmax); and the output is the
# weighted average of the values. Section 3.2.1 of the paper writes this, for all queries at
# once, as Equation (1):
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V$$
#
# with $Q \in \mathbb{R}^{S_q \times d_k}$ (one query per row), $K \in \mathbb{R}^{S_k \times d_k}$,
# $V \in \mathbb{R}^{S_k \times d_v}$, and the softmax taken along each row. In three steps,
# with $c = 1/\sqrt{d_k}$:
#
# $$S = c\, Q K^\top \in \mathbb{R}^{S_q \times S_k},\qquad A = \mathrm{softmax}_\text{rows}(S),\qquad O = A V \in \mathbb{R}^{S_q \times d_v}.$$
#
# In the package the same code handles a batch of $B$ sentences and $h$ heads (lesson 2) at
# once: `Q` is `(B, h, S_q, d_k)` and the matrix products act on the last two axes.
#
# | in this lesson | package |
# | --- | --- |
# | Eq. (1), forward | `minitransformer.layers.attention.attention_forward` |
# | the row softmax | `minitransformer.layers.attention.softmax_lastaxis` |
# | backward (derived in §4) | `minitransformer.layers.attention.attention_backward` |
# | what forward saves for backward | `minitransformer.layers.attention.AttentionCache` |
# | masks | `minitransformer.layers.masks.causal_mask`, `padding_mask`; `attention.MASK_FILL` |
#
# The derivations in full: [docs/derivations.md §4, the softmax Jacobian](docs/derivations.md#4-softmax-and-its-jacobian)
# and [§5, scaled dot-product attention with masks](docs/derivations.md#5-scaled-dot-product-attention-321-eq-1-with-masks).
#
# **What it trains:** nothing; every array is small and random. The cell below says how long the whole lesson takes.
#
# **Terms:** each term of these lessons, in English and as Korean texts write it, is in [the glossary](docs/glossary.md).

# %%
from lessonkit.runtimes import show_cost

show_cost("01")

# %%
import numpy as np
import matplotlib.pyplot as plt

from minitransformer import backend

backend.set_default_dtype("float64")   # new parameters in float64: gradient checks need it (lesson 0)
np.set_printoptions(precision=4, suppress=True, linewidth=100)
plt.rcParams.update({"figure.dpi": 80, "axes.grid": True, "grid.alpha": 0.3})

# %%
from lessonkit.i18n import tr        # printed prose in the notebook's language (lessons/ko/)
from minitransformer.layers.masks import causal_mask, padding_mask
from minitransformer.gradcheck import gradcheck, numerical_gradient, rel_error
from minitransformer.layers.attention import (attention_backward, attention_forward,
                                              softmax_lastaxis)

# %% [markdown]
# ## 1. A tiny example, by hand
#
# Two queries, three keys, $d_k = 4$ (so $\sqrt{d_k} = 2$), $d_v = 2$:
#
# $$Q = \begin{pmatrix} 1 & 0 & 1 & 0 \\ 0 & 2 & 0 & 0 \end{pmatrix},\quad
# K = \begin{pmatrix} 1 & 0 & 1 & 0 \\ 0 & 1 & 0 & 1 \\ 1 & 1 & 1 & 1 \end{pmatrix},\quad
# V = \begin{pmatrix} 1 & 0 \\ 0 & 1 \\ 1 & 1 \end{pmatrix}.$$
#
# **Scores.** $q_1 \cdot k_1 = 2$, $q_1 \cdot k_2 = 0$, $q_1 \cdot k_3 = 2$; $q_2 \cdot k_1 = 0$,
# $q_2 \cdot k_2 = 2$, $q_2 \cdot k_3 = 2$. Divided by $\sqrt{d_k} = 2$:
# $S = \begin{pmatrix} 1 & 0 & 1 \\ 0 & 1 & 1 \end{pmatrix}$.
#
# **Softmax of row 1.** $e^1, e^0, e^1 = 2.718, 1, 2.718$, which sum to $6.437$, so
# $a_1 = (0.4223,\ 0.1554,\ 0.4223)$. Row 2 has the same numbers in another order:
# $a_2 = (0.1554,\ 0.4223,\ 0.4223)$. Each row sums to 1.
#
# **Output.** $o_1 = 0.4223\,(1,0) + 0.1554\,(0,1) + 0.4223\,(1,1) = (0.8446,\ 0.5777)$ and
# $o_2 = 0.1554\,(1,0) + 0.4223\,(0,1) + 0.4223\,(1,1) = (0.5777,\ 0.8446)$.
# Query 1 resembles keys 1 and 3, so it takes mostly their values; query 2 mostly those of keys 2 and 3.
#
# The package, on the same numbers (with batch and head axes of size 1 in front):

# %%
Q = np.array([[1, 0, 1, 0], [0, 2, 0, 0]], dtype=float)
K = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 1, 1]], dtype=float)
V = np.array([[1, 0], [0, 1], [1, 1]], dtype=float)

out, cache = attention_forward(Q[None, None], K[None, None], V[None, None])   # (1, 1, S, d) each
print(tr("scores / sqrt(d_k):\n"), Q @ K.T / 2)
print(tr("A = softmax(rows):\n"), cache.A[0, 0])
print(tr("output A V:\n"), out[0, 0])

# The numbers of the text above, to the digits written there:
assert abs(np.e - 2.718) < 5e-4 and abs(2 * np.e + 1 - 6.437) < 5e-4
by_hand_A = np.array([[0.4223, 0.1554, 0.4223], [0.1554, 0.4223, 0.4223]])
by_hand = np.array([[0.8446, 0.5777], [0.5777, 0.8446]])
assert np.allclose(cache.A[0, 0], by_hand_A, atol=5e-5) and np.allclose(out[0, 0], by_hand, atol=5e-5), \
    "the package no longer gives the hand computation"
print(tr("matches the hand computation to the 4 digits written above"))

# %% [markdown]
# The softmax subtracts each row's maximum before exponentiating: it changes nothing
# mathematically (the factor $e^{-\max}$ cancels between numerator and denominator) but keeps
# `exp` from overflowing for large scores. `softmax_lastaxis` works in place on the scores'
# buffer, which is why `attention_forward` computes a fresh score array first.
#
# ## 2. Masking
#
# Sometimes a query must not look at some keys:
#
# * **padding** — sentences in a batch have different lengths and are padded to the longest;
#   the pad positions carry no information. A padding mask has shape `(B, 1, 1, S_k)`.
# * **the future** — in the decoder, position $i$ may look at positions $\le i$ only (§3.2.3,
#   lesson 2); at generation time the later words do not exist yet. The causal mask has shape
#   `(1, 1, S_q, S_k)`, lower-triangular.
#
# In the package a mask is boolean with **True = may attend**, and it broadcasts against the
# scores `(B, h, S_q, S_k)`. Before the softmax, `attention_forward` sets the masked scores to
# `MASK_FILL` $= -10^9$; `exp` of that is exactly 0, so masked keys get weight 0:
#
# $$A_{ij} = \frac{m_{ij}\, e^{S_{ij}}}{\sum_{l} m_{il}\, e^{S_{il}}},\qquad m_{ij} \in \{0, 1\}.$$
#
# Why not $-\infty$? If *every* key of a row is masked, $-\infty - (-\infty)$ is `nan`, and one
# `nan` spreads through the whole batch. With a large finite number the row stays finite, and
# the package then sets such a row's weights to 0 (its output is 0, its gradient is 0).
#
# **True means "may attend" here; PyTorch's `nn.MultiheadAttention` means the opposite.** Its
# boolean `attn_mask` and `key_padding_mask` (and those of `nn.Transformer`) mark with True the
# keys a query must *not* attend to, so a mask of this package goes in as `~mask` (and a padding
# mask as `ids == pad_id`), as `tests/test_torch_parity.py` does. To add to the confusion,
# `torch.nn.functional.scaled_dot_product_attention` reads a boolean mask as this package does,
# True = may attend. (Both checked with torch 2.13.)

# %% [markdown]
# **Predict.** With the causal mask over $S = 6$ positions, how many of the $6 \times 6$ attention weights come out exactly 0?

# %% tags=["predict"]
my_prediction_1_1 = None   # a whole number


# %% tags=["reveal"]
from lessonkit.predict import reveal

from minitransformer.layers.attention import attention_forward
from minitransformer.layers.masks import causal_mask

_, causal_weights = attention_forward(*np.random.default_rng(1).standard_normal((3, 1, 1, 6, 4)), causal_mask(6, np))
reveal(my_prediction_1_1, int((causal_weights.A == 0).sum()), what="attention weights that are exactly 0 under the causal mask, S = 6")


# %%
rng = np.random.default_rng(0)
S, d_k = 6, 4
Q, K, V = (rng.standard_normal((1, 1, S, d_k)) for _ in range(3))
ids = np.array([[7, 3, 9, 4, 0, 0]])                  # one sentence of 4 tokens, then 2 pads (pad id 0)
masks = {tr("no mask"): None,
         tr("padding mask (1, 1, 1, S)"): padding_mask(ids, pad_id=0),
         tr("causal mask (1, 1, S, S)"): causal_mask(S, np)}

fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), layout="constrained")
for ax, (title, mask) in zip(axes, masks.items()):
    _, c = attention_forward(Q, K, V, mask)
    im = ax.imshow(c.A[0, 0], vmin=0, vmax=1, cmap="viridis")
    ax.set(title=title, xlabel=tr("key position j"))
    ax.grid(False)
axes[0].set_ylabel(tr("query position i"))
fig.colorbar(im, ax=axes, shrink=0.8, label=tr("weight $A_{ij}$"))
plt.show()

print(tr("causal mask:\n"), causal_mask(S, np)[0, 0].astype(int))

# %% [markdown]
# A mask must really cut the dependence: with the causal mask, changing the **last** key and
# value cannot change any earlier output. And a row with nothing to attend to stays finite:

# %%
mask = causal_mask(S, np)
out1, _ = attention_forward(Q, K, V, mask)
K2, V2 = K.copy(), V.copy()
K2[..., -1, :] += 5.0
V2[..., -1, :] += 5.0
out2, _ = attention_forward(Q, K2, V2, mask)
print(tr("largest change of outputs 0..4:"), np.abs(out2[..., :-1, :] - out1[..., :-1, :]).max())
print(tr("change of the last output:     "), np.abs(out2[..., -1, :] - out1[..., -1, :]).max().round(3))

with np.errstate(invalid="ignore"):                   # the naive softmax of an all -inf row
    s = np.full(3, -np.inf)
    print(tr("naive softmax of [-inf, -inf, -inf]:"), np.exp(s - s.max()) / np.exp(s - s.max()).sum())
nothing = np.zeros((1, 1, S, S), dtype=bool)          # every key masked for every query
out, c = attention_forward(Q, K, V, nothing)
print(tr("package, every key masked: finite ="), np.isfinite(out).all(), tr("| row sums of A:"), c.A[0, 0].sum(-1))

# %% [markdown]
# ## 3. The softmax Jacobian
#
# For one row, $a = \mathrm{softmax}(s)$ with $a_i = e^{s_i} / \sum_k e^{s_k}$. Taking logs,
# $\log a_i = s_i - \log \sum_k e^{s_k}$, and differentiating with respect to $s_j$:
#
# $$\frac{\partial \log a_i}{\partial s_j} = \delta_{ij} - \frac{e^{s_j}}{\sum_k e^{s_k}} = \delta_{ij} - a_j
# \quad\Longrightarrow\quad
# J_{ij} = \frac{\partial a_i}{\partial s_j} = a_i(\delta_{ij} - a_j),\qquad J = \mathrm{diag}(a) - a a^\top.$$
#
# Every weight depends on every score of its row: raising one score lifts its own weight
# ($J_{ii} = a_i(1-a_i) > 0$) and lowers all the others ($J_{ij} = -a_i a_j < 0$). Each row of $J$
# sums to zero, because adding the same constant to every score changes nothing.
#
# **Backward.** Given $\delta a = \partial L/\partial a$, the chain rule gives
# $\delta s_j = \sum_i \delta a_i\, J_{ij}$, that is $\delta s = J^\top \delta a$. Writing it out,
#
# $$\delta s_j = \sum_i \delta a_i\, a_i (\delta_{ij} - a_j) = a_j\Big(\delta a_j - \sum_i \delta a_i a_i\Big),
# \qquad\text{so}\qquad \delta s = a \odot \big(\delta a - (\delta a \cdot a)\,\mathbf{1}\big).$$
#
# The $S_k \times S_k$ matrix $J$ is never built: one dot product per row and an elementwise
# product give $\delta s$ in $O(S_k)$ work per row instead of $O(S_k^2)$. These are the two lines
# `dA -= backend.rowdot(dA, A); dA *= A` in `attention_backward` (`rowdot(dA, A)` is the row sum
# of `dA * A`, computed without building `dA * A`).
# Checked here on one row, against $J$ built explicitly and against numerical derivatives of
# the package's `softmax_lastaxis`:

# %%
s = np.array([2.0, 1.0, 0.1, -1.0])
a = softmax_lastaxis(s.copy())                        # in place, so give it a copy
J = np.diag(a) - np.outer(a, a)
J_numeric = np.stack([numerical_gradient(lambda: softmax_lastaxis(s.copy())[i], s) for i in range(4)])
print("J =\n", J)
print(tr(f"rel error J vs numerical: {rel_error(J, J_numeric):.1e} | largest |row sum|: {np.abs(J.sum(axis=1)).max():.0e}"))

da = np.random.default_rng(1).standard_normal(4)
print("J^T da                :", J.T @ da)
print("a * (da - (da . a))   :", a * (da - da @ a))

# %% [markdown]
# When the softmax is sure of itself — one weight near 1, the rest near 0 — every entry of
# $J$ is near 0: $a_i(1 - a_i) \approx 0$ and $a_i a_j \approx 0$. **A saturated softmax passes
# almost no gradient back to its scores.** Here is $J$ for the scores above, and for the same
# scores multiplied by 4 and by 16 (sharper and sharper rows):

# %%
fig, axes = plt.subplots(1, 3, figsize=(10, 3.4), layout="constrained")
for ax, k in zip(axes, (1, 4, 16)):
    a_k = softmax_lastaxis(k * s)
    im = ax.imshow(np.diag(a_k) - np.outer(a_k, a_k), vmin=-0.25, vmax=0.25, cmap="RdBu_r")
    ax.set(title=tr(f"scores x {k}\nlargest weight {a_k.max():.3f}"), xticks=range(4), yticks=range(4), xlabel="j")
    ax.grid(False)
axes[0].set_ylabel("i")
fig.colorbar(im, ax=axes, shrink=0.8, label="$J_{ij}$")
plt.show()

# %% [markdown]
# ## 4. Why divide by $\sqrt{d_k}$
#
# The paper explains the scale (§3.2.1 and its footnote) with a variance argument. If the
# entries of $q$ and $k$ are independent with mean 0 and variance 1, then
# $q \cdot k = \sum_{l=1}^{d_k} q_l k_l$ is a sum of $d_k$ independent terms of variance 1: its
# variance is $d_k$, its typical size $\sqrt{d_k}$. With $d_k = 64$ the scores spread over
# roughly $\pm 8$, the softmax is nearly one-hot, and — by §3 — almost no gradient gets
# through. Dividing by $\sqrt{d_k}$ brings the variance back to 1 whatever $d_k$ is.
#
# A claim we can test. For $d_k$ from 2 to 1024 we draw random $Q, K, V$ (64 independent
# sentences of 16 positions each), run `attention_forward` as it is (scaled) and with the
# scale undone (passing $Q\sqrt{d_k}$, so the scores are the raw $QK^\top$), and measure:
#
# 1. the spread of the scores;
# 2. saturation: the largest weight in each row, on average (1 = one-hot);
# 3. gradient size: for a random upstream $\delta A$, the fraction of it that reaches the
#    scores, $\|\delta S\| / \|\delta A\|$ per row (median over rows), with
#    $\delta S = J^\top \delta A$ from the Jacobian of §3, built explicitly.

# %% [markdown]
# **Predict.** *Without* the $1/\sqrt{d_k}$ (the raw $QK^\top$), at $d_k = 1024$: what fraction of an upstream gradient reaches the scores, $\|\delta S\| / \|\delta A\|$ (the median over rows)? A number, such as `0.1`.

# %% tags=["predict"]
my_prediction_1_2 = None   # a number: the fraction of the gradient that gets through, unscaled, d_k = 1024


# %%
rng = np.random.default_rng(0)
n_sent, S, d_v = 64, 16, 8
d_ks = 2 ** np.arange(1, 11)
assert (d_ks[0], d_ks[-1]) == (2, 1024)          # the range the text names
stats = {name: {"std": [], "max_w": [], "gain": []} for name in (tr("scaled (Eq. 1)"), tr("unscaled"))}
for d_k in d_ks:
    Q = rng.standard_normal((n_sent, 1, S, d_k))
    K = rng.standard_normal((n_sent, 1, S, d_k))
    V = rng.standard_normal((n_sent, 1, S, d_v))
    dA = rng.standard_normal((n_sent, 1, S, S))
    for name, q_factor in ((tr("scaled (Eq. 1)"), 1.0), (tr("unscaled"), np.sqrt(d_k))):
        _, c = attention_forward(Q * q_factor, K, V)
        scores = (Q * q_factor) @ K.swapaxes(-1, -2) * c.scale
        A = c.A
        J = A[..., :, None] * np.eye(S) - A[..., :, None] * A[..., None, :]    # (.., S_q, S_k, S_k)
        dS = np.einsum("...ij,...i->...j", J, dA)                               # J^T dA, row by row
        stats[name]["std"].append(scores.std())
        stats[name]["max_w"].append(A.max(axis=-1).mean())
        stats[name]["gain"].append(np.median(np.linalg.norm(dS, axis=-1) / np.linalg.norm(dA, axis=-1)))

fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
for name, st in stats.items():
    axes[0].loglog(d_ks, st["std"], "o-", label=name)
    axes[1].semilogx(d_ks, st["max_w"], "o-", label=name)
    axes[2].loglog(d_ks, st["gain"], "o-", label=name)
axes[0].loglog(d_ks, np.sqrt(d_ks), "k:", label=r"$\sqrt{d_k}$")
axes[0].set(title=tr("spread of the scores"), ylabel=tr("std of scores"))
axes[1].set(title=tr("saturation"), ylabel=tr("mean of the largest weight per row"), ylim=(0, 1.02))
axes[2].set(title=tr("gradient reaching the scores"), ylabel=tr(r"median $\|\delta S\| / \|\delta A\|$"))
for ax in axes:
    ax.set_xlabel("$d_k$")
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
for name, st in stats.items():
    print(tr(f"{name:15s} d_k = 64: std {st['std'][5]:5.2f}, max weight {st['max_w'][5]:.2f}, gradient fraction {st['gain'][5]:.1e}"
             f" | d_k = 1024: {st['gain'][-1]:.1e}"))

from lessonkit.prose import claim, claim_true

scaled, unscaled = stats[tr("scaled (Eq. 1)")], stats[tr("unscaled")]
for std in scaled["std"]:
    claim("with the scale the scores keep unit spread", std, 1.0, tol=0.1)
claim_true("with the scale a steady fraction of the gradient reaches the scores",
           max(scaled["gain"]) < 2 * min(scaled["gain"]), f"it ranges over {min(scaled['gain']):.2g}..{max(scaled['gain']):.2g}")
claim_true("with the scale the weights stay spread over several keys (largest weight under 0.5 on average)",
           max(scaled["max_w"]) < 0.5, f"up to {max(scaled['max_w']):.2f}")
for d_k, std in zip(d_ks, unscaled["std"]):
    claim(f"without it the spread grows like sqrt(d_k) (d_k = {d_k}: std / sqrt(d_k))", std / np.sqrt(d_k), 1.0, tol=0.1)
claim("without it the softmax becomes nearly one-hot at the largest d_k (largest weight)", unscaled["max_w"][-1],
      low=0.8)
claim_true("without it the gradient collapses by orders of magnitude",
           unscaled["gain"][-1] < scaled["gain"][-1] / 100, f"{unscaled['gain'][-1]:.1e} against {scaled['gain'][-1]:.1e}")

# %% tags=["reveal"]
from lessonkit.predict import reveal

reveal(my_prediction_1_2, float(unscaled["gain"][-1]),
       what="median fraction of the gradient reaching the scores without the scale, d_k = 1024")


# %% [markdown]
# With the scale, nothing depends on $d_k$: the scores keep unit spread, the weights stay
# spread over several keys, and a steady fraction of the gradient reaches the scores. Without
# it, the spread grows like $\sqrt{d_k}$, the softmax becomes nearly one-hot, and the gradient
# through it collapses by orders of magnitude — the queries and keys would hardly learn.
# (Additive attention, the alternative the paper compares with, has no such dot product to
# blow up; the scale is what lets the faster dot-product form keep up at large $d_k$.)
#
# ## 5. The backward pass of attention, step by step
#
# Forward, as three steps: $S = c\,QK^\top$, $A = \mathrm{softmax}_\text{rows}(S)$, $O = AV$.
# Backward receives $\delta O = \partial L / \partial O$ and undoes them in reverse order.
#
# **$O = AV$.** $O_{ik} = \sum_j A_{ij} V_{jk}$, so
# $\frac{\partial L}{\partial A_{ij}} = \sum_k \delta O_{ik} V_{jk}$ and
# $\frac{\partial L}{\partial V_{jk}} = \sum_i A_{ij}\, \delta O_{ik}$:
#
# $$\delta A = \delta O\, V^\top \quad (S_q \times S_k), \qquad \delta V = A^\top \delta O \quad (S_k \times d_v).$$
#
# **$A = \mathrm{softmax}(S)$**, each row on its own (§3):
#
# $$\delta S = A \odot \big(\delta A - \mathrm{rowsum}(\delta A \odot A)\big).$$
#
# **$S = c\,QK^\top$.** $S_{ij} = c \sum_l Q_{il} K_{jl}$, so
# $\frac{\partial L}{\partial Q_{il}} = c \sum_j \delta S_{ij} K_{jl}$ and
# $\frac{\partial L}{\partial K_{jl}} = c \sum_i \delta S_{ij} Q_{il}$:
#
# $$\delta Q = c\;\delta S\, K \quad (S_q \times d_k), \qquad \delta K = c\;\delta S^\top Q \quad (S_k \times d_k).$$
#
# **Masks.** A masked entry has $A_{ij} = 0$, so $\delta S_{ij} = 0$: no gradient reaches a
# masked score, and a key masked for every query gets $\delta K_j = 0$ and $\delta V_j = 0$. The
# mask itself needs no backward.
#
# The backward needs $Q$, $K$, $V$ and $A$ (not $S$: the softmax's backward is written in
# terms of its output), which is exactly what `AttentionCache` holds. The package's
# `attention_backward` is these equations, one line each; its source is printed after Exercise 1.3,
# which asks you to write it.

# %% [markdown]
# ## 6. Gradient check
#
# $L = \sum O \odot G$ for a fixed random $G$, so $\delta O = G$; every entry of $Q$, $K$ and
# $V$ is compared with its central difference. Two cases: a batch with a padded key (and
# $S_q \ne S_k$, $d_k \ne d_v$, so a transpose in the wrong place would not go unnoticed),
# and a causal mask with one query row masked entirely.

# %%
def check_attention(Q, K, V, mask, seed=0):
    out, cache = attention_forward(Q, K, V, mask)
    G = np.random.default_rng(seed).standard_normal(out.shape)
    dQ, dK, dV = attention_backward(G, cache)

    def loss():
        return float((attention_forward(Q, K, V, mask)[0] * G).sum())

    return gradcheck(loss, {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV}), (dQ, dK, dV)

rng = np.random.default_rng(1)
B, h, S_q, S_k, d_k, d_v = 2, 2, 3, 4, 5, 3
Q = rng.standard_normal((B, h, S_q, d_k))
K = rng.standard_normal((B, h, S_k, d_k))
V = rng.standard_normal((B, h, S_k, d_v))
pad = np.ones((B, 1, 1, S_k), dtype=bool)
pad[1, ..., -1] = False                                   # sentence 1: last key is padding
report, (dQ, dK, dV) = check_attention(Q, K, V, pad)
print(tr("padding mask:\n") + str(report))
report.assert_ok()
print(tr("gradient reaching the padded key: dK"), np.abs(dK[1, :, -1]).max(), " dV", np.abs(dV[1, :, -1]).max())

S = 4
Qc, Kc, Vc = (rng.standard_normal((1, 2, S, d_k)) for _ in range(3))
causal = causal_mask(S, np).copy()
causal[..., 0, :] = False                                 # query 0 may see nothing at all
report, _ = check_attention(Qc, Kc, Vc, causal)
print(tr("\ncausal mask, one row fully masked:\n") + str(report))
report.assert_ok()


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
# ### Exercise 1.1 — softmax backward
#
# Given `A = softmax(S)` over the last axis and `dA` $= \partial L/\partial A$, both of shape
# `(B, h, S_q, S_k)`, return `dS` $= \partial L/\partial S$ without building the Jacobian (§3).

# %% tags=["stub"]
def my_softmax_backward(dA, A):
    # YOUR CODE HERE: return dS given dA = dL/dA and A = softmax(S) (rows)
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_0_3 import check_softmax_backward

check_softmax_backward(my_softmax_backward)


# %% [markdown]
# ### Exercise 1.2 — a causal mask
#
# Return the decoder's mask for `T` positions: a boolean array of shape `(1, 1, T, T)` that is
# True where query `i` may attend to key `j`, i.e. where `j <= i`. (`np.tril` helps.) The
# checker also confirms that, with your mask, the last token cannot change earlier outputs.

# %% tags=["stub"]
def my_causal_mask(T):
    # YOUR CODE HERE: return a (1, 1, T, T) boolean array, True where j <= i
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_0_3 import check_causal_mask

check_causal_mask(my_causal_mask)


# %% [markdown]
# ### Exercise 1.3 — attention backward, from the cache
#
# Write the whole backward pass of §5. `cache` is the `AttentionCache` that
# `attention_forward` returned: `cache.Q`, `cache.K`, `cache.V`, `cache.A` (the weights,
# already masked) and `cache.scale` $= 1/\sqrt{d_k}$. Return `(dQ, dK, dV)` for
# `dout` $= \partial L/\partial O$ of shape `(B, h, S_q, d_v)`. For a batched transpose of the
# last two axes use `x.swapaxes(-1, -2)` (`.T` would reverse all four axes).

# %% tags=["stub"]
def my_attention_backward(dout, cache):
    Q, K, V, A, scale = cache
    # YOUR CODE HERE: return (dQ, dK, dV)
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_0_3 import check_attention_backward

check_attention_backward(my_attention_backward)


# %% [markdown]
# The package's `attention_backward`, to compare with yours (each line is one equation of §5):

# %% tags=["reveal"]
import inspect

print(inspect.getsource(attention_backward))


# %% [markdown] tags=["solution"]
# ---
# ## Solutions
#
# Try the exercises first. Each solution is followed by the checking cell that proves it.

# %% tags=["solution"]
def solution_softmax_backward(dA, A):
    return A * (dA - (dA * A).sum(axis=-1, keepdims=True))     # a ⊙ (da − (da·a)) per row

check_softmax_backward(solution_softmax_backward)


# %% tags=["solution"]
def solution_causal_mask(T):
    return np.tril(np.ones((T, T), dtype=bool))[None, None, :, :]

check_causal_mask(solution_causal_mask)


# %% tags=["solution"]
def solution_attention_backward(dout, cache):
    Q, K, V, A, scale = cache
    dV = A.swapaxes(-1, -2) @ dout                              # O = A V
    dA = dout @ V.swapaxes(-1, -2)
    dS = A * (dA - (dA * A).sum(axis=-1, keepdims=True))        # A = softmax(S)
    dQ = scale * (dS @ K)                                       # S = scale · Q Kᵀ
    dK = scale * (dS.swapaxes(-1, -2) @ Q)
    return dQ, dK, dV

check_attention_backward(solution_attention_backward)
