"""The §5.3 optimizer: Noam schedule, Adam by hand, clipping, checkpoints, dtypes."""

import math

import numpy as np
import pytest

from minitransformer.layers.parameter import Parameter
from minitransformer.optim import Adam, NoamSchedule, clip_grad_norm, global_grad_norm

# -- NoamSchedule ---------------------------------------------------------------------


def test_noam_schedule_by_hand():
    s = NoamSchedule(d_model=512, warmup_steps=4000)
    # lrate = 512^-0.5 * min(step^-0.5, step * 4000^-1.5)
    # step 1: warmup branch, 1 * 4000^-1.5 (much smaller than 1^-0.5 = 1)
    assert s(1) == pytest.approx(1 / math.sqrt(512) * 1 / (4000 * math.sqrt(4000)), rel=1e-12)
    assert s(1) == pytest.approx(1.7469281074217108e-07, rel=1e-12)
    # step 4000: both branches equal 4000^-0.5 -- the peak
    assert s(4000) == pytest.approx(1 / math.sqrt(512) / math.sqrt(4000), rel=1e-12)
    assert s(4000) == pytest.approx(6.987712429686842e-04, rel=1e-12)
    # step 16000: decay branch, 16000^-0.5 (smaller than 16000 * 4000^-1.5 = 0.063)
    assert s(16000) == pytest.approx(1 / math.sqrt(512) / math.sqrt(16000), rel=1e-12)
    # 4x the steps after the peak -> half the rate
    assert s(16000) == pytest.approx(s(4000) / 2, rel=1e-12)


def test_noam_schedule_peaks_at_warmup():
    s = NoamSchedule(d_model=64, warmup_steps=100, factor=2.0)
    values = [s(t) for t in range(1, 1000)]
    assert int(np.argmax(values)) + 1 == 100
    assert s.peak_lr == pytest.approx(2.0 / math.sqrt(64 * 100))
    # linear during warmup
    assert s(50) == pytest.approx(s(100) / 2)
    assert isinstance(s(1), float)
    assert s(np.int64(100)) == s(100)


@pytest.mark.parametrize("step", [0, -3])
def test_noam_schedule_step_below_one(step):
    with pytest.raises(ValueError, match=rf"step must be >= 1 \(steps count from 1\), got {step}"):
        NoamSchedule(512)(step)


def test_noam_schedule_bad_arguments():
    with pytest.raises(ValueError, match="step must be an integer, got float"):
        NoamSchedule(512)(1.5)
    with pytest.raises(ValueError, match="d_model must be a positive integer, got 0"):
        NoamSchedule(0)
    with pytest.raises(ValueError, match="warmup_steps must be a positive integer, got -1"):
        NoamSchedule(512, warmup_steps=-1)
    with pytest.raises(ValueError, match="factor must be a positive number, got 0"):
        NoamSchedule(512, factor=0)


# -- Adam ---------------------------------------------------------------------------------


def _param(values, dtype=np.float64, name="w"):
    return Parameter(np.array(values, dtype=dtype), name=name)


def test_two_adam_steps_by_hand():
    p = _param([1.0, -2.0])
    opt = Adam([p], lr=0.1)  # betas (0.9, 0.98), eps 1e-9: the paper's
    assert opt.betas == (0.9, 0.98) and opt.eps == 1e-9

    # Step 1, g = [0.5, -1.0]
    #   m = 0.1 * g       = [0.05, -0.1]
    #   v = 0.02 * g^2    = [0.005, 0.02]
    #   m_hat = m / (1 - 0.9)  = [0.5, -1.0]        (= g)
    #   v_hat = v / (1 - 0.98) = [0.25, 1.0]        (= g^2)
    #   p -= 0.1 * m_hat / (sqrt(v_hat) + 1e-9)    -> a step of 0.1 * sign(g)
    p.grad[...] = [0.5, -1.0]
    opt.step()
    np.testing.assert_allclose(opt.m[0], [0.05, -0.1], rtol=1e-12)
    np.testing.assert_allclose(opt.v[0], [0.005, 0.02], rtol=1e-12)
    expected1 = [1.0 - 0.1 * 0.5 / (0.5 + 1e-9), -2.0 - 0.1 * -1.0 / (1.0 + 1e-9)]
    np.testing.assert_allclose(p.data, expected1, rtol=1e-12)
    np.testing.assert_allclose(p.data, [0.9, -1.9], rtol=1e-8)

    # Step 2, g = [0.1, 2.0]
    #   m = 0.9 * [0.05, -0.1] + 0.1 * [0.1, 2.0]      = [0.055, 0.11]
    #   v = 0.98 * [0.005, 0.02] + 0.02 * [0.01, 4.0]  = [0.0051, 0.0996]
    #   m_hat = m / (1 - 0.9^2)  = m / 0.19   = [0.28947368..., 0.57894736...]
    #   v_hat = v / (1 - 0.98^2) = v / 0.0396 = [0.12878787..., 2.51515151...]
    #   sqrt(v_hat)                          = [0.35887028..., 1.58592292...]
    opt.zero_grad()
    p.grad[...] = [0.1, 2.0]
    opt.step()
    np.testing.assert_allclose(opt.m[0], [0.055, 0.11], rtol=1e-12)
    np.testing.assert_allclose(opt.v[0], [0.0051, 0.0996], rtol=1e-12)
    m_hat = [0.055 / 0.19, 0.11 / 0.19]
    v_hat = [0.0051 / 0.0396, 0.0996 / 0.0396]
    expected2 = [expected1[i] - 0.1 * m_hat[i] / (math.sqrt(v_hat[i]) + 1e-9) for i in range(2)]
    np.testing.assert_allclose(p.data, expected2, rtol=1e-12)
    np.testing.assert_allclose(p.data, [0.8193375159488563, -1.9365053912742358], rtol=1e-9)
    assert opt.step_count == 2
    assert opt.last_lr == 0.1


