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
# # Lesson 10 — Decoding and translation (§6.1)
#
# Training (lessons 7 and 9) never has to choose a word: the decoder is fed the right target
# sentence, shifted by one position, and only scores it. At inference there is no target.
# The model has to write its output one token at a time, feeding every token it chose back in
# as the next input (§3: the model is *auto-regressive*). How to choose those tokens is a
# search problem, and this lesson is about that search and about how the results are scored.
#
# §6.1 of the paper states the inference settings in two sentences: beam search with a beam
# size of 4 and a length penalty $\alpha = 0.6$ (the one of Wu et al., 2016), a maximum
# output length of input length + 50, and stopping early when possible. The results are
# reported as BLEU. Here we take each of these apart:
#
# 1. **greedy decoding by hand**, one position at a time with a key/value cache, and a check
#    that it computes exactly what the teacher-forced decoder computes; then what the cache
#    buys in speed;
# 2. a **translation model trained in this notebook** (English dates to Korean, a few hundred steps
#    of a small model), so that there is something real to decode;
# 3. **beam search**: a real sentence where it beats greedy decoding and why, and what the
#    length penalty $\alpha$ does to the length of the output;
# 4. **BLEU** by hand for one sentence, then corpus BLEU with the package checked against
#    sacrebleu; why BLEU on characters and BLEU on words cannot be compared, and when chrF is
#    the better measure;
# 5. the trained model's **scores**, greedy and beam, and its **attention maps**, every
#    layer and head, with a reading of what the heads learned.
#
# | in this lesson | where in the package |
# | --- | --- |
# | encoder once, then one decoder position at a time | `Transformer.encode`, `Transformer.decode_step` (in `minitransformer/model.py`) |
# | the key/value cache | `minitransformer.kvcache.KVCache` (used by `Transformer.decode_step`) |
# | the teacher-forced decoder, to compare with | `Transformer.decode`, `Transformer.forward` |
# | dropout off while decoding | `minitransformer.layers.parameter.eval_mode` |
# | greedy decoding and beam search (§6.1) | `minitransformer.decoding.greedy_decode`, `beam_search`; as named strategies `Greedy()`, `Beam(size=4, alpha=0.6)` (and `Sample(...)`) for `decoding.decode` and `translate` |
# | the length penalty (Wu et al. 2016, Eq. 14) | `minitransformer.decoding.length_penalty` |
# | BLEU, chrF, exact match | `minitransformer.metrics.corpus_bleu`, `corpus_chrf`, `exact_match` |
# | a task, its recipe, a training run | `minitransformer.data.registry.load_task`, `minitransformer.runsetup.settings_for`, `make_trainer`, `minitransformer.train.Trainer.run` |
# | translate and score a test set | `minitransformer.translate.score_translations` |
# | every layer's and head's attention weights | `minitransformer.translate.attention_maps` |
#
# The exercises at the end ask you to write one step of beam search, corpus BLEU, and greedy
# decoding with the cache yourself.
#
# **What it trains:** a small English-to-Korean dates model, and the checker of Exercise 10.3 a tiny one. The cell below says how long the whole lesson takes.
#
# **Terms:** each term of these lessons, in English and as Korean texts write it, is in [the glossary](docs/glossary.md).

# %%
from lessonkit.runtimes import show_cost, show_slow_cell

show_cost("10")

# %%
# %matplotlib inline
import os
import time
from collections import Counter
from contextlib import contextmanager, nullcontext

import matplotlib.pyplot as plt
import numpy as np

from lessonkit.i18n import tr
from minitransformer import backend, decoding, machine, metrics, runsetup, translate
from minitransformer.data.registry import PRESETS, load_task
from minitransformer.data.vocab import tokenize
from minitransformer import model as model_module
from minitransformer.layers.loss import log_softmax
from minitransformer.layers.masks import padding_mask
from minitransformer.layers.parameter import eval_mode

NOTEBOOK_START = (time.perf_counter(), time.process_time(), os.getloadavg()[0])
plt.rcParams.update({"figure.dpi": 80, "savefig.dpi": 80, "font.size": 9})
np.set_printoptions(precision=4, suppress=True, linewidth=110)

try:                                    # one BLAS thread: on a small shared machine a second
    from threadpoolctl import threadpool_limits   # thread often waits more than it helps
    one_blas_thread = threadpool_limits          # (lesson 8 measured it)
except ImportError:                     # not installed: leave the BLAS as it is
    def one_blas_thread(limits=None):
        return nullcontext()


print(machine.machine_summary())

# %% [markdown]
# Some figures below have Korean labels, and matplotlib's default font has no Hangul.
# `plot.label_fonts()` finds one: first NanumGothic, which ships inside the `koreanize-matplotlib`
# wheel of the learner's install (only its font file is read: importing that package would change
# matplotlib's global settings), then a CJK font installed on the system. If neither exists, the
# figures say so in their title and the Korean labels are drawn as boxes.

# %%
import warnings

import matplotlib

from minitransformer import plot as mt_plot

label_fonts = mt_plot.label_fonts()              # ["DejaVu Sans"] + a CJK family, if one was found
print(tr("fonts for the labels:"), label_fonts)
font_note = "" if len(label_fonts) > 1 else tr("\n(no CJK font found on this machine: Korean labels are drawn as boxes)")


@contextmanager
def korean_labels():
    """Draw (and show) figures with Korean labels inside this block. Without a CJK font,
    matplotlib would warn once per missing glyph; font_note says it once, in the title."""
    with warnings.catch_warnings(), matplotlib.rc_context({"font.family": label_fonts}):
        warnings.filterwarnings("ignore", message=r".*[Gg]lyph.*missing")
        yield

# %% [markdown]
# ## 1. Greedy decoding by hand
#
# The decoder gives, for a source sentence $x$ and the output so far $y_{<t}$, a
# distribution over the next token, $P(y_t \mid x, y_{<t})$ (the softmax of the logits,
# lesson 5). **Greedy decoding** takes the most probable token at every step,
#
# $$\hat y_t = \arg\max_{v}\ \log P(v \mid x, \hat y_{<t}),$$
#
# feeds it back in, and stops at `<eos>` or at the length limit (§6.1: input length + 50).
# In the package this is `decoding.greedy_decode`; here we write the loop ourselves on the
# model's public methods:
#
# * `memory = model.encode(src)` runs the encoder **once**; the source never changes while we
#   decode.
# * `cache = model_module.KVCache(model, memory, src_mask, T_max)` sets aside room for the keys
#   and values of every decoder layer's self-attention (positions $0 \dots T_\text{max}-1$), and
#   projects the memory to the encoder-decoder keys and values once.
# * `logits = model.decode_step(y_t, t, cache)` runs **one** decoder position: the token fed in
#   at position $t$ (`<bos>` at $t = 0$) goes through the $N$ layers; its query attends to the
#   keys of positions $0 \dots t$ (the earlier ones come from the cache, its own is added to
#   it), and the result is the logits for output token $t$.
# * everything runs inside `eval_mode(model)`: dropout (§5.4) is for training only.
#
# Two tokens are never chosen: `<pad>` and `<bos>` are not words of a sentence. We set
# their logits to $-\infty$ before the argmax, as the package does.
#
# The model below is tiny and **untrained** (random weights), in float64; the arithmetic is
# the same as for a trained one. To compare as many positions as possible we let it run the
# full 12 steps instead of stopping at `<eos>`.

# %%
backend.set_default_dtype("float64")           # float64 for the exact comparison below
PAD, BOS, EOS = 0, 1, 2                        # the ids every vocabulary gives these tokens
cfg = model_module.TransformerConfig(vocab_size=20, d_model=32, h=4, N=2, d_ff=64, P_drop=0.1,
                                     eps_ls=0.1, max_len=40)
tiny = model_module.Transformer(cfg, seed=0)

src = np.array([[5, 9, 3, 12, 7, EOS]])        # (B, S) = (1, 6): one source sentence, ending in <eos>
src_mask = padding_mask(src, cfg.pad_id)       # (B, 1, 1, S), True = may attend
T_max = 12

step_logits, greedy_out = [], []
with eval_mode(tiny):                                        # dropout off
    memory = tiny.encode(src, src_mask)                      # (1, S, d_model), once
    cache = model_module.KVCache(tiny, memory, src_mask, T_max)
    y_t = np.array([[BOS]])                                  # (B, 1): the decoder input at t = 0
    for t in range(T_max):
        logits = tiny.decode_step(y_t, t, cache)             # (B, V): scores of output token t
        step_logits.append(logits[0].copy())
        logits[:, [PAD, BOS]] = -np.inf                      # never an output word
        y = int(logits[0].argmax())                          # the greedy choice
        greedy_out.append(y)
        y_t = np.array([[y]])                                # fed back in at position t + 1
step_logits = np.stack(step_logits)                          # (T_max, V)

print("memory", memory.shape, tr("  cache: length"), cache.length, tr("of T_max"), cache.T_max,
      tr("  layer-0 self-attention keys"), cache.self_kv[0][0].shape, "(B, h, T_max, d_k)")
print(tr("greedy output, by hand:     "), greedy_out)
print("decoding.greedy_decode:     ", decoding.greedy_decode(tiny, src, BOS, None, max_len=T_max)[0])

# %% [markdown]
# An untrained model repeats itself: with the tied embedding of lesson 5, the most likely
# output at a position is often the very token that was fed in. The point here is only that
# the loop computes the same thing as the package's `greedy_decode`.
#
# **The cache changes nothing in the numbers.** Teacher forcing runs all positions at once:
# feed `tgt_in` $= $ `<bos>` followed by the greedy output (without its last token) to
# `model.decode` and read row $t$ of its logits. Thanks to the causal mask (lesson 2),
# row $t$ depends only on `tgt_in[:, :t+1]`, which is exactly what step $t$ of the loop had
# seen; and the keys and values in the cache are the same projections of the same vectors.
# The two ways differ only in the order in which floating-point sums are added up.

