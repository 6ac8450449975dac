"""The computer a figure comes from: every timing and saved result names it.

``machine_info()`` as JSON-able values (written into the lesson experiments'
result files), ``machine_summary()`` as one line (printed by the benchmarks and
lessons next to what they measure). Nothing here changes what the package computes.
"""

from __future__ import annotations

import os
import platform

import numpy


def machine_info() -> dict:
    """The computer a timing or a saved result was measured on, as JSON-able values.

    cpu: the model name from /proc/cpuinfo where there is one (else what ``platform``
    knows); cores: logical CPUs; load_average: the 1-minute load average (None where the
    OS has none), which says whether other jobs shared the machine at the time.
    """
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "numpy": numpy.__version__, "load_average": load}


def machine_summary() -> str:
    """``machine_info()`` in one line, e.g. 'AMD EPYC, 2 logical CPUs, Python 3.11.7, NumPy 2.4.6, load 0.7'."""
    info = machine_info()
    load = "" if info["load_average"] is None else f", load {info['load_average']:.1f}"
    return (f"{info['cpu']}, {info['cores']} logical CPUs, Python {info['python']}, "
            f"NumPy {info['numpy']}{load}")


def blas_threads() -> int | None:
    """The thread count NumPy's BLAS (OpenBLAS here) runs with now; None without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_info  # noqa: PLC0415 - looked up when asked, not at import
    except ImportError:
        return None
    counts = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
    return counts[0] if counts else None
