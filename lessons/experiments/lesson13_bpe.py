"""Lesson 13's measurements: tokenization levels on numbers-en-de (§5.1), and checkpoint averaging (§6.1).

    python lessons/experiments/lesson13_bpe.py                       # everything (resumes: finished runs are kept)
    python lessons/experiments/lesson13_bpe.py --part levels         # only the tokenization table
    python lessons/experiments/lesson13_bpe.py --part average --seeds 0 1 2
    python lessons/experiments/lesson13_bpe.py --part levels --redo word "own (word → char)"   # re-run those

Writes lessons/experiments/lesson13_bpe.json: the command, the dates, the commit, the machine,
the budget, and one record per run. The file is rewritten after every run, so a crash loses at
most the run in progress, and a second call skips the runs already there.

**Levels.** numbers-en-de (English number names -> German, 0..9,999; German writes every
number as one compound word) tokenized six ways, each trained with the task's recipe (the
``translate`` preset, lr factor 0.5, clipping 1.0, warm-up 400, batch 64) for the same
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
import subprocess
import sys
import tempfile
import time

import _record  # lessons/experiments/_record.py: the command's provenance
from minitransformer.average import average_checkpoints
from minitransformer.machine import machine_summary
from minitransformer.checkpoint import load_checkpoint
from minitransformer.data.batching import batch_iterator
from minitransformer.data.registry import load_task
from minitransformer.files import atomic_write_text
from minitransformer.layers.loss import cross_entropy_forward
from minitransformer.layers.parameter import eval_mode
from minitransformer.snapshots import kept_checkpoints
from minitransformer.train import Trainer, encode_pairs
from minitransformer.runsetup import build_model, settings_for
from minitransformer.translate import score_translations

HERE = pathlib.Path(__file__).resolve().parent
TASK = "numbers-en-de"
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
    task's recipe model, <unk> rate and lengths on the test split, attention scores per sentence."""
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
    preset, _ = settings_for(task)
    return {"vocab": len(vocab), "parameters": build_model(task, preset).num_parameters(),
            "merges": len(task.bpe.merges) if task.bpe is not None else None,
            "unk_rate_src": unk["src"] / n["src"], "unk_rate_tgt": unk["tgt"] / n["tgt"],
            "mean_src_tokens": n["src"] / len(task.test), "mean_tgt_tokens": n["tgt"] / len(task.test),
            "attention_scores_per_sentence": scores / len(task.test)}


def train_steps(task, steps: int, seed: int = 0, out_dir: str | None = None, **settings) -> tuple:
    """(trainer, history, seconds): the task's recipe for ``steps`` steps, no validation."""
    preset, s = settings_for(task, steps=steps, seed=seed, valid_every=10**9, **settings)
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


def _commit() -> str:
    """The commit the package was at, and whether its files had changes not committed."""
    root = HERE.parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "minitransformer"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + (" (package modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["levels", "average", "all"], default="all")
    p.add_argument("--steps", type=int, default=1500, help="training steps of every run (batch 64)")
    p.add_argument("--every", type=int, default=50, help="averaging: a checkpoint every this many steps")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="averaging: the seeds")
    p.add_argument("--redo", nargs="+", default=[], choices=list(LEVELS), metavar="LEVEL",
                   help="run these levels again although the record has them (after a change to their tokens)")
    p.add_argument("--out", default=str(HERE / "lesson13_bpe.json"))
    args = p.parse_args()
    prov = _record.start(threads=1)            # one BLAS thread; the commit, command, machine and load of this command
    path = pathlib.Path(args.out)
    results = json.loads(path.read_text()) if path.exists() else {"levels": [], "average": []}
    # Each run records its own commit and machine; runs from before that carry the file's.
    for record in results["levels"] + results["average"]:
        record.setdefault("commit", results.get("commit", "unknown"))
        record.setdefault("machine", results.get("machine", "unknown"))
    if args.redo:
        results["levels"] = [r for r in results["levels"] if r["level"] not in args.redo]
    results.update({"command": "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
                    "task": TASK, "budget": {"steps": args.steps, "batch_size": 64, "seed_levels": 0},
                    "averaged": {"level": AVERAGED, "every": args.every, "keep_last": 5},
                    "machine": machine_summary(), "commit": _commit()})
    results.setdefault("dates", [])
    # One provenance entry per command that wrote into the record (_record), naming what it wrote;
    # the runs made before the record had one carry their commit and machine in their own entries.
    wrote = (f"levels {', '.join(args.redo)}" if args.redo else f"part {args.part}")
    results.setdefault("provenance", []).append(_record.snapshot(prov, wrote=wrote))

    def save():
        results["dates"] = sorted(set(results["dates"]) | {time.strftime("%Y-%m-%d")})
        commits: dict[str, list] = {}
        for r in results["levels"]:
            commits.setdefault(r["commit"], []).append(r["level"])
        if results["average"]:
            commits.setdefault(results["average"][0]["commit"], []).append("averaging")
        results["commit"] = "; ".join(f"{c} ({', '.join(names)})" for c, names in commits.items())
        atomic_write_text(str(path), json.dumps(results, indent=1, ensure_ascii=False) + "\n")

    if args.part in ("levels", "all"):
        for name in LEVELS:
            if any(r["level"] == name and r["steps"] == args.steps for r in results["levels"]):
                continue
            record = run_level(name, args.steps) | {"commit": _commit(), "machine": machine_summary()}
            print(json.dumps(record, ensure_ascii=False), flush=True)
            results["levels"] = [r for r in results["levels"] if r["level"] != name] + [record]
            save()
    if args.part in ("average", "all"):
        for seed in args.seeds:
            if any(r["seed"] == seed and r["steps"] == args.steps and r["every"] == args.every
                   for r in results["average"]):
                continue
            record = run_average(seed, args.steps, args.every) | {"commit": _commit(), "machine": machine_summary()}
            print(json.dumps(record), flush=True)
            results["average"] = [r for r in results["average"] if r["seed"] != seed] + [record]
            save()
    results["provenance"][-1] = _record.finish(prov, wrote=wrote)
    save()
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
