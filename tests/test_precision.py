"""float32 vs float64: the same layer gives the same answer, and float32 stays float32.

Each layer is built once in float64, then copied with its parameters cast to
float32. Both copies see the same input; the forwards agree to ~1e-5 relative.
Then every forward output, input gradient and parameter-gradient update of the
float32 copy must itself be float32: no silent upcast to float64 anywhere.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.layers.attention import MultiHeadAttention, attention_backward, attention_forward
from minitransformer.layers.dropout import Dropout, dropout_mask
from minitransformer.layers.embedding import Embedding, TiedOutputProjection
from minitransformer.layers.feedforward import FeedForward
from minitransformer.layers.layernorm import LayerNorm, layernorm_backward, layernorm_forward
from minitransformer.layers.linear import Linear, linear_backward, linear_forward
from minitransformer.layers.loss import LabelSmoothedCrossEntropy, cross_entropy_backward, cross_entropy_forward
from minitransformer.layers.parameter import Layer
from minitransformer.layers.positional import PositionalEncoding
from minitransformer.layers.residual import Residual

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
TOL = 1e-5


def rel_diff(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


class _StrictGrad(np.ndarray):
    """A gradient buffer that records the dtype of everything added into it.

    ``p.grad += g`` with a float64 g would be cast down silently by NumPy; this
    catches it, including ``p.grad[:, :d] += g`` (the slice is also a _StrictGrad).
    """

    seen: list = []

    def __iadd__(self, other):
        _StrictGrad.seen.append(np.asarray(other).dtype)
        return super().__iadd__(other)


def to_float32(layer):
    """A deep copy of ``layer`` with float32 parameters (shared ones stay shared)."""
    layer32 = copy.deepcopy(layer)
    for p in layer32.parameters():
        p.data = p.data.astype(np.float32)
        p.grad = np.zeros_like(p.data).view(_StrictGrad)
    return layer32


class _Call(Layer):
    """forward(*xs) -> fwd(inner, *xs); backward(dy) -> bwd(inner, dy)."""

    def __init__(self, fwd, bwd, **children):
        super().__init__()
        for k, v in children.items():
            setattr(self, k, v)
        self._fwd, self._bwd = fwd, bwd

    def forward(self, *xs):
        return self._fwd(self, *xs)

    def backward(self, dy):
        return self._bwd(self, dy)


def _build(name, rng):
    """(layer in float64, list of float64 inputs). Called with float64 defaults."""
    d, B, S = 8, 2, 5
    x = rng.standard_normal((B, S, d))
    pad = (np.arange(S)[None, :] < np.array([5, 3])[:, None])[:, None, None, :]
    causal = np.tril(np.ones((S, S), bool))[None, None]
    if name == "linear":
        return Linear(d, 6, rng), [x]
    if name == "embedding":
        return Embedding(11, d, rng), [rng.integers(0, 11, (B, S))]
    if name == "tied_projection":
        return TiedOutputProjection(Embedding(11, d, rng).E), [x]
    if name == "positional":
        return PositionalEncoding(d, max_len=16), [x]
    if name == "mha_self_padding":
        return _Call(lambda s, x: s.mha.forward(x, mask=pad), lambda s, dy: s.mha.backward(dy),
                     mha=MultiHeadAttention(d, 2, rng)), [x]
    if name == "mha_causal":
        return _Call(lambda s, x: s.mha.forward(x, mask=pad & causal), lambda s, dy: s.mha.backward(dy),
                     mha=MultiHeadAttention(d, 4, rng)), [x]
    if name == "mha_cross":
        mem = rng.standard_normal((B, 7, d))
        mpad = (np.arange(7)[None, :] < np.array([7, 4])[:, None])[:, None, None, :]
        return _Call(lambda s, xq, m: s.mha.forward(xq, m, mask=mpad), lambda s, dy: s.mha.backward(dy),
                     mha=MultiHeadAttention(d, 2, rng)), [x, mem]
    if name == "feedforward":
        return FeedForward(d, 16, rng), [x]
    if name == "layernorm":
        ln = LayerNorm(d)
        ln.gamma.data[...] = rng.standard_normal(d)
        ln.beta.data[...] = rng.standard_normal(d)
        return ln, [x * 3 + 1]
    if name == "dropout_fixed_mask":
        mask = (rng.random(x.shape) >= 0.1) / 0.9
        return _Call(lambda s, x: s.drop.forward(x, mask=mask.astype(x.dtype)),
                     lambda s, dy: s.drop.backward(dy), drop=Dropout(0.1)), [x]
    if name in ("residual_post_ln", "residual_pre_ln"):
        return _Call(lambda s, x: s.res.forward(x, s.ffn.forward), lambda s, dy: s.res.backward(dy, s.ffn.backward),
                     res=Residual(d, 0.0, pre_ln=name.endswith("pre_ln")), ffn=FeedForward(d, 16, rng)), [x]
    if name == "stack_mha_residual_ffn":
        def fwd(s, x):
            h = s.res1.forward(x, lambda z: s.mha.forward(z, mask=pad & causal))
            return s.res2.forward(h, s.ffn.forward)

        def bwd(s, dy):
            dh = s.res2.backward(dy, s.ffn.backward)
            return s.res1.backward(dh, s.mha.backward)

        return _Call(fwd, bwd, mha=MultiHeadAttention(d, 2, rng), res1=Residual(d, 0.0, name="r1"),
                     ffn=FeedForward(d, 16, rng), res2=Residual(d, 0.0, name="r2")), [x]
    raise KeyError(name)


LAYERS = ["linear", "embedding", "tied_projection", "positional", "mha_self_padding", "mha_causal",
          "mha_cross", "feedforward", "layernorm", "dropout_fixed_mask", "residual_post_ln",
          "residual_pre_ln", "stack_mha_residual_ffn"]


def _cast(inputs):
    return [a.astype(np.float32) if a.dtype.kind == "f" else a for a in inputs]


@pytest.mark.parametrize("name", LAYERS)
def test_float32_matches_float64(f64, rng, name):
    layer64, inputs64 = _build(name, rng)
    assert all(p.data.dtype == F64 for p in layer64.parameters())
    layer32 = to_float32(layer64)
    inputs32 = _cast(inputs64)

    y64 = layer64.forward(*inputs64)
    y32 = layer32.forward(*inputs32)
    assert y64.dtype == F64
    assert rel_diff(y32, y64) <= TOL, f"{name}: forward differs by {rel_diff(y32, y64):.2e}"

    # backward agrees too (looser: the errors of the forward are amplified once)
    G = rng.standard_normal(y64.shape)
    d64 = layer64.backward(G)
    d32 = layer32.backward(G.astype(np.float32))
    d64 = d64 if isinstance(d64, tuple) else (d64,)
    d32 = d32 if isinstance(d32, tuple) else (d32,)
    for a32, a64 in zip(d32, d64):
        if a64 is not None:
            assert rel_diff(a32, a64) <= 1e-4
    for (n, p32), (_, p64) in zip(layer32.named_parameters(), layer64.named_parameters()):
        assert rel_diff(p32.grad, p64.grad) <= 1e-4, n


@pytest.mark.parametrize("name", LAYERS)
def test_float32_stays_float32(f64, rng, name):
    layer64, inputs64 = _build(name, rng)
    layer32 = to_float32(layer64)
    inputs32 = _cast(inputs64)
    _StrictGrad.seen = []

    y = layer32.forward(*inputs32)
    assert y.dtype == F32, f"{name}: forward output is {y.dtype}"
    dx = layer32.backward(rng.standard_normal(y.shape).astype(np.float32))
    for d in dx if isinstance(dx, tuple) else (dx,):
        assert d is None or d.dtype == F32, f"{name}: input gradient is {d.dtype}"
    params = layer32.parameters()
    for p in params:
        assert p.data.dtype == F32 and p.grad.dtype == F32
    if params:
        assert _StrictGrad.seen, f"{name}: no gradient was accumulated"
        assert set(_StrictGrad.seen) == {F32}, f"{name}: gradients added with dtypes {set(_StrictGrad.seen)}"


def test_strict_grad_catches_an_upcast():
    """The dtype recorder above really sees a float64 update (or the test would be empty)."""
    _StrictGrad.seen = []
    g = np.zeros((2, 3), np.float32).view(_StrictGrad)
    g[:, :2] += np.ones((2, 2), np.float64)
    g += np.ones((2, 3), np.float32)
    assert _StrictGrad.seen == [F64, F32]


def test_pure_functions_keep_float32(rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    W = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    y, c = linear_forward(x, W, b)
    assert y.dtype == F32 and all(a.dtype == F32 for a in linear_backward(np.ones_like(y), c))

    g, be = np.ones(4, np.float32), np.zeros(4, np.float32)
    y, c = layernorm_forward(x, g, be, 1e-5)
    assert y.dtype == F32 and all(a.dtype == F32 for a in layernorm_backward(np.ones_like(y), c))

    Q = rng.standard_normal((2, 2, 3, 4)).astype(np.float32)
    mask = rng.random((2, 1, 3, 3)) < 0.6
    out, c = attention_forward(Q, Q.copy(), Q.copy(), mask)
    assert out.dtype == F32 and c.A.dtype == F32
    assert all(a.dtype == F32 for a in attention_backward(np.ones_like(out), c))

    m = dropout_mask((3, 4), 0.1, np.random.default_rng(0), np.float32)
    assert m.dtype == F32


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_float32(rng, eps):
    logits = rng.standard_normal((2, 4, 7)) * 2
    targets = np.array([[1, 2, 3, 0], [6, 5, 0, 0]])
    l64, c64 = cross_entropy_forward(logits, targets, 0, eps)
    l32, c32 = cross_entropy_forward(logits.astype(np.float32), targets, 0, eps)
    assert abs(l32 - l64) / abs(l64) <= TOL
    d64, d32 = cross_entropy_backward(c64), cross_entropy_backward(c32)
    assert d32.dtype == F32
    assert rel_diff(d32, d64) <= TOL
    lossf = LabelSmoothedCrossEntropy(0, eps)
    lossf.forward(logits.astype(np.float32), targets)
    assert lossf.backward().dtype == F32


def test_building_with_default_dtype_float32_matches_cast(rng):
    """Building under set_default_dtype(float32) gives the float64 parameters, rounded."""
    old = backend.default_dtype()
    try:
        backend.set_default_dtype("float64")
        m64 = MultiHeadAttention(8, 2, np.random.default_rng(3))
        f64 = FeedForward(8, 12, np.random.default_rng(4))
        e64 = Embedding(9, 8, np.random.default_rng(5))
        backend.set_default_dtype("float32")
        m32 = MultiHeadAttention(8, 2, np.random.default_rng(3))
        f32 = FeedForward(8, 12, np.random.default_rng(4))
        e32 = Embedding(9, 8, np.random.default_rng(5))
        pe32 = PositionalEncoding(8, 10)
        ln32 = LayerNorm(8)
    finally:
        backend.set_default_dtype(old)
    for a, b in ((m32, m64), (f32, f64), (e32, e64)):
        for (n, p32), (_, p64) in zip(a.named_parameters(), b.named_parameters()):
            assert p32.data.dtype == F32, n
            np.testing.assert_array_equal(p32.data, p64.data.astype(np.float32))
    assert pe32.table.dtype == F32 and ln32.gamma.data.dtype == F32
    x = rng.standard_normal((2, 4, 8))
    assert rel_diff(m32.forward(x.astype(np.float32)), m64.forward(x)) <= TOL
