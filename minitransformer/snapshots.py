"""The last K checkpoints of a run, kept for checkpoint averaging (§6.1): ``train --keep-last K``.

§6.1: "For the base models, we used a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals." A run with ``keep_last`` set
gives every checkpoint it writes at its interval (each validation, each
``checkpoint_every`` steps, and the last step) a second name,

    checkpoint.step000500.npz, checkpoint.step001000.npz, ...

(six digits, so that ``ls`` lists them in step order up to 999,999 steps), and removes
the oldest beyond K. The second name is a hard link to the checkpoint just written
(``files.atomic_second_name``): no second copy is written, and it appears atomically.
``python -m minitransformer average runs/X/checkpoint.step*.npz -o avg.npz`` averages them;
a run with ``average_last`` K (``train --average-last K``) does it itself at its last step,
into ``average.npz`` beside its checkpoint (``write_average``).
"""

from __future__ import annotations

import os
import re

from .files import atomic_second_name, previous_path
from .runlock import LOCK_NAME

# What a run writes into its folder: its checkpoint (the one it replaces kept as checkpoint.prev.npz),
# its log and its loss curve; with keep_last, the kept step files; with average_last, the average.
CHECKPOINT_FILE, METRICS_FILE, LOSS_CURVE_FILE = "checkpoint.npz", "metrics.jsonl", "loss.png"
STEP_FILE = "checkpoint.step{step:06d}.npz"
AVERAGE_FILE = "average.npz"
_STEP_FILE = re.compile(r"^checkpoint\.step(\d+)\.npz$")


def step_path(out_dir: str, step: int) -> str:
    """``out_dir/checkpoint.stepNNNNNN.npz``, the kept checkpoint of ``step``."""
    return os.path.join(out_dir, STEP_FILE.format(step=step))


def output_files(out_dir: str) -> list[str]:
    """Every file a run writes (or replaces) in ``out_dir``; none of them may be an input of the run
    (``files.refuse_inputs``: ``train --data OUT/metrics.jsonl --out OUT`` is refused)."""
    names = [CHECKPOINT_FILE, previous_path(CHECKPOINT_FILE), METRICS_FILE, LOSS_CURVE_FILE, AVERAGE_FILE, LOCK_NAME]
    return [os.path.join(out_dir, name) for name in names] + [path for _, path in kept_checkpoints(out_dir)]


def kept_checkpoints(out_dir: str) -> list[tuple[int, str]]:
    """(step, path) of every kept checkpoint in ``out_dir``, oldest first."""
    if not os.path.isdir(out_dir):
        return []
    found = []
    for name in os.listdir(out_dir):
        match = _STEP_FILE.match(name)
        if match and os.path.isfile(os.path.join(out_dir, name)):
            found.append((int(match.group(1)), os.path.join(out_dir, name)))
    return sorted(found)


def keep(checkpoint: str, out_dir: str, step: int, keep_last: int) -> list[str]:
    """Keep the checkpoint just written (``checkpoint``, of ``step``) as ``step_path(out_dir, step)``,
    then remove the oldest kept ones until ``keep_last`` remain; returns the paths removed."""
    atomic_second_name(checkpoint, step_path(out_dir, step))
    old = kept_checkpoints(out_dir)[:-keep_last]
    for _, path in old:
        os.unlink(path)
    return [path for _, path in old]


def drop_after(out_dir: str, step: int) -> list[str]:
    """Remove the kept checkpoints of steps after ``step`` (a run resumed at ``step``, or started afresh
    at 0, writes those steps again: a mix of two runs' checkpoints must not be averaged). Returns them."""
    later = [path for k, path in kept_checkpoints(out_dir) if k > step]
    for path in later:
        os.unlink(path)
    return later


def write_average(out_dir: str, k: int) -> tuple[str, list[int]]:
    """Average the last ``k`` kept checkpoints of ``out_dir`` (fewer if fewer are kept) into
    ``out_dir/average.npz``, atomically; returns (its path, the steps averaged)."""
    from .average import average_checkpoints, save_average  # noqa: PLC0415  (average imports the model)
    from .checkpoint import load_checkpoint  # noqa: PLC0415

    last = kept_checkpoints(out_dir)[-k:]
    if not last:
        raise FileNotFoundError(f"{out_dir} has no kept checkpoints (checkpoint.stepNNNNNN.npz) to average")
    path = os.path.join(out_dir, AVERAGE_FILE)
    save_average(path, average_checkpoints([load_checkpoint(p) for _, p in last]))
    return path, [step for step, _ in last]


__all__ = ["CHECKPOINT_FILE", "METRICS_FILE", "LOSS_CURVE_FILE", "STEP_FILE", "AVERAGE_FILE", "output_files",
           "step_path", "kept_checkpoints", "keep", "drop_after", "write_average"]
