"""The max-expected-F1 parser (data/posterior.py) against brute force: every tree of a short sentence
enumerated from the grammar as written (not binarized), its probability the product of its rules.

Checked: the inside probability is the sum over trees, each bracket's and tag's posterior is the share of
the trees holding it, the decoding finds the best set of non-crossing brackets, and the corpus threshold
is the optimum of the expected F1 (Dinkelbach's optimality condition, checked by brute force)."""

import functools
import itertools
import json
import math
import pathlib

import numpy
import pytest

from minitransformer.data import evalb, pcfg
from minitransformer.data.cky import ViterbiParser
from minitransformer.data.pcfg import GRAMMAR, Grammar, Rule
from minitransformer.data.posterior import PosteriorParser, chosen_brackets, decode, expected_counts, max_expected_f1
from minitransformer.data.trees import Tree, evalb_label

ROOT = pathlib.Path(__file__).resolve().parents[1]


def all_trees(words, grammar: Grammar = GRAMMAR) -> list[tuple[Tree, float]]:
    """Every tree of ``words`` from the start symbol with its probability, by enumeration."""
    by_lhs: dict[str, list[Rule]] = {}
    for rule in grammar.rules:
        by_lhs.setdefault(rule.lhs, []).append(rule)

    def parts(i, k, m):
        """Every way to cut words i..k-1 into m non-empty consecutive pieces."""
        for cuts in itertools.combinations(range(i + 1, k), m - 1):
            edges = (i, *cuts, k)
            yield list(zip(edges, edges[1:]))

    @functools.cache
    def trees(symbol, i, k):
        if symbol in grammar.lexicon:
            words_of = grammar.lexicon[symbol]
            return [(Tree(symbol, (words[i],)), 1 / len(words_of))] if k == i + 1 and words[i] in words_of else []
        out = []
        for rule in by_lhs[symbol]:
            if len(rule.rhs) > k - i:
                continue
            for pieces in parts(i, k, len(rule.rhs)):
                for combo in itertools.product(*(trees(s, a, b) for s, (a, b) in zip(rule.rhs, pieces))):
                    out.append((Tree(symbol, tuple(t for t, _ in combo)), rule.prob * math.prod(p for _, p in combo)))
        return out

    return trees(grammar.start, 0, len(words))


def tree_brackets(tree: Tree) -> set:
    return set(evalb.brackets(tree))


def short_sentences(count=25, max_words=7, seed=3):
    return [t.words() for t in pcfg.sample_treebank(count, numpy.random.default_rng(seed), max_words=max_words)]


def _tiny(a=0.4, b=0.3) -> Grammar:
    """Two prepositional phrases after an object: five readings of 'Alice saw Bob with a dog in a park'.
    a = P(VP -> VP PP), b = P(NP -> NP PP)."""
    rules = [Rule("S", ("NP", "VP"), 1.0), Rule("NP", ("NNP",), 0.4), Rule("NP", ("NP", "PP"), b),
             Rule("NP", ("DT", "NN"), 0.6 - b), Rule("VP", ("VT", "NP"), 1 - a), Rule("VP", ("VP", "PP"), a),
             Rule("PP", ("IN", "NP"), 1.0)]
    lexicon = {"NNP": ("Alice", "Bob"), "VT": ("saw",), "IN": ("with", "in"), "DT": ("a",), "NN": ("dog", "park")}
    return Grammar("S", tuple(rules), lexicon)


TINY_SENTENCE = "Alice saw Bob with a dog in a park".split()


@pytest.mark.parametrize("grammar, sentences", [(GRAMMAR, short_sentences()), (_tiny(), [TINY_SENTENCE])])
def test_inside_is_the_sum_over_trees_and_posteriors_are_shares_of_trees(grammar, sentences):
    parser = PosteriorParser(grammar)
    several = 0
    for words in sentences:
        trees = all_trees(words, grammar)
        z = sum(p for _, p in trees)
        post = parser.posteriors(words)
        assert post.log_prob == pytest.approx(math.log(z), rel=1e-12), words
        several += len(trees) > 1
        want: dict = {}
        tags: list[dict] = [{} for _ in words]
        for tree, p in trees:
            for b in tree_brackets(tree):
                want[b] = want.get(b, 0.0) + p / z
            for i, tag in enumerate(tree.tags()):
                tags[i][tag] = tags[i].get(tag, 0.0) + p / z
        assert set(post.brackets) == set(want), words
        for b, p in want.items():
            assert post.brackets[b] == pytest.approx(p, abs=1e-12), (words, b)
        for got, expected in zip(post.tags, tags):
            assert got == pytest.approx(expected, abs=1e-12)
        assert post.expected_brackets() == pytest.approx(sum(p / z * len(tree_brackets(t)) for t, p in trees))
        # Viterbi is the most probable of all the trees.
        best = ViterbiParser(grammar).parse(words)
        assert best.log_prob == pytest.approx(math.log(max(p for _, p in trees)), rel=1e-12)
    assert several >= 1                    # some sentence had more than one tree: the sums were sums


