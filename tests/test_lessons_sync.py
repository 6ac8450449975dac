"""Every lesson notebook holds exactly the cells of its jupytext source.

The source ``lessons/NN_name.py`` is what contributors edit; ``lessons/NN_name.ipynb`` is
built from it by ``python lessons/build.py NN`` and committed with outputs. These tests
compare cell types and sources only (outputs and metadata are ignored), need no kernel,
and name the lesson and the first differing cell. They use the same comparison as
``python lessons/build.py --check``; the last tests show that it can fail.
"""

import importlib.util
import pathlib
import re
import shutil

import nbformat
import pytest

LESSONS = pathlib.Path(__file__).resolve().parents[1] / "lessons"
DERIVATIONS = LESSONS.parent / "docs" / "derivations.md"

_spec = importlib.util.spec_from_file_location("lessons_build", LESSONS / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)


@pytest.mark.parametrize("number", sorted(build.lessons(LESSONS)))
def test_notebook_matches_source(number):
    source = build.lessons(LESSONS)[number]
    problem = build.first_difference(source, source.with_suffix(".ipynb"))
    assert problem is None, f"lesson {number}: {problem}"


def test_every_notebook_has_a_source():
    assert build.lessons(LESSONS), "no lesson sources found in lessons/"
    assert build.orphans(LESSONS) == []


def test_scripts_are_not_lessons():
    names = {p.name for p in build.lessons(LESSONS).values()}
    assert "debug_attention.py" not in names and "debug_layers.py" not in names and "build.py" not in names


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_lessons_link_their_derivations():
    """Lessons 0-7 link their section of docs/derivations.md, and every such link's anchor exists."""
    anchors = {_anchor(line.lstrip("#")) for line in DERIVATIONS.read_text().splitlines() if line.startswith("#")}
    for number, source in build.lessons(LESSONS).items():
        links = re.findall(r"\.\./docs/derivations\.md(?:#([\w\-]+))?", source.read_text())
        if number <= "07":
            assert links, f"{source.name} does not link docs/derivations.md"
        missing = [a for a in links if a and a not in anchors]
        assert not missing, f"{source.name} links anchors that docs/derivations.md lacks: {missing}"


# -- the check can fail ------------------------------------------------------------------

@pytest.fixture
def copy_of_lesson_3(tmp_path):
    source = build.lessons(LESSONS)["03"]
    shutil.copy(source, tmp_path / source.name)
    shutil.copy(source.with_suffix(".ipynb"), tmp_path / source.with_suffix(".ipynb").name)
    return tmp_path / source.name


def test_an_edited_source_is_caught(copy_of_lesson_3):
    line = "rng = np.random.default_rng(0)"
    notebook = copy_of_lesson_3.with_suffix(".ipynb")
    index = next(i for i, c in enumerate(nbformat.read(notebook, as_version=4).cells) if line in c.source)
    copy_of_lesson_3.write_text(copy_of_lesson_3.read_text().replace(line, "rng = np.random.default_rng(99)", 1))
    problem = build.first_difference(copy_of_lesson_3, notebook)
    assert problem is not None and "03_feed_forward.ipynb" in problem and f"at cell {index} (source" in problem
    assert "'rng = np.random.default_rng(99)' in the source" in problem


def test_a_changed_cell_type_is_caught(copy_of_lesson_3):
    text = copy_of_lesson_3.read_text().replace("# %% [markdown]", "# %%", 1)   # cell 0 becomes code
    copy_of_lesson_3.write_text(text)
    problem = build.first_difference(copy_of_lesson_3, copy_of_lesson_3.with_suffix(".ipynb"))
    assert problem is not None and "at cell 0 (type: markdown in the notebook, code in the source)" in problem


def test_a_removed_cell_is_caught(copy_of_lesson_3):
    text = copy_of_lesson_3.read_text()
    copy_of_lesson_3.write_text(text[: text.rindex("\n# %%")] + "\n")             # drop the last cell
    problem = build.first_difference(copy_of_lesson_3, copy_of_lesson_3.with_suffix(".ipynb"))
    assert problem is not None and "cells" in problem


def test_a_trailing_newline_is_caught(copy_of_lesson_3):
    notebook = copy_of_lesson_3.with_suffix(".ipynb")
    nb = nbformat.read(notebook, as_version=4)
    nb.cells[2].source += "\n"
    nbformat.write(nb, notebook)
    problem = build.first_difference(copy_of_lesson_3, notebook)
    assert problem is not None and "at cell 2 (source" in problem and "(no line)" in problem


def test_a_missing_notebook_or_source_is_caught(copy_of_lesson_3):
    notebook = copy_of_lesson_3.with_suffix(".ipynb")
    notebook.rename(notebook.with_name("03_renamed.ipynb"))
    assert "has no notebook" in build.first_difference(copy_of_lesson_3, notebook)
    expected = "03_renamed.ipynb has no source 03_renamed.py (with a jupytext header)"
    assert build.orphans(copy_of_lesson_3.parent) == [expected]
