"""``average``: one checkpoint whose parameters are the mean of several of one run's (§6.1)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from .common import CliError, about, add_common, add_parents_option, check_output_file, load_checkpoint, set_backend


@dataclass(frozen=True)
class AverageRequest:
    checkpoints: tuple[str, ...]
    output: str
    backend: str | None = None
    parents: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AverageRequest:
        return cls(tuple(args.checkpoints), args.output, args.backend, args.parents)


def register(sub) -> None:
    p = sub.add_parser("average", help="average the parameters of checkpoints of one run (§6.1)",
                       description="Write one checkpoint whose parameters are the element-wise mean of the given "
                                   "checkpoints' (§6.1: the base model averaged the last 5). They must come from "
                                   "one run: the same model, vocabulary, tokenization, seed and data; each counts "
                                   "once, whatever its name (checkpoint.npz is the last step's file). The average has "
                                   "no optimizer state, so `train --resume` refuses it; translate and evaluate "
                                   "accept it. Usually: average runs/X/checkpoint.step*.npz -o runs/X/average.npz "
                                   "after `train --keep-last 5`.")
    p.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT", help="checkpoint .npz files of one run")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="the averaged checkpoint to write")
    add_parents_option(p)
    add_common(p)
    p.set_defaults(handler=lambda args: run(AverageRequest.from_args(args)))


def run(req: AverageRequest) -> int:
    from ..average import AverageError, average_checkpoints, save_average  # noqa: PLC0415

    set_backend(req.backend)
    check_output_file(req.output, "--output", [("a checkpoint to average", p) for p in req.checkpoints], req.parents)
    checkpoints = [load_checkpoint(path, "checkpoint") for path in req.checkpoints]
    try:
        average = average_checkpoints(checkpoints)
    except AverageError as exc:
        raise CliError(str(exc), "the checkpoints to average") from None
    with about(f"--output {req.output}"):
        save_average(req.output, average)
    steps = ", ".join(str(k) for k in average.extra["average"]["steps"])
    print(f"averaged {len(checkpoints)} checkpoint(s) (steps {steps}) into {req.output}; translate and evaluate "
          "read it like any checkpoint (it holds no optimizer state, so training cannot resume from it)",
          file=sys.stderr)
    return 0
