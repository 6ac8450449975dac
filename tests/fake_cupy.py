"""A strict stand-in for CuPy that runs on the CPU, so the tests exercise the CuPy path without a GPU.

The package picks CuPy by ``import cupy`` (``minitransformer/backend.py``) and recognises a
CuPy array by ``type(a).__module__.startswith("cupy")``. :func:`installed` puts this file's
``cupy`` and ``cupyx`` module objects into ``sys.modules`` for as long as a ``with`` block (or
the ``fake_cupy`` fixture of ``tests/conftest.py``) lasts; outside it nothing changes.

What it imitates, taken from CuPy's source and documentation (v13, ``cupy/_core/core.pyx``,
``_routines_indexing.pyx``, ``cupy/random/_generator_api.pyx``, ``cupyx/_scatter.py``):

* No implicit conversion to NumPy. ``numpy.asarray(x)`` and ``numpy.array(x)`` raise TypeError
  (CuPy 13's ``__array__`` refuses; CuPy 14.2 with NumPy 2.5 was seen to convert on an H200, and
  the stand-in stays strict so that no hidden device-to-host copy goes unnoticed), and so does
  everything that calls them: ``numpy.savez``,
  matplotlib, ``numpy.add.at(x, ...)``. ``x.get()`` and ``cupy.asnumpy(x)`` are the explicit ways.
* NumPy ufuncs and functions given a device array run on the device (CuPy implements
  ``__array_ufunc__`` / ``__array_function__``) when CuPy has a function of that name, and
  return a device array; otherwise they raise TypeError.
* No implicit host-to-device copy inside an operation: ``x + host_array``, ``host_array * x``,
  ``x += host_array``, ``cupy.where(host_mask, x, 0)`` raise TypeError; so does
  ``x[2:5] = host_array`` (a basic index with a non-scalar host value, CuPy's ``fill`` refuses).
  CuPy *does* convert host indices and the values of an advanced-index assignment; so does this.
* Reductions and single-element indexing return 0-d device arrays, never Python or NumPy scalars.
* ``cupy.random.default_rng``: CuPy's Generator API, which is smaller than NumPy's (``random``,
  ``uniform``, ``integers``, ``standard_normal``; no ``normal``, no ``bit_generator.state``),
  with a stream that differs from NumPy's for the same seed, as CuPy's XORWOW stream does.
* ``cupyx.scatter_add`` (= ``numpy.add.at``) with CuPy's dtype limits (no int64 table).
* Anything else the package asks for raises AttributeError naming it: a call that real CuPy
  may not have. Add it here only after checking that CuPy has it.

Host syncs. On a GPU these calls make the CPU wait for the device: ``float(x)``, ``int(x)``,
``bool(x)``, ``complex(x)``, ``x.item()``, ``x.get()``, ``x.tolist()``, ``cupy.asnumpy(x)``,
``repr/str/format(x)``, and any operation whose output size depends on the data (boolean-mask
indexing, ``nonzero``). Each is counted in :data:`SYNCS` by kind and by the package line that
caused it, so a test can count them per training step. Host-to-device copies are counted
separately (``SYNCS.to_device``); they are not syncs.

Not imitated: asynchrony and timing, device memory, CuPy's wrap-around of out-of-range integer
indices (NumPy raises, which is stricter), and CuPy's older rules for promoting NumPy scalars.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import types

import numpy

_THIS_FILE = os.path.abspath(__file__)
_ROOT = os.path.dirname(os.path.dirname(_THIS_FILE))     # the checkout: tests/ sits in it
_NOT_THERE = ("is not provided by the CuPy stand-in (tests/fake_cupy.py). Real CuPy may not have it "
              "either: check CuPy's documentation, then use another call or add it to the stand-in.")


# -- counting host syncs -----------------------------------------------------------------------

def _call_site() -> str:
    """'minitransformer/optim.py:248 (update)': the first frame outside this file.

    backend.py's helpers (to_numpy) are one level too deep to be useful, so their caller is
    named too: 'minitransformer/backend.py:114 (to_numpy) <- minitransformer/decoding.py:320 (...)'.
    """
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename) == _THIS_FILE:
        frame = frame.f_back
    if frame is None:
        return "?"

    def name(f):
        # Relative to the checkout, whatever its folder is called (a clone named "minitransformer"
        # has that word twice in its paths). A file of an installed copy of the package (in
        # site-packages) is named from its package folder on: minitransformer/decoding.py.
        path = os.path.abspath(f.f_code.co_filename)
        if os.path.commonpath([path, _ROOT]) == _ROOT:
            path = os.path.relpath(path, _ROOT)
        elif f"{os.sep}minitransformer{os.sep}" in path:
            path = "minitransformer" + os.sep + path.rsplit(f"{os.sep}minitransformer{os.sep}", 1)[1]
        return f"{path.replace(os.sep, '/')}:{f.f_lineno} ({f.f_code.co_name})"

    site = name(frame)
    if frame.f_code.co_filename.replace(os.sep, "/").endswith("minitransformer/backend.py") and frame.f_back:
        site += " <- " + name(frame.f_back)
    return site


class SyncLog:
    """Host syncs and host-to-device copies seen since the last :meth:`reset`."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.kinds: collections.Counter = collections.Counter()        # "float" -> 3
        self.sites: collections.Counter = collections.Counter()        # ("float", "…/loss.py:61 (…)") -> 1
        self.to_device: collections.Counter = collections.Counter()    # call site -> host-to-device copies

    def sync(self, kind: str) -> None:
        self.kinds[kind] += 1
        self.sites[(kind, _call_site())] += 1

    def copy_to_device(self) -> None:
        self.to_device[_call_site()] += 1

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def report(self, per: int = 1) -> str:
        """One line per (kind, call site), most frequent first; counts divided by ``per``."""
        lines = [f"{self.total / per:g} host syncs" + (f" per step (over {per})" if per > 1 else "")]
        for (kind, site), n in self.sites.most_common():
            lines.append(f"  {n / per:6g}  {kind:<16} {site}")
        if self.to_device:
            lines.append(f"{sum(self.to_device.values()) / per:g} host-to-device copies (not syncs)")
            for site, n in self.to_device.most_common():
                lines.append(f"  {n / per:6g}  {site}")
        return "\n".join(lines)


