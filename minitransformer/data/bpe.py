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

import heapq
import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from .. import files
from ..files import InputLimitError, atomic_write_text, bounded_lines, open_to_read
from .tsv import read_tsv_rows

__all__ = [
    "END", "SEPARATOR", "CODES_HEADER", "Merge", "BPEError", "BPETextError", "CodesFileError",
    "check_word", "line_words", "word_counts", "word_symbols", "initial_symbols",
    "learn_bpe", "learn_bpe_by_recounting", "BPE", "detokenize", "unapply", "write_codes", "read_codes",
    "read_corpus",
]

END = "</w>"                   # end-of-word marker, joined to a word's last symbol
SEPARATOR = "@@"               # continuation marker on every output piece but a word's last
CODES_HEADER = "#version: 0.2"  # first line of a codes file (0.2: END joined to the last character)

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


def word_counts(lines: Iterable[str], source: str = "<text>") -> Counter[str]:
    """How often each word occurs in ``lines``: {word: count}, in order of first appearance.

    ``source`` names the text in error messages (``source:lineno: ...``), e.g. a file name.
    """
    if isinstance(lines, str):
        raise TypeError("word_counts expects an iterable of lines, got one str (use text.splitlines())")
    counts: Counter[str] = Counter()
    for lineno, line in enumerate(lines, start=1):
        counts.update(line_words(line, f"{source}:{lineno}: "))
    return counts


def word_symbols(word: str) -> tuple[str, ...]:
    """A word as its initial symbols: its characters, the last one joined to END.

    >>> word_symbols("low")
    ('l', 'o', 'w</w>')
    """
    return (*word[:-1], word[-1] + END)


def initial_symbols(counts: Mapping[str, int]) -> list[str]:
    """The symbols learning starts from, sorted: every character seen inside a word ("a") and every
    character seen at the end of a word ("a</w>"). Sennrich et al.'s "initial vocabulary"."""
    found = set()
    for word in counts:
        found.update(word_symbols(word))
    return sorted(found)


def _as_counts(corpus) -> Counter[str]:
    """Word counts from either a {word: count} mapping (checked) or an iterable of lines."""
    if isinstance(corpus, str):
        raise TypeError("a corpus is an iterable of lines or a {word: count} mapping, got one str")
    if not isinstance(corpus, Mapping):
        return word_counts(corpus)
    counts: Counter[str] = Counter()
    for word, count in corpus.items():
        check_word(word)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise BPEError(f"the count of word {word!r} must be an integer >= 1, got {count!r}")
        counts[word] = count
    return counts


