"""Every lesson notebook holds exactly the cells of its jupytext source.

The source ``lessons/src/NN_name.py`` is what contributors edit; ``lessons/NN_name.ipynb`` is
built from it by ``python lessons/build.py NN`` and committed with outputs. These tests
compare cell types and sources only (outputs and metadata are ignored), need no kernel,
and name the lesson and the first differing cell. They use the same comparison as
``python lessons/build.py --check``; the last tests show that it can fail.
"""

import importlib.util
import pathlib
import re
import shutil

import pytest

# lessons/build.py reads the sources with jupytext (a developer tool, requirements-dev.txt):
# on the learner's install the whole module skips, naming it.
for _module in ("jupytext", "nbformat"):
    pytest.importorskip(_module, reason=f"{_module} is not installed (pip install -r requirements-dev.txt): "
                                        "lesson sync tests skipped")
import nbformat  # noqa: E402

LESSONS = pathlib.Path(__file__).resolve().parents[1] / "lessons"
DERIVATIONS = LESSONS.parent / "docs" / "derivations.md"

_spec = importlib.util.spec_from_file_location("lessons_build", LESSONS / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)


@pytest.mark.parametrize("number", sorted(build.lessons(LESSONS)))
def test_notebook_matches_source(number):
    source = build.lessons(LESSONS)[number]
    problem = build.first_difference(source, build.notebook_path(source))
    assert problem is None, f"lesson {number}: {problem}"


def test_every_notebook_has_a_source():
    assert build.lessons(LESSONS), "no lesson sources found in lessons/src/"
    assert build.orphans(LESSONS) == []


def test_learners_see_each_lesson_once():
    """lessons/ holds the notebooks and the learner's scripts; no lesson source sits beside its notebook."""
    assert not [p.name for p in LESSONS.glob("[0-9][0-9]_*.py")]
    assert {p.stem for p in LESSONS.glob("[0-9][0-9]_*.ipynb")} == {p.stem for p in build.lessons(LESSONS).values()}


def test_notebooks_open_unmodified():
    """JupyterLab marks a notebook modified when the kernel it starts has another kernelspec or
    language_info than the file holds (lessons/build.py: KERNELSPEC). Every committed notebook
    holds the kernelspec ipykernel installs, a complete language_info, nbformat 4.5 (cell ids),
    and the jupytext pairing with its source in src/."""
    for number, source in build.lessons(LESSONS).items():
        nb = nbformat.read(build.notebook_path(source), as_version=4)
        assert nb.metadata.kernelspec == build.KERNELSPEC, f"lesson {number}: {nb.metadata.kernelspec}"
        info = nb.metadata.get("language_info", {})
        assert {"name", "version", "mimetype", "codemirror_mode", "pygments_lexer"} <= set(info), \
            f"lesson {number}: language_info {info} (execute it: python lessons/build.py {number})"
        assert (nb.nbformat, nb.nbformat_minor) == (4, 5), f"lesson {number}"
        assert nb.metadata.jupytext == {"formats": "ipynb,src//py:percent"}, f"lesson {number}"


def test_the_pairing_finds_the_source():
    """jupytext (where it is installed, e.g. in JupyterLab) pairs lessons/NN.ipynb with lessons/src/NN.py."""
    jupytext = pytest.importorskip("jupytext")
    from jupytext.paired_paths import paired_paths
    source = build.lessons(LESSONS)["03"]
    nb = build.notebook_path(source)
    pairs = [path for path, _ in paired_paths(str(nb), "ipynb", "ipynb,src//py:percent")]
    assert pairs == [str(nb), str(source)]
    assert jupytext.read(source).metadata["jupytext"]["formats"] == "ipynb,src//py:percent"


def test_scripts_are_not_lessons():
    names = {p.name for p in build.lessons(LESSONS).values()}
    assert names and "debug_attention.py" not in names and "debug_layers.py" not in names and "build.py" not in names


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_lessons_link_their_derivations():
    """Lessons 0-7 link their section of docs/derivations.md, and every such link's anchor exists."""
    anchors = {_anchor(line.lstrip("#")) for line in DERIVATIONS.read_text().splitlines() if line.startswith("#")}
    for number, source in build.lessons(LESSONS).items():
        # docs/derivations.md through lessons/docs/, the copy beside the notebooks (lessonkit/links.py)
        links = re.findall(r"\]\(docs/derivations\.md(?:#([\w\-]+))?", source.read_text())
        if number <= "07":
            assert links, f"{source.name} does not link docs/derivations.md"
        missing = [a for a in links if a and a not in anchors]
        assert not missing, f"{source.name} links anchors that docs/derivations.md lacks: {missing}"


# -- the check can fail ------------------------------------------------------------------

