"""``python -m minitransformer grade``: score lesson notebooks, judging each answer apart from the code
that wrote it.

    python -m minitransformer grade submissions/ --csv grades.csv
    python -m minitransformer grade --roster roster.csv --jobs 2 --feedback feedback/ --json grades.json

How it works (docs/teachers.md says the same to teachers):

1. **Everything is read and checked before anything runs** (``inputs``): the notebooks (listed, a
   folder's, or a roster's ``student,notebook`` rows) into memory, the lesson of each (its metadata or
   its file name's number; a notebook whose lesson cannot be told is refused, by name), the points,
   and every output path. The packages and the lesson files are copied into memory too
   (``sandbox.Snapshot``), and every checker is imported, before the first notebook runs.
2. **Each notebook runs in a private folder** (``sandbox.Private``): a fresh temporary folder holding
   the lesson files and a read-only copy of the packages written from the snapshot, in a fresh kernel
   whose ``PYTHONPATH`` starts at that copy (``session``). Cells that raise or run over ``--timeout``
   do not stop it. Up to ``--jobs`` notebooks run at once.
3. **The judge is this process** (``lessonkit.judge``): after each cell, the answers its checking
   cells were given (``lessonkit.kernel``) are judged here by the same checkers, imported here before
   any notebook ran: the student's function is called in the kernel on the checker's inputs, and only
   plain data comes back (``lessonkit.wire``). References, tolerances, comparisons and verdicts never
   enter the kernel, and nothing the notebook prints or saves counts.
4. **Hidden cases**: after the visible case each exercise is judged on ``HIDDEN_CASES`` hidden ones
   (other sizes and values from ``--seed``, random unless given, and each checker's edge cases);
   points are the share of hidden cases right (``partial``).
5. **The package's answer is not an answer**: if the package's own function for that exercise runs
   while the student's does, the exercise scores 0, "uses the package's own ``relu_backward``".
6. **Reports**: a table per notebook and a total; ``--csv``, ``--json``; ``--feedback DIR``, one
   Markdown file per student (verdict, hint and points per exercise; cells that raised; notes).
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import secrets
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from ..exercises import registered
from ..judge import HIDDEN_CASES
from .inputs import Submission, check_outputs, feedback_name, points_file, read_roster, submissions_from_paths
from .report import (
    STATUS_ORDER,
    ExerciseResult,
    NotebookReport,
    format_report,
    score,
    write_csv,
    write_feedback,
    write_json,
)
from .sandbox import LESSON_FILES, Leftovers, Snapshot
from .session import GRACE, Context, nbclient_modules, run_notebook

__all__ = ["DEFAULT_TIMEOUT", "GRACE", "LESSONS", "STATUS_ORDER", "ExerciseResult", "NotebookReport",
           "add_arguments", "format_report", "grade_notebook", "run"]

# The repository's lessons folder (an editable install); a notebook runs beside a copy of its files.
LESSONS = pathlib.Path(__file__).resolve().parents[2] / "lessons"
DEFAULT_TIMEOUT = 600.0       # seconds per cell: the limit lessons/build.py gives a cell


def _import_everything() -> None:
    """Every checker and every module of the library, imported now: a module first imported after a
    notebook ran could be one the notebook rewrote on disk."""
    import importlib  # noqa: PLC0415
    import pkgutil  # noqa: PLC0415

    import minitransformer  # noqa: PLC0415

    registered()
    for info in pkgutil.walk_packages(minitransformer.__path__, "minitransformer."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:         # an optional dependency (cupy, mpi4py) the judge never needs
            continue


def _note_cells(report: NotebookReport, out, timeout: float) -> None:
    for index in sorted(out.timed_out):
        report.notes.append(f"cell {index} ran over {timeout:g} s and was interrupted")
    for index, error in sorted(out.errors.items()):
        if index in out.timed_out:
            continue
        report.raised.append(f"cell {index}: {error}")
        if not error.startswith("WrongAnswer:"):
            report.notes.append(f"cell {index} raised {error}")
    if out.stopped:
        report.notes.append(f"{out.stopped}; the cells after it did not run")
    report.notes += out.notes


def grade_submission(sub: Submission, ctx: Context, points: dict | None = None) -> NotebookReport:
    """Run one submission (its bytes, read before anything ran) and score it."""
    _, nbformat, _ = nbclient_modules()
    t0 = time.perf_counter()
    report = NotebookReport(str(sub.path), sub.lesson, sub.student)
    try:
        nb = nbformat.reads(sub.data.decode("utf-8"), as_version=4)
    except Exception as exc:  # noqa: BLE001 - a broken submission gets a report, not a crash
        first = (str(exc).splitlines() or [""])[0]
        report.notes.append(f"not a readable notebook: {type(exc).__name__}: {first}"[:200])
        report.exercises = score(sub.lesson, [], points, "the file could not be read")
        return report
    out = run_notebook(nb, sub.lesson, ctx)
    report.cells, report.cells_run = out.cells, out.cells_run
    report.predictions = out.predictions
    _note_cells(report, out, ctx.timeout)
    not_run = f"{out.stopped}" if out.stopped else "no checking call: the checking cell was deleted or not reached"
    report.exercises = score(sub.lesson, out.judgements, points, not_run)
    report.seconds = time.perf_counter() - t0
    return report


def make_context(lessons: pathlib.Path | None, timeout: float, seed: int | None = None,
                 hidden: int = HIDDEN_CASES, sweep: bool = False) -> Context:
    """What a grading run shares. ``sweep``: stop the processes notebooks leave behind (the command line
    does; a script that calls grade_notebook from a process with children of its own should not)."""
    _import_everything()
    seed = secrets.randbits(63) if seed is None else seed
    return Context(Snapshot.take(lessons), timeout, seed, hidden, Leftovers() if sweep else None)


def grade_notebook(path: str | os.PathLike, timeout: float = DEFAULT_TIMEOUT, lessons: pathlib.Path | None = LESSONS,
                   points: dict | None = None, seed: int | None = None, hidden: int = HIDDEN_CASES,
                   student: str | None = None) -> NotebookReport:
    """Grade one notebook file (the tests' and a script's entry point; the command line uses ``run``)."""
    path = pathlib.Path(path)
    data = path.read_bytes()
    from .inputs import lesson_of  # noqa: PLC0415

    lesson, _ = lesson_of(data, path)
    ctx = make_context(lessons if lessons is not None and lessons.is_dir() else None, timeout, seed, hidden)
    return grade_submission(Submission(student or path.stem, path, data, lesson), ctx, points)


# -- the command line -----------------------------------------------------------------------------

def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return value


def _whole(low: int, high: int | None = None):
    """An option's type: a whole number from ``low`` (to ``high``, excluded)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value >= high):
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {text}" if high is None else
                                             f"must be between {low} and 2**63 - 1, got {text}")
        return value
    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("notebooks", nargs="*", metavar="NOTEBOOK",
                   help="notebooks to grade (.ipynb), or folders: every .ipynb in them (or use --roster)")
    p.add_argument("--roster", metavar="FILE",
                   help="a CSV with the columns student and notebook: one row per student (instead of NOTEBOOKs)")
    p.add_argument("--json", metavar="FILE", help="also write the reports as JSON")
    p.add_argument("--csv", metavar="FILE", help="also write one row per notebook and exercise as CSV")
    p.add_argument("--feedback", metavar="DIR",
                   help="write one Markdown file per student into DIR: each exercise's verdict, hint and points")
    p.add_argument("--jobs", type=_whole(1), default=1, metavar="N",
                   help="grade N notebooks at once (default 1; each is a kernel and a CPU's worth of work)")
    p.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"seconds a cell, or one call of a student's function, may run before it is interrupted "
                        f"(default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--points", metavar="FILE",
                   help='a JSON object of points per exercise, e.g. {"1.3": 2} (default: 1 each, or '
                        "lessonkit/exercises/catalogue.py's POINTS)")
    p.add_argument("--seed", type=_whole(0, 2 ** 63), metavar="N",
                   help="the seed of the hidden cases (default: a new one each run, written to the --json file)")
    p.add_argument("--lessons", metavar="DIR", type=pathlib.Path,
                   help="the lessons folder whose experiments/, debug_attention.py and runtimes.json each notebook "
                        f"gets a copy of (default: {LESSONS})")