SYNCS = SyncLog()


# -- moving between "device" and host ---------------------------------------------------------

def _wrap(result):
    """NumPy results -> device arrays. A NumPy scalar becomes a 0-d array, as CuPy returns."""
    if isinstance(result, numpy.ndarray):
        return ndarray._adopt(result)
    if isinstance(result, numpy.generic):
        return ndarray._adopt(numpy.asarray(result))
    if isinstance(result, tuple):
        return tuple(_wrap(r) for r in result)
    if isinstance(result, list):
        return [_wrap(r) for r in result]
    return result


def _operand(x, where: str):
    """The NumPy array behind a device array; host arrays are refused as CuPy refuses them."""
    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, numpy.ndarray):
        raise TypeError(
            f"{where}: got a numpy.ndarray of shape {x.shape} where a cupy.ndarray is needed. CuPy "
            "does not copy host arrays to the GPU inside an operation (Unsupported type "
            "<class 'numpy.ndarray'>): move it first with cupy.asarray / backend.to_backend."
        )
    if isinstance(x, (list, tuple)):
        return type(x)(_operand(v, where) for v in x)
    return x


def _host_value(x):
    """Host data for a creation function or an index, with any device arrays inside unwrapped
    (CuPy builds an array from a list of device arrays on the device)."""
    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, (list, tuple)):
        items = [_host_value(v) for v in x]
        return items if isinstance(x, list) else tuple(items)
    return x


def _index(key):
    """A NumPy index from a CuPy one, and what kind it is.

    Returns (index, advanced, boolean_array). CuPy converts host arrays and lists used as
    indices to device arrays (a copy); an index with a boolean array needs the number of
    True entries on the host first (a sync, see CuPy's _prepare_mask_indexing_single).
    """
    parts = key if isinstance(key, tuple) else (key,)
    out, advanced, boolean = [], False, False
    for s in parts:
        if s is None or s is Ellipsis or isinstance(s, slice):
            out.append(s)
            continue
        if isinstance(s, (int, numpy.integer)) and not isinstance(s, (bool, numpy.bool_)):
            out.append(s)
            continue
        if isinstance(s, ndarray):
            arr = s._a
        else:
            if isinstance(s, (list, tuple, numpy.ndarray)):
                SYNCS.copy_to_device()
            arr = numpy.asarray(_host_value(s) if isinstance(s, (list, tuple)) else s)
            if arr.dtype.kind == "f" and arr.size == 0:
                arr = arr.astype(numpy.int32)        # an empty list means "no indices"
        if arr.dtype.kind not in "biu":
            raise IndexError("arrays used as indices must be of integer or boolean type "
                             f"(actual: {arr.dtype.type})")
        advanced = True
        boolean = boolean or arr.dtype.kind == "b"
        out.append(arr)
    return (tuple(out) if isinstance(key, tuple) else out[0]), advanced, boolean


