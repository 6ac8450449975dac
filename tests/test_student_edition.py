"""The student edition (python lessons/build.py --student DIR): what it keeps, clears and removes,
that no line of a solution leaks into it, and (slow) that it runs top to bottom with every
checker saying "not attempted"."""

import json
import shutil

import nbformat
import pytest
from lesson_exercises import LESSONS, build, lesson_notebook, parse

from lessonkit.exercises import catalogue

FOUND = build.lessons(LESSONS)


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    build.write_student_edition(out, list(FOUND), FOUND)
    return out


def _teacher(number):
    return nbformat.read(build.notebook_path(FOUND[number]), as_version=4)


def _student(student, number):
    return nbformat.read(student / build.notebook_path(FOUND[number]).name, as_version=4)


def _text(nb_or_cells) -> str:
    """Every source and every textual output of a notebook (or of a list of cells), one string to search."""
    parts = []
    for cell in getattr(nb_or_cells, "cells", nb_or_cells):
        parts.append(cell.source)
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts += [v if isinstance(v, str) else json.dumps(v) for k, v in out.get("data", {}).items()
                      if k.startswith("text/")]
            parts += out.get("traceback", [])
    return "\n".join(parts)


def solution_lines(number) -> list[str]:
    """The lines of the lesson's solution cells that say something (20 characters or more) and
    that the lesson shows nowhere else (not in its other cells, nor in their outputs in the
    teacher's edition): what would give a solution away if found. (Lessons 1, 3 and 4 print the
    package's own backward before the exercise that asks for it; what the lesson itself shows is
    not a leak of the solution cells.)"""
    nb = lesson_notebook(int(number))
    shown = [c for c in _teacher(number).cells if "solution" not in build.tags(c)]
    elsewhere = _text([c for c in nb.cells if "solution" not in build.tags(c)] + shown)
    lines = {line.strip() for c in nb.cells if "solution" in build.tags(c) for line in c.source.splitlines()}
    return sorted(line for line in lines if len(line) >= 20 and line not in elsewhere)


def leaks(nb, number) -> list[str]:
    text = _text(nb)
    return [line for line in solution_lines(number) if line in text]


def test_every_lesson_is_written_with_the_files_it_reads(student):
    assert sorted(p.name for p in student.glob("*.ipynb")) == sorted(build.notebook_path(s).name for s in FOUND.values())
    assert (student / "experiments" / "table3.json").is_file() and (student / "debug_attention.py").is_file()
    assert (student / "runtimes.json").is_file()


def test_links_to_the_docs_work_outside_the_repository(student):
    """The lessons link ../docs/*.md; the student edition points them at its own copy of docs/."""
    import re

    linked = 0
    for number in FOUND:
        for cell in _student(student, number).cells:
            if cell.cell_type != "markdown":
                continue
            assert "](../docs/" not in cell.source, f"lesson {number}: a link still leaves the student edition"
            for target in re.findall(r"\]\((docs/[^)#]+)", cell.source):
                assert (student / target).is_file(), f"lesson {number}: {target} is not in the student edition"
                linked += 1
    assert linked, "no lesson links the docs: the test would check nothing"


@pytest.mark.parametrize("number", sorted(FOUND))
def test_no_solution_line_appears_in_the_student_edition(student, number):
    assert solution_lines(number), f"lesson {number}: no solution lines to look for"
    found = leaks(_student(student, number), number)
    assert not found, f"lesson {number}: solution lines in the student edition: {found[:3]}"


def test_the_leak_search_can_fail(student):
    nb = _student(student, "01")
    line = solution_lines("01")[0]
    nb.cells[3].source += "\n" + line
    assert leaks(nb, "01") == [line]


