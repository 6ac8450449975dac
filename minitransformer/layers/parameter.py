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

from .. import backend


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
    """Base class: parameter discovery, train/eval mode, zero_grad, cache handling."""

    training: bool = True

    def __init__(self):
        self.training = True
        self._cache = None

    # -- the cache a forward leaves for its backward --------------------------
    def _pop_cache(self):
        """Return the cache of the last forward and clear it.

        Clearing makes a second backward (or a backward before any forward)
        fail loudly instead of reusing stale values.
        """
        if self._cache is None:
            raise RuntimeError(
                f"{type(self).__name__}.backward called before forward "
                "(or twice for one forward): call forward first"
            )
        cache, self._cache = self._cache, None
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

    def modules(self):
        """This layer and every Layer below it."""
        yield self
        for key, value in vars(self).items():
            if key.startswith("_"):
                continue
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, Layer):
                    yield from v.modules()

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