# %%
tgt_in = np.array([[BOS] + greedy_out[:-1]])                 # (1, T_max): <bos> + output, shifted right
with eval_mode(tiny):
    teacher = tiny.decode(tgt_in, memory, src_mask)[0]       # (T_max, V), all positions at once
    whole = tiny.forward(src, tgt_in)[0]                     # encoder + decoder in one call
print(tr("max |step-by-step logits - model.decode|  ="), f"{np.abs(step_logits - teacher).max():.1e}")
print(tr("max |step-by-step logits - model.forward| ="), f"{np.abs(step_logits - whole).max():.1e}")
print(tr("largest |logit|                           ="), f"{np.abs(teacher).max():.1f}")
assert np.allclose(step_logits, teacher, rtol=0, atol=1e-12)
assert np.allclose(step_logits, whole, rtol=0, atol=1e-12)

# %% [markdown]
# Equal to float64 rounding (far inside the $10^{-12}$ asserted, against logits of a few units). The same check,
# on float64 and float32 models, a pre-LN model and batches with padding, is in
# `tests/test_decoding.py`.
#
# ### What the cache buys
#
# Without a cache, step $t$ has to re-run the whole prefix of $t+1$ positions through the
# decoder (`greedy_decode(..., use_cache=False)` does exactly that, with `model.decode`). An
# output of $T$ tokens then costs $1 + 2 + \dots + T = T(T+1)/2$ position passes through the
# projections and feed-forward networks, so the time grows like $T^2$. With the cache each
# step runs one position: $T$ passes in all, so the time grows like $T$ (plus the attention
# itself, which reads $t$ cached keys at step $t$: $O(T^2 d)$ in total, but cheap next to the
# projections at these lengths). The speed-up should therefore grow about linearly with $T$.
#
# We measure both on a model of the size we train below ($d_\text{model} = 128$, $h = 4$,
# $N = 2$, $d_\text{ff} = 512$, 305 tokens), float32, a batch of 8 sentences, one BLAS thread,
# forcing every output to its length with `eos_id=None`. The clock is the CPU time of this
# thread (`time.thread_time`), which stops while the operating system runs someone else's
# process, and we keep the **minimum** of 4 repeats, because on a shared machine noise only
# ever adds time.

# %%
show_slow_cell("10", "timing decoding with and without the cache")

# %%
# slow: timing decoding with and without the cache
backend.set_default_dtype("float32")          # decoding and training run in float32
speed_cfg = PRESETS["translate"].with_(vocab_size=305, max_len=160)
speed_model = model_module.Transformer(speed_cfg, seed=0)
speed_src = np.random.default_rng(0).integers(3, 305, size=(8, 10))    # (B, S) = (8, 10)


def cpu_time(fn):
    """CPU time of this thread for one call of fn."""
    start = time.thread_time()
    fn()
    return time.thread_time() - start


lengths = [8, 16, 32, 64, 128]
runs = {(T, use_cache): [] for T in lengths for use_cache in (True, False)}
with one_blas_thread(1):
    for _ in range(4):                        # the repeats go round all settings, so a slow spell
        for T, use_cache in runs:             # of the machine hits them all, not one setting
            runs[T, use_cache].append(cpu_time(lambda T=T, use_cache=use_cache: decoding.greedy_decode(
                speed_model, speed_src, BOS, None, max_len=T, use_cache=use_cache)))
seconds = {use_cache: [min(runs[T, use_cache]) for T in lengths] for use_cache in (True, False)}
speedup = np.array(seconds[False]) / np.array(seconds[True])
for T, c, u, s in zip(lengths, seconds[True], seconds[False], speedup):
    print(tr(f"T = {T:3d}: cached {1e3 * c:7.1f} ms   uncached {1e3 * u:8.1f} ms   speed-up {s:5.1f}x"))

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
ax1.loglog(lengths, seconds[True], "o-", label=tr("with the KV cache (decode_step)"))
ax1.loglog(lengths, seconds[False], "s-", label=tr("without (decode on the prefix)"))
T_arr = np.array(lengths, dtype=float)
ax1.loglog(T_arr, seconds[True][-1] * T_arr / T_arr[-1], "k:", lw=1, label=r"$\propto T$")
ax1.loglog(T_arr, seconds[False][-1] * (T_arr / T_arr[-1]) ** 2, "k--", lw=1, label=r"$\propto T^2$")
ax1.set(xlabel=tr("output length T (tokens)"), ylabel=tr("CPU seconds (min of 4)"), title=tr("greedy decoding, batch of 8"))
ax1.legend(fontsize=8)
ax2.plot(lengths, speedup, "o-", color="C2")
ax2.set(xlabel=tr("output length T (tokens)"), ylabel=tr("uncached time / cached time"), title=tr("speed-up of the cache"),
        ylim=(0, None))
for ax in (ax1, ax2):
    ax.grid(alpha=0.3)
fig.suptitle(tr(f"d_model 128, N 2, float32, 1 BLAS thread; {machine.machine_summary()}"), fontsize=8)
plt.tight_layout()
plt.show()

# %%
from lessonkit.prose import claim, claim_true, show_markdown

claim_true("the speed-up of the cache grows with the length", all(np.diff(speedup) > 0), f"speed-ups {np.round(speedup, 1)}")
claim("at 8 tokens the cache barely matters (a speed-up under 3)", speedup[0], low=0.5, high=3)
show_markdown(
    f"The uncached times follow the $T^2$ line and the cached ones stay close to the $T$ line, so the speed-up "
    f"grows with the length, roughly linearly: in this run from {speedup[0]:.1f}x at {lengths[0]} tokens to "
    f"{speedup[-1]:.1f}x at {lengths[-1]}. The exact factors move with the load of a shared machine (the one "
    "named above the plot). For the few tokens of the dates translated below the cache saves little; for the "
    "sentences of a real translation system, tens of tokens long and decoded with 4 beams, it decides whether "
    "decoding takes seconds or minutes.")

# %% [markdown]
# ## 2. A translation model, trained here
#
# To have something worth decoding we train a small model on **dates-en-ko**, one of the
# package's offline translation tasks: every day from 1950 to 2049, written in English in one of
# the four forms people write a date in (`Tuesday, March 5, 2024`, `March 5, 2024`,
# `Tuesday, 5 March 2024`, `5 March 2024`) and in Korean in the matching full or long form
# (`2024년 3월 5일 화요일`, `2024년 3월 5일`), generated from the Unicode CLDR data that ships with the `babel`
# package (nothing is downloaded; sources and licence in `docs/datasets.md`). The Korean puts the
# parts in the opposite order, so the model must learn to reorder as well as to translate
# words. Both sides are split into words, and a comma or a full stop is a token of its own
# (`data.vocab.tokenize(text, "word")`), so "5" is one word whether a comma follows it or not.

# %%
task = load_task("dates-en-ko")
vocab = task.vocab
print(tr(f"{task.name}: {len(task.train):,} training pairs, {len(task.valid)} validation, {len(task.test)} test; "
         f"{len(vocab)} tokens in the shared vocabulary"))
for src_tokens, tgt_tokens in task.test[:3]:
    print(f"  {' '.join(src_tokens):32s} ->  {' '.join(tgt_tokens)}")
from minitransformer.data.translation import DATE_RANGE

assert (DATE_RANGE[0].year, DATE_RANGE[1].year) == (1950, 2049)   # the text above

# %% [markdown]
# The model and the schedule are the recipe the dates tasks trained with before the recipe search of
# `lessons/experiments/task_recipe_search.py` (`translation.RECORD_RECIPES["dates-en-ko"]`): the
# `translate` preset ($d_\text{model} = 128$, $h = 4$, $N = 2$, $d_\text{ff} = 512$,
# $P_\text{drop} = 0.1$, $\varepsilon_{ls} = 0.1$), batches of sentences of about one length (§5.1),
# Adam with the §5.3 schedule (warm-up 400 steps, learning rate factor 0.5) and gradient clipping at
# norm 1.0 (lesson 9). The task's default recipe now mixes lengths in every batch and solves the task
# in a fraction of these steps (`docs/tasks.md`); the slower recipe is kept here because this lesson
# needs a model that still makes mistakes.
# Only the length of training is ours: batches of 64 sentences, and we stop at **150 steps**
# to keep a copy of the half-trained model (it still makes mistakes, which is where search
# matters), then go on to **400 steps**. That recipe's full run (1,500 steps of 128 sentences) and
# its scores are in `docs/translation_results.md`, with the machine and the commit they came from;
# 400 steps is within this lesson's time budget.
# `Trainer.run` validates at the last step of each call (loss, and exact match of 200
# validation sentences decoded greedily).

# %%
# The recipe the text above describes:
from minitransformer.data.translation import RECORD_RECIPES

recipe = runsetup.settings_for(RECORD_RECIPES["dates-en-ko"])[1]
assert (recipe.warmup_steps, recipe.lr_factor, recipe.clip_norm, recipe.batch_by_length) == (400, 0.5, 1.0, True)
assert (recipe.steps, recipe.batch_size, recipe.valid_decode) == (1500, 128, 200)
show_slow_cell("10", "training the dates model, 400 steps")

# %%
# slow: training the dates model, 400 steps
preset, settings = runsetup.settings_for(RECORD_RECIPES["dates-en-ko"], steps=150, batch_size=64)
trainer = runsetup.make_trainer(task, settings, preset)
model = trainer.model
print(preset, model.cfg)
print(tr(f"{model.num_parameters():,} parameters"))

with warnings.catch_warnings():                           # Trainer.run imports tqdm.auto, which warns in a
    warnings.simplefilter("ignore")                       # notebook without ipywidgets; we show no progress bar
    import tqdm.auto  # noqa: F401

with one_blas_thread(1):
    t0, c0 = time.perf_counter(), time.process_time()
    history = trainer.run(progress=False)                 # steps 1..150: the log records
    half = model_module.Transformer(model.cfg, seed=0)    # a copy of the half-trained model
    for p, q in zip(model.parameters(), half.parameters()):
        q.data[...] = p.data
    trainer.settings.steps = 400
    history += trainer.run(progress=False)                # steps 151..400, the same run continued
    train_wall, train_cpu = time.perf_counter() - t0, time.process_time() - c0
