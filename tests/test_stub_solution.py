"""Neuromatch's rule for every exercise: the stub and the solution define the same function
(name aside: same parameters, order, defaults), the stub is "not attempted" by its checker,
and the solution, run outside its lesson, passes its checker."""

import ast
import copy

import pytest
from lesson_exercises import CHECKERS, evaluate, exercises, lesson_notebook, parse, solution_namespace

from lessonkit.exercises import catalogue

NUMBERS = [e.number for e in catalogue.EXERCISES]


def _lesson(number):
    return int(number.split(".")[0])


def _signature(fn: ast.FunctionDef) -> str:
    args = copy.deepcopy(fn.args)
    return ast.unparse(ast.Lambda(args, ast.Constant(None)))


def _solution_function(ex, ns):
    """The function the solution cell hands its checker (None for an answer that is a value)."""
    last = ex.solutions[0].args[-1]
    return ns[last.id] if isinstance(last, ast.Name) else None


@pytest.mark.parametrize("number", NUMBERS)
def test_stub_and_solution_have_one_signature(number):
    ex = exercises(_lesson(number))[number]
    last = ex.solutions[0].args[-1]
    if isinstance(ex.stub, ast.Assign):                           # an answer that is a value: 12.1-12.3
        assert isinstance(ex.stub.value, ast.Constant) and ex.stub.value.value is None, ast.unparse(ex.stub)
        assert isinstance(last, ast.Constant), f"exercise {number}: the solution's answer is not a literal"
        return
    assert isinstance(ex.stub, ast.FunctionDef), f"exercise {number}: the stub defines no function"
    nb = lesson_notebook(_lesson(number))
    solution_defs = {s.name: s for c in nb.cells if c.cell_type == "code" and "solution" in c.metadata.get("tags", [])
                     for s in parse(c.source).body if isinstance(s, ast.FunctionDef)}
    assert isinstance(last, ast.Name) and last.id in solution_defs, f"exercise {number}: no solution function"
    stub_sig, solution_sig = _signature(ex.stub), _signature(solution_defs[last.id])
    assert stub_sig == solution_sig, f"exercise {number}: stub {ex.stub.name}{stub_sig[6:]} vs " \
                                     f"solution {last.id}{solution_sig[6:]}"
    returns = [n for n in ast.walk(ex.stub) if isinstance(n, ast.Return)]
    assert returns and all(isinstance(r.value, ast.Constant) and r.value.value is None for r in returns), \
        f"exercise {number}: the stub must return None"


@pytest.mark.parametrize("number", NUMBERS)
def test_stub_is_not_attempted_and_solution_is_correct(number, capsys):
    lesson = _lesson(number)
    ex = exercises(lesson)[number]
    checker = CHECKERS[ex.check[0].checker]
    stub_ns = {}
    exec(compile(ast.Module([ex.stub], []), "<stub>", "exec"), stub_ns)
    stub_args = evaluate(ex.check[0].args, stub_ns)
    assert checker(*stub_args).status == "not attempted"
    ns = solution_namespace(lesson)
    for call in ex.solutions:
        verdict = checker(*evaluate(call.args, ns))
        assert verdict.status == "correct", f"exercise {number}: the solution gets {verdict}"
    assert "correct" in capsys.readouterr().out


def test_the_signature_comparison_can_fail():
    one, other, renamed = (parse(src).body[0] for src in (
        "def my_f(dy, x, W, eps=1e-5):\n    return None", "def f_solution(dy, x, W, eps=1e-6):\n    pass",
        "def f_solution(dy, x, w, eps=1e-5):\n    pass"))
    assert _signature(one) != _signature(other) and _signature(one) != _signature(renamed)
    assert _signature(one) == _signature(parse("def g(dy, x, W, eps=1e-5):\n    return 1").body[0])
