"""The grammar, its sampler, and the train / valid / test treebank built from it."""

import math

import numpy
import pytest

from minitransformer.data import pcfg
from minitransformer.data.pcfg import GRAMMAR, MAX_WORDS, Grammar, Rule
from minitransformer.data.trees import XX, linearize, parse_tree
from minitransformer.data.vocab import UNK_ID, tokenize


def test_the_grammar_is_the_size_the_issue_asks_for():
    assert 15 <= len(GRAMMAR.rules) <= 30
    assert 100 <= len(GRAMMAR.words) <= 300
    assert (len(GRAMMAR.rules), len(GRAMMAR.words)) == (25, 173)    # as pcfg's docstring and docs/datasets.md say
    assert GRAMMAR.phrase_labels == ["NP", "PP", "S", "SBAR", "VP", "WHNP"]
    # Recursion through S, NP and VP; relative clauses, complement clauses, coordination.
    rules = {(r.lhs, r.rhs) for r in GRAMMAR.rules}
    for rule in [("S", ("S", "CC", "S")), ("NP", ("NP", "CC", "NP")), ("VP", ("VP", "CC", "VP")),
                 ("NP", ("NP", "SBAR-REL")), ("VP", ("VS", "SBAR")), ("SBAR", ("COMP", "S")),
                 ("NP", ("NP", "PP")), ("VP", ("VT", "NP", "PP"))]:
        assert rule in rules, rule
    # Words with more than one tag.
    ambiguous = {w: GRAMMAR.tags_of(w) for w in GRAMMAR.words if len(GRAMMAR.tags_of(w)) > 1}
    assert ambiguous["that"] == ["DT", "COMP", "WDT"] and ambiguous["saw"] == ["NN", "VT"]
    assert len(ambiguous) >= 8
    assert pcfg.min_words() == 2


@pytest.mark.parametrize("rules, lexicon, message", [
    ([Rule("S", ("A", "B"), 0.5)], {"A": ("a",), "B": ("b",)}, "the rules of S sum to 0.5"),
    ([Rule("S", ("A", "C"), 1.0)], {"A": ("a",), "B": ("b",)}, "undefined symbol\\(s\\) \\['C'\\]"),
    ([Rule("S", ("X",), 1.0), Rule("X", ("A", "B"), 1.0)], {"A": ("a",), "B": ("b",)},
     "unary rule S -> X must rewrite to a tag"),
    ([Rule("S", ("A", "B"), 1.0), Rule("A", ("B", "B"), 1.0)], {"A": ("a",), "B": ("b",)},
     "both as phrase and as tag: \\['A'\\]"),
])
def test_a_broken_grammar_is_refused(rules, lexicon, message):
    with pytest.raises(ValueError, match=message):
        pcfg._check_grammar(Grammar("S", tuple(rules), lexicon))


def test_sampling_is_seeded_and_capped():
    a = pcfg.sample_treebank(200, numpy.random.default_rng(1))
    b = pcfg.sample_treebank(200, numpy.random.default_rng(1))
    c = pcfg.sample_treebank(200, numpy.random.default_rng(2))
    assert a == b and a != c
    assert all(len(t.words()) <= MAX_WORDS for t in a)
    short = pcfg.sample_treebank(100, numpy.random.default_rng(1), max_words=5)
    assert max(len(t.words()) for t in short) == 5
    assert len({" ".join(t.words()) for t in a}) == 200          # every sentence once
    with pytest.raises(ValueError, match="below the grammar's shortest sentence \\(2 words\\)"):
        pcfg.sample_tree(numpy.random.default_rng(0), max_words=1)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        pcfg.sample_tree(0)


def test_a_request_for_more_sentences_than_the_grammar_has_is_an_error():
    tiny = Grammar("S", (Rule("S", ("A", "B"), 1.0),), {"A": ("a", "b"), "B": ("c", "d")})
    assert len(pcfg.sample_treebank(4, numpy.random.default_rng(0), grammar=tiny)) == 4
    with pytest.raises(ValueError, match="could not find 5 distinct sentences of <= 20 words \\(found 4"):
        pcfg.sample_treebank(5, numpy.random.default_rng(0), grammar=tiny)


