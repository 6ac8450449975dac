"""Table 1 of the paper (§4) at toy scale: the sweeps behind lesson 8's plots.

    python lessons/experiments/lesson08_table1.py            # writes lessons/experiments/lesson08_table1.json
    python lessons/experiments/lesson08_table1.py --quick    # a small sweep (smoke test), to --out

Lesson 8 reads the JSON, plots it, and re-runs a small piece of it live. What is measured,
for one sequence (B = 1) in float32 with one BLAS thread (in a trial on the shared 2-core
machine, with the other core busy, two threads made the same calls up to 170 times slower):

* per-layer forward time, the minimum over repeats (each repeat loops the call until it
  has run for a few milliseconds), of five layers of width d. Two clocks: the CPU time of
  the one thread that runs the layer (``time.thread_time``; it stops while the operating
  system runs another process, so the machine's other users hardly disturb it; on an idle
  core it equals wall time), and wall time (``time.perf_counter``). The lesson plots the
  first and reports how far the second was from it:
  recurrent    h_t = tanh(x_t W_x + h_{t-1} W_h + b), a loop over the n positions
  conv         a causal 1-D convolution of kernel width k
  attention    the package's MultiHeadAttention (self-attention, h = 1), projections included
  restricted   the same projections, attention only within r positions of the query
  recurrent FLOPs as one product: the recurrent layer's two products done as if h_{t-1}
               were known in advance (it is not: a lower bound, to show what the loop costs)
* the matrix-product FLOPs and the number of matrix-product calls of each forward,
  counted by wrapping ``backend.matmul`` (every product of these layers goes through it);
* additive (Bahdanau) against dot-product attention: time and peak memory (tracemalloc);
* the live piece lesson 8 re-runs (``LIVE``), ``--reruns`` times: how closely a live run agrees with
  the record (``live_check``: FLOPs and calls exactly, the growth of time as a log-log slope).

Every record carries its provenance (``_record``: commit, command, dates, machine, BLAS threads, load).

The layers here are forward-only copies of the lesson's reference layers; the lesson
checks that both give the same outputs.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import pathlib
import sys
import time
import tracemalloc

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE))                  # _record, when the lesson loads this file by path

import _record

from minitransformer import backend
from minitransformer.layers.attention import (
    MultiHeadAttention,
    attention_forward,
    softmax_lastaxis,
)
from minitransformer.layers.linear import init_weight

# -- the layers (forward only) ----------------------------------------------------------


def recurrent_forward(x, W_x, W_h, b):
    """x: (B, n, d_in) -> H: (B, n, d); h_t = tanh(x_t W_x + h_{t-1} W_h + b), h_{-1} = 0."""
    B, n, _ = x.shape
    d = W_h.shape[0]
    Z = backend.matmul(x, W_x)                       # (B, n, d): the input part, all positions at once
    Z += b
    H = np.empty((B, n, d), dtype=x.dtype)
    h = np.zeros((B, d), dtype=x.dtype)
    for t in range(n):                               # step t needs h_{t-1}: n products, one after another
        h = np.tanh(Z[:, t] + backend.matmul(h, W_h))
        H[:, t] = h
    return H


def recurrent_flops_as_one_product(x, W_x, W_h, b):
    """The recurrent layer's FLOPs with the loop removed (NOT the recurrent layer: it uses
    x in place of h_{t-1}, as if every previous state were known in advance)."""
    Z = backend.matmul(x, W_x)
    Z += backend.matmul(x, W_h)
    Z += b
    return np.tanh(Z, out=Z)


def conv1d_forward(x, W, b, dilation=1):
    """x: (B, n, d_in), W: (k, d_in, d_out) -> y: (B, n, d_out);
    y_t = b + sum_j x_{t - j·dilation} W_j (causal, x_{<0} = 0)."""
    B, n, _ = x.shape
    y = np.zeros((B, n, W.shape[2]), dtype=x.dtype)
    y += b
    for j in range(W.shape[0]):                      # k products over all positions; none needs another
        s = j * dilation
        if s < n:
            y[:, s:] += backend.matmul(x[:, :n - s], W[j])
    return y


def restricted_attention_forward(Q, K, V, r):
    """Q, K, V: (B, h, n, d_k). Query i attends to keys j with |i - j| <= r: (B, h, n, d_k).

    Each query gets its own window of 2r+1 keys (a strided view, no copy) and the
    package's attention_forward runs on the windows: O(r·n·d) work, not O(n²·d)."""
    n, w = Q.shape[-2], 2 * r + 1
    pad = [(0, 0)] * (Q.ndim - 2) + [(r, r), (0, 0)]
    K_win = sliding_window_view(np.pad(K, pad), w, axis=-2).swapaxes(-1, -2)   # (B, h, n, w, d_k)
    V_win = sliding_window_view(np.pad(V, pad), w, axis=-2).swapaxes(-1, -2)
    j = np.arange(n)[:, None] - r + np.arange(w)[None, :]                      # key index of each slot
    inside = ((j >= 0) & (j < n))[None, None, :, None, :]                      # (1, 1, n, 1, w)
    out, _ = attention_forward(Q[..., None, :], K_win, V_win, inside)          # (B, h, n, 1, d_k)
    return out[..., 0, :]


