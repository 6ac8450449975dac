"""Checkpoints: one ``.npz`` file with everything needed to resume or translate.

Contents (all host NumPy arrays, so a checkpoint saved on a GPU loads on a CPU
and the other way round):

    param/<name>     every Parameter of the model, by its name in named_parameters()
    optim/m.<i>      Adam's first and second moments, by parameter position
    optim/v.<i>
    meta             a JSON string: model config, vocabulary, step, training
                     settings, and the random-generator states for an exact resume

The file is written atomically (``files.atomic_write_bytes``): a crash
mid-save leaves the old checkpoint intact, never a half-written one.
"""

from __future__ import annotations

import io
import json
import os

import numpy

from . import backend
from .data.vocab import Vocab
from .files import atomic_write_bytes
from .model import Transformer, TransformerConfig

FORMAT_VERSION = 1


def save_checkpoint(path: str, model: Transformer, vocab: Vocab, optimizer=None, step: int = 0,
                    extra: dict | None = None) -> None:
    """Save model, vocabulary, optimizer state and step to ``path`` (.npz), atomically."""
    arrays = {f"param/{name}": backend.to_numpy(p.data) for name, p in model.named_parameters()}
    if optimizer is not None:
        for key, value in optimizer.state_dict().items():
            if key != "step_count":
                arrays[f"optim/{key}"] = value
    meta = {
        "format_version": FORMAT_VERSION,
        "config": json.loads(model.cfg.to_json()),
        "vocab": vocab.to_dict(),
        "step": int(step),
        "optimizer_step_count": optimizer.step_count if optimizer is not None else None,
        "dropout_rng_state": backend.rng_state(model.dropout_rng),
        "extra": extra or {},
    }
    arrays["meta"] = numpy.array(json.dumps(meta))
    buffer = io.BytesIO()
    numpy.savez(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue())


class Checkpoint:
    """A loaded checkpoint: ``model``, ``vocab``, ``step``, ``extra`` and the optimizer state."""

    def __init__(self, model, vocab, step, optimizer_state, extra, meta):
        self.model, self.vocab, self.step = model, vocab, step
        self.optimizer_state, self.extra, self.meta = optimizer_state, extra, meta


def load_checkpoint(path: str, backend_name: str | None = None) -> Checkpoint:
    """Load a checkpoint onto ``backend_name`` ("numpy"/"cupy"; default: the current backend).

    Parameters keep the dtype they were saved with.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        npz = numpy.load(path, allow_pickle=False)
    except Exception as exc:
        raise ValueError(f"{path}: not a readable .npz checkpoint ({exc})") from exc
    with npz:
        if "meta" not in npz.files:
            raise ValueError(f"{path}: not a minitransformer checkpoint (no 'meta' entry)")
        meta = json.loads(str(npz["meta"]))
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{path}: checkpoint format {meta.get('format_version')} is not {FORMAT_VERSION}")
        arrays = {k: npz[k] for k in npz.files if k != "meta"}
    try:
        cfg = TransformerConfig.from_json(json.dumps(meta["config"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: bad model config in the checkpoint ({exc})") from None
    xp = backend.module_for(backend_name or backend.backend_name())
    model = Transformer(cfg, seed=0)
    for name, p in model.named_parameters():
        key = f"param/{name}"
        if key not in arrays:
            raise ValueError(f"{path}: checkpoint has no parameter {name!r}")
        saved = arrays[key]
        if saved.shape != p.data.shape:
            raise ValueError(f"{path}: parameter {name!r} has shape {saved.shape}, the config expects {p.data.shape}")
        p.data = xp.asarray(saved)
        p.grad = xp.zeros_like(p.data)
    model.reseed_dropout(0)
    backend.set_rng_state(model.dropout_rng, meta.get("dropout_rng_state"))
    optimizer_state = None
    if meta.get("optimizer_step_count") is not None:
        optimizer_state = {k[len("optim/"):]: v for k, v in arrays.items() if k.startswith("optim/")}
        optimizer_state["step_count"] = meta["optimizer_step_count"]
    return Checkpoint(model, Vocab.from_dict(meta["vocab"]), meta["step"], optimizer_state,
                      meta.get("extra", {}), meta)