print(tr(f"400 steps in {train_wall:.1f} s wall, {train_cpu:.1f} s CPU ({machine.machine_summary()})"))

# %%
steps = [r["step"] for r in history if "loss" in r]
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(steps, [r["loss"] for r in history if "loss" in r], label=tr("training loss (mean of 10 steps)"))
val = [r for r in history if "valid_loss" in r]
ax.plot([r["step"] for r in val], [r["valid_loss"] for r in val], "o", label=tr("validation loss"))
ax.axvline(150, color="gray", ls=":", lw=1)
ax.text(152, ax.get_ylim()[1] * 0.9, tr("copy kept: 'half'"), fontsize=8, color="gray", va="top")
ax.set(xlabel=tr("step"), ylabel=tr("label-smoothed cross-entropy"), yscale="log", title=tr("dates-en-ko, batch 64"))
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# The loss levels off near 1 and not near 0: label smoothing (§5.4, lesson 9) asks the
# model to put only $1 - \varepsilon_{ls}$ of the probability on the right token, and that cross-entropy never
# reaches zero.

# %%
claim("the validation loss levels off near 1", val[-1]["valid_loss"], 1.0, tol=0.2)
claim("the training loss levels off near 1", [r["loss"] for r in history if "loss" in r][-1], 1.0, tol=0.25)

# %% [markdown]
# ## 3. Beam search
#
# What we would like is the most probable **whole** output,
#
# $$\hat y = \arg\max_y \log P(y \mid x) = \arg\max_y \sum_{t} \log P(y_t \mid x, y_{<t}).$$
#
# Greedy decoding maximises each term of the sum on its own, which is not the same: a token
# that looks best now can lead to a continuation that is poor. Trying every output is
# impossible ($V^T$ of them), so **beam search** keeps the $k$ best partial outputs
# ("hypotheses") instead of one. At each step it extends every live hypothesis by every token,
# which gives $k \cdot V$ candidates, each scored with its parent's $\log P$ plus the new
# token's log-probability, and keeps the $k$ best. A candidate that ends in `<eos>` is finished:
# it leaves the beam for a list of the $k$ best finished hypotheses.
#
# Finished hypotheses of different lengths are compared with a **length penalty**, since a
# longer output has more (negative) terms in its $\log P$ and raw $\log P$ would always prefer
# short outputs. §6.1 uses the penalty of Wu et al. (2016, Eq. 14):
#
# $$\text{lp}(Y) = \left(\frac{5 + |Y|}{6}\right)^{\alpha}, \qquad
#   \text{score}(Y) = \frac{\log P(Y \mid X)}{\text{lp}(Y)}, \qquad \alpha = 0.6,$$
#
# with $|Y|$ the number of output tokens, `<eos>` included
# (`decoding.length_penalty(length, alpha)`). The search stops once it has $k$ finished
# hypotheses and no live one can still beat the best of them, or at the length limit of
# input length + 50 (`decoding.beam_search(model, src, bos_id, eos_id, beam_size=4,
# alpha=0.6)`; its docstring gives the exact rules). With $k = 1$ it is greedy decoding.
#
# ### Where beam search and greedy decoding differ
#
# On the fully trained model they agree almost everywhere (section 5 shows it). The
# half-trained copy still hesitates, so we decode all the test sentences with it both ways
# (`translate.score_translations` translates and scores a test set with the strategy it is
# given; `decoding.Beam(4)` is beam 4 with $\alpha = 0.6$) and look at the sentences where
# the two outputs differ.

# %%
levels = {"tgt_level": task.tgt_level, "bleu_tokenize": task.bleu_tokenize}
with one_blas_thread(1):
    half_greedy = translate.score_translations(half, vocab, task.test, strategy=decoding.Greedy(), **levels)
    half_beam = translate.score_translations(half, vocab, task.test, strategy=decoding.Beam(4), **levels)
refs = half_greedy["refs"]
differ = [i for i, (g, b) in enumerate(zip(half_greedy["hyps"], half_beam["hyps"])) if g != b]
beam_right = [i for i in differ if half_beam["hyps"][i] == refs[i]]
greedy_right = [i for i in differ if half_greedy["hyps"][i] == refs[i]]
print(tr(f"half-trained model, 1,000 test sentences: the outputs differ on {len(differ)};"))
print(tr(f"  beam right and greedy wrong: {len(beam_right)}; greedy right and beam wrong: {len(greedy_right)}"))
for i in differ[:6]:
    print(tr(f"  {' '.join(task.test[i][0]):30s} ref {refs[i]:22s} greedy {half_greedy['hyps'][i]:22s} "
             f"beam {half_beam['hyps'][i]}"))

# %% [markdown]
# Take the first sentence where beam search is right and greedy decoding is wrong, and score
# both outputs token by token with the model (teacher-forced, as in section 1): the
# log-probability of each token, their sum $\log P$, the length penalty and the score.

# %%
def token_logprobs(m, src_tokens, out_tokens):
    """log P of each output token and of the final <eos>, teacher-forced (one forward pass)."""
    src_ids = np.array([translate.source_ids(vocab, src_tokens)])
    out_ids = vocab.encode(out_tokens)
    with eval_mode(m):
        logp = log_softmax(m.forward(src_ids, np.array([[vocab.bos_id] + out_ids])))[0]   # (T+1, V)
    return [float(logp[t, y]) for t, y in enumerate(out_ids + [vocab.eos_id])]


if beam_right:
    example = beam_right[0]
    ex_src = task.test[example][0]
    print(tr("source:   "), " ".join(ex_src), tr("   reference:"), refs[example])
    for name, out in ((tr("greedy"), half_greedy["hyps"][example]), (tr("beam 4"), half_beam["hyps"][example])):
        tokens = out.split()
        lp = token_logprobs(half, ex_src, tokens)
        pen = decoding.length_penalty(len(lp), 0.6)
        print(tr(f"{name:7s} {out:24s} log P per token {np.round(lp, 2)}  log P = {sum(lp):6.3f}  "
                 f"lp = {pen:.3f}  score = {sum(lp) / pen:6.3f}"))
else:
    print(tr("beam search never fixed a greedy mistake on this machine's run: nothing to show here"))

# %%
if beam_right:
    greedy_tokens, beam_tokens = half_greedy["hyps"][example].split(), half_beam["hyps"][example].split()
    claim_true("greedy decoding's output is shorter: it dropped the year",
               len(greedy_tokens) < len(beam_tokens) and not greedy_tokens[0].endswith("년"),
               f"greedy {greedy_tokens}, beam {beam_tokens}")

# %% [markdown]
# In the run shown here, greedy decoding's output is **shorter**: it dropped the year. The
# picture below shows why. At the first step the model knows that most dates start with a
# year, but it is unsure which one, and it spreads that probability over dozens of year tokens.
# Each of them alone is less likely than the best month token, so greedy decoding takes the
# month and can never go back. Beam search keeps the best year alongside and finds that its
# continuation is nearly certain.

# %%
if beam_right:
    src_ids = np.array([translate.source_ids(vocab, ex_src)])
    with eval_mode(half):
        p0 = np.exp(log_softmax(half.forward(src_ids, np.array([[vocab.bos_id]])))[0, 0])   # (V,)
    is_year = np.array([tok.endswith("년") for tok in vocab.tokens])                        # "1951년" = 1951 (year)
    top = np.argsort(-p0)[:12]
    with korean_labels():
        fig, ax = plt.subplots(figsize=(8, 2.8))
        ax.bar(range(len(top)), p0[top], color=["C1" if is_year[t] else "C0" for t in top])
        ax.set_xticks(range(len(top)), [vocab.token(int(t)) for t in top], fontsize=8)
        ax.set(ylabel=tr("P(first token)"), title=tr(f"first output token for '{' '.join(ex_src)}' (half-trained model); "
                                                 f"orange: years, all years together {p0[is_year].sum():.0%}{font_note}"))
        ax.grid(alpha=0.3)
        plt.tight_layout()
        plt.show()
    claim_true("each year alone is less likely than the best non-year token, all years together more",
               p0[is_year].max() < p0[~is_year].max() < p0[is_year].sum(),
               f"best year {p0[is_year].max():.2f}, best other token {p0[~is_year].max():.2f}, all years {p0[is_year].sum():.2f}")
    n_best = decoding.beam_search(half, src_ids, vocab.bos_id, vocab.eos_id, beam_size=4, alpha=0.6, n_best=4)[0]
    print(tr("beam_search(n_best=4), best first:"))
    for ids, score in n_best:
        print(tr(f"  score {score:7.3f}   {' '.join(vocab.decode(ids))}"))

# %% [markdown]
# Beam search is not always right, and it does not always find the most probable output
# either: it is a search that keeps four candidates, not an exhaustive one. The length penalty
# also matters here: among the sentences where the two decoders disagree, we count those where
# beam search chose the **longer** output although the shorter one had the larger raw $\log P$,
# so that it was the penalty that made the longer one win. (Where both outputs have the same
# length the penalty divides both by the same number and cannot decide anything.)

# %%
longer_by_penalty, same_length, raw_prefers_greedy = 0, 0, 0
for i in differ:
    g_out, b_out = half_greedy["hyps"][i].split(), half_beam["hyps"][i].split()
    lp_g = sum(token_logprobs(half, task.test[i][0], g_out))
    lp_b = sum(token_logprobs(half, task.test[i][0], b_out))
    raw_prefers_greedy += lp_g > lp_b
    same_length += len(g_out) == len(b_out)
    longer_by_penalty += len(b_out) > len(g_out) and lp_g > lp_b
print(tr(f"of the {len(differ)} sentences where the outputs differ: {same_length} have outputs of the same length; "
         f"greedy's output has the larger raw log P in {raw_prefers_greedy}; beam search chose a longer output with "
         f"the smaller raw log P in {longer_by_penalty}: there the length penalty (alpha = 0.6) decided"))

# %% [markdown]
# ### What $\alpha$ does to the output length
#
# $\alpha = 0$ ranks finished hypotheses by raw $\log P$, which favours short outputs: every
# extra token adds a negative term. A larger $\alpha$ divides longer outputs by a larger
# $\text{lp}$, so it favours length. We sweep $\alpha$ with beam 4 on 300 test sentences of
# the half-trained model and measure how often an output is shorter or longer than its reference
# (a long form's Korean has three words, a full form's four).

