"""The task registry: one entry per task, read by the command line, the recipes and docs/tasks.md."""

import pathlib

import numpy as np
import pytest

from minitransformer.data import parsing, registry, tasks, translation
from minitransformer.data.loading import Task, TaskData
from minitransformer.data.registry import PRESETS, TASKS, get_task, load_task, recipe_for, task_names
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
    with pytest.raises(ValueError, match=r"unknown task 'no-such-task'; choose one of: copy, reverse, sort, "
                                         r"numbers-en-fr"):
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


def test_model_sizes_stay_with_the_model_and_task_presets_with_their_recipes(monkeypatch):
    """model.PRESETS holds the generic sizes; a task's preset is defined in its task module, beside
    its recipe; data.registry.PRESETS (and preset()) finds every one, the command line's --preset."""
    from minitransformer import model

    assert set(model.PRESETS) == {"base", "big", "tiny"}
    modules = {"copy": tasks, "reverse": tasks, "translate": translation, "parse": parsing}
    for name, module in modules.items():
        assert name in module.PRESETS and name not in model.PRESETS
        assert registry.preset(name) is module.PRESETS[name]
    for name, task in TASKS.items():                   # each recipe's preset, found through the registry
        assert registry.preset(task.recipe.preset).d_model >= 1, name
    assert list(registry.PRESETS)[:3] == ["base", "big", "tiny"] and len(registry.PRESETS) == len(set(registry.PRESETS))
    with pytest.raises(ValueError, match=r"unknown preset 'huge'; choose one of: base, big, tiny, copy"):
        registry.preset("huge")
    monkeypatch.setitem(model.PRESETS, "search-only", model.PRESETS["tiny"].with_(d_model=16))   # an experiment's
    assert registry.preset("search-only").d_model == 16 and "search-only" in registry.PRESETS


def test_two_task_modules_cannot_define_one_preset_name():
    from minitransformer import model

    with pytest.raises(ValueError, match="tiny defined twice"):
        registry._Presets([model.PRESETS, {"tiny": model.PRESETS["tiny"]}])


def test_sort_sorts_by_symbol_order_from_copys_sources():
    """The sort task: target = the source's symbols in the order of ``symbols(n)`` (so "s10" after "9",
    not as strings), each symbol as often as in the source; the sources are copy's for the same rng."""
    for n_symbols in (10, 13):
        pairs = tasks.sort_pairs(300, np.random.default_rng(4), n_symbols=n_symbols)
        sources = [src for src, _ in tasks.copy_pairs(300, np.random.default_rng(4), n_symbols=n_symbols)]
        assert [src for src, _ in pairs] == sources
        order = {s: i for i, s in enumerate(tasks.symbols(n_symbols))}
        for src, tgt in pairs:
            assert sorted(src) == sorted(tgt)                                     # the same multiset
            assert [order[s] for s in tgt] == sorted(order[s] for s in src)       # ascending by index
    assert tasks.sort_pairs(1, np.random.default_rng(0), n_symbols=12, min_len=12, max_len=12)[0][1][-3:] == \
        sorted(tasks.sort_pairs(1, np.random.default_rng(0), n_symbols=12, min_len=12, max_len=12)[0][1][-3:],
               key=lambda s: int(s.lstrip("s")))
    assert tasks.sort_pairs(1, np.random.default_rng(0), min_len=4, max_len=4) == \
        [(src, sorted(src)) for src, _ in tasks.copy_pairs(1, np.random.default_rng(0), min_len=4, max_len=4)]


def test_sort_is_registered_with_a_recipe_that_stops_when_solved():
    task = load_task("sort", seed=0)
    assert [len(task.train), len(task.valid), len(task.test)] == [20000, 500, 1000]
    assert all(tgt == sorted(src) for src, tgt in task.train[:200])   # digits: string order is index order
    assert task.vocab == tasks.synthetic_vocab(10)
    r = recipe_for("sort")
    assert r.preset in tasks.PRESETS and r.settings.stop_when_solved == 2 and r.settings.valid_decode == 500
    assert "sort" in task_names() and get_task("sort").description.startswith("synthetic: sort")
