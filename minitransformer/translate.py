"""From text to text: token lists in, translations (and attention maps) out.

The layers below this module speak in id arrays; people speak in sentences.
These helpers sit in between, on top of the search of decoding.py:

    source_ids(vocab, tokens)                  one source sentence as ids, + <eos>
    translate_ids(model, vocab, id_lists, strategy)   id lists in, id lists out (batched;
                                               strategy: decoding.Greedy(), Beam(...), Sample(...))
    translate_tokens(model, vocab, token_lists) token lists in, token lists out
    attention_maps(model, src_ids, tgt_in_ids) every layer's and head's weights
    save_attention_maps(model, vocab, tokens, out_dir)   translate + draw heatmaps
    score_translations(model, vocab, pairs, ...)  translate a test set, exact match / BLEU / chrF
                                               (and a task's own scores, a parser's bracket F1)

Training, evaluation and the command line all use these, so a sentence is
encoded the same way everywhere.
"""

from __future__ import annotations

import os
import time

import numpy

from . import backend
from .data.batching import make_source_batch
from .data.vocab import BOS, SPACE, Vocab, detokenize
from .decoding import EXTRA_OUTPUT_LEN, GREEDY, PAPER_BEAM, Beam, check_strategy, decode
from .layers.parameter import eval_mode
from .metrics import corpus_bleu, corpus_chrf, exact_match
from .model import Transformer
from .plot import ATTENTION_KINDS, save_attention_grid


def source_ids(vocab: Vocab, tokens) -> list[int]:
    """A source sentence's ids, ending with <eos>.

    The <eos> marks where the sentence stops, a key the decoder's
    encoder-decoder attention can find when deciding to stop too. (Without it
    the end of a source is only the absence of keys, since padding is masked,
    and a copy model miscounts runs of repeated final symbols.)
    """
    return vocab.encode(tokens, add_eos=True)


def translate_ids(model: Transformer, vocab: Vocab, sources: list[list[int]], strategy=GREEDY,
                  batch_size: int = 100, max_len: int | None = None) -> list[list[int]]:
    """Decode source id lists (each from ``source_ids``) in batches of ``batch_size`` with
    ``strategy``: ``decoding.Greedy()`` (the default), ``Beam(size=4, alpha=0.6)`` (§6.1) or
    ``Sample(...)``. Returns output id lists (no <bos>/<eos>). ``max_len``: the most output
    tokens per sentence, <eos> included (None: its input length + 50, §6.1; a task may set its
    own, ``loading.Task.max_output_len``).

    A Sample draws from one generator, seeded once, through all the batches: the same
    seed and sources give the same outputs, and no two batches reuse the same numbers."""
    check_strategy(strategy, "translate_ids")
    rng = strategy.make_rng(model.xp)
    out: list[list[int]] = []
    for i in range(0, len(sources), batch_size):
        src, _ = make_source_batch(sources[i: i + batch_size], vocab.pad_id, model.xp)
        out.extend(decode(model, src, vocab.bos_id, vocab.eos_id, strategy, max_len=max_len, rng=rng))
    return out


def decoding_bytes(model: Transformer, n_sentences: int, longest: int, strategy=GREEDY,
                   batch_size: int = 100, max_len: int | None = None) -> int:
    """About how many bytes ``translate_ids`` needs, on top of the model, to decode ``n_sentences``
    sources of up to ``longest`` tokens (without <eos>) with ``strategy``, in batches of ``batch_size``.

    A batch decodes R = batch × beam rows at once. Each row keeps, in every one of
    the N decoder layers, self-attention keys and values for up to T = longest + 50
    positions (or ``max_len``, as translate_ids; capped at cfg.max_len) and the encoder-decoder keys and values of its
    S = longest + 1 source positions (model.KVCache), plus the encoder's output; at
    each position R rows of V scores are ranked in float64. Known before anything
    runs, so that ``train --eval beam64`` is refused before the first step instead
    of running out of memory after the last one.
    """
    cfg = model.cfg
    itemsize = model.E.data.dtype.itemsize
    rows = min(batch_size, max(1, n_sentences)) * (strategy.size if isinstance(strategy, Beam) else 1)
    S, T = longest + 1, min(cfg.max_len, max_len if max_len is not None else longest + EXTRA_OUTPUT_LEN)
    caches = 2 * cfg.N * rows * (T + S) * cfg.d_model * itemsize          # self and cross K, V: (R, h, ·, d_k)
    encoder = 2 * rows * S * cfg.d_model * itemsize                       # the memory, and its copy per row
    scores = 3 * rows * cfg.vocab_size * 8                                # logits -> log-probs -> ranked
    return int(caches + encoder + scores)


