"""Table 3 of the paper (§6.2, model variations) in miniature: rows A-E on a toy task.

    python lessons/experiments/table3.py --jobs 2             # every setting, 3 seeds (resumes)
    python lessons/experiments/table3.py --rows A E --seeds 0 1 2 3
    python lessons/experiments/table3.py --extrapolation      # row E on reverse: longer inputs
    python lessons/experiments/table3.py --extrapolation --steps 3000 --jobs 2
    python lessons/experiments/table3.py --pilot              # which task separates the settings?
    python lessons/experiments/table3.py --live-check         # re-run lesson 11's live rows: the tolerances

Writes lessons/experiments/table3.json: the provenance of every command that wrote into it
(``_record``: commit, command, dates, machine, BLAS threads, load), the toy base model, the
training budget, every setting next to the paper's own figures, and one record per
(setting, seed) run. The file is rewritten after every run, so a crash loses at most the
runs in progress, and a second call skips the runs already there (resumable, on the same
commit only: runs of two versions of the package are not one table). Every run uses one
BLAS thread. Lesson 11 reads the JSON and imports ``run_one`` from here to repeat one row
live; ``--live-check`` measures how closely such a re-run agrees with the record (see
``live_checks``) and writes the tolerances into the JSON.

Two tasks. The table (rows A-E) is trained on numbers-en-fr (English number words to
French, 0-9,999; chosen by ``--pilot``: it separates the settings by more than the seeds
do, where reverse at the same budget did not). Row E's second question, inputs longer
than any seen in training, needs a task whose length can grow: reverse, trained on
lengths 1-10 and decoded on 1-20 (``--extrapolation``).

Every run goes through the package's own training path: ``data.registry.load_task``,
``runsetup.settings_for`` (with the training settings pinned here, PINNED_SETTINGS),
``runsetup.build_model(task, preset, seed, **overrides)`` and ``train.Trainer``; evaluation through
``translate.score_translations`` (greedy, exact match, BLEU, chrF) plus a teacher-forced
perplexity and token accuracy computed here with the package's loss.

The toy base model is the paper's base scaled down 8x in width (d_model 512 -> 64,
d_ff 2048 -> 256) with h = 8 heads kept (d_k = 8), N = 2 layers, P_drop = eps_ls = 0.1.

Row B (smaller d_k, with h and d_v kept) needs key/query heads narrower than
d_model / h, which the package's MultiHeadAttention does not offer (its d_k is always
d_model / h). ``KeySizeLimit`` emulates it without touching the package: in every
attention layer it zeroes the Q and K projection columns of each head beyond the first
d_k' and keeps their gradients at zero, so Q K^T only sees d_k' dimensions per head (V
and W^O keep all d_v = 8). The kept Q and K columns are multiplied at the start by
c = (d_k / d_k')^(1/4) each, so that c^2 Q K^T / sqrt(d_k) = Q K^T / sqrt(d_k'): the scores
start at the scale of a true d_k' model's. The emulated model *is* a d_k' model with its
query and key weights rescaled by c; training differs from a true one only in Adam's step
size for those weights (Adam's steps do not scale with the weights).
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time

import _record
import numpy

from minitransformer import runsetup, train
from minitransformer.data.registry import load_task
from minitransformer.data.batching import batch_iterator
from minitransformer.data.tasks import reverse_pairs
from minitransformer.layers.attention import MultiHeadAttention
from minitransformer.layers.loss import LabelSmoothedCrossEntropy
from minitransformer.layers.parameter import eval_mode
from minitransformer.model import count_parameters
from minitransformer.translate import score_translations

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE / "table3.json"

# -- what is varied ---------------------------------------------------------------------

TASK = "numbers-en-fr"    # chosen by --pilot (see the JSON's "pilot" record and lesson 11)
PRESET = "copy"           # the base of the overrides below (every model field is overridden)
STEPS = 500               # training steps per run: the budget every setting gets (as the pilot)
BATCH = 128               # sentence pairs per batch (numbers-en-fr's recipe; PINNED_SETTINGS below)
# Row E on longer inputs: 600 steps (as lesson 11 repeats live) and 3000 (the reverse recipe's, trained out)
EXTRAPOLATION = {"task": "reverse", "labels": ("base", "learned PE"), "steps": 600, "long_steps": 3000}
TOY_BASE = {"d_model": 64, "h": 8, "N": 2, "d_ff": 256, "P_drop": 0.1, "eps_ls": 0.1, "positional": "sinusoidal"}
# Pinned here rather than read from the task registry's recipes (the values those recipes had when this
# experiment was designed), so that tuning a task's recipe for the command line cannot change this
# experiment under its records: the model fields PRESET would otherwise supply, and the training settings.
PINNED_MODEL = {"max_len": 64, "pre_ln": False, "ln_eps": 1e-5, "activation": "relu"}
PINNED_SETTINGS = {"numbers-en-fr": {"batch_size": BATCH, "lr_factor": 0.5, "warmup_steps": 400, "clip_norm": 1.0,
                                     "batch_by_length": True, "stop_when_solved": 0},
                   "reverse": {"batch_size": 64, "lr_factor": 0.25, "warmup_steps": 200, "clip_norm": 1.0,
                               "batch_by_length": True, "stop_when_solved": 0}}
EVAL_LENGTHS = range(1, 21)   # greedy exact match per source length; training saw 1-10
EVAL_PER_LENGTH = 50

# The paper's Table 3 (newstest2013 dev set, En-De; PPL is per wordpiece), base first.
PAPER_BASE = {"N": 6, "d_model": 512, "d_ff": 2048, "h": 8, "d_k": 64, "P_drop": 0.1, "eps_ls": 0.1,
              "steps": "100K", "ppl": 4.92, "bleu": 25.8, "params_M": 65}

# (row, label, overrides of TOY_BASE, key size d_k' for row B or None, the paper's row)
SETTINGS = [
    ("base", "base", {}, None, {"ppl": 4.92, "bleu": 25.8, "params_M": 65, "what": "base"}),
    ("A", "h=1, d_k=64", {"h": 1}, None, {"what": "h=1, d_k=d_v=512", "ppl": 5.29, "bleu": 24.9}),
    ("A", "h=4, d_k=16", {"h": 4}, None, {"what": "h=4, d_k=d_v=128", "ppl": 5.00, "bleu": 25.5}),
    ("A", "h=16, d_k=4", {"h": 16}, None, {"what": "h=16, d_k=d_v=32", "ppl": 4.91, "bleu": 25.8}),
    ("A", "h=32, d_k=2", {"h": 32}, None, {"what": "h=32, d_k=d_v=16", "ppl": 5.01, "bleu": 25.4}),
    ("B", "d_k=2", {}, 2, {"what": "d_k=16", "ppl": 5.16, "bleu": 25.1, "params_M": 58}),
    ("B", "d_k=4", {}, 4, {"what": "d_k=32", "ppl": 5.01, "bleu": 25.4, "params_M": 60}),
    ("C", "N=1", {"N": 1}, None, {"what": "(no N=1 row)"}),
    ("C", "N=4", {"N": 4}, None, {"what": "N=4", "ppl": 5.19, "bleu": 25.3, "params_M": 50}),
    ("C", "N=6", {"N": 6}, None, {"what": "N=6 (base)", "ppl": 4.92, "bleu": 25.8, "params_M": 65}),
    # Not in the paper: is a failure of N=6 the depth, or post-LN's optimization (lesson 4)?
    ("C", "N=6, pre-LN", {"N": 6, "pre_ln": True}, None, {"what": "(not in Table 3: pre-LN, lesson 4)"}),
    ("C", "d_model=32, d_k=4", {"d_model": 32}, None,
     {"what": "d_model=256, d_k=d_v=32", "ppl": 5.75, "bleu": 24.5, "params_M": 28}),
    ("C", "d_model=128, d_k=16", {"d_model": 128}, None,
     {"what": "d_model=1024, d_k=d_v=128", "ppl": 4.66, "bleu": 26.0, "params_M": 168}),
    ("C", "d_ff=128", {"d_ff": 128}, None, {"what": "d_ff=1024", "ppl": 5.12, "bleu": 25.4, "params_M": 53}),
    ("C", "d_ff=512", {"d_ff": 512}, None, {"what": "d_ff=4096", "ppl": 4.75, "bleu": 26.2, "params_M": 90}),
    ("D", "P_drop=0.0", {"P_drop": 0.0}, None, {"what": "P_drop=0.0", "ppl": 5.77, "bleu": 24.6}),
    ("D", "P_drop=0.2", {"P_drop": 0.2}, None, {"what": "P_drop=0.2", "ppl": 4.95, "bleu": 25.5}),
    ("D", "eps_ls=0.0", {"eps_ls": 0.0}, None, {"what": "eps_ls=0.0", "ppl": 4.67, "bleu": 25.3}),
    ("D", "eps_ls=0.2", {"eps_ls": 0.2}, None, {"what": "eps_ls=0.2", "ppl": 5.47, "bleu": 25.7}),
    ("E", "learned PE", {"positional": "learned"}, None,
     {"what": "positional embedding instead of sinusoids", "ppl": 4.92, "bleu": 25.7}),
]
# The paper's other N rows, for the "why N = 6?" comparison (BLEU on the dev set).
PAPER_N = {2: {"ppl": 6.11, "bleu": 23.7, "params_M": 36}, 4: {"ppl": 5.19, "bleu": 25.3, "params_M": 50},
           6: {"ppl": 4.92, "bleu": 25.8, "params_M": 65}, 8: {"ppl": 4.88, "bleu": 25.5, "params_M": 80}}


def setting(label: str):
    """The SETTINGS entry with this label."""
    for entry in SETTINGS:
        if entry[1] == label:
            return entry
    raise KeyError(f"no setting {label!r}; choose one of: {', '.join(s[1] for s in SETTINGS)}")


# -- row B: a smaller key size inside the package's attention ---------------------------


class KeySizeLimit:
    """Restrict every attention layer's query/key heads to their first ``d_k_small`` of d_k dimensions.

    W_qkv (d_model, 3 d_model) holds W^Q in columns [0, d), W^K in [d, 2d), head i in
    columns i d_k .. (i+1) d_k of each block. The columns i d_k + d_k_small .. (i+1) d_k
    of the Q and K blocks (and the same entries of b_qkv) are set to 0 and their
    gradients are zeroed before every optimizer step, so Adam never moves them.
    """

    def __init__(self, model, d_k_small: int):
        self.layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
        first = self.layers[0]
        d, h, d_k = first.d_model, first.h, first.d_k
        if not 1 <= d_k_small < d_k:
            raise ValueError(f"KeySizeLimit: d_k_small must be in 1..{d_k - 1} (the model's d_k is {d_k})")
        self.d_k, self.d_k_small = d_k, d_k_small
        head_cols = numpy.arange(d).reshape(h, d_k)                   # (h, d_k): head i's columns
        dropped = head_cols[:, d_k_small:].reshape(-1)
        kept = head_cols[:, :d_k_small].reshape(-1)
        self.dropped = numpy.concatenate([dropped, d + dropped])      # in the Q block and the K block
        kept = numpy.concatenate([kept, d + kept])
        scale = (d_k / d_k_small) ** 0.25                             # c^2 = sqrt(d_k / d_k')
        for m in self.layers:
            m.W_qkv.data[:, kept] *= scale
            m.b_qkv.data[kept] *= scale
        self.zero(data=True)

    def zero(self, data: bool = False) -> None:
        for m in self.layers:
            for p in (m.W_qkv, m.b_qkv):
                target = p.data if data else p.grad
                target[..., self.dropped] = 0

    def n_frozen(self) -> int:
        """Entries held at zero: they do not count as parameters of the smaller model."""
        m = self.layers[0]
        return len(self.layers) * len(self.dropped) * (m.d_model + 1)

    def attach(self, optimizer) -> None:
        """Zero the dropped columns' gradients before every step of ``optimizer``."""
        step = optimizer.step

        def step_with_limit(*args, **kwargs):
            self.zero()
            return step(*args, **kwargs)

        optimizer.step = step_with_limit


