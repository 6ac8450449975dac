"""Greedy decoding, beam search (§6.1) and the key/value cache.

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

from minitransformer import backend, decoding
from minitransformer.data.batching import make_batch, make_source_batch
from minitransformer.decoding import beam_search, greedy_decode, length_penalty
from minitransformer.layers.loss import LabelSmoothedCrossEntropy, log_softmax
from minitransformer.layers.masks import causal_mask
from minitransformer.layers.parameter import eval_mode
from minitransformer.model import KVCache, Transformer, TransformerConfig

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
    tree = ast.parse(inspect.getsource(decoding))
    used = {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "model"}
    assert used <= allowed, f"decoding.py reaches into the model: {sorted(used - allowed)}"
    assert {"encode", "decode", "decode_step"} <= used


def test_cupy_matches_numpy_on_the_stand_in(model32, sources, fake_cupy_installed):
    """The check above through the CPU stand-in for CuPy (tests/fake_cupy.py): it runs without a GPU."""
    test_cupy_matches_numpy(model32, sources)
