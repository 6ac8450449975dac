"""What the grader reads before it runs anything: the notebooks (from a roster or a list), the lesson
of each, the points, and every path it will write, all checked first.

Every notebook is read into memory here, before the first one runs: the grader runs and scores
those bytes, so a notebook that rewrites another student's file on disk changes nothing of that
student's grade (``changed_on_disk`` notes that it happened).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import pathlib
import re
import tempfile
from dataclasses import dataclass

from ..exercises import catalogue

__all__ = ["MAX_NOTEBOOK_BYTES", "Outputs", "Submission", "check_outputs", "lesson_of", "points_file",
           "read_roster", "submissions_from_paths"]

MAX_NOTEBOOK_BYTES = 50_000_000      # a submitted notebook is not read past this (outputs included)
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class Submission:
    student: str              # the roster's id, or the file's name without .ipynb
    path: pathlib.Path        # as the teacher named it
    data: bytes               # the file, read before anything ran
    lesson: int | None        # None: unreadable (it still gets a report)
    where: str = ""           # "roster.csv line 4", for messages

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def changed_on_disk(self) -> bool:
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest() != self.digest
        except OSError:
            return True


def _read(path: pathlib.Path, where: str) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_NOTEBOOK_BYTES:
            raise ValueError(f"{path}: {size:,} bytes, more than a notebook may have ({MAX_NOTEBOOK_BYTES:,}){where}")
        return path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"no such notebook ({path}){where}") from None
    except IsADirectoryError:
        raise ValueError(f"a folder, not a notebook ({path}){where}") from None
    except PermissionError:
        raise ValueError(f"cannot read {path}: permission denied{where}") from None


def lesson_of(data: bytes, path: pathlib.Path) -> tuple[int | None, str | None]:
    """(lesson, None), or (None, why it cannot be told). A notebook that is not JSON gets (None, None):
    it is graded as unreadable under the lesson its file name gives, if any."""
    prefix = re.match(r"(\d{1,2})_", path.name)
    by_name = int(prefix.group(1)) if prefix and catalogue.for_lesson(int(prefix.group(1))) else None
    try:
        nb = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return by_name, None
    meta = nb.get("metadata", {}) if isinstance(nb, dict) else {}
    ours = meta.get("minitransformer") if isinstance(meta, dict) else None
    if isinstance(ours, dict) and "lesson" in ours:
        lesson = ours["lesson"]
        if isinstance(lesson, bool) or not isinstance(lesson, int) or not catalogue.for_lesson(lesson):
            lessons = sorted({e.lesson for e in catalogue.EXERCISES})
            return None, (f'its metadata says "lesson": {json.dumps(lesson)}, which is not a lesson number with '
                          f"exercises ({lessons[0]} to {lessons[-1]}): write the number, e.g. \"lesson\": 3")
        if by_name is not None and by_name != lesson:
            return None, (f"its metadata says lesson {lesson} but its file name says lesson {by_name}: "
                          "rename the file or fix the metadata")
        return lesson, None
    if by_name is not None:
        return by_name, None
    return None, ('add "minitransformer": {"lesson": N} to its metadata (the student edition has it) or start its '
                  "file name with the lesson's number, e.g. 03_ana.ipynb")


def _submission(student: str, path: pathlib.Path, where: str = "") -> Submission:
    data = _read(path, f" ({where})" if where else "")
    lesson, why = lesson_of(data, path)
    if why is not None:
        raise ValueError(f"cannot tell the lesson of {path}{f' ({where})' if where else ''}: {why}")
    return Submission(student, path, data, lesson, where)


def submissions_from_paths(items: list[str]) -> list[Submission]:
    """Notebooks named one by one, or every .ipynb of a folder; the student is the file's name."""
    paths = []
    for item in items:
        path = pathlib.Path(item)
        if path.is_dir():
            inside = sorted(p for p in path.glob("*.ipynb") if not p.name.startswith("."))
            if not inside:
                raise ValueError(f"no .ipynb files in the folder ({item})")
            paths += inside
        elif path.is_file():
            paths.append(path)
        else:
            raise ValueError(f"no such notebook or folder ({item})")
    subs = [_submission(p.stem, p) for p in paths]
    _unique_ids(subs, "the notebooks' file names")
    return subs


