"""Checkpoints: one ``.npz`` file with everything needed to resume or translate.

Contents (all host NumPy arrays, so a checkpoint saved on a GPU loads on a CPU
and the other way round):

    param/<name>     every Parameter of the model, by its name in named_parameters()
    optim/m.<i>      Adam's first and second moments, by parameter position
    optim/v.<i>
    meta             a JSON string: model config, vocabulary, step, training
                     settings, and the random-generator states for an exact resume

Saving is safe:

* the file is written atomically (``files.atomic_write_bytes``): a crash
  mid-save leaves the old checkpoint intact, never a half-written one;
* nothing non-finite is ever written: a parameter or optimizer moment holding
  NaN or inf, or a parameter with an entry too large to square in its dtype
  (|x| > 1.8e19 in float32), raises :class:`NonFiniteStateError` and the file on disk stays as
  it was (a diverged run must not replace the last good checkpoint);
* ``keep_previous=True`` (what training uses) keeps the checkpoint being
  replaced as ``checkpoint.prev.npz``.

Loading trusts nothing: every entry is checked (format version, metadata
schema, config, vocabulary size, step, each array's presence, dtype, shape and
finiteness), and each problem is one :class:`CheckpointError` naming the file
and what is wrong with it.
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile

import numpy

from . import backend
from .data.bpe import BPE, BPEError
from .data.vocab import LEVELS, Vocab, bpe_vocab
from .errors import NonFiniteError
from .files import atomic_write_bytes
from .model import Transformer, TransformerConfig

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint file cannot be used. The message starts with the file's path and says what is wrong."""


class NonFiniteStateError(NonFiniteError):
    """Refused to save: a parameter or optimizer moment is NaN or infinite, or a parameter too large to square
    (the file on disk is kept)."""


def _first_non_finite(arrays: dict) -> str | None:
    """What is wrong with the first array in ``arrays`` holding a NaN or an inf, or the first
    parameter (``param/...``) with an entry too large to square in its dtype (above √max,
    1.8e19 in float32), else None.

    Such a weight counts as diverged too: it overflows in the next forward (LayerNorm's
    variance, the attention scores), so the model it saves cannot translate. (Adam's v
    holds squares and may legitimately be that large, so only parameters are checked.)
    """
    for name, value in arrays.items():
        if value.dtype.kind != "f" or value.size == 0:
            continue
        largest = float(numpy.abs(value).max())     # one pass: NaN if any entry is NaN, inf if any is inf
        if not math.isfinite(largest):
            return f"{name} contains {'NaN' if math.isnan(largest) else 'inf'}"
        if name.startswith("param/") and largest > math.sqrt(float(numpy.finfo(value.dtype).max)):
            return f"{name} has entries up to {largest:.3g}, too large to square in {value.dtype} (a diverged run)"
    return None


def save_checkpoint(path: str, model: Transformer, vocab: Vocab, optimizer=None, step: int = 0,
                    extra: dict | None = None, keep_previous: bool = False) -> None:
    """Save model, vocabulary, optimizer state and step to ``path`` (.npz), atomically.

    Raises NonFiniteStateError (and writes nothing) if any parameter or
    optimizer moment is not finite. ``keep_previous``: keep the file being
    replaced as ``<name>.prev.npz`` (``files.previous_path``).
    """
    arrays = {f"param/{name}": backend.to_numpy(p.data) for name, p in model.named_parameters()}
    if optimizer is not None:
        for key, value in optimizer.state_dict().items():
            if key != "step_count":
                arrays[f"optim/{key}"] = value
    problem = _first_non_finite(arrays)
    if problem is not None:
        raise NonFiniteStateError(
            f"refusing to save {path} at step {step}: {problem}; the checkpoint already on disk (if any) "
            "is left as it was"
        )
    meta = {
        "format_version": FORMAT_VERSION,
        "config": json.loads(model.cfg.to_json()),
        "vocab": vocab.to_dict(),
        "step": int(step),
        "optimizer_step_count": optimizer.step_count if optimizer is not None else None,
        "dropout_rng_state": backend.rng_state(model.dropout_rng),
        "extra": extra or {},
    }
    arrays["meta"] = numpy.array(json.dumps(meta, allow_nan=False))
    buffer = io.BytesIO()
    numpy.savez(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue(), keep_previous=keep_previous)


