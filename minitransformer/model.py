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
from .backend import Array
from .errors import ShapeError
from .kvcache import KVCache
from .layers.attention import MultiHeadAttention
from .layers.dropout import Dropout
from .layers.embedding import Embedding, TiedOutputProjection
from .layers.feedforward import ACTIVATIONS, FeedForward, ffn_parameter_count
from .layers.layernorm import LayerNorm
from .layers.masks import decoder_mask, padding_mask
from .layers.parameter import Layer, Parameter
from .layers.positional import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
    init_positional,
    sinusoidal_table,
)
from .layers.residual import Residual

POSITIONAL_KINDS = ("sinusoidal", "learned")


@dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of the model. The defaults are the paper's base model (Table 3, row "base").

    Training settings (learning-rate schedule, warm-up, batch size) are not
    here: they belong to the run, not to the model (``train.TrainSettings``).
    """

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
    positional: str = "sinusoidal"   # §3.5's fixed sinusoids, or "learned": a trained table (Table 3, row E)
    activation: str = "relu"    # the FFN's (§3.3, Eq. 2): "relu" as in the paper, or a name in feedforward.ACTIVATIONS

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "h", "N", "d_ff", "max_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TransformerConfig: {name} must be an integer ≥ 1, got {value!r}")
        if self.d_model % self.h != 0:
            raise ValueError(f"TransformerConfig: d_model={self.d_model} must be divisible by h={self.h}")
        for name in ("P_drop", "eps_ls"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1.0:
                raise ValueError(f"TransformerConfig: {name} must be a probability in [0, 1), got {value!r}")
        if isinstance(self.ln_eps, bool) or not isinstance(self.ln_eps, int | float) or not 0.0 < self.ln_eps < 1.0:
            raise ValueError(f"TransformerConfig: ln_eps must be a small positive number, got {self.ln_eps!r}")
        if isinstance(self.pad_id, bool) or not isinstance(self.pad_id, int) or not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"TransformerConfig: pad_id must be a token id in 0..vocab_size-1="
                             f"{self.vocab_size - 1}, got {self.pad_id!r}")
        if not isinstance(self.pre_ln, bool):
            raise ValueError(f"TransformerConfig: pre_ln must be True or False, got {self.pre_ln!r}")
        if self.positional not in POSITIONAL_KINDS:
            raise ValueError(f"TransformerConfig: positional must be one of {', '.join(map(repr, POSITIONAL_KINDS))}, "
                             f"got {self.positional!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"TransformerConfig: activation must be one of {', '.join(map(repr, ACTIVATIONS))}, "
                             f"got {self.activation!r}")

    @property
    def d_k(self) -> int:
        return self.d_model // self.h

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TransformerConfig:
        """The inverse of ``to_json``.

        An unknown field is a ValueError naming it. A *missing* field takes its
        default: that is the rule which lets a checkpoint written before a field
        existed load as the model it was (``positional`` came after the first
        checkpoints; they load as "sinusoidal", the only kind they could be).
        A new field must therefore default to the behaviour from before it.
        """
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"TransformerConfig: expected a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"TransformerConfig: unknown fields {sorted(unknown)}")
        return cls(**data)

    def with_(self, **changes) -> TransformerConfig:
        return replace(self, **changes)


# Fields that the data decides (the vocabulary's size and its <pad> id): never set by hand
# (``train --set`` refuses them; options.py turns the other fields into FIELD=VALUE text).
DATA_FIELDS = ("vocab_size", "pad_id")


def describe(cfg: TransformerConfig) -> str:
    """Every field of ``cfg`` as ``name=value``, in the dataclass's order (the banner of a run)."""
    return " ".join(f"{f.name}={getattr(cfg, f.name)}" for f in fields(cfg))


# Model sizes by name: the paper's two (Table 3) and the smallest that still trains. A task's own
# model sizes live with its recipe, in the module that makes its data (data/tasks.py: copy and
# reverse; data/translation.py: translate; data/parsing.py: parse), and ``data.registry.PRESETS``
# looks every name up, these first. ``vocab_size`` is filled in from the data at training time.
PRESETS: dict[str, TransformerConfig] = {
    "base": TransformerConfig(),
    "big": TransformerConfig(d_model=1024, h=16, d_ff=4096, P_drop=0.3),
    "tiny": TransformerConfig(vocab_size=14, d_model=32, h=2, N=1, d_ff=64, P_drop=0.0,
                              eps_ls=0.0, max_len=64),
}


