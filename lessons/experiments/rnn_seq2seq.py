"""The kind of model the Transformer replaced (§1): a recurrent encoder-decoder with attention.

Lesson 8 (§1) and ``lesson08_rnn_vs_transformer.py`` use it to measure the paper's claim that the
Transformer trains faster than a recurrent model, on the same task at the same size. It is a
reference written small, with every forward and backward by hand, not part of the package (the
Transformer does not use it):

* an LSTM layer (Hochreiter & Schmidhuber, 1997, with a forget gate), ``lstm_forward`` /
  ``lstm_backward``; at a padded position the state is carried through unchanged, so an encoder's
  final state is the state after its last real token;
* ``RNNSeq2Seq``: ``L`` LSTM layers read the source; ``L`` LSTM layers, started from the encoder's
  final states (layer by layer), read the target shifted right (as the Transformer's decoder does);
  each decoder output attends to the encoder's top-layer outputs with Eq. (1) of the paper (one head,
  the package's ``attention_forward``, the source padding masked), and ``o_t = tanh([s_t; c_t] W_c + b_c)``
  is scored against the embedding matrix. This is the "global attention" of Luong et al. (2015)
  without input feeding: the attention sits on top of the recurrence, as in the models §1 describes,
  "attention mechanisms used in conjunction with a recurrent network";
* the embedding matrix is tied three ways and scaled by sqrt(d), the package's ``Embedding`` and
  ``TiedOutputProjection``, exactly as in the Transformer, so the two models differ in what reads the
  sequence (recurrence against self-attention), not in how tokens go in and out.

Shapes: B sentences, S source positions, T target positions, d the width (embedding = hidden size),
V the vocabulary. Gates are laid out as [i, f, g, o] along the last axis of W_x (d_in, 4d),
W_h (d, 4d) and b (4d,).
"""

from __future__ import annotations

from typing import NamedTuple

from minitransformer import backend
from minitransformer.layers.attention import attention_backward, attention_forward
from minitransformer.layers.embedding import Embedding, TiedOutputProjection
from minitransformer.layers.linear import init_weight
from minitransformer.layers.parameter import Layer, Parameter


def sigmoid(z):
    xp = backend.get_array_module(z)
    return 0.5 * (1.0 + xp.tanh(0.5 * z))          # = 1 / (1 + e^-z), without overflow for large |z|


class LSTMCache(NamedTuple):
    x: object       # (B, n, d_in)   the inputs
    mask: object    # (B, n, 1)      1.0 at real positions, 0.0 at padding
    h0: object      # (B, d)         the state before position 0
    c0: object      # (B, d)
    H: object       # (B, n, d)      h_t for every t (padding: carried over)
    C: object       # (B, n, d)      c_t for every t
    gates: object   # (B, n, 4d)     i, f, g, o after their nonlinearities
    tanh_c: object  # (B, n, d)      tanh of the new cell state (before the padding carry)
    W_x: object     # (d_in, 4d)
    W_h: object     # (d, 4d)


def lstm_forward(x, W_x, W_h, b, mask, h0, c0):
    """One LSTM layer over a sequence. x: (B, n, d_in); mask: (B, n) bool, True at real positions;
    h0, c0: (B, d). For t = 0 .. n-1:

        z = x_t W_x + h_{t-1} W_h + b               (B, 4d), gates [i, f, g, o]
        i, f, o = sigmoid(z_i), sigmoid(z_f), sigmoid(z_o);   g = tanh(z_g)
        c_t = f * c_{t-1} + i * g;   h_t = o * tanh(c_t)
        at a padded position: h_t = h_{t-1}, c_t = c_{t-1}

    Returns H: (B, n, d), the final (h, c), and the cache."""
    xp = backend.get_array_module(x)
    B, n, _ = x.shape
    d = W_h.shape[0]
    m = mask[..., None].astype(x.dtype)                     # (B, n, 1)
    U = backend.matmul(x, W_x)                              # x_t W_x for every t: one product
    U += b
    H = xp.empty((B, n, d), dtype=x.dtype)
    C = xp.empty((B, n, d), dtype=x.dtype)
    gates = xp.empty((B, n, 4 * d), dtype=x.dtype)
    tanh_c = xp.empty((B, n, d), dtype=x.dtype)
    h, c = h0, c0
    for t in range(n):                                      # the sequential part: step t needs h_{t-1}
        z = U[:, t] + backend.matmul(h, W_h)                # (B, 4d)
        i, f, g, o = sigmoid(z[:, :d]), sigmoid(z[:, d:2 * d]), xp.tanh(z[:, 2 * d:3 * d]), sigmoid(z[:, 3 * d:])
        c_new = f * c + i * g
        tc = xp.tanh(c_new)
        mt = m[:, t]
        c = mt * c_new + (1.0 - mt) * c                     # padding carries the state through
        h = mt * (o * tc) + (1.0 - mt) * h
        H[:, t], C[:, t], tanh_c[:, t] = h, c, tc
        gates[:, t] = xp.concatenate([i, f, g, o], axis=-1)
    return H, (h, c), LSTMCache(x, m, h0, c0, H, C, gates, tanh_c, W_x, W_h)


