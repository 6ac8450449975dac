"""One table of exercises (lessonkit/exercises/catalogue.py) agrees with the checkers'
``@exercise`` numbers, the lessons' headings and tags, and docs/teachers.md."""

import re

import pytest
from lesson_exercises import LESSONS, ROOT, build, exercises

from lessonkit.exercises import catalogue, registered

HEADING = re.compile(r"^# ### Exercise (\d+\.\d+) — (.+)$", re.M)


def test_every_checker_is_in_the_table_and_back():
    found = registered()
    table = {e.checker for e in catalogue.EXERCISES}
    assert table == set(found), (table ^ set(found))
    for e in catalogue.EXERCISES:
        fmt = found[e.checker].exercise
        assert fmt == e.number or ("{" in fmt and fmt.format(e.number.split(".")[1]) == e.number), (e, fmt)
    numbers = [e.number for e in catalogue.EXERCISES]
    assert len(numbers) == len(set(numbers))
    assert numbers == sorted(numbers, key=lambda n: [int(x) for x in n.split(".")])


def test_the_lessons_headings_are_the_table():
    for number, source in build.lessons(LESSONS).items():
        headings = HEADING.findall(source.read_text())
        want = [(e.number, e.title) for e in catalogue.for_lesson(int(number))]
        assert headings == want, f"lesson {number}: headings {headings}, catalogue {want}"


def test_points_default_to_one():
    assert catalogue.DEFAULT_POINTS == 1
    assert all(catalogue.points(e.number) == catalogue.POINTS.get(e.number, 1) for e in catalogue.EXERCISES)
    assert catalogue.points("1.3", {"1.3": 4}) == 4


@pytest.mark.parametrize("lesson", sorted({e.lesson for e in catalogue.EXERCISES}))
def test_each_exercise_has_a_stub_a_check_and_a_solution(lesson):
    found = exercises(lesson)
    assert sorted(found) == sorted(e.number for e in catalogue.for_lesson(lesson)), sorted(found)
    for number, ex in found.items():
        assert len(ex.check) == 1, f"exercise {number}: {len(ex.check)} checking calls in cells tagged check"
        assert ex.stub is not None, f"exercise {number}: the check cell's argument is defined in no stub cell"
        assert ex.solutions, f"exercise {number}: no solution cell calls its checker"


def test_every_checker_call_is_in_a_tagged_cell():
    """A checker is called only by a check cell (on the stub) or a solution cell."""
    from lesson_exercises import calls, lesson_notebook
    for number in build.lessons(LESSONS):
        for call in calls(lesson_notebook(int(number))):
            assert {"check", "solution"} & set(call.tags), f"lesson {number}, cell {call.cell}: {call.checker} untagged"


def test_tags_are_the_four_of_the_convention():
    for number in build.lessons(LESSONS):
        nb = build.notebook(build.lessons(LESSONS)[number])
        for cell in nb.cells:
            assert set(build.tags(cell)) <= set(build.TAGS) and len(build.tags(cell)) <= 1, (number, cell.id)


def test_the_convention_is_documented():
    readme = (LESSONS / "src" / "README.md").read_text()
    for tag in build.TAGS:
        assert f"`{tag}`" in readme
    assert "lessons/src/README.md" in (ROOT / "docs" / "teachers.md").read_text()


def test_teachers_page_lists_every_exercise_as_the_table_says():
    """docs/teachers.md's table is the catalogue, row for row."""
    page = (ROOT / "docs" / "teachers.md").read_text()
    assert catalogue.markdown_table() in page, (
        "docs/teachers.md's exercise table differs from catalogue.py: paste the output of "
        "python -c 'from lessonkit.exercises import catalogue; print(catalogue.markdown_table())'")
