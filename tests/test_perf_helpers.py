"""The speed helpers give the same numbers as the plain formulas they replace.

backend.matmul (rows folded into one 2-D product), backend.add_matmul (out += a @ b
in row blocks), backend.rowdot (row sums of a ⊙ b), Adam's block-by-block update,
the in-place loss backward, the dropout mask, and the in-place steps inside
LayerNorm, the loss and Linear (which must not touch their inputs).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from minitransformer import backend, optim
from minitransformer.layers.dropout import dropout_mask
from minitransformer.layers.layernorm import layernorm_backward, layernorm_forward
from minitransformer.layers.linear import linear_backward, linear_forward
from minitransformer.layers.loss import cross_entropy_backward, cross_entropy_forward
from minitransformer.layers.parameter import Parameter
from minitransformer.optim import Adam, global_grad_norm


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_folds_rows_and_matches_numpy(rng, dtype):
    a = rng.standard_normal((3, 5, 4)).astype(dtype)
    W = rng.standard_normal((4, 6)).astype(dtype)
    y = backend.matmul(a, W)
    assert y.shape == (3, 5, 6) and y.dtype == dtype
    np.testing.assert_allclose(y, a @ W, rtol=1e-6)
    # transposed views (how the backward passes call it) and a non-contiguous a
    np.testing.assert_allclose(backend.matmul(a, W.T.T), a @ W, rtol=1e-6)
    a_strided = a.transpose(1, 0, 2)                                  # (5, 3, 4), not contiguous
    np.testing.assert_allclose(backend.matmul(a_strided, W), a_strided @ W, rtol=1e-6)


def test_matmul_out_contiguous_and_strided(rng):
    a = rng.standard_normal((2, 3, 4))
    W = rng.standard_normal((4, 5))
    out = np.empty((2, 3, 5))
    assert backend.matmul(a, W, out=out) is out
    np.testing.assert_allclose(out, a @ W, rtol=1e-12)
    strided = np.empty((2, 5, 3)).transpose(0, 2, 1)                 # (2, 3, 5) view, not contiguous
    backend.matmul(a, W, out=strided)
    np.testing.assert_allclose(strided, a @ W, rtol=1e-12)


def test_matmul_4d_attention_products(rng):
    Q = rng.standard_normal((2, 3, 4, 5))
    K = rng.standard_normal((2, 3, 6, 5))
    np.testing.assert_allclose(backend.matmul(Q, K.swapaxes(-1, -2)), Q @ K.swapaxes(-1, -2), rtol=1e-12)


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


def _reference_adam(p, grads, lr, betas=(0.9, 0.98), eps=1e-9):
    """Adam exactly as the textbook (float64), one whole array at a time."""
    p, m, v = p.astype(np.float64), np.zeros_like(p, np.float64), np.zeros_like(p, np.float64)
    for t, g in enumerate(grads, start=1):
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        m_hat, v_hat = m / (1 - betas[0] ** t), v / (1 - betas[1] ** t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p, m, v


@pytest.mark.parametrize("shape", [(10, 7), (3,), (64,)])
def test_adam_blocks_match_the_whole_array_update(rng, monkeypatch, shape):
    monkeypatch.setattr(optim, "ADAM_BLOCK", 16)                     # several blocks and a partial one
    p0 = rng.standard_normal(shape)
    grads = [rng.standard_normal(shape) for _ in range(3)]
    p = Parameter(p0.copy())
    opt = Adam([p], lr=0.01)
    for g in grads:
        p.grad[...] = g
        opt.step()
    want_p, want_m, want_v = _reference_adam(p0, grads, 0.01)
    np.testing.assert_allclose(p.data, want_p, rtol=1e-12)
    np.testing.assert_allclose(opt.m[0], want_m, rtol=1e-12)
    np.testing.assert_allclose(opt.v[0], want_v, rtol=1e-12)
    assert opt.last_grad_norm == pytest.approx(math.sqrt(float((grads[-1] ** 2).sum())), rel=1e-12)


def test_adam_non_contiguous_parameter(rng):
    base = rng.standard_normal((6, 8))
    p = Parameter(base[:, ::2])                                      # a strided view: updated whole
    g = rng.standard_normal((6, 4))
    p.grad[...] = g
    before = p.data.copy()
    Adam([p], lr=0.1).step()
    want, _, _ = _reference_adam(before, [g], 0.1)
    np.testing.assert_allclose(p.data, want, rtol=1e-12)
    np.testing.assert_allclose(base[:, ::2], want, rtol=1e-12)      # written through the view


def test_adam_float32_blocks_and_norm(rng, monkeypatch):
    monkeypatch.setattr(optim, "ADAM_BLOCK", 8)
    params = [Parameter(rng.standard_normal(s).astype(np.float32)) for s in [(5, 5), (3,), (20,)]]
    for p in params:
        p.grad[...] = rng.standard_normal(p.shape)
    opt = Adam(params, lr=1e-3)
    want_norm = global_grad_norm(params)
    opt.step()
    assert opt.last_grad_norm == pytest.approx(want_norm, rel=1e-6)
    assert all(p.data.dtype == np.float32 for p in params)
    assert all(m.dtype == np.float32 for m in opt.m) and all(v.dtype == np.float32 for v in opt.v)


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


@pytest.fixture
def threads():
    """Restore minitransformer's thread count after a test changes it."""
    before = backend.num_threads()
    yield backend.set_num_threads
    backend.set_num_threads(before)


