"""Metrics: corpus BLEU, chrF and exact match for translation (bracket F1 for parsing: data/evalb.py).

These are small re-implementations written to be read. The translation
metrics agree with sacrebleu 2.x (Post, 2018, "A Call for Clarity in Reporting
BLEU Scores", https://aclanthology.org/W18-6319) on its default settings, and
``tests/test_metrics.py`` checks that to 1e-6 on many corpora.

Sources:

* BLEU: Papineni, Roukos, Ward and Zhu (2002), "BLEU: a Method for Automatic
  Evaluation of Machine Translation", https://aclanthology.org/P02-1040
* The "13a" tokenizer: NIST's mteval-v13a.pl script, which WMT uses and which
  sacrebleu takes as its default.
* Smoothing "exp": method 3 in Chen and Cherry (2014), "A Systematic
  Comparison of Smoothing Techniques for Sentence-Level BLEU",
  https://aclanthology.org/W14-3346 (the NIST mteval smoothing).
* chrF: Popović (2015), "chrF: character n-gram F-score for automatic MT
  evaluation", https://aclanthology.org/W15-3049

BLEU is a *corpus* metric: n-gram counts are summed over all sentences first
and only then turned into precisions. Averaging sentence BLEU scores gives a
different (and not comparable) number.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

__all__ = ["BleuScore", "corpus_bleu", "corpus_chrf", "exact_match", "tokenize_13a"]


# --------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------

def _check_corpus(hypotheses, references) -> None:
    """Raise a readable error for the usual mistakes before any counting."""
    for label, seq in (("hypotheses", hypotheses), ("references", references)):
        # A bare string is a sequence too, of characters: a classic bug.
        if isinstance(seq, str):
            raise TypeError(f"{label} must be a list of strings, got a single str")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses and references differ in length: "
            f"{len(hypotheses)} hypotheses vs {len(references)} references"
        )
    if len(hypotheses) == 0:
        raise ValueError("empty corpus: need at least one hypothesis/reference pair")
    for label, seq in (("hypotheses", hypotheses), ("references", references)):
        for i, s in enumerate(seq):
            if not isinstance(s, str):
                raise TypeError(f"{label}[{i}] must be a str, got {type(s).__name__}")


# --------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------

# mteval-v13a puts spaces around these ASCII symbols, wherever they occur.
# Deliberately *not* in the set: the apostrophe ' (so "l'eau" and "don't" stay
# one token), the hyphen - and the period and comma, which get the special
# digit-aware rules below.
_V13A_SYMBOLS = "{|}~" + "[\\]^_`" + " !\"#$%&" + "()*+" + ":;<=>?@" + "/"
_V13A_RULES = [
    (re.compile("([" + re.escape(_V13A_SYMBOLS) + "])"), r" \1 "),
    # A period or comma is split off unless it sits between digits, so that
    # "3.14" and "1,000" survive as numbers but "end." becomes "end ."
    (re.compile(r"([^0-9])([.,])"), r"\1 \2 "),
    (re.compile(r"([.,])([^0-9])"), r" \1 \2"),
    # A dash right after a digit is split off ("1990-2000" -> "1990 - 2000").
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),
]


def tokenize_13a(line: str) -> list[str]:
    """Tokenize like NIST mteval-v13a.pl (sacrebleu's default "13a").

    >>> tokenize_13a("Hello, world! It's 3.14.")
    ['Hello', ',', 'world', '!', "It's", '3.14', '.']
    """
    # The language-independent part of mteval: drop <skipped> markers, join
    # words hyphenated across a line break, and undo the four XML escapes.
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    line = (line.replace("&quot;", '"').replace("&amp;", "&")
                .replace("&lt;", "<").replace("&gt;", ">"))
    # Pad with spaces so the "preceded by / followed by" rules also fire at
    # the very start and end of the line.
    line = f" {line} "
    for pattern, replacement in _V13A_RULES:
        line = pattern.sub(replacement, line)
    return line.split()


def _tokenize(line: str, mode: str) -> list[str]:
    # sacrebleu strips trailing whitespace before tokenizing; it matters for
    # 13a, where a final "-\n" would otherwise glue the last word away.
    line = line.rstrip()
    if mode == "13a":
        return tokenize_13a(line)
    if mode == "char":
        # Every character is a token, except whitespace, which only separates.
        return [ch for ch in line if not ch.isspace()]
    if mode == "none":
        return line.split()
    raise ValueError(f"unknown tokenize mode {mode!r}; use '13a', 'char' or 'none'")


# --------------------------------------------------------------------------
# BLEU
# --------------------------------------------------------------------------

def _ngram_counts(tokens: list[str], max_order: int) -> Counter:
    """All n-grams of ``tokens`` for n = 1..max_order, as a Counter of tuples."""
    counts: Counter = Counter()
    for n in range(1, max_order + 1):
        for i in range(len(tokens) - n + 1):
            counts[tuple(tokens[i:i + n])] += 1
    return counts


@dataclass(frozen=True)
class BleuScore:
    """A corpus BLEU score and the statistics it was computed from.

    score: BLEU in [0, 100]. precisions: the n-gram precisions in percent
    (n = 1..max_order, after smoothing). bp: the brevity penalty.
    sys_len / ref_len: total hypothesis / reference length in tokens.
    counts / totals: matched and proposed n-grams per order, for debugging.
    """

    score: float
    precisions: list[float]
    bp: float
    sys_len: int
    ref_len: int
    counts: tuple[int, ...] = ()
    totals: tuple[int, ...] = ()

    def __str__(self) -> str:
        n = len(self.precisions)
        prec = "/".join(f"{p:.1f}" for p in self.precisions)
        return (f"BLEU = {self.score:.2f} (p1..p{n} = {prec}, BP = {self.bp:.3f}, "
                f"hyp_len={self.sys_len}, ref_len={self.ref_len})")


def corpus_bleu(hypotheses: list[str], references: list[str],
                tokenize: str = "13a", max_order: int = 4) -> BleuScore:
    """Corpus BLEU with one reference per hypothesis (Papineni et al., 2002).

    tokenize: "13a" (mteval-v13a, for word-level text), "char" (every
    non-space character is a token) or "none" (split on whitespace).
    Matches ``sacrebleu.corpus_bleu`` defaults: case-sensitive, "exp" smoothing.
    """
    _check_corpus(hypotheses, references)
    if max_order < 1:
        raise ValueError(f"max_order must be >= 1, got {max_order}")

    correct = [0] * max_order   # clipped matches per n-gram order
    total = [0] * max_order     # hypothesis n-grams per order
    sys_len = ref_len = 0
    for hyp, ref in zip(hypotheses, references):
        hyp_tokens, ref_tokens = _tokenize(hyp, tokenize), _tokenize(ref, tokenize)
        sys_len += len(hyp_tokens)
        ref_len += len(ref_tokens)
        hyp_ngrams = _ngram_counts(hyp_tokens, max_order)
        ref_ngrams = _ngram_counts(ref_tokens, max_order)
        for ngram, count in hyp_ngrams.items():
            order = len(ngram) - 1
            total[order] += count
            # "Clipping": a hypothesis n-gram is credited at most as many
            # times as it occurs in the reference, so "the the the" gains
            # nothing from repeating a word.
            correct[order] += min(count, ref_ngrams[ngram])

    # Brevity penalty: precision alone rewards saying little, so a corpus
    # shorter than its references is penalised by exp(1 - r/c).
    if sys_len >= ref_len:
        bp = 1.0
    else:
        bp = math.exp(1.0 - ref_len / sys_len) if sys_len > 0 else 0.0

    precisions = [0.0] * max_order
    if not any(correct):
        # No n-gram of any order matched: BLEU is 0 and sacrebleu reports all
        # precisions as 0 too (it stops before smoothing in this case).
        return BleuScore(0.0, precisions, bp, sys_len, ref_len, tuple(correct), tuple(total))

    # "exp" smoothing (Chen & Cherry 2014, method 3, as in mteval-v13a): the
    # k-th order whose match count is zero gets precision 1 / (2^k * total)
    # instead of 0, so one empty order does not zero the whole corpus.
    halvings = 1.0
    for n in range(max_order):
        if total[n] == 0:
            # The hypotheses have no n-grams this long at all (every sentence
            # is shorter than n tokens). Nothing to smooth: the precision
            # stays 0 and so does BLEU, exactly as in sacrebleu.
            break
        if correct[n] == 0:
            halvings *= 2.0
            precisions[n] = 100.0 / (halvings * total[n])
        else:
            precisions[n] = 100.0 * correct[n] / total[n]

    if min(precisions) == 0.0:
        score = 0.0
    else:
        # Geometric mean of the precisions, computed through logs.
        log_mean = sum(math.log(p) for p in precisions) / max_order
        score = bp * math.exp(log_mean)
    return BleuScore(score, precisions, bp, sys_len, ref_len, tuple(correct), tuple(total))


# --------------------------------------------------------------------------
# chrF
# --------------------------------------------------------------------------

def _char_ngrams(line: str, n: int) -> Counter:
    return Counter(line[i:i + n] for i in range(len(line) - n + 1))


def corpus_chrf(hypotheses: list[str], references: list[str],
                char_order: int = 6, beta: int = 2) -> float:
    """Corpus chrF in [0, 100] (Popović, 2015), as sacrebleu's ``CHRF()``.

    Character n-grams of orders 1..char_order with whitespace removed; counts
    are summed over the corpus, then precision and recall are averaged over
    the orders that have counts on both sides, and combined into an F-beta
    score (beta=2 weighs recall twice as much as precision).
    """
    _check_corpus(hypotheses, references)
    if char_order < 1:
        raise ValueError(f"char_order must be >= 1, got {char_order}")

    hyp_total = [0] * char_order
    ref_total = [0] * char_order
    matched = [0] * char_order
    for hyp, ref in zip(hypotheses, references):
        # Whitespace only separates words; it is not part of any n-gram.
        hyp, ref = "".join(hyp.split()), "".join(ref.split())
        for n in range(1, char_order + 1):
            hyp_ngrams, ref_ngrams = _char_ngrams(hyp, n), _char_ngrams(ref, n)
            # sacrebleu quirk, matched on purpose: when the reference has no
            # n-grams of this order (it is shorter than n characters), the
            # hypothesis's n-grams of that order are not counted either.
            if ref_ngrams:
                hyp_total[n - 1] += sum(hyp_ngrams.values())
            ref_total[n - 1] += sum(ref_ngrams.values())
            matched[n - 1] += sum(min(c, ref_ngrams[g]) for g, c in hyp_ngrams.items())

    # Average precision and recall over the "effective" orders: those where
    # both sides have n-grams (sacrebleu's default, eps_smoothing=False).
    sum_prec = sum_rec = 0.0
    effective = 0
    for n in range(char_order):
        if hyp_total[n] > 0 and ref_total[n] > 0:
            sum_prec += matched[n] / hyp_total[n]
            sum_rec += matched[n] / ref_total[n]
            effective += 1
    if effective == 0:
        return 0.0
    prec, rec = sum_prec / effective, sum_rec / effective
    if prec + rec == 0.0:
        return 0.0
    b2 = beta ** 2
    return 100.0 * (1 + b2) * prec * rec / (b2 * prec + rec)


# --------------------------------------------------------------------------
# Exact match
# --------------------------------------------------------------------------

def exact_match(hypotheses: list[str], references: list[str]) -> float:
    """Fraction in [0, 1] of hypotheses identical to their reference.

    Outer whitespace is ignored; everything else (case, inner spaces) counts.
    """
    _check_corpus(hypotheses, references)
    hits = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references))
    return hits / len(hypotheses)
