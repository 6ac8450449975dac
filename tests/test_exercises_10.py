"""The exercise checkers of lesson 10 pass a right answer, reject wrong ones with a hint that
names the mistake, and let an untouched stub through without raising (so the notebook runs
in CI). Also: the checkers' references agree with the package (decoding.beam_search's step,
metrics.corpus_bleu), and the greedy cases cover the three behaviours they are meant to."""

import math
from collections import Counter

import numpy as np
import pytest

from lessonkit.exercises import lesson_10 as ex
from minitransformer.decoding import beam_search, greedy_decode
from minitransformer.layers.loss import log_softmax
from minitransformer.layers.masks import padding_mask
from minitransformer.layers.parameter import eval_mode
from minitransformer.model import KVCache


def stub(*args, **kwargs):
    return None


# -- right answers (the same as the notebook's "Solutions" section) --------------------

def beam_step_ok(live_logp, next_logp, k):
    V = next_logp.shape[1]
    cand = (live_logp[:, None] + next_logp).reshape(-1)
    best = np.argsort(-cand, kind="stable")[:k]
    return best // V, best % V, cand[best]


def bleu_ok(hyps, refs):
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for h, ref in zip(hyps, refs):
        c, r = c + len(h), r + len(ref)
        for n in range(1, 5):
            hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            rc = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
            totals[n - 1] += sum(hc.values())
            matches[n - 1] += sum(min(cnt, rc[g]) for g, cnt in hc.items())
    bp = 1.0 if c >= r else math.exp(1 - r / c)
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 4)


def make_greedy(*, ban=True, stop=True, keep_eos=False, keep_bos=False, steps_delta=0, use_eval=True,
                use_decode=False):
    def fn(model, src, bos_id, eos_id, max_len):
        ctx = eval_mode(model) if use_eval else _null()
        with ctx:
            memory = model.encode(src)
            src_mask = padding_mask(src, model.cfg.pad_id)
            cache = KVCache(model, memory, src_mask, max_len)
            out, y = ([bos_id] if keep_bos else []), bos_id
            for t in range(max_len + steps_delta):
                if use_decode:
                    logits = model.decode(np.array([[bos_id] + out]), memory, src_mask)[0, -1]
                else:
                    logits = model.decode_step(np.array([[y]]), t, cache)[0]
                if ban:
                    logits[[model.cfg.pad_id, bos_id]] = -np.inf
                y = int(logits.argmax())
                if stop and y == eos_id:
                    if keep_eos:
                        out.append(y)
                    break
                out.append(y)
        return out
    return fn


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- the stubs ----------------------------------------------------------------------------

@pytest.mark.parametrize("check", [ex.check_beam_step, ex.check_corpus_bleu, ex.check_greedy_decode])
def test_untouched_stub_is_not_attempted(check, capsys):
    assert check(stub).status == "not attempted"
    assert ex.NOT_ATTEMPTED in capsys.readouterr().out


# -- exercise 1: one beam step -------------------------------------------------------------

def test_beam_step_right_answer(capsys):
    assert ex.check_beam_step(beam_step_ok).correct
    assert "correct" in capsys.readouterr().out


def test_beam_step_reference_is_the_package_step():
    # beam_search's first two steps, redone with reference_beam_step on the model's own
    # log-probabilities, give the same top hypotheses as the package's n-best list.
    from minitransformer import backend
    from minitransformer.model import Transformer, TransformerConfig
    backend.set_default_dtype("float64")
    try:
        model = Transformer(TransformerConfig(vocab_size=11, d_model=16, h=2, N=1, d_ff=32, P_drop=0.0,
                                              eps_ls=0.0, max_len=16), seed=3)
    finally:
        backend.set_default_dtype("float32")
    src = np.array([[5, 6, 7, 8, 2]])
    k = 3
    with eval_mode(model):
        memory = model.encode(src)
        lp0 = log_softmax(model.decode(np.array([[1]]), memory, padding_mask(src, 0))[0, -1])
        lp0[[0, 1]] = -np.inf
        live = np.array([0.0] + [-np.inf] * (k - 1))
        parent, token, score = ex.reference_beam_step(live, np.tile(lp0, (k, 1)), k)
        assert (parent == 0).all()
        lp1 = np.stack([log_softmax(model.decode(np.array([[1, t]]), memory, padding_mask(src, 0))[0, -1])
                        for t in token])
        lp1[:, [0, 1, 2]] = -np.inf                     # no <eos> either: compare live hypotheses only
        parent2, token2, score2 = ex.reference_beam_step(score, lp1, k)
    best = beam_search(model, src, 1, None, beam_size=k, alpha=0.0, max_len=2, n_best=k)[0]
    assert [seq for seq, _ in best] == [[int(token[p]), int(t)] for p, t in zip(parent2, token2)]
    np.testing.assert_allclose([s for _, s in best], score2, rtol=1e-12)


