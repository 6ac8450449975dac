"""The residual connection around every sub-layer (§3.1), with dropout (§5.4).

Post-LN, as in the paper (the default):
    y = LayerNorm(x + Dropout(Sublayer(x)))
Pre-LN (``pre_ln=True``), a later variant that trains more stably without
warm-up (Xiong et al., 2020); it is *not* what the paper describes:
    y = x + Dropout(Sublayer(LayerNorm(x)))
A pre-LN stack also needs one final LayerNorm after its last layer; the
Encoder and Decoder add it when pre_ln is set.
"""

from __future__ import annotations

from collections.abc import Callable

from ..backend import Array
from .dropout import Dropout
from .layernorm import LayerNorm
from .parameter import Layer, checked_backward, checked_forward


class Residual(Layer):
    """Wraps one sub-layer. The sub-layer is passed in as a pair of callables:

        y = res.forward(x, lambda x: attn.forward(x, mask=m))
        dx = res.backward(dy, attn.backward)

    so the same class serves attention and the feed-forward network. When the
    sub-layer's backward returns more than the gradient of its input (the
    encoder-decoder attention also returns the gradient of the memory), the
    extras are handed back after dx:

        dx, dmemory = res.backward(dy, cross_attn.backward)
    """

    def __init__(self, d_model: int, P_drop: float, rng=None, pre_ln: bool = False,
                 eps: float = 1e-5, name: str = "residual"):
        super().__init__()
        self.pre_ln = pre_ln
        self.norm = LayerNorm(d_model, eps, f"{name}.norm")
        self.dropout = Dropout(P_drop, rng)
        self._name = name

    @checked_forward()
    def forward(self, x: Array, sublayer: Callable[[Array], Array]) -> Array:
        """x: (B, S, d_model); sublayer: callable (B, S, d_model) -> (B, S, d_model).
        Returns (B, S, d_model)."""
        if self.pre_ln:
            y = x + self.dropout.forward(sublayer(self.norm.forward(x)))
        else:
            y = self.norm.forward(x + self.dropout.forward(sublayer(x)))
        return y

    @checked_backward
    def backward(self, dy: Array, sublayer_backward: Callable) -> Array | tuple:
        """dy: (B, S, d_model). ``sublayer_backward`` maps the gradient of the
        sub-layer's output to the gradient of its input, or to a tuple
        (gradient of its input, *extra gradients).

        The identity branch of the residual carries dy (post-LN: the gradient
        after the norm) to x untouched, which is why deep stacks keep training.

        Returns:
            dx: (B, S, d_model), or (dx, *extras) when the sub-layer returned extras.
        """
        if self.pre_ln:
            # y = x + Dropout(Sublayer(LayerNorm(x)))
            dsub_in, extras = _split(sublayer_backward(self.dropout.backward(dy)))
            dx = dy + self.norm.backward(dsub_in)
        else:
            # y = LayerNorm(z), z = x + Dropout(Sublayer(x))
            dz = self.norm.backward(dy)
            dsub_in, extras = _split(sublayer_backward(self.dropout.backward(dz)))
            dx = dz + dsub_in
        return (dx, *extras) if extras else dx


def _split(grads) -> tuple[Array, tuple]:
    """A sub-layer backward's result -> (gradient of its input, extra gradients)."""
    if isinstance(grads, tuple):
        return grads[0], grads[1:]
    return grads, ()
