"""How a training run goes, and a task's default recipe.

The model's own hyperparameters (d_model, h, N, d_ff, P_drop, ε_ls, ...) are a
``model.TransformerConfig``; everything else about a run lives here:

    TrainSettings   steps, batch size (and batches accumulated per step), whether a
                    batch holds sentences of one length, the §5.3 schedule's warm-up
                    and factor, clipping, seed, how often to validate, log and save,
                    and whether to stop once the task is solved
    Recipe          a task's defaults: a model preset (a name in data.registry.PRESETS)
                    plus its TrainSettings

Every task in the registry (``data.registry``) carries a Recipe, so a task and
the way it is trained are defined in one place.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)         # NumPy's integers are Integral


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


@dataclass
class TrainSettings:
    """How one training run goes (the model's own hyperparameters are in TransformerConfig)."""

    steps: int = 600
    batch_size: int | None = 64
    max_tokens: int | None = None
    accumulate: int = 1                    # batches per optimizer step (gradient accumulation)
    # §5.1: "Sentence pairs were batched together by approximate sequence length" (little
    # padding). False: every batch is a random draw of the training pairs, of mixed lengths.
    # A copy batch of one length teaches one length at a time, and the model keeps forgetting
    # the others; mixed batches solve copy and reverse in a fraction of the steps
    # (lessons/experiments/copy_recipe_search.json, the candidates named "pool1").
    batch_by_length: bool = True
    lr_factor: float = 1.0
    warmup_steps: int = 4000               # §5.3's value for the base model
    clip_norm: float | None = None
    seed: int = 0
    valid_every: int = 250
    log_every: int = 10
    checkpoint_every: int | None = None    # None: only at validations and at the end
    keep_last: int | None = None           # also keep the last K of those as checkpoint.stepNNNNNN.npz (§6.1)
    # §6.1: the base models were "a single model obtained by averaging the last 5 checkpoints".
    # At the last step, also write average.npz, the mean of the last K kept checkpoints (snapshots.py);
    # needs keep_last >= K. The run's checkpoint.npz stays the last step's (what a resume continues).
    average_last: int | None = None
    valid_decode: int = 200                # sentences decoded greedily at each validation
    # Stop once the validation exact match has been 100% at this many validations in a row
    # ("solved"); 0: always train all ``steps``. One perfect validation can be luck (a
    # sequence or two the model gets right by a hair); two in a row, ``valid_every`` steps
    # apart, is a model that has learned the task.
    stop_when_solved: int = 0
    max_consecutive_skips: int = 5         # non-finite steps in a row before the run stops

    def __post_init__(self):
        """Every field checked here, so a bad value is named before any work is done."""
        def check(name, ok, what):
            value = getattr(self, name)
            if not ok(value):
                raise ValueError(f"TrainSettings: {name} must be {what}, got {value!r}")

        for name in ("steps", "accumulate", "warmup_steps", "valid_every", "log_every", "max_consecutive_skips"):
            check(name, lambda v: _is_int(v) and v >= 1, "an integer ≥ 1")
        for name in ("batch_size", "max_tokens", "checkpoint_every", "keep_last"):
            check(name, lambda v: v is None or (_is_int(v) and v >= 1), "an integer ≥ 1 or None")
        check("seed", lambda v: _is_int(v) and v >= 0, "an integer ≥ 0")
        check("valid_decode", lambda v: _is_int(v) and v >= 0, "an integer ≥ 0")
        check("stop_when_solved", lambda v: _is_int(v) and v >= 0, "an integer ≥ 0 (0: never stop early)")
        check("batch_by_length", lambda v: isinstance(v, bool), "True or False")
        check("lr_factor", lambda v: _is_number(v) and v > 0, "a finite number > 0")
        check("clip_norm", lambda v: v is None or (_is_number(v) and v > 0), "a finite number > 0 or None")
        check("average_last", lambda v: v is None or (_is_int(v) and v >= 2), "an integer ≥ 2 or None")
        if self.batch_size is None and self.max_tokens is None:
            raise ValueError("TrainSettings: give batch_size or max_tokens (or both)")
        if self.average_last is not None and (self.keep_last or 0) < self.average_last:
            raise ValueError(f"TrainSettings: average_last={self.average_last} averages the last "
                             f"{self.average_last} kept checkpoints, so keep_last must be at least "
                             f"{self.average_last}, got {self.keep_last!r}")

    @classmethod
    def from_dict(cls, data: dict, where: str = "settings") -> TrainSettings:
        """Settings saved with ``asdict`` (in a checkpoint).

        An unknown field is a ValueError naming it; a missing field takes its
        default (a checkpoint written before the field existed).
        """
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object of training settings, got {type(data).__name__}")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"{where}: unknown training settings {unknown}")
        try:
            return cls(**data)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class Recipe:
    """A task's defaults: the model preset and the training settings (each overridable).

    preset: a name in ``data.registry.PRESETS`` (the model's TransformerConfig; the
    command line changes single fields of it with ``--set FIELD=VALUE``);
    settings: the run's TrainSettings.
    """

    preset: str
    settings: TrainSettings = field(default_factory=TrainSettings)

    def __post_init__(self):
        if not isinstance(self.preset, str) or not self.preset:
            raise ValueError(f"Recipe: preset must be the name of a model preset, got {self.preset!r}")
        if not isinstance(self.settings, TrainSettings):
            raise TypeError(f"Recipe: settings must be a TrainSettings, got {type(self.settings).__name__}")


def recipe(preset: str, **settings) -> Recipe:
    """``Recipe(preset, TrainSettings(**settings))``: the short form task entries use."""
    return Recipe(preset, TrainSettings(**settings))


__all__ = ["TrainSettings", "Recipe", "recipe"]
