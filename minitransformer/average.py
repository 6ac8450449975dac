"""Checkpoint averaging (§6.1): one model whose parameters are the mean of several checkpoints'.

§6.1 of the paper: "For the base models, we used a single model obtained by averaging
the last 5 checkpoints, which were written at 10-minute intervals. For the big models,
we averaged the last 20 checkpoints." For every parameter tensor θ,

    θ_avg = (θ_1 + θ_2 + ... + θ_K) / K            element by element

Late in one run the checkpoints sit close together around a minimum, and their mean
tends to lie nearer its centre than any one of them: a cheap ensemble that costs no
more to run than a single model. It only makes sense for checkpoints of one model on
one vocabulary and tokenization, so everything else is refused, each with its own
error. Checkpoints of different runs (another seed, other data or another split of it)
are refused too: their weights started elsewhere and do not average into a model, and
their test splits differ. Each checkpoint counts once: one file under two names (``train``
hard-links ``checkpoint.npz`` to its last step's file), a copy of a step file, or an
average given with one of its own steps is refused, naming both files; so is an average
among the sources, which would weigh its steps by another share than the others'.

The average holds no optimizer state (the Adam moments of §5.3 belong to one point of
one run), and its metadata says it is an average (``extra["average"]``: the source
files and their steps), so that training can refuse to resume from it. It keeps the
fingerprint of the data its sources were trained on (``extra["data"]``), so ``evaluate``
warns about scoring it on its training pairs as it does for a checkpoint. ``translate``
and ``evaluate`` use it like any checkpoint.

    >>> from minitransformer.checkpoint import load_checkpoint       # doctest: +SKIP
    >>> ckpts = [load_checkpoint(p) for p in paths]                    # doctest: +SKIP
    >>> save_average("avg.npz", average_checkpoints(ckpts))            # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from . import backend
from .checkpoint import Checkpoint, save_checkpoint
from .data import fingerprint
from .model import Transformer

__all__ = ["AverageError", "ConfigMismatchError", "VocabularyMismatchError", "TokenizationMismatchError",
           "RunMismatchError", "DataMismatchError", "DtypeMismatchError", "DuplicateCheckpointError",
           "AverageOfAveragesError", "TOKENIZATION_KEYS", "average_parameters", "average_checkpoints", "save_average"]

# The entries of Checkpoint.extra that say how text becomes tokens; checkpoints to be averaged
# must agree on all of them.
TOKENIZATION_KEYS = ("levels",)


class AverageError(ValueError):
    """The checkpoints cannot be averaged (each reason below has its own subclass)."""


class ConfigMismatchError(AverageError):
    """The checkpoints are of different models (TransformerConfig)."""


class VocabularyMismatchError(AverageError):
    """The checkpoints have different vocabularies: row i of the embedding means another token."""


class TokenizationMismatchError(AverageError):
    """The checkpoints tokenize text differently (``extra["levels"]``)."""


class RunMismatchError(AverageError):
    """The checkpoints come from different training runs (another seed)."""


class DataMismatchError(RunMismatchError):
    """The checkpoints were trained on different data, or on the same pairs split differently."""


class DtypeMismatchError(AverageError):
    """The checkpoints' parameters are of different float types."""


class DuplicateCheckpointError(AverageError):
    """One checkpoint is given twice, under any name (it would count twice): the same path, one file
    under two names, a copy of it (the same step of the same run), or an average holding its step."""


class AverageOfAveragesError(AverageError):
    """An average is among the checkpoints to average: its steps would weigh less than the others'."""


def _name(ckpt: Checkpoint, k: int) -> str:
    return ckpt.path or f"checkpoint {k + 1}"


def _host_parameters(ckpt: Checkpoint) -> dict:
    return {name: backend.to_numpy(p.data) for name, p in ckpt.model.named_parameters()}


def _first_difference(tokens_a: list[str], tokens_b: list[str]) -> str:
    i = next(i for i, (x, y) in enumerate(zip(tokens_a, tokens_b)) if x != y)
    return f"{i} is {tokens_a[i]!r} in one and {tokens_b[i]!r} in the other"


def _steps(ckpt: Checkpoint) -> list[int]:
    """The steps of its run that a checkpoint holds: its own, or an average's sources'."""
    average = ckpt.extra.get("average")
    return list(average["steps"]) if average else [int(ckpt.step)]


