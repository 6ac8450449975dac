"""The models that lessons/experiments trains beside the package's Transformer are correct, backward included.

* ``rnn_seq2seq``: the LSTM encoder-decoder of lesson 8 §13 (lesson08_rnn_vs_transformer.py), every
  backward against central differences in float64, padding carried through, greedy decoding equal to the
  teacher-forced model on its own output;
* ``sublayer_ablations``: every variant (residual, LayerNorm, FFN, cross-attention or tying removed) is the
  model it claims to be, and its rewired backward is its forward's gradient (lessons 4, 5 and 7 read the runs).
"""

import pathlib
import sys

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.gradcheck import gradcheck, numerical_gradient
from minitransformer.layers.parameter import eval_mode
from minitransformer.model import Transformer, TransformerConfig

EXPERIMENTS = pathlib.Path(__file__).resolve().parents[1] / "lessons" / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

import rnn_seq2seq  # noqa: E402  (lessons/experiments is not a package)
import sublayer_ablations  # noqa: E402


@pytest.fixture(autouse=True)
def float64():
    before = backend.default_dtype()
    backend.set_default_dtype("float64")
    yield
    backend.set_default_dtype(before)


def _check_model(model, run, G, tol=1e-6):
    """Gradient check of every parameter of ``model`` for L = sum(run() * G), each tensor's error measured
    against the largest gradient of the whole model: a sub-layer whose gradient is nearly zero (an ablated
    model can starve one, as "no residual" starves the decoder's first self-attention) has no relative
    error worth the name, only the central differences' rounding."""
    model.zero_grad()
    out = run()
    model.backward(G)
    named = dict(model.named_parameters())
    loss = lambda: float((run() * G).sum())                                        # noqa: E731
    numeric = {k: numerical_gradient(loss, p.data) for k, p in named.items()}
    scale = max(float(np.abs(p.grad).max()) for p in named.values())
    errors = {k: float(np.abs(named[k].grad - numeric[k]).max()) / scale for k in named}
    assert max(errors.values()) < tol, {k: e for k, e in errors.items() if e >= tol}
    return out


def test_lstm_layer_backward_with_padding_and_final_state():
    rng = np.random.default_rng(0)
    B, n, d_in, d = 3, 5, 4, 3
    x = rng.standard_normal((B, n, d_in))
    mask = np.ones((B, n), bool)
    mask[1, 3:] = False
    mask[2, 1:] = False
    W_x, W_h = 0.5 * rng.standard_normal((d_in, 4 * d)), 0.5 * rng.standard_normal((d, 4 * d))
    b, h0, c0 = 0.3 * rng.standard_normal(4 * d), rng.standard_normal((B, d)), rng.standard_normal((B, d))
    G, gh, gc = rng.standard_normal((B, n, d)), rng.standard_normal((B, d)), rng.standard_normal((B, d))

    def loss():
        H, (h, c), _ = rnn_seq2seq.lstm_forward(x, W_x, W_h, b, mask, h0, c0)
        return float((H * G).sum() + (h * gh).sum() + (c * gc).sum())

    _, _, cache = rnn_seq2seq.lstm_forward(x, W_x, W_h, b, mask, h0, c0)
    dx, dW_x, dW_h, db, dh0, dc0 = rnn_seq2seq.lstm_backward(G, gh, gc, cache)
    gradcheck(loss, dict(x=x, W_x=W_x, W_h=W_h, b=b, h0=h0, c0=c0),
              dict(x=dx, W_x=dW_x, W_h=dW_h, b=db, h0=dh0, c0=dc0)).assert_ok()


def test_padding_carries_the_state_through():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 6, 3))
    W_x, W_h, b = rng.standard_normal((3, 8)), rng.standard_normal((2, 8)), np.zeros(8)
    zeros = np.zeros((1, 2))
    _, short, _ = rnn_seq2seq.lstm_forward(x[:, :4], W_x, W_h, b, np.ones((1, 4), bool), zeros, zeros)
    padded = np.array([[True] * 4 + [False] * 2])
    _, long, _ = rnn_seq2seq.lstm_forward(x, W_x, W_h, b, padded, zeros, zeros)
    assert np.array_equal(short[0], long[0]) and np.array_equal(short[1], long[1])


