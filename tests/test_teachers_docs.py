"""docs/teachers.md: every command in it runs as shown (slow), the output it shows is what the
grader prints, and the figures it states are the code's."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from lessonkit import grade
from lessonkit.exercises import _common

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "teachers.md").read_text()


def _blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", PAGE, re.S)


def test_the_page_is_linked_from_the_index():
    assert "(teachers.md)" in (ROOT / "docs" / "index.md").read_text()


def test_the_figures_it_states_are_the_codes():
    assert f"**{_common.TOL:.0e}**" in PAGE
    assert f"grace of {grade.GRACE:g} s" in PAGE
    assert f"(default {grade.DEFAULT_TIMEOUT:g}, the limit" in PAGE and f"{grade.DEFAULT_TIMEOUT:g} unless you say" in PAGE


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
    printed = outputs["python -m minitransformer grade submissions/ --csv grades.csv --json grades.json"]

    def mask(text):
        return re.sub(r"run, [\d.]+ s\]", "run, ... s]", text).strip()
    assert mask(printed) == mask(shown)
    points = outputs["python -m minitransformer grade submissions/ --timeout 120 --points points.json"]
    assert "total: 3/6 points over 2 notebooks" in points
