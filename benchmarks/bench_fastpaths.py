"""Does each speed variant of layers/fast.py pay? Plain against fast, per call and per training step.

For each fast path (today one: Adam's update in blocks) and each preset size of
bench_train.py (toy, small, base), the plain version (what a learner steps into)
and the fast one run on the same arrays, alternating, ``--repeats`` times each; the
least wall time and the least CPU time (all threads of this process) of each are
printed, and what the fast path saves in one training step (calls per step × the
saving per call). Compare that with the
whole step of ``bench_train.py`` at the same size: a fast path is kept only if it
saves at least 5% of the whole step at some size (docs/performance.md).

    python benchmarks/bench_fastpaths.py                     # 2 BLAS threads, toy small base
    python benchmarks/bench_fastpaths.py --threads 1 --configs base
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, REPO)

CONFIGS = {   # the same sizes as bench_train.py
    "toy": dict(d_model=128, h=4, N=2, d_ff=512, vocab=1000, batch=32, seq=32),
    "small": dict(d_model=256, h=8, N=3, d_ff=1024, vocab=8000, batch=16, seq=64),
    "base": dict(d_model=512, h=8, N=6, d_ff=2048, vocab=37000, batch=8, seq=64),
}


def best(fn, repeats: int) -> tuple[float, float]:
    """(least wall seconds, least CPU seconds) of ``fn()`` over ``repeats`` calls."""
    wall, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu)


def cases(c: dict):
    """(name, calls per training step, the settings of layers/fast.py that turn it on, the call)
    for each fast path; the plain version runs with every ``*_MIN`` threshold out of reach."""
    from minitransformer.model import Transformer, TransformerConfig
    from minitransformer.optim import Adam

    rng = np.random.default_rng(0)
    cfg = TransformerConfig(vocab_size=c["vocab"], d_model=c["d_model"], h=c["h"], N=c["N"], d_ff=c["d_ff"],
                            max_len=c["seq"])
    params = Transformer(cfg, seed=0).parameters()
    for p in params:
        p.grad[...] = rng.standard_normal(p.shape, dtype=np.float32) * 1e-3
    adam = Adam(params, lr=1e-9)                      # a tiny rate: the parameters hardly move
    return [("Adam.step", 1, {"ADAM_MIN": 0}, adam.step)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    p.add_argument("--threads", type=int, default=2, help="BLAS threads (the variants themselves use one)")
    p.add_argument("--repeats", type=int, default=15, help="calls of each version, alternating in rounds of 1")
    args = p.parse_args()

    from threadpoolctl import threadpool_limits

    from minitransformer import machine
    from minitransformer.layers import fast

    threadpool_limits(limits=args.threads)
    print(f"# bench_fastpaths {time.strftime('%Y-%m-%d %H:%M')} | {machine.machine_summary()} | "
          f"{args.threads} threads | least of {args.repeats} calls each, plain and fast alternating")
    print(f"{'config':<6} {'call':<19} {'per step':>8} {'plain ms':>9} {'fast ms':>8} {'plain cpu':>9} "
          f"{'fast cpu':>8} {'saved ms/step':>13} {'cpu saved/step':>14}")
    for config in args.configs:
        for name, per_step, settings, fn in cases(CONFIGS[config]):
            keep = {k: getattr(fast, k) for k in settings}
            plain = {k: (1 << 62 if k.endswith("_MIN") else v) for k, v in keep.items()}
            results = {"plain": [], "fast": []}
            try:
                fn()                                             # warm-up
                for _ in range(args.repeats):
                    for version, values in (("plain", plain), ("fast", settings)):
                        for k, v in values.items():
                            setattr(fast, k, v)
                        results[version].append(best(fn, 1))
            finally:
                for k, v in keep.items():
                    setattr(fast, k, v)
            (pw, pc), (fw, fc) = ([min(r[i] for r in results[v]) for i in (0, 1)] for v in ("plain", "fast"))
            print(f"{config:<6} {name:<19} {per_step:>8} {1e3 * pw:>9.2f} {1e3 * fw:>8.2f} {1e3 * pc:>9.2f} "
                  f"{1e3 * fc:>8.2f} {1e3 * per_step * (pw - fw):>13.1f} {1e3 * per_step * (pc - fc):>14.1f}",
                  flush=True)
    print(f"# load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
