"""How long does the README's main job take? Train the copy task exactly as
``python -m minitransformer train --task copy`` does (the same ``settings_for`` +
``make_trainer`` + ``Trainer.run`` + ``score_translations`` calls), and decode the
1,000 held-out sequences, timing each phase.

    python benchmarks/bench_copy.py [--runs 1] [--threads N]

Prints the machine, the date, the training and decoding times, and the
held-out exact match. A benchmark, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time


def machine_line() -> str:
    # imported late, after threadpool_limits (see main)
    from minitransformer import machine

    return f"{time.strftime('%Y-%m-%d %H:%M')} | {machine.machine_summary()}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1, help="repeat the whole job this many times")
    p.add_argument("--threads", type=int, help="BLAS threads (default: the library's)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.threads:
        from threadpoolctl import threadpool_limits
        threadpool_limits(args.threads)

    from minitransformer.data.registry import load_task
    from minitransformer.train import make_trainer, settings_for
    from minitransformer.translate import score_translations

    print(machine_line())
    preset, settings = settings_for("copy", seed=args.seed)
    print(f"copy recipe: preset {preset}, {settings.steps} steps, batch {settings.batch_size}, "
          f"lr factor {settings.lr_factor}, warm-up {settings.warmup_steps}, clip {settings.clip_norm}")
    print(f"{'run':>3} {'setup s':>8} {'train s':>8} {'decode s':>9} {'total s':>8} {'exact match':>12}")
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as out_dir:     # the CLI writes runs/copy; keep the repo clean
            t0 = time.perf_counter()
            task = load_task("copy", seed=args.seed)
            trainer = make_trainer(task, settings, preset, out_dir)
            t1 = time.perf_counter()
            trainer.run(progress=False)
            t2 = time.perf_counter()
            scores = score_translations(trainer.model.eval(), trainer.vocab, task.test, task.tgt_level,
                                        task.bleu_tokenize)
            t3 = time.perf_counter()
        print(f"{run:>3} {t1 - t0:>8.1f} {t2 - t1:>8.1f} {t3 - t2:>9.1f} {t3 - t0:>8.1f} "
              f"{100 * scores['exact_match']:>11.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
