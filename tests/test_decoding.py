"""Greedy decoding, sampling, beam search (§6.1), the strategies that name them, and the key/value cache.

One small model is trained for a few dozen SGD steps on reversing short
sequences, so that its outputs depend on the input and <eos> comes at varied
places (an untrained model tends to repeat one token until the length limit).
It is trained once in float64; a float32 copy of the same weights is made too.
"""

from __future__ import annotations

import ast
import inspect
import math

import numpy as np
import pytest

from minitransformer import backend, decoding, decoding_inputs
from minitransformer.data.batching import make_batch, make_source_batch
from minitransformer.decoding import (
    GREEDY,
    MAX_BEAM_SIZE,
    Beam,
    Greedy,
    Sample,
    beam_search,
    decode,
    greedy_decode,
    keep_largest,
    length_penalty,
    parse_strategy,
)
from minitransformer.layers.loss import LabelSmoothedCrossEntropy, log_softmax
from minitransformer.layers.masks import causal_mask
from minitransformer.layers.parameter import eval_mode
from minitransformer.model import KVCache, Transformer, TransformerConfig
from minitransformer.translate import translate_ids

PAD, BOS, EOS = 0, 1, 2
CFG = TransformerConfig(vocab_size=12, d_model=32, h=4, N=2, d_ff=64, P_drop=0.1, max_len=64)


def _build(dtype: str, seed: int = 0, cfg: TransformerConfig = CFG) -> Transformer:
    old = backend.default_dtype()
    backend.set_default_dtype(dtype)
    try:
        return Transformer(cfg, seed=seed)
    finally:
        backend.set_default_dtype(old)


def _random_sources(rng, n, lo=1, hi=8):
    return [rng.integers(3, CFG.vocab_size, rng.integers(lo, hi)).tolist() for _ in range(n)]


# The model's public one-position API, in evaluation mode (dropout off), as decoding uses it.

def encode_source(model, src, src_mask=None):
    with eval_mode(model):
        return model.encode(src, src_mask)


def new_cache(model, memory, src_mask, T):
    return KVCache(model, memory, src_mask, T)


def cached_step(model, y_t, t, cache):
    """log-probabilities (B, V) of position t from Transformer.decode_step."""
    with eval_mode(model):
        return log_softmax(model.decode_step(y_t, t, cache))


def uncached_step(model, prefix, memory, src_mask):
    """The reference: re-decode the whole prefix teacher-forced, keep the last row."""
    with eval_mode(model):
        return log_softmax(model.decode(prefix, memory, src_mask)[:, -1])


@pytest.fixture(scope="module")
def model64():
    """Trained ~1.5 s: 40 plain SGD steps on 'reverse the sequence'."""
    model = _build("float64")
    rng = np.random.default_rng(0)
    loss_fn = LabelSmoothedCrossEntropy(PAD, 0.1)
    model.train()
    for _ in range(40):
        srcs = _random_sources(rng, 24)
        batch = make_batch(srcs, [s[::-1] for s in srcs], PAD, BOS, EOS)
        loss_fn.forward(model.forward(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask), batch.tgt_out)
        model.zero_grad()
        model.backward(loss_fn.backward())
        for p in model.parameters():
            p.data -= 0.5 * p.grad
    return model


@pytest.fixture(scope="module")
def model32(model64):
    model = _build("float32")
    for p32, p64 in zip(model.parameters(), model64.parameters()):
        p32.data[...] = p64.data
    return model


@pytest.fixture(scope="module")
def sources():
    """30 sources of lengths 1..7, as a padded (B, S) batch and as lists."""
    seqs = _random_sources(np.random.default_rng(1), 30)
    src, _ = make_source_batch(seqs, PAD, np)
    return seqs, src


def _limit(model, n_src):
    return min(n_src + 50, model.cfg.max_len)


def teacher_forced_score(model, src_ids, hyp, ended_with_eos, alpha=0.6):
    """log P(Y | X) by one ordinary forward pass, and its Wu et al. penalized score."""
    y = list(hyp) + ([EOS] if ended_with_eos else [])
    src = np.asarray([src_ids], dtype=np.int64)
    tgt_in = np.asarray([[BOS] + y[:-1]], dtype=np.int64)
    was = model.training
    model.eval()
    logits = model.forward(src, tgt_in, tgt_mask=causal_mask(len(y), np))
    model.train(was)
    logp = log_softmax(logits)[0]
    total = float(sum(logp[i, tok] for i, tok in enumerate(y)))
    return total, total / ((5 + len(y)) / 6) ** alpha


# -- the cache ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, tol", [("model64", 1e-10), ("model32", 1e-4)])
def test_cached_step_logprobs_match_uncached_and_full_forward(name, tol, sources, request):
    model = request.getfixturevalue(name)
    _, src = sources
    src_mask = src != PAD
    src_mask = src_mask[:, None, None, :]
    memory = encode_source(model, src, src_mask)
    T = 12
    cache = new_cache(model, memory, src_mask, T)
    prefix = np.full((src.shape[0], 1), BOS, dtype=np.int64)
    steps = []
    for t in range(T):
        a = cached_step(model, prefix[:, t: t + 1], t, cache)
        b = uncached_step(model, prefix, memory, src_mask)
        assert a.shape == (src.shape[0], CFG.vocab_size) and a.dtype == memory.dtype
        np.testing.assert_allclose(a, b, rtol=0, atol=tol)
        steps.append(a)
        prefix = np.concatenate([prefix, a.argmax(axis=1)[:, None]], axis=1)   # any continuation will do
    # Both equal the teacher-forced forward pass of the whole prefix.
    model.eval()
    full = log_softmax(model.forward(src, prefix[:, :-1], tgt_mask=causal_mask(T, np)))
    model.train()
    np.testing.assert_allclose(np.stack(steps, axis=1), full, rtol=0, atol=tol)


