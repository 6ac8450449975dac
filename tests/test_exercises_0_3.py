"""The exercise checkers of lessons 0-3 pass a right answer, reject wrong ones, and
let an untouched stub through without raising (so the notebooks run in CI).

For every checker: a correct implementation returns True and prints "correct";
typical wrong answers (a missing scale, a transpose, a sign flip, a missing mask)
raise AssertionError with a message that says what is wrong; the stub (returns
None) prints the not-attempted message and returns False.
"""

import json
import pathlib
import runpy

import numpy as np
from checker_contract import contract_tests

from lessonkit.exercises import lessons_0_3 as ex

ROOT = pathlib.Path(__file__).resolve().parents[1]




# -- right answers (the same as the notebooks' "Solutions" sections) -----------------

def numerical_gradient_ok(f, x, h=1e-5):
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        f_plus = f()
        x[i] = old - h
        f_minus = f()
        x[i] = old
        grad[i] = (f_plus - f_minus) / (2 * h)
    return grad


def linear_backward_ok(dy, x, W, b):
    d_in, d_out = W.shape
    dx = dy @ W.T
    dW = x.reshape(-1, d_in).T @ dy.reshape(-1, d_out)
    db = dy.reshape(-1, d_out).sum(axis=0)
    return dx, dW, db


def softmax_backward_ok(dA, A):
    return A * (dA - (dA * A).sum(axis=-1, keepdims=True))


def causal_mask_ok(T):
    return np.tril(np.ones((T, T), dtype=bool))[None, None]


def attention_backward_ok(dout, cache):
    Q, K, V, A, scale = cache
    dV = A.swapaxes(-1, -2) @ dout
    dA = dout @ V.swapaxes(-1, -2)
    dS = A * (dA - (dA * A).sum(axis=-1, keepdims=True))
    dQ = dS @ K * scale
    dK = dS.swapaxes(-1, -2) @ Q * scale
    return dQ, dK, dV


