"""Bad inputs fail at once, with a message that names the problem.

A wrong shape must not surface as a broadcasting traceback deep inside a matrix
product (or, worse, broadcast silently into a wrong answer).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from minitransformer.errors import ShapeError, TokenIdError
from minitransformer.layers.attention import MultiHeadAttention
from minitransformer.layers.dropout import Dropout
from minitransformer.layers.embedding import Embedding, TiedOutputProjection
from minitransformer.layers.feedforward import FeedForward
from minitransformer.layers.layernorm import LayerNorm
from minitransformer.layers.linear import Linear
from minitransformer.layers.loss import LabelSmoothedCrossEntropy
from minitransformer.layers.positional import PositionalEncoding
from minitransformer.layers.residual import Residual

D = 8


def esc(s: str) -> str:
    return re.escape(s)


@pytest.fixture
def x(rng):
    return rng.standard_normal((2, 3, D)).astype(np.float32)


# ---------------------------------------------------------------------------
# Shapes: expected and actual both named
# ---------------------------------------------------------------------------

def test_linear_wrong_last_dim(rng):
    lin = Linear(D, 4, rng, name="proj")
    with pytest.raises(ShapeError, match=esc("'proj'") + ".*" + esc("d_in=8") + ".*" + esc("got (2, 3, 5)")):
        lin.forward(np.zeros((2, 3, 5), np.float32))


def test_shape_error_is_a_value_error():
    assert issubclass(ShapeError, ValueError) and issubclass(TokenIdError, ValueError)


def test_mha_query_wrong_d_model(rng):
    mha = MultiHeadAttention(D, 2, rng)
    with pytest.raises(ShapeError, match=r"query input.*d_model=8.*got \(2, 3, 6\)"):
        mha.forward(np.zeros((2, 3, 6), np.float32))
    with pytest.raises(ShapeError, match=r"query input must have shape \(B, S_q, d_model\), got \(3, 8\)"):
        mha.forward(np.zeros((3, D), np.float32))


def test_mha_memory_wrong_batch_or_width(rng, x):
    mha = MultiHeadAttention(D, 2, rng)
    with pytest.raises(ShapeError, match=esc("(B=2, S_k, d_model=8)") + ".*" + esc("got (3, 4, 8)")):
        mha.forward(x, np.zeros((3, 4, D), np.float32))
    with pytest.raises(ShapeError, match=r"memory.*d_model=8.*got \(2, 4, 7\)"):
        mha.forward(x, np.zeros((2, 4, 7), np.float32))


def test_layernorm_wrong_shape(x):
    with pytest.raises(ShapeError, match=r"LayerNorm.*d_model=6.*got \(2, 3, 8\)"):
        LayerNorm(6).forward(x)


def test_feedforward_wrong_shape(rng, x):
    with pytest.raises(ShapeError, match=r"FeedForward.*d_model=4.*got \(2, 3, 8\)"):
        FeedForward(4, 16, rng).forward(x)


def test_tied_projection_wrong_shape(rng):
    proj = TiedOutputProjection(Embedding(10, 6, rng).E)
    with pytest.raises(ShapeError, match=r"TiedOutputProjection.*d_model=6.*got \(2, 3, 8\)"):
        proj.forward(np.zeros((2, 3, 8), np.float32))


def test_tied_weight_of_wrong_shape(rng):
    E = Embedding(10, 6, rng).E
    with pytest.raises(ValueError, match=esc("(10, 8)") + ".*" + esc("got (10, 6)")):
        Embedding(10, 8, weight=E)


def test_positional_longer_than_max_len(x):
    pe = PositionalEncoding(D, max_len=2)
    with pytest.raises(ShapeError, match=r"up to 3 exceed max_len=2"):
        pe.forward(x)
    pe5 = PositionalEncoding(D, max_len=5)
    with pytest.raises(ShapeError, match=r"up to 6 exceed max_len=5"):
        pe5.forward(x, offset=3)
    with pytest.raises(ShapeError, match=r"PositionalEncoding.*got \(3, 8\)"):
        pe5.forward(np.zeros((3, D), np.float32))


def test_dropout_mask_wrong_shape(x):
    with pytest.raises(ShapeError, match=esc("(2, 3, 8)") + ".*" + esc("got (2, 3)")):
        Dropout(0.1).forward(x, mask=np.ones((2, 3), np.float32))


def test_dropout_bad_rate_and_missing_rng(x):
    with pytest.raises(ValueError, match=r"P_drop.*\[0, 1\).*1\.0"):
        Dropout(1.0)
    with pytest.raises(RuntimeError, match="no rng"):
        Dropout(0.1).forward(x)


def test_loss_logits_targets_mismatch():
    lossf = LabelSmoothedCrossEntropy(pad_id=0)
    with pytest.raises(ShapeError, match=esc("(2, 3, 5)") + ".*" + esc("(2, 4)")):
        lossf.forward(np.zeros((2, 3, 5)), np.ones((2, 4), np.int64))
    with pytest.raises(ShapeError, match=esc("(6, 5)")):
        lossf.forward(np.zeros((6, 5)), np.ones((6,), np.int64))


def test_loss_bad_targets():
    lossf = LabelSmoothedCrossEntropy(pad_id=0)
    with pytest.raises(TokenIdError, match=r"token id 5 .*size 5"):
        lossf.forward(np.zeros((1, 2, 5)), np.array([[1, 5]]))
    with pytest.raises(ValueError, match=r"ε_ls.*1\.0"):
        LabelSmoothedCrossEntropy(pad_id=0, eps_ls=1.0)


# ---------------------------------------------------------------------------
# Heads, token ids, masks
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("d_model, h", [(10, 3), (8, 0), (8, 3)])
def test_d_model_not_divisible_by_h(rng, d_model, h):
    with pytest.raises(ValueError, match=rf"d_model={d_model}.*divisible.*h={h}"):
        MultiHeadAttention(d_model, h, rng)


@pytest.mark.parametrize("bad", [-1, 10, 12])
def test_token_id_outside_vocab(rng, bad):
    emb = Embedding(10, D, rng, name="src")
    ids = np.array([[1, 2, bad]])
    with pytest.raises(TokenIdError, match=rf"'src'.*token id {bad} is outside the vocabulary of size 10"):
        emb.forward(ids)


def test_float_token_ids(rng):
    with pytest.raises(TokenIdError, match=r"integer.*float64"):
        Embedding(10, D, rng).forward(np.array([[1.0, 2.0]]))


def test_token_ids_at_the_edges_are_fine(rng):
    out = Embedding(10, D, rng).forward(np.array([[0, 9]], dtype=np.uint8))
    assert out.shape == (1, 2, D)


@pytest.mark.parametrize("shape", [(2, 1, 3, 4), (2, 3), (3, 1, 1, 3), (2, 1, 1, 3, 1)])
def test_mask_wrong_shape(rng, x, shape):
    mha = MultiHeadAttention(D, 2, rng)
    with pytest.raises(ShapeError, match=esc(f"mask of shape {shape}") + ".*" + esc("(2, 2, 3, 3)")):
        mha.forward(x, mask=np.ones(shape, bool))


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.uint8])
def test_mask_wrong_dtype(rng, x, dtype):
    mha = MultiHeadAttention(D, 2, rng)
    with pytest.raises(TypeError, match=rf"mask must be a boolean array.*{np.dtype(dtype).name}"):
        mha.forward(x, mask=np.ones((2, 1, 1, 3), dtype))


def test_good_masks_are_accepted(rng, x):
    mha = MultiHeadAttention(D, 2, rng)
    for shape in [(2, 1, 1, 3), (1, 1, 3, 3), (2, 2, 3, 3), (2, 1, 3, 3)]:
        assert mha.forward(x, mask=np.ones(shape, bool)).shape == x.shape


# ---------------------------------------------------------------------------
# backward before forward, and twice for one forward
# ---------------------------------------------------------------------------

def _cases(rng):
    """(class name, forward(), backward()) for every Layer class."""
    x = rng.standard_normal((2, 3, D)).astype(np.float32)
    dy = np.ones_like(x)
    lin, mha, ffn = Linear(D, D, rng), MultiHeadAttention(D, 2, rng), FeedForward(D, 16, rng)
    emb = Embedding(10, D, rng)
    proj = TiedOutputProjection(emb.E)
    ln, pe, drop = LayerNorm(D), PositionalEncoding(D, 10), Dropout(0.5, np.random.default_rng(0))
    res = Residual(D, 0.1, np.random.default_rng(0))
    ids = np.array([[1, 2, 3], [4, 5, 6]])
    return [
        ("Linear", lambda: lin.forward(x), lambda: lin.backward(dy)),
        ("MultiHeadAttention", lambda: mha.forward(x), lambda: mha.backward(dy)),
        ("FeedForward", lambda: ffn.forward(x), lambda: ffn.backward(dy)),
        ("Embedding", lambda: emb.forward(ids), lambda: emb.backward(dy)),
        ("TiedOutputProjection", lambda: proj.forward(x), lambda: proj.backward(np.ones((2, 3, 10), np.float32))),
        ("LayerNorm", lambda: ln.forward(x), lambda: ln.backward(dy)),
        ("PositionalEncoding", lambda: pe.forward(x), lambda: pe.backward(dy)),
        ("Dropout", lambda: drop.forward(x), lambda: drop.backward(dy)),
        ("Residual", lambda: res.forward(x, ffn.forward), lambda: res.backward(dy, ffn.backward)),
    ]


CLASSES = ["Linear", "MultiHeadAttention", "FeedForward", "Embedding", "TiedOutputProjection",
           "LayerNorm", "PositionalEncoding", "Dropout", "Residual"]


@pytest.mark.parametrize("index", range(len(CLASSES)), ids=CLASSES)
def test_backward_before_forward(rng, index):
    name, _, backward = _cases(rng)[index]
    with pytest.raises(RuntimeError, match=rf"^{name}\.backward called before forward"):
        backward()


@pytest.mark.parametrize("index", range(len(CLASSES)), ids=CLASSES)
def test_backward_twice(rng, index):
    name, forward, backward = _cases(rng)[index]
    forward()
    backward()                                     # the first backward is fine
    with pytest.raises(RuntimeError, match=rf"^{name}\.backward called before forward \(or twice"):
        backward()
    forward()                                      # a new forward makes backward legal again
    backward()


def test_dropout_eval_backward_twice(rng):
    drop = Dropout(0.5, np.random.default_rng(0)).eval()
    x = np.ones((2, 2), np.float32)
    drop.forward(x)
    drop.backward(x)
    with pytest.raises(RuntimeError, match="Dropout.backward"):
        drop.backward(x)


def test_loss_backward_before_forward_and_twice():
    lossf = LabelSmoothedCrossEntropy(pad_id=0)
    with pytest.raises(RuntimeError, match="LabelSmoothedCrossEntropy.backward called before forward"):
        lossf.backward()
    lossf.forward(np.zeros((1, 2, 4)), np.array([[1, 2]]))
    lossf.backward()
    with pytest.raises(RuntimeError, match="LabelSmoothedCrossEntropy.backward"):
        lossf.backward()


def test_backward_with_wrong_gradient_shape(rng, x):
    lin = Linear(D, 4, rng, name="out")
    lin.forward(x)
    with pytest.raises(ShapeError, match=r"'out'.backward: dy must have the shape of the forward's output "
                                         r"\(2, 3, 4\), got \(2, 3, 8\)"):
        lin.backward(x)


# Every backward checks that the incoming gradient has the shape of its forward's
# output: before, a wrong leading shape broadcast silently into a wrong answer.

def _gradient_cases(rng, x):
    from minitransformer.model import PRESETS, Transformer

    ids = np.array([[1, 2, 3], [4, 5, 6]])
    cases = []
    lin = Linear(D, 4, rng, name="lin")
    cases.append(("Linear 'lin'", lambda: lin.forward(x), lin.backward, "dy", (2, 3, 4)))
    emb = Embedding(10, D, rng, name="emb")
    cases.append(("Embedding 'emb'", lambda: emb.forward(ids), emb.backward, "dout", (2, 3, D)))
    tied = TiedOutputProjection(emb.E)
    cases.append(("TiedOutputProjection", lambda: tied.forward(x), tied.backward, "dlogits", (2, 3, 10)))
    ln = LayerNorm(D, name="ln")
    cases.append(("LayerNorm 'ln'", lambda: ln.forward(x), ln.backward, "dy", (2, 3, D)))
    ffn = FeedForward(D, 16, rng, name="ffn")
    cases.append(("FeedForward 'ffn'", lambda: ffn.forward(x), ffn.backward, "dy", (2, 3, D)))
    mha = MultiHeadAttention(D, 2, rng, name="mha")
    cases.append(("MultiHeadAttention 'mha'", lambda: mha.forward(x), mha.backward, "dy", (2, 3, D)))
    drop = Dropout(0.5, np.random.default_rng(0))
    cases.append(("Dropout", lambda: drop.forward(x), drop.backward, "dout", (2, 3, D)))
    pos = PositionalEncoding(D, 16)
    cases.append(("PositionalEncoding", lambda: pos.forward(x), pos.backward, "dout", (2, 3, D)))
    res = Residual(D, 0.0, name="res")
    cases.append(("Residual 'res'", lambda: res.forward(x, ffn.forward), lambda d: res.backward(d, ffn.backward),
                  "dy", (2, 3, D)))
    model = Transformer(PRESETS["tiny"].with_(vocab_size=10))
    cases.append(("Transformer", lambda: model.forward(ids, ids), model.backward, "dlogits", (2, 3, 10)))
    return cases


@pytest.mark.parametrize("case", range(10))
def test_every_backward_names_a_wrong_gradient_shape(rng, x, case):
    where, forward, backward, name, shape = _gradient_cases(rng, x)[case]
    forward()
    wrong = np.ones((1,) + shape[1:], dtype=np.float32)       # broadcastable: numpy would accept it silently
    with pytest.raises(ShapeError, match=esc(f"{where}.backward: {name} must have the shape of the forward's "
                                             f"output {shape}, got {wrong.shape}")):
        backward(wrong)
    # An integer gradient is refused too; the right one is accepted after a new forward.
    forward()
    with pytest.raises(TypeError, match=esc(f"{where}.backward: {name} must be a float array, got dtype int64")):
        backward(np.ones(shape, dtype=np.int64))
    forward()
    backward(np.ones(shape, dtype=np.float32))


# ---------------------------------------------------------------------------
# The dtype rule (errors.check_input): a layer computes in its parameters' dtype.
# Before, a float32 layer fed float64 silently returned float64, and integer
# activations were silently promoted.
# ---------------------------------------------------------------------------

def _dtype_cases(rng):
    """(layer label, forward(x)) for every layer that takes activations; all float32."""
    lin, ffn, mha = Linear(D, 4, rng, name="lin"), FeedForward(D, 16, rng, name="ffn"), MultiHeadAttention(D, 2, rng, name="mha")
    ln, emb = LayerNorm(D, name="ln"), Embedding(10, D, rng, name="emb")
    tied, res = TiedOutputProjection(emb.E), Residual(D, 0.0, pre_ln=True, name="res")   # pre-LN: the norm reads x first
    return [
        ("Linear 'lin'", lin.forward),
        ("FeedForward 'ffn'", ffn.forward),
        ("MultiHeadAttention 'mha'", mha.forward),
        ("MultiHeadAttention 'mha'", lambda x: mha.forward(x.astype(np.float32), x)),   # the memory too
        ("LayerNorm 'ln'", ln.forward),
        ("TiedOutputProjection", tied.forward),
        ("LayerNorm 'res.norm'", lambda x: res.forward(x, ffn.forward)),
    ]


@pytest.mark.parametrize("case", range(7))
def test_float64_into_a_float32_layer_is_named(rng, case):
    where, forward = _dtype_cases(rng)[case]
    x64 = rng.standard_normal((2, 3, D))
    with pytest.raises(TypeError, match=esc(where) + r".*has dtype float64, but the layer's parameters are float32"):
        forward(x64)
    assert forward(x64.astype(np.float32)).dtype == np.float32          # the documented fix works


@pytest.mark.parametrize("case", range(7))
@pytest.mark.parametrize("dtype", [np.int64, np.int32, bool])
def test_integer_activations_are_refused(rng, case, dtype):
    where, forward = _dtype_cases(rng)[case]
    with pytest.raises(TypeError, match=esc(where) + r".*must be a float array, got dtype"):
        forward(np.ones((2, 3, D), dtype=dtype))


def test_parameterless_layers_keep_a_float_dtype_and_refuse_integers(rng):
    pe, drop = PositionalEncoding(D, 16), Dropout(0.5, np.random.default_rng(0))
    for dtype in (np.float32, np.float64):
        x = np.ones((2, 3, D), dtype=dtype)
        assert pe.forward(x).dtype == dtype and drop.forward(x).dtype == dtype
    for layer, name in ((pe, "PositionalEncoding"), (drop, "Dropout")):
        with pytest.raises(TypeError, match=f"{name}: x must be a float array, got dtype int64"):
            layer.forward(np.ones((2, 3, D), dtype=np.int64))


def test_a_float64_gradient_into_a_float32_backward_is_named(rng, x):
    lin = Linear(D, 4, rng, name="out")
    y = lin.forward(x)
    with pytest.raises(TypeError, match=esc("Linear 'out'.backward: dy has dtype float64, but the forward's "
                                            "output was float32")):
        lin.backward(np.ones(y.shape))
    lin.forward(x)
    assert lin.backward(np.ones_like(y)).dtype == np.float32


def test_a_float64_model_stays_float64(f64, rng):
    """The rule does not get in the way of the gradient checks: float64 layers take float64."""
    lin = Linear(D, 4, rng)
    x64 = rng.standard_normal((2, 3, D))
    y = lin.forward(x64)
    assert y.dtype == np.float64 and lin.backward(np.ones_like(y)).dtype == np.float64
    with pytest.raises(TypeError, match="has dtype float32, but the layer's parameters are float64"):
        lin.forward(x64.astype(np.float32))


# ---------------------------------------------------------------------------
# TransformerConfig: nonsense values are a named ValueError (h = 0 was a ZeroDivisionError)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("field, value, message", [
    ("h", 0, "h must be an integer ≥ 1"),
    ("N", -1, "N must be an integer ≥ 1"),
    ("d_model", 64.0, "d_model must be an integer ≥ 1"),
    ("vocab_size", True, "vocab_size must be an integer ≥ 1"),
    ("eps_ls", 1.0, "eps_ls must be a probability in [0, 1)"),
    ("eps_ls", -0.1, "eps_ls must be a probability in [0, 1)"),
    ("P_drop", 1.5, "P_drop must be a probability in [0, 1)"),
    ("ln_eps", 0.0, "ln_eps must be a small positive number"),
    ("ln_eps", -1e-5, "ln_eps must be a small positive number"),
    ("pad_id", 14, "pad_id must be a token id in 0..vocab_size-1=13"),
    ("pad_id", -1, "pad_id must be a token id"),
    ("pre_ln", 1, "pre_ln must be True or False"),
])
def test_config_nonsense_is_a_named_value_error(field, value, message):
    from minitransformer.data.registry import PRESETS

    with pytest.raises(ValueError, match=esc(f"TransformerConfig: {message}")):
        PRESETS["copy"].with_(**{field: value})
