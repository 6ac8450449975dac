"""Table 4 of the paper (§6.3, English constituency parsing) in miniature.

    python lessons/experiments/parse_table4.py                   # 2 sets x 3 seeds (resumes)
    python lessons/experiments/parse_table4.py --quick --out F   # a smoke test
    python lessons/experiments/parse_table4.py --live-check      # lesson 15's row on other processors and seeds

The paper trains a 4-layer Transformer on the WSJ part of the Penn Treebank (40K
sentences, "WSJ only") and on a much larger set that adds parsed sentences from other
corpora ("semi-supervised"), and reports F1 on WSJ section 23: 91.3 and 92.7. Here the
treebank is sampled from the grammar of ``data/pcfg.py``: the task ``parse`` (8,000
training trees) stands for WSJ only, ``parse-large`` (80,000, the first 8,000 being
parse's) for the larger set. Both have the same validation and test sentences for a
seed. Each (task, seed) is trained with the Table 4 recipe (``parsing.TABLE4_RECIPE``, ``runsetup.settings_for``,
``runsetup.make_trainer``, ``Trainer.run``: the command line's path). The recipe ends
with §6.1's average of the run's last 5 checkpoints (``average_last``), which is the
model a row scores, on the 1,000 test sentences with bracket F1 (evalb,
``data.evalb.bracket_f1``) twice:

* greedy decoding;
* beam search with §6.3's settings, beam 21 and α = 0.3.

The last step's checkpoint is scored greedily beside it (``last_checkpoint``): what
the average is worth.

Both decode at most ``data.parsing.PARSE_MAX_OUTPUT`` tokens, the scaled equivalent of
§6.3's "input + 300": the longest linearized tree the grammar can give a 20-word
sentence, so no tree is ever cut short (§6.1's input + 50 would cut those of 14 words
or more).

The JSON also holds the paper's rows and two more runs (what the grammar's own parsers
score on the same test sets, the references a row is read against, and the right-branching
floor are in ``parse_baselines.json``, written by ``parse_baselines.py``; lesson 15 reads both):

* ``lesson``: the small parser that lesson 15 trains live (``LESSON``: the parse recipe
  cut to a few hundred steps, trained in chunks so that no notebook cell runs long), so
  that the lesson can re-check its own row against the record;
* ``xx_targets``: the same small run on Vinyals et al.'s own targets, ``XX`` for every
  word (``trees.linearize(tree)``), against the words the tasks keep
  (``linearize(tree, words=True)``): the measurement behind that choice (trees.py).

A row can also come from a checkpoint that ``python -m minitransformer train --task
parse[-large] --seed S`` wrote with the Table 4 recipe (``--checkpoint PATH``; the
script refuses one trained with other settings): ``parse-large``'s default, and for
``parse`` its default with ``table4_options("parse")`` (``--preset parse --steps 10000``
and the checkpoint spacing: its default is a faster recipe since 2026-12-05). The command
line and this script train through the same functions, so the row is the one the script
would have made.
``--beam-test N`` scores the beam on the first N test sentences only (beam 21 is slow
on a CPU); the record says how many.

The record is written through ``_record`` (one BLAS thread; the provenance of every call
that wrote into it: commit, command, dates, machine, BLAS, load, and what it wrote), and
each row names the date, commit and load of the call that made it. The file is rewritten
after every run: a crash loses at most the run in progress (its call is then marked
``interrupted``), and a second call skips the runs already there. A checkpoint's row is
as reproducible as its training: train it with one BLAS thread too
(``OPENBLAS_NUM_THREADS=1 python -m minitransformer train ...``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))                  # _record, when a lesson or a test loads this file by path

import _record

from minitransformer import snapshots
from minitransformer.checkpoint import load_checkpoint
from minitransformer.cli.common import train_option
from minitransformer.data import parsing, pcfg
from minitransformer.data.registry import get_task
from minitransformer.decoding import GREEDY, Beam
from minitransformer.runsetup import make_trainer, settings_for
from minitransformer.translate import score_translations

OUT = HERE / "parse_table4.json"
# Keys that earlier versions copied from parse_baselines.json; that record is now read directly.
COPIED_BEFORE = ("ceiling_viterbi_f1", "floor_right_branching_f1", "ceiling_f1_mean", "floor_f1_mean")

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

# The recipe every row of the record was trained with (both sizes): the parse tasks' default recipe
# when the record was made, kept apart so that a faster default leaves the record's runs as they were.
RECIPE = parsing.TABLE4_RECIPE

# The parser lesson 15 trains in the notebook: the Table 4 recipe, shortened to fit
# the lesson's time budget, scored greedily on the first LESSON["test"] test sentences.
LESSON = {"task": "parse", "seed": 0, "chunks": (200, 200, 200), "test": 200}


def _scores(model, vocab, pairs, strategy=GREEDY) -> dict:
    r = score_translations(model, vocab, pairs, "word", "none", strategy=strategy,
                           max_len=parsing.PARSE_MAX_OUTPUT, scores=parsing.tree_scores)
    out = {k.replace(" %", "").replace(" ", "_").replace("-", "_").lower(): round(v, 2) for k, v in r["scores"].items()}
    out["seconds"] = round(r["seconds"], 1)
    return out


def _xx_splits(seed: int) -> dict:
    """parse's splits with Vinyals et al.'s targets: XX in place of every word."""
    return {name: [(src, " ".join("XX" if tok[0] not in "()" else tok for tok in tgt.split())) for src, tgt in pairs]
            for name, pairs in get_task("parse").splits(seed).items()}


def parser_trainer(task_name: str, seed: int, steps: int | None = None, xx_targets: bool = False,
                   out_dir: str | None = None):
    """(trainer, task): the Table 4 recipe for ``seed`` (``steps`` to shorten it), set up by
    ``runsetup.settings_for`` and ``runsetup.make_trainer`` as the command line does, not yet run.
    xx_targets: train on XX leaves instead of the words (the same trees, brackets and scores).
    out_dir: where the run writes its checkpoints (needed for the recipe's §6.1 average; None:
    nothing is written, and there is no average)."""
    entry = get_task(task_name)
    task = (dataclasses.replace(entry, splits=_xx_splits) if xx_targets else entry).load(seed)
    steps = steps or RECIPE.settings.steps
    # Validation without decoding (valid_decode=0): the test set is decoded afterwards.
    preset, settings = settings_for(RECIPE, seed=seed, steps=steps, valid_every=steps, valid_decode=0)
    return make_trainer(task, settings, preset, out_dir), task


def train_more(trainer, steps: int) -> float:
    """Run ``trainer`` on for ``steps`` more optimizer steps (``Trainer.run`` up to its new
    ``settings.steps``); returns the seconds it took. Training in chunks this way takes the
    same steps, batches and dropout masks as one run of the sum (the schedule, the batch plan
    and the dropout seeds depend on the step number alone)."""
    target = trainer.step + steps
    trainer.settings = dataclasses.replace(trainer.settings, steps=target, valid_every=target)
    t0 = time.perf_counter()
    trainer.model.train()
    trainer.run(progress=False)
    return time.perf_counter() - t0


def _score_row(record: dict, model, vocab, task, n_test: int | None, beam: bool, beam_test: int | None) -> dict:
    test = task.test[:n_test] if n_test else task.test
    record.update({"test_sentences": len(test), "greedy": _scores(model, vocab, test)})
    if beam:
        beam_pairs = test[:beam_test] if beam_test else test
        record["beam"] = _scores(model, vocab, beam_pairs, Beam(BEAM["size"], BEAM["alpha"]))
        record["beam_test_sentences"] = len(beam_pairs)
        if len(beam_pairs) < len(test):       # greedy on the same sentences, for a fair beam-vs-greedy
            record["greedy_on_beam_sentences"] = _scores(model, vocab, beam_pairs)
    record.update(_row_provenance())
    return record


def _averaged(record: dict, ckpt, run_dir: str, k: int | None, task):
    """The model a row scores: with the recipe's ``average_last`` k, §6.1's average of the run's
    last k kept checkpoints (its average.npz, written by ``train``; made here the same way,
    ``snapshots.write_average``, if the run did not write one), and the last step's checkpoint
    scored greedily beside it (``record["last_checkpoint"]``); without, the checkpoint itself."""
    if not k:
        return ckpt.model.eval()
    path = os.path.join(run_dir, snapshots.AVERAGE_FILE)
    made_by = f"the {snapshots.AVERAGE_FILE} found in the run folder"     # train's, if it ran with average_last
    if not os.path.exists(path):
        kept = snapshots.kept_checkpoints(run_dir)
        if len(kept) < k or kept[-1][0] != ckpt.step:
            raise SystemExit(f"error: {run_dir} has no {snapshots.AVERAGE_FILE} and not the last {k} checkpoints "
                             f"of step {ckpt.step} to make it from (kept: {[step for step, _ in kept]}); train with "
                             "the recipe's --checkpoint-every and --keep-last (--checkpoint)")
        snapshots.write_average(run_dir, k)
        made_by = "parse_table4.py (snapshots.write_average, as train does at its last step)"
    average = load_checkpoint(path)
    steps = average.extra["average"]["steps"]
    if len(steps) != k or max(steps) != ckpt.step:
        raise SystemExit(f"error: {path} averages steps {steps}, not the last {k} of step {ckpt.step} (--checkpoint)")
    record["average"] = {"steps": steps, "made_by": made_by}
    record["last_checkpoint"] = {"greedy": _scores(ckpt.model.eval(), ckpt.vocab, task.test)}
    return average.model.eval()


def run_one(size: str, seed: int, n_test: int | None = None, beam: bool = True, beam_test: int | None = None) -> dict:
    """Train (size, seed) with the Table 4 recipe into a temporary folder, as ``train`` would, and score it."""
    with tempfile.TemporaryDirectory(prefix="parse_table4-") as out_dir:
        trainer, task = parser_trainer(TASKS[size], seed, out_dir=out_dir)
        seconds = train_more(trainer, trainer.settings.steps)
        ckpt = load_checkpoint(trainer.checkpoint_path)
        record = {"size": size, "task": TASKS[size], "seed": seed, "train_trees": len(task.train),
                  "steps": ckpt.step, "preset": RECIPE.preset, "trained_by": "this script",
                  "train_seconds": round(seconds, 1)}
        model = _averaged(record, ckpt, out_dir, RECIPE.settings.average_last, task)
        return _score_row(record, model, ckpt.vocab, task, n_test, beam, beam_test)


def table4_options(name: str) -> list[str]:
    """The options that make ``train --task NAME`` train the Table 4 recipe: none where it is the
    task's default (parse-large), the settings that differ otherwise (parse), as ``train`` spells them."""
    default = get_task(name).recipe
    options = [] if default.preset == RECIPE.preset else ["--preset", RECIPE.preset]
    for field, value in vars(RECIPE.settings).items():
        if getattr(default.settings, field) != value:
            flag = train_option(field)
            options += [flag if value else flag.replace("--", "--no-", 1)] if isinstance(value, bool) else [flag, str(value)]
    return options