def restricted_mha_forward(mha, x, r):
    """MultiHeadAttention's projections around restricted attention."""
    Q, K, V = mha.project_qkv(x)
    return mha.output(restricted_attention_forward(Q, K, V, r))


def additive_attention_forward(Q, K, V, W_q, W_k, v):
    """Additive attention (Bahdanau et al., 2015), the alternative §3.2.1 compares with:
    e_ij = v · tanh(q_i W_q + k_j W_k), A = softmax_rows(e), out = A V.

    Q: (B, n_q, d_k), K: (B, n_k, d_k), V: (B, n_k, d_v), W_q, W_k: (d_k, d_a), v: (d_a,)."""
    Qa = backend.matmul(Q, W_q)                                  # (B, n_q, d_a)
    Ka = backend.matmul(K, W_k)                                  # (B, n_k, d_a)
    T = Qa[:, :, None, :] + Ka[:, None, :, :]                   # (B, n_q, n_k, d_a): a vector per pair
    np.tanh(T, out=T)
    E = backend.matmul(T, v[:, None])[..., 0]                   # (B, n_q, n_k)
    A = softmax_lastaxis(E)
    return backend.matmul(A, V)                                  # (B, n_q, d_v)


def dot_product_attention(Q, K, V):
    """Eq. (1) through the package, on (B, n, d_k) arrays (one head)."""
    return attention_forward(Q[:, None], K[:, None], V[:, None])[0][:, 0]


def make_layers(d, k, rng, dtype):
    """The parameters of every layer, width d (d_in = d_out = d)."""
    old = backend.default_dtype()
    backend.set_default_dtype(dtype)
    try:
        mha = MultiHeadAttention(d, 1, rng)
    finally:
        backend.set_default_dtype(old)
    W_x = init_weight(d, d, rng, np, dtype)
    W_h = init_weight(d, d, rng, np, dtype)
    W_conv = np.stack([init_weight(d, d, rng, np, dtype) for _ in range(k)]) / np.sqrt(k).astype(dtype)
    b = np.zeros(d, dtype=dtype)
    return {"W_x": W_x, "W_h": W_h, "W_conv": W_conv, "b": b, "mha": mha}


def layer_calls(p, k, r):
    """name -> function of x (B, n, d) running one layer forward."""
    return {
        "recurrent": lambda x: recurrent_forward(x, p["W_x"], p["W_h"], p["b"]),
        "conv": lambda x: conv1d_forward(x, p["W_conv"], p["b"]),
        "attention": lambda x: p["mha"].forward(x),
        "restricted": lambda x: restricted_mha_forward(p["mha"], x, r),
        "recurrent FLOPs as one product": lambda x: recurrent_flops_as_one_product(x, p["W_x"], p["W_h"], p["b"]),
    }


# -- measuring --------------------------------------------------------------------------


def matmul_flops(a_shape, b_shape) -> int:
    """FLOPs of backend.matmul(a, b): 2 per multiply-add."""
    if len(b_shape) == 2:
        return 2 * math.prod(a_shape[:-1]) * a_shape[-1] * b_shape[-1]
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    return 2 * math.prod(batch) * a_shape[-2] * a_shape[-1] * b_shape[-1]


