"""How long does the README's main job take, and does it solve every seed? Train a task
(default: copy) exactly as ``python -m minitransformer train --task copy`` does: the same
``settings_for`` + ``make_trainer`` + ``Trainer.run`` calls, the task's recipe unchanged
(it stops once solved: validation exact match 100% at two validations in a row), then the
same greedy decode of the 1,000 held-out test sequences (``score_translations``).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_copy.py --seeds 5
    OPENBLAS_NUM_THREADS=2 python benchmarks/bench_copy.py --seeds 5 --task reverse

Prints the machine, the BLAS thread count and the load average, then per seed: the step
at which the run was solved (or "-"), the steps trained, the seconds of training (validations
included) and of decoding the test set, and the held-out exact match; then a summary (how
many seeds were solved within --limit steps at 100.00% held-out exact match). The BLAS thread
count is the one NumPy's BLAS runs with: set OPENBLAS_NUM_THREADS before starting (or
--threads, through threadpoolctl). ``--json PATH`` also writes the rows. A benchmark: it
asserts nothing; the exit status is 0 either way.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def blas_threads() -> int | None:
    """The thread count NumPy's BLAS runs with now (``machine.blas_threads``)."""
    from minitransformer import machine

    return machine.blas_threads()


def run_seed(task_name: str, seed: int) -> dict:
    """One run of the task's recipe, as the command line does it, into a temporary folder."""
    from minitransformer.data.registry import load_task
    from minitransformer.runsetup import make_trainer, settings_for
    from minitransformer.translate import score_translations

    with tempfile.TemporaryDirectory() as out_dir:     # the CLI writes runs/TASK; keep the repo clean
        t0 = time.perf_counter()
        task = load_task(task_name, seed=seed)
        preset, settings = settings_for(task, seed=seed)
        trainer = make_trainer(task, settings, preset, out_dir)
        t1 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):      # the validation lines: the table says it all
            trainer.run(progress=False)
        t2 = time.perf_counter()
        scores = score_translations(trainer.model.eval(), trainer.vocab, task.test, task.tgt_level,
                                    task.bleu_tokenize)
        t3 = time.perf_counter()
    return {"seed": seed, "solved_at": trainer.solved_at, "steps": trainer.step, "setup_s": round(t1 - t0, 2),
            "train_s": round(t2 - t1, 2), "test_s": round(t3 - t2, 2), "test_exact_match": scores["exact_match"],
            "test_pairs": len(task.test), "load_average": round(os.getloadavg()[0], 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="copy", help="a registered task (default copy)")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (default 5)")
    p.add_argument("--first-seed", type=int, default=0, help="start at this seed (default 0)")
    p.add_argument("--limit", type=int, default=800, help="the summary's step budget (issue 25: 800)")
    p.add_argument("--threads", type=int, help="BLAS threads through threadpoolctl (default: the library's, "
                                               "i.e. OPENBLAS_NUM_THREADS)")
    p.add_argument("--json", help="also write the rows (and the machine) to this file")
    args = p.parse_args()
    if args.seeds < 1 or args.first_seed < 0:
        p.error("--seeds must be ≥ 1 and --first-seed ≥ 0")
    if args.threads:
        from threadpoolctl import threadpool_limits
        threadpool_limits(args.threads, user_api="blas")

    from minitransformer import machine
    from minitransformer.runsetup import settings_for

    threads = blas_threads()
    print(f"# bench_copy {time.strftime('%Y-%m-%d %H:%M')} | {machine.machine_summary()} | BLAS threads {threads} "
          f"| load average {os.getloadavg()[0]:.2f}")
    preset, s = settings_for(args.task)
    print(f"# {args.task} recipe: preset {preset}, batch {s.batch_size} (by length: {s.batch_by_length}), "
          f"lr factor {s.lr_factor}, warm-up {s.warmup_steps}, clip {s.clip_norm}, validate every "
          f"{s.valid_every} steps ({s.valid_decode} sequences), stop when solved {s.stop_when_solved} in a row, "
          f"at most {s.steps} steps")
    print(f"{'seed':>4} {'solved at':>9} {'steps':>6} {'train s':>8} {'test s':>7} {'test exact':>11} {'load':>5}",
          flush=True)
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        r = run_seed(args.task, seed)
        rows.append(r)
        solved = "-" if r["solved_at"] is None else str(r["solved_at"])
        print(f"{seed:>4} {solved:>9} {r['steps']:>6} {r['train_s']:>8.1f} {r['test_s']:>7.1f} "
              f"{100 * r['test_exact_match']:>10.2f}% {r['load_average']:>5.2f}", flush=True)
    good = [r for r in rows if r["solved_at"] is not None and r["solved_at"] <= args.limit
            and r["test_exact_match"] == 1.0]
    solved = sorted(r["solved_at"] for r in rows if r["solved_at"] is not None)
    train = sorted(r["train_s"] for r in rows)
    print(f"# summary: {len(good)} of {len(rows)} seeds solved in ≤ {args.limit} steps with 100.00% held-out exact "
          f"match; solved at steps {solved[0] if solved else '-'}..{solved[-1] if solved else '-'} "
          f"(median {solved[len(solved) // 2] if solved else '-'}); training {train[0]:.1f}..{train[-1]:.1f} s "
          f"(median {train[len(train) // 2]:.1f}); load average at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        from minitransformer.files import atomic_write_text

        record = {"task": args.task, "blas_threads": threads, "date": time.strftime("%Y-%m-%d %H:%M"),
                  "machine": machine.machine_info(), "command": " ".join(["python", *sys.argv]), "rows": rows}
        atomic_write_text(args.json, json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
