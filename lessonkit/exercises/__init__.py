"""Checking functions for the exercises at the end of each lesson notebook.

``lessons_0_3`` checks the exercises of lessons 0-3, ``lessons_4_7`` those of
lessons 4-7, and ``lesson_NN`` those of lesson NN from lesson 8 on; ``_common``
holds what they share (one contract, one tolerance), ``_verdict`` what a checker
returns and how its verdict reaches the grader, and ``catalogue`` the table of every
exercise with its points, and ``_cases`` which inputs a checker builds (the visible case, or a
hidden one the grader draws). Every checker takes the learner's function and runs it on
fixed random inputs. It prints "not attempted yet" and returns a false Verdict when
the function still returns None, raises WrongAnswer (an AssertionError) naming what
is wrong, with a hint at the likely mistake, when the answer is wrong, and prints
"correct" with the measured errors and returns a true Verdict when it is right.
"""

from __future__ import annotations

__all__ = ["registered"]


def registered() -> dict:
    """Every checker, by "module.name" (e.g. "lessons_0_3.check_softmax_backward"), once every
    checker module is imported (imported here, on first use, not with the package)."""
    from . import (  # noqa: F401, PLC0415
        _verdict,
        lesson_08,
        lesson_09,
        lesson_10,
        lesson_11,
        lesson_12,
        lesson_13,
        lesson_14,
        lesson_15,
        lessons_0_3,
        lessons_4_7,
    )
    return dict(_verdict._CHECKERS)
