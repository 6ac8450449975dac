"""Lesson 13's measurements: tokenization levels on numbers-en-de (§5.1), and checkpoint averaging (§6.1).

    python lessons/experiments/lesson13_bpe.py                       # everything (resumes: finished runs are kept)
    python lessons/experiments/lesson13_bpe.py --part levels         # only the tokenization table
    python lessons/experiments/lesson13_bpe.py --part average --seeds 0 1 2
    python lessons/experiments/lesson13_bpe.py --part live-check     # lesson 13's live run on other processors

Writes lessons/experiments/lesson13_bpe.json through ``_record`` (one BLAS thread; the provenance
of every call that wrote into it: commit, command, dates, machine, BLAS, load, and what it wrote),
the budget, one record per run, and the live check of the run lesson 13 repeats (``LIVE``). The file
is rewritten after every run, so a crash loses at most the run in progress, and a second call on the
same commit skips the runs already there.

**Levels.** numbers-en-de (English number names -> German, 0..9,999; German writes every
number as one compound word) tokenized six ways, each trained with the task's recipe of the record
(``translation.RECORD_RECIPES``: the ``translate`` preset, batches of one length, lr factor 0.5, clipping 1.0,
warm-up 400, batch 64; the task's default recipe has trained faster since issue 37) for the same
budget of ``--steps`` steps, seed 0, the same split:

* the task's own tokenization (English words -> German characters),
* characters on both sides, words on both sides,
* byte-pair encoding with 50, 200 and 500 merges (learned on the training split, both sides).

For each: vocabulary, parameters, <unk> rate on the test split, mean tokens per sentence,
attention scores per sentence (S² + T² + T·S: encoder self, decoder self and encoder-decoder
attention, per layer and head, with S = source + <eos> and T = target + <bos>), training
time, greedy exact match, BLEU (the task's own scorer: character BLEU on the detokenized
German) and chrF on the 1,000 test pairs. Training runs without validation, so the time is
the training steps only.

**Averaging.** BPE with 200 merges, ``--steps`` steps, a checkpoint every ``--every`` steps
kept with ``keep_last=5`` (the package's ``train --keep-last``), for each seed: the final
checkpoint against the average of the last five (``average.average_checkpoints``): test
perplexity (teacher-forced, unsmoothed, per target piece) and greedy exact match / BLEU / chrF.

Every run goes through the package's own path: ``data.registry.load_task``, ``runsetup.settings_for``,
``runsetup.build_model``, ``train.Trainer`` and ``translate.score_translations``. Lesson 13 imports
``tokenization_stats`` and ``train_steps`` from here to repeat parts of it live.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
import tempfile
import time

import _record

from minitransformer.average import average_checkpoints
from minitransformer.machine import machine_summary
from minitransformer.checkpoint import load_checkpoint
from minitransformer.data.batching import batch_iterator
from minitransformer.data.registry import load_task
from minitransformer.layers.loss import cross_entropy_forward
from minitransformer.layers.parameter import eval_mode
from minitransformer.snapshots import kept_checkpoints
from minitransformer.train import Trainer, encode_pairs
from minitransformer.data.translation import RECORD_RECIPES
from minitransformer.runsetup import build_model, settings_for
from minitransformer.translate import score_translations

HERE = pathlib.Path(__file__).resolve().parent
TASK = "numbers-en-de"
RECIPE = RECORD_RECIPES[TASK]                 # the recipe the record was trained with (by-length batches)
LEVELS = {                                    # name -> load_task's tokenization arguments
    "own (word → char)": {},
    "char": {"level": "char"},
    "word": {"level": "word"},
    "bpe 50": {"level": "bpe", "bpe_merges": 50},
    "bpe 200": {"level": "bpe", "bpe_merges": 200},
    "bpe 500": {"level": "bpe", "bpe_merges": 500},
}
AVERAGED = "bpe 200"
LOSS_AT = 100                                 # the training loss at this step is recorded, for the live re-run


def tokenization_stats(task) -> dict:
    """What a tokenization costs and loses, before any training: vocabulary, parameters of the
    record recipe's model, <unk> rate and lengths on the test split, attention scores per sentence."""
    vocab = task.vocab
    unk = {side: 0 for side in ("src", "tgt")}
    n = {side: 0 for side in ("src", "tgt")}
    scores = 0
    for src, tgt in task.test:
        for side, tokens in (("src", src), ("tgt", tgt)):
            unk[side] += sum(token not in vocab for token in tokens)
            n[side] += len(tokens)
        S, T = len(src) + 1, len(tgt) + 1      # + <eos> on the source; the decoder reads <bos> + target
        scores += S * S + T * T + T * S
    preset, _ = settings_for(RECIPE)
    return {"vocab": len(vocab), "parameters": build_model(task, preset).num_parameters(),
            "merges": len(task.bpe.merges) if task.bpe is not None else None,
            "unk_rate_src": unk["src"] / n["src"], "unk_rate_tgt": unk["tgt"] / n["tgt"],
            "mean_src_tokens": n["src"] / len(task.test), "mean_tgt_tokens": n["tgt"] / len(task.test),
            "attention_scores_per_sentence": scores / len(task.test)}


