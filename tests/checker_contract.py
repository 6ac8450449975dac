"""The four tests every lesson's exercise checkers get (see lessonkit/exercises/_common.py).

A test file builds ``CASES = {checker name: (a right answer, [(label, wrong answer,
regex of the message it must get), ...])}`` and then takes the tests with

    (test_every_checker_has_cases, test_correct_answer_passes,
     test_stub_is_not_attempted, test_wrong_answer_gets_its_hint) = contract_tests(ex, CASES)

pytest collects them as the module's own tests.
"""

from __future__ import annotations

import pytest

from lessonkit.exercises._common import WrongAnswer


def stub(*args, **kwargs):
    """What the learner's cell returns before it is filled in."""
    return None


def contract_tests(ex, cases: dict):
    """The contract of _common, for checker module ``ex`` and its ``cases``."""

    def test_every_checker_has_cases():
        assert sorted(cases) == sorted(n for n in ex.__all__ if n.startswith("check_"))

    @pytest.mark.parametrize("name", sorted(cases))
    def test_correct_answer_passes(name, capsys):
        correct, _ = cases[name]
        verdict = getattr(ex, name)(correct)
        assert verdict.status == "correct" and verdict, verdict
        assert capsys.readouterr().out.startswith("correct")

    @pytest.mark.parametrize("name", sorted(cases))
    def test_stub_is_not_attempted(name, capsys):
        verdict = getattr(ex, name)(stub)                             # a false verdict, no exception
        assert verdict.status == "not attempted" and not verdict, verdict
        assert ex.NOT_ATTEMPTED in capsys.readouterr().out

    @pytest.mark.parametrize(
        "name, wrong, pattern",
        [pytest.param(name, wrong, pattern, id=f"{name}: {label}")
         for name, (_, wrongs) in sorted(cases.items()) for label, wrong, pattern in wrongs],
    )
    def test_wrong_answer_gets_its_hint(name, wrong, pattern):
        with pytest.raises(WrongAnswer, match="(?s)" + pattern):      # (?s): "." also matches the hint line
            getattr(ex, name)(wrong)

    return (test_every_checker_has_cases, test_correct_answer_passes, test_stub_is_not_attempted,
            test_wrong_answer_gets_its_hint)