# Settings that do not change the weights a run ends with: a checkpoint may differ from the recipe in these.
NOT_TRAINING = ("seed", "valid_every", "checkpoint_every", "keep_last", "average_last", "valid_decode")


def checkpoint_row(path: str, beam: bool = True, beam_test: int | None = None, train_seconds: float | None = None) -> dict:
    """A row from a checkpoint of ``train --task parse[-large] --seed S [table4_options]``: the Table 4 recipe."""
    ckpt = load_checkpoint(path)
    name = ckpt.extra.get("task")
    size = next((k for k, v in TASKS.items() if v == name), None)
    if size is None:
        raise SystemExit(f"error: {path} was trained on {name!r}, not on one of {sorted(TASKS.values())} (--checkpoint)")
    saved = ckpt.extra.get("settings", {})
    recipe = vars(RECIPE.settings)
    differ = {k: (saved.get(k), v) for k, v in recipe.items() if k not in NOT_TRAINING and saved.get(k) != v}
    if differ or ckpt.extra.get("preset") != RECIPE.preset or ckpt.step != recipe["steps"]:
        raise SystemExit(f"error: {path} was not trained with the Table 4 recipe (parsing.TABLE4_RECIPE: `train --task {name} "
                         f"{' '.join(table4_options(name))}`; saved vs recipe: {differ}, "
                         f"preset {ckpt.extra.get('preset')!r}, step {ckpt.step}) (--checkpoint)")
    seed = saved["seed"]
    task = get_task(name).load(seed)
    record = {"size": size, "task": name, "seed": seed, "train_trees": len(task.train), "steps": ckpt.step,
              "preset": ckpt.extra.get("preset"),
              "trained_by": " ".join(["python -m minitransformer train --task", name, "--seed", str(seed),
                                      *table4_options(name)]),
              "train_seconds": train_seconds}
    model = _averaged(record, ckpt, os.path.dirname(os.path.abspath(path)), recipe["average_last"], task)
    return _score_row(record, model, ckpt.vocab, task, None, beam, beam_test)


