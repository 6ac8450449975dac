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
# # Lesson 13 — Byte-pair encoding (§5.1) and checkpoint averaging (§6.1)
#
# Two sentences of the paper that are easy to read past:
#
# > §5.1: "Sentences were encoded using byte-pair encoding [3], which has a shared source-target
# > vocabulary of about 37000 tokens."
#
# > §6.1: "For the base models, we used a single model obtained by averaging the last 5 checkpoints,
# > which were written at 10-minute intervals. For the big models, we averaged the last 20 checkpoints."
#
# The first decides what a *token* is, and so the size of the embedding table (§3.4), the length of every
# sequence the attention has to look across (§3.2), and which words the model can ever write. The second is a
# free improvement at the very end of training. Both are small algorithms, and this lesson writes both by
# hand and measures what they buy:
#
# 1. **the merge loop of byte-pair encoding** (Sennrich, Haddow & Birch 2016, §3.2, Algorithm 1), run step by
#    step on a corpus of four words, then applied to words it never saw;
# 2. **the vocabulary it learns on real text**, the English→German number names of `numbers-en-de`: German
#    writes every number as one compound ("viertausenddreihundertzwanzig"), which is hard for word-level and
#    long for character-level tokens;
# 3. **the trade-off, measured**: characters, words and byte-pair pieces at three merge counts, each trained
#    for the same budget: unknown tokens, sequence length, attention cost, parameters, time, accuracy;
# 4. **checkpoint averaging**: the last five checkpoints of a run against the final one, over three seeds.
#
# | in this lesson | where in the package |
# | --- | --- |
# | learning merges (incremental counts) / the plain recount | `data.bpe_learn.learn_bpe` / `data.bpe_learn.learn_bpe_by_recounting` (both also importable from `data.bpe`) |
# | applying them: a word's pieces, a line's tokens, back to text | `data.bpe.BPE` (`.segment`, `.tokens`, `.apply`), `data.bpe.detokenize` |
# | BPE as a tokenization level | `data.vocab.tokenize(text, "bpe", bpe)`, `data.vocab.bpe_vocab(bpe)` |
# | a task at level bpe (merges learned on its training split only) | `data.registry.load_task(name, level="bpe", bpe_merges=N)` |
# | the command line | `python -m minitransformer bpe learn/apply`, `train --level bpe --bpe-merges N` |
# | keeping the last checkpoints | `train --keep-last K` (`snapshots.py`: `checkpoint.stepNNNNNN.npz`) |
# | averaging them | `average.average_checkpoints`, `python -m minitransformer average` |
# | the long measurements | `lessons/experiments/lesson13_bpe.py`, which writes `lessons/experiments/lesson13_bpe.json` |
#
# Training a model per tokenization takes far longer than a lesson should, so those runs were made by the
# script; this notebook reads its JSON, recomputes live everything that needs no training, and repeats the
# first steps of one run.
#
# **What it trains:** one numbers-en-de model for a short stretch (the record's first steps, repeated live). The cell
# below says how long the whole lesson takes.
#
# **Terms:** each term of these lessons, in English and as Korean texts write it, is in [the glossary](docs/glossary.md).

# %%
from lessonkit.runtimes import show_cost

show_cost("13")

# %%
# %matplotlib inline
import json
import pathlib
import sys
import time
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

from lessonkit.i18n import tr

from minitransformer.data.bpe import (
    BPE,
    END,
    detokenize,
    initial_symbols,
    learn_bpe,
    learn_bpe_by_recounting,
    word_counts,
    word_symbols,
)

plt.rcParams.update({"figure.dpi": 80, "savefig.dpi": 80, "font.size": 9})
LESSON_START = time.perf_counter()

sys.path.insert(0, str(pathlib.Path("experiments").resolve()))   # the notebook runs in lessons/
import lesson13_bpe as experiment  # lessons/experiments/lesson13_bpe.py

results = json.loads(pathlib.Path("experiments/lesson13_bpe.json").read_text())
for made in results["provenance"]:                 # every call of the script that wrote into the record
    print(tr(f"{made['command']}: {made['started']} to {made['finished']}, commit {made['commit'][:7]}"))
print(tr("machine:      "), results["machine"],
      tr("(load when the script started; one BLAS thread, cores shared with other jobs)"))

# %% [markdown]
# ## 1. The merge loop, by hand
#
# Byte-pair encoding starts from characters and builds longer units out of the pairs that occur most. Each word
# is a sequence of **symbols**, at first its characters, the last one carrying the end-of-word marker `</w>`
# (so `w</w>`, a *w* that ends a word, is a different symbol from the *w* inside "lower"). Then, again and again:
#
# 1. count every pair of adjacent symbols, each occurrence weighted by how often its word occurs;
# 2. merge the most frequent pair everywhere into one new symbol; that pair is the next **merge**.
#
# Pairs never reach across two words, so no symbol ever spans a space. Ties between equally frequent pairs are
# broken as the reference implementation, subword-nmt 0.3.8, breaks them: the greatest pair, comparing
# `(first, second)` as Python compares strings. Sennrich et al.'s own example corpus: "low" 5 times, "lower"
# twice, "newest" 6 times, "widest" 3 times.

