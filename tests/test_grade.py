"""The grader (python -m minitransformer grade, lessonkit/grade.py) and the verdict channel
it reads (lessonkit/exercises/_verdict.py).

Quick tests: the signed-line reader, the channel armed inside this process (what it records
and what it refuses), the scoring rules, the reports and the command line's errors. Slow tests
(a kernel per notebook): the teacher's edition of three lessons scores full marks; a planted
common mistake in every lesson scores that exercise, and only it, "wrong" with its hint; and
notebooks that print fake verdicts, redefine or patch checkers, write into the verdict file,
loop, ignore the interrupt or kill their kernel get no credit they did not earn.
"""

import csv
import hashlib
import hmac
import json
import pathlib
import subprocess
import sys
import time
import types

import nbformat
import numpy as np
import pytest

from lessonkit import exercises, grade
from lessonkit.exercises import _verdict, catalogue, lessons_0_3

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = ROOT / "lessons"


def _signed(key: bytes, payload: str) -> bytes:
    return f"{hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()} {payload}\n".encode()


# -- the signed verdict file ---------------------------------------------------------------

def test_the_log_keeps_genuine_lines_and_counts_the_rest(tmp_path):
    key, path = b"k" * 32, tmp_path / "log"
    good = "{'seq': 0, 'nonce': 'n1', 'kind': 'verdict', 'exercise': '1.1', 'status': 'wrong'}"
    forged = good.replace("wrong", "correct")
    path.write_bytes(_signed(key, good) + _signed(key, good)[:65] + forged.encode() + b"\n"
                     + _signed(b"x" * 32, forged) + _signed(key, forged.replace("n1", "n2"))
                     + _signed(key, good.replace("'seq': 0", "'seq': 5")) + b"garbage\n")
    log = grade._Log(path, key, "n1")
    log.read(cell=4)
    assert [(r["seq"], r["status"], r["cell"]) for r in log.records] == [(0, "wrong", 4), (5, "wrong", 4)]
    assert log.forged == 4 and log.out_of_order == 1


def test_the_log_reads_what_arrives_cell_by_cell(tmp_path):
    key, path = b"k" * 32, tmp_path / "log"
    line = _signed(key, "{'seq': 0, 'nonce': 'n', 'kind': 'armed'}")
    path.write_bytes(line[:20])
    log = grade._Log(path, key, "n")
    log.read(None)
    assert log.records == []
    with open(path, "ab") as f:
        f.write(line[20:])
    log.read(3)
    assert [r["kind"] for r in log.records] == ["armed"] and log.forged == 0


# -- the channel, armed in this process ------------------------------------------------------

@pytest.fixture
def armed(tmp_path):
    """The verdict channel armed here as the grader arms it in a kernel; disarmed afterwards."""
    key, nonce = b"s" * 32, "abc"
    checkers = dict(_verdict._CHECKERS)                 # a test may register a fake checker: undone below
    (tmp_path / "key").write_bytes(key)
    (tmp_path / "log").write_bytes(b"")
    exercises.arm(str(tmp_path / "key"), str(tmp_path / "log"), nonce)
    log = grade._Log(tmp_path / "log", key, nonce)
    try:
        yield log
    finally:
        _verdict._state.record = _verdict._state.seal = None
        _verdict._CHECKERS.clear()
        _verdict._CHECKERS.update(checkers)


def _causal_mask(T):
    return np.tril(np.ones((T, T), dtype=bool))[None, None]


def test_arming_deletes_the_key_and_records_each_verdict(armed, tmp_path, capsys):
    assert not (tmp_path / "key").exists()
    assert lessons_0_3.check_causal_mask(_causal_mask).correct
    assert lessons_0_3.check_causal_mask(lambda T: None).status == "not attempted"
    with pytest.raises(_verdict.WrongAnswer):
        lessons_0_3.check_causal_mask(lambda T: _causal_mask(T).swapaxes(-1, -2))
    with pytest.raises(ZeroDivisionError):
        lessons_0_3.check_causal_mask(lambda T: 1 / 0)
    armed.read(0)
    verdicts = [(r["exercise"], r["status"]) for r in armed.records if r["kind"] == "verdict"]
    assert verdicts == [("1.2", "correct"), ("1.2", "not attempted"), ("1.2", "wrong"), ("1.2", "error")]
    wrong, error = armed.records[3], armed.records[4]
    assert "hint:" in wrong["message"] and error["message"] == "ZeroDivisionError: division by zero"
    assert all(r["changed"] == "" and r["hooks"] == "" for r in armed.records[1:])