@pytest.mark.parametrize("number", sorted(FOUND))
def test_what_is_kept_cleared_and_removed(student, number):
    teacher, edition = _teacher(number), _student(student, number)
    header = edition.cells[0]
    assert header.cell_type == "markdown" and "**Student edition** of lesson" in header.source
    assert f"python -m minitransformer grade {build.notebook_path(FOUND[number]).name}" in header.source
    kept = [c for c in teacher.cells if "solution" not in build.tags(c)]
    assert [c.id for c in edition.cells[1:]] == [c.id for c in kept]
    for t_cell, s_cell in zip(kept, edition.cells[1:]):
        tags = build.tags(t_cell)
        if "reveal" in tags:
            assert s_cell.source == f"{build.REVEAL_LINE}\n{t_cell.source}"
        elif t_cell.cell_type == "markdown":                  # links to ../docs/ point at the edition's copy
            assert s_cell.source == t_cell.source.replace("](../docs/", "](docs/")
        else:
            assert s_cell.source == t_cell.source
        if t_cell.cell_type == "code":
            if set(tags) & set(build.CLEARED_IN_STUDENT):
                assert s_cell.outputs == [] and s_cell.execution_count is None, (number, s_cell.id)
            else:
                assert s_cell.outputs == t_cell.outputs
    assert edition.metadata["minitransformer"] == {"lesson": int(number), "edition": "student"}
    assert "jupytext" not in edition.metadata and edition.metadata.kernelspec == build.KERNELSPEC
    stubs = [c for c in edition.cells if "stub" in build.tags(c)]
    assert len(stubs) == len(catalogue.for_lesson(int(number)))


def test_lesson_12_shows_no_outcome_before_it_is_run(student):
    """Every planted bug's row and every picture of the table is a reveal cell, without outputs."""
    edition = _student(student, "12")
    for cell in edition.cells:
        if cell.cell_type != "code":
            continue
        source = cell.source
        if any(key in source for key in ("run_row(BUG", "ax.table(", "names = list(PROPERTIES)", "STYLE = {CLEAN")):
            assert "reveal" in build.tags(cell) and cell.outputs == [], source[:80]
    outputs = _text([nbformat.v4.new_code_cell(outputs=c.outputs) for c in edition.cells if c.cell_type == "code"])
    assert " catches " not in outputs and "your predictions:" not in outputs
    assert " catches " in _text(_teacher("12"))
    assert sum("reveal" in build.tags(c) for c in edition.cells) >= 13


def test_the_student_edition_stays_out_of_lessons(tmp_path):
    with pytest.raises(SystemExit, match="outside"):
        build.write_student_edition(LESSONS / "student", ["01"], FOUND)
    assert not (LESSONS / "student").exists()


def test_a_stale_notebook_is_refused(tmp_path):
    lessons = tmp_path / "lessons"
    (lessons / "src").mkdir(parents=True)
    source = FOUND["03"]
    shutil.copy(build.notebook_path(source), lessons / build.notebook_path(source).name)
    (lessons / "src" / source.name).write_text(source.read_text().replace("rng = np.random.default_rng(0)",
                                                                         "rng = np.random.default_rng(7)", 1))
    found = build.lessons(lessons)
    with pytest.raises(SystemExit, match="rebuild these notebooks first"):
        build.write_student_edition(tmp_path / "out", ["03"], found, lessons_folder=lessons)


def test_no_untagged_cell_uses_a_solution():
    """What the student edition keeps must run without the solution cells: no cell outside them
    reads a name that only a solution cell defines (the slow test below runs them to be sure)."""
    import ast
    for number in FOUND:
        nb = lesson_notebook(int(number))
        only_in_solutions, elsewhere = set(), set()
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            names = {n for s in parse(cell.source).body for node in ast.walk(s)
                     for n in ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
                               [node.id] if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) else [])}
            (only_in_solutions if "solution" in build.tags(cell) else elsewhere).update(names)
        only_in_solutions -= elsewhere
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and "solution" not in build.tags(cell):
                used = {n.id for n in ast.walk(parse(cell.source)) if isinstance(n, ast.Name)}
                assert not used & only_in_solutions, f"lesson {number}, cell {i} uses {used & only_in_solutions}"


@pytest.mark.slow
def test_the_student_edition_runs_clean_and_scores_zero(student):
    """Every student notebook, executed top to bottom by the grader: no cell raises, no cell
    times out, and every exercise is "not attempted" (0 points)."""
    from lessonkit import grade
    for number in sorted(FOUND):
        report = grade.grade_notebook(student / build.notebook_path(FOUND[number]).name, lessons=LESSONS)
        assert report.notes == [], f"lesson {number}: {report.notes}"
        assert report.cells_run == report.cells
        statuses = {e.exercise: e.status for e in report.exercises}
        assert set(statuses.values()) == {"not attempted"}, f"lesson {number}: {statuses}"
        assert report.score == 0 and report.max_points == len(catalogue.for_lesson(int(number)))
        print(grade.format_report(report))