class _Flags:
    """CuPy's flags object: c_contiguous, f_contiguous and owndata, read-only."""

    def __init__(self, a: numpy.ndarray):
        self.c_contiguous = bool(a.flags.c_contiguous)
        self.f_contiguous = bool(a.flags.f_contiguous)
        self.owndata = bool(a.flags.owndata)

    def __getitem__(self, name):
        return {"C_CONTIGUOUS": self.c_contiguous, "F_CONTIGUOUS": self.f_contiguous,
                "OWNDATA": self.owndata}[name]


# -- the array ---------------------------------------------------------------------------------

class ndarray:
    """A device array. Its data is a NumPy array that only this object (and its views) hold."""

    __array_priority__ = 100
    __hash__ = None
    __slots__ = ("_a",)

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        if memptr is not None or strides is not None:
            raise NotImplementedError("cupy.ndarray(memptr=, strides=) " + _NOT_THERE)
        self._a = numpy.empty(shape, dtype=dtype, order=order)

    @classmethod
    def _adopt(cls, a: numpy.ndarray) -> ndarray:
        obj = cls.__new__(cls)
        obj._a = a
        return obj

    def __getattr__(self, name):
        raise AttributeError(f"cupy.ndarray.{name} {_NOT_THERE}")

    # -- attributes -----------------------------------------------------------------------------
    shape = property(lambda self: self._a.shape)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    dtype = property(lambda self: self._a.dtype)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: _Flags(self._a))
    T = property(lambda self: _wrap(self._a.T))

    # -- no implicit conversion -----------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # As in CuPy: only plain calls of a ufunc CuPy also has; np.add.at(x, ...) and the
        # other ufunc methods are refused (NotImplemented -> NumPy raises TypeError).
        if method != "__call__" or ufunc.__name__ not in _UFUNCS:
            return NotImplemented
        return getattr(cupy, ufunc.__name__)(*inputs, **kwargs)

    def __array_function__(self, func, types_, args, kwargs):
        impl = cupy.__dict__.get(func.__name__) if func.__module__ == "numpy" else None
        if impl is None:
            return NotImplemented                    # NumPy then raises TypeError
        return impl(*args, **kwargs)

    # -- explicit transfers and syncs -----------------------------------------------------------
    def get(self, stream=None, order="C", out=None):
        """A host (NumPy) copy: waits for the device."""
        SYNCS.sync("get")
        if out is not None:
            if not isinstance(out, numpy.ndarray) or out.dtype != self.dtype or out.shape != self.shape:
                raise TypeError("get(out=): need a numpy.ndarray of the same dtype and shape")
            out[...] = self._a
            return out
        return numpy.array(self._a, order=order, copy=True)

    def set(self, arr, stream=None):
        if not isinstance(arr, numpy.ndarray) or arr.dtype != self.dtype or arr.shape != self.shape:
            raise TypeError("set(): need a numpy.ndarray of the same dtype and shape")
        SYNCS.copy_to_device()
        self._a[...] = arr

    def item(self):
        SYNCS.sync("item")
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return self._a.item()

    def tolist(self):
        SYNCS.sync("tolist")
        return self._a.tolist()

    def tobytes(self, order="C"):
        SYNCS.sync("tobytes")
        return self._a.tobytes(order)

    def __float__(self):
        SYNCS.sync("float")
        return float(self._a)

    def __int__(self):
        SYNCS.sync("int")
        return int(self._a)

    def __complex__(self):
        SYNCS.sync("complex")
        return complex(self._a)

    def __bool__(self):
        SYNCS.sync("bool")
        return bool(self._a)

    # No __index__: CuPy's ndarray has none, so range(x) or a[:x] with a 0-d array fails there too.

    def __repr__(self):
        SYNCS.sync("repr")
        return repr(self._a)

    def __str__(self):
        SYNCS.sync("repr")
        return str(self._a)

    def __format__(self, spec):
        SYNCS.sync("repr")
        return format(self._a, spec)

    def __reduce__(self):                            # pickling goes through the host, as in CuPy
        return (cupy.array, (self.get(),))

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    # -- containers and indexing ----------------------------------------------------------------
    def __len__(self):
        return len(self._a)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def __getitem__(self, key):
        index, _, boolean = _index(key)
        if boolean:
            SYNCS.sync("bool_mask_index")
        return _wrap(self._a[index])

    def __setitem__(self, key, value):
        index, advanced, boolean = _index(key)
        if boolean:
            SYNCS.sync("bool_mask_index")
        if isinstance(value, ndarray):
            value = value._a
        elif isinstance(value, (numpy.ndarray, list, tuple)):
            if not advanced and numpy.ndim(value) > 0:
                # CuPy fills a basic-index target from a scalar only (ndarray.fill refuses)
                raise ValueError(f"non-scalar {type(value).__name__} cannot be used for fill "
                                 "(a basic index takes a scalar: move the array to the device first)")
            value = _host_value(value)
            SYNCS.copy_to_device()
        self._a[index] = value

    # -- shape and copies -------------------------------------------------------------------------
    def reshape(self, *shape, order="C"):
        return _wrap(self._a.reshape(*shape, order=order))

    def transpose(self, *axes):
        return _wrap(self._a.transpose(*axes))

    def swapaxes(self, axis1, axis2):
        return _wrap(self._a.swapaxes(axis1, axis2))

    def ravel(self, order="C"):
        return _wrap(self._a.ravel(order))

    def flatten(self):
        return _wrap(self._a.flatten())

    def squeeze(self, axis=None):
        return _wrap(self._a.squeeze(axis))

    def view(self, dtype=None):
        return _wrap(self._a.view() if dtype is None else self._a.view(dtype))

    def copy(self, order="C"):
        return _wrap(self._a.copy(order))

    def astype(self, dtype, order="K", casting=None, subok=None, copy=True):
        if casting is not None or subok is not None:
            raise TypeError("cupy.ndarray.astype: casting= and subok= are not supported by CuPy")
        result = self._a.astype(dtype, order=order, copy=copy)
        return self if result is self._a else _wrap(result)       # copy=False and no cast: itself

    def fill(self, value):
        if isinstance(value, numpy.ndarray) and value.shape != ():
            raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
        self._a.fill(_operand(value, "cupy.ndarray.fill"))

    def sort(self, axis=-1):                          # CuPy's sort takes no kind=
        self._a.sort(axis=axis)

    def argsort(self, axis=-1):                       # nor does argsort
        return _wrap(self._a.argsort(axis=axis, kind="stable"))

    def nonzero(self):
        SYNCS.sync("nonzero")                          # the output size depends on the data
        return _wrap(self._a.nonzero())


