"""The exercise checkers of lessons 4-7: a right answer passes, a wrong one raises
AssertionError, the untouched stub (returns None) returns False without raising."""

import math

import numpy as np
import pytest
from checker_contract import contract_tests

from lessonkit.exercises import lessons_4_7 as ex

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
    V = dlogits.shape[-1]
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


# -- wrong answers: the classic mistakes, each with the hint its checker must give ----

def _ln_variant(ddof=0, eps_outside=False, mean_path=True, var_path=True, use_gamma=True):
    def backward(dy, x, gamma, eps=1e-5):
        d = x.shape[-1]
        xc = x - x.mean(-1, keepdims=True)
        var = (xc ** 2).sum(-1, keepdims=True) / (d - ddof)
        rstd = 1.0 / (np.sqrt(var) + eps) if eps_outside else 1.0 / np.sqrt(var + eps)
        xh = xc * rstd
        g = dy * gamma if use_gamma else dy
        dx = g - (g.mean(-1, keepdims=True) if mean_path else 0) - (xh * (g * xh).mean(-1, keepdims=True) if var_path else 0)
        return rstd * dx, (dy * xh).reshape(-1, d).sum(0), dy.reshape(-1, d).sum(0)
    return backward


def _ln_dgamma_with_x(dy, x, gamma, eps=1e-5):
    dx, _, dbeta = ln_backward(dy, x, gamma, eps)
    return dx, (dy * x).reshape(-1, x.shape[-1]).sum(0), dbeta


def _ln_dbeta_not_summed(dy, x, gamma, eps=1e-5):
    dx, dgamma, _ = ln_backward(dy, x, gamma, eps)
    return dx, dgamma, dy


def _post_ln_dz(dy, x, W, eps):
    return ln_backward(dy, x + x @ W, np.ones(x.shape[-1]), eps)[0]


def post_ln_no_identity(dy, x, W, eps=1e-5):
    dx, dW = post_ln_backward(dy, x, W, eps)
    return dx - _post_ln_dz(dy, x, W, eps), dW


def post_ln_skip_carries_dy(dy, x, W, eps=1e-5):
    dz = _post_ln_dz(dy, x, W, eps)
    return dy + dz @ W.T, post_ln_backward(dy, x, W, eps)[1]


def post_ln_dW_transposed(dy, x, W, eps=1e-5):
    dx, dW = post_ln_backward(dy, x, W, eps)
    return dx, dW.T


def post_ln_dW_from_dy(dy, x, W, eps=1e-5):
    d = x.shape[-1]
    return post_ln_backward(dy, x, W, eps)[0], x.reshape(-1, d).T @ dy.reshape(-1, d)


def pre_ln_no_identity(dy, x, W, eps=1e-5):
    dx, dW = pre_ln_backward(dy, x, W, eps)
    return dx - dy, dW


def pre_ln_dW_from_x(dy, x, W, eps=1e-5):
    d = x.shape[-1]
    return pre_ln_backward(dy, x, W, eps)[0], x.reshape(-1, d).T @ dy.reshape(-1, d)


def pre_ln_branch_skips_the_norm(dy, x, W, eps=1e-5):
    return dy + dy @ W.T, pre_ln_backward(dy, x, W, eps)[1]


def emb_backward_assign(dout, ids, V):
    d = dout.shape[-1]
    dE = np.zeros((V, d))
    dE[ids.reshape(-1)] = dout.reshape(-1, d) * math.sqrt(d)   # repeats overwrite instead of adding
    return dE


def emb_backward_fancy_add(dout, ids, V):
    d = dout.shape[-1]
    dE = np.zeros((V, d))
    dE[ids.reshape(-1)] += dout.reshape(-1, d) * math.sqrt(d)  # buffered: one update per repeated row
    return dE


def emb_backward_no_scale(dout, ids, V):
    return emb_backward(dout, ids, V) / math.sqrt(dout.shape[-1])


def tied_grad_output_only(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits):
    return np.einsum("btv,btd->vd", dlogits, x_dec)


def tied_grad_no_src(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits):
    return tied_grad(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits) - emb_backward(d_src, src_ids, dlogits.shape[-1])


