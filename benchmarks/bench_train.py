"""Training-step speed: minitransformer (NumPy, float32) against PyTorch eager, same model, same run.

One training step is what ``Trainer.train_step`` does: forward, label-smoothed
loss (ε_ls 0.1), backward, Adam update (β 0.9/0.98, ε 1e-9). The PyTorch side
is the same model built from torch.nn pieces (the mapping the parity tests
check): nn.TransformerEncoderLayer / nn.TransformerDecoderLayer (post-LN,
ReLU), one embedding matrix tied three ways and scaled by sqrt(d_model),
sinusoidal PE, residual and embedding dropout 0.1 (no attention dropout and no
dropout inside the FFN, as in the paper and in minitransformer),
F.cross_entropy with label_smoothing=0.1, and torch.optim.Adam, once with its
default implementation and once with ``fused=True``.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_train.py
    python benchmarks/bench_train.py --configs toy --steps 15
    python benchmarks/bench_train.py --skip-torch --profile      # where does NumPy's time go?
    python benchmarks/bench_train.py --malloc default             # glibc's malloc as it comes, both sides
    python benchmarks/bench_train.py --device cuda                # CuPy vs PyTorch CUDA (needs a GPU)

(``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE``, where set, pin OpenBLAS to an older
kernel; the header prints which kernel runs. Unset them for this command only.)

How it measures (docs/performance.md has the details):

* one worker process per side (minitransformer, torch, torch fused), started
  one after the other and then kept alive. The parent asks them for one step
  at a time, in turn, with a pause (0.3 s) before each, so a change in machine
  load hits every side alike, and OpenBLAS's or OpenMP's still-spinning worker
  threads cannot slow the side that runs next. Separate processes also keep
  each side's malloc state, thread pools and peak memory its own.
* time: ``--warmup`` untimed steps, then ``--steps`` timed ones per side; min
  and median. ratio = minitransformer / PyTorch (below 1: minitransformer is faster).
* cpu: the least CPU time of a step (``time.process_time``: all the worker's threads
  together), which other processes on the machine do not add to the way they add
  to wall time; the ``--baseline`` line gives its ratio too.
* tokens/s: (source + target tokens of the batch) / median step time.
* GFLOP/s: 2·m·n·k for every matrix product of forward and backward, counted
  from the configuration (the NumPy side also counts the products it really
  runs, as a check), divided by the median step time. %peak: against the best
  float32 matrix product (NumPy/OpenBLAS and torch/MKL, 2048³) measured in the
  same run with the same threads.
* split: ``--split-steps`` extra steps per side with ``backend.matmul`` wrapped by a
  timer (NumPy) or under torch.profiler (self time of aten::mm/addmm/bmm/baddbmm and
  the fused attention kernels); non-matmul time = fastest timed step - least matmul
  time. Both peaks are printed, and the ratio of the non-matmul times, which does not
  depend on whose BLAS is faster. ``--baseline DIR`` adds another checkout's
  minitransformer as one more side (before/after in one run).
* mem: each worker's peak RSS (VmHWM, reset to the current RSS through
  /proc/self/clear_refs just before the model is built) after its timed steps,
  minus its RSS at that moment (after imports and building the batch):
  parameters, gradients, optimizer state, activations and allocator slack,
  counted the same way for every side.
* faults: minor page faults per step (fresh pages the kernel had to map), median.
* malloc: by default every worker runs with glibc told to keep freed memory
  (MALLOC_TUNED below), since glibc's own settings make both sides fault their
  temporaries in afresh every step; ``--malloc default`` measures glibc as it comes.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, REPO)

CONFIGS = {
    # name: model and batch. S = T = seq: every sentence pair has seq source and seq target tokens.
    "toy": dict(d_model=128, h=4, N=2, d_ff=512, vocab=1000, batch=32, seq=32),
    "small": dict(d_model=256, h=8, N=3, d_ff=1024, vocab=8000, batch=16, seq=64),
    "base": dict(d_model=512, h=8, N=6, d_ff=2048, vocab=37000, batch=8, seq=64),
}
P_DROP, EPS_LS, PAD = 0.1, 0.1, 0
CPU_SIDES = ("numpy", "torch", "torch_fused")
BASELINE_SIDE = "numpy_baseline"          # --baseline DIR: minitransformer from another checkout
GPU_SIDES = ("cupy", "torch_cuda", "torch_cuda_fused")
LABELS = {"numpy": "minitransformer", BASELINE_SIDE: "baseline", "torch": "torch Adam",
          "torch_fused": "torch Adam fused", "cupy": "minitransformer", "torch_cuda": "torch Adam",
          "torch_cuda_fused": "torch Adam fused"}
# --malloc tuned (the default): glibc's malloc, as it comes, gives the freed memory of
# every step back to the kernel and page-faults it in again in the next step (13,000
# faults per step at toy size for minitransformer, 5,000 for torch; a fault costs about
# 1.4 µs on this VM). These settings keep freed memory for reuse instead. Every side
# gets the same environment; --malloc default measures glibc's defaults.
MALLOC_TUNED = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**40), "MALLOC_TOP_PAD_": str(2**26)}


# -- what is counted ---------------------------------------------------------------------

def step_flops(c: dict) -> int:
    """Matrix-product FLOPs of one training step, 2·m·n·k each, from the configuration.

    Forward: per encoder layer the fused Q/K/V projection, Q K^T, A V, W^O and
    the two FFN products; per decoder layer the same for masked self-attention,
    plus encoder-decoder attention (Q from the decoder, K/V from the memory) and
    the FFN; then the tied output projection. Backward: every product y = a b
    needs da = dy b^T and db = a^T dy, each as many FLOPs as the forward product,
    so a step is 3 × the forward.
    """
    d, dff, N, V, B, S = c["d_model"], c["d_ff"], c["N"], c["vocab"], c["batch"], c["seq"]
    T, n, m = S, B * S, B * S                                # target length, source and target rows
    enc = 2 * n * d * 3 * d + 2 * (2 * B * S * S * d) + 2 * n * d * d + 2 * (2 * n * d * dff)
    dec = (2 * m * d * 3 * d + 2 * (2 * B * T * T * d) + 2 * m * d * d                   # masked self-attention
           + 2 * m * d * d + 2 * n * d * 2 * d + 2 * (2 * B * T * S * d) + 2 * m * d * d  # enc-dec attention
           + 2 * (2 * m * d * dff))                                                   # FFN
    forward = N * (enc + dec) + 2 * m * d * V
    return 3 * forward


def tokens_per_step(c: dict) -> int:
    return 2 * c["batch"] * c["seq"]       # source + target tokens, as train.py counts them


# -- the machine -------------------------------------------------------------------------

def blas_line() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed: BLAS kernel unknown"
    info = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    parts = [f"{i.get('internal_api')} {i.get('version')}, kernel {i.get('architecture')}" for i in info]
    return "; ".join(parts) or "no BLAS found by threadpoolctl"


def cpu_busy(seconds: float = 1.0) -> float | None:
    """Fraction of all CPUs busy over ``seconds`` (from /proc/stat), while this benchmark idles."""
    def sample():
        with open("/proc/stat", encoding="utf-8") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]                                   # idle + iowait
        return sum(v) - idle, sum(v)
    try:
        b0, t0 = sample()
        time.sleep(seconds)
        b1, t1 = sample()
    except OSError:
        return None
    return (b1 - b0) / max(1, t1 - t0)


def busy_line(when: str) -> str:
    busy = cpu_busy()
    if busy is None:
        return f"# CPU use by other processes {when}: unknown"
    line = f"# CPU use by other processes {when}: {100 * busy:.0f}% of all cores"
    if busy > 0.15:
        line += (" -- WARNING: the machine is shared right now; with several threads per side, "
                 "steps can stall for scheduler time slices. Trust the ratios more than the times, "
                 "rerun when idle, or compare with --threads 1")
    return line


def header(args) -> list[str]:
    from minitransformer import machine

    lines = [f"# bench_train  {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
             f"# machine: {machine.machine_info()['cpu']}, {os.cpu_count()} logical CPUs | {platform.platform()} | "
             f"Python {platform.python_version()}",
             f"# NumPy {np.__version__}: {blas_line()}"]
    forced = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    if forced:
        lines.append(f"# note: {forced} pin OpenBLAS's kernel; for the native one run "
                     "`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_train.py`")
    lines.append(f"# threads {args.threads} | {args.warmup} warm-up + {args.steps} timed steps per side, "
                 f"pause {args.pause} s before each | malloc {args.malloc}"
                 + (f" ({' '.join(f'{k}={v}' for k, v in MALLOC_TUNED.items())})" if args.malloc == "tuned" else ""))
    load = os.getloadavg()
    lines.append(f"# load average before the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    lines.append(busy_line("before the run"))
    return lines


# -- building each side ------------------------------------------------------------------

def make_batch(c: dict, seed: int = 0):
    """Random token ids in [4, V): no padding, every sentence S source and T target tokens."""
    rng = np.random.default_rng(seed)
    B, S, V = c["batch"], c["seq"], c["vocab"]
    src = rng.integers(4, V, (B, S))
    tgt = rng.integers(4, V, (B, S + 1))
    return src, tgt[:, :-1].copy(), tgt[:, 1:].copy()


def build_numpy_side(c: dict, batch, xp_name: str = "numpy"):
    """minitransformer's model, loss and optimizer; returns (model, step function)."""
    from minitransformer import backend
    from minitransformer.layers.loss import LabelSmoothedCrossEntropy
    try:
        from minitransformer.layers.masks import decoder_mask, padding_mask
    except ImportError:            # a --baseline checkout from before the masks moved to layers/masks.py (issue 13)
        from minitransformer.data.batching import causal_mask, padding_mask

        def decoder_mask(ids, pad_id):
            return padding_mask(ids, pad_id) & causal_mask(ids.shape[1], backend.get_array_module(ids))
    from minitransformer.model import Transformer, TransformerConfig
    from minitransformer.optim import Adam, NoamSchedule

    backend.set_backend(xp_name)
    backend.set_default_dtype("float32")
    cfg = TransformerConfig(vocab_size=c["vocab"], d_model=c["d_model"], h=c["h"], N=c["N"], d_ff=c["d_ff"],
                            P_drop=P_DROP, eps_ls=EPS_LS, max_len=c["seq"], pad_id=PAD)
    model = Transformer(cfg, seed=0)
    xp = backend.xp_default()
    src, tgt_in, tgt_out = (backend.to_backend(a, xp) for a in batch)
    src_mask, tgt_mask = padding_mask(src, PAD), decoder_mask(tgt_in, PAD)   # a Batch carries these, built once
    criterion = LabelSmoothedCrossEntropy(PAD, EPS_LS)
    optimizer = Adam(model.parameters(), lr=NoamSchedule(cfg.d_model, 4000))

    def step() -> float:
        # Trainer.train_step, minus its NaN check and step counter.
        model.train()
        logits = model.forward(src, tgt_in, src_mask, tgt_mask)
        loss = criterion.forward(logits, tgt_out)
        optimizer.zero_grad()
        model.backward(criterion.backward())
        optimizer.step()
        return loss

    return model, step


