"""Position-wise feed-forward network (§3.3, Eq. 2).

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2

"Position-wise": the same W_1, W_2 act on every position separately, which is
why one matrix product over the (B·S, d_model) rows does the whole sequence.
"""

from __future__ import annotations

from .. import backend
from ..backend import Array
from ..errors import check_input
from .linear import Linear
from .parameter import Layer


class FeedForward(Layer):
    """x: (B, S, d_model) -> (B, S, d_model), through a hidden layer of size d_ff."""

    def __init__(self, d_model: int, d_ff: int, rng, name: str = "ffn"):
        super().__init__()
        self.d_model, self.d_ff = d_model, d_ff
        self.linear1 = Linear(d_model, d_ff, rng, f"{name}.linear1")   # W_1: (d_model, d_ff)
        self.linear2 = Linear(d_ff, d_model, rng, f"{name}.linear2")   # W_2: (d_ff, d_model)
        self._name = name

    def forward(self, x: Array) -> Array:
        """x: (B, S, d_model) -> FFN(x): (B, S, d_model)."""
        check_input(f"FeedForward {self._name!r}", "x", x, self.d_model, self.linear1.W.data.dtype)
        xp = backend.get_array_module(x)
        hidden = self.linear1.forward(x)          # (B, S, d_ff): x W_1 + b_1
        xp.maximum(hidden, 0.0, out=hidden)        # ReLU in place: one pass, no new array
        y = self.linear2.forward(hidden)           # (B, S, d_model)
        self._save_cache(hidden, y)
        return y

    def backward(self, dy: Array) -> Array:
        """dy: (B, S, d_model) -> dx: (B, S, d_model); adds into W_1, b_1, W_2, b_2's grads."""
        hidden = self._pop_cache(dy, "dy")
        dhidden = self.linear2.backward(dy)        # (B, S, d_ff)
        # ReLU passes the gradient where its output was positive and blocks it
        # elsewhere; multiplying by the boolean is much faster than copyto(where=).
        dhidden *= hidden > 0
        return self.linear1.backward(dhidden)
