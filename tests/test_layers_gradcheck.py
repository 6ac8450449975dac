"""Float64 gradient checks for every component: analytic backward vs central differences.

Every check asks for a relative error ≤ 1e-6 (gradcheck.DEFAULT_TOL) on every
float input and every parameter. Sizes are tiny on purpose: a numerical
gradient costs two forwards per entry.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from minitransformer.errors import ShapeError
from minitransformer.gradcheck import DEFAULT_TOL, check_layer, gradcheck
from minitransformer.layers.attention import (
    MultiHeadAttention,
    attention_backward,
    attention_forward,
)
from minitransformer.layers.dropout import Dropout
from minitransformer.layers.embedding import Embedding, TiedOutputProjection
from minitransformer.layers.feedforward import FeedForward
from minitransformer.layers.layernorm import LayerNorm
from minitransformer.layers.linear import Linear
from minitransformer.layers.loss import (
    LabelSmoothedCrossEntropy,
    cross_entropy_backward,
    cross_entropy_forward,
)
from minitransformer.layers.parameter import Layer, Parameter
from minitransformer.layers.positional import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
    sinusoidal_table,
)
from minitransformer.layers.residual import Residual
from minitransformer.model import Transformer, TransformerConfig

assert DEFAULT_TOL == 1e-6


def _ok(report):
    """Assert the report passes, and that it actually checked something."""
    assert report.errors, "gradient check compared no tensors"
    report.assert_ok()
    assert report.max_error <= 1e-6


def _randomize(*params, rng, scale=0.5):
    """Give zero-initialised biases (and unit gains) random values, so a bug in
    their gradient cannot hide behind a zero."""
    for p in params:
        p.data[...] = rng.standard_normal(p.data.shape) * scale


# ---------------------------------------------------------------------------
# Linear
# ---------------------------------------------------------------------------

def test_linear(f64, rng):
    lin = Linear(4, 3, rng)
    _randomize(lin.b, rng=rng)
    x = rng.standard_normal((2, 5, 4))
    report = check_layer(lin, x)
    assert set(report.errors) == {"x", "W", "b"}
    _ok(report)


def test_linear_without_a_bias_has_none(f64, rng):
    """Linear(bias=False) builds y = x W: no b parameter at all (none to train, save or count)."""
    lin = Linear(4, 3, rng, name="proj", bias=False)
    assert lin.b is None and [name for name, _ in lin.named_parameters()] == ["W"] and lin.num_parameters() == 12
    x = rng.standard_normal((2, 5, 4))
    np.testing.assert_allclose(lin.forward(x), x @ lin.W.data, rtol=1e-12)
    report = check_layer(lin, x)
    assert set(report.errors) == {"x", "W"}
    _ok(report)


def test_linear_2d_input(f64, rng):
    lin = Linear(3, 2, rng)
    _randomize(lin.b, rng=rng)
    _ok(check_layer(lin, rng.standard_normal((4, 3))))


# ---------------------------------------------------------------------------
# Embedding and tying (§3.4)
# ---------------------------------------------------------------------------

def test_embedding_repeated_ids(f64, rng):
    emb = Embedding(6, 4, rng)
    ids = np.array([[1, 3, 1, 1], [5, 3, 0, 1]])      # 1 appears four times, 3 twice
    report = check_layer(emb, ids)
    assert set(report.errors) == {"E"}                 # no gradient for integer ids
    _ok(report)
    # backward returns nothing for the ids
    emb.forward(ids)
    assert emb.backward(np.ones((2, 4, 4))) is None
    # an unused row (2, 4) gets exactly zero gradient; a used row does not
    assert np.all(emb.E.grad[[2, 4]] == 0)
    assert np.all(emb.E.grad[[0, 1, 3, 5]] != 0)


def test_embedding_gradient_sums_repeats_exactly(f64, rng):
    emb = Embedding(4, 3, rng)
    ids = np.array([[2, 2, 2]])
    emb.forward(ids)
    emb.zero_grad()
    dout = rng.standard_normal((1, 3, 3))
    emb.backward(dout)
    np.testing.assert_allclose(emb.E.grad[2], dout[0].sum(axis=0) * math.sqrt(3), rtol=1e-12)


class _TiedChain(Layer):
    """ids -> Embedding(E) -> Linear -> TiedOutputProjection(E) -> logits: one scalar, E used twice."""

    def __init__(self, V, d, rng):
        super().__init__()
        self.emb = Embedding(V, d, rng)
        self.mid = Linear(d, d, rng, "mid")
        self.proj = TiedOutputProjection(self.emb.E)

    def forward(self, ids):
        return self.proj.forward(self.mid.forward(self.emb.forward(ids)))

    def backward(self, dlogits):
        self.emb.backward(self.mid.backward(self.proj.backward(dlogits)))
        return None


def test_tied_embedding_and_projection(f64, rng):
    V, d = 5, 4
    net = _TiedChain(V, d, rng)
    _randomize(net.mid.b, rng=rng)
    assert net.proj.E is net.emb.E
    names = [n for n, _ in net.named_parameters()]
    assert names.count("emb.E") == 1 and not any(n.startswith("proj.") for n in names)

    ids = np.array([[0, 2, 2], [4, 1, 2]])
    report = check_layer(net, ids)
    assert "emb.E" in report.errors
    _ok(report)

    # The shared gradient is the sum of both uses, and each use contributes.
    G = rng.standard_normal((2, 3, V))
    net.zero_grad()
    net.forward(ids)
    net.backward(G)
    total = net.emb.E.grad.copy()

    net.zero_grad()
    net.forward(ids)
    net.proj.backward(G)                       # projection use only
    from_proj = net.emb.E.grad.copy()
    net.zero_grad()
    net.mid.forward(net.emb.forward(ids))
    net.emb.backward(net.mid.backward(G @ net.emb.E.data))   # embedding use only (same upstream)
    from_emb = net.emb.E.grad.copy()

    assert np.abs(from_proj).max() > 1e-3 and np.abs(from_emb).max() > 1e-3
    np.testing.assert_allclose(total, from_proj + from_emb, rtol=1e-12, atol=1e-14)
    assert not np.allclose(total, from_proj) and not np.allclose(total, from_emb)


def test_tied_projection_alone(f64, rng):
    E = Embedding(5, 4, rng).E
    proj = TiedOutputProjection(E)
    _ok(check_layer(proj, rng.standard_normal((2, 3, 4))))


# ---------------------------------------------------------------------------
# Positional encoding (§3.5)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("d_model", [4, 5])
def test_positional_encoding_identity_backward(f64, rng, d_model):
    pe = PositionalEncoding(d_model, max_len=10)
    x = rng.standard_normal((2, 6, d_model))
    report = check_layer(pe, x)
    _ok(report)
    pe.forward(x)
    G = rng.standard_normal(x.shape)
    np.testing.assert_array_equal(pe.backward(G), G)


@pytest.mark.parametrize("d_model", [6, 7])
def test_positional_table_matches_formula(d_model):
    table = sinusoidal_table(50, d_model, dtype=np.float64)
    assert table.shape == (50, d_model)
    for pos in (0, 1, 7, 49):
        for j in range(d_model):
            i = j // 2                                   # dimension pair index
            angle = pos / 10000 ** (2 * i / d_model)
            want = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert table[pos, j] == pytest.approx(want, abs=1e-12), (pos, j)


def test_positional_forward_adds_table(f64, rng):
    pe = PositionalEncoding(5, max_len=8)
    x = rng.standard_normal((2, 4, 5))
    np.testing.assert_allclose(pe.forward(x) - x, np.broadcast_to(pe.table[:4], x.shape), atol=1e-15)
    np.testing.assert_allclose(pe.forward(x, offset=3) - x, np.broadcast_to(pe.table[3:7], x.shape), atol=1e-15)


# ---------------------------------------------------------------------------
# Learned positional embedding (Table 3, row E)
# ---------------------------------------------------------------------------

def test_learned_positional_gradient(f64, rng):
    lpe = LearnedPositionalEmbedding(5, max_len=9, rng=rng)
    x = rng.standard_normal((3, 6, 5))
    report = check_layer(lpe, x)
    _ok(report)
    assert set(report.errors) == {"x", "P"}, report.errors          # the input and the table


@pytest.mark.parametrize("offset", [0, 3])
def test_learned_positional_gradient_with_offset(f64, rng, offset):
    """P's gradient lands in rows offset .. offset+S-1 only; the others stay 0."""
    lpe = LearnedPositionalEmbedding(4, max_len=8, rng=rng)
    x = rng.standard_normal((2, 3, 4))
    G = rng.standard_normal(x.shape)

    def f():
        return float((lpe.forward(x, offset=offset) * G).sum())

    lpe.zero_grad()
    lpe.forward(x, offset=offset)
    dx = lpe.backward(G)
    report = gradcheck(f, {"x": x, "P": lpe.P.data}, {"x": dx, "P": lpe.P.grad.copy()})
    _ok(report)
    np.testing.assert_array_equal(dx, G)                                  # the identity for x
    np.testing.assert_allclose(lpe.P.grad[offset: offset + 3], G.sum(axis=0), atol=1e-14)
    untouched = np.ones(8, bool)
    untouched[offset: offset + 3] = False
    assert not lpe.P.grad[untouched].any(), "rows outside the positions used must get no gradient"