def torch_model_class():
    import torch
    from torch import nn
    F = nn.functional

    class TorchTransformer(nn.Module):
        """The same model in torch.nn pieces (the mapping of tests/test_torch_parity.py)."""

        def __init__(self, c, pe_table):
            super().__init__()
            d = c["d_model"]
            self.d = d
            kw = dict(d_model=d, nhead=c["h"], dim_feedforward=c["d_ff"], dropout=P_DROP, batch_first=True,
                      norm_first=False, layer_norm_eps=1e-5)
            self.E = nn.Parameter(torch.randn(c["vocab"], d) * d ** -0.5)   # minitransformer's init of E
            self.register_buffer("pe", torch.as_tensor(pe_table, dtype=torch.float32))
            self.enc = nn.ModuleList([nn.TransformerEncoderLayer(**kw) for _ in range(c["N"])])
            self.dec = nn.ModuleList([nn.TransformerDecoderLayer(**kw) for _ in range(c["N"])])
            for layer in [*self.enc, *self.dec]:
                # The paper (and minitransformer) drop out only sub-layer outputs and embeddings.
                layer.dropout = nn.Identity()                  # no dropout inside the FFN
                layer.self_attn.dropout = 0.0                  # no dropout on attention weights
                if hasattr(layer, "multihead_attn"):
                    layer.multihead_attn.dropout = 0.0
            self.src_drop, self.tgt_drop = nn.Dropout(P_DROP), nn.Dropout(P_DROP)

        def forward(self, src, tgt_in):
            S, T = src.shape[1], tgt_in.shape[1]
            scale = math.sqrt(self.d)
            x = self.src_drop(F.embedding(src, self.E) * scale + self.pe[:S])
            src_pad = src == PAD
            for layer in self.enc:
                x = layer(x, src_key_padding_mask=src_pad)
            y = self.tgt_drop(F.embedding(tgt_in, self.E) * scale + self.pe[:T])
            causal = torch.triu(torch.ones(T, T, dtype=torch.bool, device=src.device), diagonal=1)
            tgt_pad = tgt_in == PAD
            for layer in self.dec:
                y = layer(y, x, tgt_mask=causal, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
            return y @ self.E.T

    return TorchTransformer


def build_torch_side(c: dict, batch, fused: bool, device: str = "cpu"):
    """The torch model (torch's own initialisation of the layers), loss and Adam; returns (model, step)."""
    import torch
    from torch.nn import functional as F

    from minitransformer.layers.positional import sinusoidal_table

    torch.manual_seed(0)
    pe = sinusoidal_table(c["seq"], c["d_model"], xp=np, dtype=np.float32)
    model = torch_model_class()(c, pe).to(device).train()
    src, tgt_in, tgt_out = (torch.as_tensor(a, device=device) for a in batch)
    # lr: speed does not depend on it.
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                                 **({"fused": True} if fused else {}))
    V = c["vocab"]

    def step() -> float:
        optimizer.zero_grad()
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=PAD,
                               label_smoothing=EPS_LS)
        loss.backward()
        optimizer.step()
        return loss.item()                   # a host float, like minitransformer's loss (syncs a GPU)

    return model, step


