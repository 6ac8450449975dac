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
# # Lesson 9 — Training (§5)
#
# Lessons 1–7 built the model and proved every backward pass. This lesson makes it learn. Section 5 of the
# paper is short; it fixes four things, and each has a reason we can test at toy scale:
#
# * **§5.1 batches**: sentence pairs of similar length go together, about 25 000 source and 25 000 target
#   tokens per batch, so little compute is spent on padding;
# * **§5.3 the optimizer**: Adam with $\beta_1 = 0.9$, $\beta_2 = 0.98$, $\epsilon = 10^{-9}$, and a learning
#   rate that rises linearly for `warmup_steps` = 4000 steps and then decays as $1/\sqrt{\text{step}}$ (Eq. 3);
# * **§5.4 residual dropout**, $P_\text{drop} = 0.1$, on every sub-layer's output and on the embeddings plus
#   positional encodings;
# * **§5.4 label smoothing**, $\varepsilon_{ls} = 0.1$, which the paper says makes perplexity worse but
#   accuracy and BLEU better.
#
# (§5.2 gives the hardware: eight P100 GPUs, 100 000 steps of 0.4 s for the base model, about 12 hours.)
#
# Then the checks every practitioner runs before trusting a training run, a full run of the copy task until it
# gets every held-out sequence exactly right, and, in the exercises, the gradient that starts every backward pass, written by you
# and used to train a model.
#
# | what | where in the package |
# | --- | --- |
# | batches by length (§5.1), padding and masks | `minitransformer.data.batching.batch_iterator`, `make_batch`, `Batch` |
# | Adam (§5.3) | `minitransformer.optim.Adam` (with `clip_grad_norm`, not in the paper, off by default) |
# | the learning-rate schedule (§5.3, Eq. 3) | `minitransformer.optim.NoamSchedule` |
# | label-smoothed cross-entropy and its gradient $p - q$ (§5.4) | `minitransformer.layers.loss.LabelSmoothedCrossEntropy`, `cross_entropy_forward`, `cross_entropy_backward` |
# | dropout with its saved mask (§5.4) | `minitransformer.layers.dropout.Dropout`, one object per site |
# | a run: task, recipe, loop, evaluation | `minitransformer.data.registry.load_task`, `minitransformer.runsetup.settings_for`, `make_trainer`, `minitransformer.train.Trainer.run`; `minitransformer.translate.score_translations` |
#
# The derivations of this lesson's backward passes are also in
# [docs/derivations.md §10 (dropout)](docs/derivations.md#10-dropout-54) and
# [§11 (label-smoothed cross-entropy)](docs/derivations.md#11-label-smoothed-cross-entropy-54).
#
# **What it trains:** several small models of the copy and reverse tasks (with and without warm-up, with and without label smoothing, one batch overfitted), the copy recipe until it is solved, and, in the exercises, a tiny model driven by your gradient. The cell below says how long the whole lesson takes.
#
# **Terms:** each term of these lessons, in English and as Korean texts write it, is in [the glossary](docs/glossary.md).

# %%
from lessonkit.runtimes import show_cost

show_cost("09")

# %%
# %matplotlib inline
import importlib.util
import json
import math
import pathlib
import sys
import time
import warnings

import numpy as np
import matplotlib.pyplot as plt

from minitransformer import backend
from lessonkit.i18n import tr
from lessonkit.prose import claim, claim_true, show_markdown

plt.rcParams.update({"figure.dpi": 80, "savefig.dpi": 80, "font.size": 9})
np.set_printoptions(precision=4, suppress=True, linewidth=110)
EXPERIMENTS = pathlib.Path("experiments")     # the notebook runs in lessons/: longer runs saved their results here
LESSON_START = time.perf_counter()
warnings.filterwarnings("ignore", message="IProgress not found")   # tqdm.auto's notice in a notebook without ipywidgets
# Models train in float32 (the package's default); the gradient checks below build float64 arrays themselves.

# %% [markdown]
# ## 1. Batching by length (§5.1)
#
# A batch is a rectangle: $B$ sentences, each padded with `<pad>` up to the longest one. The model computes
# on every padded position as on a real one (the masks only make the results invisible), so padding is
# wasted work, and attention's $S \times S$ score matrices waste it quadratically. The paper put
# sentence pairs of about the same length together. `batch_iterator` does it in three moves: shuffle the
# corpus, sort each pool of about 100 batches' worth of sentences by length, cut the sorted pool into
# batches, and shuffle the order of the batches (so an epoch does not run from short to long).
#
# We measure it on a real task: English → French emoji names, character by character (`emoji-en-fr`,
# built from the CLDR data that ships in the `emoji` package), where lengths run from 2 to 50 characters.
# Three ways to cut its 1 329 training pairs into batches of 64:
#
# * **random**: shuffle and cut (what you get without bucketing), built with `make_batch`;
# * **the package**: `batch_iterator(pairs, batch_size=64)`;
# * **a reference written here**: sort by the padded size a pair costs, $\max(S, T+1)$, and cut.

# %%
from minitransformer.data.batching import batch_iterator, make_batch
from minitransformer.data import batching
from minitransformer.data.registry import load_task
from minitransformer.train import encode_pairs

task = load_task("emoji-en-fr")
vocab = task.vocab
pairs = encode_pairs(vocab, task.train)          # [(source ids + <eos>, target ids)]
ids = dict(pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id)
# What the text above says of the task and of batch_iterator: 1 329 pairs of 2 to 50 characters, pools of 100 batches.
text_lengths = [len(side) for pair in task.train for side in pair]
assert len(pairs) == 1329 and (min(text_lengths), max(text_lengths)) == (2, 50) and batching.POOL_BATCHES == 100


def cut(order, B=64):
    """Batches of B pairs, in the given order."""
    return [make_batch([pairs[k][0] for k in order[i:i + B]], [pairs[k][1] for k in order[i:i + B]], **ids)
            for i in range(0, len(order), B)]


def cost(batches):
    """Real tokens, padded positions, and attention-score entries (S² + T² + T·S per sentence)."""
    src_real = sum(int((b.src != vocab.pad_id).sum()) for b in batches)
    tgt_real = sum(b.n_tokens for b in batches)
    src_all = sum(b.src.size for b in batches)
    tgt_all = sum(b.tgt_out.size for b in batches)
    scores = sum(b.size * (b.src.shape[1] ** 2 + b.tgt_in.shape[1] ** 2 + b.src.shape[1] * b.tgt_in.shape[1])
                 for b in batches)
    return {"batches": len(batches), "source pad": 1 - src_real / src_all, "target pad": 1 - tgt_real / tgt_all,
            "all pad": 1 - (src_real + tgt_real) / (src_all + tgt_all), "positions": src_all + tgt_all,
            "attention scores": scores}


lengths = [(len(s), len(t)) for s, t in pairs]
schemes = {
    tr("random"): cut(np.random.default_rng(0).permutation(len(pairs))),
    tr("package (batch_iterator)"): list(batch_iterator(pairs, batch_size=64, rng=np.random.default_rng(0), **ids)),
    tr("reference: sort by max(S, T+1)"): cut(sorted(range(len(pairs)), key=lambda k: (max(lengths[k][0], lengths[k][1] + 1),
                                                                                lengths[k]))),
}
print(tr(f"{task.name}: {len(pairs)} training pairs; source lengths {min(s for s, _ in lengths)}-{max(s for s, _ in lengths)}, "
         f"target lengths {min(t for _, t in lengths)}-{max(t for _, t in lengths)} (characters; sources include <eos>)"))
costs = {name: cost(b) for name, b in schemes.items()}
base = costs[tr("random")]
print(f"{'':<32}{tr('batches'):>8}{tr('source pad'):>12}{tr('target pad'):>12}{tr('all pad'):>9}{tr('positions'):>11}"
      f"{tr('attn scores'):>13}")
for name, c in costs.items():
    print(f"{name:<32}{c['batches']:>8}{c['source pad']:>12.1%}{c['target pad']:>12.1%}{c['all pad']:>9.1%}"
          f"{c['positions'] / base['positions']:>10.2f}x{c['attention scores'] / base['attention scores']:>12.2f}x")

# %%
S_max = max(b.src.shape[1] for bs in schemes.values() for b in bs)
T_max = max(b.tgt_out.shape[1] for bs in schemes.values() for b in bs)
picks = {tr("random"): [0, 1, 2, 3], tr("package (batch_iterator)"): [0, 1, 2, 3],
         tr("reference: sort by max(S, T+1)"): [2, 8, 14, 20]}