def swapped(parent, token, logp):
    return token, parent, logp


@pytest.mark.parametrize("wrong, hint", [
    (lambda live, nxt, k: beam_step_ok(np.zeros_like(live), nxt, k), "parent's log P"),
    (lambda live, nxt, k: (np.arange(k), nxt.argmax(1), live + nxt.max(1)), "best extension of each"),
    (lambda live, nxt, k: tuple(a[::-1] for a in beam_step_ok(live, nxt, k)), "descending"),
    (lambda live, nxt, k: swapped(*beam_step_ok(live, nxt, k)), "parent = f // V"),
])
def test_beam_step_wrong_answers_get_hints(wrong, hint):
    with pytest.raises(AssertionError, match="hint") as err:
        ex.check_beam_step(wrong)
    assert hint in str(err.value)


# -- exercise 2: corpus BLEU ---------------------------------------------------------------

def test_bleu_right_answer(capsys):
    assert ex.check_corpus_bleu(bleu_ok).correct
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, hint", [
    ({"clip": False}, "not clipped"),
    ({"brevity": "none"}, "brevity penalty is missing"),
    ({"brevity": "inverted"}, "upside down"),
    ({"mean": "arithmetic"}, "geometric mean"),
    ({"scale": 1.0}, "0..100"),
])
def test_bleu_wrong_answers_get_hints(kwargs, hint):
    with pytest.raises(AssertionError, match="hint") as err:
        ex.check_corpus_bleu(lambda h, r: ex.reference_bleu(h, r, **kwargs))
    assert hint in str(err.value)


def test_bleu_mean_of_sentence_scores_gets_a_hint():
    def sentence_mean(hyps, refs):
        return float(np.mean([ex.reference_bleu([h], [r]) for h, r in zip(hyps, refs)]))
    with pytest.raises(AssertionError, match="sums the clipped counts"):
        ex.check_corpus_bleu(sentence_mean)


def test_bleu_wrong_type_is_named():
    with pytest.raises(AssertionError, match="expected one number"):
        ex.check_corpus_bleu(lambda h, r: [50.0])


def test_bleu_corpora_exercise_every_part():
    for hyps, refs in ex._BLEU_CORPORA:
        c, r = sum(map(len, hyps)), sum(map(len, refs))
        assert c < r                                           # the brevity penalty applies
        right = ex.reference_bleu(hyps, refs)
        assert 0 < right < 100
        for kwargs in ({"clip": False}, {"brevity": "none"}, {"brevity": "inverted"}, {"mean": "arithmetic"}):
            assert abs(ex.reference_bleu(hyps, refs, **kwargs) - right) > 1e-6, kwargs


# -- exercise 3: greedy decoding with the cache ---------------------------------------------

def test_greedy_cases_cover_eos_length_and_banned_tokens():
    cases = ex._greedy_cases()
    assert len(cases) == 3
    (m1, s1, L1), (m2, s2, L2), (m3, s3, L3) = cases
    assert len(greedy_decode(m1, s1, ex.BOS, ex.EOS, max_len=L1)[0]) < L1          # stops at <eos>
    assert len(greedy_decode(m2, s2, ex.BOS, ex.EOS, max_len=L2)[0]) == L2         # runs to max_len
    assert ex._unbanned_greedy(m3, s3, L3) != greedy_decode(m3, s3, ex.BOS, ex.EOS, max_len=L3)[0]


def test_greedy_right_answer(capsys):
    assert ex.check_greedy_decode(make_greedy()).correct
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, hint", [
    ({"keep_eos": True}, "ends with <eos>"),
    ({"keep_bos": True}, "starts with <bos>"),
    ({"ban": False}, "<pad> or <bos>"),
    ({"stop": False}, "after <eos>"),
    ({"steps_delta": -1}, "max_len counts"),
    ({"use_eval": False}, "eval_mode"),
])
def test_greedy_wrong_answers_get_hints(kwargs, hint):
    with pytest.raises(AssertionError, match="hint") as err:
        ex.check_greedy_decode(make_greedy(**kwargs))
    assert hint in str(err.value)


def test_greedy_without_the_cache_is_refused():
    with pytest.raises(AssertionError, match="decode_step"):
        ex.check_greedy_decode(make_greedy(use_decode=True))


def test_greedy_checker_leaves_the_weights_alone():
    def vandal(model, src, bos_id, eos_id, max_len):
        model.E.data[...] = 0.0
        return []
    with pytest.raises(AssertionError):
        ex.check_greedy_decode(vandal)
    assert ex.check_greedy_decode(make_greedy()).correct