# -- one run ----------------------------------------------------------------------------


def teacher_forced(model, vocab, pairs) -> dict:
    """Unsmoothed per-token perplexity and argmax token accuracy on encoded ``pairs``."""
    nll = LabelSmoothedCrossEntropy(vocab.pad_id, 0.0)      # eps 0: the plain negative log-likelihood
    total, correct, n = 0.0, 0, 0
    with eval_mode(model):
        for b in batch_iterator(pairs, 100, None, None, shuffle=False, pad_id=vocab.pad_id,
                                bos_id=vocab.bos_id, eos_id=vocab.eos_id, xp=model.xp):
            logits = model.forward(b.src, b.tgt_in, b.src_mask, b.tgt_mask)
            total += nll.forward(logits, b.tgt_out) * b.n_tokens
            real = b.tgt_out != vocab.pad_id
            correct += int(((logits.argmax(-1) == b.tgt_out) & real).sum())
            n += b.n_tokens
    return {"ppl": math.exp(total / n), "token_acc": correct / n}


def length_sweep(model, vocab, seed: int = 99) -> tuple[dict, dict]:
    """The reverse task per source length 1..20 (training saw 1..10): greedy exact match, and the
    teacher-forced token accuracy (partial credit: each output token given the right ones before it)."""
    rng = numpy.random.default_rng(seed)
    exact, token_acc = {}, {}
    for L in EVAL_LENGTHS:
        pairs = reverse_pairs(EVAL_PER_LENGTH, rng, min_len=L, max_len=L)
        with eval_mode(model):
            exact[str(L)] = score_translations(model, vocab, pairs, "word", "none")["exact_match"]
        token_acc[str(L)] = teacher_forced(model, vocab, train.encode_pairs(vocab, pairs))["token_acc"]
    return exact, token_acc