def test_adam_uses_the_schedule_with_steps_from_one():
    seen = []

    def schedule(step):
        seen.append(step)
        return 0.01

    p = _param([1.0])
    opt = Adam([p], lr=schedule)
    for _ in range(3):
        p.grad[...] = 1.0
        opt.step()
    assert seen == [1, 2, 3]

    noam = NoamSchedule(16, warmup_steps=10)
    opt = Adam([_param([1.0])], lr=noam)
    opt.step()
    assert opt.last_lr == noam(1)


def test_step_count_increments_once_per_step_whatever_the_number_of_params():
    params = [_param(np.ones(3), name=f"p{i}") for i in range(5)]
    opt = Adam(params, lr=0.1)
    assert opt.step_count == 0
    opt.step()
    opt.step()
    assert opt.step_count == 2


def test_update_is_in_place():
    p = _param([1.0, 2.0])
    data, grad = p.data, p.grad
    opt = Adam([p], lr=0.1)
    p.grad[...] = 1.0
    opt.step()
    assert p.data is data and p.grad is grad
    opt.zero_grad()
    assert (p.grad == 0).all()


def test_float32_stays_float32():
    p = _param(np.linspace(-1, 1, 6).reshape(2, 3), dtype=np.float32)
    # a schedule returning a NumPy float64 must not upcast anything either
    opt = Adam([p], lr=lambda step: np.float64(1e-3), clip_norm=0.5)
    for _ in range(3):
        p.grad[...] = np.float32(2.0)
        opt.step()
    for arr in (p.data, p.grad, opt.m[0], opt.v[0]):
        assert arr.dtype == np.float32
    assert isinstance(opt.last_lr, float) and isinstance(opt.last_grad_norm, float)


def test_grad_norm_is_recorded():
    p = _param([3.0, 4.0])
    opt = Adam([p], lr=0.1)
    p.grad[...] = [3.0, 4.0]
    opt.step()
    assert opt.last_grad_norm == pytest.approx(5.0)
    np.testing.assert_array_equal(p.grad, [3.0, 4.0])  # not clipped without clip_norm


def test_adam_clip_norm_clips_before_the_update():
    a, b = _param([0.0, 0.0]), _param([0.0, 0.0])
    opt_a = Adam([a], lr=0.1, clip_norm=1.0)
    opt_b = Adam([b], lr=0.1)
    a.grad[...] = [30.0, 40.0]  # norm 50 -> clipped to [0.6, 0.8]
    b.grad[...] = [0.6, 0.8]
    opt_a.step()
    opt_b.step()
    assert opt_a.last_grad_norm == pytest.approx(50.0)
    np.testing.assert_allclose(a.grad, [0.6, 0.8], rtol=1e-5)
    np.testing.assert_allclose(opt_a.m[0], opt_b.m[0], rtol=1e-5)
    np.testing.assert_allclose(opt_a.v[0], opt_b.v[0], rtol=1e-5)


def _fresh(values_by_param, dtype=np.float64):
    return [_param(v, dtype=dtype, name=f"p{i}") for i, v in enumerate(values_by_param)]


def _run(opt, params, grads):
    for g in grads:
        opt.zero_grad()
        for p, gi in zip(params, g):
            p.grad[...] = gi
        opt.step()


