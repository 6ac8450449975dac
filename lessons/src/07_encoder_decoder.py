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
# # Lesson 7 — The encoder–decoder assembled (§3.1)
#
# Lessons 1–6 built the parts; this one puts them together as in the paper's Figure 1 (§3.1).
#
# * **Encoder**: the source tokens are embedded (lesson 5), a positional encoding is added (lesson 6),
#   dropout is applied (§5.4), and the result passes through $N$ identical layers. Each layer has two
#   sub-layers — multi-head self-attention (§3.2) and the position-wise feed-forward network (§3.3, Eq. 2) —
#   each wrapped in the residual-plus-LayerNorm of lesson 4. The output is the *memory*, one vector per
#   source position.
# * **Decoder**: the target, shifted one position to the right (a `<bos>` token in front), goes through the
#   same embedding and encoding and then $N$ identical layers with *three* sub-layers: masked self-attention,
#   attention over the memory (queries from the decoder, keys and values from the encoder, §3.2.3), and the
#   feed-forward network.
# * **Output**: the tied linear map and softmax of lesson 5 give a distribution over the next token at every
#   target position.
#
# The self-attention mask together with the one-position shift means that the prediction at position $i$
# can use only target tokens before position $i$.
#
# | what | where in the package |
# | --- | --- |
# | layers and stacks | `minitransformer.model.EncoderLayer`, `DecoderLayer`, `Encoder`, `Decoder` |
# | the whole model | `Transformer(cfg)`: `forward(src, tgt_in) -> logits`, `backward(dlogits)` |
# | batches: `tgt_in` = `<bos>` + target, `tgt_out` = target + `<eos>` | `minitransformer.data.batching.make_batch` |
# | masks | `minitransformer.layers.masks.padding_mask`, `decoder_mask` (padding AND `causal_mask`); a `Batch` carries them |
# | loss | `minitransformer.layers.loss.LabelSmoothedCrossEntropy` |
# | parameter count | `minitransformer.model.count_parameters(cfg)` |
#
# The whole model's backward chains the pieces derived in [docs/derivations.md](docs/derivations.md), §1–§11; the
# stack's wiring is in [§9, residual connections](docs/derivations.md#9-residual-connections-post-ln-and-pre-ln-31-54).
#
# **What it trains:** nothing; it checks an untrained model. The cell below says how long the whole lesson takes.
#
# **Terms:** each term of these lessons, in English and as Korean texts write it, is in [the glossary](docs/glossary.md).

# %%
from lessonkit.runtimes import show_cost, show_slow_cell

show_cost("07")

# %%
import numpy as np
import matplotlib.pyplot as plt

from minitransformer import backend

plt.rcParams.update({"figure.dpi": 80, "savefig.dpi": 80, "font.size": 9})
np.set_printoptions(precision=4, suppress=True, linewidth=110)
backend.set_default_dtype("float64")   # new parameters in float64: gradient checks need it

# %% [markdown]
# ## 0. Figure 1, with the shapes
#
# The paper's Figure 1 draws the architecture; here is the same picture with the shape of the array that
# flows along every arrow, in the paper's letters ($B$ sentences, $S$ source and $T$ target positions,
# $V$ tokens). Each box names the package object that computes it. The decoder's encoder-decoder
# attention is the only place the two stacks meet: its keys and values come from the memory.

# %%
from matplotlib.patches import FancyBboxPatch

def box(ax, x, y, text, color, w=3.3, h=0.62):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.05", fc=color, ec="0.3"))
    ax.text(x, y, text, ha="center", va="center", fontsize=7.5)

def arrow(ax, x0, y0, x1, y1, label=None, side=1):
    ax.annotate("", (x1, y1), (x0, y0), arrowprops=dict(arrowstyle="->", color="0.25", lw=1))
    if label:
        ax.text((x0 + x1) / 2 + 0.12 * side, (y0 + y1) / 2, label, fontsize=6.5, color="tab:blue",
                ha="left" if side > 0 else "right", va="center")

fig, ax = plt.subplots(figsize=(10, 7.4))
E, D = 2.2, 7.8                                                # x of the encoder and decoder columns
enc = [(0.6, "src ids", "white"), (1.6, "src_embed: E[ids] · √d_model", "#f6e7c1"),
       (2.6, "src_pos: + PE (§3.5)", "#e8e8e8"), (3.6, "src_dropout (§5.4)", "#e8e8e8"),
       (4.8, "res_attn: LayerNorm(x + MHA(x, x, x))", "#cfe3f5"),
       (5.9, "res_ffn: LayerNorm(x + FFN(x))", "#d4efcf")]
