"""Search (§6.1): choosing output tokens, one position at a time, on the model's public decode step.

The decoder is auto-regressive (§3.1): output token t is predicted from the
source and the tokens 0..t-1 already produced, so decoding runs one position
at a time. The model owns that one position (``Transformer.decode_step``, with
a ``KVCache``: step t runs only the new position and attends to the cached
keys, O(t) work instead of re-running the prefix). This module only decides
which token to feed next. ``use_cache=False`` re-runs ``Transformer.decode``
on the whole prefix instead: simple and obviously right, O(T^2) layer work for
T tokens; the tests check that both give the same numbers.

How the next token is chosen is a *strategy*, a small frozen object:

    Greedy()                                   the most probable token at every step
    Sample(temperature=1.0, top_k=None, top_p=None, seed=0, min_p=None)
                                               a random token from softmax(logits / T),
                                               optionally only among the k most probable
                                               (top-k), then the smallest set holding
                                               probability ≥ p (top-p, "nucleus"), then
                                               those at least min_p times as probable as
                                               the most probable token (min-p)
    Beam(size=4, alpha=0.6)                    beam search with a length penalty (§6.1)

``decode(model, src, bos_id, eos_id, strategy)`` runs any of them. Greedy and
Sample share one loop (:func:`_one_token_per_step`): at every position it asks
the strategy's ``choose(logp, rng)`` for one token per sentence, and nothing
else differs. A new strategy of that kind is a class with ``choose`` and
``make_rng`` (and an entry in ``STRATEGIES`` to be named on the command line).
Beam search keeps k hypotheses per sentence and reorders them at every step,
so it has its own loop (:func:`beam_search`). ``greedy_decode`` and
``beam_search`` remain the plain entry points lesson 10 uses.

Beam search (§6.1 uses 4 beams and a length penalty with α = 0.6) ranks
finished hypotheses with the length penalty of Wu et al. (2016, "Google's
Neural Machine Translation System", Eq. 14):

    lp(Y) = ((5 + |Y|) / 6) ** α,        score(Y) = log P(Y | X) / lp(Y)

where |Y| counts the generated tokens, <eos> included. The maximum output
length is the input length + 50 (§6.1), capped by the positional-encoding
table (``model.cfg.max_len``); decoding stops early once it can.

Everything is batched over sentences: B sentences (B·k hypotheses for beam
search) advance together, one Python iteration per output position. The
array module comes from the model's parameters, so the same code runs on
NumPy and on CuPy. On a GPU a question whose answer the CPU needs ("has every
sentence finished?") makes the CPU wait for the device; each loop asks exactly
one such question per position, through ``backend.host_flag`` (the stand-in
CuPy of the tests counts them). Sampling draws its random numbers on the
device, so it asks no more than greedy does.

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

import math
from dataclasses import dataclass

from . import backend, threads
from .decoding_inputs import (
    EXTRA_OUTPUT_LEN,
    MAX_BEAM_SIZE,
    _as_ids,
    _banned_ids,
    _check_beam,
    _check_call,
    _flag,
    _length_limits,
    _set,
    _whole,
)
from .errors import NonFiniteError
from .layers.loss import log_softmax
from .layers.masks import padding_mask
from .layers.parameter import eval_mode
from .model import KVCache, Transformer
from .options import check_fields, parse_named, setting

NEG_INF = float("-inf")


class NonFiniteOutputError(NonFiniteError):
    """The model produced NaN (or +inf) scores while decoding: its parameters are probably not finite."""


# -- strategies -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Greedy:
    """The most probable token at every step (argmax; ties go to the lowest id)."""

    def make_rng(self, xp):
        return None                            # nothing random

    def choose(self, logp, rng):
        """logp: (R, V) log-probabilities, banned ids at -inf -> (R,) token ids."""
        return logp.argmax(axis=1)

    def __str__(self) -> str:
        return "greedy"


@dataclass(frozen=True)
class Sample:
    """A random token from the model's distribution, sharpened or flattened by a temperature.

    At every step, for every sentence: z = log P / T (the same distribution as
    softmax(logits / T): log P differs from the logits by a constant per row);
    then, if ``top_k`` is set, only the k most probable tokens stay; then, if
    ``top_p`` is set, only the smallest set of the most probable remaining tokens
    whose (renormalised) probability adds up to at least p (the "nucleus"); then,
    if ``min_p`` is set, only the tokens at least min_p times as probable as the
    most probable one (P_i / P_max ≥ min_p, i.e. z_i ≥ log min_p, since z_max = 0). One
    token is drawn from what is left, renormalised. Ties at a cut go to the
    lowest id, exactly as greedy's argmax, so ``top_k=1`` is greedy decoding.

    The draw is the Gumbel-max trick: argmax(z + g) with g = -log(-log u), u
    uniform, is a sample of softmax(z). The u are drawn on the device, so no
    token is looked at on the host. ``seed`` makes a run repeatable: the same
    seed, inputs and batches give the same outputs (a CuPy run gives other
    numbers than a NumPy run of the same seed: the generators differ).
    """

    # Each field's check and help, declared once (options.setting): Sample(...) checks them, and
    # translate / evaluate take each as an option (--temperature, --top-k, ...), train --eval as sample:FIELD=V.
    temperature: float = setting(1.0, "divide the logits by T (< 1 sharper, > 1 flatter; default 1)", above=0,
                                 metavar="T")
    top_k: int | None = setting(None, "only the K most probable tokens", at_least=1, metavar="K")
    top_p: float | None = setting(None, "only the most probable tokens holding probability P (nucleus, 0 < P ≤ 1)",
                                  above=0, at_most=1, metavar="P")
    seed: int = setting(0, "seed of the draws (default 0; the same seed gives the same outputs)", at_least=0,
                        at_most=2 ** 63 - 1, metavar="N")
    min_p: float | None = setting(None, "only the tokens at least P times as probable as the most probable one "
                                        "(min-p, 0 < P ≤ 1)", above=0, at_most=1, metavar="P")

    def __post_init__(self):
        check_fields(self)                     # the declarations above: types, finite numbers, bounds

    def make_rng(self, xp):
        return backend.seeded_rng(self.seed, xp)

    def choose(self, logp, rng):
        """logp: (R, V) log-probabilities, banned ids at -inf -> (R,) sampled token ids."""
        xp = backend.get_array_module(logp)
        # z = log P / T, shifted so that the best token is at exactly 0: however small T is,
        # the best token stays finite (a tiny T sends the others towards -inf, never all of them).
        z = logp.astype(xp.float64)
        z = (z - z.max(axis=1, keepdims=True)) / self.temperature    # (R, V)
        V = z.shape[1]
        if self.top_k is not None and self.top_k < V:
            z = keep_largest(z, xp.full((z.shape[0], 1), self.top_k, dtype=xp.int64))
        if self.top_p is not None and self.top_p < 1:
            desc = xp.sort(z, axis=1)[:, ::-1]                        # (R, V), largest first
            p = xp.exp(desc - desc[:, :1])
            p /= p.sum(axis=1, keepdims=True)
            before = xp.cumsum(p, axis=1) - p                         # probability of the tokens ranked above
            n = (before < self.top_p).sum(axis=1, keepdims=True)      # (R, 1), ≥ 1: the nucleus' size
            z = keep_largest(z, n)
        if self.min_p is not None:
            z = xp.where(z >= math.log(self.min_p), z, NEG_INF)     # P_i / P_max ≥ min_p; the best stays (z = 0)
        # Gumbel-max. u in [2^-60, 1): -log u > 0, so g is finite and no log(0) warning appears.
        u = xp.maximum(rng.random(z.shape, dtype=xp.float64), 2.0 ** -60)
        g = -xp.log(-xp.log(u))
        return xp.where(z > NEG_INF, z + g, NEG_INF).argmax(axis=1)

    def __str__(self) -> str:
        parts = [f"T={self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top-k {self.top_k}")
        if self.top_p is not None:
            parts.append(f"top-p {self.top_p:g}")
        if self.min_p is not None:
            parts.append(f"min-p {self.min_p:g}")
        return "sample (" + ", ".join(parts + [f"seed {self.seed}"]) + ")"


@dataclass(frozen=True)
class Beam:
    """Beam search with ``size`` hypotheses per sentence and length penalty α (§6.1: 4 and 0.6).

    size is at most MAX_BEAM_SIZE; α ≥ 0 (0: rank by raw log P). Size 1 is greedy decoding.
    """

    size: int = setting(4, "the number of hypotheses kept per sentence (§6.1: 4)", metavar="K")
    alpha: float = setting(0.6, "the length penalty's α (§6.1: 0.6; 0: rank by log P alone)", metavar="A")

    def __post_init__(self):
        size, alpha = _check_beam(self.size, self.alpha, "Beam", "size")
        _set(self, "size", size)
        _set(self, "alpha", alpha)

    def make_rng(self, xp):
        return None                            # nothing random

    def __str__(self) -> str:
        return f"beam {self.size}" + ("" if self.alpha == 0.6 else f" (α={self.alpha:g})")


GREEDY = Greedy()
PAPER_BEAM = Beam(size=4, alpha=0.6)           # §6.1's setting

# The names the command line knows (``parse_strategy``).
STRATEGIES = {"greedy": Greedy, "sample": Sample, "beam": Beam}


def parse_strategy(text: str):
    """A strategy from its name, as ``train --eval`` takes it (``options.parse_named``). Raises ValueError
    naming the problem.

        greedy                       Greedy()
        beam4, beam                  Beam(size=4), Beam() (a number after the name is the first field)
        beam:size=8,alpha=1.0        Beam(size=8, alpha=1.0)
        sample:temperature=0.7,top_k=10,top_p=0.9,seed=3
    """
    return parse_named(STRATEGIES, text, "decoding strategy", "greedy, beam4, sample:temperature=0.7,top_k=10")


def keep_largest(z, n):
    """z with all but the n largest entries of each row set to -inf (ties to the lowest index).

    z: (R, V) scores; n: (R, 1) integer counts, 1 ≤ n ≤ V. Exactly n entries stay
    (among them any -inf ones when fewer are finite), found without leaving the device.
    """
    xp = backend.get_array_module(z)
    threshold = xp.take_along_axis(xp.sort(z, axis=1), z.shape[1] - n, axis=1)   # (R, 1): the n-th largest
    above = z > threshold
    tied = z == threshold
    room = n - above.sum(axis=1, keepdims=True)                  # how many tied entries still fit
    keep = above | (tied & (xp.cumsum(tied, axis=1) <= room))
    return xp.where(keep, z, NEG_INF)


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



# -- one loop for every strategy that picks one token per sentence ------------------------------

def decode(model, src, bos_id: int, eos_id: int | None, strategy=GREEDY, max_len: int | None = None,
           use_cache: bool = True, rng=None) -> list[list[int]]:
    """Decode B sentences with ``strategy`` (Greedy(), Sample(...) or Beam(...)).

    src: (B, S) ids padded with cfg.pad_id. max_len: the most tokens to
    generate per sentence, <eos> included (default: that sentence's length + 50,
    §6.1); always capped by cfg.max_len. eos_id=None: never stop early.
    rng: the generator a Sample draws from (default: a fresh one from its seed;
    ``translate_ids`` passes one on from batch to batch so batches get new numbers).
    Returns B lists of output ids, without <bos> and <eos>.
    """
    check_strategy(strategy, "decode")
    if isinstance(strategy, Beam):
        return beam_search(model, src, bos_id, eos_id, beam_size=strategy.size, alpha=strategy.alpha,
                           max_len=max_len, use_cache=use_cache)
    return _one_token_per_step(model, src, bos_id, eos_id, strategy, max_len, use_cache, rng=rng)


def check_strategy(strategy, where: str = "decode") -> None:
    """Raise TypeError unless ``strategy`` is Beam(...) or has ``choose`` and ``make_rng`` (Greedy, Sample)."""
    if isinstance(strategy, Beam):
        return
    if not (callable(getattr(strategy, "choose", None)) and callable(getattr(strategy, "make_rng", None))):
        hint = (f" (beam_size={strategy} is now strategy=Beam({strategy}))"
                if isinstance(strategy, int) and not isinstance(strategy, bool) else "")
        raise TypeError(f"{where}: strategy must be a decoding strategy such as Greedy(), Beam(size=4) or "
                        f"Sample(temperature=1.0), got {strategy!r}{hint}")


def greedy_decode(model, src, bos_id: int, eos_id: int | None, max_len: int | None = None,
                  use_cache: bool = True) -> list[list[int]]:
    """Most probable token at every step, for B sentences at once: ``decode`` with Greedy()."""
    return _one_token_per_step(model, src, bos_id, eos_id, GREEDY, max_len, use_cache, where="greedy_decode")


def _one_token_per_step(model, src, bos_id, eos_id, strategy, max_len, use_cache, where="decode", rng=None):
    """The shared loop: at every position, ``strategy.choose`` picks one token per sentence.

    A sentence that has finished keeps being computed (the batch stays
    rectangular) but its tokens are ignored; the loop ends once every sentence
    has finished.
    """
    bos_id, eos_id, max_len = _check_call(model, where, bos_id, eos_id, max_len, use_cache)
    src = _as_ids(model, src)
    xp = model.xp
    B = int(src.shape[0])
    if B == 0:
        return []
    threads.check()                                          # the BLAS thread policy: once per decoded batch
    limits = _length_limits(model, src, max_len)
    T = max(limits)
    src_mask = padding_mask(src, model.cfg.pad_id)
    banned = _banned_ids(model, bos_id, eos_id)
    pad = model.cfg.pad_id
    if rng is None:
        rng = strategy.make_rng(xp)
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
            y = strategy.choose(logp, rng)                       # (B,): the only line a strategy changes
            y = xp.where(done, pad, y)                           # finished sentences emit pad
            tokens[:, t + 1] = y
            if eos_id is not None:
                hit = (y == eos_id) & ~done
                out_len = xp.where(hit, t, out_len)              # tokens before <eos>
                done |= hit
            done |= limit <= t + 1                               # reached its maximum length
            if backend.host_flag(done.all() | nan_rows.any()):   # the one wait for the device per position
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
    beam_size: 1..MAX_BEAM_SIZE; alpha: ≥ 0 (see :class:`Beam`).

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
    where = "beam_search"
    k, alpha = _check_beam(beam_size, alpha, where, "beam_size")
    bos_id, eos_id, max_len = _check_call(model, where, bos_id, eos_id, max_len, use_cache)
    _flag(return_scores, "return_scores", where)
    if n_best is not None:
        n_best = _whole(n_best, "n_best", where, 1, k)
    src = _as_ids(model, src)
    if int(src.shape[0]) == 0:
        return []
    threads.check()                                            # the BLAS thread policy: once per decoded batch
    limits = _length_limits(model, src, max_len)
    with eval_mode(model):
        finished = _beam_loop(model, src, k, alpha, bos_id, eos_id, limits, use_cache)
    return finished.best(n_best, return_scores)


class _Finished:
    """Per sentence, the k best finished hypotheses, best first: their penalized scores
    ``score`` (B, k), tokens ``tokens`` (B, k, T) and returned lengths ``length`` (B, k),
    <eos> excluded. -inf: an empty place. Kept on the model's device."""

    def __init__(self, xp, B: int, k: int, T: int, pad: int):
        self.xp, self.k = xp, k
        self.score = xp.full((B, k), NEG_INF, dtype=xp.float64)
        self.tokens = xp.full((B, k, T), pad, dtype=xp.int64)
        self.length = xp.zeros((B, k), dtype=xp.int64)

    def add(self, score, tokens, length) -> None:
        """Merge k candidates per sentence (score -inf: not finished) and keep the k best;
        the ones already in the set win ties."""
        xp = self.xp
        keep, self.score = _topk(xp.concatenate([self.score, score], axis=1), self.k)    # (B, k) of 2k
        self.tokens = xp.take_along_axis(xp.concatenate([self.tokens, tokens], axis=1), keep[:, :, None], axis=1)
        self.length = xp.take_along_axis(xp.concatenate([self.length, length], axis=1), keep, axis=1)

    def best(self, n_best: int | None, return_scores: bool) -> list:
        """The results on the host, as ``beam_search`` returns them."""
        score, tokens, length = (backend.to_numpy(a) for a in (self.score, self.tokens, self.length))
        results = []
        for b in range(score.shape[0]):   # unpacking to Python lists, after the search
            hyps = [(tokens[b, j, : int(length[b, j])].tolist(), float(score[b, j]))
                    for j in range(self.k) if score[b, j] > NEG_INF]
            results.append(hyps[:n_best] if n_best is not None else hyps[0] if return_scores else hyps[0][0])
        return results


