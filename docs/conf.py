"""Sphinx configuration of the minitransformer documentation site.

The source directory is the repository root, so that the lesson notebooks in lessons/
and the pages in docs/ are read where they are, and a link that works on GitHub
(docs/x.md -> ../minitransformer/layers/linear.py, lessons -> ../docs/...) works here too.
Build it from the repository root:

    python -m sphinx -W -b html -c docs . docs/_build/html

then open docs/_build/html/index.html. Notebooks are rendered with the outputs committed
in them; nothing is executed (nb_execution_mode = "off").
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))   # autodoc imports the package from this checkout
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import minitransformer  # noqa: E402

project = "minitransformer"
author = "the minitransformer authors"
copyright = "2026, the minitransformer authors"
release = version = minitransformer.__version__

extensions = [
    "myst_nb",                    # Markdown (MyST) pages and Jupyter notebooks
    "sphinx.ext.autodoc",         # the API reference, from the docstrings
    "sphinx.ext.autosummary",     # one API page per module, found by walking the package
    "sphinx.ext.mathjax",         # with the MathJax shipped in docs/_static/mathjax (below)
    "sphinx.ext.viewcode",        # highlighted source pages, linked from the API reference
    "plain_docstrings",           # docs/_ext: the plain-text docstrings as reST, warning-free
    "dotted_titles",              # docs/_ext: module names in the navigation wrap after a dot
]

# -- which files are pages --------------------------------------------------------------
root_doc = "docs/index"
# Every numbered lesson notebook is a page, so lessons added later appear with no edit here.
include_patterns = ["docs/**", "lessons/[0-9][0-9]_*.ipynb", "lessons/ko/[0-9][0-9]_*.ipynb"]   # and the Korean edition
exclude_patterns = ["docs/_build", "docs/_static", "**/.ipynb_checkpoints"]
templates_path = ["docs/_templates"]   # autosummary reads it from the source directory (the repository root)

# -- MyST and notebooks -----------------------------------------------------------------
nb_execution_mode = "off"          # render the committed outputs; never re-run a lesson here
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3           # GitHub-style #anchors on headings, as links in the pages use
nb_merge_streams = True            # one block per cell for stdout printed in several pieces
# A lesson renders sentences from its run as Markdown outputs (lessonkit.prose.show_markdown),
# with $...$ formulas in them: parse those with MyST, as the markdown cells are, not as plain CommonMark.
nb_render_markdown_format = "myst"

# -- API reference ----------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
    "member-order": "bysource",
    "exclude-members": "__new__",      # the NamedTuple caches' generated constructors
}
autodoc_preserve_defaults = True       # show `default=PRESETS["base"]` as written, not its repr
autodoc_mock_imports = ["cupy", "cupyx"]
# The docstrings are plain text in the style of the code comments: shapes in the paper's
# letters, `x` for a name. The default role renders `x` as inline code, not as italics.
# Blocks laid out by hand (formulas, aligned tables) are handled by docs/_ext/plain_docstrings.py.
default_role = "code"

# -- HTML -------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = f"minitransformer {version}"
html_theme_options = {
    "show_toc_level": 2,
    "home_page_in_toc": True,
    "use_download_button": True,
    "show_navbar_depth": 1,
}
html_static_path = ["_static"]          # docs/_static, copied to _static/ in the site
# Hangul on a machine with no Korean font: a web font that ships with the site (docs/hangul_font.py).
html_css_files = ["hangul.css"]
html_last_updated_fmt = None
html_show_sourcelink = False


# -- math -------------------------------------------------------------------------------
# The formulas are typeset in the reader's browser by MathJax 3, which ships with the site
# (docs/_static/mathjax: the npm package's TeX-to-HTML component, its fonts and its Apache-2.0
# license; SOURCE.md there says where it comes from), so a local build renders its math with
# no network. Sphinx's default would load MathJax from a CDN. tests/test_docs_browser.py opens
# pages in a headless browser with the network off and checks every formula is typeset.
# MathJax finds its fonts beside the script (output/chtml/fonts/woff-v2), so no fontURL is set.
mathjax_path = "mathjax/tex-chtml-full.js"      # relative to _static; "full": every TeX package, none fetched later


# -- checks and small fixes -------------------------------------------------------------
# A reference into the package that does not resolve (a renamed function named in the
# glossary, say) is a warning, so `-W` fails on it. Sphinx is silent about unresolved
# Python references unless nitpicky, and nitpicky would also flag every `numpy.ndarray`.
def _warn_on_missing_package_reference(app, env, node, contnode):
    target = node.get("reftarget", "")
    if node.get("refdomain") == "py" and target.startswith("minitransformer"):
        from sphinx.util import logging  # noqa: PLC0415

        logging.getLogger(__name__).warning(
            "reference to %r does not resolve (renamed or removed?)", target,
            location=node, type="ref", subtype="minitransformer")
    return None


# The site's root page is docs/index (the source directory is the repository root), so
# the build writes docs/index.html; index.html at the top sends a browser there.
_REDIRECT = ('<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
             '<meta http-equiv="refresh" content="0; url=docs/index.html">'
             '<title>minitransformer</title></head>'
             '<body><a href="docs/index.html">minitransformer documentation</a></body></html>\n')


def _write_redirect(app, exception):
    if exception is None and app.builder.format == "html":
        (Path(app.outdir) / "index.html").write_text(_REDIRECT, encoding="utf-8")


# The pages link to source files as GitHub shows them ([linear_forward](../minitransformer/
# layers/linear.py)). Here such a link would download the raw .py file; it goes to the
# module's API page instead, whose [source] links show the highlighted code.
def _source_links_to_api(app, doctree):
    from sphinx import addnodes  # noqa: PLC0415

    docdir = posixpath.dirname(app.env.docname)
    for node in list(doctree.findall(addnodes.download_reference)):
        path = posixpath.normpath(posixpath.join(docdir, node.get("reftarget", "")))
        match = re.fullmatch(r"(minitransformer(?:/\w+)*)\.py", path)
        if match is None:
            continue
        module = match.group(1).replace("/", ".").removesuffix(".__init__")
        xref = addnodes.pending_xref("", *node.children, refdomain="py", reftype="mod",
                                     reftarget=module, refexplicit=True, refdoc=app.env.docname)
        node.replace_self(xref)


# The lessons link the docs pages through lessons/docs/, a copy beside the notebooks, so that the
# links open in JupyterLab (served from lessons/) and on GitHub (lessonkit/links.py). Here the
# pages exist once, in docs/: a lesson's link into the copy is pointed at the page itself before
# MyST reads the notebook.
def _lesson_links_to_pages(app, docname, source):
    from lessonkit.links import rewrite_links, site_target  # noqa: PLC0415

    if docname.startswith("lessons/"):
        notebook = app.env.doc2path(docname, base=False)
        source[0] = rewrite_links(source[0], lambda target: site_target(str(notebook), target))


def setup(app):
    app.connect("source-read", _lesson_links_to_pages)
    app.connect("doctree-read", _source_links_to_api, priority=400)   # before downloads are collected
    app.connect("missing-reference", _warn_on_missing_package_reference)
    app.connect("build-finished", _write_redirect)
