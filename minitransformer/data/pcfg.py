"""A small probabilistic grammar of English-like sentences, and a treebank sampled from it.

The paper's §6.3 trains on the Penn Treebank, which cannot ship here. This
module builds the same experiment on a treebank it generates: a hand-written
probabilistic context-free grammar (PCFG) whose gold trees are known exactly,
so a trained parser can be compared with what the grammar itself would answer:
its most probable tree (``data/cky.py``) and the parse that maximises expected
bracket F1 (``data/posterior.py``).

The grammar
-----------
25 rules over the phrase labels S, NP, VP, PP, SBAR, WHNP, with relative
clauses (subject and object relatives), complement clauses, coordination of
S, NP and VP, and prepositional phrases that can attach to a noun or to a verb.
Verbs are past tense (so no agreement is needed), and split by what follows
them: VT takes an object, VI none, VS a "that" clause. The tag names are the
Penn Treebank's (DT, JJ, NN, NNS, NNP, IN, CC, WDT, WP) except these verb tags
and COMP, the complementizer "that" (the Treebank tags all verbs VBD and
"that" IN); a PCFG picks a word knowing only its tag, so a tag has to say which
frame a verb takes. Every tag picks its words uniformly.

Three symbols carry a *function tag* that evalb cuts before it compares
labels (``trees.evalb_label``): SBAR-REL (a relative clause, scored as SBAR),
S-GAP and VP-GAP (the clause of an object relative, "that Alice saw", whose VP
lacks its object; scored as S and VP). They are separate symbols because they
expand differently, not because the scorer should tell them apart.

Where the ambiguity is
----------------------
* PP attachment: "Alice saw the dog with the telescope" is VP -> VT NP PP or
  VP -> VT NP with NP -> NP PP. The grammar is unlexicalised, so the words
  never settle it: the more probable rule always wins the most probable tree
  and the other reading is always lost (that is the references' gap to 100).
* The scope of coordination and of relative clauses ("the man with the dog
  that barked": who barked?).
* Words with more than one tag: "that" (DT, COMP, WDT), "saw" (NN, VT),
  "left" (JJ, VI), "fish" (NN, NNS), and "knew", "heard", "felt", "noticed",
  "found" (VT, VS).

Lengths
-------
A sentence is sampled top-down from S and rejected if it runs past
``MAX_WORDS`` words (sampling stops as soon as it does, so runaway recursion
costs nothing). The cap is on the sentence length only, not on tree depth, on
purpose: the length is a function of the sentence, so conditioning on it leaves
P(tree | sentence) exactly as the grammar says, and the Viterbi parse is still
the most probable tree for every sentence of the treebank.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy

from .trees import Tree, evalb_label, linearize, target_tokens
from .vocab import Vocab

__all__ = [
    "Rule", "Grammar", "GRAMMAR", "MAX_WORDS", "SIZES", "min_words", "sample_tree", "sample_treebank",
    "tree_log_prob", "ParseExample", "ParseSplits", "parse_splits", "parse_vocab",
]

MAX_WORDS = 20   # the longest sentence the sampler keeps (the documented length cap)


class Rule(NamedTuple):
    """``lhs -> rhs`` with probability ``prob``: P(rhs | lhs), summing to 1 over each lhs."""

    lhs: str
    rhs: tuple[str, ...]
    prob: float


class Grammar(NamedTuple):
    """A PCFG: phrase rules, and each tag's words (chosen uniformly)."""

    start: str
    rules: tuple[Rule, ...]
    lexicon: dict[str, tuple[str, ...]]

    @property
    def phrase_labels(self) -> list[str]:
        """The scored labels (function tags cut), sorted: what the target's brackets carry."""
        return sorted({evalb_label(rule.lhs) for rule in self.rules})

    @property
    def words(self) -> list[str]:
        """Every word of the lexicon, once each, sorted."""
        return sorted({w for words in self.lexicon.values() for w in words})

    def tags_of(self, word: str) -> list[str]:
        """The tags that can produce ``word`` (more than one for an ambiguous word)."""
        return [tag for tag, words in self.lexicon.items() if word in words]


