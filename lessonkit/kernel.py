"""The grader's hands inside a student's kernel: find the student's answers, call them, hand back data.

``python -m minitransformer grade`` (``lessonkit.grade``) runs a submitted notebook in a fresh kernel
and does its judging in its own process. In the kernel it needs three things, all here:

* ``start()``, run out of the notebook's sight before the first cell: from then on every call of an
  exercise's checking cell also registers the answer it was given (``register``, called by the
  ``@exercise`` wrapper), and the package's own answer to each exercise is noted by its code (the
  catalogue's ``answers``), to be recognised later under any name;
* ``pending()`` and ``final(names)``: the answers registered since the last look, and at the end
  the learner's functions found by their stub names (an answer whose checking cell was deleted);
* ``call(index, request)``: call one registered answer on the inputs the grader sends (``lessonkit.wire``
  text: plain data, arrays, and the few objects the grader asks to have built here) and return
  what it gave back, as text of the same kind: its value (plain data only), the arrays it wrote
  into, the exception it raised, and whether the package's own answer to that exercise ran while it
  did (a profile hook sees every Python call, in every thread the answer starts).

Nothing here decides anything: the reference answers, tolerances and verdicts stay in the grader's
process, which the notebook never shares. What this module reports can be no more trusted than the
kernel it runs in (docs/teachers.md, "What the grader can and cannot tell").
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import inspect
import json
import pathlib
import sys
import threading
import time
import types

import numpy as np

from . import wire

__all__ = ["call", "final", "note_prediction", "pending", "predictions", "register", "start"]

_state = types.SimpleNamespace(session=None)


class _Discard:
    """stdout and stderr while an answer runs for grading: what it prints goes nowhere."""

    def write(self, text):
        return len(text)

    def flush(self):
        pass


class _Session:
    def __init__(self, watch: dict):
        self.candidates: list = []           # (exercise, answer) in the order they were registered
        self.predictions: list = []          # [what, prediction, result] from the reveal cells (lessonkit.predict)
        self.reported = 0                    # how many pending() has handed out
        self.watch = watch                   # exercise -> ({id(code): name}, {(tail, line): name}, {line})
        # Kept from start(), before any cell ran: what the hook is installed with.
        self.setprofile, self.getprofile = sys.setprofile, sys.getprofile
        self.thread_setprofile = threading.setprofile


def _tail(filename: str) -> str:
    """The path of a source file from its package's folder on: minitransformer/layers/feedforward.py."""
    parts = pathlib.PurePath(filename).parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in ("minitransformer", "lessonkit"):
            return "/".join(parts[i:])
    return filename


def _codes(obj) -> list:
    """The code objects of a function, a method, a property or every method of a class."""
    if isinstance(obj, type):
        found = []
        for member in vars(obj).values():
            found += _codes(member.fget if isinstance(member, property) else
                            getattr(member, "__func__", member))
        return found
    obj = inspect.unwrap(getattr(obj, "__func__", obj))
    code = getattr(obj, "__code__", None)
    return [code] if isinstance(code, types.CodeType) else []


def _resolve(name: str):
    module, _, qualname = name.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _watch_lists(answers: dict, missing: list) -> dict:
    watch = {}
    for exercise, names in answers.items():
        by_id, by_place, lines = {}, {}, set()
        for name in names:
            short = name.rsplit(":", 1)[-1]
            try:
                found = _resolve(name)
            except (ImportError, AttributeError):
                missing.append(name)
                continue
            for code in _codes(found):
                by_id[id(code)] = (code, short)
                by_place[(_tail(code.co_filename), code.co_firstlineno)] = short
                lines.add(code.co_firstlineno)
        watch[exercise] = (by_id, by_place, lines)
    return watch


def start() -> str:
    """Arm this kernel for grading (the grader calls it before the first cell); returns where the
    packages were imported from and how many exercises are watched, as JSON."""
    from .exercises import catalogue, registered  # noqa: PLC0415  (every checker module, imported now)

    registered()
    answers = {e.number: e.answers for e in catalogue.EXERCISES}
    missing: list = []
    _state.session = _Session(_watch_lists(answers, missing))
    import minitransformer  # noqa: PLC0415

    return json.dumps({"minitransformer": minitransformer.__file__, "lessonkit": sys.modules[__package__].__file__,
                       "watched": len(answers), "missing": missing})


