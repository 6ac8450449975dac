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
# # Lesson 6 — Positional encoding (§3.5)
#
# Attention by itself ignores order: shuffle the input positions and the outputs are shuffled the same way,
# nothing else changes. Since the model has no recurrence and no convolution, §3.5 adds to each input
# embedding a vector that depends only on the position. The paper uses fixed sinusoids, one frequency per
# pair of dimensions:
#
# $$PE_{(pos,\,2i)} = \sin(pos\;\omega_i),\qquad PE_{(pos,\,2i+1)} = \cos(pos\;\omega_i),\qquad
# \omega_i = 10000^{-2i/d_\text{model}},\quad i = 0,\dots,\tfrac{d_\text{model}}2-1 .$$
#
# The wavelengths $2\pi/\omega_i$ grow geometrically, from $2\pi$ for $i=0$ to
# $2\pi\cdot 10000^{(d_\text{model}-2)/d_\text{model}}$: below $10000\cdot2\pi$, and the closer to it the larger
# $d_\text{model}$ is (section 1 prints both for the width this lesson uses). Section 3.5 also makes two
# claims that we test here:
#
# 1. for any fixed offset $k$, $PE_{pos+k}$ is a *linear function* of $PE_{pos}$ — the paper's guess at why
#    attending by relative position should be easy to learn;
# 2. sinusoids might let the model *extrapolate* to sequences longer than any seen in training — the paper's
#    reason for preferring them to learned position embeddings, which scored nearly the same (Table 3, row E).
#
# | what | where in the package |
# | --- | --- |
# | the table | `minitransformer.layers.positional.sinusoidal_table(max_len, d_model)` |
# | $x + PE$ and its backward (the identity) | `PositionalEncoding.forward`, `.backward` |
# | in the model | `Transformer.src_pos`, `tgt_pos` (one shared table); dropout on the sum (§5.4): `src_dropout`, `tgt_dropout` |
#
# The derivation in full: [docs/derivations.md §3, positional encoding](docs/derivations.md#3-positional-encoding-35).
#
# **What it trains:** nothing. The cell below says how long the whole lesson takes.
#
# **Terms:** each term of these lessons, in English and as Korean texts write it, is in [the glossary](docs/glossary.md).

# %%
from lessonkit.runtimes import show_cost

show_cost("06")

# %%
import numpy as np
import matplotlib.pyplot as plt

from minitransformer import backend

plt.rcParams.update({"figure.dpi": 80, "savefig.dpi": 80, "font.size": 9})
np.set_printoptions(precision=4, suppress=True, linewidth=110)
backend.set_default_dtype("float64")   # new parameters in float64: gradient checks need it

# %% [markdown]
# ## 0. Why it is needed
#
# Self-attention is *permutation-equivariant*: permuting the input rows permutes the output rows. Checked
# with the package's `MultiHeadAttention` (§3.2.2); once a positional encoding is added, the equality fails.

# %%
from minitransformer.layers.attention import MultiHeadAttention
from minitransformer.layers.positional import PositionalEncoding, sinusoidal_table

rng = np.random.default_rng(0)
mha = MultiHeadAttention(16, 2, rng)
x = rng.standard_normal((1, 6, 16))
perm = rng.permutation(6)
print("no PE:   max |attn(x[perm]) - attn(x)[perm]| =", np.abs(mha.forward(x[:, perm]) - mha.forward(x)[:, perm]).max())
pe = PositionalEncoding(16, max_len=32)
print("with PE: max |attn(pe(x[perm])) - attn(pe(x))[perm]| =",
      np.abs(mha.forward(pe.forward(x[:, perm])) - mha.forward(pe.forward(x))[:, perm]).max())

# %% [markdown]
# ## 1. The encoding
#
# Each column of the table is one sinusoid; the left columns oscillate fast, the right ones slowly. Every row
# (position) gets a distinct pattern, like the digits of a number written in many bases at once, but smooth.

