"""Batches of sentence pairs, padded to rectangles, with their attention masks.

Sentences have different lengths but arrays are rectangles, so a batch is
padded with the <pad> id up to its longest sentence. Padding must then be made
invisible, which is what the masks do.

The masks (``layers/masks.py`` defines them and their convention, True = may
attend) are built here once per batch and travel with it, so the model never
rebuilds them:

* ``src_mask`` (B, 1, 1, S): True where the source token is real (masks keys).
* ``tgt_mask`` (B, 1, T, T): the decoder's self-attention mask, causal AND the
  key is not padding.

Batches are built on the host with NumPy (they are small integer arrays), then
moved to the array backend with ``backend.to_backend``.

Bucketing: the paper batched "sentence pairs ... by approximate sequence
length" (§5.1), about 25000 source and 25000 target tokens per batch. Putting
sentences of similar length together wastes little compute on padding;
:func:`batch_iterator` does this and can also size batches by tokens
(``max_tokens``) instead of by sentences.
"""

from __future__ import annotations

import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy

from .. import backend
from ..layers.masks import decoder_mask, padding_mask

Array = object  # a numpy.ndarray or a cupy.ndarray

# Sentences per pool, in batches: shuffle the corpus, sort each pool of ~100
# batches by length, cut it. Big pools give tight length groups; the shuffle
# before pooling keeps epochs from all looking alike.
POOL_BATCHES = 100


@dataclass
class Batch:
    """One training batch. B sentences, S source positions, T target positions.

    src:      (B, S) int64   source ids, padded with pad_id
    tgt_in:   (B, T) int64   <bos> + target ids, padded: the decoder input,
                             "shifted right" by one position (§3.1)
    tgt_out:  (B, T) int64   target ids + <eos>, padded: what the decoder must
                             predict at each position
    src_mask: (B, 1, 1, S) bool  True where src is a real token
    tgt_mask: (B, 1, T, T) bool  causal AND key is not padding
    n_tokens: int            non-pad tokens in tgt_out; the loss is averaged over these
    """

    src: Array
    tgt_in: Array
    tgt_out: Array
    src_mask: Array
    tgt_mask: Array
    n_tokens: int

    @property
    def size(self) -> int:
        """B, the number of sentence pairs."""
        return int(self.src.shape[0])


# -- building batches -----------------------------------------------------------------

def _pad_rows(seqs: Sequence[Sequence[int]], length: int, pad_id: int) -> numpy.ndarray:
    """Host (len(seqs), length) int64 array, row b = seqs[b] then pad_id."""
    out = numpy.full((len(seqs), length), pad_id, dtype=numpy.int64)
    for b, seq in enumerate(seqs):
        out[b, : len(seq)] = seq
    return out


def _check_seqs(name: str, seqs, pad_id: int, allow_empty: bool) -> None:
    if len(seqs) == 0:
        raise ValueError(f"{name}: no sequences given (need at least one to make a batch)")
    for b, seq in enumerate(seqs):
        if not allow_empty and len(seq) == 0:
            # An empty source is all padding: every key masked, so the encoder-decoder
            # attention would read nothing (its output is defined as 0). Refuse it.
            raise ValueError(f"{name}[{b}] is empty; every source sentence needs at least one token")
        if pad_id in seq:
            raise ValueError(
                f"{name}[{b}] contains the pad id {pad_id}; it would be masked out as padding"
            )


def make_source_batch(
    src_seqs: Sequence[Sequence[int]], pad_id: int, xp: types.ModuleType | None = None
) -> tuple[Array, Array]:
    """Pad source sentences for the encoder: returns (src (B, S) int64, src_mask (B, 1, 1, S) bool).

    Used at inference, where there is no target yet.
    """
    _check_seqs("src_seqs", src_seqs, pad_id, allow_empty=False)
    S = max(len(s) for s in src_seqs)
    src = backend.to_backend(_pad_rows(src_seqs, S, pad_id), xp)
    return src, padding_mask(src, pad_id)


