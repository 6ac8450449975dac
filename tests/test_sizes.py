"""No source file of the package is over 600 lines, and no function over 80 (issue 33).

A file that grows past the limit holds more than one concept; a function past it holds
more than one step. Split it by concept (as decoding.py and decoding_inputs.py, bpe.py,
bpe_learn.py and bpe_words.py, model.py and kvcache.py were), keeping one component per
file and the layering of tests/test_layering.py.

Every module of minitransformer/ is measured, the command line (cli/) included; the
teaching harness beside it (lessonkit/) is not part of the library a learner reads.
"""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "minitransformer"
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path.read_text(encoding="utf-8")


def too_long(sources) -> list[str]:
    """'file: N lines' and 'file: function() N lines' for everything over the limits."""
    found = []
    for rel, text in sources:
        lines = len(text.splitlines())
        if lines > MAX_FILE_LINES:
            found.append(f"{rel}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{rel}: {node.name}() {length} lines")
    return found


def test_no_file_over_600_lines_and_no_function_over_80():
    sources = list(_sources())
    assert len(sources) > 40 and {"layers/attention.py", "cli/train.py"} <= {rel for rel, _ in sources}
    assert too_long(sources) == []


def test_the_check_finds_a_long_file_and_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    assert too_long([("f.py", f"def f():\n{body}\n")]) == ["f.py: f() 81 lines"]
    assert too_long([("g.py", "x = 1\n" * 601)]) == ["g.py: 601 lines"]