def train_steps(task, steps: int, seed: int = 0, out_dir: str | None = None, **settings) -> tuple:
    """(trainer, history, seconds): the record's recipe for ``steps`` steps, no validation."""
    preset, s = settings_for(RECIPE, steps=steps, seed=seed, valid_every=10**9, **settings)
    model = build_model(task, preset, seed=seed)
    trainer = Trainer(model, task.vocab, encode_pairs(task.vocab, task.train), [], s, out_dir, levels=task.levels)
    t0 = time.perf_counter()
    history = trainer.run(progress=False)
    return trainer, history, time.perf_counter() - t0


def perplexity(model, vocab, pairs) -> float:
    """exp(mean -log p(correct piece)) over the target tokens of ``pairs`` (+ <eos>), teacher-forced."""
    nll, n = 0.0, 0
    with eval_mode(model):
        for b in batch_iterator(encode_pairs(vocab, pairs), 100, None, None, shuffle=False, pad_id=vocab.pad_id,
                                bos_id=vocab.bos_id, eos_id=vocab.eos_id, xp=model.xp):
            logits = model.forward(b.src, b.tgt_in, b.src_mask, b.tgt_mask)
            loss, _ = cross_entropy_forward(logits, b.tgt_out, vocab.pad_id, 0.0)
            nll += loss * b.n_tokens
            n += b.n_tokens
    return math.exp(nll / n)


def scores(model, task) -> dict:
    r = score_translations(model.eval(), task.vocab, task.test, task.tgt_level, task.bleu_tokenize)
    return {"exact_match": r["exact_match"], "bleu": r["bleu"], "chrf": r["chrf"]}


def loss_at(history, step: int) -> float | None:
    return next((r["loss"] for r in history if r.get("step") == step), None)


def run_level(name: str, steps: int) -> dict:
    task = load_task(TASK, **LEVELS[name])
    load_before = os.getloadavg()[0]
    trainer, history, seconds = train_steps(task, steps)
    return {"level": name, **tokenization_stats(task), "steps": steps, "train_seconds": round(seconds, 1),
            "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            f"loss_at_{LOSS_AT}": loss_at(history, LOSS_AT), "final_loss": history[-1]["loss"],
            **scores(trainer.model, task)}


def run_average(seed: int, steps: int, every: int) -> dict:
    task = load_task(TASK, **LEVELS[AVERAGED])
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as out:
        trainer, history, seconds = train_steps(task, steps, seed, out, checkpoint_every=every, keep_last=5)
        kept = kept_checkpoints(out)
        final = load_checkpoint(os.path.join(out, "checkpoint.npz"))
        average = average_checkpoints([load_checkpoint(path) for _, path in kept])
        singles = [perplexity(load_checkpoint(path).model, task.vocab, task.test) for _, path in kept]
        record = {"seed": seed, "steps": steps, "every": every, "kept_steps": [k for k, _ in kept],
                  "train_seconds": round(seconds, 1), "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                  "final": {"perplexity": perplexity(final.model, task.vocab, task.test), **scores(final.model, task)},
                  "average": {"perplexity": perplexity(average.model, task.vocab, task.test),
                              **scores(average.model, task)},
                  "kept_perplexities": singles}
    return record


# -- the live check: lesson 13's first 100 steps of the bpe 200 run ---------------------------

# The run lesson 13 repeats live (keeping its last checkpoints for the averaging section), and what it asserts:
# the training loss logged at step LOSS_AT (the mean over its last log_every steps). After 100 steps another
# processor's rounding has moved it by little: a check of the arithmetic, on seed 0 only.
LIVE = {"level": AVERAGED, "steps": LOSS_AT, "seed": 0, "checkpoint_every": 20, "keep_last": 5}
LIVE_CHECK = ("loss", f"training loss logged at step {LOSS_AT}, the mean over steps {LOSS_AT - 9}-{LOSS_AT} "
              "(relative)", "rel", 0.001, 0.001)


def live_run(task=None, out_dir: str | None = None) -> tuple:
    """(trainer, history, seconds) of the live run: LIVE's level, steps and seed, keeping checkpoints in out_dir."""
    task = task or load_task(TASK, **LEVELS[LIVE["level"]])
    extra = {k: LIVE[k] for k in ("checkpoint_every", "keep_last")} if out_dir else {}
    return train_steps(task, LIVE["steps"], LIVE["seed"], out_dir, **extra)


def live_values(history) -> dict:
    return {"loss": loss_at(history, LIVE["steps"])}


def check_live(results: dict, history) -> list[str]:
    """Assert the record's live check on a live run's history; one line per check, for the lesson to print."""
    return _record.assert_checks(results["live_check"], live_values(history))


