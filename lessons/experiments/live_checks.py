"""Every lesson's live checks, run here as the lessons run them: the same functions, the same records.

    python lessons/experiments/live_checks.py                      # every lesson, on this processor
    OPENBLAS_CORETYPE=Sandybridge python lessons/experiments/live_checks.py --only 9w 11
    python lessons/experiments/live_checks.py --machine Nehalem    # play one of _record.MACHINES

A lesson that re-runs training compares its run with a record (lessons/experiments/README.md, "Live
checks"). This script repeats those runs and checks outside the notebooks, with one BLAS thread (as
the lessons' cells do), and prints one JSON line: the OpenBLAS kernel and the NumPy SIMD levels it ran
on, and for every check its value, the record's value, the tolerance and whether it passed. Exit status
1 when a check failed. tests/test_live_checks_on_other_cpus.py runs it once per machine of
``_record.MACHINES``, each in a fresh process (``--machine`` sets the environment and re-runs itself:
a kernel is chosen when the BLAS library loads).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _record


def _load(name: str) -> dict:
    return json.loads((HERE / name).read_text(encoding="utf-8"))


def lesson08_race() -> tuple[list, dict]:
    import lesson08_rnn_vs_transformer as script
    from minitransformer import backend
    record = _load("lesson08_rnn_vs_transformer.json")
    values = script.live_values(record)
    backend.set_default_dtype("float64")                 # train_one set float32; lesson 8 sets it back too
    return record["live_check"], values


def lesson09_warmup() -> tuple[list, dict]:
    import lesson09_warmup as script
    return _load("lesson09_warmup.json")["live_check"], script.live_values(script.live_losses())


def lesson09_label_smoothing() -> tuple[list, dict]:
    import lesson09_label_smoothing as script
    record = _load("lesson09_label_smoothing.json")
    n_test = next(e["test_pairs"] for e in record["entries"] if e["task"] == script.LIVE["task"])
    return record["live_check"], script.live_values({eps: script.live_point(eps, n_test) for eps in script.EPS})


def lesson11_row_e() -> tuple[list, dict]:
    import table3
    from minitransformer import backend
    backend.set_default_dtype("float32")
    return _load("table3.json")["live_check"], table3.live_values(table3.live_runs())


def lesson13_bpe() -> tuple[list, dict]:
    import lesson13_bpe as script
    return _load("lesson13_bpe.json")["live_check"], script.live_values(script.live_run()[1])


def lesson15_parse() -> tuple[list, dict]:
    import parse_table4
    from minitransformer import threads
    threads.set_policy(False)
    return _load("parse_table4.json")["live_check"], parse_table4.live_values(parse_table4.live_scores())


# name -> (the lesson and its cell, the function that runs it and returns (checks, live values))
LESSONS = {
    "8": ("lesson 8, the first steps of the Transformer and the LSTM", lesson08_race),
    "9w": ("lesson 9, with and without warm-up", lesson09_warmup),
    "9ls": ("lesson 9, label smoothing on and off", lesson09_label_smoothing),
    "11": ("lesson 11, row E's two models", lesson11_row_e),
    "13": ("lesson 13, the first 100 steps of bpe 200", lesson13_bpe),
    "15": ("lesson 15, the small parser", lesson15_parse),
}


def run(names) -> dict:
    """Every named lesson's live checks: {"kernel", "numpy_simd", "lessons": [{name, what, seconds, checks}]}."""
    _record.limit_blas_threads(1)
    out = {"kernel": _record.kernel(), "numpy_simd": _record.numpy_simd(), "lessons": []}
    for name in names:
        what, function = LESSONS[name]
        t0 = time.process_time()
        checks, values = function()
        out["lessons"].append({"name": name, "what": what, "cpu_seconds": round(time.process_time() - t0, 1),
                               "checks": _record.results(checks, values)})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", choices=list(LESSONS), default=list(LESSONS), help="these lessons only")
    p.add_argument("--machine", choices=list(_record.MACHINES),
                   help="play this processor: re-run this script in a fresh process with its environment")
    args = p.parse_args(argv)
    if args.machine:
        env = {**os.environ, **_record.machine_env(args.machine),
               "PYTHONPATH": os.pathsep.join([str(_record.ROOT), os.environ.get("PYTHONPATH", "")])}
        return subprocess.run([sys.executable, __file__, "--only", *args.only], env=env, check=False).returncode
    out = run(args.only)
    print(json.dumps(out))
    return 0 if all(c["ok"] for lesson in out["lessons"] for c in lesson["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
