"""The task registry: every named task, in one place.

    TASKS              {name: Task}: the synthetic tasks (tasks.py), the offline
                       translation tasks (translation.py) and the parse tasks (parsing.py)
    get_task(name)     the entry, or a ValueError listing the names
    PRESETS            {name: TransformerConfig}: every model size by name, the model's own
                       (model.PRESETS: base, big, tiny) and the tasks' (copy, reverse,
                       translate, parse), each beside its recipe in its task module
    preset(name)       the TransformerConfig of a preset, or a ValueError listing the names
    load_task(...)     a named task's TaskData, or a user's TSV file's
    recipe_for(name)   a named task's recipe; DATA_RECIPE for a --data file
    saved_task(extra)  the entry a checkpoint was trained on (its extra's "task"), or None

A task is one ``loading.Task`` entry in the module that generates its data; the
command line (``tasks``, ``train --help``, ``train --task``), the training
recipes and the task table of docs/tasks.md all read them from here. A task module
added later joins the lists in ``_MODULE_ENTRIES`` and ``_MODULE_PRESETS`` (its line in each).
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import model
from . import parsing, tasks, translation
from .bpe import BPE
from .loading import MAX_DATA_LENGTH, Task, TaskData, load_tsv_task

# Each task module's entries, in the order `tasks` lists them.
_MODULE_ENTRIES = [tasks.TASKS, translation.REGISTRY_ENTRIES, parsing.TASKS]


def _build(entry_lists) -> dict[str, Task]:
    registry: dict[str, Task] = {}
    for entries in entry_lists:
        for task in entries:
            if not isinstance(task, Task):
                raise TypeError(f"task registry: expected loading.Task entries, got {type(task).__name__}")
            if task.name in registry:
                raise ValueError(f"task registry: two tasks are named {task.name!r}")
            registry[task.name] = task
    return registry


TASKS: dict[str, Task] = _build(_MODULE_ENTRIES)

# Each task module's model sizes, the ones its recipes name.
_MODULE_PRESETS = [tasks.PRESETS, translation.PRESETS, parsing.PRESETS]


class _Presets(Mapping):
    """One read-through view of several {name: TransformerConfig} tables, which must not share a
    name, in their order. A view, not a copy: a size added to one of them later (an experiment's
    search, lessons/experiments/copy_recipe_search.py) is found too."""

    def __init__(self, tables):
        seen: set[str] = set()
        for table in tables:
            twice = seen & set(table)
            if twice:
                raise ValueError(f"model presets: {', '.join(sorted(twice))} defined twice")
            seen |= set(table)
        self._tables = tables

    def __getitem__(self, name):
        for table in self._tables:
            if name in table:
                return table[name]
        raise KeyError(name)

    def __iter__(self):
        return (name for table in self._tables for name in table)

    def __len__(self) -> int:
        return sum(len(table) for table in self._tables)


PRESETS: Mapping[str, model.TransformerConfig] = _Presets([model.PRESETS, *_MODULE_PRESETS])


def preset(name: str) -> model.TransformerConfig:
    """The TransformerConfig of the preset ``name`` (``--preset NAME``); an unknown name is a
    ValueError that lists the known ones."""
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None

# A user's TSV file (--data): the translation preset and schedule, at most 2,000 steps, stopping as
# copy and reverse do once solved: 100% validation exact match at two validations in a row, 250
# steps apart (a 40-line file is solved long before step 2,000; a run with --steps N runs N).
DATA_RECIPE = translation.translation_recipe(steps=2000, batch_size=64, valid_every=250, stop_when_solved=2)


def task_names() -> list[str]:
    """Every registered task name, in the registry's order."""
    return list(TASKS)


def get_task(name: str) -> Task:
    """The registry entry of ``name``; an unknown name is a ValueError that lists the known ones."""
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}") from None


def recipe_for(name: str):
    """The recipe (preset + training settings) of the registered task ``name``.

    An unknown name is an error (never a silent fallback); a user's TSV file
    has no name here and uses ``DATA_RECIPE``.
    """
    return get_task(name).recipe


def saved_task(extra: dict) -> Task | None:
    """The registry entry a checkpoint was trained on, from its ``extra["task"]`` (``train.Trainer.save``).

    None for a run on a --data file, a checkpoint written before the name was
    saved, or a task this version of the package does not have: the caller
    then treats outputs as plain text.
    """
    name = extra.get("task") if isinstance(extra, dict) else None
    return TASKS.get(name) if isinstance(name, str) else None


def load_task(name: str | None = None, data: str | None = None, level: str | None = None, seed: int = 0,
              valid_fraction: float = 0.05, test_fraction: float = 0.05, header: bool = False,
              max_length: int | None = MAX_DATA_LENGTH, bpe_merges: int | None = None,
              bpe: BPE | None = None) -> TaskData:
    """The splits and vocabulary of a named task (``name``), or of a user's TSV file (``data``).

    Give exactly one. ``level``: "char", "word" or "bpe" (both sides); default "char"
    for ``data``, the task's own tokenization for ``name``. Level "bpe" takes
    ``bpe_merges`` (merges to learn on the training split) or ``bpe`` (learned merges,
    a checkpoint's); a BPE task has its own count. ``header``, ``max_length`` and the
    fractions apply to ``data`` only (a named task fixes its own splits); see
    ``loading.load_tsv_task`` and ``loading.Task.load``. ``seed`` chooses the split
    (and, for a generated task, the sequences).
    """
    if (name is None) == (data is None):
        raise ValueError("load_task: give exactly one of a task name or a data file")
    if data is not None:
        task = load_tsv_task(data, level or "char", seed, valid_fraction, test_fraction, header, max_length,
                             bpe_merges, bpe)
        task.recipe = DATA_RECIPE
        return task
    return get_task(name).load(seed, level, bpe_merges, bpe)


__all__ = ["TASKS", "PRESETS", "DATA_RECIPE", "task_names", "get_task", "preset", "recipe_for", "saved_task",
           "load_task"]
