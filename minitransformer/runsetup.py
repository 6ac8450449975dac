"""Setting up a training run, as the command line does it: the model, the settings, the checks.

    preset, settings = settings_for("copy", steps=500)      # a task's recipe, with changes
    trainer = make_trainer(task, settings, preset)          # a fresh model (or resume=checkpoint)
    trainer.run()                                           # train.Trainer: the loop itself

``python -m minitransformer train``, the benchmarks and the lessons' experiments all set a
run up through these functions, so a run made in a script is the run the command line
makes. ``train.py`` holds the loop; this module decides what it is given:

* ``build_model``: a fresh model of a preset, sized for the task's vocabulary and longest
  sentence (max_len leaves room for decoding, §6.1's input + 50);
* ``settings_for``: the task's recipe (``data.registry``) with the caller's changes;
* ``check_resumable`` and ``make_trainer(resume=...)``: continuing from a checkpoint is
  refused, with a message naming both sides, when the data, its split, the vocabulary or
  the step count disagree with it, or when it holds no optimizer state (an average).
"""

from __future__ import annotations

from dataclasses import replace

from .data.fingerprint import for_resume
from .data.loading import TaskData
from .data.registry import preset as preset_config
from .data.registry import recipe_for
from .decoding import EXTRA_OUTPUT_LEN
from .model import Transformer
from .settings import Recipe, TrainSettings, solved_words
from .train import Trainer, encode_pairs


def build_model(task: TaskData, preset: str = "copy", seed: int = 0, **overrides) -> Transformer:
    """A fresh model of ``preset`` sized for the task, with the TransformerConfig fields in
    ``overrides`` changed: the vocabulary decides vocab_size and pad_id, and max_len is raised
    to leave room for decoding (the longest sentence + 50, §6.1) unless ``overrides`` sets it,
    in which case too small a max_len is an error."""
    cfg = preset_config(preset).with_(vocab_size=len(task.vocab), pad_id=task.vocab.pad_id, **overrides)
    needed = max(max(len(s), len(t)) + 1 for s, t in task.train + task.valid + task.test) + EXTRA_OUTPUT_LEN + 1
    if cfg.max_len < needed:
        if "max_len" in overrides:
            raise ValueError(f"max_len={cfg.max_len} is too small for task {task.name!r}: its longest sentence "
                             f"needs {needed} positions (its length + <eos>, + {EXTRA_OUTPUT_LEN} for decoding)")
        cfg = cfg.with_(max_len=needed)
    return Transformer(cfg, seed=seed)


def settings_for(task: str | TaskData | Recipe, **overrides) -> tuple[str, TrainSettings]:
    """(preset, settings) of a task's recipe, with ``overrides`` (a None value keeps the recipe's).

    task: a registered task's name, a loaded TaskData (a --data file's carries
    ``data.registry.DATA_RECIPE``), or a Recipe.
    """
    if isinstance(task, TaskData):
        if task.recipe is None:
            raise ValueError(f"task {task.name!r} has no recipe; give one with settings_for(Recipe(...))")
        recipe = task.recipe
    else:
        recipe = task if isinstance(task, Recipe) else recipe_for(task)
    preset = overrides.pop("preset", None) or recipe.preset
    changes = {k: v for k, v in overrides.items() if v is not None}
    return preset, replace(recipe.settings, **changes)


def check_resumable(ckpt) -> None:
    """A ValueError if training cannot continue from the loaded checkpoint ``ckpt``: it holds no
    optimizer state, for an average of checkpoints (average.py) in particular, which says so."""
    where = getattr(ckpt, "path", None) or "the checkpoint"
    average = ckpt.extra.get("average")
    if average is not None:
        raise ValueError(f"{where} is an average of {len(average['sources'])} checkpoints (steps "
                         f"{', '.join(map(str, average['steps']))}, written by `average`); an average has no "
                         "optimizer state, so training cannot resume from it. Translate or evaluate with it, or "
                         "resume from one of the checkpoints it averages")
    if ckpt.optimizer_state is None:
        raise ValueError(f"{where}: the checkpoint has no optimizer state, so training cannot resume from it")
    _check_batch_meaning(ckpt.extra, where)


