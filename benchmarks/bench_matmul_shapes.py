"""Every matrix product of one training step, timed alone in NumPy (OpenBLAS) and in torch (MKL).

bench_train.py's split says how much of a step is matrix products on each side. Two
BLAS libraries whose 2048³ peaks are within 10% can still differ by more on the shapes
a step really runs: this script records each product that ``backend.matmul`` sees in a
few steps of the NumPy side (its shapes, whether an operand is a transposed view, the
calls per step), builds operands of the same layout, and times that product alone in
both libraries, best of ``--repeat``, on the same number of threads.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_matmul_shapes.py --config base
    python benchmarks/bench_matmul_shapes.py --config toy --threads 2

Columns: ms per call on each side, GFLOP/s (2·m·n·k / time), and numpy/torch. The last
lines add the products up per step. docs/performance.md ("In short") quotes a run.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", choices=("toy", "small", "base"), default="base")
    p.add_argument("--threads", type=int, default=1, help="BLAS / torch threads")
    p.add_argument("--steps", type=int, default=3, help="steps whose products are recorded")
    p.add_argument("--repeat", type=int, default=5, help="timings of each product alone; the best counts")
    args = p.parse_args(argv)
    if args.threads < 1 or args.steps < 1 or args.repeat < 1:
        p.error("--threads, --steps and --repeat must be at least 1")
    return args


def operand(np, shape, transposed: bool, rng):
    """A float32 array of ``shape``; ``transposed``: a view whose last two axes are swapped, as
    ``W.T`` or ``K.swapaxes(-1, -2)`` is in the layers (BLAS then reads it transposed)."""
    if not transposed:
        return rng.standard_normal(shape, dtype=np.float32)
    stored = (*shape[:-2], shape[-1], shape[-2])
    return rng.standard_normal(stored, dtype=np.float32).swapaxes(-1, -2)


def record_products(backend, step, steps: int) -> collections.Counter:
    """Run ``step`` ``steps`` times with ``backend.matmul`` watched: how often each product ran, keyed by
    (a's shape, a is a transposed view, b's shape, b is a transposed view)."""
    calls: collections.Counter = collections.Counter()
    plain = backend.matmul

    def recording(a, b):
        calls[(a.shape, a.strides[-1] != a.itemsize, b.shape, b.strides[-1] != b.itemsize)] += 1
        return plain(a, b)

    backend.matmul = recording
    try:
        for _ in range(steps):
            step()
    finally:
        backend.matmul = plain
    return calls


def product_flops(a_shape, b_shape) -> int:
    """2·m·n·k for a (..., m, k) @ (..., k, n) product, times the batch axes' size."""
    import numpy as np  # here, not at the top: main sets OPENBLAS_NUM_THREADS before NumPy loads

    batch = math.prod(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    return 2 * batch * a_shape[-2] * a_shape[-1] * b_shape[-1]


def best_ms(run, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)      # before NumPy loads OpenBLAS
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_train as bt
    import numpy as np  # here, not at the top: main sets OPENBLAS_NUM_THREADS before NumPy loads
    import torch

    from minitransformer import backend

    torch.set_num_threads(args.threads)
    c = bt.CONFIGS[args.config]
    _, step = bt.build_numpy_side(c, bt.make_batch(c))
    step()                                                      # warm-up: caches, allocator

    calls = record_products(backend, step, args.steps)

    rng = np.random.default_rng(0)
    rows, total_np, total_torch = [], 0.0, 0.0
    for (a_shape, a_t, b_shape, b_t), n in calls.items():
        a, b = operand(np, a_shape, a_t, rng), operand(np, b_shape, b_t, rng)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)        # the same memory, the same strides
        flops = product_flops(a_shape, b_shape)
        ms_np = best_ms(lambda x=a, y=b: x @ y, args.repeat)
        ms_torch = best_ms(lambda x=ta, y=tb: x @ y, args.repeat)
        per_step = n / args.steps
        total_np += per_step * ms_np
        total_torch += per_step * ms_torch
        rows.append((per_step * ms_np, a_shape, a_t, b_shape, b_t, per_step, ms_np, ms_torch, flops))

    from minitransformer import machine

    print(f"# bench_matmul_shapes  {args.config}, {args.threads} thread(s), best of {args.repeat}")
    print(f"# machine: {machine.machine_info()['cpu']}, {os.cpu_count()} logical CPUs | NumPy {np.__version__}: "
          f"{bt.blas_line()}")
    forced = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    if forced:
        print(f"# note: {forced} pin OpenBLAS's kernel (unset them for the native one)")
    print(bt.busy_line("after the timings"))
    square = operand(np, (2048, 2048), False, rng)
    t_square = torch.from_numpy(square)
    peak_np = 2 * 2048**3 / best_ms(lambda: square @ square, 10) / 1e6
    peak_torch = 2 * 2048**3 / best_ms(lambda: t_square @ t_square, 10) / 1e6
    print(f"# torch {torch.__version__} (MKL: {torch.backends.mkl.is_available()}); float32 2048³ peaks: NumPy "
          f"{peak_np:.0f} GFLOP/s, torch {peak_torch:.0f} GFLOP/s (NumPy/torch {peak_np / peak_torch:.2f})")
    print(f"{'a':>20} {'b':>20} {'calls':>5} {'numpy ms':>9} {'torch ms':>9} {'numpy GF':>9} {'torch GF':>9} "
          f"{'ratio':>6}")
    for _, a_shape, a_t, b_shape, b_t, per_step, ms_np, ms_torch, flops in sorted(rows, reverse=True):
        print(f"{str(a_shape) + ('T' if a_t else ''):>20} {str(b_shape) + ('T' if b_t else ''):>20} {per_step:5.0f} "
              f"{ms_np:9.2f} {ms_torch:9.2f} {flops / ms_np / 1e6:9.0f} {flops / ms_torch / 1e6:9.0f} "
              f"{ms_np / ms_torch:6.2f}")
    faster = sum(1 for r in rows if r[6] < r[7])
    print(f"per step: numpy {total_np:.0f} ms, torch {total_torch:.0f} ms (numpy/torch {total_np / total_torch:.2f}); "
          f"numpy is faster on {faster} of {len(rows)} shapes ('T': a transposed view)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
