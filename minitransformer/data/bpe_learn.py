"""Learning byte-pair merges (Sennrich et al. 2016, Algorithm 1; ``bpe.py`` describes the method).

Two learners give the same merges: ``learn_bpe_by_recounting``, the algorithm as it
reads (count every pair again before each merge), and ``learn_bpe``, which updates
the counts only where a merge changed them (the one ``BPE.learn`` uses). Both take an
iterable of lines or a {word: count} mapping; ``read_corpus`` counts the words of files.
"""

from __future__ import annotations

import heapq
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

from ..files import open_to_read
from .bpe_words import BPEError, BPETextError, Merge, _merge_symbols, check_word, line_words, word_symbols
from .tsv import read_tsv_rows

__all__ = ["word_counts", "initial_symbols", "learn_bpe", "learn_bpe_by_recounting", "read_corpus"]


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
# Reading a corpus
# --------------------------------------------------------------------------

def read_corpus(paths: Iterable[str | os.PathLike]) -> Counter[str]:
    """Word counts of text files, for learning: a ``.tsv`` file's two columns both count (the
    joint vocabulary of §5.1), any other file is plain text, one sentence a line.

    Lines are split on "\n" only; a UTF-8 byte-order mark is skipped. Each problem names
    its file and line: bytes that are not UTF-8, a TSV line without exactly two columns
    (``data.tsv``), a word breaking a rule of ``check_word`` (BPETextError).
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
            data = f.read()
        for lineno, raw in enumerate(data.removeprefix(b"\xef\xbb\xbf").split(b"\n"), start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BPETextError(f"{name}:{lineno}: not valid UTF-8 ({exc.reason} at byte {exc.start + 1} of the "
                                   "line)") from None
            counts.update(line_words(line, f"{name}:{lineno}: "))
    return counts