dec = [(0.6, "tgt_in ids = <bos> + target", "white"), (1.6, "tgt_embed: E[ids] · √d_model", "#f6e7c1"),
       (2.6, "tgt_pos: + PE", "#e8e8e8"), (3.6, "tgt_dropout", "#e8e8e8"),
       (4.8, "res_self: LayerNorm(y + MHA(y, y, y), causal mask)", "#cfe3f5"),
       (5.9, "res_cross: LayerNorm(y + MHA(y, memory, memory))", "#f5d0d0"),
       (7.0, "res_ffn: LayerNorm(y + FFN(y))", "#d4efcf"), (8.2, "output_projection: y Eᵀ (tied, §3.4)", "#f6e7c1"),
       (9.2, "softmax -> P(next token)", "white")]
for (y, t, c) in enc:
    box(ax, E, y, t, c)
for (y, t, c) in dec:
    box(ax, D, y, t, c, w=4.1)
enc_shapes = ["(B, S)", "(B, S, d_model)", "(B, S, d_model)", "(B, S, d_model)", "(B, S, d_model)"]
for (y0, _, _), (y1, _, _), label in zip(enc, enc[1:], enc_shapes):
    arrow(ax, E, y0 + 0.31, E, y1 - 0.31, label)
dec_shapes = ["(B, T)", "(B, T, d_model)", "(B, T, d_model)", "(B, T, d_model)", "(B, T, d_model)",
              "(B, T, d_model)", "(B, T, d_model)", "(B, T, V) logits"]
for (y0, _, _), (y1, _, _), label in zip(dec, dec[1:], dec_shapes):
    arrow(ax, D, y0 + 0.31, D, y1 - 0.31, label)
ax.add_patch(plt.Rectangle((E - 2.0, 4.3), 4.0, 2.1, fill=False, ls="--", ec="0.4"))
ax.text(E - 2.05, 6.55, "encoder layer, × N  (EncoderLayer)", fontsize=7.5)
ax.add_patch(plt.Rectangle((D - 2.4, 4.3), 4.8, 3.2, fill=False, ls="--", ec="0.4"))
ax.text(D - 2.45, 7.65, "decoder layer, × N  (DecoderLayer)", fontsize=7.5)
box(ax, E, 7.3, "memory", "#fff3b0", w=1.6)
arrow(ax, E, 6.4, E, 7.3 - 0.31, "(B, S, d_model)")
arrow(ax, E + 0.8, 7.3, D - 2.05, 5.9, "keys, values (every decoder layer)", side=1)
ax.text(0.0, 9.6, "src_mask (B, 1, 1, S): padding;   tgt_mask (B, 1, T, T): causal AND padding;   "
        f"this lesson's toy: B = 2, S = 5, T = 6, d_model = {8}, V = 10, N = 2",
        fontsize=7.5, color="0.3")
ax.set(xlim=(-0.2, 10.4), ylim=(0, 10)); ax.axis("off")
ax.set_title("Figure 1 of the paper, with the shapes (post-LN, as in the paper)", fontsize=10)
plt.show()

# %% [markdown]
# ## 1. A toy batch and its masks
#
# Two sentence pairs of a "reverse the sequence" task, padded to rectangles. Ids 0, 1, 2 are `<pad>`,
# `<bos>`, `<eos>`. Masks are boolean, **True = may attend**:
#
# * `src_mask` $(B,1,1,S)$: the key is a real source token. It is used by the encoder's self-attention and by
#   the decoder's attention over the memory; its size-1 axes broadcast over heads and queries.
# * `tgt_mask` $(B,1,T,T)$: key $j \le$ query $i$ (causal) **and** key $j$ is not padding.

# %%
from minitransformer.layers.loss import LabelSmoothedCrossEntropy
from minitransformer.layers.masks import decoder_mask, padding_mask
from minitransformer.model import Transformer, TransformerConfig, count_parameters

src     = np.array([[3, 4, 5, 6, 7], [8, 9, 3, 0, 0]])              # (B, S) = (2, 5)
tgt_in  = np.array([[1, 7, 6, 5, 4, 3], [1, 3, 9, 8, 0, 0]])        # (B, T) = (2, 6): <bos> + target
tgt_out = np.array([[7, 6, 5, 4, 3, 2], [3, 9, 8, 2, 0, 0]])        # target + <eos>: what to predict

cfg = TransformerConfig(vocab_size=10, d_model=8, h=2, N=2, d_ff=16, P_drop=0.1, eps_ls=0.1, max_len=16)
model = Transformer(cfg, seed=0)
loss_fn = LabelSmoothedCrossEntropy(cfg.pad_id, cfg.eps_ls)
src_mask = padding_mask(src, cfg.pad_id)           # (B, 1, 1, S)
tgt_mask = decoder_mask(tgt_in, cfg.pad_id)        # (B, 1, T, T): causal AND not padding
print("src_mask", src_mask.shape, "  tgt_mask", tgt_mask.shape)