def lstm_backward(dH, dh_last, dc_last, cache):
    """Back through time. dH: (B, n, d), what reaches each h_t from above; dh_last, dc_last: (B, d),
    what reaches the final state (None: nothing). Returns dx (B, n, d_in), dW_x, dW_h, db, dh0, dc0.

    With dh, dc the whole gradients of h_t, c_t (from above, and from step t+1):
        real position: do = dh tanh(c_t);  dc += dh o (1 - tanh^2 c_t);  di = dc g;  dg = dc i;
                       df = dc c_{t-1};  dc_{t-1} = dc f;  dz = [di i(1-i), df f(1-f), dg (1-g^2), do o(1-o)];
                       dh_{t-1} = dz W_h^T
        padded position: dh_{t-1} = dh, dc_{t-1} = dc (the carry), dz = 0."""
    xp = backend.get_array_module(dH)
    x, m, h0, c0, H, C, gates, tanh_c, W_x, W_h = cache
    B, n, d = H.shape
    dZ = xp.zeros((B, n, 4 * d), dtype=dH.dtype)
    dh = xp.zeros((B, d), dtype=dH.dtype) if dh_last is None else dh_last.copy()
    dc = xp.zeros((B, d), dtype=dH.dtype) if dc_last is None else dc_last.copy()
    for t in reversed(range(n)):                            # sequential too: t needs t+1
        dh = dh + dH[:, t]
        mt = m[:, t]
        c_prev = C[:, t - 1] if t > 0 else c0
        i, f, g, o = (gates[:, t, k * d:(k + 1) * d] for k in range(4))
        tc = tanh_c[:, t]
        dh_cell, dc_cell = mt * dh, mt * dc                 # the part that went through the cell
        dc_cell = dc_cell + dh_cell * o * (1.0 - tc * tc)
        dZ[:, t, :d] = dc_cell * g * i * (1.0 - i)
        dZ[:, t, d:2 * d] = dc_cell * c_prev * f * (1.0 - f)
        dZ[:, t, 2 * d:3 * d] = dc_cell * i * (1.0 - g * g)
        dZ[:, t, 3 * d:] = dh_cell * tc * o * (1.0 - o)
        dh = (1.0 - mt) * dh + backend.matmul(dZ[:, t], W_h.T)
        dc = (1.0 - mt) * dc + dc_cell * f
    H_prev = xp.concatenate([h0[:, None], H[:, :-1]], axis=1)             # h_{t-1} for every t
    dW_h = backend.matmul(H_prev.reshape(-1, d).T, dZ.reshape(-1, 4 * d))
    dW_x = backend.matmul(x.reshape(-1, x.shape[-1]).T, dZ.reshape(-1, 4 * d))
    return backend.matmul(dZ, W_x.T), dW_x, dW_h, dZ.sum(axis=(0, 1)), dh, dc


class _OneBackward(Layer):
    """A Layer whose forward returns more than one array (the LSTM) or is not wrapped by the package's
    checks: its backward checks the gradient against the forward's output and uses the cache once."""

    def _take_cache(self, dout, name: str):
        self._check_dout(dout, name)
        cache, self._cache, self._forward_called = self._cache, None, False
        return cache


