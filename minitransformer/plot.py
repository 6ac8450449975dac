"""Pictures: the loss curve of a training run, and attention heatmaps.

This module only draws: it takes arrays (or metric records) and labels, never
models or vocabularies (``translate.save_attention_maps`` runs a model and
hands its weights here). matplotlib is imported with the non-interactive Agg
backend when no display is set, so these work on a headless machine and in CI.
"""

from __future__ import annotations

import io
import os
import warnings

from .files import atomic_write_bytes


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


def loss_label(eps_ls: float) -> str:
    """The name of the training loss for a run with label smoothing eps_ls."""
    return f"label-smoothed cross-entropy (eps_ls = {eps_ls:g})" if eps_ls > 0 else "cross-entropy"


def plot_loss_curve(records: list[dict], png_path: str, eps_ls: float) -> None:
    """Training loss (and validation loss, where logged) against step.

    eps_ls: the run's label smoothing (§5.4); the y-axis names the loss that was
    minimised, plain cross-entropy when it is 0.

    records: metric dicts as ``train.Trainer`` logs them, each with "step" and
    "loss" and/or "valid_loss" (the lines of metrics.jsonl).
    """
    plt = _pyplot()
    # A window of skipped steps logs loss null (metrics.jsonl has no NaN): left out here.
    train = [(r["step"], r["loss"]) for r in records if r.get("loss") is not None]
    valid = [(r["step"], r["valid_loss"]) for r in records if r.get("valid_loss") is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if train:
        ax.plot(*zip(*train), label="train loss")
    if valid:
        ax.plot(*zip(*valid), "o-", label="valid loss")
    ax.set_xlabel("step")
    ax.set_ylabel(loss_label(eps_ls))
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, png_path)
    plt.close(fig)


# -- attention heatmaps ----------------------------------------------------------------

ATTENTION_KINDS = ("encoder_self", "decoder_self", "encoder_decoder")

# Fonts that cover Hangul and other CJK scripts, best first. matplotlib's
# default DejaVu Sans has none of them; without one, Korean labels are boxes.
_CJK_FAMILIES = ("NanumGothic", "Nanum Gothic", "Noto Sans CJK KR", "Noto Sans KR", "Noto Sans CJK JP",
                 "Noto Sans CJK SC", "UnDotum", "Baekmuk Gulim", "Unifont", "Droid Sans Fallback")
_CJK_FILE_HINTS = ("notosanscjk", "notosanskr", "nanum", "undotum", "baekmuk", "unifont", "droidsansfallback")
# A font that ships inside a pip package, so the learner's install has one on any machine:
# NanumGothic (SIL Open Font License) in the koreanize-matplotlib wheel (the [lessons] extra).
# Only its .ttf file is read; the package is never imported, because importing it
# changes matplotlib's global settings.
_PACKAGED_FONTS = (("koreanize_matplotlib", "fonts/NanumGothic.ttf"),)
_font_cache: list[str] | None = None


def _packaged_font_files() -> list[str]:
    """Paths of the CJK fonts shipped inside installed packages (see _PACKAGED_FONTS)."""
    import importlib.util  # noqa: PLC0415

    paths = []
    for package, relative in _PACKAGED_FONTS:
        spec = importlib.util.find_spec(package)          # finds the package without importing it
        for folder in (spec.submodule_search_locations or []) if spec else []:
            path = os.path.join(folder, relative)
            if os.path.exists(path):
                paths.append(path)
    return paths


def label_fonts() -> list[str]:
    """Font families for token labels: DejaVu Sans, then a CJK font if one can be found.

    matplotlib (≥ 3.6) falls back glyph by glyph along this list. A font shipped
    in a package (_PACKAGED_FONTS) is registered first; otherwise system fonts
    installed after matplotlib built its font cache are found by file name and
    registered. Returns ["DejaVu Sans"] alone when no CJK font exists: the
    heatmaps then say so in their title (save_attention_grid).
    """
    global _font_cache
    if _font_cache is None:
        from matplotlib import font_manager  # noqa: PLC0415

        def known() -> set[str]:
            return {f.name for f in font_manager.fontManager.ttflist}

        def register(paths) -> None:
            for path in paths:
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):   # an unreadable font file: skip it
                    pass

        register(_packaged_font_files())
        names = known()
        if not any(name in names for name in _CJK_FAMILIES):
            try:
                system = font_manager.findSystemFonts()
            except OSError:                                    # no font directories at all
                system = []
            register(path for path in system
                     if any(hint in os.path.basename(path).lower().replace("-", "").replace("_", "")
                            for hint in _CJK_FILE_HINTS) and "bold" not in os.path.basename(path).lower())
            names = known()
        _font_cache = ["DejaVu Sans"] + [name for name in _CJK_FAMILIES if name in names][:1]
    return list(_font_cache)


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


def save_attention_grid(maps, row_labels, col_labels, title: str, path: str) -> None:
    """Draw ``maps`` (N, h, rows, cols) as an N × h grid of heatmaps and save it as PNG.

    row_labels / col_labels: the tokens along each axis (len rows / len cols).
    Token labels use ``label_fonts()``: with no CJK font installed, Hangul and
    other CJK labels would be boxes, so the title then says so.
    """
    import matplotlib  # noqa: PLC0415

    fonts = label_fonts()
    if len(fonts) == 1 and any(_is_cjk(ch) for label in list(row_labels) + list(col_labels) for ch in label):
        title += "\n(no CJK font found on this machine: CJK labels are drawn as boxes)"
    plt = _pyplot()
    with warnings.catch_warnings(), matplotlib.rc_context({"font.family": fonts}):
        # Missing glyphs are reported once, in the title, not once per glyph and subplot.
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from")
        warnings.filterwarnings("ignore", message=r".*missing from (current )?font")
        fig = _draw_attention_grid(plt, maps, row_labels, col_labels, title)
        save_figure(fig, path)
        plt.close(fig)


def _is_cjk(ch: str) -> bool:
    """Hangul, CJK ideographs, kana: the scripts DejaVu Sans cannot draw."""
    code = ord(ch)
    return (0x1100 <= code <= 0x11FF or 0x3040 <= code <= 0x30FF or 0x3130 <= code <= 0x318F
            or 0x4E00 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF)
