"""How a training run goes, and a task's default recipe.

The model's own hyperparameters (d_model, h, N, d_ff, P_drop, ε_ls, ...) are a
``model.TransformerConfig``; everything else about a run lives here:

    TrainSettings   steps, the global batch (and the micro-batches it is cut into), whether a
                    batch holds sentences of one length, the learning-rate schedule
                    (by name: optim.SCHEDULES; §5.3's by default), its warm-up and
                    factor, clipping, seed, how often to validate, log and save,
                    and whether to stop once the task is solved
    Recipe          a task's defaults: a model preset (a name in data.registry.PRESETS)
                    plus its TrainSettings

Every task in the registry (``data.registry``) carries a Recipe, so a task and
the way it is trained are defined in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from .optim import SCHEDULES
from .options import check_fields, setting

# The most steps a run or its warm-up may count: both enter the schedule's formula as floats (warmup_steps ** -1.5),
# where a number of 310 digits overflowed (issue 36); a billion is over 3,000 times §5.2's big models' 300,000 steps.
MAX_STEPS = 10 ** 9


@dataclass
class TrainSettings:
    """How one training run goes (the model's own hyperparameters are in TransformerConfig).

    Each field declares its check and its help once (``options.setting``): the command line
    makes ``train --FIELD-NAME`` of it, ``__post_init__`` checks it. The rules between
    fields follow the fields (``__post_init__``, ``with_given``).
    """

    steps: int = setting(600, "optimizer steps (default: the task's); exactly this many, even once solved",
                         at_least=1, at_most=MAX_STEPS)
    # batch_size and max_tokens are the global batch of a step, whatever cuts it: mpiexec -n N into N
    # shards (in space), accumulate into K micro-batches (in time); the update is the same (distributed.py).
    batch_size: int | None = setting(64, "sentence pairs per step: the global batch, which --accumulate and "
                                         "mpiexec -n N cut into parts", at_least=1)
    max_tokens: int | None = setting(None, "cap on the padded tokens of a step's global batch", at_least=1)
    accumulate: int = setting(1, "cut each global batch into K micro-batches, run one after another, their "
                                 "gradients summed into one update (gradient accumulation: the update of the whole "
                                 "batch in the memory of about 1/K of it; default 1)", at_least=1, metavar="K")
    # §5.1: "Sentence pairs were batched together by approximate sequence length" (little
    # padding). False: every batch is a random draw of the training pairs, of mixed lengths.
    # A copy batch of one length teaches one length at a time, and the model keeps forgetting
    # the others; mixed batches solve copy and reverse in a fraction of the steps
    # (lessons/experiments/copy_recipe_search.json, the candidates named "pool1").
    batch_by_length: bool = setting(True, "batch sentences of about one length together (§5.1); "
                                          "--no-batch-by-length: random batches of mixed lengths")
    lr_factor: float = setting(1.0, "multiplier on the learning-rate schedule", above=0)
    schedule: str = setting("noam", "the learning-rate schedule, by name (optim.SCHEDULES): noam, §5.3's warm-up "
                                    "then 1/√step, is the paper's and the default", choices=SCHEDULES)
    warmup_steps: int = setting(4000, "warm-up steps of the schedule (§5.3's base model: 4000)", at_least=1,
                                at_most=MAX_STEPS)
    clip_norm: float | None = setting(None, "clip the global gradient norm to this value", above=0)
    seed: int = setting(0, "seed of the data split, the initial weights and dropout (default 0; when resuming, "
                           "the checkpoint's)", at_least=0)
    valid_every: int = setting(250, "validate (and save a checkpoint) every this many steps", at_least=1)
    log_every: int = setting(10, "log the training loss to metrics.jsonl every this many steps", at_least=1)
    checkpoint_every: int | None = setting(None, "also save a checkpoint every this many steps (default: only at "
                                                 "validations and at the end)", at_least=1)
    keep_last: int | None = setting(None, "keep the last K checkpoints saved at those intervals (and the last "
                                          "step's) as checkpoint.stepNNNNNN.npz, for `average` (§6.1 averages the "
                                          "last 5)", at_least=1, metavar="K")
    # §6.1: the base models were "a single model obtained by averaging the last 5 checkpoints".
    # At the last step, also write average.npz, the mean of the last K kept checkpoints (snapshots.py);
    # needs keep_last >= K. The run's checkpoint.npz stays the last step's (what a resume continues).
    average_last: int | None = setting(None, "at the last step, also write average.npz, the average of the last K "
                                             "kept checkpoints (§6.1; needs --keep-last K or more), and score it on "
                                             "the test set too", at_least=2, metavar="K")
    valid_decode: int = setting(200, "validation sentences decoded greedily at each validation (their exact match)",
                                at_least=0)
    # Stop once the validation exact match has been 100% at this many validations in a row
    # ("solved"); 0: always train all ``steps``. One perfect validation can be luck (a
    # sequence or two the model gets right by a hair); two in a row, ``valid_every`` steps
    # apart, is a model that has learned the task.
    stop_when_solved: int = setting(0, "stop once validation exact match is 100% at K validations in a row (0: "
                                       "never; default: the task's, 2 for copy and reverse, 0 when --steps is "
                                       "given)", at_least=0, metavar="K")
    # What counts as solved: 1.0, every decoded validation sentence right. A task whose validation
    # split keeps one or two near-misses (German numbers at character level, issue 37) stops at a
    # share just under it; a count of whole sentences, so every rank decides the same.
    solved_exact_match: float = setting(1.0, "the validation exact match that counts as solved for "
                                             "--stop-when-solved (default 1.0: every decoded sentence right)",
                                        above=0, at_most=1, metavar="SHARE")
    max_consecutive_skips: int = setting(5, "non-finite steps in a row (each skipped, no update) before the run "
                                            "stops", at_least=1)

    def __post_init__(self):
        """Every field checked here, so a bad value is named before any work is done; then the rules between them."""
        check_fields(self)
        try:
            check_rules(vars(self))
        except RuleError as exc:
            raise RuleError(f"TrainSettings: {exc}", exc.fields) from None

    def with_given(self, given: dict) -> TrainSettings:
        """These settings with the fields a user gave (``train --steps 500``: {"steps": 500}), and the rule
        between them: steps given without stop_when_solved means exactly that many steps, solved or not."""
        if "steps" in given and "stop_when_solved" not in given:
            given = {**given, "stop_when_solved": 0}
        return replace(self, **given)

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


class RuleError(ValueError):
    """Fields that break a rule between them; ``fields`` names them (the command line names their options)."""

    def __init__(self, message: str, fields: tuple[str, ...]):
        super().__init__(message)
        self.fields = fields


def field_words(name: str, *value) -> str:
    """A field, and its value if one is given, in the dataclass's words: "keep_last", "keep_last=2"."""
    return f"{name}={value[0]!r}" if value else name


def check_rules(values: dict, words=field_words) -> None:
    """The rules between TrainSettings fields (``values``: {field: value}, each already checked alone).

    ``words(field)`` and ``words(field, value)`` write a field, and a field with its value, into the
    message: ``keep_last``, ``keep_last=2`` here; the command line passes its own (``--keep-last 2``).
    A broken rule is a RuleError naming the fields.
    """
    batch_size, max_tokens = values.get("batch_size"), values.get("max_tokens")
    if batch_size is None and max_tokens is None:
        raise RuleError(f"give {words('batch_size')} or {words('max_tokens')} (or both)",
                        ("batch_size", "max_tokens"))
    average_last, keep_last = values.get("average_last"), values.get("keep_last")
    if average_last is not None and (keep_last or 0) < average_last:
        raise RuleError(f"{words('average_last', average_last)} averages the last {average_last} kept checkpoints, "
                        f"so it needs {words('keep_last')} {average_last} or more, got "
                        f"{words('keep_last', keep_last)}", ("average_last", "keep_last"))
    # accumulate K cuts a global batch into K micro-batches of at least one pair each (distributed.split_batch):
    # a batch holds at most batch_size pairs, and at most max_tokens (a pair has at least one token). A larger
    # K would only add empty micro-batches, and the list of them alone can fill the memory (issue 36).
    accumulate = values.get("accumulate", 1)
    most, by = min((v, f) for f, v in (("batch_size", batch_size), ("max_tokens", max_tokens)) if v is not None)
    if accumulate > most:
        raise RuleError(f"{words('accumulate', accumulate)} cuts each global batch into more micro-batches than it "
                        f"can hold pairs ({words(by, most)}); give {words('accumulate')} {most} or less",
                        ("accumulate", by))


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


__all__ = ["MAX_STEPS", "TrainSettings", "Recipe", "RuleError", "check_rules", "field_words", "recipe"]


def solved_words(settings) -> str:
    """What counts as solved, in a message: "100%", or "at least 99.6%" under ``solved_exact_match``."""
    share = settings.solved_exact_match
    return "100%" if share >= 1.0 else f"at least {100 * share:g}%"