def test_run_in_threads_deals_items_out(threads):
    threads(3)
    parts = backend.run_in_threads(list, list(range(7)))
    assert parts == [[0, 3, 6], [1, 4], [2, 5]]
    assert backend.run_in_threads(sum, [1, 2]) == [1, 2]                 # never more parts than items
    threads(1)
    assert backend.run_in_threads(list, [1, 2, 3]) == [[1, 2, 3]]        # one thread: the caller runs fn
    with pytest.raises(ValueError, match="at least 1 thread"):
        backend.set_num_threads(0)
    assert backend.on_cpu(np.zeros(2))


def test_adam_same_update_on_any_number_of_threads(rng, monkeypatch, threads):
    monkeypatch.setattr(optim, "ADAM_BLOCK", 8)
    shapes = [(6, 5), (7,), (20,)]
    start = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    results = []
    for n in (1, 2, 3):
        threads(n)
        params = [Parameter(a.copy()) for a in start]
        opt = Adam(params, lr=1e-2)
        for _ in range(2):
            for p, g in zip(params, grads):
                p.grad[...] = g
            opt.step()
        results.append([p.data for p in params])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)                           # elementwise: bit for bit


def test_benchmark_flop_formula_matches_the_products_run():
    """benchmarks/bench_train.py counts 2·m·n·k per matrix product from the configuration;
    the products minitransformer really runs in one training step must add up to it."""
    bench = _bench_train()
    tiny = dict(d_model=16, h=2, N=2, d_ff=24, vocab=50, batch=3, seq=5)
    before = (backend.backend_name(), backend.default_dtype())
    try:
        step = bench.build_numpy_side(tiny, bench.make_batch(tiny))[1]
        counted = bench.timed_matmul_steps(step, 1)["counted_flops"]
    finally:
        backend.set_backend(before[0])
        backend.set_default_dtype(before[1])
    assert counted == bench.step_flops(tiny)


def _bench_train():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_train.py"
    spec = importlib.util.spec_from_file_location("bench_train", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_benchmark_drops_the_profilers_start_stop_lines_and_keeps_the_rest(capfd):
    """bench_train.py's torch split: libkineto's 'profiler_start'/'profiler_stop' lines on fd 2
    are dropped, any other line written there is passed on."""
    import os

    bench = _bench_train()
    with bench.without_kineto_noise():
        os.write(2, b"USDT:2026-12-01 21:18:22 5774:5774 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
                    b"a real warning\n"
                    b"STAGE:2026-12-01 21:18:39 5831:5831 SyncActivityProfilerHandler.cpp:60] Completed Stage: Collection\n"
                    b"USDT:2026-12-01 21:18:22 5774:5774 SyncActivityProfilerHandler.cpp:59] profiler_stop\n")
    assert capfd.readouterr().err == "a real warning\n"


@pytest.mark.torch
def test_benchmark_torch_split_prints_nothing(capfd):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -r requirements-dev.txt)")
    bench = _bench_train()
    x = torch.ones(8, 8, requires_grad=True)

    def step():
        (x @ x).sum().backward()

    share = bench.torch_matmul_share(step, 2)
    assert share["matmul_s"] >= 0
    err = capfd.readouterr().err
    assert "profiler_st" not in err and "USDT" not in err, err


# -- blocks of rows, spread over threads -------------------------------------------------

def test_row_blocks_cover_every_row_once():
    for n_rows, row_len, block in [(10, 3, 7), (5, 100, 10), (1, 4, 1 << 16), (64, 8, 64)]:
        blocks = backend.row_blocks(n_rows, row_len, block)
        assert [i for s in blocks for i in range(n_rows)[s]] == list(range(n_rows))
        assert all(s.stop - s.start >= 1 for s in blocks)


