"""A notebook's score from its judgements, and what the grader writes: the table it prints, the CSV,
the JSON, and one feedback file per student.

An exercise's result comes from every answer judged for it (each checking call's function, and the
stub's name at the end): the one with the most points; among answers with none, the last one that
tried (so a wrong answer shows its hint, not "not attempted"); else "not attempted"; else "not run"
(no checking call: the cell was deleted or the run stopped before it).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, field

from minitransformer.files import atomic_write_bytes

from ..exercises import catalogue

__all__ = ["STATUS_ORDER", "ExerciseResult", "NotebookReport", "feedback_text", "format_report", "score",
           "write_csv", "write_feedback", "write_json"]

STATUS_ORDER = ("correct", "partial", "wrong", "uses the package", "error", "timeout", "tampered", "not attempted",
                "not run")


def _points(value: float) -> float | int:
    value = round(value, 2)
    return int(value) if value == int(value) else value


@dataclass
class ExerciseResult:
    exercise: str
    title: str
    status: str               # one of STATUS_ORDER
    points: float             # earned: max_points × the share of hidden cases right
    max_points: int
    detail: str = ""          # one line for the student: the hint, the error, why it did not run
    message: str = ""         # the checker's whole message (for the teacher)
    cell: int | None = None   # the cell (0-based, as nbformat counts) after which the deciding answer was judged
    hidden: str = ""          # "3/4": hidden cases right / run


@dataclass
class NotebookReport:
    notebook: str
    lesson: int | None
    student: str = ""
    exercises: list[ExerciseResult] = field(default_factory=list)
    cells: int = 0            # code cells in the notebook
    cells_run: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    raised: list[str] = field(default_factory=list)     # "cell 4: NameError: name 'q' is not defined"
    predictions: list = field(default_factory=list)     # [what, the prediction or None, the result] per reveal

    @property
    def score(self) -> float:
        return _points(sum(e.points for e in self.exercises))

    @property
    def max_points(self) -> int:
        return sum(e.max_points for e in self.exercises)


def score(lesson: int | None, judgements: list, points: dict | None, not_run: str) -> list[ExerciseResult]:
    """One ExerciseResult per exercise of the lesson. ``judgements``: (cell, Judgement) in the order judged."""
    wanted = catalogue.for_lesson(lesson) if lesson is not None else \
        [e for e in catalogue.EXERCISES if e.number in {j.exercise for _, j in judgements}]
    results = []
    for ex in wanted:
        worth = catalogue.points(ex.number, points)
        mine = [(cell, j) for cell, j in judgements if j.exercise == ex.number]
        result = ExerciseResult(ex.number, ex.title, "not run", 0, worth, not_run)
        if mine:
            best = max(j.fraction for _, j in mine)
            tried = [(c, j) for c, j in mine if j.status != "not attempted"]
            if best > 0:
                cell, chosen = next((c, j) for c, j in mine if j.fraction == best)
            elif tried:
                cell, chosen = tried[-1]
            else:
                cell, chosen = mine[-1]
            result.status, result.cell = chosen.status, cell
            result.points = _points(worth * chosen.fraction)
            result.detail, result.message = chosen.detail, chosen.message
            result.hidden = f"{chosen.hidden[0]}/{chosen.hidden[1]}" if chosen.hidden[1] else ""
        results.append(result)
    return results


# -- what is printed -------------------------------------------------------------------------------

def format_report(report: NotebookReport, width: int = 100) -> str:
    lesson = f"lesson {report.lesson}" if report.lesson is not None else "no lesson found"
    who = f"{report.student}: " if report.student and report.student not in report.notebook else ""
    lines = [f"{who}{report.notebook}  ({lesson}): {report.score}/{report.max_points} points  "
             f"[{report.cells_run} of {report.cells} code cells run, {report.seconds:.1f} s]"]
    if report.exercises:
        lines.append(f"  {'exercise':<10}{'points':<9}{'status':<18}detail")
        for e in report.exercises:
            detail = e.detail if len(e.detail) <= width - 37 else e.detail[: width - 40] + "..."
            lines.append(f"  {e.exercise:<10}{f'{e.points}/{e.max_points}':<9}{e.status:<18}{detail}".rstrip())
    lines += [f"  note: {note}" for note in report.notes]
    return "\n".join(lines)


def _rows(reports: list[NotebookReport]) -> list[dict]:
    return [{"student": r.student, "notebook": r.notebook, "lesson": r.lesson, "exercise": e.exercise,
             "title": e.title, "status": e.status, "points": e.points, "max_points": e.max_points,
             "hidden": e.hidden, "detail": e.detail}
            for r in reports for e in r.exercises]


def write_csv(reports: list[NotebookReport], path) -> None:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["student", "notebook", "lesson", "exercise", "title", "status",
                                             "points", "max_points", "hidden", "detail"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(_rows(reports))
    atomic_write_bytes(str(path), out.getvalue().encode())


def write_json(reports: list[NotebookReport], path, run: dict) -> None:
    data = {**run,
            "notebooks": [{**{k: v for k, v in asdict(r).items() if k != "exercises"}, "score": r.score,
                           "max_points": r.max_points, "exercises": [asdict(e) for e in r.exercises]}
                          for r in reports],
            "total": {"score": _points(sum(r.score for r in reports)),
                      "max_points": sum(r.max_points for r in reports), "notebooks": len(reports)}}
    atomic_write_bytes(str(path), (json.dumps(data, indent=1, ensure_ascii=False) + "\n").encode())


def feedback_text(report: NotebookReport) -> str:
    """What one student reads: each exercise's verdict, hint and points; the cells that raised; notes.
    Hints only: no expected value of a hidden case."""
    title = f"lesson {report.lesson}" if report.lesson is not None else "a notebook whose lesson was not found"
    lines = [f"# Feedback: {report.student or report.notebook}", "",
             f"Notebook `{report.notebook}`, {title}: **{report.score} of {report.max_points} points**.", ""]
    if report.exercises:
        lines += ["| exercise | points | verdict | hidden cases | what to look at |", "| --- | --- | --- | --- | --- |"]
        for e in report.exercises:
            detail = e.detail.replace("|", "\\|") or ("" if e.status == "correct" else "-")
            lines.append(f"| {e.exercise} {e.title} | {e.points}/{e.max_points} | {e.status} | {e.hidden or '-'} | "
                         f"{detail} |")
        lines.append("")
    lines += ["Each exercise was run on the notebook's own inputs and then on hidden ones (other sizes and values). "
              "*partial* means some hidden cases were wrong; the hint names the likely mistake when one "
              "matches.", ""]
    if report.predictions:
        lines += ["Predictions (not scored by the grader; your teacher may read them):", "",
                  "| what | you predicted | the run gave |", "| --- | --- | --- |"]
        lines += [f"| {what} | {'(none written)' if p is None else p} | {r} |".replace("\n", " ")
                  for what, p, r in report.predictions] + [""]
    if report.raised:
        lines += ["Cells that raised an error when the notebook ran from the top:", ""]
        lines += [f"* {r}" for r in report.raised] + [""]
    if report.notes:
        lines += ["Notes:", ""] + [f"* {n}" for n in report.notes] + [""]
    return "\n".join(lines)


def write_feedback(report: NotebookReport, path) -> None:
    atomic_write_bytes(str(path), feedback_text(report).encode())
