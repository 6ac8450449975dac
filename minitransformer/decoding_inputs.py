"""What a search checks and works out from its inputs, before the first output position.

``decoding.py`` (the strategies and their loops) takes these from here, so that the
loops read as the search itself: the numbers a strategy or a call is given (whole,
real, a flag, a beam size), the source batch on the model's device, each sentence's
length limit (§6.1: input + 50) and the ids never chosen as output tokens.
"""

from __future__ import annotations

import math
import numbers

from . import backend
from .errors import ShapeError

# §6.1: at inference the output may be at most 50 tokens longer than the input.
EXTRA_OUTPUT_LEN = 50

# The largest beam accepted. §6.1 uses 4; the search's memory grows with k·V per sentence
# and its top-k selection with k², so a mistyped 100000 is refused before anything is allocated.
MAX_BEAM_SIZE = 64


# -- checking arguments (before anything is allocated) ---------------------------------------

def _whole(value, name: str, where: str, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as a Python int, refusing floats, bools and anything out of lo..hi (named errors)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where}: {name} must be a whole number, got {value!r} ({type(value).__name__})")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        span = f"≥ {lo}" if hi is None else f"in {lo}..{hi}"
        raise ValueError(f"{where}: {name} must be {span}, got {value}")
    return value


def _real(value, name: str, where: str) -> float:
    """``value`` as a finite Python float (no bools, no nan, no inf)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where}: {name} must be a number, got {value!r} ({type(value).__name__})")
    try:
        value = float(value)
    except OverflowError:                      # an int too large for a float, e.g. 10**400
        value = math.inf
    if not math.isfinite(value):
        raise ValueError(f"{where}: {name} must be a finite number, got {value}")
    return value


def _flag(value, name: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{where}: {name} must be True or False, got {value!r} ({type(value).__name__})")
    return value


def _check_call(model, where: str, bos_id, eos_id, max_len, use_cache):
    """The arguments every search takes; returns (bos_id, eos_id, max_len) as plain ints (or None)."""
    V = model.cfg.vocab_size
    bos_id = _whole(bos_id, "bos_id", where, 0, V - 1)
    if eos_id is not None:
        eos_id = _whole(eos_id, "eos_id", where, 0, V - 1)
    if max_len is not None:
        max_len = _whole(max_len, "max_len", where, 1)
    _flag(use_cache, "use_cache", where)
    return bos_id, eos_id, max_len


def _check_beam(size, alpha, where: str, size_name: str) -> tuple[int, float]:
    """A beam size in 1..MAX_BEAM_SIZE and a length-penalty α ≥ 0, as (int, float)."""
    size = _whole(size, size_name, where, 1)
    if size > MAX_BEAM_SIZE:
        raise ValueError(f"{where}: {size_name} must be at most {MAX_BEAM_SIZE} (decoding.MAX_BEAM_SIZE; "
                         f"§6.1 uses 4), got {size}")
    alpha = _real(alpha, "alpha", where)
    if alpha < 0:
        raise ValueError(f"{where}: alpha must be ≥ 0 (0: no length penalty), got {alpha}")
    return size, alpha


def _set(obj, name: str, value) -> None:
    """Store a checked value (a plain int or float) on a frozen dataclass, from its __post_init__."""
    object.__setattr__(obj, name, value)


# -- the source batch and what follows from it -------------------------------------------------------------------------

def _as_ids(model, src):
    """src as an integer (B, S) array on the model's device."""
    xp = model.xp
    src = backend.to_backend(src, xp)
    if getattr(src, "ndim", None) != 2:
        raise ShapeError(f"decoding: src must be token ids of shape (B, S), got {tuple(getattr(src, 'shape', ()))}")
    if src.dtype.kind not in ("i", "u"):
        raise TypeError(f"decoding: src must be an integer array, got dtype {src.dtype}")
    if src.shape[0] and src.shape[1] == 0:
        raise ValueError("decoding: src has no positions (shape (B, 0)); every source sentence needs at least "
                         "one token (with make_source_batch, <eos> is one)")
    if src.shape[0]:
        empty = backend.to_numpy((src == model.cfg.pad_id).all(axis=1))
        if empty.any():
            raise ValueError(f"decoding: source row {int(empty.argmax())} is all padding (an empty sentence); "
                             "the encoder-decoder attention would have nothing to attend to")
    return src


def _length_limits(model, src, max_len):
    """Per sentence, the most tokens to generate (<eos> included): host list of B ints.

    Default: the sentence's own (unpadded) length + 50 (§6.1), so padding in a
    batch does not change a sentence's result. Always capped by cfg.max_len,
    the number of decoder positions the positional encoding covers.
    """
    cap = model.cfg.max_len
    if max_len is not None:                                  # already checked: an int ≥ 1
        return [min(max_len, cap)] * int(src.shape[0])
    lengths = backend.to_numpy((src != model.cfg.pad_id).sum(axis=1)).tolist()
    return [min(int(n) + EXTRA_OUTPUT_LEN, cap) for n in lengths]


def _banned_ids(model, bos_id, eos_id):
    """Ids never chosen as an output token: pad and bos (unless one is also eos), on the device
    (copied once, not at every position)."""
    return model.xp.asarray(sorted({model.cfg.pad_id, bos_id} - {eos_id}), dtype=model.xp.int64)
