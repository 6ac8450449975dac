"""Parallel corpora as tab-separated text: one ``source<TAB>target`` pair per line.

The format is the plainest one a person can open, grep and edit. Because
people do edit it, ``load_tsv`` is strict and says exactly where a line is
wrong (``path:lineno: problem``) instead of training on a misaligned corpus.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from .. import files
from ..files import InputLimitError, atomic_write_text, bounded_lines, open_to_read


class DataError(ValueError):
    """A data file is malformed. The message starts with ``path:lineno:``."""


# Words that name a column rather than a sentence: a first line made of two of
# these (or of two language codes, "en<TAB>fr") is probably a header row.
HEADER_WORDS = frozenset({
    "source", "target", "src", "tgt", "input", "output", "in", "out", "from", "to", "text",
    "sentence", "translation", "original", "english", "french", "german", "korean",
})
_LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}([-_][a-z]{2,4})?$")


def looks_like_header(src: str, tgt: str) -> bool:
    """True when a (source, target) line reads like column names: "source<TAB>target", "en<TAB>fr"."""
    a, b = src.strip().lower(), tgt.strip().lower()
    if a == b:
        return False
    return (a in HEADER_WORDS and b in HEADER_WORDS) or bool(_LANGUAGE_CODE.match(a) and _LANGUAGE_CODE.match(b))


# Caps applied while reading, so that /dev/zero or a binary file is refused, not read until the
# memory runs out: those of every reader of user text, defined in files.py (1 MB a line, 1 GB in all).
MAX_LINE_BYTES = files.MAX_LINE_BYTES
MAX_FILE_BYTES = files.MAX_TEXT_BYTES


def load_tsv(path: str | os.PathLike, header: bool = False) -> list[tuple[str, str]]:
    """Read (source, target) string pairs from a UTF-8 TSV file (see :func:`read_tsv_rows`)."""
    return [(src, tgt) for _, src, tgt in read_tsv_rows(path, header)]


def read_tsv_rows(path: str | os.PathLike, header: bool = False, max_line_bytes: int | None = None,
                  max_file_bytes: int | None = None) -> list[tuple[int, str, str]]:
    """Read (line number, source, target) rows from a UTF-8 TSV file.

    * ``header=True``: the first non-blank line holds column names and is skipped.
    * Lines that are empty or only whitespace are skipped.
    * ``\\n`` and ``\\r\\n`` line endings both work; a UTF-8 byte-order mark
      at the start of the file is ignored.
    * Whitespace around each side is stripped.
    * A line with no tab, with more than one tab, or with an empty side
      raises DataError naming the file and the line number.
    * A file with no pairs at all raises DataError.
    * A missing file, a directory or an unreadable file raise FileNotFoundError,
      IsADirectoryError or PermissionError, each naming the path.
    * Nothing is read without a limit: a line longer than ``max_line_bytes``, or
      a file longer than ``max_file_bytes`` (default: files.MAX_LINE_BYTES and
      files.MAX_TEXT_BYTES), is a DataError as soon as it is met
      (``--data /dev/zero`` stops after one megabyte).
    * A line holding carriage returns is reported as a file with CR line ends
      (classic Mac OS), which is what it almost always is.
    """
    # Read bytes and decode line by line, so that a bad byte is reported
    # on its own line (a text-mode file decodes whole chunks ahead).
    with open_to_read(path, "TSV data file", "TSV file") as f:
        return _parse_rows(f, path, header, max_line_bytes, max_file_bytes)


def _raw_lines(f, path, max_line_bytes: int | None, max_file_bytes: int | None):
    """(line number, bytes without the newline) of an open binary file, within both limits (files.bounded_lines)."""
    try:
        for lineno, raw in bounded_lines(f, os.fspath(path), "a text file of sentence pairs", max_line_bytes,
                                         max_file_bytes):
            yield lineno, raw.removesuffix(b"\n")
    except InputLimitError as exc:
        raise DataError(str(exc)) from None


def _parse_rows(f, path, header: bool, max_line_bytes: int | None, max_file_bytes: int | None
                ) -> list[tuple[int, str, str]]:
    pairs: list[tuple[int, str, str]] = []
    skip_header, skipped = header, None
    for lineno, raw in _raw_lines(f, path, max_line_bytes, max_file_bytes):
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # the UTF-8 byte-order mark some editors write
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}:{lineno}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
        line = line.removesuffix("\r")  # Windows line ending "\r\n"
        if "\r" in line:
            # "a\tb\rc\td\r...": one long "line" with a tab per pair; its tab count would mislead.
            raise DataError(f"{path}:{lineno}: the line holds {line.count(chr(13))} carriage return(s) (\\r) inside "
                            "it: the file seems to use CR line ends (classic Mac OS); convert them to newlines "
                            "(e.g. tr '\\r' '\\n' < old.tsv > new.tsv)")
        if not line.strip():
            continue
        if skip_header:
            skip_header, skipped = False, lineno
            continue
        n_tabs = line.count("\t")
        if n_tabs == 0:
            raise DataError(f"{path}:{lineno}: missing tab between source and target")
        if n_tabs > 1:
            raise DataError(
                f"{path}:{lineno}: {n_tabs} tabs on the line; expected exactly one, "
                "between source and target"
            )
        src, tgt = (side.strip() for side in line.split("\t"))
        if not src:
            raise DataError(f"{path}:{lineno}: empty source (nothing before the tab)")
        if not tgt:
            raise DataError(f"{path}:{lineno}: empty target (nothing after the tab)")
        pairs.append((lineno, src, tgt))
    if not pairs and skipped is not None:
        raise DataError(f"{path}: no source<TAB>target pairs found: the file holds only the header line "
                        f"(line {skipped}, which --header skips)")
    if not pairs:
        raise DataError(f"{path}: no source<TAB>target pairs found (the file is empty or blank)")
    return pairs


def write_tsv(path: str | os.PathLike, pairs: Iterable[tuple[str, str]]) -> None:
    """Write (source, target) pairs as UTF-8 TSV, atomically.

    Every pair is checked before anything is written (one tab per line, no
    newline inside a side, no empty side: what ``load_tsv`` accepts), then the
    file is written with ``files.atomic_write_text``: a crash never leaves half
    a file.
    """
    pairs = list(pairs)
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise ValueError(f"pair {i} must be a (source, target) tuple of two strings, got {pair!r}")
        for side, text in zip(("source", "target"), pair):
            if not isinstance(text, str):
                raise ValueError(f"pair {i}: {side} must be a str, got {type(text).__name__}")
            for bad, label in (("\t", "a tab"), ("\n", "a newline"), ("\r", "a carriage return")):
                if bad in text:
                    raise ValueError(f"pair {i}: {side} {text!r} contains {label}, which the TSV format cannot hold")
            if not text.strip():
                raise ValueError(f"pair {i}: {side} is empty; load_tsv would reject the file")

    # newline "\n": the same bytes on every OS.
    atomic_write_text(path, "".join(f"{src}\t{tgt}\n" for src, tgt in pairs))