def test_learned_positional_shared_table_sums_gradients(f64, rng):
    """Two layers sharing one P (the model's source and target sides) add into P.grad."""
    P = Parameter(rng.standard_normal((7, 3)), "P")
    src, tgt = (LearnedPositionalEmbedding(3, 7, weight=P, name=n) for n in ("src", "tgt"))
    x, y = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 4, 3))
    Gx, Gy = rng.standard_normal(x.shape), rng.standard_normal(y.shape)

    def f():
        return float((src.forward(x) * Gx).sum() + (tgt.forward(y, offset=1) * Gy).sum())

    P.zero_grad()
    f()
    src.backward(Gx)
    tgt.backward(Gy)
    report = gradcheck(f, {"P": P.data}, {"P": P.grad.copy()})
    _ok(report)
    want = np.zeros((7, 3))
    want[0:5] += Gx.sum(axis=0)
    want[1:5] += Gy.sum(axis=0)
    np.testing.assert_allclose(P.grad, want, atol=1e-14)


def test_learned_positional_forward_adds_rows(f64, rng):
    lpe = LearnedPositionalEmbedding(5, max_len=8, rng=rng)
    x = rng.standard_normal((2, 4, 5))
    np.testing.assert_allclose(lpe.forward(x) - x, np.broadcast_to(lpe.P.data[:4], x.shape), atol=1e-15)
    np.testing.assert_allclose(lpe.forward(x, offset=4) - x, np.broadcast_to(lpe.P.data[4:8], x.shape),
                               atol=1e-15)


