"""Which case a checker builds: the visible one a notebook shows, or a hidden one the grader draws.

In a notebook a checker always builds its **visible** case: fixed, seeded inputs, the same on every
run, whose expected values the checking cell may show. The grader (``lessonkit.judge``) runs the same
checker in its own process on **hidden** cases as well: inputs drawn from a seed the notebook never
sees (other sizes, other values), and each checker's edge cases, the inputs on which a plausible
wrong answer and the right one part. A checker asks

* ``case_rng(seed)``: the generator of its inputs (visible: ``default_rng(seed)``; hidden: one drawn
  from the grader's secret seed, the case's number and ``seed``);
* ``visible()``: whether it builds the visible case (then it uses its fixed sizes);
* ``edge(options)``: hidden case k gets ``options[k % len(options)]`` (the visible case gets none).

``hidden_case(seed, k)`` makes the cases while a block runs; the case travels with the thread's
context (``contextvars``), so a grader that judges several notebooks at once keeps them apart.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass

import numpy as np

__all__ = ["Case", "case_rng", "edge", "hidden_case", "visible"]


@dataclass(frozen=True)
class Case:
    hidden: bool = False
    index: int = 0            # the hidden case's number, 0, 1, ...
    seed: int = 0             # the grader's secret seed (hidden cases only)


_VISIBLE = Case()      # frozen: safe as the default of every context
_CURRENT: contextvars.ContextVar[Case] = contextvars.ContextVar("case", default=_VISIBLE)


def current() -> Case:
    return _CURRENT.get()


def visible() -> bool:
    """True while a checker builds its visible case (always, in a notebook)."""
    return not _CURRENT.get().hidden


def case_rng(seed: int) -> np.random.Generator:
    """The generator a checker draws its inputs from: ``default_rng(seed)`` for the visible case."""
    case = _CURRENT.get()
    if not case.hidden:
        return np.random.default_rng(seed)
    return np.random.default_rng([case.seed, case.index, seed])


def edge(options):
    """The edge case this hidden case must include (``None`` for the visible case)."""
    case = _CURRENT.get()
    if not case.hidden or not options:
        return None
    return options[case.index % len(options)]


@contextlib.contextmanager
def hidden_case(seed: int, index: int):
    """Inside the block, checkers build hidden case ``index`` of the secret ``seed``."""
    token = _CURRENT.set(Case(True, index, seed))
    try:
        yield
    finally:
        _CURRENT.reset(token)
