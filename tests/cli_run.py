"""Running the command line in-process, for the tests of its error contract: ``run`` gives (exit code,
stdout, stderr), ``one_error_line`` asserts the one ``error:`` line a bad input gets."""

from __future__ import annotations

import contextlib
import io
import sys

from minitransformer.__main__ import main


def run(argv, stdin: bytes | str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    """main(argv) -> (exit code, stdout, stderr); ``stdin``: bytes, or a file's path, read as standard input."""
    if stdin is not None:
        stream = open(stdin, "rb") if isinstance(stdin, str) else io.BytesIO(stdin)
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(stream, encoding="utf-8"))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def one_error_line(err: str, *fragments: str) -> str:
    """The one ``error:`` line of ``err`` (no traceback), holding every fragment."""
    lines = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
