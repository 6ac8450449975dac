"""The words and symbols byte-pair encoding works on (``bpe.py`` describes the method).

The markers (``END`` joined to a word's last symbol, ``SEPARATOR`` on every output piece
but a word's last), the rules a word must keep to be segmented and restored exactly
(``check_word``), how a line splits into words, a word into its initial symbols, and
the errors BPE raises. Learning (``bpe_learn.py``) and applying (``bpe.py``) both build on it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["END", "SEPARATOR", "Merge", "BPEError", "BPETextError", "CodesFileError", "check_word", "line_words",
           "word_symbols"]

END = "</w>"                   # end-of-word marker, joined to a word's last symbol
SEPARATOR = "@@"               # continuation marker on every output piece but a word's last

Merge = tuple[str, str]        # one merge: the pair of symbols (first, second) that becomes first + second

_WHITESPACE = re.compile(r"\s")                # any whitespace character (str.isspace)
_OTHER_WHITESPACE = re.compile(r"[^\S ]")      # any but the plain space that separates words


class BPEError(ValueError):
    """Byte-pair encoding cannot go on: bad merges, bad arguments, or one of the cases below."""


class BPETextError(BPEError):
    """Text that BPE would not turn back into the exact text (see the module docstring for the rules)."""


class CodesFileError(BPEError):
    """A codes file is malformed. The message starts with ``path:lineno:``."""



# --------------------------------------------------------------------------
# Words and symbols
# --------------------------------------------------------------------------

def _describe(ch: str) -> str:
    return f"{ch!r} (U+{ord(ch):04X})"


def check_word(word: str, where: str = "") -> None:
    """Raise BPETextError if ``word`` cannot be segmented and restored exactly.

    ``where`` starts the message ("file.txt:3: "). A word must be a non-empty str
    without whitespace (words are separated by single spaces), without ``</w>``
    (the end-of-word marker would be read as the end of the word) and not ending
    in ``@@`` (its last piece would be read as continuing into the next word).
    """
    if not isinstance(word, str):
        raise TypeError(f"{where}a word must be a str, got {type(word).__name__}: {word!r}")
    if not word:
        raise BPETextError(f"{where}empty word")
    space = _WHITESPACE.search(word)
    if space:
        raise BPETextError(f"{where}word {word!r} contains the whitespace character {_describe(space.group())}; "
                           "words are separated by single spaces and may hold no other whitespace "
                           "(replace it with a space)")
    if END in word:
        raise BPETextError(f"{where}word {word!r} contains {END!r}, the end-of-word marker of the codes file")
    if word.endswith(SEPARATOR):
        raise BPETextError(f"{where}word {word!r} ends in {SEPARATOR!r}, the continuation marker: its last piece "
                           "would be read as continuing into the next word")


def _check_line(line: str, where: str) -> str:
    """The line without its leading/trailing spaces and line ending; BPETextError if a word breaks a rule.

    One regular-expression search and two substring tests per line, so that a long
    corpus is checked at the speed of reading it; the word is found only to name it.
    """
    if not isinstance(line, str):
        raise TypeError(f"{where}a line must be a str, got {type(line).__name__}")
    body = line.strip("\r\n ")
    if _OTHER_WHITESPACE.search(body) or END in body or SEPARATOR + " " in body or body.endswith(SEPARATOR):
        for word in body.split(" "):
            if word:
                check_word(word, where)
    return body


def line_words(line: str, where: str = "") -> list[str]:
    """The words of one line as learning reads them: split on spaces, empty words skipped,
    each checked (BPETextError, which ``where`` starts, for a word that breaks a rule)."""
    return [w for w in _check_line(line, where).split(" ") if w]


def word_symbols(word: str) -> tuple[str, ...]:
    """A word as its initial symbols: its characters, the last one joined to END.

    >>> word_symbols("low")
    ('l', 'o', 'w</w>')
    """
    return (*word[:-1], word[-1] + END)


def _merge_symbols(symbols: Sequence[str], first: str, second: str, merged: str) -> list[str]:
    """``symbols`` with every occurrence of the pair (first, second) replaced by ``merged``,
    scanning left to right, so "a a a" with the pair (a, a) gives "aa a"."""
    out = []
    i, n = 0, len(symbols)
    while i < n:
        if i + 1 < n and symbols[i] == first and symbols[i + 1] == second:
            out.append(merged)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out