cmap = plt.get_cmap("Blues").copy(); cmap.set_bad("white")
fig, axes = plt.subplots(3, 4, figsize=(11, 6.2), sharex=True)
for row, (name, batches) in zip(axes, schemes.items()):
    for ax, i in zip(row, picks[name]):
        b = batches[i]
        img = np.full((b.size, S_max + 3 + T_max), np.nan)            # NaN: outside the batch (white)
        img[:, : b.src.shape[1]] = np.where(backend.to_numpy(b.src) != vocab.pad_id, 1.0, 0.25)
        img[:, S_max + 3: S_max + 3 + b.tgt_out.shape[1]] = np.where(backend.to_numpy(b.tgt_out) != vocab.pad_id, 1.0, 0.25)
        ax.imshow(img, cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        c = cost([b])
        ax.set_title(tr(f"S={b.src.shape[1]}, T={b.tgt_out.shape[1]}: {c['all pad']:.0%} padding"), fontsize=8)
        ax.set_yticks([])
    row[0].set_ylabel(name, fontsize=8)
for ax in axes[-1]:
    ax.set_xticks([S_max / 2, S_max + 3 + T_max / 2], [tr("source"), tr("target")])
fig.suptitle(tr("batches of 64 emoji names (rows = sentences): dark = real token, pale = <pad>"), fontsize=10)
plt.tight_layout(); plt.show()

# %%
rnd, pkg, ref = (costs[k] for k in schemes)
claim_true("bucketing removes more source padding than target padding",
           rnd["source pad"] - pkg["source pad"] > rnd["target pad"] - pkg["target pad"], str(costs))
claim_true("sorting by max(S, T+1) leaves less padding than the package's order", ref["all pad"] < pkg["all pad"],
           f"{ref['all pad']:.1%} vs {pkg['all pad']:.1%}")
show_markdown(
    f"Random batches are {rnd['all pad']:.0%} padding: a batch's width is set by its longest sentence, and among 64 "
    "random emoji names there is always a long one. The package's bucketing removes most of the *source* padding "
    f"({rnd['source pad']:.0%} → {pkg['source pad']:.0%}) but less of the *target* padding ({rnd['target pad']:.0%} → "
    f"{pkg['target pad']:.0%}): `batch_iterator` sorts by source length first and target length second, and at a "
    "given English length the French names vary a lot in length. Sorting by what a pair costs, $\\max(S, T+1)$, the "
    f"larger of its two padded lengths, cuts the total padding further ({pkg['all pad']:.0%} → {ref['all pad']:.0%}), "
    "and the attention scores computed fall with it. Where the target length follows the source length closely, as "
    "in the number-translation tasks, the package's order already leaves little padding:")

# %%
numbers = load_task("numbers-en-de")                   # English words -> German characters
number_pairs = encode_pairs(numbers.vocab, numbers.train)
nid = dict(pad_id=numbers.vocab.pad_id, bos_id=numbers.vocab.bos_id, eos_id=numbers.vocab.eos_id)
order = np.random.default_rng(0).permutation(len(number_pairs))
for name, batches in ((tr("random"), [make_batch([number_pairs[k][0] for k in order[i:i + 64]],
                                             [number_pairs[k][1] for k in order[i:i + 64]], **nid)
                                  for i in range(0, len(order), 64)]),
                      (tr("package"), list(batch_iterator(number_pairs, 64, rng=np.random.default_rng(0), **nid)))):
    real = sum(int((b.src != nid["pad_id"]).sum()) + b.n_tokens for b in batches)
    print(tr(f"numbers-en-de, {name:<8} {1 - real / sum(b.src.size + b.tgt_out.size for b in batches):.1%} padding"))

# %% [markdown]
# The paper also sized batches by **tokens** rather than sentences (`batch_iterator(..., max_tokens=...)`):
# batches of short sentences then hold more of them, so every step does about the same work.
#
# ## 2. Adam (§5.3)
#
# Adam (Kingma & Ba, 2015) keeps two running averages per parameter: $m$ of the gradient $g$ and $v$ of its
# square. At step $t = 1, 2, \ldots$, with the paper's $\beta_1 = 0.9$, $\beta_2 = 0.98$, $\epsilon = 10^{-9}$:
#
# $$m_t = \beta_1 m_{t-1} + (1-\beta_1)\,g_t,\qquad v_t = \beta_2 v_{t-1} + (1-\beta_2)\,g_t^2,\qquad m_0 = v_0 = 0,$$
# $$\hat m_t = \frac{m_t}{1-\beta_1^t},\qquad \hat v_t = \frac{v_t}{1-\beta_2^t},\qquad
# \theta_t = \theta_{t-1} - \text{lrate}(t)\,\frac{\hat m_t}{\sqrt{\hat v_t} + \epsilon}.$$
#
# `minitransformer.optim.Adam` implements exactly this (`Adam.step`; its docstring has the same five lines).
#
# **Where the bias correction comes from.** Unroll the recursion: $m_t = (1-\beta_1)\sum_{i=1}^{t}\beta_1^{\,t-i} g_i$.
# If the gradients have a steady mean $\mathbb E[g]$, then
# $\mathbb E[m_t] = \mathbb E[g]\,(1-\beta_1)\sum_{i=1}^{t}\beta_1^{\,t-i} = \mathbb E[g]\,(1-\beta_1^t)$, because the
# geometric sum is $(1-\beta_1^t)/(1-\beta_1)$. Starting from $m_0 = 0$ makes $m_t$ too small by exactly the factor
# $1-\beta_1^t$; dividing it out gives an unbiased $\hat m_t$. The same argument with $g^2$ gives $\hat v_t$.
#
# **The step is measured in parameter units.** $\hat m/\sqrt{\hat v}$ is the mean of $g$ over the root-mean-square
# of $g$: about $\pm1$ when the gradient keeps its sign, smaller when it is noisy, and independent of the
# gradient's *scale*. So every parameter moves by at most about lrate per step, whatever the size of its
# gradient. At $t = 1$ exactly, $\hat m_1 = g_1$ and $\hat v_1 = g_1^2$, so
#
# $$\theta_1 - \theta_0 = -\,\text{lrate}(1)\,\frac{g_1}{|g_1| + \epsilon} \approx -\,\text{lrate}(1)\,\operatorname{sign}(g_1):$$
#
# on its first step Adam moves **every** parameter by the full learning rate, in the direction of one noisy
# gradient, unless $|g|$ is as small as $\epsilon$. The package's `Adam` shows it:

# %%
from minitransformer.layers.parameter import Parameter
from minitransformer.optim import Adam, NoamSchedule

g = np.array([1e3, 1.0, 1e-3, 1e-6, 1e-8, 1e-9, 1e-10, 1e-12])
theta = Parameter(np.zeros_like(g), "theta")
theta.grad[...] = g
adam = Adam([theta], lr=1e-3)                  # the paper's betas (0.9, 0.98) and eps 1e-9 are the defaults
adam.step()
print(adam)
print(tr("gradient g               "), " ".join(f"{x:8.0e}" for x in g))
print(tr("first step / lrate       "), " ".join(f"{x:8.3f}" for x in -theta.data / 1e-3))
print("g / (|g| + eps)          ", " ".join(f"{x:8.3f}" for x in g / (np.abs(g) + 1e-9)))

# %% [markdown]
# A gradient of $10^3$ and one of $10^{-6}$ produce the same first step. Only near $\epsilon = 10^{-9}$ does the
# step shrink: the paper's small $\epsilon$ (the usual default is $10^{-8}$) keeps the step scale-free down to
# very small gradients.
#
# Why $\beta_2 = 0.98$ rather than the usual 0.999? The paper does not say. One reading: $v$ averages over about
# $1/(1-\beta_2)$ steps, fifty instead of a thousand, so it follows the gradient's size quickly when that changes, as it
# does early in training. The bias
# correction matters more with a large $\beta_2$. Without it, the update is
# $\frac{1-\beta_1^t}{\sqrt{1-\beta_2^t}}$ times the corrected one (for a steady gradient), which is *not* small:

# %%
t = np.arange(1, 301)
fig, ax = plt.subplots(figsize=(6.5, 2.8))
for beta2, style in ((0.98, "-"), (0.999, "--")):
    ratio = (1 - 0.9 ** t) / np.sqrt(1 - beta2 ** t)
    ax.plot(t, ratio, style, label=f"β1 = 0.9, β2 = {beta2}")
    print(tr(f"beta2 = {beta2}: at most {ratio.max():.2f} times the corrected step (at step {t[ratio.argmax()]}); "
             f"{ratio[0]:.2f} at step 1"))
ax.axhline(1, color="k", lw=0.8)
ax.set(xscale="log", xlabel=tr("step t"), ylabel=tr("uncorrected / corrected step"),
       title=tr("Adam without bias correction, for a steady gradient"))
ax.legend(); plt.tight_layout(); plt.show()
uncorrected = {beta2: (1 - 0.9 ** t) / np.sqrt(1 - beta2 ** t) for beta2 in (0.98, 0.999)}
claim("beta2 = 0.98: at most 1.55 times the corrected step", uncorrected[0.98].max(), 1.55, tol=0.005)
claim("beta2 = 0.98: the largest at step 14", t[uncorrected[0.98].argmax()], 14, tol=0)
claim("beta2 = 0.999: at most 6.6 times the corrected step", uncorrected[0.999].max(), 6.6, tol=0.05)
claim("beta2 = 0.999: the largest at step 12", t[uncorrected[0.999].argmax()], 12, tol=0)

# %% [markdown]
# **Predict.** The schedule of §5.3, Eq. (3), with the paper's $d_\text{model} = 512$ and 4000 warm-up steps: its highest learning rate?

# %% tags=["predict"]
my_prediction_9_1 = None   # a number


# %% tags=["reveal"]
from lessonkit.predict import reveal

from minitransformer.optim import NoamSchedule

reveal(my_prediction_9_1, NoamSchedule(512, 4000).peak_lr, what="the peak learning rate, d_model 512, 4000 warm-up steps")


# %% [markdown]
# Without the correction, the early steps with the paper's $\beta_2 = 0.98$ would be up to 1.55 times too large
# (at step 14), and with $\beta_2 = 0.999$ up to 6.6 times (at step 12). Exercise 9.2 asks you to write one Adam update;
# its checker compares it with `optim.Adam`.
#
# ## 3. The learning-rate schedule (§5.3, Eq. 3)
#
# $$\text{lrate} = d_\text{model}^{-0.5}\cdot\min\big(\text{step}^{-0.5},\ \text{step}\cdot\text{warmup\_steps}^{-1.5}\big)$$
#
# The second term is the smaller one until step = warmup_steps, where the two are equal: the rate grows
# linearly for `warmup_steps` steps, peaks at $(d_\text{model}\cdot\text{warmup\_steps})^{-1/2}$, then decays as
# $1/\sqrt{\text{step}}$. `NoamSchedule(d_model, warmup_steps, factor)` computes it (with an extra constant
# `factor`, 1 in the paper), and `Adam` calls it once per step. For the base model, $d_\text{model} = 512$ and
# 4000 warm-up steps give a peak of $7.0\times10^{-4}$.

# %%
steps = np.arange(1, 20001, 10)               # every 10th step is plenty for a smooth curve
fig, axes = plt.subplots(1, 2, figsize=(10, 3.2), sharey=True)
for d_model in (128, 512, 1024):
    schedule = NoamSchedule(d_model, 4000)
    axes[0].plot(steps, [schedule(int(i)) for i in steps], label=tr(f"d_model = {d_model} (peak {schedule.peak_lr:.1e})"))
for warmup in (1000, 4000, 8000):
    schedule = NoamSchedule(512, warmup)
    axes[1].plot(steps, [schedule(int(i)) for i in steps], label=tr(f"warmup_steps = {warmup} (peak {schedule.peak_lr:.1e})"))
axes[0].set(title="warmup_steps = 4000", xlabel=tr("step"), ylabel="lrate")
axes[1].set(title="d_model = 512", xlabel=tr("step"))
for ax in axes:
    ax.legend(fontsize=8)
plt.tight_layout(); plt.show()
print(tr("base model peak:"), NoamSchedule(512, 4000).peak_lr, tr("at step"), NoamSchedule(512, 4000).warmup_steps)
claim("the base model's peak rate is 7.0e-4", NoamSchedule(512, 4000).peak_lr, 7.0e-4, tol=5e-6)

# %% [markdown]
# Wider models get smaller rates ($d_\text{model}^{-0.5}$); a longer warm-up gives a lower, later peak.
#
# **Why warm up?** Part 2 of this lesson gave the reason Adam makes it necessary: in its first steps every parameter moves by
# about the full learning rate, in the direction of gradients computed from a random model, with $v$
# averaged over very few steps. Warm-up keeps those early steps small. Xiong et al. (2020) tie the
# need for it to the post-LN arrangement the paper uses (lesson 4); we measure it on the copy task with the copy preset
# ($d_\text{model} = 64$, $N = 2$). Two schedules that are **identical from step 200 on** and differ only before:
#
# * with warm-up: `NoamSchedule(64, 200, factor)`;
# * without: the same peak from step 1, `lrate(step) = NoamSchedule(64, 200, factor)(max(step, 200))`.
#
# The training loop below is the one inside `Trainer.train_step`, written out so that we can choose the schedule:

# %%
from threadpoolctl import threadpool_limits

from minitransformer.layers.loss import LabelSmoothedCrossEntropy
from minitransformer.runsetup import build_model

copy_task = load_task("copy")                   # 20 000 training pairs of 1-10 symbols, seeded
copy_pairs = encode_pairs(copy_task.vocab, copy_task.train)
cv = copy_task.vocab


def endless_batches(pairs, seed, batch_size=64):
    """Endless bucketed batches of a synthetic task's encoded pairs; epoch e shuffled by default_rng([seed, e]),
    as Trainer does. (Copy and reverse share one vocabulary, cv.)"""
    epoch = 0
    while True:
        yield from batch_iterator(pairs, batch_size, rng=np.random.default_rng([seed, epoch]),
                                  pad_id=cv.pad_id, bos_id=cv.bos_id, eos_id=cv.eos_id)
        epoch += 1


def train_steps(model, pairs, lr, steps, seed=0, clip_norm=None):
    """`steps` steps of Trainer.train_step's loop on `pairs` with learning rate `lr` (a float or step -> float).
    Returns the losses."""
    optimizer = Adam(model.parameters(), lr=lr, clip_norm=clip_norm)
    loss_fn = LabelSmoothedCrossEntropy(cv.pad_id, model.cfg.eps_ls)
    stream, losses = endless_batches(pairs, seed), []
    for _ in range(steps):
        b = next(stream)
        logits = model.forward(b.src, b.tgt_in, b.src_mask, b.tgt_mask)    # (B, T, V), teacher forcing
        losses.append(loss_fn.forward(logits, b.tgt_out))                 # label-smoothed CE, mean over non-pad
        optimizer.zero_grad()
        model.backward(loss_fn.backward())                                # dlogits = (p - q) / n, then every layer
        optimizer.step()                                                  # Adam, lrate from the schedule
    return np.array(losses)


# %%
from lessonkit.runtimes import show_slow_cell

show_slow_cell("09", "with and without warm-up, 2 x 300 steps")

# %%
# slow: with and without warm-up, 2 x 300 steps
# The model of the saved runs below (lessons/experiments/lesson09_warmup.py pins it: d_model 64, 8 heads, 2 layers,
# no dropout or smoothing), so that this run is one of their rows.
spec = importlib.util.spec_from_file_location("lesson09_warmup", EXPERIMENTS / "lesson09_warmup.py")
warmup_script = importlib.util.module_from_spec(spec)
sys.path.insert(0, str(EXPERIMENTS.resolve()))
spec.loader.exec_module(warmup_script)
WARMUP_MODEL = warmup_script.PINNED_MODEL
FACTOR, WARMUP, LIVE_STEPS = 1.0, 200, 300
noam = NoamSchedule(WARMUP_MODEL["d_model"], WARMUP, FACTOR)
t0 = time.perf_counter()
with threadpool_limits(1):                      # one BLAS thread, as the saved runs
    live = {"with warm-up": train_steps(build_model(copy_task, "copy", seed=0, **WARMUP_MODEL), copy_pairs, noam,
                                        LIVE_STEPS),
            "without warm-up": train_steps(build_model(copy_task, "copy", seed=0, **WARMUP_MODEL), copy_pairs,
                                           lambda step: noam(max(step, WARMUP)), LIVE_STEPS)}
print(tr(f"2 x {LIVE_STEPS} steps in {time.perf_counter() - t0:.1f} s; peak lrate {noam.peak_lr:.2e}"))
shown = {"with warm-up": tr("with warm-up"), "without warm-up": tr("without warm-up")}   # the run's keys, as shown
for name, losses in live.items():
    print(tr(f"{shown[name]:<16} loss: first 10 steps {losses[:10].mean():.3f}, steps 190-210 {losses[190:210].mean():.3f}, "
             f"last 20 {losses[-20:].mean():.3f}"))

# The live run is a row of the saved record (below). On any computer it must show what the record measured when
# it re-ran this row on four processors' arithmetic (their BLAS kernels and SIMD code) and three seeds: the first
# 10 steps as recorded, to rounding (they check the arithmetic), and over steps 281-300 a loss with warm-up far
# below the loss without, which stays near chance (the margins: lessons/experiments/README.md).
warm = json.loads((EXPERIMENTS / "lesson09_warmup.json").read_text())
print(tr("the live run agrees with the saved row:"), *warmup_script.check_live(warm, live), sep="\n  ")

# %%
factors = sorted({r["factor"] for r in warm["runs"]})
fig, axes = plt.subplots(1, len(factors) + 1, figsize=(13, 3.2), sharey=True)


def smooth(x, k=10):
    return np.convolve(x, np.ones(k) / k, mode="valid")


for name, losses in live.items():
    axes[0].plot(smooth(losses), label=shown[name], color="tab:blue" if name == "with warm-up" else "tab:red")
axes[0].set(title=tr(f"live, factor {FACTOR} (peak {noam.peak_lr:.1e})"), xlabel=tr("step"), ylabel=tr("training loss"))
axes[0].legend(fontsize=8)
for ax, factor in zip(axes[1:], factors):
    for r in (r for r in warm["runs"] if r["factor"] == factor):
        ax.plot(smooth(r["loss"]), color="tab:blue" if r["warmup"] else "tab:red", lw=1, alpha=0.8)
    peak = next(r["peak_lr"] for r in warm["runs"] if r["factor"] == factor)
    ax.set(title=tr(f"saved: factor {factor} (peak {peak:.1e})"), xlabel=tr("step"))
for ax in axes:
    ax.axvline(WARMUP, color="k", lw=0.6, ls=":")
fig.suptitle(tr("copy task, copy preset: blue = with warm-up, red = without (same rate from step 200 on); "
                f"saved runs: seeds {sorted({r['seed'] for r in warm['runs']})}"), fontsize=9)
plt.tight_layout(); plt.show()
print(tr("saved runs:"), *(warm["provenance"][0][k] for k in ("command", "started", "commit")), sep=" | ")
print(f"{tr('factor'):<8}{tr('peak lrate'):>11}  ",
      tr(f"mean training loss over the last 50 of {len(warm['runs'][0]['loss'])} steps, per seed"))
for factor in factors:
    runs = [r for r in warm["runs"] if r["factor"] == factor]
    cells = {w: "  ".join(f"{np.mean(r['loss'][-50:]):.3f}" for r in runs if r["warmup"] == w) for w in (True, False)}
    print(tr(f"{factor:<8}{runs[0]['peak_lr']:>11.2e}   with warm-up: {cells[True]}    without: {cells[False]}"))

# %% [markdown]
# Measured, two seeds per setting (the live run above is the middle setting's seed 0 again, for 300 steps);
# the sentences are rendered from the saved runs:

# %%
def warm_stat(factor, warmup, window):
    """Per seed, the mean training loss over steps window[0]+1 .. window[1] of the saved runs."""
    return [float(np.mean(r["loss"][window[0]:window[1]])) for r in warm["runs"]
            if r["factor"] == factor and r["warmup"] == warmup]


def nums(values):
    return tr(" and ").join(f"{v:.2f}" for v in values)


end_w = {f: warm_stat(f, True, (-50, None)) for f in factors}
end_wo = {f: warm_stat(f, False, (-50, None)) for f in factors}
peak = {f: next(r["peak_lr"] for r in warm["runs"] if r["factor"] == f) for f in factors}
f_lo, f_mid, f_hi = factors
chance = math.log(10)                     # a uniform guess among the 10 symbols, per position
claim_true("at the lowest peak rate both schedules learn", max(end_w[f_lo] + end_wo[f_lo]) < 1.0, str((end_w, end_wo)))
claim_true("at the lowest peak rate, without warm-up ends behind (every seed)",
           all(a > b for a, b in zip(end_wo[f_lo], end_w[f_lo])), f"{end_wo[f_lo]} vs {end_w[f_lo]}")
claim_true("at the middle rate, with warm-up learns and without it is stuck near chance",
           max(end_w[f_mid]) < 1.0 and min(end_wo[f_mid]) > 0.8 * chance, f"{end_w[f_mid]} vs {end_wo[f_mid]}")
claim_true("at the highest rate neither schedule gets the loss below 1.5", min(end_w[f_hi] + end_wo[f_hi]) > 1.5,
           str(end_w[f_hi] + end_wo[f_hi]))
show_markdown(
    f"* **peak {peak[f_lo]:.1e} (factor {f_lo})**: both schedules learn. Without warm-up the loss falls faster for "
    f"the first 10 steps ({nums(warm_stat(f_lo, False, (0, 10)))} against {nums(warm_stat(f_lo, True, (0, 10)))}), "
    f"then falls behind although its rate is higher until step {warm['warmup_steps']} (steps 91-110: "
    f"{nums(warm_stat(f_lo, False, (90, 110)))} against {nums(warm_stat(f_lo, True, (90, 110)))}), and after "
    f"{len(warm['runs'][0]['loss'])} steps it is still behind (last-50-step loss {nums(end_wo[f_lo])} against "
    f"{nums(end_w[f_lo])}).\n"
    f"* **peak {peak[f_mid]:.1e} (factor {f_mid})**: with warm-up the model learns ({nums(end_w[f_mid])} at the end). "
    f"Without it, both seeds get stuck near a loss of {nums(end_wo[f_mid])} and stay there, close to "
    f"$\\ln 10 = {chance:.2f}$ per symbol: the model predicts *some* symbol but has not learned to read *which* one "
    "from the source. Full-size steps in directions set by a random model's gradients put it somewhere it does "
    "not leave at that rate.\n"
    f"* **peak {peak[f_hi]:.1e} (factor {f_hi})**: neither learns in {len(warm['runs'][0]['loss'])} steps (last-50-step "
    f"loss {nums(end_w[f_hi])} with warm-up, {nums(end_wo[f_hi])} without). Warm-up does not rescue a rate that is "
    "simply too high.")

# %% [markdown]
# So at this scale warm-up widens the range of peak rates that train. The paper's base model, deeper and
# wider, used 4000 warm-up steps.
#
# ## 4. Label smoothing (§5.4)
#
# The usual target of the cross-entropy is one-hot: all probability on the correct token $y$. Label
# smoothing mixes in a little of the uniform distribution. With $V$ tokens and $\varepsilon_{ls} = 0.1$:
#
# $$q_v = (1-\varepsilon_{ls})\,[v = y] + \frac{\varepsilon_{ls}}{V},\qquad
# \ell = -\sum_{v=1}^{V} q_v \log p_v,\qquad p = \operatorname{softmax}(z).$$
#
# (This is PyTorch's `label_smoothing` convention; some implementations spread $\varepsilon_{ls}$ over the
# $V-1$ wrong tokens instead.) The batch loss is the mean of $\ell$ over the target positions that are not
# padding. `LabelSmoothedCrossEntropy(pad_id, eps_ls)` computes it, from log-softmax so that $\log 0$ never
# happens (lesson 5).
#
# Since $\ell$ is the cross-entropy of $p$ against $q$, it is smallest when $p = q$: a model trained with label
# smoothing is pushed to put about $1 - \varepsilon_{ls}$, not 1, on the right token. That is the whole trade-off in one line:
# the loss is no longer minimised by certainty.

# %%
V_demo, y_demo, eps_ls = 10, 3, 0.1
q = (1 - eps_ls) * np.eye(V_demo)[y_demo] + eps_ls / V_demo
fig, axes = plt.subplots(1, 2, figsize=(9, 2.6), sharey=True)
axes[0].bar(range(V_demo), np.eye(V_demo)[y_demo], color="tab:gray")
axes[0].set(title=tr("one-hot target (ε_ls = 0)"), xlabel=tr("token v"), ylabel=tr("target probability"))
axes[1].bar(range(V_demo), q, color=["tab:blue" if v == y_demo else "tab:orange" for v in range(V_demo)])
axes[1].set(title=tr(f"smoothed target q (ε_ls = {eps_ls}, V = {V_demo})"), xlabel=tr("token v"))
for v in (y_demo, 0):
    axes[1].text(v, q[v] + 0.02, f"{q[v]:.2f}", ha="center", fontsize=8)
plt.tight_layout(); plt.show()
print(tr(f"the lowest possible loss, reached at p = q: H(q) = {-(q * np.log(q)).sum():.4f} (0 for a one-hot target)"))

# %% [markdown]
# ### The gradient: $p - q$
#
# One position, logits $z \in \mathbb R^V$. Write $\log p_v = z_v - \log\sum_m e^{z_m}$. Its derivative with respect
# to $z_k$ is
#
# $$\frac{\partial \log p_v}{\partial z_k} = [v = k] - \frac{e^{z_k}}{\sum_m e^{z_m}} = [v = k] - p_k .$$
#
# (This is the log-softmax's derivative; the softmax Jacobian itself is in
# [docs/derivations.md §4](docs/derivations.md#4-softmax-and-its-jacobian).)
#
# So
#
# $$\frac{\partial \ell}{\partial z_k} = -\sum_v q_v\big([v=k] - p_k\big) = -q_k + p_k\sum_v q_v = p_k - q_k,$$
#
# because $q$ sums to 1 ($1-\varepsilon_{ls}$ at $y$ plus $V\cdot\varepsilon_{ls}/V$). In words: predicted minus
# target. Written out per entry, $\partial\ell/\partial z_v = p_v - \varepsilon_{ls}/V$ for $v \ne y$ and
# $p_y - (1 - \varepsilon_{ls}) - \varepsilon_{ls}/V$ at the target: subtract $\varepsilon_{ls}/V$ everywhere, then a further
# $1-\varepsilon_{ls}$ at the index $y$ (found by its index, not by searching for a value).
#
# **The mean over non-pad tokens.** The batch loss is $L = \frac1n\sum_{(b,t):\,y_{b,t}\ne\text{pad}} \ell_{b,t}$, with
# $n$ the number of non-pad targets. Each $\ell_{b,t}$ depends only on its own logits $z_{b,t}$, so
#
# $$\frac{\partial L}{\partial z_{b,t}} = \begin{cases}(p_{b,t} - q_{b,t})/n & y_{b,t} \ne \text{pad}\\ 0 & y_{b,t} = \text{pad.}\end{cases}$$
#
# Dividing by all $B\cdot T$ positions instead of $n$ would make the gradient depend on how much padding the
# batch happens to have. This is `cross_entropy_backward`: `probs - eps_ls/V`, then `-= 1 - eps_ls` at the
# target indices, then `* valid / n`. It is the first gradient of every backward pass, the `dlogits` that
# `Transformer.backward` receives. (The same derivation, with the numerical-stability argument:
# [docs/derivations.md §11](docs/derivations.md#11-label-smoothed-cross-entropy-54).) A gradient check, float64,
# with padding in both rows:

# %%
from minitransformer.gradcheck import gradcheck

rng = np.random.default_rng(9)
logits = 2.0 * rng.standard_normal((2, 5, 7))                 # (B, T, V) float64
targets = np.array([[3, 6, 2, 5, 0], [4, 2, 0, 0, 0]])         # pad_id 0: three of ten positions are padding
loss_fn = LabelSmoothedCrossEntropy(pad_id=0, eps_ls=0.1)
loss = loss_fn.forward(logits, targets)
dlogits = loss_fn.backward()
report = gradcheck(lambda: loss_fn.forward(logits, targets), {"logits": logits}, {"logits": dlogits})
print(tr(f"loss {loss:.4f}\n{report}"))
report.assert_ok()

n = int((targets != 0).sum())
p = np.exp(logits[0, 0] - logits[0, 0].max()); p /= p.sum()
print(tr("\nposition (0, 0), target 3:"))
print("  p               ", p)
q_00 = (1 - 0.1) * np.eye(7)[3] + 0.1 / 7
print("  q               ", q_00)
print("  n * dlogits     ", n * dlogits[0, 0], tr("  = p - q, to"), np.abs(n * dlogits[0, 0] - (p - q_00)).max())
print(tr("  a pad position  "), dlogits[1, 4], "  = 0")

# %% [markdown]
# **Predict.** With $\varepsilon_{ls} = 0.1$ and a vocabulary of 1000 tokens, a model that predicts the smoothed target $q$ exactly, the best any model can do: what is its loss, in nats?

# %% tags=["predict"]
my_prediction_9_2 = None   # a number of nats


# %% tags=["reveal"]
from lessonkit.predict import reveal

V_1000, eps_01 = 1000, 0.1
q_best = np.full(V_1000, eps_01 / V_1000)
q_best[0] += 1 - eps_01                                         # the target token
reveal(my_prediction_9_2, float(-(q_best * np.log(q_best)).sum()), what="the lowest label-smoothed loss, eps_ls 0.1, V = 1000 (nats)")


# %% [markdown]
# ### The trade-off, measured
#
# The paper reports that label smoothing makes perplexity worse, since the model learns to be less sure of
# itself, while it raises accuracy and BLEU. Perplexity is $\exp$ of the mean $-\log p(\text{correct token})$ on held-out data (unsmoothed).
# The model that the smoothed loss asks for, $p = q$, has $-\log p_y = -\log(1 - \varepsilon_{ls} + \varepsilon_{ls}/V)$ at every
# position, so its perplexity is $1/(1-\varepsilon_{ls}+\varepsilon_{ls}/V)$, above 1 even when every prediction is right;
# without smoothing the loss pushes perplexity towards 1.
#
# Below: the same tiny model (`tiny` preset: $d_\text{model} = 32$, $h = 2$, $N = 1$; the schedule and clipping the
# script pins) trained on the same batches with $\varepsilon_{ls} = 0$ and $0.1$, measured on 500 held-out
# sequences: perplexity, token accuracy (teacher-forced argmax), and exact match of greedy decodes
# (`score_translations`). First a live run on the **reverse** task (output the sequence backwards, harder
# than copying; its length is printed under it), then saved runs, longer and three seeds each, on copy and
# reverse (`lessons/experiments/lesson09_label_smoothing.py`).

# %%
from minitransformer.layers.loss import cross_entropy_forward
from minitransformer.layers.parameter import eval_mode
from minitransformer.translate import score_translations

def held_out_scores(model, task, n_pairs=500):
    """Perplexity (unsmoothed), token accuracy and exact match on the first n_pairs held-out pairs of a task."""
    held_out = task.test[:n_pairs]
    nll = correct = n_tok = 0
    with eval_mode(model):
        for b in batch_iterator(encode_pairs(task.vocab, held_out), 100, shuffle=False, pad_id=cv.pad_id,
                                bos_id=cv.bos_id, eos_id=cv.eos_id):
            z = model.forward(b.src, b.tgt_in, b.src_mask, b.tgt_mask)
            nll += cross_entropy_forward(z, b.tgt_out, cv.pad_id, 0.0)[0] * b.n_tokens
            correct += int(((z.argmax(-1) == b.tgt_out) & (b.tgt_out != cv.pad_id)).sum())
            n_tok += b.n_tokens
        exact = score_translations(model, task.vocab, held_out, task.tgt_level, task.bleu_tokenize)["exact_match"]
    return {"perplexity": math.exp(nll / n_tok), "token accuracy": correct / n_tok, "exact match": exact}


show_slow_cell("09", "label smoothing on and off, 2 x 750 steps")

# %%
# slow: label smoothing on and off, 2 x 750 steps
spec = importlib.util.spec_from_file_location("lesson09_label_smoothing", EXPERIMENTS / "lesson09_label_smoothing.py")
ls_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ls_script)
ls_record = json.loads((EXPERIMENTS / "lesson09_label_smoothing.json").read_text())
n_test = next(e["test_pairs"] for e in ls_record["entries"] if e["task"] == ls_script.LIVE["task"])

