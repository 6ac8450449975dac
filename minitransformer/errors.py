"""Input checks with messages that name the problem.

A wrong shape in a hand-written layer would otherwise surface as a NumPy
broadcasting traceback deep inside a matrix product, or worse, broadcast
silently into a wrong answer. Every layer checks its inputs with these helpers
before its math starts (in the wrapper of ``layers.parameter.checked_forward``),
and the message says what was expected and what arrived.
"""

from __future__ import annotations


class ShapeError(ValueError):
    """An array has the wrong shape. The message names expected and actual."""


class TokenIdError(ValueError):
    """A token id is outside the vocabulary. The message names the id and the size."""


class EnvironmentVariableError(ValueError):
    """An environment variable the package reads has a value it cannot use.

    The message names the variable, the value and what would be accepted.
    """

    def __init__(self, variable: str, value: str, expected: str):
        self.variable, self.value = variable, value
        super().__init__(f"environment variable {variable}={value!r} is not valid: expected {expected}")


class NonFiniteError(RuntimeError):
    """A value that must be finite (a loss, a gradient, a saved tensor) is NaN or infinite.

    Training raises its subclasses (``train.NonFiniteLossError``,
    ``optim.NonFiniteGradientError``) and refuses to save such a state.
    """


def check_gradient(where: str, name: str, grad, expected_shape, expected_dtype=None) -> None:
    """Raise unless ``grad`` is a float array of exactly ``expected_shape`` (and ``expected_dtype``).

    A backward receives the gradient of its forward's output: it must have that
    output's shape. NumPy would otherwise broadcast a wrong-sized gradient into a
    wrong answer without a word (a (1, S, d) gradient for a (B, S, d) output, say).
    It must also have the output's dtype (the dtype rule, see ``check_input``):
    a float64 gradient would silently turn a float32 layer's backward into float64.
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
    if expected_dtype is not None and grad.dtype != expected_dtype:
        raise TypeError(
            f"{where}: {name} has dtype {grad.dtype}, but the forward's output was {expected_dtype}; "
            f"pass a gradient of the output's dtype (.astype({str(expected_dtype)!r}))"
        )


def check_input(where: str, name: str, x, d: int | None = None, dtype=None, label: str = "d_model") -> None:
    """The dtype rule for activations, and the last-axis check (``check_last_dim``) when ``d`` is given.

    The rule, the same in every layer:

    * activations are float arrays: an integer or boolean array is a TypeError
      (token ids go into an ``Embedding``, not into the layers after it);
    * a layer with parameters computes in its parameters' dtype (``dtype``): an
      input of another float dtype is a TypeError naming both. NumPy would
      otherwise promote a float32 layer fed float64 to float64 without a word,
      doubling memory and time and hiding the mismatch. Convert the input
      (``x.astype(numpy.float32)``) or build the layer in the input's dtype
      (``backend.set_default_dtype``);
    * a layer without parameters (dropout, the positional encoding) keeps its
      input's float dtype (``dtype=None``).
    """
    if d is not None:
        check_last_dim(where, name, x, d, label)
    dt = getattr(x, "dtype", None)
    if dt is None or getattr(x, "shape", None) is None:
        raise TypeError(f"{where}: {name} must be an array, got {type(x).__name__}")
    if dt.kind != "f":
        hint = " (token ids go into an Embedding first)" if dt.kind in "iu" else ""
        raise TypeError(f"{where}: {name} must be a float array, got dtype {dt}{hint}")
    if dtype is not None and dt != dtype:
        raise TypeError(
            f"{where}: {name} has dtype {dt}, but the layer's parameters are {dtype}; convert the input "
            f"(.astype({str(dtype)!r})) or build the layer in {dt} (backend.set_default_dtype)"
        )


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
        got = getattr(ids, "dtype", type(ids).__name__)
        raise TokenIdError(f"{where}: token ids must be an integer array, got dtype {got}")
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
