"""How long does the README's main job take? Train the default copy preset and
decode the 1,000 held-out sequences, timing each phase.

    python benchmarks/bench_copy.py [--runs 1] [--threads N]

Prints the machine, the date, the training and decoding times, and the
held-out exact match. A benchmark, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time


def machine_line() -> str:
    import numpy  # noqa: PLC0415

    cpu = platform.processor() or platform.machine()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        cpu = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), cpu)
    except OSError:
        pass
    return (f"{time.strftime('%Y-%m-%d %H:%M')} | {cpu}, {os.cpu_count()} cores | Python {platform.python_version()}, "
            f"NumPy {numpy.__version__} | load average {os.getloadavg()[0]:.2f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1, help="repeat the whole job this many times")
    p.add_argument("--threads", type=int, help="BLAS threads (default: the library's)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.threads:
        from threadpoolctl import threadpool_limits  # noqa: PLC0415
        threadpool_limits(args.threads)

    from minitransformer.train import (RECIPES, Trainer, TrainSettings, build_model, decode_ids,  # noqa: PLC0415
                                       encode_pairs, load_task)

    print(machine_line())
    recipe = RECIPES["copy"]
    print(f"copy preset: {recipe.steps} steps, batch {recipe.batch_size}, lr factor {recipe.lr_factor}")
    print(f"{'run':>3} {'train s':>8} {'decode s':>9} {'total s':>8} {'exact match':>12}")
    for run in range(args.runs):
        t0 = time.perf_counter()
        task = load_task("copy", seed=args.seed)
        model = build_model(task, recipe.preset, seed=args.seed)
        settings = TrainSettings(steps=recipe.steps, batch_size=recipe.batch_size, lr_factor=recipe.lr_factor,
                                 warmup_steps=recipe.warmup_steps or model.cfg.warmup_steps, seed=args.seed,
                                 valid_every=recipe.valid_every)
        Trainer(model, task.vocab, encode_pairs(task.vocab, task.train), encode_pairs(task.vocab, task.valid),
                settings).run(progress=False)
        t1 = time.perf_counter()
        hyps = decode_ids(model.eval(), task.vocab, [s for s, _ in task.test])
        t2 = time.perf_counter()
        acc = sum(h == t for h, (_, t) in zip(hyps, task.test)) / len(task.test)
        print(f"{run:>3} {t1 - t0:>8.1f} {t2 - t1:>9.1f} {t2 - t0:>8.1f} {100 * acc:>11.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
