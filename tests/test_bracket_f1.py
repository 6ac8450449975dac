"""Bracket F1 (data.evalb.bracket_f1, evalb with COLLINS.prm): hand-worked examples, then
agreement with two independent implementations on a few hundred random tree pairs:

* spans taken with nltk's tree utilities (nltk.Tree, treepositions, leaf_treeposition),
  counted as evalb counts them (a multiset), written here separately from the package;
* PYEVALB, a Python port of evalb (it matches brackets as a *set*, so it is compared only
  on pairs where no tree repeats a bracket; on repeats the package follows evalb's README).
"""

import re
from collections import Counter

import numpy
import pytest

from minitransformer import metrics
from minitransformer.data import pcfg
from minitransformer.data.cky import ViterbiParser
from minitransformer.data.evalb import bracket_f1, brackets
from minitransformer.data.trees import XX, Tree, linearize, parse_tree, read_linearized, target_tokens

DEV = "pip install -r requirements-dev.txt"

GOLD_NP = "(S (NP (NNP Alice)) (VP (VT saw) (NP (NP (DT the) (NN dog)) (PP (IN with) (NP (DT the) (NN telescope))))))"
TEST_VP = "(S (NP (NNP Alice)) (VP (VT saw) (NP (DT the) (NN dog)) (PP (IN with) (NP (DT the) (NN telescope)))))"


def _score(gold, test, **kw):
    return bracket_f1([parse_tree(g) for g in gold], [parse_tree(t) for t in test], **kw)


def test_a_hand_worked_pp_attachment():
    # gold: S 0-7, NP 0-1, VP 1-7, NP 2-7, NP 2-4, PP 4-7, NP 5-7    (7 brackets; tags are not brackets)
    # test: S 0-7, NP 0-1, VP 1-7,         NP 2-4, PP 4-7, NP 5-7    (6 brackets, all in gold)
    assert sorted(brackets(parse_tree(GOLD_NP))) == [
        ("NP", 0, 1), ("NP", 2, 4), ("NP", 2, 7), ("NP", 5, 7), ("PP", 4, 7), ("S", 0, 7), ("VP", 1, 7)]
    score = _score([GOLD_NP], [TEST_VP])
    assert (score.matched, score.gold_brackets, score.test_brackets) == (6, 7, 6)
    assert score.precision == 100.0
    assert score.recall == pytest.approx(100 * 6 / 7)
    assert score.f1 == pytest.approx(2 * 1.0 * (6 / 7) / (1 + 6 / 7) * 100)    # 92.31
    assert score.exact == 0.0 and score.sentences == 1
    assert str(score).startswith("bracket F1 = 92.31 (P = 100.00, R = 85.71, exact = 0.00%")


def test_tags_are_not_scored_and_function_tags_are_cut():
    gold = "(S (NP (NNS dogs)) (VP (VI slept)))"
    assert _score([gold], ["(S (NP (XX dogs)) (VP (NN slept)))"]).f1 == 100.0
    rel = "(S (NP (NP (NNS dogs)) (SBAR-REL (WHNP (WP who)) (VP (VI barked)))) (VP (VI slept)))"
    plain = "(S (NP (NP (XX dogs)) (SBAR (WHNP (XX who)) (VP (XX barked)))) (VP (XX slept)))"
    score = _score([rel], [plain])
    assert score.f1 == 100.0 and score.exact == 100.0 and score.matched == 7
    assert _score([rel], [plain.replace("(SBAR", "(SBARX")]).matched == 6   # only the cut tag is forgiven


def test_repeated_brackets_are_matched_as_evalb_readme_says():
    # evalb README §7.5: n gold and m test copies of one bracket: precision n/m if m > n, recall m/n if n > m.
    one = "(S (NP (DT the) (NN dog)) (VP (VI slept)))"
    two = "(S (NP (NP (DT the) (NN dog))) (VP (VI slept)))"
    score = _score([one], [two])          # gold 1 copy of NP 0-2, test 2 copies
    assert (score.matched, score.gold_brackets, score.test_brackets) == (3, 3, 4)
    assert (score.precision, score.recall) == (75.0, 100.0) and score.exact == 0.0
    score = _score([two], [one])
    assert (score.precision, score.recall) == (100.0, 75.0)
    assert _score([two], [two]).exact == 100.0


