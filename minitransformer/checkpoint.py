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
schema, config, vocabulary size and special ids, step, each array's presence,
dtype, shape and finiteness), and each problem is one :class:`CheckpointError`
naming the file and what is wrong with it. Two rules make a loaded checkpoint
one the trainer can save again:

* the validity rule of saving is the rule of loading (``dtype_problem``,
  ``value_problem``): float32 or float64 arrays, every entry finite, no parameter
  too large to square in its dtype. A checkpoint the trainer would refuse to save
  is refused at load, before a resumed run spends its steps on it;
* nothing is allocated before it is checked. The model's size is estimated from
  the config and refused if it cannot fit in memory (``model.check_fits``); each
  entry's size is read from the zip directory and its shape from its ``.npy``
  header, and compared with what the config needs, before its bytes are read. A
  small file declaring a huge entry is refused without allocating it.
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile
import zlib

import numpy

from . import backend
from .data import fingerprint
from .data.bpe import BPE, BPEError
from .data.vocab import LEVELS, WORD_RULE, WORD_RULE_KEY, Vocab, bpe_vocab, saved_levels
from .errors import NonFiniteError
from .files import atomic_write_bytes
from .model import ModelTooLargeError, Transformer, TransformerConfig

FORMAT_VERSION = 1

# The dtypes a checkpoint's arrays may have: those the package computes in (backend.set_default_dtype).
SAVED_DTYPES = ("float32", "float64")

# The metadata (config, vocabulary, settings) is JSON text; a vocabulary of 100,000 tokens
# takes a few MB. Anything far larger is not a checkpoint of this package.
MAX_META_BYTES = 64 * 2**20
# The most bytes a .npy header takes besides the data (numpy refuses longer headers by default).
_NPY_HEADER_BYTES = 10_000 + 16
_size = backend.format_bytes


class CheckpointError(ValueError):
    """A checkpoint file cannot be used. The message starts with the file's path and says what is wrong."""


class NonFiniteStateError(NonFiniteError):
    """Refused to save: a parameter or optimizer moment is NaN or infinite, or a parameter too large to square
    (the file on disk is kept)."""


def dtype_problem(name: str, value) -> str | None:
    """What is wrong with the dtype of the saved array ``name``, or None: it must be float32 or float64."""
    if value.dtype.kind != "f":
        return f"{name} must be a float array, got dtype {value.dtype}"
    if value.dtype.name not in SAVED_DTYPES:
        return (f"{name} has dtype {value.dtype}; checkpoints hold {' or '.join(SAVED_DTYPES)} arrays, the dtypes "
                "the package computes in (in float16 the forward pass overflows)")
    return None


def value_problem(name: str, value) -> str | None:
    """What is wrong with the values of the saved array ``name``, or None.

    A NaN or an inf is wrong; so is a parameter (``param/...``) with an entry too
    large to square in its dtype (above √max, 1.8e19 in float32). Such a weight
    counts as diverged too: it overflows in the next forward (LayerNorm's variance,
    the attention scores), so the model cannot translate, and the trainer would
    refuse to save it. (Adam's v holds squares and may legitimately be that
    large, so only parameters are bounded.)
    """
    if value.size == 0:
        return None
    largest = float(numpy.abs(value).max())     # one pass: NaN if any entry is NaN, inf if any is inf
    if not math.isfinite(largest):
        return f"{name} contains {'NaN' if math.isnan(largest) else 'inf'}"
    if name.startswith("param/") and largest > math.sqrt(float(numpy.finfo(value.dtype).max)):
        return f"{name} has entries up to {largest:.3g}, too large to square in {value.dtype}"
    return None


