"""The documentation site (docs/conf.py) builds with warnings as errors, and its plain-text
docstring converter (docs/_ext/plain_docstrings.py) produces reST that parses cleanly."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS_TOOLS = "pip install -r requirements-dev.txt"


def _need(module):
    return pytest.importorskip(module, reason=f"{module} is not installed ({DOCS_TOOLS}): docs test skipped")


@pytest.mark.slow
def test_docs_site_builds_without_warnings(tmp_path):
    for module in ("sphinx", "myst_nb", "sphinx_book_theme"):
        _need(module)
    out = tmp_path / "html"
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-c", "docs",
         "-d", str(tmp_path / "doctrees"), ".", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"sphinx-build failed:\n{result.stderr[-6000:]}"
    assert result.stderr.strip() == "", result.stderr[-6000:]

    # Every numbered lesson is a page, shown with the outputs it was committed with.
    lessons = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))
    assert lessons
    for notebook in lessons:
        page = out / "lessons" / f"{notebook.stem}.html"
        assert page.is_file(), f"no page for {notebook.name}"
        assert "cell_output" in page.read_text(encoding="utf-8"), f"{notebook.name} shows no outputs"
    for name in ("index", "derivations", "paper_map", "glossary", "api"):
        assert (out / "docs" / f"{name}.html").is_file(), name
    # The API reference has a page per module, and the glossary links into it.
    attention = out / "docs" / "api" / "minitransformer.layers.attention.html"
    assert 'id="minitransformer.layers.attention.attention_forward"' in attention.read_text(encoding="utf-8")
    glossary = (out / "docs" / "glossary.html").read_text(encoding="utf-8")
    assert "잔차 연결" in glossary
    assert "api/minitransformer.layers.residual.html#minitransformer.layers.residual.Residual" in glossary
    assert (out / "index.html").read_text(encoding="utf-8").count("docs/index.html") >= 1


@pytest.fixture
def plain_docstrings():
    _need("docutils")
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import plain_docstrings
        yield plain_docstrings
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))


# name -> (docstring lines, lines the reST must contain)
DOCSTRINGS = {
    "display after prose": (["Forward:", "    y = x W + b", "Backward, in reverse:", "    dx = dy W^T",
                             "Masked entries get |x| = 0."],
                            ["Forward:", "::", "    y = x W + b", "    dx = dy W^T", r"Masked entries get \|x\| = 0."]),
    "hanging indent": (["lr: a float, or a callable such as :class:`NoamSchedule`.",
                        "clip_norm: if set, the norm is clipped", "    before the update."],
                       ["::", "    lr: a float, or a callable such as NoamSchedule.", "        before the update."]),
    "aligned columns": (["src:      (B, S) int64   source ids", "tgt_in:   (B, T) int64   <bos> + ids"],
                        ["::", "    src:      (B, S) int64   source ids"]),
    "lone star": (["L = sum forward(*inputs) * G, and *this* is emphasis."],
                  [r"L = sum forward(\*inputs) * G, and *this* is emphasis."]),
    "bullets": (["* ``a`` first item, with a", "  continuation line;", "* second item."],
                ["* ``a`` first item, with a", "  continuation line;", "* second item."]),
}


@pytest.mark.parametrize("name", sorted(DOCSTRINGS))
def test_plain_docstrings_become_clean_rest(plain_docstrings, name):
    lines, expected = DOCSTRINGS[name]
    rest = plain_docstrings.to_rest(list(lines))
    assert plain_docstrings.parses_cleanly("\n".join(rest)), "\n".join(rest)
    for line in expected:
        assert line in rest, f"{line!r} not in:\n" + "\n".join(rest)


def test_a_paragraph_that_still_warns_is_shown_as_written(plain_docstrings):
    lines = ["A table row |a| b |", "and ``an unclosed literal"]
    rest = plain_docstrings.to_rest(list(lines))
    assert plain_docstrings.parses_cleanly("\n".join(rest))
    assert rest[:2] == ["::", ""] and "    and an unclosed literal" in rest


def test_plain_docstrings_keep_valid_rest_as_it_is(plain_docstrings):
    lines = ["Adds ``a`` and ``b``; see :func:`minitransformer.gradcheck.check_layer`.", "",
             "* one", "* two"]
    assert plain_docstrings.to_rest(list(lines)) == lines + [""]
