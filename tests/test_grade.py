"""The grader (python -m minitransformer grade, lessonkit/grade/): inputs, isolation, scoring, reports.

Quick tests: the scoring rules, the table, CSV, JSON and feedback files, the command line's errors
(all raised before any notebook runs: a roster's, a notebook whose lesson cannot be told, an output
path), and the private folder a notebook runs in. Slow tests (a kernel per notebook): the teacher's
edition of three lessons scores full marks; a planted common mistake in every lesson scores that
exercise, and only it, "wrong" with its hint; a class graded from a roster with --jobs 2 gets one
feedback file per student; notebooks that loop, ignore the interrupt or kill their kernel still get
a report. The forging routes of issue 35 are tests/test_grade_forgery.py's.
"""

import csv
import json
import os
import pathlib
import re
import stat
import subprocess
import sys
import time

import nbformat
import pytest

from lessonkit import grade
from lessonkit.exercises import catalogue
from lessonkit.grade import inputs, report, sandbox
from lessonkit.judge import Judgement

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = ROOT / "lessons"


# -- scoring and reports --------------------------------------------------------------------------

def _j(exercise, status, fraction=0.0, detail="", message="", hidden=(0, 0)):
    return Judgement(exercise, status, fraction, detail, message, hidden)


def test_scoring_rules():
    judgements = [(3, _j("1.1", "not attempted", detail="the stub still returns None")),   # the teacher's edition
                  (30, _j("1.1", "correct", 1.0, hidden=(4, 4))),
                  (5, _j("1.2", "wrong", detail="hint: transposed", message="mask: wrong\n  hint: transposed")),
                  (7, _j("1.2", "not attempted")),
                  (9, _j("1.3", "partial", 0.75, "3 of 4 hidden cases right; hidden case 2: hint: x", hidden=(3, 4)))]
    results = report.score(1, judgements, {"1.1": 3}, "never called")
    assert [(e.exercise, e.status, e.points, e.max_points, e.cell, e.hidden) for e in results] == [
        ("1.1", "correct", 3, 3, 30, "4/4"), ("1.2", "wrong", 0, 1, 5, ""), ("1.3", "partial", 0.75, 1, 9, "3/4")]
    assert results[1].detail == "hint: transposed"
    results = report.score(1, [(2, _j("1.3", "uses the package", detail="uses the package's own `x`"))], None,
                           "never called")
    assert [e.status for e in results] == ["not run", "not run", "uses the package"]
    assert results[0].detail == "never called"
    assert [e.exercise for e in report.score(None, [(1, _j("2.3", "wrong"))], None, "")] == ["2.3"]


def test_reports_table_csv_json_and_feedback(tmp_path):
    results = report.score(1, [(5, _j("1.2", "wrong", 0.0, "hint: h", "expected 17, got 3\n  hint: h")),
                               (6, _j("1.1", "partial", 0.5, "2 of 4 hidden cases right; hidden case 1: hint: k",
                                      "hidden case 1: wrong: expected 12345\n  hint: k", (2, 4)))], None, "no call")
    rep = report.NotebookReport("sub/01_x.ipynb", 1, "ana", results, cells=9, cells_run=9)
    rep.notes.append("cell 2 raised NameError: name 'q' is not defined")
    rep.raised.append("cell 2: NameError: name 'q' is not defined")
    text = report.format_report(rep)
    assert text.splitlines()[0].startswith("ana: sub/01_x.ipynb  (lesson 1): 0.5/3 points  [9 of 9 code cells run")
    assert "  1.2       0/1      wrong             hint: h" in text and "note: cell 2 raised NameError" in text
    report.write_csv([rep], tmp_path / "g.csv")
    rows = list(csv.DictReader(open(tmp_path / "g.csv")))
    assert [(r["student"], r["exercise"], r["status"], r["points"], r["hidden"]) for r in rows] == [
        ("ana", "1.1", "partial", "0.5", "2/4"), ("ana", "1.2", "wrong", "0", ""), ("ana", "1.3", "not run", "0", "")]
    report.write_json([rep], tmp_path / "g.json", {"seed": 5})
    data = json.loads((tmp_path / "g.json").read_text())
    assert data["seed"] == 5 and data["total"] == {"score": 0.5, "max_points": 3, "notebooks": 1}
    assert data["notebooks"][0]["exercises"][0]["message"].startswith("hidden case 1: wrong: expected 12345")
    feedback = report.feedback_text(rep)
    assert "**0.5 of 3 points**" in feedback and "| 1.1 softmax backward | 0.5/1 | partial | 2/4 |" in feedback
    assert "cell 2: NameError" in feedback and "12345" not in feedback      # the teacher's message stays out