@pytest.mark.slow
def test_cached_equals_uncached_pre_ln(sources):
    """The pre-LN variant adds a final LayerNorm after the decoder stack."""
    model = _build("float64", seed=3, cfg=CFG.with_(pre_ln=True))
    assert model.decoder.final_norm is not None
    for p in model.parameters():
        if p.data.ndim == 1:                                     # non-trivial LayerNorm gains/biases
            p.data += np.random.default_rng(4).normal(0, 0.3, p.data.shape)
    _, src = sources
    mask = (src != PAD)[:, None, None, :]
    memory = encode_source(model, src)
    cache = new_cache(model, memory, mask, 6)
    prefix = np.full((src.shape[0], 1), BOS, dtype=np.int64)
    for t in range(6):
        a = cached_step(model, prefix[:, t: t + 1], t, cache)
        np.testing.assert_allclose(a, uncached_step(model, prefix, memory, mask), rtol=0, atol=1e-10)
        prefix = np.concatenate([prefix, a.argmax(axis=1)[:, None]], axis=1)
    assert greedy_decode(model, src, BOS, EOS) == greedy_decode(model, src, BOS, EOS, use_cache=False)
    assert beam_search(model, src[:5], BOS, EOS, beam_size=1) == greedy_decode(model, src[:5], BOS, EOS)


def test_cache_steps_must_come_in_order(model64, sources):
    _, src = sources
    memory = encode_source(model64, src)
    cache = new_cache(model64, memory, src[:, None, None, :] != PAD, 4)
    ids = np.full((src.shape[0], 1), BOS, dtype=np.int64)
    with pytest.raises(ValueError, match="in order"):
        cached_step(model64, ids, 1, cache)


def test_cache_reorder_selects_rows(model64, sources):
    """Stepping, reordering rows, stepping again == stepping on reordered inputs."""
    _, src = sources
    src = src[:6]
    mask = (src != PAD)[:, None, None, :]
    memory = encode_source(model64, src)
    ids = np.random.default_rng(3).integers(3, 12, (6, 3))
    ids[:, 0] = BOS
    index = np.array([2, 2, 0, 5, 1, 3])

    cache = new_cache(model64, memory, mask, 3)
    for t in range(2):
        cached_step(model64, ids[:, t: t + 1], t, cache)
    cache.reorder(index)
    got = cached_step(model64, ids[index, 2:3], 2, cache)
    want = uncached_step(model64, ids[index], memory[index], mask[index])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)

    # A reorder that changes the batch size (beam search's initial copy).
    cache = new_cache(model64, memory, mask, 2)
    cached_step(model64, ids[:, :1], 0, cache)
    grow = np.repeat(np.arange(6), 3)
    cache.reorder(grow)
    assert cache.batch_size == 18
    got = cached_step(model64, ids[grow, 1:2], 1, cache)
    want = uncached_step(model64, ids[grow, :2], memory[grow], mask[grow])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


# -- cached == uncached for whole decodes -------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", ["model64", "model32"])
def test_greedy_cached_equals_uncached(name, sources, request):
    model = request.getfixturevalue(name)
    _, src = sources
    assert greedy_decode(model, src, BOS, EOS) == greedy_decode(model, src, BOS, EOS, use_cache=False)


@pytest.mark.parametrize("name, tol", [("model64", 1e-10), ("model32", 1e-4)])
def test_beam_cached_equals_uncached(name, tol, sources, request):
    model = request.getfixturevalue(name)
    _, src = sources
    src = src[:12]
    a = beam_search(model, src, BOS, EOS, beam_size=4, n_best=4)
    b = beam_search(model, src, BOS, EOS, beam_size=4, n_best=4, use_cache=False)
    assert [[ids for ids, _ in s] for s in a] == [[ids for ids, _ in s] for s in b]
    np.testing.assert_allclose([sc for s in a for _, sc in s], [sc for s in b for _, sc in s], rtol=0, atol=tol)


# -- beam search properties --------------------------------------------------------------------

@pytest.mark.parametrize("name", ["model64", "model32"])
def test_beam_size_one_is_greedy(name, request):
    model = request.getfixturevalue(name)
    seqs = _random_sources(np.random.default_rng(7), 80, 1, 12)
    src, _ = make_source_batch(seqs, PAD, np)
    greedy = greedy_decode(model, src, BOS, EOS)
    assert beam_search(model, src, BOS, EOS, beam_size=1) == greedy
    assert len({tuple(g) for g in greedy}) > 10                 # the outputs really vary
    assert len({len(g) for g in greedy}) > 3


