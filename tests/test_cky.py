"""Viterbi CKY: a hand-worked example, binarization, and agreement with nltk's ViterbiParser.
Also the most probable tree's F1 and the floor of §6.3 in miniature on a test sample."""

import json
import math
import pathlib
from collections import Counter

import numpy
import pytest

from minitransformer.data import evalb, pcfg
from minitransformer.data.cky import ViterbiParser, binarize, unbinarize
from minitransformer.data.pcfg import GRAMMAR, Grammar, Rule
from minitransformer.data.trees import Tree, parse_tree, right_branching

NLTK = "nltk is not installed (pip install -r requirements-dev.txt): it is the reference CKY is checked against"


def _tiny(vp_flat: float, np_pp: float) -> Grammar:
    """PP attachment in six words: VP -> VT NP PP (vp_flat) against NP -> NP PP (np_pp)."""
    rules = [Rule("S", ("NP", "VP"), 1.0),
             Rule("NP", ("NNP",), 0.7 - np_pp), Rule("NP", ("NP", "PP"), np_pp), Rule("NP", ("DT", "NN"), 0.3),
             Rule("VP", ("VT", "NP"), 1.0 - vp_flat), Rule("VP", ("VT", "NP", "PP"), vp_flat),
             Rule("PP", ("IN", "NP"), 1.0)]
    lexicon = {"NNP": ("Alice", "Bob"), "VT": ("saw",), "IN": ("with",), "DT": ("the",), "NN": ("telescope",)}
    return Grammar("S", tuple(rules), lexicon)


SENTENCE = "Alice saw Bob with the telescope".split()
VP_ATTACH = "(S (NP (NNP Alice)) (VP (VT saw) (NP (NNP Bob)) (PP (IN with) (NP (DT the) (NN telescope)))))"
NP_ATTACH = "(S (NP (NNP Alice)) (VP (VT saw) (NP (NP (NNP Bob)) (PP (IN with) (NP (DT the) (NN telescope))))))"


def test_the_hand_worked_pp_attachment():
    # P(VP attachment) = S->NP VP . NP->NNP . 1/2 . VP->VT NP PP . NP->NNP . 1/2 . NP->DT NN
    #                  = 1 * .6 * .5 * .3 * .6 * .5 * .3 = 0.0081
    # P(NP attachment) = 1 * .6 * .5 * .7 * .1 * .6 * .5 * .3 = 0.00189
    grammar = _tiny(vp_flat=0.3, np_pp=0.1)
    best = ViterbiParser(grammar).parse(SENTENCE)
    assert str(best.tree) == VP_ATTACH
    assert best.log_prob == pytest.approx(math.log(0.0081), rel=1e-12)
    assert pcfg.tree_log_prob(parse_tree(NP_ATTACH), grammar) == pytest.approx(math.log(0.00189), rel=1e-12)
    # Make the verb's flat rule rare and the NP's PP common: the other reading wins.
    # VP: .5*.5*.05*.5*.5*.3 = 0.0009375;  NP: .5*.5*.95*.2*.5*.5*.3 = 0.0035625
    grammar = _tiny(vp_flat=0.05, np_pp=0.2)
    best = ViterbiParser(grammar).parse(SENTENCE)
    assert str(best.tree) == NP_ATTACH
    assert best.log_prob == pytest.approx(math.log(0.0035625), rel=1e-12)


def test_binarize_and_unbinarize():
    rules = binarize(GRAMMAR)
    helpers = {parent for entries in rules.binary.values() for _, parent, _ in entries if parent.startswith("@")}
    # One helper per rule with three children (five of them); a rule with four would need two.
    assert sorted(helpers) == ["@NP->DT_JJ_NN:1", "@NP->NP_CC_NP:1", "@S->S_CC_S:1", "@VP->VP_CC_VP:1",
                               "@VP->VT_NP_PP:1"]
    # Each helper has exactly one rule, of probability 1.
    for helper in helpers:
        own = [log_p for entries in rules.binary.values() for _, parent, log_p in entries if parent == helper]
        assert own == [0.0]
    assert sorted(rules.unary) == ["NNP", "NNS", "VI", "VT", "WDT", "WP"]
    assert rules.lexical["that"] == [("DT", -math.log(6)), ("COMP", 0.0), ("WDT", -math.log(2))]
    four = Grammar("S", (Rule("S", ("A", "B", "A", "B"), 1.0),), {"A": ("a",), "B": ("b",)})
    best = ViterbiParser(four).parse(["a", "b", "a", "b"])
    assert str(best.tree) == "(S (A a) (B b) (A a) (B b))" and best.log_prob == 0.0
    nested = Tree("S", (Tree("@x", (Tree("A", ("a",)), Tree("@y", ("b", "c")))), "d"))
    assert str(unbinarize(nested)) == "(S (A a) b c d)"


