"""Render the package's plain-text docstrings as reStructuredText, without warnings.

The docstrings follow the code's conventions, not a docstring standard: prose with
``code`` and the odd :class:`role`, shapes in the paper's letters, and indented blocks
laid out by hand: formulas, aligned "name  meaning" tables, hanging-indent argument
lists. Read as reST, those blocks give "Unexpected indentation" and "Definition list
ends without a blank line", and a formula's |x| reads as a substitution. This
extension rewrites each docstring, block by block, before autodoc parses it:

* a run of lines laid out by hand (indented as a whole, aligned in columns, or a
  "name: text" line with indented continuation lines) becomes a literal block,
  shown as written in a fixed-width font;
* indented lines after a prose line ("Backward, in reverse:") become a literal
  block under that prose;
* in prose, "|" and a "*" that opens no emphasis are escaped;
* a prose paragraph that still does not parse cleanly on its own is shown as a
  literal block too, so a docstring written later in the same style cannot break a
  build that treats warnings as errors.

A NamedTuple field (the layers' caches) has no docstring of its own, only the generated
"Alias for field number N". Its description is the comment written on the field's line in
the class body, with any comment lines that continue it::

    class AttentionCache(NamedTuple):
        Q: object       # (B, h, S_q, d_k)

so the API page shows each field's shape where the source already gives it.

Nothing in the package changes; the docstrings keep reading well in the source and in
``help()``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import re
import textwrap
import tokenize

from docutils import nodes
from docutils.core import publish_doctree

_GAP = re.compile(r"\S {3,}\S")                    # three spaces inside a line: columns
_TERM = re.compile(r"^[\w.\-/<>\[\]]+:\s+\S")      # "clip_norm: if set, ...": a hanging-indent term
_BULLET = re.compile(r"^([*+\-]|\d+\.|\(\w\))\s+")
_ROLE = re.compile(r":[\w:+\-]+:`([^`]*)`")        # :class:`Batch`, :func:`x`
_CODE = re.compile(r"``.+?``|:[\w:+\-]+:`[^`]*`|`[^`]*`")
_LONE_STAR = re.compile(r"(?<![\\*\w])\*(?=[A-Za-z_(])")
_EMPHASIS = re.compile(r"\*[^\s*](?:[^*]*?[^\s*\\])?\*(?![\w*])")   # *word* or *a few words*


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _runs(lines: list[str]) -> list[list[str]]:
    """Maximal runs of non-blank lines."""
    runs, run = [], []
    for line in lines:
        if line.strip():
            run.append(line.rstrip())
        elif run:
            runs.append(run)
            run = []
    if run:
        runs.append(run)
    return runs


def _segments(run: list[str]) -> list[tuple[str, list[str]]]:
    """Split a run into ("prose", lines) and ("literal", lines) segments."""
    base = _indent(run[0])
    if base > 0 or any(_GAP.search(line) for line in run):
        return [("literal", run)]
    if run[0].lstrip().startswith(">>>"):
        return [("prose", run)]                      # a doctest block: reST reads it as is
    segments: list[tuple[str, list[str]]] = []
    prose: list[str] = []
    i = 0
    while i < len(run):
        line = run[i]
        if _indent(line) <= base:
            prose.append(line)
            i += 1
            continue
        deeper = []
        while i < len(run) and _indent(run[i]) > base:
            deeper.append(run[i])
            i += 1
        lead = prose[-1] if prose else ""
        bullet = _BULLET.match(lead)
        if bullet and all(_indent(d) == bullet.end() for d in deeper):
            prose.extend(deeper)                     # continuation lines of a list item
        elif _TERM.match(lead):
            return [("literal", run)]                # "name: text" with hanging indents
        else:
            if prose:
                segments.append(("prose", prose))
                prose = []
            segments.append(("literal", deeper))
    if prose:
        segments.append(("prose", prose))
    return segments


def _escape(text: str) -> str:
    """Escape "|" and a "*" that opens no emphasis, outside code and roles."""
    out, last = [], 0
    for m in _CODE.finditer(text):
        out.append(_escape_plain(text[last:m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(_escape_plain(text[last:]))
    return "".join(out)


def _escape_plain(text: str) -> str:
    text = text.replace("|", r"\|")
    out, last = [], 0
    for m in _LONE_STAR.finditer(text):
        if not _EMPHASIS.match(text, m.start()):     # "*inputs": no "*" closes it
            out.append(text[last:m.start()] + "\\")
            last = m.start()
    out.append(text[last:])
    return "".join(out)


def parses_cleanly(text: str) -> bool:
    """True when docutils reads ``text`` with no warning or error (Sphinx roles stubbed)."""
    text = _ROLE.sub(lambda m: "``" + m.group(1) + "``", text)
    try:
        doctree = publish_doctree(text, settings_overrides={
            "report_level": 5, "halt_level": 5, "warning_stream": io.StringIO(),
            "file_insertion_enabled": False, "raw_enabled": False, "_disable_config": True})
    except Exception:  # noqa: BLE001  (any failure: show the text as written)
        return False
    return not any(msg["level"] >= 2 for msg in doctree.findall(nodes.system_message))


def _literal(lines: list[str]) -> list[str]:
    strip = min(_indent(line) for line in lines)
    plain = [_ROLE.sub(r"\1", line[strip:]).replace("``", "") for line in lines]
    return ["::", ""] + ["    " + line for line in plain] + [""]


def to_rest(lines: list[str]) -> list[str]:
    """The docstring ``lines`` rewritten as reST that parses without warnings."""
    out: list[str] = []
    for run in _runs(lines):
        for kind, seg in _segments(run):
            if kind == "prose":
                escaped = [_escape(line) for line in seg]
                if parses_cleanly("\n".join(escaped)):
                    out.extend(escaped + [""])
                    continue
            out.extend(_literal(seg))
    return out


_FIELD_ALIAS = re.compile(r"Alias for field number \d+")


def field_comments(source: str) -> dict[str, str]:
    """{field: comment} for the annotated fields of the class defined in ``source``.

    The comment is the one ending the field's line; comment-only lines right below it,
    starting in the same column, continue it.
    """
    source = textwrap.dedent(source)
    classdef = ast.parse(source).body[0]
    comments: dict[int, tuple[int, str]] = {}         # row -> (column, text) of its comment
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = (tok.start[1], tok.string.lstrip("#:").strip())
    lines = source.splitlines()
    found = {}
    for node in classdef.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        row = node.end_lineno
        if row not in comments:
            continue
        column, text = comments[row]
        parts = [text]
        row += 1
        while row in comments and comments[row][0] == column and lines[row - 1].lstrip().startswith("#"):
            parts.append(comments[row][1])
            row += 1
        found[node.target.id] = " ".join(part for part in parts if part)
    return found


def _field_comment(name: str) -> list[str]:
    """The comment on the field ``name`` (module.Class.field) in its class's source, as lines."""
    module, cls, field = name.rsplit(".", 2)
    try:
        source = inspect.getsource(getattr(importlib.import_module(module), cls))
    except (ImportError, AttributeError, OSError, TypeError):
        return []
    comment = field_comments(source).get(field)
    return [comment] if comment else []


def _process_docstring(app, what, name, obj, options, lines):
    if [line for line in lines if line.strip()] and all(
            _FIELD_ALIAS.fullmatch(line.strip()) for line in lines if line.strip()):
        # a NamedTuple field: the generated text says nothing; the comment in the source does
        lines[:] = _field_comment(name)
    lines[:] = to_rest(list(lines))


def setup(app):
    app.connect("autodoc-process-docstring", _process_docstring)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