def translate_tokens(model: Transformer, vocab: Vocab, sources: list[list[str]], strategy=GREEDY,
                     batch_size: int = 100, max_len: int | None = None) -> list[list[str]]:
    """Translate tokenized sentences with ``strategy``; returns token lists (special tokens stripped)."""
    ids = translate_ids(model, vocab, [source_ids(vocab, s) for s in sources], strategy, batch_size, max_len)
    return [vocab.decode(seq) for seq in ids]


def score_translations(model: Transformer, vocab: Vocab, pairs, tgt_level: str = "word",
                       bleu_tokenize: str = "13a", strategy=GREEDY, max_len: int | None = None,
                       scores=None, src_level: str = "word") -> dict:
    """Translate the sources of ``pairs`` (source tokens, target tokens) with ``strategy`` and score them.

    Returns {"hyps", "refs": detokenized strings; "exact_match": fraction;
    "bleu", "chrf": corpus scores (0-100); "bleu_stats": the metrics.BleuScore behind "bleu"
    (its n-gram counts); "seconds": decoding time}.
    ``bleu_tokenize``: sacrebleu's tokenizer name ("13a", "char", "none", ...).
    ``scores``: a task's own scores (``loading.Task.scores``), called with the
    source, output and reference texts; what it returns is added as "scores".
    ``max_len``: as in ``translate_ids``.
    """
    refs = [detokenize(t, tgt_level) for _, t in pairs]
    t0 = time.perf_counter()
    hyps = [detokenize(h, tgt_level)
            for h in translate_tokens(model, vocab, [s for s, _ in pairs], strategy, max_len=max_len)]
    seconds = time.perf_counter() - t0
    bleu = corpus_bleu(hyps, refs, tokenize=bleu_tokenize)
    result = {"hyps": hyps, "refs": refs, "exact_match": exact_match(hyps, refs), "bleu": bleu.score,
              "bleu_stats": bleu, "chrf": corpus_chrf(hyps, refs), "seconds": seconds}
    if scores is not None:
        result["scores"] = scores([detokenize(s, src_level) for s, _ in pairs], hyps, refs)
    return result


def attention_maps(model: Transformer, src_ids, tgt_in_ids) -> dict[str, numpy.ndarray]:
    """The attention weights of one teacher-forced forward pass, every layer and head.

    src_ids: source ids, a list of ints (one sentence) or a (B, S) array padded
    with cfg.pad_id; tgt_in_ids: the decoder input, <bos> followed by the
    output ids, a list or a (B, T) array. The model runs in evaluation mode
    (dropout off) with the default padding (+ causal) masks.

    Returns host NumPy arrays, the N layers stacked first:
        "encoder_self":    (N, h, S, S)   encoder self-attention
        "decoder_self":    (N, h, T, T)   decoder masked self-attention (lower-triangular)
        "encoder_decoder": (N, h, T, S)   decoder queries over the encoder output
    with a batch axis after N, (N, B, h, ...), when the inputs are 2-D.
    Row i of a map is query position i; it sums to 1 over the keys it may
    attend to, and padded / future keys get exactly 0.
    """
    xp = model.xp

    def as_ids(ids):
        if isinstance(ids, (list, tuple)):
            ids = numpy.asarray(ids, dtype=numpy.int64)
        return xp.asarray(ids).astype(xp.int64)

    src, tgt = as_ids(src_ids), as_ids(tgt_in_ids)
    if src.ndim != tgt.ndim or src.ndim not in (1, 2):
        raise ValueError(f"attention_maps: src_ids and tgt_in_ids must both be 1-D (one sentence) or "
                         f"2-D (B, length), got shapes {tuple(src.shape)} and {tuple(tgt.shape)}")
    single = src.ndim == 1
    if single:
        src, tgt = src[None, :], tgt[None, :]
    with eval_mode(model):
        model.forward(src, tgt)
        maps = {kind: numpy.stack([backend.to_numpy(a) for a in arrays])
                for kind, arrays in model.attention_maps().items()}
    if single:
        maps = {k: v[:, 0] for k, v in maps.items()}
    return maps


