"""Checkers for the exercises of lesson 15 (§6.3: constituency parsing as translation).

Every checker follows the contract of ``lessonkit.exercises._common``: fixed
inputs, handed over as copies; the stub (returns None) prints a note and returns
a false Verdict; a wrong answer raises WrongAnswer (an AssertionError) saying what is
wrong, with a ``hint:`` line when it matches a common mistake; a right answer prints
"correct" and returns a true Verdict (the ``@exercise`` decorator, ``_verdict``).

Exercise 15.1 check_linearize     a tree -> its target tokens, (X ... )X around each phrase, XX per word
Exercise 15.2 check_bracket_f1    labelled bracket precision, recall and F1 of one test tree against gold
Exercise 15.3 check_repair        an ill-formed output -> the well-formed tokens the repair rule gives

The references are the package's own: ``data.trees.linearize``, ``metrics.bracket_f1``
and ``data.trees.read_linearized``.
"""

from __future__ import annotations

from collections import Counter

from minitransformer.data.trees import XX, Tree, evalb_label, linearize, parse_tree, read_linearized
from minitransformer.metrics import bracket_f1

from ._common import NOT_ATTEMPTED, WrongAnswer, describe, exercise, not_attempted

__all__ = ["NOT_ATTEMPTED", "check_linearize", "check_bracket_f1", "check_repair", "LINEARIZE_CASES",
           "F1_CASES", "REPAIR_CASES"]


def _report(lines: list[str]) -> bool:
    print("\n".join(["correct", *lines]))
    return True


def _token_list(got, where: str) -> list[str]:
    if isinstance(got, str) or not isinstance(got, (list, tuple)) or not all(isinstance(t, str) for t in got):
        raise WrongAnswer(f"{where}: expected a list of token strings such as ['(S', '(NP', 'XX', ...], "
                             f"got {describe(got)}")
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
    for n, text in enumerate(LINEARIZE_CASES):
        tree = parse_tree(text)
        got = fn(parse_tree(text))
        if n == 0 and not_attempted(got):
            return False
        got = _token_list(got, f"tree {n + 1}")
        ref = linearize(tree)
        if got == ref:
            lines.append(f"  tree {n + 1}: {len(ref)} tokens, {' '.join(ref)}")
            continue
        msg = f"tree {n + 1} {text}:\n  expected {' '.join(ref)}\n  got      {' '.join(got)}"
        hints = [
            (_linearize_wrong(tree, words=True), "the words are in the output: every word (with its tag) becomes "
                                                 "one XX; the words come back from the input when it is read"),
            (_linearize_wrong(tree, tags=True), "the part-of-speech tags are in the output: each becomes XX "
                                                "(evalb does not score tags)"),
            (_linearize_wrong(tree, close_label=False), "a closing bracket carries its label again: ')NP', not ')'"),
            (_linearize_wrong(tree, cut=False), "the function tag is kept: '(SBAR-REL' should be '(SBAR' "
                                                "(evalb_label cuts what follows '-')"),
        ]
        preterminal_brackets = [t for t in got if t.lstrip("()") in {"NNP", "DT", "NN", "VT", "VI", "IN", "WP"}
                                and t[:1] in "()"]
        for wrong, text_hint in hints:
            if got == wrong and wrong != ref:
                msg += f"\n  hint: {text_hint}"
                break
        else:
            if preterminal_brackets:
                msg += ("\n  hint: a part-of-speech node gets no brackets of its own: (NNP Alice) is the single "
                        "token XX")
            elif Counter(got) == Counter(ref):
                msg += "\n  hint: the right tokens in the wrong order: write a node's children left to right"
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


def _wrong_f1(gold: Tree, test: Tree, *, preterminals=False, labels=True):
    """Precision, recall, F1 with a common mistake: the preterminals counted, or the labels ignored."""
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
    m = sum((g & t).values())
    p, r = 100 * m / sum(t.values()), 100 * m / sum(g.values())
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


