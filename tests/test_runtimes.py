"""Each lesson states its runtime at its top, and the figure is the one its last build recorded.

``python lessons/build.py NN`` times every cell while it executes lesson NN and writes the lesson's
entry of ``lessons/runtimes.json``; the lesson's first code cells render the figure from that record
(``lessonkit.runtimes.show_cost``), and every cell over 20 s is flagged just before it
(``show_slow_cell``). These tests time nothing: they read the committed notebooks and the record, and
check that what each notebook shows is what the record renders. The last tests show the check failing.
"""

import copy

import nbformat
import pytest
from lesson_exercises import LESSONS, build

from lessonkit import runtimes

FOUND = build.lessons(LESSONS)
RECORD = runtimes.load(LESSONS / runtimes.RECORD_NAME)


def _notebook(number):
    return nbformat.read(build.notebook_path(FOUND[number]), as_version=4)


def test_the_record_is_well_formed():
    assert RECORD.get("format") == 1 and RECORD.get("slow_cell_seconds") == runtimes.SLOW_CELL_SECONDS
    for number, entry in RECORD["lessons"].items():
        assert number in FOUND, f"runtimes.json has lesson {number}, which has no source"
        assert entry["notebook"] == build.notebook_path(FOUND[number]).name
        assert entry["seconds"] > 0 and isinstance(entry["commit"], str) and len(entry["commit"]) == 40
        assert {"cpu", "cores"} <= set(entry["machine"]) and set(entry["load_average"]) == {"start", "end"}
        assert all(c["seconds"] >= runtimes.LISTED_CELL_SECONDS for c in entry["cells"])
        assert all({"index", "id", "seconds", "label"} <= set(c) for c in entry["cells"])


@pytest.mark.parametrize("number", sorted(FOUND))
def test_each_lesson_states_the_runtime_its_last_build_recorded(number):
    """The cost cell is among the first code cells, its output is what the record renders, and every
    cell the record lists as over 20 s is labelled and flagged just before it."""
    assert number in RECORD["lessons"], f"lesson {number} was never executed: python lessons/build.py {number}"
    problems = build.runtime_problems(_notebook(number), number, RECORD)
    assert not problems, f"lesson {number}: " + "; ".join(problems)


def test_the_table_renders_every_lesson_from_the_record():
    table = build.lesson_table(LESSONS, RECORD).splitlines()
    assert table[0].startswith("| lesson | title | paper | runtime")
    rows = table[2:]
    assert len(rows) == len(FOUND)
    for row, (number, (title, section)) in zip(rows, build.lesson_titles(LESSONS).items()):
        cost = runtimes.format_seconds(RECORD["lessons"][number]["seconds"])
        assert row == f"| {int(number)} | [{title}](lessons/{build.notebook_path(FOUND[number]).name}) | {section} | {cost} |"
    assert "| 8 | [Why self-attention]" in "\n".join(rows) and "§1, §2, §4, Table 1" in "\n".join(rows)


def test_seconds_are_written_as_a_reader_reads_them():
    assert [runtimes.format_seconds(s) for s in (0.42, 3.4, 89.6, 130.2, 3725)] == \
        ["0.4 s", "3 s", "1 min 30 s", "2 min 10 s", "1 h 02 min"]


def test_the_cost_sentence_names_the_machine_the_load_and_the_slow_cells():
    record = {"slow_cell_seconds": 20, "lessons": {"09": {
        "seconds": 131.0, "date": "2026-12-02 10:00 UTC", "commit": "a" * 40, "dirty": False,
        "machine": {"cpu": "AMD EPYC", "cores": 2}, "load_average": {"start": [9.1, 8, 7], "end": [8.7, 8, 7]},
        "cells": [{"index": 40, "id": "l09-x", "seconds": 80.3, "label": "the copy run of §7"},
                  {"index": 12, "id": "l09-y", "seconds": 6.0, "label": None}]}}}
    text = runtimes.cost_markdown("09", record)
    assert "**Runtime: 2 min 11 s** on a 2-core CPU (AMD EPYC, load average 9.1 at the start and 8.7" in text
    assert "other jobs shared its cores" in text and "commit aaaaaaa" in text and "uncommitted" not in text
    assert "Cells over 20 s, each flagged where it comes: the copy run of §7 (80 s)." in text
    flag = runtimes.slow_cell_markdown("09", "the copy run of §7", record)
    assert "the next cell (the copy run of §7) took 80 s" in flag
    assert "not recorded yet" in runtimes.cost_markdown("42", record)


