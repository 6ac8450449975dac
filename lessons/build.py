"""Build the lesson notebooks from their sources, and run them.

    python lessons/build.py                 # every lesson: write the notebook and execute it
    python lessons/build.py 03 08           # only lessons 3 and 8
    python lessons/build.py --no-execute    # write the notebooks without running them (outputs kept, see below)
    python lessons/build.py --check         # only verify that every notebook matches its source and its runtime record
    python lessons/build.py --student DIR   # write the student edition of every lesson into DIR
    python lessons/build.py --table         # print the lessons' table (number, title, section, runtime) as Markdown
    python lessons/build.py 03 --lang ko    # only the Korean edition (lessons/ko/, lessons/editions.py); en: only English
    python lessons/build.py 03 --drift      # for translators: what keeps the Korean edition out of step, and why

Building and checking cover both editions: the English one and, for each lesson translated so far, the
Korean one (``lessons/ko/NN_name.ipynb``, from the English code cells and ``lessons/ko/src/NN_name.toml``;
``lessons/editions.py`` and docs/translating.md say how). ``--student DIR --lang ko`` writes the Korean
student edition into ``DIR/ko/``.

A lesson's source is ``lessons/src/NN_name.py``, in jupytext's percent format (``# %%``
starts a code cell, ``# %% [markdown]`` a markdown cell), beginning with a jupytext header.
Its notebook ``lessons/NN_name.ipynb`` is what learners open; it is committed with its
outputs, so that it reads well on the web. Edit the ``.py`` and rebuild; never edit the
``.ipynb`` by hand. (The sources live in ``src/`` so that JupyterLab lists each lesson once;
the header's ``formats: ipynb,src//py:percent`` tells jupytext, where it is installed, that
the two files are a pair.)

Each notebook runs on a fresh ``python3`` kernel in the ``lessons/`` folder, as
``pytest --nbmake lessons`` runs it. Cell ids come from the lesson number and a hash of
the cell, so rebuilding an unchanged lesson rewrites the same bytes, apart from outputs
that really changed. ``--no-execute`` keeps, for every cell whose id (so type and source)
is unchanged, the outputs of the notebook it replaces, and says which lessons have cells
that changed and need executing; a change of tags or of markdown alone needs no run.

Cells are tagged (lessons/src/README.md has the convention): ``stub`` (the cell a learner fills in),
``check`` (its checking cell), ``solution`` (solutions and what uses them), ``predict`` (the cell where
the learner writes a prediction, ``my_prediction_L_n = None``) and ``reveal`` (a cell whose output gives
an answer away: the result the learner was asked to predict, compared with the prediction by
``lessonkit.predict.reveal``, or the package's own code for an exercise). The notebooks in
lessons/ are the teacher's edition: everything, executed. ``--student DIR`` derives the
student edition from them (no kernel runs): solution cells removed, reveal cells marked
"run this after you have written your answer", the outputs of stub, check and reveal
cells cleared, and a header saying what the edition is and how to check an answer. DIR also
gets the files the notebooks read (experiments/, debug_attention.py, runtimes.json), so it runs on
its own, and a copy of docs/*.md, which the notebooks' links to docs/ open (lessonkit/links.py).

**Runtimes.** Executing a lesson times each of its cells and writes the lesson's entry of
``lessons/runtimes.json`` (seconds for the lesson and for every cell over 5 s, date, commit, machine,
load average; ``lessonkit.runtimes`` documents the format). Each lesson shows that
figure at its top (``show_cost("NN")``) and flags every cell over 20 s just before it
(``show_slow_cell("NN", label)``, the slow cell beginning with ``# slow: label``); after writing the
record the build re-renders those cells' outputs from it, so the notebook states the runtime of the
run that produced it. ``python lessons/build.py`` (no numbers) rebuilds every lesson and its record in
one go: run it on a quiet machine before a release. ``--table`` (and ``lesson_table()``) renders the
lessons' table from the sources' titles and the record.

A notebook opens unmodified in JupyterLab: the kernelspec is written exactly as JupyterLab
writes it when the ``python3`` kernel starts (``display_name`` "Python 3 (ipykernel)", as
ipykernel installs it) and ``language_info`` is the kernel's own (see KERNELSPEC).
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import importlib.util
import itertools
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import nbformat

from lessonkit import links, runtimes
from minitransformer.files import atomic_write_bytes, atomic_write_text
from minitransformer.machine import machine_info

# jupytext (reading the sources) and nbclient (executing) are imported where they are used:
# --student needs neither, so a teacher builds the student edition on the learner's install.

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = "src"                                    # lessons/src/NN_name.py -> lessons/NN_name.ipynb
HEADER = "# ---\n# jupyter:\n#   jupytext:\n"       # what jupytext writes at the top of a paired .py
# JupyterLab rewrites the notebook's kernelspec to {name, display_name, language} of the kernel it
# starts, and its language_info to the kernel's; if either differs from what the file holds, the
# notebook shows as modified (the dot on its tab) before the learner has touched it. ipykernel
# installs the python3 kernel as "Python 3 (ipykernel)"; a bare "Python 3" was the old cause.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}

TAGS = ("stub", "check", "solution", "reveal", "predict")   # lessons/src/README.md: what each one means
CLEARED_IN_STUDENT = ("stub", "check", "reveal", "predict")   # their outputs would show the answers
STUDENT_FILES = ("experiments", "debug_attention.py", runtimes.RECORD_NAME)  # what the notebooks read, copied beside them
REVEAL_LINE = "# Run this after you have written your answer (or prediction): its output gives it away."
STUDENT_HEADER = """\
> **Student edition** of lesson {lesson}: the solutions are left out, and so are the outputs of the
> exercise cells and of the cells that reveal what you are asked to predict.
>
> **Checking an answer.** Fill in the function of each exercise, then run the checking cell under it.
> It prints *not attempted yet* while your function returns `None`, stops with a `WrongAnswer` that
> says what is wrong (with a `hint:` line when your answer matches a common mistake), or prints
> `correct`. A cell that begins with `# Run this after you have written your answer` shows an answer: the
> package's own code for an exercise you are asked to write, or the outcome you are asked to predict. Write
> yours down first: a **Predict** cell (`my_prediction_... = None`) takes a number or a word, and the cell
> after it compares it with what the run gives.
>
> **Handing it in.** Run the whole notebook once more (*Kernel → Restart Kernel and Run All Cells*). It
> is graded with `python -m minitransformer grade {name}`: your functions are run again, on the inputs the
> checking cells use and on hidden ones of other sizes and values, and judged outside your notebook; what the
> notebook prints does not count, and a function that calls the package's own answer scores nothing. You can
> run that command yourself."""


def is_lesson(path: pathlib.Path) -> bool:
    """NN_name.py with a jupytext header."""
    return path.name[:2].isdigit() and path.name[2] == "_" and path.read_text().startswith(HEADER)


def lessons(folder: pathlib.Path = HERE) -> dict[str, pathlib.Path]:
    """{"03": lessons/src/03_feed_forward.py, ...}, in order (``folder`` is the lessons folder)."""
    found: dict[str, pathlib.Path] = {}
    for path in sorted((folder / SOURCES).glob("[0-9][0-9]_*.py")):
        if is_lesson(path):
            if path.name[:2] in found:
                raise SystemExit(f"lessons {found[path.name[:2]].name} and {path.name} share a number")
            found[path.name[:2]] = path
    return found


def notebook_path(source: pathlib.Path) -> pathlib.Path:
    """lessons/src/NN_name.py -> lessons/NN_name.ipynb"""
    return source.parent.parent / f"{source.stem}.ipynb"


def notebook(source: pathlib.Path) -> nbformat.NotebookNode:
    """Read a lesson's .py into a notebook without outputs, with stable cell ids."""
    import jupytext

    nb = jupytext.read(source)
    nb.metadata.get("jupytext", {}).pop("text_representation", None)   # holds jupytext's version: noise
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    seen: dict[str, int] = {}
    for cell in nb.cells:
        digest = hashlib.sha1(f"{cell.cell_type}\n{cell.source}".encode()).hexdigest()[:8]
        seen[digest] = seen.get(digest, 0) + 1                      # identical cells: -2, -3, ...
        cell.id = f"l{source.name[:2]}-{digest}" + (f"-{seen[digest]}" if seen[digest] > 1 else "")
        bad = [tag for tag in cell.metadata.get("tags", []) if tag not in TAGS]
        if bad:
            raise SystemExit(f"{source}: cell {cell.id} has tags {bad}; the tags a lesson uses are {', '.join(TAGS)}")
        if "reveal" in cell.metadata.get("tags", []) and cell.cell_type != "code":
            raise SystemExit(f"{source}: cell {cell.id} is a markdown cell tagged reveal; a reveal cell computes "
                             "its answer (a code cell)")
    nbformat.validate(nb)
    return nb


