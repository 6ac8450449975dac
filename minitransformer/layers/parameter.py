"""Parameter and Layer: the two small classes every component is built on.

A ``Parameter`` is a pair of arrays, the value ``data`` and its gradient
``grad``. Backward passes *add* into ``grad`` (``+=``), never assign, so a
Parameter shared by several layers (the tied embedding of §3.4) collects the
sum of the gradients from every place it is used.

A ``Layer`` holds Parameters and child Layers and keeps the cache of its last
forward call, which its backward reads. One Layer object serves one call site:
a layer called twice before backward would overwrite its own cache.
"""

from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager

from .. import backend
from ..errors import check_gradient


class Parameter:
    """A learnable array and its accumulated gradient (same shape, same dtype)."""

    def __init__(self, data, name: str = ""):
        xp = backend.get_array_module(data)
        self.data = data
        self.grad = xp.zeros_like(data)
        self.name = name

    @property
    def shape(self):
        return self.data.shape

    def zero_grad(self) -> None:
        self.grad[...] = 0

    def __repr__(self) -> str:
        return f"Parameter({self.name!r}, shape={tuple(self.data.shape)}, dtype={self.data.dtype})"


class Layer:
    """Base class: parameter discovery, train/eval mode, zero_grad, cache handling.

    A forward keeps what its backward needs in ``self._cache``; the backward reads it.
    ``_cache`` is private: nothing outside a layer reads it (what learners and plots
    need, such as attention weights, is a public attribute).

    The checks around them run in the wrappers of ``checked_forward`` and
    ``checked_backward`` (below), before the layer's own method starts: the method
    itself is the math, and a learner who steps into it with pdb meets the math first.
    """

    training: bool = True

    def __init__(self):
        self.training = True
        self._cache = None
        self._forward_called = False      # True from a forward until its backward
        self._out_shape = None
        self._out_dtype = None

    # -- what the wrappers check ----------------------------------------------------------
    def _forward_ran(self, out) -> None:
        """Remember that a forward ran, and its output's shape and dtype (its gradient must match)."""
        self._forward_called = True
        self._out_shape, self._out_dtype = tuple(out.shape), out.dtype

    def _check_dout(self, dout, name: str = "dout") -> None:
        """Raise if there was no forward (or the backward already ran: a stale cache is never
        reused), or if ``dout`` does not have the shape of the forward's output, or is not a
        float array of the output's dtype: a wrong gradient would otherwise broadcast into a
        wrong answer, fail deep in a matrix product, or silently promote the backward to
        another precision."""
        if not self._forward_called:
            raise RuntimeError(
                f"{type(self).__name__}.backward called before forward "
                "(or twice for one forward): call forward first"
            )
        where = f"{type(self).__name__}{'' if not getattr(self, '_name', '') else ' ' + repr(self._name)}.backward"
        check_gradient(where, name, dout, self._out_shape, self._out_dtype)

    # -- parameters ------------------------------------------------------------
    def named_parameters(self, prefix: str = "") -> list[tuple[str, Parameter]]:
        """All Parameters below this layer, each once (a tied one under its first name)."""
        seen: set[int] = set()
        out: list[tuple[str, Parameter]] = []
        self._collect(prefix, seen, out)
        return out

    def _collect(self, prefix, seen, out):
        for key, value in vars(self).items():
            if key.startswith("_"):
                continue
            items = [(f"{key}.{i}", v) for i, v in enumerate(value)] if isinstance(value, list) else [(key, value)]
            for name, v in items:
                full = f"{prefix}{name}"
                if isinstance(v, Parameter):
                    if id(v) not in seen:
                        seen.add(id(v))
                        out.append((full, v))
                elif isinstance(v, Layer):
                    v._collect(full + ".", seen, out)

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def modules(self) -> list[Layer]:
        """This layer and every Layer below it, each parent before its children.

        A list built by plain recursion: decoding walks the whole model twice per call
        (``eval_mode``), and nested generators cost 3x more per layer at batch size 1.
        """
        found = [self]
        for key, value in vars(self).items():
            if key[0] == "_":
                continue
            if isinstance(value, Layer):
                found += value.modules()
            elif isinstance(value, list):
                for v in value:
                    if isinstance(v, Layer):
                        found += v.modules()
        return found

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.zero_grad()

    def train(self, mode: bool = True):
        for layer in self.modules():
            layer.training = mode
        return self

    def eval(self):
        return self.train(False)

    def num_parameters(self) -> int:
        return sum(int(p.data.size) for p in self.parameters())


@contextmanager
def eval_mode(layer: Layer):
    """Dropout off inside the block; every layer's own previous mode restored after.

        with eval_mode(model):
            logits = model.forward(src, tgt_in)
    """
    modes = [(m, m.training) for m in layer.modules()]
    for m, _ in modes:                  # layer.eval(), without walking the tree a second time
        m.training = False
    try:
        yield layer
    finally:
        for m, mode in modes:
            m.training = mode


# -- the checks around a layer's math ------------------------------------------------------

def _no_check(layer, *args, **kwargs) -> None:
    """The check of a forward that takes anything its math takes (Residual's)."""


def checked_forward(check=_no_check):
    """Decorate a Layer's forward: ``check(self, *args, **kwargs)`` first (the arguments'
    shapes and dtypes, with one clear message each), then the forward itself, whose
    output's shape and dtype are remembered for the backward's gradient check.

        class Linear(Layer):
            def _check_input(self, x): ...

            @checked_forward(_check_input)
            def forward(self, x): ...          # the math only

    With pdb, `s` on ``layer.forward(x)`` stops in this wrapper first: `n` runs the checks,
    and `s` on its next line steps into the forward's math.
    """
    def decorate(forward):
        @functools.wraps(forward)
        def checked(self, *args, **kwargs):
            check(self, *args, **kwargs)                 # the arguments' checks: `n` steps over them
            out = forward(self, *args, **kwargs)         # the layer's math: `s` steps in
            self._forward_ran(out)
            return out
        return checked
    return decorate


def checked_backward(backward):
    """Decorate a Layer's backward(dout, ...): ``dout`` is checked against the forward's
    output first (``Layer._check_dout``); the backward reads the forward's ``self._cache``,
    which is cleared after it, so a cache serves one backward only."""
    name = list(inspect.signature(backward).parameters)[1]      # "dy", "dout", "dlogits": for messages

    @functools.wraps(backward)
    def checked(self, dout, *args, **kwargs):
        self._check_dout(dout, name)                     # the gradient's checks: `n` steps over them
        try:
            return backward(self, dout, *args, **kwargs)     # the layer's math: `s` steps in
        finally:
            self._cache, self._forward_called = None, False
    return checked
