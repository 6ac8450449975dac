"""Property tests (hypothesis) over random sizes and random boolean masks.

Arrays are drawn from a seeded NumPy generator (hypothesis picks the seed and
the sizes; hypothesis.extra.numpy picks the mask patterns, fully masked rows
included), so every failure reproduces from the printed example.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from minitransformer import backend
from minitransformer.gradcheck import check_layer, gradcheck
from minitransformer.layers.attention import MultiHeadAttention, attention_forward
from minitransformer.layers.embedding import Embedding
from minitransformer.layers.layernorm import LayerNorm
from minitransformer.layers.loss import cross_entropy_backward, cross_entropy_forward
from minitransformer.layers.parameter import Layer

PROFILE = settings(max_examples=25, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

seeds = st.integers(0, 2**32 - 1)


@pytest.fixture(autouse=True)
def _float64_params():
    old = backend.default_dtype()
    backend.set_default_dtype("float64")
    yield
    backend.set_default_dtype(old)


@st.composite
def attention_case(draw):
    """Sizes, a mask broadcastable to (B, h, S_q, S_k), and a seed."""
    B = draw(st.integers(1, 3))
    h = draw(st.integers(1, 4))
    d_model = h * draw(st.integers(1, 3))
    S_q = draw(st.integers(1, 6))
    cross = draw(st.booleans())
    S_k = draw(st.integers(1, 6)) if cross else S_q
    # which axes of the mask are broadcast: (B or 1, 1, S_q or 1, S_k)
    mB = draw(st.sampled_from([1, B]))
    mQ = draw(st.sampled_from([1, S_q]))
    mask = draw(st.one_of(
        st.none(),
        hnp.arrays(np.bool_, (mB, 1, mQ, S_k)),
        st.just(np.zeros((mB, 1, mQ, S_k), dtype=bool)),         # every row fully masked
    ))
    return dict(B=B, h=h, d_model=d_model, S_q=S_q, S_k=S_k, cross=cross, mask=mask,
                seed=draw(seeds))


@PROFILE
@given(case=attention_case())
def test_attention_rows_sum_to_one_or_zero(case):
    rng = np.random.default_rng(case["seed"])
    B, h, S_q, S_k = case["B"], case["h"], case["S_q"], case["S_k"]
    d_k = case["d_model"] // h
    Q = rng.standard_normal((B, h, S_q, d_k)) * 3
    K = rng.standard_normal((B, h, S_k, d_k)) * 3
    V = rng.standard_normal((B, h, S_k, d_k))
    mask = case["mask"]
    out, cache = attention_forward(Q, K, V, mask)
    A = cache.A
    assert out.shape == (B, h, S_q, d_k)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(A))
    assert np.all(A >= 0)
    full = np.broadcast_to(mask if mask is not None else np.ones((1, 1, 1, 1), bool), A.shape)
    any_key = full.any(-1)
    np.testing.assert_allclose(A.sum(-1), np.where(any_key, 1.0, 0.0), rtol=1e-12, atol=1e-12)
    assert np.all(A[~full] == 0)                     # masked keys get exactly zero weight
    assert np.all(out[~any_key] == 0)                # fully masked rows output 0


class _MHACall(Layer):
    def __init__(self, mha, mask):
        super().__init__()
        self.mha = mha
        self._mask = mask

    def forward(self, *xs):
        return self.mha.forward(*xs, mask=self._mask)

    def backward(self, dy):
        return self.mha.backward(dy)


@PROFILE
@given(case=attention_case())
def test_mha_gradcheck_random_masks(case):
    rng = np.random.default_rng(case["seed"])
    B, d_model, S_q, S_k = case["B"], case["d_model"], case["S_q"], case["S_k"]
    mha = MultiHeadAttention(d_model, case["h"], rng)
    mha.b_qkv.data[...] = rng.standard_normal(mha.b_qkv.shape) * 0.3
    mha.b_o.data[...] = rng.standard_normal(mha.b_o.shape) * 0.3
    x_q = rng.standard_normal((B, S_q, d_model))
    layer = _MHACall(mha, case["mask"])
    if case["cross"]:
        memory = rng.standard_normal((B, S_k, d_model))
        report = check_layer(layer, x_q, memory, names=["x_q", "x_kv"])
        assert {"x_q", "x_kv"} <= set(report.errors)
    else:
        report = check_layer(layer, x_q)
        assert "x" in report.errors
    assert len(report.errors) >= 5
    report.assert_ok()


@PROFILE
@given(B=st.integers(1, 3), S=st.integers(1, 6), d_model=st.integers(2, 12), seed=seeds,
       scale=st.sampled_from([1e-2, 1.0, 1e3]), shift=st.sampled_from([0.0, 5.0, -100.0]))
def test_layernorm_normalizes(B, S, d_model, seed, scale, shift):
    rng = np.random.default_rng(seed)
    ln = LayerNorm(d_model)                          # gamma = 1, beta = 0
    x = rng.standard_normal((B, S, d_model)) * scale + shift
    y = ln.forward(x)
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-9)
    # biased variance of y is var/(var+eps): ≈ 1 unless the input is tiny
    var = x.var(-1)
    np.testing.assert_allclose((y ** 2).mean(-1), var / (var + ln.eps), rtol=1e-9)
    big = var > 1e-2
    np.testing.assert_allclose(y.var(-1)[big], 1.0, rtol=2e-3)


@PROFILE
@given(B=st.integers(1, 3), S=st.integers(1, 6), d_model=st.integers(3, 8), seed=seeds)
def test_layernorm_gradcheck(B, S, d_model, seed):
    # d_model >= 3: with 2 features x_hat = ±1 whatever x is, so dL/dx is only
    # of size eps/|x1-x2|^3 (~1e-7) and rounding decides the *relative* error.
    rng = np.random.default_rng(seed)
    ln = LayerNorm(d_model)
    ln.gamma.data[...] = rng.standard_normal(d_model)
    ln.beta.data[...] = rng.standard_normal(d_model)
    check_layer(ln, rng.standard_normal((B, S, d_model))).assert_ok()


@PROFILE
@given(B=st.integers(1, 3), T=st.integers(1, 6), V=st.integers(2, 7), seed=seeds,
       eps=st.sampled_from([0.0, 0.1, 0.3]), pad_frac=st.floats(0.0, 0.8))
def test_loss_gradcheck(B, T, V, seed, eps, pad_frac):
    rng = np.random.default_rng(seed)
    pad_id = 0
    targets = rng.integers(1, V, size=(B, T))
    targets[rng.random((B, T)) < pad_frac] = pad_id
    targets.flat[rng.integers(B * T)] = rng.integers(1, V)     # at least one real token
    # unit-scale logits: a saturated softmax has a gradient so small (~1e-6) that
    # float64 rounding in the loss itself (~1e-16 / 2h) dominates the relative error
    logits = rng.standard_normal((B, T, V))
    loss, cache = cross_entropy_forward(logits, targets, pad_id, eps)
    d = cross_entropy_backward(cache)
    assert np.isfinite(loss)
    assert np.all(d[targets == pad_id] == 0)
    np.testing.assert_allclose(d.sum(-1), 0.0, atol=1e-12)
    report = gradcheck(lambda: cross_entropy_forward(logits, targets, pad_id, eps)[0],
                       {"logits": logits}, {"logits": d})
    report.assert_ok()


@PROFILE
@given(B=st.integers(1, 3), S=st.integers(1, 6), V=st.integers(1, 6), d_model=st.integers(1, 5),
       seed=seeds)
def test_embedding_backward_matches_add_at(B, S, V, d_model, seed):
    rng = np.random.default_rng(seed)
    emb = Embedding(V, d_model, rng)
    ids = rng.integers(0, V, size=(B, S))              # small V: repeats are common
    out = emb.forward(ids)
    np.testing.assert_allclose(out, emb.E.data[ids] * np.sqrt(d_model))
    dout = rng.standard_normal(out.shape)
    emb.zero_grad()
    emb.backward(dout)
    dense = np.zeros((V, d_model))
    np.add.at(dense, ids.reshape(-1), dout.reshape(-1, d_model) * np.sqrt(d_model))
    np.testing.assert_allclose(emb.E.grad, dense, rtol=1e-12, atol=1e-12)


def test_attention_works_on_any_number_of_leading_axes():
    """Lesson 8 runs restricted attention as windows, (B, h, n_windows, w, d_k): Eq. (1) only
    needs the last two axes. The 5-D call must equal a loop of 4-D calls, forward and backward."""
    from minitransformer.layers.attention import attention_backward

    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((2, 3, 4, 5, 6)) for _ in range(3))
    mask = rng.random((2, 1, 4, 5, 5)) > 0.3
    out, cache = attention_forward(Q, K, V, mask)
    dout = rng.standard_normal(out.shape)
    grads = attention_backward(dout, cache)
    for w in range(4):
        out_w, cache_w = attention_forward(Q[:, :, w], K[:, :, w], V[:, :, w], mask[:, :, w])
        np.testing.assert_allclose(out[:, :, w], out_w, rtol=0, atol=1e-12)
        for g, g_w in zip(grads, attention_backward(dout[:, :, w].copy(), cache_w)):
            np.testing.assert_allclose(g[:, :, w], g_w, rtol=0, atol=1e-12)