def display_token(token: str) -> str:
    """A token as an axis label: the char-level space marker "▁" shows as "␣"."""
    return token.replace(SPACE, "\u2423")


_ATTENTION_TITLES = {
    "encoder_self": "encoder self-attention (rows: source queries, columns: source keys)",
    "decoder_self": "decoder masked self-attention (rows and columns: decoder input = <bos> + output)",
    "encoder_decoder": "encoder-decoder attention (rows: decoder input = <bos> + output, columns: source)",
}


def save_attention_maps(model: Transformer, vocab: Vocab, src_tokens, out_dir: str, src_level: str = "word",
                        tgt_level: str = "word", strategy=PAPER_BEAM) -> list[str]:
    """Translate one sentence and save its attention weights as three heatmap PNGs.

    src_tokens: the tokenized source sentence (``data.vocab.tokenize(text, src_level)``).
    The sentence is decoded with ``strategy`` (default: beam 4, §6.1), then
    the model is run once more, teacher-forced on its own output, and every
    layer's and head's weights are drawn: ``encoder_self.png`` (S × S),
    ``decoder_self.png`` (T × T) and ``encoder_decoder.png`` (T × S), each a
    grid of N rows (layers) × h columns (heads). Decoder rows are labelled
    with the decoder *input*, "<bos>" + output tokens: the row of a token is
    where the model predicts the token after it (the last row predicts <eos>).
    Returns the paths written (each written atomically).
    """
    src_tokens = list(src_tokens)
    if not src_tokens:
        raise ValueError("save_attention_maps: the source sentence is empty")
    output = translate_tokens(model, vocab, [src_tokens], strategy)[0]
    # The decoder input is <bos> + output. An output that ran to the length cap
    # (cfg.max_len tokens, no <eos>) has one token more than the positional
    # table covers; its last token was never a decoder input, so drop it here.
    dec_tokens = ([BOS] + list(output))[: model.cfg.max_len]
    src = source_ids(vocab, src_tokens)          # exactly what the encoder saw in training: + <eos>
    maps = attention_maps(model, src, vocab.encode(dec_tokens))
    src_labels = [display_token(t) for t in src_tokens] + [vocab.token(i) for i in src[len(src_tokens):]]
    dec_labels = [display_token(t) for t in dec_tokens]
    axes_labels = {
        "encoder_self": (src_labels, src_labels),
        "decoder_self": (dec_labels, dec_labels),
        "encoder_decoder": (dec_labels, src_labels),
    }
    sentence = f"{detokenize(src_tokens, src_level)!r} → {detokenize(output, tgt_level)!r} ({strategy})"
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for kind in ATTENTION_KINDS:
        rows, cols = axes_labels[kind]
        path = os.path.join(out_dir, f"{kind}.png")
        save_attention_grid(maps[kind], rows, cols, f"{_ATTENTION_TITLES[kind]}\n{sentence}", path)
        paths.append(path)
    return paths


__all__ = ["source_ids", "translate_ids", "translate_tokens", "decoding_bytes", "score_translations",
           "attention_maps", "display_token", "save_attention_maps"]
