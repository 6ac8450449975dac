"""``evaluate``: exact match, BLEU and chrF (a parser: bracket F1) of a checkpoint on a TSV file or
a task's split, greedy first, then the decoder chosen with --beam K or --sample."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from .common import (
    CliError,
    about,
    add_common,
    load_checkpoint,
    memory_for,
    non_negative_int,
    positive_int,
    quiet_numpy,
    set_backend,
)
from .scoring import (
    check_decoding_fits,
    check_levels,
    check_source_lengths,
    checkpoint_tokenization,
    lowercase,
    report,
    warn_unknown_tokens,
)
from .strategies import DecoderChoice, add_strategy_options, after_greedy


@dataclass(frozen=True)
class EvaluateRequest:
    checkpoint: str
    decoder: DecoderChoice
    data: str | None = None          # a TSV file, all of it scored
    header: bool = False
    task: str | None = None          # or a named task's split
    split: str | None = None
    level: str | None = None
    limit: int | None = None
    samples: int = 5
    seed: int | None = None
    backend: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> EvaluateRequest:
        return cls(args.checkpoint, DecoderChoice.from_args(args), args.data, args.header, args.task, args.split,
                   args.level, args.limit, args.samples, args.seed, args.backend)


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="exact match, BLEU and chrF of a checkpoint on a TSV file or a task split "
                                        "(a parser: bracket F1, exact trees, ill-formed outputs)",
                       description="Score a checkpoint: greedy decoding first, then the decoder chosen with "
                                   "--beam K (default 4) or --sample.")
    p.add_argument("--checkpoint", required=True, help="a checkpoint.npz written by train")
    p.add_argument("--data", help="a TSV file of source<TAB>target lines (all of it is evaluated)")
    p.add_argument("--header", action="store_true", help="the first line of --data holds column names: skip it")
    p.add_argument("--task", help="a named task (uses its --split)")
    p.add_argument("--split", choices=["train", "valid", "test"], default=None,
                   help="which split of --task to evaluate (default: test)")
    p.add_argument("--level", choices=["char", "word", "space"],
                   help="tokenization of --data (default: the checkpoint's)")
    add_strategy_options(p)      # scored after greedy (--beam 1: greedy only)
    p.add_argument("--limit", type=positive_int, help="evaluate only the first N pairs")
    p.add_argument("--samples", type=non_negative_int, default=5, help="sample decodes to print (0: none)")
    p.add_argument("--seed", type=non_negative_int, default=None,
                   help="split seed of --task (default: the one the checkpoint was trained with)")
    add_common(p)
    p.set_defaults(handler=lambda args: run(EvaluateRequest.from_args(args)))


def _check_options(req: EvaluateRequest) -> None:
    if (req.task is None) == (req.data is None):
        raise CliError("give exactly one of --data pairs.tsv or --task NAME", "--task/--data")
    if req.data and req.split is not None:
        raise CliError("--split chooses a split of --task; with --data the whole file is evaluated", "--split")
    if req.data and req.seed is not None:
        raise CliError("--seed chooses how --task is split; with --data the whole file is evaluated", "--seed")
    if req.task:
        for option, given in (("--level", req.level is not None), ("--header", req.header)):
            if given:
                raise CliError(f"{option} applies to --data files only; task {req.task!r} fixes its own "
                               "tokenization", option)


def trained_on(ckpt, task, split: str, seed: int, trained_seed) -> None:
    """Say loudly when the pairs about to be scored are not known to be held out from training.

    ``evaluate --task T --seed S`` with another seed than the checkpoint's splits the task
    differently: most of that "test set" may be training data. The pairs are counted
    against the training split of the checkpoint's own seed (whose fingerprint, where the
    checkpoint records one, must match, or nothing can be said).
    """
    from ..data.registry import load_task  # noqa: PLC0415

    saved = ckpt.extra.get("data")
    if saved is not None and saved.get("task") != task.name:
        print(f"warning: the checkpoint was trained on {saved.get('task')!r}, not {task.name!r}", file=sys.stderr)
        return
    if split == "train":
        return
    if seed == trained_seed and (saved is None or task.fingerprint()["split"] == saved["split"]):
        return                                        # the split the model was trained with
    if not isinstance(trained_seed, int):
        print(f"warning: the checkpoint does not record its seed, so whether these {split} pairs were held out "
              "from its training cannot be checked", file=sys.stderr)
        return
    trained = task if seed == trained_seed else load_task(task.name, seed=trained_seed)
    if saved is not None and trained.fingerprint()["split"] != saved["split"]:
        print(f"warning: task {task.name!r} with seed {trained_seed} no longer gives the split the checkpoint was "
              f"trained on (another version of its data?), so whether these {split} pairs were held out cannot be "
              "checked", file=sys.stderr)
        return
    seen = {tuple(src) for src, _ in trained.train}
    pairs = getattr(task, split)
    overlap = sum(tuple(src) in seen for src, _ in pairs)
    if overlap:
        print(f"warning: {overlap:,} of the {len(pairs):,} {split} pairs of --seed {seed} were in the checkpoint's "
              f"training data (it was trained with seed {trained_seed}): these scores are not held out; leave "
              "--seed out to score the pairs it never saw", file=sys.stderr)


def _data_pairs(req: EvaluateRequest, ckpt, model, src_level: str, tgt_level: str, bpe):
    """(task, pairs) of ``--data``: the whole file, read as the checkpoint's model reads."""
    from ..data import fingerprint  # noqa: PLC0415
    from ..data.loading import TaskData, read_pairs  # noqa: PLC0415
    from ..data.registry import saved_task  # noqa: PLC0415

    levels = ckpt.extra.get("levels", {})
    if req.level is not None:
        check_levels(ckpt, req.level, req.level, f"--level {req.level}")
    with about(f"--data {req.data}"), memory_for("reading the data", f"--data {req.data}"):
        pairs, notes = read_pairs(req.data, src_level, tgt_level, header=req.header, max_length=None,
                                  max_source_length=model.cfg.max_len - 1, bpe=bpe)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if levels.get("src_lowercase"):      # as translate does: the model saw lower-case sources only
        pairs = [(lowercase(src, src_level, bpe), tgt) for src, tgt in pairs]
    task = TaskData(os.path.basename(req.data), ckpt.vocab, [], [], pairs, src_level, tgt_level,
                    levels.get("bleu_tokenize", "char" if tgt_level == "char" else "13a"),
                    entry=saved_task(ckpt.extra))       # the trained task's scores, if it has its own
    saved = ckpt.extra.get("data")
    if saved is not None and fingerprint.digest(pairs) == saved["corpus"]:
        print(f"warning: {req.data} holds the pairs the checkpoint was trained on (its train, valid and test "
              "splits together): these scores are not held out", file=sys.stderr)
    return task, pairs