def _submissions(args) -> list[Submission]:
    if args.roster and args.notebooks:
        raise ValueError("give notebooks or --roster FILE, not both")
    if args.roster:
        return read_roster(args.roster)
    if not args.notebooks:
        raise ValueError("give the notebooks to grade (files or folders), or --roster FILE")
    return submissions_from_paths(args.notebooks)


def _after(reports: list[NotebookReport], subs: list[Submission], ctx: Context) -> None:
    """Notes on what changed on disk while grading: it changed no grade, but the teacher should know."""
    changed = ctx.snapshot.changed_on_disk()
    rewritten = []
    for report, sub in zip(reports, subs):
        if sub.changed_on_disk():
            rewritten.append(str(sub.path))
            report.notes.append("this notebook's file changed on disk while the class was graded; it was graded "
                                "as it was before anything ran")
    if rewritten:
        print(f"note: {len(rewritten)} notebook file(s) changed on disk while grading ({', '.join(rewritten[:3])}"
              f"{', ...' if len(rewritten) > 3 else ''}); each was graded as it was read before the first notebook ran",
              file=sys.stderr)
    if changed:
        print(f"note: {len(changed)} file(s) of the packages changed on disk while grading ({', '.join(changed[:3])}"
              f"{', ...' if len(changed) > 3 else ''}); every notebook was graded with the copy taken before the "
              "first one ran", file=sys.stderr)


