"""The exercise checkers of lessons 4-7: a right answer passes, a wrong one raises
AssertionError, the untouched stub (returns None) returns False without raising."""

import math

import numpy as np
import pytest

from minitransformer.exercises import lessons_4_7 as ex


# -- correct answers, written independently of the package --------------------------

def ln_backward(dy, x, gamma, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    xh = (x - mu) * rstd
    g = dy * gamma
    dx = rstd * (g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True))
    d = x.shape[-1]
    return dx, (dy * xh).reshape(-1, d).sum(0), dy.reshape(-1, d).sum(0)


def _ln(x, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)


def post_ln_backward(dy, x, W, eps=1e-5):
    z = x + x @ W
    dz = ln_backward(dy, z, np.ones(x.shape[-1]), eps)[0]
    return dz + dz @ W.T, x.reshape(-1, x.shape[-1]).T @ dz.reshape(-1, x.shape[-1])


def pre_ln_backward(dy, x, W, eps=1e-5):
    n = _ln(x, eps)
    d = x.shape[-1]
    dn = dy @ W.T
    return dy + ln_backward(dn, x, np.ones(d), eps)[0], n.reshape(-1, d).T @ dy.reshape(-1, d)


def emb_backward(dout, ids, V):
    d = dout.shape[-1]
    dE = np.zeros((V, d))
    np.add.at(dE, ids.reshape(-1), dout.reshape(-1, d) * math.sqrt(d))
    return dE


def tied_grad(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits):
    V, d = dlogits.shape[-1], x_dec.shape[-1]
    return (emb_backward(d_src, src_ids, V) + emb_backward(d_tgt, tgt_ids, V)
            + np.einsum("btv,btd->vd", dlogits, x_dec))


def pe(max_len, d):
    pos = np.arange(max_len)[:, None]
    w = np.exp(-np.log(10000.0) * np.arange(0, d, 2) / d)
    out = np.empty((max_len, d))
    out[:, 0::2], out[:, 1::2] = np.sin(pos * w), np.cos(pos * w)
    return out


def pe_sim(k, d):
    w = 10000.0 ** (-np.arange(0, d, 2) / d)
    return np.cos(np.asarray(k)[:, None] * w).sum(-1)


def shift_right(tgt_seqs, pad_id, bos_id, eos_id):
    T = max(len(t) for t in tgt_seqs) + 1
    tgt_in = np.full((len(tgt_seqs), T), pad_id)
    tgt_out = np.full((len(tgt_seqs), T), pad_id)
    for b, t in enumerate(tgt_seqs):
        tgt_in[b, : len(t) + 1] = [bos_id, *t]
        tgt_out[b, : len(t) + 1] = [*t, eos_id]
    return tgt_in, tgt_out


def enc_params(d, d_ff):
    return 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d + 4 * d


def dec_params(d, d_ff):
    return 2 * (4 * d * d + 4 * d) + 2 * d * d_ff + d_ff + d + 6 * d


def model_params(V, d, d_ff, N):
    return V * d + N * (enc_params(d, d_ff) + dec_params(d, d_ff))


# -- wrong answers: the classic mistakes ---------------------------------------------

def ln_backward_no_xhat_term(dy, x, gamma, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    xh = (x - mu) * rstd
    g = dy * gamma
    d = x.shape[-1]
    return rstd * (g - g.mean(-1, keepdims=True)), (dy * xh).reshape(-1, d).sum(0), dy.reshape(-1, d).sum(0)


def post_ln_no_identity(dy, x, W, eps=1e-5):
    dx, dW = post_ln_backward(dy, x, W, eps)
    dz = ln_backward(dy, x + x @ W, np.ones(x.shape[-1]), eps)[0]
    return dx - dz, dW


def pre_ln_no_identity(dy, x, W, eps=1e-5):
    dx, dW = pre_ln_backward(dy, x, W, eps)
    return dx - dy, dW


def emb_backward_assign(dout, ids, V):
    d = dout.shape[-1]
    dE = np.zeros((V, d))
    dE[ids.reshape(-1)] = dout.reshape(-1, d) * math.sqrt(d)   # repeats overwrite instead of adding
    return dE


def tied_grad_output_only(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits):
    return np.einsum("btv,btd->vd", dlogits, x_dec)


def pe_swapped(max_len, d):
    out = pe(max_len, d)
    return out[:, ::-1].copy()


def pe_sim_sin(k, d):
    w = 10000.0 ** (-np.arange(0, d, 2) / d)
    return np.sin(np.asarray(k)[:, None] * w).sum(-1)


def shift_right_swapped(tgt_seqs, pad_id, bos_id, eos_id):
    tgt_in, tgt_out = shift_right(tgt_seqs, pad_id, bos_id, eos_id)
    return tgt_out, tgt_in


def model_params_untied(V, d, d_ff, N):
    return model_params(V, d, d_ff, N) + 2 * V * d


def enc_params_no_biases(d, d_ff):
    return 4 * d * d + 2 * d * d_ff + 4 * d


def stub(*args):
    return None


CASES = [
    (ex.check_layernorm_backward, ln_backward, ln_backward_no_xhat_term),
    (ex.check_post_ln_residual_backward, post_ln_backward, post_ln_no_identity),
    (ex.check_pre_ln_residual_backward, pre_ln_backward, pre_ln_no_identity),
    (ex.check_embedding_backward, emb_backward, emb_backward_assign),
    (ex.check_tied_embedding_grad, tied_grad, tied_grad_output_only),
    (ex.check_sinusoidal_pe, pe, pe_swapped),
    (ex.check_pe_similarity, pe_sim, pe_sim_sin),
    (ex.check_shift_right, shift_right, shift_right_swapped),
    (ex.check_encoder_layer_params, enc_params, enc_params_no_biases),
    (ex.check_transformer_params, model_params, model_params_untied),
]
IDS = [c[0].__name__ for c in CASES]


def test_every_checker_is_covered():
    checkers = {n for n in dir(ex) if n.startswith("check_")}
    assert checkers == set(IDS)


@pytest.mark.parametrize("checker, right, wrong", CASES, ids=IDS)
def test_correct_answer_passes(checker, right, wrong, capsys):
    assert checker(right) is True
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("checker, right, wrong", CASES, ids=IDS)
def test_wrong_answer_raises(checker, right, wrong):
    with pytest.raises(AssertionError):
        checker(wrong)


@pytest.mark.parametrize("checker, right, wrong", CASES, ids=IDS)
def test_stub_returns_false_without_raising(checker, right, wrong, capsys):
    assert checker(stub) is False
    assert "not attempted yet" in capsys.readouterr().out


def test_wrong_shape_message_names_expected_and_got():
    with pytest.raises(AssertionError, match=r"expected shape \(7, 4\), got \(4, 7\)"):
        ex.check_embedding_backward(lambda dout, ids, V: emb_backward(dout, ids, V).T.copy())


def test_wrong_values_message_gives_both_errors():
    with pytest.raises(AssertionError, match="vs the reference.*vs the numerical gradient"):
        ex.check_embedding_backward(emb_backward_assign)


def test_float_token_ids_are_rejected():
    with pytest.raises(AssertionError, match="integer"):
        ex.check_shift_right(lambda *a: tuple(x.astype(float) for x in shift_right(*a)))


def test_untied_count_gets_a_hint():
    with pytest.raises(AssertionError, match="count it once"):
        ex.check_transformer_params(model_params_untied)