# %%
show_slow_cell("10", "the alpha sweep, 7 x 300 sentences")

# %%
# slow: the alpha sweep, 7 x 300 sentences
alphas = [0.0, 0.3, 0.6, 1.0, 1.5, 2.0, 3.0]
sweep_src = [translate.source_ids(vocab, s) for s, _ in task.test[:300]]
sweep_ref = [vocab.encode(t) for _, t in task.test[:300]]
ref_len = np.array([len(r) for r in sweep_ref])
print(tr(f"reference lengths: {dict(sorted(Counter(ref_len.tolist()).items()))} (tokens: sentences)"))
mean_len, shorter, longer, exact = [], [], [], []
with one_blas_thread(1):
    for a in alphas:
        outs = translate.translate_ids(half, vocab, sweep_src, strategy=decoding.Beam(4, alpha=a))
        n_out = np.array([len(o) for o in outs])
        mean_len.append(n_out.mean())
        shorter.append(np.mean(n_out < ref_len))
        longer.append(np.mean(n_out > ref_len))
        exact.append(np.mean([o == r for o, r in zip(outs, sweep_ref)]))
        print(tr(f"alpha = {a:3.1f}: mean output length {mean_len[-1]:6.3f} tokens (references {ref_len.mean():.3f}); "
                 f"shorter than the reference: {shorter[-1]:5.1%}, longer: {longer[-1]:5.1%}; exact match {exact[-1]:.1%}"))

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2))
ax1.plot(alphas, 100 * np.array(shorter), "o-", label=tr("shorter than the reference"))
ax1.plot(alphas, 100 * np.array(longer), "s-", label=tr("longer than the reference"))
ax1.set(xlabel=tr(r"length penalty $\alpha$"), ylabel=tr("% of outputs"), title=tr("beam 4, half-trained model, 300 sentences"))
ax1.legend(fontsize=8)
ax2.plot(alphas, 100 * np.array(exact), "o-", color="C2")
ax2.set(xlabel=tr(r"length penalty $\alpha$"), ylabel=tr("exact match (%)"), title=tr("the same outputs, scored"))
for ax in (ax1, ax2):
    ax.axvline(0.6, color="C3", lw=1, ls="--")
    ax.grid(alpha=0.3)
plt.tight_layout()
plt.show()

# %%
claim_true("a long form's Korean has three words, a full form's four", set(ref_len.tolist()) == {3, 4},
           f"reference lengths {sorted(set(ref_len.tolist()))}")
up_to_2 = [i for i, a in enumerate(alphas) if a <= 2]
claim_true("up to alpha = 2 the share of too-short outputs falls (or stays)",
           all(np.diff([shorter[i] for i in up_to_2]) <= 0), f"shorter {np.round(shorter, 3)}")
claim_true("up to alpha = 2 exact match does not fall by more than a point",
           min(exact[i] for i in up_to_2) >= exact[0] - 0.01, f"exact {np.round(exact, 3)}")
claim_true("at alpha = 3 the mean length jumps (more than one token over the references')",
           mean_len[alphas.index(3.0)] > ref_len.mean() + 1,
           f"mean length {mean_len[alphas.index(3.0)]:.2f}, references {ref_len.mean():.2f}")

# %% [markdown]
# **Predict.** A hypothesis of three words that is exactly its reference: what BLEU does `metrics.corpus_bleu` give it (sacrebleu's defaults)?

# %% tags=["predict"]
my_prediction_10_1 = None   # a number from 0 to 100


# %% tags=["reveal"]
from lessonkit.predict import reveal

from minitransformer import metrics

reveal(my_prediction_10_1, metrics.corpus_bleu(["das ist gut"], ["das ist gut"]).score,
       what="BLEU of a perfect three-word hypothesis")


# %% [markdown]
# Up to $\alpha \approx 2$ the share of outputs that are too short falls slowly (a few
# year-less outputs get their year back) and exact match creeps up. At $\alpha = 3$ the
# picture breaks: outputs that repeat a token until the length limit start to win, and the
# mean length jumps. The reason is in the formula. $-\log P$ grows about linearly with the
# length, while $\text{lp}$ grows like $|Y|^{\alpha}$; for $\alpha > 1$ a long enough output
# therefore has a score $\log P/\text{lp}$ close to 0, the best possible. $\alpha = 0.6$ (the
# red dashed line) stays well below that. The dates are all a few tokens long, so this task cannot
# show the other side, where $\alpha$ too small cuts real sentences short.
#
# ## 4. BLEU
#
# **BLEU** (Papineni et al., 2002) compares a system's output with a reference translation by
# counting shared n-grams, for $n = 1 \dots 4$:
#
# * the **clipped n-gram precision** $p_n$: of the hypothesis' n-grams, how many occur in the
#   reference, each credited at most as often as the reference has it (so repeating "the" gains
#   nothing),
#
#   $$p_n = \frac{\sum_{\text{sentences}} \sum_{g \in \text{n-grams}(\text{hyp})} \min\big(\text{count}_\text{hyp}(g), \text{count}_\text{ref}(g)\big)}{\sum_{\text{sentences}} \sum_{g \in \text{n-grams}(\text{hyp})} \text{count}_\text{hyp}(g)};$$
# * the **brevity penalty**: precision alone rewards saying little, so with $c$ the total
#   hypothesis length and $r$ the total reference length,
#
#   $$\text{BP} = \begin{cases} 1 & c \ge r \\ e^{\,1 - r/c} & c < r; \end{cases}$$
# * their **geometric mean**:
#
#   $$\text{BLEU} = \text{BP} \cdot \exp\Big(\frac{1}{4}\sum_{n=1}^{4} \log p_n\Big),$$
#   reported in percent.
#
# The counts are summed over the whole test set **before** the division: BLEU is a corpus
# measure (`metrics.corpus_bleu`). First, one sentence by hand, in plain Python (a small
# reference version, written here to be read):

# %%
reference = "the cat is sitting on the mat near the door".split()
hypothesis = "the cat sat on the mat near the door".split()


def ngrams(tokens, n):
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


log_sum = 0.0
for n in range(1, 5):
    hyp_n, ref_n = ngrams(hypothesis, n), ngrams(reference, n)
    matched = sum(min(count, ref_n[g]) for g, count in hyp_n.items())     # clipped
    total = sum(hyp_n.values())
    log_sum += np.log(matched / total)
    missing = [" ".join(g) for g in hyp_n if g not in ref_n]
    print(tr(f"p_{n} = {matched}/{total} = {matched / total:.4f}   not in the reference: {missing}"))
c, r = len(hypothesis), len(reference)
bp = 1.0 if c >= r else np.exp(1 - r / c)
bleu_by_hand = 100 * bp * np.exp(log_sum / 4)
print(f"c = {c}, r = {r}, BP = exp(1 - {r}/{c}) = {bp:.4f}")
print(f"BLEU = 100 * BP * (p_1 p_2 p_3 p_4)^(1/4) = {bleu_by_hand:.4f}")
package = metrics.corpus_bleu([" ".join(hypothesis)], [" ".join(reference)], tokenize="none")
print("metrics.corpus_bleu:", package)
assert abs(package.score - bleu_by_hand) < 1e-9

# %% [markdown]
# Clipping in action: a hypothesis that only repeats the reference's most frequent word.

# %%
parrot = ["the"] * 7
hyp_1, ref_1 = ngrams(parrot, 1), ngrams(reference, 1)
print(tr(f"'{' '.join(parrot)}': p_1 = {min(hyp_1[('the',)], ref_1[('the',)])}/7 with clipping "
         f"(the reference has 'the' 3 times), it would be 7/7 without"))

# %% [markdown]
# On one short sentence BLEU is brittle. The greedy output of section 3 shares most of its
# words with the reference, yet as a sentence it scores 0: with fewer than 4 tokens it has no
# 4-gram at all, so $p_4$ is 0 and so is the geometric mean. (sacrebleu's smoothing, which the
# package copies, replaces a precision of 0 matches by $1/(2\cdot\text{total})$, halving again
# for each further order with no match; it cannot help an order that has no n-grams at all.)
# Summed over a corpus, every order has plenty of n-grams and the score becomes meaningful;
# this is why BLEU is reported per test set, never as a mean of sentence scores. Below, the
# sentence's own counts, and what they say about each precision printed:

# %%
from IPython.display import display

from lessonkit.prose import Markdown

if beam_right:
    one = metrics.corpus_bleu([half_greedy["hyps"][example]], [refs[example]])
    print(tr(f"'{half_greedy['hyps'][example]}' against '{refs[example]}': {one}"))
    hyp_tokens, ref_tokens = half_greedy["hyps"][example].split(), refs[example].split()
    counts = []
    for n in range(1, 5):
        hyp_n, ref_n = ngrams(hyp_tokens, n), ngrams(ref_tokens, n)
        counts.append((sum(min(k, ref_n[g]) for g, k in hyp_n.items()), sum(hyp_n.values())))

    def reading(n, matched, total):
        if total == 0:
            return tr(f"$p_{n}$: the output has no {n}-gram at all, so $p_{n} = 0$ and BLEU is 0")
        if matched == 0:
            return tr(f"$p_{n}$: 0 of its {total} {n}-gram(s) match, so the printed value is smoothing, not a match")
        return tr(f"$p_{n}$: {matched} of its {total} {n}-gram(s) match, a real match")

    display(Markdown("; ".join(reading(n, m, t) for n, (m, t) in enumerate(counts, 1)) + "."))   # each reading is tr'd
    claim_true("with fewer than 4 tokens the sentence scores 0", len(hyp_tokens) >= 4 or one.score == 0,
               f"{len(hyp_tokens)} tokens, BLEU {one.score}")