# %% [markdown]
# **Predict.** In Sennrich et al.'s corpus below ("low" 5 times, "lower" twice, "newest" 6 times, "widest" 3 times), how often does the most frequent pair of adjacent symbols occur, counted with the words' counts?

# %% tags=["predict"]
my_prediction_13_1 = None   # a whole number


# %%
corpus = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
assert corpus == {"low": 5, "lower": 2, "newest": 6, "widest": 3}     # the counts of the text above
vocab = {word_symbols(word): count for word, count in corpus.items()}   # {("l", "o", "w</w>"): 5, ...}


def pair_counts(vocab):
    """Every adjacent pair of symbols, counted with its word's count."""
    counts = Counter()
    for symbols, count in vocab.items():
        for pair in zip(symbols, symbols[1:]):
            counts[pair] += count
    return counts


def merge(symbols, pair):
    """``symbols`` with each occurrence of ``pair`` joined into one symbol, left to right."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


counts = pair_counts(vocab)
print(tr("step 1, the pair counts (most frequent first):"))
for pair, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:8]:
    print(f"   {pair[0]!s:>5} {pair[1]!s:<6} {n}")
assert counts[("e", "s")] == counts[("s", "t</w>")] == max(counts.values()) == 9      # the prose below

# %% tags=["reveal"]
from lessonkit.predict import reveal

reveal(my_prediction_13_1, max(counts.values()), what="the count of the most frequent pair")


# %% [markdown]
# `e s` and `s t</w>` both occur 9 times (6 in "newest", 3 in "widest"). The tie goes to the greater pair,
# `('s', 't</w>')`, since "s" > "e". Ten steps, printing the merge and the corpus after it:

# %%
merges = []
for step in range(1, 11):
    counts = pair_counts(vocab)
    best = max(counts, key=lambda pair: (counts[pair], pair))     # most frequent; a tie to the greatest pair
    merges.append(best)
    vocab = {merge(symbols, best): count for symbols, count in vocab.items()}
    words = "   ".join(f"{' '.join(s)} ×{c}" for s, c in vocab.items())
    print(tr(f"{step:2d}. merge {best[0]!s:>6} + {best[1]!s:<8} (×{counts[best]:2d})   {words}"))

assert merges == learn_bpe_by_recounting(corpus, 10) == learn_bpe(corpus, 10)
print(tr("\nthe package's learners give the same ten merges:"), learn_bpe(corpus, 10) == merges)
assert sum(len(s) == 1 for s in vocab) == 3 and ("lo", "w", "e", "r</w>") in vocab        # the prose below

# %% [markdown]
# After ten merges three of the four words are single symbols; "lower" is `lo w e r</w>` (its *w* is not at the
# end of the word, so the merge `lo + w</w>` does not apply to it). The list of merges,
# in order, *is* the learned model; written one pair a line under the header `#version: 0.2` it is a **codes
# file**, the format `subword-nmt apply-bpe` reads (`python -m minitransformer bpe learn` writes it, and the
# tests check that subword-nmt reads ours and that we write exactly what it writes). The vocabulary is the
# initial symbols plus one new symbol per merge (Sennrich et al. §3.2): the number of merges is the one knob.

# %%
symbols = initial_symbols(corpus)
bpe = BPE(merges, symbols)
print(tr(f"{len(symbols)} initial symbols + {len(merges)} merges = {len(bpe.vocabulary())} pieces:"))
print(bpe.vocabulary())
assert len(bpe.vocabulary()) == len(symbols) + len(merges)

# %% [markdown]
# ## 2. Applying the merges to words
#
# A new word is split the same way: start from its characters (the last with `</w>`), and as long as some
# adjacent pair is a learned merge, merge the one that was **learned earliest**, everywhere in the word. On
# output, each piece but the word's last gets the continuation marker `@@`; deleting every "@@ " gives the
# exact text back.

# %%
rank = {pair: k for k, pair in enumerate(merges)}
for word in ("lowest", "newer", "wider", "slowest"):
    state = list(word_symbols(word))
    trail = [" ".join(state)]
    while True:
        ranked = [(rank[p], p) for p in zip(state, state[1:]) if p in rank]
        if not ranked:
            break
        k, pair = min(ranked)
        state = list(merge(state, pair))
        trail.append(tr(f"(merge {k + 1}) {' '.join(state)}"))
    print(f"{word:8s}: " + "  →  ".join(trail))
    assert tuple(state[:-1]) + (state[-1].removesuffix(END),) == bpe.segment(word)

line = "lowest newer slowest"
print(tr("\ntokens:"), bpe.tokens(line))
print(tr("apply: "), bpe.apply(line), tr("   back:"), detokenize(bpe.tokens(line)))
assert bpe.segment("slowest") == ("s", "lo", "west") and bpe.segment("lowest") == ("lo", "west")  # the prose

# %% [markdown]
# Neither "lowest" nor "slowest" was in the corpus, yet both are covered by pieces it taught: `lo` + `west`,
# and `s` + `lo` + `west`. A character never seen in learning has no merge, so it stays a piece of its own; the model's
# vocabulary has no such piece and reads it as `<unk>`. Learning on the *training* text only matters for
# exactly this reason: the held-out sentences must be encoded the way new text would be, with whatever the
# training text taught.
#
# **Speed.** Algorithm 1 as written recounts every pair of the corpus before each merge. A merge only changes
# the words that hold its pair, and in them only the pairs next to each occurrence, so `learn_bpe` keeps the
# pair counts and an index from each pair to the words that hold it, and updates both after each merge
# (`data/bpe_learn.py` explains the heap of pairs that finds the most frequent one). On the training text of
# numbers-en-de:

# %%
from minitransformer.data.registry import load_task
from minitransformer.data import translation
from minitransformer.data.translation import load_splits

splits = load_splits("numbers-en-de", seed=0)
train_lines = [side for pair in splits["train"] for side in pair]      # both columns: one joint vocabulary
counts_train = word_counts(train_lines)
timings, learned = {}, {}
recount, incremental = tr("recount (Algorithm 1)"), tr("incremental (learn_bpe)")   # the two learners' labels
for name, learner in ((recount, learn_bpe_by_recounting), (incremental, learn_bpe)):
    t0 = time.perf_counter()
    learned[name] = learner(counts_train, 15)
    timings[name] = time.perf_counter() - t0
    print(tr(f"{name:24s}: 15 merges in {timings[name]:.2f} s"))
assert learned[recount] == learned[incremental]
print(tr(f"the same merges; {timings[recount] / timings[incremental]:.0f}x faster "
         "(benchmarks/bench_bpe.py compares 1k-8k merges with subword-nmt, sentencepiece and HF tokenizers)"))

# %% [markdown]
# ## 3. The vocabulary on real text: German number names
#
# `numbers-en-de` pairs English number names with German ones, for every number from 0 to 9 999. The German
# side is one word per number, so a word-level vocabulary needs a token for every number, and the test set's
# numbers are, by construction, ones the training split never showed. Learning merges on both columns of the
# training split, with up to 600 merges requested (learning stops early, at the count below, when no pair is
# left that occurs at least twice):

# %%
assert translation.N_NUMBERS - 1 == 9999                 # "every number from 0 to 9 999"
every = BPE.learn(counts_train, 600)
n_max = len(every.merges)
print(tr(f"{len(counts_train):,} distinct words in the training split ({sum(counts_train.values()):,} in all), "
         f"{len(every.symbols)} initial symbols; learning stopped after {n_max} merges"))
print(tr("the first 30 merges:"))
print("  ", ", ".join(f"{a}+{b}" for a, b in every.merges[:30]))

# %% [markdown]
# The merges are greedy, so the first $k$ merges of a longer run are exactly the merges of a run of $k$: one run
# gives every merge count at once. Where the pieces one would name by hand first appear:

# %%
def first_merge(piece):
    """(merge number, the pair) that first makes ``piece``, inside a word or at its end."""
    for k, (a, b) in enumerate(every.merges, start=1):
        if a + b in (piece, piece + END):
            return k, (a, b)
    return None, None


named = ["und", "zig", "hundert", "tausend", "zwanzig", "sieben", "hundred", "thousand,", "seventy-"]
found = {piece: first_merge(piece) for piece in named}
for piece, (k, pair) in found.items():
    print(f"{piece!r:12s} " + (tr(f"merge {k:3d}: {pair[0]} + {pair[1]}") if k else tr("never a single piece")))

# %%
test_src = [s for s, _ in splits["test"]]
test_tgt = [t for _, t in splits["test"]]
ks = [0, 10, 25, 50, 100, 200, 300, 400, n_max]
lengths = {"English": [], "German": []}
for k in ks:
    b = BPE(every.merges[:k])
    lengths["English"].append(np.mean([len(b.tokens(s)) for s in test_src]))
    lengths["German"].append(np.mean([len(b.tokens(t)) for t in test_tgt]))

fig, ax = plt.subplots(figsize=(6.5, 3))
for side, marker, label in (("English", "o", tr("English (test split)")), ("German", "s", tr("German (test split)"))):
    ax.plot(ks, lengths[side], marker=marker, label=label)
ax.set(xlabel=tr("merges learned on the training split"), ylabel=tr("tokens per sentence"), yscale="log",
       title=tr("numbers-en-de: longer pieces, shorter sentences"))
ax.legend(); plt.tight_layout(); plt.show()
for k in (50, 200):
    b = BPE(every.merges[:k])
    print(tr(f"{k:3d} merges: "), " | ".join(" ".join(b.tokens(t)) for t in test_tgt[:3]))

# %%
ratio_de = lengths["German"][0] / lengths["German"][ks.index(200)]
display(Markdown(tr(
    f"With no merges a German test number is {lengths['German'][0]:.1f} characters long on average; 200 merges "
    f"bring it to {lengths['German'][ks.index(200)]:.2f} pieces ({ratio_de:.0f}x shorter), and all {n_max} merges "
    f"to {lengths['German'][-1]:.2f}. The English side, already words, shortens from "
    f"{lengths['English'][0]:.1f} characters (spaces not counted) to {lengths['English'][ks.index(200)]:.2f} pieces at 200 merges. "
    f"'tausend' is one piece from merge {found['tausend'][0]}, 'hundert' from merge {found['hundert'][0]}: the "
    "first merges learn the parts every number is built of.")))

# %% [markdown]
# ## 4. The trade-off, measured
#
# `lessons/experiments/lesson13_bpe.py` trained the task's recipe of the time (`experiment.RECIPE`, printed below;
# the task's default recipe has trained faster since, `lessons/experiments/task_recipe_search.py`) for the same number of
# steps on six tokenizations of the same split: the task's own (English words, German characters), characters
# and words on both sides, and byte-pair pieces at 50, 200 and 500 merges, learned on the training split (the
# vocabulary is then 4 specials + the initial symbols + one piece per merge, shared by both sides). The columns:
#
# * **<unk> rate**: the share of the test split's target tokens that the vocabulary does not have;
# * **tokens per sentence**, source and target;
# * **attention scores per sentence**: $S^2 + T^2 + TS$ for a source of $S$ tokens (with its `<eos>`) and a
#   target of $T$ (with `<bos>`): the entries of the encoder self-attention, decoder self-attention and
#   encoder-decoder attention matrices, per layer and head; what §4 counts as the $O(n^2 \cdot d)$ term;
# * **parameters**: the embedding table is $V \times d_\text{model}$, so the vocabulary shows here;
# * **train time**: the training steps alone (no validation), on the shared machine named above, with the load
#   average at the start and the end of the run (2 cores: a load of 8 means each job had about a quarter of a
#   core, so times from runs at different loads compare only roughly);
# * **exact match, BLEU, chrF** of greedy decoding on the test pairs, always on the *detokenized* German (the
#   task's character-level BLEU), so the columns compare across tokenizations.

# %%
from minitransformer.data.registry import PRESETS
from minitransformer.runsetup import settings_for

preset, recipe_settings = settings_for(experiment.RECIPE)
cfg = PRESETS[preset]
print(tr(f"recipe: preset {preset}: d_model {cfg.d_model}, h {cfg.h}, N {cfg.N}, d_ff {cfg.d_ff}, P_drop {cfg.P_drop}, "
         f"eps_ls {cfg.eps_ls} (the vocabulary is each tokenization's own)"))
print(tr(f"        lr factor {recipe_settings.lr_factor}, warm-up {recipe_settings.warmup_steps}, clip norm "
         f"{recipe_settings.clip_norm}, batches of {recipe_settings.batch_size} pairs; test pairs: {len(splits['test']):,}"))
levels = {r["level"]: r for r in results["levels"]}
order = list(experiment.LEVELS)
assert [spec["bpe_merges"] for spec in experiment.LEVELS.values() if "bpe_merges" in spec] == [50, 200, 500]
budget = results["budget"]
header = tr("| tokenization | vocabulary | <unk> (test targets) | tokens / sentence (en → de) | attention scores / "
             "sentence | parameters | train time (load) | exact match | BLEU (char) | chrF |\n|---|---:|---:|---:|---:|"
             "---:|---:|---:|---:|---:|")
rows = [tr(f"| {name} | {r['vocab']:,} | {100 * r['unk_rate_tgt']:.1f} % | {r['mean_src_tokens']:.1f} → "
           f"{r['mean_tgt_tokens']:.1f} | {r['attention_scores_per_sentence']:,.0f} | {r['parameters']:,} | "
           f"{r['train_seconds']:.0f} s ({r['load'][0]:.0f}→{r['load'][1]:.0f}) | {100 * r['exact_match']:.1f} % | "
           f"{r['bleu']:.2f} | {r['chrf']:.2f} |")
        for name, r in ((n, levels[n]) for n in order)]
display(Markdown(tr(f"**numbers-en-de, {budget['steps']} steps × {budget['batch_size']} pairs, seed "
                    f"{budget['seed_levels']}, {len(splits['test']):,} test pairs**\n\n") + header + "\n" + "\n".join(rows)))

# %%
fig, axes = plt.subplots(1, 4, figsize=(13, 3))
names = [n.replace(" (word → char)", "\n(word→char)") for n in order]
for ax, key, title, scale in ((axes[0], "attention_scores_per_sentence", tr("attention scores / sentence"), 1),
                              (axes[1], "parameters", tr("parameters (millions)"), 1e-6),
                              (axes[2], "train_seconds", tr(f"train time for {budget['steps']} steps (s)"), 1),
                              (axes[3], "exact_match", tr("test exact match (%)"), 100)):
    ax.bar(range(len(order)), [levels[n][key] * scale for n in order], color="tab:blue")
    ax.set_xticks(range(len(order)), names, rotation=60, fontsize=7); ax.set_title(title, fontsize=9)
plt.tight_layout(); plt.show()

# %%
char, word, own = levels["char"], levels["word"], levels["own (word → char)"]
bpes = {n: levels[n] for n in order if n.startswith("bpe")}
best_bpe = max(bpes, key=lambda n: (bpes[n]["exact_match"], -bpes[n]["train_seconds"]))
b = bpes[best_bpe]
display(Markdown(tr(
    f"**Words** see every test number as a new word: {100 * word['unk_rate_tgt']:.0f} % of the test targets are "
    f"`<unk>`, and exact match is {100 * word['exact_match']:.1f} %, however well the model trains. Its vocabulary "
    f"of {word['vocab']:,} tokens makes it the largest model ({word['parameters'] / 1e6:.2f} M parameters). "
    f"**Characters** have {100 * char['unk_rate_tgt']:.0f} % `<unk>` and the smallest vocabulary "
    f"({char['vocab']}), but the sentences are "
    f"{char['mean_src_tokens']:.0f} and {char['mean_tgt_tokens']:.0f} tokens long, {char['attention_scores_per_sentence'] / b['attention_scores_per_sentence']:.0f}x "
    f"the attention scores of {best_bpe}, and the same {budget['steps']} steps took "
    f"{char['train_seconds'] / b['train_seconds']:.1f}x as long ({char['train_seconds']:.0f} s against "
    f"{b['train_seconds']:.0f} s) for {100 * char['exact_match']:.1f} % exact match against "
    f"{100 * b['exact_match']:.1f} %. The task's own mix (words in, characters out) reaches "
    f"{100 * own['exact_match']:.1f} %. Among the byte-pair runs, ")
    + ", ".join(tr(f"{n} gets {100 * r['exact_match']:.1f} % in {r['train_seconds']:.0f} s") for n, r in bpes.items())
    + "."))

# %% [markdown]
# Each row is one seed. How far apart two seeds of the *same* setting land is measured in section 6, where the
# 200-merge model was trained three more times for the same budget:

# %%
seed_em = [100 * r["final"]["exact_match"] for r in results["average"]]
rows_em = {n: 100 * levels[n]["exact_match"] for n in order if n != "word"}
spread = max(seed_em) - min(seed_em)
gap = max(rows_em.values()) - min(rows_em.values())
fastest = min(rows_em, key=lambda n: levels[n]["train_seconds"])
display(Markdown(tr(
    f"The three seeds of bpe 200 end at {', '.join(f'{v:.1f} %' for v in seed_em)} exact match: a spread of "
    f"{spread:.1f} points. The tokenizations other than words lie within {gap:.1f} points of each other ")
    + (tr("(less than that spread), so one seed each does not rank them by accuracy. ")
       if gap <= spread else tr("(more than that spread). "))
    + tr(f"What the table does resolve is the cost: the fastest, {fastest}, trained the same steps in "
    f"{levels[fastest]['train_seconds']:.0f} s, {levels['char']['train_seconds'] / levels[fastest]['train_seconds']:.1f}x "
    f"less than characters on both sides (at a load of {levels[fastest]['load'][0]:.0f} against "
    f"{levels['char']['load'][0]:.0f}): its sentences are {levels[fastest]['mean_src_tokens']:.1f} and "
    f"{levels[fastest]['mean_tgt_tokens']:.1f} pieces long against {levels['char']['mean_src_tokens']:.1f} and "
    f"{levels['char']['mean_tgt_tokens']:.1f} characters, every layer's work shrinks with the length, and the "
    f"attention scores {levels['char']['attention_scores_per_sentence'] / levels[fastest]['attention_scores_per_sentence']:.0f}x. "
    "Words, the other way to get short sequences, cannot translate a number they have not seen.")))

# %% [markdown]
# ### Recomputed live
#
# Everything in the table that needs no training, recomputed now from the package: vocabulary, parameters,
# `<unk>` rate, lengths and attention scores must equal the script's exactly (they are counts, and the split,
# the merges and the model sizes are deterministic).

# %%
live_stats = {}
for name in order:
    task = load_task("numbers-en-de", **experiment.LEVELS[name])
    live_stats[name] = experiment.tokenization_stats(task)
    for key, value in live_stats[name].items():
        assert value == levels[name][key], (name, key, value, levels[name][key])
print(tr("vocabulary, parameters, <unk> rates, lengths and attention scores: all"),
      len(order) * len(live_stats[order[0]]), tr("values equal to the JSON's"))

# %% [markdown]
# And the first 100 steps of the byte-pair run with 200 merges, trained here with the script's own function
# (`experiment.live_run`: `train_steps` with that recipe, seed 0). The training loss logged at step 100 (the
# mean over steps 91–100) must match the JSON's within the tolerance the script measured by re-running this run on
# four processors' arithmetic (their BLAS kernels and SIMD code; lessons/experiments/README.md): after 100 steps,
# another order of the float32 additions has moved the loss by little, so a larger difference means the
# arithmetic changed. The run also keeps its last checkpoints (`keep_last`), for section 6.

# %%
import os
import tempfile

from threadpoolctl import threadpool_limits

from minitransformer.snapshots import kept_checkpoints

live_dir = tempfile.mkdtemp(prefix="lesson13-")
task200 = load_task("numbers-en-de", level="bpe", bpe_merges=200)
with threadpool_limits(1):                                    # one BLAS thread, as the script ran
    trainer, history, seconds = experiment.live_run(task200, out_dir=live_dir)
live_loss = experiment.loss_at(history, 100)
stored_loss = levels["bpe 200"][f"loss_at_{experiment.LOSS_AT}"]
print(tr(f"loss at step 100: live {live_loss:.6f}, JSON {stored_loss:.6f}  ({seconds:.0f} s for 100 steps here)"))
print(tr("the live run agrees with the JSON:"), *experiment.check_live(results, history), sep="\n  ")

# %% [markdown]
# ## 5. Which pieces the model uses
#
# With 200 merges, the pieces the test split's German is made of, most frequent first, with the merge that made
# each (a piece that needs no merge is a character):

# %%
assert len(task200.bpe.merges) == 200                            # the text above
used = Counter(piece for _, tgt in task200.test for piece in tgt)
merge_of = {}
for k, (a, c) in enumerate(task200.bpe.merges, start=1):
    merge_of.setdefault((a + c).removesuffix(END) + ("" if (a + c).endswith(END) else "@@"), k)
print(tr(f"{len(used)} distinct pieces in the test targets, of a vocabulary of {len(task200.vocab)}:"))
for piece, n in used.most_common(24):
    print(f"   {piece:>16s}  ×{n:4d}   " + (tr(f"merge {merge_of[piece]}") if piece in merge_of else tr("a character")))

# %% [markdown]
# The model writes a number the way German builds it: thousands, hundreds, then the units and tens joined by
# "und" (*vier-und-zwanzig*, "four and twenty"). Pieces like `tausend@@` and `hundert@@` end in `@@`: they
# continue into the next piece of the same word, which is how the model can write a compound it has never seen
# as a whole.

# %% [markdown]
# ## 6. Checkpoint averaging (§6.1)
#
# For every parameter tensor $\theta$ and the last $K$ checkpoints $\theta_1, \dots, \theta_K$ of one run,
#
# $$\bar\theta = \frac{1}{K}\sum_{k=1}^{K} \theta_k ,$$
#
# element by element. Late in a run the checkpoints lie close together around a minimum, and their mean tends to
# lie nearer its centre than any one of them: an ensemble of sorts that costs nothing at inference. It only makes
# sense for checkpoints of one run (the same model, vocabulary and tokenization, from the same initialization),
# and `average.average_checkpoints` refuses anything else, each reason with its own error. From the command line:
#
# ```bash
# python -m minitransformer train --task numbers-en-de --level bpe --bpe-merges 200 --keep-last 5 --out runs/de
# python -m minitransformer average runs/de/checkpoint.step*.npz -o runs/de/average.npz
# python -m minitransformer evaluate --checkpoint runs/de/average.npz --task numbers-en-de
# ```
#
# The average holds no optimizer state (Adam's moments belong to one point of one run), and says it is an
# average, so `train --resume` refuses it by name. The live run above kept its last five checkpoints:

# %% [markdown]
# **Predict.** The live run above trained for 100 steps and kept its last five checkpoints. Which has the lower test perplexity: `"average"` (the mean of the five) or `"final"` (the last checkpoint alone)?

# %% tags=["predict"]
my_prediction_13_2 = None   # "average" or "final"


# %%
from minitransformer.average import average_checkpoints
from minitransformer.checkpoint import load_checkpoint

kept = kept_checkpoints(live_dir)
print(tr("kept:"), ", ".join(os.path.basename(p) for _, p in kept))
ckpts = [load_checkpoint(p) for _, p in kept]
avg = average_checkpoints(ckpts)
name = "E"                                                    # the shared embedding (§3.4)
mean = np.mean([dict(c.model.named_parameters())[name].data.astype(np.float64) for c in ckpts], axis=0)
print(tr(f"{name}: the average is the element-wise mean, largest difference "
         f"{np.abs(dict(avg.model.named_parameters())[name].data - mean).max():.1e}"))
print(tr(f"marked as an average of {len(avg.extra['average']['sources'])} checkpoints (steps "
         f"{', '.join(map(str, avg.extra['average']['steps']))}); optimizer state: {avg.optimizer_state}"))
early = {tr("final (step 100)"): experiment.perplexity(ckpts[-1].model, task200.vocab, task200.test),
         tr(f"average of steps {', '.join(str(k) for k, _ in kept)}"): experiment.perplexity(avg.model, task200.vocab,
                                                                                             task200.test)}
for label, ppl in early.items():
    print(tr(f"{label:34s}: test perplexity {ppl:.3f}"))

# %% tags=["reveal"]
from lessonkit.predict import reveal

final_ppl_live, average_ppl_live = early.values()
reveal(my_prediction_13_2, "average" if average_ppl_live < final_ppl_live else "final",
       what="the lower test perplexity after 100 steps", choices=("average", "final"))


# %%
final_ppl, avg_ppl = early.values()
display(Markdown(tr(
    f"After 100 steps the weights still move fast: the kept checkpoints span steps {kept[0][0]} to {kept[-1][0]}, "
    f"and their average has test perplexity {avg_ppl:.2f} against the final checkpoint's {final_ppl:.2f} ")
    + (tr("(worse: the mean mixes the much worse early models in). That is why §6.1 averages only the last "
          "checkpoints of a long run.") if avg_ppl > final_ppl else
       tr("(better even here, though §6.1 averages only the last checkpoints of a long run)."))
    + tr(" The script trained the 200-merge model for the full budget with three seeds, keeping a checkpoint every "
         f"{results['averaged']['every']} steps, and compared the final checkpoint with the average of the last five:")))

# %%
avg_runs = sorted(results["average"], key=lambda r: r["seed"])
setup = results["averaged"]
rows = []
for r in avg_runs:
    f, a = r["final"], r["average"]
    rows.append(f"| {r['seed']} | {', '.join(map(str, r['kept_steps']))} | {f['perplexity']:.4f} | "
                f"{a['perplexity']:.4f} | {100 * f['exact_match']:.1f} % | {100 * a['exact_match']:.1f} % | "
                f"{f['bleu']:.2f} | {a['bleu']:.2f} |")
display(Markdown(tr(
    f"**{setup['level']}, {avg_runs[0]['steps']} steps, a checkpoint every {setup['every']} steps, the last "
    f"{setup['keep_last']} averaged; {len(splits['test']):,} test pairs, greedy**\n\n"
    "| seed | steps averaged | PPL final | PPL average | exact final | exact average | BLEU final | BLEU average |\n"
    "|---:|---|---:|---:|---:|---:|---:|---:|\n") + "\n".join(rows) + tr("\n\n"
    "| | the paper (§6.1) | here |\n|---|---|---|\n"
    "| checkpoints averaged | the last 5 (base), the last 20 (big) | the last 5 |\n"
    f"| written every | 10 minutes (base: 100 000 steps in 12 hours, so about {100_000 / (12 * 6):,.0f} steps) | "
    f"{setup['every']} steps |\n"
    f"| span averaged (first to last) | {100 * 4 * 10 / (12 * 60):.1f} % of the run (base: 40 minutes of 12 hours) | "
    f"{100 * (avg_runs[0]['kept_steps'][-1] - avg_runs[0]['kept_steps'][0]) / avg_runs[0]['steps']:.1f} % of the run |\n"
    "| what is reported | BLEU of the average only (Table 2); no single-checkpoint figure | both, per seed |")))

# %%
fig, ax = plt.subplots(figsize=(6.5, 3))
for r in avg_runs:
    line, = ax.plot(r["kept_steps"], r["kept_perplexities"], marker="o", label=tr(f"seed {r['seed']}: checkpoints"))
    ax.axhline(r["average"]["perplexity"], color=line.get_color(), ls="--", lw=1)
ax.set(xlabel=tr("training step of the kept checkpoint"), ylabel=tr("test perplexity (per piece)"),
       title=tr("the last five checkpoints (dots) and their average (dashed)"))
ax.legend(fontsize=7); plt.tight_layout(); plt.show()

# %%
ppl_gain = [r["final"]["perplexity"] - r["average"]["perplexity"] for r in avg_runs]
em_gain = [100 * (r["average"]["exact_match"] - r["final"]["exact_match"]) for r in avg_runs]
better = sum(g > 0 for g in ppl_gain)
display(Markdown(
    tr(f"On {better} of {len(avg_runs)} seeds the average has the lower test perplexity (final minus average: ")
    + ", ".join(f"{g:+.4f}" for g in ppl_gain)
    + tr(f"); exact match changes by {', '.join(f'{g:+.1f}' for g in em_gain)} points. ")
    + (tr("At this scale averaging is a small, consistent gain in perplexity, as §6.1 uses it: nothing to pay, "
          "nothing to tune beyond how many checkpoints and how far apart.")
       if better == len(avg_runs) else
       tr("So at this scale averaging is not a reliable gain: the checkpoints still move along the loss "
          "landscape rather than around one minimum, and their mean lands between them."))))

# %% [markdown]
# ## Exercises
#
# Each checking cell prints *not attempted yet* until you fill in the function above it; a wrong answer raises
# `WrongAnswer` (an `AssertionError`) that says what is wrong, with a `hint:` line for the usual slips. In the
# full notebook the solutions follow at the end.
#
# ### Exercise 13.1 — one merge step
#
# Write `my_merge_step(vocab)`: `vocab` maps each word, as a tuple of symbols, to its count, e.g.
# `{("l", "o", "w</w>"): 5, ...}`. Return `(pair, new_vocab)`: the most frequent pair of adjacent symbols
# (counted with the words' counts; a tie to the greatest pair) and the vocabulary with that pair merged
# everywhere, left to right.

# %% tags=["stub"]
def my_merge_step(vocab):
    """{tuple of symbols: count} -> ((first, second), {tuple of symbols: count})."""
    # your code here
    return None


# %% tags=["check"]
from lessonkit.exercises.lesson_13 import check_average_two, check_merge_step, check_segment

check_merge_step(my_merge_step)


# %% [markdown]
# ### Exercise 13.2 — a word's pieces
#
# Write `my_segment(word, merges)`: the pieces of `word` under the learned `merges` (a list of pairs, in the
# order learned), as a list of strings without markers: `["lo", "west"]` for "lowest" with the ten merges of
# section 1.

# %% tags=["stub"]
def my_segment(word, merges):
    """str, [(first, second), ...] -> [piece, ...]."""
    # your code here
    return None


# %% tags=["check"]
check_segment(my_segment)


# %% [markdown]
# ### Exercise 13.3 — averaging two checkpoints
#
# Write `my_average_two(a, b)`: `a` and `b` map parameter names to float32 arrays, as
# `{name: p.data for name, p in model.named_parameters()}` gives them. Return a new dict of their element-wise
# means, in the parameters' dtype, leaving `a` and `b` as they were; for two checkpoints of different models
# (other names or shapes), raise `ValueError`.

# %% tags=["stub"]
def my_average_two(a, b):
    """{name: array}, {name: array} -> {name: (a[name] + b[name]) / 2}."""
    # your code here
    return None


# %% tags=["check"]
check_average_two(my_average_two)


# %% [markdown] tags=["solution"]
# ## Solutions

# %% tags=["solution"]
from collections import Counter


def merge_step_solution(vocab):
    counts = Counter()
    for symbols, count in vocab.items():
        for pair in zip(symbols, symbols[1:]):
            counts[pair] += count                                   # weighted by the word's count
    best = max(counts, key=lambda pair: (counts[pair], pair))     # a tie goes to the greatest pair

    def merged(symbols):
        out, i = [], 0
        while i < len(symbols):
            if tuple(symbols[i:i + 2]) == best:
                out.append(best[0] + best[1])
                i += 2
            else:
                out.append(symbols[i])
                i += 1
        return tuple(out)

    return best, {merged(symbols): count for symbols, count in vocab.items()}


check_merge_step(merge_step_solution)


# %% tags=["solution"]
def segment_solution(word, merges):
    rank = {}
    for k, pair in enumerate(merges):
        rank.setdefault(tuple(pair), k)                             # a repeated merge counts where it came first
    symbols = [*word[:-1], word[-1] + "</w>"]
    while True:
        ranked = [(rank[p], p) for p in zip(symbols, symbols[1:]) if p in rank]
        if not ranked:
            break
        first, second = min(ranked)[1]                              # the merge learned earliest
        out, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == (first, second):
                out.append(first + second)
                i += 2
            else:
                out.append(symbols[i])
                i += 1
        symbols = out
    symbols[-1] = symbols[-1][: -len("</w>")]                       # the marker is not part of the text
    return symbols


check_segment(segment_solution)


# %% tags=["solution"]
def average_two_solution(a, b):
    if a.keys() != b.keys():
        raise ValueError(f"different parameters: {sorted(a.keys() ^ b.keys())[:3]}")
    for name in a:
        if a[name].shape != b[name].shape:
            raise ValueError(f"{name}: shapes {a[name].shape} and {b[name].shape} differ")
    return {name: ((a[name].astype(np.float64) + b[name]) / 2).astype(a[name].dtype) for name in a}


check_average_two(average_two_solution)

# %%
print(tr(f"this notebook ran in {time.perf_counter() - LESSON_START:.0f} s "
         f"({time.process_time():.0f} s of CPU time in this kernel)"))