# The live run is the saved record's row (reverse, tiny, seed 0, 750 steps): trained here by the script's own
# function, through the package's Trainer with the settings the script pins (the copy/reverse schedule of the
# time, factor 0.25, warm-up 200, clipping at 1), measured on the same held-out sequences.
t0 = time.perf_counter()
with threadpool_limits(1):                      # one BLAS thread, as the saved runs
    ls_live = {eps: ls_script.live_point(eps, n_test) for eps in ls_script.EPS}
LS_STEPS = ls_script.LIVE["steps"]
print(tr(f"reverse task: 2 x {LS_STEPS} steps of the tiny model in {time.perf_counter() - t0:.1f} s, "
         f"{n_test} held-out sequences"))
print(f"{'eps_ls':<8}{tr('perplexity'):>11}{tr('token accuracy'):>16}{tr('exact match'):>13}")
for eps, measured in ls_live.items():
    print(f"{eps:<8}{measured['perplexity']:>11.4f}{measured['token_accuracy']:>16.2%}{measured['exact_match']:>13.1%}")
print(tr(f"perplexity of p = q (eps_ls = 0.1, V = {len(cv)}): {1 / (1 - 0.1 + 0.1 / len(cv)):.4f}"))
# The record's row, within the margins it measured over four processors' arithmetic and three seeds: the first
# 10 steps' loss as recorded (to rounding), and held-out scores of a model that has learned to reverse.
print(tr("the live run agrees with the saved row:"), *ls_script.check_live(ls_record, ls_live), sep="\n  ")