def live_checks(results: dict) -> tuple[list, dict]:
    """Re-run LIVE under ``_record.variants()`` (seed 0 on every machine) in fresh processes; the tolerance."""
    recorded = next(r for r in results["levels"] if r["level"] == LIVE["level"])[f"loss_at_{LOSS_AT}"]
    made_on = {b["architecture"] for p in results["provenance"] if LIVE["level"] in (p.get("wrote") or [])
               for b in p["blas"]}
    if len(made_on) != 1:
        raise SystemExit(f"error: the level {LIVE['level']!r} was made on the kernels {sorted(made_on)}, not one")
    reruns = {v["name"]: _record.rerun(__file__, ["--live-row", str(v["seed"])], v)["loss"]
              for v in _record.variants((LIVE["seed"],), LIVE["seed"], record_kernel=made_on.pop())}
    key, metric, kind, floor, step = LIVE_CHECK
    check = _record.measured_check(
        f"{LIVE['level']}, seed {LIVE['seed']}, the first {LIVE['steps']} steps", metric, recorded, reruns, kind,
        floor, step, "re-runs of lesson13_bpe.train_steps in fresh processes, one BLAS thread, seed 0",
        fails_when="the first 100 steps differ: the arithmetic (tokenization, initialisation, batches, schedule, "
                   "loss, Adam) is not the one that made the record", level=LIVE["level"], seed=LIVE["seed"],
        steps=LIVE["steps"], key=key)
    print(check["metric"], "recorded", recorded, "spread", check["observed_spread"], "tolerance", check["tolerance"])
    return [check], reruns


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["levels", "average", "all", "live-check"], default="all",
                   help="all: the levels, the averages and the live check (lesson 13's live run re-run on other "
                        "processors: its tolerance)")
    p.add_argument("--steps", type=int, default=1500, help="training steps of every run (batch 64)")
    p.add_argument("--every", type=int, default=50, help="averaging: a checkpoint every this many steps")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="averaging: the seeds")
    p.add_argument("--out", default=str(HERE / "lesson13_bpe.json"))
    p.add_argument("--live-row", type=int, help=argparse.SUPPRESS)    # a seed: the live run's loss as JSON
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.live_row is not None:
        _record.limit_blas_threads(args.threads)
        _record.emit(live_values(train_steps(load_task(TASK, **LEVELS[LIVE["level"]]), LIVE["steps"],
                                             args.live_row)[1]))
        return 0
    path = pathlib.Path(args.out)
    prov = _record.start(threads=1)                  # one BLAS thread from here on
    results = json.loads(path.read_text()) if path.exists() else {"levels": [], "average": []}
    provenance = results.setdefault("provenance", [])  # every call that wrote into the record, in order
    made = {p["commit"] for p in provenance if p.get("wrote") != "live_check"}
    if args.part != "live-check" and (results["levels"] or results["average"]) and made != {prov["commit"]}:
        raise SystemExit(f"error: {path} holds runs made at {', '.join(sorted(made)) or 'a commit before _record'}, "
                         f"this checkout is at {prov['commit']}: runs of two versions are not one table; move the "
                         "file away to start afresh (--out)")
    for earlier in provenance:
        if earlier.get("finished") is None:          # a call that crashed or was stopped
            earlier["interrupted"] = True
    wrote: list[str] = []
    provenance.append(_record.snapshot(prov, wrote=wrote))
    if args.part != "live-check":
        results.update({"task": TASK, "budget": {"steps": args.steps, "batch_size": 64, "seed_levels": 0},
                        "averaged": {"level": AVERAGED, "every": args.every, "keep_last": 5},
                        "machine": machine_summary()})

    def save():
        provenance[-1] = _record.snapshot(prov, wrote=wrote)
        _record.write(path, results)

    if args.part in ("levels", "all"):
        for name in LEVELS:
            if any(r["level"] == name and r["steps"] == args.steps for r in results["levels"]):
                continue
            record = run_level(name, args.steps)
            print(json.dumps(record, ensure_ascii=False), flush=True)
            results["levels"] = [r for r in results["levels"] if r["level"] != name] + [record]
            wrote.append(name)
            save()
    if args.part in ("average", "all"):
        for seed in args.seeds:
            if any(r["seed"] == seed and r["steps"] == args.steps and r["every"] == args.every
                   for r in results["average"]):
                continue
            record = run_average(seed, args.steps, args.every)
            print(json.dumps(record), flush=True)
            results["average"] = [r for r in results["average"] if r["seed"] != seed] + [record]
            wrote.append(f"average seed {seed}")
            save()
    if args.part in ("live-check", "all"):
        results["live_check"], results["live_check_reruns"] = live_checks(results)
        results["live_check_machines"] = _record.played()
        wrote.append("live_check")
    provenance[-1] = _record.finish(prov, wrote=wrote)
    _record.write(path, results)
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
