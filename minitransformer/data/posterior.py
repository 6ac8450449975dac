"""The parse that maximises expected bracket F1: inside-outside posteriors over a PCFG (§6.3).

``cky.ViterbiParser`` finds the **most probable tree** of a sentence. That is
the best guess if a parse is scored right or wrong as a whole, but bracket F1
(evalb) gives credit bracket by bracket, and the most probable tree is not the
tree with the most brackets likely to be right. When a sentence has three
readings of probability 0.4, 0.3 and 0.3 and the last two share a bracket the
first lacks, that bracket is right with probability 0.6, yet the most probable
tree leaves it out. So the grammar gives two references a trained parser can
be held to, and this module is the second:

1. **Posteriors.** For every labelled bracket b = (label, i, k) over words
   i..k-1, the probability that the gold tree has it, given the sentence:

       P(b | w) = sum over symbols A scored as label of  inside(A, i, k) * outside(A, i, k) / Z

   where inside(A, i, k) = P(A =>* w_i..w_{k-1}) sums every way A can yield
   those words, outside(A, i, k) sums every way S can yield the rest of the
   sentence around an A over i..k-1, and Z = inside(S, 0, n) = P(w), the sum of
   P(t) over all the sentence's trees (Lari and Young's inside-outside
   algorithm, on the binarized grammar of ``cky.binarize``). The gold trees of
   ``data/pcfg.py`` are draws from P(t | w), so these are the exact odds.

2. **Decoding, ``parse(words, threshold)``.** The set of non-crossing brackets
   that maximises the sum of (P(b | w) - threshold): a CKY-like pass over spans,
   each span keeping the labels whose posterior beats the threshold. At
   ``threshold = 0.5`` this is simply every bracket with posterior above one
   half (two such brackets can never cross: if they did, no tree would hold
   both, and their posteriors would sum to at most 1).

3. **Max expected F1, ``parse_corpus``.** evalb's F1 is a ratio of corpus
   counts, 2 * matched / (test brackets + gold brackets). Replace each count by
   its expectation under the grammar: E[matched] is the sum of the chosen
   brackets' posteriors and E[gold brackets] the sum of every bracket's
   posterior. The ratio is largest when each sentence keeps the brackets with
   posterior above F / 2, F being that largest ratio itself; Dinkelbach's
   iteration finds it (start at threshold 0.5, decode, set the threshold to
   half the ratio reached, repeat until the brackets stop changing; the ratio
   rises at every step). This is the decoding the lessons and the parse
   reports call "max expected F1"; it maximises the ratio of expectations,
   which over a test set of many sentences is what evalb's F1 averages to.

The cost is that of CKY, twice (inside, then outside): O(n^3 * rules) for n
words. Probabilities are kept as plain floats: every tree of an n-word
sentence has exactly n words, so each word's lexical probabilities are scaled
by the same factor in every tree (``_scale``), which cancels in every
posterior and keeps the chart far from float64's underflow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from .cky import HELPER, binarize, check_words
from .pcfg import GRAMMAR, Grammar
from .trees import Tree, evalb_label

__all__ = ["Posteriors", "PosteriorParser", "CorpusParse"]


class Posteriors(NamedTuple):
    """What the grammar knows about one sentence, summed over all its trees.

    brackets: (label, i, k) -> P(the gold tree has that bracket | words), labels as evalb scores them.
    tags: per word, tag -> P(that tag | words).
    log_prob: log P(words), the log of the sum of P(t) over the sentence's trees.
    """

    words: tuple[str, ...]
    brackets: dict[tuple[str, int, int], float]
    tags: list[dict[str, float]]
    log_prob: float

    def expected_brackets(self) -> float:
        """E[number of brackets of the gold tree] = the sum of all bracket posteriors."""
        return sum(self.brackets.values())


class CorpusParse(NamedTuple):
    """``PosteriorParser.parse_corpus``: one tree per sentence, the threshold chosen and the expected F1 it reached."""

    trees: list[Tree]
    threshold: float
    expected_f1: float            # 100 * 2 * E[matched] / (test brackets + E[gold brackets])


class PosteriorParser:
    """``PosteriorParser(grammar).posteriors(words)``, ``.parse(words)``, ``.parse_corpus(sentences)``."""

    def __init__(self, grammar: Grammar = GRAMMAR):
        self.grammar = grammar
        self.rules = binarize(grammar)

    # -- inside and outside ------------------------------------------------------------------

    def posteriors(self, words: Sequence[str]) -> Posteriors | None:
        """Bracket and tag posteriors of ``words``, or None if the grammar has no tree for them."""
        check_words(words, self.rules, "posteriors")
        n = len(words)
        scale = [_scale(self.rules.lexical[w]) for w in words]
        inside = self._inside(words, scale)
        z = inside[0][n].get(self.rules.start, 0.0)
        if z == 0.0:
            return None
        outside = self._outside(inside, n)
        brackets: dict[tuple[str, int, int], float] = {}
        tags: list[dict[str, float]] = [{} for _ in range(n)]
        for i in range(n):
            for k in range(i + 1, n + 1):
                for symbol, out in outside[i][k].items():
                    if symbol.startswith(HELPER) or out == 0.0:
                        continue
                    p = inside[i][k][symbol] * out / z
                    if symbol in self.grammar.lexicon:
                        tags[i][symbol] = tags[i].get(symbol, 0.0) + p
                    else:
                        key = (evalb_label(symbol), i, k)
                        brackets[key] = brackets.get(key, 0.0) + p
        log_prob = math.log(z) - sum(math.log(s) for s in scale)
        return Posteriors(tuple(words), brackets, tags, log_prob)

    def _inside(self, words, scale) -> list[list[dict[str, float]]]:
        """inside[i][k][A] = P(A =>* words[i:k]), each word's lexical probabilities times scale[i]."""
        n = len(words)
        inside = [[{} for _ in range(n + 1)] for _ in range(n)]
        for i, word in enumerate(words):
            cell = inside[i][i + 1]
            for tag, log_p in self.rules.lexical[word]:
                cell[tag] = cell.get(tag, 0.0) + math.exp(log_p) * scale[i]
            for tag in list(cell):                       # unary rules rewrite to a tag only (pcfg checks it)
                for parent, log_p in self.rules.unary.get(tag, ()):
                    cell[parent] = cell.get(parent, 0.0) + math.exp(log_p) * cell[tag]
        for length in range(2, n + 1):
            for i in range(n - length + 1):
                k = i + length
                cell = inside[i][k]
                for j in range(i + 1, k):
                    left, right = inside[i][j], inside[j][k]
                    for b, b_in in left.items():
                        for c, parent, log_p in self.rules.binary.get(b, ()):
                            if c in right:
                                cell[parent] = cell.get(parent, 0.0) + math.exp(log_p) * b_in * right[c]
        return inside

    def _outside(self, inside, n: int) -> list[list[dict[str, float]]]:
        """outside[i][k][A] = the probability of S yielding words[:i], an A, then words[k:] (same scaling)."""
        outside = [[{} for _ in range(n + 1)] for _ in range(n)]
        outside[0][n][self.rules.start] = 1.0
        for length in range(n, 1, -1):                   # a parent's outside is complete before its children's
            for i in range(n - length + 1):
                k = i + length
                parents = outside[i][k]
                if not parents:
                    continue
                for j in range(i + 1, k):
                    left, right = inside[i][j], inside[j][k]
                    left_out, right_out = outside[i][j], outside[j][k]
                    for b, b_in in left.items():
                        for c, parent, log_p in self.rules.binary.get(b, ()):
                            if c in right and parent in parents:
                                p = math.exp(log_p) * parents[parent]
                                left_out[b] = left_out.get(b, 0.0) + p * right[c]
                                right_out[c] = right_out.get(c, 0.0) + p * b_in
        for i in range(n):                               # one-word cells: the unary rules down to the tags
            cell_in, cell_out = inside[i][i + 1], outside[i][i + 1]
            for tag in [s for s in cell_in if s in self.grammar.lexicon]:
                for parent, log_p in self.rules.unary.get(tag, ()):
                    if parent in cell_out:
                        cell_out[tag] = cell_out.get(tag, 0.0) + math.exp(log_p) * cell_out[parent]
        return outside

    # -- decoding --------------------------------------------------------------------------------

    def parse(self, words: Sequence[str], threshold: float = 0.5) -> Tree | None:
        """The tree of the non-crossing brackets that maximise sum(posterior - threshold), or None if the
        grammar has no tree for ``words``. Each word gets its most probable tag."""
        post = self.posteriors(words)
        return None if post is None else decode(post, threshold)

    def parse_corpus(self, sentences: Sequence[Sequence[str]], max_rounds: int = 20) -> CorpusParse:
        """Max expected F1 over the corpus (module docstring, 3): one threshold for every sentence, found
        by Dinkelbach's iteration from 0.5. A sentence the grammar cannot parse is a ValueError naming it."""
        posts = []
        for s, words in enumerate(sentences):
            post = self.posteriors(words)
            if post is None:
                raise ValueError(f"sentence {s + 1} has no tree under the grammar: {' '.join(words)!r}")
            posts.append(post)
        if not posts:
            raise ValueError("parse_corpus needs at least one sentence")
        return max_expected_f1(posts, max_rounds)