def read_roster(name: str) -> list[Submission]:
    """A CSV of ``student,notebook`` rows (a header line naming the two columns; more columns are
    ignored). A notebook's path is relative to the roster's folder."""
    path = pathlib.Path(name)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ValueError(f"no such file (--roster {name})") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the roster: {type(exc).__name__} (--roster {name})") from None
    rows = list(csv.reader(io.StringIO(text)))
    header = [c.strip().lower() for c in rows[0]] if rows else []
    if "student" not in header or "notebook" not in header:
        raise ValueError(f"the first line must name the columns student and notebook, e.g. 'student,notebook' "
                         f"(--roster {name})")
    s_col, n_col = header.index("student"), header.index("notebook")
    subs = []
    for number, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        where = f"{name} line {number}"
        if len(row) <= max(s_col, n_col) or not row[s_col].strip() or not row[n_col].strip():
            raise ValueError(f"{where}: expected a student id and a notebook, got {','.join(row)!r}")
        notebook = pathlib.Path(row[n_col].strip())
        subs.append(_submission(row[s_col].strip(), notebook if notebook.is_absolute() else path.parent / notebook,
                                where))
    if not subs:
        raise ValueError(f"the roster lists no student (--roster {name})")
    _unique_ids(subs, name)
    return subs


def _unique_ids(subs: list[Submission], where: str) -> None:
    seen: dict[str, Submission] = {}
    for sub in subs:
        key = feedback_name(sub.student).lower()
        if key in seen:
            raise ValueError(f"two students share the id {sub.student!r} (or the same feedback file name) in {where}: "
                             f"{seen[key].path} and {sub.path}")
        seen[key] = sub


def feedback_name(student: str) -> str:
    """The student's feedback file: their id, with anything but letters, digits, . _ - replaced."""
    safe = _SAFE.sub("_", student).strip("._") or "student"
    return f"{safe[:100]}.md"


@dataclass
class Outputs:
    csv: pathlib.Path | None = None
    json: pathlib.Path | None = None
    feedback: pathlib.Path | None = None


def _writable_folder(folder: pathlib.Path, what: str) -> None:
    if not folder.is_dir():
        raise ValueError(f"no such folder {folder} ({what})")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".grade-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"cannot write into {folder}: {exc.strerror} ({what})") from None


def check_outputs(csv_name: str | None, json_name: str | None, feedback: str | None,
                  submissions: list[Submission]) -> Outputs:
    """Every path the grader will write, checked before any notebook runs: a file's folder exists and
    takes a file, the file is not a folder nor a submission; the feedback folder exists or can be made."""
    inputs = {sub.path.resolve() for sub in submissions}
    out = Outputs()
    for option, name in (("--csv", csv_name), ("--json", json_name)):
        if name is None:
            continue
        path = pathlib.Path(name)
        if path.is_dir():
            raise ValueError(f"{name} is a folder; give a file name ({option} {name})")
        if path.resolve() in inputs:
            raise ValueError(f"{name} is one of the notebooks being graded ({option} {name})")
        _writable_folder(path.parent if str(path.parent) else pathlib.Path("."), f"{option} {name}")
        setattr(out, option[2:], path)
    if csv_name is not None and json_name is not None and out.csv.resolve() == out.json.resolve():
        raise ValueError(f"--csv and --json name the same file ({csv_name})")
    if feedback is not None:
        folder = pathlib.Path(feedback)
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{feedback} is a file, not a folder (--feedback {feedback})")
        if not folder.exists():
            _writable_folder(folder.parent if str(folder.parent) else pathlib.Path("."), f"--feedback {feedback}")
            folder.mkdir()
        _writable_folder(folder, f"--feedback {feedback}")
        out.feedback = folder
    return out


def points_file(name: str | None) -> dict[str, float] | None:
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
            first, last = catalogue.EXERCISES[0].number, catalogue.EXERCISES[-1].number
            raise ValueError(f"no exercise {number!r}; the exercises are {first} ... {last} (--points {name})")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"exercise {number}: points must be a whole number >= 0, got {value!r} (--points {name})")
    return table