def _rules(text: str) -> tuple[Rule, ...]:
    rules = []
    for line in text.strip().splitlines():
        lhs, rest = line.split("->")
        rhs, prob = rest.rsplit(" ", 1)
        rules.append(Rule(lhs.strip(), tuple(rhs.split()), float(prob)))
    return tuple(rules)


# Each block sums to 1. The numbers set the shape of the treebank: the recursive
# rules (S -> S CC S, NP -> NP ..., VP -> VP CC VP, VP -> VS SBAR, and the relative
# clauses) keep it subcritical: a sentence has about 13 words on average before the
# cap and about 8.5 after it (lessons/experiments/parse_baselines.py reports the
# distribution, tests/test_pcfg.py checks it).
_RULES = _rules("""
S -> NP VP 0.92
S -> S CC S 0.08
NP -> DT NN 0.34
NP -> DT JJ NN 0.12
NP -> NNP 0.14
NP -> NNS 0.07
NP -> JJ NNS 0.05
NP -> NP PP 0.15
NP -> NP SBAR-REL 0.08
NP -> NP CC NP 0.05
VP -> VT NP 0.38
VP -> VT NP PP 0.14
VP -> VI 0.15
VP -> VI PP 0.12
VP -> VS SBAR 0.12
VP -> VP CC VP 0.09
PP -> IN NP 1.0
SBAR -> COMP S 1.0
SBAR-REL -> WHNP VP 0.65
SBAR-REL -> WHNP S-GAP 0.35
S-GAP -> NP VP-GAP 1.0
VP-GAP -> VT 0.75
VP-GAP -> VT PP 0.25
WHNP -> WDT 0.7
WHNP -> WP 0.3
""")

_LEXICON = {
    "DT": "the every this that no one",
    "JJ": "big small old young happy sad red green tall quiet loud clever lazy brave tired "
          "hungry angry gentle strange little busy proud famous left kind",
    "NN": "dog cat man woman child teacher doctor farmer student king queen bird horse boy girl "
          "friend neighbour artist baker sailor park garden house river street table window box "
          "book letter hat ball car boat train telescope cake apple song picture saw fish key door hill",
    "NNS": "dogs cats children birds horses students teachers farmers apples books letters songs "
           "flowers stars cakes friends boats fish sheep keys",
    "NNP": "Alice Bob Carol Dave Emma Frank Grace Henry Iris Jack Kate Leo Mary Nina Oscar",
    "VT": "saw chased liked found watched helped visited painted followed met heard knew loved "
          "carried kicked pushed bought sold built opened wrote read cooked ate fed caught called "
          "pulled thanked felt noticed",
    "VI": "slept laughed ran barked sang smiled cried danced left arrived waited swam fell jumped shouted",
    "VS": "said thought knew believed heard felt claimed noticed found hoped",
    "IN": "with in on near under behind from by about beside",
    "CC": "and or",
    "COMP": "that",
    "WDT": "that which",
    "WP": "who",
}

GRAMMAR = Grammar("S", _RULES, {tag: tuple(words.split()) for tag, words in _LEXICON.items()})


def _check_grammar(grammar: Grammar) -> None:
    """The properties the sampler and CKY rely on; a broken grammar fails at import."""
    phrases = {rule.lhs for rule in grammar.rules}
    tags = set(grammar.lexicon)
    if phrases & tags:
        raise ValueError(f"symbols used both as phrase and as tag: {sorted(phrases & tags)}")
    for lhs in phrases:
        total = sum(rule.prob for rule in grammar.rules if rule.lhs == lhs)
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"the rules of {lhs} sum to {total}, not 1")
    for rule in grammar.rules:
        unknown = [s for s in rule.rhs if s not in phrases | tags]
        if unknown:
            raise ValueError(f"rule {rule.lhs} -> {' '.join(rule.rhs)} uses undefined symbol(s) {unknown}")
        if len(rule.rhs) == 1 and rule.rhs[0] not in tags:
            # CKY applies unary rules only over one word (data/cky.py).
            raise ValueError(f"unary rule {rule.lhs} -> {rule.rhs[0]} must rewrite to a tag")
    if grammar.start not in phrases:
        raise ValueError(f"start symbol {grammar.start!r} has no rules")