# %% [markdown]
# ### Corpus BLEU, checked against sacrebleu
#
# sacrebleu (Post, 2018) is the reference implementation that papers report with. The
# package's `corpus_bleu` uses sacrebleu's defaults (the "13a" tokenizer of WMT's scripts,
# case-sensitive, "exp" smoothing when an order has no match) and `tests/test_metrics.py`
# compares the two on many corpora; here we compare them once more on the half-trained
# model's greedy outputs. Where sacrebleu is not installed the comparison is skipped.

# %%
hyps, refs = half_greedy["hyps"], half_greedy["refs"]
ours_bleu = metrics.corpus_bleu(hyps, refs)
ours_chrf = metrics.corpus_chrf(hyps, refs)
print("metrics.corpus_bleu:", ours_bleu)
print(f"metrics.corpus_chrf: {ours_chrf:.4f}")
try:
    import sacrebleu
except ImportError:
    sacrebleu = None
    print(tr("sacrebleu is not installed: comparison skipped (pip install sacrebleu==2.6.0)"))
if sacrebleu is not None:
    theirs_bleu = sacrebleu.corpus_bleu(hyps, [refs])
    theirs_chrf = sacrebleu.corpus_chrf(hyps, [refs])
    print(f"sacrebleu {sacrebleu.__version__}:  ", theirs_bleu)
    print(f"sacrebleu chrF:        {theirs_chrf.score:.4f}")
    print(tr(f"|difference|: BLEU {abs(ours_bleu.score - theirs_bleu.score):.1e}, "
             f"chrF {abs(ours_chrf - theirs_chrf.score):.1e}"))
    assert abs(ours_bleu.score - theirs_bleu.score) < 1e-6 and abs(ours_chrf - theirs_chrf.score) < 1e-6

# %% [markdown]
# ### BLEU on characters is not BLEU on words
#
# BLEU's n-grams are n-grams of **tokens**, and what a token is depends on the tokenizer. For
# targets without spaces (Chinese, Japanese), or for a model that writes characters, one
# often computes BLEU on characters (`tokenize="char"`). The same outputs then get a very
# different number:

# %% [markdown]
# **Predict.** One wrong day among four words, `2024년 3월 6일 화요일` against `2024년 3월 5일 화요일`: BLEU on words?

# %% tags=["predict"]
my_prediction_10_2 = None   # a number from 0 to 100


# %%
pair_hyp, pair_ref = "2024년 3월 6일 화요일", "2024년 3월 5일 화요일"      # one wrong day
print(tr(f"one sentence, '{pair_hyp}' vs '{pair_ref}':"))
print(tr(f"   words:      {metrics.corpus_bleu([pair_hyp], [pair_ref], tokenize='13a')}"))
print(tr(f"   characters: {metrics.corpus_bleu([pair_hyp], [pair_ref], tokenize='char')}"))
print(tr("the 1,000 greedy outputs of the half-trained model:"))
print(tr(f"   words:      BLEU {metrics.corpus_bleu(hyps, refs, tokenize='13a').score:6.2f}"))
print(tr(f"   characters: BLEU {metrics.corpus_bleu(hyps, refs, tokenize='char').score:6.2f}"))

# %% tags=["reveal"]
from lessonkit.predict import reveal

reveal(my_prediction_10_2, metrics.corpus_bleu([pair_hyp], [pair_ref], tokenize="13a").score,
       what="word BLEU with one wrong day among four words")


# %% [markdown]
# A 4-gram of characters is shorter than most words: getting four characters in a row right
# is much easier than getting four words right, and one wrong word breaks every word n-gram
# that contains it but only the few character n-grams that overlap the wrong characters. The
# two scales measure different things, so a high char-level BLEU says nothing about what the
# word-level BLEU would be. Only scores computed with the same tokenizer (and the same
# references) can be compared; sacrebleu prints its settings as a "signature" for that reason.
# The paper's BLEU is on words (newstest2014, WMT's tokenization), so none of the numbers in
# this lesson can be set beside its 28.4.
#
# **chrF** (Popović, 2015; `metrics.corpus_chrf`) scores character n-grams, $n = 1 \dots 6$,
# with both precision chrP and recall chrR, combined into an F-score that weighs recall
# $\beta = 2$ times as much:
#
# $$\text{chrF}_\beta = (1 + \beta^2)\,\frac{\text{chrP}\cdot\text{chrR}}{\beta^2\,\text{chrP} + \text{chrR}}.$$
#
# It is the better measure when word n-grams are too coarse: for **short** outputs (with fewer
# than 4 words there is no word 4-gram, and sentence BLEU is 0), for languages that **glue
# words together** (a German number is one long word: right or wrong as a whole for word
# BLEU), for **rich morphology** (a word with the wrong ending still shares most of its
# characters), and for scripts **without spaces**. It also gives partial credit for a nearly
# right word, which BLEU does not:

# %%
for hyp, ref in (("einundzwanzig", "einunddreißig"), ("dreitausendvierhunderteinundzwanzig",
                                                     "dreitausendvierhundertzweiundzwanzig")):
    print(tr(f"{hyp:38s} vs {ref:38s}: word BLEU {metrics.corpus_bleu([hyp], [ref]).score:5.1f}, "
             f"chrF {metrics.corpus_chrf([hyp], [ref]):5.1f}"))
from num2words import num2words

assert [num2words(n, lang="de") for n in (21, 31, 3421, 3422)] == ["einundzwanzig", "einunddreißig",
                                                                   "dreitausendvierhunderteinundzwanzig",
                                                                   "dreitausendvierhundertzweiundzwanzig"]

# %% [markdown]
# (21 against 31, and 3,421 against 3,422, in German.) BLEU stays the standard for comparing
# with published work on long, space-separated sentences; for the short phrases of the emoji
# tasks and the one-word German numbers of this package, chrF says more.
#
# ## 5. The trained model's scores, greedy and beam
#
# `translate.score_translations` decodes the test sentences and returns BLEU (word
# level, "13a"), chrF and exact match. The half-trained rows come from section 3.

# %%
with one_blas_thread(1):
    full_greedy = translate.score_translations(model, vocab, task.test, strategy=decoding.Greedy(), **levels)
    full_beam = translate.score_translations(model, vocab, task.test, strategy=decoding.Beam(4), **levels)
print(f"{tr('model'):22s}{tr('decoder'):>10s}{'BLEU':>9s}{'chrF':>9s}{tr('exact match'):>14s}{tr('seconds'):>10s}")
for name, runs in ((tr("half-trained (150 steps)"), (half_greedy, half_beam)), (tr("trained (400 steps)"), (full_greedy, full_beam))):
    for decoder, r in zip((tr("greedy"), tr("beam 4")), runs):
        print(f"{name:22s}{decoder:>10s}{r['bleu']:9.2f}{r['chrf']:9.2f}{r['exact_match']:14.1%}{r['seconds']:10.1f}")
print(f"({machine.machine_summary()})")
wrong = [i for i, (h, r) in enumerate(zip(full_beam["hyps"], full_beam["refs"])) if h != r]
print(tr(f"trained model, beam 4: {len(wrong)} of {len(task.test)} test sentences wrong"), wrong[:5])
probes = {}
for text in ("Tuesday, March 5, 2024", "Monday, March 5, 2024", "Sunday, January 1, 1950"):
    probes[text] = " ".join(translate.translate_tokens(model, vocab, [tokenize(text, "word")], decoding.Beam(4))[0])
    print(f"  {text:26s} -> {probes[text]}")

claim("after 400 steps the model translates (nearly) every test date exactly", full_beam["exact_match"], low=0.98)
claim("beam search has nothing left to fix (greedy within half a point of it)",
      full_beam["exact_match"] - full_greedy["exact_match"], 0.0, tol=0.005)
claim_true("'Monday, March 5, 2024' is translated faithfully, with the wrong weekday",
           probes["Monday, March 5, 2024"] == "2024년 3월 5일 월요일", probes["Monday, March 5, 2024"])

# %% [markdown]
# After 400 steps the model translates (nearly) every test date exactly, and beam search has
# nothing left to fix: once the model is sure of each token, the greedy choice is also the best
# sequence. The middle line shows what was learned: "Monday, March 5, 2024" (a Tuesday in the
# calendar) is translated faithfully with the wrong weekday, so the model learned a mapping of
# tokens and a reordering, not a calendar.
#
# ## 6. What the heads learned: attention maps of the trained model
#
# `translate.attention_maps(model, src_ids, tgt_in_ids)` runs one teacher-forced forward pass
# in evaluation mode and returns the weights $A$ of Eq. (1) of every layer and head
# (lessons 1 and 2): `"encoder_self"` $(N, h, S, S)$, `"decoder_self"` $(N, h, T, T)$ and
# `"encoder_decoder"` $(N, h, T, S)$. Each row is one query position and sums to 1 over the
# keys it may attend to. We feed the model's own beam-search output, so the decoder rows are
# labelled with the decoder **input**, `<bos>` + output: the row of a token is where the model
# predicts the token after it.

# %%
sentence = tokenize("Tuesday, March 5, 2024", "word")         # Tuesday , March 5 , 2024
output = translate.translate_tokens(model, vocab, [sentence], decoding.Beam(4))[0]
src_ids = translate.source_ids(vocab, sentence)                # + <eos>, as in training
dec_in = [vocab.bos_id] + vocab.encode(output)                 # <bos> + output
maps = translate.attention_maps(model, src_ids, dec_in)
src_labels = sentence + ["<eos>"]
dec_labels = ["<bos>"] + output
print({kind: a.shape for kind, a in maps.items()})


def draw_heads(weights, rows, cols, title):
    """An N x h grid of heatmaps: weights (N, h, len(rows), len(cols))."""
    N, h = weights.shape[:2]
    with korean_labels():
        fig, axes = plt.subplots(N, h, figsize=(2.2 * h + 1.2, 2.3 * N + 0.9), squeeze=False, layout="constrained")
        for i in range(N):
            for j in range(h):
                ax = axes[i, j]
                image = ax.imshow(weights[i, j], cmap="viridis", vmin=0, vmax=1)
                ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=8)
                ax.set_yticks(range(len(rows)), rows, fontsize=8)
                ax.set_title(tr(f"layer {i + 1}, head {j + 1}"), fontsize=8)
        fig.colorbar(image, ax=axes, shrink=0.7, label=tr("attention weight"))
        fig.suptitle(title + font_note, fontsize=9)
        plt.show()


