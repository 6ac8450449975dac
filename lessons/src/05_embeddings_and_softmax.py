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
# # Lesson 5 — Embeddings and softmax (§3.4)
#
# Token ids enter the model at the bottom of both stacks and leave it at the top. §3.4: learned embeddings
# map every input and output token to a vector of width $d_\text{model}$; at the top, a learned linear map
# followed by a softmax turns the decoder's output into probabilities for the next token. The section adds
# two details:
#
# * the **same weight matrix** serves all three: the source embedding, the target embedding and the
#   pre-softmax linear map (the paper points to Press & Wolf, 2016, for the idea);
# * in the embedding layers the weights are **multiplied by $\sqrt{d_\text{model}}$**.
#
# With one matrix $E\in\mathbb R^{V\times d_\text{model}}$:
#
# $$\mathrm{emb}(t) = \sqrt{d_\text{model}}\;E_{t,:},\qquad \text{logits} = y\,E^\top,\qquad p = \mathrm{softmax}(\text{logits}),$$
#
# where $y$ is the decoder output at one position. No bias, and no $\sqrt{d_\text{model}}$ on the output side.
#
# | what | where in the package |
# | --- | --- |
# | lookup × $\sqrt{d_\text{model}}$ | `minitransformer.layers.embedding.embedding_forward`, class `Embedding` |
# | its backward (scatter-add) | `embedding_backward`, which calls `minitransformer.backend.scatter_add` |
# | logits $= yE^\top$ and its backward | `TiedOutputProjection` |
# | softmax (as log-softmax, inside the loss) | `minitransformer.layers.loss.log_softmax`, `LabelSmoothedCrossEntropy` |
# | the three-way tie | `minitransformer.model.Transformer`: one `Parameter` `E` held by `src_embed`, `tgt_embed`, `output_projection` |
#
# The derivations in full: [docs/derivations.md §2, embedding, scatter-add and tying](docs/derivations.md#2-token-embedding-scatter-add-and-weight-tying-34)
# and [§11, label-smoothed cross-entropy](docs/derivations.md#11-label-smoothed-cross-entropy-54).
#
# **What it trains:** nothing. The cell below says how long the whole lesson takes.
#
# **Terms:** each term of these lessons, in English and as Korean texts write it, is in [the glossary](docs/glossary.md).

# %%
from lessonkit.runtimes import show_cost

show_cost("05")

# %%
import numpy as np
import matplotlib.pyplot as plt

from minitransformer import backend

plt.rcParams.update({"figure.dpi": 80, "savefig.dpi": 80, "font.size": 9})
np.set_printoptions(precision=4, suppress=True, linewidth=110)
backend.set_default_dtype("float64")   # new parameters in float64: gradient checks need it

# %% [markdown]
# ## 1. Lookup and scale
#
# An embedding is a table lookup: row $t$ of $E$ for token $t$, times $\sqrt{d_\text{model}}$. With
# $d_\text{model}=4$ the scale is 2:

# %%
from minitransformer.layers.embedding import (
    Embedding, TiedOutputProjection, embedding_backward, embedding_forward, init_embedding)

rng = np.random.default_rng(0)
emb = Embedding(6, 4, rng)                  # V = 6 tokens, d_model = 4
ids = np.array([[2, 5, 2]])                 # (B, S) = (1, 3): token 2 appears twice
out = emb.forward(ids)                      # (1, 3, 4)
print("out shape:", out.shape, "  scale:", emb.scale)
print("out[0, 0] == 2 * E[2]:", np.allclose(out[0, 0], 2.0 * emb.E.data[2]))
print("out[0, 0] == out[0, 2]:", np.allclose(out[0, 0], out[0, 2]))
assert np.allclose(out[0, 0], 2.0 * emb.E.data[2]) and np.allclose(out[0, 0], out[0, 2])

# %% [markdown]
# **Predict.** `init_embedding` draws $E$ with entries $\mathcal N(0, 1/d_\text{model})$. At $d_\text{model} = 512$, *before* the $\sqrt{d_\text{model}}$ factor, what is the root-mean-square of a token's embedding entries?

# %% tags=["predict"]
my_prediction_5_1 = None   # a number


# %% tags=["reveal"]
from lessonkit.predict import reveal

from minitransformer.layers.embedding import init_embedding