def _chunked_row(xx_targets: bool, seed: int = LESSON["seed"]) -> dict:
    trainer, task = parser_trainer(LESSON["task"], seed, sum(LESSON["chunks"]), xx_targets)
    seconds = sum(train_more(trainer, steps) for steps in LESSON["chunks"])
    return {**LESSON, "seed": seed, "targets": "XX per word (Vinyals et al.)" if xx_targets else "words",
            "steps": trainer.step, "train_seconds": round(seconds, 1),
            "greedy": _scores(trainer.model.eval(), trainer.vocab, task.test[:LESSON["test"]]),
            **_row_provenance()}


def lesson_row() -> dict:
    """The parser lesson 15 trains live, scored greedily on the first LESSON["test"] test sentences."""
    return _chunked_row(xx_targets=False)


def xx_row() -> dict:
    """The lesson's run on XX targets: the same steps, seed and test sentences."""
    return _chunked_row(xx_targets=True)


def _row_provenance() -> dict:
    """Where one row was made: the load average as it finished, the date, and the commit of the
    call (the call's own provenance, in the record's ``provenance`` list, has the rest)."""
    return {"load_average": round(os.getloadavg()[0], 2), "date": time.strftime("%Y-%m-%d %H:%M"),
            "commit": _record.commit()["commit"]}


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
        last = [r["last_checkpoint"]["greedy"]["bracket_f1"] for r in rows if "last_checkpoint" in r]
        if last:                                 # the last step alone, without §6.1's average
            out[size]["last_checkpoint_greedy"] = {"f1_mean": round(statistics.fmean(last), 2),
                                                   "f1_min": min(last), "f1_max": max(last)}
    return out


