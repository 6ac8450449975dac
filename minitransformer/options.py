"""A dataclass's fields as checked values and command-line options: the one route.

A field says once, beside its default, what it accepts and what it is for:

    steps: int = setting(600, "optimizer steps", at_least=1)
    top_p: float | None = setting(None, "nucleus: the most probable tokens holding probability P",
                                  above=0, at_most=1)

and that gives it, with no other edit:

* its check when the dataclass is made (``check_fields(self)`` in ``__post_init__``): the type
  of its annotation (``X | None`` also takes None), a finite number, the bounds, the choices;
* its command-line option (``add_options``: ``steps`` is ``--steps``, ``batch_size``
  ``--batch-size``, a bool ``--flag/--no-flag``), whose text gets the same check, and its help;
* its place in ``FIELD=VALUE`` text: ``train --set P_drop=0`` (``assign``) and
  ``--eval sample:temperature=0.7`` (``parse_named``).

A field declared without ``setting`` still gets its type's check, an option and a line of
help. ``TrainSettings``, the decoding strategies and ``TransformerConfig`` (through ``--set``)
all go this way. Standard library only: every layer may use it.
"""

from __future__ import annotations

import argparse
import math
import numbers
import types
import typing
from dataclasses import MISSING, dataclass, field, fields


@dataclass(frozen=True)
class Bound:
    """lo ≤ value ≤ hi (either end open, either missing)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def holds(self, v) -> bool:
        if self.lo is not None and not (v > self.lo if self.lo_open else v >= self.lo):
            return False
        return self.hi is None or (v < self.hi if self.hi_open else v <= self.hi)

    def text(self, whole: bool) -> str:
        """"≥ 1", "> 0", "in (0, 1]", "in 0..9" (whole numbers, both ends closed)."""
        lo, hi = (None if v is None else _number(v) for v in (self.lo, self.hi))
        if self.lo is not None and self.hi is not None:
            if whole and not (self.lo_open or self.hi_open):
                return f"in {lo}..{hi}"
            return f"in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '≥'} {lo}"
        return f"{'<' if self.hi_open else '≤'} {hi}"


def _number(v) -> str:
    return str(v) if isinstance(v, int) else f"{v:g}"


def setting(default=MISSING, help: str = "", *, at_least=None, above=None, at_most=None, below=None,
            choices=None, metavar: str | None = None, **kwargs):
    """A dataclass field with its help, its bounds (at_least ≤ v, above < v, v ≤ at_most, v < below) and its
    choices (a collection of allowed values); ``metavar`` names the value in ``--help``."""
    bound = None
    if any(b is not None for b in (at_least, above, at_most, below)):
        bound = Bound(above if above is not None else at_least, below if below is not None else at_most,
                      above is not None, below is not None)
    metadata = {"help": help, "bound": bound, "choices": tuple(choices) if choices is not None else None,
                "metavar": metavar}
    return field(default=default, metadata=metadata, **kwargs)


class FieldTypeError(TypeError, ValueError):
    """A field given a value of the wrong type: a TypeError, and a ValueError like every other bad value."""


# -- the types of the fields -----------------------------------------------------------------------

_KINDS: dict[type, dict[str, tuple[type | None, bool]]] = {}


def kinds(cls) -> dict[str, tuple[type | None, bool]]:
    """{field: (int, float, bool, str or None for any other type, whether None is allowed)}, from the annotations."""
    if cls not in _KINDS:
        hints = typing.get_type_hints(cls)
        found = {}
        for f in fields(cls):
            hint, optional = hints[f.name], False
            if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
                args = [a for a in typing.get_args(hint) if a is not type(None)]
                optional = len(args) < len(typing.get_args(hint))
                hint = args[0] if len(args) == 1 else None
            found[f.name] = (hint if hint in (int, float, bool, str) else None, optional)
        _KINDS[cls] = found
    return _KINDS[cls]


def _meta(f) -> dict:
    return {"help": "", "bound": None, "choices": None, "metavar": None, **f.metadata}


# -- checking values: in __post_init__ ---------------------------------------------------------------

def checked(owner: str, f, kind, optional: bool, value):
    """``value`` for field ``f`` as a plain Python value (a NumPy integer becomes an int, an int a float where
    a float is wanted), or FieldTypeError / ValueError naming ``owner`` and the field."""
    name, meta = f.name, _meta(f)
    if value is None and optional:
        return None
    if kind is bool and not isinstance(value, bool):
        raise FieldTypeError(f"{owner}: {name} must be True or False, got {value!r} ({type(value).__name__})")
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise FieldTypeError(f"{owner}: {name} must be a whole number, got {value!r} ({type(value).__name__})")
        value = int(value)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise FieldTypeError(f"{owner}: {name} must be a number, got {value!r} ({type(value).__name__})")
        try:
            value = float(value)
        except OverflowError:                      # an int too large for a float, e.g. 10**400
            value = math.inf
        if not math.isfinite(value):
            raise ValueError(f"{owner}: {name} must be a finite number, got {value}")
    if kind is str and not isinstance(value, str):
        raise FieldTypeError(f"{owner}: {name} must be text, got {value!r} ({type(value).__name__})")
    if meta["bound"] is not None and not meta["bound"].holds(value):
        raise ValueError(f"{owner}: {name} must be {meta['bound'].text(kind is int)}, got {value}")
    if meta["choices"] is not None and value not in meta["choices"]:
        raise ValueError(f"{owner}: {name} must be one of {', '.join(map(repr, meta['choices']))}, got {value!r}")
    return value


def check_fields(obj) -> None:
    """Check every field of the dataclass ``obj`` (frozen or not), storing the plain value; from ``__post_init__``."""
    owner, table = type(obj).__name__, kinds(type(obj))
    for f in fields(obj):
        kind, optional = table[f.name]
        object.__setattr__(obj, f.name, checked(owner, f, kind, optional, getattr(obj, f.name)))


# -- text: FIELD=VALUE, and options ------------------------------------------------------------------

def value_of(cls, name: str, text: str):
    """``text`` as a value of field ``name``'s type: its kind only (the dataclass checks the rest when made).
    A ValueError says ``name=text`` is not a whole number, a (finite) number, or true or false."""
    kind = kinds(cls)[name][0]
    try:
        if kind is int:
            return int(text)
        if kind is float:
            value = float(text)
            if not math.isfinite(value):
                raise ValueError(f"{name}={text!r} is not a finite number")
            return value
    except ValueError as exc:
        if "finite" in str(exc):
            raise
        raise ValueError(f"{name}={text!r} is not a {'whole number' if kind is int else 'number'}") from None
    if kind is bool:
        word = text.strip().lower()
        if word in ("true", "1", "yes", "on"):
            return True
        if word in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"{name}={text!r} is not true or false")
    return text


def assign(cls, texts, exclude: dict[str, str] | None = None, noun: str = "field") -> dict:
    """``["P_drop=0", "positional=learned"]`` -> ``{"P_drop": 0.0, "positional": "learned"}`` for dataclass ``cls``.

    A malformed assignment, an unknown field, one in ``exclude`` ({field: why it cannot be set}) or a
    field given twice is a ValueError naming it.
    """
    names = [f.name for f in fields(cls)]
    changes: dict = {}
    for text in texts:
        name, sep, value = text.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"expected FIELD=VALUE, got {text!r}")
        if name not in names:
            raise ValueError(f"unknown {noun} {name!r}; the fields are: {', '.join(names)}")
        if exclude and name in exclude:
            raise ValueError(f"{name} {exclude[name]}")
        if name in changes:
            raise ValueError(f"{name} is given twice")
        changes[name] = value_of(cls, name, value.strip())
    return changes


def field_help(cls, exclude=()) -> str:
    """Every settable field with its default: "d_model (512), h (8), ..."."""
    return ", ".join(f"{f.name} ({f.default!r})" for f in fields(cls)
                     if f.name not in exclude and f.default is not MISSING)


def parse_named(registry: dict, text: str, what: str = "name", examples: str = ""):
    """An object from its name in ``registry`` ({name: dataclass}) and field values, as a command line writes it:

        NAME                       registry[NAME]()
        NAME8                      a number after the name is the first field's value
        NAME:FIELD=VALUE,...       the fields given

    Raises ValueError naming the problem; the dataclass checks the values when made.
    """
    name, _, rest = text.strip().partition(":")
    digits = len(name) - len(name.rstrip("0123456789"))
    base, number = (name[:-digits], name[-digits:]) if digits else (name, "")
    if base not in registry:
        raise ValueError(f"unknown {what} {text!r}; expected one of {', '.join(registry)}"
                         + (f" (e.g. {examples})" if examples else ""))
    cls = registry[base]
    names = [f.name for f in fields(cls)]
    given: dict = {}
    if number:
        if not names:
            raise ValueError(f"{base} takes no number ({text!r})")
        given[names[0]] = number
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in names:
            raise ValueError(f"{text!r}: expected {base}:FIELD=VALUE with FIELD one of "
                             f"{', '.join(names) or '(none)'}, got {item!r}")
        given[key] = value.strip()
    values, declared = {}, {f.name: f for f in fields(cls)}
    try:
        for key, typed in given.items():
            values[key] = value_of(cls, key, typed)
            _within(cls, declared[key], values[key], typed)
        return cls(**values)
    except (TypeError, ValueError) as exc:
        # In the words the user typed: "'beam0': size must be ...", not "Beam: size" (the class is not theirs).
        raise ValueError(f"{text!r}: {str(exc).removeprefix(f'{cls.__name__}: ')}") from None


def _within(cls, f, value, typed: str) -> None:
    """A ValueError if ``value`` (typed as ``typed``) is outside field ``f``'s bounds or choices, naming the
    value as it was typed ("got 1e300", not "got 1e+300")."""
    kind, meta = kinds(cls)[f.name][0], _meta(f)
    if meta["bound"] is not None and kind in (int, float) and not meta["bound"].holds(value):
        raise ValueError(f"{f.name} must be {meta['bound'].text(kind is int)}, got {typed}")
    if meta["choices"] is not None and value not in meta["choices"]:
        raise ValueError(f"{f.name} must be one of {', '.join(map(repr, meta['choices']))}, got {typed!r}")


def option_type(kind, bound: Bound | None = None):
    """An argparse ``type=`` for a number option: the text as ``kind`` (int or float) within ``bound``, or an
    error in the option's words ("must be a whole number ≥ 1, got 0", "'ten' is not a whole number")."""
    whole = kind is int

    def parse(text: str):
        try:
            value = int(text) if whole else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole number' if whole else 'number'}") from None
        if (not whole and not math.isfinite(value)) or (bound is not None and not bound.holds(value)):
            closed = bound is not None and bound.lo is not None and bound.hi is not None
            noun = "a whole number" if whole else "a number" if closed else "a finite number"
            raise argparse.ArgumentTypeError(f"must be {noun}{' ' + bound.text(whole) if bound else ''}, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def add_options(parser: argparse.ArgumentParser, cls, *, aliases: dict[str, str] | None = None, skip=(),
                help_prefix: str = "") -> dict[str, str]:
    """One option for every field of dataclass ``cls`` (but ``skip``): ``--field-name``, or ``aliases[field]``;
    default None (not given). Returns {argparse dest: field}, for ``given``."""
    table = kinds(cls)
    dests = {}
    for f in fields(cls):
        if f.name in skip:
            continue
        kind, _ = table[f.name]
        meta = _meta(f)
        option = (aliases or {}).get(f.name, "--" + f.name.replace("_", "-"))
        help_text = (help_prefix + (meta["help"] or f"{cls.__name__}.{f.name}")).replace("%", "%%")   # argparse
        if kind is bool:
            action = parser.add_argument(option, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif meta["choices"] is not None:
            action = parser.add_argument(option, choices=list(meta["choices"]), default=None, help=help_text)
        else:
            metavar = meta["metavar"] or {int: "N", float: "X"}.get(kind, "TEXT")
            action = parser.add_argument(option, type=option_type(kind, meta["bound"]) if kind in (int, float) else
                                         None, default=None, metavar=metavar, help=help_text)
        dests[action.dest] = f.name
    return dests


def given(args: argparse.Namespace, dests: dict[str, str]) -> dict:
    """The fields whose options were given: {field: value}."""
    return {name: getattr(args, dest) for dest, name in dests.items() if getattr(args, dest) is not None}


__all__ = ["Bound", "FieldTypeError", "add_options", "assign", "check_fields", "checked", "field_help", "given",
           "kinds", "option_type", "parse_named", "setting", "value_of"]
