"""Trees, bracket strings, the linearization of Vinyals et al. (2015) and the repair rule."""

import doctest

import numpy
import pytest

from minitransformer.data import pcfg
from minitransformer.data.trees import (
    XX,
    Tree,
    evalb_label,
    linearize,
    parse_tree,
    read_linearized,
    right_branching,
    target_tokens,
)

ALICE = "(S (NP (NNP Alice)) (VP (VT saw) (NP (DT the) (NN dog))))"


@pytest.fixture(scope="module")
def sample():
    return pcfg.sample_treebank(300, numpy.random.default_rng(11))


def _as_read_back(tree: Tree) -> Tree:
    """What a well-formed output reads back to: tags XX, function tags cut (written independently)."""
    if tree.is_preterminal():
        return Tree(XX, tree.children)
    return Tree(tree.label.split("-")[0], tuple(_as_read_back(c) for c in tree.children))


def test_bracket_strings_go_both_ways(sample):
    tree = parse_tree(ALICE)
    assert tree == Tree("S", (Tree("NP", (Tree("NNP", ("Alice",)),)),
                              Tree("VP", (Tree("VT", ("saw",)), Tree("NP", (Tree("DT", ("the",)), Tree("NN", ("dog",))))))))
    assert str(tree) == ALICE
    assert tree.words() == ["Alice", "saw", "the", "dog"]
    assert tree.tags() == ["NNP", "VT", "DT", "NN"]
    assert tree.depth() == 4 and tree.children[0].children[0].is_preterminal()
    assert repr(tree) == f"parse_tree({ALICE!r})" and eval(repr(tree)) == tree
    # Spacing does not matter; every sampled tree survives the trip.
    assert parse_tree("(S(NP (NNP Alice))\n  (VP (VT saw) (NP (DT the)(NN dog))))") == tree
    for t in sample:
        assert parse_tree(str(t)) == t


@pytest.mark.parametrize("text, message", [
    ("", "empty bracket string"),
    ("(S (NP (NNP Alice))", "1 bracket\\(s\\) still open at the end, innermost \\(S"),
    (") (S (NNP Alice))", "'\\)' at character 0 closes nothing"),
    ("(S (NNP Alice)))", "text after the end of the tree at character 15"),
    ("(S (NNP Alice)) (VP (VI slept))", "text after the end of the tree at character 16"),
    ("( (NNP Alice))", "needs a label right after '\\(' \\(character 0\\)"),
    ("(S (NP ) (VI slept))", "\\(NP ...\\) closed at character 7 has no children"),
    ("Alice (S (NNP Alice))", "word 'Alice' at character 0 is outside every bracket"),
])
def test_a_bad_bracket_string_names_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        parse_tree(text)
    with pytest.raises(TypeError, match="expects a str"):
        parse_tree(["(S", "x", ")"])


def test_evalb_labels_lose_their_function_tags():
    assert [evalb_label(x) for x in ("NP", "NP-SBJ", "NP-SBJ-1", "NP=2", "SBAR-REL", "-NONE-", "S-GAP")] == \
        ["NP", "NP", "NP", "NP", "SBAR", "-NONE-", "S"]


def test_linearize_is_the_vinyals_linearization():
    # Vinyals et al. (2015), §2: "(S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S" with every tag as XX.
    assert " ".join(linearize(parse_tree(ALICE))) == "(S (NP XX )NP (VP XX (NP XX XX )NP )VP )S"
    rel = parse_tree("(S (NP (NP (NNS dogs)) (SBAR-REL (WHNP (WP who)) (VP (VI barked)))) (VP (VI slept)))")
    assert " ".join(linearize(rel)) == \
        "(S (NP (NP XX )NP (SBAR (WHNP XX )WHNP (VP XX )VP )SBAR )NP (VP XX )VP )S"
    assert linearize(parse_tree("(NN dog)")) == [XX]
    with pytest.raises(ValueError, match="mixes words and brackets"):
        linearize(parse_tree("(S Alice (VP (VI slept)))"))
    assert target_tokens(["S", "NP", "SBAR-REL", "SBAR"]) == ["(NP", ")NP", "(S", ")S", "(SBAR", ")SBAR", XX]


def test_a_well_formed_output_reads_back_unchanged(sample):
    for tree in sample:
        back = read_linearized(linearize(tree), tree.words())
        assert back.repairs == () and not back.ill_formed
        assert back.tree == _as_read_back(tree)
        assert linearize(back.tree) == linearize(tree)


WORDS = ["Alice", "saw", "the", "dog"]
GOOD = "(S (NP (XX Alice)) (VP (XX saw) (NP (XX the) (XX dog))))"

# output tokens -> (the tree read back, the repair steps taken, in order)
REPAIRS = {
    "(S (NP XX )NP (VP XX (NP XX XX )NP )VP <unk> )S": (GOOD, [1]),
    "(S (NP XX )NP (VP XX (NP XX XX )NP )VP )S )S": (GOOD, [2]),
    ")NP (S (NP XX )NP (VP XX (NP XX XX )NP )VP )S": (GOOD, [2]),
    "(S (NP XX )VP (VP XX (NP XX XX )NP )VP )S": (GOOD, [3]),
    "(S (NP XX )NP (VP XX (NP XX XX )NP": (GOOD, [4]),
    "(S (NP XX )NP (PP )PP (VP XX (NP XX XX )NP )VP )S": (GOOD, [5]),
    "(NP XX )NP (VP XX (NP XX XX )NP )VP": (GOOD, [6]),
    "XX (VP XX (NP XX XX )NP )VP": ("(S (XX Alice) (VP (XX saw) (NP (XX the) (XX dog))))", [6]),
    "(S (NP XX )NP (VP XX (NP XX )NP )VP )S": ("(S (NP (XX Alice)) (VP (XX saw) (NP (XX the))) (XX dog))", [7]),
    "(S (NP XX )NP (VP XX (NP XX XX XX )NP )VP )S": (GOOD, [7]),
    "(S (NP XX )NP (VP XX )VP (NP XX XX )NP (PP XX XX )PP )S":
        ("(S (NP (XX Alice)) (VP (XX saw)) (NP (XX the) (XX dog)))", [7]),
    "": ("(S (XX Alice) (XX saw) (XX the) (XX dog))", [6, 7]),
    "(VP (NP )NP )VP XX XX": ("(S (XX Alice) (XX saw) (XX the) (XX dog))", [5, 5, 6, 7]),
    "(S (NP XX XX )NP (VP XX XX XX )VP": ("(S (NP (XX Alice) (XX saw)) (VP (XX the) (XX dog)))", [4, 7]),
}


