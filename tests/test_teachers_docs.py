"""docs/teachers.md: every command in it runs as shown (slow), the output it shows is what the
grader prints, and the figures it states are the code's."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from lessonkit import grade, judge
from lessonkit.exercises import _common, catalogue

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "teachers.md").read_text()


def _blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", PAGE, re.S)


def test_the_page_is_linked_from_the_index():
    assert "(teachers.md)" in (ROOT / "docs" / "index.md").read_text()


def test_the_figures_it_states_are_the_codes():
    assert f"**{_common.TOL:.0e}**" in PAGE
    assert f"grace of {grade.GRACE:g} s" in PAGE
    assert f"(default {grade.DEFAULT_TIMEOUT:g}, the limit" in PAGE
    assert f"runs on {judge.HIDDEN_CASES} hidden cases" in PAGE


def test_the_lesson_table_is_current():
    """Exercise minutes and needs exactly; reading and running times as the page was last rendered, within a
    margin, so that an edit of a lesson's prose does not stale the page at once."""
    table = catalogue.lesson_table(ROOT / "lessons")
    want = {row.split("|")[1].strip(): [c.strip() for c in row.split("|")[1:-1]] for row in table.splitlines()[2:]}
    have = {row.split("|")[1].strip(): [c.strip() for c in row.split("|")[1:-1]]
            for row in PAGE.split("| lesson | reading (estimate)")[1].split("\n\n")[0].splitlines()[2:]}
    assert sorted(have) == sorted(want), "lessons in the table: rerun the command the page names"
    for lesson, (_, reading, running, exercises, needs) in want.items():
        _, h_reading, h_running, h_exercises, h_needs = have[lesson]
        if running != "not recorded":         # the record's minutes move with each build's load: a loose check
            assert abs(int(running.split()[0]) - int(h_running.split()[0])) <= 3, f"lesson {lesson}: running"
        assert (h_exercises, h_needs) == (exercises, needs), f"lesson {lesson}: rerun the command the page names"
        minutes = int(reading.split()[0]), int(h_reading.split()[0])
        assert abs(minutes[0] - minutes[1]) <= max(10, minutes[0] // 4), f"lesson {lesson}: reading {minutes}"


@pytest.mark.slow
def test_every_command_runs_as_shown(tmp_path):
    """Each line of the page's bash blocks, in order, from a folder that looks like the root of
    the repository (its lessons/ is this one's); the grader's output is the one the page shows."""
    (tmp_path / "lessons").symlink_to(ROOT / "lessons")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    outputs = {}
    for block in _blocks("bash"):
        for line in block.strip().splitlines():
            if line.startswith("pip install"):
                continue                                    # the environment running the tests has them
            command = line.replace("python ", f"{sys.executable} ", 1) if line.startswith("python ") else line
            result = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                                    timeout=900)
            assert result.returncode == 0, f"{line}\n{result.stderr[-3000:]}"
            outputs[line] = result.stdout
    assert (tmp_path / "student" / "03_feed_forward.ipynb").is_file()
    assert (tmp_path / "grades.csv").is_file() and (tmp_path / "grades.json").is_file()
    shown = _blocks("text")[0]
    printed = outputs["python -m minitransformer grade --roster roster.csv --jobs 2 --feedback feedback/ --csv grades.csv "
                      "--json grades.json"]
    assert sorted(p.name for p in (tmp_path / "feedback").iterdir()) == ["ana.md", "bo.md"]

    def mask(text):
        return re.sub(r"run, [\d.]+ s\]", "run, ... s]", text).strip()
    assert mask(printed) == mask(shown)
    points = outputs["python -m minitransformer grade submissions/ --timeout 120 --points points.json"]
    assert "total: 3/6 points over 2 notebooks" in points
