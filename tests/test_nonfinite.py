"""The non-finite policy (issue 11, item 3): Adam skips an update whose gradient is NaN, inf
or too large to square and says why (``last_skip``); the training loop counts the skips
(and those of a non-finite loss), warns, and stops after K in a row; metrics.jsonl stays
strict JSON."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from minitransformer.data.registry import load_task
from minitransformer.layers.parameter import Parameter
from minitransformer.optim import Adam, NonFiniteGradientError, clip_grad_norm, global_grad_norm
from minitransformer.runsetup import build_model
from minitransformer.train import Trainer, TrainSettings, encode_pairs, read_metrics


def _params():
    return [Parameter(np.ones(3, np.float32), "w"), Parameter(np.ones(2, np.float32), "u")]


def _state(opt):
    return ([p.data.copy() for p in opt.params], [m.copy() for m in opt.m], [v.copy() for v in opt.v],
            opt.step_count)


def _same(a, b):
    (pa, ma, va, ca), (pb, mb, vb, cb) = a, b
    return ca == cb and all(np.array_equal(x, y) for x, y in zip(pa + ma + va, pb + mb + vb))


@pytest.mark.parametrize("bad, what", [(np.nan, "contains NaN"), (np.inf, "contains inf"),
                                       (-np.inf, "contains inf"),
                                       (1e20, "has entries up to 1e+20, whose square overflows float32")])
def test_a_bad_gradient_skips_the_update_and_names_the_tensor(bad, what):
    params = _params()
    opt = Adam(params, lr=0.1)
    params[1].grad[:] = 0.5
    params[0].grad[:] = [0.5, bad, 0.5]
    before = _state(opt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # Adam only skips: warning is the caller's job
        assert opt.step() is False
    assert _same(before, _state(opt))                  # nothing moved, not even the step count
    assert opt.last_skip == f"the gradient of 'w' {what}" + (" in Adam's second moment v" if bad == 1e20 else "")
    params[0].grad[:] = 0.5                            # a good gradient again: the update happens
    assert opt.step() is True
    assert opt.step_count == 1 and opt.last_skip is None
    assert all(np.isfinite(v).all() for v in opt.v) and not np.array_equal(params[0].data, before[0][0])


def test_before_the_policy_one_overflow_froze_the_parameter_for_good():
    """What the policy prevents: v = inf makes every later update of that entry exactly 0."""
    params = _params()
    opt = Adam(params, lr=0.1)
    params[0].grad[:] = [1e20, 0.5, 0.5]
    assert opt.step() is False
    assert np.isfinite(opt.v[0]).all()                 # skipped, not applied: v stays finite
    for _ in range(3):
        params[0].grad[:] = 0.5
        opt.step()
    assert params[0].data[0] < 1.0                     # so entry 0 still trains


def test_with_clipping_a_huge_finite_gradient_is_scaled_not_skipped():
    params = _params()
    opt = Adam(params, lr=0.1, clip_norm=1.0)
    params[0].grad[:] = [1e20, 0.0, 0.0]
    assert opt.step() is True
    assert opt.last_grad_norm == pytest.approx(1e20, rel=1e-6)   # the true norm, not inf
    assert np.isfinite(opt.v[0]).all() and params[0].data[0] < 1.0


def test_adam_skips_as_often_as_asked_and_leaves_the_counting_to_its_caller():
    """However many bad gradients come in a row, Adam skips each one and never raises: how
    many skips mean a diverged run is the caller's decision (the Trainer's, tested below)."""
    params = _params()
    opt = Adam(params, lr=0.1)
    params[1].grad[:] = np.nan
    before = _state(opt)
    assert [opt.step() for _ in range(10)] == [False] * 10
    assert opt.last_skip == "the gradient of 'u' contains NaN" and _same(before, _state(opt))
    assert math.isnan(opt.last_grad_norm)


def test_global_norm_of_an_overflowing_float32_gradient_is_finite():
    p = Parameter(np.zeros(4, np.float32), "w")
    p.grad[:] = [3e19, 4e19, 0, 0]
    assert global_grad_norm([p]) == pytest.approx(5e19, rel=1e-6)
    assert clip_grad_norm([p], 1.0) == pytest.approx(5e19, rel=1e-6)
    assert np.allclose(p.grad, [0.6, 0.8, 0, 0])
    p.grad[0] = np.nan
    assert math.isnan(global_grad_norm([p]))


# -- the training loop --------------------------------------------------------------------------

def _trainer(tmp_path, steps, **settings):
    task = load_task("copy", seed=0)
    model = build_model(task, "tiny", seed=0)
    s = TrainSettings(steps=steps, batch_size=16, warmup_steps=20, lr_factor=1.0, seed=0, valid_every=4,
                      log_every=1, **settings)
    return Trainer(model, task.vocab, encode_pairs(task.vocab, task.train[:200]), [], s, str(tmp_path))


def _strict_json_lines(path):
    def refuse(name):
        raise AssertionError(f"{path} contains the non-JSON literal {name}")
    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def test_a_non_finite_gradient_in_training_is_skipped_then_stops(tmp_path, capsys, monkeypatch):
    tr = _trainer(tmp_path, 30, max_consecutive_skips=3)
    real_backward, calls = tr.model.backward, []

    def backward(dlogits):
        real_backward(dlogits)
        calls.append(1)
        if len(calls) == 6 or len(calls) >= 9:             # one lone bad step, then a run of them
            tr.model.decoder.layers[0].ffn.linear2.W.grad[0, 0] = np.inf
    monkeypatch.setattr(tr.model, "backward", backward)
    with pytest.raises(NonFiniteGradientError, match=r"stopped at step 11: the gradient of "
                                                     r"'decoder.0.ffn.linear2.W' contains inf; steps 9 to 11 "
                                                     r".*last updated at step 8.*checkpoint.* is from step 8"):
        tr.run(progress=False)
    err = capsys.readouterr().err
    assert "warning: step 6: skipped, no update: the gradient of 'decoder.0.ffn.linear2.W' contains inf" in err
    assert tr.skipped_steps == 4 and tr.optimizer.step_count == 11 - 4
    records = _strict_json_lines(tmp_path / "metrics.jsonl")  # strict JSON: the inf norm is null
    by_step = {r["step"]: r for r in records}
    assert by_step[6]["grad_norm"] is None and by_step[6]["skipped_steps"] == 1 and by_step[6]["loss"] is None
    assert math.isfinite(by_step[7]["grad_norm"]) and "skipped_steps" not in by_step[7]
    # The checkpoint on disk is the last good one (step 8: saved at the validation step), finite.
    from minitransformer.checkpoint import load_checkpoint
    ck = load_checkpoint(str(tmp_path / "checkpoint.npz"))
    assert ck.step == 8 and ck.optimizer_state["step_count"] == 7


def test_read_metrics_drops_a_truncated_last_line_and_names_a_bad_middle_one(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo')
    messages = []
    assert [r["step"] for r in read_metrics(str(log), warn=messages.append)] == [1, 2]
    assert messages and f"{log}:3: dropped an incomplete last line" in messages[0]
    log.write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n')
    with pytest.raises(ValueError, match=f"{log}:2: not a JSON record"):
        read_metrics(str(log))


def test_resume_continues_a_log_whose_last_line_was_cut(tmp_path, capsys):
    tr = _trainer(tmp_path, 4)
    tr.run(progress=False)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "loss": 1.2, "tok')            # what a kill -9 mid-write leaves
    from minitransformer.checkpoint import load_checkpoint
    ck = load_checkpoint(str(tmp_path / "checkpoint.npz"))
    resumed = Trainer(ck.model, ck.vocab, tr.train_pairs, [], TrainSettings(**{**vars(tr.settings), "steps": 6}),
                      str(tmp_path))
    resumed.restore(ck)
    resumed.run(progress=False)
    assert [r["step"] for r in _strict_json_lines(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    assert "dropped an incomplete last line" in capsys.readouterr().err


@pytest.mark.parametrize("field, value", [("steps", 0), ("steps", -5), ("batch_size", 0), ("valid_every", -1),
                                          ("checkpoint_every", 0), ("lr_factor", float("nan")),
                                          ("clip_norm", float("inf")), ("seed", -1), ("warmup_steps", 1.5),
                                          ("max_consecutive_skips", 0)])
def test_train_settings_refuse_nonsense(field, value):
    with pytest.raises(ValueError, match=f"TrainSettings: {field} must be"):
        TrainSettings(**{field: value})


def test_settings_from_a_checkpoint_name_unknown_fields():
    with pytest.raises(ValueError, match=r"saved: unknown training settings \['bogus'\]"):
        TrainSettings.from_dict({"steps": 3, "bogus": 1}, "saved")