# -- measuring inside a worker -----------------------------------------------------------

def timed_matmul_steps(step, n_steps: int) -> dict:
    """Run NumPy steps with backend.matmul wrapped: time and FLOPs inside matrix products.

    Returns seconds per step inside matrix products (``matmul_s``, the least over the
    steps: load from other processes only adds), the share of the step, GFLOP/s while
    inside them, and the FLOPs counted.
    """
    from minitransformer import backend

    plain = backend.matmul
    spent, flops = [0.0], [0]

    def timed(a, b, **out):                  # out=: a --baseline checkout from before issue 33 passes it
        t0 = time.perf_counter()
        r = plain(a, b, **out)
        spent[0] += time.perf_counter() - t0
        flops[0] += 2 * a.shape[-1] * r.size       # 2·m·n·k: k = a's last axis, m·n (× batch) = r.size
        return r

    backend.matmul = timed
    per_step, totals = [], []
    try:
        for _ in range(n_steps):
            spent[0] = 0.0
            t0 = time.perf_counter()
            step()
            totals.append(time.perf_counter() - t0)
            per_step.append(spent[0])
    finally:
        backend.matmul = plain
    return {"matmul_s": min(per_step), "share": sum(per_step) / sum(totals),
            "gflops_in_matmul": flops[0] / sum(per_step) / 1e9, "counted_flops": flops[0] // n_steps}


# PyTorch's matrix-product kernels. Its CPU attention in training runs as one fused kernel
# (QK^T, softmax and AV together, forward and backward); it is counted here as matrix
# product time, softmax included, which if anything flatters torch's non-matmul time.
TORCH_MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                    "aten::_scaled_dot_product_flash_attention_for_cpu",
                    "aten::_scaled_dot_product_flash_attention_for_cpu_backward"}