def _check_batch_meaning(extra: dict, where: str) -> None:
    """Refuse a checkpoint written while ``accumulate`` K meant K batches of batch_size each per step.

    Since issue 33 batch_size (and max_tokens) is the step's whole batch, which accumulate cuts into K
    micro-batches (as mpiexec -n K cuts it into shards); checkpoints written since say so
    (``extra["global_batch"]``). An older one with accumulate = 1 means the same under both rules and
    resumes; one with accumulate > 1 drew K batches per step from another batch plan, which no
    setting of the new rule reproduces, so it is refused rather than continued on other batches.
    """
    settings = extra.get("settings") or {}
    k = settings.get("accumulate", 1)
    if extra.get("global_batch") or not isinstance(k, int) or k <= 1:
        return
    size, tokens = settings.get("batch_size"), settings.get("max_tokens")
    same = " ".join([*([f"--batch-size {k * size}"] if isinstance(size, int) else []),
                     *([f"--max-tokens {k * tokens}"] if isinstance(tokens, int) else []), f"--accumulate {k}"])
    raise ValueError(f"{where} was written when --accumulate {k} meant {k} batches of --batch-size each per step; "
                     f"--batch-size and --max-tokens now mean the step's whole batch, which --accumulate cuts into "
                     f"{k}, so this run cannot be continued on the batches it was drawing. Start a new run with "
                     f"{same} for updates of the same size")


def make_trainer(task: TaskData, settings: TrainSettings, preset: str, out_dir: str | None = None,
                 resume=None, config: dict | None = None, comm=None) -> Trainer:
    """A Trainer for ``task``: a fresh model of ``preset`` with the TransformerConfig fields in
    ``config`` changed (``train --set``), or the model, vocabulary and optimizer state of a
    loaded checkpoint (``resume``, a ``checkpoint.Checkpoint``).

    This is the one way a run is set up: ``python -m minitransformer train`` and
    ``benchmarks/bench_copy.py`` both call it.
    """
    if resume is not None:
        where = getattr(resume, "path", None) or "the checkpoint"
        check_resumable(resume)
        # First the data (its fingerprint says how it differs), then what follows from it (the vocabulary).
        data = for_resume(resume.extra.get("data"), task.fingerprint(), resume.step, where)
        if resume.vocab != task.vocab:
            raise ValueError(f"{where}: the checkpoint was trained with a different vocabulary than task "
                             f"{task.name!r}")
        k, streak = settings.stop_when_solved, resume.extra.get("solved_streak", 0)
        if k and streak >= k:
            raise ValueError(f"{where}: the run was solved by step {resume.step} (validation exact match "
                             f"{solved_words(settings)} at {streak} validations in a row), so it stops before "
                             "training; to train it further, "
                             f"give the steps to reach (--steps {resume.step + 1} or more; they switch the stop off)")
        if resume.step >= settings.steps:
            raise ValueError(f"{where}: the checkpoint is at step {resume.step}, and --steps {settings.steps} "
                             f"leaves nothing to train; give more steps (--steps {resume.step + 1} or more)")
        model, vocab = resume.model, resume.vocab
    else:
        model, vocab = build_model(task, preset, seed=settings.seed, **(config or {})), task.vocab
        data = task.fingerprint()
    trainer = Trainer(model, vocab, encode_pairs(vocab, task.train), encode_pairs(vocab, task.valid),
                      settings, out_dir, levels=task.levels, comm=comm)
    trainer.preset = preset
    trainer.task = task.entry.name if task.entry is not None else None
    trainer.data_fingerprint = data
    if resume is not None:
        trainer.restore(resume)
    return trainer


__all__ = ["build_model", "settings_for", "check_resumable", "make_trainer"]
