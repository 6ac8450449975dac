"""Choosing a decoder on the command line: ``--beam K`` or ``--sample`` with its settings for
translate and evaluate, ``--eval STRATEGY ...`` for train."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from .common import CliError, about, non_negative_int, positive_float, positive_int, probability

_SAMPLING_OPTIONS = (("temperature", "--temperature"), ("top_k", "--top-k"), ("top_p", "--top-p"),
                     ("sample_seed", "--sample-seed"))


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
    """--beam, or --sample with --temperature / --top-k / --top-p / --sample-seed (read by DecoderChoice)."""
    p.add_argument("--beam", type=beam_size, default=None, metavar="K",
                   help=f"beam size (1 = greedy; default {default_beam}, as in §6.1)")
    p.set_defaults(default_beam=default_beam)
    p.add_argument("--sample", action="store_true",
                   help="sample each token from the model's distribution instead of searching (not with --beam)")
    p.add_argument("--temperature", type=positive_float, metavar="T",
                   help="with --sample: divide the logits by T (< 1 sharper, > 1 flatter; default 1)")
    p.add_argument("--top-k", type=positive_int, metavar="K", help="with --sample: only the K most probable tokens")
    p.add_argument("--top-p", type=probability, metavar="P",
                   help="with --sample: only the most probable tokens holding probability P (nucleus, 0 < P ≤ 1)")
    p.add_argument("--sample-seed", type=non_negative_int, metavar="N",
                   help="with --sample: seed of the draws (default 0; the same seed gives the same outputs)")


@dataclass(frozen=True)
class DecoderChoice:
    """The decoder the options of ``add_strategy_options`` ask for: ``strategy()`` builds it
    (a CliError if the options conflict), ``option`` names it in a message."""

    beam: int | None = None
    sample: bool = False
    sampling: dict = field(default_factory=dict)     # the sampling options given: {name: (option, value)}
    default_beam: int = 4

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DecoderChoice:
        given = {name: (option, getattr(args, name)) for name, option in _SAMPLING_OPTIONS
                 if getattr(args, name) is not None}
        return cls(args.beam, args.sample, given, args.default_beam)

    def strategy(self):
        from ..decoding import GREEDY, Beam, Sample  # noqa: PLC0415

        if not self.sample:
            if self.sampling:
                option = next(iter(self.sampling.values()))[0]
                raise CliError(f"{option} applies only to sampling; add --sample", option)
            size = self.beam if self.beam is not None else self.default_beam
            return GREEDY if size == 1 else Beam(size)
        if self.beam is not None:
            raise CliError(f"--sample and --beam {self.beam} ask for two different decoders; give one of them",
                           "--sample/--beam")
        settings = {name: value for name, (_, value) in self.sampling.items()}
        settings["seed"] = settings.pop("sample_seed", 0)
        with about("--sample-seed"):
            return Sample(**settings)

    @property
    def option(self) -> str:
        """The option that chose the decoder, for a message: "--sample" or "--beam K"."""
        return "--sample" if self.sample else f"--beam {self.beam if self.beam is not None else self.default_beam}"


def after_greedy(strategy) -> list:
    """evaluate's list: greedy first, as the baseline, then ``strategy`` unless it is greedy."""
    from ..decoding import GREEDY  # noqa: PLC0415

    return [GREEDY] if strategy == GREEDY else [GREEDY, strategy]


def add_eval_option(p: argparse.ArgumentParser) -> None:
    """train --eval: the strategies the test set is decoded with at the end, checked when the options are parsed."""
    p.add_argument("--eval", type=strategy_spec, nargs="+", default=None, metavar="STRATEGY",
                   help="decode the test set at the end with each of these: greedy, beamK (e.g. beam4), "
                        "beam:size=K,alpha=A, sample, sample:temperature=T,top_k=K,top_p=P,seed=N "
                        "(default: greedy)")


def eval_strategies(given: list | None) -> list:
    """The strategies of train --eval, duplicates dropped (default: greedy)."""
    from ..decoding import GREEDY  # noqa: PLC0415

    return list(dict.fromkeys(given or [GREEDY]))