def test_learned_positional_cannot_go_past_its_table(f64, rng):
    lpe = LearnedPositionalEmbedding(4, max_len=6, rng=rng)
    with pytest.raises(ShapeError, match="max_len=6.*cannot extrapolate"):
        lpe.forward(rng.standard_normal((1, 7, 4)))
    with pytest.raises(ShapeError, match="positions 5..6"):
        lpe.forward(rng.standard_normal((1, 2, 4)), offset=5)
    with pytest.raises(ShapeError, match="d_model=4"):
        lpe.forward(rng.standard_normal((1, 2, 3)))
    with pytest.raises(ValueError, match="shape \\(max_len, d_model\\)"):
        LearnedPositionalEmbedding(4, 6, weight=Parameter(np.zeros((5, 4))))


@pytest.mark.parametrize("positional, activation", [("sinusoidal", "relu"), ("learned", "relu"),
                                                    ("sinusoidal", "swiglu")])
def test_whole_model_gradient(f64, positional, activation):
    """Every parameter of a tiny model (padding, dropout, label smoothing on), against
    central differences; with the learned table, P collects the source and target sides."""
    rng = np.random.default_rng(7)
    cfg = TransformerConfig(vocab_size=7, d_model=4, h=2, N=1, d_ff=6, P_drop=0.2, eps_ls=0.1, max_len=6,
                            positional=positional, activation=activation)
    model = Transformer(cfg, seed=3)
    for layer in model.modules():                       # LayerNorm gains/biases away from 1 / 0
        if isinstance(layer, LayerNorm):
            _randomize(layer.gamma, layer.beta, rng=rng)
    src = np.array([[3, 4, 5, 2], [6, 3, 2, 0]])
    tgt_in = np.array([[1, 5, 4], [1, 6, 0]])
    tgt_out = np.array([[5, 4, 2], [6, 2, 0]])
    loss_fn = LabelSmoothedCrossEntropy(0, cfg.eps_ls)

    def f():
        model.reseed_dropout(11)                         # the same masks at every call
        return loss_fn.forward(model.forward(src, tgt_in), tgt_out)

    model.zero_grad()
    f()
    model.backward(loss_fn.backward())
    params = dict(model.named_parameters())
    assert ("P" in params) == (positional == "learned")
    report = gradcheck(f, {n: p.data for n, p in params.items()}, {n: p.grad.copy() for n, p in params.items()})
    _ok(report)
    if positional == "learned":
        # Position 3 is used by the source only, positions 4-5 by nobody.
        assert model.P.grad[3].any() and not model.P.grad[4:].any()


# ---------------------------------------------------------------------------
# Scaled dot-product attention, pure functions (§3.2.1, Eq. 1)
# ---------------------------------------------------------------------------

B, H, SQ, SK, DK = 2, 2, 3, 4, 3


def _pad_mask(lengths, S_k):
    return (np.arange(S_k)[None, :] < np.asarray(lengths)[:, None])[:, None, None, :]   # (B,1,1,S_k)


def _causal(S):
    return np.tril(np.ones((S, S), dtype=bool))[None, None]                             # (1,1,S,S)


def _masks():
    pad = _pad_mask([4, 2], SK)
    causal_sq = np.tril(np.ones((SQ, SK), dtype=bool), k=SK - SQ)[None, None]          # (1,1,SQ,SK)
    return {
        "none": None,
        "padding": pad,
        "causal": causal_sq,
        "causal+padding": pad & causal_sq,
    }


