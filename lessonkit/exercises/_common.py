"""What every exercise checker shares: one contract, one tolerance, one report format.

The contract (the lesson notebooks and tests/test_exercises_*.py rely on it):

* the checker calls the learner's function on fixed, seeded float64 inputs (copies,
  so an answer that writes into its inputs cannot spoil the reference);
* if the function returns ``None`` (the stub, not attempted yet) it prints
  ``NOT_ATTEMPTED`` and returns a false Verdict ("not attempted"), without raising, so a
  notebook still runs top to bottom;
* if the answer is wrong it raises ``WrongAnswer`` (an AssertionError) saying what is
  wrong: a shape (expected vs got), or the values' max relative error against the
  reference answer and against the numerical gradient, and, when the answer matches a
  mistake people often make, a ``hint:`` line naming that mistake;
* if the answer is right it prints ``correct`` with the measured errors and returns a
  true Verdict ("correct").

A checker's body returns True (right) or False (not attempted) and raises WrongAnswer;
its ``@exercise("L.n")`` decorator (``_verdict``) turns that into the Verdict, which a
notebook does not display. A checker builds its inputs with ``_cases`` (the visible case in
a notebook; hidden ones too when the grader runs it) and prints with ``say``, which the
grader collects instead of printing.
Exercises are numbered "Exercise L.n" (lesson L, n-th exercise) in every lesson, and
listed with their points in ``catalogue``.
"""

from __future__ import annotations

import contextvars

import numpy as np

from minitransformer import backend
from minitransformer.gradcheck import DEFAULT_TOL, rel_error

from ..i18n import tr
from ..wire import Built, Opaque
from ._cases import case_rng, edge, visible
from ._verdict import Verdict, WrongAnswer, exercise

__all__ = ["NOT_ATTEMPTED", "TOL", "Verdict", "WrongAnswer", "built", "case_rng", "drive", "edge", "exercise", "say",
           "sizes", "visible"]

NOT_ATTEMPTED = "not attempted yet: fill in the cell above and run this cell again"
# One tolerance for every checker, against the reference and against the numerical
# gradient alike: gradcheck's (a right float64 backward is near 1e-9 or below).
TOL = DEFAULT_TOL
# Where say() writes: None prints (a notebook); the grader sets a list and reads it afterwards.
SINK: contextvars.ContextVar[list | None] = contextvars.ContextVar("lessonkit_sink", default=None)


def say(*parts, sep: str = " ", end: str = "\n") -> None:
    """print(), or, while the grader judges, a line it collects (it decides what a student sees)."""
    sink = SINK.get()
    if sink is None:
        print(*parts, sep=sep, end=end)
    else:
        sink.append(sep.join(str(p) for p in parts) + end)


def not_attempted(result) -> bool:
    """True (after printing NOT_ATTEMPTED) if the learner's function returned None."""
    if result is None:
        say(tr("not attempted yet: fill in the cell above and run this cell again"))   # NOT_ATTEMPTED, translated
        return True
    return False


def describe(value) -> str:
    """A short description of what arrived, for error messages."""
    if isinstance(value, Opaque):
        return tr(f"{value!r} (not plain data: return arrays, numbers, strings, lists, tuples or dicts)")
    if hasattr(value, "shape"):
        return tr(f"an array of shape {tuple(value.shape)}")
    if isinstance(value, (tuple, list)):
        return tr(f"a {type(value).__name__} of {len(value)} items")
    return f"{type(value).__name__} {value!r}"[:80]


def unpack(result, names):
    """The learner's tuple of len(names) results, or a WrongAnswer saying what came instead."""
    if not isinstance(result, (tuple, list)) or len(result) != len(names):
        raise WrongAnswer(tr(f"expected a tuple of {len(names)} arrays ({', '.join(names)}), got {describe(result)}"))
    return list(result)


def as_array(name, value):
    """The learner's answer as a host NumPy array, or a WrongAnswer saying why not."""
    if value is None:
        raise WrongAnswer(tr(f"{name} is None: return an array for it"))
    if isinstance(value, Opaque):
        raise WrongAnswer(tr(f"{name}: expected an array, got {describe(value)}"))
    try:
        return np.asarray(backend.to_numpy(value))
    except Exception as exc:
        raise WrongAnswer(tr(f"{name}: expected an array, got {describe(value)}")) from exc