def run_one(label: str, seed: int, steps: int = STEPS, task_name: str = TASK, task=None,
            sweep: bool | None = None) -> dict:
    """Train the setting ``label`` with ``seed`` for ``steps`` steps and evaluate it. Returns the record."""
    row, label, overrides, d_k_small, _ = setting(label)
    task = task or load_task(task_name)
    preset, settings = runsetup.settings_for(task_name, preset=PRESET, steps=steps, seed=seed, valid_every=10**9,
                                          log_every=25, **PINNED_SETTINGS[task_name])
    config = TOY_BASE | PINNED_MODEL | overrides
    model = runsetup.build_model(task, preset, seed=seed, **config)
    trainer = train.Trainer(model, task.vocab, train.encode_pairs(task.vocab, task.train), [], settings)
    n_params = count_parameters(model.cfg)
    if d_k_small is not None:
        limit = KeySizeLimit(model, d_k_small)
        limit.attach(trainer.optimizer)
        n_params -= limit.n_frozen()
    t0, cpu0 = time.perf_counter(), time.process_time()
    history = trainer.run(progress=False)
    train_s = time.perf_counter() - t0
    test = train.encode_pairs(task.vocab, task.test)
    record = {"task": task_name, "row": row, "label": label, "seed": seed, "steps": steps, "config": config,
              "settings": {k: getattr(settings, k) for k in ("batch_size", "lr_factor", "warmup_steps", "clip_norm")},
              "d_k": d_k_small or model.cfg.d_k, "params": n_params, "train_seconds": round(train_s, 1),
              "train_loss_curve": [[r["step"], round(r["loss"], 4)] for r in history if "loss" in r]}
    record |= teacher_forced(model, task.vocab, test)
    with eval_mode(model):
        scores = score_translations(model, task.vocab, task.test, task.tgt_level, task.bleu_tokenize)
    record |= {k: scores[k] for k in ("exact_match", "bleu", "chrf")}
    if sweep if sweep is not None else task_name == "reverse":
        record["exact_match_by_length"], record["token_acc_by_length"] = length_sweep(model, task.vocab)
    # Wall time depends on the machine's load (a record of cost, never asserted on); CPU time much less.
    record["seconds"] = round(time.perf_counter() - t0, 1)
    record["cpu_seconds"] = round(time.process_time() - cpu0, 1)
    return record


