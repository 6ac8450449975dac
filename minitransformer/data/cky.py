"""The grammar's most probable tree: Viterbi CKY on a PCFG (§6.3 in miniature: a reference for a parser).

The treebank of ``data/pcfg.py`` is sampled from a known grammar, so for any
sentence we can find the single most probable tree the grammar gives it,

    t* = argmax_t P(t | sentence) = argmax_t P(t),   t ranging over the sentence's parses,

and score it like any parser. No parser can get the *whole tree* right more
often on average (the gold tree is a draw from P(t | sentence)); what it misses
is the grammar's own ambiguity. Bracket F1 gives credit bracket by bracket,
though, and for that score the most probable tree is not the best bet: the
parse that keeps the brackets most likely to be right (``data/posterior.py``,
max expected F1) scores a little higher on average. A trained parser is read
against the better of the two (lesson 15).

CKY (Cocke, Kasami, Younger) fills a chart of spans, shortest first. The cell
for words i..k-1 holds, for each symbol A, the best log-probability of A
spanning exactly those words and how it was built:

    best[i, k, A] = max over rules A -> B C and split points j of
                    log P(A -> B C) + best[i, j, B] + best[j, k, C]

That needs every rule to have two children, so ``binarize`` rewrites a rule
with more, ``VP -> VT NP PP`` (p), as ``VP -> VT @VP->VT_NP_PP:1`` (p) and
``@VP->VT_NP_PP:1 -> NP PP`` (1): the same trees with the same probabilities,
through a helper symbol marked "@" that ``unbinarize`` splices back out. Unary
rules (``NP -> NNP``) rewrite to a tag only (pcfg checks that), so they are
applied once, in the one-word cells. The cost is O(n^3 * rules) for n words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from .pcfg import GRAMMAR, Grammar
from .trees import Tree

__all__ = ["ViterbiParser", "Parse", "BinaryGrammar", "binarize", "unbinarize", "check_words"]

HELPER = "@"   # helper symbols made by binarize start with this


class Parse(NamedTuple):
    """The best tree of a sentence and its log-probability under the grammar."""

    tree: Tree
    log_prob: float


class BinaryGrammar(NamedTuple):
    """A grammar with at most two children per rule, indexed for CKY.

    binary: left child B -> list of (right child C, parent A, log p).
    unary: tag T -> list of (parent A, log p) for rules A -> T.
    lexical: word -> list of (tag, log p).
    """

    start: str
    binary: dict[str, list[tuple[str, str, float]]]
    unary: dict[str, list[tuple[str, float]]]
    lexical: dict[str, list[tuple[str, float]]]


def binarize(grammar: Grammar) -> BinaryGrammar:
    """Split every rule with k > 2 children into k - 1 binary rules through helper symbols."""
    binary: dict[str, list[tuple[str, str, float]]] = {}
    unary: dict[str, list[tuple[str, float]]] = {}
    for rule in grammar.rules:
        log_p = math.log(rule.prob)
        if len(rule.rhs) == 1:
            unary.setdefault(rule.rhs[0], []).append((rule.lhs, log_p))
            continue
        parent, rhs = rule.lhs, rule.rhs
        for pos in range(1, len(rhs) - 1):
            # parent -> rhs[pos-1] helper, the helper standing for rhs[pos:].
            helper = f"{HELPER}{rule.lhs}->{'_'.join(rule.rhs)}:{pos}"
            binary.setdefault(rhs[pos - 1], []).append((helper, parent, log_p))
            parent, log_p = helper, 0.0              # the helper's one rule has probability 1
        binary.setdefault(rhs[-2], []).append((rhs[-1], parent, log_p))
    lexical: dict[str, list[tuple[str, float]]] = {}
    for tag, words in grammar.lexicon.items():
        for word in words:
            lexical.setdefault(word, []).append((tag, -math.log(len(words))))
    return BinaryGrammar(grammar.start, binary, unary, lexical)


def unbinarize(tree: Tree | str) -> Tree | str:
    """Splice every helper node (label starting with "@") into its parent."""
    if isinstance(tree, str):
        return tree
    children: list[Tree | str] = []
    for child in tree.children:
        child = unbinarize(child)
        if isinstance(child, Tree) and child.label.startswith(HELPER):
            children.extend(child.children)
        else:
            children.append(child)
    return Tree(tree.label, tuple(children))


class ViterbiParser:
    """``ViterbiParser(grammar).parse(words)``: the most probable tree, by CKY.

    Ties between trees of equal probability go to the first one found (the
    split point further left, then the earlier rule).
    """

    def __init__(self, grammar: Grammar = GRAMMAR):
        self.grammar = grammar
        self.rules = binarize(grammar)

    def parse(self, words: Sequence[str]) -> Parse | None:
        """The best parse of ``words``, or None if the grammar has none.

        A word the lexicon lacks is a ValueError naming it.
        """
        check_words(words, self.rules, "parse")
        n = len(words)
        # chart[i][k]: symbol -> (best log-probability, back-pointer) for words i..k-1.
        chart = [[{} for _ in range(n + 1)] for _ in range(n)]

        # Spans of one word: its tags, then the unary rules over a tag (NP -> NNP).
        for i, word in enumerate(words):
            cell = chart[i][i + 1]
            for tag, log_p in self.rules.lexical[word]:
                cell[tag] = (log_p, word)
            for tag in list(cell):
                for parent, log_p in self.rules.unary.get(tag, ()):
                    score = log_p + cell[tag][0]
                    if parent not in cell or score > cell[parent][0]:
                        cell[parent] = (score, (tag,))

        # Longer spans, shortest first: A -> B C with B over i..j-1 and C over j..k-1.
        for length in range(2, n + 1):
            for i in range(n - length + 1):
                k = i + length
                cell = chart[i][k]
                for j in range(i + 1, k):
                    left, right = chart[i][j], chart[j][k]
                    for b, (b_score, _) in left.items():
                        for c, parent, log_p in self.rules.binary.get(b, ()):
                            if c in right:
                                score = log_p + b_score + right[c][0]
                                if parent not in cell or score > cell[parent][0]:
                                    cell[parent] = (score, (j, b, c))

        if self.rules.start not in chart[0][n]:
            return None
        best = chart[0][n][self.rules.start][0]
        return Parse(unbinarize(_follow(chart, 0, n, self.rules.start)), best)


def check_words(words: Sequence[str], rules: BinaryGrammar, caller: str) -> None:
    """A list of at least one word, every one in the lexicon; else one error naming the problem."""
    if isinstance(words, str):
        raise TypeError(f"{caller} expects a list of words, got a str (split it first)")
    unknown = [w for w in words if w not in rules.lexical]
    if unknown:
        raise ValueError(f"word {unknown[0]!r} is not in the grammar's lexicon")
    if len(words) == 0:
        raise ValueError(f"{caller} needs at least one word")


def _follow(chart, i: int, k: int, symbol: str) -> Tree:
    """Rebuild the tree of ``symbol`` over words i..k-1 from the back-pointers."""
    back = chart[i][k][symbol][1]
    if isinstance(back, str):                        # a tag over its word
        return Tree(symbol, (back,))
    if len(back) == 1:                               # a unary rule over a tag
        return Tree(symbol, (_follow(chart, i, k, back[0]),))
    j, b, c = back
    return Tree(symbol, (_follow(chart, i, j, b), _follow(chart, j, k, c)))