def make_batch(
    src_seqs: Sequence[Sequence[int]],
    tgt_seqs: Sequence[Sequence[int]],
    pad_id: int,
    bos_id: int,
    eos_id: int,
    xp: types.ModuleType | None = None,
) -> Batch:
    """Pad B sentence pairs into a :class:`Batch` on ``xp`` (default: the current backend).

    src_seqs, tgt_seqs: B id lists each, without <bos>/<eos> (added here).
    An empty target is allowed (the model learns to say <eos> at once); an
    empty source is not (see ``_check_seqs``).
    """
    if len(src_seqs) != len(tgt_seqs):
        raise ValueError(
            f"make_batch: {len(src_seqs)} source sequences but {len(tgt_seqs)} target sequences"
        )
    _check_seqs("src_seqs", src_seqs, pad_id, allow_empty=False)
    _check_seqs("tgt_seqs", tgt_seqs, pad_id, allow_empty=True)
    xp = xp or backend.xp_default()

    S = max(len(s) for s in src_seqs)
    T = max(len(t) for t in tgt_seqs) + 1  # +1 for <bos> (in tgt_in) / <eos> (in tgt_out)
    # The decoder reads tgt_in[:, i] and must output tgt_out[:, i], the token
    # that follows: tgt_in is tgt_out shifted right by one with <bos> in front.
    tgt_in = _pad_rows([[bos_id, *t] for t in tgt_seqs], T, pad_id)
    tgt_out = _pad_rows([[*t, eos_id] for t in tgt_seqs], T, pad_id)
    n_tokens = int((tgt_out != pad_id).sum())  # = sum(len(t) + 1)

    src = backend.to_backend(_pad_rows(src_seqs, S, pad_id), xp)
    tgt_in = backend.to_backend(tgt_in, xp)
    tgt_out = backend.to_backend(tgt_out, xp)
    # The decoder's keys are the tgt_in positions; key 0 is <bos>, so no row is all False.
    tgt_mask = decoder_mask(tgt_in, pad_id)
    return Batch(
        src=src,
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        src_mask=padding_mask(src, pad_id),
        tgt_mask=tgt_mask,
        n_tokens=n_tokens,
    )


# -- iterating over a corpus -------------------------------------------------------------