def register(exercise: str, answer) -> None:
    """Note the answer a checking cell was given (the ``@exercise`` wrapper calls it when armed)."""
    session = _state.session
    if session is not None and isinstance(exercise, str):
        if not any(e == exercise and a is answer for e, a in session.candidates):
            session.candidates.append((exercise, answer))


def note_prediction(what: str, prediction, result) -> None:
    """Keep a reveal cell's prediction and result for the feedback (a no-op when not grading)."""
    session = _state.session
    if session is not None and len(session.predictions) < 100:
        session.predictions.append([str(what)[:200], None if prediction is None else str(prediction)[:100],
                                    str(result)[:100]])


def predictions() -> str:
    """The predictions of the reveal cells run so far, as JSON."""
    return json.dumps(_state.session.predictions)


def _describe(index: int, exercise: str, answer) -> list:
    kind = "function" if callable(answer) else "value"
    return [index, exercise, kind, None if kind == "function" else wire.encode(answer, plain=True)]


def pending() -> str:
    """The answers registered since the last call: [[index, exercise, kind, value text or None], ...]."""
    session = _state.session
    new = session.candidates[session.reported:]
    start_at, session.reported = session.reported, len(session.candidates)
    return json.dumps([_describe(start_at + i, e, a) for i, (e, a) in enumerate(new)])


def final(names: str) -> str:
    """Register the learner's answers found under their stub names (JSON {exercise: name}) in the
    notebook's namespace, then return ``pending()``."""
    shell = _shell()
    namespace = shell.user_ns if shell is not None else {}
    for exercise, name in json.loads(names).items():
        if name in namespace:
            register(exercise, namespace[name])
    return pending()


def _shell():
    try:
        from IPython import get_ipython  # noqa: PLC0415
    except ImportError:
        return None
    return get_ipython()


def _hook(watch, hits: list):
    by_id, by_place, lines = watch

    def hook(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        found = by_id.get(id(code))
        if found is not None and found[0] is code:
            hits.append(found[1])
        elif code.co_firstlineno in lines:
            name = by_place.get((_tail(code.co_filename), code.co_firstlineno))
            if name is not None:
                hits.append(name)

    return hook


def _raised(exc: BaseException) -> dict:
    kind = type(exc)
    builtin = getattr(builtins, kind.__name__, None) is kind
    text = str(exc)
    return {"type": kind.__name__, "builtin": builtin, "message": text[:4000],
            "broadcast": "could not be broadcast" in text}


def call(index: int, request: str) -> str:
    """Call registered answer ``index`` as the grader asks (``request``: wire text of {"args", "kwargs",
    "driver", "exercise"}); return wire text of {"value" | "raised", "changed", "package", "hook", "seconds"}."""
    session = _state.session
    exercise, answer = session.candidates[index]
    arrays: list = []
    req = wire.decode(request, kernel=True, arrays=arrays)
    before = wire.kernel_arrays(arrays)
    driver = wire.resolve(req["driver"]) if req.get("driver") else None
    hits: list = []
    hook = _hook(session.watch.get(req.get("exercise", exercise), ({}, {}, set())), hits)
    out: dict = {"hook": True}
    previous = session.getprofile()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(_Discard()), contextlib.redirect_stderr(_Discard()):
            session.setprofile(hook)
            session.thread_setprofile(hook)
            try:
                value = driver(answer, *req["args"], **req["kwargs"]) if driver else answer(*req["args"],
                                                                                          **req["kwargs"])
            finally:
                out["hook"] = session.getprofile() is hook
                session.setprofile(previous)
                session.thread_setprofile(None)
        out["value"] = value
    except BaseException as exc:  # noqa: BLE001 - whatever the answer raised (an interrupt too) is reported
        out["raised"] = _raised(exc)
    out["seconds"] = time.perf_counter() - t0
    out["package"] = hits[0] if hits else None
    out["changed"] = {str(i): a for i, (a, b) in enumerate(zip(arrays, before))
                      if a.shape != b.shape or not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")}
    try:
        return wire.encode(out, plain=True)
    except BaseException as exc:  # noqa: BLE001 - an answer whose value cannot even be looked at
        out.pop("value", None)
        out["raised"] = {"type": "TypeError", "builtin": True, "broadcast": False,
                         "message": f"the answer could not be read as data ({type(exc).__name__})"}
        return wire.encode(out, plain=True)
