"""Checkpoint averaging (§6.1): one model whose parameters are the mean of several checkpoints'.

§6.1 of the paper: "For the base models, we used a single model obtained by averaging
the last 5 checkpoints, which were written at 10-minute intervals. For the big models,
we averaged the last 20 checkpoints." For every parameter tensor θ,

    θ_avg = (θ_1 + θ_2 + ... + θ_K) / K            element by element

Late in one run the checkpoints sit close together around a minimum, and their mean
tends to lie nearer its centre than any one of them: a cheap ensemble that costs no
more to run than a single model. It only makes sense for checkpoints of one model on
one vocabulary and tokenization, so everything else is refused, each with its own
error. Checkpoints of different runs (another seed) are refused too: their weights
started elsewhere and do not average into a model, and their test splits differ.

The average holds no optimizer state (the Adam moments of §5.3 belong to one point of
one run), and its metadata says it is an average (``extra["average"]``: the source
files and their steps), so that training can refuse to resume from it. ``translate``
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
from .model import Transformer

__all__ = ["AverageError", "ConfigMismatchError", "VocabularyMismatchError", "TokenizationMismatchError",
           "RunMismatchError", "DtypeMismatchError", "DuplicateCheckpointError", "TOKENIZATION_KEYS",
           "average_parameters", "average_checkpoints", "save_average"]

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


class DtypeMismatchError(AverageError):
    """The checkpoints' parameters are of different float types."""


class DuplicateCheckpointError(AverageError):
    """The same checkpoint file is given twice (it would count double)."""


def _name(ckpt: Checkpoint, k: int) -> str:
    return ckpt.path or f"checkpoint {k + 1}"


def _host_parameters(ckpt: Checkpoint) -> dict:
    return {name: backend.to_numpy(p.data) for name, p in ckpt.model.named_parameters()}


def _first_difference(tokens_a: list[str], tokens_b: list[str]) -> str:
    i = next(i for i, (x, y) in enumerate(zip(tokens_a, tokens_b)) if x != y)
    return f"{i} is {tokens_a[i]!r} in one and {tokens_b[i]!r} in the other"


def _check_compatible(checkpoints: Sequence[Checkpoint]) -> None:
    """Raise the AverageError subclass that says why ``checkpoints`` cannot be averaged, if one does."""
    if not checkpoints:
        raise AverageError("no checkpoints to average")
    first = checkpoints[0]
    a = _name(first, 0)
    seen = {}
    for k, ckpt in enumerate(checkpoints):
        if not isinstance(ckpt, Checkpoint):
            raise TypeError(f"average_checkpoints takes loaded checkpoints (checkpoint.load_checkpoint), "
                            f"got {type(ckpt).__name__} at position {k + 1}")
        b = _name(ckpt, k)
        if ckpt.path is not None:
            key = os.path.realpath(ckpt.path)
            if key in seen:
                raise DuplicateCheckpointError(f"{b} is given twice (also as {seen[key]}); it would count double")
            seen[key] = b
        if k == 0:
            continue
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
        seed_a = first.extra.get("settings", {}).get("seed")
        seed_b = ckpt.extra.get("settings", {}).get("seed")
        if seed_a != seed_b:
            raise RunMismatchError(f"{a} and {b} come from different training runs (seed {seed_a} vs {seed_b}): "
                                   "their weights do not average into one model, and their data splits differ")
        dtype_a = first.model.E.data.dtype
        dtype_b = ckpt.model.E.data.dtype
        if dtype_a != dtype_b:
            raise DtypeMismatchError(f"{a} has {dtype_a} parameters and {b} has {dtype_b}")


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
    checkpoint's (all agree). No optimizer state. ``step`` is the
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
    return Checkpoint(model, first.vocab, max(steps), None, extra, meta=None, path=None)


def save_average(path: str | os.PathLike, average: Checkpoint) -> None:
    """Write an average (from ``average_checkpoints``) as a checkpoint file, atomically, with no optimizer state."""
    if "average" not in average.extra:
        raise AverageError("save_average writes the result of average_checkpoints; this checkpoint is not one")
    save_checkpoint(os.fspath(path), average.model, average.vocab, optimizer=None, step=average.step,
                    extra=average.extra)
