"""The documentation site (docs/conf.py) builds with warnings as errors, typesets its math in a
browser with the network off, and its plain-text docstring converter (docs/_ext/plain_docstrings.py)
produces reST that parses cleanly.

The site is built once per run (the `site` fixture) and opened by the browser tests in Debian's
Chromium, headless, with no network: a page's formulas must be typeset by the MathJax shipped in
docs/_static/mathjax, the browser must show no raw LaTeX, and the TeX fonts must load.
"""

import html.parser
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS_TOOLS = "pip install -r requirements-dev.txt"
MATHJAX = ROOT / "docs" / "_static" / "mathjax"


def _need(module):
    return pytest.importorskip(module, reason=f"{module} is not installed ({DOCS_TOOLS}): docs test skipped")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built from this checkout (warnings are errors): the folder of its HTML."""
    for module in ("sphinx", "myst_nb", "sphinx_book_theme"):
        _need(module)
    tmp = tmp_path_factory.mktemp("docs")
    out = tmp / "html"
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-c", "docs",
         "-d", str(tmp / "doctrees"), ".", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"sphinx-build failed:\n{result.stderr[-6000:]}"
    assert result.stderr.strip() == "", result.stderr[-6000:]
    return out


@pytest.mark.slow
def test_docs_site_builds_without_warnings(site):
    out = site
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


def test_mathjax_ships_with_the_site_and_its_license():
    """The math renderer docs/conf.py names is the copy in docs/_static/mathjax, of the version
    its SOURCE.md names, with the Apache-2.0 license and the fonts it loads (no docs tools needed)."""
    conf = (ROOT / "docs" / "conf.py").read_text(encoding="utf-8")
    path = re.search(r'^mathjax_path = "([^"]+)"', conf, re.MULTILINE)
    assert path is not None and not re.match(r"(?:[a-z]+:)?//", path.group(1)), "mathjax_path is not a local file"
    script = ROOT / "docs" / "_static" / path.group(1)
    assert script.is_file(), f"{script} is missing"
    version = re.search(r'e\.VERSION="(\d+\.\d+\.\d+)"', script.read_text(encoding="utf-8"))
    source = (MATHJAX / "SOURCE.md").read_text(encoding="utf-8")
    assert version is not None and f"`mathjax` {version.group(1)}" in source, "SOURCE.md names another version"
    assert "Apache License" in (MATHJAX / "LICENSE").read_text(encoding="utf-8")
    fonts = sorted(p.name for p in (MATHJAX / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    assert {"MathJax_Zero.woff", "MathJax_Main-Regular.woff", "MathJax_Math-Italic.woff"} <= set(fonts)
    assert len(fonts) == 23, fonts


# A script, stylesheet, font or picture the browser would fetch: <script src>, <link href>, <img src>.
_ASSET = re.compile(r"<(?:script|link|img)\b[^>]*?\b(?:src|href)=\"([^\"]*)\"", re.IGNORECASE)


@pytest.mark.slow
def test_the_site_loads_nothing_from_the_network(site):
    """Every page's scripts, stylesheets and pictures are files of the site; the math renderer
    is the MathJax shipped in docs/_static/mathjax, with its license."""
    remote = {}
    for page in site.rglob("*.html"):
        for url in _ASSET.findall(page.read_text(encoding="utf-8")):
            if re.match(r"(?:[a-z]+:)?//", url, re.IGNORECASE):
                remote.setdefault(url, page.relative_to(site).as_posix())
    assert not remote, f"pages load from the network: {remote}"
    derivations = (site / "docs" / "derivations.html").read_text(encoding="utf-8")
    assert re.search(r'<script[^>]*src="\.\./_static/mathjax/tex-chtml-full\.js', derivations)
    assert (site / "_static" / "mathjax" / "LICENSE").is_file()
    assert len(list((site / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))) == 23


def _cache_fields():
    """{"module.Class.field"} for every NamedTuple class in the layers (the backward caches)."""
    import importlib
    import pkgutil

    import minitransformer.layers as layers

    fields = set()
    for info in pkgutil.iter_modules(layers.__path__):
        module = importlib.import_module(f"minitransformer.layers.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, tuple) and hasattr(obj, "_fields") \
                    and obj.__module__ == module.__name__:
                fields |= {f"{module.__name__}.{name}.{field}" for field in obj._fields}
    return fields


@pytest.mark.slow
def test_api_pages_describe_every_cache_field_and_wrap_names_at_dots(site):
    fields = _cache_fields()
    assert "minitransformer.layers.attention.AttentionCache.Q" in fields
    described = {}
    for field in fields:
        module = field.rsplit(".", 2)[0]
        text = (site / "docs" / "api" / f"{module}.html").read_text(encoding="utf-8")
        # <dt ... id="module.Class.field">Q: object</dt><dd><p>(B, h, S_q, d_k)</p></dd>
        found = re.search(rf'<dt [^>]*id="{re.escape(field)}">.*?</dt>\s*<dd>(.*?)</dd>', text, re.DOTALL)
        described[field] = re.sub(r"<[^>]+>", "", found.group(1)).strip() if found else ""
    missing = sorted(f for f in fields if not described.get(f))
    assert not missing, f"cache fields with no description on their API page: {missing}"
    assert described["minitransformer.layers.attention.AttentionCache.Q"] == "(B, h, S_q, d_k)"
    # The navigation may break a module name only after a dot; the page's <title> stays plain.
    attention = (site / "docs" / "api" / "minitransformer.layers.attention.html").read_text(encoding="utf-8")
    assert re.search(r'href="minitransformer\.layers\.dropout\.html">minitransformer\.<wbr/?>layers\.<wbr/?>dropout</a>',
                     attention)
    assert "<title>minitransformer.layers.attention " in attention


# -- the site in a browser with the network off ------------------------------------------

CHROMIUM = ("chromium", "chromium-browser")       # Debian's name, and Ubuntu's
NO_CHROMIUM = ("chromium is not installed (Debian: apt-get install chromium; .ci/run installs it): "
               "the offline browser test of the docs skipped")
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
# What a reader does not see as text: the page's head, code, and MathJax's typeset output
# (whose hidden MathML copy, for screen readers, is not LaTeX either).
_NOT_TEXT = {"head", "script", "style", "pre", "code", "kbd", "samp", "textarea", "noscript", "template",
             "svg", "mjx-container"}
RAW_LATEX = ("\\(", "\\)", "\\[", "\\]", "$$", "\\begin{")


class _Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []
        self.classes = set((attrs.get("class") or "").split())

    def walk(self):
        yield self
        for child in self.children:
            if isinstance(child, _Node):
                yield from child.walk()

    def text(self, skip=frozenset(), skip_classes=frozenset()):
        """The text inside, leaving out elements whose tag is in ``skip`` or with a class in ``skip_classes``."""
        return "".join(c if isinstance(c, str) else
                       "" if c.tag in skip or c.classes & skip_classes else c.text(skip, skip_classes)
                       for c in self.children)


class _DOM(html.parser.HTMLParser):
    """The page as a tree (the browser's serialized DOM closes every element it opens)."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.root = self.node = _Node("#document", {}, None)
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        node = _Node(tag, dict(attrs), self.node)
        self.node.children.append(node)
        if tag not in _VOID:
            self.node = node

    def handle_startendtag(self, tag, attrs):
        self.node.children.append(_Node(tag, dict(attrs), self.node))

    def handle_endtag(self, tag):
        node = self.node
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.node = node.parent

    def handle_data(self, data):
        self.node.children.append(data)


@pytest.fixture(scope="module")
def chromium():
    """The browser's path; without one the browser tests skip, except where
    MINITRANSFORMER_NEED_BROWSER is set (.ci/run sets it: there they must run)."""
    path = next(filter(None, map(shutil.which, CHROMIUM)), None)
    if path is None:
        if os.environ.get("MINITRANSFORMER_NEED_BROWSER"):
            pytest.fail(NO_CHROMIUM.replace("skipped", "cannot run, and MINITRANSFORMER_NEED_BROWSER is set"))
        pytest.skip(NO_CHROMIUM)
    return path


def _no_network_prefix():
    """`unshare --net`, where this user may make a network namespace (root, as in CI): the
    browser then has no network at all; elsewhere the resolver rule below is the barrier."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "--net", "true"], capture_output=True).returncode == 0:
        return [unshare, "--net", "--"]
    return []


def _offline_dom(chromium, page, profile):
    """The DOM of ``page`` after its scripts ran, in headless Chromium with the network off and a
    new, empty profile. --virtual-time-budget lets the page's scripts (MathJax typesetting,
    font loads) run to the end before the DOM is written out."""
    command = [*_no_network_prefix(), chromium, "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-dev-shm-usage", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run", "--no-default-browser-check",
               "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}",
               "--virtual-time-budget=30000", "--dump-dom", page.as_uri()]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0 and "</html>" in result.stdout, \
        f"chromium failed on {page.name} (rc {result.returncode}):\n{result.stderr[-3000:]}"
    return _DOM(result.stdout).root


def _raw_latex(text):
    """The first raw LaTeX delimiter in ``text`` with some context, or None."""
    hits = [(text.find(d), d) for d in RAW_LATEX if d in text]
    if not hits:
        return None
    at, delimiter = min(hits)
    return f"{delimiter!r} in ...{text[max(0, at - 80):at + 80]!r}..."


# page -> what it shows: the derivations (274 formulas), lesson 1 (a heading with math, so the
# navigation's "On this page" has a formula), lesson 8 (the most formulas of the lessons)
PAGES = ["docs/derivations.html", "lessons/01_scaled_dot_product_attention.html",
         "lessons/08_why_self_attention.html"]


# Pages that still show LaTeX source, each with the place to fix; a fixed page must leave the list.
# Pages known to show LaTeX source, with the start of what they show (none today). A $$...$$ right under
# a list item's text line is read as $ + inline math + $: a blank line before it fixes it (lesson 10's
# BLEU formulas were the last case).
KNOWN_RAW_LATEX: dict[str, str] = {}


def _static_raw_latex(dom):
    """What the page's own text (outside formulas and code) shows of LaTeX source, or None:
    a $$ or a stray $ next to a formula (display math MyST did not read as a block), or a
    TeX command such as \\frac outside any formula."""
    text = dom.text(skip=_NOT_TEXT, skip_classes={"math"})
    for math in (n for n in dom.walk() if "math" in n.classes):
        i = math.parent.children.index(math)
        before = math.parent.children[i - 1] if i > 0 else ""
        after = math.parent.children[i + 1] if i + 1 < len(math.parent.children) else ""
        if (isinstance(before, str) and before.endswith("$")) or (isinstance(after, str) and after.startswith("$")):
            return f"'$' beside a formula: {math.text()[:80]!r}"
    found = re.search(r"\$\$|\\(?:frac|sum|sqrt|mathrm|text|begin|end|left|right|hat|bar)\b", text)
    return None if found is None else f"{found.group(0)!r} in ...{text[max(0, found.start() - 80):found.end() + 80]!r}..."


@pytest.mark.slow
def test_no_page_shows_latex_source(site):
    """Every page of the site, read as built: each formula is a formula element for MathJax, and no
    LaTeX is left in the text around them (the browser test below checks three pages as shown)."""
    shown = {}
    for page in sorted(site.rglob("*.html")):
        name = page.relative_to(site).as_posix()
        if name.startswith("_"):
            continue                                   # _static, _modules: the site's files, not pages
        raw = _static_raw_latex(_DOM(page.read_text(encoding="utf-8")).root)
        if raw is not None:
            shown[name] = raw
    unexpected = {name: raw for name, raw in shown.items() if name not in KNOWN_RAW_LATEX}
    assert not unexpected, f"pages that show LaTeX source: {unexpected}"
    fixed = sorted(set(KNOWN_RAW_LATEX) - set(shown))
    assert not fixed, f"fixed, so remove them from KNOWN_RAW_LATEX: {fixed}"
    for name, raw in shown.items():
        assert raw.startswith(KNOWN_RAW_LATEX[name]), (name, raw)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_formulas_are_typeset_offline(chromium, site, page, tmp_path):
    path = site / page
    static = path.read_text(encoding="utf-8")
    dom = _offline_dom(chromium, path, tmp_path / "profile")

    maths = [n for n in dom.walk() if "math" in n.classes and n.tag in ("span", "div")]
    assert len(maths) == static.count('class="math notranslate nohighlight'), "the browser lost formulas"
    assert len(maths) > 10, f"{page} has only {len(maths)} formulas: not the page this test means"
    untypeset = [n.text().strip() for n in maths if not any(d.tag == "mjx-container" for d in n.walk())]
    assert not untypeset, (f"{len(untypeset)} of {len(maths)} formulas on {page} were not typeset "
                           f"(MathJax did not load or run?), e.g. {untypeset[:3]}")
    errors = [n.attrs.get("data-mjx-error") or n.text() for n in dom.walk() if n.tag == "mjx-merror"]
    assert not errors, f"TeX errors on {page}: {errors[:5]}"
    raw = _raw_latex(dom.text(skip=_NOT_TEXT))
    assert raw is None, f"raw LaTeX in the text {page} shows: {raw}"

    # Headings with math: their entries in the navigation are typeset too.
    nav_maths = [n for nav in dom.walk() if nav.tag == "nav" for n in nav.walk() if "math" in n.classes]
    if page.startswith("lessons/01_"):
        assert nav_maths, "lesson 1's navigation shows no formula (its heading '4. Why divide by √d_k')"
        entry = next(n.parent for n in nav_maths if "Why divide by" in n.parent.text(skip=_NOT_TEXT))
        assert entry.text(skip=_NOT_TEXT).strip() == "4. Why divide by"
        assert any(d.tag == "mjx-container" for d in entry.walk())


_FONT_PROBE = """<script>
window.addEventListener("load", function () {
  MathJax.startup.promise.then(function () { return document.fonts.ready; }).then(function () {
    var faces = [];
    document.fonts.forEach(function (face) { faces.push([face.family, face.status]); });
    var out = document.createElement("pre");
    out.id = "font-probe";
    out.textContent = JSON.stringify(faces);
    document.body.appendChild(out);
  });
});
</script>
</body>"""


@pytest.mark.slow
def test_the_tex_fonts_load_offline(chromium, site, tmp_path):
    """MathJax's fonts come from the site too: without them a formula is typeset in a fallback
    font (upright letters, a broken square root) though the page holds the same elements. A copy
    of the derivations page, beside it, reports the state of every web font once MathJax is done."""
    page = site / "docs" / "derivations.html"
    probe = page.with_name("_font_probe.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", _FONT_PROBE), encoding="utf-8")
    dom = _offline_dom(chromium, probe, tmp_path / "profile")
    report = next((n.text() for n in dom.walk() if n.attrs.get("id") == "font-probe"), None)
    assert report is not None, "the font probe did not report (MathJax did not finish?)"
    faces = json.loads(report)                    # [[family, status], ...], every @font-face of the page
    tex = {family: status for family, status in faces if family.startswith("MJX")}
    assert tex, f"no MathJax fonts declared: {faces}"
    failed = sorted(family for family, status in tex.items() if status == "error")
    assert not failed, f"MathJax fonts that failed to load: {failed}"
    for family in ("MJXTEX", "MJXTEX-I"):         # upright (digits, operators) and math italic (letters)
        assert tex.get(family) == "loaded", f"{family}: {tex.get(family)}"


@pytest.mark.slow
def test_the_browser_really_is_offline(chromium, site, tmp_path):
    """The check above can fail: the same page with MathJax from a CDN, as Sphinx would load it,
    shows its formulas as raw LaTeX in this browser."""
    from sphinx.ext.mathjax import MATHJAX_URL

    page = site / "docs" / "derivations.html"
    control = page.with_name("_cdn_control.html")
    text, n = re.subn(r'src="[^"]*_static/mathjax/tex-chtml-full\.js[^"]*"', f'src="{MATHJAX_URL}"',
                      page.read_text(encoding="utf-8"))
    assert n == 1
    control.write_text(text, encoding="utf-8")
    dom = _offline_dom(chromium, control, tmp_path / "profile")
    assert not any(n.tag == "mjx-container" for n in dom.walk()), f"{MATHJAX_URL} loaded: the network is on"
    assert _raw_latex(dom.text(skip=_NOT_TEXT)) is not None


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


def test_namedtuple_fields_are_described_by_their_comments(plain_docstrings):
    source = '''
    class Cache(NamedTuple):
        Q: object        # (B, h, S_q, d_k)
        kind: str        # "forward": the forward is wrong;
                         # "backward": only the backward
        scale: float
        note: str = "#"  #: a doc-comment, Sphinx's style
        # a comment line of the class body, not a field's
    '''
    assert plain_docstrings.field_comments(source) == {
        "Q": "(B, h, S_q, d_k)",
        "kind": '"forward": the forward is wrong; "backward": only the backward',
        "note": "a doc-comment, Sphinx's style",
    }


def test_every_layer_cache_field_has_a_comment(plain_docstrings):
    """The API pages describe a cache's fields by their comments: a field added without one would
    show as a bare `name: object`."""
    import importlib
    import inspect

    bare = []
    for field in sorted(_cache_fields()):
        module, cls, name = field.rsplit(".", 2)
        comments = plain_docstrings.field_comments(inspect.getsource(getattr(importlib.import_module(module), cls)))
        if not comments.get(name):
            bare.append(field)
    assert not bare, f"cache fields without a comment (their shape, in the paper's letters): {bare}"


def test_dotted_titles_break_only_after_dots():
    _need("docutils")
    from docutils import nodes

    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import dotted_titles
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    title = nodes.title("", "minitransformer.layers.attention")
    dotted_titles.break_after_dots(title)
    assert [type(c).__name__ for c in title.children] == ["Text", "wbr", "Text", "wbr", "Text"]
    assert title.astext() == "minitransformer.layers.attention"      # the name reads (and copies) as it was
    for text in ("Lesson 1 — attention", "Eq. 1", "minitransformer"):
        title = nodes.title("", text)
        dotted_titles.break_after_dots(title)
        assert len(title.children) == 1, text


# -- Korean pages and the Hangul web font -----------------------------------------------------

HANGUL_FONT = ROOT / "docs" / "_static" / "fonts" / "hangul-gothic.woff"


def _hangul_font_tool():
    spec = importlib.util.spec_from_file_location("hangul_font", ROOT / "docs" / "hangul_font.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_hangul_font_ships_with_its_licence_and_covers_the_docs():
    """The site's Hangul comes from a subset of NanumGothic that ships with it (SIL OFL 1.1, its text beside
    the font), renamed as the licence asks of a modified font, declared for the Hangul ranges only, and
    holding every Hangul character the docs and the Korean lessons use."""
    ttlib = pytest.importorskip("fontTools.ttLib", reason="fontTools is not installed (matplotlib brings it)")
    font = ttlib.TTFont(HANGUL_FONT)
    assert font.flavor == "woff" and HANGUL_FONT.stat().st_size < 400_000
    names = {r.nameID: str(r) for r in font["name"].names}
    assert names[1] == "mt Hangul Gothic" and not any("nanum" in str(r).lower() for r in font["name"].names
                                                      if r.nameID in (1, 3, 4, 6, 16))
    licence = (HANGUL_FONT.parent / "OFL.txt").read_text(encoding="utf-8")
    assert "SIL OPEN FONT LICENSE" in licence and "with Reserved Font Name Nanum" in licence
    css = (ROOT / "docs" / "_static" / "hangul.css").read_text(encoding="utf-8")
    assert 'url("fonts/hangul-gothic.woff")' in css and "unicode-range: U+1100-11FF, U+3130-318F, U+AC00-D7A3" in css
    assert re.search(r'^html_css_files = \["hangul.css"\]', (ROOT / "docs" / "conf.py").read_text(), re.M)
    tool = _hangul_font_tool()
    assert tool.used_hangul() and tool.missing() == [], \
        f"the font lacks {''.join(tool.missing())}: run python docs/hangul_font.py"


@pytest.mark.slow
def test_the_korean_pages_are_built(site):
    import tomllib
    for name in ("index", "lessons", "derivations", "concordance"):
        assert (site / "docs" / "ko" / f"{name}.html").is_file(), name
    korean = sorted((ROOT / "lessons" / "ko").glob("[0-9][0-9]_*.ipynb"))
    assert korean
    listing = (site / "docs" / "ko" / "lessons.html").read_text(encoding="utf-8")
    for notebook in korean:
        page = site / "lessons" / "ko" / f"{notebook.stem}.html"
        assert page.is_file() and "cell_output" in page.read_text(encoding="utf-8"), notebook.name
        assert f"lessons/ko/{notebook.stem}.html" in listing, notebook.name
    assert tomllib.loads((ROOT / "lessons" / "ko" / "edition.toml").read_text())["language"] == "ko"
    # the Korean table of contents of the derivations links every section of the English page
    derivations = (site / "docs" / "derivations.html").read_text(encoding="utf-8")
    sections = set(re.findall(r'<section id="([^"]+)"', derivations))
    linked = set(re.findall(r'href="\.\./derivations\.html#([^"]+)"',
                            (site / "docs" / "ko" / "derivations.html").read_text(encoding="utf-8")))
    assert linked and linked <= sections, sorted(linked - sections)
    assert sections - linked <= {"deriving-every-backward-pass"}, sorted(sections - linked)


_HANGUL_PROBE = """<script>
window.addEventListener("load", function () {
  (window.MathJax ? MathJax.startup.promise : Promise.resolve()).then(function () { return document.fonts.ready; })
  .then(function () {
    var faces = [];
    document.fonts.forEach(function (face) { faces.push([face.family, face.status]); });
    var ctx = document.createElement("canvas").getContext("2d");
    ctx.font = "32px " + getComputedStyle(document.querySelector("h1")).fontFamily;
    function width(s) { return ctx.measureText(s).width / s.length; }
    var out = document.createElement("pre");
    out.id = "hangul-probe";
    out.textContent = JSON.stringify({faces: faces, hangul: width("한국어판강의"), missing: width("\\u0378\\u0379\\u0380")});
    document.body.appendChild(out);
  });
});
</script>
</body>"""


def _hangul_probe(chromium, page, name, profile, with_font=True):
    """Open a copy of ``page`` (with or without the site's Hangul stylesheet) offline; what it measured:
    the page's web fonts and their state, and the width of Hangul against unassigned code points (drawn as
    the same missing-glyph box) in the page's heading font."""
    text = page.read_text(encoding="utf-8")
    if not with_font:
        text, n = re.subn(r'<link rel="stylesheet" type="text/css" href="[./]*_static/hangul\.css[^>]*>', "", text)
        assert n == 1
    probe = page.with_name(name)
    probe.write_text(text.replace("</body>", _HANGUL_PROBE), encoding="utf-8")
    dom = _offline_dom(chromium, probe, profile)
    report = next((n.text() for n in dom.walk() if n.attrs.get("id") == "hangul-probe"), None)
    assert report is not None, f"the Hangul probe did not report on {page.name}"
    return json.loads(report)


