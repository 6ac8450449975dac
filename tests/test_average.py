"""Checkpoint averaging (§6.1, minitransformer/average.py): the element-wise mean, exactly;
mismatched checkpoints refused, each with its own error; the result has no optimizer state,
says it is an average, and translate / evaluate take it."""

from __future__ import annotations

import contextlib
import dataclasses
import io

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.average import (
    AverageError,
    ConfigMismatchError,
    DtypeMismatchError,
    DuplicateCheckpointError,
    RunMismatchError,
    TokenizationMismatchError,
    VocabularyMismatchError,
    average_checkpoints,
    average_parameters,
    save_average,
)
from minitransformer.checkpoint import load_checkpoint, save_checkpoint
from minitransformer.data.tasks import synthetic_vocab
from minitransformer.data.vocab import Vocab
from minitransformer.model import PRESETS, Transformer
from minitransformer.optim import Adam

VOCAB = synthetic_vocab(10)                      # the copy task's vocabulary: translate/evaluate can use the files
LEVELS = {"src": "space", "tgt": "space", "bleu_tokenize": "13a", "word_rule": "punctuation split"}   # as copy
CFG = PRESETS["tiny"].with_(vocab_size=len(VOCAB))


def _save(path, model, step=100, vocab=VOCAB, levels=LEVELS, seed=0, optimizer=None):
    extra = {"epoch": 1, "batch_in_epoch": 2, "levels": levels, "settings": {"seed": seed, "steps": 1000}}
    save_checkpoint(str(path), model, vocab, optimizer, step=step, extra=extra)
    return load_checkpoint(str(path))


def _params(ckpt):
    return {name: backend.to_numpy(p.data) for name, p in ckpt.model.named_parameters()}


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


@pytest.fixture
def two(tmp_path):
    """Two float32 checkpoints of one model, at steps 100 and 200 (the second with optimizer state)."""
    a = Transformer(CFG, seed=0)
    b = Transformer(CFG, seed=1)
    opt = Adam(b.parameters(), lr=1e-3)
    for p in b.parameters():
        p.grad[...] = 0.01
    opt.step()
    return _save(tmp_path / "a.npz", a, step=100), _save(tmp_path / "b.npz", b, step=200, optimizer=opt)


def test_the_average_of_one_checkpoint_is_itself_bit_for_bit(two):
    a, _ = two
    avg = average_checkpoints([a])
    for name, value in _params(avg).items():
        assert value.dtype == np.float32
        np.testing.assert_array_equal(_bits(value), _bits(_params(a)[name]), err_msg=name)


def test_k_copies_average_to_the_copy_bit_for_bit(tmp_path, two):
    """float64 accumulation: 3x and 5x a float32 are exact in float64, so /K gives x back
    (a float32 running sum would round, and the mean could miss x by one unit in the last place)."""
    a, _ = two
    for k in (3, 5):
        copies = [_save(tmp_path / f"copy{k}-{i}.npz", a.model) for i in range(k)]
        for name, value in _params(average_checkpoints(copies)).items():
            np.testing.assert_array_equal(_bits(value), _bits(_params(a)[name]), err_msg=f"{k} copies: {name}")


def test_the_average_of_two_is_their_exact_mean(tmp_path, two):
    # Values where the mean is exact in float32: multiples of 1/8 in [-8, 8], so (a + b) / 2 is
    # a multiple of 1/16 and needs no rounding; the result must equal it exactly.
    rng = np.random.default_rng(0)
    models = [Transformer(CFG, seed=s) for s in (0, 1)]
    for model in models:
        for p in model.parameters():
            p.data[...] = rng.integers(-64, 65, size=p.data.shape) / 8
    ckpts = [_save(tmp_path / f"exact{i}.npz", m, step=10 * (i + 1)) for i, m in enumerate(models)]
    avg = _params(average_checkpoints(ckpts))
    pa, pb = _params(ckpts[0]), _params(ckpts[1])
    for name in pa:
        np.testing.assert_array_equal(avg[name], (pa[name] + pb[name]) / np.float32(2), err_msg=name)
    # Arbitrary float32 values: numpy's mean, computed the same way (float64, then cast back).
    a, b = two
    pa, pb = _params(a), _params(b)
    for name, value in _params(average_checkpoints([a, b])).items():
        expected = np.mean(np.stack([pa[name], pb[name]]).astype(np.float64), axis=0).astype(np.float32)
        np.testing.assert_array_equal(_bits(value), _bits(expected), err_msg=name)
        assert not np.array_equal(value, pa[name]), f"{name}: the average must differ from either checkpoint"


