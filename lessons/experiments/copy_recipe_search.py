"""Which recipe solves the copy (and reverse) task in at most 800 steps, for every seed?

Issue 25.1. Each candidate keeps the paper's optimizer and schedule shape (Adam with
β2 = 0.98, §5.3's linear warm-up then 1/√step decay) and changes the model size, the
warm-up, the learning-rate factor, the batch, label smoothing, dropout or clipping.
A run goes through the package's own path, as ``python -m minitransformer train``
does: ``load_task`` → ``settings_for`` → ``make_trainer`` → ``Trainer.train_step``
on ``Trainer.batches()``, and ``Trainer.validate`` every ``--every`` steps on the
500 validation sequences (all of them decoded greedily). A candidate's model is a
``TransformerConfig`` registered in ``model.PRESETS`` under a search-only name, so
``make_trainer`` builds it like any preset.

The candidates are named by their changes to the recipe the search started from (``BASE_*``
below: the copy recipe before issue 25, 3,000 steps to solve seed 0), so that every name in the
JSON keeps its meaning now that the registry holds the search's result; the candidate
``recipe`` is the registry's recipe for the task, unchanged.

At every validation the script also records:

* the *teacher-forced* exact match of each validation sequence (one forward pass,
  the one the validation loss already needs: a sequence counts when the argmax at
  every target position, <eos> included, is the target token). Greedy decoding
  reproduces the target exactly if and only if this holds, so the two figures agree
  up to floating-point ties; the record keeps both, to show it, and lets the
  analysis score a validation on its first 100 or 200 sequences only;
* the time of ``validate()``, of the teacher-forced pass, and of the training steps
  since the last validation (validation must stay cheap next to training);
* the exact match on the 1,000 held-out test sequences (``score_translations``)
  whenever validation is at 100%, so the JSON shows whether "solved on validation"
  implies 100% on the test set at every step where a stopping rule could fire.

``--extra-valid N`` also scores N more held-out sequences (a random stream no split uses),
teacher-forced, at every validation: would a larger validation set (cheap, since
teacher forcing needs one forward pass) stop only where the test set is at 100% too?
``--cheap-validation`` runs ``validate()`` only where the teacher-forced exact match on
the 500 is 100% (elsewhere greedy decoding cannot be at 100% either, and the
teacher-forced figure is recorded): the same curve for less CPU.

A run stops once validation has been at 100% at ``--confirm`` validations in a row
at the coarsest interval in ``--intervals`` (the finer intervals' rules fire no
later) and, with ``--extra-valid``, at two in a row on the 500 and the extra ones
together; or at ``--max-steps``.

    OPENBLAS_NUM_THREADS=1 \\
        python lessons/experiments/copy_recipe_search.py --task copy --candidates current b128-lr0.5 --seeds 0 1 2 3 4

Records accumulate in ``--out`` (default lessons/experiments/copy_recipe_search.json):
one record per (task, candidate, seed, BLAS thread count), each with the command,
date, machine, commit and the curve; a rerun of the same key replaces its record.
``--summary`` prints the table of steps-to-solved from the JSON without training.
The BLAS thread count is read from the environment (OPENBLAS_NUM_THREADS), which must
be set before NumPy loads, so it is one per invocation.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import time
from dataclasses import replace

import numpy

from minitransformer import model as model_module
from minitransformer.data import batching
from minitransformer.data.batching import make_batch
from minitransformer.settings import TrainSettings
from minitransformer.data.tasks import copy_pairs, reverse_pairs
from minitransformer.files import atomic_write_text
from minitransformer.machine import machine_info, machine_summary
from minitransformer.data.registry import load_task
from minitransformer.train import encode_pairs
from minitransformer.runsetup import make_trainer, settings_for
from minitransformer.translate import score_translations

HERE = pathlib.Path(__file__).resolve().parent

# The recipe the search started from (the registry's copy recipe before issue 25).
BASE_MODEL = model_module.TransformerConfig(vocab_size=14, d_model=64, h=8, N=2, d_ff=256, P_drop=0.0, eps_ls=0.0,
                                            max_len=64)
BASE_SETTINGS = TrainSettings(steps=3000, batch_size=64, lr_factor=0.25, warmup_steps=200, clip_norm=1.0,
                              valid_every=500)
ROOT = HERE.parent.parent

# A candidate is named by its changes to BASE_MODEL / BASE_SETTINGS (d_model 64, h 8, N 2, batch 64,
# lr factor 0.25, warm-up 200, clip 1.0), joined by "-"; "current" changes nothing; "recipe" is the
# registry's recipe for the task as it is now:
#   b128 batch 128   lr0.5 lr factor   w100 warm-up   clip2 / noclip clipping
#   d32 d_model (d_ff = 4 d_model unless ff is given)   h4 heads   N1 layers   ff128 d_ff
#   ls0.1 label smoothing eps_ls   pd0.1 dropout P_drop
#   pool1 batch_by_length=False: the batcher sorts a pool of data.batching.POOL_BATCHES (100)
#         batches by length before cutting it into batches, so every copy batch holds sequences
#         of one length; "pool1" makes the pools one batch each, so a batch is a random draw of
#         mixed lengths (the search's name for what became TrainSettings.batch_by_length)
_MODEL_KEYS = {"d": ("d_model", int), "h": ("h", int), "N": ("N", int), "ff": ("d_ff", int),
               "ls": ("eps_ls", float), "pd": ("P_drop", float)}
_SETTING_KEYS = {"b": ("batch_size", int), "lr": ("lr_factor", float), "w": ("warmup_steps", int),
                 "clip": ("clip_norm", float)}


def parse_candidate(name: str) -> tuple[dict, dict, int | None]:
    """(model changes, training-setting changes, batcher pool size or None) of candidate ``name``."""
    model_changes, setting_changes, pool = {}, {}, None
    if name in ("current", "recipe"):
        return model_changes, setting_changes, pool
    for part in name.split("-"):
        if part == "noclip":
            setting_changes["clip_norm"] = None
            continue
        if part == "pool1":
            pool = 1
            setting_changes["batch_by_length"] = False
            continue
        match = re.fullmatch(r"([a-zA-Z]+)([0-9.]+)", part)
        if not match or match.group(1) not in {**_MODEL_KEYS, **_SETTING_KEYS}:
            raise argparse.ArgumentTypeError(f"candidate {name!r}: cannot read {part!r}")
        prefix, value = match.groups()
        field, kind = _MODEL_KEYS.get(prefix) or _SETTING_KEYS[prefix]
        (model_changes if prefix in _MODEL_KEYS else setting_changes)[field] = kind(value)
    if "d_model" in model_changes and "d_ff" not in model_changes:
        model_changes["d_ff"] = 4 * model_changes["d_model"]
    return model_changes, setting_changes, pool


def candidate_name(name: str) -> str:
    parse_candidate(name)                   # argparse type: a bad name is refused before any work
    return name


def blas_threads() -> int | None:
    """The thread count NumPy's BLAS runs with now (``machine.blas_threads``)."""
    from minitransformer import machine

    return machine.blas_threads()


def commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "minitransformer"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return out + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def candidate_trainer(task_name: str, name: str, seed: int, max_steps: int):
    """(task, trainer, preset name, model config, settings) for one candidate and seed."""
    model_changes, setting_changes, _ = parse_candidate(name)
    task = load_task(task_name, seed=seed)
    if name == "recipe":
        preset_name, settings = settings_for(task_name, seed=seed)
    else:
        preset_name = f"search:{name}"
        model_module.PRESETS[preset_name] = BASE_MODEL.with_(**model_changes)
        settings = replace(BASE_SETTINGS, seed=seed)
    # replace, not settings_for's overrides: clip_norm=None must be able to switch clipping off.
    # The search validates itself (and stops by its own rule): the recipe's stop is switched off.
    settings = replace(settings, steps=max_steps, valid_every=10**9, valid_decode=len(task.valid),
                       stop_when_solved=0, **setting_changes)
    trainer = make_trainer(task, settings, preset_name)
    return task, trainer, preset_name, trainer.model.cfg, settings


def teacher_forced_exact(trainer, pairs, chunk: int = 100) -> list[bool]:
    """Per sequence: does the argmax under teacher forcing equal the target at every position?

    The ids greedy decoding never emits (pad, <bos>) are excluded from the argmax, as
    greedy decoding excludes them.
    """
    model, v = trainer.model.eval(), trainer.vocab
    ok: list[bool] = []
    for i in range(0, len(pairs), chunk):
        part = pairs[i: i + chunk]
        batch = make_batch([s for s, _ in part], [t for _, t in part], v.pad_id, v.bos_id, v.eos_id, model.xp)
        logits = numpy.array(model.forward(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask))
        logits[..., [v.pad_id, v.bos_id]] = -numpy.inf
        pred = logits.argmax(axis=-1)
        tgt = numpy.asarray(batch.tgt_out)
        ok.extend(((pred == tgt) | (tgt == v.pad_id)).all(axis=1).tolist())
    model.train()
    return ok


