"""What does each registered task reach with its default recipe, and how long does it take?

Runs the README's command for each task, exactly as a user types it,

    python -m minitransformer train --task NAME --eval greedy beam4 --no-progress --out TMP

in a subprocess (the same code path, nothing re-assembled), reads the lines it prints
("trained N steps in Xs", one score line per strategy), and stores them with the run's
provenance (date, commit, machine, BLAS threads, load average) in a committed record:

    python benchmarks/bench_tasks.py                         # every task, seeds 0-2, into benchmarks/results/tasks.json
    python benchmarks/bench_tasks.py --tasks copy reverse    # re-run two rows, keep the others
    python benchmarks/bench_tasks.py --seeds 0               # one seed per task
    python benchmarks/bench_tasks.py --threads 2             # OpenBLAS threads of the runs (default 1)
    python benchmarks/bench_tasks.py --keep runs/            # also keep each run's folder (runs/NAME/)

Each task row keeps one run per seed (the table shows their mean and worst). The parse
tasks print bracket F1 instead of BLEU, for the last step's model and the §6.1 average of
the last checkpoints; both are kept. The task table of docs/tasks.md is rendered from that
record by ``docs/readme_tables.py``. A benchmark, not a test: it asserts nothing about time.
A run that fails, or prints no score line, stops the script with its output (nothing
half-read is recorded). The runs go one at a time, so the machine is as quiet as its other
users leave it; each run records the load average at its start and end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RECORD = os.path.join(HERE, "results", "tasks.json")

TRAINED = re.compile(r"^trained (\d+) steps.* in ([0-9.]+)s", re.M)
SOLVED = re.compile(r"solved at step (\d+)")
# " beam 4: exact match 100.00% (1000 sentences), BLEU 100.00, chrF 100.00  [0.5s]"
SCORE = re.compile(r"^\s*(\S.*?): exact match ([0-9.]+)% \((\d+) sentences\), BLEU ([0-9.]+), chrF ([0-9.]+)", re.M)
# "  greedy: bracket F1 91.38, precision 91.50, recall 91.26, exact trees % 50.20, ... (1000 sentences)  [4.1s]"
PARSE_SCORE = re.compile(r"^\s*(\S.*?): bracket F1 ([0-9.]+), .*?exact trees % ([0-9.]+).*?\((\d+) sentences\)", re.M)
AVERAGE = re.compile(r"^the average of the last \d+ checkpoints", re.M)


def read_scores(text: str) -> dict:
    """{strategy: scores} from the score lines of ``text`` (translation or parse lines)."""
    scores = {m[1].replace(" ", ""): {"exact_match": float(m[2]), "sentences": int(m[3]), "bleu": float(m[4]),
                                      "chrf": float(m[5])}
              for m in SCORE.finditer(text)}
    scores |= {m[1].replace(" ", ""): {"bracket_f1": float(m[2]), "exact_trees": float(m[3]),
                                       "sentences": int(m[4])}
               for m in PARSE_SCORE.finditer(text)}
    return scores


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def provenance(threads: int) -> dict:
    sys.path.insert(0, ROOT)
    from minitransformer import machine

    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"commit": git("rev-parse", "--short", "HEAD"), "dirty": dirty,
            "machine": machine.machine_summary(), "blas_threads": threads}


def run_task(name: str, strategies: list[str], threads: int, seed: int, keep: str | None = None) -> dict:
    """One ``train --task name`` run in a subprocess; its figures as the CLI printed them.
    ``keep``: a folder for the run's own (``keep/name``: checkpoint, log, curve); default a temporary one."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), PYTHONPATH=ROOT)
    with (contextlib.nullcontext(os.path.abspath(keep)) if keep else tempfile.TemporaryDirectory()) as out:
        cmd = [sys.executable, "-m", "minitransformer", "train", "--task", name, "--seed", str(seed),
               "--eval", *strategies, "--no-progress", "--out", os.path.join(out, name)]
        load_start = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"error: {name} exited with {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    trained = TRAINED.search(proc.stdout)
    split = AVERAGE.search(proc.stdout)          # average_last: the last step's scores, then the average's
    scores = read_scores(proc.stdout[:split.start()] if split else proc.stdout)
    average = read_scores(proc.stdout[split.start():]) if split else None
    missing = [s for s in strategies if s not in scores]
    if trained is None or missing:
        sys.exit(f"error: {name}: no 'trained N steps' line or no score for {missing} in its output:\n"
                 f"{proc.stdout[-3000:]}")
    solved = SOLVED.search(proc.stdout)
    return {"command": " ".join(["python", "-m", "minitransformer", *cmd[3:-2]]), "seed": seed,
            "steps": int(trained[1]), "solved_at": int(solved[1]) if solved else None,
            "train_seconds": float(trained[2]), "wall_seconds": round(wall, 1),
            "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "scores": scores,
            "scores_average": average}


def headline(scores: dict, strategy: str) -> str:
    """The figure a row prints for one strategy: exact match and BLEU, or bracket F1."""
    s = scores[strategy]
    return f"F1 {s['bracket_f1']:6.2f}" if "bracket_f1" in s else f"{s['exact_match']:6.2f}% BLEU {s['bleu']:6.2f}"


def main() -> int:
    sys.path.insert(0, ROOT)
    from minitransformer.data.registry import TASKS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", choices=sorted(TASKS), metavar="TASK", help="default: every task")
    p.add_argument("--eval", nargs="+", default=["greedy", "beam4"], help="strategies (train --eval)")
    p.add_argument("--threads", type=int, default=1, help="OPENBLAS_NUM_THREADS of each run (default 1)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="one run per seed (default 0 1 2)")
    p.add_argument("--keep", metavar="DIR", help="keep each run's folder as DIR/NAME (default: a temporary one)")
    p.add_argument("--json", default=RECORD, help=f"record to update (default {os.path.relpath(RECORD, ROOT)})")
    args = p.parse_args()

    from minitransformer.files import atomic_write_text

    record = {"about": "train --task NAME with its default recipe, as benchmarks/bench_tasks.py ran it", "tasks": {}}
    if os.path.exists(args.json):
        with open(args.json, encoding="utf-8") as f:
            record = json.load(f)
    where = provenance(args.threads)
    print(f"{where['machine']} | commit {where['commit']}{' (dirty)' if where['dirty'] else ''} | "
          f"OPENBLAS_NUM_THREADS={args.threads}")
    print(f"{'task':<15} {'seed':>4} {'steps':>6} {'train s':>8} {'load':>11}  " + "  ".join(args.eval))
    for name in args.tasks or list(TASKS):
        runs = []
        for seed in args.seeds:
            keep = os.path.join(args.keep, f"seed{seed}") if args.keep else None
            row = run_task(name, args.eval, args.threads, seed, keep)
            runs.append(row)
            load = f"{row['load_average'][0]:.1f}-{row['load_average'][1]:.1f}"
            print(f"{name:<15} {seed:>4} {row['steps']:>6} {row['train_seconds']:>8.1f} {load:>11}  "
                  + "  ".join(headline(row["scores"], s) for s in args.eval)
                  + (f"  (average: {headline(row['scores_average'], args.eval[0])})" if row["scores_average"] else ""),
                  flush=True)
        record["tasks"][name] = {"runs": runs} | where
        atomic_write_text(args.json, json.dumps(record, indent=1, ensure_ascii=False) + "\n")   # after each task
    print(f"record: {os.path.relpath(args.json, ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