def first_difference(source: pathlib.Path, ipynb: pathlib.Path) -> str | None:
    """None if the notebook holds the source's cells (types and sources; outputs and
    metadata are ignored), else a sentence naming the lesson and the first differing cell."""
    import jupytext

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
    """Notebooks NN_*.ipynb in lessons/ without a lesson source, and sources left in lessons/ itself."""
    sources = {p.stem for p in lessons(folder).values()}
    found = [f"{p.name} has no source {SOURCES}/{p.stem}.py (with a jupytext header)"
             for p in sorted(folder.glob("[0-9][0-9]_*.ipynb")) if p.stem not in sources]
    found += [f"{p.name} is a lesson source outside {SOURCES}/: move it to {SOURCES}/{p.name}"
              for p in sorted(folder.glob("[0-9][0-9]_*.py")) if is_lesson(p)]
    return found


def carry_outputs(nb: nbformat.NotebookNode, old_path: pathlib.Path) -> list[int]:
    """Copy outputs, execution counts and language_info from the notebook at ``old_path`` into
    ``nb`` for every code cell with the same id (the same type and source). Returns the indices
    of the code cells that found no match: their outputs are missing until the lesson runs."""
    old = nbformat.read(old_path, as_version=4) if old_path.exists() else None
    by_id = {c.id: c for c in old.cells if c.cell_type == "code"} if old else {}
    if old is not None and "language_info" in old.metadata:
        nb.metadata["language_info"] = old.metadata["language_info"]
    changed = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.id in by_id:
            cell.outputs, cell.execution_count = by_id[cell.id].outputs, by_id[cell.id].execution_count
        elif cell.source.strip():
            changed.append(i)
    return changed


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