def merge_heads_backward_ok(dconcat, h):
    B, S, d_model = dconcat.shape
    return dconcat.reshape(B, S, h, d_model // h).transpose(0, 2, 1, 3)


def attention_flops_ok(B, S_q, S_k, d_model, h):
    return 4 * B * d_model * d_model * (S_q + S_k) + 4 * B * S_q * S_k * d_model


def decoder_mask_ok(tgt_ids, pad_id):
    T = tgt_ids.shape[1]
    return np.tril(np.ones((T, T), dtype=bool))[None, None] & (tgt_ids != pad_id)[:, None, None, :]


def qkv_projection_backward_ok(dQ, dK, dV, x, W_qkv):
    B, h, S, d_k = dQ.shape
    d_model = h * d_k
    merge = lambda g: g.transpose(0, 2, 1, 3).reshape(B * S, d_model)          # noqa: E731
    dqkv = np.concatenate([merge(dQ), merge(dK), merge(dV)], axis=-1)          # (B·S, 3·d_model)
    return (dqkv @ W_qkv.T).reshape(B, S, d_model), x.reshape(-1, d_model).T @ dqkv, dqkv.sum(axis=0)


def _qkv_blocks_swapped(dQ, dK, dV, x, W_qkv):
    return qkv_projection_backward_ok(dK, dQ, dV, x, W_qkv)


def _qkv_plain_reshape(dQ, dK, dV, x, W_qkv):
    B, h, S, d_k = dQ.shape
    dqkv = np.concatenate([g.reshape(B * S, h * d_k) for g in (dQ, dK, dV)], axis=-1)
    return (dqkv @ W_qkv.T).reshape(B, S, h * d_k), x.reshape(-1, h * d_k).T @ dqkv, dqkv.sum(axis=0)


def _qkv_bias_not_summed(dQ, dK, dV, x, W_qkv):
    B, h, S, d_k = dQ.shape
    dx, dW, _ = qkv_projection_backward_ok(dQ, dK, dV, x, W_qkv)
    dqkv = np.concatenate([g.transpose(0, 2, 1, 3).reshape(B, S, h * d_k) for g in (dQ, dK, dV)], axis=-1)
    return dx, dW, dqkv


def _qkv_dW_transposed(dQ, dK, dV, x, W_qkv):
    dx, dW, db = qkv_projection_backward_ok(dQ, dK, dV, x, W_qkv)
    return dx, dW.T, db


def _qkv_only_query_path(dQ, dK, dV, x, W_qkv):
    _, dW, db = qkv_projection_backward_ok(dQ, dK, dV, x, W_qkv)
    dx = qkv_projection_backward_ok(dQ, 0 * dK, 0 * dV, x, W_qkv)[0]
    return dx, dW, db


def relu_backward_ok(dh, z):
    return dh * (z > 0)


def ffn_backward_ok(dy, x, W1, b1, W2, b2):
    d_model, d_ff = W1.shape
    z = x @ W1 + b1
    hidden = np.maximum(z, 0)
    dhidden = dy @ W2.T
    dW2 = hidden.reshape(-1, d_ff).T @ dy.reshape(-1, d_model)
    db2 = dy.reshape(-1, d_model).sum(axis=0)
    dz = dhidden * (z > 0)
    dW1 = x.reshape(-1, d_model).T @ dz.reshape(-1, d_ff)
    db1 = dz.reshape(-1, d_ff).sum(axis=0)
    dx = dz @ W1.T
    return dx, dW1, db1, dW2, db2


# -- wrong answers: (label, function, a regex the error message must match) ----------

def _one_sided(f, x, h=1e-5):
    grad, f0 = np.zeros_like(x), f()
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        grad[i] = (f() - f0) / h
        x[i] = old
    return grad


def _not_restored(f, x, h=1e-5):
    grad = numerical_gradient_ok(f, x, h)
    x += h
    return grad


def _attention_backward_no_scale(dout, cache):
    dQ, dK, dV = attention_backward_ok(dout, cache)
    return dQ / cache.scale, dK / cache.scale, dV


def _attention_backward_dK_transposed(dout, cache):
    Q, K, V, A, scale = cache
    dQ, _, dV = attention_backward_ok(dout, cache)
    dA = dout @ V.swapaxes(-1, -2)
    dS = A * (dA - (dA * A).sum(axis=-1, keepdims=True))
    return dQ, Q.swapaxes(-1, -2) @ dS * scale, dV


def _attention_backward_no_rowsum(dout, cache):
    Q, K, V, A, scale = cache
    dS = A * (dout @ V.swapaxes(-1, -2))
    return dS @ K * scale, dS.swapaxes(-1, -2) @ Q * scale, A.swapaxes(-1, -2) @ dout


def _ffn_no_relu_mask(dy, x, W1, b1, W2, b2):
    d_model, d_ff = W1.shape
    hidden = np.maximum(x @ W1 + b1, 0)
    dz = dy @ W2.T
    return (dz @ W1.T, x.reshape(-1, d_model).T @ dz.reshape(-1, d_ff), dz.reshape(-1, d_ff).sum(0),
            hidden.reshape(-1, d_ff).T @ dy.reshape(-1, d_model), dy.reshape(-1, d_model).sum(0))


def _ffn_W2_transposed(dy, x, W1, b1, W2, b2):
    dx, dW1, db1, dW2, db2 = ffn_backward_ok(dy, x, W1, b1, W2, b2)
    return dx, dW1, db1, dW2.T, db2


CASES = {
    "check_numerical_gradient": (numerical_gradient_ok, [
        ("one-sided difference", _one_sided, r"one-sided"),
        ("sign flip", lambda f, x, h=1e-5: -numerical_gradient_ok(f, x, h), r"sign is flipped"),
        ("x not restored", _not_restored, r"x was left changed"),
    ]),
    "check_linear_backward": (linear_backward_ok, [
        ("mean instead of sum in db",
         lambda dy, x, W, b: (*linear_backward_ok(dy, x, W, b)[:2], dy.reshape(-1, 5).mean(0)),
         r"db: wrong values.*mean"),
        ("dW transposed",
         lambda dy, x, W, b: (dy @ W.T, dy.reshape(-1, 5).T @ x.reshape(-1, 4), dy.reshape(-1, 5).sum(0)),
         r"dW: shape mismatch: expected \(4, 5\), got \(5, 4\)"),
        ("db not summed over positions",
         lambda dy, x, W, b: (*linear_backward_ok(dy, x, W, b)[:2], dy.sum(0)),
         r"db: shape mismatch"),
        ("only two results", lambda dy, x, W, b: linear_backward_ok(dy, x, W, b)[:2], r"tuple of 3 arrays"),
    ]),
    "check_softmax_backward": (softmax_backward_ok, [
        ("diagonal only", lambda dA, A: A * dA, r"only the diagonal"),
        ("sum over the wrong axis",
         lambda dA, A: A * (dA - (dA * A).sum(axis=-2, keepdims=True)), r"last axis"),
        ("sign flip", lambda dA, A: -softmax_backward_ok(dA, A), r"sign is flipped"),
    ]),
    "check_causal_mask": (causal_mask_ok, [
        ("transposed", lambda T: causal_mask_ok(T).swapaxes(-1, -2), r"transpose"),
        ("diagonal masked", lambda T: np.tril(np.ones((T, T), dtype=bool), -1)[None, None], r"diagonal"),
        ("(T, T) shape", lambda T: np.tril(np.ones((T, T), dtype=bool)), r"shape mismatch: expected \(1, 1, 1, 1\)"),
        ("float mask", lambda T: np.tril(np.ones((T, T)))[None, None], r"boolean"),
    ]),
    "check_attention_backward": (attention_backward_ok, [
        ("forgot the scale", _attention_backward_no_scale, r"dQ: wrong values.*1/sqrt\(d_k\) factor is missing"),
        ("dK transposed", _attention_backward_dK_transposed, r"dK: shape mismatch: expected \(2, 2, 4, 5\), got \(2, 2, 5, 4\)"),
        ("softmax backward without the row sum", _attention_backward_no_rowsum, r"row-sum"),
        ("sign flip on dV",
         lambda dout, cache: (*attention_backward_ok(dout, cache)[:2], -attention_backward_ok(dout, cache)[2]),
         r"dV: wrong values.*numerical gradient"),
    ]),
    "check_merge_heads_backward": (merge_heads_backward_ok, [
        ("plain reshape", lambda d, h: d.reshape(d.shape[0], h, d.shape[1], d.shape[2] // h), r"plain reshape"),
        ("forgot to split", lambda d, h: d, r"shape mismatch"),
    ]),
    "check_attention_flops": (attention_flops_ok, [
        ("grows with h", lambda B, S_q, S_k, d, h: h * attention_flops_ok(B, S_q, S_k, d, h), r"grows with h"),
        ("multiply-adds", lambda B, S_q, S_k, d, h: attention_flops_ok(B, S_q, S_k, d, h) // 2, r"multiply-add"),
        ("no projections", lambda B, S_q, S_k, d, h: 4 * B * S_q * S_k * d, r"four projections"),
        ("K, V projections on S_q",
         lambda B, S_q, S_k, d, h: 8 * B * d * d * S_q + 4 * B * S_q * S_k * d, r"S_k key positions"),
    ]),
    "check_decoder_mask": (decoder_mask_ok, [
        ("causal only", lambda ids, pad: np.broadcast_to(causal_mask_ok(ids.shape[1]), (ids.shape[0], 1, ids.shape[1], ids.shape[1])),
         r"only causal"),
        ("padded queries", lambda ids, pad: causal_mask_ok(ids.shape[1]) & (ids != pad)[:, None, :, None],
         r"padded queries"),
        ("(B, T, T) shape", lambda ids, pad: decoder_mask_ok(ids, pad)[:, 0], r"shape mismatch"),
    ]),
    "check_qkv_projection_backward": (qkv_projection_backward_ok, [
        ("blocks in the wrong order", _qkv_blocks_swapped, r"dx: wrong values.*wrong order"),
        ("heads merged by a plain reshape", _qkv_plain_reshape, r"plain reshape"),
        ("bias gradient not summed", _qkv_bias_not_summed, r"db_qkv: shape mismatch.*sum dqkv over the B·S rows"),
        ("dW transposed", _qkv_dW_transposed, r"dW_qkv: shape mismatch.*transposed: dW_qkv = xᵀ dqkv"),
        ("only the query path in dx", _qkv_only_query_path, r"only the query path"),
    ]),
    "check_relu_backward": (relu_backward_ok, [
        ("identity", lambda dh, z: dh, r"passes everywhere"),
        ("inverted", lambda dh, z: dh * (z < 0), r"inverted"),
        ("times the value", lambda dh, z: dh * np.maximum(z, 0), r"0/1 step"),
    ]),
    "check_ffn_backward": (ffn_backward_ok, [
        ("no ReLU mask", _ffn_no_relu_mask, r"ReLU mask is missing"),
        ("dW2 transposed", _ffn_W2_transposed, r"dW2: shape mismatch: expected \(6, 4\), got \(4, 6\)"),
        ("sign flip", lambda *a: tuple(-g for g in ffn_backward_ok(*a)), r"dx: wrong values"),
    ]),
}


(test_every_checker_has_cases, test_correct_answer_passes, test_stub_is_not_attempted,
 test_wrong_answer_gets_its_hint) = contract_tests(ex, CASES)


def test_checkers_do_not_change_the_default_dtype():
    from minitransformer import backend
    before = backend.default_dtype()
    for name, (correct, _) in CASES.items():
        getattr(ex, name)(correct)
    assert backend.default_dtype() == before


def test_flops_answer_does_not_depend_on_h():
    # The point of the exercise (§3.2.2): h heads of size d_model/h cost what one head of size d_model does.
    assert len({attention_flops_ok(2, 10, 12, 64, h) for h in (1, 2, 4, 8)}) == 1
    assert ex._mha_flops(2, 10, 12, 64, 1) == ex._mha_flops(2, 10, 12, 64, 8)


# -- the debugging aids of lesson 0 ----------------------------------------------------

def test_vscode_launch_json_is_valid_and_points_at_real_files():
    launch = json.loads((ROOT / ".vscode" / "launch.json").read_text())
    configs = launch["configurations"]
    assert configs, "launch.json has no configurations"
    for cfg in configs:
        assert {"name", "type", "request"} <= set(cfg), cfg
        program = cfg.get("program", "")
        if program.startswith("${workspaceFolder}/"):
            assert (ROOT / program.removeprefix("${workspaceFolder}/")).exists(), program
    assert any(cfg.get("module") == "pytest" for cfg in configs), "no configuration debugs a test"
    for cfg in configs:                        # test files named in a pytest configuration exist
        for arg in cfg.get("args", []) if cfg.get("module") == "pytest" else []:
            if arg.startswith("tests/"):
                assert (ROOT / arg).exists(), f"{cfg['name']}: {arg} does not exist"
    named = {arg for cfg in configs for arg in cfg.get("args", [])}
    assert {"tests/test_exercises_0_3.py", "tests/test_exercises_4_7.py"} <= named


def test_debug_attention_script_runs(capsys, monkeypatch):
    from minitransformer import backend
    old = backend.default_dtype()
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")     # --break must not stop a test run
    monkeypatch.setattr("sys.argv", ["debug_attention.py", "--break"])
    try:
        runpy.run_path(str(ROOT / "lessons" / "debug_attention.py"), run_name="__main__")
    finally:
        backend.set_default_dtype(old)
    out = capsys.readouterr().out
    assert "gradient check passed" in out
