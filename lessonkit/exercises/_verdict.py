"""What a checker returns, and how its verdict reaches the grader.

Every checker is wrapped by ``@exercise("L.n")`` (``"12.{0}"``: the number comes from the
checker's first argument, an int). The wrapped checker

* returns a ``Verdict``: ``correct``, or ``not attempted`` while the stub still returns
  None. A Verdict is true only when correct, and a notebook shows nothing for it: the
  checker has already printed what it found, so a checking cell does not echo True/False
  under its message;
* re-raises what the checker body raised: ``WrongAnswer`` (an AssertionError) for a wrong
  answer, with the checker's ``hint:`` line, or any other exception, which came from the
  learner's code (an error).

In a notebook, nothing else happens. Under ``python -m minitransformer grade`` the grader
calls ``lessonkit.exercises.arm()`` before the notebook's first cell, out of the
notebook's sight, and ``seal()`` after its last. From ``arm()`` on, every verdict is also written to a file the
grader reads, one line each, signed with a key only the grader and this module hold (an
HMAC over the line). What the notebook prints never counts.

The threat model (docs/teachers.md says the same to teachers). Grading runs the
student's code in the kernel, next to the checkers, so it cannot be made proof against
everything; it closes what a student can do without attacking the grader itself:

* printing "correct", or editing the outputs of the submitted file: the grader executes
  the notebook afresh and reads only the signed file;
* redefining, wrapping or deleting a checker in the notebook: a redefined checker writes
  nothing, and ``seal()`` names every checker name the notebook rebound;
* writing lines into the file: they carry no valid signature;
* calling this module directly (a fake ``@exercise`` checker, or the recorder itself):
  the recorder accepts a verdict only from the wrapper of a checker that existed when
  grading began, checked by the caller's frame;
* patching the package, NumPy, ``math`` or the builtins so that a checker's comparison
  passes: their functions are fingerprinted at ``arm()``, and a verdict given while any
  differs, or while a trace/profile hook is set, is marked not intact and earns nothing.

It does not close introspection of this module's closures (the signing key lives in one),
patching C-level state through ctypes, or anything outside the kernel: the code runs with
the grader's permissions, so grade in a container or under a throwaway account.
"""

from __future__ import annotations

import functools
import sys
import types

__all__ = ["STATUSES", "Verdict", "WrongAnswer", "arm", "exercise", "seal"]

STATUSES = ("correct", "wrong", "not attempted", "error", "interrupted")
# The packages whose every module is fingerprinted: the library and this harness.
_PACKAGES = ("minitransformer", "lessonkit")
# The modules whose functions a checker's verdict relies on (besides the whole package).
_WATCHED_MODULES = ("builtins", "math", "numpy", "numpy.linalg", "numpy.random")
# ipykernel binds a fresh input() into builtins at every execute request (to forward stdin).
_REBOUND_BY_THE_KERNEL = {("builtins", "input"), ("builtins", "raw_input")}


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
_state = types.SimpleNamespace(record=None, seal=None)   # set by arm() while a grader runs this kernel


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
            try:
                done = check(*args, **kwargs)
            except KeyboardInterrupt:
                if _state.record is not None:
                    _state.record(exercise_id, "interrupted", "")
                raise
            except WrongAnswer as exc:
                if _state.record is not None:
                    _state.record(exercise_id, "wrong", str(exc))
                raise
            except Exception as exc:
                if _state.record is not None:
                    _state.record(exercise_id, "error", one_line(exc))
                raise
            status = "correct" if done is True else "not attempted"
            if _state.record is not None:
                _state.record(exercise_id, status, "")
            return Verdict(exercise_id, status)

        checker.exercise = number
        _CHECKERS[f"{check.__module__.rsplit('.', 1)[-1]}.{check.__name__}"] = checker
        return checker

    return wrap


# -- the grader's side of the channel (runs in the kernel being graded) ----------------------------

def _watched(value) -> bool:
    return callable(value) and not isinstance(value, types.ModuleType)


def _fingerprint(modules) -> dict:
    """{(module, name): (object, code, defaults, kwdefaults, closure contents)} for every
    callable of the given modules, and every function in the package's classes: what must
    still be in place, object for object, for a verdict to count."""
    prints = {}

    def add(key, value):
        cells = getattr(value, "__closure__", None) or ()
        prints[key] = (value, getattr(value, "__code__", None), getattr(value, "__defaults__", None),
                       getattr(value, "__kwdefaults__", None),
                       tuple(c.cell_contents for c in cells if _has_contents(c)))

    for module in modules:
        for name, value in list(vars(module).items()):
            if not _watched(value) or (module.__name__, name) in _REBOUND_BY_THE_KERNEL:
                continue
            add((module.__name__, name), value)
            if isinstance(value, type) and value.__module__ == module.__name__ \
                    and module.__name__.split(".")[0] in _PACKAGES:
                for attr, member in list(vars(value).items()):
                    if _watched(member) or isinstance(member, (staticmethod, classmethod, property)):
                        add((module.__name__, f"{name}.{attr}"), member)
    return prints


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises ValueError
    except ValueError:
        return False
    return True


