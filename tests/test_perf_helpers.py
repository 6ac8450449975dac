"""The speed helpers give the same numbers as the plain formulas they replace.

backend.add_matmul (out += a @ b in row blocks), backend.rowdot (row sums of a ⊙ b), the one fast path of
layers/fast.py (Adam's update in blocks) against Adam's plain loop, the in-place loss
backward, the dropout mask, and the in-place steps inside LayerNorm, the loss and
Linear (which must not touch their inputs). The plain LayerNorm and loss are also
checked against their definitions written out independently here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.layers import fast
from minitransformer.layers.dropout import dropout_mask
from minitransformer.layers.layernorm import layernorm_backward, layernorm_forward
from minitransformer.layers.linear import linear_backward, linear_forward
from minitransformer.layers.loss import cross_entropy_backward, cross_entropy_forward
from minitransformer.layers.parameter import Parameter
from minitransformer.optim import Adam, global_grad_norm


def test_matmul_is_the_plain_product_a_builtin_that_pdb_does_not_step_into(rng):
    """backend.matmul is ``@`` itself: the layers fold (B, S, k) rows into one 2-D product
    before they call it (Linear, attention, the output projection), so it needs no Python."""
    import operator

    assert backend.matmul is operator.matmul
    a, W = rng.standard_normal((5, 4)), rng.standard_normal((4, 6))
    np.testing.assert_array_equal(backend.matmul(a, W), a @ W)


@pytest.mark.parametrize("n_rows", [3, 10, 17])
def test_add_matmul_in_blocks(rng, n_rows):
    out0 = rng.standard_normal((n_rows, 4))
    a = rng.standard_normal((7, n_rows)).T                           # (n_rows, 7) transposed view, as for dE
    b = rng.standard_normal((7, 4))
    for block_rows in (1, 4, 5, 100):
        out = out0.copy()
        assert backend.add_matmul(out, a, b, block_rows=block_rows) is out
        np.testing.assert_allclose(out, out0 + a @ b, rtol=1e-12, err_msg=f"block_rows={block_rows}")


def test_rowdot(rng):
    a, b = rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 3, 5))
    r = backend.rowdot(a, b)
    assert r.shape == (2, 3, 1)
    np.testing.assert_allclose(r, (a * b).sum(axis=-1, keepdims=True), rtol=1e-12)
    assert backend.rowdot(a.astype(np.float32), b.astype(np.float32)).dtype == np.float32
    assert backend.rowdot([[1.0, 2.0]], np.array([[3.0, 4.0]])).tolist() == [[11.0]]    # not an ndarray: the formula


def _reference_adam(p, grads, lr, betas=(0.9, 0.98), eps=1e-9):
    """Adam exactly as the textbook (float64), one whole array at a time."""
    p, m, v = p.astype(np.float64), np.zeros_like(p, np.float64), np.zeros_like(p, np.float64)
    for t, g in enumerate(grads, start=1):
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        m_hat, v_hat = m / (1 - betas[0] ** t), v / (1 - betas[1] ** t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p, m, v


def _adam_run(start, grads, monkeypatch, adam_min, lr=0.01, **kw):
    """Three Adam steps from ``start`` with fast.ADAM_MIN = adam_min; the parameters and the optimizer."""
    monkeypatch.setattr(fast, "ADAM_MIN", adam_min)
    params = [Parameter(a.copy()) for a in start]
    opt = Adam(params, lr=lr, **kw)
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad[...] = g
        opt.step()
    return params, opt


@pytest.mark.parametrize("shape", [(10, 7), (3,), (64,)])
def test_adam_blocks_match_the_plain_update_and_the_textbook(rng, monkeypatch, shape):
    monkeypatch.setattr(fast, "ADAM_BLOCK", 16)                      # several blocks and a partial one
    p0 = rng.standard_normal(shape)
    grads = [[rng.standard_normal(shape)] for _ in range(3)]
    want_p, want_m, want_v = _reference_adam(p0, [g[0] for g in grads], 0.01)
    for adam_min in (1 << 62, 0):                                    # the plain loop, then the fast path
        (p,), opt = _adam_run([p0], grads, monkeypatch, adam_min)
        np.testing.assert_allclose(p.data, want_p, rtol=1e-12)
        np.testing.assert_allclose(opt.m[0], want_m, rtol=1e-12)
        np.testing.assert_allclose(opt.v[0], want_v, rtol=1e-12)
        assert opt.last_grad_norm == pytest.approx(math.sqrt(float((grads[-1][0] ** 2).sum())), rel=1e-12)


def test_adam_fast_path_float32_within_rounding_of_the_plain_one(rng, monkeypatch):
    """float32: the folded constants of the fast path round differently, by a few ulp."""
    monkeypatch.setattr(fast, "ADAM_BLOCK", 8)
    shapes = [(5, 5), (3,), (20,)]
    start = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(3)]
    plain, plain_opt = _adam_run(start, grads, monkeypatch, 1 << 62, lr=1e-2)
    blocked, fast_opt = _adam_run(start, grads, monkeypatch, 0, lr=1e-2)
    for a, b, ma, mb, va, vb in zip(plain, blocked, plain_opt.m, fast_opt.m, plain_opt.v, fast_opt.v):
        assert a.data.dtype == b.data.dtype == mb.dtype == vb.dtype == np.float32
        np.testing.assert_allclose(b.data, a.data, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(mb, ma, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(vb, va, rtol=1e-6, atol=1e-10)
    assert fast_opt.last_grad_norm == pytest.approx(global_grad_norm(blocked), rel=1e-6)


def test_adam_non_contiguous_parameter_in_the_fast_path(rng, monkeypatch):
    monkeypatch.setattr(fast, "ADAM_MIN", 0)
    base = rng.standard_normal((6, 8))
    p = Parameter(base[:, ::2])                                      # a strided view: updated whole
    g = rng.standard_normal((6, 4))
    p.grad[...] = g
    before = p.data.copy()
    Adam([p], lr=0.1).step()
    want, _, _ = _reference_adam(before, [g], 0.1)
    np.testing.assert_allclose(p.data, want, rtol=1e-12)
    np.testing.assert_allclose(base[:, ::2], want, rtol=1e-12)      # written through the view


def test_adam_takes_the_fast_path_only_for_large_parameters(rng, monkeypatch):
    """At the default threshold a lesson- or toy-sized parameter takes the plain loop (what a
    learner steps through); one of ADAM_MIN elements or more takes the blocks."""
    calls = []
    monkeypatch.setattr(fast, "adam_update_in_blocks", lambda p, *args: calls.append(p.size))
    small = Parameter(np.ones((128, 1000), np.float32))              # toy's E: 128,000 elements
    large = Parameter(np.ones(fast.ADAM_MIN, np.float32))
    for p in (small, large):
        p.grad[...] = 0.5
    Adam([small, large], lr=1e-3).step()
    assert calls == [fast.ADAM_MIN] and not np.array_equal(small.data, np.ones_like(small.data))
    assert 128 * 1000 < fast.ADAM_MIN <= 512 * 2048                 # toy plain; base's FFN matrices blocked


def test_adam_zero_grad(rng):
    params = [Parameter(rng.standard_normal(s)) for s in [(5, 5), (3,), (20,)]]
    strided = Parameter(rng.standard_normal((6, 8))[:, ::2])
    strided.grad = rng.standard_normal((6, 8))[:, ::2]                   # a non-contiguous gradient
    params.append(strided)
    for p in params[:3]:
        p.grad[...] = 1.0
    Adam(params, lr=1e-3).zero_grad()
    assert all(not p.grad.any() for p in params)


def test_loss_backward_overwrite_cache_same_gradient(rng):
    logits = rng.standard_normal((2, 3, 7))
    targets = np.array([[1, 2, 0], [3, 0, 0]])
    kept = logits.copy()
    _, cache = cross_entropy_forward(logits, targets, pad_id=0, eps_ls=0.1)
    np.testing.assert_array_equal(logits, kept)                      # the loss does not touch its input
    probs = cache.probs.copy()
    d_copy = cross_entropy_backward(cache)
    np.testing.assert_array_equal(cache.probs, probs)                # default: the cache is left intact
    d_inplace = cross_entropy_backward(cache, overwrite_cache=True)
    np.testing.assert_array_equal(d_copy, d_inplace)
    assert d_inplace is cache.probs


def test_dropout_mask_values_and_seed(rng):
    m = dropout_mask((50, 40), 0.25, np.random.default_rng(3), np.float32)
    assert m.dtype == np.float32
    assert set(np.unique(m).tolist()) <= {0.0, np.float32(1 / 0.75)}
    # the same draws as "uniform >= P_drop, as 0/1, times 1/(1-P_drop)"
    u = np.random.default_rng(3).random((50, 40), dtype=np.float32)
    np.testing.assert_array_equal(m, (u >= 0.25).astype(np.float32) * np.float32(1 / 0.75))


def test_in_place_steps_leave_inputs_alone(rng):
    x = rng.standard_normal((2, 3, 4))
    gamma, beta = rng.standard_normal(4), rng.standard_normal(4)
    x0 = x.copy()
    y, cache = layernorm_forward(x, gamma, beta, 1e-5)
    np.testing.assert_array_equal(x, x0)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(y, (x - mu) / np.sqrt(var + 1e-5) * gamma + beta, rtol=1e-12)
    dy = rng.standard_normal(x.shape)
    dy0 = dy.copy()
    layernorm_backward(dy, cache)
    np.testing.assert_array_equal(dy, dy0)

    W, b = rng.standard_normal((4, 5)), rng.standard_normal(5)
    y, lcache = linear_forward(x, W, b)
    np.testing.assert_allclose(y, x @ W + b, rtol=1e-12)
    np.testing.assert_array_equal(x, x0)
    dy = rng.standard_normal(y.shape)
    dx, dW, db = linear_backward(dy, lcache)
    np.testing.assert_allclose(dx, dy @ W.T, rtol=1e-12)
    np.testing.assert_allclose(dW, x.reshape(-1, 4).T @ dy.reshape(-1, 5), rtol=1e-12)


def test_benchmark_flop_formula_matches_the_products_run():
    """benchmarks/bench_train.py counts 2·m·n·k per matrix product from the configuration;
    the products minitransformer really runs in one training step must add up to it."""
    bench = _load_benchmark()
    tiny = dict(d_model=16, h=2, N=2, d_ff=24, vocab=50, batch=3, seq=5)
    before = (backend.backend_name(), backend.default_dtype())
    try:
        step = bench.build_numpy_side(tiny, bench.make_batch(tiny))[1]
        counted = bench.timed_matmul_steps(step, 1)["counted_flops"]
    finally:
        backend.set_backend(before[0])
        backend.set_default_dtype(before[1])
    assert counted == bench.step_flops(tiny)


def _load_benchmark(name="bench_train"):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_shapes_benchmark_records_every_product_of_a_step_and_rebuilds_its_layout():
    """benchmarks/bench_matmul_shapes.py times each product of a step alone: the products it records
    must add up to the step's FLOPs, and the operands it builds must be transposed where the step's were."""
    bench, shapes = _load_benchmark(), _load_benchmark("bench_matmul_shapes")
    tiny = dict(d_model=16, h=2, N=2, d_ff=24, vocab=50, batch=3, seq=5)
    before = (backend.backend_name(), backend.default_dtype())
    try:
        step = bench.build_numpy_side(tiny, bench.make_batch(tiny))[1]
        calls = shapes.record_products(backend, step, 2)
    finally:
        backend.set_backend(before[0])
        backend.set_default_dtype(before[1])
    assert sum(n * shapes.product_flops(a, b) for (a, _, b, _), n in calls.items()) == 2 * bench.step_flops(tiny)
    assert any(a_t for _, a_t, _, _ in calls) and any(b_t for _, _, _, b_t in calls)   # W.T, K.swapaxes
    rng = np.random.default_rng(0)
    for (a_shape, a_t, b_shape, b_t) in calls:
        a, b = shapes.operand(np, a_shape, a_t, rng), shapes.operand(np, b_shape, b_t, rng)
        assert (a.shape, b.shape) == (a_shape, b_shape)
        assert (a.strides[-1] != a.itemsize, b.strides[-1] != b.itemsize) == (a_t, b_t)
    assert shapes.product_flops((8, 8, 64, 32), (8, 8, 32, 16)) == 2 * 64 * 64 * 32 * 16


def test_benchmark_drops_the_profilers_start_stop_lines_and_keeps_the_rest(capfd):
    """bench_train.py's torch split: libkineto's 'profiler_start'/'profiler_stop' lines on fd 2
    are dropped, any other line written there is passed on."""
    import os

    bench = _load_benchmark()
    with bench.without_kineto_noise():
        os.write(2, b"USDT:2026-12-01 21:18:22 5774:5774 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
                    b"a real warning\n"
                    b"STAGE:2026-12-01 21:18:39 5831:5831 SyncActivityProfilerHandler.cpp:60] Completed Stage: Collection\n"
                    b"USDT:2026-12-01 21:18:22 5774:5774 SyncActivityProfilerHandler.cpp:59] profiler_stop\n")
    assert capfd.readouterr().err == "a real warning\n"


@pytest.mark.torch
def test_benchmark_torch_split_prints_nothing(capfd):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -r requirements-dev.txt)")
    bench = _load_benchmark()
    x = torch.ones(8, 8, requires_grad=True)

    def step():
        (x @ x).sum().backward()

    share = bench.torch_matmul_share(step, 2)
    assert share["matmul_s"] >= 0
    err = capfd.readouterr().err
    assert "profiler_st" not in err and "USDT" not in err, err


# -- the plain LayerNorm and loss against their definitions, written out again ----------------

def _layernorm_by_definition(x, gamma, beta, eps, dy):
    """y and (dx, dgamma, dbeta) through the Jacobian of x_hat, one position at a time (float64)."""
    d = x.shape[-1]
    rows, dys = x.reshape(-1, d), dy.reshape(-1, d)
    y, dx = np.empty_like(rows), np.empty_like(rows)
    for i, (r, g_y) in enumerate(zip(rows, dys)):
        mu = r.sum() / d
        var = ((r - mu) ** 2).sum() / d                                 # biased
        rstd = 1 / math.sqrt(var + eps)                                 # eps inside the root
        x_hat = (r - mu) * rstd
        y[i] = gamma * x_hat + beta
        J = rstd * (np.eye(d) - 1 / d - np.outer(x_hat, x_hat) / d)     # d x_hat_j / d x_k
        dx[i] = J.T @ (g_y * gamma)
    x_hat_all = (y - beta) / gamma
    return y.reshape(x.shape), dx.reshape(x.shape), (dys * x_hat_all).sum(0), dys.sum(0)


@pytest.mark.parametrize("shape", [(3, 5, 8), (4,)])
def test_layernorm_matches_its_definition(rng, shape):
    x = rng.standard_normal(shape) * 3 + 1
    d = shape[-1]
    gamma, beta, dy = rng.standard_normal(d) + 2, rng.standard_normal(d), rng.standard_normal(shape)
    want_y, want_dx, want_dgamma, want_dbeta = _layernorm_by_definition(x, gamma, beta, 1e-5, dy)
    y, cache = layernorm_forward(x, gamma, beta, 1e-5)
    dx, dgamma, dbeta = layernorm_backward(dy, cache)
    assert y.shape == shape and cache.x_hat.shape == shape and cache.rstd.shape == shape[:-1] + (1,)
    np.testing.assert_allclose(y, want_y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dgamma, want_dgamma, rtol=1e-10)
    np.testing.assert_allclose(dbeta, want_dbeta, rtol=1e-12)


def _loss_by_definition(logits, targets, pad_id, eps_ls):
    """The loss and its gradient with log p and the smoothed target q as whole (B, T, V) arrays."""
    V = logits.shape[-1]
    z = logits - logits.max(-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
    q = np.full(logits.shape, eps_ls / V) + (1 - eps_ls) * np.eye(V)[targets]
    valid = targets != pad_id
    n = valid.sum()
    loss = float((-(q * log_p).sum(-1) * valid).sum() / n)
    return loss, (np.exp(log_p) - q) * (valid / n)[..., None]


def test_loss_matches_its_definition(rng):
    logits = rng.standard_normal((3, 4, 7)) * 5
    targets = np.array([[1, 2, 0, 0], [3, 6, 5, 0], [4, 4, 4, 1]])
    want_loss, want_d = _loss_by_definition(logits, targets, pad_id=0, eps_ls=0.1)
    loss, cache = cross_entropy_forward(logits, targets, pad_id=0, eps_ls=0.1)
    assert loss == pytest.approx(want_loss, rel=1e-12)
    np.testing.assert_allclose(cross_entropy_backward(cache), want_d, rtol=1e-10, atol=1e-15)
    assert cache.n_tokens == 9 and not cross_entropy_backward(cache)[targets == 0].any()


def test_relu_forward_in_one_pass_same_as_mask(rng):
    from minitransformer.layers.feedforward import FeedForward
    ffn = FeedForward(4, 6, rng)
    x = rng.standard_normal((2, 3, 4)).astype(ffn.linear1.W.data.dtype)   # a layer computes in its own dtype
    pre = x @ ffn.linear1.W.data + ffn.linear1.b.data
    want = (pre * (pre > 0)) @ ffn.linear2.W.data + ffn.linear2.b.data
    np.testing.assert_allclose(ffn.forward(x), want, rtol=1e-5)


def test_attention_all_true_mask_same_as_no_mask(rng):
    from minitransformer.layers.attention import attention_forward
    Q, K, V = (rng.standard_normal((2, 3, 4, 5)) for _ in range(3))
    out_none, c_none = attention_forward(Q, K, V)
    out_true, c_true = attention_forward(Q, K, V, np.ones((2, 1, 1, 4), dtype=bool))
    np.testing.assert_array_equal(out_true, out_none)
    np.testing.assert_array_equal(c_true.A, c_none.A)