# %%
a, b = ls_live[0.0], ls_live[0.1]
verdict = (tr(": the paper's trade-off, worse perplexity and better accuracy.")
           if b["perplexity"] > a["perplexity"] and b["token_accuracy"] > a["token_accuracy"]
           else tr(", which is not the paper's trade-off on this seed."))
show_markdown(
    f"In this live run, smoothing took perplexity from {a['perplexity']:.3f} to {b['perplexity']:.3f}, token accuracy "
    f"from {a['token_accuracy']:.1%} to {b['token_accuracy']:.1%} and exact match from {a['exact_match']:.1%} to "
    f"{b['exact_match']:.1%}{verdict}"
    " One seed proves little; here are the saved runs, three seeds each, on copy and reverse:")

# %%
ls_saved = ls_record["entries"]
fig, axes = plt.subplots(len(ls_saved), 3, figsize=(10, 2.6 * len(ls_saved)), squeeze=False)
for row, entry in zip(axes, ls_saved):
    for run in entry["runs"]:
        color = "tab:gray" if run["eps_ls"] == 0 else "tab:green"
        st = [c["step"] for c in run["curve"]]
        row[0].plot(st, [c["perplexity"] for c in run["curve"]], color=color, marker=".")
        row[1].plot(st, [c["token_accuracy"] for c in run["curve"]], color=color, marker=".")
        row[2].plot(st, [c["exact_match"] for c in run["curve"]], color=color, marker=".")
    row[0].axhline(1 / (1 - 0.1 + 0.1 / len(cv)), color="tab:green", ls=":", lw=1)   # copy and reverse share cv
    row[0].set(ylabel=tr(f"{entry['task']}, {entry['preset']}\nheld-out perplexity"), title=tr("perplexity (lower is better)"))
    row[1].set(title=tr("token accuracy")); row[2].set(title=tr("exact match (greedy)"))
    for ax in row:
        ax.set_xlabel(tr("step"))