def _changed(before: dict, modules) -> list[str]:
    """The names whose callable differs from ``before`` (every part compared by identity)."""
    now = _fingerprint(modules)
    bad = []
    for key, old in before.items():
        new = now.get(key)
        if new is None or any(a is not b for a, b in zip(old[:4], new[:4])) or len(old[4]) != len(new[4]) \
                or any(a is not b for a, b in zip(old[4], new[4])):
            bad.append(".".join(key))
    return sorted(bad)


def arm(key_path: str, log_path: str, nonce: str) -> None:
    """Start recording verdicts for the grader (python -m minitransformer grade calls this).

    key_path: a file holding the run's secret key; it is read and deleted. log_path: the
    file the signed lines are appended to. nonce: the grader's id for this run, in every line.
    """
    import os  # noqa: PLC0415

    try:
        import _hashlib  # noqa: PLC0415  (OpenSSL's HMAC: a C object, whose methods a notebook cannot patch)
        new_mac = _hashlib.hmac_new
    except ImportError:                                  # a Python built without OpenSSL
        import hmac  # noqa: PLC0415
        new_mac = hmac.new

    if _state.record is not None:
        raise RuntimeError("the verdict channel is already armed")
    with open(key_path, "rb") as f:
        key = f.read()
    os.unlink(key_path)
    mac = new_mac(key, b"", "sha256")
    del key
    checkers = dict(_CHECKERS)           # lessonkit.exercises.arm imported every checker module first
    numbers = {id(c.__wrapped__): (c.__wrapped__, c.exercise) for c in checkers.values()}
    wrapper_code = next(iter(checkers.values())).__code__
    package = [m for name, m in sys.modules.items() if name.split(".")[0] in _PACKAGES]
    modules = tuple(package + [sys.modules[name] for name in _WATCHED_MODULES if name in sys.modules])
    before = _fingerprint(modules)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    write, getframe, gettrace, getprofile = os.write, sys._getframe, sys.gettrace, sys.getprofile
    text, kind_of, whole = repr, type, int
    seq = [0]
    try:
        from IPython import get_ipython  # noqa: PLC0415
        shell = get_ipython()
    except ImportError:
        shell = None

    def emit(kind: str, fields: dict) -> None:
        payload = "{" + ", ".join(f"{text(k)}: {text(v)}" for k, v in
                                  [("seq", seq[0]), ("nonce", nonce), ("kind", kind), *fields.items()]) + "}"
        seq[0] += 1
        signer = mac.copy()
        signer.update(payload.encode())
        write(fd, f"{signer.hexdigest()} {payload}\n".encode())

    def genuine_exercise(frame) -> str | None:
        """The exercise a checker's wrapper frame is checking, or None if the frame is not one."""
        if frame.f_code is not wrapper_code:
            return None
        local = frame.f_locals
        body, number = local.get("check"), local.get("number")
        found = numbers.get(id(body))
        if found is None or found[0] is not body or found[1] is not number:
            return None
        if "{" not in number:
            return number
        args = local.get("args") or ()
        return number.format(args[0]) if args and kind_of(args[0]) is whole else number.format("?")

    def record(exercise_id: str, status: str, message: str) -> None:
        found = genuine_exercise(getframe(1))
        if found is None or found != exercise_id or status not in STATUSES:
            emit("refused", {"exercise": str(exercise_id)[:40], "why": "the recorder was called by something "
                             "other than a checker that existed when grading began"})
            return
        hooks = [name for name, hook in (("trace", gettrace()), ("profile", getprofile())) if hook is not None]
        emit("verdict", {"exercise": found, "status": status, "message": str(message)[:2000],
                         "changed": ", ".join(_changed(before, modules)[:20]), "hooks": ", ".join(hooks)})

    def seal() -> None:
        user_ns = shell.user_ns if shell is not None else {}
        rebound = sorted(short for short, c in ((name.split(".", 1)[1], c) for name, c in checkers.items())
                         if short in user_ns and user_ns[short] is not c)
        emit("seal", {"changed": ", ".join(_changed(before, modules)[:20]), "rebound": ", ".join(rebound)})

    _state.record, _state.seal = record, seal
    emit("armed", {"checkers": len(checkers)})


def seal() -> None:
    """The grader's closing check: which checker names the notebook rebound, what changed."""
    if _state.seal is not None:
        _state.seal()
