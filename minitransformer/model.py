"""The encoder-decoder Transformer (§3.1, Figure 1), built from the core layers.

    src ids ─ Embedding·√d_model ─ +PE ─ Dropout ─ Encoder (N × [self-attn, FFN]) ─ memory
    tgt ids ─ Embedding·√d_model ─ +PE ─ Dropout ─ Decoder (N × [masked self-attn,
              enc-dec attn, FFN]) ─ tied linear (E^T) ─ logits ─ softmax

``backward`` calls every layer's backward in exactly the reverse order of
``forward``; reading it top to bottom mirrors forward from the bottom up.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace

from . import backend
from .data.batching import causal_mask, padding_mask
from .errors import ShapeError
from .layers.attention import MultiHeadAttention, attention_forward
from .layers.dropout import Dropout
from .layers.embedding import Embedding, TiedOutputProjection
from .layers.feedforward import FeedForward
from .layers.layernorm import LayerNorm
from .layers.parameter import Layer, Parameter
from .layers.positional import PositionalEncoding, sinusoidal_table
from .layers.residual import Residual


@dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters. The defaults are the paper's base model (Table 3, row "base")."""

    vocab_size: int = 37000     # shared source/target BPE vocabulary of §5.1 (WMT En-De)
    d_model: int = 512
    h: int = 8
    N: int = 6
    d_ff: int = 2048
    P_drop: float = 0.1
    eps_ls: float = 0.1         # label smoothing ε_ls (§5.4)
    max_len: int = 512          # longest sequence the positional-encoding table covers
    pad_id: int = 0
    pre_ln: bool = False        # False = the paper's post-LN; True = pre-LN variant
    ln_eps: float = 1e-5        # LayerNorm's ε (inside the square root)
    warmup_steps: int = 4000    # §5.3

    def __post_init__(self):
        if self.d_model % self.h != 0:
            raise ValueError(f"TransformerConfig: d_model={self.d_model} must be divisible by h={self.h}")
        for name in ("vocab_size", "d_model", "h", "N", "d_ff", "max_len", "warmup_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"TransformerConfig: {name} must be ≥ 1, got {getattr(self, name)}")

    @property
    def d_k(self) -> int:
        return self.d_model // self.h

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "TransformerConfig":
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"TransformerConfig: unknown fields {sorted(unknown)}")
        return cls(**data)

    def with_(self, **changes) -> "TransformerConfig":
        return replace(self, **changes)


# Named presets. ``vocab_size`` is filled in from the data at training time.
PRESETS: dict[str, TransformerConfig] = {
    "base": TransformerConfig(),
    "big": TransformerConfig(d_model=1024, h=16, d_ff=4096, P_drop=0.3),
    # Toy presets sized to train in well under a minute on a laptop CPU.
    # 8 heads of d_k = 8: copying needs sharp position-to-position attention,
    # and more heads reached 100% held-out exact match in fewer steps than 4.
    "copy": TransformerConfig(vocab_size=14, d_model=64, h=8, N=2, d_ff=256, P_drop=0.0,
                              eps_ls=0.0, max_len=64, warmup_steps=200),
    "tiny": TransformerConfig(vocab_size=14, d_model=32, h=2, N=1, d_ff=64, P_drop=0.0,
                              eps_ls=0.0, max_len=64, warmup_steps=100),
    "translate": TransformerConfig(vocab_size=100, d_model=128, h=4, N=2, d_ff=512, P_drop=0.1,
                                   eps_ls=0.1, max_len=128, warmup_steps=400),
}


