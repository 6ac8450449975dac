"""The judge: an exercise's checker, run in the grader's process on an answer that lives in the kernel.

A checker's body (``checker.__wrapped__``) takes the learner's function and calls it. Here it is
handed a ``Remote`` instead: calling it sends the inputs to the student's kernel as plain data
(``lessonkit.wire``), where ``lessonkit.kernel.call`` runs the student's function, and returns the
outputs, plain data again. Everything else the checker does, building the references, comparing
with the tolerance, naming the mistake, happens here, in a process the student's code never shares,
with the checkers imported before any notebook ran. A notebook that changes a tolerance, a checker's
code or a module the checkers use changes its own kernel, not this process.

``judge()`` runs the visible case (the notebook's fixed inputs) and then ``HIDDEN_CASES`` hidden
ones (``_cases``: other sizes and values from the grader's secret seed, and each checker's edge
cases). The answer is

* ``correct``: the visible case and every hidden case are right (all the points);
* ``partial``: the visible case and some hidden cases (points × the share of hidden cases right);
* ``wrong``: the visible case, or every hidden case, is wrong (no points; the hint of the first);
* ``uses the package``: while it ran, the package's own answer to this exercise ran (no points);
* ``error`` / ``timeout`` / ``not attempted`` / ``tampered``: it raised, ran over the time limit,
  still returns None, or the kernel's side of the grading did not answer as it must.

What the student reads (``Judgement.detail``) never holds an expected value of a hidden case: only
the hint line of a checker's message. The whole message goes to the teacher (``message``).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass

import numpy as np

from . import wire
from .exercises._cases import hidden_case
from .exercises._common import SINK
from .exercises._verdict import WrongAnswer, one_line

__all__ = ["HIDDEN_CASES", "CallTimedOut", "Judgement", "KernelLost", "Remote", "Tampered", "UsesPackage", "judge"]

HIDDEN_CASES = 4


class UsesPackage(BaseException):
    """The package's own answer ran inside the student's function (a BaseException: no checker's
    ``except Exception`` may take it for the student's own error)."""


class Tampered(BaseException):
    """The kernel's side of grading did not answer as it must (its hook removed, its reply malformed)."""


class CallTimedOut(BaseException):
    """The student's function ran over the time limit and was interrupted."""


class KernelLost(BaseException):
    """The kernel died, or ignored an interrupt: nothing more can be asked of it."""


class StudentError(Exception):
    """An exception of the student's code whose type is not one of Python's own: its name and message."""

    def __init__(self, type_name: str, message: str):
        super().__init__(message)
        self.type_name = type_name


class Remote:
    """The student's function, in the kernel. ``send(request text) -> reply text`` does the round
    trip (raising CallTimedOut or KernelLost); the checker calls this object as it would the function."""

    remote = True             # _common.built / drive: inputs are built, and drivers run, in the kernel

    def __init__(self, send, exercise: str):
        self._send, self.exercise = send, exercise

    def __call__(self, *args, **kwargs):
        return self._go(None, args, kwargs)

    def drive(self, driver, *args):
        """``driver(student_function, *args)`` run in the kernel (lesson 14's ranks, lesson 12's plant)."""
        return self._go(f"{driver.__module__}:{driver.__qualname__}", args, {})

    def _go(self, driver: str | None, args, kwargs):
        arrays: list = []
        request = wire.encode({"args": list(args), "kwargs": dict(kwargs), "driver": driver,
                               "exercise": self.exercise}, arrays=arrays)
        try:
            reply = wire.decode(self._send(request))
        except wire.WireError as exc:
            raise Tampered(f"the kernel's reply was not plain data ({exc})") from None
        if not isinstance(reply, dict) or not isinstance(reply.get("hook"), bool) \
                or not isinstance(reply.get("changed", {}), dict):
            raise Tampered("the kernel's reply was not what the grader's harness writes")
        if reply.get("package"):
            raise UsesPackage(str(reply["package"]))
        if not reply["hook"]:
            raise Tampered("the student's function removed the grader's profile hook while it ran")
        for index, new in reply.get("changed", {}).items():     # what the function wrote into its inputs
            i = int(index) if isinstance(index, str) and index.isdigit() else -1
            if 0 <= i < len(arrays) and isinstance(new, np.ndarray) and new.shape == arrays[i].shape \
                    and arrays[i].flags.writeable:
                arrays[i][...] = new
        raised = reply.get("raised")
        if raised is not None:
            _reraise(raised)
        return reply.get("value")


def _reraise(raised) -> None:
    if not isinstance(raised, dict):
        raise Tampered("a malformed exception in the kernel's reply")
    name, message = str(raised.get("type", "Exception")), str(raised.get("message", ""))
    if name == "KeyboardInterrupt":
        raise CallTimedOut("interrupted")
    kind = getattr(builtins, name, None) if raised.get("builtin") else None
    if isinstance(kind, type) and issubclass(kind, Exception) and kind is not WrongAnswer:
        try:
            exc = kind(message)
        except Exception:  # noqa: BLE001 - a builtin exception that wants other arguments
            exc = StudentError(name, message)
    else:
        exc = StudentError(name, message)
    exc.numpy_broadcast = bool(raised.get("broadcast"))
    raise exc


def error_line(exc: BaseException) -> str:
    if isinstance(exc, StudentError):
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"{exc.type_name}: {first}" if first else exc.type_name
    return one_line(exc)


@dataclass
class Judgement:
    exercise: str
    status: str                  # correct, partial, wrong, uses the package, error, timeout, tampered, not attempted
    fraction: float = 0.0        # of the exercise's points
    detail: str = ""             # one line for the student: the hint, the error, the package's function
    message: str = ""            # everything the checker said (for the teacher)
    hidden: tuple[int, int] = (0, 0)   # hidden cases right, hidden cases run


def _hint(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("hint:")), "")


