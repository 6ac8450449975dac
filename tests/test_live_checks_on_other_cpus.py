"""The lessons' live checks pass on other processors, played by this one.

A lesson that re-runs training compares its run with a record (lessons/experiments/README.md, "Live
checks"). Another processor runs another OpenBLAS kernel and other NumPy SIMD code, and its float32
training takes another path after a few hundred steps, so a live check must assert what holds on every
processor. Here every lesson's live checks (the same functions the lessons call, not the whole
notebooks: lessons/experiments/live_checks.py) run once per machine of ``_record.MACHINES``, each in a
fresh process whose environment makes OpenBLAS load that machine's kernel and NumPy leave out the SIMD
levels that machine lacks, and every check must pass. Two processes at a time (one BLAS thread each).
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "lessons" / "experiments"
_spec = importlib.util.spec_from_file_location("_record", EXPERIMENTS / "_record.py")
_record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_record)

LESSONS = ("8", "9w", "9ls", "11", "13", "15")          # live_checks.LESSONS: every lesson that re-runs a record's row


def _env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")}
    return {**env, **extra, "PYTHONPATH": str(ROOT)}


def _play(machine: str) -> subprocess.CompletedProcess | None:
    if not _record.can_play(machine):
        return None
    return subprocess.run([sys.executable, str(EXPERIMENTS / "live_checks.py")], cwd=ROOT, capture_output=True,
                          text=True, env=_env(_record.machine_env(machine)), timeout=3600, check=False)


@pytest.fixture(scope="module")
def played():
    """machine -> its live_checks.py process, all machines run two at a time."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(_record.MACHINES, pool.map(_play, _record.MACHINES), strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("machine", list(_record.MACHINES))
def test_every_lessons_live_checks_pass_on(machine, played):
    if played[machine] is None:
        pytest.skip(f"this processor cannot play {machine} (it lacks {_record.MACHINES[machine]['needs']})")
    done = played[machine]
    assert done.returncode in (0, 1) and done.stdout.strip(), f"live_checks.py crashed:\n{done.stderr[-3000:]}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # The machine was really played: its kernel loaded, and NumPy without the SIMD levels it lacks.
    assert out["kernel"] == _record.MACHINES[machine]["kernel"], out["kernel"]
    assert not set(_record.MACHINES[machine]["numpy_off"].split()) & set(out["numpy_simd"]), out["numpy_simd"]
    assert [lesson["name"] for lesson in out["lessons"]] == list(LESSONS)
    assert all(lesson["checks"] for lesson in out["lessons"]), "a lesson's record has no live checks"
    failed = [f"{lesson['what']}: {c['metric']} = {c['value']:.6g}, the record {c['recorded']} ± {c['tolerance']}"
              f"{' (relative)' if c['kind'] == 'rel' else ''}"
              for lesson in out["lessons"] for c in lesson["checks"] if not c["ok"]]
    assert not failed, f"on {machine}:\n" + "\n".join(failed)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.skipif(not all(map(_record.can_play, _record.MACHINES)), reason="needs an x86-64 processor with AVX-512")
def test_each_machine_loads_its_kernel_and_zen_is_haswell():
    """Each machine's environment really switches the kernel (threadpoolctl) and NumPy's SIMD levels. Zen has
    no machine of its own: NumPy's OpenBLAS runs its Haswell kernel for it (if a NumPy build adds a Zen kernel,
    this fails: add Zen to _record.MACHINES)."""
    seen = {name: _record.probe(_record.machine_env(name)) for name in _record.MACHINES}
    for name, probe in seen.items():
        assert probe["kernel"] == _record.MACHINES[name]["kernel"], (name, probe)
        assert not set(_record.MACHINES[name]["numpy_off"].split()) & set(probe["numpy_simd"]), (name, probe)
    assert len({p["kernel"] for p in seen.values()}) == len(seen), seen
    assert _record.probe({"OPENBLAS_CORETYPE": "Zen"})["kernel"] == "Haswell"