E_512 = init_embedding(1000, 512, np.random.default_rng(0), np, np.float64)
reveal(my_prediction_5_1, float(np.sqrt((E_512 ** 2).mean())), what="root-mean-square of E's entries at d_model = 512, unscaled")


# %% [markdown]
# ## 2. Why multiply by $\sqrt{d_\text{model}}$?
#
# The paper states the factor without giving a reason. Here is what it does *in this package*: `init_embedding`
# draws $E$ with entries $\mathcal N(0, 1/d_\text{model})$, so each row has norm about 1. That is the right size
# for the output side: the decoder output $y$ leaves a LayerNorm with entries of size about 1, so
# $\text{logits}_t = y\cdot E_{t,:}$ has a standard deviation of about 1 whatever $d_\text{model}$ is. On the input
# side the same rows have entries of size $d_\text{model}^{-1/2}$, while the positional encoding added to them
# (lesson 6) has entries of root-mean-square $1/\sqrt2$ at every width. Multiplying by $\sqrt{d_\text{model}}$
# lifts the token part to entries of size about 1, so neither the token nor the position swamps the other in
# the sum. (This is our reading with our initialization; other implementations initialize differently.)

# %%
from lessonkit.prose import claim
from minitransformer.layers.layernorm import layernorm_forward
from minitransformer.layers.positional import sinusoidal_table

def rms(a):
    return np.sqrt((a ** 2).mean())

V = 1000
print(f"{'d_model':>7} {'rms E':>8} {'rms sqrt(d)*E':>14} {'rms PE':>7} {'std of logits y E^T':>20}")
for d in (64, 512):
    E = init_embedding(V, d, rng, np, np.float64)
    pe = sinusoidal_table(200, d, np, np.float64)
    y, _ = layernorm_forward(3 * rng.standard_normal((50, d)), np.ones(d), np.zeros(d), 1e-5)  # a LayerNorm output
    print(f"{d:7d} {rms(E):8.4f} {rms(np.sqrt(d) * E):14.4f} {rms(pe):7.4f} {(y @ E.T).std():20.4f}")
    claim(f"d_model {d}: the scaled rows have entries of size about 1", rms(np.sqrt(d) * E), 1.0, tol=0.1)
    claim(f"d_model {d}: the logits have a standard deviation of about 1", (y @ E.T).std(), 1.0, tol=0.2)
    claim(f"d_model {d}: the positional encoding has root-mean-square 1/sqrt(2)", rms(pe), 2 ** -0.5, tol=0.01)

fig, ax = plt.subplots(figsize=(7, 2.8))
bins = np.linspace(-3, 3, 121)
ax.hist(E.ravel(), bins=bins, density=True, alpha=0.6, label="entries of E (d_model = 512)")
ax.hist((np.sqrt(d) * E).ravel(), bins=bins, density=True, alpha=0.6, label=r"entries of $\sqrt{d_{model}}\,E$")
ax.hist(pe.ravel(), bins=bins, density=True, alpha=0.6, label="entries of PE")
ax.set(xlabel="value", ylabel="density", title="what gets added at the bottom of the stack", ylim=(0, 3))
ax.legend(fontsize=8); plt.tight_layout(); plt.show()

# %% [markdown]
# The histogram of $E$ is cut off at the top: it is a spike of width about $512^{-1/2}\approx0.044$. The
# positional encoding piles up near $\pm1$ like any sinusoid, and extra at $+1$ because over the first 200
# positions the slowest cosine columns have hardly moved from $\cos 0 = 1$.
#
# ## 3. The backward of each use
#
# **Embedding.** $\text{out}_{b,s,:} = \sqrt{d_\text{model}}\,E_{\text{ids}_{b,s},:}$, so row $v$ of the gradient collects
# every position where token $v$ was looked up:
#
# $$\frac{\partial L}{\partial E_{v,:}} = \sqrt{d_\text{model}}\sum_{(b,s)\,:\,\text{ids}_{b,s}=v}\frac{\partial L}{\partial\,\text{out}_{b,s,:}} .$$
#
# That is a *scatter-add* (`backend.scatter_add`). Rows of tokens that did not occur get nothing, and no
# $(B\cdot S)\times V$ one-hot matrix is ever built. The trap is NumPy's fancy-index `+=`, which for repeated
# indices keeps only one of the additions:

# %%
d = 4
ids = np.array([[2, 5, 2]])                 # token 2 twice
dout = np.ones((1, 3, d))
wrong = np.zeros((6, d))
wrong[ids.reshape(-1)] += dout.reshape(-1, d) * np.sqrt(d)          # buffered: row 2 gets ONE update
right = np.zeros((6, d))
embedding_backward(dout, embedding_forward(ids, np.zeros((6, d)), np.sqrt(d))[1], right)
print("row 2, fancy-index += :", wrong[2])
print("row 2, scatter-add    :", right[2])

# %% [markdown]
# **Output projection.** $\text{logits} = y\,E^\top$ with $y$ of shape $(B,T,d_\text{model})$, so, summing over all
# $(b,t)$:
#
# $$\frac{\partial L}{\partial E} = \Big(\frac{\partial L}{\partial\,\text{logits}}\Big)^{\!\top} y \;\;(V\times d_\text{model}),\qquad
# \frac{\partial L}{\partial y} = \frac{\partial L}{\partial\,\text{logits}}\,E .$$
#
# This gradient is dense: the softmax pushes on every vocabulary entry's logit, so every row of $E$ gets
# something. Gradient checks of both layers (the embedding's input is integer ids, so only $E$ is checked
# there):

# %%
from minitransformer.gradcheck import check_layer, gradcheck, numerical_gradient, rel_error

emb = Embedding(7, 4, rng)
print(check_layer(emb, np.array([[1, 3, 3], [6, 1, 0]])))
proj = TiedOutputProjection(emb.E)          # the same Parameter object
print(check_layer(proj, rng.standard_normal((2, 3, 4))))

# %% [markdown]
# ### The softmax and the loss, differentiated together
#
# The output projection's backward starts from $\partial L/\partial\,\text{logits}$, which the loss hands down.
# The package never builds the softmax's $V\times V$ Jacobian (lesson 1): it differentiates the softmax and
# the label-smoothed cross-entropy of §5.4 as one function, and the result is short.
#
# One position: logits $z\in\mathbb R^V$, target token $y$, smoothing $\varepsilon_{ls}$ (0.1 in the paper). The
# smoothed target distribution is
#
# $$q_v = (1-\varepsilon_{ls})\,[v = y] + \frac{\varepsilon_{ls}}{V}$$
#
# (PyTorch's convention; some implementations spread $\varepsilon_{ls}$ over the $V-1$ wrong tokens instead), and
# the loss is the cross-entropy $\ell = -\sum_v q_v\log p_v$ with $p = \mathrm{softmax}(z)$. Since
# $\log p_v = z_v - \log\sum_m e^{z_m}$,
#
# $$\frac{\partial\log p_v}{\partial z_k} = [v = k] - p_k
# \quad\Rightarrow\quad
# \frac{\partial\ell}{\partial z_k} = -\sum_v q_v\big([v=k] - p_k\big) = -q_k + p_k\sum_v q_v = p_k - q_k ,$$
#
# because $q$ sums to 1. **The gradient is the prediction minus the smoothed target**, $p - q$: that is
# $p_k - \varepsilon_{ls}/V$ for every $k$, and a further $-(1-\varepsilon_{ls})$ at $k = y$. The package
# (`cross_entropy_backward`) subtracts that term *at the index* $y$ of each position, with one indexed write;
# it never looks for the target by its value. Each row of $p - q$ sums to 0: adding a constant to every logit
# changes nothing, so the gradient has no component along $(1,\dots,1)$.
#
# **Padding and the mean.** The batch loss is the mean over the $N$ positions whose target is not `<pad>`:
# $L = \frac1N\sum_{(b,t):\,y_{bt}\neq\text{pad}}\ell_{bt}$. A pad position is not in the sum, so its logits get a
# gradient of exactly 0, and every other position gets $(p - q)/N$. $N$ counts real tokens only (dividing by
# $B\cdot T$ would make the step size depend on how much padding a batch happens to have).
#
# Checked: $p - q$ written out by hand, the package's `cross_entropy_backward`, and the numerical gradient
# of `cross_entropy_forward`:

# %%
from minitransformer.layers.loss import cross_entropy_backward, cross_entropy_forward