# -- inputs, all checked before anything runs -----------------------------------------------------------

def _notebook(path, *cells, lesson=1, metadata=True):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    if metadata:
        nb.metadata["minitransformer"] = {"lesson": lesson}
    nbformat.write(nb, path)
    return path


def test_the_lesson_of_a_notebook(tmp_path):
    def lesson(name, meta=...):
        nb = nbformat.v4.new_notebook()
        if meta is not ...:
            nb.metadata["minitransformer"] = {"lesson": meta}
        return inputs.lesson_of(nbformat.writes(nb).encode(), pathlib.Path(name))

    assert lesson("03_ana.ipynb") == (3, None) and lesson("ana.ipynb", 3) == (3, None)
    assert lesson("ana.ipynb")[0] is None and "start its file name with the lesson's number" in lesson("ana.ipynb")[1]
    assert lesson("ana.ipynb", "three")[0] is None and '"lesson": "three"' in lesson("ana.ipynb", "three")[1]
    assert "file name says lesson 4" in lesson("04_ana.ipynb", 3)[1]
    assert lesson("ana.ipynb", 99)[0] is None
    assert inputs.lesson_of(b"{ not json", pathlib.Path("07_x.ipynb")) == (7, None)     # graded as unreadable


def test_a_roster(tmp_path):
    (tmp_path / "nb").mkdir()
    _notebook(tmp_path / "nb" / "a.ipynb", "x = 1", lesson=3)
    _notebook(tmp_path / "nb" / "03_b.ipynb", "x = 2", metadata=False)
    (tmp_path / "roster.csv").write_text("student,notebook,email\nana,nb/a.ipynb,a@x\n\nbo,nb/03_b.ipynb,\n")
    subs = inputs.read_roster(str(tmp_path / "roster.csv"))
    assert [(s.student, s.path.name, s.lesson) for s in subs] == [("ana", "a.ipynb", 3), ("bo", "03_b.ipynb", 3)]
    assert subs[0].data == (tmp_path / "nb" / "a.ipynb").read_bytes()


@pytest.mark.parametrize("roster, message", [
    ("name,file\nana,nb/a.ipynb\n", "must name the columns student and notebook"),
    ("student,notebook\nana,nb/missing.ipynb\n", "no such notebook (ROOT/nb/missing.ipynb) (ROSTER line 2)"),
    ("student,notebook\nana,nb/a.ipynb\nana,nb/a.ipynb\n", "two students share the id 'ana'"),
    ("student,notebook\nana,\n", "ROSTER line 2: expected a student id and a notebook"),
    ("student,notebook\n", "the roster lists no student"),
    ("student,notebook\nana,nb/nolesson.ipynb\n", "cannot tell the lesson of ROOT/nb/nolesson.ipynb (ROSTER line 2): "
                                                  "add \"minitransformer\": {\"lesson\": N} to its metadata"),
])
def test_a_bad_roster_is_refused_by_line(tmp_path, roster, message):
    (tmp_path / "nb").mkdir()
    _notebook(tmp_path / "nb" / "a.ipynb", "x = 1", lesson=3)
    _notebook(tmp_path / "nb" / "nolesson.ipynb", "x = 1", metadata=False)
    (tmp_path / "r.csv").write_text(roster)
    with pytest.raises(ValueError) as err:
        inputs.read_roster(str(tmp_path / "r.csv"))
    assert message.replace("ROOT", str(tmp_path)).replace("ROSTER", str(tmp_path / "r.csv")) in str(err.value)