fig.suptitle(tr("gray: ε_ls = 0, green: ε_ls = 0.1 (dotted: the perplexity of p = q); one line per seed"), fontsize=9)
plt.tight_layout(); plt.show()
for entry in ls_saved:
    print(f"{entry['task']}:", *(ls_record["provenance"][0][k] for k in ("command", "started", "commit")), sep=" | ")
    print(f"  {'eps_ls':<7}{tr('seed'):>5}{tr('perplexity'):>11}{tr('token acc'):>11}{tr('exact match'):>13}{'BLEU':>7}  ",
          tr(f"(step {entry['runs'][0]['curve'][-1]['step']})"))
    for run in sorted(entry["runs"], key=lambda r: (r["eps_ls"], r["seed"])):
        final = run["curve"][-1]
        print(f"  {run['eps_ls']:<7}{run['seed']:>5}{final['perplexity']:>11.3f}{final['token_accuracy']:>11.2%}"
              f"{final['exact_match']:>13.1%}{final['bleu']:>7.1f}")


# %% [markdown]
# What the saved runs show, per task (rendered from the record; "better" compares each seed with
# smoothing against the same seed without):

# %%
def finals(entry, eps):
    """The last curve point of every seed's run with this eps_ls, in seed order."""
    return [r["curve"][-1] for r in sorted(entry["runs"], key=lambda r: r["seed"]) if r["eps_ls"] == eps]


def span(values, fmt):
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{format(lo, fmt)}–{format(hi, fmt)}"


p_eq_q = 1 / (1 - 0.1 + 0.1 / len(cv))
lines = []
for entry in ls_saved:
    off, on = finals(entry, 0.0), finals(entry, 0.1)
    worse_ppl = sum(b["perplexity"] > a["perplexity"] for a, b in zip(off, on))
    better = {m: sum(b[m] > a[m] for a, b in zip(off, on)) for m in ("token_accuracy", "exact_match", "bleu")}
    bleu_by_seed = ", ".join(f"{b['bleu']:.1f} vs {a['bleu']:.1f}" for a, b in zip(off, on))
    lines.append(tr(
        f"* **{entry['task']}**, step {on[0]['step']}, {len(on)} seeds: perplexity {span([r['perplexity'] for r in on], '.3f')} "
        f"with $\\varepsilon_{{ls}} = 0.1$ (the $p = q$ line: {p_eq_q:.4f}) against "
        f"{span([r['perplexity'] for r in off], '.3f')} without, worse on {worse_ppl} of {len(on)} seeds. Token accuracy "
        f"{span([r['token_accuracy'] for r in on], '.1%')} against {span([r['token_accuracy'] for r in off], '.1%')}, "
        f"exact match {span([r['exact_match'] for r in on], '.1%')} against {span([r['exact_match'] for r in off], '.1%')} "
        f"(smoothing better on {better['exact_match']} of {len(on)} seeds); BLEU on the symbols {bleu_by_seed} "
        "(smoothed vs not, by seed)."))