def _method(name):
    def method(self, *args, **kwargs):
        out = kwargs.get("out")
        result = getattr(self._a, name)(*_operand(args, f"cupy.ndarray.{name}"),
                                        **{k: _operand(v, f"cupy.ndarray.{name}") for k, v in kwargs.items()})
        return out if isinstance(out, ndarray) else _wrap(result)
    method.__name__ = name
    return method


for _name in ("sum", "mean", "var", "std", "prod", "max", "min", "argmax", "argmin", "all", "any",
              "cumsum", "cumprod", "clip", "round", "dot", "take", "repeat", "diagonal", "trace", "conj"):
    setattr(ndarray, _name, _method(_name))


def _binary(ufunc_name, symbol):
    uf = getattr(numpy, ufunc_name)
    where = f"cupy.ndarray {symbol}"

    def op(self, other):
        return _wrap(uf(self._a, _operand(other, where)))

    def rop(self, other):
        return _wrap(uf(_operand(other, where), self._a))

    def iop(self, other):
        uf(self._a, _operand(other, where), out=self._a)
        return self

    return op, rop, iop


for _uf, _sym, _names in [("add", "+", "add"), ("subtract", "-", "sub"), ("multiply", "*", "mul"),
                          ("true_divide", "/", "truediv"), ("floor_divide", "//", "floordiv"),
                          ("remainder", "%", "mod"), ("power", "**", "pow"), ("matmul", "@", "matmul"),
                          ("bitwise_and", "&", "and"), ("bitwise_or", "|", "or"), ("bitwise_xor", "^", "xor")]:
    _op, _rop, _iop = _binary(_uf, _sym)
    setattr(ndarray, f"__{_names}__", _op)
    setattr(ndarray, f"__r{_names}__", _rop)
    setattr(ndarray, f"__i{_names}__", _iop)