def test_output_paths_are_checked_before_anything_runs(tmp_path):
    sub = inputs.Submission("a", tmp_path / "a.ipynb", b"{}", 1)
    with pytest.raises(ValueError, match=r"no such folder .*nowhere \(--csv .*nowhere/g.csv\)"):
        inputs.check_outputs(str(tmp_path / "nowhere" / "g.csv"), None, None, [sub])
    with pytest.raises(ValueError, match="is a folder; give a file name"):
        inputs.check_outputs(None, str(tmp_path), None, [sub])
    with pytest.raises(ValueError, match="one of the notebooks being graded"):
        inputs.check_outputs(str(tmp_path / "a.ipynb"), None, None, [sub])
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        inputs.check_outputs(None, None, str(tmp_path / "file"), [sub])
    out = inputs.check_outputs(str(tmp_path / "g.csv"), None, str(tmp_path / "fb"), [sub])
    assert (tmp_path / "fb").is_dir() and out.csv == tmp_path / "g.csv"
    assert inputs.feedback_name("Ana María/../x") == "Ana_Mar_a_.._x.md"


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "minitransformer", "grade", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def _main(capsys, monkeypatch, *args):
    """The command line in this process (its refusals come before any notebook runs): (code, out, err)."""
    from minitransformer.__main__ import main
    monkeypatch.chdir(ROOT)
    code = main(["grade", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args, message", [
    (["nowhere.ipynb"], "error: no such notebook or folder (nowhere.ipynb)"),
    (["tests", "--points", "nowhere.json"], "error: no .ipynb files in the folder (tests)"),
    (["lessons", "--timeout", "0"], "error: must be a number of seconds > 0, got 0 (--timeout)"),
    (["lessons", "--jobs", "0"], "error: must be at least 1, got 0 (--jobs)"),
    (["lessons", "--lessons", "nowhere"], "error: no such folder (--lessons nowhere)"),
    ([], "error: give the notebooks to grade (files or folders), or --roster FILE"),
    (["lessons", "--roster", "r.csv"], "error: give notebooks or --roster FILE, not both"),
    (["--roster", "nowhere.csv"], "error: no such file (--roster nowhere.csv)"),
    (["lessons/03_feed_forward.ipynb", "--csv", "nowhere/g.csv"], "error: no such folder nowhere (--csv nowhere/g.csv)"),
])
def test_command_line_errors(args, message, capsys, monkeypatch):
    code, out, err = _main(capsys, monkeypatch, *args)
    assert code == 2 and err.strip().splitlines() == [message], err
    assert out == ""


def test_the_command_refuses_in_its_own_process_too():
    result = _cli("nowhere.ipynb")
    assert result.returncode == 2 and result.stderr == "error: no such notebook or folder (nowhere.ipynb)\n"


def test_a_notebook_whose_lesson_cannot_be_told_is_refused_by_name(tmp_path, capsys, monkeypatch):
    _notebook(tmp_path / "ana.ipynb", "x = 1", metadata=False)
    _notebook(tmp_path / "03_bo.ipynb", "x = 1", lesson=3)
    code, _, err = _main(capsys, monkeypatch, str(tmp_path), "--csv", str(tmp_path / "g.csv"))
    assert code == 2 and not (tmp_path / "g.csv").exists()
    assert err.startswith(f"error: cannot tell the lesson of {tmp_path / 'ana.ipynb'}: add ")


@pytest.mark.parametrize("content, message", [
    ("{\"9.9\": 1}", "no exercise '9.9'"),
    ("{\"1.1\": -1}", "exercise 1.1: points must be a whole number >= 0, got -1"),
    ("[1]", "expected a JSON object"),
    ("{", "not valid JSON"),
])
def test_a_bad_points_file_is_refused(tmp_path, content, message, capsys, monkeypatch):
    (tmp_path / "p.json").write_text(content)
    code, _, err = _main(capsys, monkeypatch, "lessons", "--points", str(tmp_path / "p.json"))
    assert code == 2 and message in err and err.count("\n") == 1, err


# -- the private folder ----------------------------------------------------------------------------

def test_a_notebook_gets_a_private_folder_and_a_read_only_copy_of_the_packages(tmp_path):
    snapshot = sandbox.Snapshot.take(LESSONS)
    assert "lessonkit/exercises/lessons_0_3.py" in snapshot.packages and "experiments/README.md" in snapshot.lessons
    with sandbox.Private(snapshot) as box:
        assert stat.S_IMODE(box.root.stat().st_mode) == 0o700
        copy = box.pkg / "lessonkit" / "exercises" / "lessons_0_3.py"
        assert copy.read_bytes() == snapshot.packages["lessonkit/exercises/lessons_0_3.py"]
        assert not os.access(copy, os.W_OK) or os.geteuid() == 0       # root writes anything
        assert not os.stat(copy).st_mode & 0o222
        assert sorted(p.name for p in box.work.iterdir()) == sorted(sandbox.LESSON_FILES)
        assert box.env()["PYTHONPATH"].split(os.pathsep)[0] == str(box.pkg) and box.env("ko")["MINITRANSFORMER_LANG"] == "ko"
        if (LESSONS / "ko" / "src").is_dir():                           # where lessonkit.i18n looks from the copy
            assert sorted(p.name for p in (box.pkg / "lessons" / "ko" / "src").iterdir()) == \
                sorted(p.name for p in (LESSONS / "ko" / "src").glob("*.toml"))
        root = box.root
    assert not root.exists()