# -- the JSON ------------------------------------------------------------------------------


def load(path=OUT) -> dict:
    if pathlib.Path(path).exists():
        return json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    return {}


def save(data: dict, path=OUT) -> None:
    _record.write(path, data)


def _worker_init() -> None:
    """One BLAS thread per process: on a shared 2-core machine more threads thrash (measured:
    a training step took 17x longer with 2 OpenBLAS threads under load than with 1)."""
    _record.limit_blas_threads(1)


_TASKS: dict = {}


def _run(job):
    """One (label, seed, steps, task_name, sweep) job, in a worker process."""
    label, seed, steps, task_name, sweep = job
    if task_name not in _TASKS:
        _TASKS[task_name] = load_task(task_name)
    return run_one(label, seed, steps, task_name, _TASKS[task_name], sweep=sweep)


def run_jobs(data: dict, section: dict, jobs: list, workers: int, path, say) -> None:
    """Run ``jobs`` on ``workers`` processes; append each record to ``section["runs"]`` and save
    the JSON as soon as it arrives (a crash loses only the runs in progress)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    print(f"{len(jobs)} runs to do, {len(section['runs'])} already in {path}", flush=True)
    if not jobs:
        return
    with ProcessPoolExecutor(max_workers=workers, initializer=_worker_init) as pool:
        futures = {pool.submit(_run, job): job for job in jobs}
        for i, future in enumerate(as_completed(futures)):
            rec = future.result()
            section["runs"].append(rec)
            data["updated"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
            save(data, path)
            print(f"[{i + 1}/{len(jobs)}] {say(rec)}", flush=True)


def _line(rec) -> str:
    return (f"{rec['task']:14s} {rec['row']:4s} {rec['label']:20s} seed {rec['seed']}: exact {rec['exact_match']:.3f} "
            f"ppl {rec['ppl']:.3f} tok {rec['token_acc']:.3f} bleu {rec['bleu']:.1f}  {rec['seconds']:.0f} s")


# -- live checks: what lesson 11's live re-run of row E must show ---------------------------

# The rows lesson 11 repeats live: row E's 600-step models on reverse, seed 0.
LIVE = {"section": "extrapolation", "labels": EXTRAPOLATION["labels"], "seed": 0, "steps": EXTRAPOLATION["steps"],
        "task": EXTRAPOLATION["task"]}
SEEDS = (0, 1)                             # the seeds of the re-runs that measure a stochastic check's tolerance
TRAINED, BEYOND = "10", "11"               # the longest training length and the first one beyond it
# What lesson 11 asserts of its live runs: key -> (metric, kind, floor, rounding step, stochastic, null, fails when).
# The training loss of the first 25 steps is deterministic up to rounding (it checks the arithmetic, on seed 0);
# the scores after 600 steps are where runs have parted (a margin measured over seeds and processors).
CHECKS = {
    **{f"early {label}": (f"{label}: mean training loss over steps 1-25 (relative)", "rel", 0.0005, 0.0005, False,
                          None, "the first steps already differ: the arithmetic is not the one that made the record")
       for label in LIVE["labels"]},
    **{f"token_acc {label}": (f"{label}: teacher-forced token accuracy on the test split (a fraction)", "abs", 0.01,
                              0.01, True, 0.1, "the model no longer learns to reverse in 600 steps (0.1: a guess "
                                               "among the 10 symbols)")
       for label in LIVE["labels"]},
    "falloff": (f"how much more the learned table's token accuracy falls than the sinusoids' from source length "
                f"{TRAINED} (trained) to {BEYOND} (never seen), a fraction", "abs", 0.01, 0.01, True, 0.0,
                "the learned positions no longer fall off past the training length more than the sinusoids do"),
}


def live_runs(seed: int = LIVE["seed"]) -> dict:
    """Row E's two models as lesson 11 trains them (one BLAS thread is the caller's): label -> run_one's record."""
    task = load_task(LIVE["task"])
    return {label: run_one(label, seed, LIVE["steps"], LIVE["task"], task, sweep=True) for label in LIVE["labels"]}