draw_heads(maps["encoder_decoder"], dec_labels, src_labels,
           tr(f"encoder-decoder attention: rows = decoder input (<bos> + output), columns = source\n"
              f"'{' '.join(sentence)}' -> '{' '.join(output)}' (beam 4)"))
# Korean writes year, month, day, weekday: decoder row i (<bos>, then each output word) predicts the
# word that translates this source word.
aligned_src = np.array([src_labels.index(word) for word in ("2024", "March", "5", "Tuesday", "<eos>")])

# %% [markdown]
# **Encoder-decoder attention** is where the reordering happens. The row of `<bos>` is where
# the model predicts the first Korean token, the year, and (in the second layer at least) it
# looks at `2024`; the row of the year looks at `March`, which comes next in Korean, the row of
# the month at `5`, the row of the day at `Tuesday`, and the last row, which must predict
# `<eos>`, at the source's `<eos>`. Each row looks at the source word of the **next** output
# token: an alignment, here a permutation because Korean writes year, month, day, weekday.
# What the maps drawn show, head by head, counted from their weights:

# %%
print(tr("decoder row i looks up source position aligned_src[i]:"), aligned_src)
N_layers, n_heads = maps["encoder_decoder"].shape[:2]


def head_names(heads):
    return ", ".join(f"{j + 1}" for j in heads) or tr("none")


picks = maps["encoder_decoder"].argmax(axis=-1)                                       # (N, h, T): each row's key
aligned_rows = (picks == aligned_src).sum(axis=-1)                                    # (N, h)
eos_rows = (picks == len(src_labels) - 1).sum(axis=-1)                                # (N, h)
rows_n = len(dec_labels)
print(tr("rows (of 5) whose largest weight is on the aligned source word:\n"), aligned_rows)
print(tr("rows (of 5) whose largest weight is on the source <eos>:\n"), eos_rows)
claim_true("in the second layer at least one head aligns every row", (aligned_rows[-1] == rows_n).any(),
           f"aligned rows per head {aligned_rows[-1]}")
show_markdown(
    f"In this sentence, the heads of layer {N_layers} that put their largest weight on the aligned source word "
    f"in every one of the {rows_n} rows: {head_names(np.flatnonzero(aligned_rows[-1] == rows_n))} (of {n_heads}). "
    f"In layer 1 that number is {int((aligned_rows[0] == rows_n).sum())}: its heads are more mixed, and the heads "
    f"whose largest weight lies on the source `<eos>` in at least 3 rows are "
    f"{head_names(np.flatnonzero(eos_rows[0] >= 3))}.")

# %%
draw_heads(maps["decoder_self"], dec_labels, dec_labels,
           tr("decoder masked self-attention: rows and columns = decoder input (<bos> + output)"))
draw_heads(maps["encoder_self"], src_labels, src_labels,
           tr("encoder self-attention: rows and columns = source (+ <eos>)"))

# %% [markdown]
# One sentence can mislead, so we measure each head over the test sentences written in the
# drawn sentence's form (weekday, comma, month, day, comma, year, `<eos>`), the first 200 of them.
# Their targets all have the same shape too (year, month, day, weekday, and `<bos>` before them),
# so the sentences stack into one batch without padding and a head's habit can be averaged
# position by position:
#
# * **alignment** (encoder-decoder): the mean weight that decoder row $i$ puts on the source
#   word of output token $i$ (the positions `aligned_src` printed above);
# * **diagonal** (self-attention): the mean weight a position puts on itself; in the decoder
#   that is the token written last, the "previous-token" pattern (row $i$ holds output
#   token $i-1$);
# * **first key** (decoder): the weight on `<bos>`; **last key** (encoder): the weight on the
#   source `<eos>`, places a head can park its attention when it has nothing to look up.
#
# The decoder's two measures leave out row 0: `<bos>` may only attend to itself, so its weight
# is 1 there in every head.

# %%
same_form = [(s, t) for s, t in task.test if [tok == "," for tok in s] == [tok == "," for tok in sentence]]
batch = same_form[:200]
src_batch = np.array([translate.source_ids(vocab, s) for s, _ in batch])               # (B, 7): 6 words + <eos>
dec_batch = np.array([[vocab.bos_id] + vocab.encode(t) for _, t in batch])             # (B, 5): <bos> + 4 words
assert src_batch.shape == (len(batch), len(src_labels)) and dec_batch.shape == (len(batch), len(dec_labels))
print(tr(f"{len(same_form)} test sentences in this form; the first {len(batch)} stacked"))
batch_maps = translate.attention_maps(model, src_batch, dec_batch)                    # each (N, B, h, ., .)
rows = np.arange(len(dec_labels))
later = rows[1:]                                 # decoder rows 1..4: row 0 (<bos>) can only attend to itself
keys = np.arange(len(src_labels))                # encoder positions
print(f"{tr('head'):>14s}{tr('enc-dec alignment'):>19s}{tr('dec diagonal'):>14s}{tr('dec <bos>'):>11s}"
      f"{tr('enc diagonal'):>14s}{tr('enc <eos>'):>11s}")
head_table, ed_eos = {}, {}
for layer in range(model.cfg.N):
    for head in range(model.cfg.h):
        ed = batch_maps["encoder_decoder"][layer, :, head]                             # (B, T, S)
        ds = batch_maps["decoder_self"][layer, :, head]                                # (B, T, T)
        es = batch_maps["encoder_self"][layer, :, head]                                # (B, S, S)
        head_table[layer, head] = scores = (ed[:, rows, aligned_src].mean(), ds[:, later, later].mean(),
                                            ds[:, later, 0].mean(), es[:, keys, keys].mean(), es[:, :, -1].mean())
        ed_eos[layer, head] = ed[:, :, -1].mean()                                        # enc-dec weight on <eos>
        print(tr(f"layer {layer + 1}, head {head + 1}") + "".join(f"{s:{w}.2f}" for s, w in zip(scores, (19, 14, 11, 14, 11))))


def heads_where(column, above):
    found = [tr(f"layer {k[0] + 1} head {k[1] + 1}") for k, v in head_table.items() if v[column] > above]
    return ", ".join(found) or tr("none")


columns = np.array(list(head_table.values()))                                          # (N*h, 5)
print(tr("\nencoder-decoder heads with more than 0.8 on the aligned source word:"), heads_where(0, 0.8))
print(tr("decoder self-attention heads with more than 0.6 on the diagonal:     "), heads_where(1, 0.6))
print(tr("decoder self-attention heads with more than 0.6 on <bos>:            "), heads_where(2, 0.6))
print(tr(f"encoder self-attention: diagonal {columns[:, 3].min():.2f} to {columns[:, 3].max():.2f}, "
         f"<eos> {columns[:, 4].min():.2f} to {columns[:, 4].max():.2f} (every head)"))

# %% [markdown]
# How to read it. The numbers are those of the run printed above: another machine's floating
# point can move them a little, and a second training seed would give the same kinds of heads
# in other places. The reading below is rendered from them.

# %%
last = model.cfg.N - 1
year_row = 1                                     # decoder input position 1 holds the year (output token 0)
year_heads = [j for j in range(model.cfg.h)
              if (maps["decoder_self"][last, j, year_row + 1:].argmax(axis=-1) == year_row).all()]
aligned_last = [j for j in range(model.cfg.h) if head_table[last, j][0] > 0.8]
claim_true("encoder-decoder attention in the upper layer is an alignment (a head above 0.8)", bool(aligned_last))
claim_true("decoder self-attention has previous-token heads (a diagonal above 0.6)", heads_where(1, 0.6) != tr("none"))
claim_true("encoder self-attention has no clean pattern (no head above 0.8 on one key kind)",
           columns[:, 3].max() < 0.8 and columns[:, 4].max() < 0.8,
           f"diagonal up to {columns[:, 3].max():.2f}, <eos> up to {columns[:, 4].max():.2f}")
first_eos = [ed_eos[0, j] for j in range(model.cfg.h)]
year_sentence = (tr(f"In the map of the one sentence drawn, head(s) {head_names(year_heads)} of layer {last + 1} "
                    "look hardest at the year from every later row.") if year_heads else
                 tr(f"In the map of the one sentence drawn, no head of layer {last + 1} looks hardest at the "
                    "year from every later row."))
show_markdown(
    f"* **Encoder-decoder attention** in the last layer is an **alignment**: heads {head_names(aligned_last)} of "
    f"layer {last + 1} put more than 0.8 of their weight on the source word that the next output token "
    f"translates, on average over all {len(batch)} sentences ({', '.join(f'{head_table[last, j][0]:.2f}' for j in aligned_last)}), "
    f"not only in the one drawn. The first layer's heads reach at most {columns[:model.cfg.h, 0].max():.2f} and "
    f"put {min(first_eos):.2f} to {max(first_eos):.2f} of their weight on the source `<eos>`. Translation models "
    "before the Transformer learned such alignments with a dedicated attention (Bahdanau et al., 2014); here it "
    "appears in the upper layer of cross-attention, once the first layer has gathered context.\n"
    f"* **Decoder self-attention** has **previous-token heads** ({heads_where(1, 0.6)}): a large diagonal means "
    "looking at the token just written (row $i$ holds output token $i-1$), which tells the model which part of "
    f"the date comes next. Heads with more than 0.6 on `<bos>` from the later rows: {heads_where(2, 0.6)}; for an "
    "output whose format is fixed, knowing the position is nearly all such a head needs, and `<bos>` is a cheap "
    f"place to park. {year_sentence}\n"
    f"* **Encoder self-attention** has no clean pattern: over {len(batch)} sentences every head puts "
    f"{columns[:, 3].min():.2f} to {columns[:, 3].max():.2f} on its own position and "
    f"{columns[:, 4].min():.2f} to {columns[:, 4].max():.2f} on the source `<eos>`, a mix of the two. This task "
    "hardly needs the encoder to mix words, since each source word translates on its own.")