def _scale(entries) -> float:
    """1 / the word's largest lexical probability: the same factor in every tree, so it cancels."""
    return math.exp(-max(log_p for _, log_p in entries))


def chosen_brackets(post: Posteriors, threshold: float) -> list[tuple[str, int, int]]:
    """The set of non-crossing brackets with the largest sum of (posterior - threshold).

    Brackets over the same words with different labels do not cross: a tree can hold both (a unary chain,
    (S (NP ...))), so a span keeps every label whose posterior beats the threshold. (This grammar never
    puts two labels over one span, so both beat it only when each is close to the threshold.)"""
    n = len(post.words)
    gain: dict[tuple[int, int], float] = {}
    labels: dict[tuple[int, int], list[str]] = {}
    for (label, i, k), p in sorted(post.brackets.items(), key=lambda item: -item[1]):
        if p > threshold:
            gain[(i, k)] = gain.get((i, k), 0.0) + p - threshold
            labels.setdefault((i, k), []).append(label)          # most probable first
    # best[i][k]: the largest total gain of non-crossing brackets inside words i..k-1 (span included);
    # split[i][k]: where the brackets below the span divide it (every such set leaves a split point free).
    best = [[0.0] * (n + 1) for _ in range(n + 1)]
    split = [[0] * (n + 1) for _ in range(n + 1)]
    for length in range(1, n + 1):
        for i in range(n - length + 1):
            k = i + length
            below = 0.0
            if length > 1:
                j = max(range(i + 1, k), key=lambda j: best[i][j] + best[j][k])   # the first best split
                below, split[i][k] = best[i][j] + best[j][k], j
            best[i][k] = gain.get((i, k), 0.0) + below
    chosen: list[tuple[str, int, int]] = []

    def collect(i: int, k: int) -> None:
        chosen.extend((label, i, k) for label in labels.get((i, k), ()))
        if k - i > 1:
            collect(i, split[i][k])
            collect(split[i][k], k)

    collect(0, n)
    return chosen