def test_beam_size_one_is_greedy_untrained_model():
    """Random weights scaled up (peaked distributions), long outputs that hit the limit."""
    model = _build("float32", seed=5)
    for p in model.parameters():
        if p.data.ndim == 2:
            p.data *= 2.0
    seqs = _random_sources(np.random.default_rng(8), 40, 1, 10)
    src, _ = make_source_batch(seqs, PAD, np)
    assert beam_search(model, src, BOS, EOS, beam_size=1) == greedy_decode(model, src, BOS, EOS)


def test_scores_equal_teacher_forced_penalized_log_prob(model64, sources):
    seqs, src = sources
    nbest = beam_search(model64, src, BOS, EOS, beam_size=4, n_best=4)
    checked = 0
    for s, hyps in zip(seqs, nbest):
        assert 1 <= len(hyps) <= 4
        scores = [sc for _, sc in hyps]
        assert scores == sorted(scores, reverse=True)
        for ids, score in hyps:
            assert EOS not in ids and PAD not in ids and BOS not in ids
            ended = len(ids) < _limit(model64, len(s))
            _, want = teacher_forced_score(model64, s, ids, ended)
            assert score == pytest.approx(want, abs=1e-9)
            checked += 1
    assert checked > len(seqs)
    # return_scores gives the best of the n-best list.
    best = beam_search(model64, src, BOS, EOS, beam_size=4, return_scores=True)
    assert [b[0] for b in best] == [h[0][0] for h in nbest]
    assert beam_search(model64, src, BOS, EOS, beam_size=4) == [h[0][0] for h in nbest]


def test_beam_beats_or_ties_greedy(model64):
    seqs = _random_sources(np.random.default_rng(11), 40, 1, 10)
    src, _ = make_source_batch(seqs, PAD, np)
    greedy = greedy_decode(model64, src, BOS, EOS)
    beam = beam_search(model64, src, BOS, EOS, beam_size=4, return_scores=True)
    compared = 0
    for s, g, (_, score) in zip(seqs, greedy, beam):
        if len(g) < _limit(model64, len(s)):                     # greedy finished with <eos>
            _, g_score = teacher_forced_score(model64, s, g, True)
            assert score >= g_score - 1e-9
            compared += 1
    assert compared >= 30


def _bias_eos(monkeypatch, model, bias):
    """Add ``bias`` to the <eos> logit (teacher forcing sees the same model)."""
    forward = model.output_projection.forward

    def biased(x):
        logits = forward(x)
        logits[..., EOS] += bias
        return logits

    monkeypatch.setattr(model.output_projection, "forward", biased)


def test_finished_hypotheses_stop_growing(model64, sources, monkeypatch):
    """With <eos> made likely, hypotheses finish at many different steps; each
    finished one is kept exactly as it was when it produced <eos>."""
    seqs, src = sources
    _bias_eos(monkeypatch, model64, 2.5)
    steps = []
    real_step = model64.decode_step
    monkeypatch.setattr(model64, "decode_step", lambda y, t, cache: (steps.append(t), real_step(y, t, cache))[1])
    nbest = beam_search(model64, src, BOS, EOS, beam_size=4, n_best=4)
    assert len(steps) < max(_limit(model64, len(s)) for s in seqs)     # stopped early, not at the limit
    lengths = set()
    for s, hyps in zip(seqs, nbest):
        assert len(hyps) == 4                                   # k finished before stopping
        for ids, score in hyps:
            assert EOS not in ids                               # nothing continues after <eos>
            _, want = teacher_forced_score(model64, s, ids, True)
            assert score == pytest.approx(want, abs=1e-9)       # scored at the step it finished
            lengths.add(len(ids))
    assert len(lengths) >= 3
    # The empty hypothesis ([<eos>] at step 0) is finished at step 0 with its own score.
    empties = [sc for hyps in nbest for ids, sc in hyps if ids == []]
    assert empties


def test_length_penalty_formula():
    assert length_penalty(1, 0.6) == pytest.approx((6 / 6) ** 0.6)
    assert length_penalty(7, 0.6) == pytest.approx(2.0 ** 0.6)
    assert length_penalty(np.array([1.0, 7.0]), 0.0).tolist() == [1.0, 1.0]


# -- lengths and padding -----------------------------------------------------------------------

def test_max_length_is_input_length_plus_50_capped(model64, monkeypatch):
    _bias_eos(monkeypatch, model64, -50.0)                     # never <eos>
    seqs = [[5], [4, 6, 7], [3] * 20]
    src, _ = make_source_batch(seqs, PAD, np)
    want = [51, 53, 64]                                         # len + 50, capped by cfg.max_len = 64
    assert [len(y) for y in greedy_decode(model64, src, BOS, EOS)] == want
    assert [len(y) for y in beam_search(model64, src, BOS, EOS, beam_size=3)] == want
    assert [len(y) for y in greedy_decode(model64, src, BOS, EOS, max_len=7)] == [7, 7, 7]
    assert [len(y) for y in beam_search(model64, src, BOS, EOS, beam_size=2, max_len=7)] == [7, 7, 7]
    assert [len(y) for y in greedy_decode(model64, src, BOS, EOS, max_len=1000)] == [64] * 3


def test_no_eos_runs_to_max_len(model64, sources):
    _, src = sources
    out = greedy_decode(model64, src[:3], BOS, None, max_len=9)
    assert [len(y) for y in out] == [9, 9, 9]