def _task_pairs(req: EvaluateRequest, ckpt, model, bpe):
    """(task, pairs) of ``--task``'s split, tokenized as the checkpoint's model was trained."""
    from ..data.registry import load_task  # noqa: PLC0415

    saved_seed = ckpt.extra.get("settings", {}).get("seed", 0)
    seed = req.seed if req.seed is not None else saved_seed if isinstance(saved_seed, int) else 0
    with about(f"--task {req.task}"):
        # The task's text, tokenized as the checkpoint's model was trained (its merges, for BPE).
        task = load_task(req.task, seed=seed, **({"level": "bpe", "bpe": bpe} if bpe is not None else {}))
    check_levels(ckpt, task.src_level, task.tgt_level, f"--task {req.task}")
    split = req.split or "test"
    pairs = getattr(task, split)
    trained_on(ckpt, task, split, seed, saved_seed)
    check_source_lengths(model, [src for src, _ in pairs], task.src_level,
                         lambda i: f"--task {req.task}, {split} pair {i + 1}")
    return task, pairs


def run(req: EvaluateRequest) -> int:
    from ..data.vocab import detokenize  # noqa: PLC0415

    set_backend(req.backend)
    strategy = req.decoder.strategy()
    _check_options(req)
    with memory_for("loading the checkpoint", f"--checkpoint {req.checkpoint}"):
        ckpt = load_checkpoint(req.checkpoint, "--checkpoint")
    model = ckpt.model.eval()
    src_level, tgt_level, bpe = checkpoint_tokenization(ckpt, req.level)
    if req.data:
        task, pairs = _data_pairs(req, ckpt, model, src_level, tgt_level, bpe)
        where = f"--data {req.data}"
    else:
        task, pairs = _task_pairs(req, ckpt, model, bpe)
        where = f"--task {req.task}"
    if req.limit is not None:
        pairs = pairs[: req.limit]
    warn_unknown_tokens(ckpt.vocab, [src for src, _ in pairs], [tgt for _, tgt in pairs], bpe=bpe is not None,
                        name=lambda i: f"{where}, pair {i + 1} ({detokenize(pairs[i][0], task.src_level)!r})")
    option = req.decoder.option
    check_decoding_fits(model, [src for src, _ in pairs], after_greedy(strategy), option,
                        max_len=task.entry.max_output_len if task.entry is not None else None)
    with quiet_numpy(), memory_for(f"scoring {len(pairs)} pairs", option,
                                   f"a smaller --beam, or --limit to score fewer pairs of {where}"):
        report(model, task, ckpt.vocab, pairs, after_greedy(strategy), n_samples=req.samples)
    return 0