def live_values(runs: dict) -> dict:
    """What the checks compare (the keys of CHECKS), from label -> run_one's record."""
    out = {}
    for label in LIVE["labels"]:
        step, loss = runs[label]["train_loss_curve"][0]
        assert step == 25, runs[label]["train_loss_curve"][:2]
        out[f"early {label}"] = loss
        out[f"token_acc {label}"] = runs[label]["token_acc"]
    drop = {label: runs[label]["token_acc_by_length"][TRAINED] - runs[label]["token_acc_by_length"][BEYOND]
            for label in LIVE["labels"]}
    out["falloff"] = drop["learned PE"] - drop["base"]
    return {k: float(v) for k, v in out.items()}


def check_live(data: dict, runs: dict) -> list[str]:
    """Assert the record's live checks on lesson 11's live runs; one line per check, for the lesson to print."""
    return _record.assert_checks(data["live_check"], live_values(runs))


def recorded_row(data: dict, label: str, seed: int, steps: int, task: str, section: str = "extrapolation") -> dict:
    runs = data["runs"] if section == "runs" else data[section]["runs"]
    found = [r for r in runs if (r["task"], r["label"], r["seed"], r["steps"]) == (task, label, seed, steps)]
    if len(found) != 1:
        raise SystemExit(f"error: {len(found)} records of {label}, seed {seed}, {task}, {steps} steps in the JSON "
                         "(expected 1)")
    return found[0]