rng = np.random.default_rng(5)
B, T, V, pad, eps_ls = 2, 4, 6, 0, 0.1
logits = 2 * rng.standard_normal((B, T, V))
targets = np.array([[3, 1, 5, 0], [2, 2, 0, 0]])                  # 0 = <pad>: 5 real tokens
loss, cache = cross_entropy_forward(logits, targets, pad, eps_ls)

p = np.exp(logits - logits.max(axis=-1, keepdims=True))
p /= p.sum(axis=-1, keepdims=True)                                 # softmax
q = np.full((B, T, V), eps_ls / V)                                 # eps/V everywhere ...
np.put_along_axis(q, targets[..., None], 1 - eps_ls + eps_ls / V, axis=-1)   # ... and 1 - eps more at y
valid = targets != pad                                             # (B, T)
N = int(valid.sum())
by_hand = (p - q) * valid[..., None] / N

package = cross_entropy_backward(cache)
numeric = numerical_gradient(lambda: cross_entropy_forward(logits, targets, pad, eps_ls)[0], logits)
print(f"loss {loss:.4f}, the mean over N = {N} non-pad tokens")
print(f"(p - q)/N by hand vs cross_entropy_backward: rel error {rel_error(by_hand, package):.1e}")
print(f"cross_entropy_backward vs numerical gradient: rel error {rel_error(package, numeric):.1e}")
print("largest gradient at a pad position:", np.abs(package[~valid]).max())
print("largest |row sum| of the gradient: ", f"{np.abs(package.sum(axis=-1)).max():.1e}")

# %% [markdown]
# ## 4. Three-way tying: one matrix, three gradients, summed
#
# Let $\ell(A, B, C)$ be the loss of a model that uses $A$ for the source embedding, $B$ for the target
# embedding and $C$ for the output projection. Tying means evaluating it at $A=B=C=E$, and the multivariable
# chain rule gives
#
# $$\frac{dL}{dE} = \frac{\partial\ell}{\partial A} + \frac{\partial\ell}{\partial B} + \frac{\partial\ell}{\partial C}\Bigg|_{A=B=C=E}.$$
#
# In the package this sum happens by itself: the three layers hold the *same* `Parameter`, and every backward
# adds (`+=`) into its `.grad`. We verify it on a tiny real model in two ways:
#
# * (a) run the body of `Transformer.backward` step by step and read off what `E.grad` gained at each of the
#   three uses;
# * (b) untie: give one use at a time its own copy of $E$ and take the numerical gradient with respect to
#   that copy alone. Each should match its piece from (a), and the three together should match the
#   numerical gradient of the tied $E$.

# %%
from minitransformer.layers.loss import LabelSmoothedCrossEntropy
from minitransformer.layers.parameter import Parameter
from minitransformer.model import Transformer, TransformerConfig, count_parameters

cfg = TransformerConfig(vocab_size=12, d_model=8, h=2, N=1, d_ff=16, P_drop=0.0, max_len=16)
model = Transformer(cfg, seed=0)
E = model.E
print("one Parameter, three uses:", model.src_embed.E is E and model.tgt_embed.E is E and model.output_projection.E is E)

# 0 = <pad>, 1 = <bos>, 2 = <eos>; the task: reverse the source
src     = np.array([[3, 4, 5, 6, 7], [8, 9, 3, 0, 0]])
tgt_in  = np.array([[1, 7, 6, 5, 4], [1, 3, 9, 8, 0]])
tgt_out = np.array([[7, 6, 5, 4, 2], [3, 9, 8, 2, 0]])
loss_fn = LabelSmoothedCrossEntropy(cfg.pad_id, eps_ls=0.1)

def loss_value():
    return loss_fn.forward(model.forward(src, tgt_in), tgt_out)

# (a) the body of Transformer.backward, reading E.grad after each use
model.zero_grad()
loss_value()
dlogits = loss_fn.backward()
dout = model.output_projection.backward(dlogits)                                          # use 1: logits = y E^T
g_out = E.grad.copy()
dy, dmemory = model.decoder.backward(dout)
model.tgt_embed.backward(model.tgt_pos.backward(model.tgt_dropout.backward(dy)))  # use 2: target embedding
g_tgt = E.grad - g_out
dx = model.encoder.backward(dmemory)
model.src_embed.backward(model.src_pos.backward(model.src_dropout.backward(dx)))  # use 3: source embedding
g_src = E.grad - g_out - g_tgt
g_total = E.grad.copy()