def test_the_length_distribution():
    """The cap is on length only; the shape the docs report (lessons/experiments/parse_baselines.py)."""
    trees = pcfg.sample_treebank(2_000, numpy.random.default_rng(0))
    lengths = numpy.array([len(t.words()) for t in trees])
    counts = numpy.bincount(lengths, minlength=MAX_WORDS + 1)
    assert counts[:2].sum() == 0 and (counts[2:] > 0).all()       # every length 2..20 occurs
    assert 7.0 < lengths.mean() < 10.0
    assert counts[2:8].sum() > counts[8:14].sum() > counts[14:].sum()
    # A sampled tree can be deeper than any cap on depth would allow; nothing rejects it for that.
    assert max(t.depth() for t in trees) >= 12


def test_tree_log_prob():
    tree = parse_tree("(S (NP (NNP Alice)) (VP (VI slept)))")
    # S -> NP VP, NP -> NNP, NNP -> Alice (1 of 15 names), VP -> VI, VI -> slept (1 of 15)
    assert pcfg.tree_log_prob(tree) == pytest.approx(math.log(0.92 * 0.14 / 15 * 0.15 / 15), rel=1e-12)
    with pytest.raises(ValueError, match="no rule S -> VP"):
        pcfg.tree_log_prob(parse_tree("(S (VP (VI slept)))"))
    with pytest.raises(ValueError, match="no tag 'NNP' for word 'Zed'"):
        pcfg.tree_log_prob(parse_tree("(S (NP (NNP Zed)) (VP (VI slept)))"))
    with pytest.raises(ValueError, match="no rule NP -> XX"):      # a tree read back from a model
        pcfg.tree_log_prob(parse_tree("(S (NP (XX Alice)) (VP (VI slept)))"))
    for tree in pcfg.sample_treebank(100, numpy.random.default_rng(4)):
        assert math.isfinite(pcfg.tree_log_prob(tree))


def test_the_splits_are_disjoint_nested_and_repeatable():
    small = pcfg.parse_splits(300, seed=7, n_valid=50, n_test=100)
    large = pcfg.parse_splits(1_200, seed=7, n_valid=50, n_test=100)
    assert (len(small.train), len(small.valid), len(small.test)) == (300, 50, 100)
    sentences = [{" ".join(e.words) for e in split} for split in large]
    assert [len(s) for s in sentences] == [1_200, 50, 100]       # no repeats inside a split
    assert not (sentences[0] & sentences[1] or sentences[0] & sentences[2] or sentences[1] & sentences[2])
    assert small.test == large.test and small.valid == large.valid
    assert small.train == large.train[:300]
    assert pcfg.parse_splits(300, seed=8, n_valid=50, n_test=100).test != small.test
    assert small == pcfg.parse_splits(300, seed=7, n_valid=50, n_test=100)
    with pytest.raises(ValueError, match="n_train must be an integer >= 0"):
        pcfg.parse_splits(-1, seed=0)
    assert pcfg.SIZES == {"small": 8_000, "large": 80_000}


def test_the_examples_are_tokenized_as_the_model_sees_them():
    splits = pcfg.parse_splits(200, seed=0, n_valid=20, n_test=20)
    vocab = pcfg.parse_vocab()
    assert len(vocab) == 4 + 13 + len(GRAMMAR.words)     # specials, 6 labels x 2 brackets + XX, words
    for example in splits.train + splits.valid + splits.test:
        assert example.words == example.tree.words()
        assert example.target == linearize(example.tree)
        assert example.target.count(XX) == len(example.words)
        # Word-level tokenization of the joined strings gives back the same tokens.
        assert tokenize(" ".join(example.words), "space") == example.words
        assert tokenize(" ".join(example.target), "space") == example.target
        assert UNK_ID not in vocab.encode(example.words) + vocab.encode(example.target)
        assert len(example.target) <= 4 * MAX_WORDS