# libkineto, torch.profiler's engine, writes two lines to the process's stderr each time a
# profile starts and stops ("USDT:<date> <time> <pid>:<tid> SyncActivityProfilerHandler.cpp:52]
# profiler_start", then "profiler_stop"): 36 lines through the report of a full run. Its own
# log level cannot drop them without dropping its errors too (KINETO_LOG_LEVEL: USDT ranks above
# ERROR), so they are caught at the file descriptor (C++ writes past sys.stderr) and only those
# lines are dropped; anything else kineto or torch writes there is passed on.
KINETO_NOISE = re.compile(r"(?:USDT|STAGE):\S+ \S+ \d+:\d+ \S+\] (?:profiler_start|profiler_stop|Completed Stage: .*)")


@contextlib.contextmanager
def without_kineto_noise():
    """Run the body with fd 2 caught; then write what it caught to stderr, less KINETO_NOISE."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [line for line in caught.read().decode(errors="replace").splitlines()
                    if not KINETO_NOISE.fullmatch(line)]
            if kept:
                print("\n".join(kept), file=sys.stderr, flush=True)


def torch_matmul_share(step, n_steps: int) -> dict:
    """Profile ``n_steps`` torch steps, one at a time; seconds in its matrix-product kernels
    (self time) per step, the least over the steps, and their share of the profiled time."""
    from torch.profiler import ProfilerActivity, profile

    per_step, total = [], 0.0
    for _ in range(n_steps):
        with without_kineto_noise(), profile(activities=[ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            step()
            total += time.perf_counter() - t0
        per_step.append(sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in TORCH_MATMUL_OPS) / 1e6)
    # The profiler slows every op a little, so the share is of the profiled steps; the parent
    # subtracts matmul_s from the unprofiled step time to get the time outside products.
    return {"matmul_s": min(per_step), "share": sum(per_step) / total}


def profile_text(step, n_steps: int) -> str:
    try:
        from pyinstrument import Profiler
    except ImportError:
        return "(pyinstrument not installed: pip install pyinstrument)"
    profiler = Profiler(interval=0.0005)
    profiler.start()
    for _ in range(n_steps):
        step()
    profiler.stop()
    flat = profiler.output_text(unicode=False, color=False, flat=True, time="percent_of_total")
    flat = "\n".join(line for line in flat.splitlines() if line.strip())
    tree = profiler.output_text(unicode=False, color=False, show_all=False)
    return f"self time by function (top lines):\n{flat}\n\ncall tree:\n{tree}"


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="utf-8") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    """This process's peak RSS. VmHWM (Linux) starts afresh at exec, unlike ru_maxrss,
    which a child inherits from its parent."""
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024     # KiB on Linux


def _reset_peak_rss() -> None:
    """Make the peak RSS start from the current RSS (Linux >= 4.0; ignored elsewhere)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="utf-8") as f:
            f.write("5")
    except OSError:
        pass


