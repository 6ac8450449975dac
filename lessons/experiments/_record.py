"""Where an offline record came from, and how closely a live re-run must agree with it.

Every script in lessons/experiments/ writes its JSON through this module, so every record
carries the same provenance: the commit it was made with (and whether the package or the
scripts had uncommitted changes), the command, the start and end dates, the machine
(``minitransformer.machine.machine_info``), the BLAS library, kernel and thread count in use
(threadpoolctl), the load average at the start and at the end, and the wall time. ::

    import _record                                   # the scripts' own folder is on sys.path

    prov = _record.start()                           # one BLAS thread from here on; commit, command, date, load
    ...                                              # the experiment
    record = {"provenance": [_record.finish(prov)], ..., "live_check": [_record.live_check(...)]}
    _record.write(path, record)

A lesson that re-runs a row compares it with ``_record.assert_checks(checks, values)`` (or one check
with ``assert_live``). A script's live check re-runs that row in fresh processes under ``variants()``:
the record's own conditions once (which must reproduce it bit for bit), then every processor of
``MACHINES`` (OpenBLAS kernel and NumPy SIMD code of Haswell, SkylakeX, Sandybridge and Nehalem, all
played by this one machine), each with several seeds where the quantity is stochastic; ``measured_check``
turns their spread into a tolerance by ``RULE`` and refuses a check that could not fail.

Why one BLAS thread: the records are made on a shared 2-core machine (load 9 from other
users is usual). One thread is the thread count that cannot be starved by contention, and
it fixes the order in which BLAS adds up a product, so the same code on the same machine
gives the same numbers bit for bit. The wall times in a record depend on the load and are
kept only to say what a run cost; nothing may be asserted on them.

``provenance`` is a list: a resumable script (table3.py) adds one entry per command that
wrote into the file, naming the sections it wrote (``wrote``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import subprocess
import sys
import time

from minitransformer.files import atomic_write_text
from minitransformer.machine import machine_info

ROOT = pathlib.Path(__file__).resolve().parents[2]        # the checkout
# What a record's numbers depend on: uncommitted changes here make the record "dirty".
WATCHED = ("minitransformer", "lessons/experiments/*.py", "pyproject.toml")
BLAS_THREADS_WHY = ("fixed at 1 (threadpoolctl): deterministic on a given machine and BLAS kernel, "
                    "and immune to the contention of a shared 2-core machine")
# The fields every provenance entry carries (tests/test_experiment_records.py checks them).
FIELDS = ("commit", "dirty", "command", "started", "finished", "wall_seconds", "machine", "blas",
          "blas_threads", "load_average")
CHECK_FIELDS = ("row", "metric", "recorded", "tolerance", "kind", "observed_spread")
KINDS = ("abs", "rel", "exact")

# How a tolerance follows from the re-runs (lessons/experiments/README.md gives the reasons).
RULE = ("twice the largest deviation from the recorded value over the re-runs (every machine of MACHINES, and "
        "every seed where the quantity is stochastic), rounded up to {step:g}, at least {floor:g}; a check whose "
        "band recorded ± tolerance holds its null value (what the metric would be if the claim were false) is "
        "refused")

# The processors a live check must pass on, all played by one machine. Another processor runs another
# OpenBLAS kernel (its own order of the additions inside a product, with or without fused multiply-add)
# and NumPy's SIMD code for its instruction set (exp, log, reductions): after a few hundred float32
# training steps the run is on another path. OpenBLAS takes its kernel from OPENBLAS_CORETYPE; NumPy
# leaves out the SIMD levels NPY_DISABLE_CPU_FEATURES names (its baseline, X86_V2, stays). Zen is not
# a machine of its own: NumPy's OpenBLAS build has no Zen kernel and runs its Haswell kernel for
# OPENBLAS_CORETYPE=Zen (tests/test_live_checks_on_other_cpus.py checks that this still holds).
_NO_AVX2 = "X86_V3 X86_V4 AVX512_ICL AVX512_SPR"
MACHINES = {                # needs: the instructions (NumPy's names) the machine playing it must have
    "Haswell": {"kernel": "Haswell", "numpy_off": "X86_V4 AVX512_ICL AVX512_SPR", "needs": "X86_V3",
                "plays": "AVX2 + FMA: Intel Core 2013-2020, AMD Zen 1-3"},
    "SkylakeX": {"kernel": "SkylakeX", "numpy_off": "AVX512_ICL AVX512_SPR", "needs": "AVX512_SKX",
                 "plays": "AVX-512: Intel Xeon since 2017, AMD Zen 4-5"},
    "Sandybridge": {"kernel": "Sandybridge", "numpy_off": _NO_AVX2, "needs": "AVX",
                    "plays": "AVX without FMA: Intel 2011-2012"},
    "Nehalem": {"kernel": "Nehalem", "numpy_off": _NO_AVX2, "needs": "SSE42",
                "plays": "SSE4.2 only: older CPUs, some virtual machines"},
}


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.rstrip("\n") if done.returncode == 0 else None    # keep porcelain's leading spaces


def commit() -> dict:
    """{"commit": HEAD's hash or None outside a git checkout, "dirty": bool, "dirty_paths": [...]}.

    dirty: a tracked file under WATCHED differs from HEAD, or an untracked one sits there."""
    head = (_git("rev-parse", "HEAD") or "").strip() or None
    status = _git("status", "--porcelain", "--", *WATCHED)
    paths = [line[3:] for line in (status or "").splitlines() if line.strip()]
    return {"commit": head, "dirty": bool(paths) if status is not None else None, "dirty_paths": paths}


def limit_blas_threads(n: int = 1) -> None:
    """Every BLAS (and OpenMP) pool of this process at ``n`` threads from now on."""
    from threadpoolctl import threadpool_limits
    threadpool_limits(n)


def blas() -> list[dict]:
    """The BLAS libraries loaded in this process: library, version, kernel (architecture), threads."""
    from threadpoolctl import threadpool_info
    return [{"library": i.get("internal_api"), "version": i.get("version"), "architecture": i.get("architecture"),
             "threads": i.get("num_threads")} for i in threadpool_info() if i.get("user_api") == "blas"]


def _load() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def command(argv: list[str] | None = None) -> str:
    """The command line that ran this script, as typed from the checkout's root."""
    argv = sys.argv if argv is None else argv
    script = pathlib.Path(argv[0]).resolve()
    with contextlib.suppress(ValueError):
        script = script.relative_to(ROOT)
    return " ".join(["python", str(script), *argv[1:]])


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.gmtime()).replace("GMT", "UTC")