_check_grammar(GRAMMAR)


# --------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------

class _TooLong(Exception):
    """Raised inside the sampler when a sentence passes its word limit."""


def min_words(grammar: Grammar = GRAMMAR) -> int:
    """The length of the grammar's shortest sentence (2 for GRAMMAR: "Alice slept")."""
    shortest = {tag: 1 for tag in grammar.lexicon}
    changed = True
    while changed:                      # relax until no symbol's shortest yield shrinks
        changed = False
        for rule in grammar.rules:
            if all(s in shortest for s in rule.rhs):
                n = sum(shortest[s] for s in rule.rhs)
                if n < shortest.get(rule.lhs, math.inf):
                    shortest[rule.lhs], changed = n, True
    return shortest[grammar.start]


def sample_tree(rng: numpy.random.Generator, max_words: int = MAX_WORDS, grammar: Grammar = GRAMMAR) -> Tree:
    """One tree from the grammar, top-down from its start symbol.

    A sentence longer than ``max_words`` is thrown away and sampled again
    (rejection), so the trees follow the grammar's distribution conditioned on
    length <= max_words.
    """
    return _Sampler(grammar, rng, max_words).tree()


class _Sampler:
    """The grammar's rules grouped by left-hand side, with cumulative
    probabilities, built once for many samples."""

    def __init__(self, grammar: Grammar, rng: numpy.random.Generator, max_words: int):
        if not isinstance(rng, numpy.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator (numpy.random.default_rng(seed)), "
                            f"got {type(rng).__name__}")
        if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 1:
            raise ValueError(f"max_words must be an integer >= 1, got {max_words!r}")
        shortest = min_words(grammar)
        if max_words < shortest:
            # Rejection sampling would loop for ever: no sentence is that short.
            raise ValueError(f"max_words={max_words} is below the grammar's shortest sentence ({shortest} words)")
        self.grammar, self.rng, self.max_words = grammar, rng, max_words
        self.by_lhs: dict[str, list[Rule]] = {}
        for rule in grammar.rules:
            self.by_lhs.setdefault(rule.lhs, []).append(rule)
        self.cumulative = {lhs: list(itertools.accumulate(r.prob for r in rules))
                           for lhs, rules in self.by_lhs.items()}

    def tree(self) -> Tree:
        while True:
            self.words = 0
            try:
                return self._expand(self.grammar.start)
            except _TooLong:
                continue                 # rejected: too long; sample afresh

    def _expand(self, symbol: str) -> Tree:
        if symbol in self.grammar.lexicon:
            self.words += 1
            if self.words > self.max_words:
                raise _TooLong           # stop at once: the rest of this tree is wasted work
            words = self.grammar.lexicon[symbol]
            return Tree(symbol, (words[int(self.rng.integers(len(words)))],))
        # Choose a rule by inverting the cumulative distribution at a uniform draw.
        cumulative, rules = self.cumulative[symbol], self.by_lhs[symbol]
        k = bisect.bisect_right(cumulative, self.rng.random() * cumulative[-1])
        rule = rules[min(k, len(rules) - 1)]
        return Tree(symbol, tuple(self._expand(s) for s in rule.rhs))


