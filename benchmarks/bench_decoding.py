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

``--torch`` compares instead the package's decoding with an independent PyTorch
decoder (benchmarks/torch_decoder.py: torch eager on the CPU, its own key/value
cache) on the same *trained* weights: greedy and beam 4 (α 0.6), at batch 1 and at
batch 32, tokens per second side by side, with both libraries' float32 matrix-product
peaks (bench_train.py's measurement) and the same thread count on both sides. The
weights are a checkpoint (``--checkpoint``, with ``--task`` naming the task whose
held-out sources are decoded) or, by default, the copy task trained here for
``--train-steps`` steps through ``settings_for`` + ``make_trainer``. Both sides must
produce the same tokens; the table says how many sentences differ.

    python benchmarks/bench_decoding.py --torch                    # copy task, trained here
    python benchmarks/bench_decoding.py --torch --checkpoint runs/copy/checkpoint.npz --task copy

``--cross-kv`` asks whether one product for the encoder-decoder keys and values of
all N decoder layers (issue 25.4) would pay: per source, the N products of
``KVCache`` (``cross_attn.project_kv`` of each layer) against one product with the N
layers' weights side by side, once with the weights put side by side for that
source (as a cache must: Adam changes them in place between validations) and once
with them side by side in advance (the best case, which no cache could rely on).

    python benchmarks/bench_decoding.py --cross-kv
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
from minitransformer.data.batching import make_source_batch
from minitransformer.decoding import Beam, Greedy, greedy_decode
from minitransformer.model import Transformer, TransformerConfig
from minitransformer.translate import translate_ids


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
    g = p.add_argument_group("--torch: the package against an independent PyTorch decoder")
    g.add_argument("--torch", action="store_true", help="compare with torch (CPU, eager) on trained weights")
    g.add_argument("--checkpoint", help="trained weights to load (default: train the copy task here)")
    g.add_argument("--task", default="copy", help="the task whose held-out sources are decoded")
    g.add_argument("--train-steps", type=int, default=600, help="steps of the copy recipe when no --checkpoint")
    g.add_argument("--sentences", type=int, default=96, help="held-out sentences decoded per measurement")
    g.add_argument("--batches", type=int, nargs="+", default=[1, 32], help="sentences decoded together")
    g.add_argument("--threads", type=int, default=1, help="BLAS threads (NumPy) and torch threads, both sides")
    p.add_argument("--cross-kv", action="store_true",
                   help="time the cross-attention K/V of all N layers as N products or as one")
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


# -- ours against torch -----------------------------------------------------------------------

def decode_ours(model, vocab, sources, beam, batch):
    """The package's decoding through its public entry point (the one call to adapt if it moves)."""
    strategy = Greedy() if beam == 1 else Beam(size=beam, alpha=0.6)
    return translate_ids(model, vocab, sources, strategy=strategy, batch_size=batch)


def decode_torch(decoder, vocab, sources, beam, batch):
    """The torch decoder on the same batches (padded by the package's make_source_batch)."""
    out = []
    for i in range(0, len(sources), batch):
        src, _ = make_source_batch(sources[i: i + batch], vocab.pad_id)
        src = backend.to_numpy(src)
        out.extend(decoder.greedy(src, vocab.bos_id, vocab.eos_id) if beam == 1
                   else decoder.beam(src, vocab.bos_id, vocab.eos_id, k=beam))
    return out


def trained_model(args):
    """(model, vocab, sources): the weights to decode with and held-out source id lists."""
    from minitransformer.checkpoint import load_checkpoint
    from minitransformer.data.registry import load_task
    from minitransformer.runsetup import make_trainer, settings_for
    from minitransformer.translate import source_ids

    task = load_task(args.task, seed=args.seed)
    if args.checkpoint:
        ckpt = load_checkpoint(args.checkpoint)
        model, vocab, how = ckpt.model, ckpt.vocab, f"{args.checkpoint} (step {ckpt.step})"
    else:
        if args.task != "copy":
            raise SystemExit("error: without --checkpoint only --task copy is trained here (--task)")
        preset, settings = settings_for("copy", seed=args.seed, steps=args.train_steps, valid_every=10**9)
        trainer = make_trainer(task, settings, preset)
        t0 = time.perf_counter()
        trainer.run(progress=False)
        model, vocab = trainer.model, trainer.vocab
        how = f"the copy recipe trained here for {args.train_steps} steps ({time.perf_counter() - t0:.0f} s)"
    sources = [source_ids(vocab, s) for s, _ in task.test[: args.sentences]]
    return model.eval(), vocab, sources, how


def best_times(repeats, *calls):
    """Best time and last result of each (fn, args) in ``calls``, run in turn ``repeats`` times
    (interleaved, so a change in machine load hits every side alike)."""
    best, out = [float("inf")] * len(calls), [None] * len(calls)
    for _ in range(repeats):
        for i, (fn, args) in enumerate(calls):
            t0 = time.perf_counter()
            out[i] = fn(*args)
            best[i] = min(best[i], time.perf_counter() - t0)
    return best, out


def torch_comparison(args) -> None:
    from threadpoolctl import threadpool_limits
    threadpool_limits(args.threads)
    import torch
    from bench_train import blas_line, cpu_busy, run_peak
    from torch_decoder import TorchDecoder

    torch.set_num_threads(args.threads)
    model, vocab, sources, how = trained_model(args)
    cfg = model.cfg
    peaks = run_peak(argparse.Namespace(threads=args.threads, skip_torch=False), dict(os.environ))
    decoder = TorchDecoder(model)
    print(f"# bench_decoding --torch  {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"# {machine_line('numpy')} | torch {torch.__version__}")
    print(f"# NumPy's BLAS: {blas_line()} | threads {args.threads} on both sides")
    print("# float32 matmul peak (2048^3, best of 10): "
          + ", ".join(f"{side} {peaks[side]:.1f} GFLOP/s" for side in ("numpy", "torch") if side in peaks))
    busy = cpu_busy(0.5)
    print(f"# load average {os.getloadavg()[0]:.2f}, other processes busy {100 * (busy or 0):.0f}% of all cores")
    print(f"# weights: {how}; model d_model={cfg.d_model} h={cfg.h} N={cfg.N} d_ff={cfg.d_ff} "
          f"V={cfg.vocab_size}; {len(sources)} held-out {args.task} sentences, best of {args.repeats} runs "
          "(the two sides in turn)")
    header = (f"{'search':<8} {'batch':>5} | {'ours s':>7} {'tok/s':>8} | {'torch s':>7} {'tok/s':>8} | "
              f"{'ours/torch':>10} | {'differ':>6}")
    print(header)
    print("-" * len(header))
    for beam in (1, 4):
        for batch in args.batches:
            decode_ours(model, vocab, sources[:batch], beam, batch)            # warm-up, both sides
            decode_torch(decoder, vocab, sources[:batch], beam, batch)
            (t_ours, t_torch), (ours, theirs) = best_times(
                args.repeats, (decode_ours, (model, vocab, sources, beam, batch)),
                (decode_torch, (decoder, vocab, sources, beam, batch)))
            n_tok = sum(len(y) + 1 for y in ours)                             # + <eos> (or the last step)
            differ = sum(a != b for a, b in zip(ours, theirs))
            name = "greedy" if beam == 1 else f"beam {beam}"
            print(f"{name:<8} {batch:>5} | {t_ours:>7.3f} {n_tok / t_ours:>8.0f} | {t_torch:>7.3f} "
                  f"{n_tok / t_torch:>8.0f} | {t_torch / t_ours:>9.2f}x | {differ:>6}", flush=True)
    print("# ours/torch: the package's tokens/s over torch's (above 1: the package is faster). "
          "differ: sentences whose tokens are not the same on both sides")


def cross_kv_comparison(args) -> None:
    """Per source: N products (as KVCache does) against one product of the N layers' weights side by side."""
    from minitransformer.data.registry import PRESETS

    print(f"# bench_decoding --cross-kv  {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"# {machine_line('numpy')} | best of {args.repeats} x 5 rounds, all three in turn")
    print(f"{'model':<6} {'B':>3} {'S':>3} | {'N products':>10} | {'one, W joined per source':>25} | "
          f"{'one, W joined in advance':>25}")
    for name, cfg in (("copy", PRESETS["copy"]), ("base", TransformerConfig(vocab_size=1000))):
        layers, d = Transformer(cfg, seed=args.seed).decoder.layers, cfg.d_model
        joined_W = np.concatenate([la.cross_attn.W_qkv.data[:, d:] for la in layers], axis=1)   # (d, N·2d)
        joined_b = np.concatenate([la.cross_attn.b_qkv.data[d:] for la in layers])

        def n_products(memory, layers, d, W, b):
            return [la.cross_attn.project_kv(memory) for la in layers]

        def one_joined_here(memory, layers, d, W, b):
            W = np.concatenate([la.cross_attn.W_qkv.data[:, d:] for la in layers], axis=1)
            b = np.concatenate([la.cross_attn.b_qkv.data[d:] for la in layers])
            kv = backend.matmul(memory, W)
            kv += b
            return kv

        def one_joined_before(memory, layers, d, W, b):
            kv = backend.matmul(memory, W)
            kv += b
            return kv

        for B, S in ((1, 12), (32, 12), (1, 40), (32, 40)):
            memory = np.random.default_rng(0).standard_normal((B, S, d)).astype(np.float32)
            given = (memory, layers, d, joined_W, joined_b)
            calls = [(f, given) for f in (n_products, one_joined_here, one_joined_before)]
            best = [float("inf")] * 3
            for _ in range(5):
                times, _ = best_times(args.repeats, *calls)
                best = [min(a, b) for a, b in zip(best, times)]
            print(f"{name:<6} {B:>3} {S:>3} | {best[0] * 1e3:>7.3f} ms | {best[1] * 1e3:>7.3f} ms "
                  f"({best[0] / best[1]:>4.2f}x faster) | {best[2] * 1e3:>7.3f} ms ({best[0] / best[2]:>4.2f}x faster)",
                  flush=True)
    print("# per source, once: compare with the decoding of that source (the table of --torch) to see what it is worth")
    cross_kv_training(args)


def cross_kv_training(args) -> None:
    """The same question in a training step: the N layers' memory K/V products forward and backward
    (K/V, dW, dmemory summed over the layers) as 3N products, or as 3 with the weights joined per step."""
    mm = backend.matmul
    rng = np.random.default_rng(args.seed)
    print(f"{'train':<6} {'d':>4} {'N':>2} {'B·S':>5} | {'3N products':>11} | {'3 products, W joined per step':>30}")
    for name, d, N, BS in (("toy", 128, 2, 32 * 32), ("base", 512, 6, 8 * 64)):   # bench_train.py's sizes
        memory = rng.standard_normal((BS, d)).astype(np.float32)
        Ws = [rng.standard_normal((d, 3 * d)).astype(np.float32) for _ in range(N)]
        dkv = [rng.standard_normal((BS, 2 * d)).astype(np.float32) for _ in range(N)]
        grads = [np.zeros((d, 3 * d), np.float32) for _ in range(N)]
        dkv_all = np.concatenate(dkv, axis=1)        # as each layer's backward would write it: no copy counted

        def separate(memory, Ws, grads, dkv, dkv_all, d):
            kv = [mm(memory, W[:, d:]) for W in Ws]
            dmemory = None
            for W, g, dk in zip(Ws, grads, dkv):
                g[:, d:] += mm(memory.T, dk)
                dm = mm(dk, W[:, d:].T)
                dmemory = dm if dmemory is None else dmemory + dm
            return kv, dmemory

        def joined(memory, Ws, grads, dkv, dkv_all, d):
            W = np.concatenate([W[:, d:] for W in Ws], axis=1)
            kv = mm(memory, W)
            dW = mm(memory.T, dkv_all)
            for i, g in enumerate(grads):
                g[:, d:] += dW[:, 2 * d * i: 2 * d * (i + 1)]
            return kv, mm(dkv_all, W.T)

        given = (memory, Ws, grads, dkv, dkv_all, d)
        best = [float("inf")] * 2
        for _ in range(5):
            times, _ = best_times(args.repeats, (separate, given), (joined, given))
            best = [min(a, b) for a, b in zip(best, times)]
        print(f"{name:<6} {d:>4} {N:>2} {BS:>5} | {best[0] * 1e3:>8.2f} ms | {best[1] * 1e3:>8.2f} ms "
              f"({best[0] / best[1]:.2f}x faster)", flush=True)


def main(argv=None):
    args = parse_args(argv)
    if args.cross_kv:
        cross_kv_comparison(args)
        return
    if args.torch:
        if args.backend != "numpy":
            raise SystemExit("error: --torch compares CPU decoders; leave --backend numpy (--backend)")
        torch_comparison(args)
        return
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
