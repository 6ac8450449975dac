"""Issue 35's forging routes, each tried by a notebook in one class graded from the command line: the
forger earns nothing for the forged exercise, the sibling whose file it rewrites keeps its grade, and the
notebooks graded after every forger are judged by unmodified checkers.

The routes: set the checkers' tolerance to infinity; replace a checker's inner code object; hand back an
object whose ``__array__`` walks the stack to the checker's reference; replace a module the checkers use
(``gradcheck.backend``) with one whose ``max`` says 0; harvest the expected value from a checker's message
and call again; call whatever recorder a closure of the harness holds; rewrite another student's submitted
notebook; rewrite a checker's source on disk (the installed copy, and the kernel's own). The class runs
from a copy of the packages in a temporary folder, so the last route rewrites that copy, not this checkout.
"""

import csv
import json
import os
import pathlib
import shutil
import subprocess
import sys

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

WRONG_RELU = "import numpy as np\n\ndef my_relu_backward(dh, z):\n    return np.zeros_like(dh)"
CHECK_RELU = "from lessonkit.exercises.lessons_0_3 import check_relu_backward\ncheck_relu_backward(my_relu_backward)"
RIGHT_RELU = "def my_relu_backward(dh, z):\n    return dh * (z > 0)"
INVERTED_RELU = "def my_relu_backward(dh, z):\n    return dh * (z < 0)"

FORGERS = {
    "tolerance": ("3.1", ["import lessonkit.exercises._common as c\nc.TOL = float('inf')", WRONG_RELU, CHECK_RELU]),
    "code object": ("3.1", ["from lessonkit.exercises.lessons_0_3 import check_relu_backward\n"
                            "check_relu_backward.__wrapped__.__code__ = (lambda fn: True).__code__",
                            WRONG_RELU, CHECK_RELU]),
    "stack walk": ("3.1", ["import sys\nimport numpy as np\n\nclass Forged:\n"
                           "    def __array__(self, dtype=None, copy=None):\n        frame = sys._getframe()\n"
                           "        while frame is not None:\n            ref = frame.f_locals.get('reference')\n"
                           "            if isinstance(ref, np.ndarray):\n                return ref\n"
                           "            frame = frame.f_back\n        return np.zeros(1)\n\n"
                           "def my_relu_backward(dh, z):\n    return Forged()", CHECK_RELU]),
    "module reference": ("3.1", ["import types\nimport numpy as np\nimport minitransformer.gradcheck as g\n"
                                 "fake = types.SimpleNamespace(max=lambda *a, **k: 0.0, abs=np.abs)\n"
                                 "g.backend = types.SimpleNamespace(get_array_module=lambda *a: fake)",
                                 WRONG_RELU, CHECK_RELU]),
    "harvested expected value": ("2.2", [
        "import re\nfrom lessonkit.exercises.lessons_0_3 import check_attention_flops\nseen = {}\n\n"
        "def my_attention_flops(B, S_q, S_k, d_model, h):\n    return seen.get((B, S_q, S_k, d_model, h), 1)\n\n"
        "for _ in range(10):\n    try:\n        check_attention_flops(my_attention_flops)\n        break\n"
        "    except AssertionError as exc:\n"
        "        m = re.search(r'B=(\\d+), S_q=(\\d+), S_k=(\\d+), d_model=(\\d+), h=(\\d+): expected ([\\d,]+)', str(exc))\n"
        "        seen[tuple(int(g) for g in m.groups()[:5])] = int(m.group(6).replace(',', ''))"]),
    "recorder in a closure": ("3.1", [
        WRONG_RELU,
        "import gc, sys, types\ncalled = 0\n"
        "for name, module in list(sys.modules.items()):\n"
        "    if not name.startswith('lessonkit'):\n        continue\n"
        "    for value in list(vars(module).values()):\n"
        "        for cell in getattr(value, '__closure__', None) or ():\n"
        "            try:\n                inner = cell.cell_contents\n            except ValueError:\n"
        "                continue\n"
        "            if callable(inner) and getattr(inner, '__name__', '') in ('record', 'emit', 'sign', 'register'):\n"
        "                for args in (('3.1', 'correct', ''), ('3.1', 'correct')):\n"
        "                    try:\n                        inner(*args)\n                        called += 1\n"
        "                    except Exception:\n                        pass\n"
        "import lessonkit.kernel as k\nk.register('3.1', 'correct')\n"
        "k._state.session.candidates.append(('3.1', lambda dh, z: 'correct'))", CHECK_RELU]),
    "sibling's submission": ("3.1", [
        "import os, pathlib\nargs = open(f'/proc/{os.getppid()}/cmdline', 'rb').read().split(b'\\0')\n"
        "for arg in args:\n    folder = pathlib.Path(arg.decode())\n    if folder.is_dir():\n"
        "        for nb in folder.glob('*sibling*.ipynb'):\n"
        "            nb.write_text(nb.read_text().replace('(z > 0)', '(z < 0)'))",
        WRONG_RELU, CHECK_RELU]),
    "checker on disk": ("3.1", [
        "import os, pathlib, stat\npoisoned = []\n"
        "roots = [pathlib.Path(p) for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]\n"
        "for root in roots:\n    common = root / 'lessonkit' / 'exercises' / '_common.py'\n"
        "    if common.is_file():\n        common.parent.chmod(0o755)\n        common.chmod(0o644)\n"
        "        common.write_text(common.read_text().replace('TOL = DEFAULT_TOL', 'TOL = float(\"inf\")'))\n"
        "        poisoned.append(str(common))\nassert len(poisoned) >= 2, poisoned   # its own copy and the installed one",
        WRONG_RELU, CHECK_RELU]),
}


