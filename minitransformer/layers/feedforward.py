"""Position-wise feed-forward network (§3.3, Eq. 2).

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2

"Position-wise": the same W_1, W_2 act on every position separately, which is
why one matrix product over the (B·S, d_model) rows does the whole sequence.

The activation between the two products is ReLU in the paper. ``ACTIVATIONS``
holds each one as an ``Activation``: a (forward, backward) pair of functions, and
whether it is gated; ``TransformerConfig`` reads its names, so a new activation is
one more entry here.

* ``"relu"``: max(0, z), the paper's.
* ``"gelu"``: the Gaussian error linear unit of Hendrycks & Gimpel (2016),
  z · Φ(z) with Φ the standard normal CDF, in its tanh approximation

      gelu(z) = 0.5 · z · (1 + tanh(c · (z + 0.044715 · z³))),   c = sqrt(2/π)

  (NumPy has no erf, so the exact Φ is not available; PyTorch's
  ``gelu(approximate="tanh")`` is the same formula).
* ``"swiglu"``: a gated linear unit with the Swish gate (Shazeer, 2020, "GLU Variants
  Improve Transformer", Eq. 6), not in the paper:

      FFN_SwiGLU(x) = (Swish(x W) ⊙ x V) W_2,   Swish(a) = a · σ(a)

  A gated activation reads two halves of the first product: W_1 = [W | V] is
  (d_model, 2·d_ff), side by side as attention's W_qkv, so z = x W_1 is one product
  and a = z[..., :d_ff], b = z[..., d_ff:]. As in Shazeer's formulas, a gated FFN
  has no biases (``Linear(bias=False)``): 3·d_model·d_ff parameters against the
  ReLU FFN's 2·d_model·d_ff + d_ff + d_model, at the same d_ff.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from .. import backend
from ..backend import Array
from ..errors import check_input
from .linear import Linear, linear_parameter_count
from .parameter import Layer, checked_backward, checked_forward


def relu(z: Array) -> tuple[Array, Array]:
    """u = max(0, z), written into z's own buffer (z is the first product's fresh output,
    needed by nothing else). Returns (u, cache): the cache is u itself, since u > 0
    exactly where z > 0."""
    xp = backend.get_array_module(z)
    u = xp.maximum(z, 0.0, out=z)                  # in place: u is z (one pass, no new array)
    return u, u


def relu_backward(du: Array, u: Array) -> Array:
    """dz = du ⊙ 1[z > 0], in du's buffer. The kink at z = 0 gets 0 (a valid subgradient)."""
    dz = du                                        # in place: dz is du
    dz *= u > 0                                    # multiplying by the boolean: one pass
    return dz


GELU_C = math.sqrt(2.0 / math.pi)                  # c of the tanh approximation
GELU_A = 0.044715                                  # the cubic term's coefficient


def gelu(z: Array) -> tuple[Array, Array]:
    """u = 0.5 · z · (1 + tanh(c · (z + 0.044715 · z³))). Returns (u, cache): the cache is z,
    from which the backward recomputes the tanh (one (B, S, d_ff) array kept, not two)."""
    xp = backend.get_array_module(z)
    t = xp.tanh(GELU_C * (z + GELU_A * z**3))
    u = 0.5 * z * (1.0 + t)
    return u, z


def gelu_backward(du: Array, z: Array) -> Array:
    """dz = du ⊙ gelu'(z), with t = tanh(c · (z + 0.044715 · z³)):

        gelu'(z) = 0.5 · (1 + t) + 0.5 · z · (1 - t²) · c · (1 + 3 · 0.044715 · z²)

    (the product rule on 0.5 · z · (1 + t), and tanh' = 1 - tanh²).
    """
    xp = backend.get_array_module(z)
    t = xp.tanh(GELU_C * (z + GELU_A * z**3))
    dgelu = 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_A * z * z)
    return du * dgelu


def sigmoid(a: Array) -> Array:
    """σ(a) = 1 / (1 + exp(-a)), written as 0.5 · (1 + tanh(a / 2)): the same function, and no
    exp(-a) to overflow for a very negative a."""
    xp = backend.get_array_module(a)
    return 0.5 * (1.0 + xp.tanh(0.5 * a))


def swiglu(z: Array) -> tuple[Array, Array]:
    """z: (B, S, 2·d_ff), the gate's input a and the value b side by side -> u = Swish(a) ⊙ b:
    (B, S, d_ff), Swish(a) = a · σ(a). Returns (u, cache): the cache is z, from which the
    backward recomputes σ(a)."""
    d_ff = z.shape[-1] // 2
    a, b = z[..., :d_ff], z[..., d_ff:]            # views: x W and x V
    u = a * sigmoid(a) * b
    return u, z