for _uf, _name in [("less", "lt"), ("less_equal", "le"), ("equal", "eq"), ("not_equal", "ne"),
                   ("greater", "gt"), ("greater_equal", "ge")]:
    setattr(ndarray, f"__{_name}__", _binary(_uf, _name)[0])

ndarray.__neg__ = lambda self: _wrap(-self._a)
ndarray.__pos__ = lambda self: self
ndarray.__abs__ = lambda self: _wrap(abs(self._a))
ndarray.__invert__ = lambda self: _wrap(~self._a)
ndarray.__module__ = "cupy"                    # what backend.get_array_module looks for


# -- the cupy module ------------------------------------------------------------------------------

cupy = types.ModuleType("cupy", "CPU stand-in for CuPy (tests/fake_cupy.py)")
cupyx = types.ModuleType("cupyx", "CPU stand-in for cupyx (tests/fake_cupy.py)")
cupy_random = types.ModuleType("cupy.random", "CPU stand-in for cupy.random (tests/fake_cupy.py)")


def _missing(module_name):
    def __getattr__(name):
        if name.startswith("__"):                # dunder probes (copy, pickle, inspect) are not calls
            raise AttributeError(name)
        raise AttributeError(f"{module_name}.{name} {_NOT_THERE}")
    return __getattr__


cupy.__getattr__ = _missing("cupy")
cupyx.__getattr__ = _missing("cupyx")
cupy_random.__getattr__ = _missing("cupy.random")
cupy.random = cupy_random
cupy.ndarray = ndarray


class ufunc:
    """A CuPy ufunc: device arrays and scalars in, device arrays out; ``out=`` a device array."""

    def __init__(self, name):
        self._np = getattr(numpy, name)
        self.__name__ = self.name = name
        self.nin, self.nout = self._np.nin, self._np.nout

    def __call__(self, *args, **kwargs):
        where = f"cupy.{self.name}"
        out = kwargs.get("out")
        if isinstance(out, tuple):
            out = kwargs["out"] = out[0] if len(out) == 1 else out
        result = self._np(*_operand(args, where), **{k: _operand(v, where) for k, v in kwargs.items()})
        return out if isinstance(out, ndarray) else _wrap(result)

    def at(self, a, indices, b=None):
        index, _, _ = _index(indices)
        self._np.at(_operand(a, f"cupy.{self.name}.at"), index,
                    *(() if b is None else (_operand(b, f"cupy.{self.name}.at"),)))

    def reduce(self, array, axis=0, dtype=None, out=None, keepdims=False):
        return _wrap(self._np.reduce(_operand(array, f"cupy.{self.name}.reduce"), axis, dtype, keepdims=keepdims))

    def __repr__(self):
        return f"<ufunc '{self.name}' (CuPy stand-in)>"


# Ufuncs CuPy has under the same names (cupy/_math, _logic, _binary). matmul is a gufunc in
# CuPy, but takes out= and answers numpy.matmul the same way.
_UFUNCS = {
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder", "mod", "power",
    "negative", "positive", "absolute", "abs", "sign", "sqrt", "square", "reciprocal", "exp", "exp2",
    "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "tanh", "arctan", "maximum",
    "minimum", "fmax", "fmin", "floor", "ceil", "rint", "equal", "not_equal", "less", "less_equal",
    "greater", "greater_equal", "logical_and", "logical_or", "logical_not", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "isfinite", "isinf", "isnan", "matmul",
}
for _name in _UFUNCS:
    setattr(cupy, _name, ufunc(_name))


def _function(name, sync=None):
    """cupy.<name>: the NumPy function of that name, on device arrays only."""
    np_func = getattr(numpy, name)

    def function(*args, **kwargs):
        if sync or (name == "where" and len(args) == 1):       # where(cond) is nonzero(cond)
            SYNCS.sync(sync or "nonzero")
        where = f"cupy.{name}"
        out = kwargs.get("out")
        result = np_func(*_operand(args, where), **{k: _operand(v, where) for k, v in kwargs.items()})
        if isinstance(result, (bool, int, float)):
            # NumPy answers allclose, array_equal, count_nonzero with a Python scalar; CuPy with
            # a 0-d device array, so `if cupy.allclose(a, b):` waits for the device.
            result = numpy.asarray(result)
        return out if isinstance(out, ndarray) else _wrap(result)

    function.__name__ = function.__qualname__ = name
    return function