def check_array(name, got, reference, numeric=None, hints=()):
    """Compare one returned array with the reference (and the numerical gradient).

    hints: (alternative, text) pairs; if ``got`` matches ``alternative`` (a wrong answer
    someone often writes) to within TOL, ``text`` is added to the error message.
    Returns (error vs reference, error vs numerical gradient or None).
    """
    got = as_array(name, got)
    if got.shape != reference.shape:
        msg = tr(f"{name}: shape mismatch: expected {tuple(reference.shape)}, got {tuple(got.shape)}")
        for alternative, text in hints:
            if alternative.shape == got.shape and rel_error(got.astype(np.float64), alternative) <= TOL:
                msg += f"\n  hint: {text}"
                break
        else:
            if sorted(got.shape) == sorted(reference.shape):
                msg += "\n  hint: " + tr("the same sizes in another order: check which axes you transposed or swapped")
        raise WrongAnswer(msg)
    if got.dtype.kind not in "fiu":
        raise WrongAnswer(tr(f"{name}: expected a float array, got dtype {got.dtype}"))
    got = got.astype(np.float64)
    if not np.all(np.isfinite(got)):
        raise WrongAnswer(tr(f"{name}: contains NaN or inf"))
    err_ref = rel_error(got, reference)
    err_num = rel_error(got, numeric) if numeric is not None else None
    if err_ref > TOL or (err_num is not None and err_num > TOL):
        msg = tr(f"{name}: wrong values: max relative error {err_ref:.2e} vs the reference")
        if err_num is not None:
            msg += tr(f" and {err_num:.2e} vs the numerical gradient")
        msg += tr(f" (tolerance {TOL:.0e})")
        for alternative, text in hints:
            if alternative.shape == got.shape and rel_error(got, alternative) <= TOL:
                msg += f"\n  hint: {text}"
                break
        raise WrongAnswer(msg)
    return err_ref, err_num


def report_correct(errors: dict) -> bool:
    """Print 'correct' and one line per checked array with its errors; return True."""
    width = max(len(n) for n in errors)
    lines = [tr("correct")]
    for name, (err_ref, err_num) in errors.items():
        line = tr(f"  {name:<{width}}  max rel error {err_ref:.1e} vs the reference")
        if err_num is not None:
            line += tr(f", {err_num:.1e} vs the numerical gradient")
        lines.append(line)
    say("\n".join(lines))
    return True


def check_count(what, got, expected, hints=()) -> None:
    """An integer answer (a parameter or FLOP count). hints: (wrong value, text) pairs."""
    if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
        raise WrongAnswer(tr(f"{what}: expected an int, got {describe(got)}"))
    if int(got) != expected:
        msg = tr(f"{what}: expected {expected:,}, got {int(got):,} (off by {int(got) - expected:+,})")
        for wrong, text in hints:
            if int(got) == wrong:
                msg += f"\n  hint: {text}"
                break
        raise WrongAnswer(msg)


def copy_all(*arrays):
    return tuple(a.copy() for a in arrays)


def sizes(rng, visible_sizes: tuple, low: int = 2, high: int = 5) -> tuple:
    """The visible case's sizes, or (a hidden case) as many sizes drawn from [low, high]."""
    if visible():
        return visible_sizes
    return tuple(int(n) for n in rng.integers(low, high + 1, size=len(visible_sizes)))


def built(fn, builder, state, local=None):
    """An input that must live where the learner's function runs: here (a notebook) ``local``, or
    ``builder(state)``; when ``fn`` is the grader's stand-in for a function in a student's kernel, the
    recipe to build it there (``lessonkit.wire.Built``; arrays in ``state`` keep their identity with the
    other inputs, and what the function writes into them comes back)."""
    if getattr(fn, "remote", False):
        return Built(f"{builder.__module__}:{builder.__qualname__}", state)
    return builder(state) if local is None else local


def drive(fn, driver, *args):
    """``driver(fn, *args)``, run where ``fn`` lives: here, or in the student's kernel (lesson 14's
    simulated ranks, lesson 12's planted model), whose result comes back as plain data."""
    if getattr(fn, "remote", False):
        return fn.drive(driver, *args)
    return driver(fn, *args)