def test_the_corpus_score_sums_counts_before_dividing():
    # Sentence 1: 6 of 6 test brackets right, 6 of 7 gold found. Sentence 2: 1 of 3 right.
    gold = [GOLD_NP, "(S (NP (NNS dogs)) (VP (VI slept)))"]
    test = [TEST_VP, "(S (VP (XX dogs) (XX slept)))"]
    score = _score(gold, test)
    assert (score.matched, score.gold_brackets, score.test_brackets) == (7, 10, 8)
    assert score.precision == pytest.approx(100 * 7 / 8) and score.recall == pytest.approx(100 * 7 / 10)
    averaged = (100.0 + 100 * 1 / 2) / 2          # the mean of sentence precisions: not what evalb reports
    assert score.precision != pytest.approx(averaged)
    score = _score(gold, test, ill_formed=[True, False])
    assert score.ill_formed == 50.0


@pytest.mark.parametrize("gold, test, error, message", [
    ([GOLD_NP], [GOLD_NP, GOLD_NP], ValueError, "1 gold trees vs 2 test trees"),
    ([], [], ValueError, "empty corpus"),
    ([GOLD_NP], ["(S (NP (NNP Bob)) (VP (VI slept)))"], ValueError,
     "sentence 0: the test tree's words differ from the gold tree's \\(2 vs 7 words\\)"),
    (["(TOP (S (NP (NNS dogs)) (VP (VI slept))))"], ["(TOP (S (NP (NNS dogs)) (VP (VI slept))))"], ValueError,
     "label 'TOP' is one COLLINS.prm deletes"),
    (["(S (NP (NNS dogs)) (VP (VI slept)) (. .))"], ["(S (NP (NNS dogs)) (VP (VI slept)) (. .))"], ValueError,
     "label '.' is one COLLINS.prm deletes"),
    (["(S dogs (VP (VI slept)))"], ["(S dogs (VP (VI slept)))"], ValueError, "word 'dogs' sits directly under"),
])
def test_bad_input_is_named(gold, test, error, message):
    with pytest.raises(error, match=message):
        _score(gold, test)


def test_bad_types_and_flags_are_named():
    tree = parse_tree(GOLD_NP)
    with pytest.raises(TypeError, match="gold must be a list of trees, got a single Tree"):
        bracket_f1(tree, [tree])
    with pytest.raises(TypeError, match="test\\[0\\] must be a Tree, got str"):
        bracket_f1([tree], [GOLD_NP])
    with pytest.raises(ValueError, match="ill_formed has 2 flags for 1 sentences"):
        bracket_f1([tree], [tree], ill_formed=[True, False])


# --------------------------------------------------------------------------
# Random tree pairs
# --------------------------------------------------------------------------

LABELS = ["S", "NP", "VP", "PP", "SBAR", "WHNP"]


def _random_tree(words, rng) -> Tree:
    """Any bracketing of the words with random labels, sometimes repeating a bracket (NP (NP ..))."""
    def build(lo, hi):
        if hi - lo == 1:
            node = Tree(XX, (words[lo],))
            return Tree(LABELS[int(rng.integers(len(LABELS)))], (node,)) if rng.random() < 0.2 else node
        cuts = sorted(rng.choice(numpy.arange(lo + 1, hi), size=min(hi - lo - 1, int(rng.integers(1, 3))),
                                 replace=False))
        bounds = [lo, *[int(c) for c in cuts], hi]
        node = Tree(LABELS[int(rng.integers(len(LABELS)))], tuple(build(a, b) for a, b in zip(bounds, bounds[1:])))
        return Tree(node.label, (node,)) if rng.random() < 0.05 else node
    tree = build(0, len(words))
    return tree if not tree.is_preterminal() else Tree("S", (tree,))


def _corrupted_read_back(gold: Tree, rng) -> Tree:
    tokens = linearize(gold)
    vocabulary = target_tokens(LABELS)
    for _ in range(int(rng.integers(1, 5))):
        k = int(rng.integers(len(tokens)))
        if rng.random() < 0.5:
            del tokens[k]
        else:
            tokens.insert(k, vocabulary[int(rng.integers(len(vocabulary)))])
    return read_linearized(tokens, gold.words()).tree


@pytest.fixture(scope="module")
def pairs():
    """300 (gold, test) pairs: test is the Viterbi parse, a repaired corrupted output, or a random tree."""
    rng = numpy.random.default_rng(2024)
    parser = ViterbiParser()
    out = []
    for k, gold in enumerate(pcfg.sample_treebank(300, rng)):
        if k % 3 == 0:
            test = parser.parse(gold.words()).tree
        elif k % 3 == 1:
            test = _corrupted_read_back(gold, rng)
        else:
            test = _random_tree(gold.words(), rng)
        out.append((gold, test))
    return out