def start(threads: int = 1, argv: list[str] | None = None) -> dict:
    """Fix the BLAS thread count for the rest of the process; return the provenance so far.

    Call it at the top of ``main``, before any training: the commit, the command, the start
    date, the machine, the BLAS in use and the load average now."""
    import numpy  # noqa: F401  (loads the BLAS, so that threadpoolctl sees it)

    limit_blas_threads(threads)
    info = blas()
    if not info or any(b["threads"] != threads for b in info):
        raise RuntimeError(f"could not set the BLAS to {threads} thread(s): threadpoolctl sees {info}")
    return {**commit(), "command": command(argv), "started": _now(), "_t0": time.time(),
            "machine": machine_info(), "blas": info, "blas_threads": threads,
            "blas_threads_why": BLAS_THREADS_WHY if threads == 1 else "", "load_average": {"start": _load()}}


def finish(prov: dict, **extra) -> dict:
    """The provenance with the end date, the wall time and the load average at the end added
    (``extra``: more fields, e.g. ``wrote="pilot"``)."""
    prov = dict(prov)
    t0 = prov.pop("_t0")
    prov["finished"] = _now()
    prov["wall_seconds"] = round(time.time() - t0, 1)
    prov["load_average"] = {**prov["load_average"], "end": _load()}
    return prov | extra


def snapshot(prov: dict, **extra) -> dict:
    """The provenance of a command still running (saved by a resumable script before its first
    result): ``finished`` and ``wall_seconds`` None until ``finish`` replaces it."""
    prov = {k: v for k, v in prov.items() if k != "_t0"}
    return prov | {"finished": None, "wall_seconds": None,
                   "load_average": {**prov["load_average"], "end": None}} | extra