def test_state_dict_round_trip_gives_identical_steps():
    rng = np.random.default_rng(0)
    shapes = [(3, 2), (4,)]
    grads = [[rng.normal(size=s) for s in shapes] for _ in range(6)]
    params = _fresh([rng.normal(size=s) for s in shapes])
    opt = Adam(params, lr=NoamSchedule(8, warmup_steps=3))
    _run(opt, params, grads[:3])

    state = opt.state_dict()
    saved_values = [p.data.copy() for p in params]
    assert state["step_count"] == 3
    assert all(isinstance(state[k], np.ndarray) for k in state if k != "step_count")

    _run(opt, params, grads[3:])  # the original keeps going...
    assert state["step_count"] == 3  # ...without changing the saved state (copies, not views)

    restored = _fresh(saved_values)
    opt2 = Adam(restored, lr=NoamSchedule(8, warmup_steps=3))
    opt2.load_state_dict(state)
    assert opt2.step_count == 3
    _run(opt2, restored, grads[3:])
    for p, q in zip(params, restored):
        np.testing.assert_array_equal(p.data, q.data)
    # and the loaded moments do not alias the dict
    assert not np.shares_memory(opt2.m[0], state["m.0"])


def test_load_state_dict_keeps_the_params_dtype():
    p64 = _param([1.0, 2.0])
    opt64 = Adam([p64], lr=0.1)
    p64.grad[...] = 1.0
    opt64.step()
    p32 = _param([1.0, 2.0], dtype=np.float32)
    opt32 = Adam([p32], lr=0.1)
    opt32.load_state_dict(opt64.state_dict())
    assert opt32.m[0].dtype == np.float32 and opt32.v[0].dtype == np.float32


def test_load_state_dict_shape_mismatch_names_the_param():
    opt = Adam([_param([1.0, 2.0], name="encoder.w")], lr=0.1)
    other = Adam([_param([1.0, 2.0, 3.0], name="x")], lr=0.1)
    with pytest.raises(ValueError, match=r"'m.0' has shape \(3,\) but parameter 0 \('encoder.w'\) has shape \(2,\)"):
        opt.load_state_dict(other.state_dict())
    assert opt.m[0].shape == (2,)  # a failed load changes nothing


def test_load_state_dict_wrong_count_or_keys():
    opt = Adam(_fresh([[1.0], [2.0]]), lr=0.1)
    one = Adam(_fresh([[1.0]]), lr=0.1).state_dict()
    with pytest.raises(ValueError, match="moments for 1 parameters, this optimizer has 2"):
        opt.load_state_dict(one)
    with pytest.raises(KeyError, match="no 'step_count'"):
        opt.load_state_dict({"m.0": np.zeros(1)})
    bad = opt.state_dict()
    del bad["v.1"]
    with pytest.raises(KeyError, match="no 'v.1'"):
        opt.load_state_dict(bad)


def test_adam_bad_arguments():
    p = _param([1.0])
    with pytest.raises(ValueError, match="empty parameter list"):
        Adam([], lr=0.1)
    with pytest.raises(ValueError, match="lr must be a positive number or a callable"):
        Adam([p], lr=-1.0)
    with pytest.raises(ValueError, match=r"betas must each be in \[0, 1\)"):
        Adam([p], lr=0.1, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="eps must be >= 0"):
        Adam([p], lr=0.1, eps=-1e-9)
    with pytest.raises(ValueError, match="clip_norm must be positive or None"):
        Adam([p], lr=0.1, clip_norm=0.0)
    with pytest.raises(ValueError, match=r"parameter 1 \('w'\) appears more than once"):
        Adam([p, p], lr=0.1)
    with pytest.raises(TypeError, match=r"params\[0\] must be a Parameter, got ndarray"):
        Adam([np.zeros(2)], lr=0.1)


# -- clip_grad_norm -----------------------------------------------------------------------


def test_clip_grad_norm_scales_all_grads_together():
    a, b = _param([0.0, 0.0]), _param([0.0])
    a.grad[...] = [3.0, 0.0]
    b.grad[...] = [4.0]
    norm = clip_grad_norm([a, b], max_norm=1.0)
    assert norm == pytest.approx(5.0)  # the norm *before* clipping
    np.testing.assert_allclose(a.grad, [0.6, 0.0])
    np.testing.assert_allclose(b.grad, [0.8])
    assert global_grad_norm([a, b]) == pytest.approx(1.0)


def test_clip_grad_norm_leaves_small_grads_alone():
    a = _param([0.0, 0.0], dtype=np.float32)
    a.grad[...] = [0.3, 0.4]
    before = a.grad.copy()
    assert clip_grad_norm([a], max_norm=1.0) == pytest.approx(0.5)
    np.testing.assert_array_equal(a.grad, before)
    assert a.grad.dtype == np.float32


def test_clip_grad_norm_non_finite_is_reported_not_applied():
    a = _param([0.0, 0.0])
    a.grad[...] = [np.inf, 1.0]
    assert clip_grad_norm([a], max_norm=1.0) == math.inf
    np.testing.assert_array_equal(a.grad, [np.inf, 1.0])


@pytest.mark.parametrize("bad", [0, -1.0, None])
def test_clip_grad_norm_bad_max_norm(bad):
    with pytest.raises(ValueError, match="max_norm must be a positive number"):
        clip_grad_norm([_param([1.0])], max_norm=bad)