def test_the_recorder_refuses_anything_but_a_genuine_checker(armed):
    _verdict._state.record("1.1", "correct", "")                       # called directly

    @_verdict.exercise("1.1")                                            # a checker made after arming
    def fake(fn):
        return True
    fake(None)

    wrapper = lessons_0_3.check_causal_mask                               # a genuine body under another number
    cells = [types.CellType(c.cell_contents) for c in wrapper.__closure__]
    cells[wrapper.__code__.co_freevars.index("number")] = types.CellType("1.3")
    types.FunctionType(wrapper.__code__, wrapper.__globals__, "x", None, tuple(cells))(_causal_mask)
    armed.read(0)
    kinds = [r["kind"] for r in armed.records]
    assert kinds == ["armed", "refused", "refused", "refused"], kinds


def test_a_verdict_given_while_the_checkers_are_patched_is_not_intact(armed, monkeypatch):
    monkeypatch.setattr(lessons_0_3, "check_array", lambda *a, **k: (0.0, None))
    assert lessons_0_3.check_softmax_backward(lambda dA, A: dA).correct     # the patch fools the checker ...
    monkeypatch.undo()
    monkeypatch.setattr(np, "max", lambda *a, **k: 0.0)
    lessons_0_3.check_causal_mask(_causal_mask)
    monkeypatch.undo()
    armed.read(0)
    first, second = (r for r in armed.records if r["kind"] == "verdict")
    assert first["changed"] == "lessonkit.exercises.lessons_0_3.check_array"   # ... but it is seen
    assert second["changed"] == "numpy.max"
    scored = grade._score(1, [first, second], set(), None, "")
    assert [(e.exercise, e.status, e.points) for e in scored] == [
        ("1.1", "tampered", 0), ("1.2", "tampered", 0), ("1.3", "not run", 0)]


def test_the_seal_names_a_rebound_checker(armed, monkeypatch):
    shell = types.SimpleNamespace(user_ns={"check_causal_mask": lambda f: True,
                                           "check_softmax_backward": lessons_0_3.check_softmax_backward})
    _verdict._state.seal = None
    _verdict._state.record = None
    monkeypatch.setattr("IPython.get_ipython", lambda: shell)
    key_dir = pathlib.Path(armed.path).parent
    (key_dir / "key2").write_bytes(b"t" * 32)
    _verdict.arm(str(key_dir / "key2"), str(armed.path), "def")
    _verdict.seal()
    log = grade._Log(armed.path, b"t" * 32, "def")
    log.read(None)
    seal = [r for r in log.records if r["kind"] == "seal"]
    assert seal and seal[0]["rebound"] == "check_causal_mask" and seal[0]["changed"] == ""


def test_a_verdict_displays_as_nothing():
    verdict = _verdict.Verdict("1.1", "correct")
    assert verdict and verdict._ipython_display_() is None and repr(verdict) == "Verdict('1.1', 'correct')"
    assert not _verdict.Verdict("1.1", "not attempted")


# -- scoring, reports and the command line ------------------------------------------------------

def _v(exercise, status, cell, message="", changed=""):
    return {"kind": "verdict", "exercise": exercise, "status": status, "cell": cell, "message": message,
            "changed": changed, "hooks": ""}