def test_for_row_blocks_results_in_block_order(threads):
    for n in (1, 2, 3):
        threads(n)
        assert backend.for_row_blocks(lambda r: (r.start, r.stop), 10, 3, block=7) == [
            (0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]


def test_run_in_threads_waits_for_every_part_and_raises(threads):
    threads(2)
    done = []

    def fn(part):
        done.extend(part)
        if 0 in part:
            raise RuntimeError("part with item 0 failed")
        return len(part)

    with pytest.raises(RuntimeError, match="item 0"):
        backend.run_in_threads(fn, [0, 1, 2, 3])
    assert sorted(done) == [0, 1, 2, 3]                                # the other part ran to the end


def test_in_row_blocks_softmax_same_as_whole(rng, monkeypatch, threads):
    from minitransformer.layers.attention import softmax_lastaxis
    monkeypatch.setattr(backend, "ROW_BLOCK", 12)                       # several blocks of rows
    s = rng.standard_normal((2, 3, 5, 4))
    whole = softmax_lastaxis(s.copy())
    for n in (1, 2, 3):
        threads(n)
        x = s.copy()
        out = backend.in_row_blocks(softmax_lastaxis, x)
        assert out is x                                                 # in place, as softmax_lastaxis
        np.testing.assert_array_equal(out, whole)
    strided = s.copy().transpose(0, 1, 3, 2)                            # not contiguous: done whole
    np.testing.assert_array_equal(backend.in_row_blocks(softmax_lastaxis, strided),
                                  softmax_lastaxis(s.copy().transpose(0, 1, 3, 2)))


@pytest.mark.parametrize("block", [1, 16, 1 << 16])
def test_layernorm_blocks_match_the_plain_formulas(rng, monkeypatch, threads, block):
    from minitransformer.layers.layernorm import layernorm_reference
    monkeypatch.setattr(backend, "ROW_BLOCK", block)                   # one row per block .. one block
    x = rng.standard_normal((3, 5, 8)) * 3 + 1
    gamma, beta, dy = rng.standard_normal(8), rng.standard_normal(8), rng.standard_normal((3, 5, 8))
    want_y, want_dx, want_dgamma, want_dbeta = layernorm_reference(x, gamma, beta, 1e-5, dy)
    results = []
    for n in (1, 2, 3):
        threads(n)
        y, cache = layernorm_forward(x, gamma, beta, 1e-5)
        dx, dgamma, dbeta = layernorm_backward(dy, cache)
        np.testing.assert_allclose(y, want_y, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dx, want_dx, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dgamma, want_dgamma, rtol=1e-12)
        np.testing.assert_allclose(dbeta, want_dbeta, rtol=1e-12)
        results.append((y, dx, dgamma, dbeta))
    for other in results[1:]:                                            # any number of threads: same bits
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)


def test_layernorm_one_vector():
    from minitransformer.layers.layernorm import layernorm_reference
    x = np.array([1.0, 2.0, 4.0, 8.0])
    y, cache = layernorm_forward(x, np.ones(4), np.zeros(4), 1e-5)
    assert y.shape == (4,) and cache.x_hat.shape == (4,) and cache.rstd.shape == (1,)
    np.testing.assert_allclose(y, layernorm_reference(x, np.ones(4), np.zeros(4), 1e-5), rtol=1e-12)


@pytest.mark.parametrize("block", [1, 20, 1 << 18])
def test_loss_blocks_match_the_plain_formulas(rng, monkeypatch, threads, block):
    from minitransformer.layers import loss as loss_module
    monkeypatch.setattr(loss_module, "LOSS_BLOCK", block)
    logits = rng.standard_normal((3, 4, 7)) * 5
    targets = np.array([[1, 2, 0, 0], [3, 6, 5, 0], [4, 4, 4, 1]])
    want_loss, want_d = loss_module.cross_entropy_reference(logits, targets, pad_id=0, eps_ls=0.1)
    results = []
    for n in (1, 2, 3):
        threads(n)
        loss, cache = cross_entropy_forward(logits, targets, pad_id=0, eps_ls=0.1)
        d = cross_entropy_backward(cache)
        assert loss == pytest.approx(want_loss, rel=1e-12)
        np.testing.assert_allclose(d, want_d, rtol=1e-10, atol=1e-15)
        results.append((loss, d))
    for loss, d in results[1:]:
        assert loss == results[0][0]
        np.testing.assert_array_equal(d, results[0][1])


def test_adam_zero_grad_in_blocks(rng, monkeypatch, threads):
    monkeypatch.setattr(optim, "ADAM_BLOCK", 8)
    threads(2)
    params = [Parameter(rng.standard_normal(s)) for s in [(5, 5), (3,), (20,)]]
    strided = Parameter(rng.standard_normal((6, 8))[:, ::2])
    strided.grad = rng.standard_normal((6, 8))[:, ::2]                   # a non-contiguous gradient
    params.append(strided)
    for p in params[:3]:
        p.grad[...] = 1.0
    opt = Adam(params, lr=1e-3)
    opt.zero_grad()
    assert all(not p.grad.any() for p in params)


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


def test_rowsum(rng):
    a = rng.standard_normal((2, 3, 5))
    np.testing.assert_allclose(backend.rowsum(a), a.sum(axis=-1, keepdims=True), rtol=1e-12)
    assert backend.rowsum(a.astype(np.float32)).dtype == np.float32
    np.testing.assert_allclose(backend.rowsum(a[:, :, ::2]), a[:, :, ::2].sum(-1, keepdims=True), rtol=1e-12)
