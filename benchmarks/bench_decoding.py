"""Greedy decoding with and without the key/value cache: how much does the cache save?

Without a cache, output step t re-runs the decoder on all t+1 prefix positions,
so T tokens cost O(T^2) position-passes through the decoder; with the cache
(minitransformer.model.KVCache, Transformer.decode_step) each step runs one position and attends to
the t+1 cached keys, O(T) in all. The speed-up should therefore grow roughly
linearly with the output length.

Every sentence is forced to the same output length by decoding with
``eos_id=None`` (no end token: greedy_decode never stops early) and
``max_len=T``. The model has random weights: speed does not depend on them.

    python benchmarks/bench_decoding.py                 # mid-size model, float32, 64 and 128 tokens
    python benchmarks/bench_decoding.py --lengths 32 64 128 256 --batch 16
    python benchmarks/bench_decoding.py --backend cupy  # on a GPU
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minitransformer import backend, machine
from minitransformer.decoding import greedy_decode
from minitransformer.model import Transformer, TransformerConfig


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[64, 128], help="output tokens to generate")
    p.add_argument("--batch", type=int, default=8, help="sentences decoded together")
    p.add_argument("--src-len", type=int, default=32, help="source sentence length")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=3, help="N, in the encoder and in the decoder")
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--backend", choices=["numpy", "cupy"], default="numpy")
    p.add_argument("--repeats", type=int, default=3, help="timed cached runs per length; the fastest is reported")
    p.add_argument("--uncached-repeats", type=int, default=1,
                   help="timed uncached runs per length (slow: O(T^2)); the fastest is reported")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-uncached", action="store_true", help="time only the cached decoder")
    return p.parse_args(argv)


def machine_line(xp_name: str) -> str:
    line = f"{platform.platform()} | {machine.machine_summary()}"
    if xp_name == "cupy":
        cp = backend.module_for("cupy")
        name = cp.cuda.runtime.getDeviceProperties(0)["name"]
        line += f" | CuPy {cp.__version__} on {name.decode() if isinstance(name, bytes) else name}"
    return line


def time_decode(model, src, T, use_cache, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = greedy_decode(model, src, bos_id=1, eos_id=None, max_len=T, use_cache=use_cache)
        best = min(best, time.perf_counter() - t0)      # greedy_decode returns host lists: synced
        assert all(len(y) == T for y in out)
    return best


def main(argv=None):
    args = parse_args(argv)
    backend.set_backend(args.backend)
    backend.set_default_dtype(args.dtype)
    cfg = TransformerConfig(vocab_size=args.vocab, d_model=args.d_model, h=args.heads, N=args.layers,
                            d_ff=args.d_ff, P_drop=0.1, max_len=max(max(args.lengths), args.src_len))
    model = Transformer(cfg, seed=args.seed).eval()
    xp = backend.xp_default()
    rng = np.random.default_rng(args.seed)
    src = backend.to_backend(rng.integers(4, args.vocab, (args.batch, args.src_len)), xp)

    print(f"# bench_decoding  {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"# {machine_line(args.backend)}")
    print(f"# model: d_model={cfg.d_model} h={cfg.h} N={cfg.N} d_ff={cfg.d_ff} V={cfg.vocab_size} "
          f"{args.dtype} on {args.backend}; greedy, batch {args.batch}, source length {args.src_len}, "
          f"best of {args.repeats} cached / {args.uncached_repeats} uncached runs")
    time_decode(model, src, 16, True, 2)                # warm-up (allocators, BLAS threads, kernels)
    if not args.no_uncached:
        time_decode(model, src, 4, False, 1)

    header = f"{'tokens':>6} | {'cached s':>9} {'tok/s':>8} | {'uncached s':>10} {'tok/s':>8} | {'speed-up':>8}"
    print(header)
    print("-" * len(header))
    for T in args.lengths:
        n_tok = args.batch * T
        tc = time_decode(model, src, T, True, args.repeats)
        if args.no_uncached:
            print(f"{T:>6} | {tc:>9.3f} {n_tok / tc:>8.0f} | {'-':>10} {'-':>8} | {'-':>8}")
            continue
        tu = time_decode(model, src, T, False, args.uncached_repeats)
        print(f"{T:>6} | {tc:>9.3f} {n_tok / tc:>8.0f} | {tu:>10.3f} {n_tok / tu:>8.0f} | {tu / tc:>7.1f}x",
              flush=True)


if __name__ == "__main__":
    main()
