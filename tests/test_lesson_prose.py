"""Prose that cannot go stale (issue 22): the helpers a lesson states a measured number with, and
the committed notebooks' checking cells, which report in words and never echo a bare True/False."""

import json
import math

import pytest
from lesson_exercises import LESSONS, build

from lessonkit import prose

FOUND = build.lessons(LESSONS)


def test_a_claim_that_holds_returns_nothing_so_its_cell_shows_nothing():
    """A claim on the last line of a cell would echo a returned value under it (lesson 14 once showed a
    stray 8); a claim that holds returns None, which a notebook does not display."""
    assert prose.claim("the loss levels off near 0.95", 0.97, 0.95, tol=0.05) is None
    assert prose.claim("above 50%", 0.51, low=0.5) is None
    assert prose.claim("between 1e-6 and 1e-4", 2e-5, low=1e-6, high=1e-4) is None
    assert prose.claim("within 10% of 200", 219.0, 200, tol=0.1, rel=True) is None
    assert prose.claim_true("holds", True) is None


@pytest.mark.parametrize("args, kwargs, said", [
    ((1.2108, 1.26), {"tol": 0.02}, "the prose says 1.26 ± 0.02"),
    ((0.45,), {"low": 0.5}, "at least 0.5"),
    ((3.0,), {"high": 2.0}, "at most 2"),
    ((221.0, 200), {"tol": 0.1, "rel": True}, "200 ± 20"),
    ((math.nan,), {"low": 0.0}, "not finite"),
])
def test_a_claim_that_drifted_names_the_sentence_the_value_and_the_tolerance(args, kwargs, said):
    with pytest.raises(AssertionError) as caught:
        prose.claim("the sentence under test", *args, **kwargs)
    message = str(caught.value)
    assert "'the sentence under test' no longer holds" in message and said in message
    assert f"measured {args[0]:g}" in message and "Rewrite the sentence" in message


def test_a_claim_must_state_how_far_its_number_may_drift():
    with pytest.raises(ValueError, match="needs a tolerance"):
        prose.claim("near 0.95", 0.95, 0.95)
    with pytest.raises(ValueError, match="give expected and tol, or low / high"):
        prose.claim("something", 1.0)
    with pytest.raises(TypeError, match="must be a number, got str"):
        prose.claim("a number", "0.95", low=0)


def test_claim_true_states_a_comparison():
    prose.claim_true("beam search fixes more than it breaks", 10 > 0)
    with pytest.raises(AssertionError, match="'greedy is shorter' no longer holds: 5 against 4"):
        prose.claim_true("greedy is shorter", 5 < 4, "5 against 4")


def test_a_rendered_sentence_prints_outside_a_notebook(capsys):
    prose.show_markdown("Random batches are **38% padding**.")
    assert capsys.readouterr().out == "Random batches are **38% padding**.\n"
    assert prose.Markdown("*x*")._repr_markdown_() == "*x*"


def _echoes(cell) -> list[str]:
    """The bare True/False a cell displays as its value (an execute_result), if any."""
    found = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "execute_result":
            text = "".join(output.get("data", {}).get("text/plain", ""))
            if text.strip() in ("True", "False", "np.True_", "np.False_"):
                found.append(text.strip())
    return found


@pytest.mark.parametrize("number", sorted(FOUND))
def test_no_cell_of_a_committed_notebook_echoes_true_or_false(number):
    """A checker reports in words (correct / not attempted yet / WrongAnswer); the Verdict it returns
    displays as nothing, so a checking cell shows no True/False under its message. No other cell
    shows a bare True/False either: a claim the lesson makes is an assert, not an echoed boolean."""
    nb = json.loads(build.notebook_path(FOUND[number]).read_text(encoding="utf-8"))
    echoed = [(i, e) for i, cell in enumerate(nb["cells"]) for e in _echoes(cell)]
    assert not echoed, f"lesson {number}: cells echo a bare boolean: {echoed}"


def test_the_echo_check_can_fail():
    cell = {"outputs": [{"output_type": "execute_result", "data": {"text/plain": "False"}}]}
    assert _echoes(cell) == ["False"]
    assert _echoes({"outputs": [{"output_type": "stream", "text": "correct\n"}]}) == []
