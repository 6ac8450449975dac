"""The judge of the grader, run in this process on answers that are local functions: the same round
trip as a notebook's (the request and the reply go through lessonkit.wire and lessonkit.kernel.call,
with its profile hook), without a kernel. For the tests of the checkers' hidden cases, the planted
wrong answers and the package-answer rule."""

from __future__ import annotations

import contextlib

from lessonkit import judge, kernel, wire
from lessonkit.exercises import catalogue, registered

CHECKERS = {name.split(".", 1)[1]: c for name, c in registered().items()}
BY_NUMBER = {e.number: CHECKERS[e.checker.split(".", 1)[1]] for e in catalogue.EXERCISES}


@contextlib.contextmanager
def armed():
    """lessonkit.kernel started in this process (as the grader starts it in a kernel); undone after."""
    previous = kernel._state.session
    kernel.start()
    try:
        yield
    finally:
        kernel._state.session = previous


def judged(number: str, answer, seed: int = 0, hidden: int = judge.HIDDEN_CASES) -> judge.Judgement:
    """Judge ``answer`` (a function, or the value of a value exercise) as the grader does."""
    with armed():
        if "{" in BY_NUMBER[number].exercise:
            return judge.judge(number, BY_NUMBER[number], wire.decode(wire.encode(answer, plain=True)),
                               seed=seed, hidden=hidden)
        kernel.register(number, answer)
        index = len(kernel._state.session.candidates) - 1
        remote = judge.Remote(lambda request: kernel.call(index, request), number)
        return judge.judge(number, BY_NUMBER[number], remote, seed=seed, hidden=hidden)