reverse = next(e for e in ls_saved if e["task"] == "reverse")
claim_true("on reverse, smoothing makes perplexity worse on every seed",
           all(b["perplexity"] > a["perplexity"] for a, b in zip(finals(reverse, 0.0), finals(reverse, 0.1))))
claim_true("on reverse, smoothing raises token accuracy on most seeds",
           sum(b["token_accuracy"] > a["token_accuracy"] for a, b in zip(finals(reverse, 0.0), finals(reverse, 0.1)))
           > len(finals(reverse, 0.1)) / 2)
per_task = "\n".join(lines)
show_markdown(f"{per_task}\n\nSo at this scale the perplexity-against-accuracy trade-off of the paper shows "
              "on reverse, the task the tiny model has not finished learning at this budget; on copy, which every "
              "run nearly solves, there is little left for smoothing to win.")

# %% [markdown]
# Three seeds of a toy task are a small sample; the pattern to take away is the mechanism. Smoothing caps how
# sure the model is asked to be (its loss is lowest at the perplexity of the $p = q$ line above, not 1), and the probability it spreads over wrong tokens is
# never an argmax, so the decisions, and with them accuracy, are not hurt.
#
# ## 5. Dropout (§5.4)
#
# §5.4, "Residual Dropout": dropout is applied to the output of every sub-layer, before it is added to the
# sub-layer's input and normalized, and to the sum of the embeddings and the positional encodings, in both
# stacks; $P_\text{drop} = 0.1$ for the base model. In the package every such place is its own `Dropout` object:
# `Transformer.src_dropout` and `tgt_dropout`, and one inside each `Residual` (lesson 4):
# $y = \mathrm{LayerNorm}(x + \mathrm{Dropout}(\mathrm{Sublayer}(x)))$. For $N$ layers that is $2N$ in the encoder, $3N$
# in the decoder and 2 on the embeddings: $5N + 2$ sites, 32 in the base model.

# %%
from minitransformer.layers.dropout import Dropout
from minitransformer.layers.parameter import Layer
from minitransformer.data.registry import PRESETS           # the model presets and the tasks' own
from minitransformer.model import Transformer, TransformerConfig


def dropout_sites(layer, prefix=""):
    """The attribute path of every Dropout below `layer` (a walk over its child layers)."""
    for key, value in vars(layer).items():
        if key.startswith("_"):
            continue
        for name, child in ([(f"{key}.{i}", c) for i, c in enumerate(value)] if isinstance(value, list) else [(key, value)]):
            if isinstance(child, Dropout):
                yield prefix + name
            elif isinstance(child, Layer):
                yield from dropout_sites(child, prefix + name + ".")


small = Transformer(TransformerConfig(vocab_size=20, d_model=16, h=2, N=2, d_ff=32), seed=0)
sites = list(dropout_sites(small))
print(tr(f"N = 2: {len(sites)} dropout sites (5N + 2 = {5 * 2 + 2})"))
print("\n".join("  " + s for s in sites))
base_model_sites = 5 * TransformerConfig().N + 2
print(tr(f"base model (N = 6): 5N + 2 = {base_model_sites} sites"))

# %% [markdown]
# ### Forward and backward, with the saved mask
#
# Inverted dropout: in training, each unit is kept with probability $1 - P_\text{drop}$ and scaled by
# $1/(1-P_\text{drop})$, so the expected output is the input and evaluation needs no rescaling:
#
# $$y = x \odot m,\qquad m_j = \begin{cases}1/(1-P_\text{drop}) & \text{with probability } 1-P_\text{drop}\\ 0 & \text{otherwise.}\end{cases}$$
#
# Once $m$ is drawn it is a constant of this forward pass, so $y$ is linear in $x$ with the diagonal Jacobian
# $\operatorname{diag}(m)$, and
#
# $$\frac{\partial L}{\partial x} = \frac{\partial L}{\partial y} \odot m .$$
#
# The backward needs **the same $m$** the forward drew: the gradient must flow back exactly through the units
# that carried the signal forward. `Dropout.forward` keeps $m$ in its cache, `Dropout.backward` multiplies by
# it. In evaluation mode (`model.eval()`) dropout is the identity
# ([docs/derivations.md §10](docs/derivations.md#10-dropout-54)). A gradient check is only meaningful if every
# forward of the check draws the same mask, so the generator is re-seeded before each one:

# %%
from minitransformer.gradcheck import check_layer

x = np.random.default_rng(1).standard_normal((2, 4, 6))       # float64: the mask is drawn in x's dtype
drop = Dropout(0.1)
report = check_layer(drop, x, before_forward=lambda: setattr(drop, "rng", np.random.default_rng(7)))
print(report)
report.assert_ok()
drop.rng = np.random.default_rng(7)
y = drop.forward(x)
m = y / x
print(tr("mask values:"), np.unique(m.round(6)), tr(f"  dropped: {(m == 0).mean():.0%} of {m.size}"))

# %% [markdown]
# ### Why each site needs its own mask
#
# Use **one** dropout object at two places, as one might to save code: $h = \mathrm{drop}(x)\,W_1$, then
# $y = \mathrm{drop}(h)\,W_2$. The second forward draws a new mask and overwrites the first one; when the
# backward reaches the first site, the mask it needs is gone. A naive layer that simply keeps "the last mask"
# (a reference written here, not the package's) then uses the *second* site's mask at the first site, and its
# gradient is silently wrong:

# %%
class LastMaskDropout:
    """A reference of the mistake: keeps only the mask of its latest forward."""

    def __init__(self, P_drop, seed):
        self.P_drop, self.rng = P_drop, np.random.default_rng(seed)

    def forward(self, x):
        self.mask = (self.rng.random(x.shape) >= self.P_drop) / (1 - self.P_drop)
        return x * self.mask

    def backward(self, dy):
        return dy * self.mask


r = np.random.default_rng(2)
x2, W1, W2 = r.standard_normal((3, 8)), r.standard_normal((8, 8)), r.standard_normal((8, 5))
G = r.standard_normal((3, 5))                                   # dL/dy of L = sum(y * G)


def two_sites(drop_a, drop_b):
    """L and dL/dx for y = drop_b(drop_a(x) W1) W2, with L = sum(y * G)."""
    y = drop_b.forward(drop_a.forward(x2) @ W1) @ W2
    dx = drop_a.backward((drop_b.backward(G @ W2.T)) @ W1.T)
    return float((y * G).sum()), dx


def numeric_dx(make):
    """Central differences, the masks re-drawn identically (same seeds) at every call."""
    def f():
        a, b = make()
        return two_sites(a, b)[0]
    from minitransformer.gradcheck import numerical_gradient
    return numerical_gradient(f, x2)


from minitransformer.gradcheck import rel_error

shared = LastMaskDropout(0.3, seed=5)
_, dx_shared = two_sites(shared, shared)
print(tr(f"one object at both sites:  rel error of dx vs numerical {rel_error(dx_shared, numeric_dx(lambda: (LastMaskDropout(0.3, 5),) * 2)):.2e}"))
_, dx_own = two_sites(LastMaskDropout(0.3, seed=5), LastMaskDropout(0.3, seed=6))
print(tr(f"one object per site:       rel error of dx vs numerical "
         f"{rel_error(dx_own, numeric_dx(lambda: (LastMaskDropout(0.3, 5), LastMaskDropout(0.3, 6)))):.2e}"))

# the package's Dropout refuses instead of going wrong silently
pkg = Dropout(0.3, np.random.default_rng(5))
pkg.forward(pkg.forward(x2) @ W1)
pkg.backward(np.ones((3, 8)))
try:
    pkg.backward(np.ones((3, 8)))
except RuntimeError as err:
    print(tr("package Dropout used at two sites:"), err)

# %% [markdown]
# Even with the bookkeeping right (two masks kept), **reusing one mask** at several sites would change what
# dropout does. §5.4's noise is independent per site: a unit dropped after the attention is usually kept
# after the feed-forward network. With one shared mask, the same coordinates vanish everywhere at once:

# %%
ones = np.ones((64, 10, 64))                                     # (B, S, d_model)
dropout_rng = np.random.default_rng(3)
site1 = Dropout(0.1, dropout_rng).forward(ones)                  # x ⊙ m with x = 1: the mask itself
site2_own = Dropout(0.1, dropout_rng).forward(ones)              # a second site, its own draw
site2_shared = Dropout(0.1).forward(ones, mask=site1)            # a second site handed the first site's mask
for name, site2 in ((tr("own masks"), site2_own), (tr("one shared mask"), site2_shared)):
    print(tr(f"{name:<16} dropped at site 1: {np.mean(site1 == 0):.3f}, at site 2: {np.mean(site2 == 0):.3f}, "
             f"at both: {np.mean((site1 == 0) & (site2 == 0)):.4f}"))
print(tr("independent draws would give 0.1 x 0.1 = 0.01 at both"))