def live_check(row: str, metric: str, recorded, tolerance: float, kind: str, observed_spread, how: str,
               **where) -> dict:
    """How closely a live re-run of one row must agree with the record.

    row: which run (in words the lesson can repeat: setting, seed, steps); metric: the number
    compared; recorded: its value in the record; kind: "abs" (|live - recorded| <= tolerance,
    in the metric's units), "rel" (|live - recorded| <= tolerance * |recorded|) or "exact"
    (equal; tolerance 0); observed_spread: what the re-runs measured (same units as the
    tolerance); how: which re-runs (twice, 1 vs 2 threads, another BLAS kernel).
    ``where``: the keys that locate the row in the record (e.g. label="base", seed=0)."""
    if kind not in KINDS:
        raise ValueError(f"live_check: kind must be one of {KINDS}, got {kind!r}")
    check = {"row": row, "metric": metric, "recorded": recorded, "tolerance": tolerance, "kind": kind,
             "observed_spread": observed_spread, "how": how, **({"where": where} if where else {})}
    problems = check_problems(check)
    if problems:
        raise ValueError("live_check: " + "; ".join(problems))
    return check


def machine_env(name: str) -> dict:
    """The environment variables that make a fresh process play MACHINES[name]."""
    m = MACHINES[name]
    return {"OPENBLAS_CORETYPE": m["kernel"], "NPY_DISABLE_CPU_FEATURES": m["numpy_off"]}


SIMD_LEVELS = ("X86_V2", "X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR")


def can_play(name: str) -> bool:
    """Whether this processor can play MACHINES[name] (an x86-64 one with the instructions it needs)."""
    import platform

    from numpy._core._multiarray_umath import __cpu_features__
    return platform.machine().lower() in ("x86_64", "amd64") and bool(__cpu_features__.get(MACHINES[name]["needs"]))


def numpy_simd() -> list[str]:
    """The SIMD levels NumPy dispatches to in this process (X86_V3: AVX2, X86_V4: AVX-512, ...)."""
    from numpy._core._multiarray_umath import __cpu_features__
    return [k for k in SIMD_LEVELS if __cpu_features__.get(k)]


def kernel() -> str:
    """The OpenBLAS kernel this process runs (threadpoolctl's "architecture")."""
    return ",".join(sorted({b["architecture"] for b in blas()}))


def variants(seeds=(0,), record_seed: int = 0, record_kernel: str | None = None) -> list[dict]:
    """The re-runs that measure a live check's tolerance, each in a fresh process with one BLAS thread:
    the record's own conditions (``record_kernel``, default this process's kernel, and seed ``record_seed``:
    must reproduce the record bit for bit), then every machine of MACHINES with every seed of ``seeds``
    (a quantity deterministic up to rounding uses the record's seed only)."""
    here = record_kernel or kernel()
    return [{"name": "as the record", "machine": None, "seed": record_seed, "threads": 1,
             "env": {"OPENBLAS_CORETYPE": here}, "kernel": here},
            *({"name": f"{name}, seed {seed}", "machine": name, "seed": seed, "threads": 1, "env": machine_env(name),
               "kernel": MACHINES[name]["kernel"]} for name in MACHINES for seed in seeds)]