def _reply(obj) -> None:
    sys.stdout.write("@@" + json.dumps(obj) + "\n")
    sys.stdout.flush()


def worker(args) -> None:
    """One side of one configuration; answers 'step', 'mem', 'matmul', 'profile', 'quit' on stdin."""
    c, side = CONFIGS[args.config], args.side
    is_torch = side.startswith("torch")
    if side == BASELINE_SIDE:
        sys.path.insert(0, os.path.abspath(args.baseline))   # its minitransformer, ahead of this checkout's
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=args.threads)
    if is_torch:
        import torch
        torch.set_num_threads(args.threads)
    from minitransformer import backend
    if hasattr(backend, "set_num_threads"):             # a --baseline checkout from before issue 18:
        backend.set_num_threads(args.threads)            # its own thread pool (Adam, LayerNorm, the loss)
    try:                                                 # --threads is the count every side runs on:
        from minitransformer import threads  # the load-following policy (issue 25.2) stays off
        threads.set_policy(False)
    except ImportError:                                  # a checkout from before it
        pass
    batch = make_batch(c)
    base_rss = _rss_bytes()
    _reset_peak_rss()
    sync = lambda: None  # noqa: E731
    if side in ("numpy", BASELINE_SIDE):
        step = build_numpy_side(c, batch)[1]
    elif side == "cupy":
        step = build_numpy_side(c, batch, "cupy")[1]
        cp = backend.module_for("cupy")
        sync = cp.cuda.Device().synchronize
    else:
        device = "cuda" if "cuda" in side else "cpu"
        step = build_torch_side(c, batch, fused=side.endswith("fused"), device=device)[1]
        if device == "cuda":
            sync = torch.cuda.synchronize
    _reply({"ready": True})
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "step":
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            c0, t0 = time.process_time(), time.perf_counter()
            loss = step()
            sync()
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            _reply({"t": dt, "cpu": cpu, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0,
                    "loss": loss})
        elif cmd == "mem":
            if side == "cupy":
                peak = backend.module_for("cupy").get_default_memory_pool().total_bytes()
            elif side.startswith("torch_cuda"):
                peak = torch.cuda.max_memory_allocated()
            else:
                peak = _peak_rss_bytes() - base_rss
            _reply({"peak_bytes": peak})
        elif cmd == "matmul":
            _reply(timed_matmul_steps(step, args.split_steps) if side in ("numpy", BASELINE_SIDE) else
                   torch_matmul_share(step, args.split_steps) if side in ("torch", "torch_fused") else {})
        elif cmd == "profile":
            _reply({"text": profile_text(step, args.profile_steps)})
        elif cmd == "quit":
            break


class Worker:
    """The parent's handle on one worker process."""

    def __init__(self, args, config: str, side: str, env: dict):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "side", "--config", config, "--side", side,
               "--threads", str(args.threads), "--profile-steps", str(args.profile_steps),
               "--split-steps", str(args.split_steps)] + (["--baseline", args.baseline] if args.baseline else [])
        self.side = side
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.ask(None)                                   # wait until it has built its model

    def ask(self, cmd: str | None) -> dict:
        if cmd is not None:
            self.proc.stdin.write(cmd + "\n")
            self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        raise RuntimeError(f"worker {self.side} exited (code {self.proc.wait()}); see its error above")

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(timeout=60)


def worker_peak(args) -> None:
    """Best float32 matrix product, in GFLOP/s, for NumPy and (if present) torch."""
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=args.threads)
    n, reps = 2048, 10
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)

    def best_of(f):
        f()
        best = math.inf
        for _ in range(reps):
            t0 = time.perf_counter()
            f()
            best = min(best, time.perf_counter() - t0)
        return 2 * n**3 / best / 1e9

    out = {"numpy": best_of(lambda: a @ b)}
    if not args.skip_torch and _torch_available():
        import torch
        torch.set_num_threads(args.threads)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        out["torch"] = best_of(lambda: torch.mm(ta, tb))
    _reply(out)


def _git_head(path: str) -> str:
    out = subprocess.run(["git", "-C", path, "log", "-1", "--format=%h %s"], capture_output=True, text=True,
                         check=False)
    return out.stdout.strip()[:80] or "not a git checkout"


def _torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


# -- the parent ----------------------------------------------------------------------------