def swiglu_backward(du: Array, z: Array) -> Array:
    """dz = [da | db]: (B, S, 2·d_ff), with u = a σ(a) ⊙ b:

        db = du ⊙ a σ(a)
        da = du ⊙ b ⊙ Swish'(a),   Swish'(a) = σ(a) + a σ(a) (1 - σ(a))  (the product rule, σ' = σ (1 - σ))
    """
    xp = backend.get_array_module(z)
    d_ff = z.shape[-1] // 2
    a, b = z[..., :d_ff], z[..., d_ff:]
    sig = sigmoid(a)
    da = du * b * (sig + a * sig * (1.0 - sig))
    db = du * a * sig
    return xp.concatenate([da, db], axis=-1)


class Activation(NamedTuple):
    """One FFN activation: forward z -> (u, cache), backward (du, cache) -> dz, and whether it is
    gated (z holds two halves of d_ff each, u one: a GLU variant, whose FFN has no biases)."""

    forward: Callable       # z -> (u, cache)
    backward: Callable      # (du, cache) -> dz
    gated: bool = False     # z holds two halves, a gate's input and a value: (B, S, 2·d_ff)


ACTIVATIONS = {
    "relu": Activation(relu, relu_backward),
    "gelu": Activation(gelu, gelu_backward),
    "swiglu": Activation(swiglu, swiglu_backward, gated=True),
}


def ffn_linears(d_model: int, d_ff: int, activation: str = "relu") -> list[tuple[int, int, bool]]:
    """(d_in, d_out, bias) of the FFN's two Linear layers: W_1 (d_model, d_ff) and W_2 (d_ff, d_model)
    with biases; for a gated activation W_1 is (d_model, 2·d_ff) and neither has a bias."""
    gated = ACTIVATIONS[activation].gated
    return [(d_model, 2 * d_ff if gated else d_ff, not gated), (d_ff, d_model, not gated)]


def ffn_parameter_count(d_model: int, d_ff: int, activation: str = "relu") -> int:
    """The learnable scalars of one ``FeedForward(d_model, d_ff, activation=...)``, from the
    formula (no layer built). The model's parameter count and its memory estimate (model.py)
    read it here, the one place that knows the FFN's shape (``ffn_linears``)."""
    return sum(linear_parameter_count(*shape) for shape in ffn_linears(d_model, d_ff, activation))


class FeedForward(Layer):
    """x: (B, S, d_model) -> (B, S, d_model), through a hidden layer of size d_ff.

    activation: a name in ``ACTIVATIONS`` ("relu", the paper's, "gelu" or "swiglu").
    """

    def __init__(self, d_model: int, d_ff: int, rng, name: str = "ffn", activation: str = "relu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"FeedForward: activation must be one of {', '.join(map(repr, ACTIVATIONS))}, "
                             f"got {activation!r}")
        self.d_model, self.d_ff, self.activation = d_model, d_ff, activation
        (d_in1, d_out1, bias1), (d_in2, d_out2, bias2) = ffn_linears(d_model, d_ff, activation)
        self.linear1 = Linear(d_in1, d_out1, rng, f"{name}.linear1", bias=bias1)   # W_1: (d_model, d_ff or 2·d_ff)
        self.linear2 = Linear(d_in2, d_out2, rng, f"{name}.linear2", bias=bias2)   # W_2: (d_ff, d_model)
        self._act_forward, self._act_backward, _ = ACTIVATIONS[activation]
        self._name = name

    def _check_input(self, x):
        check_input(f"FeedForward {self._name!r}", "x", x, self.d_model, self.linear1.W.data.dtype)

    @checked_forward(_check_input)
    def forward(self, x: Array) -> Array:
        """x: (B, S, d_model) -> FFN(x): (B, S, d_model)."""
        z = self.linear1.forward(x)                # (B, S, d_ff): x W_1 + b_1
        u, self._cache = self._act_forward(z)      # (B, S, d_ff): max(0, z) (Eq. 2), gelu(z) or swiglu(z)
        return self.linear2.forward(u)             # (B, S, d_model): u W_2 + b_2

    @checked_backward
    def backward(self, dy: Array) -> Array:
        """dy: (B, S, d_model) -> dx: (B, S, d_model); adds into W_1, b_1, W_2, b_2's grads."""
        du = self.linear2.backward(dy)             # (B, S, d_ff)
        dz = self._act_backward(du, self._cache)   # through the activation
        return self.linear1.backward(dz)