@exercise("15.2")
def check_bracket_f1(fn) -> bool:
    """fn(gold: Tree, test: Tree) -> (precision, recall, f1), in percent, for one sentence
    (labelled brackets, preterminals excluded, as evalb's COLLINS.prm)."""
    lines = []
    for n, (g_text, t_text) in enumerate(F1_CASES):
        gold, test = parse_tree(g_text), parse_tree(t_text)
        got = fn(parse_tree(g_text), parse_tree(t_text))
        if n == 0 and not_attempted(got):
            return False
        if not isinstance(got, (tuple, list)) or len(got) != 3 or \
                not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in got):
            raise WrongAnswer(f"pair {n + 1}: expected a tuple of three numbers (precision, recall, f1), "
                                 f"got {describe(got)}")
        s = bracket_f1([gold], [test])
        ref = (s.precision, s.recall, s.f1)
        if all(abs(a - b) <= 1e-9 for a, b in zip(got, ref)):
            lines.append(f"  pair {n + 1}: P {ref[0]:.2f}, R {ref[1]:.2f}, F1 {ref[2]:.2f} "
                         f"({s.matched} matched of {s.test_brackets} test and {s.gold_brackets} gold brackets)")
            continue
        msg = (f"pair {n + 1}:\n  gold {g_text}\n  test {t_text}\n  expected P, R, F1 = "
               f"{ref[0]:.4f}, {ref[1]:.4f}, {ref[2]:.4f}; got {got[0]:.4f}, {got[1]:.4f}, {got[2]:.4f}")

        def same(x, got=got):
            return all(abs(a - b) <= 1e-9 for a, b in zip(got, x))
        hints = [
            (tuple(v / 100 for v in ref), "the answer is a fraction: evalb reports percentages (0..100)"),
            ((ref[1], ref[0], ref[2]), "precision and recall are swapped: precision = matched / test brackets, "
                                       "recall = matched / gold brackets"),
            (_wrong_f1(gold, test, preterminals=True), "the preterminals (XX word) are counted: evalb leaves "
                                                       "part-of-speech nodes out"),
            (_wrong_f1(gold, test, labels=False), "the labels are ignored: a bracket matches only with the same "
                                                  "label and the same span"),
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


@exercise("15.3")
def check_repair(fn) -> bool:
    """fn(tokens: list of str, n_words: int) -> the tokens of a well-formed linearized tree over
    n_words words, repaired by the rule of data/trees.py (steps 2, 3, 4 and 7)."""
    lines = []
    for n, (text, n_words) in enumerate(REPAIR_CASES):
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
            what = "; ".join(r.split(":")[0] for r in ref.repairs) or "already well-formed"
            lines.append(f"  case {n + 1} ({what}): {' '.join(got)}")
            continue
        msg = f"case {n + 1}, {n_words} words: {text}\n  expected {' '.join(expected)}\n  got      {' '.join(got)}"
        if back.ill_formed:
            problem = back.repairs[0]
            msg += f"\n  your output is still ill-formed ({problem})"
            if problem.startswith("step 4"):
                msg += "\n  hint: close every bracket still open at the end, innermost first"
            elif problem.startswith("step 2"):
                msg += "\n  hint: a closing bracket with nothing open is dropped"
            elif problem.startswith("step 3"):
                msg += ("\n  hint: a closing bracket closes the innermost open one, whatever its label: write the "
                        "open bracket's label on it")
            elif problem.startswith("step 7"):
                msg += ("\n  hint: the tree needs exactly one XX per word: append missing ones as the root's last "
                        "children, remove surplus ones from the right")
        elif sum(t == XX for t in got) == n_words and sum(t == XX for t in tokens) < n_words:
            msg += "\n  hint: the missing XX go at the end, as the root's last children (just before the final ')S')"
        raise WrongAnswer(msg)
    return _report(lines)