def _check_attention(Q, K, V, mask, rng):
    out, cache = attention_forward(Q, K, V, mask)
    G = rng.standard_normal(out.shape)
    dQ, dK, dV = attention_backward(G, cache)

    def f():
        return (attention_forward(Q, K, V, mask)[0] * G).sum()

    report = gradcheck(f, {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV})
    _ok(report)
    return out, cache, dQ, dK, dV


@pytest.mark.parametrize("kind", list(_masks()))
def test_attention_functions(kind, rng):
    mask = _masks()[kind]
    Q = rng.standard_normal((B, H, SQ, DK))
    K = rng.standard_normal((B, H, SK, DK))
    V = rng.standard_normal((B, H, SK, DK))
    out, cache, *_ = _check_attention(Q, K, V, mask, rng)
    A = cache.A
    np.testing.assert_allclose(A.sum(-1), 1.0, rtol=1e-12)
    if mask is not None:
        assert np.all(A[~np.broadcast_to(mask, A.shape)] == 0)
    # Eq. 1 written out independently
    S = Q @ np.swapaxes(K, -1, -2) / math.sqrt(DK)
    if mask is not None:
        S = np.where(mask, S, -np.inf)
    W = np.exp(S - S.max(-1, keepdims=True))
    W /= W.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, W @ V, rtol=1e-12, atol=1e-14)


def test_attention_fully_masked_row(rng):
    Q = rng.standard_normal((B, H, SQ, DK))
    K = rng.standard_normal((B, H, SK, DK))
    V = rng.standard_normal((B, H, SK, DK))
    mask = np.ones((B, 1, SQ, SK), dtype=bool)
    mask[1, 0, 2, :] = False           # batch 1, query 2 may attend to nothing
    mask[0, 0, 0, 1:] = False          # a partial row too
    with np.errstate(over="raise", invalid="raise", divide="raise"):   # no inf - inf, no 0/0
        out, cache, dQ, dK, dV = _check_attention(Q, K, V, mask, rng)
    for arr in (out, cache.A, dQ, dK, dV):
        assert np.all(np.isfinite(arr))
    assert np.all(out[1, :, 2] == 0)
    assert np.all(cache.A[1, :, 2] == 0)
    assert np.all(dQ[1, :, 2] == 0)
    np.testing.assert_allclose(cache.A[0, :, 0, 0], 1.0)
    # the other rows still sum to 1
    rows = cache.A.sum(-1)
    rows_expected = np.ones_like(rows)
    rows_expected[1, :, 2] = 0
    np.testing.assert_allclose(rows, rows_expected, rtol=1e-12)


def test_attention_everything_masked(rng):
    Q = rng.standard_normal((1, 1, 2, 2))
    mask = np.zeros((1, 1, 2, 2), dtype=bool)
    out, cache = attention_forward(Q, Q.copy(), Q.copy(), mask)
    dQ, dK, dV = attention_backward(np.ones_like(out), cache)
    for arr in (out, dQ, dK, dV):
        assert np.all(arr == 0)


# ---------------------------------------------------------------------------
# Multi-head attention (§3.2.2, the three uses of §3.2.3)
# ---------------------------------------------------------------------------

class _Call(Layer):
    """Wrap a layer so check_layer can pass fixed keyword arguments (a mask)."""

    def __init__(self, layer, **kwargs):
        super().__init__()
        self.inner = layer
        self._kwargs = kwargs

    def forward(self, *inputs):
        return self.inner.forward(*inputs, **self._kwargs)

    def backward(self, dy):
        return self.inner.backward(dy)


def _mha(rng, d_model=6, h=2):
    mha = MultiHeadAttention(d_model, h, rng)
    _randomize(mha.b_qkv, mha.b_o, rng=rng)
    return mha


def test_mha_encoder_self_attention(f64, rng):
    mha = _mha(rng)
    x = rng.standard_normal((2, 4, 6))
    mask = _pad_mask([4, 2], 4)
    report = check_layer(_Call(mha, mask=mask), x)
    assert set(report.errors) == {"x", "inner.W_qkv", "inner.b_qkv", "inner.W_o", "inner.b_o"}
    _ok(report)


def test_mha_masked_decoder_self_attention(f64, rng):
    mha = _mha(rng, d_model=6, h=3)
    x = rng.standard_normal((2, 4, 6))
    mask = _pad_mask([3, 4], 4) & _causal(4)          # (B, 1, S, S)
    _ok(check_layer(_Call(mha, mask=mask), x))
    # causality: the output at position t does not depend on inputs after t
    y = mha.forward(x, mask=mask)
    x2 = x.copy()
    x2[:, 2:] += 10.0
    np.testing.assert_allclose(mha.forward(x2, mask=mask)[:, :2], y[:, :2], rtol=1e-12)


