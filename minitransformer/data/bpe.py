"""Byte-pair encoding (BPE): a vocabulary of subword units learned from the corpus.

§5.1 of the paper: "Sentences were encoded using byte-pair encoding, which has a
shared source-target vocabulary of about 37000 tokens." The method is that of
Sennrich, Haddow & Birch (2016), "Neural Machine Translation of Rare Words with
Subword Units", §3.2 and its Algorithm 1:

1. Start from characters: every word is a sequence of one-character symbols, and
   its last character carries the end-of-word marker, so "low" is ``l o w</w>``.
2. Count every pair of adjacent symbols, weighted by how often its word occurs.
3. Merge the most frequent pair everywhere (``l o`` -> ``lo``); that merge is the
   next line of the codes file. Repeat from 2 until ``num_merges`` merges are made.

Pairs never span two words, so no merge crosses a word boundary. The symbol
vocabulary ends up as the initial symbols plus one new symbol per merge
(Sennrich et al. §3.2): the number of merges is the knob that trades vocabulary
size against sequence length. Learning on source and target text together gives
the *joint* vocabulary of §5.1, which lets one embedding matrix serve both sides
(the three-way tying of §3.4).

Conventions: exactly those of the reference implementation, subword-nmt 0.3.8
(its ``learn-bpe`` and ``apply-bpe``), which ``tests/test_bpe.py`` proves
merge-for-merge and line-for-line:

* words are what lies between single spaces (``line.strip("\\r\\n ").split(" ")``,
  empty words skipped); characters are Python ``str`` characters (code points);
* the end-of-word marker ``</w>`` is joined to the last character (codes format
  "#version: 0.2"), so ``w</w>`` is one symbol, distinct from ``w`` inside a word;
* the most frequent pair wins; among equally frequent pairs the greatest one,
  comparing (first, second) as Python compares strings (code point by code point);
* learning stops early when the best pair occurs fewer than ``min_frequency`` times;
* applying merges a word's pair that was learned earliest, again and again;
* on output every piece but a word's last ends in the continuation marker ``@@``:
  "viertausend" -> ``vier@@ tausend``. Deleting every "@@ " restores the text.

What this module refuses (``BPETextError``, naming the line and the word), because
the result could not be turned back into the exact text, or would differ from the
reference: whitespace other than the space between words (tab, no-break space,
a line break inside a line); a word containing ``</w>``; a word ending in ``@@``.
``tokens`` also refuses spaces at either end of a line and runs of spaces.

Characters never seen in learning: no merge involves them, so each becomes a
piece of its own, exactly as in subword-nmt, and ``detokenize`` still gives back
the exact text. The model's vocabulary does not have such a piece: ``Vocab.encode``
reads it as ``<unk>``. ``BPE.unknown(tokens)`` lists them, for a warning or an error.

Sennrich et al.'s example corpus ("low" 5 times, "lower" twice, ...), four merges:

    >>> bpe = BPE.learn({"low": 5, "lower": 2, "newest": 6, "widest": 3}, num_merges=4)
    >>> bpe.merges
    [('s', 't</w>'), ('e', 'st</w>'), ('l', 'o'), ('w', 'est</w>')]
    >>> bpe.tokens("lowest newer")
    ['lo@@', 'west', 'n@@', 'e@@', 'w@@', 'e@@', 'r']
    >>> bpe.apply("lowest newer")
    'lo@@ west n@@ e@@ w@@ e@@ r'
    >>> detokenize(bpe.tokens("lowest newer"))
    'lowest newer'
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ..files import atomic_write_text, open_to_read
from .bpe_learn import _as_counts, initial_symbols, learn_bpe, learn_bpe_by_recounting, read_corpus, word_counts
from .bpe_words import (
    _WHITESPACE,
    END,
    SEPARATOR,
    BPEError,
    BPETextError,
    CodesFileError,
    Merge,
    _check_line,
    _describe,
    _merge_symbols,
    check_word,
    line_words,
    word_symbols,
)

# The module's public names: applying (here), learning (bpe_learn.py), words and symbols (bpe_words.py).
__all__ = [
    "END", "SEPARATOR", "CODES_HEADER", "Merge", "BPEError", "BPETextError", "CodesFileError",
    "check_word", "line_words", "word_counts", "word_symbols", "initial_symbols",
    "learn_bpe", "learn_bpe_by_recounting", "BPE", "detokenize", "unapply", "write_codes", "read_codes",
    "read_corpus",
]

CODES_HEADER = "#version: 0.2"  # first line of a codes file (0.2: END joined to the last character)


# --------------------------------------------------------------------------
# Applying merges
# --------------------------------------------------------------------------

def _check_merge(pair, where: str) -> Merge:
    if not (isinstance(pair, tuple | list) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
        raise BPEError(f"{where}a merge must be a pair of two symbol strings, got {pair!r}")
    first, second = pair
    for symbol in pair:
        if not symbol or symbol == END:
            raise BPEError(f"{where}merge {first!r} {second!r}: a symbol must be a non-empty string "
                           f"other than {END!r}")
        space = _WHITESPACE.search(symbol)
        if space:
            raise BPEError(f"{where}merge {first!r} {second!r}: symbol {symbol!r} contains whitespace "
                           f"{_describe(space.group())}")
    if END in first:
        raise BPEError(f"{where}merge {first!r} {second!r}: the first symbol contains {END!r}, but a word's "
                       "last symbol has nothing to its right to merge with")
    if END in second[:-len(END)] or (END in second and not second.endswith(END)):
        raise BPEError(f"{where}merge {first!r} {second!r}: {END!r} may only end the second symbol")
    return first, second


def _as_token(symbol: str) -> str:
    """A symbol as an output piece: a word-final symbol loses END, any other gains SEPARATOR."""
    return symbol[:-len(END)] if symbol.endswith(END) else symbol + SEPARATOR


class BPE:
    """Merges ready to apply: ``BPE(merges)``, or ``BPE.learn(corpus, num_merges)``.

    merges: the learned pairs in order, as ``learn_bpe`` returns them or ``read_codes``
    reads them. Only the first occurrence of a repeated pair counts, as in subword-nmt.
    symbols: the initial symbols of the learning corpus (``initial_symbols``); needed
    only by ``vocabulary`` and ``unknown``. ``BPE.learn`` fills it in.

    ``segment(word)`` splits a word into pieces; ``tokens(line)`` gives the pieces
    of a line with the continuation marker; ``apply(line)`` is the line as
    ``subword-nmt apply-bpe`` writes it; ``detokenize``/``unapply`` invert them.
    """

    def __init__(self, merges: Iterable[Merge], symbols: Iterable[str] | None = None):
        self.merges: list[Merge] = [_check_merge(pair, f"merge {k}: ") for k, pair in enumerate(merges)]
        # rank: (first, second) -> position of its first occurrence; an earlier merge applies first
        self._rank: dict[Merge, int] = {}
        for k, pair in enumerate(self.merges):
            self._rank.setdefault(pair, k)
        self.symbols: list[str] | None = None if symbols is None else sorted(set(symbols))
        self._pieces: dict[str, tuple[str, ...]] = {}   # word -> its pieces: words repeat, segment once
        self._vocab: set[str] | None = None

    @classmethod
    def learn(cls, corpus, num_merges: int, min_frequency: int = 2) -> BPE:
        """Learn merges from ``corpus`` (lines, or {word: count}) and remember its initial symbols."""
        counts = _as_counts(corpus)
        return cls(learn_bpe(counts, num_merges, min_frequency), initial_symbols(counts))

    def __repr__(self) -> str:
        return f"BPE({len(self.merges)} merges)"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BPE):
            return NotImplemented
        return self.merges == other.merges and self.symbols == other.symbols

    __hash__ = None  # value equality on mutable-looking lists: not hashable

    # -- saving (in a checkpoint's metadata, next to the vocabulary) --------------
    def to_dict(self) -> dict:
        """{"merges": [[first, second], ...], "symbols": [...]}: JSON-able; ``from_dict`` reads it back."""
        if self.symbols is None:
            raise BPEError("this BPE does not know its initial symbols, so its vocabulary could not be rebuilt "
                           "from what is saved; build it with BPE.learn")
        return {"merges": [list(pair) for pair in self.merges], "symbols": list(self.symbols)}

    @classmethod
    def from_dict(cls, d) -> BPE:
        """The BPE saved by ``to_dict``, every merge and symbol checked (BPEError saying which is wrong)."""
        if not isinstance(d, dict) or not isinstance(d.get("merges"), list) or not isinstance(d.get("symbols"), list):
            raise BPEError("expected an object with a 'merges' list and a 'symbols' list (from BPE.to_dict)")
        merges = [tuple(pair) if isinstance(pair, list) else pair for pair in d["merges"]]
        for k, symbol in enumerate(d["symbols"]):
            if not (isinstance(symbol, str) and len(symbol.removesuffix(END)) == 1 and not symbol[0].isspace()):
                raise BPEError(f"symbol {k}: an initial symbol is one character, or one character and {END!r}, "
                               f"got {symbol!r:.40}")
        return cls(merges, d["symbols"])

    def segment(self, word: str, where: str = "") -> tuple[str, ...]:
        """The pieces of one word, without markers: ``("lo", "west")`` for "lowest" in the example above.

        Start from the word's initial symbols; while some adjacent pair is a merge,
        merge (everywhere in the word) the pair that was learned earliest. A word that
        breaks a rule of ``check_word`` raises BPETextError, which ``where`` starts.
        """
        pieces = self._pieces.get(word)
        if pieces is not None:
            return pieces                              # seen before, and so already checked
        check_word(word, where)
        symbols = list(word_symbols(word))
        rank = self._rank
        while len(symbols) > 1:
            # the pair learned earliest among the word's adjacent pairs (None if no pair is a merge)
            best, best_rank = None, len(self.merges)   # every rank is below len(merges)
            for pair in zip(symbols, symbols[1:]):
                r = rank.get(pair, best_rank)
                if r < best_rank:
                    best, best_rank = pair, r
            if best is None:
                break
            symbols = _merge_symbols(symbols, best[0], best[1], best[0] + best[1])
        symbols[-1] = symbols[-1][:-len(END)]          # the marker is not part of the text
        pieces = tuple(symbols)
        self._pieces[word] = pieces
        return pieces

    def _word_tokens(self, word: str, where: str = "") -> list[str]:
        pieces = self.segment(word, where)
        return [p + SEPARATOR for p in pieces[:-1]] + [pieces[-1]]

    def tokens(self, line: str, where: str = "") -> list[str]:
        """The pieces of ``line``, every piece but a word's last ending in "@@".

        ``detokenize(tokens(line)) == line`` for every line it accepts: words separated
        by single spaces, no space at either end (BPETextError otherwise, which
        ``where``, e.g. "file.tsv:3: ", starts). An empty line gives [].
        """
        if not isinstance(line, str):
            raise TypeError(f"{where}tokens expects a str, got {type(line).__name__}")
        if not line:
            return []
        if line[0] == " " or line[-1] == " " or "  " in line:
            raise BPETextError(f"{where}the text {line!r:.80} has spaces at an end or several in a row; they "
                               "would not come back (words are separated by single spaces)")
        return [tok for word in line.split(" ") for tok in self._word_tokens(word, where)]

    def apply(self, line: str, where: str = "") -> str:
        """The line as ``subword-nmt apply-bpe`` writes it: pieces separated by spaces, "@@"
        on all but each word's last; the line's leading and trailing spaces and line ending are
        kept, runs of spaces between words become one. ``unapply`` reverses it."""
        body = _check_line(line, where)
        lead = len(line) - len(line.lstrip("\r\n "))
        trail = len(line) - len(line.rstrip("\r\n "))
        out = " ".join(tok for word in body.split(" ") if word for tok in self._word_tokens(word))
        return line[:lead] + out + (line[len(line) - trail:] if 0 < trail < len(line) else "")

    def vocabulary(self) -> list[str]:
        """Every piece this BPE can produce from the learning corpus's characters, as tokens:
        the initial symbols first (sorted), then one per merge in the order learned (a repeat
        of an earlier result is listed once). Sennrich et al. §3.2: the symbol vocabulary is
        the initial vocabulary plus the merge operations."""
        if self.symbols is None:
            raise BPEError("this BPE does not know its initial symbols; build it with BPE.learn or "
                           "BPE(merges, symbols=initial_symbols(word_counts))")
        return list(dict.fromkeys(_as_token(s) for s in [*self.symbols, *(a + b for a, b in self.merges)]))

    def unknown(self, tokens: Iterable[str]) -> list[str]:
        """The tokens not in ``vocabulary()``, in order, each once: pieces made of a character
        never seen in learning (or never seen at that place in a word)."""
        if self._vocab is None:
            self._vocab = set(self.vocabulary())
        return list(dict.fromkeys(t for t in tokens if t not in self._vocab))


def detokenize(tokens: Iterable[str]) -> str:
    """Pieces back to text: a piece ending in "@@" joins the next one, any other ends a word.

    ``detokenize(bpe.tokens(line)) == line``. A marker on the very last piece (a model that
    stopped mid-word) is dropped.
    """
    if isinstance(tokens, str):
        raise TypeError("detokenize expects a list of pieces, got one str (for apply()'s output use unapply)")
    out = []
    for tok in tokens:
        if tok.endswith(SEPARATOR):
            out.append(tok[:-len(SEPARATOR)])
        else:
            out.append(tok)
            out.append(" ")
    if out and out[-1] == " ":
        out.pop()
    return "".join(out)


def unapply(text: str) -> str:
    """The inverse of ``BPE.apply`` on a line with single spaces: every "@@ " removed."""
    return detokenize(text.split(" "))


# --------------------------------------------------------------------------
# Codes files
# --------------------------------------------------------------------------

def write_codes(path: str | os.PathLike, merges: Iterable[Merge]) -> None:
    """Write merges as a codes file that ``subword-nmt apply-bpe`` reads, atomically.

    Format: the line "#version: 0.2", then one merge per line, its two symbols
    separated by one space ("e r</w>").
    """
    merges = [_check_merge(pair, f"merge {k}: ") for k, pair in enumerate(merges)]
    atomic_write_text(path, "".join([CODES_HEADER + "\n", *(f"{a} {b}\n" for a, b in merges)]))


def read_codes(path: str | os.PathLike) -> list[Merge]:
    """The merges of a codes file (see ``write_codes``); CodesFileError names ``path:line`` of a bad line.

    Like subword-nmt: "\\r\\n" line endings and spaces at the ends of a line are accepted,
    empty lines at the end of the file are ignored. Version 0.1 files (no "#version: 0.2"
    line; they put the end-of-word marker on a symbol of its own) are refused.
    """
    name = os.fspath(path)
    with open_to_read(path, "BPE codes file") as f:
        raw_lines = f.read().split(b"\n")
    while raw_lines and not raw_lines[-1].strip(b"\r "):
        raw_lines.pop()                                # the final newline, and empty lines after it
    lines = []
    for lineno, raw in enumerate(raw_lines, start=1):
        try:
            lines.append(raw.decode("utf-8").strip("\r "))
        except UnicodeDecodeError as exc:
            raise CodesFileError(f"{name}:{lineno}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    if not lines or lines[0].lstrip("\ufeff") != CODES_HEADER:
        first = lines[0] if lines else ""
        raise CodesFileError(f"{name}:1: expected the header {CODES_HEADER!r}, got {first!r:.60} (is it a BPE "
                             "codes file? version 0.1 files, without the header, are not supported)")
    merges = []
    for lineno, line in enumerate(lines[1:], start=2):
        parts = line.split(" ")
        if len(parts) != 2:
            what = "an empty line" if not line else f"{len(parts)} space-separated parts in {line!r:.60}"
            raise CodesFileError(f"{name}:{lineno}: {what}; each line after the header holds one merge, "
                                 "two symbols separated by one space")
        try:
            merges.append(_check_merge(tuple(parts), f"{name}:{lineno}: "))
        except BPEError as exc:
            raise CodesFileError(str(exc)) from None
    return merges
