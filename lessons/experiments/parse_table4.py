"""Table 4 of the paper (§6.3, English constituency parsing) in miniature.

    OPENBLAS_NUM_THREADS=1 python lessons/experiments/parse_table4.py           # 2 sets x 3 seeds (resumes)
    OPENBLAS_NUM_THREADS=1 python lessons/experiments/parse_table4.py --quick   # a smoke test, to --out

The paper trains a 4-layer Transformer on the WSJ part of the Penn Treebank (40K
sentences, "WSJ only") and on a much larger set that adds parsed sentences from other
corpora ("semi-supervised"), and reports F1 on WSJ section 23: 91.3 and 92.7. Here the
treebank is sampled from the grammar of ``data/pcfg.py``: the task ``parse`` (4,000
training trees) stands for WSJ only, ``parse-large`` (40,000, the first 4,000 being
parse's) for the larger set. Both have the same validation and test sentences for a
seed. Each (task, seed) is trained with the task's own recipe (``train.settings_for``,
``train.make_trainer``, ``Trainer.run``: the command line's path) and scored on the
1,000 test sentences with bracket F1 (evalb, ``metrics.bracket_f1``) twice:

* greedy decoding;
* beam search with §6.3's settings, beam 21 and α = 0.3.

Both decode at most ``data.parsing.PARSE_MAX_OUTPUT`` tokens, the scaled equivalent of
§6.3's "input + 300": the longest linearized tree the grammar can give a 20-word
sentence, so no tree is ever cut short (§6.1's input + 50 would cut those of 14 words
or more).

The JSON also holds the grammar's Viterbi parse (the ceiling) and a right-branching
tree (the floor) from ``parse_baselines.json``, the paper's rows, and two more runs:

* ``xx_targets``: seed 0 of parse trained on Vinyals et al.'s own targets, ``XX`` for
  every word (``trees.linearize(tree)``), against the words the tasks keep
  (``linearize(tree, words=True)``): the measurement behind that choice (trees.py);
* ``lesson``: the small parser that lesson 15 trains live (``LESSON``), so that the
  lesson can re-check its own row against the record. The file is rewritten after every run: a crash loses
at most the run in progress, and a second call skips the runs already there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

from minitransformer.backend import machine_summary
from minitransformer.data import parsing, pcfg
from minitransformer.data.registry import get_task, recipe_for
from minitransformer.decoding import GREEDY, Beam
from minitransformer.files import atomic_write_text
from minitransformer.train import make_trainer, settings_for
from minitransformer.translate import score_translations

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE / "parse_table4.json"
BASELINES = HERE / "parse_baselines.json"

TASKS = {"small": "parse", "large": "parse-large"}
SEEDS = (0, 1, 2)
BEAM = {"size": 21, "alpha": 0.3}          # §6.3: "a beam size of 21 and α = 0.3"

# The paper's Table 4 (WSJ section 23 F1): the Transformer's rows, and Vinyals & Kaiser et
# al.'s LSTM with attention, the model this experiment's linearization comes from.
PAPER = {
    "Transformer (4 layers), WSJ only": 91.3,
    "Transformer (4 layers), semi-supervised": 92.7,
    "Vinyals & Kaiser et al. (2014), WSJ only": 88.3,
    "Vinyals & Kaiser et al. (2014), semi-supervised": 92.1,
}

# The parser lesson 15 trains in the notebook: the parse task's recipe, shortened to fit
# the lesson's time budget, scored greedily on the first LESSON["test"] test sentences.
LESSON = {"task": "parse", "seed": 0, "steps": 600, "test": 300}


def _scores(model, vocab, pairs, strategy=GREEDY) -> dict:
    r = score_translations(model, vocab, pairs, "word", "none", strategy=strategy,
                           max_len=parsing.PARSE_MAX_OUTPUT, scores=parsing.tree_scores)
    out = {k.replace(" %", "").replace(" ", "_").lower(): round(v, 2) for k, v in r["scores"].items()}
    out["seconds"] = round(r["seconds"], 1)
    return out


def _xx_splits(seed: int) -> dict:
    """parse's splits with Vinyals et al.'s targets: XX in place of every word."""
    return {name: [(src, " ".join("XX" if tok[0] not in "()" else tok for tok in tgt.split())) for src, tgt in pairs]
            for name, pairs in get_task("parse").splits(seed).items()}


def train_parser(task_name: str, seed: int, steps: int | None = None, xx_targets: bool = False):
    """(model, vocab, task, seconds): the task's recipe for ``seed`` (``steps`` to shorten it),
    trained through ``train.make_trainer`` and ``Trainer.run`` with one validation at the end.
    xx_targets: train on XX leaves instead of the words (the same trees, brackets and scores)."""
    entry = get_task(task_name)
    task = (dataclasses.replace(entry, splits=_xx_splits) if xx_targets else entry).load(seed)
    steps = steps or task.recipe.settings.steps
    # One validation, at the end, without decoding (valid_decode=0): the test set is decoded below.
    preset, settings = settings_for(task, seed=seed, steps=steps, valid_every=steps, valid_decode=0)
    trainer = make_trainer(task, settings, preset)
    t0 = time.perf_counter()
    trainer.run(progress=False)
    return trainer.model.eval(), trainer.vocab, task, time.perf_counter() - t0


def run_one(size: str, seed: int, n_test: int | None = None, beam: bool = True) -> dict:
    model, vocab, task, seconds = train_parser(TASKS[size], seed)
    test = task.test[:n_test] if n_test else task.test
    record = {"size": size, "task": TASKS[size], "seed": seed, "train_trees": len(task.train),
              "steps": task.recipe.settings.steps, "preset": task.recipe.preset,
              "train_seconds": round(seconds, 1), "test_sentences": len(test),
              "greedy": _scores(model, vocab, test)}
    if beam:
        record["beam"] = _scores(model, vocab, test, Beam(BEAM["size"], BEAM["alpha"]))
    record["load_average"] = round(os.getloadavg()[0], 2)
    return record


def xx_row(seed: int = 0) -> dict:
    model, vocab, task, seconds = train_parser("parse", seed, xx_targets=True)
    return {"task": "parse", "targets": "XX per word (Vinyals et al.)", "seed": seed,
            "steps": task.recipe.settings.steps, "train_seconds": round(seconds, 1),
            "greedy": _scores(model, vocab, task.test), "load_average": round(os.getloadavg()[0], 2)}


def lesson_row() -> dict:
    model, vocab, task, seconds = train_parser(LESSON["task"], LESSON["seed"], LESSON["steps"])
    return {**LESSON, "train_seconds": round(seconds, 1),
            "greedy": _scores(model, vocab, task.test[:LESSON["test"]]),
            "load_average": round(os.getloadavg()[0], 2)}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=HERE, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _summary(runs: list[dict]) -> dict:
    out = {}
    for size in TASKS:
        rows = [r for r in runs if r["size"] == size]
        if not rows:
            continue
        out[size] = {"seeds": [r["seed"] for r in rows]}
        for decoder in ("greedy", "beam"):
            f1s = [r[decoder]["bracket_f1"] for r in rows if decoder in r]
            if f1s:
                out[size][decoder] = {"f1_mean": round(statistics.fmean(f1s), 2),
                                      "f1_min": min(f1s), "f1_max": max(f1s),
                                      "ill_formed_mean": round(statistics.fmean(
                                          r[decoder]["ill_formed"] for r in rows if decoder in r), 2)}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--sizes", nargs="+", choices=list(TASKS), default=list(TASKS))
    p.add_argument("--quick", action="store_true", help="seed 0, the small set, 50 test sentences, no beam")
    p.add_argument("--no-lesson", action="store_true", help="skip the lesson's row")
    p.add_argument("--no-xx", action="store_true", help="skip the row trained on XX targets")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args()
    if args.quick and args.out == str(OUT):
        p.error("--quick writes a smoke-test record: give it its own --out")
    record = json.loads(pathlib.Path(args.out).read_text()) if os.path.exists(args.out) else {"runs": []}
    baselines = json.loads(BASELINES.read_text())
    seeds = [0] if args.quick else args.seeds
    sizes = ["small"] if args.quick else args.sizes
    record.update({
        "command": "OPENBLAS_NUM_THREADS=1 python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M"), "commit": _commit(), "machine": machine_summary(),
        "threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "sizes": {size: pcfg.SIZES[size] for size in TASKS}, "test_sentences": 1_000,
        "recipes": {size: {"task": name, "preset": recipe_for(name).preset, **vars(recipe_for(name).settings)}
                    for size, name in TASKS.items()},
        "beam": BEAM, "max_output_len": parsing.PARSE_MAX_OUTPUT,
        "paper": PAPER,
        "ceiling_viterbi_f1": {s["seed"]: s["ceiling_viterbi"]["f1"] for s in baselines["seeds"]},
        "floor_right_branching_f1": {s["seed"]: s["floor_right_branching"]["f1"] for s in baselines["seeds"]},
        "ceiling_f1_mean": baselines["ceiling_f1_mean"], "floor_f1_mean": baselines["floor_f1_mean"],
    })
    t_all = time.perf_counter()
    for size in sizes:
        for seed in seeds:
            if any(r["size"] == size and r["seed"] == seed for r in record["runs"]):
                print(f"{size} seed {seed}: already in {args.out}, skipped")
                continue
            t0 = time.perf_counter()
            run = run_one(size, seed, n_test=50 if args.quick else None, beam=not args.quick)
            run["wall_seconds"] = round(time.perf_counter() - t0, 1)
            record["runs"].append(run)
            record["summary"] = _summary(record["runs"])
            atomic_write_text(args.out, json.dumps(record, indent=1) + "\n")
            beam = f", beam {run['beam']['bracket_f1']}" if "beam" in run else ""
            print(f"{size} seed {seed}: greedy F1 {run['greedy']['bracket_f1']}{beam} "
                  f"(trained {run['train_seconds']} s, load {run['load_average']})", flush=True)
    if not args.no_xx and not args.quick and "xx_targets" not in record:
        record["xx_targets"] = xx_row()
        atomic_write_text(args.out, json.dumps(record, indent=1) + "\n")
        print(f"XX targets, seed 0: greedy F1 {record['xx_targets']['greedy']['bracket_f1']}", flush=True)
    if not args.no_lesson and not args.quick and "lesson" not in record:
        record["lesson"] = lesson_row()
        print(f"lesson row: greedy F1 {record['lesson']['greedy']['bracket_f1']} on {LESSON['test']} sentences "
              f"(trained {record['lesson']['train_seconds']} s)", flush=True)
    record["summary"] = _summary(record["runs"])
    record["wall_seconds_this_call"] = round(time.perf_counter() - t_all, 1)
    atomic_write_text(args.out, json.dumps(record, indent=1) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