def test_every_parse_is_a_grammar_tree_at_least_as_probable_as_gold():
    parser = ViterbiParser()
    for gold in pcfg.sample_treebank(200, numpy.random.default_rng(21)):
        best = parser.parse(gold.words())
        assert best.tree.words() == gold.words()
        assert pcfg.tree_log_prob(best.tree) == pytest.approx(best.log_prob, rel=1e-12)
        assert best.log_prob >= pcfg.tree_log_prob(gold) - 1e-9


def test_bad_input():
    parser = ViterbiParser()
    with pytest.raises(ValueError, match="word 'Zed' is not in the grammar's lexicon"):
        parser.parse(["Alice", "saw", "Zed"])
    with pytest.raises(TypeError, match="got a str"):
        parser.parse("Alice slept")
    with pytest.raises(ValueError, match="at least one word"):
        parser.parse([])
    assert parser.parse(["the", "the"]) is None                   # words of the lexicon, no sentence


def _nltk_parser(grammar: Grammar):
    nltk = pytest.importorskip("nltk", reason=NLTK)
    from nltk.parse import ViterbiParser as NltkViterbi
    lines = [f"{r.lhs} -> {' '.join(r.rhs)} [{r.prob!r}]" for r in grammar.rules]
    for tag, words in grammar.lexicon.items():
        lines += [f"{tag} -> '{w}' [{1 / len(words)!r}]" for w in words]
    return NltkViterbi(nltk.PCFG.fromstring("\n".join(lines)))


def _from_nltk(tree) -> Tree | str:
    if isinstance(tree, str):
        return tree
    label = tree.label()
    return Tree(getattr(label, "symbol", lambda: label)(), tuple(_from_nltk(child) for child in tree))


def _agree_with_nltk(n: int, seed: int) -> int:
    """CKY and nltk's ViterbiParser (on the grammar as written, not binarized) give the same
    best probability; the same tree unless two trees tie for best. Returns the number of ties."""
    theirs, ours = _nltk_parser(GRAMMAR), ViterbiParser()
    ties = 0
    for gold in pcfg.sample_treebank(n, numpy.random.default_rng(seed)):
        words = gold.words()
        best = ours.parse(words)
        reference = next(theirs.parse(words))
        assert best.log_prob == pytest.approx(math.log(reference.prob()), rel=1e-12), " ".join(words)
        other = _from_nltk(reference)
        if other != best.tree:
            # A tie: nltk's tree is another tree with exactly the best probability.
            assert pcfg.tree_log_prob(other) == pytest.approx(best.log_prob, rel=1e-12)
            ties += 1
    return ties


def test_cky_agrees_with_nltk_viterbi():
    ties = _agree_with_nltk(30, seed=5)
    assert ties < 30 // 3


@pytest.mark.slow
def test_cky_agrees_with_nltk_viterbi_on_300_sentences():
    ties = _agree_with_nltk(300, seed=6)
    print(f"\nCKY vs nltk ViterbiParser: 300 sentences, same best probability on all, "
          f"{300 - ties} identical trees, {ties} ties (another tree of the same probability)")
    assert ties < 300 // 5


def test_the_most_probable_tree_and_the_floor():
    """The most probable tree (Viterbi) and a right-branching tree (floor) on seed 0's test set, as
    lessons/experiments/parse_baselines.json reports them. The test set does not depend on the
    training-set size, so it is rebuilt here in a second and the committed figures are checked."""
    record = json.loads((pathlib.Path(__file__).resolve().parents[1] / "lessons" / "experiments"
                         / "parse_baselines.json").read_text(encoding="utf-8"))
    assert record["provenance"][-1]["command"].startswith("python lessons/experiments/parse_baselines.py")
    assert record["sizes"]["small"] == pcfg.SIZES["small"] and record["sizes"]["large"] == pcfg.SIZES["large"]
    seed0 = next(s for s in record["seeds"] if s["seed"] == 0)
    sizes = record["sizes"]
    test = pcfg.parse_splits(0, seed=0, n_valid=sizes["valid"], n_test=sizes["test"]).test
    gold = [e.tree for e in test]
    parser = ViterbiParser()
    most_probable = evalb.bracket_f1(gold, [parser.parse(e.words).tree for e in test])
    floor = evalb.bracket_f1(gold, [right_branching(e.words) for e in test])
    assert 85.0 < most_probable.f1 < 100.0          # the grammar's ambiguity costs some brackets, not most
    assert 50.0 < most_probable.exact < 95.0
    assert 5.0 < floor.f1 < 40.0 and floor.exact < 5.0
    assert seed0["most_probable_tree"]["f1"] == round(most_probable.f1, 2)
    assert seed0["most_probable_tree"]["exact"] == round(most_probable.exact, 2)
    assert seed0["floor_right_branching"]["f1"] == round(floor.f1, 2)
    assert seed0["lengths"]["test"]["words"]["mean"] == round(sum(len(e.words) for e in test) / len(test), 2)
    # The floor's one label is the most frequent label below the root.
    below_root = Counter(label for tree in gold for (label, start, end) in evalb.brackets(tree).elements()
                         if (start, end) != (0, len(tree.words())))
    assert below_root.most_common(1)[0][0] == "NP"
