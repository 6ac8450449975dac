"""End to end through the command line: train a tiny model, translate, evaluate (fast, < 30 s)."""

import contextlib
import io
import json
import os

import pytest

from minitransformer.__main__ import main
from minitransformer.data.registry import TASKS, task_names


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny numbers-en-fr model trained for 20 steps, and what `train` printed.

    Building the task and training take several seconds: every test that uses this
    fixture is marked slow (left out by `pytest -m "not slow"`)."""
    out = tmp_path_factory.mktemp("run") / "numbers"
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        rc = main(["train", "--task", "numbers-en-fr", "--preset", "tiny", "--steps", "20",
                   "--out", str(out), "--no-progress"])
    return rc, out, buffer.getvalue()


@pytest.mark.slow
def test_train_writes_checkpoint_log_and_curve(trained):
    rc, out, printed = trained
    assert rc == 0
    for name in ("checkpoint.npz", "metrics.jsonl", "loss.png"):
        assert (out / name).is_file(), name
    with open(out / "loss.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 20
    assert "valid_loss" in records[-1]
    assert "task numbers-en-fr" in printed and "preset tiny" in printed
    assert "trained 20 steps" in printed
    assert "BLEU" in printed and "chrF" in printed and "exact match" in printed


@pytest.mark.slow
def test_translate_prints_one_line_per_sentence(trained, capsys):
    _, out, _ = trained
    rc = main(["translate", "--checkpoint", str(out / "checkpoint.npz"), "--beam", "2",
               "twenty-one", "four thousand, three hundred and twenty-one"])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2


@pytest.mark.slow
def test_translate_refuses_what_is_not_a_number_name_by_name(trained, capsys):
    """A numbers model knows number names alone: anything else would get an invented translation."""
    _, out, _ = trained
    assert main(["translate", "--checkpoint", str(out / "checkpoint.npz"), "--beam", "1", "zweiundvierzig"]) == 2
    assert "'zweiundvierzig' is not one (argument 1)" in capsys.readouterr().err


@pytest.mark.slow
def test_translate_lower_cases_what_the_training_data_never_capitalised(trained, capsys):
    """The numbers tasks are lower-case only: "Four Thousand" is looked up as "four thousand"."""
    _, out, _ = trained
    ckpt = str(out / "checkpoint.npz")
    assert main(["translate", "--checkpoint", ckpt, "--beam", "1", "Four Thousand"]) == 0
    capitalised = capsys.readouterr()
    assert "lower-cased" in capitalised.err and "not in the vocabulary" not in capitalised.err
    assert main(["translate", "--checkpoint", ckpt, "--beam", "1", "four thousand"]) == 0
    plain = capsys.readouterr()
    assert plain.out == capitalised.out and "lower-cased" not in plain.err
    assert main(["translate", "--checkpoint", ckpt, "--beam", "1", "Four Zillion"]) == 2
    assert "'four zillion' is not one" in capsys.readouterr().err    # not a number name after lower-casing


@pytest.mark.slow
@pytest.mark.parametrize("beam", ["1", "3"])
def test_evaluate_prints_scores(trained, capsys, beam):
    _, out, _ = trained
    rc = main(["evaluate", "--checkpoint", str(out / "checkpoint.npz"), "--task", "numbers-en-fr",
               "--limit", "20", "--beam", beam])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "BLEU" in printed and "chrF" in printed
    assert "(20 sentences)" in printed
    assert ("beam 3" in printed) == (beam == "3")


@pytest.mark.slow
def test_evaluate_needs_task_or_data(trained, capsys):
    _, out, _ = trained
    assert main(["evaluate", "--checkpoint", str(out / "checkpoint.npz")]) == 2
    assert "error" in capsys.readouterr().err


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_train_on_a_tsv_file_then_translate_and_evaluate(tmp_path, capsys):
    words = ["one", "two", "three", "four", "five"]
    lines = [f"{a} {b}\t{b} {a}" for a in words for b in words]
    data = _write(tmp_path / "pairs.tsv", "\n".join(lines) + "\n")
    out = tmp_path / "run"
    assert main(["train", "--data", data, "--level", "word", "--preset", "tiny", "--steps", "5",
                 "--out", str(out), "--no-progress"]) == 0
    assert "pairs.tsv" in capsys.readouterr().out
    ckpt = str(out / "checkpoint.npz")
    assert os.path.isfile(ckpt)
    assert main(["translate", "--checkpoint", ckpt, "--beam", "1", "one two"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert main(["evaluate", "--checkpoint", ckpt, "--data", data, "--limit", "5", "--beam", "1"]) == 0
    printed = capsys.readouterr().out
    assert "BLEU" in printed and "chrF" in printed


def test_bad_tsv_line_names_file_and_line(tmp_path, capsys):
    data = _write(tmp_path / "bad.tsv", "a b\tb a\nc d\td c\nno tab on this line\n")
    rc = main(["train", "--data", data, "--preset", "tiny", "--steps", "1", "--out", str(tmp_path / "r"),
               "--no-progress"])
    assert rc == 2                     # a clear message and an exit code, not a traceback
    message = capsys.readouterr().err
    assert message.startswith("error: ")
    assert f"{data}:3:" in message
    assert "tab" in message


def test_train_needs_exactly_one_of_task_and_data(capsys):
    assert main(["train", "--no-progress"]) == 2
    assert "exactly one" in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], ["train"], ["translate"], ["evaluate"], ["tasks"]])
def test_help_works(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*command, "--help"])
    assert exc.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_train_help_lists_every_task(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")                  # argparse would wrap names at their hyphens
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    for name in task_names():
        assert name in text, name


def test_tasks_lists_every_task(capsys):
    assert main(["tasks"]) == 0
    printed = capsys.readouterr().out
    for name in task_names():
        line = next(line for line in printed.splitlines() if line.startswith(name + " "))
        assert TASKS[name].description in line, name


def test_every_task_has_a_recipe_with_a_known_preset():
    from minitransformer.data import translation
    from minitransformer.data.registry import PRESETS

    assert set(translation.TASKS) <= set(TASKS)
    for name, task in TASKS.items():
        assert task.recipe.preset in PRESETS, name