def sample_treebank(n: int, rng: numpy.random.Generator, max_words: int = MAX_WORDS,
                    exclude: Iterable[str] = (), grammar: Grammar = GRAMMAR) -> list[Tree]:
    """n trees over n *different* sentences, none of them in ``exclude`` (sentence strings).

    A sentence sampled again is skipped (its first tree is kept), so every
    sentence appears once; this is what makes train, valid and test disjoint.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    sampler = _Sampler(grammar, rng, max_words)
    seen = set(exclude)
    trees: list[Tree] = []
    tries = 0
    while len(trees) < n:
        tries += 1
        if tries > 20 * n + 1000:
            raise ValueError(f"could not find {n} distinct sentences of <= {max_words} words "
                             f"(found {len(trees)} in {tries - 1} samples): ask for fewer, or longer ones")
        tree = sampler.tree()
        sentence = " ".join(tree.words())
        if sentence not in seen:
            seen.add(sentence)
            trees.append(tree)
    return trees


def tree_log_prob(tree: Tree, grammar: Grammar = GRAMMAR) -> float:
    """log P(tree) under the grammar: the sum of its rules' log-probabilities.

    A rule the grammar lacks is a ValueError naming it (for instance a tree
    read back from a model, whose tags are all XX).
    """
    if tree.is_preterminal():
        words = grammar.lexicon.get(tree.label)
        if words is None or tree.children[0] not in words:
            raise ValueError(f"the grammar has no tag {tree.label!r} for word {tree.children[0]!r}")
        return -math.log(len(words))
    rhs = tuple(child.label if isinstance(child, Tree) else child for child in tree.children)
    probs = [r.prob for r in grammar.rules if r.lhs == tree.label and r.rhs == rhs]
    if not probs:
        raise ValueError(f"the grammar has no rule {tree.label} -> {' '.join(rhs)}")
    return math.log(probs[0]) + sum(tree_log_prob(child, grammar) for child in tree.children)


# --------------------------------------------------------------------------
# Train / valid / test, as the model sees them
# --------------------------------------------------------------------------

# The training-set sizes of Table 4 in miniature: "WSJ only" (about 40k trees in
# the paper) scaled to a few thousand, and the semi-supervised set 10x larger.
SIZES = {"small": 8_000, "large": 80_000}


class ParseExample(NamedTuple):
    """One sentence: the source tokens (its words), the target tokens (its
    linearized tree, ``trees.linearize``) and the gold tree itself."""

    words: list[str]
    target: list[str]
    tree: Tree


class ParseSplits(NamedTuple):
    train: list[ParseExample]
    valid: list[ParseExample]
    test: list[ParseExample]


def parse_splits(n_train: int, seed: int, n_valid: int = 500, n_test: int = 1_000,
                 max_words: int = MAX_WORDS) -> ParseSplits:
    """Train / valid / test over disjoint sentences, sampled from ``GRAMMAR`` with ``seed``.

    Test is drawn first, then valid, then train, from one random stream: for a
    given seed, test and valid are the same whatever ``n_train`` is, and a
    smaller training set is the start of a larger one (``SIZES["small"]``'s
    trees are the first 8,000 of ``SIZES["large"]``'s). No sentence is in two
    splits, nor twice in one.

    Source tokens are the words; target tokens are word-level too, split the
    way ``vocab.tokenize(" ".join(target), "space")`` splits them: "(NP", ")NP"
    and "XX" are single tokens.
    """
    for name, value in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    rng = numpy.random.default_rng(seed)
    test = sample_treebank(n_test, rng, max_words)
    seen = {" ".join(t.words()) for t in test}
    valid = sample_treebank(n_valid, rng, max_words, exclude=seen)
    seen |= {" ".join(t.words()) for t in valid}
    train = sample_treebank(n_train, rng, max_words, exclude=seen)

    def examples(trees: Sequence[Tree]) -> list[ParseExample]:
        return [ParseExample(t.words(), linearize(t), t) for t in trees]

    return ParseSplits(examples(train), examples(valid), examples(test))


def parse_vocab(grammar: Grammar = GRAMMAR) -> Vocab:
    """One vocabulary for both sides (the model ties its embeddings three ways, §3.4):
    the target's bracket tokens and XX, then every word of the lexicon."""
    return Vocab(target_tokens(grammar.phrase_labels) + grammar.words)
