"""Prose that cannot go stale: the two ways a lesson states a number it measures.

A number a lesson measures appears in its prose only if it is computed (lessons/src/README.md,
"Numbers in prose"). Either

* the sentence is rendered from the run's variables, in a code cell::

      show_markdown(f"Random batches are **{pad:.0%} padding** ...")

  (in a notebook it shows as Markdown, like a markdown cell; elsewhere it prints the text), or

* a typed sentence is followed by an assert that fails when the number drifts outside a stated
  tolerance::

      claim("the loss levels off near 0.95", loss, 0.95, tol=0.05)

  ``claim`` also takes ``low``/``high`` bounds (``claim("above 50%", acc, low=0.5)``), and
  ``claim_true`` a statement that is a comparison ("beam search fixes more than it breaks").

A failed claim names the sentence, the value this run measured and the tolerance, so whoever
changed the code knows which sentence to rewrite.

In a translated edition (``lessonkit.i18n``) each of the three shows its sentence in
the edition's language, from the lesson's translation file: the code stays the English code.
"""

from __future__ import annotations

import math
import sys

from .i18n import tr, translate_argument

__all__ = ["Markdown", "claim", "claim_true", "show_markdown"]


class Markdown:
    """Text that a notebook displays as Markdown (``_repr_markdown_``) and a terminal as plain text.

    ``lessons/build.py`` writes the same output for a cell it re-renders (the runtime cells), so the
    output of a display is always ``{"text/markdown": text, "text/plain": text}``."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


def show_markdown(text: str) -> None:
    """Display ``text`` as Markdown in a notebook (print it elsewhere). Use it for a sentence whose
    numbers come from the run: ``show_markdown(f"... {value:.1%} ...")``."""
    text = translate_argument(sys._getframe(1), text)      # the edition's language (i18n)
    try:
        from IPython import get_ipython  # noqa: PLC0415
        from IPython.display import display  # noqa: PLC0415
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(Markdown(text))
    else:
        print(text)


def _number(value) -> float:
    if isinstance(value, (str, bytes)):         # float("0.95") works, but a measured value is never text
        raise TypeError(f"claim: the measured value must be a number, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"claim: the measured value must be a number, got {type(value).__name__} {value!r}") from None


def claim(sentence: str, value, expected=None, tol=None, *, low=None, high=None, rel: bool = False) -> None:
    """Assert that the prose's ``sentence`` still describes ``value``. Returns nothing, so a claim that
    holds shows nothing under its cell (the last line of a cell would otherwise echo the value).

    ``expected`` and ``tol``: |value − expected| ≤ tol (``rel=True``: tol × |expected|);
    ``low`` / ``high``: value ≥ low, value ≤ high. Give one form or both; a tolerance is required
    with ``expected`` (a claim must say how far the number may drift)."""
    sentence = translate_argument(sys._getframe(1), sentence)
    v = _number(value)
    if expected is None and low is None and high is None:
        raise ValueError(f"claim {sentence!r}: give expected and tol, or low / high")
    if expected is not None and tol is None:
        raise ValueError(f"claim {sentence!r}: a stated number needs a tolerance (tol=...)")
    problems = []
    if not math.isfinite(v):
        problems.append(tr("it is not finite"))
    if expected is not None:
        bound = tol * abs(expected) if rel else tol
        if not abs(v - expected) <= bound:
            problems.append(tr(f"the prose says {expected:g} ± {bound:g}"))
    if low is not None and not v >= low:
        problems.append(tr(f"the prose needs at least {low:g}"))
    if high is not None and not v <= high:
        problems.append(tr(f"the prose needs at most {high:g}"))
    if problems:
        raise AssertionError(tr(f"the sentence {sentence!r} no longer holds: this run measured {v:g}, and ")
                             + "; ".join(problems) + tr(". Rewrite the sentence (or render it from the run)."))


def claim_true(sentence: str, holds, detail: str = "") -> None:
    """Assert that a statement of the prose (a comparison computed from the run) still holds."""
    sentence = translate_argument(sys._getframe(1), sentence)
    if not holds:
        raise AssertionError(tr(f"the sentence {sentence!r} no longer holds") + (f": {detail}" if detail else "")
                             + tr(". Rewrite the sentence (or render it from the run)."))