def test_scoring_rules():
    verdicts = [_v("1.1", "not attempted", 3), _v("1.1", "correct", 30),                  # the teacher's edition
                _v("1.2", "wrong", 5, "mask: wrong\n  hint: transposed"), _v("1.2", "not attempted", 7),
                _v("1.3", "interrupted", 9)]
    results = grade._score(1, verdicts, {9}, {"1.1": 3}, "never called")
    assert [(e.exercise, e.status, e.points, e.max_points, e.cell) for e in results] == [
        ("1.1", "correct", 3, 3, 30), ("1.2", "wrong", 0, 1, 5), ("1.3", "timeout", 0, 1, 9)]
    assert results[1].detail == "hint: transposed" and "ran over" in results[2].detail
    results = grade._score(1, [_v("1.3", "interrupted", 9)], set(), None, "never called")
    assert [e.status for e in results] == ["not run", "not run", "error"] and results[0].detail == "never called"
    assert [e.exercise for e in grade._score(None, [_v("2.3", "wrong", 1)], set(), None, "")] == ["2.3"]


def test_reports_table_csv_and_json(tmp_path):
    report = grade.NotebookReport("sub/01_x.ipynb", 1, grade._score(1, [_v("1.2", "wrong", 5, "x\n  hint: h")],
                                                                     set(), None, "no call"), cells=9, cells_run=9)
    report.notes.append("cell 2 raised NameError: name 'q' is not defined")
    text = grade.format_report(report)
    assert text.splitlines()[0].startswith("sub/01_x.ipynb  (lesson 1): 0/3 points  [9 of 9 code cells run")
    assert "  1.2       0/1     wrong          hint: h" in text and "note: cell 2 raised NameError" in text
    grade.write_csv([report], str(tmp_path / "g.csv"))
    rows = list(csv.DictReader(open(tmp_path / "g.csv")))
    assert [(r["exercise"], r["status"], r["points"], r["max_points"]) for r in rows] == [
        ("1.1", "not run", "0", "1"), ("1.2", "wrong", "0", "1"), ("1.3", "not run", "0", "1")]
    grade.write_json([report], str(tmp_path / "g.json"), 600.0)
    data = json.loads((tmp_path / "g.json").read_text())
    assert data["total"] == {"score": 0, "max_points": 3, "notebooks": 1}
    assert data["notebooks"][0]["exercises"][1]["message"] == "x\n  hint: h"


def test_an_unreadable_notebook_gets_a_report(tmp_path):
    broken = tmp_path / "07_broken.ipynb"
    broken.write_text("{ not json")
    report = grade.grade_notebook(broken)
    assert report.lesson == 7 and report.score == 0 and report.max_points == 3
    assert {e.status for e in report.exercises} == {"not run"} and "not a readable notebook" in report.notes[0]


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "minitransformer", "grade", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("args, message", [
    (["nowhere.ipynb"], "error: no such notebook or folder (nowhere.ipynb)"),
    (["tests", "--points", "nowhere.json"], "error: no ipynb"),
    (["lessons", "--timeout", "0"], "error: must be a number of seconds > 0, got 0 (--timeout)"),
    (["lessons", "--lessons", "nowhere"], "error: no such folder (--lessons nowhere)"),
])
def test_command_line_errors(args, message):
    result = _cli(*args)
    if message == "error: no ipynb":
        message = "error: no .ipynb files in the folder (tests)"
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [message], result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("content, message", [
    ("{\"9.9\": 1}", "no exercise '9.9'"),
    ("{\"1.1\": -1}", "exercise 1.1: points must be a whole number >= 0, got -1"),
    ("[1]", "expected a JSON object"),
    ("{", "not valid JSON"),
])
def test_a_bad_points_file_is_refused(tmp_path, content, message):
    (tmp_path / "p.json").write_text(content)
    result = _cli("lessons", "--points", str(tmp_path / "p.json"))
    assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1, result.stderr


# -- slow: notebooks run in kernels ------------------------------------------------------------------

def _notebook(path, *cells, lesson=1):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["minitransformer"] = {"lesson": lesson}
    nbformat.write(nb, path)
    return path


CAUSAL_MASK = "import numpy as np\n\ndef my_causal_mask(T):\n    return np.tril(np.ones((T, T), dtype=bool))[None, None]"
CHECK_MASK = "from lessonkit.exercises.lessons_0_3 import check_causal_mask\ncheck_causal_mask(my_causal_mask)"


