"""``python -m minitransformer grade``: score lesson notebooks with the lessons' own checkers.

    python -m minitransformer grade submissions/*.ipynb --csv grades.csv --json grades.json

Each notebook runs top to bottom in a fresh kernel (nbclient), in a fresh temporary folder
holding a copy of the files the lessons read (``--lessons``: experiments/, debug_attention.py, runtimes.json),
with a time limit per cell (``--timeout``). A cell that raises does not stop the run; a
cell over the limit is interrupted and the run goes on; a kernel that dies, or ignores the
interrupt, ends the run, and the exercises it had not reached are marked "not run".

The score comes only from the checkers. Before the first cell the grader arms the verdict
channel of ``lessonkit.exercises`` (``_verdict``) (out of the notebook's sight) with a key
made for this run; every checker call then appends one line, signed with that key, to a
file outside the notebook's folder, which the grader reads after each cell. Printed text,
the submitted file's outputs, a redefined checker and unsigned lines earn nothing; the
threat model is in ``_verdict``'s docstring and in docs/teachers.md.

Grading runs the student's code with your permissions, as every notebook grader does: run
it in a container or under a throwaway account.

An exercise's status, from all the calls of its checker in the run:
correct (some call found it right), else the last call that tried an answer: wrong (with
the checker's hint), error (the learner's code raised; its one-line message), timeout (the
call was interrupted at the time limit); else not attempted (the stub still returned None);
else not run (no checker call: the cell was deleted or the run stopped before it). A
verdict given while the package, NumPy or the builtins had been patched counts as
tampered. Points: ``lessonkit.exercises.catalogue`` (1 per exercise unless listed),
or ``--points FILE``.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import csv
import hashlib
import hmac
import io
import json
import math
import os
import pathlib
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

from minitransformer.files import atomic_write_bytes

from .exercises import catalogue

__all__ = ["ExerciseResult", "NotebookReport", "add_arguments", "format_report", "grade_notebook", "run"]

# The repository's lessons folder (an editable install); a notebook runs beside a copy of these.
LESSONS = pathlib.Path(__file__).resolve().parents[1] / "lessons"
LESSON_FILES = ("experiments", "debug_attention.py", "runtimes.json")
DEFAULT_TIMEOUT = 600.0       # seconds per cell: the limit lessons/build.py gives a cell
GRACE = 15.0                  # seconds an interrupted kernel has to answer before it is stopped
MAX_LOG_BYTES = 10_000_000    # a notebook that floods the verdict file is not read past this
STATUS_ORDER = ("correct", "wrong", "error", "timeout", "tampered", "not attempted", "not run")
_MODULE = "lessonkit.exercises"      # its arm() and seal() run in the kernel, out of the notebook's sight


@dataclass
class ExerciseResult:
    exercise: str
    title: str
    status: str               # one of STATUS_ORDER
    points: int
    max_points: int
    detail: str = ""          # one line: the hint, the error, the reason it did not run
    message: str = ""         # the checker's whole message (wrong answers)
    cell: int | None = None   # the cell (0-based, as nbformat counts) of the deciding call


@dataclass
class NotebookReport:
    notebook: str
    lesson: int | None
    exercises: list[ExerciseResult] = field(default_factory=list)
    cells: int = 0            # code cells in the notebook
    cells_run: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> int:
        return sum(e.points for e in self.exercises)

    @property
    def max_points(self) -> int:
        return sum(e.max_points for e in self.exercises)


# -- reading the signed verdicts -------------------------------------------------------------------

class _Log:
    """The verdict file, read incrementally and checked line by line."""

    def __init__(self, path: pathlib.Path, key: bytes, nonce: str):
        self.path, self.key, self.nonce = path, key, nonce
        self.offset, self.seq, self.buffer = 0, 0, b""
        self.records: list[dict] = []         # every genuine record, with "cell" added
        self.forged = self.out_of_order = 0
        self.flooded = False

    def read(self, cell: int | None) -> None:
        if self.flooded:
            return
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read(MAX_LOG_BYTES - self.offset + 1)
        self.offset += len(chunk)
        if self.offset > MAX_LOG_BYTES:
            self.flooded = True
            chunk = chunk[: MAX_LOG_BYTES - (self.offset - len(chunk))]
        *lines, self.buffer = (self.buffer + chunk).split(b"\n")
        for line in lines:
            record = self._verify(line)
            if record is None:
                self.forged += 1
                continue
            if record["seq"] != self.seq:
                self.out_of_order += 1
            self.seq = record["seq"] + 1
            record["cell"] = cell
            self.records.append(record)

    def _verify(self, line: bytes) -> dict | None:
        sig, _, payload = line.partition(b" ")
        want = hmac.new(self.key, payload, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(sig, want):
            return None
        try:
            record = ast.literal_eval(payload.decode())
        except (ValueError, SyntaxError, UnicodeDecodeError):
            return None
        if not isinstance(record, dict) or record.get("nonce") != self.nonce or not isinstance(record.get("seq"), int):
            return None
        return record


# -- running one notebook -----------------------------------------------------------------------

def _nbclient():
    try:
        import nbclient  # noqa: PLC0415  (the [grade] extra: needed only here)
        import nbformat  # noqa: PLC0415
        from nbclient.exceptions import DeadKernelError  # noqa: PLC0415
    except ImportError as exc:
        raise ValueError(f"grading needs nbclient, nbformat and ipykernel: pip install -e \".[grade]\" "
                         f"({exc.name} is missing)") from None
    return nbclient, nbformat, DeadKernelError


class _Stopped(Exception):
    """The run cannot go on (the kernel died, or ignored an interrupt)."""


def _make_client(nbclient, nb, timeout: float):
    class Client(nbclient.NotebookClient):
        """nbclient's executor, noting which cells ran over the limit; outputs are not kept
        (only checkers count), so a cell that prints without end cannot fill the memory."""

        current = -1
        timed_out: set[int]

        async def _async_handle_timeout(self, timeout, cell=None):
            self.timed_out.add(self.current)
            return await super()._async_handle_timeout(timeout, cell)

        def output(self, outs, msg, display_id, cell_index):
            return None

    client = Client(nb, timeout=math.ceil(timeout), kernel_name="python3", allow_errors=True,
                    interrupt_on_timeout=True, record_timing=False, shutdown_kernel="immediate",
                    error_on_timeout={"ename": "TimeoutError", "evalue": f"the cell ran over {timeout:g} s "
                                      "and was interrupted", "traceback": []})
    client.timed_out, client.errors = set(), {}

    def on_cell_error(cell, cell_index, execute_reply):
        content = execute_reply["content"]
        first = (str(content.get("evalue", "")).splitlines() or [""])[0]
        client.errors[cell_index] = f"{content.get('ename', 'error')}: {first}"[:200]

    client.on_cell_error = on_cell_error
    return client


async def _reply(client, msg_id: str, within: float) -> dict | None:
    """The shell reply to ``msg_id``, or None if none comes within ``within`` seconds."""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        try:
            msg = await client.kc.shell_channel.get_msg(timeout=left)
        except Exception:  # noqa: BLE001 - queue.Empty (jupyter_client raises it as is) or a closed channel
            return None
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg
    return None


async def _hidden(client, code: str, within: float) -> dict | None:
    """Run ``code`` silently (no history, no outputs, no execution count), as the grader's own step."""
    msg_id = client.kc.execute(code, silent=True, store_history=False)
    return await _reply(client, msg_id, within)


