"""The task registry: one entry per task, read by the command line, the recipes and docs/tasks.md."""

import pathlib

import numpy as np
import pytest

from minitransformer.data import parsing, registry, tasks, translation
from minitransformer.data.loading import Task, TaskData
from minitransformer.data.registry import TASKS, get_task, load_task, recipe_for, task_names
from minitransformer.model import PRESETS
from minitransformer.settings import Recipe, recipe

TASKS_PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "tasks.md"   # the README points there (issue 39)


def test_every_task_module_is_in_the_registry_in_order():
    assert task_names() == [t.name for t in tasks.TASKS] + list(translation.TASKS) + [t.name for t in parsing.TASKS]
    assert task_names()[:2] == ["copy", "reverse"]


def test_every_entry_has_a_recipe_description_and_known_preset():
    for name, task in TASKS.items():
        assert isinstance(task.recipe, Recipe), name
        assert task.recipe.preset in PRESETS, name
        assert task.description.strip() and "\n" not in task.description, name


@pytest.mark.parametrize("lookup", [get_task, recipe_for, lambda name: load_task(name)])
def test_an_unregistered_name_is_an_error_listing_the_names(lookup):
    with pytest.raises(ValueError, match=r"unknown task 'no-such-task'; choose one of: copy, reverse, numbers-en-fr"):
        lookup("no-such-task")


def test_load_task_wants_exactly_one_source(tmp_path):
    with pytest.raises(ValueError, match="exactly one"):
        load_task()
    with pytest.raises(ValueError, match="exactly one"):
        load_task("copy", data=str(tmp_path / "x.tsv"))


def test_an_entry_without_a_recipe_is_refused():
    with pytest.raises(TypeError, match="every task needs a recipe"):
        Task("sort", "sort a sequence", None, lambda seed: {})
    with pytest.raises(ValueError, match="src_level must be one of"):
        Task("sort", "sort a sequence", recipe("copy"), lambda seed: {}, src_level="bpe-ish")
    with pytest.raises(ValueError, match="one non-empty line"):
        Task("sort", "two\nlines", recipe("copy"), lambda seed: {})


def test_two_tasks_with_one_name_are_refused():
    with pytest.raises(ValueError, match="two tasks are named 'copy'"):
        registry._build([tasks.TASKS, tasks.TASKS[:1]])


def test_the_synthetic_data_is_what_the_generators_give():
    """Each split from its own generator (seed, split index): the same pairs as before the registry."""
    task = load_task("reverse", seed=3)
    for i, (split, n) in enumerate(tasks.SPLIT_SIZES.items()):
        assert getattr(task, split) == tasks.reverse_pairs(n, np.random.default_rng([3, i]))
    assert task.vocab == tasks.synthetic_vocab(10)
    assert (task.src_level, task.tgt_level, task.bleu_tokenize) == ("space", "space", "none")


def test_a_new_synthetic_task_needs_only_an_entry():
    """What a contributor writes in data/tasks.py for a new task: a generator and a Task."""
    def sort_splits(seed):
        rng = np.random.default_rng(seed)
        def pairs(n):
            out = []
            for _ in range(n):
                digits = sorted(rng.integers(0, 10, size=rng.integers(1, 6)).tolist(), reverse=True)
                out.append((" ".join(map(str, digits)), " ".join(map(str, sorted(digits)))))
            return out
        return {"train": pairs(50), "valid": pairs(5), "test": pairs(5)}

    task = Task("sort", "synthetic: sort digits", recipe("copy", steps=10), sort_splits)
    data = task.load(seed=0)
    assert isinstance(data, TaskData) and len(data.train) == 50
    src, tgt = data.train[0]
    assert tgt == sorted(src)
    assert data.vocab.unk_id not in data.vocab.encode(src)
    assert data.src_lowercase


def test_splits_must_name_train_valid_and_test():
    task = Task("broken", "a broken entry", recipe("copy"), lambda seed: {"train": []})
    with pytest.raises(ValueError, match=r"splits\(\) must return a dict with keys"):
        task.load()


def test_lowercase_sources_are_recorded_for_translate():
    assert load_task("copy").levels["src_lowercase"] is True


def test_the_tasks_page_lists_every_task():
    text = TASKS_PAGE.read_text(encoding="utf-8")
    for name in task_names():
        assert f"`{name}`" in text or name in text, f"docs/tasks.md does not mention task {name!r}"
