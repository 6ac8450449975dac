"""Choosing a decoder on the command line: ``--beam K`` or ``--sample`` with its settings for
translate and evaluate, ``--eval STRATEGY ...`` for train."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from .common import OPTION_NAMES, CliError, about, positive_int


def beam_size(text: str) -> int:
    """A beam size: a whole number in 1..decoding.MAX_BEAM_SIZE (checked here, before anything runs)."""
    from ..decoding import MAX_BEAM_SIZE  # noqa: PLC0415

    value = positive_int(text)
    if value > MAX_BEAM_SIZE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BEAM_SIZE} (§6.1 uses 4), got {text}")
    return value


def strategy_spec(text: str):
    """A decoding strategy by name: greedy, beam4, sample:temperature=0.7,top_k=10 (decoding.parse_strategy)."""
    from ..decoding import parse_strategy  # noqa: PLC0415

    try:
        return parse_strategy(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_strategy_options(p: argparse.ArgumentParser, default_beam: int = 4) -> None:
    """--beam K, or --sample; then an option for every field of the strategies (options.add_options): Sample's
    --temperature, --top-k, --top-p, --sample-seed ..., Beam's --alpha (read by DecoderChoice)."""
    from ..decoding import Beam, Sample  # noqa: PLC0415
    from ..options import add_options  # noqa: PLC0415

    p.add_argument("--beam", type=beam_size, default=None, metavar="K",
                   help=f"beam size (1 = greedy; default {default_beam}, as in §6.1)")
    p.add_argument("--sample", action="store_true",
                   help="sample each token from the model's distribution instead of searching (not with --beam)")
    fields = {"sample": add_options(p, Sample, aliases=OPTION_NAMES["Sample"], help_prefix="with --sample: "),
              "beam": add_options(p, Beam, skip=("size",), help_prefix="with --beam K: ")}
    p.set_defaults(default_beam=default_beam, strategy_fields=fields)


@dataclass(frozen=True)
class DecoderChoice:
    """The decoder the options of ``add_strategy_options`` ask for: ``strategy()`` builds it
    (a CliError if the options conflict), ``option`` names it in a message."""

    beam: int | None = None
    sample: bool = False
    # The strategies' fields given: {"sample": {field: (option, value)}, "beam": {...}}.
    given: dict = field(default_factory=lambda: {"sample": {}, "beam": {}})
    default_beam: int = 4

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DecoderChoice:
        given = {name: {f: ("--" + dest.replace("_", "-"), getattr(args, dest)) for dest, f in dests.items()
                        if getattr(args, dest) is not None}
                 for name, dests in args.strategy_fields.items()}
        return cls(args.beam, args.sample, given, args.default_beam)

    def strategy(self):
        from ..decoding import GREEDY, Beam, Sample  # noqa: PLC0415

        sampling, searching = self.given["sample"], self.given["beam"]
        if not self.sample:
            if sampling:
                option = next(iter(sampling.values()))[0]
                raise CliError(f"{option} applies only to sampling; add --sample", option)
            size = self.beam if self.beam is not None else self.default_beam
            if size > 1:
                return _build(Beam, searching, size=size)
            if searching:
                option = next(iter(searching.values()))[0]
                raise CliError(f"{option} applies only to beam search (--beam K with K ≥ 2)", option)
            return GREEDY
        if self.beam is not None:
            raise CliError(f"--sample and --beam {self.beam} ask for two different decoders; give one of them",
                           "--sample/--beam")
        if searching:
            option = next(iter(searching.values()))[0]
            raise CliError(f"{option} applies only to beam search, not to --sample", option)
        return _build(Sample, sampling)

    @property
    def option(self) -> str:
        """The option that chose the decoder, for a message: "--sample" or "--beam K"."""
        return "--sample" if self.sample else f"--beam {self.beam if self.beam is not None else self.default_beam}"


def _build(cls, given: dict, **fixed):
    """``cls(**fixed, **the fields given)``; a value the strategy refuses is named by its option."""
    for name, (option, value) in given.items():
        with about(option):
            cls(**{name: value})
    return cls(**fixed, **{name: value for name, (_, value) in given.items()})


def after_greedy(strategy) -> list:
    """evaluate's list: greedy first, as the baseline, then ``strategy`` unless it is greedy."""
    from ..decoding import GREEDY  # noqa: PLC0415

    return [GREEDY] if strategy == GREEDY else [GREEDY, strategy]


def add_eval_option(p: argparse.ArgumentParser) -> None:
    """train --eval: the strategies the test set is decoded with at the end, checked when the options are parsed."""
    p.add_argument("--eval", type=strategy_spec, nargs="+", default=None, metavar="STRATEGY",
                   help=f"decode the test set at the end with each of these: {_spellings()} (default: greedy)")


def _spellings() -> str:
    """How --eval names each strategy, read from decoding.STRATEGIES: "greedy, beam, beamK (e.g. beam4), ..."."""
    from dataclasses import fields  # noqa: PLC0415

    from ..decoding import STRATEGIES  # noqa: PLC0415
    from ..options import kinds  # noqa: PLC0415

    out = []
    for name, cls in STRATEGIES.items():
        declared = [(f.name, f.metadata.get("metavar") or "V") for f in fields(cls)]
        out.append(name)
        if declared and kinds(cls)[declared[0][0]][0] is int:          # beam4: a whole number names the first
            out.append(f"{name}{declared[0][1]} (e.g. {name}{getattr(cls(), declared[0][0])})")
        if declared:
            out.append(f"{name}:" + ",".join(f"{f}={v}" for f, v in declared))
    return ", ".join(out)


def eval_strategies(given: list | None) -> list:
    """The strategies of train --eval, duplicates dropped (default: greedy)."""
    from ..decoding import GREEDY  # noqa: PLC0415

    return list(dict.fromkeys(given or [GREEDY]))
