"""Plain data between the grader and a student's kernel: JSON text, never pickles.

The grader sends a checker's inputs to the kernel and gets the student's outputs back as text that
``decode`` turns into nothing but data: None, bools, ints, floats, strings, lists, tuples, dicts,
NumPy arrays and scalars of numeric, boolean or string dtypes, and ``Opaque`` for anything else the
student returned (a marker that names the type, with no behaviour of its own). No object the
student's code built crosses over, so nothing of the student's runs in the grader's process.

Towards the kernel (``decode(text, kernel=True)``) two more kinds are allowed, built from modules of
the kernel's own read-only copy of the packages: named tuples of ``minitransformer`` or ``lessonkit``
(a cache, a ``Tree``), and objects rebuilt by a named builder (``Built``: a model from its
configuration and parameters, a function of the checker's, such as lesson 0's ``f``, bound to its
arguments). Arrays keep their identity: an array that appears twice arrives as one array twice, so a
``Built`` function that reads ``x`` sees the ``x`` the student's function perturbs.

The format: JSON, where a tagged object stands for what JSON lacks::

    {"__t": [...]}                  a tuple
    {"__d": [[key, value], ...]}    a dict (keys of any plain kind: tuples in lesson 13's vocabularies)
    {"__a": [dtype, shape, b64, n]}  an array (n: its number, for later {"__r": n} references)
    {"__s": [dtype, b64]}           a NumPy scalar
    {"__f": "nan" | "inf" | "-inf"}  a float JSON cannot write
    {"__o": "TypeName"}             something that is not plain data (kernel to grader)
    {"__n": ["module:Name", [fields]]}  a named tuple (grader to kernel)
    {"__b": ["module:builder", state]}  a built object (grader to kernel)
"""

from __future__ import annotations

import base64
import importlib
import json
import math
from typing import NamedTuple

import numpy as np

__all__ = ["Built", "Opaque", "WireError", "decode", "encode", "kernel_arrays", "resolve"]

MAX_TEXT = 64_000_000          # characters of one message the grader reads, at most
_ARRAY_KINDS = "biufcU"        # bool, ints, floats, complex, unicode: never object or void
_TRUSTED = ("minitransformer", "lessonkit")


class WireError(ValueError):
    """Text that is not a message of this format (or names something not allowed)."""


class Opaque:
    """What the student returned when it was not plain data: its type's name, nothing else."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str):
        self.type_name = str(type_name)[:80]

    def __repr__(self) -> str:
        return f"<a {self.type_name} object>"

    def __eq__(self, other) -> bool:
        return isinstance(other, Opaque) and other.type_name == self.type_name

    __hash__ = None


class Built(NamedTuple):
    """An object the kernel builds with ``builder(state)``: "module:function" of minitransformer or
    lessonkit. In-process (a notebook, the tests) ``make()`` builds it the same way."""

    builder: str
    state: object

    def make(self):
        return resolve(self.builder)(self.state)


def resolve(name: str):
    """The object "module:qualname" names, in minitransformer or lessonkit only."""
    module, _, qualname = name.partition(":")
    if module.split(".")[0] not in _TRUSTED or not qualname:
        raise WireError(f"not a name the wire may build: {name!r}")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


# -- encoding -------------------------------------------------------------------------------------

def encode(value, *, arrays: list | None = None, plain: bool = False) -> str:
    """``value`` as text. ``arrays``, if given, collects every array in the order it was numbered.

    ``plain=True`` (the kernel's answers): subclasses of the plain kinds are read as the plain kind (a
    named tuple as a tuple, an ``int`` subclass as an int), and anything else becomes ``Opaque``; the
    grader's side sends its own objects exactly (``plain=False``)."""
    memo: dict[int, int] = {}
    seen = [] if arrays is None else arrays
    return json.dumps(_Encoder(plain).enc(value, memo, seen, 0), separators=(",", ":"), allow_nan=False)


def _array(a: np.ndarray, memo: dict, seen: list):
    if id(a) in memo:
        return {"__r": memo[id(a)]}
    if a.dtype.kind not in _ARRAY_KINDS:
        return {"__o": f"array of dtype {a.dtype}"}
    memo[id(a)] = len(seen)
    seen.append(a)
    data = np.ascontiguousarray(a)
    return {"__a": [data.dtype.str, list(data.shape), base64.b64encode(data.tobytes()).decode("ascii"),
                    memo[id(a)]]}


