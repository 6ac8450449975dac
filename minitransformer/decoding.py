"""Search: greedy decoding and beam search (§6.1), on the model's public decode step.

The decoder is auto-regressive (§3.1): output token t is predicted from the
source and the tokens 0..t-1 already produced, so decoding runs one position
at a time. The model owns that one position (``Transformer.decode_step``, with
a ``KVCache``: step t runs only the new position and attends to the cached
keys, O(t) work instead of re-running the prefix). This module only decides
which token to feed next. ``use_cache=False`` re-runs ``Transformer.decode``
on the whole prefix instead: simple and obviously right, O(T^2) layer work for
T tokens; the tests check that both give the same numbers.

Greedy decoding takes the most probable token at every step. Beam search
(§6.1 uses 4 beams and a length penalty with α = 0.6) keeps the k best
partial hypotheses instead, and ranks finished ones with the
length penalty of Wu et al. (2016, "Google's Neural Machine Translation
System", Eq. 14):

    lp(Y) = ((5 + |Y|) / 6) ** α,        score(Y) = log P(Y | X) / lp(Y)

where |Y| counts the generated tokens, <eos> included. The maximum output
length is the input length + 50 (§6.1), capped by the positional-encoding
table (``model.cfg.max_len``); decoding stops early once it can.

Everything is batched over sentences: B sentences (B·k hypotheses for beam
search) advance together, one Python iteration per output position. The
array module comes from the model's parameters, so the same code runs on
NumPy and on CuPy.

Conventions: token ids in and out are plain ints; returned sequences hold the
generated tokens *without* <bos> and *without* <eos>. The pad id and the bos
id are never chosen as output tokens (they are not words of a sentence; a
pad in the decoder input would also be ambiguous), but their probability is
left in the distribution: scores are true log-probabilities of the model.
Pass ``eos_id=None`` to never stop at <eos> (every sentence then runs to its
maximum length; the benchmark uses this to force a length).

The model is put in evaluation mode (dropout off) for the duration of every
function here, and each layer's previous mode is restored afterwards. Do not
decode between a training forward and its backward: decoding overwrites the
layers' forward caches (the backward would then refuse the gradient's shape).
"""

from __future__ import annotations

from . import backend
from .errors import NonFiniteError, ShapeError
from .layers.loss import log_softmax
from .layers.masks import padding_mask
from .layers.parameter import eval_mode
from .model import KVCache, Transformer

NEG_INF = float("-inf")


class NonFiniteOutputError(NonFiniteError):
    """The model produced NaN (or +inf) scores while decoding: its parameters are probably not finite."""

# §6.1: at inference the output may be at most 50 tokens longer than the input.
EXTRA_OUTPUT_LEN = 50


# -- small helpers -------------------------------------------------------------------------

def _as_ids(model, src):
    """src as an integer (B, S) array on the model's device."""
    xp = model.xp
    src = backend.to_backend(src, xp)
    if getattr(src, "ndim", None) != 2:
        raise ShapeError(f"decoding: src must be token ids of shape (B, S), got {tuple(getattr(src, 'shape', ()))}")
    if src.dtype.kind not in ("i", "u"):
        raise TypeError(f"decoding: src must be an integer array, got dtype {src.dtype}")
    if src.shape[0] and src.shape[1] == 0:
        raise ValueError("decoding: src has no positions (shape (B, 0)); every source sentence needs at least "
                         "one token (with make_source_batch, <eos> is one)")
    if src.shape[0]:
        empty = backend.to_numpy((src == model.cfg.pad_id).all(axis=1))
        if empty.any():
            raise ValueError(f"decoding: source row {int(empty.argmax())} is all padding (an empty sentence); "
                             "the encoder-decoder attention would have nothing to attend to")
    return src


def _length_limits(model, src, max_len):
    """Per sentence, the most tokens to generate (<eos> included): host list of B ints.

    Default: the sentence's own (unpadded) length + 50 (§6.1), so padding in a
    batch does not change a sentence's result. Always capped by cfg.max_len,
    the number of decoder positions the positional encoding covers.
    """
    cap = model.cfg.max_len
    if max_len is not None:
        if max_len < 1:
            raise ValueError(f"decoding: max_len must be ≥ 1, got {max_len}")
        return [min(int(max_len), cap)] * int(src.shape[0])
    lengths = backend.to_numpy((src != model.cfg.pad_id).sum(axis=1)).tolist()
    return [min(int(n) + EXTRA_OUTPUT_LEN, cap) for n in lengths]