@contextlib.contextmanager
def count_matmuls():
    """Count the calls and FLOPs of every backend.matmul inside the block."""
    tally = {"calls": 0, "flops": 0}
    original = backend.matmul

    def counting(a, b):
        tally["calls"] += 1
        tally["flops"] += matmul_flops(a.shape, b.shape)
        return original(a, b)

    backend.matmul = counting
    try:
        yield tally
    finally:
        backend.matmul = original


def min_time(fn, repeats=5, target_s=0.003, clock=time.thread_time):
    """Seconds per call: the minimum over ``repeats`` repeats, each looping fn until target_s.

    clock: time.thread_time (CPU time of this thread: with one BLAS thread, all of the
    work) or time.perf_counter (wall time)."""
    fn()                                              # warm-up: first-call costs (allocations, caches)
    number = 1
    while True:                                       # how many calls make one repeat last target_s
        t0 = clock()
        for _ in range(number):
            fn()
        elapsed = clock() - t0
        if elapsed >= target_s or number >= 1 << 16:
            break
        number *= 2
    best = elapsed / number
    for _ in range(repeats - 1):
        t0 = clock()
        for _ in range(number):
            fn()
        best = min(best, (clock() - t0) / number)
    return best


def peak_bytes(fn) -> int:
    """Peak bytes allocated (as tracemalloc sees NumPy's buffers) while fn runs."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def sweep_layers(ns, ds, k, r, repeats, rng, names=None):
    """time_s (thread CPU time), wall_s, flops, calls: [name][i_d][i_n]."""
    out = {"time_s": {}, "wall_s": {}, "flops": {}, "calls": {}}
    for d in ds:
        p = make_layers(d, k, rng, np.float32)
        calls = layer_calls(p, k, r)
        for name in names or calls:
            for key in out:
                out[key].setdefault(name, []).append([])
            for n in ns:
                x = rng.standard_normal((1, n, d)).astype(np.float32)
                with count_matmuls() as tally:
                    calls[name](x)
                out["flops"][name][-1].append(tally["flops"])
                out["calls"][name][-1].append(tally["calls"])
                out["time_s"][name][-1].append(min_time(lambda: calls[name](x), repeats))
                out["wall_s"][name][-1].append(min_time(lambda: calls[name](x), repeats, clock=time.perf_counter))
    return out


def sweep_additive(ns, d_ks, repeats, rng):
    out = {"n": ns, "d_k": d_ks, "time_s": {"additive": [], "dot-product": []},
           "peak_bytes": {"additive": [], "dot-product": []}}
    for d_k in d_ks:
        for key in ("time_s", "peak_bytes"):
            for name in out[key]:
                out[key][name].append([])
        W_q, W_k = init_weight(d_k, d_k, rng, np, np.float32), init_weight(d_k, d_k, rng, np, np.float32)
        v = init_weight(d_k, 1, rng, np, np.float32)[:, 0]
        for n in ns:
            Q, K, V = (rng.standard_normal((1, n, d_k)).astype(np.float32) for _ in range(3))
            fns = {"additive": lambda: additive_attention_forward(Q, K, V, W_q, W_k, v),
                   "dot-product": lambda: dot_product_attention(Q, K, V)}
            for name, fn in fns.items():
                out["time_s"][name][-1].append(min_time(fn, repeats))
                out["peak_bytes"][name][-1].append(peak_bytes(fn))
    return out


# The piece of the n sweep that lesson 8 re-runs live: these layers, d = 64, these n, 5 repeats.
LIVE = {"d": 64, "n": [16, 32, 64, 128, 256], "names": ["recurrent", "conv", "attention", "restricted"], "repeats": 5}


def live_piece(calls: dict, rng) -> dict:
    """The live piece on ``calls`` (name -> function of x, as ``layer_calls`` or the lesson's layers):
    {"time_s", "flops", "calls"}: [name] -> one value per n of LIVE."""
    out = {"time_s": {}, "flops": {}, "calls": {}}
    for n in LIVE["n"]:
        x = rng.standard_normal((1, n, LIVE["d"])).astype(np.float32)
        for name in LIVE["names"]:
            with count_matmuls() as tally:
                calls[name](x)
            out["flops"].setdefault(name, []).append(tally["flops"])
            out["calls"].setdefault(name, []).append(tally["calls"])
            out["time_s"].setdefault(name, []).append(min_time(lambda: calls[name](x), repeats=LIVE["repeats"]))
    return out


def keep_minimum(a: dict, b: dict) -> dict:
    """Two live pieces of the same layers merged: each point's smaller time (noise only ever adds
    time, so the minimum over more rounds is the better estimate); FLOPs and calls must be equal."""
    if a["flops"] != b["flops"] or a["calls"] != b["calls"]:
        raise ValueError("keep_minimum: the two live pieces counted different FLOPs or calls")
    return a | {"time_s": {name: [min(s, t) for s, t in zip(a["time_s"][name], b["time_s"][name], strict=True)]
                           for name in a["time_s"]}}


def growth_slopes(n: list, time_s: dict, n_from: int = 64, n_to: int = 256) -> dict:
    """The log-log slope of each layer's time from n_from to n_to: the shape, free of the machine's speed."""
    i, j = n.index(n_from), n.index(n_to)
    return {name: math.log(t[j] / t[i]) / math.log(n_to / n_from) for name, t in time_s.items()}


def recorded_live_rows(result: dict) -> dict:
    """The record's values at the live piece's sizes: flops, calls and time_s per layer."""
    sweep = result["n_sweep"]
    assert sweep["d"] == LIVE["d"], sweep["d"]
    idx = [sweep["n"].index(n) for n in LIVE["n"]]
    return {key: {name: [sweep[key][name][0][i] for i in idx] for name in LIVE["names"]}
            for key in ("flops", "calls", "time_s")}


def live_checks(result: dict, reruns: int, k: int, r: int) -> list:
    """Re-run the live piece ``reruns`` times (fresh layers each time, one BLAS thread) and state
    how closely a live run agrees with the record: matrix-product FLOPs and calls exactly (they
    depend on the code only), and the growth of time from n = 64 to 256 as a log-log slope
    (the shape lesson 8 reads; the machine's speed and load cancel out)."""
    rec = recorded_live_rows(result)
    rec_slopes = growth_slopes(LIVE["n"], rec["time_s"])
    runs = []
    for i in range(reruns):
        rng = np.random.default_rng(100 + i)
        live = live_piece(layer_calls(make_layers(LIVE["d"], k, rng, np.float32), k, r), rng)
        if live["flops"] != rec["flops"] or live["calls"] != rec["calls"]:
            raise SystemExit(f"error: the live piece counts {live['flops']} FLOPs / {live['calls']} calls, "
                             f"the record {rec['flops']} / {rec['calls']}: the record is stale, re-run the sweep")
        runs.append(growth_slopes(LIVE["n"], live["time_s"]))
        print(f"re-run {i + 1}: slopes " + ", ".join(f"{name} {v:.3f}" for name, v in runs[-1].items()), flush=True)
    names = LIVE["names"]
    spread = max(abs(run[name] - rec_slopes[name]) for run in runs for name in names)
    tolerance = max(0.15, math.ceil(2 * spread * 20) / 20)        # twice the worst deviation, at least 0.15
    where = {"d": LIVE["d"], "n": LIVE["n"], "layers": names}
    return [
        _record.live_check("n sweep, d = 64, n = 16..256, each layer", "matmul FLOPs per forward, per layer and n "
                           f"(layers in the order {names})", [v for name in names for v in rec["flops"][name]],
                           0, "exact", 0, f"counted in {reruns} re-runs: always equal", **where),
        _record.live_check("n sweep, d = 64, n = 16..256, each layer", "matmul calls per forward, per layer and n "
                           f"(layers in the order {names})", [v for name in names for v in rec["calls"][name]],
                           0, "exact", 0, f"counted in {reruns} re-runs: always equal", **where),
        _record.live_check("n sweep, d = 64, n = 64 -> 256, each layer",
                           f"log-log slope of the CPU time from n = 64 to 256 (layers in the order {names})",
                           [round(rec_slopes[name], 4) for name in names], tolerance, "abs", round(spread, 4),
                           f"{reruns} re-runs of the live piece on this machine, one BLAS thread, a minute after the "
                           "sweep; tolerance: twice the largest deviation from the record, at least 0.15. Another "
                           "CPU (other cache sizes) may bend the curve more: a timing shape, not a computed value",
                           **where),
    ]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a small sweep, for a smoke test")
    p.add_argument("--out", default=str(HERE / "lesson08_table1.json"))
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--reruns", type=int, default=3, help="re-runs of the live piece that measure the tolerance")
    args = p.parse_args(argv)

    prov = _record.start(threads=1, argv=None if argv is None else [sys.argv[0], *argv])
    rng = np.random.default_rng(0)
    k, r = 3, 8
    if args.quick:
        n_sweep, d_sweep, grid_n, grid_d = [16, 32, 64, 128, 256], [32, 128], [16, 64, 256], [32, 128]
        r_sweep, add_n, add_dk, repeats = [1, 4, 16], [16, 64], [16, 64], 2
    else:
        n_sweep = [2 ** i for i in range(3, 12)]                  # 8 .. 2048
        d_sweep = [2 ** i for i in range(4, 11)]                  # 16 .. 1024
        grid_n = [2 ** i for i in range(3, 12)]
        grid_d = [2 ** i for i in range(3, 10)]                   # 8 .. 512
        r_sweep = [2 ** i for i in range(9)]                      # 1 .. 256
        add_n = [2 ** i for i in range(3, 10)]                    # 8 .. 512
        add_dk = [2 ** i for i in range(3, 9)]                    # 8 .. 256
        repeats = args.repeats

    result = {
        "settings": {"dtype": "float32", "blas_threads": 1, "batch": 1, "k": k, "r": r, "heads": 1,
                     "repeats": repeats,
                     "timing": "min over repeats of the mean of a loop lasting >= 3 ms; time_s: CPU time of "
                               "the thread (time.thread_time), wall_s: wall time (time.perf_counter)"},
    }
    d_fixed, n_fixed = 64, 64
    print(f"n sweep at d = {d_fixed} ...", flush=True)
    result["n_sweep"] = {"d": d_fixed, "n": n_sweep, **sweep_layers(n_sweep, [d_fixed], k, r, repeats, rng)}
    print(f"d sweep at n = {n_fixed} ...", flush=True)
    result["d_sweep"] = {"n": n_fixed, "d": d_sweep, **sweep_layers([n_fixed], d_sweep, k, r, repeats, rng)}
    print("n x d grid, recurrent and attention ...", flush=True)
    result["grid"] = {"n": grid_n, "d": grid_d,
                      **sweep_layers(grid_n, grid_d, k, r, repeats, rng, names=["recurrent", "attention"])}
    print("restricted attention, r sweep ...", flush=True)
    n_r = 1024 if not args.quick else 64
    p_r = make_layers(d_fixed, k, rng, np.float32)
    x_r = rng.standard_normal((1, n_r, d_fixed)).astype(np.float32)
    r_times, r_flops = [], []
    for r_i in r_sweep:
        with count_matmuls() as tally:
            restricted_mha_forward(p_r["mha"], x_r, r_i)
        r_flops.append(tally["flops"])
        r_times.append(min_time(lambda: restricted_mha_forward(p_r["mha"], x_r, r_i), repeats))
    full_time = min_time(lambda: p_r["mha"].forward(x_r), repeats)
    result["r_sweep"] = {"n": n_r, "d": d_fixed, "r": r_sweep, "time_s": r_times, "flops": r_flops,
                         "full_attention_time_s": full_time}
    print("additive vs dot-product attention ...", flush=True)
    result["additive"] = sweep_additive(add_n, add_dk, repeats, rng)
    print(f"the live piece, {args.reruns} re-runs ...", flush=True)
    result["live_check"] = live_checks(result, args.reruns, k, r)
    result = {"provenance": [_record.finish(prov)], **result}
    _record.write(args.out, result)
    p = result["provenance"][0]
    print(f"wrote {args.out} in {p['wall_seconds']} s; load average {p['load_average']['start']} -> "
          f"{p['load_average']['end']}")


if __name__ == "__main__":
    main()
