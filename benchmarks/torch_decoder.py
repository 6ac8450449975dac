"""An independent incremental decoder in PyTorch (CPU, eager) for minitransformer's weights.

benchmarks/bench_decoding.py --torch times it against the package's own decoding
(``translate.translate_ids``) on the same trained weights. It is written from the
paper, not from the package's code: the post-LN encoder and decoder (§3.1), scaled
dot-product attention (Eq. 1) over h heads (§3.2.2), the position-wise FFN (Eq. 2),
embeddings scaled by √d_model and tied to the output projection (§3.4), sinusoidal
positions (§3.5) computed here again; its own key/value cache: a decoder position
writes its key and value into preallocated (B, h, T_max, d_k) buffers and its query
attends to positions 0..t; the encoder-decoder keys and values are projected once
per source. The search rules are the package's (the same stopping points and length
limits), so that both sides produce the same tokens, which the benchmark checks:

* greedy: the most probable token; pad and <bos> are never chosen; a sentence stops
  at <eos> or at its limit, min(source length + 50 (§6.1), max_len);
* beam (§6.1): k best extensions of the live hypotheses per step, an <eos> extension
  leaves the beam for the finished set scored log P / lp with lp(Y) = ((5 + |Y|)/6)^α
  (Wu et al., 2016, Eq. 14); a sentence stops once k are finished and no live
  hypothesis can beat the best, or at its limit. Scores accumulate in float64.

Weights are read by parameter name from ``model.named_parameters()`` in one place,
``load_weights``, the map tests/test_torch_parity.py checks for every layer.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

NEG_INF = float("-inf")


def sinusoids(max_len: int, d_model: int) -> torch.Tensor:
    """§3.5: PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same angle)."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    angle = pos * torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)[:, : d_model // 2]
    return pe


def load_weights(model, dtype=torch.float32) -> dict[str, torch.Tensor]:
    """Every parameter of a minitransformer model as a torch tensor, by its name."""
    return {name: torch.from_numpy(np.array(p.data, copy=True)).to(dtype) for name, p in model.named_parameters()}