def _banned_ids(model, bos_id, eos_id):
    """Ids never chosen as an output token: pad and bos (unless one is also eos)."""
    return sorted({model.cfg.pad_id, bos_id} - {eos_id})


def length_penalty(length, alpha: float):
    """Wu et al. (2016), Eq. 14: lp(Y) = ((5 + |Y|) / 6) ** α. Works on ints or arrays."""
    return ((5.0 + length) / 6.0) ** alpha


def _topk(scores, k: int):
    """The k largest entries of each row of ``scores`` (R, C), best first.

    Found by k argmax passes, so ties go to the lowest index exactly as in
    greedy's argmax (which is what makes beam size 1 identical to greedy).
    Beam scores are accumulated in float64: adding a hypothesis' log P to two
    different float32 log-probabilities then never rounds them to a tie.
    Returns (indices (R, k), values (R, k)). ``scores`` is overwritten.
    """
    xp = backend.get_array_module(scores)
    R = scores.shape[0]
    rows = xp.arange(R)
    idx = xp.empty((R, k), dtype=xp.int64)
    val = xp.empty((R, k), dtype=scores.dtype)
    for j in range(k):                       # a loop over beam slots, not over sentences
        best = scores.argmax(axis=1)
        idx[:, j] = best
        val[:, j] = scores[rows, best]
        scores[rows, best] = NEG_INF
    return idx, val


# -- the next token's log-probabilities ----------------------------------------------------

def _next_log_probs(model: Transformer, tokens, t: int, cache: KVCache | None, memory, src_mask):
    """log P(token at position t | source, tokens[:, :t+1]) for every row: (B, V).

    tokens: (B, T+1) decoder inputs, <bos> first. With a cache, only position t
    runs (``decode_step``); without, the whole prefix is re-decoded and its last
    row kept: the reference the cache is tested against.
    """
    if cache is not None:
        logits = model.decode_step(tokens[:, t: t + 1], t, cache)         # (B, V)
    else:
        logits = model.decode(tokens[:, : t + 1], memory, src_mask)[:, -1]  # (B, V)
    return log_softmax(logits)


def _check_finite(nan_rows, t: int) -> None:
    """Raise if any row's scores were NaN. nan_rows: (R,) bool, accumulated on the device.

    NaN scores (from NaN or inf logits) would make argmax pick an arbitrary token
    and beam search lose every hypothesis: say what happened instead. The search
    loops fold ``nan_rows.any()`` into the one host sync they make per position.
    """
    rows = backend.to_numpy(nan_rows)
    if rows.any():
        raise NonFiniteOutputError(
            f"decoding: the model's scores at output position {t} are NaN for row {int(rows.argmax())} "
            f"({int(rows.sum())} of {rows.size} rows); its parameters are probably NaN or inf "
            "(a diverged checkpoint?)"
        )


# -- greedy decoding ---------------------------------------------------------------------------

def greedy_decode(model, src, bos_id: int, eos_id: int | None, max_len: int | None = None,
                  use_cache: bool = True) -> list[list[int]]:
    """Most probable token at every step, for B sentences at once.

    src: (B, S) ids padded with cfg.pad_id. max_len: the most tokens to
    generate per sentence, <eos> included (default: that sentence's length + 50,
    §6.1); always capped by cfg.max_len. eos_id=None: never stop early.
    Returns B lists of output ids, without <bos> and <eos>. A sentence that has
    finished keeps being computed (the batch stays rectangular) but its tokens
    are ignored; the loop ends once every sentence has finished.
    """
    src = _as_ids(model, src)
    xp = model.xp
    B = int(src.shape[0])
    if B == 0:
        return []
    limits = _length_limits(model, src, max_len)
    T = max(limits)
    src_mask = padding_mask(src, model.cfg.pad_id)
    banned = _banned_ids(model, bos_id, eos_id)
    pad = model.cfg.pad_id
    with eval_mode(model):
        memory = model.encode(src, src_mask)
        cache = KVCache(model, memory, src_mask, T) if use_cache else None
        tokens = xp.full((B, T + 1), pad, dtype=xp.int64)        # decoder inputs: <bos>, y_0, y_1, ...
        tokens[:, 0] = bos_id
        limit = xp.asarray(limits)
        out_len = xp.asarray(limits)                             # returned length, if no <eos> comes
        done = xp.zeros(B, dtype=bool)
        nan_rows = xp.zeros(B, dtype=bool)
        for t in range(T):
            logp = _next_log_probs(model, tokens, t, cache, memory, src_mask)
            nan_rows = xp.isnan(logp).any(axis=1)
            logp[:, banned] = NEG_INF
            y = logp.argmax(axis=1)                              # (B,)
            y = xp.where(done, pad, y)                           # finished sentences emit pad
            tokens[:, t + 1] = y
            if eos_id is not None:
                hit = (y == eos_id) & ~done
                out_len = xp.where(hit, t, out_len)              # tokens before <eos>
                done |= hit
            done |= limit <= t + 1                               # reached its maximum length
            if bool(done.all() | nan_rows.any()):                # the one wait for the device per position
                break
        _check_finite(nan_rows, t)
    tokens, out_len = backend.to_numpy(tokens), backend.to_numpy(out_len)
    return [tokens[b, 1: 1 + int(out_len[b])].tolist() for b in range(B)]


