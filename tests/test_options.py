"""One route from a dataclass's fields to checked values and command-line options (options.py, issue 33.2):
a field added to a dataclass gets its option, its check and its help with no other edit."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

import pytest

from minitransformer import decoding, options, settings
from minitransformer.cli import build_parser, main
from minitransformer.cli.train import TrainRequest
from minitransformer.options import Bound, FieldTypeError, setting
from minitransformer.settings import TrainSettings


@dataclass(frozen=True)
class Throwaway:
    """A dataclass made here only to see what the route gives a new field."""

    rate: float = setting(0.5, "how fast", above=0, at_most=1, metavar="R")
    count: int | None = setting(None, "how many", at_least=2)
    flag: bool = setting(False, "whether")
    mode: str = setting("a", "which mode", choices=("a", "b"))
    bare: int = 3                                   # no declaration at all: its type still decides

    def __post_init__(self):
        options.check_fields(self)


def _parser():
    parser = argparse.ArgumentParser(exit_on_error=False)
    return parser, options.add_options(parser, Throwaway)


def test_every_field_of_a_new_dataclass_gets_an_option_a_check_and_help():
    parser, dests = _parser()
    assert set(dests.values()) == {f.name for f in fields(Throwaway)}
    text = parser.format_help()
    for line in ("--rate R", "how fast", "--count N", "how many", "--flag, --no-flag", "whether", "--mode {a,b}",
                 "--bare N", "Throwaway.bare"):
        assert line in text, line
    args = parser.parse_args(["--rate", "0.25", "--no-flag", "--mode", "b", "--bare", "7"])
    assert options.given(args, dests) == {"rate": 0.25, "flag": False, "mode": "b", "bare": 7}
    assert options.given(parser.parse_args([]), dests) == {}                   # nothing given: nothing changed
    assert Throwaway(**options.given(args, dests)) == Throwaway(0.25, None, False, "b", 7)


@pytest.mark.parametrize("argv, message", [
    (["--rate", "0"], "must be a number in (0, 1], got 0"),
    (["--rate", "1.5"], "must be a number in (0, 1], got 1.5"),
    (["--rate", "nan"], "must be a number in (0, 1], got nan"),
    (["--rate", "fast"], "'fast' is not a number"),
    (["--count", "1"], "must be a whole number ≥ 2, got 1"),
    (["--count", "2.5"], "'2.5' is not a whole number"),
    (["--bare", "x"], "'x' is not a whole number"),
])
def test_an_option_checks_its_text_with_the_fields_declaration(argv, message):
    parser, _ = _parser()
    with pytest.raises(argparse.ArgumentError) as info:
        parser.parse_args(argv)
    assert message in str(info.value)


@pytest.mark.parametrize("changes, error, message", [
    ({"rate": 0}, ValueError, "Throwaway: rate must be in (0, 1], got 0.0"),
    ({"rate": float("inf")}, ValueError, "Throwaway: rate must be a finite number, got inf"),
    ({"rate": "0.5"}, TypeError, "Throwaway: rate must be a number, got '0.5' (str)"),
    ({"count": 1}, ValueError, "Throwaway: count must be ≥ 2, got 1"),
    ({"count": 2.0}, TypeError, "Throwaway: count must be a whole number, got 2.0 (float)"),
    ({"flag": 1}, TypeError, "Throwaway: flag must be True or False, got 1 (int)"),
    ({"mode": "c"}, ValueError, "Throwaway: mode must be one of 'a', 'b', got 'c'"),
    ({"bare": True}, TypeError, "Throwaway: bare must be a whole number, got True (bool)"),
])
def test_the_dataclass_checks_its_values_with_the_same_declaration(changes, error, message):
    with pytest.raises(error) as info:
        Throwaway(**changes)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)          # a wrong type is a ValueError too (FieldTypeError)


def test_values_are_stored_as_plain_python_numbers():
    import numpy as np

    made = Throwaway(rate=1, count=np.int64(3))
    assert type(made.rate) is float and type(made.count) is int
    assert issubclass(FieldTypeError, TypeError) and issubclass(FieldTypeError, ValueError)


def test_field_assignments_and_named_objects_use_the_same_route():
    assert options.assign(Throwaway, ["rate=0.25", "flag=yes", "mode=b"]) == {"rate": 0.25, "flag": True, "mode": "b"}
    for text, message in [("rate", "expected FIELD=VALUE, got 'rate'"), ("speed=1", "unknown field 'speed'"),
                          ("count=x", "count='x' is not a whole number"), ("rate=inf", "rate='inf' is not a finite"),
                          ("flag=maybe", "flag='maybe' is not true or false")]:
        with pytest.raises(ValueError, match=message):
            options.assign(Throwaway, [text])
    with pytest.raises(ValueError, match="bare cannot be set here"):
        options.assign(Throwaway, ["bare=1"], exclude={"bare": "cannot be set here"})
    registry = {"throw": Throwaway}
    assert options.parse_named(registry, "throw:rate=0.75,count=4") == Throwaway(0.75, 4)
    with pytest.raises(ValueError, match="'throw:count=1': count must be ≥ 2, got 1"):
        options.parse_named(registry, "throw:count=1")
    with pytest.raises(ValueError, match=r"'throw5': rate must be in \(0, 1\], got 5$"):
        options.parse_named(registry, "throw5")                   # a number after the name sets the first field
    with pytest.raises(ValueError, match="unknown name 'thrown'; expected one of throw"):
        options.parse_named(registry, "thrown")


def test_bound_texts():
    assert [Bound(1).text(True), Bound(0, lo_open=True).text(False), Bound(0, 1, True).text(False),
            Bound(0, 9).text(True), Bound(hi=1, hi_open=True).text(False)] == ["≥ 1", "> 0", "in (0, 1]", "in 0..9",
                                                                               "< 1"]


# -- a field added to TrainSettings, or to a strategy: the command line has it, with no other edit --------

@dataclass
class MoreSettings(TrainSettings):
    warmup_shape: float = setting(1.0, "a throwaway training setting", above=0)


@dataclass(frozen=True)
class MoreSample(decoding.Sample):
    boldness: int = setting(1, "a throwaway sampling setting", at_least=1)


@pytest.fixture()
def extended(monkeypatch):
    monkeypatch.setattr(settings, "TrainSettings", MoreSettings)
    monkeypatch.setattr(decoding, "Sample", MoreSample)
    monkeypatch.setitem(decoding.STRATEGIES, "sample", MoreSample)


def _subcommand(parser, name):
    return next(a for a in parser._subparsers._group_actions[0].choices.values() if a.prog.endswith(name))


def test_a_new_training_setting_is_a_checked_option_with_its_help(extended, capsys):
    train = _subcommand(build_parser(), "train")
    assert "--warmup-shape" in train.format_help() and "a throwaway training setting" in train.format_help()
    args = build_parser().parse_args(["train", "--task", "copy", "--warmup-shape", "2", "--warmup", "50"])
    args.argv = []
    assert TrainRequest.from_args(args).settings == {"warmup_shape": 2.0, "warmup_steps": 50}
    assert MoreSettings().with_given({"warmup_shape": 2.0}).warmup_shape == 2.0
    assert main(["train", "--task", "copy", "--warmup-shape", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: must be a finite number > 0, got 0 (--warmup-shape)"
    with pytest.raises(ValueError, match="MoreSettings: warmup_shape must be > 0"):
        MoreSettings(warmup_shape=-1.0)


def test_a_new_strategy_field_is_an_option_of_translate_and_evaluate_and_of_eval(extended, capsys):
    parser = build_parser()
    for command in ("translate", "evaluate"):
        text = _subcommand(parser, command).format_help()
        assert "--boldness" in text and "with --sample: a throwaway sampling setting" in text, command
    assert "boldness=" in _subcommand(parser, "train").format_help()          # --eval's list of fields
    assert decoding.parse_strategy("sample:boldness=3") == MoreSample(boldness=3)
    assert main(["translate", "--checkpoint", "none.npz", "--sample", "--boldness", "0", "x"]) == 2
    assert capsys.readouterr().err.strip() == "error: must be a whole number ≥ 1, got 0 (--boldness)"
    assert main(["translate", "--checkpoint", "none.npz", "--boldness", "2", "x"]) == 2
    assert "--boldness applies only to sampling; add --sample (--boldness)" in capsys.readouterr().err
