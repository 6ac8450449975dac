"""What the non-finite check costs Adam: one step with and without it, side by side.

``Adam.step`` measures the global gradient norm before it updates (optim.py, the
non-finite policy), so a NaN or inf gradient is skipped instead of applied. With
clipping that norm is the one clipping needs anyway (no extra pass); without
clipping it is one extra read of every gradient. This script times Adam.step on
the parameters of a model preset, alternating "with the check" and "the check
replaced by a stub", and prints min and median of each and their ratio.

    python benchmarks/bench_nonfinite_check.py                  # preset "base" (63M parameters)
    python benchmarks/bench_nonfinite_check.py --preset translate --repeats 21
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minitransformer import machine
from minitransformer.data.registry import PRESETS
from minitransformer.model import Transformer
from minitransformer.optim import Adam


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base", choices=list(PRESETS))
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()

    cfg = PRESETS[args.preset]
    model = Transformer(cfg, seed=0)
    params = model.parameters()
    rng = np.random.default_rng(0)
    for p in params:
        p.grad[...] = rng.standard_normal(p.data.shape).astype(p.data.dtype) * 1e-3
    print(f"machine: {machine.machine_summary()}")
    print(f"preset {args.preset}: {sum(p.data.size for p in params):,} parameters, float32; "
          f"min / median of {args.repeats} steps, the two variants alternating")
    for clip in (None, 1.0):
        checked = Adam(params, lr=1e-9, clip_norm=clip)
        unchecked = Adam(params, lr=1e-9, clip_norm=clip)
        if clip is None:
            unchecked._gradient_problem = lambda: (0.0, None)          # the check removed
        else:
            from minitransformer.optim import global_grad_norm

            unchecked._gradient_problem = lambda: (global_grad_norm(params), None)   # what clipping reads anyway
        times = {"with check": [], "without": []}
        for _ in range(2):                                             # warm-up
            checked.step(), unchecked.step()
        for _ in range(args.repeats):
            for name, opt in (("with check", checked), ("without", unchecked)):
                t0 = time.perf_counter()
                opt.step()
                times[name].append(time.perf_counter() - t0)
        w, wo = times["with check"], times["without"]
        print(f"clip_norm={clip}: with check {1e3 * min(w):.1f} / {1e3 * statistics.median(w):.1f} ms, "
              f"without {1e3 * min(wo):.1f} / {1e3 * statistics.median(wo):.1f} ms, "
              f"ratio (median) {statistics.median(w) / statistics.median(wo):.3f}")


if __name__ == "__main__":
    main()