# %% [markdown]
# With $k$ sites sharing one mask, a coordinate is dropped at all $k$ of them with probability 0.1 instead of
# $0.1^k$: for the encoder's $2N+1 = 13$ sites of the base model, $0.1$ instead of $0.1^{13}$. The regularizer
# is then a different one (in each step, the same coordinates of the same positions removed from the
# embeddings and from every sub-layer's output at once), not the one the paper trained with. Hence one `Dropout` object, with its own draw, per site.
#
# ## 6. Sanity checks before a long run
#
# Three checks that catch most bugs in a training setup, each in seconds.
#
# **Initial loss ≈ ln V.** A freshly initialised model should be close to uniform over the $V$ tokens, so its
# cross-entropy should be close to $\ln V$. That holds with label smoothing too: for $p$ uniform,
# $-\sum_v q_v \log(1/V) = \ln V$ for any $q$ that sums to 1. A loss far above $\ln V$ at step 0 means the logits
# start too large (an initialisation or scaling bug); far below means the model sees the answer (a mask bug,
# or targets leaking into the input). A fresh model's logits are not exactly zero, though. If they are
# zero-mean noise of standard deviation $\sigma$, unrelated to the target, then the loss per position is
# $\log\sum_v e^{z_v} - z_y$ with $\mathbb E[z_y] = 0$, and Jensen's inequality bounds it on both sides:
# $\log\sum_v e^{z_v}$ is convex, so its mean is at least its value at the mean logits, $\ln V$; $\log$ is concave,
# so its mean is at most $\log\mathbb E\sum_v e^{z_v} = \ln V + \sigma^2/2$ (for Gaussian $z$). So expect
# $\ln V \le \text{initial loss} \le \ln V + \sigma^2/2$:

# %%
from minitransformer.runsetup import make_trainer, settings_for

# The model of §3's warm-up runs (d_model 64, 8 heads, 2 layers). The copy recipe's own model (§7, d_model 128,
# one layer, tied embeddings) starts with larger logits: its first losses, printed in §7, are well above ln V.
fresh = build_model(copy_task, "copy", seed=0, **WARMUP_MODEL)
b = next(endless_batches(copy_pairs, seed=1))
with eval_mode(fresh):
    z = fresh.forward(b.src, b.tgt_in, b.src_mask, b.tgt_mask)
z_valid = backend.to_numpy(z)[backend.to_numpy(b.tgt_out) != cv.pad_id].astype(np.float64)    # (n, V)
sigma2 = z_valid.var(axis=-1).mean()
loss0 = cross_entropy_forward(z, b.tgt_out, cv.pad_id, 0.0)[0]
print(tr(f"V = {len(cv)}, logits' standard deviation sigma = {math.sqrt(sigma2):.3f}"))
print(tr(f"ln V = {math.log(len(cv)):.4f} <= measured initial loss {loss0:.4f} <= ln V + sigma^2/2 = "
         f"{math.log(len(cv)) + sigma2 / 2:.4f}"))
claim_true("the initial loss lies between ln V and ln V + sigma^2/2",
           math.log(len(cv)) <= loss0 <= math.log(len(cv)) + sigma2 / 2, f"{loss0:.4f}")

# %% [markdown]
# **Overfit one batch.** A model that cannot drive the loss on a *single* batch to about zero has a bug in
# its forward, its backward or its update. 32 copy sequences, trained on again and again with a constant
# rate of $10^{-3}$:

# %%
show_slow_cell("09", "overfitting one batch, 200 steps")

# %%
# slow: overfitting one batch, 200 steps
one_batch = next(endless_batches(copy_pairs, seed=2, batch_size=32))
model = build_model(copy_task, "copy", seed=0)
optimizer = Adam(model.parameters(), lr=1e-3)
loss_fn = LabelSmoothedCrossEntropy(cv.pad_id, 0.0)
overfit = []
t0 = time.perf_counter()
for _step in range(200):
    loss = loss_fn.forward(model.forward(one_batch.src, one_batch.tgt_in, one_batch.src_mask, one_batch.tgt_mask),
                           one_batch.tgt_out)
    overfit.append(loss)
    optimizer.zero_grad(); model.backward(loss_fn.backward()); optimizer.step()
print(tr(f"{len(overfit)} steps on one batch in {time.perf_counter() - t0:.1f} s: loss {overfit[0]:.3f} -> {overfit[-1]:.5f}"))
fig, ax = plt.subplots(figsize=(6, 2.6))
ax.semilogy(overfit)
ax.axhline(math.log(len(cv)), color="k", ls=":", lw=0.8)
ax.text(0.9, math.log(len(cv)) * 1.15, "ln V", fontsize=8, transform=ax.get_yaxis_transform())
ax.set(xlabel=tr("step"), ylabel=tr("loss on the one batch"), title=tr("overfitting a single batch of 32 sequences"))
plt.tight_layout(); plt.show()

# %% [markdown]
# **The loss curve** is the third check. A sound run starts where the first check says (near $\ln V$, or
# above it by about $\sigma^2/2$ for logits of spread $\sigma$), falls fast while the model learns
# the easy part (which tokens exist, where `<eos>` goes), then slowly; the held-out loss follows the training
# loss; a spike recovers. A curve that stays flat at $\ln V$ points to a learning rate far too small or
# gradients that never reach the parameters; one that jumps up and never comes back, to a learning rate too
# large (or no warm-up, §3). The run of the next section is read against this description under its plot,
# from its own numbers: whether it fits is measured, not assumed.
#
# ## 7. Training the copy task to 100%
#
# Everything together, through the package's own path, exactly as `python -m minitransformer train --task copy`
# runs it: `load_task` builds the seeded splits, `settings_for` gives the task's recipe from the task registry
# (printed below, never typed here), `make_trainer` builds the model, the loss and Adam, and `Trainer.run` loops.
# The recipe validates every few steps on the whole validation split and **stops when the task is solved**:
# after enough validations in a row at 100% exact match. What the copy preset regularizes with is printed
# under this cell, from the preset itself. The run ends with all held-out test sequences decoded greedily.
# Only the progress bar and the files (checkpoint, log, picture) are left out.

# %%
copy_preset = PRESETS["copy"]
why_no_dropout = (tr(" (none: a task with one right answer and this many training sequences has nothing to regularize)")
                  if copy_preset.P_drop == 0 else "")
why_smoothing = (tr(" (the paper's; the recipe search, `lessons/experiments/copy_recipe_search.py`, kept it)")
                 if copy_preset.eps_ls > 0 else "")
show_markdown(
    f"The copy preset: dropout $P_\\text{{drop}} = {copy_preset.P_drop}${why_no_dropout}"
    f", label smoothing $\\varepsilon_{{ls}} = {copy_preset.eps_ls}${why_smoothing}.")

# %%
from lessonkit.runtimes import show_slow_cell

show_slow_cell("09", "the copy recipe, trained until solved")

# %%
# slow: the copy recipe, trained until solved
preset, settings = settings_for("copy", seed=0)             # the command line's recipe, unchanged
print(tr(f"preset {preset!r}; {settings}"))
trainer = make_trainer(copy_task, settings, preset)
t0 = time.perf_counter()
history = trainer.run(progress=False)
train_seconds = time.perf_counter() - t0
scores = score_translations(trainer.model.eval(), cv, copy_task.test, copy_task.tgt_level, copy_task.bleu_tokenize)
print(tr(f"{trainer.step} steps in {train_seconds:.1f} s; greedy decoding of {len(copy_task.test)} held-out sequences in "
         f"{scores['seconds']:.1f} s: exact match {scores['exact_match']:.1%}"))
for hyp, ref in list(zip(scores["hyps"], scores["refs"]))[:4]:
    print(f"  {ref!r:>24} -> {hyp!r}")
assert trainer.solved_at is not None, (
    f"the copy recipe did not solve the task within its {settings.steps} steps: the recipe in the task registry "
    "(minitransformer/data/tasks.py) no longer does what this section says")
assert scores["exact_match"] == 1.0, f"solved on validation, but held-out exact match is {scores['exact_match']:.1%}"
show_markdown(
    f"The recipe ({settings.batch_size} pairs a batch, factor {settings.lr_factor} with {settings.warmup_steps} "
    f"warm-up steps, clipping at {settings.clip_norm}, at most {settings.steps} steps) solved the task at step "
    f"**{trainer.solved_at}**: validation exact match 100% at {settings.stop_when_solved} validations in a row, "
    f"{settings.valid_every} steps apart, on all {min(settings.valid_decode, len(copy_task.valid))} validation "
    f"sequences. On the {len(copy_task.test)} held-out test sequences, never seen in training or validation, "
    f"greedy decoding is {scores['exact_match']:.0%} right.")