def test_mha_encoder_decoder_attention(f64, rng):
    mha = _mha(rng, d_model=4, h=2)
    x_q = rng.standard_normal((2, 3, 4))
    memory = rng.standard_normal((2, 5, 4))
    mask = _pad_mask([5, 3], 5)
    layer = _Call(mha, mask=mask)
    out = layer.forward(x_q, memory)
    grads = mha.backward(np.ones_like(out))
    assert isinstance(grads, tuple) and len(grads) == 2
    assert grads[0].shape == x_q.shape and grads[1].shape == memory.shape
    # padded memory positions get no gradient
    assert np.all(grads[1][1, 3:] == 0)
    report = check_layer(layer, x_q, memory, names=["x_q", "x_kv"])
    assert {"x_q", "x_kv"} <= set(report.errors)
    _ok(report)


def test_mha_no_mask(f64, rng):
    mha = _mha(rng, d_model=4, h=1)
    _ok(check_layer(mha, rng.standard_normal((1, 3, 4))))


# ---------------------------------------------------------------------------
# Feed-forward (§3.3, Eq. 2), LayerNorm, residual (§3.1)
# ---------------------------------------------------------------------------

def test_feedforward(f64, rng):
    ffn = FeedForward(4, 8, rng)
    _randomize(ffn.linear1.b, ffn.linear2.b, rng=rng, scale=0.3)
    x = rng.standard_normal((2, 3, 4))
    report = check_layer(ffn, x)
    assert set(report.errors) == {"x", "linear1.W", "linear1.b", "linear2.W", "linear2.b"}
    _ok(report)
    # the ReLU really blocked something (otherwise the test would not exercise it)
    hidden = x @ ffn.linear1.W.data + ffn.linear1.b.data
    assert (hidden < 0).any() and (hidden > 0).any()


def test_feedforward_gelu(f64, rng):
    ffn = FeedForward(4, 8, rng, activation="gelu")
    _randomize(ffn.linear1.b, ffn.linear2.b, rng=rng, scale=0.3)
    x = rng.standard_normal((2, 3, 4)) * 2                      # z over both sides of 0, into the curve
    report = check_layer(ffn, x)
    assert set(report.errors) == {"x", "linear1.W", "linear1.b", "linear2.W", "linear2.b"}
    _ok(report)
    # the forward is the tanh form of GELU, 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))) ...
    z = x @ ffn.linear1.W.data + ffn.linear1.b.data
    u = 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
    np.testing.assert_allclose(ffn.forward(x), u @ ffn.linear2.W.data + ffn.linear2.b.data, rtol=1e-12)
    # ... which is within 1e-3 of the exact z·Φ(z) (Φ from math.erf), and is not ReLU
    exact = np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))(z)
    assert np.abs(u - exact).max() < 1e-3 and not np.allclose(u, np.maximum(z, 0), atol=1e-3)


def test_feedforward_swiglu(f64, rng):
    """Shazeer (2020), Eq. 6: (Swish(x W) ⊙ x V) W_2, no biases; W_1 = [W | V]."""
    ffn = FeedForward(4, 6, rng, activation="swiglu")
    assert ffn.linear1.W.shape == (4, 12) and ffn.linear2.W.shape == (6, 4)
    assert ffn.linear1.b is None and ffn.linear2.b is None           # Linear(bias=False): no bias at all
    x = rng.standard_normal((2, 3, 4)) * 2                            # the gate over both sides of 0
    report = check_layer(ffn, x)
    assert set(report.errors) == {"x", "linear1.W", "linear2.W"}
    _ok(report)
    W, V = ffn.linear1.W.data[:, :6], ffn.linear1.W.data[:, 6:]
    a, b = x @ W, x @ V
    swish = a / (1 + np.exp(-a))                                      # a · σ(a), σ written the usual way
    np.testing.assert_allclose(ffn.forward(x), (swish * b) @ ffn.linear2.W.data, rtol=1e-12)
    assert (a < -1).any() and (a > 1).any()


def test_swiglu_is_stable_far_from_zero(rng):
    from minitransformer.layers.feedforward import swiglu, swiglu_backward

    z = np.array([[-1000.0, 0.0, 1000.0, 2.0, 3.0, 4.0]])             # a = (-1000, 0, 1000), b = (2, 3, 4)
    with np.errstate(all="raise"):                                    # no overflow warning from exp
        u, cache = swiglu(z)
        dz = swiglu_backward(np.ones((1, 3)), cache)
    np.testing.assert_allclose(u, [[0.0, 0.0, 4000.0]])
    np.testing.assert_allclose(dz, [[0.0, 1.5, 4.0, 0.0, 0.0, 1000.0]])