# -- beam search -------------------------------------------------------------------------------

def beam_search(model, src, bos_id: int, eos_id: int | None, beam_size: int = 4, alpha: float = 0.6,
                max_len: int | None = None, use_cache: bool = True, return_scores: bool = False,
                n_best: int | None = None):
    """Beam search with the length penalty of Wu et al. (2016), as in §6.1.

    src: (B, S) ids padded with cfg.pad_id. The B sentences are searched
    together: their B·k hypotheses are the rows of one batch (row b·k + j is
    slot j of sentence b), and the cache is reordered after every step.

    At step t every live hypothesis (length t) is extended by every token; of
    these candidates the k most probable (all have length t+1, so log P ranks
    them as the penalized score would) form the new beam. Candidates ending in
    <eos> leave the beam for the sentence's *finished* set, scored
    log P / lp(t+1); they are never extended again, and the next step extends
    only the live ones (still choosing k candidates). Because <eos> candidates
    compete for the k places instead of being set aside from 2k candidates
    (as tensor2tensor does), beam size 1 is exactly greedy decoding. At step 0
    only one slot is live (the others are at -inf), so no hypothesis appears twice.

    A sentence stops when it has k finished hypotheses and no live one can
    still beat the best of them (log P only falls as tokens are added, so a
    live hypothesis can reach at most log P / max lp over the lengths left),
    or when nothing is live, or at its maximum length (input length + 50 by
    default, §6.1, capped by cfg.max_len), where the unfinished hypotheses are
    scored as they stand (|Y| = their tokens, no <eos>).

    Returns B lists of ids (the best hypothesis, without <bos>/<eos>);
    with return_scores, B tuples (ids, score); with n_best=m (≤ k), B lists of
    up to m tuples (ids, score), best first. Beam size 1 gives exactly the
    output of :func:`greedy_decode`.
    """
    if beam_size < 1:
        raise ValueError(f"beam_search: beam_size must be ≥ 1, got {beam_size}")
    if n_best is not None and not 1 <= n_best <= beam_size:
        raise ValueError(f"beam_search: n_best must be in 1..beam_size={beam_size}, got {n_best}")
    src = _as_ids(model, src)
    xp = model.xp
    B, k = int(src.shape[0]), int(beam_size)
    if B == 0:
        return []
    V = model.cfg.vocab_size
    limits = _length_limits(model, src, max_len)
    T = max(limits)
    pad = model.cfg.pad_id
    banned = _banned_ids(model, bos_id, eos_id)
    f64 = xp.float64                       # scores accumulate in float64 (see _topk on exactness)
    src_mask = padding_mask(src, pad)
    expand = xp.repeat(xp.arange(B), k)    # row b·k + j <- sentence b
    sent_rows = (xp.arange(B) * k)[:, None]                    # (B, 1): first row of each sentence
    limit = xp.asarray(limits)
    lp_limit = length_penalty(limit.astype(f64), alpha)        # (B,)

    with eval_mode(model):
        memory = model.encode(src, src_mask)
        src_mask_k = src_mask[expand]                          # (B·k, 1, 1, S)
        if use_cache:
            cache = KVCache(model, memory, src_mask, T)        # memory projected once per sentence,
            cache.reorder(expand)                              # then copied to its k rows
            memory_k = None
        else:
            cache, memory_k = None, memory[expand]             # (B·k, S, d_model)
        tokens = xp.full((B * k, T + 1), pad, dtype=xp.int64)  # decoder inputs of every hypothesis
        tokens[:, 0] = bos_id
        live = xp.full((B, k), NEG_INF, dtype=f64)             # log P of live hypotheses; -inf = empty
        live[:, 0] = 0.0                                       # step 0: one live slot per sentence
        fin_score = xp.full((B, k), NEG_INF, dtype=f64)        # finished set: penalized scores, best first
        fin_tokens = xp.full((B, k, T), pad, dtype=xp.int64)
        fin_len = xp.zeros((B, k), dtype=xp.int64)             # returned length (<eos> excluded)
        done = xp.zeros(B, dtype=bool)

        for t in range(T):
            logp = _next_log_probs(model, tokens, t, cache, memory_k, src_mask_k).astype(f64)
            nan_rows = xp.isnan(logp).any(axis=1)
            logp[:, banned] = NEG_INF
            cand = (live.reshape(B * k, 1) + logp).reshape(B, k * V)   # log P of every extension
            top, top_logp = _topk(cand, k)                     # (B, k), best first
            parent = top // V                                  # slot the candidate extends
            tok = top % V                                      # its new token
            valid = top_logp > NEG_INF
            is_eos = valid & (tok == eos_id) if eos_id is not None else xp.zeros((B, k), dtype=bool)
            at_limit = (limit <= t + 1)[:, None]               # (B, 1): no room for another token
            finishing = is_eos | (valid & at_limit)
            parent_rows = (sent_rows + parent).reshape(-1)     # (B·k,) rows of the parents

            if bool(finishing.any()):
                # Move finished hypotheses to the finished set (Wu et al. 2016 scoring):
                # |Y| = t + 1 generated tokens, <eos> included when there is one.
                new_score = xp.where(finishing, top_logp / length_penalty(t + 1, alpha), NEG_INF)
                new_tokens = tokens[parent_rows, 1:].reshape(B, k, T)     # a copy (fancy index)
                new_tokens[:, :, t] = tok
                new_len = (t + 1) - is_eos.astype(xp.int64)           # <eos> not returned
                all_score = xp.concatenate([fin_score, new_score], axis=1)   # (B, 2k)
                keep, fin_score = _topk(all_score.copy(), k)                  # old ones win ties
                all_tokens = xp.concatenate([fin_tokens, new_tokens], axis=1)
                fin_tokens = xp.take_along_axis(all_tokens, keep[:, :, None], axis=1)
                fin_len = xp.take_along_axis(xp.concatenate([fin_len, new_len], axis=1), keep, axis=1)

            live = xp.where(valid & ~finishing, top_logp, NEG_INF)
            # Stop test, per sentence. A live hypothesis (log P ≤ 0, length t+1)
            # can at best keep its log P while growing to any length in
            # t+2 .. limit; lp is monotonic in the length, so the best it can
            # score is log P / max(lp(t+2), lp(limit)).
            best_live = live.max(axis=1)
            bound = best_live / xp.maximum(length_penalty(t + 2.0, alpha), lp_limit)
            n_fin = (fin_score > NEG_INF).sum(axis=1)
            done |= ((n_fin >= k) & (bound <= fin_score[:, 0])) | (best_live == NEG_INF)
            # xp.where, not live[done] = NEG_INF: a boolean-mask assignment counts the True
            # entries on the host first, which on a GPU waits for the device at every step.
            live = xp.where(done[:, None], NEG_INF, live)
            if bool(done.all() | nan_rows.any()) or t + 1 == T:   # the stop test's wait for the device
                break
            # The new beam: copy each parent's history (and cache rows) to its slot.
            tokens = tokens[parent_rows]
            tokens[:, t + 1] = tok.reshape(-1)
            if use_cache:
                cache.reorder(parent_rows, cross=False)        # same sentence: cross K/V unchanged

        _check_finite(nan_rows, t)
    fin_score, fin_tokens, fin_len = (backend.to_numpy(a) for a in (fin_score, fin_tokens, fin_len))
    results = []
    for b in range(B):   # unpacking to Python lists, after the search
        hyps = [(fin_tokens[b, j, : int(fin_len[b, j])].tolist(), float(fin_score[b, j]))
                for j in range(k) if fin_score[b, j] > NEG_INF]
        if n_best is not None:
            results.append(hyps[:n_best])
        elif return_scores:
            results.append(hyps[0])
        else:
            results.append(hyps[0][0])
    return results


__all__ = ["greedy_decode", "beam_search", "length_penalty", "NonFiniteOutputError"]
