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
# # Lesson 3 — Position-wise feed-forward network (§3.3, Eq. 2)
#
# Attention (lessons 1–2) moves information *between* positions. Each encoder and decoder layer
# then processes every position *on its own* with a small two-layer network, the same one for
# every position (§3.3). In the paper's Equation (2), for the vector $x$ at one position:
#
# $$\mathrm{FFN}(x) = \max(0,\ x W_1 + b_1)\, W_2 + b_2$$
#
# with $W_1 \in \mathbb{R}^{d_\text{model} \times d_\text{ff}}$ and
# $W_2 \in \mathbb{R}^{d_\text{ff} \times d_\text{model}}$: widen to $d_\text{ff}$, apply a ReLU,
# narrow back. The base model has $d_\text{model} = 512$ and $d_\text{ff} = 2048$. Within one
# layer every position uses the same $W_1, b_1, W_2, b_2$; different layers have their own. The
# paper offers another view of the same thing: two convolutions whose kernel covers a single
# position.
#
# | in this lesson | package |
# | --- | --- |
# | Eq. (2), forward and backward | `minitransformer.layers.feedforward.FeedForward` |
# | each of the two affine maps | `minitransformer.layers.linear.Linear`, `linear_forward`, `linear_backward` |
#
# The derivation in full: [docs/derivations.md §7, the feed-forward network and ReLU](docs/derivations.md#7-position-wise-feed-forward-network-and-relu-33-eq-2),
# built on [§1, the linear layer](docs/derivations.md#1-linear-layer).
#
# **What it trains:** nothing. The cell below says how long the whole lesson takes.
#
# **Terms:** each term of these lessons, in English and as Korean texts write it, is in [the glossary](docs/glossary.md).

# %%
from lessonkit.runtimes import show_cost

show_cost("03")

# %%
import numpy as np
import matplotlib.pyplot as plt

from minitransformer import backend

backend.set_default_dtype("float64")   # new parameters in float64: gradient checks need it (lesson 0)
np.set_printoptions(precision=4, suppress=True, linewidth=100)
plt.rcParams.update({"figure.dpi": 80, "axes.grid": True, "grid.alpha": 0.3})

# %%
from lessonkit.i18n import tr        # printed prose in the notebook's language (lessons/ko/)
from minitransformer.gradcheck import check_layer, rel_error
from minitransformer.layers.attention import MultiHeadAttention
from minitransformer.layers.feedforward import FeedForward
from minitransformer.layers.linear import linear_forward

# %% [markdown]
# Most of a layer's parameters are here: $2\, d_\text{model} d_\text{ff} + d_\text{ff} + d_\text{model}$
# for the FFN against about $4\, d_\text{model}^2$ for attention's four projections.

# %%
rng = np.random.default_rng(0)
n_ffn = FeedForward(512, 2048, rng).num_parameters()
n_att = MultiHeadAttention(512, 8, rng).num_parameters()
print(tr(f"FFN {n_ffn:,} parameters, multi-head attention {n_att:,}"))
print(tr(f"the FFN holds {n_ffn / (n_ffn + n_att):.0%} of an encoder layer's parameters (its two LayerNorms add only 2,048)"))

# %% [markdown]
# ## 1. A tiny example, by hand
#
# $d_\text{model} = 2$, $d_\text{ff} = 3$, one position $x = (2,\ 1)$, and
#
# $$W_1 = \begin{pmatrix} 1 & -1 & 0.5 \\ 0.5 & 1 & -1 \end{pmatrix},\ b_1 = (0,\ 0,\ 0.5),\qquad
# W_2 = \begin{pmatrix} 1 & 0 \\ 1 & 1 \\ 0 & -2 \end{pmatrix},\ b_2 = (0.1,\ 0).$$
#
# * $z = xW_1 + b_1 = (2 + 0.5,\ -2 + 1,\ 1 - 1) + (0, 0, 0.5) = (2.5,\ -1,\ 0.5)$
# * $\mathrm{ReLU}$: $u = (2.5,\ 0,\ 0.5)$ — the second hidden unit is off
# * $y = uW_2 + b_2 = (2.5,\ 0 - 1) + (0.1,\ 0) = (2.6,\ -1)$
#
# **Backward** with $\delta y = (1,\ 0)$ (the gradient of $L = y_1$):
#
# * $\delta u = \delta y\, W_2^\top = (1,\ 1,\ 0)$; $\ \delta W_2 = u^\top \delta y$, whose first column is $u$; $\ \delta b_2 = (1,\ 0)$
# * ReLU: $\delta z = \delta u \odot \mathbb{1}[z > 0] = (1,\ 0,\ 0)$ — the gradient is blocked at the off unit
# * $\delta W_1 = x^\top \delta z = \begin{pmatrix} 2 & 0 & 0 \\ 1 & 0 & 0 \end{pmatrix}$, $\ \delta b_1 = (1,\ 0,\ 0)$, $\ \delta x = \delta z\, W_1^\top = (1,\ 0.5)$
#
# The package on the same numbers:

# %%
ffn = FeedForward(d_model=2, d_ff=3, rng=np.random.default_rng(0))
ffn.linear1.W.data[:] = [[1, -1, 0.5], [0.5, 1, -1]]
ffn.linear1.b.data[:] = [0, 0, 0.5]
ffn.linear2.W.data[:] = [[1, 0], [1, 1], [0, -2]]
ffn.linear2.b.data[:] = [0.1, 0]

x = np.array([[[2.0, 1.0]]])                     # (B=1, S=1, d_model=2)
y = ffn.forward(x)
print("y  =", y[0, 0])
ffn.zero_grad()
dx = ffn.backward(np.array([[[1.0, 0.0]]]))
print("dx =", dx[0, 0])
print("dW1 =\n", ffn.linear1.W.grad, "\ndb1 =", ffn.linear1.b.grad)
print("dW2 =\n", ffn.linear2.W.grad, "\ndb2 =", ffn.linear2.b.grad)

# The hand computation above, checked: z, u, y, and the backward's dx, dW1, db1, db2.
z = x[0, 0] @ ffn.linear1.W.data + ffn.linear1.b.data
assert np.allclose(z, [2.5, -1, 0.5]) and np.allclose(np.maximum(z, 0), [2.5, 0, 0.5])
assert np.allclose(y[0, 0], [2.6, -1]) and np.allclose(dx[0, 0], [1, 0.5])
assert np.allclose(ffn.linear1.W.grad, [[2, 0, 0], [1, 0, 0]]) and np.allclose(ffn.linear1.b.grad, [1, 0, 0])
assert np.allclose(ffn.linear2.W.grad[:, 0], [2.5, 0, 0.5]) and np.allclose(ffn.linear2.b.grad, [1, 0])

# %% [markdown]
# **Predict.** Feed ReLU inputs drawn from a standard normal distribution: what share of its outputs are exactly 0?

# %% tags=["predict"]
my_prediction_3_1 = None   # a number between 0 and 1


# %% tags=["reveal"]
from lessonkit.predict import reveal

from minitransformer.layers.feedforward import relu

relu_out, _ = relu(np.random.default_rng(0).standard_normal(1_000_000))
reveal(my_prediction_3_1, float(np.mean(relu_out == 0)), what="share of ReLU outputs that are 0, standard normal inputs")


# %% [markdown]
# ## 2. ReLU and its backward
#
# $\mathrm{ReLU}(z) = \max(0, z)$ elementwise. Its derivative is 1 where $z > 0$ and 0 where
# $z < 0$; so, elementwise,
#
# $$\delta z = \delta u \odot \mathbb{1}[z > 0].$$
#
# At exactly $z = 0$ there is no derivative (the two sides disagree); any value in $[0, 1]$ is a
# valid "subgradient", and like most code the package uses 0. In practice an exact 0 almost
# never happens with real-valued inputs, and numerical gradient checks avoid it by keeping
# inputs away from the kink.
#
# Two details of `FeedForward`:
#
# * The mask can be computed from the **output**: $u > 0$ exactly when $z > 0$. So the forward
#   caches only $u$ (and `relu` applies the ReLU in place, writing $\max(0, z)$ into $z$'s own buffer),
#   saving a second $(B, S, d_\text{ff})$ array.
# * A unit whose $z$ is negative for *every* input passes no gradient to its weights at all and
#   stops learning (a "dead" unit). Below, the pattern of active units for a random input: about
#   half are on at each position, and which half differs from position to position.

# %%
z = np.linspace(-3, 3, 601)
rng = np.random.default_rng(0)
ffn = FeedForward(d_model=16, d_ff=48, rng=rng)
x = rng.standard_normal((1, 12, 16))               # one sentence, 12 positions
hidden = linear_forward(x, ffn.linear1.W.data, ffn.linear1.b.data)[0][0]    # z: (12, 48)

