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
notebook does not display, and reports it to the grader when one runs the notebook.
Exercises are numbered "Exercise L.n" (lesson L, n-th exercise) in every lesson, and
listed with their points in ``catalogue``.
"""

from __future__ import annotations

import numpy as np

from minitransformer import backend
from minitransformer.gradcheck import DEFAULT_TOL, rel_error

from ._verdict import Verdict, WrongAnswer, exercise

__all__ = ["NOT_ATTEMPTED", "TOL", "Verdict", "WrongAnswer", "exercise"]

NOT_ATTEMPTED = "not attempted yet: fill in the cell above and run this cell again"
# One tolerance for every checker, against the reference and against the numerical
# gradient alike: gradcheck's (a right float64 backward is near 1e-9 or below).
TOL = DEFAULT_TOL


def not_attempted(result) -> bool:
    """True (after printing NOT_ATTEMPTED) if the learner's function returned None."""
    if result is None:
        print(NOT_ATTEMPTED)
        return True
    return False


def describe(value) -> str:
    """A short description of what arrived, for error messages."""
    if hasattr(value, "shape"):
        return f"an array of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"{type(value).__name__} {value!r}"[:80]


def unpack(result, names):
    """The learner's tuple of len(names) results, or a WrongAnswer saying what came instead."""
    if not isinstance(result, (tuple, list)) or len(result) != len(names):
        raise WrongAnswer(f"expected a tuple of {len(names)} arrays ({', '.join(names)}), got {describe(result)}")
    return list(result)


def as_array(name, value):
    """The learner's answer as a host NumPy array, or a WrongAnswer saying why not."""
    if value is None:
        raise WrongAnswer(f"{name} is None: return an array for it")
    try:
        return np.asarray(backend.to_numpy(value))
    except Exception as exc:
        raise WrongAnswer(f"{name}: expected an array, got {describe(value)}") from exc


def check_array(name, got, reference, numeric=None, hints=()):
    """Compare one returned array with the reference (and the numerical gradient).

    hints: (alternative, text) pairs; if ``got`` matches ``alternative`` (a wrong answer
    someone often writes) to within TOL, ``text`` is added to the error message.
    Returns (error vs reference, error vs numerical gradient or None).
    """
    got = as_array(name, got)
    if got.shape != reference.shape:
        msg = f"{name}: shape mismatch: expected {tuple(reference.shape)}, got {tuple(got.shape)}"
        for alternative, text in hints:
            if alternative.shape == got.shape and rel_error(got.astype(np.float64), alternative) <= TOL:
                msg += f"\n  hint: {text}"
                break
        else:
            if sorted(got.shape) == sorted(reference.shape):
                msg += "\n  hint: the same sizes in another order: check which axes you transposed or swapped"
        raise WrongAnswer(msg)
    if got.dtype.kind not in "fiu":
        raise WrongAnswer(f"{name}: expected a float array, got dtype {got.dtype}")
    got = got.astype(np.float64)
    if not np.all(np.isfinite(got)):
        raise WrongAnswer(f"{name}: contains NaN or inf")
    err_ref = rel_error(got, reference)
    err_num = rel_error(got, numeric) if numeric is not None else None
    if err_ref > TOL or (err_num is not None and err_num > TOL):
        msg = f"{name}: wrong values: max relative error {err_ref:.2e} vs the reference"
        if err_num is not None:
            msg += f" and {err_num:.2e} vs the numerical gradient"
        msg += f" (tolerance {TOL:.0e})"
        for alternative, text in hints:
            if alternative.shape == got.shape and rel_error(got, alternative) <= TOL:
                msg += f"\n  hint: {text}"
                break
        raise WrongAnswer(msg)
    return err_ref, err_num


def report_correct(errors: dict) -> bool:
    """Print 'correct' and one line per checked array with its errors; return True."""
    width = max(len(n) for n in errors)
    lines = ["correct"]
    for name, (err_ref, err_num) in errors.items():
        line = f"  {name:<{width}}  max rel error {err_ref:.1e} vs the reference"
        if err_num is not None:
            line += f", {err_num:.1e} vs the numerical gradient"
        lines.append(line)
    print("\n".join(lines))
    return True


def check_count(what, got, expected, hints=()) -> None:
    """An integer answer (a parameter or FLOP count). hints: (wrong value, text) pairs."""
    if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
        raise WrongAnswer(f"{what}: expected an int, got {describe(got)}")
    if int(got) != expected:
        msg = f"{what}: expected {expected:,}, got {int(got):,} (off by {int(got) - expected:+,})"
        for wrong, text in hints:
            if int(got) == wrong:
                msg += f"\n  hint: {text}"
                break
        raise WrongAnswer(msg)


def copy_all(*arrays):
    return tuple(a.copy() for a in arrays)
