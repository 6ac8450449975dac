"""Checkpoints: never written with NaN/inf, the previous one kept, temporaries cleaned up,
and a loader that names every problem of a damaged or doctored file (issue 11, items 2, 4, 10)."""

from __future__ import annotations

import io
import json
import os
import re

import numpy as np
import pytest

from minitransformer import files
from minitransformer.checkpoint import CheckpointError, NonFiniteStateError, load_checkpoint, save_checkpoint
from minitransformer.data.vocab import Vocab
from minitransformer.model import PRESETS, Transformer
from minitransformer.optim import Adam

VOCAB = Vocab(list("abcdefghij"))                # 14 tokens with the specials


def _model(seed=0):
    return Transformer(PRESETS["tiny"].with_(vocab_size=len(VOCAB)), seed=seed)


@pytest.fixture
def saved(tmp_path):
    """A valid checkpoint with optimizer state; returns its path."""
    model = _model()
    opt = Adam(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad[...] = 0.01
    opt.step()
    path = tmp_path / "checkpoint.npz"
    save_checkpoint(str(path), model, VOCAB, opt, step=1, extra={"epoch": 0, "batch_in_epoch": 1,
                                                                 "levels": {"src": "word", "tgt": "word"}})
    return path


def _rewrite(path, meta_changes=None, arrays_changes=None, drop=(), meta_text=None):
    """Write a doctored copy of the checkpoint at ``path`` over it."""
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["meta"]))
    for key, value in (meta_changes or {}).items():
        target = meta
        *parents, last = key.split(".")
        for parent in parents:
            target = target[parent]
        target[last] = value
    arrays["meta"] = np.array(meta_text if meta_text is not None else json.dumps(meta))
    arrays.update(arrays_changes or {})
    for key in drop:
        del arrays[key]
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.write_bytes(buffer.getvalue())


def esc(s):
    return re.escape(s)


# -- the loader names each problem and the file -----------------------------------------------

def test_a_valid_checkpoint_loads(saved):
    ck = load_checkpoint(str(saved))
    assert ck.step == 1 and ck.vocab == VOCAB and ck.optimizer_state["step_count"] == 1
    assert ck.path == str(saved)


W = "param/encoder.layers.0.ffn.linear1.W"


@pytest.mark.parametrize("change, message", [
    (dict(arrays_changes={W: np.ones((32, 64), np.int64)}), f"'{W}' must be a float array, got dtype int64"),
    (dict(arrays_changes={W: np.full((32, 64), np.nan, np.float32)}), f"'{W}' contains NaN"),
    (dict(arrays_changes={W: np.full((32, 64), np.inf, np.float32)}), f"'{W}' contains inf"),
    (dict(arrays_changes={W: np.ones((32, 64), np.float64)}), f"'{W}' has dtype float64, the other parameters are float32"),
    (dict(arrays_changes={W: np.ones((64, 32), np.float32)}), f"'{W}' has shape (64, 32), the config expects (32, 64)"),
    (dict(arrays_changes={"optim/v.0": np.full((14, 32), np.inf, np.float32)}), "'optim/v.0' contains inf"),
    (dict(drop=[W]), "checkpoint has no parameter 'encoder.layers.0.ffn.linear1.W'"),
    (dict(drop=["optim/m.0"]), "the optimizer state has no 'optim/m.0'"),
    (dict(arrays_changes={"param/extra.W": np.ones(3, np.float32)}), "entries this model does not have: ['param/extra.W']"),
    (dict(meta_changes={"step": "12"}), "metadata field 'step' must be an integer, got string '12'"),
    (dict(meta_changes={"step": 1.5}), "metadata field 'step' must be an integer, got number 1.5"),
    (dict(meta_changes={"step": -3}), "metadata field 'step' must be ≥ 0, got -3"),
    (dict(meta_changes={"optimizer_step_count": "x"}), "'optimizer_step_count' must be an integer ≥ 0 or null"),
    (dict(meta_changes={"format_version": 7}), "checkpoint format 7 is not 1"),
    (dict(meta_changes={"vocab": {"tokens": ["<pad>", "<bos>", "<eos>", "<unk>", "a"]}}),
     "the vocabulary has 5 tokens but the model's vocab_size is 14"),
    (dict(meta_changes={"vocab": {"tokens": ["a", "b"]}}), "bad vocabulary in the checkpoint"),
    (dict(meta_changes={"vocab": ["a"]}), "metadata field 'vocab' must be an object, got array"),
    (dict(meta_changes={"config": {"d_model": 32, "h": 0}}), "bad model config in the checkpoint"),
    (dict(meta_changes={"config.pad_id": 99}), "bad model config in the checkpoint (TransformerConfig: pad_id"),
    (dict(meta_changes={"extra": []}), "metadata field 'extra' must be an object, got array"),
    (dict(meta_changes={"extra.epoch": -1}), "extra.epoch must be an integer ≥ 0, got -1"),
    (dict(meta_changes={"extra.levels": {"src": "byte"}}),
     "extra.levels.src must be one of ('char', 'word', 'space', 'bpe'), got 'byte'"),
    (dict(meta_changes={"extra.levels": {"src": "word", "word_rule": "whitespace"}}),
     "extra.levels.word_rule must be 'punctuation split', got 'whitespace'"),
    (dict(meta_changes={"dropout_rng_state": {"bit_generator": "nonsense"}}), "the saved dropout generator state is not valid"),
    (dict(meta_text="{not json"), "the metadata is not valid JSON"),
    (dict(meta_text='{"step": NaN}'), "the metadata is not valid JSON (NaN is not a JSON number"),
    (dict(meta_text="[1, 2]"), "the metadata must be a JSON object, got list"),
    (dict(drop=["meta"]), "not a minitransformer checkpoint (no 'meta' entry)"),
])
def test_each_problem_is_one_named_error(saved, change, message):
    _rewrite(saved, **change)
    with pytest.raises(CheckpointError, match="^" + esc(f"{saved}: ") + ".*" + esc(message)):
        load_checkpoint(str(saved))


