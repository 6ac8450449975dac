"""Is the main job fair on a busy machine? The copy task's training alone, then N copies
started together, under each thread setting ("variant") asked for (issue 25.2).

    python benchmarks/bench_contention.py                          # 300 steps, 2 copies, 3 variants
    python benchmarks/bench_contention.py --variants blas1 fixed --compete 2 --busy 1
    python benchmarks/bench_contention.py --job cli --variants policy fixed   # the whole `train --task copy`

Each run is a child process, so each gets its own OpenBLAS (whose settings are read
from the environment when NumPy loads) and its own CPU accounting:

* wall: from start to exit of the child; cpu: the child's user + sys time (``os.wait4``,
  all its threads, OpenBLAS's spinning workers included); and, from the child itself,
  the wall and CPU time of the training steps alone (after ``--warmup`` untimed steps).
* steps/s and CPU ms per step come from the timed steps; "x alone" divides a figure by
  the same variant's figure alone, measured in the same invocation just before.
  The issue's goal: each of 2 copies together within 2.5x its wall time alone (a fair
  share is 2x), CPU time per step within 1.3x.
* phases: "alone" (one child), "N together" (N identical children started at once),
  and with ``--busy K``: "alone + K busy" (one child beside K pure-Python busy loops
  that this benchmark starts and stops: contention under our control, for A/B
  comparisons of CPU time per step, which background load moves less than wall time).

Variants (the child's environment; the package has no thread pool of its own since issue 18):

  blas1     OPENBLAS_NUM_THREADS=1: one thread, whatever the machine does
  fixed     OPENBLAS_NUM_THREADS=<cores>: a thread per core, fixed (OpenBLAS's own default, and
            the package's before threads.py)
  timeout   fixed + OPENBLAS_THREAD_TIMEOUT=4: OpenBLAS's idle workers sleep after 2^4
            cycles instead of spinning for 2^28 (about 0.1 s at 2.5 GHz) after every call
  policy    nothing set: the package's policy (minitransformer/threads.py), which gives
            OpenBLAS the cores other processes leave free, looked at once a second
  small1    --job steps only: a thread per core, the policy off, but products with m·n·k
            below ``--small`` run on one BLAS thread (set per call through OpenBLAS's own
            openblas_set_num_threads, found by threadpoolctl, in a wrapper of backend.matmul)

The machine, the load average and the share of CPU other processes used just before
each phase are printed with the figures. A benchmark: it prints, it asserts nothing.
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

CORES = str(os.cpu_count() or 1)
VARIANTS = {
    "blas1": {"OPENBLAS_NUM_THREADS": "1"},
    "fixed": {"OPENBLAS_NUM_THREADS": CORES},
    "timeout": {"OPENBLAS_NUM_THREADS": CORES, "OPENBLAS_THREAD_TIMEOUT": "4"},
    "policy": {},
    "small1": {},
}
DEFAULT_VARIANTS = ["blas1", "fixed", "policy"]
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OPENBLAS_THREAD_TIMEOUT", "OMP_NUM_THREADS", "GOTO_NUM_THREADS",
                    "MINITRANSFORMER_THREADS")


# -- the child: one training run, timed from inside --------------------------------------------

def install_small_products_policy(threshold: int) -> None:
    """backend.matmul runs products with m·n·k < threshold on one BLAS thread, others on all."""
    from threadpoolctl import ThreadpoolController

    from minitransformer import backend

    blas = ThreadpoolController().select(user_api="blas").lib_controllers[0]
    most = blas.num_threads
    # OpenBLAS's own setter, looked up once: 0.3 us a call, against 14 us through
    # lib_controller.set_num_threads and about 1 ms through a threadpool_limits block.
    set_threads = blas._get_symbol("openblas_set_num_threads") or blas.set_num_threads
    state = {"n": most}
    plain = backend.matmul

    def matmul(a, b):
        mnk = (a.size // a.shape[-1]) * b.shape[-1] * a.shape[-1] if b.ndim == 2 else \
            a.shape[-2] * a.shape[-1] * b.shape[-1]
        want = 1 if mnk < threshold else most
        if want != state["n"]:
            set_threads(want)
            state["n"] = want
        return plain(a, b)

    backend.matmul = matmul
    for name in list(sys.modules):                          # modules that did `from .backend import matmul`
        module = sys.modules[name]
        if name.startswith("minitransformer") and getattr(module, "matmul", None) is plain:
            module.matmul = matmul


def child(args) -> None:
    """Train the copy task as `train --task copy` sets it up; print one JSON line of timings."""
    t_start = time.perf_counter()
    from minitransformer import threads
    from minitransformer.data.registry import load_task
    from minitransformer.runsetup import make_trainer, settings_for

    if args.variant == "small1":
        threads.set_policy(False)
        install_small_products_policy(args.small)
    task = load_task("copy", seed=args.seed)
    preset, settings = settings_for("copy", seed=args.seed, steps=args.warmup + args.steps, valid_every=10**9)
    trainer = make_trainer(task, settings, preset)
    batches = trainer.batches()
    for _ in range(args.warmup):
        trainer.train_step(next(batches))
    t0, c0 = time.perf_counter(), time.process_time()
    loss = None
    for _ in range(args.steps):
        loss = trainer.train_step(next(batches))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    from threadpoolctl import threadpool_info
    blas = [i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"]
    policy = threads.status()
    print("@@" + json.dumps({"steps": args.steps, "steps_wall": wall, "steps_cpu": cpu, "loss": loss,
                             "blas_threads": blas[0] if blas else None, "policy_changes": policy["changes"],
                             "setup_s": t0 - t_start}), flush=True)


# -- the parent ---------------------------------------------------------------------------------

def child_command(args, variant: str, out_dir: str) -> list[str]:
    if args.job == "cli":
        cmd = [sys.executable, "-m", "minitransformer", "train", "--task", "copy", "--out", out_dir, "--overwrite"]
        return cmd + (["--steps", str(args.steps)] if args.steps else [])
    return [sys.executable, os.path.abspath(__file__), "--child", "--variant", variant, "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--seed", str(args.seed), "--small", str(args.small)]


def child_env(variant: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.update(VARIANTS[variant])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, HERE, env.get("PYTHONPATH", "")) if p)
    return env


def run_phase(args, variant: str, n: int) -> list[dict]:
    """n children of ``variant`` started together; per child: wall, cpu (user+sys), its report."""
    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        for i in range(n):
            out_dir = os.path.join(tmp, f"run{i}")
            log = open(os.path.join(tmp, f"run{i}.out"), "w+", encoding="utf-8")   # closed when reaped
            proc = subprocess.Popen(child_command(args, variant, out_dir), env=child_env(variant), stdout=log,
                                    stderr=subprocess.STDOUT, text=True, cwd=ROOT)
            procs[proc.pid] = (proc, log, time.perf_counter())
        results = []
        while procs:
            pid, status, usage = os.wait4(-1, 0)
            if pid not in procs:
                continue                                     # a busy loop of ours? (never: they are waited for last)
            proc, log, started = procs.pop(pid)
            proc.returncode = os.waitstatus_to_exitcode(status)
            wall = time.perf_counter() - started
            log.seek(0)
            text = log.read()
            log.close()
            report = next((json.loads(line[2:]) for line in text.splitlines() if line.startswith("@@")), None)
            if proc.returncode != 0:
                print(f"# child {pid} failed (exit {proc.returncode}):\n{text[-2000:]}", file=sys.stderr)
            results.append({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rc": proc.returncode,
                            "report": report})
    return results


def start_busy(k: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(k)]


def stop_busy(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()


def summarize(args, variant: str, phase: str, results: list[dict], alone: dict | None) -> dict:
    def mean(key, src="top"):
        values = [r[key] if src == "top" else r["report"][key] for r in results if src == "top" or r["report"]]
        return sum(values) / len(values) if values else float("nan")

    row = {"variant": variant, "phase": phase, "copies": len(results), "wall_s": mean("wall"),
           "wall_max_s": max(r["wall"] for r in results), "cpu_s": mean("cpu")}
    reports = [r["report"] for r in results if r["report"]]
    if reports:
        steps = reports[0]["steps"]
        row |= {"steps_per_s": sum(steps / r["steps_wall"] for r in reports) / len(reports),
                "cpu_ms_per_step": 1000 * sum(r["steps_cpu"] / steps for r in reports) / len(reports),
                "blas_threads": [r["blas_threads"] for r in reports],
                "policy_changes": [r["policy_changes"] for r in reports], "loss": [r["loss"] for r in reports]}
    if alone:
        row["wall_x_alone"] = row["wall_max_s"] / alone["wall_s"]
        if "cpu_ms_per_step" in row and "cpu_ms_per_step" in alone:
            row["cpu_per_step_x_alone"] = row["cpu_ms_per_step"] / alone["cpu_ms_per_step"]
        else:
            row["cpu_x_alone"] = row["cpu_s"] / alone["cpu_s"]
    return row


def print_row(row: dict) -> None:
    def f(key, fmt):
        return format(row[key], fmt) if key in row else "-"
    ratio = f("cpu_per_step_x_alone", ".2f") if "cpu_per_step_x_alone" in row else f("cpu_x_alone", ".2f")
    print(f"{row['variant']:<8} {row['phase']:<15} {f('wall_s', '8.1f')} {f('wall_max_s', '8.1f')} "
          f"{f('cpu_s', '7.1f')} {f('steps_per_s', '8.1f')} {f('cpu_ms_per_step', '8.1f')} "
          f"{f('wall_x_alone', '7.2f')} {ratio:>7} {','.join(map(str, row.get('blas_threads', ['-']))):>7} "
          f"{','.join(map(str, row.get('policy_changes', ['-']))):>7}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=sorted(VARIANTS))
    p.add_argument("--compete", type=int, default=2, help="copies started together (0: skip)")
    p.add_argument("--busy", type=int, default=0, help="also run alone beside this many busy loops")
    p.add_argument("--job", choices=["steps", "cli"], default="steps",
                   help="steps: timed training steps of the copy recipe; cli: the whole `train --task copy`")
    p.add_argument("--steps", type=int, default=300, help="timed steps (--job cli: --steps, 0 = the recipe's)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--small", type=int, default=1 << 22, help="small1: m·n·k below this runs on one BLAS thread")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variant", default="policy", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return 0
    if args.job == "cli" and "small1" in args.variants:
        p.error("--job cli runs the command line as it is: variant small1 needs --job steps")

    from bench_train import blas_line, cpu_busy

    from minitransformer.machine import machine_summary

    print(f"# bench_contention {time.strftime('%Y-%m-%d %H:%M')} | {machine_summary()}")
    print(f"# NumPy's BLAS: {blas_line()}")
    if args.job == "cli":
        print(f"# job: python -m minitransformer train --task copy{f' --steps {args.steps}' if args.steps else ''} "
              "(wall and CPU time of the whole command)")
    else:
        print(f"# job: {args.steps} timed steps after {args.warmup} warm-up (copy recipe, seed {args.seed})")
    print(f"{'variant':<8} {'phase':<15} {'wall s':>8} {'max s':>8} {'cpu s':>7} {'steps/s':>8} {'cpu ms/st':>8} "
          f"{'wall x':>7} {'cpu x':>7} {'blas':>7} {'changes':>7}")
    rows = []
    for variant in args.variants:
        phases = [("alone", 1, 0)]
        if args.compete:
            phases.append((f"{args.compete} together", args.compete, 0))
        if args.busy:
            phases.append((f"alone + {args.busy} busy", 1, args.busy))
        alone = None
        for phase, n, busy in phases:
            others = cpu_busy(0.5)
            load = os.getloadavg()[0]
            busy_procs = start_busy(busy)
            try:
                results = run_phase(args, variant, n)
            finally:
                stop_busy(busy_procs)
            row = summarize(args, variant, phase, results, alone)
            row |= {"load_before": load, "others_cpu_before": others}
            alone = alone or row
            rows.append(row)
            print_row(row)
    for row in rows:
        if row["copies"] > 1 and "wall_x_alone" in row:
            cpu_x = row.get("cpu_per_step_x_alone", row.get("cpu_x_alone"))
            print(f"# goal, {row['variant']} {row['phase']}: wall {row['wall_x_alone']:.2f}x alone (goal <= 2.5: "
                  f"{'met' if row['wall_x_alone'] <= 2.5 else 'not met'}), CPU per step {cpu_x:.2f}x alone "
                  f"(goal <= 1.3: {'met' if cpu_x <= 1.3 else 'not met'})")
    print(f"# load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; 'others' = share of all "
          "cores busy in the 0.5 s before each phase")
    for row in rows:
        print(f"#   {row['variant']} {row['phase']}: load {row['load_before']:.1f}, others "
              f"{100 * (row['others_cpu_before'] or 0):.0f}% before; loss {row.get('loss')}")
    if args.json:
        from minitransformer.files import atomic_write_text
        atomic_write_text(args.json, json.dumps({"command": " ".join(sys.argv), "date": time.strftime(
            "%Y-%m-%d %H:%M"), "machine": machine_summary(), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