class EncoderLayer(Layer):
    """One of the N identical encoder layers (§3.1): self-attention, then FFN,
    each wrapped as LayerNorm(x + Dropout(Sublayer(x)))."""

    def __init__(self, cfg: TransformerConfig, rng, dropout_rng, name: str = "enc"):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.h, rng, f"{name}.self_attn")
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, rng, f"{name}.ffn", cfg.activation)
        self.res_attn = Residual(cfg.d_model, cfg.P_drop, dropout_rng, cfg.pre_ln, cfg.ln_eps, f"{name}.res_attn")
        self.res_ffn = Residual(cfg.d_model, cfg.P_drop, dropout_rng, cfg.pre_ln, cfg.ln_eps, f"{name}.res_ffn")

    def forward(self, x: Array, src_mask: Array) -> Array:
        """x: (B, S, d_model), src_mask: (B, 1, 1, S) -> (B, S, d_model)."""
        x = self.res_attn.forward(x, lambda z: self.self_attn.forward(z, mask=src_mask))
        return self.res_ffn.forward(x, self.ffn.forward)

    def backward(self, dy: Array) -> Array:
        """dy: (B, S, d_model) -> dx: (B, S, d_model)."""
        dy = self.res_ffn.backward(dy, self.ffn.backward)
        return self.res_attn.backward(dy, self.self_attn.backward)


class DecoderLayer(Layer):
    """One of the N decoder layers (§3.1): masked self-attention, encoder-decoder
    attention over the encoder output ("memory"), then FFN."""

    def __init__(self, cfg: TransformerConfig, rng, dropout_rng, name: str = "dec"):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.h, rng, f"{name}.self_attn")
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.h, rng, f"{name}.cross_attn")
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, rng, f"{name}.ffn", cfg.activation)
        self.res_self = Residual(cfg.d_model, cfg.P_drop, dropout_rng, cfg.pre_ln, cfg.ln_eps, f"{name}.res_self")
        self.res_cross = Residual(cfg.d_model, cfg.P_drop, dropout_rng, cfg.pre_ln, cfg.ln_eps, f"{name}.res_cross")
        self.res_ffn = Residual(cfg.d_model, cfg.P_drop, dropout_rng, cfg.pre_ln, cfg.ln_eps, f"{name}.res_ffn")

    def forward(self, y: Array, memory: Array, src_mask: Array, tgt_mask: Array) -> Array:
        """y: (B, T, d_model), memory: (B, S, d_model),
        src_mask: (B, 1, 1, S), tgt_mask: (B, 1, T, T) -> (B, T, d_model)."""
        y = self.res_self.forward(y, lambda z: self.self_attn.forward(z, mask=tgt_mask))
        y = self.res_cross.forward(y, lambda z: self.cross_attn.forward(z, memory, mask=src_mask))
        return self.res_ffn.forward(y, self.ffn.forward)

    def step(self, y_t: Array, t: int, self_kv: list, cross_kv: tuple, src_mask: Array) -> Array:
        """The same three sub-layers for one new position t, with a key/value cache.

        y_t: (B, 1, d_model); self_kv: this layer's [K, V] buffers (B, h, T_max, d_k),
        filled for positions 0..t-1; cross_kv: (K, V) of the memory, (B, h, S, d_k);
        src_mask: (B, 1, 1, S). Returns (B, 1, d_model). Inference only (no backward).
        """
        y_t = self.res_self.forward(y_t, lambda z: self.self_attn.step(z, *self_kv, t=t))
        y_t = self.res_cross.forward(y_t, lambda z: self.cross_attn.step(z, *cross_kv, mask=src_mask))
        return self.res_ffn.forward(y_t, self.ffn.forward)

    def backward(self, dy: Array) -> tuple[Array, Array]:
        """dy: (B, T, d_model), the exact reverse of forward.

        Returns:
            dy_in: (B, T, d_model), dmemory: (B, S, d_model) (from the encoder-decoder attention)
        """
        dy = self.res_ffn.backward(dy, self.ffn.backward)
        dy, dmemory = self.res_cross.backward(dy, self.cross_attn.backward)   # cross_attn: (dx_q, dx_kv)
        dy = self.res_self.backward(dy, self.self_attn.backward)
        return dy, dmemory