# %% [markdown]
# Attention weights show where information is read from, not what is done with it; a head with
# a tidy picture can still matter little to the output. Removing a head and measuring what changes
# tests that: Exercise 8.4 of lesson 8 writes the ablation (one head's output set to zero before
# $W^O$), and you can run it on this model's heads to see which of the pictures above matter.

# %% [markdown]
# ## 7. Table 2: what the paper reports, and what a toy run can and cannot show (§6.1)
#
# Table 2 of the paper sets the Transformer beside the best translation systems of its day on two
# test sets, WMT 2014 English-German and English-French, in BLEU and in **training cost**. The cost is
# an estimate, and §6.1 says how it was made: training time × number of GPUs × an estimate of each
# GPU's sustained single-precision throughput (a footnote gives the rate assumed for each kind of GPU;
# `P100_FLOPS` below is the one for the GPUs they trained on). The table as the paper prints it, kept in a dictionary so that every sentence below reads the
# paper's numbers instead of retyping them (an empty cell: the paper gives none):

# %%
from IPython.display import Markdown

# Table 2 of the paper: (system, kind, BLEU En-De, BLEU En-Fr, training FLOPs En-De, training FLOPs En-Fr), the
# BLEU scores as the paper prints them (to the digits it gives).
TABLE2 = [
    ("ByteNet", "single", "23.75", None, None, None),
    ("Deep-Att + PosUnk", "single", None, "39.2", None, 1.0e20),
    ("GNMT + RL", "single", "24.6", "39.92", 2.3e19, 1.4e20),
    ("ConvS2S", "single", "25.16", "40.46", 9.6e18, 1.5e20),
    ("MoE", "single", "26.03", "40.56", 2.0e19, 1.2e20),
    ("Deep-Att + PosUnk Ensemble", "ensemble", None, "40.4", None, 8.0e20),
    ("GNMT + RL Ensemble", "ensemble", "26.30", "41.16", 1.8e20, 1.1e21),
    ("ConvS2S Ensemble", "ensemble", "26.36", "41.29", 7.7e19, 1.2e21),
    ("Transformer (base model)", "this paper", "27.3", "38.1", 3.3e18, 3.3e18),
    ("Transformer (big)", "this paper", "28.4", "41.8", 2.3e19, 2.3e19),
]
PAPER_TEXT_EN_FR_BIG = 41.0        # §6.1's text gives 41.0 for the big model on En-Fr; Table 2 prints 41.8
P100_FLOPS = 9.5e12                # §6.1's footnote: the sustained throughput assumed for a P100
TRAINING = {"Transformer (base model)": 12 * 3600, "Transformer (big)": 3.5 * 24 * 3600}   # §5.2: 12 hours; 3.5 days
GPUS = 8                           # §5.2: one machine with 8 NVIDIA P100 GPUs