fig, axes = plt.subplots(1, 2, figsize=(12, 3.4), gridspec_kw={"width_ratios": [1, 2]})
axes[0].plot(z, np.maximum(z, 0), label=r"ReLU$(z) = \max(0, z)$")
axes[0].plot(z[z < 0], 0 * z[z < 0], "--", color="tab:orange", label=tr(r"derivative $\mathbb{1}[z > 0]$"))
axes[0].plot(z[z > 0], 1 + 0 * z[z > 0], "--", color="tab:orange")
axes[0].plot([0], [0], "o", color="tab:orange")                   # the package's choice at z = 0
axes[0].plot([0], [1], "o", mfc="white", color="tab:orange")
axes[0].set(xlabel="z", title=tr("ReLU and its derivative"))
axes[0].legend(fontsize=8)
axes[1].imshow(hidden > 0, cmap="Greys", aspect="auto", interpolation="nearest")
axes[1].set(xlabel=tr("hidden unit (d_ff = 48)"), ylabel=tr("position"),
            title=tr(f"active units (black): {np.mean(hidden > 0):.0%} on; gradient flows only through these"))
axes[1].grid(False)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Predict.** One encoder layer of the base model ($d_\text{model} = 512$, $h = 8$, $d_{ff} = 2048$) holds an attention sub-layer, a feed-forward network and two LayerNorms. What share of its parameters is the feed-forward network's?

# %% tags=["predict"]
my_prediction_3_2 = None   # a number between 0 and 1


# %% tags=["reveal"]
from lessonkit.predict import reveal

from minitransformer.layers.attention import MultiHeadAttention
from minitransformer.layers.feedforward import FeedForward

ffn_size = sum(p.data.size for p in FeedForward(512, 2048, np.random.default_rng(0)).parameters())
attention_size = sum(p.data.size for p in MultiHeadAttention(512, 8, np.random.default_rng(0)).parameters())
reveal(my_prediction_3_2, ffn_size / (ffn_size + attention_size + 2 * 2 * 512),
       what="the feed-forward network's share of an encoder layer's parameters (base model)")


# %% [markdown]
# ## 3. The same weights at every position
#
# **Forward.** Because the same weights act on each position separately, running the FFN on a
# whole `(B, S, d_model)` batch is the same as running it position by position — and shuffling
# the positions just shuffles the outputs. The FFN cannot move information between
# positions; that is attention's job. It is also why the package can fold the batch and
# position axes into one axis of $B \cdot S$ rows and do each layer as one matrix product.

# %%
rng = np.random.default_rng(1)
ffn = FeedForward(d_model=4, d_ff=8, rng=rng)
x = rng.standard_normal((2, 5, 4))
y_all = ffn.forward(x)
y_each = np.concatenate([ffn.forward(x[:, s:s + 1]) for s in range(5)], axis=1)
perm = rng.permutation(5)
print(tr("whole batch == one position at a time:"), np.allclose(y_all, y_each))
print(tr("FFN(shuffled x) == shuffled FFN(x):    "), np.allclose(ffn.forward(x[:, perm]), y_all[:, perm]))
assert np.allclose(y_all, y_each) and np.allclose(ffn.forward(x[:, perm]), y_all[:, perm])

# %% [markdown]
# **Backward.** Every position used the same $W_1$, so $W_1$'s gradient collects a
# contribution from every position — the sum of what each position alone would give:
#
# $$\delta W_1 = \sum_{b,s} x_{b,s}^\top\, \delta z_{b,s} = X^\top \delta Z \quad\text{with } X, \delta Z \text{ the } (B\cdot S)\text{-row matrices},$$
#
# and likewise for $b_1$, $W_2$, $b_2$. This is the same rule that makes a parameter used in several
# places (the tied embeddings of a later lesson) receive the sum of its gradients, and why the
# package's backward passes *add* into `Parameter.grad`. Checked: one backward over the whole
# batch against one backward per position, added up:

# %%
dy = rng.standard_normal(x.shape)
ffn.zero_grad()
ffn.forward(x)
ffn.backward(dy)
whole = {name: p.grad.copy() for name, p in ffn.named_parameters()}

ffn.zero_grad()                                   # backward adds into .grad: accumulate position by position
for s in range(5):
    ffn.forward(x[:, s:s + 1])
    ffn.backward(dy[:, s:s + 1])
for name, p in ffn.named_parameters():
    print(tr(f"{name:10s} whole batch vs sum over positions: rel error {rel_error(whole[name], p.grad):.1e}"))