def _positive_or_none(name: str, value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, numpy.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
    return int(value)


def _plan_batches(
    lengths: list[tuple[int, int]],
    batch_size: int | None,
    max_tokens: int | None,
    rng: numpy.random.Generator | None,
    shuffle: bool,
    pool_batches: int = POOL_BATCHES,
) -> list[list[int]]:
    """Group sentence indices into batches of similar length.

    lengths[k] = (len(src_k), len(tgt_k)). Returns lists of indices into it.
    A batch's cost is B x max(S, T + 1): the padded size of its larger side
    (the target side gains <bos>/<eos>). pool_batches: the pool sorted by length,
    in batches (1: each batch is a random draw, only its own rows sorted).
    """
    order = list(range(len(lengths)))
    if shuffle:
        order = rng.permutation(len(lengths)).tolist()

    def cost(k: int) -> int:
        s, t = lengths[k]
        return max(s, t + 1)

    # 1. Cut the (shuffled) order into pools of about pool_batches batches.
    if batch_size is not None:
        pool_size = pool_batches * batch_size
        pools = [order[i: i + pool_size] for i in range(0, len(order), pool_size)]
    else:
        pools, pool, pool_tokens = [], [], 0
        for k in order:
            pool.append(k)
            pool_tokens += cost(k)
            if pool_tokens >= pool_batches * max_tokens:
                pools.append(pool)
                pool, pool_tokens = [], 0
        if pool:
            pools.append(pool)

    # 2. Sort each pool by length (stable, so ties keep the shuffled order)
    #    and cut it into batches: neighbours in the sorted pool have similar
    #    lengths, so little padding is needed.
    batches: list[list[int]] = []
    for pool in pools:
        pool = sorted(pool, key=lambda k: lengths[k])
        batch: list[int] = []
        longest = 0  # max(S, T+1) so far in this batch
        for k in pool:
            new_longest = max(longest, cost(k))
            too_many = batch_size is not None and len(batch) + 1 > batch_size
            # Padded size if k joined: every row is padded to the longest row.
            too_big = max_tokens is not None and (len(batch) + 1) * new_longest > max_tokens
            if batch and (too_many or too_big):
                batches.append(batch)
                batch, new_longest = [], cost(k)
            # A single sentence longer than max_tokens still gets its own batch
            # rather than being dropped silently.
            batch.append(k)
            longest = new_longest
        if batch:
            batches.append(batch)

    # 3. Shuffle the batch order, or every epoch would run short-to-long.
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def batch_plan(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    batch_size: int | None = None,
    max_tokens: int | None = None,
    rng: numpy.random.Generator | None = None,
    shuffle: bool = True,
    by_length: bool = True,
) -> list[list[int]]:
    """One epoch's batches as lists of indices into ``pairs``, bucketed by length: what
    :func:`batch_iterator` pads into Batches (its arguments, checked the same way).

    by_length=False: no bucketing; each batch is a random draw of the pairs, of mixed
    lengths (``TrainSettings.batch_by_length``). Technically, pools of one batch each:
    sorting a pool then only orders the rows of its one batch.

    Data-parallel training (``distributed.step_batches``) splits each of these lists
    between the ranks, so every rank must compute the same plan: the same pairs and the
    same ``rng`` state give the same lists.
    """
    batch_size = _positive_or_none("batch_size", batch_size)
    max_tokens = _positive_or_none("max_tokens", max_tokens)
    if batch_size is None and max_tokens is None:
        raise ValueError("batch_iterator needs batch_size or max_tokens (or both)")
    if len(pairs) == 0:
        raise ValueError("batch_iterator: no sentence pairs given")
    if rng is not None and not isinstance(rng, numpy.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (numpy.random.default_rng(seed)), got {type(rng).__name__}"
        )
    if shuffle and rng is None:
        rng = numpy.random.default_rng()
    if not isinstance(by_length, bool):
        raise TypeError(f"by_length must be True or False, got {by_length!r}")
    lengths = [(len(src), len(tgt)) for src, tgt in pairs]
    return _plan_batches(lengths, batch_size, max_tokens, rng, shuffle, POOL_BATCHES if by_length else 1)


def batch_iterator(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    batch_size: int | None = None,
    max_tokens: int | None = None,
    rng: numpy.random.Generator | None = None,
    shuffle: bool = True,
    *,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    xp: types.ModuleType | None = None,
) -> Iterator[Batch]:
    """One epoch of :class:`Batch` es over ``pairs`` (source ids, target ids), bucketed by length.

    batch_size:  at most this many sentence pairs per batch;
    max_tokens:  at most this many padded positions per batch, counted as
                 B x max(S, T + 1) (§5.1 batched by tokens). Give either or
                 both (a batch then stops at whichever limit comes first).
                 A pair that alone exceeds max_tokens forms a batch by itself.
    rng:         a numpy.random.Generator; the same state gives the same
                 batches. None with shuffle=True uses fresh OS entropy.
    shuffle:     False keeps the corpus order (no randomness), still sorted by
                 length within each pool, e.g. for a validation loss.

    Arguments are checked when this is called, not at the first ``next()``.
    """
    plan = batch_plan(pairs, batch_size, max_tokens, rng, shuffle)

    def generate() -> Iterator[Batch]:
        for indices in plan:
            yield make_batch(
                [pairs[k][0] for k in indices],
                [pairs[k][1] for k in indices],
                pad_id=pad_id,
                bos_id=bos_id,
                eos_id=eos_id,
                xp=xp,
            )

    return generate()