async def _run(client, nb, workdir: pathlib.Path, log: _Log, key_file: pathlib.Path, timeout: float,
               report: NotebookReport, DeadKernelError) -> None:
    """Execute ``nb`` cell by cell in ``client``, reading the verdicts after each."""
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    report.cells = len(code_cells)
    # The kernel's own stdout/stderr (not the cells' output) would only add ipykernel's start-up warnings.
    async with client.async_setup_kernel(cwd=str(workdir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
        armed = await _hidden(client, f"__import__({_MODULE!r}, fromlist=['arm']).arm("
                                      f"{str(key_file)!r}, {str(log.path)!r}, {log.nonce!r})", within=120)
        log.read(None)
        if armed is None or armed["content"].get("status") != "ok" or not log.records:
            why = "no reply" if armed is None else f"{armed['content'].get('ename')}: {armed['content'].get('evalue')}"
            raise _Stopped(f"the grader could not start its verdict channel in the kernel ({why})")
        executed = 0
        for index in code_cells:
            client.current = index
            try:
                await client.async_execute_cell(nb.cells[index], index, execution_count=executed + 1)
            except DeadKernelError:
                log.read(index)
                raise _Stopped(f"the kernel died in cell {index}") from None
            executed += 1
            report.cells_run = executed
            log.read(index)
            if index in client.timed_out:
                if await _reply(client, client.kc.kernel_info(), within=GRACE) is None:
                    raise _Stopped(f"cell {index} ignored the interrupt after {timeout:g} s, so the kernel was "
                                   "stopped")
                log.read(index)
        sealed = await _hidden(client, f"__import__({_MODULE!r}, fromlist=['seal']).seal()", within=60)
        log.read(None)
        if sealed is None or not any(r["kind"] == "seal" for r in log.records):
            report.notes.append("the grader's closing check did not come back: the notebook changed the grading "
                                "module, so no verdict counts")
            log.records = [dict(r, status="tampered", changed="the grading module (no closing check)")
                           if r["kind"] == "verdict" else r for r in log.records]


def _lesson_of(nb, path: pathlib.Path) -> int | None:
    meta = nb.metadata.get("minitransformer", {}) if isinstance(nb.metadata, dict) else {}
    lesson = meta.get("lesson") if isinstance(meta, dict) else None
    if isinstance(lesson, int) and not isinstance(lesson, bool) and catalogue.for_lesson(lesson):
        return lesson
    match = re.match(r"(\d{1,2})_", path.name)
    if match and catalogue.for_lesson(int(match.group(1))):
        return int(match.group(1))
    return None


def grade_notebook(path: str | os.PathLike, timeout: float = DEFAULT_TIMEOUT,
                   lessons: pathlib.Path | None = LESSONS, points: dict[str, int] | None = None) -> NotebookReport:
    """Run one notebook in a fresh kernel and score it (see the module docstring)."""
    nbclient, nbformat, DeadKernelError = _nbclient()
    path = pathlib.Path(path)
    t0 = time.perf_counter()
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:  # noqa: BLE001 - a broken submission gets a report, not a crash
        lesson = _lesson_of(nbformat.v4.new_notebook(), path)
        report = NotebookReport(str(path), lesson, notes=[f"not a readable notebook: {type(exc).__name__}: "
                                                          f"{str(exc).splitlines()[0] if str(exc) else ''}"[:200]])
        report.exercises = _score(lesson, [], set(), points, "the file could not be read")
        return report
    report = NotebookReport(str(path), _lesson_of(nb, path))
    with tempfile.TemporaryDirectory(prefix="mt-grade-") as private, \
            tempfile.TemporaryDirectory(prefix="mt-grade-run-") as workdir:
        private, workdir = pathlib.Path(private), pathlib.Path(workdir)
        for name in LESSON_FILES if lessons is not None else ():
            source = lessons / name
            if source.is_dir():
                shutil.copytree(source, workdir / name, ignore=shutil.ignore_patterns("__pycache__"))
            elif source.is_file():
                shutil.copy2(source, workdir / name)
        key, nonce = secrets.token_bytes(32), secrets.token_hex(8)
        key_file, log_path = private / "key", private / "verdicts"
        key_file.write_bytes(key)
        log_path.write_bytes(b"")
        log = _Log(log_path, key, nonce)
        client = _make_client(nbclient, nb, timeout)
        stopped = None
        try:
            asyncio.run(_run(client, nb, workdir, log, key_file, timeout, report, DeadKernelError))
        except _Stopped as exc:
            stopped = str(exc)
            report.notes.append(f"{stopped}; the cells after it did not run")
        except Exception as exc:  # noqa: BLE001 - whatever the notebook did to its kernel, the others still get graded
            stopped = f"the grader lost the kernel after cell {report.cells_run} ({type(exc).__name__}: {exc})"[:300]
            report.notes.append(f"{stopped}; the cells after it did not run")
            log.read(None)
    verdicts = [r for r in log.records if r["kind"] == "verdict"]
    _note_problems(report, log, client, timeout)
    report.exercises = _score(report.lesson, verdicts, client.timed_out, points,
                              stopped or "no checker call: the checking cell was deleted or not reached",
                              timeout=timeout)
    if report.lesson is None and report.exercises:
        report.lesson = int(report.exercises[0].exercise.split(".")[0])
    report.seconds = time.perf_counter() - t0
    return report


def _note_problems(report: NotebookReport, log: _Log, client, timeout: float) -> None:
    checked = {r["cell"] for r in log.records if r["kind"] == "verdict"}
    for index in sorted(client.timed_out - checked):
        report.notes.append(f"cell {index} ran over {timeout:g} s and was interrupted")
    for index, error in sorted(client.errors.items()):
        if index not in checked and index not in client.timed_out:
            report.notes.append(f"cell {index} raised {error}")
    seal = next((r for r in log.records if r["kind"] == "seal"), None)
    if seal and seal.get("rebound"):
        report.notes.append(f"the notebook rebinds {seal['rebound']}: calls to its own version were not graded")
    if seal and seal.get("changed"):
        report.notes.append(f"at the end, these had been replaced: {seal['changed']}")
    refused = [r for r in log.records if r["kind"] == "refused"]
    if refused:
        report.notes.append(f"{len(refused)} calls to the grader's recorder came from something other than a "
                            "checker (ignored)")
    if log.forged:
        report.notes.append(f"{log.forged} lines in the verdict file had no valid signature (ignored)")
    if log.out_of_order:
        report.notes.append(f"{log.out_of_order} verdict lines were out of sequence")
    if log.flooded:
        report.notes.append(f"the verdict file grew past {MAX_LOG_BYTES:,} bytes; the rest was not read")


def _one_line(message: str) -> str:
    """The hint line of a checker's message if it has one, else its first line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    hint = next((line for line in lines if line.startswith("hint:")), None)
    return hint or (lines[0] if lines else "")


def _score(lesson: int | None, verdicts: list[dict], timed_out: set[int], points: dict[str, int] | None,
           not_run: str, timeout: float = DEFAULT_TIMEOUT) -> list[ExerciseResult]:
    """One ExerciseResult per exercise of the lesson (or per exercise seen, if no lesson is known)."""
    if lesson is not None:
        wanted = catalogue.for_lesson(lesson)
    else:
        seen = {v["exercise"] for v in verdicts}
        wanted = [e for e in catalogue.EXERCISES if e.number in seen]
    results = []
    for ex in wanted:
        calls = []
        for v in (v for v in verdicts if v["exercise"] == ex.number):
            status = v["status"]
            if status == "interrupted":
                status = "timeout" if v["cell"] in timed_out else "error"
            if status != "tampered" and (v.get("changed") or v.get("hooks")):
                status = "tampered"
            calls.append((status, v))
        worth = catalogue.points(ex.number, points)
        result = ExerciseResult(ex.number, ex.title, "not run", 0, worth, not_run)
        right = next(((s, v) for s, v in calls if s == "correct"), None)
        tried = [(s, v) for s, v in calls if s not in ("correct", "not attempted")]
        if right:
            result.status, result.points, result.detail, result.cell = "correct", worth, "", right[1]["cell"]
        elif tried:
            status, v = tried[-1]
            result.status, result.cell, result.message = status, v["cell"], v.get("message", "")
            if status == "wrong":
                result.detail = _one_line(v.get("message", ""))
            elif status == "error":
                result.detail = v.get("message", "")
            elif status == "timeout":
                result.detail = f"cell {v['cell']} ran over {timeout:g} s and was interrupted"
            else:
                changed = ", ".join(x for x in (v.get("changed"), v.get("hooks") and f"{v['hooks']} hook") if x)
                result.detail = f"given while these were replaced: {changed}"[:300] if changed else v.get("message", "")
        elif calls:
            result.status, result.cell = "not attempted", calls[-1][1]["cell"]
            result.detail = "the stub still returns None"
        results.append(result)
    return results


# -- reports ------------------------------------------------------------------------------------

def format_report(report: NotebookReport, width: int = 100) -> str:
    lesson = f"lesson {report.lesson}" if report.lesson is not None else "no lesson found"
    lines = [f"{report.notebook}  ({lesson}): {report.score}/{report.max_points} points  "
             f"[{report.cells_run} of {report.cells} code cells run, {report.seconds:.1f} s]"]
    if report.exercises:
        lines.append(f"  {'exercise':<10}{'points':<8}{'status':<15}detail")
        for e in report.exercises:
            detail = e.detail if len(e.detail) <= width - 35 else e.detail[: width - 38] + "..."
            lines.append(f"  {e.exercise:<10}{f'{e.points}/{e.max_points}':<8}{e.status:<15}{detail}".rstrip())
    lines += [f"  note: {note}" for note in report.notes]
    return "\n".join(lines)


def _rows(reports: list[NotebookReport]) -> list[dict]:
    return [{"notebook": r.notebook, "lesson": r.lesson, "exercise": e.exercise, "title": e.title,
             "status": e.status, "points": e.points, "max_points": e.max_points, "detail": e.detail}
            for r in reports for e in r.exercises]


def write_csv(reports: list[NotebookReport], path: str) -> None:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["notebook", "lesson", "exercise", "title", "status", "points",
                                             "max_points", "detail"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(_rows(reports))
    atomic_write_bytes(path, out.getvalue().encode())


def write_json(reports: list[NotebookReport], path: str, timeout: float) -> None:
    data = {"timeout_s": timeout,
            "notebooks": [{**{k: v for k, v in asdict(r).items() if k != "exercises"}, "score": r.score,
                           "max_points": r.max_points, "exercises": [asdict(e) for e in r.exercises]}
                          for r in reports],
            "total": {"score": sum(r.score for r in reports), "max_points": sum(r.max_points for r in reports),
                      "notebooks": len(reports)}}
    atomic_write_bytes(path, (json.dumps(data, indent=1, ensure_ascii=False) + "\n").encode())


# -- the command line ---------------------------------------------------------------------------

def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("notebooks", nargs="+", metavar="NOTEBOOK",
                   help="notebooks to grade (.ipynb), or folders: every .ipynb in them")
    p.add_argument("--json", metavar="FILE", help="also write the reports as JSON")
    p.add_argument("--csv", metavar="FILE", help="also write one row per notebook and exercise as CSV")
    p.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"seconds a cell may run before it is interrupted (default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--points", metavar="FILE",
                   help='a JSON object of points per exercise, e.g. {"1.3": 2} (default: 1 each, or '
                        "lessonkit/exercises/catalogue.py's POINTS)")
    p.add_argument("--lessons", metavar="DIR", type=pathlib.Path,
                   help="the lessons folder whose experiments/, debug_attention.py and runtimes.json each notebook "
                        "gets a copy of "
                        f"(default: {LESSONS})")


def _notebooks(items: list[str]) -> list[pathlib.Path]:
    found = []
    for item in items:
        path = pathlib.Path(item)
        if path.is_dir():
            inside = sorted(p for p in path.glob("*.ipynb") if not p.name.startswith("."))
            if not inside:
                raise ValueError(f"no .ipynb files in the folder ({item})")
            found += inside
        elif path.is_file():
            found.append(path)
        else:
            raise ValueError(f"no such notebook or folder ({item})")
    return found


def _points_file(name: str | None) -> dict[str, int] | None:
    if name is None:
        return None
    try:
        table = json.loads(pathlib.Path(name).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"no such file (--points {name})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not valid JSON: {exc} (--points {name})") from None
    known = {e.number for e in catalogue.EXERCISES}
    if not isinstance(table, dict):
        raise ValueError(f'expected a JSON object such as {{"1.3": 2}} (--points {name})')
    for number, value in table.items():
        if number not in known:
            raise ValueError(f"no exercise {number!r}; the exercises are 0.1 ... 12.4 (--points {name})")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"exercise {number}: points must be a whole number >= 0, got {value!r} (--points {name})")
    return table


def run(args) -> int:
    """The ``grade`` command: grade, print a table per notebook and a total, write --json/--csv."""
    _nbclient()
    notebooks = _notebooks(args.notebooks)
    points = _points_file(args.points)
    lessons = args.lessons if args.lessons is not None else (LESSONS if LESSONS.is_dir() else None)
    if args.lessons is not None and not args.lessons.is_dir():
        raise ValueError(f"no such folder (--lessons {args.lessons})")
    reports = []
    for path in notebooks:
        report = grade_notebook(path, timeout=args.timeout, lessons=lessons, points=points)
        reports.append(report)
        print(format_report(report), flush=True)
        print(flush=True)
    score, most = sum(r.score for r in reports), sum(r.max_points for r in reports)
    print(f"total: {score}/{most} points over {len(reports)} notebook{'s' if len(reports) != 1 else ''}")
    if args.csv:
        write_csv(reports, args.csv)
    if args.json:
        write_json(reports, args.json, args.timeout)
    print(f"(the notebooks ran the code they contain, with this account's permissions; "
          f"{sys.executable})", file=sys.stderr)
    return 0