def decode(post: Posteriors, threshold: float = 0.5) -> Tree:
    """The tree of ``chosen_brackets`` at ``threshold``."""
    return tree_of(post, chosen_brackets(post, threshold))


def tree_of(post: Posteriors, chosen: Sequence[tuple[str, int, int]]) -> Tree:
    """The tree of non-crossing brackets (outermost first where several share a span), each word under its
    most probable tag. The whole sentence's bracket must be among them (its posterior is 1, so any threshold
    below 1 keeps it)."""
    order = {b: n for n, b in enumerate(chosen)}
    chosen = sorted(chosen, key=lambda b: (b[1], -b[2], order[b]))   # a bracket before the brackets inside it
    if not chosen or chosen[0][1:] != (0, len(post.words)):
        raise ValueError("the brackets leave out the whole sentence's; a threshold must be below 1")
    leaves = [Tree(max(tags, key=tags.get), (word,)) for word, tags in zip(post.words, post.tags)]

    def build(at: int) -> tuple[Tree, int]:
        """The tree of chosen[at], and the index of the first bracket after the ones inside it."""
        label, i, k = chosen[at]
        children: list[Tree] = []
        position, nxt = i, at + 1
        while position < k:
            if nxt < len(chosen) and chosen[nxt][1] == position and chosen[nxt][2] <= k:
                position = chosen[nxt][2]
                child, nxt = build(nxt)
                children.append(child)
            else:
                children.append(leaves[position])
                position += 1
        return Tree(label, tuple(children)), nxt

    return build(0)[0]


def expected_counts(post: Posteriors, chosen: Sequence[tuple[str, int, int]]) -> tuple[float, int, float]:
    """(E[matched], test brackets, E[gold brackets]) of one sentence's chosen brackets."""
    return sum(post.brackets[b] for b in chosen), len(chosen), post.expected_brackets()


def max_expected_f1(posts: Sequence[Posteriors], max_rounds: int = 50) -> CorpusParse:
    """Dinkelbach's iteration on F(B) = 2 * E[matched] / (test brackets + E[gold brackets]) (module
    docstring, 3). Any start gives a first set of brackets (threshold 0.5); then the threshold moves to half
    the ratio F reached and every sentence is decoded again. F rises at every round until decoding at F / 2
    reaches F itself, which holds only at the optimum: no set of brackets makes sum(2 p - F) - F E[gold]
    positive."""

    def decode_all(threshold):
        chosen = [chosen_brackets(p, threshold) for p in posts]
        matched = test = gold = 0.0
        for p, c in zip(posts, chosen):
            m, t, g = expected_counts(p, c)
            matched, test, gold = matched + m, test + t, gold + g
        return chosen, 2 * matched / (test + gold)

    chosen, ratio = decode_all(0.5)
    for _ in range(max_rounds):
        threshold = ratio / 2
        chosen, reached = decode_all(threshold)
        if reached <= ratio * (1 + 1e-12):           # no better set at F / 2: F is the optimum
            break
        ratio = reached
    else:
        raise RuntimeError(f"max_expected_f1: no convergence in {max_rounds} rounds")
    return CorpusParse([tree_of(p, c) for p, c in zip(posts, chosen)], threshold, 100 * ratio)
