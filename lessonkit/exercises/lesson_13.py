"""Checking cells for the exercises of lesson 13 (byte-pair encoding, §5.1; checkpoint averaging, §6.1).

The checkers follow the contract documented at the top of ``_common``: a stub that
returns None prints ``NOT_ATTEMPTED`` and returns a false Verdict; a wrong answer raises
WrongAnswer (an AssertionError) naming the likely mistake in a ``hint:`` line; a right one
prints ``correct`` and returns a true Verdict. Inputs are fixed and handed over as copies.

check_merge_step    Exercise 13.1, one step of learning (Sennrich et al. 2016, Algorithm 1): the most
                    frequent pair of adjacent symbols, counted with the words' counts,
                    ties to the greatest pair, merged everywhere, left to right
check_segment       Exercise 13.2, a word's pieces under learned merges: from its characters (the last
                    one joined to "</w>"), the pair learned earliest merged, again and again
check_average_two   Exercise 13.3, the element-wise mean of two checkpoints' parameters, and a refusal
                    (ValueError) for two checkpoints of different models
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from minitransformer.data.bpe import BPE, END, learn_bpe_by_recounting
from minitransformer.model import PRESETS, Transformer

from ..i18n import tr
from ._common import (
    NOT_ATTEMPTED,
    WrongAnswer,
    case_rng,
    check_array,
    describe,
    edge,
    exercise,
    not_attempted,
    say,
    visible,
)

__all__ = ["NOT_ATTEMPTED", "check_merge_step", "check_segment", "check_average_two", "reference_merge_step"]


# -- Exercise 13.1: one merge step -------------------------------------------------------------

def _merge(symbols: tuple, pair: tuple, left_to_right: bool = True) -> tuple:
    """``symbols`` with every occurrence of ``pair`` merged, left to right (or, wrongly, right to left)."""
    seq = list(symbols) if left_to_right else list(reversed(symbols))
    a, b = pair if left_to_right else (pair[1], pair[0])
    out, i = [], 0
    while i < len(seq):
        if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return tuple(out if left_to_right else reversed(out))


def _pair_counts(vocab: dict, weighted: bool = True, as_set: bool = False) -> Counter:
    """Each adjacent pair's frequency (weighted: times its words' counts). ``as_set``: the slip of
    counting a pair once per word, however often it occurs in it."""
    counts: Counter = Counter()
    for symbols, count in vocab.items():
        pairs = zip(symbols, symbols[1:])
        for pair in set(pairs) if as_set else pairs:
            counts[pair] += count if weighted else 1
    return counts


def reference_merge_step(vocab: dict) -> tuple[tuple[str, str], dict]:
    """(the pair merged, the vocabulary after merging it): vocab is {word as a tuple of symbols: count}."""
    counts = _pair_counts(vocab)
    best = max(counts, key=lambda pair: (counts[pair], pair))
    return best, {_merge(symbols, best): count for symbols, count in vocab.items()}


def _symbols(word: str) -> tuple:
    return (*word[:-1], word[-1] + END)


_MERGE_CASES = [
    # Sennrich et al.'s example corpus: "e s" and "s t" both occur 9 times ... "es t</w>"
    {_symbols("low"): 5, _symbols("lower"): 2, _symbols("newest"): 6, _symbols("widest"): 3},
    # a tie: ("a", "b") and ("b", "a") both occur 4 times
    {_symbols("abab"): 2, _symbols("baba"): 2, _symbols("aaa"): 1},
    # the pair overlaps itself: "x a a a y" has (a, a) twice, and merges into "x aa a y"
    {_symbols("xaaay"): 3, _symbols("aaa"): 2},
    # the most frequent pair is not the most common one in distinct words
    {_symbols("th"): 1, _symbols("the"): 1, _symbols("that"): 1, ("z", "z", "z</w>"): 4, ("o", "z</w>"): 3},
    # after two merges: symbols longer than one character
    {("lo", "w</w>"): 5, ("lo", "w", "e", "r</w>"): 2, ("n", "e", "w", "est</w>"): 6, ("w", "i", "d", "est</w>"): 3},
]


# Edge cases of the hidden cases: a pair twice in one word decides the winner (a set counts it once);
# a tie between a pair and its reverse; a word of one symbol (no pair) among the others.
_MERGE_EDGES = [
    {("a", "b", "a", "b", "c</w>"): 3, ("d", "e</w>"): 5},
    {("x", "y", "x", "y", "x", "y</w>"): 1, ("q", "r</w>"): 2, ("r", "q</w>"): 2},
    {("o</w>",): 9, ("n", "o</w>"): 2, ("n", "a</w>"): 1},
]


def _random_vocab(rng) -> dict:
    letters = [chr(ord("a") + i) for i in range(int(rng.integers(2, 6)))]
    vocab = {}
    for _ in range(int(rng.integers(2, 7))):
        word = "".join(rng.choice(letters, size=int(rng.integers(1, 7))))
        vocab[_symbols(word)] = vocab.get(_symbols(word), 0) + int(rng.integers(1, 9))
    return vocab


def _merge_cases() -> list:
    if visible():
        return _MERGE_CASES
    rng = case_rng(131)
    return [edge(_MERGE_EDGES), _random_vocab(rng), _random_vocab(rng)]


@exercise("13.1")
def check_merge_step(fn) -> bool:
    """fn(vocab) -> (pair, new_vocab); vocab: {tuple of symbols: count}, e.g. {("l", "o", "w</w>"): 5}."""
    cases = _merge_cases()
    first = fn(dict(cases[0]))
    if not_attempted(first):
        return False
    for n, vocab in enumerate(cases):
        got = first if n == 0 else fn(dict(vocab))
        where = tr(f"case {n + 1} ({len(vocab)} words)")
        if not (isinstance(got, (tuple, list)) and len(got) == 2) or all(isinstance(x, str) for x in got):
            raise WrongAnswer(tr(f"{where}: expected (pair, new_vocab), got {describe(got)}")
                                 + ("\n  hint: "
                                    + tr("that looks like the pair alone; return the merged vocabulary too")
                                    if isinstance(got, (tuple, list)) and all(isinstance(x, str) for x in got)
                                    else ""))
        pair, new_vocab = got
        ref_pair, ref_vocab = reference_merge_step(vocab)
        if n == 0 and visible():    # the reference is the package's: learn_bpe_by_recounting's first merge
            words = {"".join(s).replace(END, ""): c for s, c in vocab.items()}
            if learn_bpe_by_recounting(words, 1) != [ref_pair]:
                raise RuntimeError("internal: the reference merge step disagrees with learn_bpe_by_recounting")
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise WrongAnswer(tr(f"{where}: the pair should be two symbols (first, second), got {describe(pair)}"))
        pair = tuple(pair)
        if pair != ref_pair:
            unweighted = _pair_counts(vocab, weighted=False)
            counts = _pair_counts(vocab)
            msg = tr(f"{where}: merged {pair}, expected {ref_pair} (it occurs {counts[ref_pair]} times)")
            once = _pair_counts(vocab, as_set=True)
            if pair == max(once, key=lambda p: (once[p], p)):
                msg += "\n  hint: " + tr("a pair that occurs twice in a word counts twice (times the word's count): "
                                          "count every adjacent position, not the set of pairs a word contains")
            elif pair == max(unweighted, key=lambda p: (unweighted[p], p)):
                msg += "\n  hint: " + tr("a pair's frequency is the sum of its words' counts (a word seen 5 times "
                                          "adds 5 for each occurrence), not the number of words it is in")
            elif counts[pair] == counts[ref_pair]:
                msg += "\n  hint: " + tr("a tie: among pairs of equal frequency take the greatest, comparing "
                                          "(first, second) as Python compares tuples of strings (max, not min)")
            raise WrongAnswer(msg)
        if not isinstance(new_vocab, dict):
            raise WrongAnswer(tr(f"{where}: new_vocab should be a dict {{tuple of symbols: count}}, got "
                                    f"{describe(new_vocab)}"))
        if new_vocab != ref_vocab:
            wrong = {s: c for s, c in ref_vocab.items() if new_vocab.get(s) != c}
            symbols, count = next(iter(wrong.items()))
            original = next(s for s in vocab if _merge(s, pair) == symbols)
            msg = tr(f"{where}: after merging {pair}, {original} should become {symbols} (count {count}); "
                     f"yours has {len(new_vocab)} words")
            right_to_left = {_merge(s, pair, left_to_right=False): c for s, c in vocab.items()}
            if new_vocab == right_to_left:
                msg += "\n  hint: " + tr("merge left to right: in 'a a a' the pair (a, a) gives 'aa a', "
                                          "and a symbol used by one merge is not used again")
            elif any(isinstance(s, tuple) and any(" " in x for x in s) for s in new_vocab):
                msg += "\n  hint: " + tr("the merged symbol is first + second joined with nothing between")
            elif sum(new_vocab.values()) != sum(vocab.values()):
                msg += "\n  hint: " + tr("every word keeps its count; only its symbols change")
            raise WrongAnswer(msg)
    say(tr(f"correct: {len(cases)} vocabularies, the pair and the merged words as learn_bpe chooses them"))
    return True


# -- Exercise 13.2: a word's pieces ---------------------------------------------------------------

_CORPUS = ["lower lowest newer newest wider widest low low low", "viertausend dreitausend vierhundert dreihundert",
           "tausend tausend hundert hundert vier drei"] * 2
_MERGES = BPE.learn(_CORPUS, 40).merges
_WORDS = ["lowest", "newer", "low", "viertausenddreihundert", "hundertvier", "slower", "tausendundeins", "ü"]


def _leftmost_first(word: str, merges) -> list:
    """A common wrong reading: merge the leftmost adjacent pair that is any merge, again and again."""
    symbols, known = list(_symbols(word)), set(merges)
    while True:
        i = next((i for i in range(len(symbols) - 1) if (symbols[i], symbols[i + 1]) in known), None)
        if i is None:
            break
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    return [*symbols[:-1], symbols[-1].removesuffix(END)]


def _without_end(word: str, merges) -> list:
    """Another: the word's characters without the end-of-word marker, so no word-final merge applies."""
    rank = {pair: k for k, pair in reversed(list(enumerate(merges)))}
    symbols = list(word)
    while len(symbols) > 1:
        pairs = [(rank[p], i) for i, p in enumerate(zip(symbols, symbols[1:])) if p in rank]
        if not pairs:
            break
        r = min(pairs)[0]
        symbols = list(_merge(tuple(symbols), merges[r]))
    return symbols