def _check_distinct_files(checkpoints: Sequence[Checkpoint]) -> None:
    """No file is given twice, under one name or two (a hard link: ``checkpoint.npz`` is the last step's file)."""
    seen: list[tuple[os.stat_result, str]] = []
    for k, ckpt in enumerate(checkpoints):
        if ckpt.path is None:
            continue
        try:
            stat = os.stat(ckpt.path)
        except OSError:                                # gone since it was loaded: nothing to compare
            continue
        b = _name(ckpt, k)
        for other_stat, a in seen:
            if os.path.samestat(stat, other_stat):
                if os.path.realpath(a) == os.path.realpath(b):
                    raise DuplicateCheckpointError(f"{b} is given twice; it would count twice")
                raise DuplicateCheckpointError(f"{a} and {b} are one file under two names (train links "
                                               "checkpoint.npz and checkpoint.prev.npz to its latest step files); "
                                               "it would count twice")
        seen.append((stat, b))


def _check_same_run(first: Checkpoint, ckpt: Checkpoint, a: str, b: str) -> None:
    """The two checkpoints come from one run: one seed, and the same data split the same way."""
    seed_a = first.extra.get("settings", {}).get("seed")
    seed_b = ckpt.extra.get("settings", {}).get("seed")
    if seed_a != seed_b:
        raise RunMismatchError(f"{a} and {b} come from different training runs (seed {seed_a} vs {seed_b}): "
                               "their weights do not average into one model, and their data splits differ")
    data_a, data_b = first.extra.get("data"), ckpt.extra.get("data")
    if data_a is None or data_b is None:               # written before fingerprints: nothing to compare
        return
    if data_a["corpus"] != data_b["corpus"]:
        raise DataMismatchError(f"{a} and {b} were trained on different data ({fingerprint.describe(data_a)} vs "
                                f"{fingerprint.describe(data_b)}): they are two runs, not one")
    if data_a["split"] != data_b["split"]:
        raise DataMismatchError(f"{a} and {b} were trained on the same pairs split differently into train / valid "
                                "/ test: they are two runs, not one")


def _check_each_step_once(checkpoints: Sequence[Checkpoint]) -> None:
    """Checkpoints of one run (already checked) hold each step once: a copy of a step file, or an average
    given with one of its own steps, would count that step twice. An average among several sources is
    refused too: its steps would weigh less than the others'."""
    holder: dict[int, int] = {}                        # step -> the position of the checkpoint holding it
    for k, ckpt in enumerate(checkpoints):
        for step in _steps(ckpt):
            if step in holder:
                j = holder[step]
                for mine, theirs in ((j, k), (k, j)):
                    if "average" in checkpoints[mine].extra:
                        steps = ", ".join(map(str, _steps(checkpoints[mine])))
                        raise DuplicateCheckpointError(
                            f"{_name(checkpoints[mine], mine)} already holds step {step} (it averages steps {steps}), "
                            f"and so does {_name(checkpoints[theirs], theirs)}; it would count twice")
                raise DuplicateCheckpointError(f"{_name(checkpoints[j], j)} and {_name(ckpt, k)} are both step {step} "
                                               "of the same run (one a copy of the other, or that step trained "
                                               "twice); it would count twice")
            holder[step] = k
    if len(checkpoints) > 1:
        for k, ckpt in enumerate(checkpoints):
            if "average" in ckpt.extra:
                raise AverageOfAveragesError(
                    f"{_name(ckpt, k)} is already an average (of steps {', '.join(map(str, _steps(ckpt)))}): average "
                    "the checkpoints it was made from together with the others, so that each step counts once")


