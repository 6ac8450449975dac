"""The exercise checkers of lesson 11: a right answer passes, a wrong one raises
AssertionError (naming the likely mistake), the untouched stub (returns None)
returns False without raising."""

import math

import numpy as np
import pytest

from lessonkit.exercises import lesson_11 as ex

# -- correct answers, written independently of the package --------------------------


def learned_pe_backward(dout, offset, max_len):
    _, S, d = dout.shape
    dP = np.zeros((max_len, d))
    for s in range(S):
        dP[offset + s] = dout[:, s].sum(axis=0)
    return dout.copy(), dP


def perplexity(logits, targets, pad_id):
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
    real = targets != pad_id
    return math.exp(nll[real].sum() / real.sum())


def variation_params(V, d_model, h, d_k, d_v, d_ff, N, learned_max_len):
    qk = 2 * (d_model * h * d_k + h * d_k)
    v = d_model * h * d_v + h * d_v
    o = h * d_v * d_model + d_model
    attn = qk + v + o
    ffn = d_model * d_ff + d_ff + d_ff * d_model + d_model
    return (V * d_model + learned_max_len * d_model
            + N * (attn + ffn + 4 * d_model) + N * (2 * attn + ffn + 6 * d_model))


# -- the three outcomes ---------------------------------------------------------------

CASES = [
    (ex.check_learned_pe_backward, learned_pe_backward),
    (ex.check_perplexity, perplexity),
    (ex.check_variation_params, variation_params),
]


@pytest.mark.parametrize("check, answer", CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_right_answer_passes(check, answer, capsys):
    assert check(answer).correct
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("check", [c for c, _ in CASES], ids=lambda c: c.__name__)
def test_stub_is_not_attempted(check, capsys):
    assert check(lambda *a: None).status == "not attempted"
    assert ex.NOT_ATTEMPTED in capsys.readouterr().out


# -- wrong answers, each named by its hint ----------------------------------------------


def _raises(check, answer, *phrases):
    with pytest.raises(AssertionError) as info:
        check(answer)
    for phrase in phrases:
        assert phrase in str(info.value), str(info.value)


def test_learned_pe_mistakes():
    def rows_from_zero(dout, offset, max_len):
        dx, dP = learned_pe_backward(dout, 0, max_len)
        return dx, dP

    def batch_mean(dout, offset, max_len):
        dx, dP = learned_pe_backward(dout, offset, max_len)
        return dx, dP / dout.shape[0]

    def only_used_rows(dout, offset, max_len):
        return dout, dout.sum(axis=0)

    def zero_dx(dout, offset, max_len):
        return np.zeros_like(dout), learned_pe_backward(dout, offset, max_len)[1]

    _raises(ex.check_learned_pe_backward, rows_from_zero, "dP", "offset .. offset + S - 1")
    _raises(ex.check_learned_pe_backward, batch_mean, "hint: the mean over the batch")
    _raises(ex.check_learned_pe_backward, only_used_rows, "shape mismatch", "only the S rows used")
    _raises(ex.check_learned_pe_backward, zero_dx, "dx", "dx = dout, not 0")
    _raises(ex.check_learned_pe_backward, lambda d, o, m: d, "expected a tuple of 2 arrays")


def test_perplexity_mistakes():
    def with_pads(logits, targets, pad_id):
        return perplexity(logits, targets, pad_id=-1)

    def base_two(logits, targets, pad_id):
        return 2 ** math.log(perplexity(logits, targets, pad_id))

    def nll(logits, targets, pad_id):
        return math.log(perplexity(logits, targets, pad_id))

    def per_sentence(logits, targets, pad_id):
        return float(np.mean([perplexity(logits[b:b + 1], targets[b:b + 1], pad_id) for b in range(len(logits))]))

    _raises(ex.check_perplexity, with_pads, "pad positions are counted")
    _raises(ex.check_perplexity, base_two, "2 to the power")
    _raises(ex.check_perplexity, nll, "perplexity is its exponential")
    _raises(ex.check_perplexity, per_sentence, "per-sentence perplexities")
    _raises(ex.check_perplexity, lambda *a: [1.0, 2.0], "expected one number")


def test_variation_params_mistakes():
    def qk_with_d_v(V, d_model, h, d_k, d_v, d_ff, N, L):
        return variation_params(V, d_model, h, d_v, d_v, d_ff, N, L)

    def table_twice(V, d_model, h, d_k, d_v, d_ff, N, L):
        return variation_params(V, d_model, h, d_k, d_v, d_ff, N, 2 * L)

    def no_table(V, d_model, h, d_k, d_v, d_ff, N, L):
        return variation_params(V, d_model, h, d_k, d_v, d_ff, N, 0)

    def untied(V, d_model, h, d_k, d_v, d_ff, N, L):
        return variation_params(V, d_model, h, d_k, d_v, d_ff, N, L) + 2 * V * d_model

    _raises(ex.check_variation_params, no_table, "learned positional table has learned_max_len")
    _raises(ex.check_variation_params, table_twice, "counted twice")
    _raises(ex.check_variation_params, untied, "tied three ways")
    _raises(ex.check_variation_params, qk_with_d_v, "W^Q and W^K have h·d_k columns")
    _raises(ex.check_variation_params, lambda *a: 1.5, "expected an int")

    def vo_with_d_k(V, d_model, h, d_k, d_v, d_ff, N, L):      # every projection sized with the key size
        return variation_params(V, d_model, h, d_k, d_k, d_ff, N, L)

    def v_with_d_k(V, d_model, h, d_k, d_v, d_ff, N, L):       # W^V with d_k, W^O right
        wrong_v = (d_model * h * d_k + h * d_k) - (d_model * h * d_v + h * d_v)
        return variation_params(V, d_model, h, d_k, d_v, d_ff, N, L) + 3 * N * wrong_v

    def o_with_d_k(V, d_model, h, d_k, d_v, d_ff, N, L):       # W^O with d_k, W^V right
        return variation_params(V, d_model, h, d_k, d_v, d_ff, N, L) + 3 * N * (h * d_k - h * d_v) * d_model

    _raises(ex.check_variation_params, vo_with_d_k, "W^V and W^O sized with the key size d_k")
    _raises(ex.check_variation_params, v_with_d_k, "W^V sized with the key size d_k")
    _raises(ex.check_variation_params, o_with_d_k, "W^O sized with the key size d_k")