def write_notebook(nb: nbformat.NotebookNode, path: pathlib.Path) -> None:
    text = nbformat.writes(nb)
    atomic_write_bytes(str(path), (text if text.endswith("\n") else text + "\n").encode())  # as nbformat.write does


def build(source: pathlib.Path, execute: bool, timeout: int = 600, record: pathlib.Path | None = None) -> bool:
    """Write the lesson's notebook (executed, or with the outputs it had); False if it now lacks outputs.
    Executing also writes the lesson's entry of the runtime record (``record``, default
    lessons/runtimes.json) and re-renders the notebook's runtime cells from it."""
    nb, path = notebook(source), notebook_path(source)
    t0 = time.perf_counter()
    changed = []
    if execute:
        from nbclient import NotebookClient

        started, seconds = {}, {}
        load_start = _load()
        commit = _commit(source)                   # the code as it was when the run began

        def on_start(cell, cell_index):
            started[cell_index] = time.perf_counter()

        def on_done(cell, cell_index, execute_reply):
            seconds[cell_index] = time.perf_counter() - started[cell_index]

        NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                       on_cell_execute=on_start, on_cell_executed=on_done,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        merge_streams(nb)
        lesson = source.name[:2]
        record = record or path.parent / runtimes.RECORD_NAME
        entry = runtime_entry(nb, path, seconds, started, load_start, timeout, commit)
        entries = {**runtimes.load(record).get("lessons", {}), lesson: entry}
        data = {"format": 1, "about": RECORD_ABOUT, "slow_cell_seconds": runtimes.SLOW_CELL_SECONDS,
                "lessons": dict(sorted(entries.items()))}
        atomic_write_text(str(record), json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        render_runtime_cells(nb, lesson, data)
        for problem in runtime_problems(nb, lesson, data):
            print(f"{path.name}: {problem}", file=sys.stderr)
    else:
        changed = carry_outputs(nb, path)
    write_notebook(nb, path)
    note = f"executed in {time.perf_counter() - t0:.1f} s" if execute else (
        f"{len(changed)} code cells changed and have no outputs (first: cell {changed[0]}): "
        f"run python lessons/build.py {source.name[:2]}" if changed else "outputs kept")
    print(f"{path.name}: {note}, {path.stat().st_size / 1024:.0f} KB", file=sys.stderr)
    return not changed


# -- the runtime record ----------------------------------------------------------------------

RECORD_ABOUT = ("Written by python lessons/build.py each time it executes a lesson: the wall-clock seconds of "
                "the whole lesson (kernel start excluded) and of every cell over 5 s, with the machine, its load "
                "average and the commit. Each lesson renders its stated runtime from its entry "
                "(lessonkit.runtimes); never edit it by hand.")
COST_CALL = re.compile(r"^\s*show_cost\(", re.M)
FLAG_CALL = re.compile(r"^\s*show_slow_cell\(", re.M)


def _load() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _commit(source: pathlib.Path) -> tuple[str | None, bool | None]:
    """HEAD of the checkout holding the lesson ``source``, and whether the package or this lesson's source
    has uncommitted changes (the code the notebook ran; other lessons do not matter)."""
    folder = source.parent
    def git(*args):
        try:
            done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    head = (git("rev-parse", "HEAD") or "").strip() or None
    package = pathlib.Path(__file__).resolve().parent.parent / "minitransformer"
    status = git("status", "--porcelain", "--", str(package), source.name)
    return head, (bool(status.strip()) if status is not None else None)


def runtime_entry(nb, path: pathlib.Path, seconds: dict, started: dict, load_start, timeout: int,
                  commit: tuple[str | None, bool | None] | None = None) -> dict:
    """The record of one execution of a lesson (see lessonkit.runtimes); ``commit`` is
    ``_commit(source)`` taken before the run (default: taken now, from the notebook's folder)."""
    first = min(started.values())
    last = max(started[i] + s for i, s in seconds.items())
    commit, dirty = commit if commit is not None else _commit(path)
    cells = [{"index": i, "id": nb.cells[i].id, "seconds": round(s, 1),
              "label": runtimes.slow_label(nb.cells[i].source)}
             for i, s in sorted(seconds.items()) if s >= runtimes.LISTED_CELL_SECONDS]
    info = machine_info()
    info.pop("load_average", None)                 # the load is recorded at the start and at the end
    return {"notebook": path.name, "seconds": round(last - first, 1), "date": runtimes.now_utc(),
            "commit": commit, "dirty": dirty, "machine": info,
            "load_average": {"start": load_start, "end": _load()}, "timeout": timeout, "cells": cells}


def _call_args(source: str, name: str) -> list:
    """The literal arguments of the call of ``name`` in a cell (show_cost("09") -> ["09"])."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
            try:
                return [ast.literal_eval(a) for a in node.args]
            except ValueError:
                break
    raise SystemExit(f"a runtime cell calls {name} with literal arguments only, e.g. {name}(\"09\"): {source!r}")


def runtime_markdown(cell, lesson: str, record: dict) -> str | None:
    """What a runtime cell (show_cost / show_slow_cell) displays, from ``record``; None for other cells."""
    if cell.cell_type != "code":
        return None
    if COST_CALL.search(cell.source):
        (number,) = _call_args(cell.source, "show_cost")
        return runtimes.cost_markdown(number, record)
    if FLAG_CALL.search(cell.source):
        number, label = _call_args(cell.source, "show_slow_cell")
        return runtimes.slow_cell_markdown(number, label, record)
    return None


def render_runtime_cells(nb, lesson: str, record: dict) -> None:
    """Replace the outputs of the lesson's runtime cells by what they display with ``record``."""
    for cell in nb.cells:
        text = runtime_markdown(cell, lesson, record)
        if text is not None:
            cell.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": text, "text/plain": text})]


def runtime_problems(nb, lesson: str, record: dict) -> list[str]:
    """What is wrong with a lesson's runtime cells against the record (empty: all is well): the cost
    cell missing from the top, a slow cell without its '# slow:' label or its flag just before it, a
    runtime cell whose output is not what the record renders."""
    problems = []
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    if not any(COST_CALL.search(nb.cells[i].source) for i in code[:3]):
        problems.append(f"no show_cost({lesson!r}) among the first three code cells")
    entry = record.get("lessons", {}).get(lesson)
    if entry is None:
        return problems + [f"lesson {lesson} has no entry in {runtimes.RECORD_NAME}: execute it"]
    if entry.get("notebook") and not entry["notebook"].startswith(lesson):
        problems.append(f"its entry names {entry['notebook']}")
    ids = {c.id: i for i, c in enumerate(nb.cells)}
    for cell in entry.get("cells", []):
        if cell["seconds"] < record.get("slow_cell_seconds", runtimes.SLOW_CELL_SECONDS):
            continue
        i = ids.get(cell["id"])
        where = f"cell {cell['index']} (id {cell['id']}) took {cell['seconds']} s"
        if i is None:
            problems.append(f"{where} and is no longer in the notebook: execute the lesson")
            continue
        if not cell["label"]:
            problems.append(f"{where}: begin it with '# slow: <label>' and put show_slow_cell({lesson!r}, "
                            f"'<label>') in a code cell just before it")
            continue
        before = [j for j in code if j < i]
        if not before or runtime_markdown(nb.cells[before[-1]], lesson, record) != \
                runtimes.slow_cell_markdown(lesson, cell["label"], record):
            problems.append(f"{where}: the code cell before it must be show_slow_cell({lesson!r}, {cell['label']!r})")
    for i, c in enumerate(nb.cells):
        want = runtime_markdown(c, lesson, record)
        if want is None:
            continue
        have = [o.get("data", {}).get("text/markdown") for o in c.get("outputs", [])]
        if have != [want]:
            problems.append(f"cell {i} shows {have!r}, not what {runtimes.RECORD_NAME} renders ({want!r}): "
                            f"execute the lesson")
    return problems


def lesson_titles(folder: pathlib.Path = HERE) -> dict[str, tuple[str, str]]:
    """{"08": ("Why self-attention", "§1, §2, §4, Table 1"), ...} from each source's first heading,
    ``# Lesson N — Title (section)``; the section is "—" where the heading names none."""
    import jupytext

    titles = {}
    for number, source in lessons(folder).items():
        first = next(c.source for c in jupytext.read(source).cells if c.cell_type == "markdown")
        heading = first.split("\n", 1)[0].lstrip("#").strip()
        match = re.fullmatch(r"Lesson \d+ — (.*?)(?: \(([^()]*(?:\([^()]*\)[^()]*)*)\))?", heading)
        if not match:
            raise SystemExit(f"{source.name}: its first line must read '# Lesson N — Title (§...)', not {heading!r}")
        titles[number] = (match.group(1), match.group(2) or "—")
    return titles


def lesson_table(folder: pathlib.Path = HERE, record: dict | None = None) -> str:
    """The lessons' table in Markdown: number, title, paper section, runtime (from the record)."""
    record = runtimes.load(folder / runtimes.RECORD_NAME) if record is None else record
    rows = ["| lesson | title | paper | runtime (last build; its machine and load at the lesson's top) |", "| ---: | --- | --- | ---: |"]
    for number, (title, section) in lesson_titles(folder).items():
        entry = record.get("lessons", {}).get(number)
        name = notebook_path(lessons(folder)[number]).name
        cost = runtimes.format_seconds(entry["seconds"]) if entry else "not recorded"
        rows.append(f"| {int(number)} | [{title}](lessons/{name}) | {section} | {cost} |")
    return "\n".join(rows)


# -- the student edition ------------------------------------------------------------------

def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def student_edition(nb: nbformat.NotebookNode, lesson: str, name: str) -> nbformat.NotebookNode:
    """The student edition of a teacher's notebook (see the module docstring); ``nb`` is not changed."""
    student = copy.deepcopy(nb)
    cells = [nbformat.v4.new_markdown_cell(STUDENT_HEADER.format(lesson=int(lesson), name=name))]
    cells[0].id = f"l{lesson}-student-edition"
    for cell in student.cells:
        if "solution" in tags(cell):
            continue
        if cell.cell_type == "markdown":
            cell.source = cell.source.replace("](../docs/", "](docs/")   # (older links) the copy beside the notebooks
        if "reveal" in tags(cell):
            cell.source = f"{REVEAL_LINE}\n{cell.source}"
        if cell.cell_type == "code" and set(tags(cell)) & set(CLEARED_IN_STUDENT):
            cell.outputs, cell.execution_count = [], None
        cells.append(cell)
    student.cells = cells
    student.metadata.pop("jupytext", None)           # no pairing: a student edition has no source
    student.metadata["minitransformer"] = {"lesson": int(lesson), "edition": "student"}
    nbformat.validate(student)
    return student


def write_student_edition(folder: pathlib.Path, numbers: list[str], found: dict[str, pathlib.Path],
                          lessons_folder: pathlib.Path = HERE) -> list[pathlib.Path]:
    """Write the student edition of the lessons ``numbers`` into ``folder``, with the files they read."""
    folder = folder.resolve()
    if folder == lessons_folder or lessons_folder in folder.parents:
        raise SystemExit(f"error: the student edition must go outside {lessons_folder} (pytest --nbmake lessons "
                         f"would run it as lessons) (--student {folder})")
    try:
        import jupytext  # noqa: F401  (only to check that the notebooks are up to date)
        stale = [d for n in numbers if (d := first_difference(found[n], notebook_path(found[n])))]
    except ImportError:                                   # a teacher's install: the CI checks the same
        stale = []
    if stale:
        raise SystemExit("error: rebuild these notebooks first (python lessons/build.py NN): " + "; ".join(stale))
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for n in numbers:
        teacher = notebook_path(found[n])
        student = student_edition(nbformat.read(teacher, as_version=4), n, teacher.name)
        write_notebook(student, folder / teacher.name)
        written.append(folder / teacher.name)
    copy_student_files(folder, lessons_folder)
    print(f"student edition of {len(written)} lessons in {folder} (with {', '.join(STUDENT_FILES)})", file=sys.stderr)
    return written


def copy_student_files(folder: pathlib.Path, lessons_folder: pathlib.Path = HERE) -> None:
    """Beside a student edition's notebooks: the files they read (STUDENT_FILES) and a copy of docs/*.md."""
    docs = lessons_folder.parent / "docs"
    if docs.is_dir():                          # the lessons link docs/*.md: a copy beside them
        (folder / "docs").mkdir(exist_ok=True)
        for page in docs.glob("*.md"):
            shutil.copy2(page, folder / "docs" / page.name)
        for page in (lessons_folder / "docs").glob("*.md"):      # the linked pages' copies, their links rewritten
            shutil.copy2(page, folder / "docs" / page.name)
    for name in STUDENT_FILES:
        source = lessons_folder / name
        if source.is_dir():
            shutil.copytree(source, folder / name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif source.is_file():
            shutil.copy2(source, folder / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("numbers", nargs="*", help="lesson numbers, e.g. 03 8 (default: every lesson)")
    parser.add_argument("--no-execute", action="store_true",
                        help="write the notebooks without running them; cells whose source is unchanged keep "
                             "their outputs")
    parser.add_argument("--check", action="store_true", help="only check that every notebook matches its source")
    parser.add_argument("--timeout", type=int, default=600, metavar="S",
                        help="seconds a cell may run when executing (default 600; more on a busy machine)")
    parser.add_argument("--student", metavar="DIR", type=pathlib.Path,
                        help="write the student edition (no solutions, exercise outputs cleared) into DIR")
    parser.add_argument("--table", action="store_true",
                        help="print the lessons' table (number, title, paper section, runtime) in Markdown")
    parser.add_argument("--docs", action="store_true",
                        help="only refresh lessons/docs/, the copy of the docs pages the lessons link to "
                             "(lessonkit/links.py; every build refreshes it too)")
    add_edition_arguments(parser)
    args = parser.parse_args(argv)
    found = lessons()
    chosen = [n.zfill(2) for n in args.numbers] or list(found)
    unknown = [n for n in chosen if n not in found]
    if unknown:
        parser.error(f"no lesson {', '.join(unknown)} in lessons/ (there are {', '.join(found)})")
    if args.init or args.drift:
        return translators_main(args, chosen)
    if args.student:
        if (args.lang or "en") in ("en", "all"):
            write_student_edition(args.student, chosen, found)
        if (args.lang or "en") != "en":
            for lang in editions_of(args.lang):
                _editions().write_student_edition(args.student, chosen, lang)
        return 0
    if args.table:
        print(lesson_table())
        return 0
    if args.docs:
        written = links.write_docs_copy()
        print(f"lessons/docs/: {', '.join(written) or 'already current'}", file=sys.stderr)
        return 0
    if args.check:
        problems = [] if args.lang not in (None, "all", "en") else \
            [d for n in chosen if (d := first_difference(found[n], notebook_path(found[n])))]
        problems += orphans() if not args.numbers and args.lang in (None, "all", "en") else []
        problems += [f"{page}: out of date (python lessons/build.py --docs)" for page in links.stale_copies()]
        record = runtimes.load(HERE / runtimes.RECORD_NAME)
        problems += [f"{notebook_path(found[n]).name}: {p}" for n in chosen if args.lang in (None, "all", "en")
                     for p in runtime_problems(nbformat.read(notebook_path(found[n]), as_version=4), n, record)]
        problems += [p for lang in editions_of(args.lang) for p in _editions().check(chosen, lang, orphans=not args.numbers)]
        print("\n".join(problems) or f"{len(chosen)} lessons: every notebook matches its source", file=sys.stderr)
        return 1 if problems else 0
    failed = []
    for n in chosen:
        if args.lang in (None, "all", "en"):
            build(found[n], execute=not args.no_execute, timeout=args.timeout)
        for lang in editions_of(args.lang):
            failed += build_translated(n, lang, explicit=args.lang == lang, execute=not args.no_execute,
                                       timeout=args.timeout)
    links.write_docs_copy()                     # the pages the lessons link, beside them (lessonkit/links.py)
    if failed:
        print("\n".join(failed), file=sys.stderr)
    return 1 if failed else 0


# -- the translated editions (lessons/ko/: lessons/editions.py) ----------------------------------

def _editions():
    """lessons/editions.py, which builds and checks the translated editions."""
    if "lessons_editions" not in sys.modules:
        spec = importlib.util.spec_from_file_location("lessons_editions", HERE / "editions.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["lessons_editions"] = module
        spec.loader.exec_module(module)
    return sys.modules["lessons_editions"]


def add_edition_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lang", choices=("en", "ko", "all"),
                        help="which edition: the English one (lessons/), the Korean one (lessons/ko/, for the lessons "
                             "translated so far), or all (the default, except for --student: en)")
    parser.add_argument("--drift", action="store_true",
                        help="for translators: what keeps each lesson's Korean edition out of step with the English, "
                             "with the English change since each cell's translation")
    parser.add_argument("--init", action="store_true",
                        help="for translators: start the translation file of a lesson (lessons/ko/src/NN_name.toml), "
                             "its markdown cells and strings in English, to be overwritten")


def editions_of(lang: str | None) -> tuple[str, ...]:
    """The translated editions that --lang names (None and "all": every one)."""
    languages = _editions().LANGUAGES
    return languages if lang in (None, "all") else tuple(x for x in languages if x == lang)


def build_translated(number: str, lang: str, explicit: bool, execute: bool, timeout: int) -> list[str]:
    """Build lesson ``number`` in ``lang`` if it is translated (a lesson named with --lang must be); the
    problems that kept it from building."""
    editions = _editions()
    source = lessons()[number]
    if not editions.translation_path(source, lang).is_file():
        return [f"lesson {number} has no {lang} translation yet (python lessons/build.py {number} --lang {lang} "
                "--init starts one)"] if explicit else []
    try:
        editions.build(source, lang, execute=execute, timeout=timeout)
    except SystemExit as exc:
        return [str(exc)]
    return []


def translators_main(args, chosen: list[str]) -> int:
    """--init and --drift."""
    editions, langs = _editions(), editions_of(args.lang)
    for lang in langs:
        for n in chosen:
            source = lessons()[n]
            path = editions.translation_path(source, lang)
            if args.init:
                if path.exists():
                    raise SystemExit(f"error: {path} exists: translate it (or remove it to start over)")
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(str(path), editions.skeleton(source, lang))
                print(f"wrote {path.relative_to(HERE.parent)}: overwrite every ko with its translation", file=sys.stderr)
            elif path.is_file() or args.numbers:
                print(editions.drift(source, lang) if path.is_file() else f"lesson {n}: no {lang} translation yet")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
