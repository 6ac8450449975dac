"""The one place that decides the array library (NumPy or CuPy) and the float dtype.

Compute code never imports NumPy for math. It asks its inputs which library
they live in, CuPy's ``get_array_module`` idiom:

    xp = get_array_module(x)      # numpy for a numpy array, cupy for a cupy array
    y = xp.exp(x)

so the same layer code runs on a CPU or a GPU. Only *new* arrays (parameters,
positional-encoding tables, dropout masks) need a choice, and they take it
from here:

* ``set_backend("cupy")`` or the environment variable
  ``MINITRANSFORMER_BACKEND=cupy`` puts new parameters on the GPU;
* ``set_default_dtype("float64")`` (or ``MINITRANSFORMER_DTYPE=float64``) makes
  new parameters float64, which the gradient checks use. float32 is the default.
"""

from __future__ import annotations

import itertools
import operator
import os
import types
from typing import Any

import numpy

from .errors import EnvironmentVariableError

# For type hints: a numpy.ndarray or a cupy.ndarray (CuPy is optional, so it is
# not named). Shapes are given in docstrings, in the paper's letters.
Array = Any

_BACKENDS = ("numpy", "cupy")
_DTYPES = ("float32", "float64")


def _env_choice(variable: str, choices: tuple[str, ...], default: str) -> str:
    """The value of an environment variable that must be one of ``choices`` (unset or empty: ``default``)."""
    raw = os.environ.get(variable, "")
    value = raw.strip().lower() or default
    if value not in choices:
        raise EnvironmentVariableError(variable, raw, "one of " + ", ".join(choices))
    return value


_backend_name = _env_choice("MINITRANSFORMER_BACKEND", _BACKENDS, "numpy")
_dtype_name = _env_choice("MINITRANSFORMER_DTYPE", _DTYPES, "float32")


def _import_cupy():
    """Import CuPy or raise an error that says how to get it."""
    try:
        import cupy  # noqa: PLC0415  (optional dependency)
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise RuntimeError(
            "the 'cupy' backend needs CuPy: pip install -r requirements-gpu.txt"
        ) from exc
    return cupy


def cupy_available() -> bool:
    """True when CuPy imports *and* a CUDA device can be used."""
    try:
        cupy = _import_cupy()
        return bool(cupy.is_available())
    except Exception:  # noqa: BLE001 - any failure means "no GPU here"
        return False


def set_backend(name: str) -> None:
    """Choose where new parameters live: ``"numpy"`` (CPU) or ``"cupy"`` (GPU)."""
    global _backend_name
    name = name.strip().lower()
    if name not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {name!r}")
    if name == "cupy" and not cupy_available():
        raise RuntimeError("backend 'cupy' was asked for, but no CUDA device is available to CuPy")
    _backend_name = name


def backend_name() -> str:
    return _backend_name


def module_for(name: str) -> types.ModuleType:
    """The array module called ``name``: "numpy" or "cupy"."""
    if name not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {name!r}")
    return _import_cupy() if name == "cupy" else numpy


def xp_default() -> types.ModuleType:
    """The array module new arrays are created with (numpy or cupy)."""
    return _import_cupy() if _backend_name == "cupy" else numpy


def set_default_dtype(dtype) -> None:
    """Choose the float dtype of new parameters: float32 (default) or float64."""
    global _dtype_name
    name = numpy.dtype(dtype).name
    if name not in _DTYPES:
        raise ValueError(f"dtype must be one of {_DTYPES}, got {name!r}")
    _dtype_name = name


def default_dtype() -> numpy.dtype:
    return numpy.dtype(_dtype_name)


# What numpy.ndarray and NumPy's scalars are (a CuPy array is neither).
_HOST_ARRAYS = (numpy.ndarray, numpy.generic)


def get_array_module(*arrays) -> types.ModuleType:
    """numpy or cupy, whichever the arrays belong to (CuPy's idiom).

    One line, built of built-ins: a learner stepping into a layer with pdb spends
    three presses here, not six.
    """
    return numpy if all(map(isinstance, arrays, itertools.repeat(_HOST_ARRAYS))) else _module_of(arrays)


def _module_of(arrays) -> types.ModuleType:
    """cupy if any of ``arrays`` is a CuPy array, else numpy (lists, Python numbers)."""
    for a in arrays:
        if type(a).__module__.startswith("cupy"):
            return _import_cupy()
    return numpy


def on_cpu(a) -> bool:
    """True for a NumPy array (host memory), False for a CuPy one (GPU)."""
    return not type(a).__module__.startswith("cupy")


def to_numpy(a):
    """A host (NumPy) copy of any array, for saving, printing and plotting."""
    if type(a).__module__.startswith("cupy"):
        return a.get()
    return numpy.asarray(a)


def to_backend(a, xp=None):
    """Move an array onto ``xp`` (default: the current backend)."""
    xp = xp or xp_default()
    if xp is numpy:
        return to_numpy(a)
    return xp.asarray(a)


