"""Checkers for the exercises of lesson 15 (§6.3: constituency parsing as translation).

Every checker follows the contract of ``lessonkit.exercises._common``: fixed
inputs, handed over as copies; the stub (returns None) prints a note and returns
a false Verdict; a wrong answer raises WrongAnswer (an AssertionError) saying what is
wrong, with a ``hint:`` line when it matches a common mistake; a right answer prints
"correct" and returns a true Verdict (the ``@exercise`` decorator, ``_verdict``).

Exercise 15.1 check_linearize     a tree -> its target tokens, (X ... )X around each phrase, XX per word
Exercise 15.2 check_bracket_f1    labelled bracket precision, recall and F1 of one test tree against gold
Exercise 15.3 check_repair        an ill-formed output -> the well-formed tokens the repair rule gives

The references are the package's own: ``data.trees.linearize``, ``data.evalb.bracket_f1``
and ``data.trees.read_linearized``.
"""

from __future__ import annotations

import re
from collections import Counter

from minitransformer.data.evalb import bracket_f1
from minitransformer.data.trees import XX, Tree, evalb_label, linearize, parse_tree, read_linearized

from ..i18n import tr
from ._common import NOT_ATTEMPTED, WrongAnswer, case_rng, describe, edge, exercise, not_attempted, say, visible

__all__ = ["NOT_ATTEMPTED", "check_linearize", "check_bracket_f1", "check_repair", "LINEARIZE_CASES",
           "F1_CASES", "REPAIR_CASES"]


# -- hidden cases: random trees -------------------------------------------------------------------

_PHRASES = ("S", "NP", "VP", "PP", "SBAR-REL", "ADJP", "NP-SBJ")
_TAGS = ("DT", "NN", "VT", "VI", "IN", "JJ", "WP")


def _grow(rng, n_words: int, label: str, word: list) -> Tree:
    """A random phrase over ``n_words`` words (numbered from ``word[0]``), with unary chains now and then."""
    if n_words == 1 and rng.random() < 0.6:
        word[0] += 1
        return Tree(str(rng.choice(_TAGS)), (f"w{word[0] - 1}",))
    if n_words > 1 and rng.random() < 0.15:                       # a unary chain: NP over NP, say
        return Tree(label, (_grow(rng, n_words, label, word),))
    parts = int(rng.integers(1, min(n_words, 3) + 1))
    cuts = sorted(rng.choice(range(1, n_words), size=parts - 1, replace=False)) if parts > 1 else []
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, n_words])]
    children = []
    for size in sizes:
        if size == 1 and rng.random() < 0.7:
            word[0] += 1
            children.append(Tree(str(rng.choice(_TAGS)), (f"w{word[0] - 1}",)))
        else:
            children.append(_grow(rng, size, str(rng.choice(_PHRASES[1:])), word))
    return Tree(label, tuple(children))


def random_tree(rng, n_words: int | None = None, tags: bool = True) -> Tree:
    """A random tree of 1 to 7 words (a hidden case's), rooted in S; ``tags=False``: no function tags
    (NP-SBJ), as the trees a model writes have none."""
    n = int(rng.integers(1, 8)) if n_words is None else n_words
    tree = _grow(rng, n, "S", [0])
    tree = tree if not tree.is_preterminal() else Tree("S", (tree,))
    return tree if tags else parse_tree(re.sub(r"\((\S+?)-\S+", r"(\1", str(tree)))


def _report(lines: list[str]) -> bool:
    say("\n".join([tr("correct"), *lines]))
    return True


def _token_list(got, where: str) -> list[str]:
    if isinstance(got, str) or not isinstance(got, (list, tuple)) or not all(isinstance(t, str) for t in got):
        raise WrongAnswer(tr(f"{where}: expected a list of token strings such as ['(S', '(NP', 'XX', ...], "
                                f"got {describe(got)}"))
    return list(got)


# -- Exercise 15.1: linearize a tree ------------------------------------------------------------

