"""The keys and values one-position decoding keeps between steps (§6.1 inference).

``Transformer.decode_step`` runs one new decoder position against a ``KVCache``:
every layer's self-attention keys and values of the positions before it, and its
encoder-decoder keys and values of the memory, projected once per sentence.
Beam search reorders the cache's rows as its hypotheses move (``reorder``).
"""

from __future__ import annotations

from . import backend
from .backend import Array
from .errors import ShapeError


class KVCache:
    """Keys and values kept between decoding steps, for every decoder layer (§6.1 inference).

    self_kv[i]  = [K, V], each (B, h, T_max, d_k): layer i's self-attention
                  keys/values, position t written at step t (preallocated, so a
                  step never reallocates; only positions < ``length`` are valid).
    cross_kv[i] = (K, V), each (B, h, S, d_k): layer i's encoder-decoder keys/
                  values, ``cross_attn.project_kv(memory)``. The memory never
                  changes while a sentence is decoded, so it is projected once
                  per sentence instead of once per step.
    src_mask    = (B, 1, 1, S): the source padding mask the queries use.

    With the cache, step t runs only the new position through the layers; its
    query attends to the t+1 cached keys. Each new token therefore costs work
    proportional to the current length t (the attention) plus a constant (the
    projections and the FFN), instead of re-running all t+1 positions.
    Memory: 2·N·B·h·T_max·d_k numbers for the self-attention buffers.
    """

    def __init__(self, model, memory: Array, src_mask: Array, T_max: int):
        """model: the Transformer; memory: (B, S, d_model) encoder output; src_mask: (B, 1, 1, S);
        T_max: positions to allow."""
        cfg = model.cfg
        xp = backend.get_array_module(memory)
        B = memory.shape[0]
        if T_max < 1 or T_max > cfg.max_len:
            raise ValueError(f"KVCache: T_max must be in 1..cfg.max_len={cfg.max_len}, got {T_max}")
        if src_mask.shape[0] != B:
            raise ShapeError(f"KVCache: src_mask has {src_mask.shape[0]} rows, the memory {B}")
        self.T_max = int(T_max)
        self.length = 0                       # positions 0..length-1 are filled
        self.src_mask = src_mask
        shape = (B, cfg.h, self.T_max, cfg.d_k)
        self.self_kv = [[xp.empty(shape, dtype=memory.dtype), xp.empty(shape, dtype=memory.dtype)]
                        for _ in model.decoder.layers]
        self.cross_kv = [layer.cross_attn.project_kv(memory) for layer in model.decoder.layers]

    @property
    def batch_size(self) -> int:
        return int(self.self_kv[0][0].shape[0])

    def reorder(self, index: Array, cross: bool = True) -> None:
        """Keep row ``index[r]`` as the new row r, for every buffer (beam search).

        index: (R,) ints into the current batch axis; R may differ from B (to
        copy each sentence k times, say). Only the filled positions are copied,
        so this costs O(length), like a step. ``cross=False`` leaves the
        encoder-decoder keys/values and the source mask alone: correct whenever
        every index[r] has the same source sentence as row r (beam search
        reordering within a sentence's beam), and it saves copying them.
        """
        xp = backend.get_array_module(self.self_kv[0][0])
        index = backend.to_backend(index, xp)
        L = self.length
        if int(index.shape[0]) == self.batch_size:
            for kv in self.self_kv:
                for buf in kv:
                    buf[:, :, :L] = buf[index, :, :L]      # right side is a copy: safe in place
        else:
            for kv in self.self_kv:
                for j, buf in enumerate(kv):
                    new = xp.empty((int(index.shape[0]),) + buf.shape[1:], dtype=buf.dtype)
                    new[:, :, :L] = buf[index, :, :L]
                    kv[j] = new
            cross = True                                   # the batch size changed: must follow
        if cross:
            self.cross_kv = [(K[index], V[index]) for K, V in self.cross_kv]
            self.src_mask = self.src_mask[index]
