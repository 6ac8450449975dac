"""Batches, masks (True = may attend) and the length-bucketing iterator."""

import numpy as np
import pytest

from minitransformer.data.batching import Batch, batch_iterator, make_batch, make_source_batch
from minitransformer.layers.masks import causal_mask, padding_mask

PAD, BOS, EOS = 0, 1, 2
IDS = dict(pad_id=PAD, bos_id=BOS, eos_id=EOS)


def test_make_batch_shapes_values_and_masks():
    b = make_batch([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]], xp=np, **IDS)
    assert isinstance(b, Batch) and b.size == 2
    np.testing.assert_array_equal(b.src, [[5, 6, 7], [8, 0, 0]])
    # T = longest target + 1
    np.testing.assert_array_equal(b.tgt_in, [[BOS, 9, 10, 0], [BOS, 11, 12, 13]])
    np.testing.assert_array_equal(b.tgt_out, [[9, 10, EOS, 0], [11, 12, 13, EOS]])
    assert b.src.dtype == np.int64 and b.tgt_in.dtype == np.int64 and b.tgt_out.dtype == np.int64
    assert b.n_tokens == 3 + 4

    assert b.src_mask.shape == (2, 1, 1, 3) and b.src_mask.dtype == bool
    np.testing.assert_array_equal(b.src_mask[:, 0, 0], [[True, True, True], [True, False, False]])

    assert b.tgt_mask.shape == (2, 1, 4, 4) and b.tgt_mask.dtype == bool
    # sentence 0: target length 2, so tgt_in has 3 real positions; key 3 is padding
    expected0 = np.array(
        [
            [1, 0, 0, 0],
            [1, 1, 0, 0],
            [1, 1, 1, 0],
            [1, 1, 1, 0],  # a padded query still sees the real keys: no all-False row (no NaN)
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(b.tgt_mask[0, 0], expected0)
    np.testing.assert_array_equal(b.tgt_mask[1, 0], np.tril(np.ones((4, 4), dtype=bool)))


def test_tgt_in_is_tgt_out_shifted_right():
    b = make_batch([[5]], [[7, 8, 9]], xp=np, **IDS)
    np.testing.assert_array_equal(b.tgt_in[0, 1:], b.tgt_out[0, :-1])


def test_empty_target_is_allowed():
    b = make_batch([[5]], [[]], xp=np, **IDS)
    np.testing.assert_array_equal(b.tgt_in, [[BOS]])
    np.testing.assert_array_equal(b.tgt_out, [[EOS]])
    assert b.n_tokens == 1


def test_causal_mask():
    m = causal_mask(3, np)
    assert m.shape == (1, 1, 3, 3) and m.dtype == bool
    for i in range(3):
        for j in range(3):
            assert m[0, 0, i, j] == (j <= i)


def test_causal_mask_default_backend_and_bad_T():
    assert causal_mask(2).shape == (1, 1, 2, 2)
    with pytest.raises(ValueError, match="T must be a positive integer, got 0"):
        causal_mask(0, np)


def test_padding_mask():
    m = padding_mask(np.array([[4, 5, 0], [4, 0, 0]]), PAD)
    assert m.shape == (2, 1, 1, 3)
    np.testing.assert_array_equal(m[:, 0, 0], [[1, 1, 0], [1, 0, 0]])
    with pytest.raises(ValueError, match=r"must have shape \(B, S\)"):
        padding_mask(np.array([1, 2]), PAD)


def test_make_source_batch():
    src, mask = make_source_batch([[4, 5], [6]], PAD, xp=np)
    np.testing.assert_array_equal(src, [[4, 5], [6, 0]])
    np.testing.assert_array_equal(mask[:, 0, 0], [[1, 1], [1, 0]])
    assert mask.shape == (2, 1, 1, 2)


@pytest.mark.parametrize(
    "src, tgt, message",
    [
        ([], [], "no sequences given"),
        ([[4]], [], "1 source sequences but 0 target sequences"),
        ([[4], []], [[5], [6]], r"src_seqs\[1\] is empty"),
        ([[4, PAD]], [[5]], r"src_seqs\[0\] contains the pad id 0"),
        ([[4]], [[5, PAD]], r"tgt_seqs\[0\] contains the pad id 0"),
    ],
)
def test_make_batch_bad_input(src, tgt, message):
    with pytest.raises(ValueError, match=message):
        make_batch(src, tgt, xp=np, **IDS)


def test_make_source_batch_bad_input():
    with pytest.raises(ValueError, match="no sequences given"):
        make_source_batch([], PAD, xp=np)
    with pytest.raises(ValueError, match="is empty"):
        make_source_batch([[]], PAD, xp=np)


# -- batch_iterator --------------------------------------------------------------------


def _random_pairs(n, seed=0, max_len=40):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        s = int(rng.integers(1, max_len + 1))
        t = max(1, s + int(rng.integers(-3, 4)))  # targets about as long as sources
        pairs.append((list(rng.integers(3, 50, size=s)), list(rng.integers(3, 50, size=t))))
    return pairs


def _key(batch):
    return batch.src.tolist(), batch.tgt_out.tolist()


def _sentences(batch):
    """The (src, tgt) pairs a batch holds, padding and BOS/EOS removed."""
    out = []
    for s, t in zip(batch.src.tolist(), batch.tgt_out.tolist()):
        s = tuple(x for x in s if x != PAD)
        t = tuple(x for x in t if x != PAD)[:-1]  # drop EOS
        out.append((s, t))
    return out


def padding_fraction(batches):
    """Fraction of all src and tgt positions that are padding (wasted compute)."""
    pad = total = 0
    for b in batches:
        for arr in (b.src, b.tgt_out):
            pad += int((arr == PAD).sum())
            total += arr.size
    return pad / total


def test_every_pair_appears_exactly_once():
    pairs = _random_pairs(1000)
    batches = list(batch_iterator(pairs, batch_size=32, rng=np.random.default_rng(1), xp=np, **IDS))
    seen = sorted(p for b in batches for p in _sentences(b))
    assert seen == sorted((tuple(s), tuple(t)) for s, t in pairs)
    assert all(b.size <= 32 for b in batches)


def test_deterministic_for_a_given_rng_state():
    pairs = _random_pairs(500)
    a = [_key(b) for b in batch_iterator(pairs, batch_size=16, rng=np.random.default_rng(7), xp=np, **IDS)]
    b = [_key(b) for b in batch_iterator(pairs, batch_size=16, rng=np.random.default_rng(7), xp=np, **IDS)]
    c = [_key(b) for b in batch_iterator(pairs, batch_size=16, rng=np.random.default_rng(8), xp=np, **IDS)]
    assert a == b
    assert a != c


def test_no_shuffle_needs_no_rng_and_is_repeatable():
    pairs = _random_pairs(100)
    a = [_key(b) for b in batch_iterator(pairs, batch_size=8, shuffle=False, xp=np, **IDS)]
    b = [_key(b) for b in batch_iterator(pairs, batch_size=8, shuffle=False, xp=np, **IDS)]
    assert a == b


def test_bucketing_pads_less_than_random_batching():
    pairs = _random_pairs(2000)
    bucketed = list(batch_iterator(pairs, batch_size=32, rng=np.random.default_rng(0), xp=np, **IDS))
    order = np.random.default_rng(0).permutation(len(pairs))
    random_batches = [
        make_batch([pairs[k][0] for k in idx], [pairs[k][1] for k in idx], xp=np, **IDS)
        for idx in np.array_split(order, len(bucketed))
    ]
    bucketed_frac, random_frac = padding_fraction(bucketed), padding_fraction(random_batches)
    # lengths 1..40 uniform: random batches are ~half padding, bucketed ones very little
    assert random_frac > 0.3
    assert bucketed_frac < 0.1
    assert bucketed_frac < random_frac / 4


def test_bucketed_batches_come_in_mixed_length_order():
    pairs = _random_pairs(2000)
    batches = list(batch_iterator(pairs, batch_size=8, rng=np.random.default_rng(0), xp=np, **IDS))
    widths = [b.src.shape[1] for b in batches]
    assert widths != sorted(widths)  # the batch order was shuffled


def test_max_tokens_limits_padded_size():
    pairs = _random_pairs(1000)
    max_tokens = 200
    batches = list(batch_iterator(pairs, max_tokens=max_tokens, rng=np.random.default_rng(0), xp=np, **IDS))
    for b in batches:
        S, T = b.src.shape[1], b.tgt_out.shape[1]  # T here already includes the +1
        assert b.size * max(S, T) <= max_tokens
    assert sum(b.size for b in batches) == len(pairs)
    # batches of short sentences hold more of them
    sizes = {b.src.shape[1]: b.size for b in batches}
    assert max(sizes.values()) > min(sizes.values())


def test_max_tokens_and_batch_size_together():
    pairs = _random_pairs(300, max_len=5)
    batches = list(
        batch_iterator(pairs, batch_size=4, max_tokens=1000, rng=np.random.default_rng(0), xp=np, **IDS)
    )
    assert max(b.size for b in batches) == 4


def test_a_pair_longer_than_max_tokens_gets_its_own_batch():
    pairs = [([5] * 50, [6] * 50), ([5], [6])]
    batches = list(batch_iterator(pairs, max_tokens=10, shuffle=False, xp=np, **IDS))
    assert sorted(b.size for b in batches) == [1, 1]


def test_batch_iterator_bad_input_fails_at_call_time():
    pairs = _random_pairs(10)
    with pytest.raises(ValueError, match="needs batch_size or max_tokens"):
        batch_iterator(pairs, xp=np, **IDS)
    with pytest.raises(ValueError, match="batch_size must be a positive integer or None, got 0"):
        batch_iterator(pairs, batch_size=0, xp=np, **IDS)
    with pytest.raises(ValueError, match="max_tokens must be a positive integer or None, got -5"):
        batch_iterator(pairs, max_tokens=-5, xp=np, **IDS)
    with pytest.raises(ValueError, match="no sentence pairs given"):
        batch_iterator([], batch_size=2, xp=np, **IDS)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        batch_iterator(pairs, batch_size=2, rng=42, xp=np, **IDS)