def test_a_slow_cell_is_recognised_by_its_first_line():
    assert runtimes.slow_label("# slow: the copy run of §7\ntrainer.run()") == "the copy run of §7"
    assert runtimes.slow_label("\n# slow:   x\n") == "x"
    assert runtimes.slow_label("trainer.run()  # slow: no") is None and runtimes.slow_label("# slow:") is None


# -- the check can fail --------------------------------------------------------------------

def _a_lesson():
    number = sorted(RECORD["lessons"])[0]
    return number, _notebook(number), copy.deepcopy(RECORD)


def test_a_runtime_that_differs_from_the_record_is_caught():
    number, nb, record = _a_lesson()
    record["lessons"][number]["seconds"] += 60
    problems = build.runtime_problems(nb, number, record)
    assert problems and "not what runtimes.json renders" in problems[0]


def test_a_lesson_without_its_cost_cell_is_caught():
    number, nb, record = _a_lesson()
    nb.cells = [c for c in nb.cells if not build.COST_CALL.search(c.source)]
    assert any("no show_cost" in p for p in build.runtime_problems(nb, number, record))


def test_a_slow_cell_without_its_flag_is_caught():
    number, nb, record = _a_lesson()
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    i = code[-1]
    nb.cells[i].source = "# slow: a long loop\n" + nb.cells[i].source
    record["lessons"][number]["cells"] = [{"index": i, "id": nb.cells[i].id, "seconds": 25.0, "label": "a long loop"}]
    problems = build.runtime_problems(nb, number, record)
    assert any("must be show_slow_cell" in p for p in problems), problems
    # flagged just before it, with the rendered output: no problem left about it
    flag = nbformat.v4.new_code_cell(f'show_slow_cell("{number}", "a long loop")')
    flag.id = "flag"
    nb.cells.insert(i, flag)
    build.render_runtime_cells(nb, number, record)
    assert build.runtime_problems(nb, number, record) == []


def test_an_unlabelled_slow_cell_is_caught():
    number, nb, record = _a_lesson()
    cell = next(c for c in nb.cells if c.cell_type == "code" and not build.COST_CALL.search(c.source))
    record["lessons"][number]["cells"] = [{"index": 0, "id": cell.id, "seconds": 30.0, "label": None}]
    assert any("begin it with '# slow: <label>'" in p for p in build.runtime_problems(nb, number, record))


def test_an_entry_is_made_from_the_cell_times():
    """runtime_entry: the lesson's span from the first cell's start to the last cell's end, and the cells
    over LISTED_CELL_SECONDS with their labels (fake times: nothing is timed here)."""
    number, nb, _ = _a_lesson()
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    started = {i: 100.0 + k for k, i in enumerate(code)}
    seconds = dict.fromkeys(code, 0.5)
    seconds[code[1]] = 7.25
    entry = build.runtime_entry(nb, build.notebook_path(FOUND[number]), seconds, started, [1.0, 1.0, 1.0], 600)
    assert entry["seconds"] == round(started[code[-1]] + 0.5 - started[code[0]], 1)
    assert entry["cells"] == [{"index": code[1], "id": nb.cells[code[1]].id, "seconds": 7.2, "label": None}]
    assert entry["notebook"] == build.notebook_path(FOUND[number]).name and "load_average" not in entry["machine"]
