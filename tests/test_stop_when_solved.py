"""Stopping once solved (issue 25.1): ``TrainSettings.stop_when_solved = K`` ends the run after K
validations in a row at 100% exact match, and says "solved at step N"; ``--steps`` forces a
fixed length; a resumed run keeps counting where it stopped (the count is in the checkpoint);
random mixed-length batches (``batch_by_length=False``); the copy recipe in the registry.

The tiny task: every target is the one token "7", whatever the source. The tiny preset learns
it in a few dozen steps (first validation at 100% at step 30, the second at 35, with the
settings below), so the early stop is seen in well under a second of training.
The stop under mpiexec is in tests/test_mpi.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from minitransformer.__main__ import main
from minitransformer.checkpoint import load_checkpoint
from minitransformer.data import registry
from minitransformer.data.batching import batch_plan
from minitransformer.data.registry import load_task
from minitransformer.runsetup import make_trainer, settings_for
from minitransformer.settings import TrainSettings, recipe

VALID_EVERY = 5
SETTINGS = dict(steps=200, batch_size=32, lr_factor=1.0, warmup_steps=20, valid_every=VALID_EVERY,
                valid_decode=100, log_every=5)


@pytest.fixture(scope="module")
def constant_tsv(tmp_path_factory):
    """400 distinct sources of 1 to 5 digits, every target "7": 360 train, 20 valid, 20 test."""
    rng = np.random.default_rng(0)
    lines: set[str] = set()
    while len(lines) < 400:
        lines.add(" ".join(str(d) for d in rng.integers(0, 10, int(rng.integers(1, 6)))) + "\t7\n")
    path = tmp_path_factory.mktemp("solved") / "constant.tsv"
    path.write_text("".join(sorted(lines)), encoding="utf-8")
    return str(path)


def trainer_for(path, out_dir=None, resume=None, **changes):
    task = load_task(data=path, level="word")
    return make_trainer(task, TrainSettings(**{**SETTINGS, **changes}), "tiny", out_dir, resume=resume)


def validations(history):
    return [(r["step"], r["valid_exact_match"]) for r in history if "valid_exact_match" in r]


def first_solved(history, k, share=1.0):
    """The step at which k validations in a row at ``share`` or more first happen (None: never)."""
    run = 0
    for step, exact in validations(history):
        run = run + 1 if exact >= share else 0
        if run >= k:
            return step
    return None


@pytest.fixture(scope="module")
def uninterrupted(constant_tsv):
    """The reference: the full 200 steps, no early stop; its log says where the rule fires."""
    trainer = trainer_for(constant_tsv, stop_when_solved=0)
    history = trainer.run(progress=False)
    solved = first_solved(history, 2)
    assert solved is not None and solved < 200, f"the tiny task was not solved: {validations(history)}"
    return trainer, history, solved


def test_the_run_stops_at_the_second_perfect_validation_in_a_row(constant_tsv, uninterrupted, tmp_path, capsys):
    _, reference, solved = uninterrupted
    trainer = trainer_for(constant_tsv, str(tmp_path), stop_when_solved=2)
    history = trainer.run(progress=False)
    assert trainer.solved_at == solved == trainer.step < 200
    assert validations(history) == [v for v in validations(reference) if v[0] <= solved]   # the same run, cut
    assert history[-1]["solved"] is True and all("solved" not in r for r in history[:-1])
    assert f"solved at step {solved}: validation exact match 100% at 2 validations in a row" in capsys.readouterr().out
    # The checkpoint is the solved model's, and records the count.
    ckpt = load_checkpoint(str(tmp_path / "checkpoint.npz"))
    assert ckpt.step == solved and ckpt.extra["solved_streak"] == 2
    log = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert log[-1]["step"] == solved and log[-1]["solved"] is True


def test_stop_when_solved_3_waits_for_a_third(constant_tsv, uninterrupted):
    _, reference, _ = uninterrupted
    three = first_solved(reference, 3)
    trainer = trainer_for(constant_tsv, stop_when_solved=3)
    trainer.run(progress=False)
    assert three is not None and trainer.solved_at == three > first_solved(reference, 2)


def test_a_share_under_one_stops_at_the_first_two_validations_that_reach_it(constant_tsv, uninterrupted, capsys):
    _, reference, solved = uninterrupted
    share = 0.9
    early = first_solved(reference, 2, share)
    trainer = trainer_for(constant_tsv, stop_when_solved=2, solved_exact_match=share)
    trainer.run(progress=False)
    assert early is not None and trainer.solved_at == early <= solved
    assert f"solved at step {early}: validation exact match at least 90% at 2 validations" in capsys.readouterr().out


def test_without_the_rule_the_run_trains_every_step(uninterrupted):
    trainer, history, solved = uninterrupted
    assert trainer.step == 200 and trainer.solved_at is None and solved < 200
    assert all("solved" not in r for r in history)


def test_a_resumed_run_keeps_counting(constant_tsv, uninterrupted, tmp_path):
    """Stopped after the first perfect validation (count 1, saved in the checkpoint), the resumed run
    stops at the next one, as the uninterrupted run did, with the same parameters bit for bit."""
    _, _, solved = uninterrupted
    first = trainer_for(constant_tsv, str(tmp_path / "run"), steps=solved - VALID_EVERY, stop_when_solved=2)
    first.run(progress=False)
    assert first.solved_at is None and first.solved_streak == 1
    ckpt = load_checkpoint(str(tmp_path / "run" / "checkpoint.npz"))
    assert ckpt.extra["solved_streak"] == 1
    resumed = trainer_for(constant_tsv, str(tmp_path / "run"), resume=ckpt, stop_when_solved=2)
    resumed.run(progress=False)
    assert resumed.solved_at == solved
    straight = trainer_for(constant_tsv, str(tmp_path / "straight"), stop_when_solved=2)
    straight.run(progress=False)
    for (name, p), (_, q) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        assert np.array_equal(p.data, q.data), f"parameter {name} differs after the resume"


def test_a_checkpoint_without_the_count_starts_from_zero(constant_tsv, uninterrupted, tmp_path):
    """A checkpoint written before the rule existed has no solved_streak: the count starts again."""
    _, reference, solved = uninterrupted
    first = trainer_for(constant_tsv, str(tmp_path), steps=solved - VALID_EVERY, stop_when_solved=2)
    first.run(progress=False)
    ckpt = load_checkpoint(str(tmp_path / "checkpoint.npz"))
    del ckpt.extra["solved_streak"]
    resumed = trainer_for(constant_tsv, str(tmp_path), resume=ckpt, stop_when_solved=2)
    resumed.run(progress=False)
    # Two new perfect validations needed: the uninterrupted run's first pair after the resume.
    expected = first_solved([r for r in reference if r["step"] > solved - VALID_EVERY], 2)
    assert resumed.solved_at == expected > solved


# -- the command line -------------------------------------------------------------------------

@pytest.fixture
def stopping_recipe(monkeypatch):
    """A --data file's recipe (registry.DATA_RECIPE) that stops when solved, like copy's."""
    monkeypatch.setattr(registry, "DATA_RECIPE", recipe("tiny", stop_when_solved=2, **SETTINGS))


def _train(path, out, *extra):
    return main(["train", "--data", path, "--level", "word", "--no-progress", "--out", str(out), *extra])


def test_the_cli_says_solved_and_still_reports_the_test_set(constant_tsv, uninterrupted, stopping_recipe, tmp_path,
                                                             capsys):
    _, _, solved = uninterrupted
    assert _train(constant_tsv, tmp_path) == 0
    out = capsys.readouterr().out
    assert f"solved at step {solved}:" in out
    assert f"trained {solved} steps in" in out and f"s (solved at step {solved}); checkpoint" in out
    assert "held-out test set" in out and "exact match 100.00% (20 sentences)" in out
    # Every target is one token: BLEU has no 4-gram to count, and the report says so (issue 39).
    assert "BLEU 0.00" in out and "(BLEU is 0 because no output has 4 tokens (13a tokenizer; the longest has 1)" in out


def test_steps_forces_a_fixed_length(constant_tsv, uninterrupted, stopping_recipe, tmp_path, capsys):
    _, _, solved = uninterrupted
    assert _train(constant_tsv, tmp_path / "a", "--steps", str(solved + 20)) == 0
    out = capsys.readouterr().out
    assert f"trained {solved + 20} steps in" in out and "solved at" not in out
    # ... unless the stop is asked for as well.
    assert _train(constant_tsv, tmp_path / "b", "--steps", "150", "--stop-when-solved", "2") == 0
    assert f"s (solved at step {solved}); checkpoint" in capsys.readouterr().out


def test_a_solved_run_is_not_resumed_without_steps(constant_tsv, uninterrupted, stopping_recipe, tmp_path, capsys):
    _, _, solved = uninterrupted
    assert _train(constant_tsv, tmp_path) == 0
    capsys.readouterr()
    ckpt = str(tmp_path / "checkpoint.npz")
    assert _train(constant_tsv, tmp_path, "--resume", ckpt) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and f"the run was solved by step {solved}" in err and "--steps" in err
    assert _train(constant_tsv, tmp_path, "--resume", ckpt, "--steps", str(solved + 10)) == 0
    assert f"trained 10 steps (steps {solved + 1}-{solved + 10}, resumed at step {solved}) in" in \
        capsys.readouterr().out


def test_a_bad_stop_when_solved_is_one_line(constant_tsv, tmp_path, capsys):
    assert _train(constant_tsv, tmp_path, "--stop-when-solved", "-1") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and err.endswith("(--stop-when-solved)") and "\n" not in err


# -- the settings, the batches, the recipe ----------------------------------------------------

@pytest.mark.parametrize("field, value", [("stop_when_solved", -1), ("stop_when_solved", 1.5),
                                          ("stop_when_solved", True), ("batch_by_length", 1),
                                          ("solved_exact_match", 0), ("solved_exact_match", 1.01),
                                          ("batch_by_length", "no")])
def test_bad_settings_are_named(field, value):
    with pytest.raises(ValueError, match=f"TrainSettings: {field} must be"):
        TrainSettings(**{field: value})


def test_random_batches_mix_lengths_and_length_batches_do_not():
    rng = np.random.default_rng(0)
    pairs = [([1] * n, [1] * n) for n in rng.integers(1, 11, 2000)]
    by_length = batch_plan(pairs, 64, None, np.random.default_rng(1))
    mixed = batch_plan(pairs, 64, None, np.random.default_rng(1), by_length=False)
    for plan in (by_length, mixed):                  # each is one epoch: every pair once
        assert sorted(i for b in plan for i in b) == list(range(len(pairs)))

    def lengths_per_batch(plan):
        return [len({len(pairs[i][0]) for i in b}) for b in plan]
    assert np.median(lengths_per_batch(by_length)) == 1           # a batch of one length
    assert min(lengths_per_batch(mixed)) >= 5                      # 64 random pairs: most of the 10 lengths
    with pytest.raises(TypeError, match="by_length must be True or False"):
        batch_plan(pairs, 64, None, np.random.default_rng(1), by_length=0)


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_the_copy_and_reverse_recipes_stop_when_solved_and_validate_everything(task):
    data = load_task(task, seed=0)
    preset, s = settings_for(task)
    assert preset == task and s.stop_when_solved == 2 and not s.batch_by_length
    assert s.valid_decode == len(data.valid) == 500       # "solved" is judged on every validation sequence
    assert s.valid_every <= 50 and s.steps <= 1500


@pytest.mark.parametrize("task", ["numbers-en-fr", "numbers-en-de", "dates-en-de", "dates-en-ko"])
def test_the_numbers_and_dates_recipes_stop_when_solved_on_the_whole_validation_split(task):
    """Issue 37's recipes: mixed batches, the stop rule, and "solved" judged on every validation pair."""
    data = load_task(task, seed=0)
    preset, s = settings_for(task)
    assert preset == "translate-small" and s.stop_when_solved == 2 and not s.batch_by_length
    assert s.valid_decode == len(data.valid) == 500
    assert s.valid_every == 50 and 0.99 <= s.solved_exact_match <= 1.0
