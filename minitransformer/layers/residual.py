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

from .dropout import Dropout
from .layernorm import LayerNorm
from .parameter import Layer


class Residual(Layer):
    """Wraps one sub-layer. The sub-layer is passed in as a pair of callables:

        y = res.forward(x, lambda x: attn.forward(x, mask=m))
        dx = res.backward(dy, attn.backward)

    so the same class serves attention and the feed-forward network.
    """

    def __init__(self, d_model: int, P_drop: float, rng=None, pre_ln: bool = False,
                 eps: float = 1e-5, name: str = "residual"):
        super().__init__()
        self.pre_ln = pre_ln
        self.norm = LayerNorm(d_model, eps, f"{name}.norm")
        self.dropout = Dropout(P_drop, rng)

    def forward(self, x, sublayer):
        """x: (B, S, d_model); sublayer: callable (B, S, d_model) -> (B, S, d_model)."""
        self._cache = True
        if self.pre_ln:
            return x + self.dropout.forward(sublayer(self.norm.forward(x)))
        return self.norm.forward(x + self.dropout.forward(sublayer(x)))

    def backward(self, dy, sublayer_backward):
        """dy: (B, S, d_model) -> dx. ``sublayer_backward`` maps the gradient of the
        sub-layer's output to the gradient of its input.

        The identity branch of the residual carries dy (post-LN: the gradient
        after the norm) to x untouched, which is why deep stacks keep training.
        """
        self._pop_cache()
        if self.pre_ln:
            dsub_in = sublayer_backward(self.dropout.backward(dy))
            return dy + self.norm.backward(dsub_in)
        dz = self.norm.backward(dy)                       # gradient of x + Dropout(Sublayer(x))
        return dz + sublayer_backward(self.dropout.backward(dz))
