"""Predict, then see (issue 35): every lesson asks for at least two predictions before the cell that
reveals the result, and the student edition keeps each reveal behind its prediction, its output cleared.

A prediction is a cell tagged ``predict`` holding one line, ``my_prediction_L_n = None``; its reveal is
a later cell tagged ``reveal`` that calls ``reveal(my_prediction_L_n, ...)`` (lessonkit.predict)."""

import ast

import pytest
from lesson_exercises import LESSONS, build, lesson_notebook, parse

from lessonkit import kernel, predict
from lessonkit.exercises import catalogue

NUMBERS = sorted(build.lessons(LESSONS))


def _predictions(nb) -> dict[str, int]:
    """{variable: cell index} of the lesson's prediction cells (each must be exactly `my_prediction_... = None`)."""
    found = {}
    for i, cell in enumerate(nb.cells):
        if "predict" not in build.tags(cell):
            continue
        body = parse(cell.source).body
        assert cell.cell_type == "code" and len(body) == 1 and isinstance(body[0], ast.Assign), cell.source
        (target,), value = body[0].targets, body[0].value
        assert isinstance(target, ast.Name) and target.id.startswith("my_prediction_"), cell.source
        assert isinstance(value, ast.Constant) and value.value is None, f"a prediction cell starts empty: {cell.source}"
        found[target.id] = i
    return found


def _reveals(nb) -> dict[str, int]:
    """{prediction variable: index of the first reveal cell that calls reveal() on it}."""
    found = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or "reveal" not in build.tags(cell):
            continue
        for node in ast.walk(parse(cell.source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "reveal" and node.args \
                    and isinstance(node.args[0], ast.Name):
                found.setdefault(node.args[0].id, i)
    return found


@pytest.mark.parametrize("number", NUMBERS)
def test_every_lesson_asks_for_two_predictions_each_revealed_after_it(number):
    nb = lesson_notebook(int(number))
    predictions, reveals = _predictions(nb), _reveals(nb)
    assert len(predictions) >= 2, f"lesson {number} has {len(predictions)} prediction cells"
    for name, at in predictions.items():
        assert name in reveals, f"lesson {number}: {name} is never revealed"
        assert reveals[name] > at, f"lesson {number}: {name} is revealed (cell {reveals[name]}) before it is asked"
        assert nb.cells[at - 1].cell_type == "markdown" or "predict" in build.tags(nb.cells[at - 1]), \
            f"lesson {number}: {name} has no question above it"


@pytest.mark.parametrize("number", NUMBERS)
def test_the_student_edition_keeps_each_reveal_behind_its_prediction(number):
    source = build.lessons(LESSONS)[number]
    student = build.student_edition(build.notebook(source), number, build.notebook_path(source).name)
    predictions, reveals = _predictions(student), _reveals(student)
    assert len(predictions) >= 2
    for name, at in predictions.items():
        cell = student.cells[reveals[name]]
        assert reveals[name] > at and cell.source.startswith(build.REVEAL_LINE) and cell.outputs == []


def test_the_count_can_fail():
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("my_prediction_1 = 3", metadata={"tags": ["predict"]})])
    with pytest.raises(AssertionError, match="starts empty"):
        _predictions(nb)
    nb.cells[0].source = "my_prediction_1 = None"
    nb.cells.insert(0, nbformat.v4.new_code_cell("reveal(my_prediction_1, 2, what='x')", metadata={"tags": ["reveal"]}))
    assert _reveals(nb) == {"my_prediction_1": 0} and _predictions(nb) == {"my_prediction_1": 1}


def test_reveal_compares(capsys):
    predict.reveal(None, 0.5, what="x")
    predict.reveal(0.52, 0.5, what="x")
    predict.reveal(1.2, 0.5, what="x")
    predict.reveal(50, 0.5, what="x")
    predict.reveal("Lower", "lower", what="x", choices=("higher", "lower"))
    predict.reveal("maybe", "lower", what="x", choices=("higher", "lower"))
    predict.reveal([0, 1, 1, 0], (0, 1, 1, 0), what="x")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("No prediction written") and out[0].endswith("**x: 0.5.**")
    assert out[1].endswith("Within 10%.") and out[2].endswith("Within a factor of 3.")
    assert out[3].endswith("Off by a factor of 100.") and out[4].endswith("Right.")
    assert "not one of higher, lower" in out[5] and out[6].endswith("Right.")


def test_under_the_grader_the_predictions_are_kept_for_the_feedback():
    previous = kernel._state.session
    kernel.start()
    try:
        predict.reveal(3, 4, what="the answer")
        predict.reveal(None, 2.5, what="another")
        assert kernel._state.session.predictions == [["the answer", "3", "4"], ["another", None, "2.5"]]
    finally:
        kernel._state.session = previous


def test_no_prediction_cell_is_an_exercise():
    stubs = {e.stub for e in catalogue.EXERCISES}
    for number in NUMBERS:
        assert not set(_predictions(lesson_notebook(int(number)))) & stubs