class Encoder(Layer):
    """A stack of N EncoderLayers (§3.1), plus a final LayerNorm when pre-LN."""

    def __init__(self, cfg: TransformerConfig, rng, dropout_rng):
        super().__init__()
        self.layers = [EncoderLayer(cfg, rng, dropout_rng, f"encoder.{i}") for i in range(cfg.N)]
        self.final_norm = LayerNorm(cfg.d_model, cfg.ln_eps, "encoder.final_norm") if cfg.pre_ln else None

    def forward(self, x: Array, src_mask: Array) -> Array:
        """x: (B, S, d_model), src_mask: (B, 1, 1, S) -> memory: (B, S, d_model)."""
        for layer in self.layers:
            x = layer.forward(x, src_mask)
        return self.final_norm.forward(x) if self.final_norm else x

    def backward(self, dy: Array) -> Array:
        """dy: (B, S, d_model) -> dx: (B, S, d_model)."""
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

    def forward(self, y: Array, memory: Array, src_mask: Array, tgt_mask: Array) -> Array:
        """y: (B, T, d_model) -> (B, T, d_model); see DecoderLayer.forward."""
        for layer in self.layers:
            y = layer.forward(y, memory, src_mask, tgt_mask)
        return self.final_norm.forward(y) if self.final_norm else y

    def step(self, y_t: Array, t: int, cache: KVCache) -> Array:
        """y_t: (B, 1, d_model) at position t -> (B, 1, d_model); see DecoderLayer.step."""
        for layer, self_kv, cross_kv in zip(self.layers, cache.self_kv, cache.cross_kv):
            y_t = layer.step(y_t, t, self_kv, cross_kv, cache.src_mask)
        return self.final_norm.forward(y_t) if self.final_norm else y_t

    def backward(self, dy: Array) -> tuple[Array, Array]:
        """dy: (B, T, d_model).

        Returns:
            dy_in: (B, T, d_model), dmemory: (B, S, d_model), the sum of the N
            layers' encoder-decoder attention gradients (every layer reads the memory).
        """
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

    Training (teacher forcing):
        logits = model.forward(src, tgt_in)        # (B, T, V)
        model.backward(dlogits)                    # fills every .grad
    Inference, one position at a time (§6.1; search in decoding.py):
        memory = model.encode(src)                 # (B, S, d_model)
        cache = KVCache(model, memory, src_mask, T_max)
        logits_t = model.decode_step(y_t, t, cache)   # (B, V), for t = 0, 1, ...
    The cached steps give the same logits as ``forward`` on the whole prefix.
    Attention weights of the last forward (or step): ``attention_maps()``.
    """

    def __init__(self, cfg: TransformerConfig, seed: int = 0):
        super().__init__()
        check_fits(cfg)                 # before any allocation: a config can ask for terabytes
        self.cfg = cfg
        rng = backend.host_rng(seed)                      # initial weights: same on CPU and GPU
        self.dropout_rng = backend.seeded_rng(seed + 1)   # one generator for every dropout mask
        self.E = Parameter(Embedding(cfg.vocab_size, cfg.d_model, rng).E.data, "E")
        self.src_embed = Embedding(cfg.vocab_size, cfg.d_model, weight=self.E, name="src_embed")
        self.tgt_embed = Embedding(cfg.vocab_size, cfg.d_model, weight=self.E, name="tgt_embed")
        if cfg.positional == "learned":
            # Table 3, row E: one learned (max_len, d_model) table P, shared by the source
            # and target sides as the sinusoidal table is, so that row E changes one thing
            # only (fixed vs learned). Drawn from its own generator: every other weight is
            # the same as the sinusoidal model's of the same seed.
            self.P = Parameter(init_positional(cfg.max_len, cfg.d_model, backend.host_rng([seed, 2])), "P")
            self.src_pos = LearnedPositionalEmbedding(cfg.d_model, cfg.max_len, weight=self.P, name="src_pos")
            self.tgt_pos = LearnedPositionalEmbedding(cfg.d_model, cfg.max_len, weight=self.P, name="tgt_pos")
        else:
            table = sinusoidal_table(cfg.max_len, cfg.d_model)
            self.src_pos = PositionalEncoding(cfg.d_model, cfg.max_len, table)
            self.tgt_pos = PositionalEncoding(cfg.d_model, cfg.max_len, table)
        self.src_dropout = Dropout(cfg.P_drop, self.dropout_rng)   # on embeddings + PE (§5.4)
        self.tgt_dropout = Dropout(cfg.P_drop, self.dropout_rng)
        self.encoder = Encoder(cfg, rng, self.dropout_rng)
        self.decoder = Decoder(cfg, rng, self.dropout_rng)
        self.output_projection = TiedOutputProjection(self.E)

    @property
    def xp(self):
        """numpy or cupy: the array module the parameters live in."""
        return backend.get_array_module(self.E.data)

    # -- random state of dropout ----------------------------------------------
    def reseed_dropout(self, seed: int) -> None:
        """Give every Dropout a fresh generator seeded with ``seed``."""
        self.dropout_rng = backend.seeded_rng(seed, backend.get_array_module(self.E.data))
        for layer in self.modules():
            if isinstance(layer, Dropout):
                layer.rng = self.dropout_rng

    def _check_ids(self, name: str, ids: Array) -> None:
        if getattr(ids, "ndim", None) != 2:
            raise ShapeError(f"Transformer: {name} must be token ids of shape (B, length), got "
                             f"{tuple(getattr(ids, 'shape', ()))}")
        if ids.shape[1] == 0:
            raise ShapeError(f"Transformer: {name} has length 0; a sentence has at least one position "
                             "(a source ends with <eos>, a decoder input starts with <bos>)")
        if ids.shape[1] > self.cfg.max_len:
            raise ShapeError(f"Transformer: {name} has length {ids.shape[1]} > max_len={self.cfg.max_len}")

    # -- forward ----------------------------------------------------------------
    def encode(self, src: Array, src_mask: Array | None = None) -> Array:
        """src: (B, S) ids -> memory: (B, S, d_model). src_mask defaults to the padding mask."""
        self._check_ids("src", src)
        if src_mask is None:
            src_mask = padding_mask(src, self.cfg.pad_id)
        x = self.src_dropout.forward(self.src_pos.forward(self.src_embed.forward(src)))
        return self.encoder.forward(x, src_mask)

    def decode(self, tgt_in: Array, memory: Array, src_mask: Array, tgt_mask: Array | None = None) -> Array:
        """Teacher-forced decoder over all positions at once.

        tgt_in: (B, T) ids (<bos> + target), memory: (B, S, d_model), src_mask:
        (B, 1, 1, S), tgt_mask: (B, 1, T, T), default causal + padding.
        Returns logits: (B, T, V); row t scores the token after tgt_in[:, :t+1].
        """
        self._check_ids("tgt_in", tgt_in)
        if tgt_in.shape[0] != memory.shape[0]:
            raise ShapeError(f"Transformer: tgt_in has batch size {tgt_in.shape[0]} but the memory has "
                             f"{memory.shape[0]}")
        if tgt_mask is None:
            tgt_mask = decoder_mask(tgt_in, self.cfg.pad_id)
        y = self.tgt_dropout.forward(self.tgt_pos.forward(self.tgt_embed.forward(tgt_in)))
        y = self.decoder.forward(y, memory, src_mask, tgt_mask)
        logits = self.output_projection.forward(y)
        self._forward_ran(logits)                 # backward checks dlogits against the logits' shape
        return logits

    def forward(self, src: Array, tgt_in: Array, src_mask: Array | None = None,
                tgt_mask: Array | None = None) -> Array:
        """src: (B, S), tgt_in: (B, T) -> logits (B, T, V).

        Masks default to padding (+ causal for the decoder); a batch from
        ``data.batching`` carries its masks, and passing them saves rebuilding.
        """
        self._check_ids("src", src)
        self._check_ids("tgt_in", tgt_in)
        if src.shape[0] != tgt_in.shape[0]:
            raise ShapeError(f"Transformer: src has batch size {src.shape[0]} but tgt_in has {tgt_in.shape[0]}")
        if src_mask is None:
            src_mask = padding_mask(src, self.cfg.pad_id)
        memory = self.encode(src, src_mask)
        return self.decode(tgt_in, memory, src_mask, tgt_mask)

    # -- inference: one position at a time ----------------------------------------
    def decode_step(self, y_t: Array, t: int, cache: KVCache) -> Array:
        """One decoder position t for every row, using and extending ``cache``.

        y_t: (B, 1) ids of the decoder input at position t (<bos> at t = 0);
        cache: filled for positions 0..t-1 (``cache.length == t``).
        Returns logits (B, V) for the token at output position t: the same
        numbers as ``decode`` on the whole prefix gives in its row t.
        Call it inside ``eval_mode`` (dropout off), as decoding.py does.
        """
        if t != cache.length:
            raise ValueError(f"decode_step: positions must be fed in order; expected t={cache.length}, got {t}")
        if t >= cache.T_max:
            raise ValueError(f"decode_step: t={t} is past the cache's T_max={cache.T_max}")
        if getattr(y_t, "shape", None) != (cache.batch_size, 1):
            raise ShapeError(f"decode_step: y_t must be ids of shape (B={cache.batch_size}, 1), got "
                             f"{tuple(getattr(y_t, 'shape', ()))}")
        # Embedding · sqrt(d_model) + PE of position t (§3.4, §3.5), then the N layers.
        y = self.tgt_dropout.forward(self.tgt_pos.forward(self.tgt_embed.forward(y_t), offset=t))
        y = self.decoder.step(y, t, cache)                          # (B, 1, d_model)
        cache.length = t + 1
        return self.output_projection.forward(y)[:, 0]              # (B, V)

    def attention_maps(self) -> dict[str, list[Array]]:
        """The attention weights of the last forward (or decode_step), per layer.

        Returns {"encoder_self": N arrays (B, h, S, S),
                 "decoder_self": N arrays (B, h, T, T),
                 "encoder_decoder": N arrays (B, h, T, S)},
        read from each MultiHeadAttention's public ``attention_weights``.
        """
        return {
            "encoder_self": [layer.self_attn.attention_weights for layer in self.encoder.layers],
            "decoder_self": [layer.self_attn.attention_weights for layer in self.decoder.layers],
            "encoder_decoder": [layer.cross_attn.attention_weights for layer in self.decoder.layers],
        }

    # -- backward ---------------------------------------------------------------
    def backward(self, dlogits: Array) -> None:
        """dlogits: (B, T, V). Adds into every Parameter's .grad (E gets three uses;
        a learned positional table P two, the target and source sides)."""
        self._check_dout(dlogits, "dlogits")
        self._forward_called = False              # one backward per forward
        dout = self.output_projection.backward(dlogits)                     # use 1 of E
        dy, dmemory = self.decoder.backward(dout)
        self.tgt_embed.backward(self.tgt_pos.backward(self.tgt_dropout.backward(dy)))   # use 2 of E
        dx = self.encoder.backward(dmemory)
        self.src_embed.backward(self.src_pos.backward(self.src_dropout.backward(dx)))   # use 3 of E

    # -- moving between backends -------------------------------------------------
    def to(self, xp_name: str) -> Transformer:
        """Move every parameter to 'numpy' or 'cupy' (gradients too)."""
        xp = backend.module_for(xp_name)
        for p in self.parameters():
            p.data = backend.to_backend(p.data, xp)
            p.grad = backend.to_backend(p.grad, xp)
        self.reseed_dropout(0)
        return self


def count_parameters(cfg: TransformerConfig) -> int:
    """The number of learnable scalars, computed from the formula (no model built).

    Per encoder layer: attention 4·(d²+d), the FFN (``layers.feedforward.ffn_parameter_count``:
    2·d·d_ff + d_ff + d for the paper's), two LayerNorms 4d.
    Per decoder layer: two attentions, FFN, three LayerNorms. Plus E (V·d), shared,
    and with ``positional="learned"`` the table P (max_len·d), shared by both sides.
    """
    d, N, V = cfg.d_model, cfg.N, cfg.vocab_size
    attn = 4 * (d * d + d)
    ffn = ffn_parameter_count(d, cfg.d_ff, cfg.activation)
    enc = N * (attn + ffn + 2 * 2 * d)
    dec = N * (2 * attn + ffn + 3 * 2 * d)
    final = 2 * 2 * d if cfg.pre_ln else 0
    positional = cfg.max_len * d if cfg.positional == "learned" else 0
    return V * d + enc + dec + final + positional


# -- will it fit? A size checked before anything is allocated ----------------------------

class ModelTooLargeError(ValueError):
    """The model a config describes cannot fit in this machine's memory.

    ``field`` names the config field to make smaller, ``needed`` and ``limit`` are in bytes.
    """

    def __init__(self, message: str, field: str, needed: int, limit: int):
        super().__init__(message)
        self.field, self.needed, self.limit = field, needed, limit


# Python's own objects per encoder layer + decoder layer (Parameters, Layers, small arrays),
# measured with tracemalloc on a model of 2,000 one-number-wide layers: about 19 kB.
_BYTES_PER_LAYER_PAIR = 20_000


def memory_estimate(cfg: TransformerConfig, itemsize: int = 4) -> dict[str, tuple[float, tuple[str, ...]]]:
    """The bytes building a model of ``cfg`` takes, by part: {part: (bytes, the fields it grows with)}.

    Every parameter is held twice (its value and its gradient); the sinusoidal
    table is built in float64 before the cast; each pair of layers carries some
    Python objects besides its arrays. Floats, so that a config of 10^10 never
    overflows anything while it is being refused.
    """
    d, N, V = float(cfg.d_model), float(cfg.N), float(cfg.vocab_size)
    ffn = float(ffn_parameter_count(cfg.d_model, cfg.d_ff, cfg.activation))
    per_layer_pair = (3 * 4 * (d * d + d) + 2 * ffn + 5 * 2 * d) * 2 * itemsize
    table = float(cfg.max_len) * d * (2 * 8 + itemsize) if cfg.positional == "sinusoidal" else \
        float(cfg.max_len) * d * 2 * itemsize
    return {
        "the embedding matrix E (vocab_size × d_model)": (V * d * 2 * itemsize, ("vocab_size", "d_model")),
        "the positional table (max_len × d_model)": (table, ("max_len", "d_model")),
        "the N encoder and decoder layers (their attention d_model² and feed-forward d_model × d_ff weights)":
            (N * (per_layer_pair + _BYTES_PER_LAYER_PAIR), ("N", "d_ff", "d_model")),
    }


def check_fits(cfg: TransformerConfig, dtype=None, limit: int | None = None) -> None:
    """Raise ModelTooLargeError, naming the field to change, if a model of ``cfg`` cannot fit in memory.

    dtype: the parameters' (default: ``backend.default_dtype()``); limit: bytes
    (default: ``backend.memory_limit()``, the whole memory of the machine or
    device; None there skips the check). Called by ``Transformer.__init__`` before
    it allocates anything, so ``max_len=10**10`` is an error, not a MemoryError
    (or minutes of swapping) half-way through building the model.
    """
    limit = backend.memory_limit() if limit is None else limit
    if limit is None:
        return
    itemsize = (backend.default_dtype() if dtype is None else backend.xp_default().dtype(dtype)).itemsize
    parts = memory_estimate(cfg, itemsize)
    needed = sum(size for size, _ in parts.values())
    if needed <= limit:
        return
    part, (size, names) = max(parts.items(), key=lambda item: item[1][0])
    base = TransformerConfig()
    field = max(names, key=lambda name: getattr(cfg, name) / getattr(base, name))   # the most unusual value
    size_of = backend.format_bytes
    raise ModelTooLargeError(
        f"TransformerConfig: this model needs about {size_of(needed)} of memory ({size_of(size)} of it for {part}), "
        f"more than the {size_of(limit)} this machine has; make {field}={getattr(cfg, field)} smaller",
        field, int(needed), int(limit))