def tied_grad_no_output(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits):
    V = dlogits.shape[-1]
    return emb_backward(d_src, src_ids, V) + emb_backward(d_tgt, tgt_ids, V)


def tied_grad_output_transposed(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits):
    return tied_grad(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits).T


def tied_grad_fancy_add(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits):
    V = dlogits.shape[-1]
    return (emb_backward_fancy_add(d_src, src_ids, V) + emb_backward_fancy_add(d_tgt, tgt_ids, V)
            + np.einsum("btv,btd->vd", dlogits, x_dec))


def pe_swapped(max_len, d):
    out = np.empty((max_len, d))
    table = pe(max_len, d)
    out[:, 0::2], out[:, 1::2] = table[:, 1::2], table[:, 0::2]
    return out


def pe_concatenated(max_len, d):
    table = pe(max_len, d)
    return np.concatenate([table[:, 0::2], table[:, 1::2]], axis=1)


def pe_per_column_frequency(max_len, d):
    pos = np.arange(max_len)[:, None]
    w = 10000.0 ** (-np.arange(d) / d)
    out = np.empty((max_len, d))
    out[:, 0::2], out[:, 1::2] = np.sin(pos * w[0::2]), np.cos(pos * w[1::2])
    return out


def pe_exponent_without_two(max_len, d):
    pos = np.arange(max_len)[:, None]
    w = 10000.0 ** (-np.arange(d // 2) / d)
    out = np.empty((max_len, d))
    out[:, 0::2], out[:, 1::2] = np.sin(pos * w), np.cos(pos * w)
    return out


def pe_sim_sin(k, d):
    w = 10000.0 ** (-np.arange(0, d, 2) / d)
    return np.sin(np.asarray(k)[:, None] * w).sum(-1)


def pe_sim_normalized(k, d):
    return pe_sim(k, d) / (d / 2)


def pe_sim_all_columns(k, d):
    return np.cos(np.asarray(k)[:, None] * 10000.0 ** (-np.arange(d) / d)).sum(-1)


def shift_right_swapped(tgt_seqs, pad_id, bos_id, eos_id):
    tgt_in, tgt_out = shift_right(tgt_seqs, pad_id, bos_id, eos_id)
    return tgt_out, tgt_in


def shift_right_too_short(tgt_seqs, pad_id, bos_id, eos_id):
    tgt_in, tgt_out = shift_right(tgt_seqs, pad_id, bos_id, eos_id)
    return tgt_in[:, :-1], tgt_out[:, :-1]


def shift_right_no_eos(tgt_seqs, pad_id, bos_id, eos_id):
    tgt_in, tgt_out = shift_right(tgt_seqs, pad_id, bos_id, eos_id)
    tgt_out = np.where(tgt_out == eos_id, pad_id, tgt_out)
    return tgt_in, tgt_out


def model_params_untied(V, d, d_ff, N):
    return model_params(V, d, d_ff, N) + 2 * V * d


def model_params_no_cross_attention(V, d, d_ff, N):
    return V * d + N * (2 * enc_params(d, d_ff))


def enc_params_no_biases(d, d_ff):
    return 4 * d * d + 2 * d * d_ff + 4 * d


def enc_params_one_norm(d, d_ff):
    return enc_params(d, d_ff) - 2 * d




CASES = {
    "check_layernorm_backward": (ln_backward, [
        ("no x_hat term", _ln_variant(var_path=False), r"dx: wrong values.*variance path is missing"),
        ("unbiased variance", _ln_variant(ddof=1), r"unbiased variance"),
        ("eps outside the root", _ln_variant(eps_outside=True), r"eps is outside the square root"),
        ("mean and variance as constants", _ln_variant(mean_path=False, var_path=False), r"treated the mean"),
        ("no mean term", _ln_variant(mean_path=False), r"mean path is missing"),
        ("gamma forgotten", _ln_variant(use_gamma=False), r"gamma is missing"),
        ("dgamma with x", _ln_dgamma_with_x, r"dgamma: wrong values.*not x"),
        ("dbeta not summed", _ln_dbeta_not_summed, r"dbeta: shape mismatch.*sum dy over batch"),
    ]),
    "check_post_ln_residual_backward": (post_ln_backward, [
        ("no skip term", post_ln_no_identity, r"skip connection's term is missing"),
        ("skip carries dy", post_ln_skip_carries_dy, r"carries dz"),
        ("dW transposed", post_ln_dW_transposed, r"dW: wrong values.*transposed"),
        ("dW from dy", post_ln_dW_from_dy, r"dW must use dz"),
    ]),
    "check_pre_ln_residual_backward": (pre_ln_backward, [
        ("no skip term", pre_ln_no_identity, r"skip connection's term is missing"),
        ("dW from x", pre_ln_dW_from_x, r"input is LN\(x\), not x"),
        ("branch skips the norm", pre_ln_branch_skips_the_norm, r"back through the LayerNorm"),
    ]),
    "check_embedding_backward": (emb_backward, [
        ("assignment", emb_backward_assign, r"only one of its updates.*np.add.at"),
        ("fancy-index +=", emb_backward_fancy_add, r"only one of its updates.*np.add.at"),
        ("no sqrt(d_model)", emb_backward_no_scale, r"sqrt\(d_model\) factor is missing"),
        ("transposed", lambda dout, ids, V: emb_backward(dout, ids, V).T.copy(),
         r"shape mismatch: expected \(7, 4\), got \(4, 7\)"),
    ]),
    "check_tied_embedding_grad": (tied_grad, [
        ("output projection only", tied_grad_output_only, r"only the output projection's part"),
        ("no source embedding", tied_grad_no_src, r"source embedding's part is missing"),
        ("no output projection", tied_grad_no_output, r"output projection's part .* is missing"),
        ("fancy-index +=", tied_grad_fancy_add, r"only one of its updates"),
        ("transposed", tied_grad_output_transposed, r"shape mismatch: expected \(9, 4\), got \(4, 9\)"),
    ]),
    "check_sinusoidal_pe": (pe, [
        ("sin and cos swapped", pe_swapped, r"sin and cos swapped"),
        ("concatenated layout", pe_concatenated, r"concatenated.*interleaves"),
        ("frequency per column", pe_per_column_frequency, r"odd columns have their own frequency"),
        ("exponent i/d", pe_exponent_without_two, r"exponent is 2i/d_model"),
    ]),
    "check_pe_similarity": (pe_sim, [
        ("sin instead of cos", pe_sim_sin, r"sin instead of cos"),
        ("cosine similarity", pe_sim_normalized, r"cosine similarity"),
        ("d_model frequencies", pe_sim_all_columns, r"d_model/2 frequencies"),
    ]),
    "check_shift_right": (shift_right, [
        ("in and out swapped", shift_right_swapped, r"swapped"),
        ("no room for bos/eos", shift_right_too_short, r"longest sentence \+ 1"),
        ("no eos", shift_right_no_eos, r"<eos> is missing"),
        ("float ids", lambda *a: tuple(x.astype(float) for x in shift_right(*a)), r"integer"),
    ]),
    "check_encoder_layer_params": (enc_params, [
        ("no biases", enc_params_no_biases, r"every bias is missing"),
        ("one LayerNorm", enc_params_one_norm, r"one LayerNorm short"),
        ("a float", lambda d, d_ff: float(enc_params(d, d_ff)), r"expected an int"),
    ]),
    "check_transformer_params": (model_params, [
        ("untied", model_params_untied, r"count it once"),
        ("no cross-attention", model_params_no_cross_attention, r"encoder-decoder attention"),
    ]),
}


(test_every_checker_has_cases, test_correct_answer_passes, test_stub_is_not_attempted,
 test_wrong_answer_gets_its_hint) = contract_tests(ex, CASES)


def test_wrong_values_message_gives_both_errors():
    with pytest.raises(AssertionError, match="vs the reference and .* vs the numerical gradient"):
        ex.check_embedding_backward(emb_backward_assign)


def test_one_tolerance_for_every_lesson():
    from lessonkit.exercises import _common, lessons_0_3
    from minitransformer.gradcheck import DEFAULT_TOL
    assert _common.TOL == DEFAULT_TOL
    for module in (ex, lessons_0_3):
        assert not [n for n in vars(module) if "TOL" in n.upper()], f"{module.__name__} defines its own tolerance"
