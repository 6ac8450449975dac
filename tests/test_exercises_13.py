"""The exercise checkers of lesson 13 (BPE, §5.1; checkpoint averaging, §6.1): a right answer
passes, each common mistake gets its hint, an untouched stub returns False without raising.
The right answers here are written independently of the package."""

from collections import Counter

import numpy as np
from checker_contract import contract_tests

from lessonkit.exercises import lesson_13 as ex
from minitransformer.data.bpe import BPE

END = "</w>"


# -- right answers ------------------------------------------------------------------------------

def merge_word(symbols, pair):
    out, i = [], 0
    while i < len(symbols):
        if tuple(symbols[i:i + 2]) == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def merge_step(vocab):
    counts = Counter()
    for symbols, count in vocab.items():
        for pair in zip(symbols, symbols[1:]):
            counts[pair] += count
    best = max(counts, key=lambda pair: (counts[pair], pair))
    return best, {merge_word(symbols, best): count for symbols, count in vocab.items()}


def segment(word, merges):
    rank = {}
    for k, pair in enumerate(merges):
        rank.setdefault(tuple(pair), k)
    symbols = [*word[:-1], word[-1] + END]
    while True:
        ranked = [(rank[p], p) for p in zip(symbols, symbols[1:]) if p in rank]
        if not ranked:
            break
        symbols = list(merge_word(symbols, min(ranked)[1]))
    symbols[-1] = symbols[-1][: -len(END)]
    return symbols


def average_two(a, b):
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        raise ValueError("different models")
    return {k: ((a[k].astype(np.float64) + b[k]) / 2).astype(a[k].dtype) for k in a}


# -- wrong answers, each a mistake the checker names -------------------------------------------

def merge_step_unweighted(vocab):
    counts = Counter(pair for symbols in vocab for pair in zip(symbols, symbols[1:]))
    best = max(counts, key=lambda pair: (counts[pair], pair))
    return best, {merge_word(s, best): c for s, c in vocab.items()}


def merge_step_min_tie(vocab):
    counts = Counter()
    for symbols, count in vocab.items():
        for pair in zip(symbols, symbols[1:]):
            counts[pair] += count
    top = max(counts.values())
    best = min(p for p in counts if counts[p] == top)
    return best, {merge_word(s, best): c for s, c in vocab.items()}


def merge_step_right_to_left(vocab):
    best, _ = merge_step(vocab)
    out = {}
    for symbols, count in vocab.items():
        reversed_merge = merge_word(symbols[::-1], (best[1], best[0]))
        out[tuple(s if s != best[1] + best[0] else best[0] + best[1] for s in reversed_merge[::-1])] = count
    return best, out


def merge_step_with_space(vocab):
    best, _ = merge_step(vocab)
    return best, {tuple(" ".join(best) if s == best[0] + best[1] else s for s in merge_word(symbols, best)): c
                  for symbols, c in vocab.items()}


def segment_keeps_marker(word, merges):
    pieces = segment(word, merges)
    return pieces[:-1] + [pieces[-1] + END]


def segment_without_marker(word, merges):
    rank = {tuple(p): k for k, p in reversed(list(enumerate(merges)))}
    symbols = list(word)
    while True:
        ranked = [(rank[p], p) for p in zip(symbols, symbols[1:]) if p in rank]
        if not ranked:
            return symbols
        symbols = list(merge_word(symbols, min(ranked)[1]))


def segment_leftmost(word, merges):
    known = {tuple(p) for p in merges}
    symbols = [*word[:-1], word[-1] + END]
    while True:
        i = next((i for i in range(len(symbols) - 1) if (symbols[i], symbols[i + 1]) in known), None)
        if i is None:
            break
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    symbols[-1] = symbols[-1][: -len(END)]
    return symbols


CASES = {
    "check_merge_step": (merge_step, [
        ("counts words, not occurrences", merge_step_unweighted, r"sum of its words' counts"),
        ("ties to the smallest pair", merge_step_min_tie, r"a tie: .*greatest"),
        ("merges right to left", merge_step_right_to_left, r"merge left to right"),
        ("joins with a space", merge_step_with_space, r"first \+ second joined with nothing between"),
        ("one value", lambda vocab: ("e", "s"), r"expected \(pair, new_vocab\)"),
    ]),
    "check_segment": (segment, [
        ("keeps </w>", segment_keeps_marker, r"end-of-word marker '</w>' belongs to the symbols"),
        ("no </w> at all", segment_without_marker, r"start from the characters with the last one joined"),
        ("leftmost merge first", segment_leftmost, r"learned earliest"),
        ("characters", lambda word, merges: list(word), r"pieces .* expected"),
        ("a string", lambda word, merges: word, r"expected a list of pieces"),
    ]),
    "check_average_two": (average_two, [
        ("the sum", lambda a, b: {k: a[k] + b[k] for k in a}, r"no division"),
        ("a + b / 2", lambda a, b: {k: a[k] + b[k] / 2 for k in a}, r"a \+ b / 2 divides only b"),
        ("in place", lambda a, b: {k: np.add(a[k], b[k], out=a[k]) / 2 for k in a}, r"the inputs were changed"),
        ("float64 out", lambda a, b: {k: (a[k].astype(np.float64) + b[k]) / 2 for k in a}, r"cast the mean back"),
        ("only E", lambda a, b: {"E": (a["E"] + b["E"]) / 2}, r"average every parameter"),
        ("no refusal", lambda a, b: {k: (a[k] + b[k]) / 2 if a[k].shape == b[k].shape else a[k] for k in a},
         r"two checkpoints of different models \(.*\) were averaged"),
        ("no validation", lambda a, b: {k: (a[k] + b[k]) / 2 for k in a}, r"came from NumPy.*check the names and the shapes"),
    ]),
}

(test_every_checker_has_cases, test_correct_answer_passes, test_stub_is_not_attempted,
 test_wrong_answer_gets_its_hint) = contract_tests(ex, CASES)


def test_the_segment_cases_tell_the_readings_apart():
    """Each wrong reading gives other pieces than BPE.segment on at least one of the checker's words
    (else its hint could never fire), and the words include one whose pieces need a word-final merge."""
    bpe = BPE(ex._MERGES)
    for wrong in (segment_without_marker, segment_leftmost):
        assert any(wrong(w, ex._MERGES) != list(bpe.segment(w)) for w in ex._WORDS), wrong.__name__
    assert all(segment(w, ex._MERGES) == list(bpe.segment(w)) for w in ex._WORDS)


def test_the_merge_cases_hold_a_tie_an_overlap_and_a_weighted_winner():
    for case in ex._MERGE_CASES:
        assert merge_step(case) == ex.reference_merge_step(case)
    assert merge_step_min_tie(ex._MERGE_CASES[1])[0] != merge_step(ex._MERGE_CASES[1])[0]
    assert merge_step_right_to_left(ex._MERGE_CASES[2]) != merge_step(ex._MERGE_CASES[2])
    assert merge_step_unweighted(ex._MERGE_CASES[3])[0] != merge_step(ex._MERGE_CASES[3])[0]