def flops_tex(x):
    """2.3e19 -> $2.3 \\cdot 10^{19}$, as the paper writes it."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"${mantissa} \\cdot 10^{{{int(exponent)}}}$"


Markdown("\n".join([tr("| system | | BLEU En-De | BLEU En-Fr | training FLOPs En-De | training FLOPs En-Fr |"),
                    "| --- | --- | ---: | ---: | ---: | ---: |"]
                   + [f"| {name} | {kind} | {de or ''} | {fr or ''} | {flops_tex(cde) if cde else ''} | "
                      f"{flops_tex(cfr) if cfr else ''} |" for name, kind, de, fr, cde, cfr in TABLE2]))

# %% [markdown]
# **The cost column, recomputed.** The Transformer's own two costs follow from §5.2's training times
# with the method of §6.1, and the claims of §6.1 and §7 can be read off the table. The sentences
# below are rendered from the dictionary:

# %%
rows = {name: {"kind": kind, "de": de and float(de), "fr": fr and float(fr), "cost_de": cde, "cost_fr": cfr}
        for name, kind, de, fr, cde, cfr in TABLE2}
for name, seconds in TRAINING.items():
    estimate = seconds * GPUS * P100_FLOPS
    print(tr(f"{name}: {seconds / 3600:.0f} h x {GPUS} GPUs x {P100_FLOPS:.1e} FLOP/s = {estimate:.2e} FLOPs "
             f"(Table 2: {rows[name]['cost_de']:.1e})"))
    assert abs(estimate - rows[name]["cost_de"]) / rows[name]["cost_de"] < 0.05     # the table rounds to 2 digits

earlier = {n: r for n, r in rows.items() if r["kind"] != "this paper"}
big, base = rows["Transformer (big)"], rows["Transformer (base model)"]
best_de = max((r["de"], n) for n, r in earlier.items() if r["de"] is not None)
best_fr_single = max((r["fr"], n) for n, r in earlier.items() if r["fr"] is not None and r["kind"] == "single")
best_fr_ens = max((r["fr"], n) for n, r in earlier.items() if r["fr"] is not None and r["kind"] == "ensemble")
cheapest_de = min((r["cost_de"], n) for n, r in earlier.items() if r["cost_de"] is not None)
fr_single_cost = earlier[best_fr_single[1]]["cost_fr"]
claim("§6.1: the big model beats the best earlier En-De result, ensembles included, by more than 2.0 BLEU",
      big["de"] - best_de[0], low=2.0)
claim_true("§6.1: even the base model beats every earlier En-De result", base["de"] > best_de[0])
claim_true("§6.1: on En-Fr the big model beats every earlier single model", PAPER_TEXT_EN_FR_BIG > best_fr_single[0])
claim("§6.1: ... at less than 1/4 of the training cost of that model", big["cost_fr"] / fr_single_cost, high=0.25)
below_text = [n for n, r in earlier.items() if r["kind"] == "ensemble" and r["fr"] and r["fr"] > PAPER_TEXT_EN_FR_BIG]
show_markdown(
    f"* **English-German.** The big model's {big['de']} is {big['de'] - best_de[0]:.2f} BLEU above the best earlier "
    f"result, an ensemble ({best_de[1]}, {best_de[0]}): the \"more than 2.0 BLEU, including ensembles\" of §6.1. Even "
    f"the base model ({base['de']}) is above every earlier row, at {flops_tex(base['cost_de'])} FLOPs, "
    f"{cheapest_de[0] / base['cost_de']:.1f} times less than the cheapest of them ({cheapest_de[1]}).\n"
    f"* **English-French.** §6.1 claims the best **single** model: {PAPER_TEXT_EN_FR_BIG} in its text (Table 2 "
    f"prints {big['fr']} for the same model), against {best_fr_single[0]} for the best earlier single model "
    f"({best_fr_single[1]}), at {big['cost_fr'] / fr_single_cost:.2f} of its training cost. The ensembles are another "
    f"matter: Table 2's {big['fr']} lies above them, but the text's {PAPER_TEXT_EN_FR_BIG} lies below "
    f"{len(below_text)} of them ({' and '.join(below_text)}), and the paper claims to beat ensembles only on "
    f"English-German (§6.1, and §7: \"in the "
    "former task our best model outperforms even all previously reported ensembles\"). Read that claim as made for one "
    "language pair, not both.")

# %% [markdown]
# **The toy run's cost, two ways.** The dates model of §2 trained on one CPU core. Its
# cost the paper's way is its CPU time × one core's sustained float32 throughput, which we measure here
# as the best rate of large matrix products on one thread. Its cost counted is the matrix-product
# FLOPs of its training steps: every product of the package goes through `backend.matmul` (lesson 8,
# §3), so wrapping that function while a fresh copy of the model runs forward and backward on
# training batches of the same size counts them exactly (Adam's update and the other elementwise work
# are left out: a few percent). The two differ by how busy the run kept the processor: the paper's
# method counts capacity used for a time, not work done.

# %%
from minitransformer.data.batching import batch_plan, make_batch
from minitransformer.layers.loss import LabelSmoothedCrossEntropy


def counted_flops(fn):
    """Matrix-product FLOPs of everything fn runs (a multiply-add is 2), batch axes included."""
    total, original = [0], backend.matmul

    def counting(a, b):
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if b.ndim > 2 else a.shape[:-2]
        total[0] += 2 * int(np.prod(batch)) * a.shape[-2] * a.shape[-1] * b.shape[-1]
        return original(a, b)

    backend.matmul = counting
    try:
        fn()
    finally:
        backend.matmul = original
    return total[0]


from minitransformer import train

counter = model_module.Transformer(model.cfg, seed=1)           # a fresh copy: the trained model stays as it is
loss_fn = LabelSmoothedCrossEntropy(vocab.pad_id, model.cfg.eps_ls)
train_ids = train.encode_pairs(vocab, task.train)               # source ids + <eos>, target ids: as the run saw them
plan = batch_plan(train_ids, settings.batch_size, None, np.random.default_rng(0))[:8]
per_step = []
with one_blas_thread(1):
    for idx in plan:
        b = make_batch([train_ids[i][0] for i in idx], [train_ids[i][1] for i in idx], PAD, BOS, EOS, np)

        def one_step(b=b):
            loss_fn.forward(counter.forward(b.src, b.tgt_in, b.src_mask, b.tgt_mask), b.tgt_out)
            counter.backward(loss_fn.backward())

        per_step.append(counted_flops(one_step))
toy_counted = float(np.mean(per_step)) * trainer.step                 # every step of the run, at the mean batch

with one_blas_thread(1):                                               # one core's sustained float32 rate
    a32 = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    best = min(cpu_time(lambda: a32 @ a32) for _ in range(5))
core_flops = 2 * 1024 ** 3 / best
toy_paper_way = train_cpu * core_flops
print(tr(f"counted: {np.mean(per_step) / 1e9:.2f} GFLOPs per step x {trainer.step} steps = {toy_counted:.2e} FLOPs"))
print(tr(f"the paper's way: {train_cpu:.1f} CPU s x {core_flops / 1e9:.0f} GFLOP/s (one core, float32) = {toy_paper_way:.2e} FLOPs"))
claim_true("the paper's way gives more than the count (a run rarely keeps the processor at its best rate)",
           toy_paper_way > toy_counted, f"{toy_paper_way:.2e} vs {toy_counted:.2e}")
show_markdown(
    f"This run used about {flops_tex(toy_counted)} FLOPs of matrix products, {flops_tex(base['cost_de'] / toy_counted)} "
    f"times less than the base model of Table 2. Estimated the paper's way it would be {flops_tex(toy_paper_way)}: the "
    f"run kept one core "
    f"at {toy_counted / toy_paper_way:.0%} of its best rate, so the method of §6.1 measures what a run occupied, not "
    "what it computed. (The footnote of §6.1 lists the rates it assumed for four kinds of GPU: the cost column "
    "compares time on hardware, not arithmetic counted.)")

# %% [markdown]
# **What this lesson can show, and what it cannot.** It can show the parts of Table 2's Transformer rows
# that do not depend on scale: the model (lessons 1 to 7), its training (§5, lesson 9), the decoding of
# §6.1 (beam search with the paper's settings, sections 1 and 3), the BLEU computation (checked against sacrebleu in
# section 4) and the cost arithmetic above. It cannot show the BLEU column: a dates model scores its
# BLEU on formatted dates, a task with no ambiguity and a small vocabulary, and that number says nothing
# about English-German news. Nor can it show that the Transformer is better than the systems above it in
# the table: that comparison needs their data, their scale and their models. Lesson 8 makes one small
# comparison that does fit on a laptop: the training time of a Transformer and of a recurrent model of
# the same size, on the same toy task.

# %% [markdown]
# ## 8. Generation is still one token at a time (§7)
#
# §7 ends with plans, one of them "making generation less sequential". Training removed the sequential
# steps of a recurrent network: teacher forcing feeds the whole target at once, so one decoder pass
# scores all $T$ positions (lesson 7). Generation did not: the token at position $t$ is the decoder's
# own choice at step $t-1$, so the $T$ steps must run one after another, as a recurrent decoder's do.
# The key/value cache of section 1 makes each step cheaper; it does not make the steps fewer. "Less
# sequential" is about their number (for instance producing several tokens per step), not about a
# faster forward pass, which is a different goal. Counted and timed on the trained model, over the
# test sentences: greedy generation, against one teacher-forced pass over the same outputs.

# %%
calls = {"decode_step": 0, "decode": 0}
originals = {name: getattr(model, name) for name in calls}


def counting_method(name):
    def wrapped(*args, **kwargs):
        calls[name] += 1
        return originals[name](*args, **kwargs)
    return wrapped


from minitransformer.data.batching import make_source_batch

test_src = [src for src, _ in train.encode_pairs(vocab, task.test[:200])]    # as translate() feeds them
src_batch, _ = make_source_batch(test_src, PAD, np)
generated = []
for name in calls:
    setattr(model, name, counting_method(name))                 # count the calls of this one model
try:
    with one_blas_thread(1):
        t_gen = cpu_time(lambda: generated.extend(decoding.greedy_decode(model, src_batch, BOS, EOS)))
        out_batch = make_batch(test_src, generated, PAD, BOS, EOS, np)
        gen_calls = dict(calls)
        with eval_mode(model):
            t_score = cpu_time(lambda: model.forward(out_batch.src, out_batch.tgt_in, out_batch.src_mask,
                                                     out_batch.tgt_mask))
finally:
    for name in calls:
        delattr(model, name)                 # the class's methods again
steps_needed = max(len(g) for g in generated) + 1                      # the longest output, and its <eos>
claim_true("generation made one decoder call per output position, scoring one for all",
           gen_calls["decode_step"] == steps_needed and calls["decode"] - gen_calls["decode"] == 1,
           f"{gen_calls} then {calls}")
show_markdown(
    f"Greedy generation of {len(test_src)} test sentences made **{gen_calls['decode_step']} decoder calls in a row** "
    f"(the longest output has {steps_needed - 1} tokens, and one more step writes `<eos>`): call $t$ could start only "
    f"once call $t-1$ had chosen its token. Scoring the same outputs with teacher forcing took **one** call. In CPU "
    f"time, generation took {1e3 * t_gen:.0f} ms against {1e3 * t_score:.0f} ms for the one pass "
    f"({t_gen / t_score:.1f}x), on the machine named at the top; on hardware that runs a pass's positions in parallel "
    "the gap grows with the length, because the steps cannot be overlapped.")

# %% [markdown]
# ## Exercises
#
# Each exercise has a cell with a stub to fill in and a checking cell below it. While the stub
# still returns `None` the checker prints *not attempted yet*; a wrong answer raises a
# `WrongAnswer` (an `AssertionError`) that says what is wrong and, for the usual mistakes, names
# it; a right one prints `correct`. The checkers are in `lessonkit.exercises.lesson_10`.
# In the full notebook the solutions follow at the very end; the student edition a teacher hands out leaves them out.
#
# ### Exercise 10.1 — one step of beam search
#
# `live_logp` holds $\log P$ of the $k$ live hypotheses, shape $(k,)$ ($-\infty$ for an empty
# slot, as at step 0 when only slot 0 is live); `next_logp` holds, for each of them, the
# log-probabilities of the next token, shape $(k, V)$. Return `(parent, token, logp)`, three
# arrays of shape $(k,)$: the $k$ best extensions, best first, where extension $(j, y)$ scores
# `live_logp[j] + next_logp[j, y]`. If two candidates tie, the one with the lower flat index
# $j \cdot V + y$ comes first.

# %% tags=["stub"]
def my_beam_step(live_logp, next_logp, k):
    """live_logp: (k,), next_logp: (k, V) -> parent (k,) ints, token (k,) ints, logp (k,)."""
    # YOUR CODE HERE
    return None


# %% tags=["check"]
from lessonkit.exercises.lesson_10 import check_beam_step

check_beam_step(my_beam_step)


# %% [markdown]
# ### Exercise 10.2 — corpus BLEU
#
# Write `my_corpus_bleu(hyps, refs)` for lists of token lists (one reference per hypothesis):
# clipped n-gram counts for $n = 1 \dots 4$ summed over the corpus, the brevity penalty from the
# total lengths, the geometric mean of the four precisions, in percent. No smoothing: the
# checker's corpora have a match at every order. It compares with `metrics.corpus_bleu(...,
# tokenize="none")`.

# %% tags=["stub"]
def my_corpus_bleu(hyps, refs):
    """hyps, refs: lists of token lists -> BLEU in [0, 100]."""
    # YOUR CODE HERE
    return None


# %% tags=["check"]
from lessonkit.exercises.lesson_10 import check_corpus_bleu

check_corpus_bleu(my_corpus_bleu)


# %% [markdown]
# ### Exercise 10.3 — greedy decoding with the cache
#
# Write `my_greedy(model, src, bos_id, eos_id, max_len)` for one source sentence `src` of shape
# $(1, S)$: the loop of section 1, on `model.encode`, `model_module.KVCache` and
# `model.decode_step` inside `eval_mode(model)`. Never choose `<pad>` (`model.cfg.pad_id`) or
# `<bos>`; stop when the argmax is `eos_id` (without returning it) or after `max_len` tokens.
# Return the list of output ids. The checker hands you a model in training mode and refuses
# `model.decode` and `model.forward`: use the cache. It compares with `decoding.greedy_decode`
# on a tiny model it trains first (a second or two) and on an untrained one.

# %% tags=["stub"]
def my_greedy(model, src, bos_id, eos_id, max_len):
    """src: (1, S) ids -> list of output ids (no <bos>, no <eos>)."""
    # YOUR CODE HERE
    return None


# %% tags=["check"]
from lessonkit.exercises.lesson_10 import check_greedy_decode

check_greedy_decode(my_greedy)


# %% [markdown] tags=["solution"]
# ---
# ## Solutions
#
# Try the exercises first. Each solution is followed by the checking cell that proves it.

# %% tags=["solution"]
def beam_step_solution(live_logp, next_logp, k):
    V = next_logp.shape[1]
    candidates = (live_logp[:, None] + next_logp).reshape(-1)      # (k·V,): parent's log P + token's
    best = np.argsort(-candidates, kind="stable")[:k]              # best first; stable: ties to the lower index
    return best // V, best % V, candidates[best]                   # flat index f = parent·V + token

check_beam_step(beam_step_solution)


# %% tags=["solution"]
from collections import Counter


def ngrams(tokens, n):                                              # as in section 4
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def corpus_bleu_solution(hyps, refs):
    matched, total = np.zeros(4), np.zeros(4)
    c = r = 0
    for hyp, ref in zip(hyps, refs):
        c, r = c + len(hyp), r + len(ref)
        for n in range(1, 5):
            hyp_n, ref_n = ngrams(hyp, n), ngrams(ref, n)
            matched[n - 1] += sum(min(count, ref_n[g]) for g, count in hyp_n.items())   # clipped
            total[n - 1] += sum(hyp_n.values())
    bp = 1.0 if c >= r else np.exp(1 - r / c)                       # brevity penalty, corpus lengths
    return 100 * bp * np.exp(np.mean(np.log(matched / total)))     # geometric mean

check_corpus_bleu(corpus_bleu_solution)


# %% tags=["solution"]
from minitransformer import model as model_module
from minitransformer.layers.masks import padding_mask
from minitransformer.layers.parameter import eval_mode


def greedy_solution(model, src, bos_id, eos_id, max_len):
    src_mask = padding_mask(src, model.cfg.pad_id)
    out, y = [], bos_id
    with eval_mode(model):
        memory = model.encode(src, src_mask)
        cache = model_module.KVCache(model, memory, src_mask, max_len)
        for t in range(max_len):
            logits = model.decode_step(np.array([[y]]), t, cache)[0]      # (V,)
            logits[[model.cfg.pad_id, bos_id]] = -np.inf
            y = int(logits.argmax())
            if y == eos_id:
                break
            out.append(y)
    return out

check_greedy_decode(greedy_solution)


# %%
wall, cpu, load0 = time.perf_counter() - NOTEBOOK_START[0], time.process_time() - NOTEBOOK_START[1], NOTEBOOK_START[2]
print(tr(f"this notebook: {wall:.0f} s wall, {cpu:.0f} s CPU in this kernel; 1-min load {load0:.1f} at the start, "
         f"{os.getloadavg()[0]:.1f} now; {machine.machine_summary()}"))