def _first_non_finite(arrays: dict) -> str | None:
    """``value_problem`` of the first array in ``arrays`` that has one, else None."""
    for name, value in arrays.items():
        if value.dtype.kind == "f":
            problem = value_problem(name, value)
            if problem is not None:
                return problem
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
    for name, value in arrays.items():
        problem = dtype_problem(name, value)
        if problem is not None:
            raise CheckpointError(f"{path}: refusing to save at step {step}: {problem}")
    problem = _first_non_finite(arrays)
    if problem is not None:
        raise NonFiniteStateError(
            f"refusing to save {path} at step {step}: {problem} (a diverged run); the checkpoint already on disk "
            "(if any) is left as it was"
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


def _open_archive(path: str) -> tuple[zipfile.ZipFile, dict]:
    """The open zip archive and its directory {key: ZipInfo} (key: the entry's name without
    ".npy"), or a CheckpointError saying why the file is not a checkpoint. Reads no entry."""
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a directory, not a checkpoint file")
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except PermissionError:
        raise PermissionError(f"{path}: no permission to read the checkpoint") from None
    if magic == b"\x93NUMPY":
        raise CheckpointError(f"{path}: a single .npy array, not a .npz checkpoint")
    if magic[:2] != b"PK":
        raise CheckpointError(f"{path}: not a .npz checkpoint (the file is not a zip archive, which a .npz is)")
    try:
        archive = zipfile.ZipFile(path)
    except PermissionError:
        raise PermissionError(f"{path}: no permission to read the checkpoint") from None
    except Exception as exc:  # noqa: BLE001 - any reason is reported, with the file
        raise CheckpointError(f"{path}: not a readable .npz checkpoint ({type(exc).__name__}: {exc})") from None
    entries = {}
    for info in archive.infolist():
        key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        entries[key] = info
    return archive, entries


def _read_entry(path: str, archive: zipfile.ZipFile, key: str, info: zipfile.ZipInfo, shape: tuple | None,
                max_bytes: int) -> numpy.ndarray:
    """One ``.npy`` entry, checked before its data is read.

    Its size in the zip directory must be at most ``max_bytes`` (+ a header);
    then its header is read, and its shape must be ``shape`` (None: any) and its
    dtype a plain (never pickled) one; only then are its bytes read, exactly as
    many as the header says. Each problem is a CheckpointError naming ``key``.
    """
    def damaged(detail) -> CheckpointError:
        return CheckpointError(f"{path}: the entry {key!r} cannot be read, the file is damaged ({detail})")

    if info.file_size > max_bytes + _NPY_HEADER_BYTES:
        raise CheckpointError(f"{path}: the entry {key!r} holds {_size(info.file_size)}, but the model's config "
                              f"needs at most {_size(max_bytes)} for it; the file is not what it claims to be")
    try:
        with archive.open(info) as f:
            version = numpy.lib.format.read_magic(f)
            if version == (1, 0):
                saved_shape, fortran, dtype = numpy.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                saved_shape, fortran, dtype = numpy.lib.format.read_array_header_2_0(f)
            else:
                raise damaged(f".npy format {version} is not one numpy.savez writes")
            if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
                raise CheckpointError(f"{path}: {key!r} holds {dtype} objects, not numbers (refused: loading them "
                                      "could run code)")
            if shape is not None and tuple(saved_shape) != tuple(shape):
                raise CheckpointError(f"{path}: {key!r} has shape {tuple(saved_shape)}, the config expects "
                                      f"{tuple(shape)}")
            n_bytes = math.prod(saved_shape) * dtype.itemsize
            if n_bytes > max_bytes:
                raise CheckpointError(f"{path}: the entry {key!r} would take {_size(n_bytes)}, more than the "
                                      f"{_size(max_bytes)} the config allows for it")
            data = bytearray(n_bytes)               # read into place: writable, and no second copy
            view, got = memoryview(data), 0
            while got < n_bytes:
                k = f.readinto(view[got:])
                if not k:
                    break
                got += k
            if got != n_bytes or f.read(1):
                raise damaged(f"{got} bytes of data where its header says {n_bytes}")
    except CheckpointError:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise damaged(exc) from None
    return numpy.frombuffer(data, dtype=dtype).reshape(saved_shape, order="F" if fortran else "C")


def _read_meta(path: str, archive: zipfile.ZipFile, entries: dict) -> dict:
    """The metadata entry, decoded: a JSON object (or a CheckpointError)."""
    if "meta" not in entries:
        raise CheckpointError(f"{path}: not a minitransformer checkpoint (no 'meta' entry)")
    raw = _read_entry(path, archive, "meta", entries["meta"], None, MAX_META_BYTES)
    if raw.dtype.kind != "U" or raw.shape != ():
        raise CheckpointError(f"{path}: the 'meta' entry must be one JSON string, got a {raw.dtype} array "
                              f"of shape {raw.shape}")
    try:
        meta = json.loads(str(raw), parse_constant=_refuse_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path}: the metadata is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: the metadata must be a JSON object, got {type(meta).__name__}")
    return meta


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
    for key in ("epoch", "batch_in_epoch", "solved_streak"):
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
        if WORD_RULE_KEY in levels and levels[WORD_RULE_KEY] != WORD_RULE:
            raise CheckpointError(f"{path}: extra.levels.{WORD_RULE_KEY} must be {WORD_RULE!r}, "
                                  f"got {levels[WORD_RULE_KEY]!r}")
        if "src_lowercase" in levels and not isinstance(levels["src_lowercase"], bool):
            raise CheckpointError(f"{path}: extra.levels.src_lowercase must be true or false, "
                                  f"got {levels['src_lowercase']!r}")
        _check_bpe(path, levels, meta["vocab"])
    _check_average(path, meta)
    if extra.get("preset") is not None and not isinstance(extra["preset"], str):
        raise CheckpointError(f"{path}: extra.preset must be a string or null, got {extra['preset']!r}")
    if "data" in extra:
        problem = fingerprint.check(extra["data"])
        if problem is not None:
            raise CheckpointError(f"{path}: extra.data (the fingerprint of the training data) {problem}")


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
    """One saved array, by the rules of saving: a float32 or float64 array of ``shape`` (and
    ``dtype``), every entry finite, a parameter's entries small enough to square."""
    problem = dtype_problem(repr(key), saved)
    if problem is not None:
        raise CheckpointError(f"{path}: {problem}")
    if dtype is not None and saved.dtype != dtype:
        raise CheckpointError(f"{path}: {key!r} has dtype {saved.dtype}, the other parameters are {dtype}")
    if tuple(saved.shape) != tuple(shape):
        raise CheckpointError(f"{path}: {key!r} has shape {tuple(saved.shape)}, the config expects {tuple(shape)}")
    problem = value_problem(key, saved)
    if problem is not None:
        raise CheckpointError(f"{path}: {problem.replace(key, repr(key), 1)} (a diverged run?); the trainer "
                              "would refuse to save it, so it is refused at load")


def _config_and_vocab(path: str, meta: dict) -> tuple[TransformerConfig, Vocab]:
    """The model config and the vocabulary of checked metadata, consistent with each other."""
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
    if cfg.pad_id != vocab.pad_id:
        # The masks and the loss would treat another token as padding: every output would change.
        raise CheckpointError(f"{path}: the model's config has pad_id={cfg.pad_id}, but the vocabulary's "
                              f"<pad> is id {vocab.pad_id}; the file is inconsistent")
    return cfg, vocab


def load_checkpoint(path: str, backend_name: str | None = None) -> Checkpoint:
    """Load a checkpoint onto ``backend_name`` ("numpy"/"cupy"; default: the current backend).

    Parameters keep the dtype they were saved with (all of them must share one
    float dtype). Every problem raises a CheckpointError (a ValueError) whose
    message starts with ``path``; a missing file is a FileNotFoundError, a
    directory an IsADirectoryError.
    """
    path = os.fspath(path)
    archive, entries = _open_archive(path)
    with archive:
        meta = _read_meta(path, archive, entries)
        _check_meta(path, meta)
        if isinstance(meta["extra"].get("levels"), dict):     # an older checkpoint's "word" is "space"
            meta["extra"]["levels"] = saved_levels(meta["extra"]["levels"])
        cfg, vocab = _config_and_vocab(path, meta)
        try:
            model = Transformer(cfg, seed=0)        # refuses, naming the field, a model that cannot fit
        except ModelTooLargeError as exc:
            raise CheckpointError(f"{path}: {exc}") from None
        expected = {f"param/{name}": p for name, p in model.named_parameters()}
        n_params = len(expected)
        has_optimizer = meta.get("optimizer_step_count") is not None
        shapes = {key: p.data.shape for key, p in expected.items()}
        if has_optimizer:
            for i, p in enumerate(expected.values()):
                shapes[f"optim/m.{i}"] = shapes[f"optim/v.{i}"] = p.data.shape
        names = [k for k in entries if k != "meta"]
        unknown = sorted(k for k in names if k not in expected and not k.startswith("optim/"))
        if unknown:
            raise CheckpointError(f"{path}: entries this model does not have: {unknown[:5]}")
        for key in expected:
            if key not in entries:
                raise CheckpointError(f"{path}: checkpoint has no parameter {key[len('param/'):]!r}")
        if not has_optimizer and any(k.startswith("optim/") for k in names):
            raise CheckpointError(f"{path}: optimizer moments are saved but 'optimizer_step_count' is missing")
        if has_optimizer:
            for i in range(n_params):
                for moment in ("m", "v"):
                    if f"optim/{moment}.{i}" not in entries:
                        raise CheckpointError(f"{path}: the optimizer state has no 'optim/{moment}.{i}'")
            extra_moments = sorted(k for k in names if k.startswith("optim/") and k not in shapes)
            if extra_moments:
                raise CheckpointError(f"{path}: optimizer entries for parameters this model does not have: "
                                      f"{extra_moments[:5]}")
        arrays = {key: _read_entry(path, archive, key, entries[key], shape,
                                   math.prod(shape) * numpy.dtype(SAVED_DTYPES[-1]).itemsize)
                  for key, shape in shapes.items()}

    xp = backend.module_for(backend_name or backend.backend_name())
    dtype = None
    for key, p in expected.items():
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
    if has_optimizer:
        optimizer_state = {}
        for i in range(n_params):
            for moment in ("m", "v"):
                key = f"optim/{moment}.{i}"
                _check_array(path, key, arrays[key], shapes[key])
                optimizer_state[f"{moment}.{i}"] = arrays[key]
        optimizer_state["step_count"] = meta["optimizer_step_count"]
    return Checkpoint(model, vocab, meta["step"], optimizer_state, meta["extra"], meta, path)


__all__ = ["save_checkpoint", "load_checkpoint", "Checkpoint", "CheckpointError", "NonFiniteStateError",
           "FORMAT_VERSION"]
