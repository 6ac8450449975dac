"""What the BLAS thread policy (minitransformer/threads.py) costs a training step, on its own.

The policy runs ``threads.check()`` before every optimizer step and decoded batch. Most calls
only read the monotonic clock and return; once every ``threads.CHECK_SECONDS`` a call reads
/proc/stat and the process's CPU times and asks threadpoolctl for OpenBLAS's thread count (and
sets a new count when the machine's load changed). This script times both kinds of call and
sets them beside the step they are paid on:

    python benchmarks/bench_thread_policy.py                  # toy and base steps
    python benchmarks/bench_thread_policy.py --configs toy --steps 20

* ``quick call``: the mean of ``--calls`` calls that return at once (the clock read);
* ``look``: the mean of ``--looks`` calls that sample the machine (the timer forced due each time),
  with the thread count left as it is (the sample finds no reason to change it, or changes it once);
* ``step``: the median of ``--steps`` training steps of the model bench_train.py times (forward,
  loss, backward, Adam), the policy off, with the BLAS threads the environment gives (set
  OPENBLAS_NUM_THREADS=1 for one);
* ``per step``: quick call + look x (step / CHECK_SECONDS), the policy's share of one step: a
  look is paid once a second, so a step pays that fraction of it.

A benchmark, not a test: it asserts nothing. It needs Linux (/proc/stat) and threadpoolctl.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def time_calls(n: int, due: bool) -> float:
    """Mean seconds of ``threads.check()`` over n calls; ``due``: each call samples the machine."""
    from minitransformer import threads

    threads.set_policy(True)
    threads.check()                          # the first call starts the policy (threadpoolctl's controller)
    t0 = time.perf_counter()
    for _ in range(n):
        if due:
            threads._next_check = 0.0        # the clock says a look is due
        threads.check()
    return (time.perf_counter() - t0) / n


def step_seconds(config: str, steps: int) -> float:
    """Median seconds of one training step of bench_train.py's ``config`` (the policy off, one thread)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import bench_train

    from minitransformer import threads

    threads.set_policy(False)
    c = bench_train.CONFIGS[config]
    _, step = bench_train.build_numpy_side(c, bench_train.make_batch(c))
    step()                                   # warm-up: first-touch of every buffer
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", nargs="+", default=["toy", "base"])
    p.add_argument("--steps", type=int, default=10, help="timed training steps per config (default 10)")
    p.add_argument("--calls", type=int, default=200_000, help="quick calls timed (default 200,000)")
    p.add_argument("--looks", type=int, default=2_000, help="sampling calls timed (default 2,000)")
    args = p.parse_args()
    sys.path.insert(0, ROOT)
    from threadpoolctl import threadpool_info

    from minitransformer import machine, threads

    blas = [f"{i.get('internal_api')} {i.get('version')}, kernel {i.get('architecture')}, {i.get('num_threads')} "
            "threads" for i in threadpool_info() if i.get("user_api") == "blas"]
    print(f"# {machine.machine_summary()}")
    print(f"# BLAS: {'; '.join(blas)}; CHECK_SECONDS = {threads.CHECK_SECONDS}")
    quick = time_calls(args.calls, due=False)
    look = time_calls(args.looks, due=True)
    print(f"quick call: {quick * 1e9:.0f} ns   look (sample /proc/stat, os.times, threadpoolctl): {look * 1e6:.1f} µs")
    for config in args.configs:
        step = step_seconds(config, args.steps)
        per_step = quick + look * min(1.0, step / threads.CHECK_SECONDS)
        print(f"{config:>5}: step {step * 1e3:8.1f} ms (median of {args.steps}); the policy's share "
              f"{per_step * 1e6:.2f} µs = {100 * per_step / step:.4f}% of a step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