fig, axes = plt.subplots(2, 3, figsize=(9, 5.4))
for b in range(2):
    panels = [("encoder self-attention", np.broadcast_to(src_mask[b, 0], (src.shape[1], src.shape[1])), src[b], src[b]),
              ("decoder attention over memory", np.broadcast_to(src_mask[b, 0], (tgt_in.shape[1], src.shape[1])), tgt_in[b], src[b]),
              ("decoder masked self-attention", tgt_mask[b, 0], tgt_in[b], tgt_in[b])]
    for ax, (title, m, q_ids, k_ids) in zip(axes[b], panels):
        ax.imshow(m, cmap="Greens", vmin=0, vmax=1.3)
        ax.set_xticks(np.arange(m.shape[1] + 1) - 0.5, minor=True); ax.set_yticks(np.arange(m.shape[0] + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="white", lw=1); ax.tick_params(which="minor", length=0)
        ax.set_xticks(range(len(k_ids)), [str(t) for t in k_ids]); ax.set_yticks(range(len(q_ids)), [str(t) for t in q_ids])
        ax.set_title(f"sentence {b}: {title}", fontsize=8)
        ax.set_xlabel("key (token id)", fontsize=8); ax.set_ylabel("query (token id)", fontsize=8)
plt.tight_layout(); plt.show()


# %% [markdown]
# Green = may attend. Sentence 1's padding columns are blank in every panel; the decoder's own panel is
# lower-triangular. The query rows at padding positions still compute something, but no loss term and no
# real position ever reads it.
#
# ## 2. Forward, one stage at a time
#
# The body of `Transformer.forward`, run by hand, printing the shape after every stage. Dropout is on
# (`P_drop = 0.1`), so the dropout generator is re-seeded first; `model.forward` with the same seed must then
# give identical logits.

# %%
def show(name, *arrays):
    print(f"{name:<44}" + "  ".join(str(tuple(a.shape)) for a in arrays))

model.reseed_dropout(5)
show("src ids (B, S)", src)
show("tgt_in ids (B, T)", tgt_in)
x = model.src_embed.forward(src);          show("source embedding x sqrt(d_model)", x)
x = model.src_pos.forward(x);              show("+ positional encoding", x)
x = model.src_dropout.forward(x);          show("dropout", x)
for i, layer in enumerate(model.encoder.layers):
    x = layer.forward(x, src_mask);        show(f"encoder layer {i}: self-attn, FFN", x)
memory = x                                 # post-LN: no final norm
show("memory (B, S, d_model)", memory)
y = model.tgt_embed.forward(tgt_in);       show("target embedding x sqrt(d_model)", y)
y = model.tgt_pos.forward(y);              show("+ positional encoding", y)
y = model.tgt_dropout.forward(y);          show("dropout", y)
for i, layer in enumerate(model.decoder.layers):
    y = layer.forward(y, memory, src_mask, tgt_mask)
    show(f"decoder layer {i}: self-attn, cross-attn, FFN", y)
logits = model.output_projection.forward(y);       show("logits = y E^T (B, T, V)", logits)
loss = loss_fn.forward(logits, tgt_out)
print(f"loss (label-smoothed cross-entropy, mean over {int((tgt_out != 0).sum())} non-pad targets) = {loss:.4f}")

# %% [markdown]
# **Is this loss what an untrained model should give?** A model that spreads its probability evenly over
# the $V$ tokens pays $-\log(1/V) = \ln V$ per target, and with label smoothing too: against a uniform
# prediction every target distribution $q$ costs exactly $\ln V$, since $\sum_v q_v = 1$. This model is not
# quite uniform. Its logits are $y E^\top$: $y$ leaves a LayerNorm with unit variance per feature, and $E$'s
# entries have variance $1/d_\text{model}$ (lesson 5), so every logit has variance about
# $d_\text{model}\cdot 1 \cdot 1/d_\text{model} = 1$. For logits $z_v \sim \mathcal N(0, \sigma^2)$ unrelated to
# the target, $E[\log\sum_v e^{z_v}] \approx \ln V + \sigma^2/2$, so we expect about $\ln V + 0.5$. A first
# loss far above that means the initial logits are too large (too confident): the first thing to look at
# when a run starts badly (lesson 9).

# %%
sigma2 = logits.var()
print(f"initial loss {loss:.4f}   ln V = ln {cfg.vocab_size} = {np.log(cfg.vocab_size):.4f}   "
      f"variance of the logits {sigma2:.2f}   ln V + variance/2 = {np.log(cfg.vocab_size) + sigma2 / 2:.4f}")
p = np.exp(logits - logits.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
print(f"largest predicted probability anywhere: {p.max():.3f}   (uniform would be {1 / cfg.vocab_size:.3f})")

from lessonkit.prose import claim

claim("every logit has variance about 1 (within a factor of 2)", sigma2, low=0.5, high=2.0)
claim("we expect a first loss of about ln V + 0.5 (within 0.3)", loss, np.log(cfg.vocab_size) + 0.5, tol=0.3)

# %% [markdown]
# ## 3. Backward, one stage at a time
#
# `Transformer.backward` calls the layers' backward passes in exactly the reverse order. Three places add
# gradients from several paths, each an instance of the multivariable chain rule:
#
# * **inside every layer**, the residual sum: $\partial L/\partial x = \partial L/\partial z + (\text{sub-layer path})$ (lesson 4);
# * **the memory** is read by the cross-attention of every decoder layer, so
#   $\displaystyle\frac{\partial L}{\partial\,\text{memory}} = \sum_{\ell=1}^{N}\frac{\partial L}{\partial\,\text{memory}}\Big|_{\text{decoder layer }\ell}$,
#   and only that sum enters the encoder's backward;
# * **the shared $E$** gets three contributions (lesson 5).

# %%
model.zero_grad()
dlogits = loss_fn.backward();                                  show("dL/dlogits", dlogits)
dy = model.output_projection.backward(dlogits);                        show("dL/d(decoder output)   [E use 1]", dy)
dmemory = np.zeros_like(memory)
for i in reversed(range(cfg.N)):
    dy, dmem = model.decoder.layers[i].backward(dy)
    dmemory += dmem                                            # memory is read by every decoder layer
    show(f"decoder layer {i}: dL/dy, dL/dmemory", dy, dmem)
dy = model.tgt_pos.backward(model.tgt_dropout.backward(dy));   show("dL/d(target embedding)", dy)
model.tgt_embed.backward(dy);                                  show("E.grad after the target side [E use 2]", model.E.grad)
dx = dmemory;                                                  show("dL/dmemory, summed over decoder layers", dx)
for i in reversed(range(cfg.N)):
    dx = model.encoder.layers[i].backward(dx);                 show(f"encoder layer {i}: dL/dx", dx)
dx = model.src_pos.backward(model.src_dropout.backward(dx));   show("dL/d(source embedding)", dx)
model.src_embed.backward(dx);                                  show("E.grad after the source side [E use 3]", model.E.grad)
by_hand = {name: p.grad.copy() for name, p in model.named_parameters()}

# the same through the model's own forward and backward, same dropout seed
model.zero_grad(); model.reseed_dropout(5)
logits2 = model.forward(src, tgt_in)
loss2 = loss_fn.forward(logits2, tgt_out)
model.backward(loss_fn.backward())
print("\nmax |logits by hand - model.forward| :", np.abs(logits - logits2).max())
print("max |grad by hand - model.backward| over all", len(by_hand), "tensors:",
      max(np.abs(by_hand[n] - p.grad).max() for n, p in model.named_parameters()))

# %% [markdown]
# ## 4. A whole-model gradient check
#
# Every parameter of the model, float64, central differences against `Transformer.backward`. The batch
# has padding in the source and in the target, dropout is on, and label smoothing is on. $f$ re-seeds the
# dropout generator on every call, so every one of the thousands of forward passes draws the same masks.

# %%
show_slow_cell("07", "the whole model's gradient check")

# %%
# slow: the whole model's gradient check
import time
from minitransformer.gradcheck import gradcheck

def f():
    model.reseed_dropout(5)                               # the same dropout masks at every call
    return loss_fn.forward(model.forward(src, tgt_in), tgt_out)

model.reseed_dropout(6)
other = loss_fn.forward(model.forward(src, tgt_in), tgt_out)
print(f"dropout is active: loss {f():.6f} with the masks of seed 5, {other:.6f} with those of seed 6")

model.zero_grad()
f()
model.backward(loss_fn.backward())
params = dict(model.named_parameters())
t0 = time.perf_counter()
report = gradcheck(f, {n: p.data for n, p in params.items()}, {n: p.grad.copy() for n, p in params.items()})
n_scalars = sum(p.data.size for p in params.values())
print(f"{len(params)} tensors, {n_scalars:,} scalars, {2 * n_scalars:,} forward passes, {time.perf_counter() - t0:.1f} s")
worst = sorted(report.errors.items(), key=lambda kv: -kv[1])[:5]
print("largest relative errors:", ", ".join(f"{n} {e:.1e}" for n, e in worst))
report.assert_ok()
print("all", len(report.errors), "tensors within", report.tol)

groups = {}
for name, err in report.errors.items():
    key = name if name == "E" else ".".join(name.split(".")[:4])
    groups[key] = max(groups.get(key, 0.0), err)
fig, ax = plt.subplots(figsize=(8, 2.6))
ax.bar(range(len(groups)), list(groups.values()), color="tab:blue")
ax.axhline(report.tol, color="r", lw=1); ax.text(0, report.tol * 1.4, "tolerance", color="r", fontsize=8)
ax.set_yscale("log"); ax.set_xticks(range(len(groups)), list(groups), rotation=30, ha="right", fontsize=7)
ax.set(ylabel="max rel error", title="whole-model gradient check, per sub-layer", ylim=(1e-12, 1e-5))
plt.tight_layout(); plt.show()

# %% [markdown]
# **Predict**, before the count below. (1) The base model ($N = 6$, $d_\text{model} = 512$, $d_{ff} = 2048$, $h = 8$, a shared vocabulary of 37 000 tokens, one tied embedding matrix): how many parameters, in millions? (2) What share of them is the embedding matrix $E$?

# %% tags=["predict"]
my_prediction_7_1 = None   # a number of millions


# %% tags=["predict"]
my_prediction_7_2 = None   # a number between 0 and 1


# %% tags=["reveal"]
from lessonkit.predict import reveal

from minitransformer.model import TransformerConfig, count_parameters

base_total = count_parameters(TransformerConfig())
reveal(my_prediction_7_1, base_total / 1e6, what="the base model's parameters, in millions")
reveal(my_prediction_7_2, TransformerConfig().vocab_size * TransformerConfig().d_model / base_total,
       what="the share of the embedding matrix E")


# %% [markdown]
# ## 5. Counting parameters: the base model against Table 3
#
# `count_parameters(cfg)` evaluates a formula; first we confirm it against models actually built (the tiny
# one above, and one encoder and one decoder layer of the base size):

# %%
from minitransformer.model import DecoderLayer, EncoderLayer

print("tiny model: built", model.num_parameters(), " formula", count_parameters(cfg))
base = TransformerConfig()                        # d_model 512, h 8, N 6, d_ff 2048, V 37000
enc_layer = EncoderLayer(base, backend.host_rng(0), None).num_parameters()
dec_layer = DecoderLayer(base, backend.host_rng(0), None).num_parameters()
V, d, N = base.vocab_size, base.d_model, base.N
parts = {"shared embedding E (V x d_model)": V * d, f"encoder ({N} x {enc_layer:,})": N * enc_layer,
         f"decoder ({N} x {dec_layer:,})": N * dec_layer}
for k, v in parts.items():
    print(f"{k:<40}{v:>12,}")
print(f"{'total (built layers)':<40}{sum(parts.values()):>12,}")
print(f"{'count_parameters(TransformerConfig())':<40}{count_parameters(base):>12,}")

# %% [markdown]
# What we count: one shared $E$ of $37\,000\times512$ (the tie of lesson 5, counted once), every weight
# matrix and bias of the attention and feed-forward sub-layers, and the $\gamma,\beta$ of every LayerNorm. The
# positional encoding has no parameters. Table 3 of the paper lists $65\times10^6$ for base and
# $213\times10^6$ for big.
#
# The paper gives the vocabulary only as "about 37 000 tokens" (§5.1), so $V$ is the one input we cannot
# pin down, and each extra token adds $d_\text{model}$ parameters. The cell below asks which $V$ would
# reproduce each of the paper's (rounded) figures under our counting:

# %%
from minitransformer.model import PRESETS

print(f"{'':<6}{'ours, V = 37000':>17}{'paper':>8}{'untied (3 E)':>15}   V that would give the paper's figure (+-0.5 M)")
counted = {}
for name, paper in (("base", 65e6), ("big", 213e6)):
    c = PRESETS[name].with_(vocab_size=37000)
    ours = count_parameters(c)
    rest = ours - c.vocab_size * c.d_model                       # everything except E
    lo, hi = ((paper - 0.5e6 - rest) / c.d_model, (paper + 0.5e6 - rest) / c.d_model)
    untied = ours + 2 * c.vocab_size * c.d_model
    counted[name] = {"ours": ours, "paper": paper, "untied": untied, "V": (lo + hi) / 2}
    print(f"{name:<6}{ours / 1e6:>15.2f} M{paper / 1e6:>6.0f} M{untied / 1e6:>13.1f} M"
          f"   {lo:,.0f} .. {hi:,.0f}")

# %%
from lessonkit.prose import show_markdown


def gap(name):
    """'2 M under' or '1 M over': our count against the paper's, to the nearest million."""
    diff = (counted[name]["ours"] - counted[name]["paper"]) / 1e6
    return f"{abs(diff):.0f} M {'over' if diff > 0 else 'under'}"


b_, g_ = counted["base"], counted["big"]
show_markdown(
    f"With $V = 37\\,000$ we count {b_['ours'] / 1e6:.1f} M for base ({gap('base')} the paper's "
    f"{b_['paper'] / 1e6:.0f} M) and {g_['ours'] / 1e6:.1f} M for big ({gap('big')} {g_['paper'] / 1e6:.0f} M). "
    f"Under our counting, base would need a vocabulary of roughly {round(b_['V'], -3):,.0f} tokens and big one of "
    f"roughly {round(g_['V'], -3):,.0f}, so "
    + ("no single vocabulary size reproduces both figures, and the difference cannot come from the vocabulary "
       "alone. " if abs(b_["V"] - g_["V"]) > 1000 else "one vocabulary size could reproduce both figures. ")
    + "The paper does not say how its figures were counted, and we do not guess; what is printed above is exactly "
    f"what this package's models hold. Untied embeddings would give {b_['untied'] / 1e6:.0f} M for base, "
    f"far from {b_['paper'] / 1e6:.0f} M, so the paper's figure is at least consistent with a shared matrix "
    "counted once.")

# %% [markdown]
# ## 6. At inference: one position at a time, with a key/value cache (§6.1 preview)
#
# Training sees the whole target at once (teacher forcing) and the causal mask hides the future. At
# inference there is no target: the decoder must produce position $t$ before it can read it as input at
# $t+1$. Re-running the decoder on the whole prefix at every step would cost $O(T^2)$ position-passes; the
# model instead keeps every layer's keys and values of the positions already decoded in a `KVCache`, and
# `Transformer.decode_step(y_t, t, cache)` runs **only the new position** through the $N$ layers. Its query
# attends to the $t+1$ cached keys, which is exactly what the causal mask allowed row $t$ to see.
#
# If that is right, feeding `tgt_in` one token at a time must give the same logits, row by row, as the
# teacher-forced `forward`. Dropout must be off (`eval_mode`), since the two passes would otherwise draw
# different masks. Lesson 10 builds greedy and beam search on this step.

# %%
from minitransformer.layers.parameter import eval_mode
from minitransformer.model import KVCache

with eval_mode(model):
    teacher_forced = model.forward(src, tgt_in)                  # (B, T, V), all positions at once
    memory = model.encode(src)                                   # (B, S, d_model), once per sentence
    cache = KVCache(model, memory, padding_mask(src, cfg.pad_id), T_max=tgt_in.shape[1])
    stepwise = np.stack([model.decode_step(tgt_in[:, t:t + 1], t, cache)   # (B, V) per step
                         for t in range(tgt_in.shape[1])], axis=1)
print("cached K of decoder layer 0:", cache.self_kv[0][0].shape, " (B, h, T_max, d_k)")
print("step-by-step logits", stepwise.shape, " teacher-forced", teacher_forced.shape)
real = tgt_in != cfg.pad_id                                      # padded positions are never decoded
print(f"max |difference| over the real positions: {np.abs(stepwise - teacher_forced)[real].max():.1e}")
print(f"max |difference| at the padded positions:  {np.abs(stepwise - teacher_forced)[~real].max():.1e}")

# %% [markdown]
# The two agree to rounding (float64). The padded target positions of sentence 1 differ, and should: the
# teacher-forced pass masks padded *keys*, while the stepwise pass, fed a pad token, attends to it like any
# other token. A real decoder never feeds a pad; it stops at `<eos>`.

# %% [markdown]
# ## 7. Two sub-layers in an encoder layer, three in a decoder layer: what each one does (§3.1–§3.3)
#
# §3.1 states the design without arguing for it: each encoder layer has "two sub-layers", multi-head
# self-attention and a position-wise feed-forward network, and each decoder layer "inserts a third
# sub-layer, which performs multi-head attention over the output of the encoder stack". What each does is
# in the sections that define them: attention lets every position read other positions (§3.2.3), and the
# feed-forward network "is applied to each position separately and identically" (§3.3). The paper reports
# no experiment that removes a sub-layer or changes their number; explanations that call the arrangement
# the outcome of such experiments, or that give each sub-layer a role in words ("context" and "fusion"),
# say more than the paper does. What can be measured is what each sub-layer **can** do.
#
# **Which positions each sub-layer mixes.** Change the input of one source position and see which output
# positions of each sub-layer of the first encoder layer move (float64, dropout off):

# %%
with eval_mode(model):
    enc0 = model.encoder.layers[0]
    x_in = model.src_pos.forward(model.src_embed.forward(src))              # (B, S, d_model): the layer's input
    nudged = x_in.copy()
    nudged[0, 2] += 1.0                                                      # sentence 0, position 2 only
    outputs = {}
    for name, x_ in (("as is", x_in), ("nudged", nudged)):
        after_attn = enc0.res_attn.forward(x_, lambda z: enc0.self_attn.forward(z, mask=src_mask))
        after_ffn_alone = enc0.res_ffn.forward(x_, enc0.ffn.forward)        # the FFN sub-layer on the same input
        outputs[name] = (after_attn, after_ffn_alone)
moved_attn = np.abs(outputs["nudged"][0] - outputs["as is"][0])[0].max(axis=-1)
moved_ffn = np.abs(outputs["nudged"][1] - outputs["as is"][1])[0].max(axis=-1)
print("largest change at each position of sentence 0, position 2 nudged:")
print("  self-attention sub-layer:", np.round(moved_attn, 4))
print("  feed-forward sub-layer:  ", np.round(moved_ffn, 4))
assert (moved_attn > 0).all()                                   # attention: every real position reads position 2
assert moved_ffn[2] > 0 and (moved_ffn[np.arange(len(moved_ffn)) != 2] == 0).all()   # FFN: position 2 alone, exactly

# %% [markdown]
# The self-attention sub-layer moves every position; the feed-forward sub-layer moves the nudged position and
# leaves every other position **exactly** as it was. So the attention sub-layer is the only place where
# positions exchange information, and the feed-forward network is the only part that transforms each
# position through a nonlinearity of its own (inside attention, the only nonlinearity is the softmax over the
# weights; the output is a weighted average of linear maps of the inputs, lesson 2). A stack of attention alone
# mixes but transforms little; a stack of feed-forward networks alone transforms each word in isolation.
#
# **Where the decoder reads the source.** Give the decoder the memories of two different source sentences and
# compare the output of each sub-layer of its first layer:

# %%
with eval_mode(model):
    memory_a = model.encode(src, src_mask)
    other_src = src[::-1].copy()                                             # the batch's sentences swapped
    memory_b = model.encode(other_src, padding_mask(other_src, cfg.pad_id))
    dec0 = model.decoder.layers[0]
    y_in = model.tgt_pos.forward(model.tgt_embed.forward(tgt_in))
    moved = {}
    for name, mem, mask in (("a", memory_a, src_mask), ("b", memory_b, padding_mask(other_src, cfg.pad_id))):
        y1 = dec0.res_self.forward(y_in, lambda z: dec0.self_attn.forward(z, mask=tgt_mask))
        y2 = dec0.res_cross.forward(y1, lambda z: dec0.cross_attn.forward(z, mem, mask=mask))
        moved[name] = (y1, y2, dec0.res_ffn.forward(y2, dec0.ffn.forward))
for i, sub in enumerate(("masked self-attention", "encoder-decoder attention", "feed-forward")):
    print(f"{sub:26s} output, source a against source b: max |difference| = "
          f"{np.abs(moved['a'][i] - moved['b'][i]).max():.3g}")
assert np.abs(moved["a"][0] - moved["b"][0]).max() == 0 and np.abs(moved["a"][1] - moved["b"][1]).max() > 0.01

# %% [markdown]
# Up to the third sub-layer's input the decoder has not seen the source at all (the difference is exactly
# zero): the encoder-decoder attention is the one door from the source into the decoder, and the
# feed-forward network after it passes on what came through. That is the reason for the third sub-layer in
# a translation model: without it the decoder would be a language model of the target alone.
#
# **Removed, and trained.** `lessons/experiments/sublayer_ablations.py` trains lesson 11's toy model
# (numbers-en-fr, the base settings of Table 3 in miniature) with the feed-forward sub-layer removed from every
# layer, and with the encoder-decoder attention removed from every decoder layer, beside the model as it is,
# over the seeds the record lists:

# %%
import json

with open("experiments/sublayer_ablations.json") as f:
    ablations = json.load(f)
runs = {(r["label"], r["seed"]): r for r in ablations["runs"]}
seeds = sorted({s for lab, s in runs if lab == "base"})
made = ablations["provenance"][-1]
print("record:", made["command"], "at commit", made["commit"][:10], f"; task {ablations['task']}, "
      f"{ablations['steps']} steps, seeds {seeds}")
print(f"{'model':22s}{'parameters':>12s}{'test exact match':>30s}{'perplexity':>28s}")
for label in ("base", "no FFN", "no cross-attention"):
    rs = [runs[label, s] for s in seeds]
    print(f"{label:22s}{rs[0]['params']:12,d}{str([round(r['exact_match'], 3) for r in rs]):>30s}"
          f"{str([round(r['ppl'], 3) for r in rs]):>28s}")

# %%
from lessonkit.prose import claim_true

exact = {label: np.array([runs[label, s]["exact_match"] for s in seeds]) for label in ("base", "no FFN", "no cross-attention")}
ppl = {label: np.array([runs[label, s]["ppl"] for s in seeds]) for label in exact}
claim_true("without the encoder-decoder attention the decoder translates nothing exactly", exact["no cross-attention"].max() == 0)
params = {label: runs[label, seeds[0]]["params"] for label in exact}
show_markdown(
    f"Without the third sub-layer the model translates none of the test numbers exactly (perplexity "
    f"{ppl['no cross-attention'].min():.2f} to {ppl['no cross-attention'].max():.2f}, against {ppl['base'].min():.3f} to "
    f"{ppl['base'].max():.3f} for the model as it is): it can only guess the French from the French before it. Without "
    f"the feed-forward sub-layers, {params['no FFN'] / params['base']:.0%} of the parameters remain, and the model "
    f"reaches an exact match of {exact['no FFN'].min():.3f} to {exact['no FFN'].max():.3f} against "
    f"{exact['base'].min():.3f} to {exact['base'].max():.3f}: "
    + ("on a task that is mostly word-for-word lookup and reordering, attention with its projections does most of "
       "the work. " if exact["no FFN"].min() >= exact["base"].min() - 0.05 else
       "here the feed-forward sub-layers matter. ")
    + "This says what a toy task needs, not why the paper chose two and three sub-layers, which it does not say.")

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
# ### Exercise 7.1 — shifting the target right
#
# The decoder reads `tgt_in` and must predict `tgt_out` at every position (§3.1: the output embeddings are
# offset by one position). Write `my_shift_right(tgt_seqs, pad_id, bos_id, eos_id)`: given a list of target
# sentences (lists of ids, possibly empty), return `(tgt_in, tgt_out)`, two integer arrays of shape
# `(B, T)` with `T` = longest sentence + 1, where `tgt_in` is `<bos>` + sentence and `tgt_out` is sentence +
# `<eos>`, both padded with `pad_id`.

# %% tags=["stub"]
def my_shift_right(tgt_seqs, pad_id, bos_id, eos_id):
    """tgt_seqs: list of B lists of ids -> tgt_in, tgt_out: (B, T) int arrays."""
    # your code here
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_4_7 import (
    check_encoder_layer_params, check_shift_right, check_transformer_params)

check_shift_right(my_shift_right)


# %% [markdown]
# ### Exercise 7.2 — parameters of one encoder layer
#
# Write `my_encoder_layer_params(d_model, d_ff)` returning the number of learnable scalars in one
# `EncoderLayer`: its self-attention ($W^Q, W^K, W^V, W^O$ and their biases), its feed-forward network and its
# two LayerNorms. The checker compares with layers it builds, including one of the base size.

# %% tags=["stub"]
def my_encoder_layer_params(d_model, d_ff):
    """-> int."""
    # your code here
    return None


# %% tags=["check"]
check_encoder_layer_params(my_encoder_layer_params)


# %% [markdown]
# ### Exercise 7.3 — parameters of the whole model
#
# Write `my_transformer_params(V, d_model, d_ff, N)` for the whole post-LN Transformer with the three-way
# tied embedding: $N$ encoder layers, $N$ decoder layers (each with two attentions and three LayerNorms), and
# $E$. The checker builds two tiny models and counts them, then compares base and big with
# `count_parameters`.

# %% tags=["stub"]
def my_transformer_params(V, d_model, d_ff, N):
    """-> int."""
    # your code here
    return None


# %% tags=["check"]
check_transformer_params(my_transformer_params)


# %% [markdown] tags=["solution"]
# ## Solutions

# %% tags=["solution"]
def shift_right_solution(tgt_seqs, pad_id, bos_id, eos_id):
    T = max(len(t) for t in tgt_seqs) + 1                     # +1 for <bos> / <eos>
    tgt_in = np.full((len(tgt_seqs), T), pad_id, dtype=np.int64)
    tgt_out = np.full((len(tgt_seqs), T), pad_id, dtype=np.int64)
    for b, t in enumerate(tgt_seqs):
        tgt_in[b, : len(t) + 1] = [bos_id, *t]                  # what the decoder reads
        tgt_out[b, : len(t) + 1] = [*t, eos_id]                 # what it must predict, one step ahead
    return tgt_in, tgt_out

check_shift_right(shift_right_solution)


# %% tags=["solution"]
def encoder_layer_params_solution(d_model, d_ff):
    attention = 4 * (d_model * d_model + d_model)              # W^Q, W^K, W^V, W^O, each with a bias
    ffn = d_model * d_ff + d_ff + d_ff * d_model + d_model      # W_1, b_1, W_2, b_2
    norms = 2 * 2 * d_model                                     # two LayerNorms: gamma and beta
    return attention + ffn + norms

check_encoder_layer_params(encoder_layer_params_solution)


# %% tags=["solution"]
def transformer_params_solution(V, d_model, d_ff, N):
    attention = 4 * (d_model * d_model + d_model)
    ffn = 2 * d_model * d_ff + d_ff + d_model
    encoder_layer = attention + ffn + 2 * 2 * d_model
    decoder_layer = 2 * attention + ffn + 3 * 2 * d_model      # self-attention, cross-attention, 3 norms
    return V * d_model + N * (encoder_layer + decoder_layer)    # E once: tied three ways

check_transformer_params(transformer_params_solution)