def test_padding_does_not_change_a_sentence(model64, sources):
    seqs, src = sources
    assert src.shape[1] > min(len(s) for s in seqs)             # the batch really is padded
    greedy = greedy_decode(model64, src, BOS, EOS)
    beam = beam_search(model64, src, BOS, EOS, beam_size=3)
    for i in range(0, len(seqs), 3):
        alone = np.asarray([seqs[i]])
        assert greedy_decode(model64, alone, BOS, EOS) == [greedy[i]]
        assert beam_search(model64, alone, BOS, EOS, beam_size=3) == [beam[i]]


def test_batch_of_one_and_host_lists(model32):
    out = beam_search(model32, np.asarray([[4, 5, 6]]), BOS, EOS, beam_size=4, return_scores=True)
    assert len(out) == 1
    ids, score = out[0]
    assert all(type(i) is int for i in ids) and isinstance(score, float) and math.isfinite(score)


# -- modes, backends, code rules ---------------------------------------------------------------

def test_dropout_is_off_and_modes_are_restored(model64, sources):
    _, src = sources
    src = src[:8]
    model64.eval()
    want_g = greedy_decode(model64, src, BOS, EOS)
    want_b = beam_search(model64, src, BOS, EOS)
    model64.train()
    assert greedy_decode(model64, src, BOS, EOS) == want_g      # dropout (P=0.1) not applied
    assert beam_search(model64, src, BOS, EOS) == want_b
    assert all(layer.training for layer in model64.modules())
    # A mixed state comes back exactly as it was.
    model64.decoder.layers[0].train(False)
    before = [layer.training for layer in model64.modules()]
    greedy_decode(model64, src, BOS, EOS)
    beam_search(model64, src, BOS, EOS, beam_size=2, use_cache=False)
    encode_source(model64, src)
    assert [layer.training for layer in model64.modules()] == before
    model64.train()


def test_decoding_does_not_import_numpy():
    tree = ast.parse(inspect.getsource(decoding))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert all(a.name.split(".")[0] != "numpy" for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] != "numpy"


@pytest.mark.gpu
@pytest.mark.skipif(not backend.cupy_available(), reason="needs CuPy and a CUDA device")
def test_cupy_matches_numpy(model32, sources):  # pragma: no cover - needs a GPU
    cp = backend.module_for("cupy")
    seqs, src = sources
    gpu = _build("float32")
    for pg, pc in zip(gpu.parameters(), model32.parameters()):
        pg.data[...] = pc.data
    gpu.to("cupy")
    src_gpu = cp.asarray(src)
    g_cpu = greedy_decode(model32, src, BOS, EOS)
    g_gpu = greedy_decode(gpu, src_gpu, BOS, EOS)
    assert g_gpu == greedy_decode(gpu, src_gpu, BOS, EOS, use_cache=False)
    assert sum(a == b for a, b in zip(g_cpu, g_gpu)) >= len(seqs) - 2       # float32 on two devices
    b_gpu = beam_search(gpu, src_gpu, BOS, EOS, beam_size=4, return_scores=True)
    assert beam_search(gpu, src_gpu, BOS, EOS, beam_size=1) == g_gpu
    b_cpu = beam_search(model32, src, BOS, EOS, beam_size=4, return_scores=True)
    assert sum(a[0] == b[0] for a, b in zip(b_cpu, b_gpu)) >= len(seqs) - 2


def test_decoding_uses_only_the_models_public_api():
    """Search lives in decoding.py; one decoder position lives in the model. decoding.py
    may call the model's public methods and read its config, nothing of its insides."""
    allowed = {"encode", "decode", "decode_step", "xp", "cfg"}
    tree = ast.parse(inspect.getsource(decoding) + inspect.getsource(decoding_inputs))
    used = {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "model"}
    assert used <= allowed, f"decoding.py reaches into the model: {sorted(used - allowed)}"
    assert {"encode", "decode", "decode_step"} <= used


def test_cupy_matches_numpy_on_the_stand_in(model32, sources, fake_cupy_installed):
    """The check above through the CPU stand-in for CuPy (tests/fake_cupy.py): it runs without a GPU."""
    test_cupy_matches_numpy(model32, sources)


# -- strategies: named, frozen, checked when made ------------------------------------------------

def test_strategies_are_small_frozen_values():
    assert Greedy() == GREEDY and Beam() == Beam(4, 0.6) and Sample() == Sample(1.0, None, None, 0)
    assert len({Greedy(), Beam(4), Beam(4, 0.6), Sample(seed=1), Sample(seed=1)}) == 3    # hashable values
    with pytest.raises(AttributeError):
        Beam().size = 8                                         # frozen: a strategy never changes under you
    assert repr(Sample(temperature=0.5, top_k=3)) == "Sample(temperature=0.5, top_k=3, top_p=None, seed=0, min_p=None)"
    assert [str(s) for s in (GREEDY, Beam(4), Beam(2, 1.0), Sample(0.7, 10, 0.9, 3))] == [
        "greedy", "beam 4", "beam 2 (α=1)", "sample (T=0.7, top-k 10, top-p 0.9, seed 3)"]
    assert type(Sample(temperature=2, seed=np.int64(4)).temperature) is float       # stored as plain numbers
    assert type(Sample(seed=np.int64(4)).seed) is int and type(Beam(np.int32(3)).size) is int