def _check_compatible(checkpoints: Sequence[Checkpoint]) -> None:
    """Raise the AverageError subclass that says why ``checkpoints`` cannot be averaged, if one does."""
    if not checkpoints:
        raise AverageError("no checkpoints to average")
    for k, ckpt in enumerate(checkpoints):
        if not isinstance(ckpt, Checkpoint):
            raise TypeError(f"average_checkpoints takes loaded checkpoints (checkpoint.load_checkpoint), "
                            f"got {type(ckpt).__name__} at position {k + 1}")
    _check_distinct_files(checkpoints)
    first = checkpoints[0]
    a = _name(first, 0)
    for k, ckpt in enumerate(checkpoints[1:], start=1):
        b = _name(ckpt, k)
        if ckpt.model.cfg != first.model.cfg:
            ours, theirs = dataclasses.asdict(first.model.cfg), dataclasses.asdict(ckpt.model.cfg)
            diff = ", ".join(f"{f}={ours[f]!r} vs {theirs[f]!r}" for f in ours if ours[f] != theirs.get(f))
            raise ConfigMismatchError(f"{a} and {b} are different models ({diff})")
        if ckpt.vocab != first.vocab:
            sizes = (len(first.vocab), len(ckpt.vocab))
            detail = (f"{sizes[0]} and {sizes[1]} tokens" if sizes[0] != sizes[1] else
                      f"{sizes[0]} tokens each, but token {_first_difference(first.vocab.tokens, ckpt.vocab.tokens)}")
            raise VocabularyMismatchError(f"{a} and {b} have different vocabularies ({detail})")
        for key in TOKENIZATION_KEYS:
            if first.extra.get(key) != ckpt.extra.get(key):
                raise TokenizationMismatchError(f"{a} and {b} tokenize differently ({key}: "
                                                f"{first.extra.get(key)!r} vs {ckpt.extra.get(key)!r})")
        _check_same_run(first, ckpt, a, b)
        dtype_a = first.model.E.data.dtype
        dtype_b = ckpt.model.E.data.dtype
        if dtype_a != dtype_b:
            raise DtypeMismatchError(f"{a} has {dtype_a} parameters and {b} has {dtype_b}")
    _check_each_step_once(checkpoints)


def average_parameters(checkpoints: Sequence[Checkpoint]) -> dict:
    """{parameter name: the element-wise mean over ``checkpoints``}, as host (NumPy) arrays.

    The sum is accumulated in float64 and the mean cast back to the parameters' dtype,
    so the average of one checkpoint is that checkpoint, bit for bit, and the average of
    two float32 checkpoints is their exact mean rounded once.
    """
    _check_compatible(checkpoints)
    total = {}                                         # name -> the running sum, float64
    for ckpt in checkpoints:
        for name, value in _host_parameters(ckpt).items():
            if name in total:
                total[name] += value                   # float32 + float64: added in float64
            else:
                total[name] = value.astype("float64")
    dtype = checkpoints[0].model.E.data.dtype
    return {name: (s / len(checkpoints)).astype(dtype) for name, s in total.items()}


def average_checkpoints(checkpoints: Sequence[Checkpoint]) -> Checkpoint:
    """The average of ``checkpoints`` (§6.1) as a new in-memory Checkpoint.

    Its model is a fresh Transformer of the shared config holding the mean parameters,
    on the current backend; vocabulary, tokenization (``extra["levels"]``) and training
    settings (and the task and preset, where the checkpoints name them) are the first
    checkpoint's (all agree), and so is the data fingerprint (``extra["data"]``, where every
    source has one; its ``since_step`` the latest). No optimizer state. ``step`` is the
    latest source step, and ``extra["average"] = {"sources": [...], "steps": [...]}``; ``meta``
    is None (it was not read from a file).
    Raises an AverageError subclass naming the two checkpoints that disagree.
    """
    means = average_parameters(checkpoints)
    first = checkpoints[0]
    model = Transformer(first.model.cfg, seed=0)
    xp = backend.module_for(backend.backend_name())
    for name, p in model.named_parameters():
        p.data = xp.asarray(means[name])
        p.grad = xp.zeros_like(p.data)
    model.reseed_dropout(0)
    steps = [int(c.step) for c in checkpoints]
    extra = {key: first.extra[key] for key in (*TOKENIZATION_KEYS, "settings", "task", "preset")
             if key in first.extra}
    extra["average"] = {"sources": [_name(c, k) for k, c in enumerate(checkpoints)], "steps": steps}
    data = [c.extra.get("data") for c in checkpoints]
    if all(d is not None for d in data):           # one data, split one way (checked): what evaluate compares
        extra["data"] = {**data[0], "since_step": max(d.get("since_step", 0) for d in data)}
    return Checkpoint(model, first.vocab, max(steps), None, extra, meta=None, path=None)


def save_average(path: str | os.PathLike, average: Checkpoint) -> None:
    """Write an average (from ``average_checkpoints``) as a checkpoint file, atomically, with no optimizer state."""
    if "average" not in average.extra:
        raise AverageError("save_average writes the result of average_checkpoints; this checkpoint is not one")
    save_checkpoint(os.fspath(path), average.model, average.vocab, optimizer=None, step=average.step,
                    extra=average.extra)