class EncoderLayer(Layer):
    """One of the N identical encoder layers (§3.1): self-attention, then FFN,
    each wrapped as LayerNorm(x + Dropout(Sublayer(x)))."""

    def __init__(self, cfg: TransformerConfig, rng, dropout_rng, name: str = "enc"):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.h, rng, f"{name}.self_attn")
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, rng, f"{name}.ffn")
        self.res_attn = Residual(cfg.d_model, cfg.P_drop, dropout_rng, cfg.pre_ln, cfg.ln_eps, f"{name}.res_attn")
        self.res_ffn = Residual(cfg.d_model, cfg.P_drop, dropout_rng, cfg.pre_ln, cfg.ln_eps, f"{name}.res_ffn")

    def forward(self, x, src_mask):
        """x: (B, S, d_model), src_mask: (B, 1, 1, S) -> (B, S, d_model)."""
        x = self.res_attn.forward(x, lambda z: self.self_attn.forward(z, mask=src_mask))
        return self.res_ffn.forward(x, self.ffn.forward)

    def backward(self, dy):
        dy = self.res_ffn.backward(dy, self.ffn.backward)
        return self.res_attn.backward(dy, self.self_attn.backward)


class DecoderLayer(Layer):
    """One of the N decoder layers (§3.1): masked self-attention, encoder-decoder
    attention over the encoder output ("memory"), then FFN."""

    def __init__(self, cfg: TransformerConfig, rng, dropout_rng, name: str = "dec"):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.h, rng, f"{name}.self_attn")
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.h, rng, f"{name}.cross_attn")
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, rng, f"{name}.ffn")
        self.res_self = Residual(cfg.d_model, cfg.P_drop, dropout_rng, cfg.pre_ln, cfg.ln_eps, f"{name}.res_self")
        self.res_cross = Residual(cfg.d_model, cfg.P_drop, dropout_rng, cfg.pre_ln, cfg.ln_eps, f"{name}.res_cross")
        self.res_ffn = Residual(cfg.d_model, cfg.P_drop, dropout_rng, cfg.pre_ln, cfg.ln_eps, f"{name}.res_ffn")

    def forward(self, y, memory, src_mask, tgt_mask):
        """y: (B, T, d_model), memory: (B, S, d_model),
        src_mask: (B, 1, 1, S), tgt_mask: (B, 1, T, T) -> (B, T, d_model)."""
        y = self.res_self.forward(y, lambda z: self.self_attn.forward(z, mask=tgt_mask))
        y = self.res_cross.forward(y, lambda z: self.cross_attn.forward(z, memory, mask=src_mask))
        return self.res_ffn.forward(y, self.ffn.forward)

    def backward(self, dy):
        """dy: (B, T, d_model) -> (dy_in: (B, T, d_model), dmemory: (B, S, d_model))."""
        dy = self.res_ffn.backward(dy, self.ffn.backward)
        dmemory = []

        def cross_backward(d):
            # The cross-attention's key/value input is the memory: keep its
            # gradient aside, pass only the query gradient down the residual.
            dq, dkv = self.cross_attn.backward(d)
            dmemory.append(dkv)
            return dq

        dy = self.res_cross.backward(dy, cross_backward)
        dy = self.res_self.backward(dy, self.self_attn.backward)
        return dy, dmemory[0]

    def forward_step(self, y_t, memory_kv, src_mask, self_kv, t: int):
        """Inference with a key/value cache: one new position t for every sentence.

        y_t: (B, 1, d_model); memory_kv: (K, V) of the encoder output, projected
        once per sentence; self_kv: (K, V) buffers (B, h, T_max, d_k) holding
        the keys/values of positions 0..t-1, to which position t is written.
        Each step costs O(t), not a re-run of the whole prefix.
        """
        def self_attention(z):
            q, k, v = self.self_attn.project_qkv(z)              # each (B, h, 1, d_k)
            self_kv[0][:, :, t: t + 1] = k
            self_kv[1][:, :, t: t + 1] = v
            heads, _ = attention_forward(q, self_kv[0][:, :, : t + 1], self_kv[1][:, :, : t + 1])
            return self.self_attn.output(heads)                   # no mask: the future is not in the cache

        def cross_attention(z):
            heads, _ = attention_forward(self.cross_attn.project_q(z), memory_kv[0], memory_kv[1], src_mask)
            return self.cross_attn.output(heads)

        y_t = self.res_self.forward(y_t, self_attention)
        y_t = self.res_cross.forward(y_t, cross_attention)
        return self.res_ffn.forward(y_t, self.ffn.forward)