@pytest.mark.parametrize("make, error, message", [
    (lambda: Beam(2.5), TypeError, "Beam: size must be a whole number, got 2.5"),
    (lambda: Beam(True), TypeError, "Beam: size must be a whole number, got True"),
    (lambda: Beam(0), ValueError, "Beam: size must be ≥ 1, got 0"),
    (lambda: Beam(MAX_BEAM_SIZE + 1), ValueError, f"Beam: size must be at most {MAX_BEAM_SIZE}"),
    (lambda: Beam(2 ** 63), ValueError, f"got {2 ** 63}"),
    (lambda: Beam(4, float("nan")), ValueError, "Beam: alpha must be a finite number, got nan"),
    (lambda: Beam(4, -0.1), ValueError, "Beam: alpha must be ≥ 0"),
    (lambda: Beam(4, 10 ** 400), ValueError, "Beam: alpha must be a finite number, got inf"),
    (lambda: Beam(4, "0.6"), TypeError, "Beam: alpha must be a number"),
    (lambda: Sample(temperature=0), ValueError, "Sample: temperature must be > 0, got 0.0"),
    (lambda: Sample(temperature=float("inf")), ValueError, "temperature must be a finite number"),
    (lambda: Sample(temperature=True), TypeError, "temperature must be a number"),
    (lambda: Sample(top_k=0), ValueError, "Sample: top_k must be ≥ 1, got 0"),
    (lambda: Sample(top_k=2.0), TypeError, "Sample: top_k must be a whole number"),
    (lambda: Sample(top_p=0), ValueError, "Sample: top_p must be in (0, 1], got 0.0"),
    (lambda: Sample(top_p=1.5), ValueError, "top_p must be in (0, 1]"),
    (lambda: Sample(top_p=float("nan")), ValueError, "top_p must be a finite number"),
    (lambda: Sample(seed=-1), ValueError, "Sample: seed must be in 0.."),
    (lambda: Sample(seed=2 ** 63), ValueError, "Sample: seed must be in 0.."),
    (lambda: Sample(seed=1.5), TypeError, "Sample: seed must be a whole number"),
])
def test_a_bad_strategy_is_refused_when_made(make, error, message):
    with pytest.raises(error) as info:
        make()
    assert message in str(info.value)


@pytest.mark.parametrize("text, want", [
    ("greedy", Greedy()), ("beam", Beam()), ("beam4", Beam(4)), ("beam12", Beam(12)),
    ("beam:size=8,alpha=1.0", Beam(8, 1.0)), ("beam2:alpha=0", Beam(2, 0.0)), ("sample", Sample()),
    ("sample:temperature=0.7,top_k=10,top_p=0.9,seed=3", Sample(0.7, 10, 0.9, 3)),
])
def test_parse_strategy(text, want):
    assert parse_strategy(text) == want


@pytest.mark.parametrize("text, message", [
    ("topk", "unknown decoding strategy 'topk'; expected one of greedy, sample, beam"),
    ("greedy3", "greedy takes no number"),
    ("beam0", "'beam0': Beam: size must be ≥ 1, got 0"),
    ("beam100000", f"must be at most {MAX_BEAM_SIZE}"),
    ("beam9223372036854775808", f"must be at most {MAX_BEAM_SIZE}"),
    ("sample:temp=2", "FIELD one of temperature, top_k, top_p, seed, min_p, got 'temp=2'"),
    ("sample:top_k=2.5", "top_k='2.5' is not a whole number"),
    ("sample:temperature=hot", "temperature='hot' is not a number"),
    ("sample:top_p=nan", "top_p='nan' is not a finite number"),
    ("sample:seed", "got 'seed'"),
])
def test_parse_strategy_names_the_problem(text, message):
    with pytest.raises(ValueError) as info:
        parse_strategy(text)
    assert message in str(info.value)


# -- the decoding API checks its arguments before it allocates (issue 19, items 9 and 10) ------

def _refuses_before_encoding(monkeypatch, model, call, error, message):
    """``call`` raises ``error`` with ``message``, and the model was never run (nothing allocated for it)."""
    def never(*args, **kwargs):
        raise AssertionError("the model ran before the arguments were checked")
    monkeypatch.setattr(model, "encode", never)
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)
    monkeypatch.undo()