# %%
fig, ax = plt.subplots(figsize=(8, 3.2))
logged = [r for r in history if "loss" in r]
ax.semilogy([r["step"] for r in logged], [r["loss"] for r in logged], label=tr("training loss (mean of 10 steps)"))
validated = [r for r in history if "valid_loss" in r]
ax.semilogy([r["step"] for r in validated], [r["valid_loss"] for r in validated], "o-", label=tr("held-out loss"))
ax.axhline(math.log(len(cv)), color="k", ls=":", lw=0.8)
ax.text(0.9, math.log(len(cv)) * 1.2, "ln V", fontsize=8, transform=ax.get_yaxis_transform())
every = max(1, len(validated) // 8)                      # at most about 8 labels
for i, r in enumerate(validated):
    if i % every == 0 or i == len(validated) - 1:
        ax.annotate(f"{r['valid_exact_match']:.0%}", (r["step"], r["valid_loss"]), textcoords="offset points",
                    xytext=(0, 7), ha="center", fontsize=7)
ax2 = ax.twinx()
ax2.plot([r["step"] for r in logged], [r["lr"] for r in logged], color="tab:gray", lw=0.8)
ax2.set_ylabel("lrate", color="tab:gray")
ax.set(xlabel=tr("step"), ylabel=tr("loss"), title=tr("copy task (percentages: validation exact match)"))
ax.legend(loc="upper center", fontsize=8); plt.tight_layout(); plt.show()

# Read the curve against §6's description, from this run's numbers.
v_loss = [r["valid_loss"] for r in validated]
v_em = [r["valid_exact_match"] for r in validated]
v_step = [r["step"] for r in validated]
rises = [(v_loss[i + 1] - v_loss[i], v_step[i], v_step[i + 1]) for i in range(len(v_loss) - 1)]
worst = max(rises, default=None)
drops = [(v_em[i] - v_em[i + 1], v_step[i], v_step[i + 1]) for i in range(len(v_em) - 1)]
worst_drop = max(drops, default=None)
eps = trainer.model.cfg.eps_ls
q_row = np.full(len(cv), eps / len(cv)); q_row[0] += 1 - eps            # a smoothed target (any position)
floor = float(-(q_row * np.log(q_row)).sum())                           # the smoothed loss is never below H(q)
floor_note = (tr(f", near the floor of the label-smoothed loss, $H(q) = {floor:.3f}$ at $\\varepsilon_{{ls}} = {eps}$.")
              if eps > 0 else ".")
first = tr(f"The training loss starts at {logged[0]['loss']:.2f} (mean of the first {logged[0]['step']} steps; "
           f"$\\ln V = {math.log(len(cv)):.2f}$: this model's first logits are large, see §6) and ends at "
           f"{logged[-1]['loss']:.3f}") + floor_note
if worst is not None and worst[0] > 0:
    drop_note = (tr(f", while validation exact match fell from {v_em[v_step.index(worst_drop[1])]:.1%} "
                    f"to {v_em[v_step.index(worst_drop[2])]:.1%} (steps {worst_drop[1]} to {worst_drop[2]})")
                 if worst_drop and worst_drop[0] > 0 else "")
    middle = tr(f"The held-out loss does not fall at every validation: its largest rise is from "
                f"{v_loss[v_step.index(worst[1])]:.4f} at step {worst[1]} to {v_loss[v_step.index(worst[2])]:.4f} "
                f"at step {worst[2]}") + drop_note + "."
else:
    middle = tr("The held-out loss falls at every validation.")
ending = ("." if not worst or worst[0] <= 0 else tr(": what rose on the way recovered.")
          if v_loss[-1] <= min(v_loss) * 1.5
          else tr(": the run ended above its best held-out loss, so its last checkpoint is not its best."))
show_markdown(f"{first} {middle} At the last validation (step {v_step[-1]}) the held-out loss is {v_loss[-1]:.4f} "
              f"and exact match {v_em[-1]:.1%}{ending}")

# %% [markdown]
# ## Exercises
#
# Each checking cell prints *not attempted yet* until you fill in the function above it; a wrong answer raises a
# `WrongAnswer` (an `AssertionError`) that says what is wrong and, for the usual slips, names the likely mistake.
# In the full notebook the solutions follow at the very end; the student edition a teacher hands out leaves them out.
#
# ### Exercise 9.1 — the learning-rate schedule
#
# Write `my_lrate(step, d_model, warmup_steps)` returning Eq. (3)'s rate for one step (steps count from 1).
# The checker compares it with `NoamSchedule` at steps before, at and long after the warm-up, for three
# $(d_\text{model}, \text{warmup})$ pairs.

# %% tags=["stub"]
def my_lrate(step, d_model, warmup_steps):
    """-> float: d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)."""
    # your code here
    return None


# %% tags=["check"]
from lessonkit.exercises.lesson_09 import check_adam_step, check_dlogits, check_noam_lr

check_noam_lr(my_lrate)


# %% [markdown]
# ### Exercise 9.2 — one Adam update
#
# Write `my_adam_step(p, g, m, v, t, lr)`: the $t$-th update ($t = 1, 2, \ldots$) with the paper's
# $\beta_1 = 0.9$, $\beta_2 = 0.98$, $\epsilon = 10^{-9}$. `m` and `v` arrive as they were after step $t-1$; return
# `(p_new, m_new, v_new)`, where `m_new`, `v_new` are the updated running averages (not the bias-corrected
# ones: the next step continues from them). The checker loads the same state into `optim.Adam` and compares.

# %% tags=["stub"]
def my_adam_step(p, g, m, v, t, lr):
    """p, g, m, v: arrays of one shape; t: int >= 1; lr: float -> (p_new, m_new, v_new)."""
    # your code here
    return None


# %% tags=["check"]
check_adam_step(my_adam_step)


# %% [markdown]
# ### Exercise 9.3 — the gradient that starts every backward pass
#
# Write `my_dlogits(logits, targets, pad_id, eps_ls)`: the gradient of the mean label-smoothed cross-entropy
# over the non-pad targets with respect to the logits (§4 of this lesson). `logits`: $(B, T, V)$; `targets`:
# $(B, T)$ ints, `pad_id` at padding. Return an array of the logits' shape. The checker compares it with
# `cross_entropy_backward` and with central differences of the loss.

# %% tags=["stub"]
def my_dlogits(logits, targets, pad_id, eps_ls):
    """logits: (B, T, V), targets: (B, T) -> dlogits: (B, T, V)."""
    # your code here
    return None


# %% tags=["check"]
check_dlogits(my_dlogits)


# %% [markdown]
# ### Then train with it
#
# `train_with_my_gradient` below trains the tiny model on the copy task with $\varepsilon_{ls} = 0.1$, and the
# gradient that enters `Transformer.backward` is **yours**: the package's loss only provides the loss value
# (and, for comparison, its own gradient, which is not used). If your `my_dlogits` is right, the loss falls and
# the model learns to copy; the cell also prints the largest difference from the package's gradient over the
# whole run. While `my_dlogits` is the stub, the cell skips the training. The full notebook's solutions
# section runs it with the solution.

# %%
def train_with_my_gradient(dlogits_fn, steps=400, seed=0):
    """Train the tiny model on copy with dlogits from `dlogits_fn`; plot the loss; return the held-out scores."""
    if dlogits_fn(np.zeros((1, 2, len(cv))), np.array([[5, cv.pad_id]]), cv.pad_id, 0.1) is None:
        print(tr("skipped: my_dlogits returns None (fill it in above, then run this cell again)"))
        return None
    model = build_model(copy_task, "tiny", seed=seed, eps_ls=0.1)
    optimizer = Adam(model.parameters(), lr=NoamSchedule(32, 200, 0.25), clip_norm=1.0)
    loss_fn = LabelSmoothedCrossEntropy(cv.pad_id, 0.1)
    stream, losses, worst = endless_batches(copy_pairs, seed), [], 0.0
    t0 = time.perf_counter()
    for _ in range(steps):
        b = next(stream)
        logits = model.forward(b.src, b.tgt_in, b.src_mask, b.tgt_mask)
        losses.append(loss_fn.forward(logits, b.tgt_out))
        package_dlogits = loss_fn.backward()                                   # for comparison only
        mine = np.asarray(dlogits_fn(logits.copy(), b.tgt_out.copy(), cv.pad_id, 0.1), dtype=logits.dtype)
        worst = max(worst, rel_error(mine, package_dlogits))
        optimizer.zero_grad()
        model.backward(mine)                                                   # your gradient drives the update
        optimizer.step()
    scores = held_out_scores(model, copy_task)
    print(tr(f"{steps} steps with your dlogits in {time.perf_counter() - t0:.1f} s: loss {losses[0]:.3f} -> "
             f"{np.mean(losses[-20:]):.3f}; largest relative difference from the package's gradient {worst:.1e}"))
    names = {"perplexity": tr("perplexity"), "token accuracy": tr("token accuracy"), "exact match": tr("exact match")}
    print(tr("held-out:"), ", ".join(f"{names[k]} {v:.4g}" for k, v in scores.items()))
    fig, ax = plt.subplots(figsize=(6, 2.6))
    ax.plot(losses, lw=0.8)
    ax.axhline(math.log(len(cv)), color="k", ls=":", lw=0.8)
    ax.set(xlabel=tr("step"), ylabel=tr("training loss (ε_ls = 0.1)"), title=tr("the tiny model trained with your gradient"))
    plt.tight_layout(); plt.show()
    return scores


train_with_my_gradient(my_dlogits)


# %% [markdown] tags=["solution"]
# ## Solutions

# %% tags=["solution"]
def lrate_solution(step, d_model, warmup_steps):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)   # rises until warmup_steps, then decays

check_noam_lr(lrate_solution)


# %% tags=["solution"]
def adam_step_solution(p, g, m, v, t, lr):
    beta1, beta2, eps = 0.9, 0.98, 1e-9                  # §5.3
    m = beta1 * m + (1 - beta1) * g                       # running mean of g
    v = beta2 * v + (1 - beta2) * g * g                   # running mean of g^2
    m_hat = m / (1 - beta1 ** t)                          # bias corrections: m, v started at 0
    v_hat = v / (1 - beta2 ** t)
    return p - lr * m_hat / (np.sqrt(v_hat) + eps), m, v

check_adam_step(adam_step_solution)


# %% tags=["solution"]
def dlogits_solution(logits, targets, pad_id, eps_ls):
    V = logits.shape[-1]
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)                                  # softmax over the vocabulary
    q = np.full_like(p, eps_ls / V)                                     # eps_ls / V on every token ...
    np.put_along_axis(q, targets[..., None], 1 - eps_ls + eps_ls / V, axis=-1)   # ... and 1 - eps_ls more at y
    valid = (targets != pad_id)[..., None]                              # pad targets: gradient 0
    return (p - q) * valid / valid.sum()                                # mean over the non-pad targets

check_dlogits(dlogits_solution)

# %% tags=["solution"]
show_slow_cell("09", "training with the solution's gradient, 400 steps")

# %% tags=["solution"]
# slow: training with the solution's gradient, 400 steps
train_with_my_gradient(dlogits_solution)

# %%
print(tr(f"the whole lesson ran in {time.perf_counter() - LESSON_START:.0f} s of wall time, "
         f"{time.process_time():.0f} s of CPU time in this kernel"))
