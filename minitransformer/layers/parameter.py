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

    A forward keeps what its backward needs with ``_save_cache(cache, out)``;
    the backward takes it back with ``_pop_cache(dout)``, which also checks that
    the incoming gradient has the shape of the forward's output. ``_cache`` is
    private: nothing outside a layer reads it (what learners and plots need, such
    as attention weights, is a public attribute).
    """

    training: bool = True

    def __init__(self):
        self.training = True
        self._cache = None
        self._forward_called = False      # True from a forward until its backward
        self._out_shape = None
        self._out_dtype = None

    # -- the cache a forward leaves for its backward --------------------------
    def _save_cache(self, cache, out) -> None:
        """Keep ``cache`` for the backward, and remember ``out``'s shape (its gradient must match)."""
        self._cache, self._forward_called = cache, True
        self._out_shape, self._out_dtype = tuple(out.shape), out.dtype

    def _pop_cache(self, dout, name: str = "dout"):
        """Return the cache of the last forward and clear it.

        Raises if there was no forward (or the backward already ran: a stale
        cache is never reused), or if ``dout`` does not have the shape of the
        forward's output, or is not a float array of the output's dtype: a wrong
        gradient would otherwise broadcast into a wrong answer, fail deep in a
        matrix product, or silently promote the backward to another precision.
        """
        if not self._forward_called:
            raise RuntimeError(
                f"{type(self).__name__}.backward called before forward "
                "(or twice for one forward): call forward first"
            )
        where = f"{type(self).__name__}{'' if not getattr(self, '_name', '') else ' ' + repr(self._name)}.backward"
        check_gradient(where, name, dout, self._out_shape, self._out_dtype)
        cache = self._cache
        self._cache, self._forward_called = None, False
        return cache

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
