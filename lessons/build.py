"""Build the lesson notebooks from their sources, and run them.

    python lessons/build.py                 # every lesson: write the notebook and execute it
    python lessons/build.py 03 08           # only lessons 3 and 8
    python lessons/build.py --no-execute    # write the notebooks without running them (no outputs)
    python lessons/build.py --check         # only verify that every notebook matches its source

A lesson is a file ``lessons/NN_name.py`` in jupytext's percent format (``# %%`` starts a
code cell, ``# %% [markdown]`` a markdown cell) that begins with a jupytext header. Its
notebook ``NN_name.ipynb`` sits next to it and is committed with its outputs, so that it
reads well on the web. Edit the ``.py`` and rebuild; never edit the ``.ipynb`` by hand.

Each notebook runs on a fresh ``python3`` kernel in the ``lessons/`` folder, as
``pytest --nbmake lessons`` runs it. Cell ids come from the lesson number and a hash of
the cell, so rebuilding an unchanged lesson rewrites the same bytes, apart from outputs
that really changed.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import pathlib
import sys
import time

import jupytext
import nbformat
from nbclient import NotebookClient

from minitransformer.files import atomic_write_bytes

HERE = pathlib.Path(__file__).resolve().parent
HEADER = "# ---\n# jupyter:\n#   jupytext:\n"       # what jupytext writes at the top of a paired .py


def is_lesson(path: pathlib.Path) -> bool:
    """NN_name.py with a jupytext header (debug_attention.py, build.py, ... are not lessons)."""
    return path.name[:2].isdigit() and path.name[2] == "_" and path.read_text().startswith(HEADER)


def lessons(folder: pathlib.Path = HERE) -> dict[str, pathlib.Path]:
    """{"03": lessons/03_feed_forward.py, ...}, in order."""
    found: dict[str, pathlib.Path] = {}
    for path in sorted(folder.glob("[0-9][0-9]_*.py")):
        if is_lesson(path):
            if path.name[:2] in found:
                raise SystemExit(f"lessons {found[path.name[:2]].name} and {path.name} share a number")
            found[path.name[:2]] = path
    return found


def notebook(source: pathlib.Path) -> nbformat.NotebookNode:
    """Read a lesson's .py into a notebook without outputs, with stable cell ids."""
    nb = jupytext.read(source)
    nb.metadata.get("jupytext", {}).pop("text_representation", None)   # holds jupytext's version: noise
    seen: dict[str, int] = {}
    for cell in nb.cells:
        digest = hashlib.sha1(f"{cell.cell_type}\n{cell.source}".encode()).hexdigest()[:8]
        seen[digest] = seen.get(digest, 0) + 1                      # identical cells: -2, -3, ...
        cell.id = f"l{source.name[:2]}-{digest}" + (f"-{seen[digest]}" if seen[digest] > 1 else "")
    nbformat.validate(nb)
    return nb


def first_difference(source: pathlib.Path, ipynb: pathlib.Path) -> str | None:
    """None if the notebook holds the source's cells (types and sources; outputs and
    metadata are ignored), else a sentence naming the lesson and the first differing cell."""
    if not ipynb.exists():
        return f"{source.name} has no notebook {ipynb.name}: run python lessons/build.py {source.name[:2]}"
    want = [(c.cell_type, c.source) for c in jupytext.read(source).cells]
    have = [(c.cell_type, c.source) for c in nbformat.read(ipynb, as_version=4).cells]
    for i, (w, h) in enumerate(zip(want, have)):
        if w[0] != h[0]:
            return (f"{ipynb.name} differs from {source.name} at cell {i} "
                    f"(type: {h[0]} in the notebook, {w[0]} in the source)")
        if w[1] != h[1]:
            lines = itertools.zip_longest(w[1].split("\n"), h[1].split("\n"), fillvalue="(no line)")
            n, (w_line, h_line) = next((n, pair) for n, pair in enumerate(lines) if pair[0] != pair[1])
            return (f"{ipynb.name} differs from {source.name} at cell {i} (source, line {n + 1} of the cell: "
                    f"{w_line[:60]!r} in the source, {h_line[:60]!r} in the notebook)")
    if len(want) != len(have):
        return f"{ipynb.name} has {len(have)} cells, {source.name} has {len(want)}"
    return None


def orphans(folder: pathlib.Path = HERE) -> list[str]:
    """Notebooks NN_*.ipynb in lessons/ without a lesson source."""
    sources = {p.stem for p in lessons(folder).values()}
    return [f"{p.name} has no source {p.stem}.py (with a jupytext header)"
            for p in sorted(folder.glob("[0-9][0-9]_*.ipynb")) if p.stem not in sources]


def merge_streams(nb: nbformat.NotebookNode) -> None:
    """Join consecutive stdout (or stderr) outputs of a cell: how printed text is split into
    messages depends on timing, and must not make two builds of one lesson differ."""
    for cell in nb.cells:
        merged = []
        for out in cell.get("outputs", []):
            if merged and out.output_type == "stream" and merged[-1].output_type == "stream" \
                    and merged[-1].name == out.name:
                merged[-1].text += out.text
            else:
                merged.append(out)
        if "outputs" in cell:
            cell.outputs = merged


def build(source: pathlib.Path, execute: bool) -> None:
    nb = notebook(source)
    t0 = time.perf_counter()
    if execute:
        NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": str(HERE)}}).execute()
        merge_streams(nb)
    path = source.with_suffix(".ipynb")
    text = nbformat.writes(nb)
    atomic_write_bytes(str(path), (text if text.endswith("\n") else text + "\n").encode())  # as nbformat.write does
    print(f"{path.name}: {'executed in %.1f s, ' % (time.perf_counter() - t0) if execute else ''}"
          f"{path.stat().st_size / 1024:.0f} KB", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("numbers", nargs="*", help="lesson numbers, e.g. 03 8 (default: every lesson)")
    parser.add_argument("--no-execute", action="store_true", help="write the notebooks without running them")
    parser.add_argument("--check", action="store_true", help="only check that every notebook matches its source")
    args = parser.parse_args(argv)
    found = lessons()
    chosen = [n.zfill(2) for n in args.numbers] or list(found)
    unknown = [n for n in chosen if n not in found]
    if unknown:
        parser.error(f"no lesson {', '.join(unknown)} in lessons/ (there are {', '.join(found)})")
    if args.check:
        problems = [d for n in chosen if (d := first_difference(found[n], found[n].with_suffix(".ipynb")))]
        problems += orphans() if not args.numbers else []
        print("\n".join(problems) or f"{len(chosen)} notebooks match their sources", file=sys.stderr)
        return 1 if problems else 0
    for n in chosen:
        build(found[n], execute=not args.no_execute)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