# ``a @ b``: every matrix product of the layers, by one name. It is Python's own ``@``
# (a built-in, so a debugger's `step` does not enter it), on NumPy and CuPy arrays alike;
# the one name lets a lesson or a benchmark count or time every product by rebinding it
# (``backend.matmul = counting``), as lesson 8 and benchmarks/bench_train.py do.
#
# A (B, S, k) @ (k, n) product in NumPy runs as B separate (S, k) @ (k, n) products; the
# layers fold the rows first, ``x.reshape(B * S, k) @ W``, so BLAS gets one large product
# (2-4x faster at S = 32..64 on our machine).
matmul = operator.matmul


def add_matmul(out, a, b, block_rows: int = 4096):
    """``out += a @ b`` for 2-D arrays, a block of rows at a time.

    ``out += a @ b`` in one go first builds all of ``a @ b``: for the tied
    embedding's (V, d_model) gradient that is a second 76 MB array at the
    moment memory use peaks (base model, V = 37,000). Blocks of ``block_rows``
    rows keep that temporary to a few MB, at the same speed.
    """
    for start in range(0, out.shape[0], block_rows):
        stop = min(out.shape[0], start + block_rows)
        out[start:stop] += matmul(a[start:stop], b)
    return out


# NumPy 2's vecdot: a row's dot product in one pass (CuPy has none; NumPy 1 neither).
_VECDOT = getattr(numpy, "vecdot", None)


def rowdot(a, b):
    """Σ_i a[..., i] · b[..., i] for every row, as (..., 1): ``(a * b).sum(axis=-1, keepdims=True)``.

    On NumPy 2 without building the (..., n) array ``a * b`` (one pass over memory instead
    of three: the attention backward's softmax line, 1-2% of a toy training step); elsewhere
    the plain formula. One line of built-ins, so pdb's `step` spends three presses here.
    """
    return _VECDOT(a, b)[..., None] if _VECDOT is not None and type(a) is numpy.ndarray else \
        (a * b).sum(axis=-1, keepdims=True)


def scatter_add(table, rows, values) -> None:
    """``table[rows[i]] += values[i]`` with repeats summed, on either backend.

    table: (V, d)   rows: (n,) ints   values: (n, d)

    This is the backward of a row lookup (the embedding, §3.4). Plain
    ``table[rows] += values`` would keep only the last of repeated rows.
    """
    xp = get_array_module(table)
    if rows.size == 0:
        return
    if xp is numpy:
        # np.add.at is correct but slow; a sort + reduceat groups repeated rows
        # and sums each group in one vectorized pass.
        order = numpy.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        starts = numpy.flatnonzero(numpy.r_[True, sorted_rows[1:] != sorted_rows[:-1]])
        sums = numpy.add.reduceat(values[order], starts, axis=0)
        table[sorted_rows[starts]] += sums
    else:  # pragma: no cover - needs a GPU
        import cupyx  # noqa: PLC0415

        cupyx.scatter_add(table, rows, values)


def host_rng(seed):
    """A NumPy generator on the host. Parameters are initialised from it on
    either backend, so a seed gives the same weights on a CPU and a GPU."""
    return numpy.random.default_rng(seed)


def rng_state(rng):
    """A JSON-able snapshot of a generator's state (NumPy only; None for CuPy)."""
    bit_generator = getattr(rng, "bit_generator", None)
    return getattr(bit_generator, "state", None) if isinstance(rng, numpy.random.Generator) else None


def set_rng_state(rng, state) -> None:
    """Restore a snapshot from ``rng_state`` (ignored when it is None)."""
    if state is not None and isinstance(rng, numpy.random.Generator):
        rng.bit_generator.state = state


def seeded_rng(seed, xp=None):
    """A random generator on ``xp`` (default: current backend), seeded."""
    xp = xp or xp_default()
    return xp.random.default_rng(seed)


def format_bytes(n: float) -> str:
    """A size for a message, in decimal units: "3.0 GB", "12.5 kB", "512 bytes"."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} bytes"


def memory_limit(xp=None) -> int | None:
    """Bytes of memory arrays of ``xp`` (default: the current backend) can use at most, or None if unknown.

    NumPy: the machine's physical memory, or the container's limit (cgroup
    ``memory.max``) if that is smaller. CuPy: the device's total memory. This is
    the most there could ever be, not what is free now: a size above it can
    never fit, which is what a check before allocating needs to know.
    """
    xp = xp or xp_default()
    if xp is not numpy:
        try:
            return int(xp.cuda.Device().mem_info[1])
        except Exception:  # noqa: BLE001 - no device, no answer
            return None
    limits = []
    try:
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        pass
    for name in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(name, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return min(limits) if limits else None


# -- the one question decoding asks the device ---------------------------------------------

def host_flag(flag) -> bool:
    """A yes/no answer computed on the device, as a Python bool: ``bool(flag)`` for a 0-d bool array.

    On a GPU the CPU must wait for the device to finish everything queued before the answer
    exists (a host sync), so a search that asked per token or per layer would run at the
    speed of the round trips. The decoding loops ask exactly one question per output
    position ("may the search stop?"), and only through this function: a reader finds every
    such wait by its name, and the tests count them (tests/fake_cupy.py).
    """
    return bool(flag)