def _check_learning_args(num_merges, min_frequency) -> None:
    for name, value, low in (("num_merges", num_merges, 0), ("min_frequency", min_frequency, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise BPEError(f"{name} must be an integer >= {low}, got {value!r}")


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


# --------------------------------------------------------------------------
# Learning, the plain way: recount every pair before each merge
# --------------------------------------------------------------------------

def learn_bpe_by_recounting(corpus, num_merges: int, min_frequency: int = 2) -> list[Merge]:
    """Learn merges exactly as Sennrich et al.'s Algorithm 1 reads: before each merge,
    count all pairs again. Clear, and slow (each merge reads the whole vocabulary).

    corpus: an iterable of lines or a {word: count} mapping. Returns the merges in
    the order learned, the lines of a codes file. :func:`learn_bpe` gives the same
    merges, faster; this version is the one to read first.
    """
    counts = _as_counts(corpus)
    _check_learning_args(num_merges, min_frequency)
    # vocab: {the word as its current symbols: how often the word occurs}, e.g. {("l", "o", "w</w>"): 5}
    vocab = {word_symbols(word): count for word, count in counts.items()}
    merges: list[Merge] = []
    while len(merges) < num_merges:
        pair_freq: Counter[Merge] = Counter()          # (first, second) -> occurrences in the corpus
        for symbols, count in vocab.items():
            for pair in zip(symbols, symbols[1:]):
                pair_freq[pair] += count
        if not pair_freq:
            break                                      # every word is one symbol: nothing left to merge
        # The most frequent pair; a tie goes to the greatest (first, second), as in subword-nmt.
        best = max(pair_freq, key=lambda pair: (pair_freq[pair], pair))
        if pair_freq[best] < min_frequency:
            break
        merges.append(best)
        first, second = best
        vocab = {tuple(_merge_symbols(symbols, first, second, first + second)): count
                 for symbols, count in vocab.items()}
    return merges


# --------------------------------------------------------------------------
# Learning, the efficient way: update the counts where a merge changed them
# --------------------------------------------------------------------------

def _descending(symbol: str) -> tuple[int, ...]:
    """A sort key that orders strings backwards: a < b exactly when _descending(a) > _descending(b).

    Negated code points, then 1, which is greater than every negated code point: so a
    string sorts after every longer string it begins ("ab" after "abc"), backwards too.
    """
    return (*(-ord(ch) for ch in symbol), 1)


class _PairQueue:
    """A priority queue of pairs, most frequent first, ties to the greatest pair (a heap).

    Entries are (-frequency, key(first), key(second), first, second); heapq pops the
    smallest, so the negated frequency puts the most frequent first and the
    ``_descending`` keys put the greatest pair first among equals.

    Frequencies change after every merge, and a heap cannot update an entry in place,
    so entries go stale. The rule that keeps it exact: whenever a pair's frequency
    rises, a new entry is pushed; when it falls, nothing is done. So every pair has an
    entry at least as high as its frequency, and ``pop`` checks the entry on top against
    the true frequency: equal, it is the answer; too high, it is pushed again with the
    true frequency; too low, a newer entry exists and it is dropped.
    """

    def __init__(self, pair_freq: dict[Merge, int]):
        self._keys: dict[str, tuple[int, ...]] = {}    # symbol -> _descending(symbol), computed once
        self._heap = [self._entry(pair, f) for pair, f in pair_freq.items()]
        heapq.heapify(self._heap)

    def _entry(self, pair: Merge, freq: int):
        first, second = pair
        keys = self._keys
        if first not in keys:
            keys[first] = _descending(first)
        if second not in keys:
            keys[second] = _descending(second)
        return (-freq, keys[first], keys[second], first, second)

    def push(self, pair: Merge, freq: int) -> None:
        heapq.heappush(self._heap, self._entry(pair, freq))

    def pop(self, pair_freq: dict[Merge, int]) -> Merge | None:
        """Remove and return the most frequent pair (None when no pair is left)."""
        heap = self._heap
        while heap:
            neg_freq, _, _, first, second = heapq.heappop(heap)
            true_freq = pair_freq.get((first, second), 0)
            if true_freq == -neg_freq:
                return first, second
            if 0 < true_freq < -neg_freq:
                heapq.heappush(heap, self._entry((first, second), true_freq))
        return None


def _merge_in_word(old: list[str], first: str, second: str, merged: str, weight: int,
                   change: dict[Merge, int], new_pairs: list[Merge]) -> list[str]:
    """Merge every occurrence of (first, second) in one word, left to right, and record in
    ``change`` how the pair frequencies move: ``weight`` (the word's count) per pair. The
    pairs with ``merged`` in them are appended to ``new_pairs`` (for the index).

    Only the pairs next to an occurrence change. Around one occurrence, x . . y:

        before   x first second y     pairs (x, first) (first, second) (second, y)
        after    x merged y           pairs (x, merged) (merged, y)

    Two occurrences side by side, "first second first second", share the pair between
    them: (second, first) becomes (merged, merged), counted once. Returns the new symbols
    (the same list object when the pair does not occur).
    """
    new: list[str] = []
    n = len(old)
    i = 0                    # old[:i] is done: its symbols are in `new`
    after_merge = -1         # the position just past the previous occurrence
    while True:
        try:
            k = old.index(first, i)                    # the next `first`; list.index runs in C
        except ValueError:
            break
        if k + 1 == n or old[k + 1] != second:
            new.extend(old[i:k + 1])                   # a `first` not followed by `second`
            i = k + 1
            continue
        new.extend(old[i:k])
        change[first, second] -= weight
        if k == after_merge:                           # "... merged | first second": the shared pair
            change[second, first] -= weight
            change[merged, merged] += weight
            new_pairs.append((merged, merged))
        elif k > 0:
            change[old[k - 1], first] -= weight
            change[old[k - 1], merged] += weight
            new_pairs.append((old[k - 1], merged))
        next_is_occurrence = k + 3 < n and old[k + 2] == first and old[k + 3] == second
        if k + 2 < n and not next_is_occurrence:       # (next occurrence: it counts the shared pair)
            change[second, old[k + 2]] -= weight
            change[merged, old[k + 2]] += weight
            new_pairs.append((merged, old[k + 2]))
        new.append(merged)
        i = after_merge = k + 2
    if after_merge < 0:
        return old
    new.extend(old[i:])
    return new


def learn_bpe(corpus, num_merges: int, min_frequency: int = 2) -> list[Merge]:
    """Learn up to ``num_merges`` merges from ``corpus``; the same merges as
    :func:`learn_bpe_by_recounting` and as subword-nmt's ``learn-bpe -s num_merges``.

    corpus: an iterable of lines (both columns of a parallel corpus, for a joint
    vocabulary) or a {word: count} mapping. Learning stops early when no pair
    occurs ``min_frequency`` times or more, or when every word is one symbol.
    Returns the merges in the order learned, the order of the codes file's lines.

    A merge changes only the words that contain its pair, and in them only the
    pairs next to it. So instead of recounting the corpus per merge, this keeps:

        words[j]       list[str]           the j-th distinct word's current symbols
        freq[j]        int                 how often that word occurs in the corpus
        pair_freq      {(a, b): int}       sum over words of freq[j] x occurrences of "a b" in words[j]
        words_with     {(a, b): set[int]}  the index: the words j in which "a b" occurs
                                           (it may still list a word the pair has left)
        queue          _PairQueue          the pairs by frequency, to find the next merge

    and each merge rewrites only the words ``words_with[pair]``, moving the
    frequencies of the pairs around each occurrence (``_merge_in_word``).
    """
    counts = _as_counts(corpus)
    _check_learning_args(num_merges, min_frequency)
    words = [list(word_symbols(word)) for word in counts]
    freq = list(counts.values())
    pair_freq: dict[Merge, int] = defaultdict(int)
    words_with: dict[Merge, set[int]] = defaultdict(set)
    for j, symbols in enumerate(words):
        for pair in zip(symbols, symbols[1:]):
            pair_freq[pair] += freq[j]
            words_with[pair].add(j)
    queue = _PairQueue(pair_freq)

    merges: list[Merge] = []
    while len(merges) < num_merges:
        best = queue.pop(pair_freq)                    # Algorithm 1: the most frequent pair
        if best is None or pair_freq[best] < min_frequency:
            break
        merges.append(best)
        first, second = best
        merged = first + second
        change: dict[Merge, int] = defaultdict(int)    # how each pair's frequency moves in this merge
        new_pairs: list[Merge] = []                    # the pairs with `merged` in the word being rewritten
        for j in words_with.pop(best):
            if first not in words[j]:
                continue                               # a stale index entry: the pair left this word earlier
            words[j] = _merge_in_word(words[j], first, second, merged, freq[j], change, new_pairs)
            for pair in new_pairs:
                words_with[pair].add(j)
            new_pairs.clear()
        for pair, delta in change.items():
            if delta:
                total = pair_freq[pair] + delta
                if total:
                    pair_freq[pair] = total
                else:
                    del pair_freq[pair]
                if delta > 0:
                    queue.push(pair, total)            # a frequency rose: the queue needs a new entry
        # Every occurrence of `best` was merged: its frequency fell to 0 and it left pair_freq.
    return merges


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


def read_corpus(paths: Iterable[str | os.PathLike]) -> Counter[str]:
    """Word counts of text files, for learning: a ``.tsv`` file's two columns both count (the
    joint vocabulary of §5.1), any other file is plain text, one sentence a line.

    Lines are split on "\n" only; a UTF-8 byte-order mark is skipped. Each problem names
    its file and line: bytes that are not UTF-8, a TSV line without exactly two columns
    (``data.tsv``), a word breaking a rule of ``check_word`` (BPETextError), a line or a
    file over the limits of every reader (``files.bounded_lines``: 1 MB a line, 1 GB in all).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    counts: Counter[str] = Counter()
    for path in paths:
        name = os.fspath(path)
        if name.endswith(".tsv"):
            for lineno, src, tgt in read_tsv_rows(name):
                counts.update(line_words(src, f"{name}:{lineno}: source: "))
                counts.update(line_words(tgt, f"{name}:{lineno}: target: "))
            continue
        with open_to_read(name, "text file") as f:
            try:
                for lineno, raw in bounded_lines(f, name, "a text file of sentences"):
                    if lineno == 1:
                        raw = raw.removeprefix(b"\xef\xbb\xbf")
                    try:
                        line = raw.removesuffix(b"\n").decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise BPETextError(f"{name}:{lineno}: not valid UTF-8 ({exc.reason} at byte {exc.start + 1} "
                                           "of the line)") from None
                    counts.update(line_words(line, f"{name}:{lineno}: "))
            except InputLimitError as exc:
                raise BPETextError(str(exc)) from None
    return counts


def read_codes(path: str | os.PathLike) -> list[Merge]:
    """The merges of a codes file (see ``write_codes``); CodesFileError names ``path:line`` of a bad line.

    Like subword-nmt: "\\r\\n" line endings and spaces at the ends of a line are accepted,
    empty lines at the end of the file are ignored. Version 0.1 files (no "#version: 0.2"
    line; they put the end-of-word marker on a symbol of its own) are refused. The file is read
    with the limits of every reader (``files.bounded_lines``): 1 MB a line, ``files.MAX_CODES_BYTES``
    in all (``--codes /dev/zero`` is refused after one line's limit).
    """
    name = os.fspath(path)
    with open_to_read(path, "BPE codes file") as f:
        try:
            raw_lines = [raw.removesuffix(b"\n") for _, raw in
                         bounded_lines(f, name, "a BPE codes file", max_total_bytes=files.MAX_CODES_BYTES)]
        except InputLimitError as exc:
            raise CodesFileError(str(exc)) from None
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
