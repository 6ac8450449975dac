"""Pictures: the loss curve of a training run, and attention heatmaps.

matplotlib is imported with the non-interactive Agg backend when no display
is set, so these work on a headless machine and in CI.
"""

from __future__ import annotations

import io
import json

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
