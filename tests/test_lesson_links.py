"""Every link of every lesson opens where the lesson is opened (issue 39; the scheme is lessonkit/links.py):

* in JupyterLab started as the README says, ``jupyter lab lessons/``, whose root is lessons/: the
  target is a file inside lessons/ (GitHub resolves the same relative path in the repository);
* on the docs site, which reads the notebooks where they are (docs/conf.py maps a link into the
  copy lessons/docs/ to the page in docs/): the target is a page of the site or a file;
* a ``#anchor`` is a heading of the page it points into;

for every notebook under lessons/ (a translated edition in a subfolder too), in its markdown cells
and its Markdown outputs. Quick: nothing is built. The slow docs build (tests/test_docs.py) checks
that MyST resolves them too, with warnings as errors. Lesson 0's reading order lists every lesson.
"""

import fnmatch
import importlib.util
import re

import pytest

from lessonkit import links

ROOT = links.ROOT
NOTEBOOKS = [p.relative_to(ROOT).as_posix() for p in links.notebooks()]


def _conf():
    spec = importlib.util.spec_from_file_location("docs_conf", ROOT / "docs" / "conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    return conf


def _on_site(path: str, conf) -> bool:
    excluded = any(fnmatch.fnmatch(path, pattern) or path.startswith(pattern.rstrip("*/") + "/")
                   for pattern in conf.exclude_patterns)
    return not excluded and any(fnmatch.fnmatch(path, pattern) for pattern in conf.include_patterns)


def _problem(path: str, anchor: str | None, inside: str) -> str | None:
    """Why ``path`` (from the repository root) with ``anchor`` does not open, seen from ``inside``
    (the folder the server serves: lessons for JupyterLab, "" for the whole repository); or None."""
    if inside and not (path == inside or path.startswith(inside + "/")):
        return f"{path} is outside {inside}/, the root JupyterLab serves"
    if not (ROOT / path).is_file():
        return f"{path} does not exist"
    if anchor and path.endswith(".md") and anchor not in links.anchors((ROOT / path).read_text(encoding="utf-8")):
        return f"{path} has no heading #{anchor}"
    return None


def _links(notebook: str) -> list[str]:
    return [t for text in links.notebook_markdown(ROOT / notebook) for t in links.markdown_links(text)]


def test_the_lessons_link_something():
    assert len(NOTEBOOKS) >= 16
    linked = {t for nb in NOTEBOOKS for t in _links(nb)}
    assert any(t.startswith("docs/derivations.md#") for t in linked), "the lessons link the derivations"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_link_opens_in_jupyterlab_served_from_lessons(notebook):
    problems = [f"{target}: {why}" for target in _links(notebook)
                if (why := _problem(*links.resolve(notebook, target), inside="lessons"))]
    assert not problems, (f"{notebook}: links that would be 404s in `jupyter lab lessons/`: {problems}; link a docs "
                          f"page as {links.docs_link('PAGE.md', notebook)} (lessonkit/links.py)")


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_link_opens_on_the_docs_site(notebook):
    conf = _conf()
    if not _on_site(notebook, conf):
        pytest.skip(f"{notebook} is not a page of the site")
    problems = []
    for target in _links(notebook):
        path, anchor = links.resolve(notebook, links.site_target(notebook, target))
        why = _problem(path, anchor, inside="")
        if why is None and path.endswith((".md", ".ipynb")) and not _on_site(path, conf):
            why = f"{path} is not a page of the site (docs/conf.py include_patterns)"
        if why:
            problems.append(f"{target}: {why}")
    assert not problems, f"{notebook}: links that would not resolve on the docs site: {problems}"


def test_the_copy_of_the_linked_pages_is_current():
    stale = links.stale_copies()
    assert not stale, f"{stale}: run `python lessons/build.py --docs` (lessonkit/links.py)"
    copied = links.docs_copy()
    assert "derivations.md" in copied
    for page, text in copied.items():
        # The copy's own links point where the page's did: a lesson from lessons/docs/ is ../NN.ipynb.
        for target in links.markdown_links(text):
            path, anchor = links.resolve(f"{links.COPY}/{page}", target)
            assert _problem(path, anchor, inside="") is None, (page, target)


def test_site_target_maps_the_copy_back_to_the_page_at_any_depth():
    assert links.site_target("lessons/01_x.ipynb", "docs/derivations.md#1-linear-layer") == \
        "../docs/derivations.md#1-linear-layer"
    assert links.site_target("lessons/ko/01_x.ipynb", "../docs/paper_map.md") == "../../docs/paper_map.md"
    assert links.site_target("lessons/01_x.ipynb", "09_training.ipynb") == "09_training.ipynb"
    assert links.docs_link("derivations.md", "lessons/ko/01_x.ipynb") == "../docs/derivations.md"


def test_anchors_are_githubs():
    page = "# 1. Linear layer\n## 5. Scaled dot-product attention (§3.2.1, Eq. 1), with masks\n## Notes\n## Notes\n"
    assert links.anchors(page) == {"1-linear-layer", "5-scaled-dot-product-attention-321-eq-1-with-masks",
                                   "notes", "notes-1"}


def test_lesson_0_reading_order_lists_every_lesson():
    source = (ROOT / "lessons" / "src" / "00_how_to_use.py").read_text(encoding="utf-8")
    listed = {int(n) for n in re.findall(r"^# \| (\d+) ", source, re.M)}
    lessons = {int(p.name[:2]) for p in (ROOT / "lessons" / "src").glob("[0-9][0-9]_*.py")}
    assert listed == lessons, f"lesson 0's reading order misses lessons {sorted(lessons - listed)}"
