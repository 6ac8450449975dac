"""Learning-rate schedules chosen by name (optim.SCHEDULES, TrainSettings.schedule, train --schedule):
the paper's warm-up schedule by default, and a cosine decay after the same warm-up."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from minitransformer.cli import main
from minitransformer.optim import SCHEDULES, CosineSchedule, NoamSchedule, schedule_for
from minitransformer.settings import TrainSettings


def test_the_paper_schedule_is_the_default():
    settings = TrainSettings()
    assert settings.schedule == "noam"
    schedule = schedule_for(512, settings)
    assert isinstance(schedule, NoamSchedule)
    assert (schedule.d_model, schedule.warmup_steps, schedule.factor) == (512, 4000, 1.0)


def test_cosine_peaks_where_noam_does_and_decays_to_zero_at_the_last_step():
    d_model, warmup, total, factor = 64, 100, 1000, 0.5
    cosine = CosineSchedule(d_model, warmup, factor, total)
    noam = NoamSchedule(d_model, warmup, factor)
    assert cosine(warmup) == pytest.approx(noam.peak_lr, rel=1e-15) == pytest.approx(factor * (d_model * warmup) ** -0.5)
    # Warm-up: linear from peak / warmup at step 1.
    assert cosine(1) == pytest.approx(cosine.peak_lr / warmup, rel=1e-15)
    assert cosine(warmup // 2) == pytest.approx(cosine.peak_lr / 2, rel=1e-15)
    # Halfway through the decay: half the peak (cos(π/2) = 0); the end: 0; past the end: 0.
    assert cosine((warmup + total) // 2) == pytest.approx(cosine.peak_lr / 2, rel=1e-12)
    assert cosine(total) == pytest.approx(0.0, abs=1e-20 * cosine.peak_lr)
    assert cosine(total + 50) == pytest.approx(0.0, abs=1e-20 * cosine.peak_lr)
    rates = np.array([cosine(step) for step in range(1, total + 1)])
    assert np.all(np.diff(rates[:warmup]) > 0)                        # rises through the warm-up
    assert np.all(np.diff(rates[warmup - 1:]) < 0)                    # then falls at every step
    assert rates.argmax() == warmup - 1 and rates.max() == pytest.approx(noam.peak_lr, rel=1e-15)
    # Past the warm-up it is below Noam's 1/sqrt(step) only towards the end; at the start it stays higher.
    assert cosine(warmup + 10) > noam(warmup + 10) and cosine(total - 10) < noam(total - 10)


def test_cosine_is_chosen_by_name_from_the_settings():
    assert SCHEDULES["cosine"] is CosineSchedule
    settings = TrainSettings(steps=300, warmup_steps=30, lr_factor=2.0, schedule="cosine")
    schedule = schedule_for(32, settings)
    assert isinstance(schedule, CosineSchedule)
    assert (schedule.warmup_steps, schedule.total_steps, schedule.factor) == (30, 300, 2.0)
    with pytest.raises(ValueError, match="TrainSettings: schedule must be one of 'noam', 'cosine', got 'linear'"):
        TrainSettings(schedule="linear")


@pytest.mark.parametrize("args, message", [
    ((0, 10, 1.0, 100), "CosineSchedule: d_model must be a positive integer, got 0"),
    ((64, 10, 0.0, 100), "CosineSchedule: factor must be a positive number, got 0.0"),
    ((64, 10, 1.0, 0), "CosineSchedule: total_steps must be a positive integer, got 0"),
])
def test_cosine_refuses_nonsense(args, message):
    with pytest.raises(ValueError, match=message):
        CosineSchedule(*args)
    with pytest.raises(ValueError, match="CosineSchedule: step must be >= 1"):
        CosineSchedule(64, 10, 1.0, 100)(0)


WORDS = "one two three four five six seven eight".split()


@pytest.mark.slow
def test_train_schedule_cosine_from_the_command_line(tmp_path, capsys):
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in WORDS for b in WORDS), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "--data", str(data), "--level", "word", "--preset", "tiny", "--no-progress", "--out",
                 str(out), "--steps", "8", "--warmup", "4", "--lr-factor", "1", "--log-every", "1", "--schedule", "cosine"]) == 0
    lrs = [json.loads(line)["lr"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    expected = CosineSchedule(32, 4, 1.0, 8)
    assert lrs == pytest.approx([expected(step) for step in range(1, 9)], rel=1e-12)
    assert lrs[-1] == pytest.approx(0.0, abs=1e-18) and math.isclose(max(lrs), expected.peak_lr)
    capsys.readouterr()
    assert main(["train", "--data", str(data), "--schedule", "linear"]) == 2
    assert "invalid choice: 'linear'" in capsys.readouterr().err.splitlines()[-1]