def run(args) -> int:
    """The ``grade`` command: check everything, grade (``--jobs`` at once), print, write the files."""
    nbclient_modules()
    subs = _submissions(args)
    points = points_file(args.points)
    if args.lessons is not None and not args.lessons.is_dir():
        raise ValueError(f"no such folder (--lessons {args.lessons})")
    outputs = check_outputs(args.csv, args.json, args.feedback, subs)
    lessons = args.lessons if args.lessons is not None else (LESSONS if LESSONS.is_dir() else None)
    ctx = make_context(lessons, args.timeout, args.seed, sweep=True)
    t0 = time.perf_counter()
    reports = []
    with ThreadPoolExecutor(max_workers=args.jobs, thread_name_prefix="grade") as pool:
        for report in pool.map(lambda sub: grade_submission(sub, ctx, points), subs):   # in the order given
            reports.append(report)
            print(format_report(report), flush=True)
            print(flush=True)
    _after(reports, subs, ctx)
    total, most = sum(r.score for r in reports), sum(r.max_points for r in reports)
    total = int(total) if total == int(total) else round(total, 2)
    print(f"total: {total}/{most} points over {len(reports)} notebook{'s' if len(reports) != 1 else ''}")
    print(f"graded in {time.perf_counter() - t0:.0f} s with --jobs {args.jobs}", file=sys.stderr)
    run_info = {"timeout_s": args.timeout, "seed": ctx.seed, "hidden_cases": ctx.hidden, "jobs": args.jobs,
                "lesson_files": list(LESSON_FILES) if lessons else []}
    if outputs.csv:
        write_csv(reports, outputs.csv)
    if outputs.json:
        write_json(reports, outputs.json, run_info)
    if outputs.feedback:
        for report in reports:
            write_feedback(report, outputs.feedback / feedback_name(report.student))
    print(f"(the notebooks ran the code they contain, with this account's permissions; {sys.executable})",
          file=sys.stderr)
    return 0