def live_checks(data: dict) -> tuple[list, dict]:
    """Re-run the live rows under ``_record.variants(SEEDS)`` in fresh processes (the record's own conditions: the
    kernel its extrapolation runs were made on) and derive each check's tolerance. Returns (checks, evidence)."""
    recorded = live_values({label: recorded_row(data, label, LIVE["seed"], LIVE["steps"], LIVE["task"])
                            for label in LIVE["labels"]})
    made_on = {b["architecture"] for p in data["provenance"] if p.get("wrote") == LIVE["section"] for b in p["blas"]}
    if len(made_on) != 1:
        raise SystemExit(f"error: the {LIVE['section']} runs were made on the kernels {sorted(made_on)}, not one")
    reruns = {}
    for v in _record.variants(SEEDS, LIVE["seed"], record_kernel=made_on.pop()):
        t0 = time.perf_counter()
        runs = {label: _record.rerun(__file__, ["--live-row", json.dumps([label, v["seed"]])], v)
                for label in LIVE["labels"]}
        reruns[v["name"]] = (v, live_values(runs))
        print(f"live rows, {v['name']}: {reruns[v['name']][1]}  ({time.perf_counter() - t0:.0f} s)", flush=True)
    checks = []
    for key, (metric, kind, floor, step, stochastic, null, fails_when) in CHECKS.items():
        values = {name: vals[key] for name, (v, vals) in reruns.items() if stochastic or v["seed"] == LIVE["seed"]}
        checks.append(_record.measured_check(
            f"row E, base and learned PE, seed {LIVE['seed']}, {LIVE['task']}, {LIVE['steps']} steps", metric,
            recorded[key], values, kind, floor, step,
            f"re-runs of table3.run_one(label, seed, steps={LIVE['steps']}, task_name={LIVE['task']!r}) in fresh "
            "processes, one BLAS thread" + (f", seeds {', '.join(map(str, SEEDS))}" if stochastic
                                            else f", seed {LIVE['seed']}"),
            null=null, fails_when=fails_when, section=LIVE["section"], task=LIVE["task"], seed=LIVE["seed"],
            steps=LIVE["steps"], key=key))
        print(key, "recorded", recorded[key], "spread", checks[-1]["observed_spread"], "tolerance",
              checks[-1]["tolerance"], flush=True)
    return checks, {name: vals for name, (v, vals) in reruns.items()}


