"""How far does OpenBLAS's thread count move a training run? (issue 25.3)

The same run of the copy recipe (seed 0) in one child process per
OPENBLAS_NUM_THREADS value, through the package's own path (``load_task``,
``settings_for``, ``make_trainer``, ``Trainer.train_step``; the package starts no
threads of its own). Each child reports the loss as ``train`` logs it (the mean of the
last 10 steps) at the ``--at`` steps, and its parameters at the last; the parent prints
the losses and the largest parameter difference against the first thread count, absolute
and relative to the largest |parameter| of its tensor.

    python benchmarks/bench_blas_threads.py                       # 1 and 2 threads, steps 30 and 300
    python benchmarks/bench_blas_threads.py --threads 1 2 3 --at 30 300 1000

OpenBLAS splits a float32 matrix product between its threads in a way that changes
the rounding of the result (every thread count gives other last bits, each repeatable),
so runs with different thread counts drift apart; the figures say how far (the end of a
run, steps to solved and held-out exact match, is bench_copy.py's table under each thread
count). tests/test_threads_deterministic.py bounds the 30-step difference. Prints (and
with --json writes); asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def child(args) -> None:
    import numpy as np

    from minitransformer.data.registry import load_task
    from minitransformer.runsetup import make_trainer, settings_for

    task = load_task("copy", seed=args.seed)
    preset, settings = settings_for("copy", seed=args.seed, steps=max(args.at), valid_every=10**9)
    trainer = make_trainer(task, settings, preset)
    batches = trainer.batches()
    losses, logged = [], {}
    t0 = time.perf_counter()
    while trainer.step < max(args.at):
        losses.append(trainer.train_step(next(batches)))
        if trainer.step in args.at:
            logged[trainer.step] = float(np.mean(losses[-10:]))
    np.savez(args.params_out, *[np.asarray(p.data) for p in trainer.model.parameters()])
    print("@@" + json.dumps({"loss": logged, "seconds": time.perf_counter() - t0}), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="OPENBLAS_NUM_THREADS values")
    p.add_argument("--at", type=int, nargs="+", default=[30, 300], help="steps at which to report the loss")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--params-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return 0

    import numpy as np

    from minitransformer.machine import machine_info, machine_summary

    print(f"# bench_blas_threads {time.strftime('%Y-%m-%d %H:%M')} | {machine_summary()}")
    print(f"# the copy recipe, seed {args.seed}, OPENBLAS_NUM_THREADS = {args.threads}, parameters at step "
          f"{max(args.at)}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.threads:
            params_out = os.path.join(tmp, f"params{n}.npz")
            env = dict(os.environ, OPENBLAS_NUM_THREADS=str(n),
                       PYTHONPATH=os.pathsep.join(x for x in (ROOT, os.environ.get("PYTHONPATH", "")) if x))
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--seed", str(args.seed),
                   "--params-out", params_out, "--at", *map(str, args.at)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=ROOT)
            report = next((json.loads(x[2:]) for x in out.stdout.splitlines() if x.startswith("@@")), None)
            if report is None:
                print(f"# {n} threads failed:\n{out.stderr[-2000:]}", file=sys.stderr)
                return 1
            with np.load(params_out) as f:
                report["params"] = [f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]
            results[n] = report
    first = args.threads[0]
    print(f"{'threads':>7} " + " ".join(f"{'loss@' + str(s):>14}" for s in args.at)
          + f" {'max |Δparam|':>13} {'relative':>9} {'params equal':>12} {'seconds':>8}")
    rows = []
    for n, r in results.items():
        pairs = list(zip(r["params"], results[first]["params"]))
        diff = max(float(np.abs(a.astype(np.float64) - b).max()) for a, b in pairs)
        rel = max(float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-30)) for a, b in pairs)
        same = all(np.array_equal(a, b) for a, b in pairs)
        print(f"{n:>7} " + " ".join(f"{r['loss'][str(s)]:>14.10f}" for s in args.at)
              + f" {diff:>13.3g} {rel:>9.2g} {str(same):>12} {r['seconds']:>8.1f}")
        rows.append({"threads": n, "loss": r["loss"], "max_abs_difference": diff, "max_relative_difference": rel,
                     "bit_identical": same, "seconds": round(r["seconds"], 1)})
    print(f"# against {first} thread(s), parameters at step {max(args.at)}; load average at the end: "
          f"{os.getloadavg()[0]:.2f}")
    if args.json:
        from minitransformer.files import atomic_write_text

        record = {"seed": args.seed, "at": args.at, "date": time.strftime("%Y-%m-%d %H:%M"),
                  "machine": machine_info(), "rows": rows, "load_average_at_end": round(os.getloadavg()[0], 2)}
        atomic_write_text(args.json, json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
