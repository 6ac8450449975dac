"""What a checker returns, and how the grader finds the answer it was given.

Every checker is wrapped by ``@exercise("L.n")`` (``"12.{0}"``: the number comes from the
checker's first argument, an int). The wrapped checker

* returns a ``Verdict``: ``correct``, or ``not attempted`` while the stub still returns
  None. A Verdict is true only when correct, and a notebook shows nothing for it: the
  checker has already printed what it found, so a checking cell does not echo True/False
  under its message;
* re-raises what the checker body raised: ``WrongAnswer`` (an AssertionError) for a wrong
  answer, with the checker's ``hint:`` line, or any other exception, which came from the
  learner's code (an error).

In a notebook, nothing else happens, and nothing a checker says in a notebook counts for a grade.
Under ``python -m minitransformer grade`` the kernel has been armed (``lessonkit.kernel.start``)
before the first cell: the wrapper then also registers the answer it was given (its last
argument: the learner's function, or the value of a value exercise), and the grader, in its own
process, runs the same checker's body on that answer, on the visible case and on hidden ones
(``lessonkit.judge``). The checker's body is ``checker.__wrapped__``; the grader imported it
before any notebook ran, so a notebook that changes the checkers changes only its own kernel.
"""

from __future__ import annotations

import functools
import types

from .. import kernel as _kernel

__all__ = ["STATUSES", "Verdict", "WrongAnswer", "exercise"]

STATUSES = ("correct", "wrong", "not attempted", "error")


class WrongAnswer(AssertionError):
    """A checker's finding that the answer is wrong: what is wrong, and a ``hint:`` line when
    the answer matches a common mistake. (Any other exception came from the learner's code.)"""


class Verdict:
    """What a checker returns: ``exercise`` ("1.3"), ``status`` (one of STATUSES), ``message``."""

    __slots__ = ("exercise", "status", "message")

    def __init__(self, exercise: str, status: str, message: str = ""):
        self.exercise, self.status, self.message = exercise, status, message

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def __bool__(self) -> bool:
        return self.correct

    def __repr__(self) -> str:
        return f"Verdict({self.exercise!r}, {self.status!r})"

    def _ipython_display_(self) -> None:
        """Show nothing: the checker has printed its finding above."""


_CHECKERS: dict[str, types.FunctionType] = {}     # "lessons_0_3.check_softmax_backward" -> wrapped checker


def one_line(exc: BaseException) -> str:
    """``TypeName: first line of the message``, for an error report."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def exercise(number: str):
    """Decorator: the checker of Exercise ``number`` ("1.1", or "12.{0}" for a checker that
    takes the exercise's number as its first argument). See the module docstring."""

    def wrap(check):
        @functools.wraps(check)
        def checker(*args, **kwargs):
            if "{" in number:
                exercise_id = number.format(args[0]) if args and type(args[0]) is int else number.format("?")
            else:
                exercise_id = number
            if args:                                  # under the grader: note the answer (a no-op otherwise)
                _kernel.register(exercise_id, args[-1])
            done = check(*args, **kwargs)
            return Verdict(exercise_id, "correct" if done is True else "not attempted")

        checker.exercise = number
        _CHECKERS[f"{check.__module__.rsplit('.', 1)[-1]}.{check.__name__}"] = checker
        return checker

    return wrap
