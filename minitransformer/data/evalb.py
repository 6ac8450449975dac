"""Bracket F1 of parse trees, as evalb scores them (§6.3, Table 4).

evalb (Sekine and Collins, 1997, https://nlp.cs.nyu.edu/evalb/) with its COLLINS.prm
settings is the scorer of the paper's parsing results. It lives beside the trees it
scores (``trees.py``), for the parse tasks (``parsing.py``) and lesson 15; it is
checked against two independent scorers in ``tests/test_bracket_f1.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .trees import Tree, evalb_label

__all__ = ["BracketScore", "bracket_f1", "brackets"]

# A tree is scored by its *brackets*: one (label, start, end) triple per
# constituent, the words start..end-1 under it. Preterminals (a tag over one
# word) are not brackets; the root is. What COLLINS.prm sets, and what of it
# applies to the grammar of data/pcfg.py:
#
#   LABELED 1                  a bracket matches only with the same label and span: applies.
#   function tags cut          "NP-SBJ" scores as NP (evalb always does this): applies,
#                              the grammar's SBAR-REL, S-GAP, VP-GAP score as SBAR, S, VP.
#   several equal brackets     matched as a multiset: n gold and m test copies of one
#                              (label, span) match min(n, m) times (evalb README §7.5):
#                              applies to repaired outputs such as (NP (NP XX )NP )NP.
#   DELETE_LABEL TOP, -NONE-   the treebank's outer bracket and traces: our trees have neither.
#   DELETE_LABEL , : `` '' .   punctuation: our sentences have none.
#   EQ_LABEL ADVP PRT          neither label is in the grammar.
#
# The last three do not apply, so a tree that carries one of those labels is
# refused (it would be scored differently from evalb), not silently scored.

_EVALB_DELETED = {"TOP", "-NONE-", ",", ":", "``", "''", ".", "ADVP", "PRT"}


def brackets(tree: Tree) -> Counter:
    """The tree's brackets as a multiset: Counter of (label, start, end).

    Words are numbered from 0; preterminals are left out and labels lose their
    function tags (``evalb_label``).

    >>> from minitransformer.data.trees import parse_tree
    >>> sorted(brackets(parse_tree("(S (NP (NNP Alice)) (VP (VT saw) (NP (DT the) (NN dog))))")))
    [('NP', 0, 1), ('NP', 2, 4), ('S', 0, 4), ('VP', 1, 4)]
    """
    found: Counter = Counter()

    def walk(node: Tree, start: int) -> int:   # returns the end of node's span
        if node.label in _EVALB_DELETED:
            raise ValueError(f"label {node.label!r} is one COLLINS.prm deletes or merges; this scorer "
                             f"covers the grammar's labels only (data/evalb.py): {tree}")
        if node.is_preterminal():
            return start + 1
        end = start
        for child in node.children:
            if isinstance(child, str):
                raise ValueError(f"word {child!r} sits directly under ({node.label} ...); "
                                 f"every word needs a preterminal: {tree}")
            end = walk(child, end)
        found[(evalb_label(node.label), start, end)] += 1
        return end

    walk(tree, 0)
    return found


@dataclass(frozen=True)
class BracketScore:
    """Corpus bracket scores, evalb-style; percentages in [0, 100].

    precision = matched / test_brackets, recall = matched / gold_brackets, both
    from counts summed over the corpus (evalb's "Bracketing Precision/Recall"),
    f1 their harmonic mean. exact: sentences whose brackets match exactly
    (evalb's "Complete match"). ill_formed: outputs that needed repair
    (``trees.read_linearized``), when the caller passes them.
    """

    precision: float
    recall: float
    f1: float
    exact: float
    ill_formed: float
    matched: int
    gold_brackets: int
    test_brackets: int
    sentences: int

    def __str__(self) -> str:
        return (f"bracket F1 = {self.f1:.2f} (P = {self.precision:.2f}, R = {self.recall:.2f}, "
                f"exact = {self.exact:.2f}%, ill-formed = {self.ill_formed:.2f}%, "
                f"{self.matched}/{self.test_brackets} test and {self.matched}/{self.gold_brackets} gold "
                f"brackets matched, {self.sentences} sentences)")


def bracket_f1(gold: Sequence[Tree], test: Sequence[Tree],
               ill_formed: Sequence[bool] | None = None) -> BracketScore:
    """Labelled bracket precision, recall and F1 of ``test`` trees against ``gold`` (evalb, COLLINS.prm).

    The two trees of a sentence must have the same words: evalb skips a
    sentence whose words differ and reports it as an error; here it is a
    ValueError naming the sentence, since a tree read back by
    ``read_linearized`` always has its sentence's words. ``ill_formed``, one
    flag per sentence (``ReadBack.ill_formed``), gives the ill-formed rate.
    """
    for label, seq in (("gold", gold), ("test", test)):
        if isinstance(seq, (str, Tree)):
            raise TypeError(f"{label} must be a list of trees, got a single {type(seq).__name__}")
    if len(gold) != len(test):
        raise ValueError(f"gold and test differ in length: {len(gold)} gold trees vs {len(test)} test trees")
    if len(gold) == 0:
        raise ValueError("empty corpus: need at least one gold/test pair")
    if ill_formed is not None and len(ill_formed) != len(gold):
        raise ValueError(f"ill_formed has {len(ill_formed)} flags for {len(gold)} sentences")

    matched = n_gold = n_test = exact = 0
    for i, (g, t) in enumerate(zip(gold, test)):
        for label, tree in (("gold", g), ("test", t)):
            if not isinstance(tree, Tree):
                raise TypeError(f"{label}[{i}] must be a Tree, got {type(tree).__name__}")
        if g.words() != t.words():
            raise ValueError(f"sentence {i}: the test tree's words differ from the gold tree's "
                             f"({len(t.words())} vs {len(g.words())} words): {' '.join(t.words())!r} "
                             f"vs {' '.join(g.words())!r}")
        g_brackets, t_brackets = brackets(g), brackets(t)
        common = sum((g_brackets & t_brackets).values())   # multiset intersection: min of the counts
        matched += common
        n_gold += sum(g_brackets.values())
        n_test += sum(t_brackets.values())
        exact += g_brackets == t_brackets

    precision = 100.0 * matched / n_test if n_test else 0.0
    recall = 100.0 * matched / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    bad = 100.0 * sum(bool(f) for f in ill_formed) / len(gold) if ill_formed is not None else 0.0
    return BracketScore(precision, recall, f1, 100.0 * exact / len(gold), bad,
                        matched, n_gold, n_test, len(gold))