LINEARIZE_CASES = [
    "(S (NP (NNP Alice)) (VP (VI slept)))",
    "(S (NP (DT the) (NN dog)) (VP (VT saw) (NP (NNP Bob)) (PP (IN with) (NP (DT a) (NN telescope)))))",
    # A relative clause: SBAR-REL carries a function tag, which the target drops (evalb_label).
    "(S (NP (NP (DT the) (NN cat)) (SBAR-REL (WHNP (WP who)) (VP (VI laughed)))) (VP (VI ran)))",
]


def _linearize_wrong(tree: Tree, *, words=False, tags=False, close_label=True, cut=True) -> list[str]:
    """Common mistakes, for the hints: the words or tags instead of XX, ")" without its label,
    the function tag kept."""
    if tree.is_preterminal():
        return [tree.children[0] if words else tree.label if tags else XX]
    label = evalb_label(tree.label) if cut else tree.label
    out = [f"({label}"]
    for child in tree.children:
        out += _linearize_wrong(child, words=words, tags=tags, close_label=close_label, cut=cut)
    return out + [f"){label}" if close_label else ")"]


@exercise("15.1")
def check_linearize(fn) -> bool:
    """fn(tree: Tree) -> list of target tokens, e.g. ['(S', '(NP', 'XX', ')NP', '(VP', 'XX', ')VP', ')S']."""
    lines = []
    cases = LINEARIZE_CASES
    if not visible():
        rng = case_rng(151)
        cases = [str(random_tree(rng)) for _ in range(3)]
    for n, text in enumerate(cases):
        tree = parse_tree(text)
        got = fn(parse_tree(text))
        if n == 0 and not_attempted(got):
            return False
        got = _token_list(got, f"tree {n + 1}")
        ref = linearize(tree)
        if got == ref:
            lines.append(tr(f"  tree {n + 1}: {len(ref)} tokens, {' '.join(ref)}"))
            continue
        msg = tr(f"tree {n + 1} {text}:\n  expected {' '.join(ref)}\n  got      {' '.join(got)}")
        hints = [
            (_linearize_wrong(tree, words=True), tr("the words are in the output: every word (with its tag) becomes "
                                                    "one XX; the words come back from the input when it is read")),
            (_linearize_wrong(tree, tags=True), tr("the part-of-speech tags are in the output: each becomes XX "
                                                   "(evalb does not score tags)")),
            (_linearize_wrong(tree, close_label=False), tr("a closing bracket carries its label again: ')NP', not "
                                                           "')'")),
            (_linearize_wrong(tree, cut=False), tr("the function tag is kept: '(SBAR-REL' should be '(SBAR' "
                                                   "(evalb_label cuts what follows '-')")),
        ]
        preterminal_brackets = [t for t in got if t.lstrip("()") in {"NNP", "DT", "NN", "VT", "VI", "IN", "WP"}
                                and t[:1] in "()"]
        for wrong, text_hint in hints:
            if got == wrong and wrong != ref:
                msg += f"\n  hint: {text_hint}"
                break
        else:
            if preterminal_brackets:
                msg += ("\n  hint: " + tr("a part-of-speech node gets no brackets of its own: (NNP Alice) is the "
                                          "single "
                                         "token XX"))
            elif Counter(got) == Counter(ref):
                msg += "\n  hint: " + tr("the right tokens in the wrong order: write a node's children left to right")
        raise WrongAnswer(msg)
    return _report(lines)


# -- Exercise 15.2: bracket F1 of one pair of trees ----------------------------------------------

F1_CASES = [
    # The same tree: 100 on all three.
    ("(S (NP (XX Alice)) (VP (XX slept)))", "(S (NP (XX Alice)) (VP (XX slept)))"),
    # PP attachment: the test tree attaches "with a hat" to the noun (one extra NP bracket).
    ("(S (NP (XX Alice)) (VP (XX saw) (NP (XX the) (XX dog)) (PP (XX with) (NP (XX a) (XX hat)))))",
     "(S (NP (XX Alice)) (VP (XX saw) (NP (NP (XX the) (XX dog)) (PP (XX with) (NP (XX a) (XX hat))))))"),
    # A right label on a wrong span, and a wrong label on a right span.
    ("(S (NP (XX the) (XX cat)) (VP (XX ran) (PP (XX to) (NP (XX Bob)))))",
     "(S (NP (XX the) (XX cat)) (VP (XX ran) (NP (XX to) (XX Bob))))"),
]


