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
# # Lesson 14 — Many processes: data-parallel training (§5.2)
#
# "We trained our models on one machine with 8 NVIDIA P100 GPUs" (§5.2). Lesson 9 trained on one process. This
# lesson splits every batch between several processes, as the paper's 8 GPUs did, and checks the one thing that must
# hold: the update is the one a single process would make on the whole batch.
#
# * why: the paper's step times and batch sizes, and what one step would cost on one device;
# * the identity behind it: the gradient of a batch is a sum over its tokens, so shards can be summed;
# * **allreduce**, the sum that every process receives, written by hand as a ring (reduce-scatter, then all-gather),
#   compared with MPI's own, with its cost model and its measured time on 2 and 4 processes;
# * **the token-count trap**: averaging the processes' mean losses is wrong when their shards hold different numbers
#   of tokens, with numbers; then the package's runs on 1, 2 processes, equal;
# * **gradient accumulation**, the same identity in time instead of space;
# * what changes on GPUs, and what this package does and does not do.
#
# | what | where in the package |
# | --- | --- |
# | a run on N processes | `mpiexec -n N python -m minitransformer train ...` (the `[mpi]` extra: mpi4py and the MPICH wheel) |
# | the ranks, sharding a global batch by tokens, the gradient sum, the parameter hash check | `minitransformer.distributed`: `world`, `shard_batch`, `step_batches`, `GradientSum`, `check_in_sync` |
# | each shard's weight $n_r / n$ in the step | `minitransformer.train.Trainer.train_step` |
# | gradient accumulation: the global batch cut into $K$ micro-batches as ranks cut it into shards | `train --accumulate K` (`TrainSettings.accumulate`), `distributed.split_batch` |
# | the ring allreduce of this lesson, its simulated ranks and checkers | `lessonkit.exercises.lesson_14` |
#
# Processes are started with `mpiexec` from cells below, through `subprocess`: a notebook is one process.
#
# **What it trains:** a tiny copy model for a few steps, four times (on one process and on 2 ranks; with and without
# gradient accumulation), and it times MPI messages on 2 and 4 ranks. The cell below says how long the whole
# lesson takes.
#
# **Terms:** each term of these lessons, in English and as Korean texts write it, is in [the glossary](docs/glossary.md).

# %%
from lessonkit.runtimes import show_cost

show_cost("14")

# %%
# %matplotlib inline
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import matplotlib.pyplot as plt

from lessonkit.i18n import tr
from minitransformer import backend, machine

plt.rcParams.update({"figure.dpi": 80, "savefig.dpi": 80, "font.size": 9})
np.set_printoptions(precision=4, suppress=True, linewidth=110)
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
REPO = pathlib.Path.cwd().parent          # the notebook runs in lessons/
assert MPIEXEC, "mpiexec not found: install the MPI extra, pip install -e '.[mpi]' (mpi4py and the MPICH wheel)"
print("mpiexec:", MPIEXEC)
print(tr("machine:"), machine.machine_summary())


