"""Predict, then see: the reveal cell that compares a learner's prediction with what the run gives.

A lesson asks for a prediction before a result that intuition tends to get wrong. The learner writes
it into a cell tagged ``predict`` (``my_prediction_3_1 = None``: a number, a word of a few choices, or a
tuple); the cell tagged ``reveal`` after it computes the result and calls::

    reveal(my_prediction_3_1, share, what="the FFN's share of an encoder layer's parameters")
    reveal(my_prediction_11_1, "rises" if ... else "falls", what="...", choices=("rises", "falls"))

which shows the prediction beside the result, and how close it came (a number within 10%, within a factor
of 3, or further; a choice right or not), in the edition's language (its own sentences are in
lessonkit/ko.toml; ``what`` is looked up in the lesson's translation file as it is). Nothing is scored:
under the grader each prediction and its result are listed in the student's feedback file, for the
teacher's rubric (docs/teachers.md).
"""

from __future__ import annotations

import math
import numbers

from .i18n import tr, tr_label
from .prose import show_markdown

__all__ = ["reveal"]


def _show(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return f"{int(value):,}"
    return str(value)


def _how_close(prediction, actual, choices) -> str:
    if choices is not None or isinstance(actual, str):
        right = str(prediction).strip().lower() == str(actual).strip().lower()
    elif isinstance(actual, tuple) or isinstance(prediction, (tuple, list)):
        right = tuple(prediction) == tuple(actual)
    else:
        try:
            p, a = float(prediction), float(actual)
        except (TypeError, ValueError):
            return tr("(the prediction is not a number, so it cannot be compared)")
        if a != 0 and p != 0:
            ratio = p / a
            if ratio < 0:
                return tr("The sign is wrong.")
            if abs(ratio - 1) <= 0.1:
                return tr("Within 10%.")
            if 1 / 3 <= ratio <= 3:
                return tr("Within a factor of 3.")
            factor = max(ratio, 1 / ratio)
            return tr(f"Off by a factor of {factor:.3g}.")
        right = p == a
    return tr("Right.") if right else tr("Not this time.")


def reveal(prediction, actual, *, what: str, choices: tuple | None = None) -> None:
    """Show ``actual`` (the result the run gives: ``what``) beside the learner's ``prediction``."""
    result = f"**{tr_label(what)}: {_show(actual)}.**"
    shown = _show(prediction)
    if prediction is None:
        text = tr("No prediction written in the cell above (write one, then run this cell again).") + f" {result}"
    elif choices is not None and str(prediction).strip().lower() not in {str(c).lower() for c in choices}:
        options = ", ".join(map(str, choices))
        text = tr(f"You predicted {shown}, which is not one of {options}.") + f" {result}"
    else:
        text = tr(f"You predicted {shown}.") + f" {result} {_how_close(prediction, actual, choices)}"
    show_markdown(text)
    _note(what, prediction, actual)


def _note(what: str, prediction, actual) -> None:
    """Under the grader, keep the prediction for the student's feedback file."""
    from . import kernel  # noqa: PLC0415  (the grader's harness; idle in a notebook)

    kernel.note_prediction(what, _show(prediction) if prediction is not None else None,
                           _show(actual) if not (isinstance(actual, float) and math.isnan(actual)) else "nan")