def test_the_snapshot_names_what_changed_on_disk(tmp_path):
    snapshot = sandbox.Snapshot.take(None)
    snapshot.roots = {"minitransformer": tmp_path / "m", "lessonkit": tmp_path / "l"}
    for rel, data in snapshot.packages.items():
        path = tmp_path / ("m" if rel.startswith("minitransformer/") else "l") / rel.split("/", 1)[1]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert snapshot.changed_on_disk() == []
    (tmp_path / "l" / "exercises" / "_common.py").write_text("TOL = float('inf')\n")
    assert snapshot.changed_on_disk() == ["lessonkit/exercises/_common.py"]


# -- slow: notebooks run in kernels ----------------------------------------------------------------------

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
    assert {r["status"] for r in rows} == {"correct"} and {r["hidden"] for r in rows} == {"4/4"}
    data = json.loads((tmp_path / "g.json").read_text())
    assert data["total"] == {"score": 7, "max_points": 7, "notebooks": 3} and isinstance(data["seed"], int)


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
    rep = grade.grade_notebook(path, timeout=300, lessons=LESSONS)
    print(grade.format_report(rep))
    statuses = {e.exercise: e.status for e in rep.exercises}
    assert statuses.pop(number) == "wrong", rep.exercises
    assert set(statuses.values()) <= {"not attempted"}, statuses
    wrong = next(e for e in rep.exercises if e.exercise == number)
    assert re.search(hint, wrong.detail), wrong.detail
    assert rep.score == 0 and rep.notes == [], rep.notes


@pytest.mark.slow
def test_a_class_from_a_roster_in_parallel_gets_one_feedback_file_each(tmp_path):
    """--roster, --jobs 2, --feedback: a student with the solutions, one with a slip the hidden cases
    catch, one who delegated to the package, one with the untouched student edition."""
    from lesson_exercises import exercise_notebook
    solved = exercise_notebook(3, {"3.1": "def my_relu_backward(dh, z):\n    return dh * (z > 0)"})
    slip = exercise_notebook(3, {"3.1": "def my_relu_backward(dh, z):\n"
                                        "    return dh * (z > 0) if z.shape == (2, 3, 6) else dh"})
    package = exercise_notebook(3, {"3.1": "from minitransformer.layers.feedforward import relu_backward as rb\n"
                                           "def my_relu_backward(dh, z):\n    return rb(dh, z)"})
    (tmp_path / "hand-ins").mkdir()
    for name, nb in (("ana", solved), ("bo", slip), ("cy", package), ("di", exercise_notebook(3))):
        nbformat.write(nb, tmp_path / "hand-ins" / f"{name}.ipynb")
    (tmp_path / "roster.csv").write_text("student,notebook\n" + "".join(f"{n},hand-ins/{n}.ipynb\n"
                                                                         for n in ("ana", "bo", "cy", "di")))
    result = _cli("--roster", str(tmp_path / "roster.csv"), "--jobs", "2", "--feedback", str(tmp_path / "fb"),
                  "--csv", str(tmp_path / "g.csv"), "--seed", "11")
    assert result.returncode == 0, result.stderr
    rows = {(r["student"], r["exercise"]): r for r in csv.DictReader(open(tmp_path / "g.csv"))}
    assert rows[("ana", "3.1")]["status"] == "correct" and rows[("ana", "3.1")]["points"] == "1"
    assert rows[("bo", "3.1")]["status"] == "wrong" and "hint: the gradient passes everywhere" in rows[("bo", "3.1")]["detail"]
    assert rows[("cy", "3.1")]["status"] == "uses the package"
    assert rows[("cy", "3.1")]["detail"] == "uses the package's own `relu_backward`: write it yourself"
    assert {rows[("di", n)]["status"] for n in ("3.1", "3.2")} == {"not attempted"}
    assert sorted(p.name for p in (tmp_path / "fb").iterdir()) == ["ana.md", "bo.md", "cy.md", "di.md"]
    assert "| 3.1 ReLU backward | 0/1 | uses the package |" in (tmp_path / "fb" / "cy.md").read_text()
    assert "total: 1/8 points over 4 notebooks" in result.stdout


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the grader adopts orphans on Linux only")
def test_a_process_the_notebook_left_behind_is_stopped(tmp_path):
    pid_file = tmp_path / "pid"
    _notebook(tmp_path / "01_daemon.ipynb", "import subprocess, sys\n"
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
              f"open({str(pid_file)!r}, 'w').write(str(p.pid))", CAUSAL_MASK, CHECK_MASK)
    result = _cli(str(tmp_path / "01_daemon.ipynb"), "--timeout", "60")
    assert result.returncode == 0, result.stderr
    assert "1 process the notebook left running was stopped" in result.stdout
    pid = int(pid_file.read_text())
    assert not pathlib.Path(f"/proc/{pid}").exists() or "zombie" in pathlib.Path(f"/proc/{pid}/status").read_text()