def _laminar(brackets) -> bool:
    """No two brackets cross (two labels over the same words do not: a tree holds both, one inside the other)."""
    for (_, i, k), (_, a, b) in itertools.combinations(brackets, 2):
        if (i < a < k < b) or (a < i < b < k):
            return False
    return True


def _best_by_brute_force(post, threshold):
    """The largest sum of (posterior - threshold) over all sets of non-crossing brackets."""
    candidates = [b for b, p in post.brackets.items() if p > threshold]
    best = 0.0
    for r in range(len(candidates) + 1):
        for subset in itertools.combinations(candidates, r):
            if _laminar(subset):
                best = max(best, sum(post.brackets[b] - threshold for b in subset))
    return best


@pytest.mark.parametrize("threshold", [0.5, 0.47, 0.3, 0.1])
def test_the_decoding_finds_the_best_set_of_non_crossing_brackets(threshold):
    parser = PosteriorParser()
    differ = 0
    sentences = short_sentences(count=25, max_words=9, seed=4)
    for words in sentences:
        post = parser.posteriors(words)
        chosen = chosen_brackets(post, threshold)
        assert _laminar(chosen)
        gain = sum(post.brackets[b] - threshold for b in chosen)
        assert gain == pytest.approx(_best_by_brute_force(post, threshold), abs=1e-12), words
        tree = decode(post, threshold)
        assert tree.words() == list(words) and tree_brackets(tree) == set(chosen)
        if threshold == 0.5:               # at one half, simply every bracket more likely in than out
            assert set(chosen) == {b for b, p in post.brackets.items() if p > 0.5}
        differ += tree_brackets(tree) != tree_brackets(ViterbiParser().parse(words).tree)
    if threshold == 0.1:
        assert differ > 0                   # a low threshold keeps brackets the most probable tree lacks


def test_the_corpus_threshold_maximises_the_expected_f1():
    """Dinkelbach's condition: F* is the largest 2 E[matched] / (test + E[gold]) iff no choice of brackets
    makes sum(2 p - F*) - F* E[gold] positive; its maximum, by brute force per sentence, is 0."""
    parser = PosteriorParser()
    sentences = short_sentences(count=12, max_words=8, seed=5) + [TINY_SENTENCE[:1] + ["saw", "Bob", "with",
                                                                                       "the", "dog"]]
    posts = [parser.posteriors(w) for w in sentences]
    result = max_expected_f1(posts)
    f_star = result.expected_f1 / 100
    assert result.threshold == pytest.approx(f_star / 2)
    gold = sum(p.expected_brackets() for p in posts)
    slack = sum(2 * _best_by_brute_force(p, f_star / 2) for p in posts) - f_star * gold
    assert slack == pytest.approx(0.0, abs=1e-9)
    # The trees it returns reach F*, and the most probable trees reach no more.
    counts = [expected_counts(p, list(evalb.brackets(t))) for p, t in zip(posts, result.trees)]
    assert 2 * sum(c[0] for c in counts) / sum(c[1] + c[2] for c in counts) == pytest.approx(f_star)
    viterbi = [expected_counts(p, list(evalb.brackets(ViterbiParser().parse(p.words).tree))) for p in posts]
    assert 2 * sum(c[0] for c in viterbi) / sum(c[1] + c[2] for c in viterbi) <= f_star + 1e-12