@pytest.mark.parametrize("activation", ["relu", "gelu", "swiglu"])
def test_feedforward_activation_in_float32_and_from_the_config(activation, rng):
    """The activation keeps float32 float32, reaches every FFN of the model from the config, and
    count_parameters agrees with the model built (an elementwise one adds no parameters)."""
    from minitransformer.model import count_parameters
    ffn = FeedForward(4, 8, rng, activation=activation)
    for p in ffn.parameters():
        p.data = p.data.astype(np.float32)
        p.grad = p.grad.astype(np.float32)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    y = ffn.forward(x)
    assert y.dtype == np.float32 and ffn.backward(np.ones_like(y)).dtype == np.float32
    cfg = TransformerConfig(vocab_size=9, d_model=8, h=2, N=1, d_ff=12, activation=activation)
    model = Transformer(cfg)
    assert {layer.ffn.activation for layer in model.encoder.layers + model.decoder.layers} == {activation}
    assert model.num_parameters() == count_parameters(cfg)
    if activation != "swiglu":
        assert count_parameters(cfg) == count_parameters(cfg.with_(activation="relu"))
    else:                                             # 3·d·d_ff per FFN, no biases, against 2·d·d_ff + d_ff + d
        ffns = 2 * cfg.N
        assert count_parameters(cfg) - count_parameters(cfg.with_(activation="relu")) == \
            ffns * (3 * 8 * 12 - (2 * 8 * 12 + 12 + 8))


def test_feedforward_refuses_an_unknown_activation(rng):
    with pytest.raises(ValueError, match=r"activation must be one of 'relu', 'gelu', 'swiglu', got 'swish'"):
        FeedForward(4, 8, rng, activation="swish")
    with pytest.raises(ValueError, match=r"TransformerConfig: activation must be one of 'relu', 'gelu', 'swiglu', "
                                         r"got 'tanh'"):
        TransformerConfig(activation="tanh")


def test_layernorm_gradient(f64, rng):
    ln = LayerNorm(5)
    _randomize(ln.gamma, ln.beta, rng=rng, scale=1.0)
    x = rng.standard_normal((2, 3, 5)) * 2 + 1
    report = check_layer(ln, x)
    assert set(report.errors) == {"x", "gamma", "beta"}
    _ok(report)


def test_layernorm_values_biased_variance_eps_inside_sqrt(f64, rng):
    d, eps = 4, 0.5          # a large eps so "inside vs outside the sqrt" is visible
    ln = LayerNorm(d, eps=eps)
    _randomize(ln.gamma, ln.beta, rng=rng, scale=1.0)
    x = rng.standard_normal((3, d))
    y = ln.forward(x)
    ref = np.empty_like(x)
    for r in range(x.shape[0]):
        row = [float(v) for v in x[r]]
        mu = sum(row) / d
        var = sum((v - mu) ** 2 for v in row) / d            # biased: divide by d
        for j in range(d):
            ref[r, j] = ln.gamma.data[j] * (row[j] - mu) / math.sqrt(var + eps) + ln.beta.data[j]
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    # and it is distinguishable from the wrong variants
    xc = x - x.mean(-1, keepdims=True)
    unbiased = ln.gamma.data * xc / np.sqrt(xc.var(-1, ddof=1, keepdims=True) + eps) + ln.beta.data
    eps_outside = ln.gamma.data * xc / (np.sqrt(xc.var(-1, keepdims=True)) + eps) + ln.beta.data
    assert not np.allclose(y, unbiased) and not np.allclose(y, eps_outside)


class _ResidualFFN(Layer):
    """Residual(FeedForward) as one Layer: forward calls res.forward(x, ffn.forward)."""

    def __init__(self, res, ffn):
        super().__init__()
        self.res, self.ffn = res, ffn

    def forward(self, x):
        return self.res.forward(x, self.ffn.forward)

    def backward(self, dy):
        return self.res.backward(dy, self.ffn.backward)


@pytest.mark.parametrize("pre_ln", [False, True], ids=["post_ln", "pre_ln"])
def test_residual_around_ffn(f64, rng, pre_ln):
    d = 4
    ffn = FeedForward(d, 6, rng)
    res = Residual(d, P_drop=0.0, pre_ln=pre_ln)
    _randomize(ffn.linear1.b, ffn.linear2.b, rng=rng, scale=0.3)
    _randomize(res.norm.gamma, res.norm.beta, rng=rng, scale=1.0)
    layer = _ResidualFFN(res, ffn)
    names = {n for n, _ in layer.named_parameters()}
    assert names == {"res.norm.gamma", "res.norm.beta", "ffn.linear1.W", "ffn.linear1.b",
                     "ffn.linear2.W", "ffn.linear2.b"}
    x = rng.standard_normal((2, 3, d))
    _ok(check_layer(layer, x))
    # the formula of each variant
    y = layer.forward(x)
    ln = LayerNorm(d)
    ln.gamma.data[...], ln.beta.data[...] = res.norm.gamma.data, res.norm.beta.data
    want = x + ffn.forward(ln.forward(x)) if pre_ln else ln.forward(x + ffn.forward(x))
    np.testing.assert_allclose(y, want, rtol=1e-12)