# Edge cases of the hidden cases: a unary chain repeats a bracket (brackets are a multiset: a set counts
# (NP 0 1) once and gives recall 100 here, where evalb gives 75); no bracket matches (P + R = 0: F1 is 0).
F1_EDGES = [
    ("(S (NP (NP (XX a))) (VP (XX b)))", "(S (NP (XX a)) (VP (XX b)))"),
    ("(S (NP (XX a)) (VP (XX b)))", "(X (Y (XX a)) (Z (XX b)))"),
]


def _wrong_f1(gold: Tree, test: Tree, *, preterminals=False, labels=True, as_set=False):
    """Precision, recall, F1 with a common mistake: the preterminals counted, the labels ignored, or the
    brackets counted as a set."""
    def spans(tree, start=0):
        out, i = Counter(), start
        for child in tree.children:
            if isinstance(child, str):
                i += 1
                continue
            inner, i_end = spans(child, i)
            out += inner
            i = i_end
        if preterminals or not tree.is_preterminal():
            out[(tree.label if labels else "", start, i)] += 1
        return out, i

    g, t = spans(gold)[0], spans(test)[0]
    if as_set:
        g, t = Counter(set(g)), Counter(set(t))
    m = sum((g & t).values())
    p, r = 100 * m / sum(t.values()), 100 * m / sum(g.values())
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def _xx(tree: Tree) -> str:
    """The tree with every part-of-speech tag written XX, as the model's outputs are read back."""
    def walk(node):
        if node.is_preterminal():
            return Tree(XX, node.children)
        return Tree(node.label, tuple(walk(c) for c in node.children))
    return str(walk(tree))


def _perturb(rng, tree: Tree) -> Tree:
    """Another tree over the same words: one phrase relabelled, or flattened into its parent."""
    def walk(node, target, counter):
        if isinstance(node, str) or node.is_preterminal():
            return node
        counter[0] += 1
        children = tuple(walk(c, target, counter) for c in node.children)
        if counter[0] - 1 == target:
            if rng.random() < 0.5 or node.label == "S":
                return Tree(str(rng.choice(("NP", "VP", "PP", "ADJP"))), children)
            return Tree(node.label, sum(((c,) if isinstance(c, str) or c.is_preterminal() else c.children
                                         for c in children), ()))
        return Tree(node.label, children)

    phrases = sum(1 for _ in _phrases(tree))
    return walk(tree, int(rng.integers(phrases)), [0])


def _phrases(tree: Tree):
    if not tree.is_preterminal():
        yield tree
        for c in tree.children:
            if isinstance(c, Tree):
                yield from _phrases(c)