class LSTM(_OneBackward):
    """One LSTM layer, d_in -> d, holding W_x (d_in, 4d), W_h (d, 4d), b (4d,).

    Glorot-uniform weights (the package's ``init_weight``, one d x d block per gate) and the forget
    gate's bias at 1, the usual start (Jozefowicz et al., 2015): the cell keeps its state at first."""

    def __init__(self, d_in: int, d: int, rng, name: str = "lstm"):
        super().__init__()
        xp = backend.xp_default()
        self.d = d
        self.W_x = Parameter(xp.concatenate([init_weight(d_in, d, rng) for _ in range(4)], axis=1), f"{name}.W_x")
        self.W_h = Parameter(xp.concatenate([init_weight(d, d, rng) for _ in range(4)], axis=1), f"{name}.W_h")
        b = xp.zeros(4 * d, dtype=backend.default_dtype())
        b[d:2 * d] = 1.0
        self.b = Parameter(b, f"{name}.b")

    def forward(self, x, mask, h0, c0):
        H, last, cache = lstm_forward(x, self.W_x.data, self.W_h.data, self.b.data, mask, h0, c0)
        self._cache = cache
        self._forward_ran(H)                # dH must match H (the package's wrapper does this for its layers)
        return H, last

    def backward(self, dH, dh_last=None, dc_last=None):
        """-> dx, dh0, dc0 (the parameters' gradients are added into their .grad)."""
        dx, dW_x, dW_h, db, dh0, dc0 = lstm_backward(dH, dh_last, dc_last, self._take_cache(dH, "dH"))
        self.W_x.grad += dW_x
        self.W_h.grad += dW_h
        self.b.grad += db
        return dx, dh0, dc0

    def step(self, x_t, h, c):
        """One position for inference: x_t (B, d_in), state (h, c) -> the new (h, c)."""
        H, last, _ = lstm_forward(x_t[:, None], self.W_x.data, self.W_h.data, self.b.data,
                                  backend.get_array_module(x_t).ones((x_t.shape[0], 1), dtype=bool), h, c)
        return last


class Seq2SeqCache(NamedTuple):
    src_mask: object    # (B, S) bool
    attn: object        # the attention's cache
    top: object         # (B, T, 2d) [s_t; c_t], the combine layer's input
    out: object     # (B, T, d)   tanh(top W_c + b_c)


