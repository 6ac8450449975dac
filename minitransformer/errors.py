"""Input checks with messages that name the problem.

A wrong shape in a hand-written layer would otherwise surface as a NumPy
broadcasting traceback deep inside a matrix product, or worse, broadcast
silently into a wrong answer. Every layer checks its inputs on entry with
these helpers, and the message says what was expected and what arrived.
"""

from __future__ import annotations


class ShapeError(ValueError):
    """An array has the wrong shape. The message names expected and actual."""


class TokenIdError(ValueError):
    """A token id is outside the vocabulary. The message names the id and the size."""


def check_gradient(where: str, name: str, grad, expected_shape) -> None:
    """Raise unless ``grad`` is a float array of exactly ``expected_shape``.

    A backward receives the gradient of its forward's output: it must have that
    output's shape. NumPy would otherwise broadcast a wrong-sized gradient into a
    wrong answer without a word (a (1, S, d) gradient for a (B, S, d) output, say).
    """
    shape = getattr(grad, "shape", None)
    if shape is None:
        raise ShapeError(f"{where}: {name} must be an array, got {type(grad).__name__}")
    if tuple(shape) != tuple(expected_shape):
        raise ShapeError(
            f"{where}: {name} must have the shape of the forward's output {tuple(expected_shape)}, "
            f"got {tuple(shape)}"
        )
    if grad.dtype.kind != "f":
        raise TypeError(f"{where}: {name} must be a float array, got dtype {grad.dtype}")


def check_last_dim(where: str, name: str, arr, d: int, label: str = "d_model") -> None:
    """Raise ShapeError unless the last axis of ``arr`` has size ``d``."""
    shape = getattr(arr, "shape", None)
    if shape is None:
        raise ShapeError(f"{where}: {name} must be an array, got {type(arr).__name__}")
    if len(shape) == 0 or shape[-1] != d:
        raise ShapeError(
            f"{where}: {name} must have last dimension {label}={d}, i.e. shape (..., {d}); "
            f"got {tuple(shape)}"
        )


def check_token_ids(where: str, ids, vocab_size: int) -> None:
    """Raise TokenIdError if any id is not in [0, vocab_size), or ids are not integers."""
    kind = getattr(getattr(ids, "dtype", None), "kind", None)
    if kind not in ("i", "u"):
        raise TokenIdError(f"{where}: token ids must be an integer array, got dtype {getattr(ids, 'dtype', type(ids).__name__)}")
    if ids.size == 0:
        return
    # One yes/no question (on a GPU, one wait for the device per call instead of two);
    # min and max are fetched only to word the error.
    if bool(((ids < 0) | (ids >= vocab_size)).any()):
        lo, hi = int(ids.min()), int(ids.max())
        bad = lo if lo < 0 else hi
        raise TokenIdError(
            f"{where}: token id {bad} is outside the vocabulary of size {vocab_size} "
            f"(valid ids are 0..{vocab_size - 1})"
        )


def check_mask(where: str, name: str, mask, shape) -> None:
    """Raise unless ``mask`` is boolean and broadcasts to ``shape`` axis by axis.

    Every axis of the mask must be 1 or equal to the target's size, and it must
    have the same number of axes. (NumPy would also broadcast a mask with fewer
    axes, and might silently line them up against the wrong ones.)
    """
    dtype = getattr(mask, "dtype", None)
    if dtype is None or dtype.kind != "b":
        raise TypeError(
            f"{where}: {name} must be a boolean array (True = may attend), got dtype {dtype}"
        )
    ok = mask.ndim == len(shape) and all(m in (1, s) for m, s in zip(mask.shape, shape))
    if not ok:
        raise ShapeError(
            f"{where}: {name} of shape {tuple(mask.shape)} does not broadcast to the scores' "
            f"shape {tuple(shape)} (B, h, S_q, S_k); each axis must be 1 or equal"
        )