def _nb(path, cells, lesson):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["minitransformer"] = {"lesson": lesson}
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One class, graded one notebook at a time in file-name order: every forger (a_...), the sibling whose
    file one forger rewrites (b_...), then honest notebooks graded after all of them (z_...)."""
    tmp = tmp_path_factory.mktemp("forgery")
    install = tmp / "install"
    for package in ("minitransformer", "lessonkit"):
        shutil.copytree(ROOT / package, install / package, ignore=shutil.ignore_patterns("__pycache__"))
    hand_ins = tmp / "hand-ins"
    hand_ins.mkdir()
    for i, (route, (number, cells)) in enumerate(FORGERS.items()):
        _nb(hand_ins / f"a{i}_{route.replace(' ', '_').replace(chr(39), '')}.ipynb", cells, int(number.split(".")[0]))
    _nb(hand_ins / "b_sibling.ipynb", [RIGHT_RELU, CHECK_RELU], 3)
    _nb(hand_ins / "z1_right.ipynb", [RIGHT_RELU, CHECK_RELU], 3)
    _nb(hand_ins / "z2_wrong.ipynb", [INVERTED_RELU, CHECK_RELU], 3)
    _nb(hand_ins / "z3_flops.ipynb", ["from lessonkit.exercises.lessons_0_3 import check_attention_flops\n"
                                      "def my_attention_flops(B, S_q, S_k, d_model, h):\n"
                                      "    return (4 * B * d_model * d_model * (S_q + S_k) + 4 * B * S_q * S_k * d_model) // 2\n"
                                      "check_attention_flops(my_attention_flops)"], 2)
    env = dict(os.environ, PYTHONPATH=str(install))
    result = subprocess.run([sys.executable, "-m", "minitransformer", "grade", str(hand_ins), "--csv",
                             str(tmp / "g.csv"), "--json", str(tmp / "g.json"), "--timeout", "120",
                             "--lessons", str(ROOT / "lessons")],
                            cwd=tmp, env=env, capture_output=True, text=True, timeout=1800)
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stderr
    rows = {(pathlib.Path(r["notebook"]).stem, r["exercise"]): r for r in csv.DictReader(open(tmp / "g.csv"))}
    reports = {pathlib.Path(n["notebook"]).stem: n for n in json.loads((tmp / "g.json").read_text())["notebooks"]}
    return {"rows": rows, "reports": reports, "stdout": result.stdout, "stderr": result.stderr, "install": install}


@pytest.mark.slow
@pytest.mark.parametrize("route", list(FORGERS))
def test_the_forger_earns_nothing(graded, route):
    number = FORGERS[route][0]
    stem = next(s for s, n in graded["rows"] if s.endswith(route.replace(" ", "_").replace("'", "")) and n == number)
    row = graded["rows"][(stem, number)]
    assert row["points"] == "0" and row["status"] in ("wrong", "error", "tampered"), (route, row)


@pytest.mark.slow
def test_the_sibling_keeps_its_grade_though_its_file_was_rewritten(graded):
    row = graded["rows"][("b_sibling", "3.1")]
    assert row["status"] == "correct" and row["points"] == "1", row
    assert any("this notebook's file changed on disk" in n for n in graded["reports"]["b_sibling"]["notes"])
    assert "b_sibling.ipynb" in graded["stderr"].split("changed on disk while grading")[1].split("\n")[0]


@pytest.mark.slow
def test_later_notebooks_are_judged_by_unmodified_checkers(graded):
    rows = graded["rows"]
    assert rows[("z1_right", "3.1")]["status"] == "correct"
    assert rows[("z2_wrong", "3.1")]["status"] == "wrong" and "inverted" in rows[("z2_wrong", "3.1")]["detail"]
    assert rows[("z3_flops", "2.2")]["status"] == "wrong" and "multiply-add" in rows[("z3_flops", "2.2")]["detail"]
    common = graded["install"] / "lessonkit" / "exercises" / "_common.py"
    assert 'TOL = float("inf")' in common.read_text()              # the installed copy was rewritten ...
    assert "lessonkit/exercises/_common.py" in graded["stderr"]     # ... and the teacher is told


@pytest.mark.slow
def test_the_forgeries_fooled_the_checking_cells_in_the_kernel(graded):
    """They are real routes: in the notebook the checking cell said correct (no WrongAnswer), yet the grade is 0."""
    for route in ("tolerance", "code object", "stack walk", "harvested expected value"):
        stem = next(s for s in graded["reports"] if s.endswith(route.replace(" ", "_")))
        report = graded["reports"][stem]
        assert report["cells_run"] == report["cells"] and report["raised"] == [], (route, report["raised"])