# -- the live check: what lesson 15's live parser must show -----------------------------------

LIVE_SEEDS = (0, 1)          # the seeds of the re-runs that measure the tolerance (the lesson's is LESSON["seed"])
# What lesson 15 asserts of its live run: key -> (metric, kind, floor, rounding step). Its null is the
# right-branching floor of LESSON's seed: a parser that learned no structure.
LIVE_CHECK = ("bracket_f1", f"greedy bracket F1 on the first {LESSON['test']} test sentences, after "
              f"{sum(LESSON['chunks'])} steps (F1 points)", "abs", 1.0, 0.5)


def live_values(scores: dict) -> dict:
    """What the check compares, from score_translations' "scores" (as the lesson computes them)."""
    return {LIVE_CHECK[0]: float(scores["bracket F1"])}


def check_live(record: dict, scores: dict) -> list[str]:
    """Assert the record's live check on the lesson's live scores; one line per check, for the lesson to print."""
    return _record.assert_checks(record["live_check"], live_values(scores))


def live_scores() -> dict:
    """Lesson 15's live run, as its cells make it (parser_trainer, train_more per chunk, greedy scores)."""
    trainer, task = parser_trainer(LESSON["task"], LESSON["seed"], sum(LESSON["chunks"]))
    for steps in LESSON["chunks"]:
        train_more(trainer, steps)
    return score_translations(trainer.model.eval(), trainer.vocab, task.test[:LESSON["test"]], "word", "none",
                              max_len=parsing.PARSE_MAX_OUTPUT, scores=parsing.tree_scores)["scores"]