# Functions CuPy has with NumPy's signature (checked against CuPy's reference), the ones this
# project uses or is likely to; extend the list only with names CuPy really has.
for _name in (
    "empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "arange",
    "linspace", "eye", "identity", "tril", "triu", "diag",
    "reshape", "transpose", "swapaxes", "moveaxis", "concatenate", "stack", "vstack", "hstack", "split",
    "repeat", "tile", "broadcast_to", "expand_dims", "squeeze", "flip", "ravel", "where", "take",
    "take_along_axis", "copyto", "atleast_1d", "atleast_2d",
    "sum", "prod", "mean", "var", "std", "max", "amax", "min", "amin", "argmax", "argmin", "all", "any",
    "cumsum", "cumprod", "clip", "around", "sort", "argsort", "count_nonzero", "isclose",
    "allclose", "array_equal", "dot", "vdot", "inner", "outer", "tensordot", "einsum", "trace",
    "searchsorted",
):
    setattr(cupy, _name, _function(_name))
for _name in ("nonzero", "flatnonzero", "argwhere", "unique"):      # output size depends on the data
    setattr(cupy, _name, _function(_name, sync="nonzero"))

for _name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
              "uint32", "uint64", "bool_", "complex64", "complex128", "intp", "dtype", "iinfo", "finfo",
              "newaxis", "inf", "nan", "pi", "e"):
    setattr(cupy, _name, getattr(numpy, _name))


def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0, blocking=False):
    """A new device array: a device copy of a device array, or a copy of host data to the device."""
    if not isinstance(obj, ndarray):
        SYNCS.copy_to_device()
    return _wrap(numpy.array(_host_value(obj), dtype=dtype, copy=True, order=order, ndmin=ndmin))


def asarray(a, dtype=None, order=None, *, blocking=False):
    """``a`` itself when it is already a device array of that dtype, else a device copy."""
    if isinstance(a, ndarray) and (dtype is None or numpy.dtype(dtype) == a.dtype):
        return a
    if isinstance(a, ndarray):
        return a.astype(dtype)
    # A copy even for a NumPy array: device memory never aliases the host array.
    SYNCS.copy_to_device()
    return _wrap(numpy.array(_host_value(a), dtype=dtype, order=order or "K", copy=True))


def ascontiguousarray(a, dtype=None):
    if isinstance(a, ndarray) and a.flags.c_contiguous and (dtype is None or numpy.dtype(dtype) == a.dtype):
        return a
    return _wrap(numpy.ascontiguousarray(_operand(a, "cupy.ascontiguousarray"), dtype=dtype))


def asnumpy(a, stream=None, order="C", out=None, blocking=True):
    """A host copy of a device array (waits for the device); host data is returned as is."""
    if isinstance(a, ndarray):
        SYNCS.sync("asnumpy")
        result = numpy.array(a._a, order=order, copy=True)
        if out is not None:
            out[...] = result
            return out
        return result
    return numpy.asarray(a, order=order)


def get_array_module(*args):
    """cupy if any argument is a device array, else numpy (CuPy's idiom)."""
    return cupy if any(isinstance(a, ndarray) for a in args) else numpy


def is_available() -> bool:
    """The stand-in "has a GPU": the package's set_backend("cupy") succeeds under it."""
    return True


for _f in (array, asarray, ascontiguousarray, asnumpy, get_array_module, is_available):
    setattr(cupy, _f.__name__, _f)
cupy.asanyarray = asarray


# -- cupy.random: the Generator API -----------------------------------------------------------------

class BitGenerator:
    """Stands in for CuPy's XORWOW. Its stream is NumPy's Philox, not NumPy's default PCG64, so the
    same seed gives other numbers than numpy.random.default_rng, as on a real GPU. Like CuPy's
    bit generators it has no ``state`` dictionary to save or restore."""

    def __init__(self, seed=None):
        self._np = numpy.random.Generator(numpy.random.Philox(seed))