model.zero_grad(); loss_value(); model.backward(loss_fn.backward())
print("step by step == Transformer.backward:", np.abs(E.grad - g_total).max())

# %%
# (b) untie one use at a time and differentiate numerically with respect to its private copy
uses = {"src_embed": (model.src_embed, g_src), "tgt_embed": (model.tgt_embed, g_tgt), "output_projection": (model.output_projection, g_out)}
numeric = {}
for name, (layer, _) in uses.items():
    layer.E = Parameter(E.data.copy(), f"{name}.E")        # this use alone reads the copy
    numeric[name] = numerical_gradient(loss_value, layer.E.data)
    layer.E = E                                            # tie it back

for name, (_, analytic) in uses.items():
    print(f"use {name:<17}: analytic piece vs numerical gradient of its own copy: rel error {rel_error(analytic, numeric[name]):.1e}")
report = gradcheck(loss_value, {"E (tied)": E.data}, {"E (tied)": g_total})
print(f"sum of the three numerical pieces vs analytic tied gradient:   rel error {rel_error(g_total, sum(numeric.values())):.1e}")
print(report)
report.assert_ok()

# %% [markdown]
# Which rows of $E$ does each use touch? The embedding uses only reach the rows of tokens that appear in
# their input (and not even all of those: a padding position's embedding never influences a non-padding
# output, so row 0 gets nothing from them); the output projection reaches every row, including `<pad>` and
# `<eos>`, which never appear as inputs.

# %%
fig, ax = plt.subplots(figsize=(8, 2.8))
rows = np.arange(cfg.vocab_size)
for k, (name, g) in enumerate([("source embedding", g_src), ("target embedding", g_tgt), ("output projection", g_out)]):
    ax.bar(rows + (k - 1) * 0.27, np.linalg.norm(g, axis=1), width=0.27, label=name)
ax.set_xticks(rows, ["<pad>", "<bos>", "<eos>"] + [str(t) for t in rows[3:]])
ax.set(xlabel="row of E (token)", ylabel="norm of the row's gradient", title="what each of the three uses adds to E.grad")
ax.legend(fontsize=8); plt.tight_layout(); plt.show()
print("tokens in src:", sorted(set(src.ravel().tolist()) - {0}), "  in tgt_in:", sorted(set(tgt_in.ravel().tolist()) - {0}))

# %% [markdown]
# **Predict.** Untied, the base model (a shared vocabulary of 37 000 tokens, $d_\text{model} = 512$) would hold three $V \times d_\text{model}$ matrices instead of one. What share of that untied model would the two extra matrices be?

# %% tags=["predict"]
my_prediction_5_2 = None   # a number between 0 and 1


# %% tags=["reveal"]
from lessonkit.predict import reveal

from minitransformer.model import TransformerConfig, count_parameters

base_cfg = TransformerConfig()
two_more = 2 * base_cfg.vocab_size * base_cfg.d_model
reveal(my_prediction_5_2, two_more / (count_parameters(base_cfg) + two_more),
       what="share of the untied base model in the two extra embedding matrices")


# %% [markdown]
# ## 5. What tying saves
#
# Untied, the model would hold three $V\times d_\text{model}$ matrices; tied, one. The saving is $2\,V\,d_\text{model}$.
# For the base configuration with the shared English–German vocabulary of about 37 000 tokens (§5.1) and
# $d_\text{model}=512$ (`count_parameters` counts the tied model):

# %%
base = TransformerConfig()                        # vocab_size = 37000, d_model = 512
tied = count_parameters(base)
saved = 2 * base.vocab_size * base.d_model
print(f"tied, as in the paper : {tied:>12,}")
print(f"untied (3 matrices)   : {tied + saved:>12,}")
print(f"saved = 2 V d_model   : {saved:>12,}   ({saved / (tied + saved):.1%} of the untied model)")


# %% [markdown]
# Tying the source and target embeddings requires one vocabulary covering both languages, which a shared
# byte-pair vocabulary provides.

# %% [markdown]
# ## 6. Tying, trained: what the paper says, and what it does not (§3.4)
#
# §3.4 states the choice and its source: "we share the same weight matrix between the two embedding layers
# and the pre-softmax linear transformation, similar to" Press and Wolf (2017). It gives no reason, and it
# reports no run without sharing. Saying that sharing makes learning "more efficient" goes beyond the paper:
# fewer parameters is a count (section 5), and whether the model learns faster or better with them is a
# measurement. `lessons/experiments/sublayer_ablations.py` makes it at toy scale: lesson 11's toy model on its
# task (numbers-en-fr), trained as it is and with three separate matrices, each drawn as the shared one is,
# over the same seeds and batches:

# %%
import json

from lessonkit.prose import claim_true, show_markdown

with open("experiments/sublayer_ablations.json") as f:
    ablations = json.load(f)
made = ablations["provenance"][-1]
print("record:", made["command"], "at commit", made["commit"][:10], "on", made["machine"]["cpu"],
      f"({made['machine']['cores']} cores); task {ablations['task']}, {ablations['steps']} steps")
runs = {(r["label"], r["seed"]): r for r in ablations["runs"]}
seeds = sorted({s for lab, s in runs if lab == "base"})
print(f"{'':8s}{'parameters':>12s}   " + "   ".join(f"seed {s}: exact, perplexity" for s in seeds))
for label in ("base", "untied"):
    print(f"{'tied' if label == 'base' else 'untied':8s}{runs[label, seeds[0]]['params']:12,d}   " + "   ".join(
        f"{runs[label, s]['exact_match']:.3f}, {runs[label, s]['ppl']:.3f}     " for s in seeds))

fig, ax = plt.subplots(figsize=(7, 3.2))
for label, color in (("base", "C0"), ("untied", "C3")):
    for s in seeds:
        curve = np.array(runs[label, s]["train_curve"])
        ax.plot(curve[:, 0], curve[:, 1], color=color, alpha=0.7, label=("tied" if label == "base" else label)
                if s == seeds[0] else None)
ax.set(xlabel="step", ylabel="training loss (label-smoothed)", yscale="log", title="tied vs untied, every seed")
ax.legend(fontsize=8); plt.tight_layout(); plt.show()

# %%
tied_ppl = np.array([runs["base", s]["ppl"] for s in seeds])
untied_ppl = np.array([runs["untied", s]["ppl"] for s in seeds])
tied_exact = np.array([runs["base", s]["exact_match"] for s in seeds])
untied_exact = np.array([runs["untied", s]["exact_match"] for s in seeds])
extra = runs["untied", seeds[0]]["params"] - runs["base", seeds[0]]["params"]
from minitransformer.data.registry import load_task

V_task = len(load_task(ablations["task"]).vocab)
claim_true("untying adds two V x d_model matrices", extra == 2 * V_task * ablations["base_model"]["d_model"],
           f"{extra} against 2 x {V_task} x {ablations['base_model']['d_model']}")
better = int((untied_ppl < tied_ppl).sum())
show_markdown(
    f"Untied, the toy model holds {extra:,} more parameters ({extra / runs['base', seeds[0]]['params']:.0%} more). "
    f"Its test perplexity is lower than the tied model's on {better} of {len(seeds)} seeds (tied "
    f"{tied_ppl.min():.3f} to {tied_ppl.max():.3f}, untied {untied_ppl.min():.3f} to {untied_ppl.max():.3f}) and its "
    f"exact match is {untied_exact.min():.3f} to {untied_exact.max():.3f} against {tied_exact.min():.3f} to "
    f"{tied_exact.max():.3f}. "
    + ("At this scale the untied model learned better in the same steps: sharing saved parameters, not learning. "
       if better == len(seeds) else
       "At this scale sharing saves parameters without making learning measurably better or faster. ")
    + "Whether it helps at the paper's scale, with a shared vocabulary of tens of thousands of subwords, is Press "
    "and Wolf's measurement, not this one's.")

# %% [markdown]
# ## 7. Do trained embeddings put words of similar meaning close together?
#
# A common explanation of learned embeddings says that training places words of similar meaning (cat and dog)
# near each other. **The paper does not say this**; it says only that it uses "learned embeddings to convert
# the input tokens and output tokens to vectors of dimension $d_\text{model}$" (§3.4). The toy task can test a
# sharp version: numbers-en-fr has both languages in one vocabulary, so "seven" and "sept" are two rows of the
# same matrix, and they mean exactly the same thing. For every number from zero to ninety-nine whose name is one
# token in both languages, is the French word nearest (by cosine) to the English word's embedding its
# translation? Before training and after, tied and untied (untied: the English word's row of the source
# embedding against the French words' rows of the target embedding):