def live_checks(record: dict) -> tuple[list, dict]:
    """Re-run the lesson's row under ``_record.variants(LIVE_SEEDS)`` (the record's own conditions: the kernel
    its lesson row was made on) in fresh processes; the tolerance of its F1."""
    made_on = {b["architecture"] for p in record["provenance"] if "lesson" in (p.get("wrote") or [])
               for b in p["blas"]}
    if len(made_on) != 1:
        raise SystemExit(f"error: the lesson row was made on the kernels {sorted(made_on)}, not one")
    reruns = {v["name"]: _record.rerun(__file__, ["--live-row", str(v["seed"])], v)["bracket_f1"]
              for v in _record.variants(LIVE_SEEDS, LESSON["seed"], record_kernel=made_on.pop())}
    key, metric, kind, floor, step = LIVE_CHECK
    check = _record.measured_check(
        f"the lesson's parser: {LESSON['task']}, seed {LESSON['seed']}, {sum(LESSON['chunks'])} steps", metric,
        record["lesson"]["greedy"]["bracket_f1"], reruns, kind, floor, step,
        "re-runs of parse_table4.lesson_row in fresh processes, one BLAS thread, seeds "
        + ", ".join(map(str, LIVE_SEEDS)), null=record["floor_right_branching_f1"][str(LESSON["seed"])],
        fails_when="the live parser is not the recorded one within what processors and seeds moved it (the null: "
                   "the right-branching floor, a parser that learned no structure)",
        section="lesson", seed=LESSON["seed"], steps=sum(LESSON["chunks"]), key=key)
    print(check["metric"], "recorded", check["recorded"], "spread", check["observed_spread"], "tolerance",
          check["tolerance"], flush=True)
    return [check], reruns


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--sizes", nargs="*", choices=list(TASKS), default=list(TASKS),
                   help="the training sets to run (none: only the lesson's rows and the checkpoints')")
    p.add_argument("--quick", action="store_true", help="seed 0, the small set, 50 test sentences, no beam")
    p.add_argument("--no-lesson", action="store_true", help="skip the lesson's row")
    p.add_argument("--no-xx", action="store_true", help="skip the row trained on XX targets")
    p.add_argument("--checkpoint", action="append", default=[], metavar="PATH",
                   help="score this checkpoint of `train --task parse[-large] --seed S` (the Table 4 recipe: table4_options) "
                        "as its (size, seed) row instead of training it; repeat for more")
    p.add_argument("--train-seconds", type=float, action="append", default=[],
                   help="the training time of each --checkpoint, as train printed it (recorded as given)")
    p.add_argument("--beam-test", type=int, default=None, metavar="N",
                   help="score the beam on the first N test sentences only (default: all 1,000)")
    p.add_argument("--no-beam", action="store_true", help="greedy only")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--live-check", action="store_true",
                   help="only re-run the lesson's row on other processors and seeds, and write its tolerance")
    p.add_argument("--live-row", type=int, help=argparse.SUPPRESS)    # a seed: the lesson's row as JSON
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.live_row is not None:
        _record.limit_blas_threads(args.threads)
        _record.emit(_chunked_row(False, args.live_row)["greedy"])
        return 0
    if args.live_check:
        prov = _record.start(threads=1)
        record = json.loads(pathlib.Path(args.out).read_text())
        record["live_check"], record["live_check_reruns"] = live_checks(record)
        record["live_check_machines"] = _record.played()
        record["provenance"].append(_record.finish(prov, wrote=["live_check"]))
        _record.write(args.out, record)
        print("wrote", args.out)
        return 0
    if args.quick and args.out == str(OUT):
        p.error("--quick writes a smoke-test record: give it its own --out")
    prov = _record.start(threads=1)                # one BLAS thread from here on
    record = json.loads(pathlib.Path(args.out).read_text()) if os.path.exists(args.out) else {"runs": []}
    seeds = [0] if args.quick else args.seeds
    sizes = ["small"] if args.quick else args.sizes
    provenance = record.setdefault("provenance", [])   # every call that wrote into the record, in order
    for earlier in provenance:
        if earlier.get("finished") is None:          # a call that crashed or was stopped
            earlier["interrupted"] = True
    wrote: list[str] = []                            # the rows this call adds, named as its output lines name them

    def save() -> None:
        provenance[-1] = _record.snapshot(prov, wrote=wrote)
        record["summary"] = _summary(record["runs"])
        _record.write(args.out, record)

    provenance.append(_record.snapshot(prov, wrote=wrote))
    record.update({
        "sizes": {size: pcfg.SIZES[size] for size in TASKS}, "test_sentences": 1_000,
        "recipes": {size: {"task": name, "preset": RECIPE.preset, **vars(RECIPE.settings)}
                    for size, name in TASKS.items()},
        "beam": BEAM, "max_output_len": parsing.PARSE_MAX_OUTPUT,
        "paper": PAPER,
    })
    for key in COPIED_BEFORE:
        record.pop(key, None)
    for k, path in enumerate(args.checkpoint):
        seconds = args.train_seconds[k] if k < len(args.train_seconds) else None
        run = checkpoint_row(path, beam=not args.no_beam, beam_test=args.beam_test, train_seconds=seconds)
        record["runs"] = [r for r in record["runs"] if (r["size"], r["seed"]) != (run["size"], run["seed"])] + [run]
        wrote.append(f"{run['size']} seed {run['seed']}")
        save()
        beam = f", beam {run['beam']['bracket_f1']}" if "beam" in run else ""
        print(f"{run['size']} seed {run['seed']} (from {path}): greedy F1 {run['greedy']['bracket_f1']}{beam}",
              flush=True)
    if args.checkpoint:
        sizes, seeds = [], []                 # only the checkpoints' rows this call
    for size in sizes:
        for seed in seeds:
            if any(r["size"] == size and r["seed"] == seed for r in record["runs"]):
                print(f"{size} seed {seed}: already in {args.out}, skipped")
                continue
            t0 = time.perf_counter()
            run = run_one(size, seed, n_test=50 if args.quick else None, beam=not (args.quick or args.no_beam),
                          beam_test=args.beam_test)
            run["wall_seconds"] = round(time.perf_counter() - t0, 1)
            record["runs"].append(run)
            wrote.append(f"{size} seed {seed}")
            save()
            beam = f", beam {run['beam']['bracket_f1']}" if "beam" in run else ""
            print(f"{size} seed {seed}: greedy F1 {run['greedy']['bracket_f1']}{beam} "
                  f"(trained {run['train_seconds']} s, load {run['load_average']})", flush=True)
    if not args.no_lesson and not args.quick and "lesson" not in record:
        record["lesson"] = lesson_row()
        wrote.append("lesson")
        save()
        print(f"lesson row: greedy F1 {record['lesson']['greedy']['bracket_f1']} on {LESSON['test']} sentences "
              f"(trained {record['lesson']['train_seconds']} s)", flush=True)
    if not args.no_xx and not args.quick and "xx_targets" not in record:
        record["xx_targets"] = xx_row()
        wrote.append("xx_targets")
        print(f"XX targets, the lesson's run: greedy F1 {record['xx_targets']['greedy']['bracket_f1']}", flush=True)
    record["summary"] = _summary(record["runs"])
    provenance[-1] = _record.finish(prov, wrote=wrote)
    _record.write(args.out, record)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