@exercise("15.2")
def check_bracket_f1(fn) -> bool:
    """fn(gold: Tree, test: Tree) -> (precision, recall, f1), in percent, for one sentence
    (labelled brackets, preterminals excluded, as evalb's COLLINS.prm)."""
    lines = []
    cases = F1_CASES
    if not visible():
        rng = case_rng(152)
        gold = random_tree(rng, int(rng.integers(2, 8)), tags=False)
        cases = [edge(F1_EDGES), (_xx(gold), _xx(_perturb(rng, gold)))]
    for n, (g_text, t_text) in enumerate(cases):
        gold, test = parse_tree(g_text), parse_tree(t_text)
        try:
            got = fn(parse_tree(g_text), parse_tree(t_text))
        except ZeroDivisionError:
            if bracket_f1([gold], [test]).matched:
                raise
            raise WrongAnswer(tr(f"pair {n + 1}:\n  gold {g_text}\n  test {t_text}\n  your function divided by zero"
                                 "\n  hint: no bracket matches here, so P = R = 0 and P + R = 0: F1 is 0 then (guard "
                                 "the division)")) from None
        if n == 0 and not_attempted(got):
            return False
        if not isinstance(got, (tuple, list)) or len(got) != 3 or \
                not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in got):
            raise WrongAnswer(tr(f"pair {n + 1}: expected a tuple of three numbers (precision, recall, f1), "
                                    f"got {describe(got)}"))
        s = bracket_f1([gold], [test])
        ref = (s.precision, s.recall, s.f1)
        if all(abs(a - b) <= 1e-9 for a, b in zip(got, ref)):
            lines.append(tr(f"  pair {n + 1}: P {ref[0]:.2f}, R {ref[1]:.2f}, F1 {ref[2]:.2f} "
                            f"({s.matched} matched of {s.test_brackets} test and {s.gold_brackets} gold brackets)"))
            continue
        msg = (tr(f"pair {n + 1}:\n  gold {g_text}\n  test {t_text}\n  expected P, R, F1 = "
                  f"{ref[0]:.4f}, {ref[1]:.4f}, {ref[2]:.4f}; got {got[0]:.4f}, {got[1]:.4f}, {got[2]:.4f}"))

        def same(x, got=got):
            return all(abs(a - b) <= 1e-9 for a, b in zip(got, x))
        if any(g != g for g in got) and ref[2] == 0.0:
            msg += "\n  hint: " + tr("no bracket matches here, so P + R = 0: F1 is 0 then, not nan (guard the "
                                     "division)")
            raise WrongAnswer(msg)
        hints = [
            (tuple(v / 100 for v in ref), tr("the answer is a fraction: evalb reports percentages (0..100)")),
            ((ref[1], ref[0], ref[2]), tr("precision and recall are swapped: precision = matched / test brackets, "
                                          "recall = matched / gold brackets")),
            (_wrong_f1(gold, test, as_set=True), tr("the brackets were counted as a set: a unary chain such as "
                                                     "(NP (NP a)) gives the bracket (NP, 0, 1) twice, and evalb counts "
                                                     "both (a multiset, e.g. collections.Counter)")),
            (_wrong_f1(gold, test, preterminals=True), tr("the preterminals (XX word) are counted: evalb leaves "
                                                          "part-of-speech nodes out")),
            (_wrong_f1(gold, test, labels=False), tr("the labels are ignored: a bracket matches only with the same "
                                                     "label and the same span")),
        ]
        for wrong, text in hints:
            if same(wrong) and not all(abs(a - b) <= 1e-9 for a, b in zip(wrong, ref)):
                msg += f"\n  hint: {text}"
                break
        raise WrongAnswer(msg)
    return _report(lines)


# -- Exercise 15.3: repair an ill-formed output --------------------------------------------------

# (decoded tokens, number of words): each needs some of the repair steps 2, 3, 4 and 7 of
# data/trees.py (the steps a model's outputs need most often).
REPAIR_CASES = [
    ("(S (NP XX )NP (VP XX )VP )S", 2),                          # well-formed: unchanged
    ("(S (NP XX )NP (VP XX (NP XX XX", 4),                      # step 4: three brackets left open
    ("(S (NP XX )NP (VP XX )VP )S )S", 2),                      # step 2: the last ')S' closes nothing
    ("(S (NP XX XX )VP (VP XX )VP )S", 3),                      # step 3: ')VP' closes (NP
    ("(S (NP XX )NP (VP XX )VP )S", 4),                         # step 7: two XX missing
    ("(S (NP XX XX )NP (VP XX (NP XX XX )NP )VP )S", 4),        # step 7: one XX too many
]