def _segment_case():
    """(merges, words): the visible ones, or merges learned from a random corpus and words made of its
    letters (and one letter never seen)."""
    if visible():
        return _MERGES, _WORDS
    rng = case_rng(132)
    letters = [chr(ord("a") + i) for i in range(int(rng.integers(3, 7)))]
    words = ["".join(rng.choice(letters, size=int(rng.integers(2, 8)))) for _ in range(12)]
    corpus = [" ".join(rng.choice(words, size=8)) for _ in range(6)]
    merges = BPE.learn(corpus, int(rng.integers(5, 30))).merges
    asked = [str(w) for w in rng.choice(words, size=4)] + ["".join(rng.choice(letters, size=9)), letters[0] + "ß"]
    return merges, asked


@exercise("13.2")
def check_segment(fn) -> bool:
    """fn(word, merges) -> the word's pieces, a list of strings without markers; merges: [(first, second), ...]."""
    merges, words = _segment_case()
    bpe = BPE(merges)
    first = fn(words[0], [tuple(m) for m in merges])
    if not_attempted(first):
        return False
    for n, word in enumerate(words):
        got = first if n == 0 else fn(word, [tuple(m) for m in merges])
        expected = list(bpe.segment(word))
        if not isinstance(got, (list, tuple)) or not all(isinstance(p, str) for p in got):
            raise WrongAnswer(tr(f"{word!r}: expected a list of pieces (strings), got {describe(got)}"))
        got = list(got)
        if got == expected:
            continue
        msg = tr(f"{word!r}: pieces {got}, expected {expected}")
        if "".join(got) == word + END or (got and got[-1].endswith(END)):
            msg += "\n  hint: " + tr(f"the end-of-word marker {END!r} belongs to the symbols, not to the pieces: "
                                      "drop it")
        elif got == _without_end(word, merges):
            msg += "\n  hint: " + tr(f"start from the characters with the last one joined to {END!r} "
                                      f"('w', 'o', 'r', 'd{END}'): merges that end a word (like ('s', 't{END}')) "
                                      "need it")
        elif got == _leftmost_first(word, merges):
            msg += "\n  hint: " + tr("merge the pair that was learned earliest (lowest position in merges), "
                                      "wherever it is in the word, not the leftmost pair that is a merge")
        elif "".join(got) != word:
            msg += "\n  hint: " + tr("the pieces, joined, must give the word back")
        raise WrongAnswer(msg)
    say(tr(f"correct: {len(words)} words, the pieces BPE.segment gives (a character never seen stays alone)"))
    return True