def _run_once(body, template: str, number: str, answer):
    """One run of the checker body: (status, message, detail)."""
    said: list = []
    token = SINK.set(said)
    errstate = np.errstate(all="ignore")     # a wrong answer's inf or nan is the checker's to name
    errstate.__enter__()
    try:
        if "{" in template:
            done = body(int(number.split(".")[1]), answer)
        else:
            done = body(answer)
        return ("correct" if done is True else "not attempted"), "".join(said), ""
    except WrongAnswer as exc:
        text = str(exc)
        return "wrong", text, _hint(text) or (text.strip().splitlines() or [""])[0]
    except UsesPackage as exc:
        return "uses the package", str(exc), f"uses the package's own `{exc}`: write it yourself"
    except Tampered as exc:
        return "tampered", str(exc), str(exc)
    except CallTimedOut:
        return "timeout", "", "the function ran over the time limit and was interrupted"
    except KernelLost:
        raise
    except Exception as exc:  # noqa: BLE001 - the student's code raised (or the checker met an input it rejects)
        return "error", error_line(exc), error_line(exc)[:300]
    finally:
        errstate.__exit__(None, None, None)
        SINK.reset(token)


def judge(number: str, checker, answer, *, seed: int, hidden: int = HIDDEN_CASES) -> Judgement:
    """Judge one answer to exercise ``number`` (see the module docstring). ``answer``: a Remote, or
    the plain value of a value exercise (12.1-12.3)."""
    body, template = checker.__wrapped__, checker.exercise
    status, message, detail = _run_once(body, template, number, answer)
    if status != "correct":
        if status == "not attempted":
            detail = "the stub still returns None"
        return Judgement(number, status, 0.0, detail, message)
    if "{" in template:                     # a value answer: there is nothing to vary
        return Judgement(number, "correct", 1.0, "", message)
    right, failures = 0, []
    for k in range(hidden):
        with hidden_case(seed, k):
            h_status, h_message, h_detail = _run_once(body, template, number, answer)
        if h_status == "correct":
            right += 1
            continue
        if h_status in ("uses the package", "tampered"):
            return Judgement(number, h_status, 0.0, h_detail, h_message, (right, k + 1))
        failures.append((k, h_status, h_message, h_detail))
        if h_status == "timeout":           # each would cost the whole limit again
            failures += [(j, "timeout", "", "not run after a timeout") for j in range(k + 1, hidden)]
            break
    report = "\n".join(f"hidden case {k + 1}: {s}: {m}" for k, s, m, _ in failures)
    if not failures:
        return Judgement(number, "correct", 1.0, "", message, (right, hidden))
    k, h_status, _, h_detail = failures[0]
    what = h_detail if h_status == "wrong" and h_detail.startswith("hint:") else \
        "a wrong answer (try your function on other sizes and values than the notebook's)" if h_status == "wrong" \
        else h_detail
    detail = f"{right} of {hidden} hidden cases right; hidden case {k + 1}: {what}"
    status = "partial" if right else ("wrong" if h_status in ("wrong", "not attempted") else h_status)
    return Judgement(number, status, right / hidden, detail, report, (right, hidden))