def test_not_a_checkpoint_at_all(tmp_path):
    text = tmp_path / "pairs.tsv"
    text.write_text("a\tb\n")
    with pytest.raises(CheckpointError, match=esc(f"{text}: not a .npz checkpoint (the file is not a zip archive")):
        load_checkpoint(str(text))
    truncated = tmp_path / "half.npz"
    model = _model()
    save_checkpoint(str(tmp_path / "whole.npz"), model, VOCAB)
    truncated.write_bytes((tmp_path / "whole.npz").read_bytes()[:5000])
    with pytest.raises(CheckpointError, match=esc(f"{truncated}: ")):
        load_checkpoint(str(truncated))
    with pytest.raises(IsADirectoryError, match="is a directory, not a checkpoint file"):
        load_checkpoint(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        load_checkpoint(str(tmp_path / "missing.npz"))


def test_checkpoint_error_is_a_value_error():
    assert issubclass(CheckpointError, ValueError)


# -- saving: nothing non-finite, the previous file kept ----------------------------------------

def test_a_non_finite_state_is_never_saved_over_a_good_checkpoint(saved):
    good = saved.read_bytes()
    model = load_checkpoint(str(saved)).model
    model.decoder.layers[0].ffn.linear2.W.data[0, 0] = np.inf
    with pytest.raises(NonFiniteStateError, match=r"refusing to save .* at step 2: "
                                                  r"param/decoder.layers.0.ffn.linear2.W contains inf"):
        save_checkpoint(str(saved), model, VOCAB, step=2, keep_previous=True)
    assert saved.read_bytes() == good
    assert not os.path.exists(files.previous_path(saved))
    assert sorted(os.listdir(saved.parent)) == ["checkpoint.npz"]     # no temporary file either


def test_non_finite_optimizer_moments_are_refused_too(tmp_path):
    model = _model()
    opt = Adam(model.parameters(), lr=1e-3)
    opt.v[0][0, 0] = np.inf                   # what an overflowing gradient used to leave in v
    with pytest.raises(NonFiniteStateError, match="optim/v.0 contains inf"):
        save_checkpoint(str(tmp_path / "c.npz"), model, VOCAB, opt)
    assert not (tmp_path / "c.npz").exists()


def test_a_finite_but_diverged_weight_is_refused(saved):
    """Issue 11's example: weights of magnitude 1e27 are finite in float32, but square to inf in
    the next forward, so a model holding them cannot translate: not saved over a good file."""
    good = saved.read_bytes()
    model = load_checkpoint(str(saved)).model
    model.encoder.layers[0].ffn.linear1.W.data[1, 2] = -1e27
    with pytest.raises(NonFiniteStateError, match=r"param/encoder.layers.0.ffn.linear1.W has entries up to 1e\+27, "
                                                  r"too large to square in float32"):
        save_checkpoint(str(saved), model, VOCAB, step=2, keep_previous=True)
    assert saved.read_bytes() == good
    model.encoder.layers[0].ffn.linear1.W.data[1, 2] = 1e18           # large, but squares without overflow
    save_checkpoint(str(saved), model, VOCAB, step=2)
    assert load_checkpoint(str(saved)).step == 2


def test_a_large_second_moment_is_not_mistaken_for_divergence(tmp_path):
    model = _model()
    opt = Adam(model.parameters(), lr=1e-3)
    opt.v[0][0, 0] = 1e30                     # v holds squares: a gradient of 1e15 is rare but finite
    save_checkpoint(str(tmp_path / "c.npz"), model, VOCAB, opt)
    assert load_checkpoint(str(tmp_path / "c.npz")).optimizer_state["v.0"][0, 0] == np.float32(1e30)


def test_a_checkpoint_from_before_the_warmup_moved_still_loads(saved):
    """Format-1 files written before issue 13 carry config.warmup_steps (now a training setting)."""
    with np.load(saved) as npz:
        config = json.loads(str(npz["meta"]))["config"]
    _rewrite(saved, {"config": {**config, "warmup_steps": 4000}})
    assert load_checkpoint(str(saved)).model.cfg == _model().cfg


def test_a_checkpoint_from_before_the_activation_field_loads_with_relu(saved):
    """Checkpoints written before issue 18 have no config.activation: their FFNs are ReLU,
    the field's default (a missing field takes its default)."""
    with np.load(saved) as npz:
        config = json.loads(str(npz["meta"]))["config"]
        names = list(npz.files)
    assert config.pop("activation") == "relu"
    _rewrite(saved, {"config": config})
    model = load_checkpoint(str(saved)).model
    assert model.cfg.activation == "relu" and model.cfg == _model().cfg
    # Renaming the output projection (`generator` before issue 18) changed no array name: it
    # holds no Parameter of its own, the tied E is stored once, as "E".
    assert "param/E" in names and not any("generator" in n or "output_projection" in n for n in names)
    assert model.output_projection.E is model.E


def test_keep_previous_keeps_the_replaced_checkpoint(tmp_path):
    path = tmp_path / "checkpoint.npz"
    for step in (1, 2, 3):
        save_checkpoint(str(path), _model(seed=step), VOCAB, step=step, keep_previous=True)
    assert load_checkpoint(str(path)).step == 3
    prev = tmp_path / "checkpoint.prev.npz"
    assert load_checkpoint(str(prev)).step == 2
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.npz", "checkpoint.prev.npz"]


def test_a_failed_save_keeps_both_files(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.npz"
    for step in (1, 2):
        save_checkpoint(str(path), _model(seed=step), VOCAB, step=step, keep_previous=True)
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}

    def disk_full(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(files.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(str(path), _model(seed=3), VOCAB, step=3, keep_previous=True)
    monkeypatch.undo()
    assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before


# -- temporary files of an interrupted save ---------------------------------------------------

def test_stale_temporaries_are_removed_and_only_they(tmp_path):
    keep = ["checkpoint.npz", "metrics.jsonl", ".hidden_but_mine", "notes.partial"]
    stale = [".checkpoint.npz.partial", ".metrics.jsonl.partial", ".tmp-k2j3h4checkpoint.npz"]
    for name in keep + stale:
        (tmp_path / name).write_bytes(b"x")
    removed = files.remove_stale_partials(tmp_path)
    assert sorted(os.path.basename(p) for p in removed) == sorted(stale)
    assert sorted(os.listdir(tmp_path)) == sorted(keep)
    assert files.remove_stale_partials(tmp_path / "missing") == []


def test_check_writable_dir(tmp_path):
    files.check_writable_dir(tmp_path / "new" / "dir")
    assert (tmp_path / "new" / "dir").is_dir() and not os.listdir(tmp_path / "new" / "dir")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="exists and is not a directory"):
        files.check_writable_dir(tmp_path / "file")
    with pytest.raises(NotADirectoryError):
        files.check_writable_dir(tmp_path / "file" / "sub")
    if os.geteuid() != 0:                     # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(PermissionError, match="no permission"):
            files.check_writable_dir(locked)