@pytest.mark.parametrize("call, error, message", [
    (lambda m, s: beam_search(m, s, BOS, EOS, beam_size=2.5), TypeError, "beam_search: beam_size must be a whole "
     "number, got 2.5"),
    (lambda m, s: beam_search(m, s, BOS, EOS, beam_size=True), TypeError, "beam_size must be a whole number, got True"),
    (lambda m, s: beam_search(m, s, BOS, EOS, beam_size=100000), ValueError, f"beam_search: beam_size must be at "
     f"most {MAX_BEAM_SIZE}"),
    (lambda m, s: beam_search(m, s, BOS, EOS, beam_size=2 ** 63), ValueError, "beam_size must be at most"),
    (lambda m, s: beam_search(m, s, BOS, EOS, beam_size=2 ** 64 + 1), ValueError, "beam_size must be at most"),
    (lambda m, s: beam_search(m, s, BOS, EOS, alpha=float("nan")), ValueError, "beam_search: alpha must be a "
     "finite number, got nan"),
    (lambda m, s: beam_search(m, s, BOS, EOS, beam_size=2, n_best=3), ValueError, "n_best must be in 1..2, got 3"),
    (lambda m, s: beam_search(m, s, BOS, EOS, n_best=1.0), TypeError, "n_best must be a whole number"),
    (lambda m, s: beam_search(m, s, BOS, EOS, return_scores=1), TypeError, "return_scores must be True or False"),
    (lambda m, s: beam_search(m, s, BOS, -1), ValueError, "beam_search: eos_id must be in 0..11, got -1"),
    (lambda m, s: greedy_decode(m, s, BOS, EOS, max_len=2.5), TypeError, "greedy_decode: max_len must be a whole "
     "number, got 2.5"),
    (lambda m, s: greedy_decode(m, s, BOS, EOS, max_len=True), TypeError, "max_len must be a whole number"),
    (lambda m, s: greedy_decode(m, s, BOS, EOS, max_len=0), ValueError, "greedy_decode: max_len must be ≥ 1, got 0"),
    (lambda m, s: greedy_decode(m, s, BOS, -1), ValueError, "greedy_decode: eos_id must be in 0..11, got -1"),
    (lambda m, s: greedy_decode(m, s, BOS, 12), ValueError, "eos_id must be in 0..11, got 12"),
    (lambda m, s: greedy_decode(m, s, BOS, 2.0), TypeError, "eos_id must be a whole number, got 2.0"),
    (lambda m, s: greedy_decode(m, s, -3, EOS), ValueError, "bos_id must be in 0..11, got -3"),
    (lambda m, s: greedy_decode(m, s, BOS, EOS, use_cache="no"), TypeError, "use_cache must be True or False"),
    (lambda m, s: decode(m, s, BOS, EOS, 4), TypeError, "strategy must be a decoding strategy such as Greedy(), "
     "Beam(size=4) or Sample(temperature=1.0), got 4 (beam_size=4 is now strategy=Beam(4))"),
    (lambda m, s: decode(m, s, BOS, EOS, "beam4"), TypeError, "got 'beam4'"),
    (lambda m, s: decode(m, s, BOS, EOS, Sample(), max_len=2.5), TypeError, "decode: max_len must be a whole number"),
])
def test_the_decoding_api_refuses_bad_arguments_by_name(model64, sources, monkeypatch, call, error, message):
    _, src = sources
    _refuses_before_encoding(monkeypatch, model64, lambda: call(model64, src), error, message)


def test_translate_ids_refuses_a_beam_size_integer(model64):
    with pytest.raises(TypeError, match="is now strategy=Beam"):
        translate_ids(model64, None, [], 4)


# -- sampling -------------------------------------------------------------------------------------

