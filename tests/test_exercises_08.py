"""The exercise checkers of lesson 8 pass a right answer, reject wrong ones with a hint that
names the mistake, and let an untouched stub through without raising (so the notebook runs
in CI). Also: the checkers' own references agree with the closed forms the lesson states,
and the sweep's JSON, which the lesson plots, says where it came from."""

import json
import math
import pathlib

import numpy as np
import pytest
from checker_contract import contract_tests

from lessonkit.exercises import lesson_08 as ex

ROOT = pathlib.Path(__file__).resolve().parents[1]




# -- right answers (the same as the notebook's "Solutions" section) --------------------

def additive_backward_ok(dout, cache):
    Q, K, V, W_q, W_k, v, T, A = cache
    dA = dout @ V.swapaxes(-1, -2)
    dV = A.swapaxes(-1, -2) @ dout
    dE = A * (dA - (dA * A).sum(axis=-1, keepdims=True))
    dv = np.einsum("bij,bija->a", dE, T)
    dU = dE[..., None] * v * (1.0 - T ** 2)
    dQa, dKa = dU.sum(axis=2), dU.sum(axis=1)
    d_k, d_a = W_q.shape
    dW_q = Q.reshape(-1, d_k).T @ dQa.reshape(-1, d_a)
    dW_k = K.reshape(-1, d_k).T @ dKa.reshape(-1, d_a)
    return dQa @ W_q.T, dKa @ W_k.T, dV, dW_q, dW_k, dv


def _ceil_log(n, k):
    layers, span = 0, 1
    while span < n:
        span, layers = span * k, layers + 1
    return layers


def layers_needed_ok(kind, n, k):
    if kind == "conv":
        return math.ceil((n - 1) / (k - 1))
    if kind == "dilated_conv":
        return _ceil_log(n, k)
    return math.ceil((n - 1) / k)


def layer_flops_ok(kind, n, d, r):
    if kind == "recurrent":
        return 4 * n * d * d
    keys = n if kind == "attention" else 2 * r + 1
    return 8 * n * d * d + 4 * n * keys * d


def _heads(mha, x):
    from minitransformer.layers.attention import attention_forward
    Q, K, V = mha.project_qkv(x)
    return attention_forward(Q, K, V, None)[0].copy()


def ablate_head_ok(mha, x, head):
    heads = _heads(mha, x)
    heads[:, head] = 0
    return mha.output(heads)


def _ablate_in_place(mha, x, head):
    mha.W_o.data[head * mha.d_k:(head + 1) * mha.d_k] = 0
    return mha.forward(x)


def _ablate_columns(mha, x, head):
    W = mha.W_o.data.copy()
    W[:, head * mha.d_k:(head + 1) * mha.d_k] = 0
    concat = _heads(mha, x).transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], -1)
    return concat @ W + mha.b_o.data


def _ablate_rescaled(mha, x, head):
    y = ablate_head_ok(mha, x, head) - mha.b_o.data
    return y * mha.h / (mha.h - 1) + mha.b_o.data


# -- wrong answers -------------------------------------------------------------------

def _additive_variant(*, tanh_grad=True, rowsum=True, times_v=True, dv_mean=False, q_axis=2):
    def fn(dout, cache):
        Q, K, V, W_q, W_k, v, T, A = cache
        dA = dout @ V.swapaxes(-1, -2)
        dV = A.swapaxes(-1, -2) @ dout
        dE = A * (dA - (dA * A).sum(axis=-1, keepdims=True)) if rowsum else A * dA
        dv = np.einsum("bij,bija->a", dE, T)
        if dv_mean:
            dv = dv / dE.size
        dT = dE[..., None] * v if times_v else np.repeat(dE[..., None], v.size, axis=-1)
        dU = dT * (1.0 - T ** 2) if tanh_grad else dT
        dQa, dKa = dU.sum(axis=q_axis), dU.sum(axis=1)
        d_k, d_a = W_q.shape
        dW_q = Q.reshape(-1, d_k).T @ dQa.reshape(-1, d_a) if q_axis == 2 else np.zeros_like(W_q)
        dW_k = K.reshape(-1, d_k).T @ dKa.reshape(-1, d_a)
        return dQa @ W_q.T, dKa @ W_k.T, dV, dW_q, dW_k, dv
    return fn