def same_commit(data: dict, prov: dict, path, allow: bool = False) -> None:
    """Runs of two versions of the package are not one table: refuse to add to a file made at another commit,
    unless ``allow`` (--allow-other-commit): each command's provenance keeps its own commit, and the
    record's live check (--live-check, and lesson 11) re-runs rows and asserts them against the record."""
    if allow or not any(data.get(k) for k in ("runs", "pilot", "extrapolation")):
        return
    made = {p.get("commit") for p in data.get("provenance", [])} or {None}
    if made != {prov["commit"]}:
        raise SystemExit(f"error: {path} holds runs made at commit {', '.join(map(str, sorted(made, key=str)))}, "
                         f"this checkout is at {prov['commit']}; move the file away to start afresh (--out)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", nargs="*", default=None, help="rows to run (base A B C D E); default all")
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=None, help=f"default {STEPS} (table), "
                                                            f"{EXTRAPOLATION['steps']} (--extrapolation)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (each with one BLAS thread)")
    ap.add_argument("--pilot", action="store_true", help="compare candidate tasks instead")
    ap.add_argument("--extrapolation", action="store_true", help="row E on reverse, decoded on longer inputs")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--live-check", action="store_true",
                    help="re-run lesson 11's live rows on other processors and seeds; write the tolerances")
    ap.add_argument("--allow-other-commit", action="store_true",
                    help="add to a record made at another commit (the live check must then agree with it)")
    ap.add_argument("--live-row", help=argparse.SUPPRESS)          # [label, seed] of a live row: print its record
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.live_row:
        _record.limit_blas_threads(args.threads)
        label, seed = json.loads(args.live_row)
        _record.emit(run_one(label, seed, LIVE["steps"], LIVE["task"], sweep=True))
        return
    prov = _record.start(threads=1, argv=None if argv is None else [sys.argv[0], *argv])

    data = load(args.out)
    same_commit(data, prov, args.out, args.allow_other_commit)
    data.setdefault("runs", [])
    provenance = data.setdefault("provenance", [])
    for earlier in provenance:
        if earlier.get("finished") is None:           # a command that crashed or was stopped
            earlier["interrupted"] = True
    wrote = "pilot" if args.pilot else "extrapolation" if args.extrapolation else "live_check" \
        if args.live_check else "runs"
    provenance.append(_record.snapshot(prov, wrote=wrote))
    if args.live_check:
        data["live_check"], data["live_check_reruns"] = live_checks(data)
        data["live_check_machines"] = _record.played()
        provenance[-1] = _record.finish(prov, wrote=wrote)
        save(data, args.out)
        return
    data |= {"task": TASK, "steps": STEPS, "toy_base": TOY_BASE, "paper_base": PAPER_BASE, "paper_N": PAPER_N,
             "settings": [{"row": r, "label": lab, "overrides": o, "d_k_small": k, "paper": p}
                          for r, lab, o, k, p in SETTINGS],
             "recipe": runsetup.settings_for(TASK, preset=PRESET, steps=STEPS, **PINNED_SETTINGS[TASK])[1].__dict__}
    if args.pilot:
        section = data.setdefault("pilot", {"runs": []})
        section["note"] = ("4 settings x 2 seeds on two candidate tasks, 500 steps each with the task's recipe "
                           "(reverse: batch 64, lr_factor 0.25, warm-up 200; numbers-en-fr: batch 128, "
                           "lr_factor 0.5, warm-up 400)")
        done = {(r["task"], r["label"], r["seed"]) for r in section["runs"]}
        jobs = [(label, seed, args.steps or 500, task_name, False)
                for task_name in ("reverse", "numbers-en-fr")
                for label in ("base", "h=1, d_k=64", "N=1", "learned PE") for seed in args.seeds
                if (task_name, label, seed) not in done]
    elif args.extrapolation:
        section = data.setdefault("extrapolation", {"runs": []})
        steps = args.steps or EXTRAPOLATION["steps"]
        section |= {"task": EXTRAPOLATION["task"], "lengths": list(EVAL_LENGTHS),
                    "per_length": EVAL_PER_LENGTH, "train_lengths": [1, 10]}
        done = {(r["label"], r["seed"], r["steps"]) for r in section["runs"]}
        jobs = [(label, seed, steps, EXTRAPOLATION["task"], True)
                for seed in args.seeds for label in EXTRAPOLATION["labels"] if (label, seed, steps) not in done]
    else:
        section = data
        steps = args.steps or STEPS
        done = {(r["label"], r["seed"], r["steps"]) for r in data["runs"]}
        jobs = [(s[1], seed, steps, TASK, False) for seed in args.seeds for s in SETTINGS
                if (args.rows is None or s[0] in args.rows) and (s[1], seed, steps) not in done]
    save(data, args.out)
    run_jobs(data, section, jobs, args.jobs, args.out, _line)
    provenance[-1] = _record.finish(prov, wrote=wrote, runs=len(jobs))
    save(data, args.out)


if __name__ == "__main__":
    main()