def test_a_sentence_where_the_most_probable_tree_is_not_the_best_bet():
    """'Alice saw Bob with a dog in a park' has five readings. By hand, leaving out the factors every
    reading shares ((1 - a), the NPs over Alice, Bob, 'a dog', 'a park', the words), with a = P(VP -> VP PP)
    = .4 and b = P(NP -> NP PP) = .3: both PPs on the verb, a^2 = .16 (the most probable reading);
    one on the verb and one on a noun, ab = .12 twice; both on nouns, b^2 = .09 twice; in all .58.
    The most probable tree's [VP saw Bob] and [VP saw Bob with a dog] are each in two readings, posterior
    (.16 + .12)/.58: under one half, so the posterior parser drops them and keeps a flat VP, a tree the
    grammar cannot produce, with fewer brackets wrong on average."""
    grammar = _tiny(a=0.4, b=0.3)
    trees = all_trees(TINY_SENTENCE, grammar)
    z = sum(p for _, p in trees)
    shared = (1 - 0.4) * 0.4 * 0.4 * 0.3 * 0.3 * 0.5 ** 6
    assert sorted(p / shared for _, p in trees) == pytest.approx([.09, .09, .12, .12, .16])
    best = ViterbiParser(grammar).parse(TINY_SENTENCE)
    assert math.exp(best.log_prob) == pytest.approx(.16 * shared)
    post = PosteriorParser(grammar).posteriors(TINY_SENTENCE)
    assert post.brackets[("VP", 1, 6)] == pytest.approx(.28 / .58)
    assert post.brackets[("VP", 1, 3)] == pytest.approx(.28 / .58)
    assert {("VP", 1, 3), ("VP", 1, 6)} <= tree_brackets(best.tree)
    mine = decode(post)
    assert str(mine) == ("(S (NP (NNP Alice)) (VP (VT saw) (NP (NNP Bob)) (PP (IN with) (NP (DT a) (NN dog))) "
                         "(PP (IN in) (NP (DT a) (NN park)))))")
    assert z == pytest.approx(.58 * shared)

    def expected_gain(brackets):                  # E[matched] - |brackets| / 2, what the decoding maximises
        return sum(post.brackets.get(b, 0.0) - 0.5 for b in brackets)

    assert expected_gain(tree_brackets(mine)) > expected_gain(tree_brackets(best.tree))


def test_two_labels_over_the_same_words_are_both_kept_when_both_beat_the_threshold():
    """'a b' is an X (.51) or a Y (.49). At threshold 0.47 both are worth keeping: a tree holds them as a
    unary chain, and the expected matches grow by .51 - .47 + .49 - .47; at 0.5 only X beats it."""
    rules = (Rule("S", ("X", "C"), 0.51), Rule("S", ("Y", "C"), 0.49), Rule("X", ("DA", "DB"), 1.0),
             Rule("Y", ("DA", "DB"), 1.0), Rule("C", ("DC",), 1.0))
    grammar = Grammar("S", rules, {"DA": ("a",), "DB": ("b",), "DC": ("c",)})
    post = PosteriorParser(grammar).posteriors(["a", "b", "c"])
    assert post.brackets == pytest.approx({("S", 0, 3): 1.0, ("X", 0, 2): 0.51, ("Y", 0, 2): 0.49, ("C", 2, 3): 1.0})
    assert str(decode(post, 0.47)) == "(S (X (Y (DA a) (DB b))) (C (DC c)))"
    assert str(decode(post, 0.5)) == "(S (X (DA a) (DB b)) (C (DC c)))"
    assert sum(post.brackets[b] - 0.47 for b in chosen_brackets(post, 0.47)) == pytest.approx(
        _best_by_brute_force(post, 0.47))


def test_labels_are_scored_as_evalb_scores_them():
    """SBAR-REL and S-GAP are SBAR and S to evalb: their posteriors are summed under the cut label."""
    parser = PosteriorParser()
    post = parser.posteriors("the dog that Alice saw slept".split())
    assert {label for label, _, _ in post.brackets} <= set(GRAMMAR.phrase_labels)
    assert all(evalb_label(label) == label for label, _, _ in post.brackets)
    assert post.brackets[("S", 0, 6)] == pytest.approx(1.0)


def test_bad_input():
    parser = PosteriorParser()
    with pytest.raises(ValueError, match="word 'Zed' is not in the grammar's lexicon"):
        parser.posteriors(["Alice", "saw", "Zed"])
    with pytest.raises(TypeError, match="got a str"):
        parser.posteriors("Alice slept")
    with pytest.raises(ValueError, match="at least one word"):
        parser.posteriors([])
    assert parser.posteriors(["the", "the"]) is None and parser.parse(["the", "the"]) is None
    with pytest.raises(ValueError, match="sentence 2 has no tree under the grammar: 'the the'"):
        parser.parse_corpus([["Alice", "slept"], ["the", "the"]])
    with pytest.raises(ValueError, match="threshold must be below 1"):
        decode(parser.posteriors(["Alice", "slept"]), threshold=1.0)