class RNNSeq2Seq(_OneBackward):
    """An LSTM encoder-decoder with attention (module docstring), the interface the training loop of
    ``lesson08_rnn_vs_transformer.py`` uses for both models: ``forward(src, tgt_in, src_mask)`` ->
    logits (B, T, V); ``backward(dlogits)``; ``parameters()``."""

    def __init__(self, vocab_size: int, d: int, L: int, seed: int = 0, pad_id: int = 0):
        super().__init__()
        rng = backend.host_rng(seed)
        self.d, self.L, self.pad_id = d, L, pad_id
        self.E = Parameter(Embedding(vocab_size, d, rng).E.data, "E")
        self.src_embed = Embedding(vocab_size, d, weight=self.E, name="src_embed")
        self.tgt_embed = Embedding(vocab_size, d, weight=self.E, name="tgt_embed")
        self.encoder = [LSTM(d, d, rng, f"encoder.{i}") for i in range(L)]
        self.decoder = [LSTM(d, d, rng, f"decoder.{i}") for i in range(L)]
        self.W_c = Parameter(init_weight(2 * d, d, rng), "W_c")
        self.b_c = Parameter(backend.xp_default().zeros(d, dtype=backend.default_dtype()), "b_c")
        self.output_projection = TiedOutputProjection(self.E)

    @property
    def xp(self):
        return backend.get_array_module(self.E.data)

    def encode(self, src, src_mask):
        """src: (B, S) ids -> the top layer's outputs (B, S, d) and every layer's final (h, c)."""
        xp = self.xp
        x = self.src_embed.forward(src)
        zeros = xp.zeros((src.shape[0], self.d), dtype=x.dtype)
        finals = []
        for layer in self.encoder:
            x, last = layer.forward(x, src_mask, zeros, zeros)
            finals.append(last)
        return x, finals

    def attend(self, s, memory, src_mask):
        """s: (B, T, d) decoder outputs, memory: (B, S, d) -> o (B, T, d), the combine layer's input, and the
        attention's cache. Eq. (1) with one head: the queries are s, keys and values the memory."""
        xp = self.xp
        ctx, attn = attention_forward(s[:, None], memory[:, None], memory[:, None], src_mask[:, None, None, :])
        top = xp.concatenate([s, ctx[:, 0]], axis=-1)                         # (B, T, 2d)
        out = xp.tanh(backend.matmul(top, self.W_c.data) + self.b_c.data)
        return out, top, attn

    def forward(self, src, tgt_in, src_mask=None):
        """src: (B, S), tgt_in: (B, T) ids (<bos> + target) -> logits (B, T, V)."""
        src_mask = (src != self.pad_id) if src_mask is None else src_mask
        memory, finals = self.encode(src, src_mask)
        y = self.tgt_embed.forward(tgt_in)
        tgt_mask = tgt_in != self.pad_id
        for layer, (h0, c0) in zip(self.decoder, finals):
            y, _ = layer.forward(y, tgt_mask, h0, c0)
        out, top, attn = self.attend(y, memory, src_mask)
        logits = self.output_projection.forward(out)
        self._cache = Seq2SeqCache(src_mask, attn, top, out)
        self._forward_ran(logits)
        return logits

    def backward(self, dlogits):
        """dlogits: (B, T, V): adds into every parameter's .grad, in the reverse order of forward."""
        src_mask, attn, top, out = self._take_cache(dlogits, "dlogits")
        d = self.d
        dout = self.output_projection.backward(dlogits)                     # use 1 of E
        dpre = dout * (1.0 - out * out)                                     # out = tanh(pre)
        self.W_c.grad += backend.matmul(top.reshape(-1, 2 * d).T, dpre.reshape(-1, d))
        self.b_c.grad += dpre.sum(axis=(0, 1))
        dtop = backend.matmul(dpre, self.W_c.data.T)
        ds, dctx = dtop[..., :d], dtop[..., d:]
        dQ, dK, dV = attention_backward(dctx[:, None], attn)
        dy = ds + dQ[:, 0]
        dmemory = dK[:, 0] + dV[:, 0]
        dfinals = []
        for layer in reversed(self.decoder):
            dy, dh0, dc0 = layer.backward(dy)
            dfinals.append((dh0, dc0))
        self.tgt_embed.backward(dy)                                         # use 2 of E
        dx = dmemory
        for layer, (dh, dc) in zip(reversed(self.encoder), dfinals):       # decoder layer l started from encoder layer l
            dx, _, _ = layer.backward(dx, dh, dc)
        self.src_embed.backward(dx)                                         # use 3 of E

    def greedy(self, src, max_len: int, bos_id: int, eos_id: int):
        """Greedy decoding, one position at a time: src (B, S) -> ids (B, <= max_len), <pad> and <bos> never chosen.
        The decoder's recurrence makes generation sequential, as the Transformer's is (§7)."""
        xp = self.xp
        src_mask = src != self.pad_id
        memory, finals = self.encode(src, src_mask)
        state = list(finals)
        B = src.shape[0]
        y_t = xp.full((B,), bos_id, dtype=src.dtype)
        ids, done = [], xp.zeros(B, dtype=bool)
        for _ in range(max_len):
            x = self.tgt_embed.forward(y_t[:, None])[:, 0]
            for k, layer in enumerate(self.decoder):
                state[k] = layer.step(x, *state[k])
                x = state[k][0]
            out, _, _ = self.attend(x[:, None], memory, src_mask)
            logits = self.output_projection.forward(out)[:, 0]
            logits[:, [self.pad_id, bos_id]] = -xp.inf                          # never written, as in decoding.py
            y_t = logits.argmax(axis=-1)
            ids.append(xp.where(done, self.pad_id, y_t))
            done |= y_t == eos_id
            if bool(done.all()):
                break
        return xp.stack(ids, axis=1)


def count_parameters(vocab_size: int, d: int, L: int) -> int:
    """E (tied), 2L LSTM layers of 4d(d + d) + 4d, and the combine layer's 2d x d + d."""
    return vocab_size * d + 2 * L * (8 * d * d + 4 * d) + 2 * d * d + d


def width_for(params: int, vocab_size: int, L: int) -> int:
    """The width d whose count_parameters is closest to ``params``."""
    return min(range(8, 1024), key=lambda d: abs(count_parameters(vocab_size, d, L) - params))


def recurrent_steps(S: int, T: int, L: int) -> int:
    """The recurrent products of one training step that must run one after another, forward and
    backward: each of the L encoder layers steps through S positions and each decoder layer through T,
    once forward and once back."""
    return 2 * L * (S + T)


__all__ = ["LSTM", "RNNSeq2Seq", "count_parameters", "lstm_backward", "lstm_forward", "recurrent_steps",
           "sigmoid", "width_for"]