def measure_config(args, name: str, sides, env) -> dict:
    """Interleave single steps of every side; then memory, matmul share, profile."""
    workers = {}
    try:
        for side in sides:                              # built one at a time
            workers[side] = Worker(args, name, side, env)
        times = {s: [] for s in sides}
        cpu = {s: [] for s in sides}
        faults = {s: [] for s in sides}
        for i in range(args.warmup + args.steps):
            for side, w in workers.items():
                time.sleep(args.pause)                  # let the previous side's threads go idle
                r = w.ask("step")
                if i >= args.warmup:
                    times[side].append(r["t"])
                    cpu[side].append(r["cpu"])
                    faults[side].append(r["faults"])
        result = {"config": name, "times": times, "cpu": cpu,
                  "faults": {s: float(np.median(f)) for s, f in faults.items()},
                  "mem": {s: w.ask("mem")["peak_bytes"] for s, w in workers.items()}}
        if args.device == "cpu":
            result["matmul"] = {}
            for side in (*CPU_SIDES, BASELINE_SIDE):
                if side in workers:
                    time.sleep(args.pause)
                    result["matmul"][side] = workers[side].ask("matmul")
            if args.profile:
                time.sleep(args.pause)
                result["profile"] = workers["numpy"].ask("profile")["text"]
        return result
    finally:
        for w in workers.values():
            w.close()


def run_peak(args, env) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "peak", "--threads", str(args.threads)]
    if args.skip_torch:
        cmd.append("--skip-torch")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("@@"):
            return json.loads(line[2:])
    print(f"# peak measurement failed: {out.stderr[-2000:]}", file=sys.stderr)
    return {}


def gpu_skip_reason(args) -> str | None:
    from minitransformer import backend
    reasons = []
    if not backend.cupy_available():
        reasons.append("CuPy with a CUDA device is not available")
    if not args.skip_torch:
        import torch
        if not torch.cuda.is_available():
            reasons.append("torch.cuda is not available")
    return "; ".join(reasons) or None


# Which matmul peak each side's %peak is measured against: its own library's.
PEAK_OF = {"numpy": "numpy", BASELINE_SIDE: "numpy", "torch": "torch", "torch_fused": "torch"}


def print_table(args, results, peaks) -> None:
    """The main table: step times, tokens/s, memory, FLOP rate; ratios against each torch side."""
    cols = (f"{'config':<6} {'side':<17} {'min ms':>8} {'med ms':>8} {'cpu ms':>8} {'tok/s':>7} {'mem MiB':>8} "
            f"{'GFLOP/s':>8} {'%peak':>6} {'faults':>7} {'ratio min':>9} {'ratio med':>9}")
    print(cols)
    print("-" * len(cols))
    for r in results:
        c = CONFIGS[r["config"]]
        ours = next(iter(r["times"].values()))
        for i, (side, ts) in enumerate(r["times"].items()):
            tmin, tmed = min(ts), float(np.median(ts))
            gfs = r["flops"] / tmed / 1e9
            own_peak = (peaks or {}).get(PEAK_OF.get(side, ""))
            pct = f"{100 * gfs / own_peak:.0f}%" if own_peak else "-"
            rmin = "" if i == 0 else f"{min(ours) / tmin:.2f}"
            rmed = "" if i == 0 else f"{float(np.median(ours)) / tmed:.2f}"
            mem = r["mem"].get(side)
            cpu = r.get("cpu", {}).get(side)
            print(f"{r['config']:<6} {LABELS[side]:<17} {1e3 * tmin:>8.1f} {1e3 * tmed:>8.1f} "
                  f"{'-' if not cpu else f'{1e3 * min(cpu):.1f}':>8} "
                  f"{tokens_per_step(c) / tmed:>7.0f} {'-' if mem is None else f'{mem / 2**20:.0f}':>8} "
                  f"{gfs:>8.1f} {pct:>6} {r['faults'][side]:>7.0f} {rmin:>9} {rmed:>9}")


def split_rows(results) -> list[dict]:
    """Each side's fastest step split into time inside matrix products and the rest (ms).

    Both terms are minima (the fastest timed step, the least matmul time of the split
    steps): load from other processes only ever adds time, so minima are what a quiet
    machine would show, and a slow step in one of the two cannot make the other negative.
    """
    rows = []
    for r in results:
        for side, mm in r.get("matmul", {}).items():
            if "matmul_s" not in mm:
                continue
            step_s = min(r["times"][side])
            rows.append({"config": r["config"], "side": side, "step_ms": 1e3 * step_s,
                         "matmul_ms": 1e3 * mm["matmul_s"], "other_ms": 1e3 * (step_s - mm["matmul_s"])})
    return rows