def test_the_record_of_both_references():
    """parse_baselines.json's seed 0: the most probable tree and the max-expected-F1 parse, re-run."""
    record = json.loads((ROOT / "lessons" / "experiments" / "parse_baselines.json").read_text(encoding="utf-8"))
    seed0 = next(s for s in record["seeds"] if s["seed"] == 0)
    test = pcfg.parse_splits(0, seed=0, n_valid=record["sizes"]["valid"], n_test=record["sizes"]["test"]).test
    gold = [e.tree for e in test]
    result = PosteriorParser().parse_corpus([e.words for e in test])
    score = evalb.bracket_f1(gold, result.trees)
    assert seed0["max_expected_f1"]["f1"] == round(score.f1, 2)
    assert seed0["max_expected_f1"]["threshold"] == round(result.threshold, 4)
    half = evalb.bracket_f1(gold, [PosteriorParser().parse(e.words) for e in test])
    assert seed0["posterior_above_half"]["f1"] == round(half.f1, 2)
    best = max(seed0["most_probable_tree"]["f1"], seed0["max_expected_f1"]["f1"])
    assert seed0["better_reference_f1"] == best


def test_the_datasets_page_reports_the_records():
    """docs/datasets.md's Table 4 rows and reference rows are the records' numbers (typed there, checked here)."""
    text = (ROOT / "docs" / "datasets.md").read_text(encoding="utf-8")
    base = json.loads((ROOT / "lessons" / "experiments" / "parse_baselines.json").read_text(encoding="utf-8"))
    table4 = json.loads((ROOT / "lessons" / "experiments" / "parse_table4.json").read_text(encoding="utf-8"))
    ref = {s["seed"]: s for s in base["seeds"]}

    def row(start):
        line = next(line for line in text.splitlines() if line.startswith(start))
        return [c.strip() for c in line.strip().strip("|").split("|")]

    def fmt(values):
        return ", ".join(f"{v:.2f}" for v in values)

    for label, key, mean in (("| the grammar's max-expected-F1 parse", "max_expected_f1", "max_expected_f1_f1_mean"),
                             ("| the grammar's most probable tree", "most_probable_tree", "most_probable_tree_f1_mean")):
        assert row(label)[1:5] == [f"{ref[s][key]['f1']:.2f}" for s in (0, 1, 2)] + [f"{base[mean]:.2f}"]
    for size, start in (("small", "| `parse`, 8,000 trees |"), ("large", "| `parse-large`, 80,000 trees |")):
        runs = sorted((r for r in table4["runs"] if r["size"] == size), key=lambda r: r["seed"])
        greedy = [r["greedy"]["bracket_f1"] for r in runs]
        cells = row(start)
        assert cells[1:4] == [f"{g:.2f}" for g in greedy]
        assert cells[5] == fmt(ref[r["seed"]]["better_reference_f1"] - g for r, g in zip(runs, greedy))
        assert cells[6] == fmt(ref[r["seed"]]["most_probable_tree"]["f1"] - g for r, g in zip(runs, greedy))
    # parse's default recipe since issue 37: its row is benchmarks/bench_tasks.py's record.
    bench = sorted(json.loads((ROOT / "benchmarks" / "results" / "tasks.json").read_text(encoding="utf-8"))
                   ["tasks"]["parse"]["runs"], key=lambda r: r["seed"])
    avg = [r["scores_average"]["greedy"]["bracket_f1"] for r in bench]
    beam = [r["scores_average"]["beam4"]["bracket_f1"] for r in bench]
    cells = row("| `parse`'s default (`parse-1layer`")
    assert cells[1:5] == [f"{a:.2f}" for a in avg] + [f"{sum(avg) / 3:.2f} / {sum(beam) / 3:.2f}"]
    assert cells[5] == fmt(ref[r["seed"]]["better_reference_f1"] - a for r, a in zip(bench, avg))
    assert all(ref[r["seed"]]["better_reference_f1"] - a < 5 for r, a in zip(bench, avg))     # issue 24's bound
    assert cells[6] == fmt(r["scores"]["greedy"]["bracket_f1"] for r in bench)
    assert cells[7] == ", ".join(f"{r['train_seconds']:.1f}" for r in bench)