def test_seq2seq_backward_and_parameter_count():
    model = rnn_seq2seq.RNNSeq2Seq(11, 4, 2, seed=1)
    src = np.array([[3, 4, 5, 2], [6, 7, 2, 0]])
    tgt = np.array([[1, 3, 4, 8, 0], [1, 9, 5, 0, 0]])
    G = np.random.default_rng(2).standard_normal((2, 5, 11))
    _check_model(model, lambda: model.forward(src, tgt), G)
    assert model.num_parameters() == rnn_seq2seq.count_parameters(11, 4, 2)


def test_greedy_decoding_is_the_teacher_forced_argmax():
    model = rnn_seq2seq.RNNSeq2Seq(13, 6, 2, seed=3)
    src = np.array([[3, 4, 5, 6, 2], [7, 8, 2, 0, 0]])
    out = model.greedy(src, 6, bos_id=1, eos_id=2)
    tgt_in = np.concatenate([np.ones((2, 1), dtype=out.dtype), out[:, :-1]], axis=1)
    logits = model.forward(src, tgt_in)
    logits[..., [0, 1]] = -np.inf                                                  # greedy never writes <pad>, <bos>
    assert np.array_equal(logits.argmax(-1), out)


def test_width_for_matches_the_transformer_it_is_compared_with():
    V = 205
    d = rnn_seq2seq.width_for(246_592, V, 2)
    best = abs(rnn_seq2seq.count_parameters(V, d, 2) - 246_592)
    assert all(abs(rnn_seq2seq.count_parameters(V, e, 2) - 246_592) >= best for e in (d - 1, d + 1))


TINY = TransformerConfig(vocab_size=12, d_model=4, h=2, N=1, d_ff=6, P_drop=0.0, eps_ls=0.0, max_len=8)
SRC = np.array([[3, 4, 5, 6, 2], [7, 8, 9, 2, 0]])
TGT_IN = np.array([[1, 10, 11, 4, 0], [1, 5, 6, 0, 0]])


@pytest.mark.parametrize("label", ["base", "no residual", "no LayerNorm", "neither", "no FFN", "no cross-attention",
                                   "untied"])
def test_every_ablation_backward_is_its_forward_gradient(label):
    model = sublayer_ablations.make_variant(Transformer(TINY, seed=0), label, seed=0)
    G = np.random.default_rng(4).standard_normal((2, TGT_IN.shape[1], TINY.vocab_size))
    _check_model(model, lambda: model.forward(SRC, TGT_IN), G)


def test_the_ablations_are_what_they_say():
    base = Transformer(TINY, seed=0)
    no_ffn = sublayer_ablations.make_variant(Transformer(TINY, seed=0), "no FFN", 0)
    per_ffn = sum(p.data.size for p in base.encoder.layers[0].ffn.parameters() + base.encoder.layers[0].res_ffn.parameters())
    assert no_ffn.num_parameters() == base.num_parameters() - 2 * TINY.N * per_ffn
    untied = sublayer_ablations.make_variant(Transformer(TINY, seed=0), "untied", 0)
    assert untied.num_parameters() == base.num_parameters() + 2 * TINY.vocab_size * TINY.d_model
    assert len({id(untied.src_embed.E), id(untied.tgt_embed.E), id(untied.output_projection.E)}) == 3
    blind = sublayer_ablations.make_variant(Transformer(TINY, seed=0), "no cross-attention", 0)
    other = SRC[::-1].copy()
    with eval_mode(blind):
        assert np.array_equal(blind.forward(SRC, TGT_IN), blind.forward(other, TGT_IN))     # the source is never read
    assert sublayer_ablations.used_parameters(blind, "no cross-attention") < blind.num_parameters()
    with eval_mode(base):
        assert not np.allclose(base.forward(SRC, TGT_IN), base.forward(other, TGT_IN))


def test_an_ablated_model_decodes():
    """Greedy decoding (the key/value cache and decode_step) runs on the rewired layers, as the script's scoring does."""
    from minitransformer.decoding import greedy_decode
    for label in ("no FFN", "no cross-attention", "untied"):
        model = sublayer_ablations.make_variant(Transformer(TINY, seed=0), label, seed=0)
        with eval_mode(model):
            out = greedy_decode(model, SRC, 1, 2, max_len=4)
            full = model.forward(SRC, np.array([[1] + o[:3] + [0] * (3 - len(o[:3])) for o in out]))
        assert len(out) == 2 and np.isfinite(full).all()