class Encoder(Layer):
    """A stack of N EncoderLayers (§3.1), plus a final LayerNorm when pre-LN."""

    def __init__(self, cfg: TransformerConfig, rng, dropout_rng):
        super().__init__()
        self.layers = [EncoderLayer(cfg, rng, dropout_rng, f"encoder.{i}") for i in range(cfg.N)]
        self.final_norm = LayerNorm(cfg.d_model, cfg.ln_eps, "encoder.final_norm") if cfg.pre_ln else None

    def forward(self, x, src_mask):
        for layer in self.layers:
            x = layer.forward(x, src_mask)
        return self.final_norm.forward(x) if self.final_norm else x

    def backward(self, dy):
        if self.final_norm:
            dy = self.final_norm.backward(dy)
        for layer in reversed(self.layers):
            dy = layer.backward(dy)
        return dy


class Decoder(Layer):
    """A stack of N DecoderLayers (§3.1), plus a final LayerNorm when pre-LN."""

    def __init__(self, cfg: TransformerConfig, rng, dropout_rng):
        super().__init__()
        self.layers = [DecoderLayer(cfg, rng, dropout_rng, f"decoder.{i}") for i in range(cfg.N)]
        self.final_norm = LayerNorm(cfg.d_model, cfg.ln_eps, "decoder.final_norm") if cfg.pre_ln else None

    def forward(self, y, memory, src_mask, tgt_mask):
        for layer in self.layers:
            y = layer.forward(y, memory, src_mask, tgt_mask)
        return self.final_norm.forward(y) if self.final_norm else y

    def backward(self, dy):
        """-> (dy_in, dmemory): dmemory sums the N layers' encoder-decoder attention gradients."""
        if self.final_norm:
            dy = self.final_norm.backward(dy)
        dmemory = None
        for layer in reversed(self.layers):
            dy, dmem = layer.backward(dy)
            dmemory = dmem if dmemory is None else dmemory + dmem
        return dy, dmemory