def _broken(rng) -> tuple[str, int]:
    """A random tree's target tokens with the slips a model makes: a bracket left open, a closing bracket
    too many or mislabelled, an XX missing or too many; and its number of words. Only slips the exercise's
    steps (2, 3, 4, 7) repair: a slip that would need another step is drawn again."""
    while True:
        text, n_words = _slipped(rng)
        tokens = text.split()
        repairs = read_linearized(tokens, [f"w{i}" for i in range(n_words)]).repairs
        if not all(r.split(":")[0] in ("step 2", "step 3", "step 4", "step 7") for r in repairs):
            continue
        surplus = sum(t == XX for t in tokens) - n_words          # step 7 must not empty a constituent either
        if surplus > 0:
            keep = [i for i, t in enumerate(tokens) if t == XX][:n_words]
            trimmed = [t for i, t in enumerate(tokens) if t != XX or i in keep]
            if any(r.startswith("step 5") for r in read_linearized(trimmed, [""] * n_words).repairs):
                continue
        return text, n_words


def _slipped(rng) -> tuple[str, int]:
    tree = random_tree(rng, int(rng.integers(2, 8)), tags=False)
    tokens = linearize(tree)
    n_words = len(tree.words())
    for _ in range(int(rng.integers(1, 3))):
        slip = int(rng.integers(5))
        closers = [i for i, t in enumerate(tokens) if t.startswith(")")]
        if slip == 0 and closers:
            del tokens[int(rng.choice(closers))]                      # left open
        elif slip == 1:
            tokens.append(")S")                                       # closes nothing
        elif slip == 2 and closers:
            i = int(rng.choice(closers))
            tokens[i] = ")" + str(rng.choice(("S", "NP", "VP", "PP")))  # the wrong label
        elif slip == 3:
            n_words += 1                                              # an XX missing
        else:
            n_words = max(1, n_words - 1)                             # an XX too many
    return " ".join(tokens), n_words


@exercise("15.3")
def check_repair(fn) -> bool:
    """fn(tokens: list of str, n_words: int) -> the tokens of a well-formed linearized tree over
    n_words words, repaired by the rule of data/trees.py (steps 2, 3, 4 and 7)."""
    lines = []
    cases = REPAIR_CASES if visible() else [_broken(case_rng(153)) for _ in range(3)]
    for n, (text, n_words) in enumerate(cases):
        tokens = text.split()
        words = [f"w{i}" for i in range(n_words)]
        got = fn(list(tokens), n_words)
        if n == 0 and not_attempted(got):
            return False
        got = _token_list(got, f"case {n + 1}")
        ref = read_linearized(tokens, words)
        expected = linearize(ref.tree)
        back = read_linearized(got, words)
        if not back.ill_formed and back.tree == ref.tree:
            what = "; ".join(r.split(":")[0] for r in ref.repairs) or tr("already well-formed")
            lines.append(f"  case {n + 1} ({what}): {' '.join(got)}")
            continue
        msg = tr(f"case {n + 1}, {n_words} words: {text}\n  expected {' '.join(expected)}\n  got      {' '.join(got)}")
        if back.ill_formed:
            problem = back.repairs[0]
            msg += tr(f"\n  your output is still ill-formed ({problem})")
            if problem.startswith("step 4"):
                msg += "\n  hint: " + tr("close every bracket still open at the end, innermost first")
            elif problem.startswith("step 2"):
                msg += "\n  hint: " + tr("a closing bracket with nothing open is dropped")
            elif problem.startswith("step 3"):
                msg += ("\n  hint: " + tr("a closing bracket closes the innermost open one, whatever its label: "
                                          "write the "
                                         "open bracket's label on it"))
            elif problem.startswith("step 7"):
                msg += ("\n  hint: " + tr("the tree needs exactly one XX per word: append missing ones as the "
                                          "root's last "
                                         "children, remove surplus ones from the right"))
        elif sum(t == XX for t in got) == n_words and sum(t == XX for t in tokens) < n_words:
            msg += "\n  hint: " + tr("the missing XX go at the end, as the root's last children (just before the "
                                     "final ')S')")
        raise WrongAnswer(msg)
    return _report(lines)