@pytest.mark.slow
def test_teacher_edition_scores_full_marks_and_the_command_writes_its_files(tmp_path):
    """Three real lessons through the command line, as docs/teachers.md shows it."""
    notebooks = [str(LESSONS / name) for name in
                 ("01_scaled_dot_product_attention.ipynb", "03_feed_forward.ipynb", "05_embeddings_and_softmax.ipynb")]
    result = _cli(*notebooks, "--csv", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json"))
    assert result.returncode == 0, result.stderr
    print(result.stdout)
    assert "total: 7/7 points over 3 notebooks" in result.stdout
    assert "note:" not in result.stdout
    rows = list(csv.DictReader(open(tmp_path / "g.csv")))
    assert [r["exercise"] for r in rows] == ["1.1", "1.2", "1.3", "3.1", "3.2", "5.1", "5.2"]
    assert {r["status"] for r in rows} == {"correct"}
    assert json.loads((tmp_path / "g.json").read_text())["total"] == {"score": 7, "max_points": 7, "notebooks": 3}


# One common mistake per lesson: (exercise, the learner's cell, what the hint must say).
PLANTED = {
    0: ("0.1", "def my_numerical_gradient(f, x, h=1e-5):\n    grad, f0 = np.zeros_like(x), f()\n"
               "    for i in np.ndindex(x.shape):\n        old = x[i]\n        x[i] = old + h\n"
               "        grad[i] = (f() - f0) / h\n        x[i] = old\n    return grad", r"hint: this is the one-sided"),
    1: ("1.1", "def my_softmax_backward(dA, A):\n    return A * dA", r"hint: only the diagonal"),
    2: ("2.1", "def my_merge_heads_backward(dconcat, h):\n    B, S, d = dconcat.shape\n"
               "    return dconcat.reshape(B, h, S, d // h)", r"hint: .*plain reshape"),
    3: ("3.1", "def my_relu_backward(dh, z):\n    return dh * (z < 0)", r"hint: .*inverted"),
    4: ("4.3", "from minitransformer.layers.layernorm import layernorm_backward, layernorm_forward\n\n"
               "def my_pre_ln_residual_backward(dy, x, W, eps=1e-5):\n    d = x.shape[-1]\n"
               "    n, cache = layernorm_forward(x, np.ones(d), np.zeros(d), eps)\n"
               "    return layernorm_backward(dy @ W.T, cache)[0], n.reshape(-1, d).T @ dy.reshape(-1, d)",
        r"hint: .*skip connection's term is missing"),
    5: ("5.1", "def my_embedding_backward(dout, ids, V):\n    d = dout.shape[-1]\n    dE = np.zeros((V, d))\n"
               "    dE[ids.reshape(-1)] = dout.reshape(-1, d) * np.sqrt(d)\n    return dE",
        r"hint: .*only one of its updates"),
    6: ("6.1", "def my_sinusoidal_pe(max_len, d_model):\n    pos = np.arange(max_len)[:, None]\n"
               "    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)\n    pe = np.zeros((max_len, d_model))\n"
               "    pe[:, 0::2], pe[:, 1::2] = np.cos(pos * omega), np.sin(pos * omega)\n    return pe",
        r"hint: .*sin and cos swapped"),
    7: ("7.2", "def my_encoder_layer_params(d_model, d_ff):\n    return 4 * d_model * d_model + 2 * d_model * d_ff"
               " + 4 * d_model", r"hint: every bias is missing"),
    8: ("8.2", "def my_layers_needed(kind, n, k):\n    if kind == 'conv':\n        return math.ceil((n - 1) / k)\n"
               "    if kind == 'dilated_conv':\n        layers, span = 0, 1\n        while span < n:\n"
               "            span, layers = span * k, layers + 1\n        return layers\n"
               "    return math.ceil((n - 1) / k)", r"hint: .*k−1 positions back"),
    9: ("9.1", "def my_lrate(step, d_model, warmup_steps):\n"
               "    return d_model ** -0.5 * max(step ** -0.5, step * warmup_steps ** -1.5)",
        r"hint: min and max swapped"),
    10: ("10.1", "def my_beam_step(live_logp, next_logp, k):\n    V = next_logp.shape[1]\n"
                 "    best = np.argsort(-next_logp.reshape(-1), kind='stable')[:k]\n"
                 "    return best // V, best % V, next_logp.reshape(-1)[best]",
         r"hint: a candidate's score is its parent's log P plus the new token's"),
    11: ("11.2", "def my_perplexity(logits, targets, pad_id):\n    z = logits - logits.max(axis=-1, keepdims=True)\n"
                 "    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))\n"
                 "    nll = -np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]\n"
                 "    return float(np.exp(nll.mean()))", r"hint: the pad positions are counted"),
    12: ("12.1", "my_answer_1 = 'pe-wrong-frequencies'", r"hint: Right component: the positional encoding"),
    13: ("13.1", "from collections import Counter\n\ndef my_merge_step(vocab):\n    counts = Counter()\n"
                 "    for symbols in vocab:\n        for pair in zip(symbols, symbols[1:]):\n"
                 "            counts[pair] += 1\n    best = max(counts, key=lambda p: (counts[p], p))\n"
                 "    return best, vocab", r"hint: a pair's frequency is the sum of its words' counts"),
    14: ("14.2", "def my_combine(grads, n_tokens):\n    return sum(grads) / len(grads)",
         r"hint: the plain average of the ranks' gradients"),
    15: ("15.1", "def my_linearize(tree):\n    if tree.is_preterminal():\n        return ['XX']\n"
                 "    label = tree.label.split('-')[0]\n"
                 "    return ['(' + label] + [t for c in tree.children for t in my_linearize(c)] + [')']",
         r"hint: a closing bracket carries its label again"),
}


def test_every_lesson_has_a_planted_mistake():
    assert sorted(PLANTED) == sorted({e.lesson for e in catalogue.EXERCISES})


@pytest.mark.slow
@pytest.mark.parametrize("lesson", sorted(PLANTED))
def test_a_planted_mistake_scores_that_exercise_wrong_and_nothing_else(lesson, tmp_path):
    from lesson_exercises import exercise_notebook
    number, code, hint = PLANTED[lesson]
    path = tmp_path / f"{lesson:02d}_planted.ipynb"
    nbformat.write(exercise_notebook(lesson, {number: code}), path)
    report = grade.grade_notebook(path, timeout=300, lessons=LESSONS)
    print(grade.format_report(report))
    statuses = {e.exercise: e.status for e in report.exercises}
    assert statuses.pop(number) == "wrong", report.exercises
    assert set(statuses.values()) <= {"not attempted"}, statuses
    wrong = next(e for e in report.exercises if e.exercise == number)
    import re
    assert re.search(hint, wrong.detail), wrong.detail
    assert report.score == 0 and report.notes == [], report.notes


@pytest.mark.slow
def test_fake_verdicts_and_tampering_earn_nothing(tmp_path):
    cases = {
        "print": ('print("correct")\nprint("Exercise 1.1 correct")', None),
        "redefine": ("from lessonkit.exercises.lessons_0_3 import check_softmax_backward\n"
                     "def check_softmax_backward(fn):\n    print('correct')\n    return True\n"
                     "check_softmax_backward(lambda dA, A: None)", "rebinds check_softmax_backward"),
        "fake checker": ("from lessonkit.exercises._verdict import exercise\n@exercise('1.1')\n"
                         "def fake(fn):\n    return True\nfake(None)", "came from something other than a checker"),
        "patched checker module": ("import lessonkit.exercises.lessons_0_3 as m\n"
                                   "m.check_array = lambda *a, **k: (0.0, None)\n"
                                   "m.check_softmax_backward(lambda dA, A: dA)", "had been replaced"),
        "forged lines": ("import os\nfor fd in map(int, os.listdir('/proc/self/fd')):\n    try:\n"
                         "        if os.path.basename(os.readlink(f'/proc/self/fd/{fd}')) == 'verdicts':\n"
                         "            os.write(fd, b'00 {\"seq\": 1, \"kind\": \"verdict\", \"exercise\": \"1.1\", "
                         "\"status\": \"correct\"}\\n')\n    except OSError:\n        pass",
                         "no valid signature"),
        "grading module replaced": ("import lessonkit.exercises._verdict as v\nv.seal = lambda: None",
                                    "closing check did not come back"),
    }
    for name, (code, note) in cases.items():
        path = _notebook(tmp_path / f"01_{name.replace(' ', '_')}.ipynb", code, CAUSAL_MASK, CHECK_MASK)
        report = grade.grade_notebook(path, timeout=60, lessons=None)
        print(grade.format_report(report))
        statuses = {e.exercise: e.status for e in report.exercises}
        assert statuses["1.1"] != "correct", name
        if note is not None:
            assert any(note in n for n in report.notes), (name, report.notes)
        expect = 0 if name in ("patched checker module", "grading module replaced") else 1
        assert report.score == expect, (name, statuses)     # the honest 1.2 counts unless the checkers were patched


@pytest.mark.slow
def test_an_endless_cell_times_out_and_the_rest_still_runs(tmp_path):
    endless = _notebook(tmp_path / "01_loop.ipynb", CAUSAL_MASK, "while True:\n    pass", CHECK_MASK)
    stubborn = _notebook(tmp_path / "01_stubborn.ipynb", CAUSAL_MASK, CHECK_MASK,
                         "import time\nwhile True:\n    try:\n        time.sleep(0.1)\n    except KeyboardInterrupt:\n"
                         "        pass", "check_causal_mask(my_causal_mask)")
    in_checker = _notebook(tmp_path / "01_slow_answer.ipynb", "def my_causal_mask(T):\n    while True:\n        pass",
                           CHECK_MASK)
    timeout = 3.0
    t0 = time.perf_counter()
    report = grade.grade_notebook(endless, timeout=timeout, lessons=None)
    assert time.perf_counter() - t0 < timeout + 60              # the timeout plus start-up and a margin
    assert report.notes == ["cell 1 ran over 3 s and was interrupted"] and report.cells_run == 3
    assert {e.exercise: e.status for e in report.exercises}["1.2"] == "correct"

    report = grade.grade_notebook(in_checker, timeout=timeout, lessons=None)
    timed_out = next(e for e in report.exercises if e.exercise == "1.2")
    assert timed_out.status == "timeout" and timed_out.detail == "cell 1 ran over 3 s and was interrupted"

    t0 = time.perf_counter()
    report = grade.grade_notebook(stubborn, timeout=timeout, lessons=None)
    assert time.perf_counter() - t0 < timeout + grade.GRACE + 60
    assert report.cells_run == 3 and report.score == 1
    assert any("ignored the interrupt" in n for n in report.notes)


@pytest.mark.slow
def test_a_kernel_that_dies_still_gets_a_report(tmp_path):
    path = _notebook(tmp_path / "01_exit.ipynb", CAUSAL_MASK, CHECK_MASK, "import os\nos._exit(3)",
                     "from lessonkit.exercises.lessons_0_3 import check_softmax_backward\n"
                     "check_softmax_backward(lambda dA, A: None)")
    report = grade.grade_notebook(path, timeout=60, lessons=None)
    statuses = {e.exercise: (e.status, e.detail) for e in report.exercises}
    assert statuses["1.2"] == ("correct", "")
    assert statuses["1.1"] == ("not run", "the kernel died in cell 2")
    assert report.notes == ["the kernel died in cell 2; the cells after it did not run"]


def test_the_grade_extra_names_what_the_grader_needs():
    import tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {spec.split(">")[0].split("=")[0] for spec in extras["grade"]} == {"nbclient", "nbformat", "ipykernel"}
    assert any(spec.startswith("minitransformer[") and "grade" in spec for spec in extras["dev"])
    assert 'pip install -e ".[grade]"' in (ROOT / "docs" / "teachers.md").read_text()
