"""Links from the lessons that work wherever a lesson is opened: JupyterLab, GitHub, the docs site.

The three resolve a relative link differently:

* JupyterLab started as the README says (``jupyter lab lessons/``) serves lessons/ as its root:
  a link that climbs out of it (``../docs/derivations.md``) is a 404 there;
* GitHub resolves a link against the notebook's place in the repository;
* the docs site (docs/conf.py) reads the notebooks where they are, in a source tree that is the
  whole repository, and turns a link to a page into a link to that page's HTML.

**The scheme.** A lesson links a docs page through ``lessons/docs/``, a copy of every page of
docs/ that some lesson links to, beside the notebooks: ``[the derivations](docs/derivations.md#1-linear-layer)``
from ``lessons/NN_name.ipynb``, ``../docs/...`` from a notebook one folder down (a translated
edition in ``lessons/ko/``, say). Another lesson is linked by its notebook (``09_training.ipynb``).
Nothing outside lessons/ is linked (JupyterLab could not open it): the package's files are
named in code font instead. So every link stays inside lessons/, and:

* in JupyterLab and on GitHub it opens the file it names (the copy of the page);
* on the docs site ``site_target`` maps a link into ``lessons/docs/`` back to the page in docs/
  (docs/conf.py applies it to every lesson before MyST reads it);
* the student edition (``lessons/build.py --student DIR``) has its own ``DIR/docs``.

``python lessons/build.py`` writes the copy (``write_docs_copy``); each copied page's own links are
rewritten to point where they pointed from docs/ (a lesson, ``../07_encoder_decoder.ipynb``; the package,
``../../minitransformer/...``). ``tests/test_lesson_links.py`` resolves every link of every notebook
under lessons/ as JupyterLab and the docs site would, anchors included, and checks that the copy
matches docs/.
"""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LESSONS = "lessons"
DOCS = "docs"
COPY = f"{LESSONS}/{DOCS}"                 # the copy of the linked pages, beside the notebooks
HEADER = ("<!-- A copy of docs/{name} for the lessons, so that their links open it where a lesson is opened "
          "(lessonkit/links.py). Edit docs/{name}; `python lessons/build.py --docs` refreshes this copy. -->\n")

# [text](target) and [text](target "title"); images too. Not inside code spans, which a link never is here.
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)       # http:, https:, mailto:, ...


def markdown_links(text: str) -> list[str]:
    """The relative link targets of Markdown ``text`` (external URLs and in-page anchors left out)."""
    return [t for t in _LINK.findall(text) if not _EXTERNAL.match(t) and not t.startswith("#")]