def mpiexec(n, *args, env=None, timeout=300):
    """Run `python *args` on n processes; return its standard output (an error shows standard error)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OPENBLAS_NUM_THREADS="1", **(env or {}))
    cmd = ([MPIEXEC, "-n", str(n)] if n > 1 else []) + [sys.executable, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return out.stdout


# %% [markdown]
# ## 1. Why many processes
#
# §5.2 gives the hardware and the times: the base model trained for 100 000 steps of about 0.4 s, the big model for
# 300 000 steps of 1.0 s; §5.1 gives the batch: about 25 000 source and 25 000 target tokens. The paper does not say
# how the work was divided between its 8 GPUs. The usual way, and the one of this lesson, is **data parallelism**:
# every GPU holds the whole model and takes 1/8 of each batch.

# %%
steps_base, s_base, steps_big, s_big = 100_000, 0.4, 300_000, 1.0                     # §5.2
tokens_per_batch, gpus = 25_000 + 25_000, 8                                              # §5.1, §5.2
print(tr(f"base: {steps_base:,} steps x {s_base} s = {steps_base * s_base / 3600:.1f} hours (the paper: 12 hours)"))
print(tr(f"big:  {steps_big:,} steps x {s_big} s = {steps_big * s_big / 86400:.1f} days (the paper: 3.5 days)"))
print(tr(f"per GPU and step: {tokens_per_batch // gpus:,} of the batch's {tokens_per_batch:,} tokens"))

# %% [markdown]
# What the 8 GPUs must exchange every step is the gradient: one number per parameter. The count, from the shapes
# of lesson 7 (one embedding matrix shared three ways; per encoder layer one attention and one FFN, per decoder
# layer two attentions and one FFN, each sub-layer with its LayerNorm), checked against the package's own count:

# %%
from minitransformer.data.registry import PRESETS
from minitransformer.model import Transformer


def parameter_count(cfg):
    d, f = cfg.d_model, cfg.d_ff
    attention = 4 * d * d + 4 * d                       # W_Q, W_K, W_V, W_O and their biases
    ffn = 2 * d * f + f + d
    norm = 2 * d                                        # gamma, beta
    return cfg.vocab_size * d + cfg.N * (attention + ffn + 2 * norm) + cfg.N * (2 * attention + ffn + 3 * norm)


for name in ("tiny", "copy", "translate"):
    assert parameter_count(PRESETS[name]) == Transformer(PRESETS[name], seed=0).num_parameters(), name
base = PRESETS["base"].with_(vocab_size=37_000)         # §6.1: a shared vocabulary of about 37 000 tokens
P_base = parameter_count(base)
ring_mb = 2 * (gpus - 1) / gpus * 4 * P_base / 1e6     # a ring allreduce, float32 (section 3)
print(tr(f"base model, V = 37 000: {P_base:,} parameters (Table 3 says 65 x 10^6)"))
print(tr(f"a ring allreduce of its float32 gradient sends {ring_mb:.0f} MB per GPU and step: {ring_mb / s_base / 1e3:.2f} "
         f"GB/s to keep up with a {s_base} s step if nothing overlaps"))

# %% [markdown]
# ## 2. The identity: a batch's gradient is a sum
#
# The loss of a batch is the mean over its $n$ non-pad target tokens (§5.4, lesson 9):
# $L = \frac{1}{n}\sum_{i=1}^{n} \ell_i$. Split the batch between $N$ processes; rank $r$ holds $n_r$ of the tokens
# and computes the mean over its own, $L_r = \frac{1}{n_r}\sum_{i \in r} \ell_i$. Then
#
# $$\nabla L = \frac{1}{n}\sum_{i} \nabla\ell_i = \sum_{r=1}^{N} \frac{n_r}{n}\,\nabla L_r .$$
#
# So each rank scales its gradient by $n_r / n$ (the package scales `dlogits`, the first gradient of the backward,
# which is cheaper than scaling every parameter's), the ranks **sum** their gradients, and every rank applies the
# same Adam update to the same parameters. $n$ needs no message: every rank holds the whole plan of the global
# batch and counts it. Note the weights: $n_r / n$, not $1/N$. Section 4 shows what $1/N$ costs.
#
# ## 3. Allreduce, by hand: a ring
#
# The sum that every rank receives is an **allreduce**. MPI has one (`MPI_Allreduce`); here is the classic
# algorithm behind large ones, the ring. The vector is cut into $N$ chunks, and the ranks stand in a ring, each
# sending only to its right neighbour:
#
# * **reduce-scatter**, $N-1$ steps: each rank sends one chunk to the right and adds the chunk arriving from the
#   left into its own copy. Afterwards rank $r$ holds the complete sum of chunk $(r+1) \bmod N$;
# * **all-gather**, $N-1$ steps: the complete chunks travel around the ring, each rank keeping what arrives.
#
# Which ranks' numbers each chunk holds, on 3 ranks (a cell `012` holds the sum of ranks 0, 1 and 2):

# %%
from lessonkit.exercises.lesson_14 import ring_trace

trace = ring_trace(3)
print(f"{'':<22}" + " | ".join(f"rank {r}".ljust(11) for r in range(3)))
print(f"{'chunk':<22}" + " | ".join(" ".join(str(c).ljust(3) for c in range(3)) for _ in range(3)))
for label, state in trace:
    print(f"{label:<22}" + " | ".join(" ".join("".join(map(str, sorted(c))).ljust(3) for c in row) for row in state))
assert all(c == frozenset(range(3)) for row in trace[-1][1] for c in row)

# %% [markdown]
# **Its cost.** Every step sends one chunk, $n/N$ numbers, and there are $2(N-1)$ steps. With a latency $\alpha$
# per message and $\beta$ seconds per byte,
#
# $$T_\text{ring} \approx 2(N-1)\,\alpha + \frac{2(N-1)}{N}\, b\, \beta$$
#
# for a vector of $b$ bytes. The bandwidth term is almost independent of $N$: each rank sends less than twice the
# vector however many ranks there are, which is why the ring scales to many GPUs. (Sending every rank the whole
# vector would cost $(N-1)\,b$ per rank.)
#
# `lessonkit.exercises.lesson_14.ring_allreduce` is the ring in NumPy with mpi4py's point-to-point
# `Sendrecv` (you write your own in Exercise 14.1). Run under `mpiexec`, that module times it against MPI's own
# `Allreduce` on float32 vectors of 4 kB to 4 MB, and checks the two agree: to float32 rounding on random numbers
# (the ring adds in another order), exactly on whole numbers (every order gives the same sum).

# %%
sizes = [1_000, 10_000, 100_000, 1_000_000]
assert (4 * sizes[0], 4 * sizes[-1]) == (4_000, 4_000_000)     # float32 vectors of 4 kB to 4 MB, as the text says
timing = {N: json.loads(mpiexec(N, "-m", "lessonkit.exercises.lesson_14", *map(str, sizes)))
          for N in (2, 4)}
print(tr(f"{timing[2]['library']}; {os.cpu_count()} cores, so 4 ranks share them; load {os.getloadavg()[0]:.1f}"))
print(f"{'ranks':>5} {'float32s':>9} {'bytes':>9} {'ring ms':>8} {'MPI ms':>7} {'ring/MPI':>8} {'max diff':>9} exact ints")
for N, t in timing.items():
    for n, ring, mpi, diff, exact in zip(t["sizes"], t["ring_s"], t["mpi_s"], t["max_difference"],
                                         t["exact_on_integers"]):
        print(f"{N:>5} {n:>9,} {4 * n:>9,} {1e3 * ring:>8.2f} {1e3 * mpi:>7.2f} {ring / mpi:>8.1f} {diff:>9.1e} {exact}")
        assert diff < 1e-5 and exact                       # the hand-written ring computes MPI's sum

# %% [markdown]
# The cost model, fitted to the ring's times (least squares over both rank counts): the latency and the
# bandwidth of this machine's shared-memory messages, with the line it predicts.

# %%
rows = [(2 * (N - 1), 2 * (N - 1) / N * 4 * n, ring) for N, t in timing.items() for n, ring in zip(t["sizes"], t["ring_s"])]
A = np.array([[a, b] for a, b, _ in rows])
alpha, beta = np.linalg.lstsq(A, np.array([t for _, _, t in rows]), rcond=None)[0]
print(tr(f"fitted: alpha = {1e6 * alpha:.0f} microseconds per message, 1 / beta = {1 / beta / 1e9:.2f} GB/s")
      if beta > 0 else tr("the fit found no bandwidth term (the machine's load hid it): rerun when it is quieter"))
fig, ax = plt.subplots(figsize=(6, 3))
for N, t, mark in ((2, timing[2], "o"), (4, timing[4], "s")):
    b = 4 * np.array(t["sizes"])
    ax.loglog(b, 1e3 * np.array(t["ring_s"]), mark + "-", label=tr(f"ring, {N} ranks"))
    ax.loglog(b, 1e3 * np.array(t["mpi_s"]), mark + ":", label=tr(f"MPI_Allreduce, {N} ranks"))
    if beta > 0:
        ax.loglog(b, 1e3 * (2 * (N - 1) * alpha + 2 * (N - 1) / N * b * beta), color="gray", lw=0.6)
ax.set(xlabel=tr("bytes summed"), ylabel=tr("ms (the slowest rank's best)"), title=tr(f"allreduce on this machine; load "
       f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (grey: the fitted model)"))
ax.legend(fontsize=7); plt.tight_layout(); plt.show()

# %%
from lessonkit.prose import claim, claim_true, show_markdown

settings_timed = [(N, n, ring / mpi) for N, t in timing.items() for n, ring, mpi in zip(t["sizes"], t["ring_s"], t["mpi_s"])]
mpi_faster = [(N, n) for N, n, ratio in settings_timed if ratio > 1]
latency_words = (tr("dwarfs the few microseconds of a real interconnect") if alpha > 20e-6 else
                 tr("is of the order of a real interconnect's few microseconds"))
show_markdown(
    "On this machine the \"network\" is shared memory between processes; with more ranks than cores "
    f"({os.cpu_count()} here), each message also waits for the receiving process to be scheduled. The fitted "
    f"latency term, {1e6 * alpha:,.0f} µs per message here, {latency_words}. MPI's `Allreduce` is faster than our "
    f"ring in {len(mpi_faster)} of the {len(settings_timed)} settings timed (the ratio ring/MPI ranges from "
    f"{min(r for *_, r in settings_timed):.1f} to {max(r for *_, r in settings_timed):.1f}); where it is, that is "
    "because it chooses an algorithm by size and rank count, and it does not go through Python for every chunk.")

# %% [markdown]
# ## 4. The token-count trap, with numbers
#
# Take one batch of the copy task, 48 sentences of 1 to 10 symbols sorted by length as the batcher sorts them, and
# give each of 2 ranks half of the sentences. The long half holds far more tokens than the short half:

# %% [markdown]
# **Predict**, before the cell below. (1) 48 sentences of the copy task, sorted by length and cut in half between 2 ranks: how many times the target tokens of the short half does the long half hold? (2) Each rank takes the mean loss over its own tokens, and the two gradients are simply averaged: how far is that from the one-process gradient (the largest relative difference)? About `1e-16` (rounding), `1e-3`, or `1e-1`?

# %% tags=["predict"]
my_prediction_14_1 = None   # a number: tokens of the long half over the short half


# %% tags=["predict"]
my_prediction_14_2 = None   # a number: the plain average's relative difference


# %%
from minitransformer.data.batching import make_batch
from minitransformer.data.registry import load_task
from minitransformer.distributed import shard_batch
from minitransformer.layers.loss import LabelSmoothedCrossEntropy
from minitransformer.train import encode_pairs
from minitransformer.runsetup import build_model

backend.set_default_dtype("float64")                          # float64: differences are the method's, not rounding
copy_task = load_task("copy", seed=0)
cv = copy_task.vocab
pairs = encode_pairs(cv, copy_task.train[:48])
order = sorted(range(48), key=lambda k: (len(pairs[k][0]), len(pairs[k][1])))
model = build_model(copy_task, "tiny", seed=0, P_drop=0.0, eps_ls=0.1)
loss_fn = LabelSmoothedCrossEntropy(cv.pad_id, 0.1)


def batch_of(ks):
    return make_batch([pairs[k][0] for k in ks], [pairs[k][1] for k in ks], cv.pad_id, cv.bos_id, cv.eos_id)


def loss_and_gradient(batch, scale=1.0):
    """The batch's mean loss, and its gradient (dlogits scaled by `scale`) as one flat vector."""
    model.zero_grad()
    logits = model.forward(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    loss = loss_fn.forward(logits, batch.tgt_out)
    model.backward(loss_fn.backward() * scale)
    return loss, np.concatenate([p.grad.ravel() for p in model.parameters()])


L_whole, g_whole = loss_and_gradient(batch_of(order))
n_whole = batch_of(order).n_tokens


def compare_splits(shards, title):
    batches = [batch_of(s) for s in shards]
    n = [b.n_tokens for b in batches]
    parts = [loss_and_gradient(b) for b in batches]           # each rank: the mean over its own tokens
    naive_L, naive_g = np.mean([L for L, _ in parts]), sum(g for _, g in parts) / len(parts)
    right_L = sum(L * k / sum(n) for (L, _), k in zip(parts, n))
    right_g = sum(g * (k / sum(n)) for (_, g), k in zip(parts, n))

    def err(g):
        return np.abs(g - g_whole).max() / np.abs(g_whole).max()

    print(tr(f"{title}: {[len(s) for s in shards]} sentences, {n} target tokens (one process: {n_whole})"))
    print(tr(f"   loss:     one process {L_whole:.6f} | plain average of the ranks' {naive_L:.6f} | weighted n_r/n {right_L:.6f}"))
    print(tr(f"   gradient: max relative difference from one process: plain average {err(naive_g):.1e}, "
             f"weighted n_r/n {err(right_g):.1e}"))
    return err(naive_g), err(right_g)


by_sentences = compare_splits(np.array_split(order, 2), tr("split by sentence count"))
costs = [len(pairs[k][0]) + len(pairs[k][1]) + 1 for k in order]
by_tokens = compare_splits([shard_batch(order, costs, r, 2) for r in range(2)], tr("split by tokens (the package's)"))
assert by_sentences[1] < 1e-12 and by_tokens[1] < 1e-12 and by_sentences[0] > 1e-2 and by_tokens[0] > 1e-5

halves = [batch_of(s).n_tokens for s in np.array_split(order, 2)]
by_token_counts = [batch_of(shard_batch(order, costs, r, 2)).n_tokens for r in range(2)]
claim_true("the long half holds far more tokens than the short half (over twice as many)", halves[1] > 2 * halves[0],
           f"{halves}")
claim_true("splitting by tokens shrinks the plain average's error but does not remove it",
           1e-12 < by_tokens[0] < by_sentences[0], f"{by_tokens[0]:.1e} against {by_sentences[0]:.1e}")
claim("the token split's counts still differ by a few tokens (at most 5% of the batch)",
      abs(by_token_counts[0] - by_token_counts[1]), low=1, high=0.05 * n_whole)

# %% tags=["reveal"]
from lessonkit.predict import reveal

reveal(my_prediction_14_1, halves[1] / halves[0], what="target tokens of the long half over the short half")
reveal(my_prediction_14_2, float(by_sentences[0]), what="largest relative difference of the plain average from one process")


# %% [markdown]
# The plain average of the ranks' mean losses treats every rank's tokens as if there were as many on each rank, so
# the short sentences weigh as much as the long ones: its gradient is off by a fraction you can read above, not by
# rounding. The package splits each batch by tokens, which shrinks the error of the plain average but does not
# remove it (the counts still differ by a few tokens); the weights $n_r/n$ make it exact on any split.
#
# **The package does it.** The same training run, 20 steps on a small copy file, in float64 with $P_\text{drop} = 0$,
# on one process and on 2 ranks (whose shards hold different numbers of pad tokens):

# %%
work = pathlib.Path(tempfile.mkdtemp(prefix="lesson14-"))
rng = np.random.default_rng(0)
lines, seen = [], set()
while len(lines) < 800:
    src = " ".join(map(str, rng.integers(0, 10, int(rng.integers(1, 11)))))
    if src not in seen:
        seen.add(src)
        lines.append(f"{src}\t{src}\n")
(work / "copy.tsv").write_text("".join(lines), encoding="utf-8")
run = ["-m", "minitransformer", "train", "--data", str(work / "copy.tsv"), "--level", "word", "--preset", "tiny",
       "--set", "P_drop=0", "--batch-size", "32", "--steps", "20", "--valid-every", "10", "--no-progress"]
assert run[run.index("--steps") + 1] == "20"                    # the text above
f64 = {"MINITRANSFORMER_DTYPE": "float64"}
one = mpiexec(1, *run, "--out", str(work / "one"), env=f64)
two = mpiexec(2, *run, "--out", str(work / "two"), "--check-sync-every", "1", env=f64)
print(next(line for line in two.splitlines() if line.startswith("data parallel")))

# %%
from minitransformer.checkpoint import load_checkpoint


def max_difference(a, b, part="all"):
    """max |a - b| / max |a| over named parameters: "all" of them, "without b_K", or the key biases "b_K" alone
    (b_K: the middle third of each attention's b_qkv)."""
    worst = 0.0
    for name in a:
        x, y = a[name].data.ravel(), b[name].data.ravel()
        if name.endswith("b_qkv"):
            keys = np.s_[x.size // 3: 2 * x.size // 3]
            x, y = {"all": (x, y), "b_K": (x[keys], y[keys]),
                    "without b_K": (np.delete(x, keys), np.delete(y, keys))}[part]
        elif part == "b_K":
            continue
        worst = max(worst, float(np.abs(x - y).max()))
    return worst / max(float(np.abs(p.data).max()) for p in a.values())


a = dict(load_checkpoint(str(work / "one" / "checkpoint.npz")).model.named_parameters())
b = dict(load_checkpoint(str(work / "two" / "checkpoint.npz")).model.named_parameters())
everything, without_bK, in_bK = (max_difference(a, b, part) for part in ("all", "without b_K", "b_K"))
print(tr(f"after 20 steps, 2 ranks vs 1 process: max |difference| / max |parameter| = {everything:.1e} over all parameters;"))
print(tr(f"   {without_bK:.1e} without the key biases b_K, {in_bK:.1e} in them"))
assert without_bK < 1e-10 and in_bK < 1e-8

# %% [markdown]
# Every parameter agrees to rounding, except the key biases $b_K$ (the middle third of each `b_qkv`), which differ
# more. That is not the data parallelism: their gradient is **zero** in exact arithmetic. A bias on the keys adds
# $q \cdot b_K$ to every score of query $q$, the same for every key, and softmax ignores a constant added to all its
# inputs (Eq. (1)). What the backward computes for $b_K$ is rounding noise, and Adam divides each gradient by
# $\sqrt{v} + \epsilon$, so the noise moves $b_K$ by about $\text{lr} \cdot \text{noise}/\epsilon$: different noise
# for another summation order (another split), and nothing the model computes depends on it. Measured:

# %%
whole = batch_of(order)
model.zero_grad()
loss_fn.forward(model.forward(whole.src, whole.tgt_in, whole.src_mask, whole.tgt_mask), whole.tgt_out)
model.backward(loss_fn.backward())
g = model.encoder.layers[0].self_attn.b_qkv.grad
dm = g.size // 3
print(tr(f"encoder layer 0: max |dL/db_Q| = {np.abs(g[:dm]).max():.1e}, max |dL/db_K| = {np.abs(g[dm:2 * dm]).max():.1e}, "
         f"max |dL/db_V| = {np.abs(g[2 * dm:]).max():.1e}"))
assert np.abs(g[dm:2 * dm]).max() < 1e-12 * np.abs(g[:dm]).max()

# %% [markdown]
# ## 5. Gradient accumulation: the same identity in time
#
# A laptop cannot hold the paper's 25 000-token batches in memory at once, but it can compute them in pieces: cut the
# global batch into $K$ micro-batches exactly as the ranks cut it into shards (`distributed.split_batch`, by tokens),
# run them one after another, scale each one's `dlogits` by $n_k / n$ ($n$: the tokens of the whole batch), let the
# backward passes add into the same `.grad`, and update once. The sum is over time instead of over ranks, and the
# update is that of the whole batch: `--batch-size` (or `--max-tokens`) is the global batch, which `train
# --accumulate K` cuts in time and `mpiexec -n N` in space (with both, each rank cuts its shard into $K$).
# Global batches of 48 sentences, each in four micro-batches, against the same batches whole, 20 steps:

# %%
from minitransformer.data.batching import batch_plan
from minitransformer.distributed import SingleProcess, step_batches
from minitransformer.settings import TrainSettings
from minitransformer.train import Trainer

K, steps = 4, 20
assert K * 12 == 48                                              # four micro-batches of 12 against one of 48
train_pairs = encode_pairs(cv, copy_task.train[:600])
plan = [b for epoch in (0, 1) for b in batch_plan(train_pairs, 48, None, np.random.default_rng([0, epoch]))]
settings = TrainSettings(steps=steps, batch_size=48, accumulate=K, warmup_steps=100, valid_every=10**9)
accumulated, large = (Trainer(build_model(copy_task, "tiny", seed=0, P_drop=0.0), cv, train_pairs, [], settings)
                      for _ in range(2))
for step in range(steps):
    one = SingleProcess()
    accumulated.train_step(step_batches(plan[step], train_pairs, one, cv.pad_id, cv.bos_id, cv.eos_id, accumulate=K))
    large.train_step(step_batches(plan[step], train_pairs, one, cv.pad_id, cv.bos_id, cv.eos_id))
acc_diff = max_difference(*(dict(t.model.named_parameters()) for t in (large, accumulated)), "without b_K")
print(tr(f"batches of 48 in {K} micro-batches vs whole, {steps} steps: max relative difference {acc_diff:.1e} (b_K aside)"))
assert acc_diff < 1e-10
tokens, k_paper = 2_000, 25
print(tr(f"--max-tokens {tokens * k_paper} --accumulate {k_paper}: up to {tokens * k_paper:,} padded tokens per update, "
         f"in micro-batches of about {tokens:,}"))
backend.set_default_dtype("float32")

# %% [markdown]
# ## 6. What changes on GPUs, and what this package does
#
# On GPUs the allreduce is **NCCL**'s (NVIDIA's collective library): rings and trees over NVLink or PCIe between the
# GPUs of a machine, and over the network between machines, reading and writing GPU memory directly. Frameworks
# then **overlap** communication with computation: the backward produces the gradients of the last layers first,
# so they are grouped into buckets and each bucket's allreduce starts while the backward of the earlier layers is
# still running (PyTorch's DistributedDataParallel does this). With overlap, a step costs about
# max(compute, communication) instead of their sum; without it, the time to send section 1's megabytes per step
# adds to every step. Larger systems also split Adam's state between the GPUs instead of copying it.
#
# This package does the simple, checkable version:
#
# * `mpiexec -n N python -m minitransformer train ...` runs N processes through MPI (mpi4py). Each takes its shard of
#   the same global batch, balanced by tokens; after the **whole** backward, one `Allreduce` sums all gradients
#   (plus the loss and the token count) in one flat buffer: no buckets, no overlap;
# * Adam runs on every rank, identically: the same summed gradient and the same state give the same update, so no
#   parameters are sent; a SHA-256 of the parameters is compared across ranks at every checkpoint
#   (`--check-sync-every STEPS` for more often), and a difference stops the run;
# * rank 0 alone writes checkpoints, `metrics.jsonl`, the plot and the progress; a checkpoint does not depend on N
#   (resume a 2-rank run on 1 process or on 3);
# * on CuPy the gradients are copied to host memory and summed there, which works with any MPI; a device-direct path
#   (CUDA-aware MPI, or NCCL through `cupy.cuda.nccl`) is not built, and the multi-process path has run on CPUs only;
# * Ctrl-C or SIGTERM to `mpiexec` reaches every rank: they agree to stop after the same step and save one
#   checkpoint. A rank that dies ends the run at once (MPICH's `mpiexec` stops the others); a rank that hangs makes
#   the others stop after `MINITRANSFORMER_MPI_TIMEOUT` seconds (default 30) with one line naming the last checkpoint.
#
# `benchmarks/bench_parallel.py` measures the speed of 1 process against 2 ranks, with 1 or 2 threads each;
# docs/performance.md has its table, with the machine, its load, and why two cores scale poorly (they are the same
# two cores however the work is divided, Adam runs in full on every rank, and every step waits for the slowest rank).

# %% [markdown]
# ## Exercises
#
# Each checking cell prints *not attempted yet* until you fill in the function above it; a wrong answer raises a
# `WrongAnswer` (an `AssertionError`) that says what is wrong and, for the usual slips, names the likely mistake.
# In the full notebook the solutions follow at the end; the student edition a teacher hands out leaves them out.
#
# ### Exercise 14.1 — a ring allreduce
#
# Write `my_ring_allreduce(comm, x)`: the sum of every rank's `x` (a 1-D float array), returned on every rank, as a
# ring: reduce-scatter, then all-gather (section 3). Use `comm.Get_rank()`, `comm.Get_size()` and
# `comm.Sendrecv(sendbuf, dest=..., recvbuf=..., source=...)`, the calls of mpi4py on NumPy buffers; `recvbuf` must be
# an array of the size of the chunk that arrives. The checker runs your function on 2, 3 and 4 ranks simulated by
# threads (`SimulatedRanks`, no `mpiexec` needed), with vectors whose length is and is not a multiple of the rank
# count, and counts the bytes each rank sends: a ring sends $2(N-1)/N$ of the vector.

# %% [markdown]
# The simulated ranks block in `Send` until the matching `Recv` has taken the message, as MPI does for a
# message past its eager limit (a real gradient is far past it): a ring whose every rank sends first and
# receives after waits forever, here as under `mpiexec`, and the checker names the deadlock. `Sendrecv`
# sends and receives at once.

# %% tags=["stub"]
def my_ring_allreduce(comm, x):
    """x: (n,) -> (n,): the sum over the ranks of x, on every rank."""
    # your code here
    return None


# %% tags=["check"]
from lessonkit.exercises.lesson_14 import check_ring_allreduce, check_token_weighted

check_ring_allreduce(my_ring_allreduce)


# %% [markdown]
# ### Exercise 14.2 — the token-weighted gradient
#
# Three ranks each computed the gradient of the mean loss over **their own** tokens: `grads[r]`, an array, and
# `n_tokens[r]`, the number of non-pad target tokens they hold. Write `my_combine(grads, n_tokens)` returning the
# gradient of the mean loss over the whole batch (section 2). The checker's gradients are real ones (of the
# label-smoothed loss, with respect to a bias on the logits) for one batch split by sentence count.

# %% tags=["stub"]
def my_combine(grads, n_tokens):
    """grads: list of N arrays of one shape; n_tokens: list of N ints -> the whole batch's gradient."""
    # your code here
    return None


# %% tags=["check"]
check_token_weighted(my_combine)


# %% [markdown] tags=["solution"]
# ## Solutions

# %% tags=["solution"]
def ring_allreduce_solution(comm, x):
    rank, N = comm.Get_rank(), comm.Get_size()
    flat = np.array(x, dtype=float).reshape(-1)                   # a copy: the caller's x stays as it was
    chunks = np.array_split(flat, N)                               # views: += and recvbuf write into flat
    right, left = (rank + 1) % N, (rank - 1) % N
    for s in range(N - 1):                                         # reduce-scatter
        send, recv = (rank - s) % N, (rank - s - 1) % N
        incoming = np.empty_like(chunks[recv])
        comm.Sendrecv(chunks[send], dest=right, recvbuf=incoming, source=left)
        chunks[recv] += incoming
    for s in range(N - 1):                                         # all-gather: pass the finished chunks on
        send, recv = (rank - s + 1) % N, (rank - s) % N
        comm.Sendrecv(chunks[send], dest=right, recvbuf=chunks[recv], source=left)
    return flat

check_ring_allreduce(ring_allreduce_solution)


# %% tags=["solution"]
def combine_solution(grads, n_tokens):
    n = sum(n_tokens)
    return sum(g * (k / n) for g, k in zip(grads, n_tokens))      # weights n_r / n: each token counts once

check_token_weighted(combine_solution)