def _beam_loop(model, src, k: int, alpha: float, bos_id: int, eos_id: int | None, limits: list[int],
               use_cache: bool) -> _Finished:
    """The search itself (see ``beam_search``): one iteration per output position, B·k rows."""
    xp = model.xp
    B, V, pad, T = int(src.shape[0]), model.cfg.vocab_size, model.cfg.pad_id, max(limits)
    banned = _banned_ids(model, bos_id, eos_id)
    f64 = xp.float64                       # scores accumulate in float64 (see _topk on exactness)
    src_mask = padding_mask(src, pad)
    expand = xp.repeat(xp.arange(B), k)    # row b·k + j <- sentence b
    sent_rows = (xp.arange(B) * k)[:, None]                    # (B, 1): first row of each sentence
    limit = xp.asarray(limits)
    lp_limit = length_penalty(limit.astype(f64), alpha)        # (B,)
    memory = model.encode(src, src_mask)
    src_mask_k = src_mask[expand]                              # (B·k, 1, 1, S)
    if use_cache:
        cache = KVCache(model, memory, src_mask, T)            # memory projected once per sentence,
        cache.reorder(expand)                                  # then copied to its k rows
        memory_k = None
    else:
        cache, memory_k = None, memory[expand]                 # (B·k, S, d_model)
    tokens = xp.full((B * k, T + 1), pad, dtype=xp.int64)      # decoder inputs of every hypothesis
    tokens[:, 0] = bos_id
    live = xp.full((B, k), NEG_INF, dtype=f64)                 # log P of live hypotheses; -inf = empty
    live[:, 0] = 0.0                                           # step 0: one live slot per sentence
    finished = _Finished(xp, B, k, T, pad)
    done = xp.zeros(B, dtype=bool)

    for t in range(T):
        logp = _next_log_probs(model, tokens, t, cache, memory_k, src_mask_k).astype(f64)
        nan_rows = xp.isnan(logp).any(axis=1)
        logp[:, banned] = NEG_INF
        cand = (live.reshape(B * k, 1) + logp).reshape(B, k * V)   # log P of every extension
        top, top_logp = _topk(cand, k)                         # (B, k), best first
        parent = top // V                                      # slot the candidate extends
        tok = top % V                                          # its new token
        valid = top_logp > NEG_INF
        is_eos = valid & (tok == eos_id) if eos_id is not None else xp.zeros((B, k), dtype=bool)
        at_limit = (limit <= t + 1)[:, None]                   # (B, 1): no room for another token
        finishing = is_eos | (valid & at_limit)
        parent_rows = (sent_rows + parent).reshape(-1)         # (B·k,) rows of the parents

        # Move finished hypotheses to the finished set (Wu et al. 2016 scoring):
        # |Y| = t + 1 generated tokens, <eos> included when there is one. Done at every
        # step, also when nothing finished (then the old set wins every tie and stays as
        # it was): asking the device "did anything finish?" would be a second wait per step.
        new_tokens = tokens[parent_rows, 1:].reshape(B, k, T)     # a copy (fancy index)
        new_tokens[:, :, t] = tok
        finished.add(xp.where(finishing, top_logp / length_penalty(t + 1, alpha), NEG_INF), new_tokens,
                     (t + 1) - is_eos.astype(xp.int64))           # <eos> not returned

        live = xp.where(valid & ~finishing, top_logp, NEG_INF)
        # Stop test, per sentence. A live hypothesis (log P ≤ 0, length t+1)
        # can at best keep its log P while growing to any length in
        # t+2 .. limit; lp is monotonic in the length, so the best it can
        # score is log P / max(lp(t+2), lp(limit)).
        best_live = live.max(axis=1)
        bound = best_live / xp.maximum(length_penalty(t + 2.0, alpha), lp_limit)
        n_fin = (finished.score > NEG_INF).sum(axis=1)
        done |= ((n_fin >= k) & (bound <= finished.score[:, 0])) | (best_live == NEG_INF)
        # xp.where, not live[done] = NEG_INF: a boolean-mask assignment counts the True
        # entries on the host first, which on a GPU waits for the device at every step.
        live = xp.where(done[:, None], NEG_INF, live)
        if backend.host_flag(done.all() | nan_rows.any()) or t + 1 == T:   # the one wait per position
            break
        # The new beam: copy each parent's history (and cache rows) to its slot.
        tokens = tokens[parent_rows]
        tokens[:, t + 1] = tok.reshape(-1)
        if use_cache:
            cache.reorder(parent_rows, cross=False)            # same sentence: cross K/V unchanged

    _check_finite(nan_rows, t)
    return finished


__all__ = ["Greedy", "Sample", "Beam", "GREEDY", "PAPER_BEAM", "STRATEGIES", "MAX_BEAM_SIZE", "EXTRA_OUTPUT_LEN",
           "parse_strategy",
           "check_strategy", "decode", "greedy_decode", "beam_search", "keep_largest", "length_penalty",
           "NonFiniteOutputError"]