# -- Exercise 13.3: averaging two checkpoints ---------------------------------------------------

def _parameters(cfg, seed: int) -> dict:
    return {name: p.data.copy() for name, p in Transformer(cfg, seed=seed).named_parameters()}


def _average_reference(a: dict, b: dict) -> dict:
    """The element-wise mean of two checkpoints' parameters (summed in float64, cast back), after checking
    that they hold the same names and shapes (ValueError naming the first that differs)."""
    if set(a) != set(b):
        raise ValueError(f"the checkpoints hold different parameters: {sorted(set(a) ^ set(b))[:3]}")
    for name in sorted(a):
        if np.shape(a[name]) != np.shape(b[name]):
            raise ValueError(f"{name}: shape {np.shape(a[name])} in one checkpoint, {np.shape(b[name])} in the other")
    return {name: ((a[name].astype(np.float64) + b[name]) / 2).astype(a[name].dtype) for name in a}


def _mismatches(cfg, a: dict) -> list:
    """Checkpoints that must be refused: (what differs, the other checkpoint, the hint if it was averaged).
    The visible case: a vocabulary one larger. A hidden one adds one of: an embedding of one row (it
    broadcasts against any other: NumPy averages it without a word), the same shapes under another name,
    a parameter missing."""
    larger = (tr(f"a vocabulary of {cfg.vocab_size} and one of {cfg.vocab_size + 1} tokens"),
              _parameters(cfg.with_(vocab_size=cfg.vocab_size + 1), 2),
              tr(f"a vocabulary of {cfg.vocab_size} and one of {cfg.vocab_size + 1} tokens give embeddings of "
                 "different shapes; refuse them with ValueError, as average.py does"))
    if visible():
        return [larger]
    one_row = {k: (v[:1].copy() if k == "E" else v.copy()) for k, v in a.items()}
    first = sorted(a)[0]
    renamed = {(k + "_renamed" if k == first else k): v.copy() for k, v in a.items()}
    missing = {k: v.copy() for k, v in a.items() if k != first}
    return [larger, edge([
        (tr("an embedding of 1 row against one of several"), one_row,
         tr("an embedding of shape (1, d_model) broadcasts against (V, d_model): NumPy averages them without a "
            "word, so compare the shapes yourself (not only the names) before averaging")),
        (tr(f"the same shapes, {first!r} under another name"), renamed,
         tr("the names differ: compare the two checkpoints' names before averaging")),
        (tr(f"{first!r} missing from one"), missing,
         tr("a parameter is missing from one checkpoint: compare the names")),
    ])]