def rerun(script: str, args: list[str], variant: dict, timeout: float = 3600):
    """``python script *args --threads N`` in a fresh process with the variant's environment (a BLAS
    kernel is chosen when the library loads, so it takes a new process). Its last line of stdout is JSON
    (``emit``); the run must show the variant's kernel and NumPy SIMD levels, or it measured nothing."""
    env = {**os.environ, **variant["env"], "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, script, *args, "--threads", str(variant["threads"])], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"re-run {variant['name']} of {script} {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    off = set(variant["env"].get("NPY_DISABLE_CPU_FEATURES", "").split())
    for b in out["blas"]:
        if b["threads"] != variant["threads"] or b["architecture"] != variant["kernel"]:
            raise RuntimeError(f"re-run {variant['name']}: the child ran on {out['blas']}")
    if off & set(out["numpy_simd"]):
        raise RuntimeError(f"re-run {variant['name']}: NumPy still dispatched to {sorted(off & set(out['numpy_simd']))}")
    return out["value"]


def emit(value) -> None:
    """What a ``--live-row`` child prints for ``rerun``: its result, the BLAS and the NumPy SIMD levels
    it ran on, as one JSON line."""
    print(json.dumps({"value": value, "blas": blas(), "numpy_simd": numpy_simd()}))


_PROBE = ("import json, numpy, threadpoolctl\n"
          "from numpy._core._multiarray_umath import __cpu_features__ as f\n"
          "print(json.dumps({'kernel': ','.join(sorted({i['architecture'] for i in threadpoolctl.threadpool_info() "
          "if i['user_api'] == 'blas'})), 'numpy_simd': [k for k in %r if f.get(k)]}))")


def probe(env: dict) -> dict:
    """The OpenBLAS kernel and NumPy SIMD levels a fresh process runs with ``env`` added (threadpoolctl
    and NumPy's own dispatch table): {"kernel", "numpy_simd"}."""
    done = subprocess.run([sys.executable, "-c", _PROBE % (SIMD_LEVELS,)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120, check=True)
    return json.loads(done.stdout)


def played() -> dict:
    """What the re-runs played, for the record: each machine's kernel and NumPy SIMD levels, measured."""
    return {name: {**probe(machine_env(name)), "plays": MACHINES[name]["plays"]} for name in MACHINES}


def _round_up(x: float, step: float) -> float:
    return math.ceil(round(x / step, 9)) * step


def measured_check(row: str, metric: str, recorded: float, reruns: dict, kind: str, floor: float, step: float,
                   how: str, null: float | None = None, fails_when: str | None = None, **where) -> dict:
    """A live_check whose tolerance follows from re-runs by RULE: twice the largest deviation of a
    re-run from the record (``kind`` "abs": in the metric's units; "rel": relative), rounded up to a
    multiple of ``step``, at least ``floor``. ``reruns``: variant name -> the metric's value; the re-run
    named "as the record" must equal ``recorded`` (else the record is stale: re-make it).

    null: what the metric would be if the sentence's claim were false (no effect, a model that learned
    nothing); the band recorded ± tolerance must leave it out, or the check could not fail and is refused.
    fails_when: in words, what would make it fail (kept in the record, printed by the lesson)."""
    if "as the record" in reruns and reruns["as the record"] != recorded:
        raise ValueError(f"{row}: {metric}: re-run under the record's own conditions gives "
                         f"{reruns['as the record']!r}, the record {recorded!r}: the record is stale, re-make it")
    dev = [abs(v - recorded) / (abs(recorded) if kind == "rel" else 1) for v in reruns.values()]
    spread = max(dev)
    tolerance = round(max(floor, _round_up(2 * spread, step)), 9)
    check = live_check(row, metric, recorded, tolerance, kind, round(spread, 9),
                       f"{how}; re-runs: {', '.join(f'{k}: {v:.6g}' for k, v in reruns.items())}; tolerance: "
                       + RULE.format(step=step, floor=floor), **where)
    if null is not None:
        check["null"] = null
    if fails_when:
        check["fails_when"] = fails_when
    problems = check_problems(check)
    if problems:
        raise ValueError(f"{row}: {metric}: " + "; ".join(problems))
    return check


def check_problems(check: dict) -> list[str]:
    """What is wrong with a live_check entry (empty: well formed)."""
    missing = [k for k in CHECK_FIELDS if k not in check]
    if missing:
        return [f"missing {', '.join(missing)}"]
    problems = []
    if check["kind"] not in KINDS:
        problems.append(f"kind {check['kind']!r} is not one of {KINDS}")
    tol = check["tolerance"]
    if not isinstance(tol, int | float) or isinstance(tol, bool) or not math.isfinite(tol) or tol < 0:
        problems.append(f"tolerance {tol!r} is not a finite number >= 0")
    elif check["kind"] == "exact" and tol != 0:
        problems.append(f"an exact check has tolerance 0, not {tol}")
    elif check["kind"] == "rel" and tol >= 1:
        problems.append(f"a relative tolerance of {tol} cannot fail for a positive metric")
    values = check["recorded"] if isinstance(check["recorded"], list) else [check["recorded"]]
    if not values or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        problems.append(f"recorded {check['recorded']!r} is not a number or a list of numbers")
    elif not problems and check.get("null") is not None and agrees(check, check["null"]):
        problems.append(f"its band {check['recorded']} ± {check['tolerance']}{' (relative)' * (check['kind'] == 'rel')} "
                        f"holds its null value {check['null']}: it could not fail if the claim were false")
    return problems


def agrees(check: dict, live) -> bool:
    """Whether a live value (a number, or a list as long as ``recorded``) is within the check's tolerance."""
    rec = check["recorded"]
    recs, lives = (rec, live) if isinstance(rec, list) else ([rec], [live])
    if len(recs) != len(lives):
        raise ValueError(f"live value has {len(lives)} entries, the record {len(recs)}")
    tol = check["tolerance"]
    bound = {"abs": lambda r: tol, "rel": lambda r: tol * abs(r), "exact": lambda r: 0}[check["kind"]]
    return all(abs(lv - r) <= bound(r) for lv, r in zip(lives, recs, strict=True))


def _band(check: dict) -> str:
    unit = {"abs": "", "rel": " (relative)", "exact": " (must be equal)"}[check["kind"]]
    recorded = check["recorded"]
    return f"{recorded:.6g} ± {check['tolerance']:g}{unit}" if isinstance(recorded, float) else \
        f"{recorded} ± {check['tolerance']}{unit}"


def assert_live(check: dict, live) -> None:
    """AssertionError naming the row, the metric, both values, the tolerance and what a failure means
    when ``live`` does not agree with the record."""
    if not agrees(check, live):
        raise AssertionError(
            f"live re-run of {check['row']}: {check['metric']} = {live}, the record says {check['recorded']} "
            f"(tolerance {check['tolerance']}{' (relative)' if check['kind'] == 'rel' else ''}; re-runs spread by "
            f"{check['observed_spread']}). " + (f"{check['fails_when']}. " if check.get("fails_when") else "")
            + "If the package's arithmetic changed on purpose, re-run the script that wrote the record.")


def results(checks: list, values: dict) -> list[dict]:
    """Each check against ``values[check["where"]["key"]]``: {"row", "metric", "key", "value", "recorded",
    "tolerance", "kind", "ok"}."""
    out = []
    for check in checks:
        key = check["where"]["key"]
        if key not in values:
            raise KeyError(f"the live run has no value {key!r} for the check of {check['row']}: {check['metric']}")
        out.append({"row": check["row"], "metric": check["metric"], "key": key, "value": values[key],
                    "recorded": check["recorded"], "tolerance": check["tolerance"], "kind": check["kind"],
                    "ok": agrees(check, values[key])})
    return out


def assert_checks(checks: list, values: dict) -> list[str]:
    """``assert_live`` for every check (``values``: the live run's metrics by the checks' keys); returns
    one line per check for the lesson to print: the live value and the band it had to fall in."""
    if not checks:
        raise AssertionError("the record has no live checks: re-run the script that wrote it")
    for check in checks:
        assert_live(check, values[check["where"]["key"]])
    several = len({c["row"] for c in checks}) > 1           # then each line names its row
    return [(f"{c['row']}: " if several else "") + f"{c['metric']}: {values[c['where']['key']]:.6g}, within {_band(c)}"
            for c in checks]


def record_problems(record) -> list[str]:
    """What is missing from a record's provenance or wrong in its live checks (empty: fine)."""
    if not isinstance(record, dict):
        return [f"the record is a {type(record).__name__}, not an object with a 'provenance' list"]
    provs = record.get("provenance")
    if not isinstance(provs, list) or not provs:
        return ["no 'provenance' list"]
    problems = []
    for i, prov in enumerate(provs):
        missing = [k for k in FIELDS if k not in prov]
        if missing:
            problems.append(f"provenance[{i}] lacks {', '.join(missing)}")
            continue
        if not (isinstance(prov["commit"], str) and len(prov["commit"]) == 40):
            problems.append(f"provenance[{i}]: commit {prov['commit']!r} is not a 40-digit hash")
        if not isinstance(prov["dirty"], bool):
            problems.append(f"provenance[{i}]: dirty {prov['dirty']!r} is not true/false")
        if not (isinstance(prov["blas"], list) and prov["blas"]
                and all(b.get("threads") == prov["blas_threads"] for b in prov["blas"])):
            problems.append(f"provenance[{i}]: blas {prov['blas']!r} does not show {prov['blas_threads']} thread(s)")
        if set(prov["load_average"]) != {"start", "end"}:
            problems.append(f"provenance[{i}]: load_average needs start and end, has {sorted(prov['load_average'])}")
        if not prov["command"].startswith("python lessons/experiments/"):
            problems.append(f"provenance[{i}]: command {prov['command']!r} is not a script of lessons/experiments")
    checks = record.get("live_check", [])
    if not isinstance(checks, list):
        problems.append("live_check is not a list")
        checks = []
    for i, check in enumerate(checks):
        problems += [f"live_check[{i}]: {p}" for p in check_problems(check)]
    return problems


def write(path, record: dict) -> None:
    """The record as indented JSON, written atomically (a crash leaves the old file)."""
    atomic_write_text(path, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
