"""What each lesson costs to run, as ``lessons/build.py`` measured it the last time it executed it.

``python lessons/build.py NN`` times every cell of lesson NN while it executes it and writes the
lesson's entry of ``lessons/runtimes.json`` (format below). Every lesson shows its cost at its top
with ``show_cost("NN")``, and flags each cell over ``SLOW_CELL_SECONDS`` with
``show_slow_cell("NN", "label")`` in a small cell just before it; the slow cell itself begins with
the line ``# slow: label``. Both render from the record, never from typed numbers, and the build
re-renders them after it has written the record, so the notebook shows the run it comes from
(tests/test_runtimes.py checks that every committed notebook does). No test times anything.

The record, ``lessons/runtimes.json``::

    {"format": 1, "about": "...", "slow_cell_seconds": 20,
     "lessons": {"09": {"notebook": "09_training.ipynb",
                        "seconds": 131.2,                 # the whole lesson, wall clock, kernel start excluded
                        "date": "2026-12-02 10:00 UTC",
                        "commit": "<40 hex>", "dirty": true,   # HEAD when it ran; true: with uncommitted changes
                        "machine": {... machine.machine_info() ...},
                        "load_average": {"start": [1, 5, 15 min], "end": [...]},
                        "timeout": 600,                   # the per-cell limit it ran under
                        "cells": [{"index": 41, "seconds": 80.3, "label": "the copy run of §7"}, ...]}}}

``cells`` lists every code cell that took at least ``LISTED_CELL_SECONDS`` (its index in the notebook,
its seconds, and its ``# slow:`` label or null).
"""

from __future__ import annotations

import json
import pathlib
import time

from .i18n import language, tr, tr_label
from .prose import show_markdown

__all__ = ["LISTED_CELL_SECONDS", "RECORD_NAME", "SLOW_CELL_SECONDS", "cost_markdown", "format_seconds",
           "load", "record_path", "show_cost", "show_slow_cell", "slow_cell_markdown", "slow_label"]

RECORD_NAME = "runtimes.json"
SLOW_CELL_SECONDS = 20.0        # a cell that takes longer is flagged before it runs
LISTED_CELL_SECONDS = 5.0       # cells at least this slow are listed in the record
SLOW_MARK = "# slow:"           # the first line of a slow cell: "# slow: <label>"
# The repository's lessons folder (an editable install): where the record lives when the kernel's
# folder (lessons/, a student edition, the grader's) has no copy.
_REPO_LESSONS = pathlib.Path(__file__).resolve().parents[1] / "lessons"


def record_path() -> pathlib.Path | None:
    """runtimes.json in the current folder (a lesson runs in lessons/, or beside a copy), else the
    repository's; None if neither exists."""
    for path in (pathlib.Path(RECORD_NAME), _REPO_LESSONS / RECORD_NAME):
        if path.is_file():
            return path
    return None


def load(path: pathlib.Path | str | None = None) -> dict:
    """The record (an empty one if there is none yet)."""
    path = record_path() if path is None else pathlib.Path(path)
    if path is None or not path.is_file():
        return {"format": 1, "lessons": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def slow_label(source: str) -> str | None:
    """The label of a cell that begins with ``# slow: <label>``, else None."""
    first = source.lstrip("\n").split("\n", 1)[0].strip()
    if first.startswith(SLOW_MARK):
        return first[len(SLOW_MARK):].strip() or None
    return None


def format_seconds(seconds: float) -> str:
    """12 s, 2 min 05 s, 1 h 02 min."""
    s = round(seconds)
    if s < 90:
        return tr(f"{max(seconds, 0):.0f} s") if seconds >= 1 else tr(f"{seconds:.1f} s")
    if s < 3600:
        return tr(f"{s // 60} min {s % 60:02d} s")
    return tr(f"{s // 3600} h {s % 3600 // 60:02d} min")


def _machine_words(entry: dict) -> str:
    m = entry.get("machine", {})
    load = entry.get("load_average", {})
    start, end = (load.get("start") or [None])[0], (load.get("end") or [None])[0]
    cores, cpu = m.get("cores"), m.get("cpu", "unknown CPU")
    words = tr(f"a {cores}-core CPU ({cpu}") if cores else tr(f"a CPU ({cpu}")
    if start is not None and end is not None:
        busy = cores and max(start, end) > 1.5 * cores
        words += tr(f", load average {start:.1f} at the start and {end:.1f} at the end")
        words += tr(": other jobs shared its cores, so an idle machine is faster)") if busy else ")"
    else:
        words += ")"
    return words


def _when(entry: dict) -> str:
    commit = (entry.get("commit") or "")[:7] or "no commit"
    dirty = tr(" with uncommitted changes") if entry.get("dirty") else ""
    return tr(f"on {entry.get('date', 'an unknown date')}, at commit {commit}{dirty}")


def cost_markdown(lesson: str, record: dict | None = None) -> str:
    """The sentence at the top of lesson ``lesson`` ("09"): its runtime and its slow cells, from the record."""
    record = load() if record is None else record
    entry = record.get("lessons", {}).get(lesson)
    if entry is None:
        return tr(f"**Runtime:** not recorded yet (`python lessons/build.py {lesson}` measures it and writes "
                  f"`lessons/{RECORD_NAME}`).")
    text = tr(f"**Runtime: {format_seconds(entry['seconds'])}** on {_machine_words(entry)}, top to bottom, as "
              f"`python lessons/build.py {lesson}` measured it {_when(entry)}.")
    slow = [c for c in entry.get("cells", []) if c["seconds"] >= record.get("slow_cell_seconds", SLOW_CELL_SECONDS)]
    if slow:
        items = "; ".join(f"{_cell_name(c)} ({format_seconds(c['seconds'])})" for c in slow)
        limit = format_seconds(record.get("slow_cell_seconds", SLOW_CELL_SECONDS))
        text += tr(f" Cells over {limit}, each flagged where it comes: {items}.")
    else:
        text += tr(f" No cell takes over {format_seconds(record.get('slow_cell_seconds', SLOW_CELL_SECONDS))}.")
    return text


def _cell_name(cell: dict) -> str:
    if cell.get("label"):
        return tr_label(cell["label"])
    index = cell["index"]
    return tr(f"cell {index}")


def slow_cell_markdown(lesson: str, label: str, record: dict | None = None) -> str:
    """The flag shown just before the slow cell labelled ``label`` of lesson ``lesson``."""
    record = load() if record is None else record
    entry = record.get("lessons", {}).get(lesson)
    cell = next((c for c in (entry or {}).get("cells", []) if c.get("label") == label), None)
    name = tr_label(label)
    if cell is None:
        return tr(f"**Slow cell ahead** ({name}): its time is not recorded yet "
                  f"(`python lessons/build.py {lesson}`).")
    return tr(f"**Slow cell ahead: the next cell ({name}) took {format_seconds(cell['seconds'])}** when the "
              f"lesson was last built, on {_machine_words(entry)}.")


def show_cost(lesson: str) -> None:
    """Display the lesson's runtime (``cost_markdown``): the first code cell of every lesson. It first
    settles the lesson's edition (``i18n.language``: a translated edition's kernel moves to the lessons
    folder, where the record and the lessons' files are)."""
    language()
    show_markdown(cost_markdown(lesson))


def show_slow_cell(lesson: str, label: str) -> None:
    """Display the flag of the slow cell ``label`` (``slow_cell_markdown``): the cell before it."""
    show_markdown(slow_cell_markdown(lesson, label))


def now_utc() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