def test_residual_with_dropout_fixed_seed(f64, rng):
    d = 4
    ffn = FeedForward(d, 6, rng)
    res = Residual(d, P_drop=0.3, rng=np.random.default_rng(0))
    layer = _ResidualFFN(res, ffn)

    def reseed():
        res.dropout.rng = np.random.default_rng(7)

    _ok(check_layer(layer, rng.standard_normal((2, 3, d)), before_forward=reseed))


# ---------------------------------------------------------------------------
# Dropout (§5.4)
# ---------------------------------------------------------------------------

def test_dropout_fixed_mask_gradient(f64, rng):
    x = rng.standard_normal((2, 3, 4))
    drop = Dropout(0.5)
    mask = (rng.random(x.shape) >= 0.5) / 0.5
    report = check_layer(_Call(drop, mask=mask), x)
    _ok(report)
    np.testing.assert_array_equal(drop.forward(x, mask=mask), x * mask)


def test_dropout_reseeded_rng_gradient(f64, rng):
    drop = Dropout(0.4, rng=np.random.default_rng(0))

    def reseed():
        drop.rng = np.random.default_rng(3)

    x = rng.standard_normal((3, 5))
    _ok(check_layer(drop, x, before_forward=reseed))
    reseed()
    y = drop.forward(x)
    g = drop.backward(np.ones_like(x))
    # backward drops exactly the units forward dropped, with the same scale
    np.testing.assert_array_equal(g == 0, y == 0)
    np.testing.assert_allclose(g[g != 0], 1 / 0.6)


def test_dropout_eval_and_zero_rate_are_identity(rng):
    x = rng.standard_normal((4, 5))
    drop = Dropout(0.5, rng=np.random.default_rng(0)).eval()
    assert drop.forward(x) is x
    np.testing.assert_array_equal(drop.backward(x * 2), x * 2)
    drop0 = Dropout(0.0, rng=np.random.default_rng(0))
    assert drop0.training
    np.testing.assert_array_equal(drop0.forward(x), x)
    np.testing.assert_array_equal(drop0.backward(x), x)
    # train mode with P_drop > 0 is *not* the identity
    drop.train()
    assert not np.array_equal(drop.forward(x), x)


def test_dropout_seeds():
    x = np.ones((50, 40))
    a = Dropout(0.3, rng=np.random.default_rng(11)).forward(x)
    b = Dropout(0.3, rng=np.random.default_rng(11)).forward(x)
    np.testing.assert_array_equal(a, b)                      # same seed, same mask
    shared = np.random.default_rng(11)
    d1, d2 = Dropout(0.3, rng=shared), Dropout(0.3, rng=shared)
    m1, m2 = d1.forward(x), d2.forward(x)
    assert not np.array_equal(m1, m2)                        # shared rng, independent masks
    np.testing.assert_array_equal(m1, a)                     # the first draw is the seed's first mask


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_keep_fraction_and_scale(p):
    x = np.ones((200, 100))
    y = Dropout(p, rng=np.random.default_rng(5)).forward(x)
    kept = y != 0
    assert abs(kept.mean() - (1 - p)) < 0.01                 # 20000 draws: sd ≈ 0.0035
    np.testing.assert_allclose(y[kept], 1 / (1 - p))
    assert abs(y.mean() - 1.0) < 0.03                        # inverted dropout keeps the mean


# ---------------------------------------------------------------------------
# Label-smoothed cross-entropy (§5.4)
# ---------------------------------------------------------------------------

PAD = 0