def notebook_markdown(path: Path) -> list[str]:
    """The Markdown a reader sees in a notebook: its markdown cells and its cells' Markdown outputs."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    texts = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            texts.append("".join(cell.get("source", "")))
        for output in cell.get("outputs", []):
            markdown = output.get("data", {}).get("text/markdown")
            if markdown:
                texts.append("".join(markdown))
    return texts


def notebooks(root: Path = ROOT) -> list[Path]:
    """Every notebook under lessons/, at any depth (a translated edition too), checkpoints left out."""
    return sorted(p for p in (root / LESSONS).rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def docs_link(page: str, notebook: str) -> str:
    """The link a notebook at ``notebook`` (a path from the repository root) writes to ``docs/page``:
    ``docs/derivations.md`` from lessons/NN.ipynb, ``../docs/derivations.md`` from lessons/ko/NN.ipynb."""
    return posixpath.relpath(f"{COPY}/{page}", posixpath.dirname(notebook))


def resolve(notebook: str, target: str) -> tuple[str, str | None]:
    """(path from the repository root, anchor or None) of ``target`` as written in ``notebook``."""
    path, _, anchor = target.partition("#")
    return posixpath.normpath(posixpath.join(posixpath.dirname(notebook), path)), anchor or None


def site_target(notebook: str, target: str) -> str:
    """The link as the docs site should read it: one into the copy in lessons/docs/ points at the
    page in docs/ instead (the site has the pages once, where they are)."""
    path, anchor = resolve(notebook, target)
    if not path.startswith(COPY + "/"):
        return target
    page = posixpath.relpath(f"{DOCS}/{path[len(COPY) + 1:]}", posixpath.dirname(notebook))
    return page + (f"#{anchor}" if anchor else "")


def rewrite_links(text: str, rewrite) -> str:
    """``text`` with every relative link target ``t`` replaced by ``rewrite(t)``."""
    def one(match: re.Match) -> str:
        target = match.group(1)
        if _EXTERNAL.match(target) or target.startswith("#"):
            return match.group(0)
        return match.group(0).replace(target, rewrite(target), 1)
    return _LINK.sub(one, text)


def linked_pages(root: Path = ROOT) -> list[str]:
    """The docs pages (file names in docs/) that a lesson links, from its source or its notebook."""
    pages = set()
    sources = [(p, p.read_text(encoding="utf-8")) for p in sorted((root / LESSONS / "src").glob("*.py"))]
    texts = sources + [(p, text) for p in notebooks(root) for text in notebook_markdown(p)]
    for path, text in texts:
        # A source's links are written for its notebook, lessons/NN_name.ipynb.
        where = (f"{LESSONS}/{path.stem}.ipynb" if path.suffix == ".py"
                 else path.relative_to(root).as_posix())
        for target in markdown_links(text):
            resolved, _ = resolve(where, target)
            if resolved.startswith(COPY + "/"):
                pages.add(resolved[len(COPY) + 1:])
    return sorted(pages)


def docs_copy(root: Path = ROOT) -> dict[str, str]:
    """{page: the text of lessons/docs/page}: each linked page of docs/ with its links rewritten to
    point, from lessons/docs/, where they pointed from docs/ (another copied page: its copy)."""
    pages = linked_pages(root)
    copies = {}
    for page in pages:
        source = root / DOCS / page
        if not source.is_file():
            continue                       # a link to a page that does not exist: the link test names it

        def moved(target: str, page: str = page) -> str:
            path, anchor = resolve(f"{DOCS}/{page}", target)
            if posixpath.dirname(path) == DOCS and posixpath.basename(path) in pages:
                path = f"{COPY}/{posixpath.basename(path)}"
            return posixpath.relpath(path, COPY) + (f"#{anchor}" if anchor else "")

        copies[page] = HEADER.format(name=page) + rewrite_links(source.read_text(encoding="utf-8"), moved)
    return copies


def stale_copies(root: Path = ROOT) -> list[str]:
    """The pages of lessons/docs/ that are missing, out of date or no longer linked."""
    wanted = docs_copy(root)
    folder = root / COPY
    present = {p.name for p in folder.glob("*.md")} if folder.is_dir() else set()
    problems = [f"{COPY}/{page}" for page, text in wanted.items()
                if page not in present or (folder / page).read_text(encoding="utf-8") != text]
    return problems + [f"{COPY}/{page} (no lesson links it)" for page in sorted(present - set(wanted))]


def write_docs_copy(root: Path = ROOT) -> list[str]:
    """Write lessons/docs/ (``docs_copy``), removing pages no lesson links any more; returns the pages written."""
    wanted = docs_copy(root)
    folder = root / COPY
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.md"):
        if old.name not in wanted:
            old.unlink()
    written = []
    for page, text in wanted.items():
        path = folder / page
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(page)
    return written


# -- anchors --------------------------------------------------------------------------------

def github_slug(heading: str) -> str:
    """The anchor GitHub (and MyST's ``myst_heading_anchors``) gives a Markdown heading: lower case,
    punctuation dropped except ``-`` and ``_``, spaces made ``-``."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)           # a link's text stays, its target goes
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown page's headings, GitHub's way (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    fence = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        if fence or not re.match(r"#{1,6}\s", line):
            continue
        slug = github_slug(line.lstrip("#"))
        n = seen.get(slug, 0)
        found.add(slug if n == 0 else f"{slug}-{n}")
        seen[slug] = n + 1
    return found