def failures_by_length(pairs, ok: list[bool]) -> dict[str, int]:
    """How many validation sequences fail, by target length (where the last errors hide)."""
    counts: dict[str, int] = {}
    for (_, tgt), good in zip(pairs, ok):
        if not good:
            counts[str(len(tgt))] = counts.get(str(len(tgt)), 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: int(kv[0])))


def exact_match(point: dict, key: str) -> float:
    """A validation's exact match: "valid" (the 500 validation sequences, validate()), or
    "valid+extra" (those and the --extra-valid sequences: all must be right)."""
    if key == "valid+extra":
        return min(point["valid_exact_match"], point.get("extra_tf_exact_match", 0.0))
    return point["valid_exact_match"]


def solved_step(curve: list[dict], interval: int, confirm: int, key: str = "valid") -> int | None:
    """The step at which "validation at 100% at ``confirm`` validations in a row" first holds,
    validating every ``interval`` steps (a multiple of the curve's own interval)."""
    run = 0
    for point in curve:
        if point["step"] % interval:
            continue
        run = run + 1 if exact_match(point, key) >= 1.0 else 0
        if run >= confirm:
            return point["step"]
    return None


def run_one(task_name: str, name: str, seed: int, args) -> dict:
    task, trainer, preset_name, cfg, settings = candidate_trainer(task_name, name, seed, args.max_steps)
    batches = trainer.batches()
    curve, t_train, t_valid = [], 0.0, 0.0
    # --extra-valid: more held-out sequences from a stream no split uses ([seed, 9]; the
    # splits use [seed, 0..2]), scored teacher-forced: would a larger validation set stop
    # only where the test set is at 100% too?
    extra = []
    if args.extra_valid:
        pairs = {"copy": copy_pairs, "reverse": reverse_pairs}[task_name](args.extra_valid, numpy.random.default_rng([seed, 9]))
        extra = encode_pairs(trainer.vocab, pairs)
    coarsest = max(args.intervals)
    while trainer.step < args.max_steps:
        t0 = time.perf_counter()
        losses = [trainer.train_step(next(batches)) for _ in range(args.every)]
        dt_train = time.perf_counter() - t0
        t_train += dt_train
        t0 = time.perf_counter()
        tf = teacher_forced_exact(trainer, trainer.valid_pairs)
        dt_tf = time.perf_counter() - t0
        if args.cheap_validation and not all(tf):
            # Greedy decoding can only reach 100% where teacher forcing does (see the module
            # docstring): below that, the teacher-forced figure stands in for validate().
            valid, dt_validate = {"valid_loss": None, "valid_exact_match": float(numpy.mean(tf))}, 0.0
        else:
            t0 = time.perf_counter()
            valid = trainer.validate()
            dt_validate = time.perf_counter() - t0
        t_valid += dt_validate
        point = {"step": trainer.step, "train_loss": float(numpy.mean(losses)),
                 "valid_loss": valid["valid_loss"], "valid_exact_match": valid["valid_exact_match"],
                 "tf_exact_match": float(numpy.mean(tf)),
                 "tf_exact_match_100": float(numpy.mean(tf[:100])),
                 "tf_exact_match_200": float(numpy.mean(tf[:200])),
                 "tf_failures_by_length": failures_by_length(trainer.valid_pairs, tf),
                 "train_s": round(dt_train, 3), "validate_s": round(dt_validate, 3), "tf_s": round(dt_tf, 3)}
        if extra:
            t0 = time.perf_counter()
            ok = teacher_forced_exact(trainer, extra)
            point["extra_tf_exact_match"] = float(numpy.mean(ok))
            point["extra_tf_errors_by_500"] = [len(ok[i: i + 500]) - sum(ok[i: i + 500]) for i in range(0, len(ok), 500)]
            point["extra_tf_s"] = round(time.perf_counter() - t0, 3)
        if valid["valid_exact_match"] >= 1.0:
            t0 = time.perf_counter()
            scores = score_translations(trainer.model.eval(), trainer.vocab, task.test, task.tgt_level,
                                        task.bleu_tokenize)
            trainer.model.train()
            point["test_exact_match"] = scores["exact_match"]
            point["test_s"] = round(time.perf_counter() - t0, 3)
        curve.append(point)
        print(f"  {task_name} {name} seed {seed} step {trainer.step}: loss {point['train_loss']:.4f} "
              f"valid {valid['valid_loss'] or float('nan'):.4f} exact {100 * valid['valid_exact_match']:.1f}% "
              f"(tf {100 * point['tf_exact_match']:.1f}%)"
              + (f" extra {100 * point['extra_tf_exact_match']:.2f}%" if extra else "")
              + (f" test {100 * point['test_exact_match']:.1f}%" if "test_exact_match" in point else "")
              + f"  [{dt_train:.1f} s train, {dt_validate:.2f} s validate]", flush=True)
        # Stop once every rule the analysis compares has fired: ``--confirm`` validations in a row
        # on the 500, and (with --extra-valid) two in a row on the 500 and the extra sequences.
        if solved_step(curve, coarsest, args.confirm) is not None and (
                not extra or solved_step(curve, coarsest, 2, "valid+extra") is not None):
            break
        if args.prune_at and trainer.step >= args.prune_at and max(p["valid_exact_match"] for p in curve) < \
                args.prune_below:
            print(f"  pruned: validation exact match below {args.prune_below:.0%} at step {trainer.step}")
            break
    model_fields = {k: getattr(cfg, k) for k in ("d_model", "h", "N", "d_ff", "P_drop", "eps_ls")}
    setting_fields = {k: getattr(settings, k) for k in ("batch_size", "batch_by_length", "lr_factor", "warmup_steps",
                                                         "clip_norm")}
    return {"task": task_name, "candidate": name, "seed": seed, "blas_threads": blas_threads(),
            "env": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS",)},
            "model": model_fields, "settings": setting_fields, "batcher_pool_batches": batching.POOL_BATCHES if settings.batch_by_length else 1,
            "every": args.every, "validation": "teacher-forced below 100%, then validate()" if
            args.cheap_validation else "validate() every time", "extra_valid": args.extra_valid,
            "train_seconds": round(t_train, 2), "validate_seconds": round(t_valid, 2),
            "command": "python " + " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine_info(), "commit": commit(),
            "curve": curve}