def _dilated_with_float_log(kind, n, k):
    if kind == "dilated_conv":
        return math.ceil(math.log(n, k))
    return layers_needed_ok(kind, n, k)


def _with(kind_to_change, wrong):
    def fn(kind, *args):
        return wrong(*args) if kind == kind_to_change else layers_needed_ok(kind, *args)
    return fn


def _flops_with(kind_to_change, wrong):
    def fn(kind, n, d, r):
        return wrong(n, d, r) if kind == kind_to_change else layer_flops_ok(kind, n, d, r)
    return fn


CASES = {
    "check_additive_attention_backward": (additive_backward_ok, [
        ("no tanh derivative", _additive_variant(tanh_grad=False), r"dQ: wrong values.*tanh derivative is missing"),
        ("softmax without the row sum", _additive_variant(rowsum=False), r"row-sum term"),
        ("forgot the factor v", _additive_variant(times_v=False), r"factor v is missing"),
        ("dv averaged", _additive_variant(dv_mean=True), r"dv: wrong values.*mean over the pairs"),
        ("q summed over the query axis", _additive_variant(q_axis=1),
         r"dQ: shape mismatch: expected \(2, 3, 4\), got \(2, 5, 4\).*sums dU over the keys j"),
        ("five results", lambda dout, cache: additive_backward_ok(dout, cache)[:5], r"tuple of 6 arrays"),
    ]),
    "check_layers_needed": (layers_needed_ok, [
        ("conv off by one", _with("conv", lambda n, k: math.ceil(n / (k - 1))), r"conv, n=2, k=2.*off by one"),
        ("conv reach k", _with("conv", lambda n, k: math.ceil((n - 1) / k)), r"k−1 positions back"),
        ("dilated with a float log", _dilated_with_float_log, r"dilated_conv, n=125, k=5.*floating point"),
        ("dilated as contiguous", _with("dilated_conv", lambda n, k: math.ceil((n - 1) / (k - 1))),
         r"contiguous stack"),
        ("restricted: one layer", _with("restricted_attention", lambda n, k: 1), r"raises the path length"),
        ("restricted: 2r per layer", _with("restricted_attention", lambda n, k: math.ceil((n - 1) / (2 * k))),
         r"reaches r positions back, not 2r"),
        ("restricted off by one", _with("restricted_attention", lambda n, k: math.ceil(n / k)), r"off by one"),
        ("a fraction of a layer", _with("conv", lambda n, k: (n - 1) / (k - 1)), r"conv, n=10, k=3.*round up"),
    ]),
    "check_layer_flops": (layer_flops_ok, [
        ("multiply-adds", lambda *a: layer_flops_ok(*a) // 2, r"multiply-add"),
        ("recurrent: only h W_h", _flops_with("recurrent", lambda n, d, r: 2 * n * d * d), r"input product"),
        ("attention: no projections", _flops_with("attention", lambda n, d, r: 4 * n * n * d),
         r"add the projections"),
        ("attention: no W^O", _flops_with("attention", lambda n, d, r: 6 * n * d * d + 4 * n * n * d),
         r"W\^O is missing"),
        ("attention: one of QK and AV", _flops_with("attention", lambda n, d, r: 8 * n * d * d + 2 * n * n * d),
         r"counted one of them"),
        ("restricted as full", _flops_with("restricted_attention", lambda n, d, r: layer_flops_ok("attention", n, d, r)),
         r"that is full attention"),
        ("restricted: 2r keys", _flops_with("restricted_attention", lambda n, d, r: 8 * n * d * d + 8 * n * r * d),
         r"window holds 2r\+1 keys"),
        ("restricted: no projections", _flops_with("restricted_attention", lambda n, d, r: 4 * n * (2 * r + 1) * d),
         r"add the projections"),
        ("not a number", lambda *a: "lots", r"expected a number"),
        ("not a whole number", lambda *a: layer_flops_ok(*a) + 0.5, r"whole number of FLOPs.*division"),
    ]),
    "check_head_ablation": (ablate_head_ok, [
        ("every head kept", lambda mha, x, head: mha.forward(x), r"output with every head"),
        ("bias dropped", lambda mha, x, head: ablate_head_ok(mha, x, head) - mha.b_o.data, r"bias b_o is missing"),
        ("the next head", lambda mha, x, head: ablate_head_ok(mha, x, (head + 1) % mha.h), r"counted from 0"),
        ("W^O changed in place", _ablate_in_place, r"parameters changed \(attn.W_o\)"),
        ("columns of W^O", _ablate_columns, r"zeroed columns of W\^O"),
        ("other heads rescaled", _ablate_rescaled, r"rescaled by h/\(h−1\)"),
        ("wrong shape", lambda mha, x, head: ablate_head_ok(mha, x, head)[0], r"shape mismatch"),
    ]),
}


(test_every_checker_has_cases, test_correct_answer_passes, test_stub_is_not_attempted,
 test_wrong_answer_gets_its_hint) = contract_tests(ex, CASES)


def test_checkers_do_not_change_backend_state():
    from minitransformer import backend
    dtype, matmul = backend.default_dtype(), backend.matmul
    for name, (correct, _) in CASES.items():
        getattr(ex, name)(correct)
    assert backend.default_dtype() == dtype
    assert backend.matmul is matmul


def test_propagation_agrees_with_the_closed_forms():
    # The checker's reference is a simulation, the lesson states closed forms: they must agree.
    for n in range(2, 130):
        for k in range(2, 8):
            assert ex.layers_needed_by_propagation("conv", n, k) == math.ceil((n - 1) / (k - 1))
            assert ex.layers_needed_by_propagation("dilated_conv", n, k) == _ceil_log(n, k)
            assert ex.layers_needed_by_propagation("restricted_attention", n, k) == math.ceil((n - 1) / k)


def test_propagation_rejects_bad_input():
    with pytest.raises(ValueError, match="kind must be one of"):
        ex.layers_needed_by_propagation("lstm", 10, 3)
    with pytest.raises(ValueError, match="need n >= 2"):
        ex.layers_needed_by_propagation("conv", 10, 1)


def test_counted_attention_flops_match_the_formula():
    for n, d in ((5, 8), (16, 12), (3, 64)):
        assert ex._counted_attention_flops(n, d) == 8 * n * d * d + 4 * n * n * d


def test_sweep_json_records_its_provenance():
    data = json.loads((ROOT / "lessons" / "experiments" / "lesson08_table1.json").read_text())
    made = data["provenance"][0]          # the fields every record carries: tests/test_experiment_records.py
    assert made["command"].startswith("python lessons/experiments/lesson08_table1.py")
    assert made["started"] and made["machine"]["cpu"] and made["machine"]["cores"]
    for section in ("n_sweep", "d_sweep", "grid", "r_sweep", "additive"):
        assert section in data, section
    n = data["n_sweep"]["n"]
    for name, rows in data["n_sweep"]["time_s"].items():
        assert len(rows[0]) == len(n) and all(t > 0 for t in rows[0]), name


def _table1_script():
    import importlib.util
    spec = importlib.util.spec_from_file_location("lesson08_table1", ROOT / "lessons" / "experiments" / "lesson08_table1.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_keep_minimum_keeps_each_points_smaller_time_and_refuses_other_counts():
    """Lesson 8 re-measures its live piece on a busy machine and keeps each point's minimum."""
    table1 = _table1_script()
    a = {"time_s": {"attention": [3.0, 1.0], "conv": [2.0, 5.0]}, "flops": {"attention": [1, 2]}, "calls": {"attention": [4, 4]}}
    b = {"time_s": {"attention": [2.0, 4.0], "conv": [6.0, 1.0]}, "flops": {"attention": [1, 2]}, "calls": {"attention": [4, 4]}}
    merged = table1.keep_minimum(a, b)
    assert merged["time_s"] == {"attention": [2.0, 1.0], "conv": [2.0, 1.0]}
    assert merged["flops"] == a["flops"] and a["time_s"]["attention"] == [3.0, 1.0]     # the inputs are unchanged
    with pytest.raises(ValueError, match="different FLOPs or calls"):
        table1.keep_minimum(a, b | {"calls": {"attention": [4, 5]}})
    slopes = table1.growth_slopes([16, 64, 256], {"attention": [1.0, 2.0, 8.0]})
    assert slopes["attention"] == pytest.approx(1.0)      # 2 -> 8 ms as n goes 64 -> 256: time grows as n^1
