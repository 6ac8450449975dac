"""The exercises of the lesson sources, found through their cell tags (lessons/src/README.md).

For each lesson: every top-level call of a checker in a code cell (``Call``), and, per
exercise, its stub cell, its checking call and its solution calls (``Exercise``). Used by
the tests of the tag convention, of stub/solution agreement, of the student edition and
of the grader (``exercise_notebook`` builds a small notebook from a lesson's exercise cells).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import math
import pathlib
from dataclasses import dataclass, field

import nbformat
import numpy as np
import pytest

from lessonkit.exercises import registered

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = ROOT / "lessons"

pytest.importorskip("jupytext", reason="reading the lesson sources needs jupytext (pip install -e '.[dev]')")
_spec = importlib.util.spec_from_file_location("lessons_build", LESSONS / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

CHECKERS = {name.split(".", 1)[1]: checker for name, checker in registered().items()}


def parse(source: str) -> ast.Module:
    """A code cell's statements (IPython's magics, such as ``%matplotlib inline``, turned into Python)."""
    from IPython.core.inputtransformer2 import TransformerManager
    return ast.parse(TransformerManager().transform_cell(source))


@dataclass
class Call:
    cell: int                 # index of the cell in the source's notebook
    tags: list[str]
    checker: str              # "check_softmax_backward"
    args: list[ast.expr]
    exercise: str             # "1.1"


@dataclass
class Exercise:
    number: str
    stub_cell: int | None = None
    stub: ast.stmt | None = None          # the FunctionDef, or the Assign of ``my_answer_N = None``
    check: list[Call] = field(default_factory=list)
    solutions: list[Call] = field(default_factory=list)


@functools.cache
def lesson_notebook(lesson: int) -> nbformat.NotebookNode:
    """The lesson's source as a notebook (cached: callers must not change it)."""
    return build.notebook(build.lessons(LESSONS)[f"{lesson:02d}"])


def calls(nb) -> list[Call]:
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for stmt in parse(cell.source).body:
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in CHECKERS:
                number = CHECKERS[call.func.id].exercise
                if "{" in number:
                    first = call.args[0] if call.args else None
                    number = number.format(first.value if isinstance(first, ast.Constant) else "?")
                found.append(Call(i, build.tags(cell), call.func.id, list(call.args), number))
    return found


def defined_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    return []


@functools.cache
def exercises(lesson: int) -> dict[str, Exercise]:
    """{number: Exercise} for the lesson, from its tagged cells."""
    nb = lesson_notebook(lesson)
    found: dict[str, Exercise] = {}
    stubs = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "stub" in build.tags(cell):
            for stmt in parse(cell.source).body:
                for name in defined_names(stmt):
                    stubs[name] = (i, stmt)
    for call in calls(nb):
        ex = found.setdefault(call.exercise, Exercise(call.exercise))
        if "check" in call.tags:
            ex.check.append(call)
            last = call.args[-1] if call.args else None
            if isinstance(last, ast.Name) and last.id in stubs:
                ex.stub_cell, ex.stub = stubs[last.id]
        elif "solution" in call.tags:
            ex.solutions.append(call)
    return found


def solution_namespace(lesson: int) -> dict:
    """The imports and definitions of the lesson's solution cells, run in order in one namespace
    that starts with ``np`` and ``math`` only (solutions are self-contained)."""
    nb = lesson_notebook(lesson)
    ns = {"np": np, "math": math, "__name__": f"solutions_of_lesson_{lesson}"}
    for cell in nb.cells:
        if cell.cell_type == "code" and "solution" in build.tags(cell):
            keep = [s for s in parse(cell.source).body
                    if isinstance(s, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef))]
            exec(compile(ast.Module(keep, []), f"<lesson {lesson} solutions>", "exec"), ns)
    return ns


def evaluate(args: list[ast.expr], ns: dict) -> list:
    return [eval(compile(ast.Expression(a), "<args>", "eval"), ns) for a in args]


def exercise_notebook(lesson: int, replace: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """A small notebook of the lesson's exercises alone: NumPy, math and the lesson's checker
    imports, then each stub cell (or the code in ``replace[number]``) and its checking cell."""
    nb = lesson_notebook(lesson)
    imports = ["import math", "import numpy as np"]
    for cell in nb.cells:
        if cell.cell_type == "code":
            imports += [ast.unparse(s) for s in parse(cell.source).body
                        if isinstance(s, ast.ImportFrom) and (s.module or "").startswith("lessonkit.exercises")]
    cells = [nbformat.v4.new_code_cell("\n".join(dict.fromkeys(imports)))]
    for number, ex in sorted(exercises(lesson).items(), key=lambda kv: [int(x) for x in kv[0].split(".")]):
        stub = nb.cells[ex.stub_cell].source
        cells.append(nbformat.v4.new_code_cell((replace or {}).get(number, stub)))
        cells.append(nbformat.v4.new_code_cell(nb.cells[ex.check[0].cell].source))
    out = nbformat.v4.new_notebook(cells=cells)
    out.metadata["kernelspec"] = dict(build.KERNELSPEC)
    out.metadata["minitransformer"] = {"lesson": lesson}
    return out