# %% [markdown]
# ## 4. The backward pass of the FFN
#
# Forward, in the package's steps, for the $(B \cdot S) \times d_\text{model}$ rows $X$:
#
# $$Z = X W_1 + b_1,\qquad U = \max(0, Z),\qquad Y = U W_2 + b_2.$$
#
# Backward from $\delta Y$, in reverse, each line an instance of the linear layer's rule from
# lesson 0 ($\delta x = \delta y W^\top$, $\delta W = x^\top \delta y$, $\delta b = \sum_\text{rows}\delta y$):
#
# $$\delta U = \delta Y\, W_2^\top,\quad \delta W_2 = U^\top \delta Y,\quad \delta b_2 = \textstyle\sum_\text{rows} \delta Y$$
# $$\delta Z = \delta U \odot \mathbb{1}[U > 0]$$
# $$\delta X = \delta Z\, W_1^\top,\quad \delta W_1 = X^\top \delta Z,\quad \delta b_1 = \textstyle\sum_\text{rows} \delta Z$$
#
# `FeedForward.backward` is exactly this: `linear2.backward`, the ReLU mask (`relu_backward`),
# `linear1.backward` (each `Linear` calls `linear_backward` and adds into its parameters' `.grad`).
# The activation is a pair of functions chosen by name, `relu` and `relu_backward` here;
# `TransformerConfig(activation="gelu")` picks GELU's pair instead (both in `layers/feedforward.py`).
# Their source is printed after Exercise 3.2, which asks you to write this backward.

# %% [markdown]
# ## 5. Gradient check
#
# Every entry of the input and of $W_1, b_1, W_2, b_2$, against central differences. A kink of
# the ReLU within $h = 10^{-5}$ of some $z$ would spoil the numerical derivative there, so the
# cell also prints the smallest $|z|$ (it is far from $10^{-5}$).

# %%
rng = np.random.default_rng(3)
ffn = FeedForward(d_model=4, d_ff=8, rng=rng)
ffn.linear1.b.data[:] = 0.1 * rng.standard_normal(8)       # non-zero biases, so they are tested too
ffn.linear2.b.data[:] = 0.1 * rng.standard_normal(4)
x = rng.standard_normal((2, 3, 4))
z = linear_forward(x, ffn.linear1.W.data, ffn.linear1.b.data)[0]
print(tr(f"smallest |z|: {np.abs(z).min():.1e};  active units: {np.mean(z > 0):.0%}"))

report = check_layer(ffn, x)
print(report)
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
# ### Exercise 3.1 — ReLU backward
#
# Given `dh` $= \partial L / \partial u$ for $u = \max(0, z)$ and the pre-activation `z`, return
# `dz` $= \partial L / \partial z$ (same shape).

# %% tags=["stub"]
def my_relu_backward(dh, z):
    # YOUR CODE HERE: return dz
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_0_3 import check_relu_backward

check_relu_backward(my_relu_backward)


# %% [markdown]
# ### Exercise 3.2 — FFN backward
#
# Write the whole backward of Eq. (2) from §4, given the input `x` of shape `(B, S, d_model)`,
# the parameters `W1 (d_model, d_ff)`, `b1 (d_ff,)`, `W2 (d_ff, d_model)`, `b2 (d_model,)` and
# `dy` $= \partial L / \partial y$ of shape `(B, S, d_model)`. Recompute the forward values
# you need, and return `(dx, dW1, db1, dW2, db2)`. Remember that every position shares the
# weights (§3): fold `B` and `S` into one axis with `reshape(-1, ...)`.

# %% tags=["stub"]
def my_ffn_backward(dy, x, W1, b1, W2, b2):
    # YOUR CODE HERE: return (dx, dW1, db1, dW2, db2)
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_0_3 import check_ffn_backward

check_ffn_backward(my_ffn_backward)


# %% [markdown]
# The package's `FeedForward.forward` and `backward`, and the ReLU pair they call, to compare with yours:

# %% tags=["reveal"]
import inspect

from minitransformer.layers.feedforward import relu, relu_backward

print(inspect.getsource(FeedForward.forward))
print(inspect.getsource(FeedForward.backward))
print(inspect.getsource(relu))
print(inspect.getsource(relu_backward))


# %% [markdown] tags=["solution"]
# ---
# ## Solutions
#
# Try the exercises first. Each solution is followed by the checking cell that proves it.

# %% tags=["solution"]
def solution_relu_backward(dh, z):
    return dh * (z > 0)

check_relu_backward(solution_relu_backward)


# %% tags=["solution"]
def solution_ffn_backward(dy, x, W1, b1, W2, b2):
    d_model, d_ff = W1.shape
    z = x @ W1 + b1                                            # forward again: (B, S, d_ff)
    u = np.maximum(z, 0)
    du = dy @ W2.T                                             # Y = U W2 + b2
    dW2 = u.reshape(-1, d_ff).T @ dy.reshape(-1, d_model)
    db2 = dy.reshape(-1, d_model).sum(axis=0)
    dz = du * (z > 0)                                          # U = max(0, Z)
    dx = dz @ W1.T                                             # Z = X W1 + b1
    dW1 = x.reshape(-1, d_model).T @ dz.reshape(-1, d_ff)
    db1 = dz.reshape(-1, d_ff).sum(axis=0)
    return dx, dW1, db1, dW2, db2

check_ffn_backward(solution_ffn_backward)