class Checkpoint:
    """A loaded checkpoint: ``model``, ``vocab``, ``step``, ``extra`` and the optimizer state."""

    def __init__(self, model, vocab, step, optimizer_state, extra, meta, path=None):
        self.model, self.vocab, self.step = model, vocab, step
        self.optimizer_state, self.extra, self.meta = optimizer_state, extra, meta
        self.path = path


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _read_npz(path: str) -> tuple[dict, dict]:
    """(meta, arrays) of the file, or a CheckpointError saying why it is not a checkpoint."""
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a directory, not a checkpoint file")
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except PermissionError:
        raise PermissionError(f"{path}: no permission to read the checkpoint") from None
    if magic[:2] != b"PK":
        raise CheckpointError(f"{path}: not a .npz checkpoint (the file is not a zip archive, which a .npz is)")
    try:
        npz = numpy.load(path, allow_pickle=False)
    except PermissionError:
        raise PermissionError(f"{path}: no permission to read the checkpoint") from None
    except Exception as exc:  # noqa: BLE001 - any reason is reported, with the file
        raise CheckpointError(f"{path}: not a readable .npz checkpoint ({type(exc).__name__}: {exc})") from None
    if not isinstance(npz, numpy.lib.npyio.NpzFile):
        raise CheckpointError(f"{path}: a single .npy array, not a .npz checkpoint")
    with npz:
        if "meta" not in npz.files:
            raise CheckpointError(f"{path}: not a minitransformer checkpoint (no 'meta' entry)")
        try:
            arrays = {k: npz[k] for k in npz.files}
        except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
            raise CheckpointError(f"{path}: an entry cannot be read, the file is damaged ({exc})") from None
    raw = arrays.pop("meta")
    if raw.dtype.kind != "U" or raw.shape != ():
        raise CheckpointError(f"{path}: the 'meta' entry must be one JSON string, got a {raw.dtype} array "
                              f"of shape {raw.shape}")
    try:
        meta = json.loads(str(raw), parse_constant=_refuse_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path}: the metadata is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: the metadata must be a JSON object, got {type(meta).__name__}")
    return meta, arrays


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _check_meta(path: str, meta: dict) -> None:
    """The metadata schema: each field present with the right type."""
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint format {version!r} is not {FORMAT_VERSION} "
                              "(written by another version of minitransformer?)")
    required = {"config": (dict, "an object"), "vocab": (dict, "an object"), "step": (int, "an integer"),
                "extra": (dict, "an object")}
    json_names = {dict: "object", list: "array", str: "string", int: "integer", float: "number", bool: "boolean"}
    for key, (kind, what) in required.items():
        if key not in meta:
            raise CheckpointError(f"{path}: the metadata has no {key!r} field")
        value = meta[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            got = json_names.get(type(value), type(value).__name__)
            raise CheckpointError(f"{path}: metadata field {key!r} must be {what}, got {got} {value!r:.60}")
    if meta["step"] < 0:
        raise CheckpointError(f"{path}: metadata field 'step' must be ≥ 0, got {meta['step']}")
    count = meta.get("optimizer_step_count")
    if count is not None and not (_is_int(count) and count >= 0):
        raise CheckpointError(f"{path}: metadata field 'optimizer_step_count' must be an integer ≥ 0 or null, "
                              f"got {count!r}")
    rng_state = meta.get("dropout_rng_state")
    if rng_state is not None and not isinstance(rng_state, dict):
        raise CheckpointError(f"{path}: metadata field 'dropout_rng_state' must be an object or null, "
                              f"got {type(rng_state).__name__}")
    extra = meta["extra"]
    for key in ("epoch", "batch_in_epoch"):
        if key in extra and not (_is_int(extra[key]) and extra[key] >= 0):
            raise CheckpointError(f"{path}: extra.{key} must be an integer ≥ 0, got {extra[key]!r}")
    if "settings" in extra and not isinstance(extra["settings"], dict):
        raise CheckpointError(f"{path}: extra.settings must be an object, got {type(extra['settings']).__name__}")
    levels = extra.get("levels")
    if levels is not None:
        if not isinstance(levels, dict):
            raise CheckpointError(f"{path}: extra.levels must be an object, got {type(levels).__name__}")
        for side in ("src", "tgt"):
            if side in levels and levels[side] not in LEVELS:
                raise CheckpointError(f"{path}: extra.levels.{side} must be one of {LEVELS}, got {levels[side]!r}")
        if "bleu_tokenize" in levels and not isinstance(levels["bleu_tokenize"], str):
            raise CheckpointError(f"{path}: extra.levels.bleu_tokenize must be a string, "
                                  f"got {levels['bleu_tokenize']!r}")
        if "src_lowercase" in levels and not isinstance(levels["src_lowercase"], bool):
            raise CheckpointError(f"{path}: extra.levels.src_lowercase must be true or false, "
                                  f"got {levels['src_lowercase']!r}")
        _check_bpe(path, levels, meta["vocab"])
    _check_average(path, meta)
    if extra.get("preset") is not None and not isinstance(extra["preset"], str):
        raise CheckpointError(f"{path}: extra.preset must be a string or null, got {extra['preset']!r}")


def _check_bpe(path: str, levels: dict, vocab: dict) -> None:
    """A byte-pair encoded checkpoint carries its merges (extra.levels.bpe), and its vocabulary is
    exactly the one they make (data.vocab.bpe_vocab): translate encodes new text with them."""
    uses_bpe = "bpe" in (levels.get("src"), levels.get("tgt"))
    if "bpe" not in levels:
        if uses_bpe:
            raise CheckpointError(f"{path}: extra.levels says the text is byte-pair encoded, but the merges "
                                  "(extra.levels.bpe) are missing")
        return
    if not uses_bpe:
        raise CheckpointError(f"{path}: extra.levels.bpe holds merges, but neither side is byte-pair encoded "
                              f"(src {levels.get('src')!r}, tgt {levels.get('tgt')!r})")
    try:
        bpe = BPE.from_dict(levels["bpe"])
        expected = bpe_vocab(bpe).tokens
    except BPEError as exc:
        raise CheckpointError(f"{path}: extra.levels.bpe: {exc}") from None
    if vocab.get("tokens") != expected:
        raise CheckpointError(f"{path}: the vocabulary is not the one the saved BPE merges make "
                              f"({len(vocab.get('tokens') or [])} tokens, the merges make {len(expected)})")


def _check_average(path: str, meta: dict) -> None:
    """An average (average.py) names its sources and their steps, and holds no optimizer state."""
    if "average" not in meta["extra"]:
        return
    average = meta["extra"]["average"]
    sources = average.get("sources") if isinstance(average, dict) else None
    steps = average.get("steps") if isinstance(average, dict) else None
    if not (isinstance(sources, list) and sources and all(isinstance(p, str) for p in sources)
            and isinstance(steps, list) and len(steps) == len(sources) and all(_is_int(k) and k >= 0 for k in steps)):
        raise CheckpointError(f"{path}: extra.average must be an object with 'sources' (file names) and 'steps' "
                              f"(integers ≥ 0), one of each per averaged checkpoint, got {average!r:.80}")
    if meta.get("optimizer_step_count") is not None:
        raise CheckpointError(f"{path}: an average of checkpoints (extra.average) cannot hold optimizer state")


def _check_array(path: str, key: str, saved: numpy.ndarray, shape: tuple, dtype=None) -> None:
    """One saved array: a float array of ``shape`` (and ``dtype``), every entry finite."""
    if saved.dtype.kind != "f":
        raise CheckpointError(f"{path}: {key!r} must be a float array, got dtype {saved.dtype}")
    if dtype is not None and saved.dtype != dtype:
        raise CheckpointError(f"{path}: {key!r} has dtype {saved.dtype}, the other parameters are {dtype}")
    if tuple(saved.shape) != tuple(shape):
        raise CheckpointError(f"{path}: {key!r} has shape {tuple(saved.shape)}, the config expects {tuple(shape)}")
    if not numpy.isfinite(saved).all():
        kind = "NaN" if numpy.isnan(saved).any() else "inf"
        raise CheckpointError(f"{path}: {key!r} contains {kind} (a diverged run?); it cannot be used")


def load_checkpoint(path: str, backend_name: str | None = None) -> Checkpoint:
    """Load a checkpoint onto ``backend_name`` ("numpy"/"cupy"; default: the current backend).

    Parameters keep the dtype they were saved with (all of them must share one
    float dtype). Every problem raises a CheckpointError (a ValueError) whose
    message starts with ``path``; a missing file is a FileNotFoundError, a
    directory an IsADirectoryError.
    """
    path = os.fspath(path)
    meta, arrays = _read_npz(path)
    _check_meta(path, meta)
    config = dict(meta["config"])
    # Format-1 files written before the warm-up moved to the training settings carry a
    # config.warmup_steps; the model never used it (the settings hold the value), so it is dropped.
    config.pop("warmup_steps", None)
    try:
        cfg = TransformerConfig.from_json(json.dumps(config))
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: bad model config in the checkpoint ({exc})") from None
    try:
        vocab = Vocab.from_dict(meta["vocab"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: bad vocabulary in the checkpoint ({exc})") from None
    if len(vocab) != cfg.vocab_size:
        raise CheckpointError(f"{path}: the vocabulary has {len(vocab)} tokens but the model's vocab_size is "
                              f"{cfg.vocab_size}; the file is inconsistent")

    xp = backend.module_for(backend_name or backend.backend_name())
    model = Transformer(cfg, seed=0)
    expected = {f"param/{name}": p for name, p in model.named_parameters()}
    n_params = len(expected)
    unknown = sorted(k for k in arrays if k not in expected and not k.startswith("optim/"))
    if unknown:
        raise CheckpointError(f"{path}: entries this model does not have: {unknown[:5]}")
    dtype = None
    for key, p in expected.items():
        if key not in arrays:
            raise CheckpointError(f"{path}: checkpoint has no parameter {key[len('param/'):]!r}")
        saved = arrays[key]
        _check_array(path, key, saved, p.data.shape, dtype)
        dtype = saved.dtype
    for key, p in expected.items():
        p.data = xp.asarray(arrays[key])
        p.grad = xp.zeros_like(p.data)
    model.reseed_dropout(0)
    try:
        backend.set_rng_state(model.dropout_rng, meta.get("dropout_rng_state"))
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"{path}: the saved dropout generator state is not valid ({exc})") from None

    optimizer_state = None
    if meta.get("optimizer_step_count") is not None:
        shapes = [p.data.shape for p in expected.values()]
        optimizer_state = {}
        for i in range(n_params):
            for moment in ("m", "v"):
                key = f"optim/{moment}.{i}"
                if key not in arrays:
                    raise CheckpointError(f"{path}: the optimizer state has no {key!r}")
                _check_array(path, key, arrays[key], shapes[i])
                optimizer_state[f"{moment}.{i}"] = arrays[key]
        extra_moments = sorted(k for k in arrays if k.startswith("optim/") and k[len("optim/"):] not in optimizer_state)
        if extra_moments:
            raise CheckpointError(f"{path}: optimizer entries for parameters this model does not have: "
                                  f"{extra_moments[:5]}")
        optimizer_state["step_count"] = meta["optimizer_step_count"]
    elif any(k.startswith("optim/") for k in arrays):
        raise CheckpointError(f"{path}: optimizer moments are saved but 'optimizer_step_count' is missing")
    return Checkpoint(model, vocab, meta["step"], optimizer_state, meta["extra"], meta, path)


__all__ = ["save_checkpoint", "load_checkpoint", "Checkpoint", "CheckpointError", "NonFiniteStateError",
           "FORMAT_VERSION"]