def chi2_sf(x: float, df: int) -> float:
    """P(X > x) for X ~ chi-square with df (a whole number ≥ 1) degrees of freedom, in closed form.

    Even df: exp(-x/2) · sum_{i<df/2} (x/2)^i / i!. Odd df: erfc(sqrt(x/2)) + 2 φ(sqrt x) ·
    sum_{r=1}^{(df-1)/2} x^{r-1/2} / (1·3·…·(2r-1)), φ the standard normal density.
    """
    if df % 2 == 0:
        term = total = 1.0
        for i in range(1, df // 2):
            term *= (x / 2) / i
            total += term
        return math.exp(-x / 2) * total
    total, term = 0.0, math.sqrt(x)
    for r in range(1, (df - 1) // 2 + 1):
        if r > 1:
            term *= x / (2 * r - 1)
        total += term
    return math.erfc(math.sqrt(x / 2)) + 2 * math.exp(-x / 2) / math.sqrt(2 * math.pi) * total


def test_chi2_sf_matches_the_tables():
    # The 5% and 1% critical values of the chi-square table.
    for x, df, p in [(3.841, 1, 0.05), (5.991, 2, 0.05), (7.815, 3, 0.05), (9.488, 4, 0.05), (11.070, 5, 0.05),
                     (21.666, 9, 0.01), (23.209, 10, 0.01)]:
        assert chi2_sf(x, df) == pytest.approx(p, rel=2e-3)


def sampling_reference(logits, temperature=1.0, top_k=None, top_p=None, extra=0):
    """What Sample should draw from, written the slow, obvious way: softmax(logits / T), the
    top_k most probable kept and renormalised, then the nucleus (most probable first, until
    their mass reaches top_p; ``extra`` more tokens, to build a wrong answer) kept and renormalised."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    order = sorted(range(len(p)), key=lambda i: -p[i])
    if top_k is not None:
        for i in order[top_k:]:
            p[i] = 0.0
        p /= p.sum()
    if top_p is not None:
        kept, mass = [], 0.0
        for i in order:
            if mass < top_p or len(kept) < extra:
                kept.append(i)
                mass += p[i]
        kept += [i for i in order if i not in kept and p[i] > 0][:extra]
        q = np.zeros_like(p)
        q[kept] = p[kept]
        p = q / q.sum()
    return p


def chi2_pvalue(counts, p) -> float:
    """Pearson's test of counts against probabilities p; 0 if any count falls where p is 0."""
    if (counts[p == 0] > 0).any():
        return 0.0
    support = p > 0
    expected = counts.sum() * p[support]
    stat = float(((counts[support] - expected) ** 2 / expected).sum())
    return chi2_sf(stat, int(support.sum()) - 1)


# Logits of a 10-token vocabulary; ids 0 and 1 are banned (pad, bos), as decoding sets them.
LOGITS = np.array([-np.inf, -np.inf, 1.0, 0.3, -0.5, 2.0, 0.0, -1.2, 1.5, -0.2])


@pytest.mark.parametrize("settings", [
    {}, {"temperature": 0.5}, {"temperature": 2.0, "top_k": 4}, {"top_p": 0.8},
    {"temperature": 1.5, "top_k": 6, "top_p": 0.7}, {"top_k": 1},
], ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()) or "plain")
def test_sampled_frequencies_match_the_restricted_softmax(settings):
    """100,000 draws from one distribution, in one call on (100000, 10) rows: the counts pass
    Pearson's test against softmax(logits / T) restricted to top-k, then top-p (p > 1e-4), never
    land outside that set, and the same counts *fail* the test against the nearest wrong
    answers (T off by 10%, no restriction, a nucleus one token too big): p < 1e-6. So the test
    can tell a correct sampler from an almost-correct one; its outcome is fixed by the seed."""
    n = 100_000
    logp = LOGITS - np.log(np.exp(LOGITS[2:]).sum())
    strategy = Sample(seed=1, **settings)
    y = strategy.choose(np.tile(logp, (n, 1)), strategy.make_rng(np))
    counts = np.bincount(backend.to_numpy(y), minlength=len(LOGITS))
    T, k, top_p = settings.get("temperature", 1.0), settings.get("top_k"), settings.get("top_p")
    right = sampling_reference(LOGITS[2:], T, k, top_p)
    assert (counts[:2] == 0).all()                                   # banned ids: never
    assert ((counts[2:] > 0) == (right > 0)).all()                   # exactly the restricted set
    assert chi2_pvalue(counts[2:], right) > 1e-4
    if k == 1:
        assert counts.argmax() == LOGITS.argmax() and counts.max() == n    # top-k 1 is greedy
        return
    wrong = [sampling_reference(LOGITS[2:], 1.1 * T, k, top_p)]
    if k or top_p:
        wrong.append(sampling_reference(LOGITS[2:], T))
    if top_p:
        wrong.append(sampling_reference(LOGITS[2:], T, k, top_p, extra=1))
    for p in wrong:
        assert chi2_pvalue(counts[2:], p) < 1e-6


def test_keep_largest_keeps_exactly_n_with_ties_to_the_lowest_index():
    z = np.array([[1.0, 3.0, 3.0, 2.0, 3.0], [0.0, -np.inf, 5.0, -np.inf, -np.inf], [1.0, 1.0, 1.0, 1.0, 1.0]])
    kept = keep_largest(z, np.array([[2], [3], [4]]))
    assert np.isfinite(kept).tolist() == [[False, True, True, False, False],   # two of the three 3.0s: the first two
                                          [True, False, True, False, False],   # n = 3 > the 2 finite: both stay
                                          [True, True, True, True, False]]
    assert (kept[np.isfinite(kept)] == z[np.isfinite(kept)]).all()


def test_sampling_from_the_model_matches_its_distribution(model64):
    """The whole loop: 10,000 copies of one source, one token each. The first tokens follow the
    model's own softmax(logits / T) at position 0 (pad and bos removed), restricted to top-k,
    and not the same with T off by 20%."""
    n, T, k = 10_000, 0.7, 6
    src = np.asarray([[5, 7, 4, 9]] * n)
    y = np.array(decode(model64, src, BOS, None, Sample(temperature=T, top_k=k, seed=7), max_len=1))[:, 0]
    with eval_mode(model64):
        memory = model64.encode(src[:1], (src[:1] != PAD)[:, None, None, :])
        logits = model64.decode(np.asarray([[BOS]]), memory, (src[:1] != PAD)[:, None, None, :])[0, -1]
    logits = logits.copy()
    logits[[PAD, BOS]] = -np.inf
    right = sampling_reference(logits, T, k)
    counts = np.bincount(y, minlength=CFG.vocab_size)
    assert (right > 0).sum() == k and ((counts > 0) == (right > 0)).all()
    assert chi2_pvalue(counts, right) > 1e-4
    assert chi2_pvalue(counts, sampling_reference(logits, 1.2 * T, k)) < 1e-6


def test_sampling_is_repeatable_and_the_seed_matters(model64, sources):
    _, src = sources
    hot = Sample(temperature=2.0, seed=3)
    first = decode(model64, src, BOS, EOS, hot)
    assert decode(model64, src, BOS, EOS, hot) == first                  # same seed, same outputs
    assert decode(model64, src, BOS, EOS, Sample(temperature=2.0, seed=3), use_cache=False) == first
    assert decode(model64, src, BOS, EOS, Sample(temperature=2.0, seed=4)) != first
    assert first != greedy_decode(model64, src, BOS, EOS)                  # it really samples
    assert all(PAD not in y and BOS not in y and EOS not in y for y in first)


@pytest.mark.parametrize("name", ["model64", "model32", "untrained"])
def test_top_k_one_and_a_tiny_nucleus_are_greedy(name, request):
    if name == "untrained":
        model = _build("float32", seed=5)
        for p in model.parameters():
            if p.data.ndim == 2:
                p.data *= 2.0
    else:
        model = request.getfixturevalue(name)
    seqs = _random_sources(np.random.default_rng(9), 60, 1, 10)
    src, _ = make_source_batch(seqs, PAD, np)
    greedy = greedy_decode(model, src, BOS, EOS)
    for strategy in (Sample(top_k=1), Sample(temperature=5.0, top_k=1, seed=11), Sample(top_p=1e-9, seed=2),
                     Sample(temperature=1e-300, seed=8)):
        assert decode(model, src, BOS, EOS, strategy) == greedy, strategy


def test_a_small_temperature_approaches_greedy(model64):
    """This lightly trained model is unsure (at T = 3 almost no output equals greedy's); as T
    falls, more and more sampled outputs equal the greedy ones, and at T = 1e-3 all do."""
    seqs = _random_sources(np.random.default_rng(10), 80, 1, 10)
    src, _ = make_source_batch(seqs, PAD, np)
    greedy = greedy_decode(model64, src, BOS, EOS)
    temperatures = (3.0, 0.3, 0.03, 1e-3)
    agree = [np.mean([a == b for a, b in zip(decode(model64, src, BOS, EOS, Sample(temperature=T)), greedy)])
             for T in temperatures]
    assert agree[0] < 0.1 and agree[-1] == 1.0, dict(zip(temperatures, agree))
    assert agree == sorted(agree) and len(set(agree)) == len(agree), dict(zip(temperatures, agree))


def test_no_restriction_is_the_same_as_no_option(model64, sources):
    """top_p = 1 and top_k ≥ V change nothing: the same seed gives the same outputs."""
    _, src = sources
    plain = decode(model64, src, BOS, EOS, Sample(temperature=1.5, seed=6))
    assert decode(model64, src, BOS, EOS, Sample(temperature=1.5, top_p=1.0, seed=6)) == plain
    assert decode(model64, src, BOS, EOS, Sample(temperature=1.5, top_k=10 ** 30, seed=6)) == plain


def test_translate_ids_samples_each_batch_with_new_numbers(model64):
    from minitransformer.data.vocab import Vocab

    vocab = Vocab.build([[str(i) for i in range(4, CFG.vocab_size)]])      # + pad, bos, eos, unk
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, len(vocab)) == (PAD, BOS, EOS, CFG.vocab_size)
    sources = [[5, 6, 7, 8, EOS]] * 20
    hot = Sample(temperature=3.0, seed=2)
    out = translate_ids(model64, vocab, sources, hot, batch_size=5)
    assert translate_ids(model64, vocab, sources, hot, batch_size=5) == out          # repeatable
    batches = [tuple(map(tuple, out[i: i + 5])) for i in range(0, 20, 5)]
    assert len(set(batches)) == 4                                   # no batch repeats another's draws
    assert translate_ids(model64, vocab, sources, Beam(1), batch_size=5) == translate_ids(model64, vocab, sources)


