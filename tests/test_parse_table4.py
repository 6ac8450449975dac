"""lessons/experiments/parse_table4.py and its record: provenance, the rows lesson 15 reads,
and the chunked training the lesson relies on (three runs of k steps are one run of 3k)."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parents[1] / "lessons" / "experiments"
RECORD = HERE / "parse_table4.json"


def _script():
    spec = importlib.util.spec_from_file_location("parse_table4", HERE / "parse_table4.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_row_says_when_and_where_it_was_made():
    """The record's provenance is checked by test_experiment_records; here each row names the call that made it."""
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    commits = {prov["commit"] for prov in record["provenance"]}
    written = [name for prov in record["provenance"] for name in prov["wrote"]]
    for prov in record["provenance"]:
        assert prov["command"].startswith("python lessons/experiments/parse_table4.py"), prov["command"]
    for row in record["runs"] + [record["lesson"], record["xx_targets"]]:
        assert {"date", "commit", "load_average", "greedy"} <= set(row), row
        assert row["commit"] in commits, (row["commit"], commits)
        assert 0 <= row["greedy"]["bracket_f1"] <= 100 and "ill_formed" in row["greedy"], row["greedy"]
    for row in record["runs"]:                     # each (size, seed) row was written by a call that says so
        assert f"{row['size']} seed {row['seed']}" in written, (row["size"], row["seed"], written)
        assert row["train_trees"] == record["sizes"][row["size"]], row
    assert {"lesson", "xx_targets"} <= set(written)


def test_the_lesson_rows_are_the_script_s_lesson_run():
    script, record = _script(), json.loads(RECORD.read_text(encoding="utf-8"))
    for name, targets in (("lesson", "words"), ("xx_targets", "XX per word (Vinyals et al.)")):
        row = record[name]
        assert tuple(row["chunks"]) == tuple(script.LESSON["chunks"]), (name, row["chunks"])
        assert (row["seed"], row["test"], row["steps"]) == (script.LESSON["seed"], script.LESSON["test"],
                                                           sum(script.LESSON["chunks"]))
        assert row["targets"] == targets


@pytest.mark.slow
def test_training_in_chunks_is_one_run():
    script = _script()
    chunked, _ = script.parser_trainer("parse", 0, 4)
    script.train_more(chunked, 2)
    script.train_more(chunked, 2)
    whole, _ = script.parser_trainer("parse", 0, 4)
    script.train_more(whole, 4)
    assert chunked.step == whole.step == 4
    for p, q in zip(chunked.model.parameters(), whole.model.parameters(), strict=True):
        np.testing.assert_array_equal(p.data, q.data)


def test_xx_splits_keep_the_brackets_and_replace_every_word():
    script = _script()
    from minitransformer.data.registry import get_task
    words, xx = get_task("parse").splits(0)["valid"][:20], script._xx_splits(0)["valid"][:20]
    for (src, tgt), (src_xx, tgt_xx) in zip(words, xx, strict=True):
        assert src == src_xx
        a, b = tgt.split(), tgt_xx.split()
        assert len(a) == len(b)
        assert [t for t in a if t[0] in "()"] == [t for t in b if t[0] in "()"]
        assert b.count("XX") == len(src.split())


def test_quick_refuses_to_overwrite_the_record(monkeypatch):
    script = _script()
    monkeypatch.setattr("sys.argv", ["parse_table4.py", "--quick"])
    with pytest.raises(SystemExit) as exc:
        script.main()
    assert exc.value.code == 2


def test_a_row_scores_the_average_of_the_last_checkpoints_and_the_last_one_beside_it(tmp_path):
    """_averaged: the §6.1 average the recipe ends with (made from the kept checkpoints when the run
    folder has no average.npz), and the refusal when the folder lacks the checkpoints to make it."""
    import dataclasses

    from minitransformer.checkpoint import load_checkpoint

    script = _script()
    trainer, task = script.parser_trainer("parse", 0, 5, out_dir=str(tmp_path))
    trainer.settings = dataclasses.replace(trainer.settings, checkpoint_every=1, average_last=None)
    script.train_more(trainer, 5)                   # kept: steps 1-5; no average.npz written
    assert not (tmp_path / "average.npz").exists()
    task = dataclasses.replace(task, test=task.test[:10])
    ckpt, record = load_checkpoint(trainer.checkpoint_path), {}
    model = script._averaged(record, ckpt, str(tmp_path), 5, task)
    assert record["average"]["steps"] == [1, 2, 3, 4, 5]
    assert record["average"]["made_by"].startswith("parse_table4.py (snapshots.write_average")
    assert (tmp_path / "average.npz").exists() and set(record["last_checkpoint"]) == {"greedy"}
    assert model is not ckpt.model
    again = {}                                      # a second call finds the average.npz the first one wrote
    script._averaged(again, ckpt, str(tmp_path), 5, task)
    assert again["average"] == {"steps": [1, 2, 3, 4, 5], "made_by": "the average.npz found in the run folder"}
    with pytest.raises(SystemExit, match="not the last 6 checkpoints of step 5"):
        script._averaged({}, ckpt, str(tmp_path / "elsewhere"), 6, task)
    assert script._averaged({}, ckpt, str(tmp_path), None, task) is ckpt.model


def test_table4_options_make_train_run_the_table4_recipe():
    """parse's default is a faster recipe; the options the script names, read by train's own parser,
    turn `train --task parse` back into Table 4's (preset and every training setting); parse-large
    needs none."""
    from minitransformer.cli import build_parser
    from minitransformer.data.registry import get_task
    from minitransformer.runsetup import settings_for

    script = _script()
    assert script.table4_options("parse-large") == []
    assert get_task("parse").recipe != script.RECIPE
    options = script.table4_options("parse")
    assert options[:2] == ["--preset", "parse"] and "--steps" in options
    args = build_parser().parse_args(["train", "--task", "parse", *options])
    overrides = {field: getattr(args, dest) for dest, field in args.settings_options.items()}
    preset, settings = settings_for(get_task("parse").recipe, preset=args.preset, **overrides)
    assert (preset, settings) == (script.RECIPE.preset, script.RECIPE.settings)