def test_the_average_says_it_is_one_and_holds_no_optimizer_state(tmp_path, two):
    a, b = two
    avg = average_checkpoints([a, b])
    assert avg.optimizer_state is None and avg.step == 200
    assert avg.extra["average"] == {"sources": [a.path, b.path], "steps": [100, 200]}
    assert avg.extra["levels"] == LEVELS and avg.extra["settings"]["seed"] == 0
    assert "epoch" not in avg.extra and "batch_in_epoch" not in avg.extra    # nothing to resume from
    path = tmp_path / "avg.npz"
    save_average(path, avg)
    loaded = load_checkpoint(str(path))
    assert loaded.optimizer_state is None and loaded.step == 200
    assert loaded.extra["average"] == avg.extra["average"] and loaded.vocab == VOCAB
    with np.load(path) as npz:
        assert not [k for k in npz.files if k.startswith("optim/")]
    for name, value in _params(loaded).items():
        np.testing.assert_array_equal(value, _params(avg)[name], err_msg=name)
    with pytest.raises(AverageError, match="not one"):
        save_average(tmp_path / "other.npz", a)


def test_training_refuses_to_resume_from_an_average(tmp_path, two):
    from minitransformer.data.registry import load_task
    from minitransformer.runsetup import make_trainer, settings_for

    avg = average_checkpoints(list(two))
    save_average(tmp_path / "avg.npz", avg)
    task = load_task("copy")
    preset, settings = settings_for("copy", steps=300)
    with pytest.raises(ValueError, match="no optimizer state"):
        make_trainer(task, settings, "tiny", resume=load_checkpoint(str(tmp_path / "avg.npz")))


def test_translate_and_evaluate_accept_an_average(tmp_path, two):
    from minitransformer.__main__ import main

    path = tmp_path / "avg.npz"
    save_average(path, average_checkpoints(list(two)))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["translate", "--checkpoint", str(path), "--beam", "1", "1 2 3", "4 5"]) == 0
        assert main(["evaluate", "--checkpoint", str(path), "--task", "copy", "--limit", "4", "--samples", "0"]) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3 and "exact match" in lines[-1]


# -- refused, each with its own error ---------------------------------------------------

def test_different_models_are_refused(tmp_path, two):
    a, _ = two
    other = _save(tmp_path / "wide.npz", Transformer(CFG.with_(d_ff=CFG.d_ff * 2), seed=0))
    with pytest.raises(ConfigMismatchError, match=rf"a.npz and .*wide.npz are different models \(d_ff={CFG.d_ff}"):
        average_checkpoints([a, other])


def test_different_vocabularies_are_refused(tmp_path, two):
    a, _ = two
    tokens = VOCAB.tokens[4:]
    swapped = Vocab([tokens[1], tokens[0], *tokens[2:]])                 # same size, two tokens swapped
    other = _save(tmp_path / "swapped.npz", Transformer(CFG, seed=0), vocab=swapped)
    with pytest.raises(VocabularyMismatchError, match="different vocabularies .*token 4 is '0' in one and '1'"):
        average_checkpoints([a, other])


def test_different_tokenizations_are_refused(tmp_path, two):
    a, _ = two
    other = _save(tmp_path / "char.npz", Transformer(CFG, seed=0), levels={**LEVELS, "src": "char"})
    with pytest.raises(TokenizationMismatchError, match="tokenize differently \\(levels"):
        average_checkpoints([a, other])


def test_checkpoints_of_another_run_are_refused(tmp_path, two):
    a, _ = two
    other = _save(tmp_path / "seed1.npz", Transformer(CFG, seed=0), seed=1)
    with pytest.raises(RunMismatchError, match="different training runs \\(seed 0 vs 1\\)"):
        average_checkpoints([a, other])


def test_different_dtypes_are_refused(tmp_path, two, f64):
    a, _ = two
    other = _save(tmp_path / "f64.npz", Transformer(CFG, seed=0))
    with pytest.raises(DtypeMismatchError, match="float32 parameters and .*float64"):
        average_checkpoints([a, other])


def test_the_same_file_twice_nothing_or_not_a_checkpoint_is_refused(two):
    a, b = two
    with pytest.raises(DuplicateCheckpointError, match="a.npz is given twice"):
        average_checkpoints([a, b, a])
    with pytest.raises(AverageError, match="no checkpoints"):
        average_parameters([])
    with pytest.raises(TypeError, match="loaded checkpoints .* got str at position 2"):
        average_checkpoints([a, "b.npz"])


def test_an_average_keeps_the_config_and_vocabulary(two):
    a, b = two
    avg = average_checkpoints([a, b])
    assert dataclasses.asdict(avg.model.cfg) == dataclasses.asdict(a.model.cfg) and avg.vocab == a.vocab