@pytest.mark.slow
def test_an_endless_cell_times_out_and_the_rest_still_runs(tmp_path):
    endless = _notebook(tmp_path / "01_loop.ipynb", CAUSAL_MASK, "while True:\n    pass", CHECK_MASK)
    stubborn = _notebook(tmp_path / "01_stubborn.ipynb", CAUSAL_MASK, CHECK_MASK,
                         "import time\nwhile True:\n    try:\n        time.sleep(0.1)\n    except KeyboardInterrupt:\n"
                         "        pass", "check_causal_mask(my_causal_mask)")
    in_answer = _notebook(tmp_path / "01_slow_answer.ipynb", "def my_causal_mask(T):\n    while True:\n        pass",
                          CHECK_MASK)
    timeout = 3.0
    t0 = time.perf_counter()
    rep = grade.grade_notebook(endless, timeout=timeout, lessons=None)
    assert time.perf_counter() - t0 < timeout + 60              # the timeout plus start-up and a margin
    assert rep.notes == ["cell 1 ran over 3 s and was interrupted"] and rep.cells_run == 3
    assert {e.exercise: e.status for e in rep.exercises}["1.2"] == "correct"

    rep = grade.grade_notebook(in_answer, timeout=timeout, lessons=None)
    timed_out = next(e for e in rep.exercises if e.exercise == "1.2")
    assert timed_out.status == "timeout" and timed_out.detail == "the function ran over the time limit and was interrupted"

    t0 = time.perf_counter()
    rep = grade.grade_notebook(stubborn, timeout=timeout, lessons=None)
    assert time.perf_counter() - t0 < timeout + grade.GRACE + 60
    assert rep.cells_run == 3 and rep.score == 1
    assert any("ignored the interrupt" in n for n in rep.notes)


@pytest.mark.slow
def test_a_kernel_that_dies_still_gets_a_report(tmp_path):
    path = _notebook(tmp_path / "01_exit.ipynb", CAUSAL_MASK, CHECK_MASK, "import os\nos._exit(3)",
                     "from lessonkit.exercises.lessons_0_3 import check_softmax_backward\n"
                     "check_softmax_backward(lambda dA, A: None)")
    rep = grade.grade_notebook(path, timeout=60, lessons=None)
    statuses = {e.exercise: (e.status, e.detail) for e in rep.exercises}
    assert statuses["1.2"] == ("correct", "")
    assert statuses["1.1"] == ("not run", "the kernel died in cell 2")
    assert rep.notes == ["the kernel died in cell 2; the cells after it did not run"]


@pytest.mark.slow
def test_an_unreadable_notebook_gets_a_report(tmp_path):
    broken = tmp_path / "07_broken.ipynb"
    broken.write_text("{ not json")
    rep = grade.grade_notebook(broken)
    assert rep.lesson == 7 and rep.score == 0 and rep.max_points == 3
    assert {e.status for e in rep.exercises} == {"not run"} and "not a readable notebook" in rep.notes[0]


def test_the_grade_extra_names_what_the_grader_needs():
    import tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {spec.split(">")[0].split("=")[0] for spec in extras["grade"]} == {"nbclient", "nbformat", "ipykernel"}
    assert any(spec.startswith("minitransformer[") and "grade" in spec for spec in extras["dev"])
    assert 'pip install -e ".[grade]"' in (ROOT / "docs" / "teachers.md").read_text()