def _nltk_brackets(text: str) -> Counter:
    """evalb's brackets of a bracket string, found with nltk's tree utilities."""
    nltk = pytest.importorskip("nltk", reason=f"nltk is not installed ({DEV}): it is a reference for bracket F1")
    tree = nltk.Tree.fromstring(text)
    n_words = len(tree.leaves())
    leaf_positions = [tree.leaf_treeposition(i) for i in range(n_words)]
    found = Counter()
    for position in tree.treepositions():
        node = tree[position]
        if not isinstance(node, nltk.Tree) or node.height() <= 2:     # a word, or a tag over a word
            continue
        covered = [i for i, leaf in enumerate(leaf_positions) if leaf[:len(position)] == position]
        label = node.label() if node.label().startswith("-") else re.split("[-=]", node.label())[0]
        found[(label, covered[0], covered[-1] + 1)] += 1
    return found


def test_bracket_f1_agrees_with_spans_from_nltk(pairs):
    matched = n_gold = n_test = exact = 0
    for gold, test in pairs:
        g, t = _nltk_brackets(str(gold)), _nltk_brackets(str(test))
        assert brackets(gold) == g and brackets(test) == t, (str(gold), str(test))
        matched += sum((g & t).values())
        n_gold += sum(g.values())
        n_test += sum(t.values())
        exact += g == t
    score = bracket_f1([g for g, _ in pairs], [t for _, t in pairs])
    precision, recall = 100 * matched / n_test, 100 * matched / n_gold
    assert score.precision == pytest.approx(precision, abs=1e-9)
    assert score.recall == pytest.approx(recall, abs=1e-9)
    assert score.f1 == pytest.approx(2 * precision * recall / (precision + recall), abs=1e-9)
    assert score.exact == pytest.approx(100 * exact / len(pairs), abs=1e-9)
    assert 0 < exact < len(pairs) and 20 < score.f1 < 90        # the pairs are neither all right nor all wrong


def _without_function_tags(text: str) -> str:
    return re.sub(r"\(([^\s()-=]+)[-=][^\s()]*", r"(\1", text)


def test_bracket_f1_agrees_with_pyevalb(pairs):
    pytest.importorskip("PYEVALB", reason=f"PYEVALB is not installed ({DEV}): it is a reference for bracket F1")
    from PYEVALB import parser, scorer, summary

    def has_repeats(tree):
        return max(brackets(tree).values()) > 1

    usable = [(g, t) for g, t in pairs if not has_repeats(g) and not has_repeats(t)]
    assert 200 < len(usable) < len(pairs)          # most pairs are usable, and some do repeat a bracket
    results = []
    for gold, test in usable:
        result = scorer.Scorer().score_trees(parser.create_from_bracket_string(_without_function_tags(str(gold))),
                                             parser.create_from_bracket_string(_without_function_tags(str(test))))
        ours = bracket_f1([gold], [test])
        assert (ours.matched, ours.gold_brackets, ours.test_brackets) == \
            (result.matched_brackets, result.gold_brackets, result.test_brackets), (str(gold), str(test))
        results.append(result)
    theirs = summary.summary(results)
    ours = bracket_f1([g for g, _ in usable], [t for _, t in usable])
    assert ours.precision == pytest.approx(theirs.bracket_prec, abs=1e-9)
    assert ours.recall == pytest.approx(theirs.bracket_recall, abs=1e-9)
    assert ours.f1 == pytest.approx(theirs.bracker_fmeasure, abs=1e-9)   # sic: PYEVALB's spelling
    assert ours.exact == pytest.approx(theirs.complete_match, abs=1e-9)


def test_metrics_keeps_its_translation_metrics_and_data_needs_none_of_them():
    """Bracket F1 lives beside the trees (data/evalb.py): no module of data/ imports metrics.py,
    and metrics.py imports nothing of data/ (no import runs back up the layers)."""
    import ast
    import pathlib

    assert {"corpus_bleu", "corpus_chrf", "exact_match"} <= set(metrics.__all__)
    assert "bracket_f1" not in metrics.__all__
    package = pathlib.Path(metrics.__file__).parent
    for path in [*(package / "data").glob("*.py"), package / "metrics.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                target = node.module or ""
                assert not (path.parent.name == "data" and target.endswith("metrics")), f"{path.name} imports metrics"
                assert not (path.name == "metrics.py" and target.split(".")[0] == "data"), f"metrics.py imports {target}"
