"""BLAS threads: never more than the cores that other processes leave free (issue 25.2).

OpenBLAS starts one worker thread per core, and after each matrix product its
workers keep spinning for a while, waiting for the next one. Alone on a machine
that pays (two threads were 1.6x faster than one on the copy task, 2 cores). Beside
another CPU-bound job it is a disaster: a product waits for a worker that the
scheduler has given to the other job, and the spinning workers burn the CPU time
the main thread needs (issue 25: the copy task 11-15x slower beside one other job).

So, on NumPy, every ``CHECK_SECONDS`` of wall time (looked at once per training step,
the wrapper of ``optim.Adam.step``, so that a lesson's own training loop gets it as
``train.Trainer.train_step`` does, and once per decoded batch, ``decoding``;
never inside a layer's math) the package measures how busy the machine was since its last look
*without its own work* (the busy time of all cores in
/proc/stat, minus this process's own CPU time, spinning workers included), and
gives OpenBLAS as many threads as there are free cores: at least 1, at most the
count OpenBLAS started with. A core counts as free when ``FREE_SHARE`` of it was idle.

Nothing is changed (the policy is off) when

* the user chose a thread count: OPENBLAS_NUM_THREADS, OMP_NUM_THREADS or
  GOTO_NUM_THREADS is set (their choice stands, and a run is repeatable bit for bit);
* threadpoolctl is not installed, or the machine has no /proc/stat (not Linux);
* OpenBLAS runs one thread anyway (a one-core machine);
* ``set_policy(False)`` was called (the test suite does, so that two runs in one
  test get the same thread count);
* someone else changed OpenBLAS's thread count since the policy last set it
  (``threadpoolctl.threadpool_limits`` in a lesson, say): from then on it leaves it alone.

The thread count changes a float32 product in its last bits, so a run whose
thread count changes (because the machine's load did) is not repeatable bit for
bit; set OPENBLAS_NUM_THREADS for that. ``status()`` says what the policy did.
"""

from __future__ import annotations

import math
import os
import time

CHECK_SECONDS = 1.0          # how often the load is looked at (one monotonic() call per step between)
FREE_SHARE = 0.75            # a core is free when at least this share of it was idle since the last look
USER_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GOTO_NUM_THREADS")

_wanted = True               # set_policy()
_next_check = 0.0            # monotonic time of the next look; math.inf once the policy is off
_state: dict | None = None   # once started: the BLAS controllers, the first and the current count, the last sample


def set_policy(on: bool) -> None:
    """Turn the policy on or off. Off restores the thread count OpenBLAS started with."""
    global _wanted, _next_check
    _wanted = bool(on)
    if not on and _state is not None and _state["threads"] != _state["most"]:
        _set_threads(_state["most"])
    _next_check = 0.0 if on else math.inf


def status() -> dict:
    """What the policy does now: {"on", "threads", "most", "changes", "why_off"}."""
    if _state is None:
        return {"on": False, "threads": None, "most": None, "changes": 0,
                "why_off": _why_off() or ("not started yet (no step ran)" if _wanted else "set_policy(False)")}
    return {"on": _wanted, "threads": _state["threads"], "most": _state["most"], "changes": _state["changes"],
            "why_off": None if _wanted else "set_policy(False)"}


def free_cores(before: tuple[float, float, float], after: tuple[float, float, float], cores: int) -> float:
    """Cores other processes left idle between two ``sample()``s (busy, total, own), in 0..cores.

    busy and total are the machine's busy and total time over all cores, own is this
    process's CPU time (all its threads), all in seconds.
    """
    total = after[1] - before[1]
    if total <= 0:
        return float(cores)
    others = (after[0] - before[0]) - (after[2] - before[2])     # busy time that is not ours
    return min(float(cores), max(0.0, cores * (1.0 - others / total)))


def threads_for(free: float, most: int) -> int:
    """The thread count for ``free`` idle cores: the cores at least FREE_SHARE idle, in 1..most."""
    return max(1, min(most, math.floor(free + 1.0 - FREE_SHARE)))


def sample() -> tuple[float, float, float] | None:
    """(busy, total, own) seconds: the machine's from /proc/stat's first line, this process's from os.times()."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)      # idle + iowait
    total = sum(fields[:8])                                       # guest time is already inside user
    t = os.times()
    return (total - idle) / hz, total / hz, t.user + t.system


def check() -> None:
    """Called before every training step and decoded batch: at most every CHECK_SECONDS, fit the thread count."""
    global _next_check
    now = time.monotonic()
    if now < _next_check:
        return
    _next_check = now + CHECK_SECONDS
    if _state is None:
        if not _start():
            _next_check = math.inf
        return
    if max(c.num_threads for c in _state["controllers"]) != _state["threads"]:
        # Someone else set the count since our last change (threadpool_limits in a lesson, the
        # user's own code): their choice stands, and the policy stops looking for this process.
        _next_check = math.inf
        return
    after = sample()
    if after is None:
        _next_check = math.inf
        return
    want = threads_for(free_cores(_state["last"], after, _state["cores"]), _state["most"])
    _state["last"] = after
    if want != _state["threads"]:
        _set_threads(want)


def _why_off() -> str | None:
    chosen = [v for v in USER_VARIABLES if os.environ.get(v, "").strip()]
    if chosen:
        return f"{chosen[0]} is set"
    if not os.path.exists("/proc/stat"):
        return "no /proc/stat on this system"
    return None


def _start() -> bool:
    """Find OpenBLAS through threadpoolctl and take the first sample; False: leave the threads alone."""
    global _state
    if not _wanted or _why_off():
        return False
    try:
        from threadpoolctl import ThreadpoolController  # noqa: PLC0415  (optional: without it, no policy)
    except ImportError:
        return False
    controllers = ThreadpoolController().select(user_api="blas").lib_controllers
    first = sample()
    if not controllers or first is None:
        return False
    most = max(c.num_threads for c in controllers)
    if most <= 1:
        return False
    _state = {"controllers": controllers, "most": most, "threads": most, "last": first,
              "cores": os.cpu_count() or most, "changes": 0}
    return True


def _set_threads(n: int) -> None:
    for c in _state["controllers"]:
        c.set_num_threads(n)
    _state["threads"] = n
    _state["changes"] += 1
