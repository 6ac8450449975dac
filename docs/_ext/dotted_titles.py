"""Let a dotted module name in a page title wrap after a dot, never inside a word.

The API pages are titled with the full module name (minitransformer.layers.attention).
The navigation column is narrow, and a name with no space in it was broken wherever
the line ran out ("minitransformer.l" / "ayers.attention"). This extension puts a line-break
opportunity (HTML ``<wbr>``) after each dot of such a title, before Sphinx copies the
title into the navigation, so the name wraps as "minitransformer." / "layers.attention".
A ``<wbr>`` is no character: a name copied from the page is the name.
"""

from __future__ import annotations

import re

from docutils import nodes

_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


class wbr(nodes.Inline, nodes.Element):
    """A place where a line may break (named after the HTML element); no text of its own."""


def _visit_wbr_html(self, node):
    self.body.append("<wbr>")
    raise nodes.SkipNode


def _skip(self, node):
    raise nodes.SkipNode


def break_after_dots(title: nodes.Element) -> None:
    """Put a ``wbr`` after each dot of a title that is one dotted name."""
    if len(title.children) != 1 or not isinstance(title[0], nodes.Text):
        return
    text = title.astext()
    if not _DOTTED.fullmatch(text):
        return
    parts = text.split(".")
    children: list[nodes.Node] = []
    for part in parts[:-1]:
        children += [nodes.Text(part + "."), wbr()]
    children.append(nodes.Text(parts[-1]))
    title.children = []
    title.extend(children)


def _on_doctree_read(app, doctree):
    section = next(iter(doctree.findall(nodes.section)), None)     # the page title only
    if section is not None and section.children and isinstance(section[0], nodes.title):
        break_after_dots(section[0])


def setup(app):
    app.add_node(wbr, html=(_visit_wbr_html, None), text=(_skip, None), latex=(_skip, None),
                 man=(_skip, None), texinfo=(_skip, None))
    # before Sphinx's title collector (priority 500) copies the title into the navigation
    app.connect("doctree-read", _on_doctree_read, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