def test_the_words_form_keeps_each_word_in_place_of_its_xx(sample):
    assert " ".join(linearize(parse_tree(ALICE), words=True)) == "(S (NP Alice )NP (VP saw (NP the dog )NP )VP )S"
    for tree in sample:
        words_form, xx_form = linearize(tree, words=True), linearize(tree)
        assert [w if t == XX else t for w, t in zip(words_form, xx_form)] == words_form
        assert [t for t in words_form if t[0] not in "()"] == tree.words()
        back = read_linearized(words_form, tree.words())
        assert back.repairs == () and back.tree == read_linearized(xx_form, tree.words()).tree


# The words form, ill-formed: the same rule, and step 8 for a leaf that is not the sentence's word.
WORD_REPAIRS = {
    "(S (NP Alice )NP (VP saw (NP a dog )NP )VP )S": (GOOD, [8]),
    "(S (NP Alice )NP (VP saw (NP dog )NP )VP )S":
        ("(S (NP (XX Alice)) (VP (XX saw) (NP (XX the))) (XX dog))", [7, 8]),
    "(S (NP Alice )NP (VP saw (NP the XX )NP )VP )S": (GOOD, []),        # XX and words mix: XX matches any word
    "(S (NP Alice )NP (VP saw (NP the dog <unk> )NP": (GOOD, [1, 4]),
}


@pytest.mark.parametrize("output", sorted(WORD_REPAIRS))
def test_each_repair_step_of_the_words_form(output):
    expected, steps = WORD_REPAIRS[output]
    back = read_linearized(output.split(), WORDS)
    assert str(back.tree) == expected
    assert [int(r.split(":")[0].split()[1]) for r in back.repairs] == steps, back.repairs


@pytest.mark.parametrize("output", sorted(REPAIRS))
def test_each_repair_step(output):
    expected, steps = REPAIRS[output]
    back = read_linearized(output.split(), WORDS)
    assert str(back.tree) == expected
    assert [int(r.split(":")[0].split()[1]) for r in back.repairs] == steps, back.repairs
    assert back.ill_formed


def test_any_output_reads_back_to_a_tree_over_the_sentence(sample):
    """Random edits of gold outputs: the result always has the sentence's words and no empty
    constituent, and it was called well-formed exactly when writing it out again gives the output."""
    rng = numpy.random.default_rng(3)
    vocabulary = target_tokens(pcfg.GRAMMAR.phrase_labels) + ["<unk>", "dog", "saw"]
    ill = 0
    for n, tree in enumerate(sample):
        words_form = n % 2 == 1                       # half the outputs in each form
        tokens = linearize(tree, words=words_form)
        for _ in range(int(rng.integers(0, 4))):
            k = int(rng.integers(len(tokens) + 1))
            edit = rng.integers(3)
            if edit == 0 and tokens:
                del tokens[min(k, len(tokens) - 1)]
            elif edit == 1:
                tokens.insert(k, vocabulary[int(rng.integers(len(vocabulary)))])
            elif tokens:
                tokens[min(k, len(tokens) - 1)] = vocabulary[int(rng.integers(len(vocabulary)))]
        back = read_linearized(tokens, tree.words())
        assert back.tree.words() == tree.words()
        # Well-formed exactly when the output is the tree written out, each leaf XX or its word.
        written = linearize(back.tree, words=True)
        same = len(written) == len(tokens) and all(t == w or (t == XX and w[0] not in "()")
                                                   for t, w in zip(tokens, written))
        assert same == (not back.ill_formed)
        stack = [back.tree]
        while stack:
            node = stack.pop()
            assert node.children, node
            stack.extend(c for c in node.children if isinstance(c, Tree))
        ill += back.ill_formed
    assert 0.3 * len(sample) < ill < len(sample)     # the edits made most, not all, ill-formed


def test_read_linearized_refuses_strings_and_empty_sentences():
    with pytest.raises(TypeError, match="got a str"):
        read_linearized("(S XX )S", ["Alice"])
    with pytest.raises(ValueError, match="needs the sentence's words"):
        read_linearized(["(S", "XX", ")S"], [])


def test_right_branching():
    assert str(right_branching(["a"])) == "(S (XX a))"
    assert str(right_branching(["a", "b"])) == "(S (XX a) (XX b))"
    assert str(right_branching(["a", "b", "c", "d"])) == "(S (XX a) (NP (XX b) (NP (XX c) (XX d))))"
    assert str(right_branching(["a", "b", "c"], root="X", label="VP")) == "(X (XX a) (VP (XX b) (XX c)))"
    with pytest.raises(ValueError, match="non-empty list"):
        right_branching([])


def test_the_docstring_examples_run():
    from minitransformer.data import evalb
    result = doctest.testmod(evalb)
    assert result.failed == 0 and result.attempted > 0