@pytest.fixture
def copy_of_lesson_3(tmp_path):
    """tmp/src/03_feed_forward.py and tmp/03_feed_forward.ipynb"""
    source = build.lessons(LESSONS)["03"]
    (tmp_path / "src").mkdir()
    shutil.copy(source, tmp_path / "src" / source.name)
    shutil.copy(build.notebook_path(source), tmp_path / build.notebook_path(source).name)
    return tmp_path / "src" / source.name


def test_an_edited_source_is_caught(copy_of_lesson_3):
    line = "rng = np.random.default_rng(0)"
    notebook = build.notebook_path(copy_of_lesson_3)
    index = next(i for i, c in enumerate(nbformat.read(notebook, as_version=4).cells) if line in c.source)
    copy_of_lesson_3.write_text(copy_of_lesson_3.read_text().replace(line, "rng = np.random.default_rng(99)", 1))
    problem = build.first_difference(copy_of_lesson_3, notebook)
    assert problem is not None and "03_feed_forward.ipynb" in problem and f"at cell {index} (source" in problem
    assert "'rng = np.random.default_rng(99)' in the source" in problem


def test_a_changed_cell_type_is_caught(copy_of_lesson_3):
    text = copy_of_lesson_3.read_text().replace("# %% [markdown]", "# %%", 1)   # cell 0 becomes code
    copy_of_lesson_3.write_text(text)
    problem = build.first_difference(copy_of_lesson_3, build.notebook_path(copy_of_lesson_3))
    assert problem is not None and "at cell 0 (type: markdown in the notebook, code in the source)" in problem


def test_a_removed_cell_is_caught(copy_of_lesson_3):
    text = copy_of_lesson_3.read_text()
    copy_of_lesson_3.write_text(text[: text.rindex("\n# %%")] + "\n")             # drop the last cell
    problem = build.first_difference(copy_of_lesson_3, build.notebook_path(copy_of_lesson_3))
    assert problem is not None and "cells" in problem


def test_a_trailing_newline_is_caught(copy_of_lesson_3):
    notebook = build.notebook_path(copy_of_lesson_3)
    nb = nbformat.read(notebook, as_version=4)
    nb.cells[2].source += "\n"
    nbformat.write(nb, notebook)
    problem = build.first_difference(copy_of_lesson_3, notebook)
    assert problem is not None and "at cell 2 (source" in problem and "(no line)" in problem


def test_a_missing_notebook_or_source_is_caught(copy_of_lesson_3):
    notebook = build.notebook_path(copy_of_lesson_3)
    notebook.rename(notebook.with_name("03_renamed.ipynb"))
    assert "has no notebook" in build.first_difference(copy_of_lesson_3, notebook)
    expected = "03_renamed.ipynb has no source src/03_renamed.py (with a jupytext header)"
    assert build.orphans(copy_of_lesson_3.parent.parent) == [expected]


def test_a_source_beside_its_notebook_is_caught(copy_of_lesson_3):
    shutil.copy(copy_of_lesson_3, copy_of_lesson_3.parent.parent / copy_of_lesson_3.name)
    assert build.orphans(copy_of_lesson_3.parent.parent) == [
        "03_feed_forward.py is a lesson source outside src/: move it to src/03_feed_forward.py"]


def test_no_execute_keeps_the_outputs_of_unchanged_cells(copy_of_lesson_3):
    """--no-execute: a tag or a markdown edit keeps every output; an edited code cell loses its own."""
    notebook = build.notebook_path(copy_of_lesson_3)
    before = nbformat.read(notebook, as_version=4)
    outputs = [c.outputs for c in before.cells if c.cell_type == "code"]
    assert any(outputs), "the committed lesson 3 has no outputs"
    text = copy_of_lesson_3.read_text()
    copy_of_lesson_3.write_text(text.replace("# %% [markdown]", "# %% [markdown] tags=[\"solution\"]", 1))
    assert build.build(copy_of_lesson_3, execute=False) is True
    after = nbformat.read(notebook, as_version=4)
    assert [c.outputs for c in after.cells if c.cell_type == "code"] == outputs
    assert after.metadata.language_info == before.metadata.language_info
    assert after.cells[0].metadata.tags == ["solution"]

    line = "rng = np.random.default_rng(0)"
    index = next(i for i, c in enumerate(after.cells) if line in c.source)
    copy_of_lesson_3.write_text(copy_of_lesson_3.read_text().replace(line, "rng = np.random.default_rng(99)", 1))
    assert build.build(copy_of_lesson_3, execute=False) is False
    edited = nbformat.read(notebook, as_version=4)
    assert edited.cells[index].outputs == [] and edited.cells[index].execution_count is None
    assert [c.outputs for i, c in enumerate(edited.cells) if c.cell_type == "code" and i != index] == \
        [c.outputs for i, c in enumerate(after.cells) if c.cell_type == "code" and i != index]