class Generator:
    """CuPy's ``cupy.random.Generator``: only the methods CuPy has (see _generator_api.pyx), with
    its signatures. Every result is a device array, 0-d when ``size`` is None."""

    def __init__(self, bit_generator):
        if not isinstance(bit_generator, BitGenerator):
            raise TypeError("cupy.random.Generator needs a cupy.random BitGenerator")
        self.bit_generator = bit_generator

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        hint = " (CuPy has standard_normal(); scale and shift it)" if name == "normal" else ""
        raise AttributeError(f"cupy.random.Generator.{name} {_NOT_THERE}{hint}")

    @property
    def _rng(self):
        return self.bit_generator._np

    @staticmethod
    def _size(size):
        return () if size is None else size

    def random(self, size=None, dtype=numpy.float64, out=None):
        # CuPy draws float64 for dtype 'd' and float32 for any other dtype, then casts.
        dt = numpy.dtype(dtype)
        draw = self._rng.random(self._size(size), dtype=numpy.float64 if dt.char == "d" else numpy.float32)
        result = _wrap(numpy.asarray(draw).astype(dt, copy=False))
        if out is not None:
            out[...] = result
            return out
        return result

    def uniform(self, low=0.0, high=1.0, size=None, dtype=numpy.float64):
        if size is None:
            size = numpy.broadcast_shapes(numpy.shape(_operand(low, "uniform")), numpy.shape(_operand(high, "uniform")))
        u = self.random(size, dtype=numpy.float64 if numpy.dtype(dtype).char == "d" else numpy.float32)
        return (low + (high - low) * u).astype(dtype, copy=False)

    def integers(self, low, high=None, size=None, dtype=numpy.int64, endpoint=False):
        lo, hi = (0, int(low)) if high is None else (int(low), int(high))
        return _wrap(numpy.asarray(self._rng.integers(lo, hi, self._size(size), dtype=dtype, endpoint=endpoint)))

    def standard_normal(self, size=None, dtype=numpy.float64, out=None):
        dt = numpy.dtype(dtype)
        if dt.char not in "fd":
            raise TypeError(f"Unsupported dtype {dt.name} for standard_normal")
        result = _wrap(numpy.asarray(self._rng.standard_normal(self._size(size), dtype=dt)))
        if out is not None:
            out[...] = result
            return out
        return result


def default_rng(seed=None):
    """A Generator over the stand-in bit generator; a Generator passed in is returned as is."""
    if isinstance(seed, Generator):
        return seed
    if isinstance(seed, BitGenerator):
        return Generator(seed)
    return Generator(BitGenerator(seed))


cupy_random.Generator = Generator
cupy_random.BitGenerator = BitGenerator
cupy_random.default_rng = default_rng


# -- cupyx ---------------------------------------------------------------------------------------------

_SCATTER_ADD_DTYPES = {numpy.dtype(t) for t in (numpy.int32, numpy.int64, numpy.float16, numpy.float32,
                                                numpy.float64, numpy.uint32, numpy.uint64)}


def scatter_add(a, slices, value):
    """``a[slices] += value`` with repeated indices summed (numpy.add.at), in place.

    CuPy uses atomicAdd, which exists only for some dtypes: an int8 table is refused. (CuPy 14.2
    accepted int64 on an H200, 2026-12-04, so the stand-in does too.)
    """
    if not isinstance(a, ndarray):
        raise TypeError(f"cupyx.scatter_add: a must be a cupy.ndarray, got {type(a).__name__}")
    if a.dtype not in _SCATTER_ADD_DTYPES:
        raise TypeError("scatter_add only supports int32, int64, float16, float32, float64, uint32, uint64, "
                        f"as data type (got {a.dtype})")
    index, _, _ = _index(slices)
    v = value._a if isinstance(value, ndarray) else numpy.asarray(_host_value(value))
    numpy.add.at(a._a, index, v.astype(a.dtype, copy=False))


cupyx.scatter_add = scatter_add


# -- installing it ---------------------------------------------------------------------------------

@contextlib.contextmanager
def installed():
    """``import cupy`` / ``import cupyx`` give the stand-in inside the block; whatever was in
    sys.modules before (nothing, or a real CuPy) is put back afterwards, and SYNCS is reset."""
    names = {"cupy": cupy, "cupy.random": cupy_random, "cupyx": cupyx}
    before = {name: sys.modules.get(name) for name in names}
    sys.modules.update(names)
    SYNCS.reset()
    try:
        yield cupy
    finally:
        for name, module in before.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