def _reference_loss(logits, targets, pad_id, eps):
    """Straightforward: build q explicitly, cross-entropy with log-softmax, mean over non-pad."""
    V = logits.shape[-1]
    m = logits.max(-1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
    q = np.full(logits.shape, eps / V)
    onehot = np.eye(V)[targets]
    q += (1 - eps) * onehot
    per_token = -(q * logp).sum(-1)
    valid = targets != pad_id
    return per_token[valid].sum() / valid.sum(), q


def _targets():
    return np.array([[3, 1, 4, 0, 0], [2, 2, 5, 1, 0]])   # pad (0) at the ends


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_gradient_and_value(eps, rng):
    targets = _targets()
    logits = rng.standard_normal((2, 5, 6)) * 2
    loss, cache = cross_entropy_forward(logits, targets, PAD, eps)
    dlogits = cross_entropy_backward(cache)

    def f():
        return cross_entropy_forward(logits, targets, PAD, eps)[0]

    _ok(gradcheck(f, {"logits": logits}, {"logits": dlogits}))

    ref, q = _reference_loss(logits, targets, PAD, eps)
    assert loss == pytest.approx(ref, rel=1e-12)
    # gradient is (p - q) / n_tokens at valid positions, exactly 0 at pads
    valid = targets != PAD
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(dlogits[valid], (p - q)[valid] / valid.sum(), rtol=1e-10, atol=1e-15)
    assert np.all(dlogits[~valid] == 0)


def test_loss_class_matches_functions(rng):
    targets = _targets()
    logits = rng.standard_normal((2, 5, 6))
    lossf = LabelSmoothedCrossEntropy(pad_id=PAD, eps_ls=0.1)
    value = lossf.forward(logits, targets)
    assert isinstance(value, float)
    assert value == pytest.approx(_reference_loss(logits, targets, PAD, 0.1)[0], rel=1e-12)
    d = lossf.backward()
    assert d.shape == logits.shape


def test_loss_pads_do_not_count(rng):
    targets = _targets()
    logits = rng.standard_normal((2, 5, 6))
    base, _ = cross_entropy_forward(logits, targets, PAD, 0.1)
    # changing logits at pad positions does not change the loss
    changed = logits.copy()
    changed[targets == PAD] = rng.standard_normal(((targets == PAD).sum(), 6)) * 50
    assert cross_entropy_forward(changed, targets, PAD, 0.1)[0] == pytest.approx(base, rel=1e-12)
    # appending an all-pad sequence does not change the mean
    more_t = np.concatenate([targets, np.zeros((1, 5), dtype=targets.dtype)])
    more_l = np.concatenate([logits, rng.standard_normal((1, 5, 6))])
    assert cross_entropy_forward(more_l, more_t, PAD, 0.1)[0] == pytest.approx(base, rel=1e-12)
    # the mean is over the 7 non-pad tokens, not all 10 positions
    per_tok_sum = _reference_loss(logits, targets, PAD, 0.1)[0] * 7
    assert base == pytest.approx(per_tok_sum / 7) and base != pytest.approx(per_tok_sum / 10)


@pytest.mark.parametrize("big", [1e4, 1e30])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_huge_logits_stable(big, eps, rng):
    targets = _targets()
    logits = np.where(rng.random((2, 5, 6)) < 0.5, -big, big)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        loss, cache = cross_entropy_forward(logits, targets, PAD, eps)
        d = cross_entropy_backward(cache)
    assert math.isfinite(loss) and loss >= 0
    assert np.all(np.isfinite(d))
    # p - q rows sum to 0 and every entry of p - q is in [-1, 1]
    np.testing.assert_allclose(d.sum(-1), 0, atol=1e-12)
    assert np.abs(d).max() <= 1.0
    # a confident correct prediction with eps=0 costs (almost) nothing
    conf = np.full((1, 1, 6), -big)
    conf[0, 0, 3] = big
    l0, _ = cross_entropy_forward(conf, np.array([[3]]), PAD, 0.0)
    assert l0 == pytest.approx(0.0, abs=1e-12)
    lw, _ = cross_entropy_forward(conf, np.array([[2]]), PAD, 0.0)
    assert lw == pytest.approx(2 * big, rel=1e-12)


def test_loss_all_pad_raises(rng):
    logits = rng.standard_normal((2, 3, 4))
    targets = np.zeros((2, 3), dtype=np.int64)
    with pytest.raises(ValueError, match="padding"):
        cross_entropy_forward(logits, targets, PAD, 0.1)
    with pytest.raises(ValueError, match="padding"):
        LabelSmoothedCrossEntropy(PAD).forward(logits, targets)


# ---------------------------------------------------------------------------
# The checker itself must be able to fail
# ---------------------------------------------------------------------------

class _DoubledDW(Linear):
    def backward(self, dy):
        before = self.W.grad.copy()
        dx = super().backward(dy)
        self.W.grad += self.W.grad - before        # dW counted twice
        return dx


class _WrongDx(Linear):
    def backward(self, dy):
        return super().backward(dy) * 1.001        # a 0.1% error in dx


def test_checker_fails_on_wrong_dW(f64, rng):
    lin = _DoubledDW(4, 3, rng)
    report = check_layer(lin, rng.standard_normal((2, 3, 4)))
    assert not report.ok
    assert report.errors["W"] > 0.1
    assert report.errors["x"] <= 1e-6 and report.errors["b"] <= 1e-6
    with pytest.raises(AssertionError, match="'W'") as info:
        report.assert_ok()
    assert "'x'" not in str(info.value).split("\n")[0]
    assert "FAIL" in str(report)


def test_checker_fails_on_small_error_in_dx(f64, rng):
    lin = _WrongDx(4, 3, rng)
    report = check_layer(lin, rng.standard_normal((2, 4)))
    assert not report.ok and report.errors["x"] > 1e-4
    with pytest.raises(AssertionError, match="'x'"):
        report.assert_ok()


def test_gradcheck_fails_on_wrong_function_gradient(rng):
    x = rng.standard_normal(5)
    report = gradcheck(lambda: (x ** 3).sum(), {"x": x}, {"x": 2 * x})      # should be 3 x²
    assert not report.ok
    with pytest.raises(AssertionError, match="'x'"):
        report.assert_ok()
    # and a zero analytic gradient for a non-constant function fails too
    assert not gradcheck(lambda: (x ** 2).sum(), {"x": x}, {"x": np.zeros_like(x)}).ok
