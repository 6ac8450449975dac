"""Data-parallel training speed: one process against N ranks under mpiexec, same global batch.

    python benchmarks/bench_parallel.py                         # toy and small, 1x1 1x2 2x1 2x2
    python benchmarks/bench_parallel.py --configs toy --steps 6 --rounds 1
    python benchmarks/bench_parallel.py --layouts 1x2 2x1 2x2 4x1

A layout "RxT" is R ranks (processes, under ``mpiexec -n R``; R = 1 runs without it) of T
OpenBLAS threads each (pinned as benchmarks/bench_train.py pins them). Every layout trains
on the same global batch, bench_train's random batch of the configuration (no padding),
split between the ranks by ``distributed.step_batches``, through the real training step
(``Trainer.train_step``: forward, loss, backward, the gradients summed with
``distributed.GradientSum``, Adam on every rank).

Per step, the slowest rank's times (the step ends for everyone when the last one is done):

* step ms, tokens/s: the whole step, and the global batch's source + target tokens over it;
* fwd+bwd, sum, Adam: the forward and backward of the rank's shard, the gradient sum
  (packing into one host buffer, MPI_Allreduce, unpacking: it includes waiting for the slower
  rank), and Adam's update, which every rank runs on all parameters;
* allreduce alone: MPI_Allreduce of the same buffer right after a barrier (no waiting for a
  slower rank, no packing): the cost of the communication itself, median of 10;
* MB summed, ring MB: the buffer each rank hands to MPI (4 bytes per parameter, float32, plus
  the loss and the token count), and what a ring allreduce sends per rank, 2(N-1)/N of it;
  ring MB / allreduce alone is the bandwidth the communication reached.

Medians over ``--steps`` timed steps after ``--warmup``; with ``--rounds 2`` the layouts run
twice, in opposite orders, and the better median of each is kept (the machine's load changes
while they run; the header and the footer print it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

import bench_train  # its configurations, batch, thread pinning and machine lines

LAYOUTS = ("1x1", "1x2", "2x1", "2x2")        # 1x1: the reference the speedups are against
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


def _layout(text: str) -> tuple[int, int]:
    ranks, threads = (int(x) for x in text.lower().split("x"))
    if ranks < 1 or threads < 1:
        raise argparse.ArgumentTypeError(f"a layout is RANKSxTHREADS with both ≥ 1, got {text!r}")
    return ranks, threads


# -- one rank -----------------------------------------------------------------------------------

def worker(args) -> None:
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=args.threads)

    from minitransformer import backend, distributed
    from minitransformer.data.vocab import Vocab
    from minitransformer.model import Transformer, TransformerConfig
    from minitransformer.settings import TrainSettings
    from minitransformer.train import Trainer

    backend.set_default_dtype("float32")
    comm = distributed.world()
    c = bench_train.CONFIGS[args.config]
    src, tgt_in, _ = bench_train.make_batch(c)
    # The same batch as (source ids, target ids) pairs: make_batch adds <bos> and <eos>, so the
    # target keeps S - 1 ids and the Batch is (B, S) on both sides, as bench_train's.
    pairs = [(row.tolist(), t[1:].tolist()) for row, t in zip(src, tgt_in)]
    vocab = Vocab([f"t{i}" for i in range(c["vocab"] - 4)])
    cfg = TransformerConfig(vocab_size=c["vocab"], d_model=c["d_model"], h=c["h"], N=c["N"], d_ff=c["d_ff"],
                            P_drop=bench_train.P_DROP, eps_ls=bench_train.EPS_LS, max_len=c["seq"] + 1,
                            pad_id=vocab.pad_id)
    trainer = Trainer(Transformer(cfg, seed=0), vocab, pairs, [], TrainSettings(steps=10**6, batch_size=len(pairs)),
                      comm=comm)
    work = distributed.step_batches(list(range(len(pairs))), pairs, comm, vocab.pad_id, vocab.bos_id,
                                    vocab.eos_id)
    parts = {"sum": 0.0, "adam": 0.0}

    def timed(name, fn):
        def run(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                parts[name] += time.perf_counter() - t0
        return run

    trainer._gradient_sum = timed("sum", trainer._gradient_sum)
    trainer.optimizer.step = timed("adam", trainer.optimizer.step)
    rows = []
    for i in range(args.warmup + args.steps):
        comm.barrier("the start of a timed step")
        parts["sum"] = parts["adam"] = 0.0
        t0 = time.perf_counter()
        trainer.train_step(work)
        total = time.perf_counter() - t0
        if i >= args.warmup:
            rows.append((total, total - parts["sum"] - parts["adam"], parts["sum"], parts["adam"]))
    n_params = sum(p.data.size for p in trainer.model.parameters())
    summed = distributed.GradientSum(trainer.model.parameters())
    buf = np.zeros((summed.nbytes // 4,), np.float32)
    alone = []
    for _ in range(12 if comm.size > 1 else 0):
        comm.barrier("before the allreduce alone")
        t0 = time.perf_counter()
        comm.allreduce_sum(buf, "the allreduce alone")
        alone.append(time.perf_counter() - t0)
    everyone = comm.allgather(rows, "the timings")
    if comm.is_root:
        per_step = np.max(np.array(everyone), axis=0)               # (steps, 4): the slowest rank, per step
        med = np.median(per_step, axis=0)
        print("@@" + json.dumps({
            "step_s": float(med[0]), "fwd_bwd_s": float(med[1]), "sum_s": float(med[2]), "adam_s": float(med[3]),
            "allreduce_alone_s": float(np.median(alone[2:])) if alone else 0.0, "bytes": summed.nbytes,
            "ring_bytes": 2 * (comm.size - 1) / comm.size * summed.nbytes, "params": int(n_params),
            "tokens": bench_train.tokens_per_step(c), "ranks": comm.size, "library": comm.library}), flush=True)


# -- the parent ---------------------------------------------------------------------------------

def run_layout(args, config: str, ranks: int, threads: int) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads), PYTHONPATH=REPO,
               **bench_train.MALLOC_TUNED)
    for name in ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"):
        env.pop(name, None)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--config", config, "--threads", str(threads),
           "--steps", str(args.steps), "--warmup", str(args.warmup)]
    if ranks > 1:
        cmd = [MPIEXEC, "-n", str(ranks), *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("@@"):
            return json.loads(line[2:])
    raise RuntimeError(f"{config} {ranks}x{threads} failed (code {out.returncode}):\n{out.stderr[-3000:]}")


def header(args) -> list[str]:
    from minitransformer import machine

    load = os.getloadavg()
    return [f"# bench_parallel  {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
            f"# machine: {machine.machine_summary()} | {platform.platform()}",
            f"# NumPy {np.__version__}: {bench_train.blas_line()}",
            f"# {args.warmup} warm-up + {args.steps} timed steps per layout, {args.rounds} round(s); float32; "
            f"malloc tuned as in bench_train",
            f"# load average before the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
            bench_train.busy_line("before the run")]


def print_table(results: dict) -> None:
    cols = (f"{'config':<6} {'layout':<22} {'step ms':>8} {'tok/s':>7} {'speedup':>7} {'fwd+bwd':>8} {'sum':>7} "
            f"{'Adam':>7} {'alone':>7} {'MB summed':>9} {'ring MB':>8} {'GB/s':>6}")
    print(cols)
    print("-" * len(cols))
    for config, layouts in results.items():
        base = next(iter(layouts.values()))["step_s"]               # the first layout given (1x1 by default)
        for (ranks, threads), r in layouts.items():
            name = f"{ranks} rank{'s' if ranks > 1 else ''} x {threads} thread{'s' if threads > 1 else ''}"
            bw = r["ring_bytes"] / r["allreduce_alone_s"] / 1e9 if r["allreduce_alone_s"] else float("nan")
            print(f"{config:<6} {name:<22} {1e3 * r['step_s']:>8.1f} {r['tokens'] / r['step_s']:>7.0f} "
                  f"{base / r['step_s']:>6.2f}x {1e3 * r['fwd_bwd_s']:>8.1f} {1e3 * r['sum_s']:>7.1f} "
                  f"{1e3 * r['adam_s']:>7.1f} {1e3 * r['allreduce_alone_s']:>7.2f} {r['bytes'] / 1e6:>9.2f} "
                  f"{r['ring_bytes'] / 1e6:>8.2f} {bw:>6.2f}")
    print("# step ms: the slowest rank's step, median; speedup: against the first layout's step; fwd+bwd, sum, "
          "Adam: the parts of the step (ms); alone: MPI_Allreduce of the buffer after a barrier (ms); ring MB: "
          "2(N-1)/N x MB summed, sent per rank; GB/s: ring MB / alone")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", nargs="+", default=["toy", "small"], choices=list(bench_train.CONFIGS))
    p.add_argument("--layouts", nargs="+", type=_layout, default=[_layout(x) for x in LAYOUTS],
                   help="RANKSxTHREADS each (default: 1x1 1x2 2x1 2x2; speedups are against the first)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2, help="run the layouts this many times, alternating the order")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", default="toy", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if any(r > 1 for r, _ in args.layouts) and not os.path.exists(MPIEXEC):
        print(f"error: {MPIEXEC} not found: install the MPI extra, pip install -e '.[mpi]'", file=sys.stderr)
        return 2
    print("\n".join(header(args)), flush=True)
    results: dict = {}
    for config in args.configs:
        results[config] = {}
        for round_ in range(args.rounds):
            order = args.layouts if round_ % 2 == 0 else args.layouts[::-1]
            for ranks, threads in order:
                r = run_layout(args, config, ranks, threads)
                best = results[config].get((ranks, threads))
                if best is None or r["step_s"] < best["step_s"]:
                    results[config][(ranks, threads)] = r
        results[config] = {k: results[config][k] for k in args.layouts}
    print_table(results)
    library = next((r["library"] for layouts in results.values() for r in layouts.values() if r["ranks"] > 1), None)
    if library:
        print(f"# MPI: {library}, mpi4py, ranks oversubscribe the cores where ranks x threads > cores "
              f"({os.cpu_count()} here)")
    load = os.getloadavg()
    print(f"# load average after the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(bench_train.busy_line("after the run"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