def _korean_system_fonts() -> str:
    fc = shutil.which("fc-list")
    return subprocess.run([fc, ":lang=ko", "family"], capture_output=True, text=True).stdout.strip() if fc else ""


@pytest.mark.slow
@pytest.mark.parametrize("page", ["lessons/ko/03_feed_forward.html", "docs/ko/index.html"])
def test_hangul_renders_offline_without_a_korean_font(chromium, site, page, tmp_path):
    """A Korean page in headless Chromium with the network off: the site's Hangul font loads, and Hangul is
    drawn with real glyphs, not the missing-glyph box. The same page without the font's stylesheet draws
    boxes on a machine with no Korean system font (CI's), so the check can fail."""
    shown = _hangul_probe(chromium, site / page, "_hangul_probe.html", tmp_path / "a")
    states = {family: status for family, status in shown["faces"]}
    assert states.get("mt Hangul Gothic") == "loaded", shown["faces"]
    assert abs(shown["hangul"] - shown["missing"]) > 0.1 * shown["missing"], shown
    if _korean_system_fonts():
        pytest.skip(f"this machine has a Korean system font ({_korean_system_fonts()[:60]}): no control")
    control = _hangul_probe(chromium, site / page, "_hangul_control.html", tmp_path / "b", with_font=False)
    assert "mt Hangul Gothic" not in {family for family, _ in control["faces"]}
    assert control["hangul"] == pytest.approx(control["missing"]), control
