"""Checking cells for the exercises of lesson 10 (decoding and translation, §6.1).

The checkers follow the contract documented at the top of ``_common``: a stub that
returns None prints ``NOT_ATTEMPTED`` and returns a false Verdict; a wrong answer raises
WrongAnswer naming the likely mistake; a right one prints ``correct`` and returns
a true Verdict. Inputs are fixed and seeded, handed over as copies.

check_beam_step       one step of beam search: the k best extensions of k live
                      hypotheses, chosen over all k·V candidates together
check_corpus_bleu     corpus BLEU from token lists: clipped n-gram counts summed over
                      the corpus, brevity penalty, geometric mean (Papineni et al. 2002)
check_greedy_decode   greedy decoding of one sentence, one position at a time with the
                      key/value cache (``encode``, ``KVCache``, ``decode_step``)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter

import numpy as np

from minitransformer import backend
from minitransformer.data.tasks import reverse_pairs, synthetic_vocab
from minitransformer.decoding import greedy_decode
from minitransformer.layers.dropout import Dropout
from minitransformer.layers.masks import padding_mask
from minitransformer.layers.parameter import eval_mode
from minitransformer.metrics import corpus_bleu
from minitransformer.model import KVCache, Transformer, TransformerConfig
from minitransformer.train import Trainer, TrainSettings, encode_pairs

from ..i18n import tr
from ._common import (
    NOT_ATTEMPTED,
    WrongAnswer,
    built,
    case_rng,
    check_array,
    describe,
    drive,
    edge,
    exercise,
    not_attempted,
    report_correct,
    say,
    unpack,
    visible,
)

__all__ = [
    "NOT_ATTEMPTED",
    "check_beam_step",
    "check_corpus_bleu",
    "check_greedy_decode",
    "reference_beam_step",
    "reference_bleu",
]


# -- Exercise 10.1: one step of beam search -------------------------------------------------

def reference_beam_step(live_logp, next_logp, k: int):
    """The k best extensions, best first: (parent (k,), token (k,), logp (k,)).

    live_logp: (k,) log P of the live hypotheses (-inf: an empty slot);
    next_logp: (k, V) log P of the next token after each of them. Candidate (j, y)
    scores live_logp[j] + next_logp[j, y]; ties go to the lower flat index j·V + y,
    as in ``decoding.beam_search``.
    """
    V = next_logp.shape[1]
    cand = (live_logp[:, None] + next_logp).reshape(-1)           # (k·V,)
    best = np.argsort(-cand, kind="stable")[:k]                   # stable: ties to the lower index
    return best // V, best % V, cand[best]


def _log_softmax_rows(x):
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def _beam_cases():
    rng = case_rng(100)
    if not visible():
        cases = []
        for kind in ("all live", edge(["one live", "ties", "all live"])):
            k = int(rng.integers(2, 7))
            V = int(rng.integers(k, 30))                    # at least k candidates for one live slot
            live = np.sort(-rng.uniform(0.1, 6.0, size=k))[::-1].copy()
            if kind == "one live":
                live[1:] = -np.inf
            nxt = _log_softmax_rows(rng.standard_normal((k, V)) * 2.0)
            if kind == "ties":                          # equal candidates: the lower flat index first
                nxt[1] = nxt[0]
                live[1] = live[0]
            cases.append((live, nxt, k))
        return cases
    cases = []
    # A beam in mid-search: four live hypotheses, one much better than the others, so
    # that it supplies several of the k best extensions (the best extension of each
    # hypothesis is then the wrong answer).
    k, V = 4, 9
    live = np.array([-0.3, -2.5, -2.9, -3.4])
    nxt = _log_softmax_rows(rng.standard_normal((k, V)) * 1.5)
    cases.append((live, nxt, k))
    # Step 0: only slot 0 is live (the others are -inf), as beam_search starts.
    k, V = 3, 7
    live = np.array([0.0, -np.inf, -np.inf])
    nxt = _log_softmax_rows(rng.standard_normal((k, V)) * 2.0)
    cases.append((live, nxt, k))
    # A wider vocabulary and a beam of 5.
    k, V = 5, 23
    live = np.sort(-rng.uniform(0.5, 6.0, size=k))[::-1].copy()
    nxt = _log_softmax_rows(rng.standard_normal((k, V)) * 2.0)
    cases.append((live, nxt, k))
    return cases


def _as_index_array(name, value, k):
    arr = np.asarray(backend.to_numpy(value)) if value is not None else None
    if arr is None or arr.shape != (k,):
        raise WrongAnswer(tr(f"{name}: expected {k} integers (one per beam slot), got {describe(value)}"))
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise WrongAnswer(tr(f"{name}: expected integer indices, got dtype {arr.dtype}"))
    return arr.astype(np.int64)


@exercise("10.1")
def check_beam_step(fn) -> bool:
    """fn(live_logp (k,), next_logp (k, V), k) -> (parent (k,), token (k,), logp (k,)), best first."""
    cases = _beam_cases()
    first = fn(*(np.copy(a) if isinstance(a, np.ndarray) else a for a in cases[0]))
    if not_attempted(first):
        return False
    errors = {}
    for n, (live, nxt, k) in enumerate(cases):
        got = first if n == 0 else fn(live.copy(), nxt.copy(), k)
        parent, token, logp = unpack(got, ["parent", "token", "logp"])
        parent, token = _as_index_array("parent", parent, k), _as_index_array("token", token, k)
        ref_parent, ref_token, ref_logp = reference_beam_step(live, nxt, k)
        V = nxt.shape[1]
        where = f"case {n + 1} (k={k}, V={V}{', only slot 0 live' if np.isinf(live[1:]).all() else ''})"
        got_logp = np.asarray(backend.to_numpy(logp), dtype=np.float64) if logp is not None else None
        # The usual mistakes, each built here and compared with the answer.
        no_parent = np.sort(nxt.reshape(-1))[::-1][:k]
        per_row = np.array([live[j] + nxt[j].max() for j in range(k)])
        if got_logp is not None and got_logp.shape == (k,):
            if np.allclose(got_logp, no_parent) and not np.allclose(no_parent, ref_logp):
                raise WrongAnswer(
                    tr(f"{where}: logp holds the k largest next-token log-probabilities alone\n  hint: a "
                       "candidate's score is its parent's log P plus the new token's: live_logp[j] + next_logp[j, y]"))
            if np.allclose(np.sort(got_logp)[::-1], np.sort(per_row)[::-1]) \
                    and not np.allclose(np.sort(per_row), np.sort(ref_logp)):
                raise WrongAnswer(
                    tr(f"{where}: you kept the best extension of each hypothesis\n  hint: choose the k best of "
                       "all k·V candidates together (flatten them): one strong hypothesis may supply several, "
                       "and an empty slot (-inf) supplies none"))
            if np.allclose(got_logp, ref_logp[::-1]) and not np.allclose(ref_logp, ref_logp[::-1]):
                raise WrongAnswer(tr(f"{where}: the right k candidates in the wrong order\n  hint: best first "
                                        "(the largest log P first): sort in descending order"))
        if not (np.array_equal(parent, ref_parent) and np.array_equal(token, ref_token)):
            expected = list(zip(ref_parent.tolist(), ref_token.tolist()))
            msg = (tr(f"{where}: wrong (parent, token) pairs: expected {expected}, "
                      f"got {list(zip(parent.tolist(), token.tolist()))}"))
            flat = ref_parent * V + ref_token
            if (np.array_equal(parent, flat % V) and np.array_equal(token, flat // V)) or (
                    np.array_equal(parent, flat // k) and np.array_equal(token, flat % k)):
                msg += ("\n  hint: " + tr("the flat index of candidate (j, y) in the (k, V) table is f = j·V + y, "
                                         "so parent = f // V and token = f % V"))
            raise WrongAnswer(msg)
        errors[f"logp, case {n + 1}"] = check_array("logp", logp, ref_logp)
    return report_correct(errors)


# -- Exercise 10.2: corpus BLEU ------------------------------------------------------------------

def _ngrams(tokens, n):
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def reference_bleu(hyps, refs, clip=True, brevity="right", mean="geometric", scale=100.0):
    """Corpus BLEU-4 without smoothing (every order must have a match), with switches that
    build the usual wrong answers: ``clip=False``, ``brevity`` "right" | "none" |
    "inverted", ``mean`` "geometric" | "arithmetic", ``scale`` 100 or 1."""
    matches, totals = [0] * 4, [0] * 4
    c = r = 0
    for h, ref in zip(hyps, refs):
        c, r = c + len(h), r + len(ref)
        for n in range(1, 5):
            hc, rc = _ngrams(h, n), _ngrams(ref, n)
            totals[n - 1] += sum(hc.values())
            matches[n - 1] += sum(min(cnt, rc[g]) if clip else cnt * (g in rc) for g, cnt in hc.items())
    p = [m / t for m, t in zip(matches, totals)]
    if mean == "geometric" and min(p) == 0.0:
        return 0.0                                      # an order without a match: no smoothing here
    bp = {"right": 1.0 if c >= r else math.exp(1 - r / c), "none": 1.0,
          "inverted": 1.0 if c >= r else math.exp(1 - c / r)}[brevity]
    avg = math.exp(sum(math.log(x) for x in p) / 4) if mean == "geometric" else sum(p) / 4
    return scale * bp * avg


# Three small corpora (pre-tokenized). Each sentence shares at least one 4-gram with its
# reference, so no order is empty and smoothing never enters; in each the hypotheses are
# shorter than the references in total (the brevity penalty applies) and some words are
# repeated more often than the reference has them (clipping matters).
_BLEU_CORPORA = [
    ([["the", "cat", "sat", "on", "the", "mat", "the", "the"], ["a", "dog", "ran", "in", "the", "park"]],
     [["the", "cat", "sat", "on", "the", "red", "mat", "today"], ["a", "dog", "ran", "in", "the", "big", "park", "."]]),
    ([["1951년", "6월", "4일", "월요일"], ["3월", "4일", "월요일", "월요일"],
      ["2024년", "3월", "5일", "화요일"]],
     [["1951년", "6월", "4일", "월요일"], ["1951년", "3월", "4일", "월요일"], ["2024년", "3월", "5일", "화요일", "."]]),
    ([["quatre", "mille", "trois", "cent", "vingt", "et", "un"], ["deux", "cents", "deux", "cents"],
      ["neuf", "mille", "neuf", "cent", "quatre-vingt-dix-neuf"]],
     [["quatre", "mille", "trois", "cents", "vingt", "et", "un"], ["deux", "cents", "vingt"],
      ["neuf", "mille", "neuf", "cent", "quatre-vingt-dix-neuf", "ans", "plus", "tard"]]),
]


def _random_corpus(rng):
    """A hidden case: references from a small vocabulary (repeated words, so clipping matters) and
    hypotheses made from them by the slips a model makes; one hypothesis copies its reference's first
    four words, so every n-gram order has a match."""
    words = [f"w{i}" for i in range(int(rng.integers(4, 9)))]
    refs = [[str(w) for w in rng.choice(words, size=int(rng.integers(5, 11)))] for _ in range(int(rng.integers(2, 5)))]
    hyps = []
    for ref in refs:
        h = list(ref)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(len(h)))
            slip = rng.integers(3)
            if slip == 0 and len(h) > 4:
                del h[i]                                   # shorter: the brevity penalty
            elif slip == 1:
                h[i] = str(rng.choice(words))
            else:
                h.insert(i, h[i])                          # a repeated word: clipping
        hyps.append(h)
    hyps[0] = refs[0][:4] + hyps[0][4:]
    if sum(map(len, hyps)) >= sum(map(len, refs)):         # shorter in total, as a model's often are
        hyps[-1] = hyps[-1][:max(1, len(hyps[-1]) - 3)]
    return hyps, refs


@exercise("10.2")
def check_corpus_bleu(fn) -> bool:
    """fn(hyps, refs) -> corpus BLEU in [0, 100]; hyps/refs: lists of token lists."""
    def copy(corpus):
        return [list(s) for s in corpus]

    corpora = _BLEU_CORPORA if visible() else [_random_corpus(case_rng(102)) for _ in range(2)]
    first = fn(copy(corpora[0][0]), copy(corpora[0][1]))
    if not_attempted(first):
        return False
    errors = {}
    for n, (hyps, refs) in enumerate(corpora):
        got = first if n == 0 else fn(copy(hyps), copy(refs))
        if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, float, np.integer, np.floating)):
            raise WrongAnswer(tr(f"corpus {n + 1}: expected one number (BLEU in 0..100), got {describe(got)}"))
        got = float(got)
        ref = reference_bleu(hyps, refs)
        package = corpus_bleu([" ".join(h) for h in hyps], [" ".join(r) for r in refs], tokenize="none").score
        assert abs(ref - package) < 1e-9, "internal: the reference disagrees with metrics.corpus_bleu"
        err = abs(got - ref) / max(abs(ref), 1e-12)
        if err > 1e-9:
            msg = tr(f"corpus {n + 1}: BLEU {got:.6f}, expected {ref:.6f} (relative error {err:.1e})")
            sentence_mean = float(np.mean([reference_bleu([h], [r]) for h, r in zip(hyps, refs)]))
            wrong = [
                (reference_bleu(hyps, refs, scale=1.0), tr("the answer is in 0..1: BLEU is reported in 0..100")),
                (reference_bleu(hyps, refs, clip=False), (tr("n-gram matches are not clipped: credit a hypothesis "
                    "n-gram at most as many times as it occurs in the reference (min(count_hyp, count_ref))"))),
                (reference_bleu(hyps, refs, brevity="none"), (tr("the brevity penalty is missing: "
                    "BP = exp(1 - r/c) when the hypotheses are shorter (c < r) in total"))),
                (reference_bleu(hyps, refs, brevity="inverted"), (tr("the brevity penalty is upside down: "
                    "BP = exp(1 - r/c), reference length r over hypothesis length c"))),
                (reference_bleu(hyps, refs, mean="arithmetic"), (tr("the precisions are averaged arithmetically: "
                    "BLEU takes their geometric mean, exp(mean of log p_n)"))),
                (sentence_mean, (tr("this is the mean of sentence BLEUs: corpus BLEU sums the clipped counts "
                    "and lengths over all sentences first, then computes one score"))),
            ]
            for value, text in wrong:
                if abs(got - value) <= 1e-9 * max(abs(value), 1.0) and abs(value - ref) > 1e-9:
                    msg += f"\n  hint: {text}"
                    break
            raise WrongAnswer(msg)
        errors[f"BLEU, corpus {n + 1}"] = (err, None)
    return report_correct(errors)


# -- Exercise 10.3: greedy decoding with the key/value cache ------------------------------------

PAD, BOS, EOS = 0, 1, 2            # the ids every Vocab gives its special tokens


def _unbanned_greedy(model, src, max_len):
    """Greedy decoding that may choose <pad> and <bos> (a wrong answer, for the hints)."""
    with eval_mode(model):
        memory = model.encode(src)
        cache = KVCache(model, memory, padding_mask(src, model.cfg.pad_id), max_len)
        y, out = BOS, []
        for t in range(max_len):
            y = int(model.decode_step(np.array([[y]]), t, cache)[0].argmax())
            if y == EOS:
                break
            out.append(y)
    return out


def _tiny_reverse_model():
    """A tiny model trained for 80 steps on reversing 2-6 symbols: far from perfect, so
    its greedy outputs vary with the source, sometimes stop at <eos> and sometimes run
    to the length limit. (An untrained model tends to repeat one token forever: with a
    tied embedding, each position's most likely output is the token it was fed.)"""
    vocab = synthetic_vocab(6)
    pairs = reverse_pairs(2000, np.random.default_rng(0), n_symbols=6, min_len=2, max_len=6)
    cfg = TransformerConfig(vocab_size=len(vocab), d_model=16, h=2, N=1, d_ff=32, P_drop=0.1, eps_ls=0.0,
                            max_len=24)
    model = Transformer(cfg, seed=0)
    settings = TrainSettings(steps=80, batch_size=32, lr_factor=1.0, warmup_steps=40, log_every=1000,
                             valid_every=10**9)
    Trainer(model, vocab, encode_pairs(vocab, pairs), [], settings).run(progress=False)
    return model, vocab


@functools.lru_cache(maxsize=1)
def _trained():
    return _tiny_reverse_model()


def _greedy_cases():
    """(model, src (1, S), max_len) triples: from the tiny trained model, a source whose
    output stops at <eos> and one whose output runs to max_len; from an untrained model,
    a source where an argmax that may choose <pad> or <bos> goes wrong. A hidden case: other
    sources, another untrained model, another max_len."""
    if visible():
        return _greedy_cases_of(1, 8, 1)
    rng = case_rng(103)
    return _greedy_cases_of(int(rng.integers(2, 10**6)), int(rng.integers(5, 12)), int(rng.integers(2, 100)))


@functools.lru_cache(maxsize=16)
def _greedy_cases_of(seed: int, max_len: int, untrained_seed: int):
    model, vocab = _trained()
    rng = np.random.default_rng(seed)
    found = {}
    for _ in range(100):
        tokens = [str(x) for x in rng.integers(0, 6, size=int(rng.integers(2, 7)))]
        src = np.array([vocab.encode(tokens, add_eos=True)])
        n_out = len(greedy_decode(model, src, BOS, EOS, max_len=max_len)[0])
        key = "length" if n_out == max_len else "eos" if n_out >= 2 else None
        if key and key not in found:
            found[key] = (model, src, max_len)
        if len(found) == 2:
            break
    untrained = Transformer(model.cfg, seed=untrained_seed)
    for _ in range(100):
        src = np.array([vocab.encode([str(x) for x in rng.integers(0, 6, size=4)], add_eos=True)])
        if _unbanned_greedy(untrained, src, max_len) != greedy_decode(untrained, src, BOS, EOS, max_len=max_len)[0]:
            found["banned"] = (untrained, src, max_len)
            break
    return [found[key] for key in ("eos", "length", "banned") if key in found]


def _transformer(state) -> Transformer:
    """A Transformer of ``state["config"]`` (TransformerConfig's fields) whose parameters are the arrays of
    ``state["params"]`` ({name: array}), the very arrays."""
    model = Transformer(TransformerConfig(**state["config"]), seed=0)
    for name, p in model.named_parameters():
        p.data = state["params"][name]
    return model


def _model_state(model) -> dict:
    return {"config": dataclasses.asdict(model.cfg), "params": {name: p.data for name, p in model.named_parameters()}}


def _greedy_run(fn, model, src, bos_id, eos_id, max_len) -> dict:
    """The learner's greedy decoding, run where it lives, with the model guarded (``_guard``) and in
    training mode as a model is after training: {"got", "dropout_on", "refused"} as plain data."""
    seen = _guard(model)
    model.train()
    try:
        got = fn(model, src, bos_id, eos_id, max_len)
    except WrongAnswer as exc:                   # the guard's: decode or forward was called
        return {"got": None, "dropout_on": seen["dropout_on"], "refused": str(exc)}
    finally:
        _unguard(model)
    if isinstance(got, np.ndarray):
        got = got.tolist()
    return {"got": got, "dropout_on": seen["dropout_on"], "refused": None}


def _guard(model):
    """Make decode/forward fail loudly (the cache must be used), and record whether
    decode_step ran with dropout on."""
    seen = {"dropout_on": False, "steps": 0}
    step = model.decode_step

    def refuse(*args, **kwargs):
        raise WrongAnswer(tr("this exercise decodes with the key/value cache: call model.decode_step(y_t, t, "
                                "cache) once per position, not model.decode or model.forward on the whole prefix"))

    def watched_step(y_t, t, cache):
        seen["steps"] += 1
        if any(layer.training and layer.P_drop > 0 for layer in model.modules() if isinstance(layer, Dropout)):
            seen["dropout_on"] = True
        return step(y_t, t, cache)

    model.decode, model.forward, model.decode_step = refuse, refuse, watched_step
    return seen


def _unguard(model):
    for name in ("decode", "forward", "decode_step"):
        model.__dict__.pop(name, None)


@exercise("10.3")
def check_greedy_decode(fn) -> bool:
    """fn(model, src (1, S), bos_id, eos_id, max_len) -> list of output ids (no <bos>, no <eos>)."""
    cases = _greedy_cases()                             # built once per session (a tiny model is trained)
    lines = []
    for n, (model, src, max_len) in enumerate(cases):
        weights = {name: p.data.copy() for name, p in model.named_parameters()}
        ref = greedy_decode(model, src, BOS, EOS, max_len=max_len)[0]
        no_stop = greedy_decode(model, src, BOS, None, max_len=max_len)[0]
        try:
            run = drive(fn, _greedy_run, built(fn, _transformer, _model_state(model), local=model), src.copy(), BOS,
                        EOS, max_len)
        finally:
            model.eval()
            for name, p in model.named_parameters():
                p.data[...] = weights[name]             # an answer that wrote into the weights spoils nothing
        if not isinstance(run, dict) or set(run) != {"got", "dropout_on", "refused"}:
            raise WrongAnswer(tr(f"case {n + 1}: the decoding did not report back (got {describe(run)})"))
        if run["refused"]:
            raise WrongAnswer(run["refused"])
        got = run["got"]
        if n == 0 and not_attempted(got):
            return False
        if run["dropout_on"]:
            raise WrongAnswer(tr(f"case {n + 1}: dropout was on while you decoded (the model came in training "
                                    "mode)\n  hint: wrap the loop in `with eval_mode(model):` "
                                    "(minitransformer.layers.parameter.eval_mode)"))
        if isinstance(got, np.ndarray):
            got = got.tolist()
        if not isinstance(got, (list, tuple)) or not all(isinstance(x, (int, np.integer)) for x in got):
            raise WrongAnswer(tr(f"case {n + 1}: expected a list of token ids, got {describe(got)}"))
        got = [int(x) for x in got]
        if got == ref:
            how = tr("stopped at <eos>") if len(ref) < max_len else tr("ran to max_len")
            lines.append(tr(f"  case {n + 1}: {ref}, {len(ref)} tokens, {how}: the same as decoding.greedy_decode"))
            continue
        msg = tr(f"case {n + 1} (max_len={max_len}): expected {ref}, got {got}")
        if got[:1] == [BOS] and got[1:] == ref[: len(got) - 1]:
            msg += "\n  hint: " + tr("the output starts with <bos>: that is the decoder's first input, not an "
                                     "output token")
        elif got == ref + [EOS]:
            msg += "\n  hint: " + tr("the output ends with <eos>: stop when <eos> comes, without appending it")
        elif EOS in got and got[: got.index(EOS)] == ref:
            msg += "\n  hint: " + tr("decoding went on after <eos>: stop at the first <eos>")
        elif len(ref) == max_len and got == ref[:-1]:
            msg += ("\n  hint: " + tr("max_len counts the generated tokens, <eos> included: run at most max_len steps, "
                                     "t = 0 .. max_len-1"))
        elif got == _unbanned_greedy(model, src, max_len):
            msg += ("\n  hint: " + tr("the argmax chose <pad> or <bos>: set their log-probabilities to -inf before the "
                                     "argmax (they are never output words)"))
        elif got == no_stop:
            msg += "\n  hint: " + tr("<eos> was never checked: stop as soon as the argmax is eos_id")
        raise WrongAnswer(msg)
    say("\n".join(["correct"] + lines))
    return True