class TorchDecoder:
    """Encoder, one-position decoder step with a KV cache, greedy and beam search, in torch."""

    def __init__(self, model, dtype=torch.float32):
        cfg = model.cfg
        if cfg.pre_ln:
            raise ValueError("TorchDecoder implements the paper's post-LN model only (cfg.pre_ln is True)")
        self.cfg, self.dtype = cfg, dtype
        self.d, self.h, self.d_k = cfg.d_model, cfg.h, cfg.d_model // cfg.h
        w = load_weights(model, dtype)
        self.E = w["E"]                                                  # (V, d_model), tied three ways
        self.pe = w["P"] if cfg.positional == "learned" else sinusoids(cfg.max_len, cfg.d_model).to(dtype)

        def attn(prefix):
            return (w[f"{prefix}.W_qkv"], w[f"{prefix}.b_qkv"], w[f"{prefix}.W_o"], w[f"{prefix}.b_o"])

        def norm(prefix):
            return (w[f"{prefix}.gamma"], w[f"{prefix}.beta"])

        def ffn(prefix):
            return (w[f"{prefix}.linear1.W"], w[f"{prefix}.linear1.b"], w[f"{prefix}.linear2.W"],
                    w[f"{prefix}.linear2.b"])

        self.enc = [{"self": attn(f"encoder.layers.{i}.self_attn"), "ffn": ffn(f"encoder.layers.{i}.ffn"),
                     "ln1": norm(f"encoder.layers.{i}.res_attn.norm"), "ln2": norm(f"encoder.layers.{i}.res_ffn.norm")}
                    for i in range(cfg.N)]
        self.dec = [{"self": attn(f"decoder.layers.{i}.self_attn"), "cross": attn(f"decoder.layers.{i}.cross_attn"),
                     "ffn": ffn(f"decoder.layers.{i}.ffn"), "ln1": norm(f"decoder.layers.{i}.res_self.norm"),
                     "ln2": norm(f"decoder.layers.{i}.res_cross.norm"), "ln3": norm(f"decoder.layers.{i}.res_ffn.norm")}
                    for i in range(cfg.N)]

    # -- the pieces -------------------------------------------------------------------------
    def _ln(self, x, params):
        return F.layer_norm(x, (self.d,), params[0], params[1], self.cfg.ln_eps)

    def _ffn(self, x, params):
        W1, b1, W2, b2 = params
        return torch.relu(x @ W1 + b1) @ W2 + b2                         # Eq. (2)

    def _heads(self, x):
        """(B, S, d_model) -> (B, h, S, d_k)."""
        B, S, _ = x.shape
        return x.view(B, S, self.h, self.d_k).transpose(1, 2)

    def _attend(self, q, K, V, bias=None):
        """softmax(q K^T / sqrt(d_k) + bias) V for q (B, h, S_q, d_k): (B, S_q, d_model)."""
        scores = q @ K.transpose(-1, -2) / math.sqrt(self.d_k)
        if bias is not None:
            scores = scores + bias
        out = torch.softmax(scores, dim=-1) @ V                          # (B, h, S_q, d_k)
        B, _, S_q, _ = out.shape
        return out.transpose(1, 2).reshape(B, S_q, self.d)

    # -- encoder ------------------------------------------------------------------------------
    def encode(self, src: torch.Tensor):
        """src (B, S) ids -> memory (B, S, d_model) and the additive key bias (B, 1, 1, S)."""
        S = src.shape[1]
        bias = torch.zeros(src.shape, dtype=self.dtype).masked_fill(src == self.cfg.pad_id, NEG_INF)[:, None, None]
        x = F.embedding(src, self.E) * math.sqrt(self.d) + self.pe[:S]
        for layer in self.enc:
            W, b, W_o, b_o = layer["self"]
            q, k, v = (self._heads(z) for z in (x @ W + b).split(self.d, dim=-1))
            x = self._ln(x + (self._attend(q, k, v, bias) @ W_o + b_o), layer["ln1"])
            x = self._ln(x + self._ffn(x, layer["ffn"]), layer["ln2"])
        return x, bias

    # -- the cache and one decoder position ---------------------------------------------------
    def start(self, memory, bias, T_max: int) -> dict:
        """A cache for B rows: empty self-attention K/V buffers, the memory's K/V per layer."""
        B = memory.shape[0]
        cross = []
        for layer in self.dec:
            W, b, _, _ = layer["cross"]
            k, v = (memory @ W[:, self.d:] + b[self.d:]).split(self.d, dim=-1)
            cross.append((self._heads(k), self._heads(v)))
        shape = (B, self.h, T_max, self.d_k)
        return {"self": [(torch.empty(shape, dtype=self.dtype), torch.empty(shape, dtype=self.dtype))
                         for _ in self.dec], "cross": cross, "bias": bias}

    @staticmethod
    def reorder(cache: dict, index: torch.Tensor, cross: bool = True) -> None:
        """Rows of every buffer follow ``index`` (beam search: each slot copies its parent)."""
        cache["self"] = [(K[index], V[index]) for K, V in cache["self"]]
        if cross:
            cache["cross"] = [(K[index], V[index]) for K, V in cache["cross"]]
            cache["bias"] = cache["bias"][index]

    def step(self, y: torch.Tensor, t: int, cache: dict) -> torch.Tensor:
        """Tokens y (B,) at position t -> log-probabilities of the next token (B, V)."""
        x = (F.embedding(y, self.E) * math.sqrt(self.d) + self.pe[t])[:, None]   # (B, 1, d_model)
        for layer, (K, V), (K_c, V_c) in zip(self.dec, cache["self"], cache["cross"]):
            W, b, W_o, b_o = layer["self"]
            q, k, v = (self._heads(z) for z in (x @ W + b).split(self.d, dim=-1))
            K[:, :, t: t + 1], V[:, :, t: t + 1] = k, v
            x = self._ln(x + (self._attend(q, K[:, :, : t + 1], V[:, :, : t + 1]) @ W_o + b_o), layer["ln1"])
            W, b, W_o, b_o = layer["cross"]
            q = self._heads(x @ W[:, : self.d] + b[: self.d])
            x = self._ln(x + (self._attend(q, K_c, V_c, cache["bias"]) @ W_o + b_o), layer["ln2"])
            x = self._ln(x + self._ffn(x, layer["ffn"]), layer["ln3"])
        return torch.log_softmax(x[:, 0] @ self.E.T, dim=-1)

    # -- search -------------------------------------------------------------------------------
    def _limits(self, src: torch.Tensor) -> torch.Tensor:
        return torch.clamp((src != self.cfg.pad_id).sum(dim=1) + 50, max=self.cfg.max_len)

    @torch.inference_mode()
    def greedy(self, src: np.ndarray, bos_id: int, eos_id: int) -> list[list[int]]:
        src = torch.from_numpy(np.asarray(src))
        B, pad = src.shape[0], self.cfg.pad_id
        limit = self._limits(src)
        T = int(limit.max())
        memory, bias = self.encode(src)
        cache = self.start(memory, bias, T)
        banned = sorted({pad, bos_id} - {eos_id})
        y = torch.full((B,), bos_id, dtype=torch.long)
        out = torch.full((B, T), pad, dtype=torch.long)
        out_len = limit.clone()
        done = torch.zeros(B, dtype=torch.bool)
        for t in range(T):
            logp = self.step(y, t, cache)
            logp[:, banned] = NEG_INF
            y = torch.where(done, pad, logp.argmax(dim=1))
            out[:, t] = y
            hit = (y == eos_id) & ~done
            out_len = torch.where(hit, t, out_len)
            done |= hit | (limit <= t + 1)
            if bool(done.all()):
                break
        return [out[b, : int(out_len[b])].tolist() for b in range(B)]

    @torch.inference_mode()
    def beam(self, src: np.ndarray, bos_id: int, eos_id: int, k: int = 4, alpha: float = 0.6) -> list[list[int]]:
        src = torch.from_numpy(np.asarray(src))
        B, pad, Vocab = src.shape[0], self.cfg.pad_id, self.cfg.vocab_size
        limit = self._limits(src)
        T = int(limit.max())

        def lp(n):
            return ((5.0 + n) / 6.0) ** alpha

        memory, bias = self.encode(src)
        cache = self.start(memory, bias, T)
        self.reorder(cache, torch.arange(B).repeat_interleave(k))        # k rows per sentence
        banned = sorted({pad, bos_id} - {eos_id})
        tokens = torch.full((B * k, T + 1), pad, dtype=torch.long)
        tokens[:, 0] = bos_id
        live = torch.full((B, k), NEG_INF, dtype=torch.float64)
        live[:, 0] = 0.0
        fin_score = torch.full((B, k), NEG_INF, dtype=torch.float64)
        fin_tokens = torch.full((B, k, T), pad, dtype=torch.long)
        fin_len = torch.zeros((B, k), dtype=torch.long)
        done = torch.zeros(B, dtype=torch.bool)
        first_row = (torch.arange(B) * k)[:, None]
        lp_limit = lp(limit.to(torch.float64))
        for t in range(T):
            logp = self.step(tokens[:, t], t, cache).to(torch.float64)
            logp[:, banned] = NEG_INF
            top_logp, top = torch.topk((live.reshape(B * k, 1) + logp).reshape(B, k * Vocab), k, dim=1)
            parent, tok = top // Vocab, top % Vocab
            valid = top_logp > NEG_INF
            is_eos = valid & (tok == eos_id)
            finishing = is_eos | (valid & (limit <= t + 1)[:, None])
            parent_rows = (first_row + parent).reshape(-1)
            if bool(finishing.any()):
                new_tokens = tokens[parent_rows, 1:].reshape(B, k, T).clone()
                new_tokens[:, :, t] = tok
                scores = torch.cat([fin_score, torch.where(finishing, top_logp / lp(t + 1), NEG_INF)], dim=1)
                scores, keep = torch.sort(scores, dim=1, descending=True, stable=True)   # earlier ones win ties
                fin_score, keep = scores[:, :k], keep[:, :k]
                fin_tokens = torch.gather(torch.cat([fin_tokens, new_tokens], dim=1), 1,
                                          keep[:, :, None].expand(B, k, T))
                fin_len = torch.gather(torch.cat([fin_len, (t + 1) - is_eos.long()], dim=1), 1, keep)
            live = torch.where(valid & ~finishing, top_logp, NEG_INF)
            best_live = live.max(dim=1).values
            bound = best_live / torch.clamp(lp_limit, min=lp(t + 2.0))
            n_fin = (fin_score > NEG_INF).sum(dim=1)
            done |= ((n_fin >= k) & (bound <= fin_score[:, 0])) | (best_live == NEG_INF)
            live = torch.where(done[:, None], NEG_INF, live)
            if bool(done.all()) or t + 1 == T:
                break
            tokens = tokens[parent_rows]
            tokens[:, t + 1] = tok.reshape(-1)
            self.reorder(cache, parent_rows, cross=False)
        return [fin_tokens[b, 0, : int(fin_len[b, 0])].tolist() for b in range(B)]
