"""Pictures: the loss curve of a training run, and attention heatmaps.

matplotlib is imported with the non-interactive Agg backend when no display
is set, so these work on a headless machine and in CI.
"""

from __future__ import annotations

import io
import json
import os

from .checkpoint import atomic_write_bytes


def _pyplot():
    import matplotlib  # noqa: PLC0415

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        try:
            matplotlib.use("Agg")
        except Exception:  # noqa: BLE001 - keep whatever backend is active
            pass
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def save_figure(fig, path: str, dpi: int = 110) -> None:
    """Render to PNG in memory, then write atomically (a crash never leaves half a file)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    atomic_write_bytes(path, buffer.getvalue())


def plot_loss_curve(metrics_path: str, png_path: str) -> None:
    """Training loss (and validation loss, where logged) against step, from metrics.jsonl."""
    plt = _pyplot()
    steps, losses, vsteps, vlosses = [], [], [], []
    with open(metrics_path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if "loss" in record:
                steps.append(record["step"])
                losses.append(record["loss"])
            if "valid_loss" in record:
                vsteps.append(record["step"])
                vlosses.append(record["valid_loss"])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, losses, label="train loss")
    if vsteps:
        ax.plot(vsteps, vlosses, "o-", label="valid loss")
    ax.set_xlabel("step")
    ax.set_ylabel("label-smoothed cross-entropy")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, png_path)
    plt.close(fig)


# -- attention heatmaps ----------------------------------------------------------------

ATTENTION_KINDS = ("encoder_self", "decoder_self", "encoder_decoder")

_ATTENTION_TITLES = {
    "encoder_self": "encoder self-attention (rows: source queries, columns: source keys)",
    "decoder_self": "decoder masked self-attention (rows and columns: decoder input = <bos> + output)",
    "encoder_decoder": "encoder-decoder attention (rows: decoder input = <bos> + output, columns: source)",
}


def attention_weights(model, src_ids, tgt_in_ids) -> dict:
    """The attention weights of one teacher-forced forward pass, for every layer and head.

    src_ids: source ids, a list of ints (one sentence) or a (B, S) array padded
    with cfg.pad_id; tgt_in_ids: the decoder input, <bos> followed by the
    output ids, a list or a (B, T) array. The model runs in evaluation mode
    (dropout off) with the default padding (+ causal) masks.

    Returns host NumPy arrays, the N layers stacked first:
        "encoder_self":    (N, h, S, S)   encoder self-attention
        "decoder_self":    (N, h, T, T)   decoder masked self-attention (lower-triangular)
        "encoder_decoder": (N, h, T, S)   decoder queries over the encoder output
    with a leading batch axis after N, (N, B, h, ...), when the inputs are 2-D.
    Row i of a map is query position i; it sums to 1 over the keys it may
    attend to, and padded / future keys get exactly 0.

    The weights are read from the layers' forward caches
    (``layer.self_attn._cache.attn.A``), which are cleared afterwards: do not
    call this between a training forward and its backward.
    """
    import numpy  # noqa: PLC0415

    from . import backend  # noqa: PLC0415
    from .decoding import eval_mode  # noqa: PLC0415

    xp = backend.get_array_module(model.E.data)

    def as_ids(ids):
        if isinstance(ids, (list, tuple)):
            ids = numpy.asarray(ids, dtype=numpy.int64)
        return xp.asarray(ids).astype(xp.int64)

    src, tgt = as_ids(src_ids), as_ids(tgt_in_ids)
    if src.ndim != tgt.ndim or src.ndim not in (1, 2):
        raise ValueError(f"attention_weights: src_ids and tgt_in_ids must both be 1-D (one sentence) or "
                         f"2-D (B, length), got shapes {tuple(src.shape)} and {tuple(tgt.shape)}")
    single = src.ndim == 1
    if single:
        src, tgt = src[None, :], tgt[None, :]

    def grab(attn) -> numpy.ndarray:
        return backend.to_numpy(attn._cache.attn.A).copy()         # (B, h, S_q, S_k)

    with eval_mode(model):
        model.forward(src, tgt)
        out = {
            "encoder_self": numpy.stack([grab(layer.self_attn) for layer in model.encoder.layers]),
            "decoder_self": numpy.stack([grab(layer.self_attn) for layer in model.decoder.layers]),
            "encoder_decoder": numpy.stack([grab(layer.cross_attn) for layer in model.decoder.layers]),
        }
    for layer in model.modules():       # a stray backward now fails loudly instead of using these
        layer._cache = None
    if single:
        out = {k: v[:, 0] for k, v in out.items()}
    return out


# Fonts that cover Hangul and other CJK scripts, best first. matplotlib's
# default DejaVu Sans has none of them; without one, Korean labels are boxes.
_CJK_FAMILIES = ("Noto Sans CJK KR", "Noto Sans KR", "Noto Sans CJK JP", "Noto Sans CJK SC",
                 "NanumGothic", "Nanum Gothic", "UnDotum", "Baekmuk Gulim", "Unifont", "Droid Sans Fallback")
_CJK_FILE_HINTS = ("notosanscjk", "notosanskr", "nanum", "undotum", "baekmuk", "unifont", "droidsansfallback")
_font_cache: list[str] | None = None


def label_fonts() -> list[str]:
    """Font families for token labels: DejaVu Sans, then a CJK font if one is installed.

    matplotlib (≥ 3.6) falls back glyph by glyph along this list. Fonts
    installed after matplotlib built its font cache are found by file name
    and registered. Returns ["DejaVu Sans"] alone when no CJK font exists.
    """
    global _font_cache
    if _font_cache is None:
        from matplotlib import font_manager  # noqa: PLC0415

        def known() -> set[str]:
            return {f.name for f in font_manager.fontManager.ttflist}

        names = known()
        if not any(name in names for name in _CJK_FAMILIES):
            try:
                for path in font_manager.findSystemFonts():
                    base = os.path.basename(path).lower().replace("-", "").replace("_", "")
                    if any(hint in base for hint in _CJK_FILE_HINTS) and "bold" not in base:
                        try:
                            font_manager.fontManager.addfont(path)
                        except Exception:  # noqa: BLE001 - an unreadable font file: skip it
                            pass
            except Exception:  # noqa: BLE001 - no font directories at all
                pass
            names = known()
        _font_cache = ["DejaVu Sans"] + [name for name in _CJK_FAMILIES if name in names][:1]
    return list(_font_cache)


def display_token(token: str) -> str:
    """A token as an axis label: the char-level space marker "▁" shows as "␣"."""
    from .data.vocab import SPACE  # noqa: PLC0415

    return token.replace(SPACE, "\u2423")


def _draw_attention_grid(plt, maps, row_labels, col_labels, title: str):
    """One figure: N rows (layers) × h columns (heads) of heatmaps, one shared colorbar."""
    n_layers, n_heads, n_rows, n_cols = maps.shape
    n = max(n_rows, n_cols)
    fontsize = max(6.5, min(10.0, 12.0 - n / 4.0))              # smaller labels for longer sentences
    per_token = max(0.17, min(0.32, 3.0 / max(n, 1)))            # inches per token, > the label height
    longest = max([len(t) for t in list(row_labels) + list(col_labels)] + [1])
    label_in = longest * fontsize * 0.62 / 72                    # room the rotated/left labels take
    cell_w = max(1.6, per_token * n_cols) + label_in
    cell_h = max(1.6, per_token * n_rows) + label_in
    fig, axes = plt.subplots(n_layers, n_heads, figsize=(cell_w * n_heads + 1.2, cell_h * n_layers + 0.8),
                             squeeze=False, layout="constrained")
    image = None
    for i in range(n_layers):
        for j in range(n_heads):
            ax = axes[i, j]
            image = ax.imshow(maps[i, j], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto",
                              interpolation="nearest")
            ax.set_xticks(range(n_cols))
            ax.set_xticklabels(col_labels, rotation=90, fontsize=fontsize)
            ax.set_yticks(range(n_rows))
            ax.set_yticklabels(row_labels, fontsize=fontsize)
            ax.tick_params(length=2, pad=1)
            ax.set_title(f"layer {i + 1}, head {j + 1}", fontsize=max(fontsize, 8))
    fig.colorbar(image, ax=axes, shrink=0.7, aspect=40, label="attention weight")
    fig.suptitle(title, fontsize=10)
    return fig


def save_attention_maps(model, vocab, src_tokens, out_dir: str, src_level: str = "word",
                        tgt_level: str = "word", beam_size: int = 4) -> list[str]:
    """Translate one sentence and save its attention weights as three heatmap PNGs.

    src_tokens: the tokenized source sentence (``data.vocab.tokenize(text, src_level)``).
    The sentence is decoded (greedy for beam_size 1, else beam search), then
    the model is run once more, teacher-forced on its own output, and every
    layer's and head's weights are drawn: ``encoder_self.png`` (S × S),
    ``decoder_self.png`` (T × T) and ``encoder_decoder.png`` (T × S), each a
    grid of N rows (layers) × h columns (heads). Decoder rows are labelled
    with the decoder *input*, "<bos>" + output tokens: the row of a token is
    where the model predicts the token after it (the last row predicts <eos>).
    Returns the paths written (each written atomically).
    """
    import warnings  # noqa: PLC0415

    import matplotlib  # noqa: PLC0415

    from . import train  # noqa: PLC0415
    from .data.vocab import BOS, detokenize  # noqa: PLC0415
    from .train import decode_ids  # noqa: PLC0415

    encode_source = getattr(train, "encode_source", None)

    src_tokens = list(src_tokens)
    if not src_tokens:
        raise ValueError("save_attention_maps: the source sentence is empty")
    output = decode_ids(model, vocab, [src_tokens], beam_size=beam_size)[0]
    # The decoder input is <bos> + output. An output that ran to the length cap
    # (cfg.max_len tokens, no <eos>) has one token more than the positional
    # table covers; its last token was never a decoder input, so drop it here.
    dec_tokens = ([BOS] + list(output))[: model.cfg.max_len]
    # Encode the source exactly as training and decoding do (train.encode_source
    # may append <eos>): the encoder must see what it was trained on.
    src_ids = encode_source(vocab, src_tokens) if encode_source else vocab.encode(src_tokens)
    weights = attention_weights(model, src_ids, vocab.encode(dec_tokens))
    src_labels = [display_token(t) for t in src_tokens] + [vocab.token(i) for i in src_ids[len(src_tokens):]]
    dec_labels = [display_token(t) for t in dec_tokens]
    axes_labels = {
        "encoder_self": (src_labels, src_labels),
        "decoder_self": (dec_labels, dec_labels),
        "encoder_decoder": (dec_labels, src_labels),
    }
    decoder = "greedy" if beam_size == 1 else f"beam {beam_size}"
    sentence = f"{detokenize(src_tokens, src_level)!r} → {detokenize(output, tgt_level)!r} ({decoder})"
    os.makedirs(out_dir, exist_ok=True)
    plt = _pyplot()
    paths = []
    with warnings.catch_warnings(), matplotlib.rc_context({"font.family": label_fonts()}):
        # Without a CJK font (see label_fonts) Hangul labels are drawn as boxes;
        # the docs say so, instead of a warning per glyph and subplot.
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from")
        warnings.filterwarnings("ignore", message=r".*missing from (current )?font")
        for kind in ATTENTION_KINDS:
            rows, cols = axes_labels[kind]
            fig = _draw_attention_grid(plt, weights[kind], rows, cols, f"{_ATTENTION_TITLES[kind]}\n{sentence}")
            path = os.path.join(out_dir, f"{kind}.png")
            save_figure(fig, path)
            plt.close(fig)
            paths.append(path)
    return paths