def test_sampling_on_the_stand_in_is_repeatable(model32, sources, fake_cupy_installed):
    """On the CuPy stand-in the draws come from the device generator: repeatable per seed, and
    top-k 1 is still greedy (the stand-in's numbers differ from NumPy's, as CuPy's do)."""
    _, src = sources
    gpu = _build("float32")
    for pg, pc in zip(gpu.parameters(), model32.parameters()):
        pg.data[...] = pc.data
    gpu.to("cupy")
    src_gpu = fake_cupy_installed.asarray(src)
    hot = Sample(temperature=2.0, top_k=5, top_p=0.95, seed=3)
    first = decode(gpu, src_gpu, BOS, EOS, hot)
    assert decode(gpu, src_gpu, BOS, EOS, hot) == first
    assert decode(gpu, src_gpu, BOS, EOS, Sample(temperature=2.0, top_k=5, top_p=0.95, seed=4)) != first
    assert decode(gpu, src_gpu, BOS, EOS, Sample(top_k=1, seed=9)) == greedy_decode(gpu, src_gpu, BOS, EOS)


# -- the one wait per position, read from the source ------------------------------------------

def test_position_loops_wait_for_the_device_only_through_host_flag():
    """Inside every loop over output positions (``for t in range(T)``), decoding.py converts no
    device value to a host value (bool/int/float, .item/.tolist/.get, to_numpy) except through
    exactly one ``backend.host_flag`` call. The stand-in test counts the same at run time."""
    tree = ast.parse(inspect.getsource(decoding))
    loops = [node for node in ast.walk(tree) if isinstance(node, ast.For)
             and isinstance(node.target, ast.Name) and node.target.id == "t"]
    assert len(loops) == 2                                       # the shared loop and beam search's
    for loop in loops:
        calls = [node for node in ast.walk(loop) if isinstance(node, ast.Call)]
        names = [c.func.id if isinstance(c.func, ast.Name) else c.func.attr for c in calls
                 if isinstance(c.func, (ast.Name, ast.Attribute))]
        assert names.count("host_flag") == 1, names
        assert not {"bool", "int", "float", "item", "tolist", "get", "to_numpy", "asnumpy"} & set(names), names