class _Encoder:
    def __init__(self, plain: bool):
        self.plain = plain

    def enc(self, value, memo: dict, seen: list, depth: int):
        if depth > 60:
            return {"__o": "structure nested too deep"}
        kind = type(value)
        if value is None or kind in (bool, int, str):
            return value
        if kind is float:
            return value if math.isfinite(value) else {"__f": repr(value)}
        if kind is np.ndarray:
            return _array(value, memo, seen)
        if isinstance(value, np.generic) and value.dtype.kind in _ARRAY_KINDS:
            return {"__s": [value.dtype.str, base64.b64encode(np.asarray(value).tobytes()).decode("ascii")]}
        items = [self.enc, memo, seen, depth + 1]
        if kind is list:
            return [self.enc(v, *items[1:]) for v in value]
        if kind is tuple:
            return {"__t": [self.enc(v, *items[1:]) for v in value]}
        if kind is dict:
            return {"__d": [[self.enc(k, *items[1:]), self.enc(v, *items[1:])] for k, v in value.items()]}
        if _is_cupy(value):
            return _array(value.get(), memo, seen)
        if self.plain:
            return self._plain(value, items)
        if kind is Built:
            return {"__b": [value.builder, self.enc(value.state, *items[1:])]}
        if isinstance(value, tuple) and hasattr(kind, "_fields") and kind.__module__.split(".")[0] in _TRUSTED:
            return {"__n": [f"{kind.__module__}:{kind.__qualname__}", [self.enc(v, *items[1:]) for v in value]]}
        return {"__o": kind.__name__}

    def _plain(self, value, items):
        """A subclass of a plain kind, read as that kind (in the kernel: its methods may run there)."""
        for base, convert in ((bool, bool), (int, int), (float, float), (str, str), (list, list), (tuple, tuple),
                              (dict, dict), (np.ndarray, np.asarray)):
            if isinstance(value, base):
                try:
                    converted = convert(value)
                except Exception:  # noqa: BLE001 - the student's subclass refused: then it is not plain data
                    break
                if type(converted) in (bool, int, float, str, list, tuple, dict, np.ndarray):
                    return self.enc(converted, *items[1:])
                break
        return {"__o": type(value).__name__}


def _is_cupy(value) -> bool:
    return type(value).__module__.split(".")[0] == "cupy" and hasattr(value, "get")


# -- decoding -------------------------------------------------------------------------------------

def decode(text: str, *, kernel: bool = False, arrays: list | None = None):
    """The value ``text`` encodes. ``kernel=True`` (the kernel's side) also builds named tuples and
    ``Built`` objects; the grader's side never does. ``arrays`` collects the arrays by number."""
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise WireError("not a message (or one over the size limit)")
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not JSON: {exc}") from None
    return _dec(raw, kernel, [] if arrays is None else arrays, 0)


def _dec(raw, kernel: bool, seen: list, depth: int):
    if depth > 80:
        raise WireError("nested too deep")
    if raw is None or isinstance(raw, (bool, int, float, str)):
        return raw
    if isinstance(raw, list):
        return [_dec(v, kernel, seen, depth + 1) for v in raw]
    if not isinstance(raw, dict) or len(raw) != 1:
        raise WireError("an object that is not a tag")
    (tag, body), = raw.items()
    if tag == "__t":
        return tuple(_dec(v, kernel, seen, depth + 1) for v in _list(body))
    if tag == "__d":
        out = {}
        for pair in _list(body):
            if not isinstance(pair, list) or len(pair) != 2:
                raise WireError("a dict entry that is not a pair")
            key = _dec(pair[0], kernel, seen, depth + 1)
            try:
                out[key] = _dec(pair[1], kernel, seen, depth + 1)
            except TypeError:
                raise WireError(f"a dict key that cannot be one: {type(key).__name__}") from None
        return out
    if tag == "__a":
        return _dec_array(body, seen)
    if tag == "__r":
        if not isinstance(body, int) or not 0 <= body < len(seen):
            raise WireError("a reference to no array")
        return seen[body]
    if tag == "__s":
        dtype, data = _list(body, 2)
        array = _buffer(dtype, [], data)
        return array[()]
    if tag == "__f":
        if body not in ("nan", "inf", "-inf"):
            raise WireError(f"not a float: {body!r}")
        return float(body)
    if tag == "__o":
        return Opaque(body if isinstance(body, str) else "?")
    if tag == "__n" and kernel:
        name, fields = _list(body, 2)
        cls = resolve(name)
        if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
            raise WireError(f"{name} is not a named tuple")
        return cls(*(_dec(v, kernel, seen, depth + 1) for v in _list(fields)))
    if tag == "__b" and kernel:
        name, state = _list(body, 2)
        return Built(name, _dec(state, kernel, seen, depth + 1)).make()
    raise WireError(f"a tag this side does not accept: {tag}")


def _list(body, n: int | None = None) -> list:
    if not isinstance(body, list) or (n is not None and len(body) != n):
        raise WireError("a malformed tag")
    return body


def _buffer(dtype: str, shape, data) -> np.ndarray:
    try:
        dt = np.dtype(dtype) if isinstance(dtype, str) else None
    except TypeError:
        dt = None
    if dt is None or dt.kind not in _ARRAY_KINDS or dt.hasobject:
        raise WireError(f"not an array dtype of plain data: {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape) or len(shape) > 32:
        raise WireError("a malformed shape")
    if not isinstance(data, str):
        raise WireError("malformed array data")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except ValueError:
        raise WireError("array data that is not base64") from None
    if len(raw) != math.prod(shape) * dt.itemsize:
        raise WireError("array data of the wrong size")
    return np.frombuffer(raw, dtype=dt).reshape(shape).copy()


def _dec_array(body, seen: list) -> np.ndarray:
    dtype, shape, data, number = _list(body, 4)
    if number != len(seen):
        raise WireError("arrays out of order")
    array = _buffer(dtype, shape, data)
    seen.append(array)
    return array


def kernel_arrays(arrays: list) -> list:
    """Copies of the decoded arrays, to tell later which ones the student's function wrote into."""
    return [a.copy() for a in arrays]