def _expect_refusal(fn, a: dict, other: dict, label: str, hint: str) -> None:
    try:
        result = fn({k: v.copy() for k, v in a.items()}, {k: v.copy() for k, v in other.items()})
    except ValueError as exc:
        if getattr(exc, "numpy_broadcast", False) or "could not be broadcast" in str(exc):
            raise WrongAnswer(tr(f"two checkpoints of different models ({label}): the ValueError came from NumPy "
                                 f"({str(exc)[:80]}), not from a check of yours")
                              + "\n  hint: " + tr("check the names and the shapes first and raise ValueError saying "
                                                  "which parameter differs: shapes that broadcast would be averaged "
                                                  "silently")) from None
    except Exception as exc:  # noqa: BLE001 - any other failure is the learner's to see, named
        raise WrongAnswer(tr(f"two checkpoints of different models ({label}) raised {type(exc).__name__}: {exc}")
                          + "\n  hint: " + tr("check the names and shapes first and raise ValueError saying which "
                                              "parameter differs")) from None
    else:
        raise WrongAnswer(tr(f"two checkpoints of different models ({label}) were averaged (you returned "
                             f"{describe(result)})") + f"\n  hint: {hint}")


@exercise("13.3")
def check_average_two(fn) -> bool:
    """fn(a, b) -> {name: (a[name] + b[name]) / 2}; a, b: {parameter name: float32 array} of one model.
    For two checkpoints of different models (other names or shapes) it raises ValueError."""
    vocab = 12 if visible() else int(case_rng(133).integers(4, 30))
    cfg = PRESETS["tiny"].with_(vocab_size=vocab)
    a, b = _parameters(cfg, 0), _parameters(cfg, 1)
    copies = ({k: v.copy() for k, v in a.items()}, {k: v.copy() for k, v in b.items()})
    got = fn(*copies)
    if not_attempted(got):
        return False
    if not isinstance(got, dict):
        raise WrongAnswer(tr(f"expected a dict {{name: array}}, got {describe(got)}"))
    if set(got) != set(a):
        missing = sorted(set(a) - set(got))
        raise WrongAnswer(tr(f"the names differ from the checkpoints': missing {missing[:3]}, extra "
                                f"{sorted(set(got) - set(a))[:3]}")
                          + "\n  hint: " + tr("average every parameter, by its name"))
    for k, v in a.items():
        if not (np.array_equal(copies[0][k], v) and np.array_equal(copies[1][k], b[k])):
            raise WrongAnswer(tr(f"{k}: the inputs were changed") + "\n  hint: "
                              + tr("compute a new array; a checkpoint you average must stay as it was (+= writes "
                                   "into it)"))
    errors = {}
    reference = _average_reference(a, b)
    for name in sorted(a):
        mean = reference[name]
        hints = [(a[name] + b[name], tr("no division: the mean of two is their sum / 2")),
                 (a[name] + b[name] / 2, tr("a + b / 2 divides only b: write (a + b) / 2")),
                 (np.full_like(a[name], (a[name].mean() + b[name].mean()) / 2),
                  tr("you averaged over the entries of each array: average each entry across the two checkpoints"))]
        errors[name] = check_array(name, got[name], mean.astype(np.float64), hints=hints)
        if np.asarray(got[name]).dtype != a[name].dtype:
            raise WrongAnswer(tr(f"{name}: dtype {np.asarray(got[name]).dtype}, the checkpoints' is {a[name].dtype}")
                              + "\n  hint: " + tr("cast the mean back to the parameters' dtype"))
    for label, other, hint in _mismatches(cfg, a):
        _expect_refusal(fn, a, other, label, hint)
    worst = max(errors, key=lambda k: errors[k][0])
    say(tr(f"correct: all {len(errors)} parameters are the mean (largest relative error {errors[worst][0]:.1e}, "
           f"{worst}), and two different models are refused"))
    return True