# %%
d_model = 64
P = sinusoidal_table(128, d_model, np, np.float64)        # (max_len, d_model)
omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)   # the d_model/2 frequencies
from lessonkit.prose import show_markdown

longest = 2 * np.pi / omega[-1]
print("table shape:", P.shape, "  wavelengths 2pi/omega: from", round(2 * np.pi / omega[0], 3),
      "to", round(longest, 1), " (10000*2pi =", round(10000 * 2 * np.pi, 1), ")")
show_markdown(f"At $d_\\text{{model}} = {d_model}$ the longest wavelength is {longest / (10000 * 2 * np.pi):.0%} of "
              f"$10000\\cdot2\\pi$; at the paper's 512 it would be "
              f"{10000 ** (-2 / 512):.1%}: the wider the model, the closer to the bound.")

fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
im = axes[0].imshow(P, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest")
axes[0].set(xlabel="dimension", ylabel="position", title=f"PE table, d_model = {d_model}")
plt.colorbar(im, ax=axes[0])
for dim in (8, 9, 20, 40):
    axes[1].plot(P[:, dim], lw=1, label=f"dim {dim}")
axes[1].set(xlabel="position", ylabel="value", title="a few columns")
axes[1].legend(fontsize=8, loc="lower left")
plt.tight_layout(); plt.show()


# %% [markdown]
# **Predict.** A position's encoding dotted with itself, $PE_{pos} \cdot PE_{pos}$, at $d_\text{model} = 64$: what is it (and does it depend on pos)?

# %% tags=["predict"]
my_prediction_6_1 = None   # a number


# %% tags=["reveal"]
from lessonkit.predict import reveal

from minitransformer.layers.positional import sinusoidal_table

pe_64 = sinusoidal_table(100, 64, np, np.float64)
assert np.allclose(np.einsum("pd,pd->p", pe_64, pe_64), pe_64[0] @ pe_64[0])   # the same at every position
reveal(my_prediction_6_1, float(pe_64[37] @ pe_64[37]), what="PE(pos) · PE(pos) at d_model = 64, any pos")


# %% [markdown]
# ## 2. $PE_{pos+k}$ is a fixed linear map of $PE_{pos}$
#
# **Derivation.** Take one frequency $\omega_i$. The angle-addition formulas,
#
# $$\sin((pos+k)\omega_i) = \cos(k\omega_i)\sin(pos\,\omega_i) + \sin(k\omega_i)\cos(pos\,\omega_i),$$
# $$\cos((pos+k)\omega_i) = -\sin(k\omega_i)\sin(pos\,\omega_i) + \cos(k\omega_i)\cos(pos\,\omega_i),$$
#
# say that the pair $(PE_{pos,2i}, PE_{pos,2i+1})$ is rotated by the angle $k\omega_i$:
#
# $$\begin{pmatrix} PE_{pos+k,\,2i}\\ PE_{pos+k,\,2i+1}\end{pmatrix} =
# \underbrace{\begin{pmatrix}\cos k\omega_i & \sin k\omega_i\\ -\sin k\omega_i & \cos k\omega_i\end{pmatrix}}_{R_i(k)}
# \begin{pmatrix} PE_{pos,\,2i}\\ PE_{pos,\,2i+1}\end{pmatrix}.$$
#
# Stacking the $d_\text{model}/2$ pairs, $PE_{pos+k} = M_k\,PE_{pos}$ with $M_k = \mathrm{blockdiag}(R_0(k),\dots,R_{d/2-1}(k))$.
# $M_k$ contains $k$ and the frequencies, and no $pos$. We build it and test it on every position of a
# 10 000-row table:

# %%
def shift_matrix(k, d_model):
    """M_k: (d_model, d_model), block-diagonal, one 2x2 rotation by k * omega_i per frequency."""
    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
    c, s = np.cos(k * omega), np.sin(k * omega)
    M = np.zeros((d_model, d_model))
    i = np.arange(d_model // 2)
    M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = c, s            # row of sin((pos+k) w)
    M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = -s, c   # row of cos((pos+k) w)
    return M

d = 16
T = sinusoidal_table(10000, d, np, np.float64)
for k in (1, 5, 50, 1000):
    M = shift_matrix(k, d)
    err = np.abs(T[k:] - T[:-k] @ M.T).max()               # every pos from 0 to 9999 - k at once
    print(f"k = {k:5d}: max over {10000 - k} positions of |PE(pos+k) - M_k PE(pos)| = {err:.1e}")
M3, M5 = shift_matrix(3, d), shift_matrix(5, d)
print("M_3 M_5 == M_8:", np.abs(M3 @ M5 - shift_matrix(8, d)).max(), "   M_5^T M_5 == I:", np.abs(M5.T @ M5 - np.eye(d)).max())

# %% [markdown]
# The errors are at the level of float64 rounding of $\sin$ at arguments up to $10^4$. $M_k$ is orthogonal
# (a rotation), and the maps compose like the offsets do: $M_jM_k = M_{j+k}$.
#
# **"Does not depend on pos", from data.** Forget the formula and *fit* a matrix $\hat M$ by least squares
# to pairs $(PE_{pos}, PE_{pos+k})$, once from positions 0–1999 and once from positions 3000–4999. If a
# single $M_k$ works at all positions, both fits must find the same matrix, and it must be ours:

# %%
k = 5
M = shift_matrix(k, d)
fits = {}
windows = ((0, 2000), (3000, 5000), (0, 200))
assert [(lo, hi - 1) for lo, hi in windows] == [(0, 1999), (3000, 4999), (0, 199)]   # as the text names them
for lo, hi in windows:
    X, Y = T[lo:hi], T[lo + k:hi + k]                      # rows: PE(pos), PE(pos + k)
    M_hat_T, *_ = np.linalg.lstsq(X, Y, rcond=None)        # solves X M^T = Y
    fits[(lo, hi)] = M_hat_T.T
    print(f"positions {lo:4d}-{hi - 1:4d}: condition number of X {np.linalg.cond(X):9.2e}, "
          f"max |M_hat - M_k| = {np.abs(M_hat_T.T - M).max():.1e}")
print("the two long windows against each other:", np.abs(fits[(0, 2000)] - fits[(3000, 5000)]).max())

fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
for ax, (title, A) in zip(axes, [("$M_5$ from the frequencies", M),
                                 ("least squares, pos 0-1999", fits[(0, 2000)]),
                                 ("least squares, pos 3000-4999", fits[(3000, 5000)])]):
    ax.imshow(A, cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest"); ax.set_title(title, fontsize=9); ax.set_xticks([]); ax.set_yticks([])
plt.tight_layout(); plt.show()

# %% [markdown]
# Both long windows recover $M_5$ to about $10^{-12}$. The short window (positions 0–199) is a cautionary
# tale: over 200 positions the slowest sinusoids barely move, the data matrix is nearly singular (condition
# number about $10^{12}$), and least squares cannot pin down those blocks. The linear map is still exact;
# it is the *data* that cannot reveal it.

# %%
from lessonkit.prose import claim

for window in ((0, 2000), (3000, 5000)):
    claim(f"positions {window[0]}-{window[1] - 1} recover M_5 to about 1e-12 (log10 of the largest error)",
          np.log10(np.abs(fits[window] - M).max()), -12, tol=1)
claim("the short window's data matrix has a condition number of about 1e12 (log10)",
      np.log10(np.linalg.cond(T[0:200])), 12, tol=1)

# %% [markdown]
# ## 3. Gradient check
#
# $PE$ has no parameters, so `PositionalEncoding.backward` passes the gradient through unchanged. Checked on
# its own, and behind an embedding (the bottom of the model: $\sqrt{d_\text{model}}E[\text{ids}] + PE$), where
# only $E$ has a gradient:

# %%
from minitransformer.gradcheck import check_layer, gradcheck
from minitransformer.layers.embedding import Embedding

pe = PositionalEncoding(8, max_len=20)
print(check_layer(pe, rng.standard_normal((2, 5, 8))))

emb = Embedding(10, 8, rng)
ids = np.array([[1, 2, 3, 2, 9], [4, 4, 0, 7, 5]])
G = rng.standard_normal((2, 5, 8))
def f():
    return (pe.forward(emb.forward(ids)) * G).sum()
emb.zero_grad(); f(); emb.backward(pe.backward(G))
report = gradcheck(f, {"E": emb.E.data}, {"E": emb.E.grad.copy()})
print(report); report.assert_ok()

# %% [markdown]
# **Predict.** At $d_\text{model} = 512$, the slowest sinusoid of the table: after how many positions does it come back to where it started (its wavelength)?

# %% tags=["predict"]
my_prediction_6_2 = None   # a number of positions


# %% tags=["reveal"]
from lessonkit.predict import reveal

omega_512 = 10000.0 ** (-np.arange(0, 512, 2) / 512)            # the frequencies of §3.5, one per sin/cos pair
reveal(my_prediction_6_2, float(2 * np.pi / omega_512.min()), what="the longest wavelength at d_model = 512, in positions")


# %% [markdown]
# ## 4. Beyond the training length
#
# Suppose a model was trained on sentences of at most 64 positions. What does the encoding look like after
# that?
#
# * **The values stay bounded.** Every entry is a sine or cosine, so $|PE_{pos,j}|\le1$, and each row has the
#   same norm, $\|PE_{pos}\|^2 = \sum_i(\sin^2+\cos^2) = d_\text{model}/2$, at every position.
# * **Similarity depends only on distance.** Attention compares vectors with dot products, and
#   $PE_{pos}\cdot PE_{pos+k}$ depends on $k$ alone, as argued below, so the similarity-versus-distance curve
#   measured from position 0 and from position 5000 is one curve, and it continues smoothly past 64.
# * **One rotation generates every position.** $PE_{pos} = M_1^{\,pos}\,PE_0$: the same fixed map that links
#   neighbours inside the training range produces positions far outside it.
#
# **Why the dot product depends on $k$ alone.** That $M_k$ is orthogonal is not enough: an orthogonal matrix
# keeps lengths, $\|M_k v\| = \|v\|$, but $v\cdot M_k v$ generally still depends on $v$ (checked below with a random
# orthogonal matrix). Two more facts are needed. Write $u_i = (\sin pos\,\omega_i,\ \cos pos\,\omega_i)$ for the pair
# of columns of frequency $i$; since $M_k$ is block-diagonal,
#
# $$PE_{pos}\cdot PE_{pos+k} = PE_{pos}\cdot M_k PE_{pos} = \sum_{i=0}^{d_\text{model}/2-1} u_i\cdot R_i(k)\,u_i .$$
#
# 1. Each block is a rotation *of the plane*, by the angle $k\omega_i$, and a plane rotation turns every vector
#    by the same angle, so $u\cdot R(\theta)\,u = \|u\|^2\cos\theta$ for every $u$. Multiplied out:
#    $u_1(u_1\cos\theta + u_2\sin\theta) + u_2(-u_1\sin\theta + u_2\cos\theta) = (u_1^2 + u_2^2)\cos\theta$.
#    (In more than two dimensions no such identity holds: a rotation can fix some directions and turn others.)
# 2. Each pair has unit length at every position: $\|u_i\|^2 = \sin^2(pos\,\omega_i) + \cos^2(pos\,\omega_i) = 1$.
#
# Together:
#
# $$PE_{pos}\cdot PE_{pos+k} = \sum_{i=0}^{d_\text{model}/2-1}\cos(k\,\omega_i),$$
#
# with no $pos$ left. (The same conclusion by another road: $PE_{pos} = M_1^{pos}PE_0$ and $M_k = M_1^k$, so
# $PE_{pos}\cdot PE_{pos+k} = PE_0^\top (M_1^{pos})^\top M_1^{k}\,M_1^{pos} PE_0 = PE_0^\top M_1^k PE_0$, because
# $(M_1^{pos})^\top = M_1^{-pos}$ for an orthogonal matrix and powers of one matrix commute. Orthogonality is
# used there too, but together with every shift being a power of the one map $M_1$.) Both claims are checked
# in the next cell: the closed form against the table, and a random orthogonal matrix whose quadratic form
# does change along the rows of the table.

# %%
d = 64
L_train = 64
T = sinusoidal_table(100000, d, np, np.float64)
print("max |PE| over 100000 positions:", np.abs(T).max())
norms_sq = (T ** 2).sum(axis=1)
print("||PE(pos)||^2: min", norms_sq.min(), " max", norms_sq.max(), "  d_model/2 =", d / 2)

ks = np.arange(0, 512)
sim_0 = T[ks] @ T[0] / (d / 2)                  # cosine similarity, measured from position 0
sim_5000 = T[5000 + ks] @ T[5000] / (d / 2)     # ... and from position 5000
print("max difference between the two curves:", np.abs(sim_0 - sim_5000).max())

omega = 10000.0 ** (-np.arange(0, d, 2) / d)
closed_form = np.cos(ks[:, None] * omega).sum(axis=1)              # sum_i cos(k w_i)
print("max |PE(pos) . PE(pos+k) - sum_i cos(k w_i)| at pos 0 and 5000:",
      f"{max(np.abs(T[ks] @ T[0] - closed_form).max(), np.abs(T[5000 + ks] @ T[5000] - closed_form).max()):.1e}")
M10 = shift_matrix(10, d)
Q_random, _ = np.linalg.qr(np.random.default_rng(6).standard_normal((d, d)))   # orthogonal, not block rotations
print("orthogonal:", np.abs(Q_random.T @ Q_random - np.eye(d)).max() < 1e-12, np.abs(M10.T @ M10 - np.eye(d)).max() < 1e-12)
for name, M in (("M_10", M10), ("random orthogonal Q", Q_random)):
    quad = np.einsum("pi,ij,pj->p", T[:1000], M, T[:1000])         # PE(pos) . M PE(pos) for pos = 0..999
    print(f"PE(pos) . {name} PE(pos), pos 0-999: from {quad.min():8.4f} to {quad.max():8.4f}")

M1, v, worst = shift_matrix(1, d), T[0].copy(), 0.0
for pos in range(1, 5001):
    v = M1 @ v
    worst = max(worst, np.abs(v - T[pos]).max())
print("max |M_1^pos PE(0) - PE(pos)| for pos up to 5000:", f"{worst:.1e}")

fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
axes[0].plot(ks, sim_0, lw=1.5, label="from pos 0")
axes[0].plot(ks, sim_5000, "--", lw=1, label="from pos 5000")
axes[0].axvline(L_train, color="k", lw=0.8); axes[0].text(L_train + 5, 0.9, "training length", fontsize=8)
axes[0].set(xlabel="distance k", ylabel="cos similarity of PE(pos), PE(pos+k)", title="similarity vs distance")
axes[0].legend(fontsize=8)
S = T[:192] @ T[:192].T / (d / 2)
im = axes[1].imshow(S, cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest")
axes[1].add_patch(plt.Rectangle((-0.5, -0.5), L_train, L_train, fill=False, color="k", lw=1))
axes[1].set(xlabel="position", ylabel="position", title="PE(p) . PE(q) / (d/2), positions 0-191 (box: 0-63)")
plt.colorbar(im, ax=axes[1]); plt.tight_layout(); plt.show()

# %% [markdown]
# The similarity matrix is constant along its diagonals (a Toeplitz matrix): the pattern inside the box
# repeats unchanged outside it. None of this proves that a *trained* model generalizes to longer inputs —
# that also depends on what the attention weights learned — but the encoding itself poses no obstacle,
# whereas a learned position table trained on the first 64 positions simply has no row for any later one.
#
# In the package the table has no parameters, so a model built with a longer `max_len` has exactly the same
# weights (for the same seed) and accepts longer inputs:

# %%
from minitransformer.errors import ShapeError
from minitransformer.model import Transformer, TransformerConfig

cfg = TransformerConfig(vocab_size=12, d_model=16, h=2, N=1, d_ff=32, P_drop=0.0, max_len=64)
short, longer = Transformer(cfg, seed=0), Transformer(cfg.with_(max_len=256), seed=0)
same = all(np.array_equal(p.data, q.data) for p, q in zip(short.parameters(), longer.parameters()))
print("same parameters for max_len 64 and 256:", same)
src = rng.integers(3, 12, size=(1, 100)); tgt_in = rng.integers(3, 12, size=(1, 100))
try:
    short.forward(src, tgt_in)
except ShapeError as e:
    print("max_len=64 :", e)
print("max_len=256: logits", longer.forward(src, tgt_in).shape)


# %% [markdown]
# ## Exercises
#
# Each exercise has a cell with a stub to fill in and a checking cell below it. The checker
# runs your function on fixed random inputs and compares it with the package's answer **and**,
# for a gradient, with a numerical gradient. While the stub still returns `None` it prints
# *not attempted yet*; a wrong answer raises a `WrongAnswer` (an `AssertionError`) that says what is wrong (a
# shape, or how far off the values are, with one tolerance, $10^{-6}$, in every lesson) and,
# when your answer matches a common mistake, a `hint:` line naming it; a right one prints
# `correct` with the measured errors. The checkers live in `lessonkit.exercises.lessons_4_7`.
# Exercises are numbered *lesson.exercise*. In the full notebook the solutions follow at the very
# end, if you want to peek; the student edition a teacher hands out leaves them out.
#
# ### Exercise 6.1 — the table
#
# Write `my_sinusoidal_pe(max_len, d_model)` returning the `(max_len, d_model)` table of §3.5 for an even
# `d_model`, without calling `sinusoidal_table`.

# %% tags=["stub"]
def my_sinusoidal_pe(max_len, d_model):
    """-> PE: (max_len, d_model); even columns sin(pos w_i), odd columns cos(pos w_i)."""
    # your code here
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_4_7 import check_pe_similarity, check_sinusoidal_pe

check_sinusoidal_pe(my_sinusoidal_pe)


# %% [markdown]
# ### Exercise 6.2 — similarity in closed form
#
# §4 derived the closed form of $PE_{pos}\cdot PE_{pos+k}$ (if you skipped it, try on your own first: the
# hint is $\sin a\sin b + \cos a\cos b$). Write `my_pe_similarity(k, d_model)` that takes an array of offsets
# `k` and returns the array of dot products, without building the table and without a Python loop over `k`.
# The checker compares it with dot products of table rows from two different starting positions.

# %% tags=["stub"]
def my_pe_similarity(k, d_model):
    """k: (n,) ints -> (n,) values of PE(pos) . PE(pos + k), for any pos."""
    # your code here
    return None


# %% tags=["check"]
check_pe_similarity(my_pe_similarity)


# %% [markdown] tags=["solution"]
# ## Solutions

# %% tags=["solution"]
def sinusoidal_pe_solution(max_len, d_model):
    pos = np.arange(max_len)[:, None]                               # (max_len, 1)
    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)        # (d_model/2,)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2] = np.sin(pos * omega)
    pe[:, 1::2] = np.cos(pos * omega)
    return pe

check_sinusoidal_pe(sinusoidal_pe_solution)


# %% tags=["solution"]
def pe_similarity_solution(k, d_model):
    # sin(a) sin(b) + cos(a) cos(b) = cos(a - b), one term per frequency
    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
    return np.cos(np.asarray(k)[:, None] * omega).sum(axis=-1)

check_pe_similarity(pe_similarity_solution)