class Transformer(Layer):
    """The whole model. One embedding matrix E (V, d_model) is shared three ways
    (§3.4): source embedding, target embedding and the pre-softmax projection.

    forward(src, tgt_in) -> logits (B, T, V);  backward(dlogits) fills every .grad.
    """

    def __init__(self, cfg: TransformerConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        rng = backend.host_rng(seed)                      # initial weights: same on CPU and GPU
        self.dropout_rng = backend.seeded_rng(seed + 1)   # one generator for every dropout mask
        self.E = Parameter(Embedding(cfg.vocab_size, cfg.d_model, rng).E.data, "E")
        self.src_embed = Embedding(cfg.vocab_size, cfg.d_model, weight=self.E, name="src_embed")
        self.tgt_embed = Embedding(cfg.vocab_size, cfg.d_model, weight=self.E, name="tgt_embed")
        table = sinusoidal_table(cfg.max_len, cfg.d_model)
        self.src_pos = PositionalEncoding(cfg.d_model, cfg.max_len, table)
        self.tgt_pos = PositionalEncoding(cfg.d_model, cfg.max_len, table)
        self.src_dropout = Dropout(cfg.P_drop, self.dropout_rng)   # on embeddings + PE (§5.4)
        self.tgt_dropout = Dropout(cfg.P_drop, self.dropout_rng)
        self.encoder = Encoder(cfg, rng, self.dropout_rng)
        self.decoder = Decoder(cfg, rng, self.dropout_rng)
        self.generator = TiedOutputProjection(self.E)

    # -- random state of dropout ----------------------------------------------
    def reseed_dropout(self, seed: int) -> None:
        """Give every Dropout a fresh generator seeded with ``seed``."""
        self.dropout_rng = backend.seeded_rng(seed, backend.get_array_module(self.E.data))
        for layer in self.modules():
            if isinstance(layer, Dropout):
                layer.rng = self.dropout_rng

    # -- masks ------------------------------------------------------------------
    def masks(self, src, tgt_in):
        """Default masks from padding: src_mask (B, 1, 1, S) and tgt_mask (B, 1, T, T)."""
        xp = backend.get_array_module(src)
        return padding_mask(src, self.cfg.pad_id), padding_mask(tgt_in, self.cfg.pad_id) & causal_mask(tgt_in.shape[1], xp)

    def _check_ids(self, name, ids):
        if getattr(ids, "ndim", None) != 2:
            raise ShapeError(f"Transformer: {name} must be token ids of shape (B, length), got "
                             f"{tuple(getattr(ids, 'shape', ()))}")
        if ids.shape[1] > self.cfg.max_len:
            raise ShapeError(f"Transformer: {name} has length {ids.shape[1]} > max_len={self.cfg.max_len}")

    # -- forward ----------------------------------------------------------------
    def encode(self, src, src_mask):
        """src: (B, S) ids -> memory: (B, S, d_model)."""
        x = self.src_dropout.forward(self.src_pos.forward(self.src_embed.forward(src)))
        return self.encoder.forward(x, src_mask)

    def decode(self, tgt_in, memory, src_mask, tgt_mask):
        """tgt_in: (B, T) ids -> decoder output (B, T, d_model)."""
        y = self.tgt_dropout.forward(self.tgt_pos.forward(self.tgt_embed.forward(tgt_in)))
        return self.decoder.forward(y, memory, src_mask, tgt_mask)

    def forward(self, src, tgt_in, src_mask=None, tgt_mask=None):
        """src: (B, S), tgt_in: (B, T) -> logits (B, T, V). Masks default to padding (+ causal)."""
        self._check_ids("src", src)
        self._check_ids("tgt_in", tgt_in)
        if src.shape[0] != tgt_in.shape[0]:
            raise ShapeError(f"Transformer: src has batch size {src.shape[0]} but tgt_in has {tgt_in.shape[0]}")
        default_src, default_tgt = self.masks(src, tgt_in)
        src_mask = default_src if src_mask is None else src_mask
        tgt_mask = default_tgt if tgt_mask is None else tgt_mask
        memory = self.encode(src, src_mask)
        out = self.decode(tgt_in, memory, src_mask, tgt_mask)
        self._cache = True
        return self.generator.forward(out)

    # -- backward ---------------------------------------------------------------
    def backward(self, dlogits) -> None:
        """dlogits: (B, T, V). Adds into every Parameter's .grad (E gets three uses)."""
        self._pop_cache()
        dout = self.generator.backward(dlogits)                     # use 1 of E
        dy, dmemory = self.decoder.backward(dout)
        self.tgt_embed.backward(self.tgt_pos.backward(self.tgt_dropout.backward(dy)))   # use 2 of E
        dx = self.encoder.backward(dmemory)
        self.src_embed.backward(self.src_pos.backward(self.src_dropout.backward(dx)))   # use 3 of E

    # -- moving between backends -------------------------------------------------
    def to(self, xp_name: str) -> "Transformer":
        """Move every parameter to 'numpy' or 'cupy' (gradients too)."""
        xp = backend.module_for(xp_name)
        for p in self.parameters():
            p.data = backend.to_backend(p.data, xp)
            p.grad = backend.to_backend(p.grad, xp)
        self.reseed_dropout(0)
        return self


def count_parameters(cfg: TransformerConfig) -> int:
    """The number of learnable scalars, computed from the formula (no model built).

    Per encoder layer: attention 4·(d²+d), FFN 2·d·d_ff + d_ff + d, two LayerNorms 4d.
    Per decoder layer: two attentions, FFN, three LayerNorms. Plus E (V·d), shared.
    """
    d, d_ff, N, V = cfg.d_model, cfg.d_ff, cfg.N, cfg.vocab_size
    attn = 4 * (d * d + d)
    ffn = 2 * d * d_ff + d_ff + d
    enc = N * (attn + ffn + 2 * 2 * d)
    dec = N * (2 * attn + ffn + 3 * 2 * d)
    final = 2 * 2 * d if cfg.pre_ln else 0
    return V * d + enc + dec + final