# %%
closeness = {}
for label in ("base", "untied"):
    for when in ("embeddings_at_init", "embeddings_trained"):
        closeness[label, when] = np.array([runs[label, s][when]["nearest_is_translation"] for s in seeds])
pairs_n = runs["base", seeds[0]]["embeddings_trained"]["pairs"]
for (label, when), share in closeness.items():
    cos_t = np.mean([runs[label, s][when]["mean_cos_translation"] for s in seeds])
    cos_o = np.mean([runs[label, s][when]["mean_cos_other"] for s in seeds])
    print(f"{'tied' if label == 'base' else 'untied':7s} {when.split('_', 1)[1].replace('_', ' '):9s}: nearest French "
          f"word is the translation for {share.mean():.1%} of {pairs_n} pairs (seeds {np.round(share, 3)}); "
          f"mean cosine, translations {cos_t:+.3f}, other pairs {cos_o:+.3f}")
chance = 1 / pairs_n
show_markdown(
    f"Chance is {chance:.1%}, and before training both models sit near it ({closeness['base', 'embeddings_at_init'].mean():.1%} "
    f"tied). After training, in the tied model the nearest French word is the translation for "
    f"{closeness['base', 'embeddings_trained'].mean():.1%} of the pairs; untied, for "
    f"{closeness['untied', 'embeddings_trained'].mean():.1%}. "
    + ("So training does move translations together here, and more so when one matrix serves both sides: the "
       "similarity is something tying makes possible, not something every learned embedding has."
       if closeness["base", "embeddings_trained"].mean() > 3 * chance else
       "So on this task training did not put translations near each other: nothing in the loss asks for it, "
       "and a model can translate well with embeddings whose geometry means nothing to us.")
    + " What a trained embedding encodes is what its task needed from it.")

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
# ### Exercise 5.1 — embedding backward, with repeated tokens
#
# Write `my_embedding_backward(dout, ids, V)` returning `dE` of shape `(V, d_model)` for
# $\text{out} = \sqrt{d_\text{model}}\,E[\text{ids}]$ (`ids`: `(B, S)` ints, `dout`: `(B, S, d_model)`). Tokens repeat.
# Don't call `embedding_backward`.

# %% tags=["stub"]
def my_embedding_backward(dout, ids, V):
    """dout: (B, S, d_model), ids: (B, S) ints -> dE: (V, d_model)."""
    # your code here
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_4_7 import check_embedding_backward, check_tied_embedding_grad

check_embedding_backward(my_embedding_backward)


# %% [markdown]
# ### Exercise 5.2 — the tied gradient
#
# One $E$ is used three times:
# `src_emb = sqrt(d) * E[src_ids]` (upstream gradient `d_src`, `(B, S, d)`),
# `tgt_emb = sqrt(d) * E[tgt_ids]` (upstream gradient `d_tgt`, `(B, T, d)`) and
# `logits = x_dec @ E.T` (upstream gradient `dlogits`, `(B, T, V)`). Return the gradient of the loss with
# respect to $E$.

# %% tags=["stub"]
def my_tied_embedding_grad(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits):
    """-> dE: (V, d_model), V = dlogits.shape[-1], d_model = x_dec.shape[-1]."""
    # your code here
    return None


# %% tags=["check"]
check_tied_embedding_grad(my_tied_embedding_grad)


# %% [markdown] tags=["solution"]
# ## Solutions

# %% tags=["solution"]
def embedding_backward_solution(dout, ids, V):
    d = dout.shape[-1]
    dE = np.zeros((V, d))
    np.add.at(dE, ids.reshape(-1), dout.reshape(-1, d) * np.sqrt(d))   # add.at sums repeated rows
    return dE

check_embedding_backward(embedding_backward_solution)


# %% tags=["solution"]
def tied_embedding_grad_solution(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits):
    V, d = dlogits.shape[-1], x_dec.shape[-1]
    dE = embedding_backward_solution(d_src, src_ids, V)          # source embedding
    dE += embedding_backward_solution(d_tgt, tgt_ids, V)         # target embedding
    dE += dlogits.reshape(-1, V).T @ x_dec.reshape(-1, d)        # logits = x E^T
    return dE

check_tied_embedding_grad(tied_embedding_grad_solution)