def print_split(results, peaks) -> None:
    """Time inside and outside matrix products, per side, and the ratios that do not depend on BLAS."""
    rows = split_rows(results)
    if not rows:
        return
    print("\nWhere the fastest step goes (matmul: minitransformer's backend.matmul, timed; torch's "
          "mm/addmm/bmm/baddbmm and fused attention kernels, profiled; least over --split-steps steps):")
    cols = f"{'config':<6} {'side':<17} {'step ms':>8} {'matmul ms':>10} {'non-matmul ms':>14} {'matmul share':>13}"
    print(cols)
    print("-" * len(cols))
    for row in rows:
        print(f"{row['config']:<6} {LABELS[row['side']]:<17} {row['step_ms']:>8.1f} {row['matmul_ms']:>10.1f} "
              f"{row['other_ms']:>14.1f} {100 * row['matmul_ms'] / row['step_ms']:>12.0f}%")
    if any(row["other_ms"] <= 0 for row in rows):
        print("WARNING: a side's matrix products took longer than its fastest whole step: other processes "
              "were using the CPU while it ran, and the split (and every non-matmul ratio) means nothing. "
              "Rerun on an idle machine.")
    blas = ""
    if peaks and "numpy" in peaks and "torch" in peaks:
        blas = f"NumPy's matmul peak is {peaks['numpy'] / peaks['torch']:.2f}x torch's on this machine"
    print()
    for config in dict.fromkeys(row["config"] for row in rows):
        by_side = {row["side"]: row for row in rows if row["config"] == config}
        ours = by_side.get("numpy")
        for side in ("torch", "torch_fused", BASELINE_SIDE):
            theirs = by_side.get(side)
            if ours is None or theirs is None or ours["other_ms"] <= 0 or theirs["other_ms"] <= 0:
                continue
            other, matmul, step = (ours[k] / theirs[k] for k in ("other_ms", "matmul_ms", "step_ms"))
            if side == BASELINE_SIDE:
                r = next(r for r in results if r["config"] == config)
                cpu = min(r["cpu"]["numpy"]) / min(r["cpu"][BASELINE_SIDE]) if r.get("cpu") else math.nan
                print(f"{config}: minitransformer / baseline: non-matmul time {other:.2f}, "
                      f"matmul time {matmul:.2f}, whole step {step:.2f} (fastest steps), "
                      f"CPU time {cpu:.2f} (least CPU time of a step, all threads)")
                continue
            print(f"{config}: minitransformer / {LABELS[side]}: non-matmul time {other:.2f} "
                  f"(does not depend on the BLAS libraries), matmul time {matmul:.2f}, "
                  f"whole step {step:.2f}" + (f" (depends on them: {blas})" if blas else ""))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    p.add_argument("--steps", type=int, default=7, help="timed steps per side (after warm-up)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per side first")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="BLAS / torch threads per side")
    p.add_argument("--pause", type=float, default=0.3, help="seconds of idle before each step")
    p.add_argument("--skip-torch", action="store_true", help="time minitransformer alone")
    p.add_argument("--malloc", choices=["tuned", "default"], default="tuned",
                   help="tuned: glibc keeps freed memory instead of handing it back and faulting it in "
                        "again every step; default: glibc as it comes. Either way the same for every side")
    p.add_argument("--profile", action="store_true", help="also print a pyinstrument profile of the NumPy step")
    p.add_argument("--profile-steps", type=int, default=3)
    p.add_argument("--split-steps", type=int, default=3,
                   help="steps per side with matrix products timed (NumPy) or profiled (torch)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: CuPy against PyTorch CUDA (skipped cleanly without a GPU)")
    p.add_argument("--backend", choices=["numpy", "cupy"], default=None, help="cupy means --device cuda")
    p.add_argument("--decoding", action="store_true",
                   help="also run benchmarks/bench_decoding.py (greedy tokens/s with and without the KV cache)")
    p.add_argument("--baseline", metavar="DIR",
                   help="also time minitransformer from another checkout (e.g. a `git worktree` of an older "
                        "commit), interleaved step by step with this one: before/after in one run")
    p.add_argument("--json", help="also write the raw results to this file")
    p.add_argument("--worker", choices=["side", "peak"], help=argparse.SUPPRESS)
    p.add_argument("--config", choices=list(CONFIGS), help=argparse.SUPPRESS)
    p.add_argument("--side", choices=CPU_SIDES + GPU_SIDES + (BASELINE_SIDE,), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.backend == "cupy":
        args.device = "cuda"
    if args.steps < 1 or args.warmup < 0 or args.threads < 1:
        p.error("--steps and --threads must be >= 1, --warmup >= 0")
    if args.worker == "side":
        worker(args)
        return 0
    if args.worker == "peak":
        worker_peak(args)
        return 0

    for line in header(args):
        print(line)
    if not args.skip_torch and not _torch_available():
        print("# PyTorch is not installed (pip install torch==2.13.0): timing minitransformer alone")
        args.skip_torch = True
    if not args.skip_torch:
        import torch
        pin = "" if torch.__version__.split("+")[0] == "2.13.0" else " (warning: not the pinned 2.13.0)"
        print(f"# torch {torch.__version__}{pin}, BLAS {'MKL' if torch.backends.mkl.is_available() else 'other'}, "
              f"CPU capability {torch.backends.cpu.get_cpu_capability()}")
    env = dict(os.environ, **(MALLOC_TUNED if args.malloc == "tuned" else {}))
    if args.device == "cuda":
        reason = gpu_skip_reason(args)
        if reason:
            print(f"# GPU run skipped: {reason}. Without --device cuda this benchmark runs on the CPU.")
            return 0
        sides = GPU_SIDES if not args.skip_torch else GPU_SIDES[:1]
        peak = None
    else:
        sides = CPU_SIDES if not args.skip_torch else CPU_SIDES[:1]
        if args.baseline:
            if not os.path.isdir(os.path.join(args.baseline, "minitransformer")):
                p.error(f"--baseline {args.baseline}: no minitransformer package in that directory")
            sides = (sides[0], BASELINE_SIDE, *sides[1:])
            print(f"# baseline: minitransformer from {os.path.abspath(args.baseline)} "
                  f"({_git_head(args.baseline)}); this checkout: {_git_head(REPO)}")
        peaks = run_peak(args, env)
        peak = max(peaks.values()) if peaks else None
    print(flush=True)

    results = []
    for name in args.configs:
        r = measure_config(args, name, sides, env)
        r["flops"], r["peak_gflops"] = step_flops(CONFIGS[name]), peak
        results.append(r)
        print(f"# {name}: done", file=sys.stderr, flush=True)
    if args.device == "cpu":
        # The peak once more after the steps; the best of both is taken: on a shared
        # machine a lower figure only means another process was running meanwhile.
        for k, v in run_peak(args, env).items():
            peaks[k] = max(v, peaks.get(k, 0.0))
        peak = max(peaks.values()) if peaks else None
        names = {"numpy": "NumPy (OpenBLAS)", "torch": "torch (MKL)"}
        line = ", ".join(f"{names.get(k, k)} {v:.0f} GFLOP/s" for k, v in peaks.items())
        if "numpy" in peaks and "torch" in peaks:
            rel = peaks["numpy"] / peaks["torch"]
            line += (f"; NumPy/torch {rel:.2f}: " + ("within 10%, so the whole-step ratio compares the code"
                     if 1 / 1.1 <= rel <= 1.1 else "more than 10% apart, so the whole-step ratio is partly "
                     "a comparison of the two BLAS libraries; the non-matmul ratio below is not"))
        print(f"# float32 matmul peak ({args.threads} threads, 2048³, best of 10, before and after the steps): {line}")
        print("# %peak: GFLOP/s of the step against the peak of that side's own library")
        for r in results:
            r["peak_gflops"] = peak
            r["peaks"] = peaks
    print_table(args, results, peaks if args.device == "cpu" else None)
    print()
    print("ratio: minitransformer time / PyTorch time (below 1: minitransformer is faster). "
          "mem: peak RSS above the RSS before the model is built. faults: minor page faults per step.")
    for r in results:
        ours = r.get("matmul", {}).get("numpy")
        if ours is None:
            continue
        line = (f"{r['config']}: {r['flops'] / 1e9:.2f} GFLOP of matmul per step; minitransformer runs them at "
                f"{ours['gflops_in_matmul']:.0f} GFLOP/s while inside them")
        if ours["counted_flops"] != r["flops"]:
            line += f" [counted {ours['counted_flops'] / 1e9:.2f} GFLOP, formula {r['flops'] / 1e9:.2f}]"
        print(line)
    print_split(results, peaks if args.device == "cpu" else None)
    for r in results:
        r["split"] = [row for row in split_rows([r])]
    for r in results:
        if "profile" in r:
            print(f"\n# pyinstrument profile of minitransformer, {r['config']}, {args.profile_steps} steps\n")
            print(r["profile"])
    load = os.getloadavg()
    print(f"# load average after the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(busy_line("after the run"))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    if args.decoding:
        print("\n# inference: benchmarks/bench_decoding.py", flush=True)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_decoding.py")
        subprocess.run([sys.executable, script, "--backend", "cupy" if args.device == "cuda" else "numpy"],
                       env=env, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