def load(path: str) -> dict:
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return {"about": __doc__.splitlines()[0], "records": []}


def _rounded(value):
    """Floats to 6 significant digits (losses, fractions; times are rounded where measured)."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def dump(data: dict) -> str:
    """The JSON text: one record per line, so a diff shows which runs changed."""
    head = json.dumps({k: v for k, v in data.items() if k != "records"})[:-1]
    lines = [json.dumps(_rounded(r), separators=(",", ":"), allow_nan=False) for r in data["records"]]
    return head + ', "records": [\n' + ",\n".join(lines) + "\n]}\n"


def key(r: dict) -> tuple:
    return (r["task"], r["candidate"], r["seed"], r["blas_threads"])


def summary(data: dict, intervals: list[int], confirm: int, key: str = "valid") -> None:
    """Steps-to-solved per (task, candidate, BLAS threads) and seed, for each validation interval."""
    groups: dict[tuple, list[dict]] = {}
    for r in data["records"]:
        if key == "valid+extra" and not r.get("extra_valid"):
            continue
        groups.setdefault((r["task"], r["candidate"], r["blas_threads"]), []).append(r)
    for interval in intervals:
        print(f"\nsolved = exact match 100% on {key} at {confirm} validations in a row, every {interval} steps "
              "(step; '-' not solved; test exact match at that step)")
        for (task, name, threads), records in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                                     kv[0][2] or 0)):
            cells = []
            for r in sorted(records, key=lambda r: r["seed"]):
                step = solved_step(r["curve"], interval, confirm, key)
                if step is None:
                    cells.append(f"s{r['seed']}:- (run ended at {r['curve'][-1]['step']})")
                else:
                    test = next(p.get("test_exact_match") for p in r["curve"] if p["step"] == step)
                    cells.append(f"s{r['seed']}:{step} ({100 * test:.1f}%)")
            print(f"  {task:8} {name:30} blas {threads}: " + "  ".join(cells))
    print("\nvalidation cost, median over validations at >= 95% (when a stopping rule is near), as a share of "
          "the training time of the interval: greedy = validate() decoding all 500; teacher-forced = one forward")
    for (task, name, threads), records in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0)):
        points = [(p, r["every"]) for r in records for p in r["curve"] if p["valid_exact_match"] >= 0.95
                  and r.get("validation", "validate() every time") == "validate() every time"]
        if not points:
            continue
        greedy = sorted(p["validate_s"] / p["train_s"] * every for p, every in points)
        forced = sorted(p["tf_s"] / p["train_s"] * every for p, every in points)
        line = "  ".join(f"every {i}: greedy {100 * greedy[len(greedy) // 2] / i:.0f}%, teacher-forced "
                         f"{100 * forced[len(forced) // 2] / i:.0f}%" for i in intervals)
        print(f"  {task:8} {name:30} blas {threads}: {line}  ({len(points)} validations)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="copy", choices=["copy", "reverse"])
    p.add_argument("--candidates", nargs="+", default=["current"], type=candidate_name)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--every", type=int, default=25, help="validate every this many steps")
    p.add_argument("--intervals", type=int, nargs="+", default=[25, 50],
                   help="stopping-rule intervals to evaluate (multiples of --every)")
    p.add_argument("--confirm", type=int, default=2, help="validations in a row at 100%% that count as solved")
    p.add_argument("--max-steps", type=int, default=1000)
    p.add_argument("--prune-at", type=int, default=0, help="give up on a seed at this step if ...")
    p.add_argument("--prune-below", type=float, default=0.9, help="... validation never reached this")
    p.add_argument("--extra-valid", type=int, default=0,
                   help="also score this many more held-out sequences, teacher-forced, at every validation")
    p.add_argument("--cheap-validation", action="store_true",
                   help="run validate() (greedy, all 500) only where the teacher-forced exact match is 100%%")
    p.add_argument("--out", default=str(HERE / "copy_recipe_search.json"))
    p.add_argument("--summary", action="store_true", help="print the table from --out, train nothing")
    p.add_argument("--rule-on", choices=["valid", "valid+extra"], default="valid",
                   help="--summary: the sequences the stopping rule looks at")
    args = p.parse_args()
    if any(i % args.every for i in args.intervals):
        p.error(f"every interval in --intervals must be a multiple of --every={args.every}")

    if args.summary:
        summary(load(args.out), args.intervals, args.confirm, args.rule_on)
        return 0
    print(machine_summary(), f"| BLAS threads {blas_threads()}", flush=True)
    for name in args.candidates:
        for seed in args.seeds:
            record = run_one(args.task, name, seed, args)
            data = load(args.out)                       # re-read: another invocation may have added records
            data["records"] = [r for r in data["records"] if key(r) != key(record)] + [record]
            atomic_write_text(args.out, dump(data))
            steps = {i: solved_step(record["curve"], i, args.confirm) for i in args.intervals}
            print(f"{args.task} {name} seed {seed}: solved at {steps} (interval: step), "
                  f"{record['train_seconds']:.0f} s training, {record['validate_seconds']:.0f} s validating",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
