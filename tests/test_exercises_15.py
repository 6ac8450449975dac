"""The exercise checkers of lesson 15 (§6.3, parsing): the contract of _common (a right answer
passes, the stub is "not attempted", each common mistake gets its hint), and the checkers'
cases cover what they claim to."""

from collections import Counter

from checker_contract import contract_tests

from lessonkit.exercises import lesson_15 as ex
from minitransformer.data.trees import XX, evalb_label, parse_tree, read_linearized

# -- right answers (the same as the notebook's solutions) ----------------------------------------


def linearize_ok(tree):
    if len(tree.children) == 1 and isinstance(tree.children[0], str):
        return ["XX"]
    label = evalb_label(tree.label)
    out = [f"({label}"]
    for child in tree.children:
        out += linearize_ok(child)
    return out + [f"){label}"]


def _spans(tree, start=0, with_preterminals=False, labels=True):
    out, i = Counter(), start
    for child in tree.children:
        if isinstance(child, str):
            i += 1
        else:
            inner, i = _spans(child, i, with_preterminals, labels)
            out += inner
    if with_preterminals or not (len(tree.children) == 1 and isinstance(tree.children[0], str)):
        out[(tree.label if labels else "", start, i)] += 1
    return out, i


def f1_ok(gold, test, **kw):
    g, t = _spans(gold, **kw)[0], _spans(test, **kw)[0]
    matched = sum((g & t).values())
    p, r = 100 * matched / sum(t.values()), 100 * matched / sum(g.values())
    return p, r, 2 * p * r / (p + r) if p + r else 0.0


def repair_ok(tokens, n_words, *, close_at_end=True, append_to_root=True, drop_stray=True, relabel=True, trim=True):
    stack, out = [], []
    for tok in tokens:
        if tok == XX:
            out.append(tok)
        elif tok[0] == "(":
            stack.append(tok[1:])
            out.append(tok)
        elif stack:
            label = stack.pop()
            out.append(")" + label if relabel else tok)   # closes the innermost open bracket, with its label
        elif not drop_stray:
            out.append(tok)
    if close_at_end:
        out += [")" + label for label in reversed(stack)]
    have = out.count(XX)
    if have < n_words:
        at = len(out) - 1 if append_to_root else out.index(XX) + 1
        out[at:at] = [XX] * (n_words - have)
    while trim and out.count(XX) > n_words:
        k = len(out) - 1 - out[::-1].index(XX)   # the last XX
        del out[k]
    return out


# -- wrong answers, each a common mistake ---------------------------------------------------------

def linearize_with_words(tree):
    if len(tree.children) == 1 and isinstance(tree.children[0], str):
        return [tree.children[0]]
    return [f"({evalb_label(tree.label)}", *[t for c in tree.children for t in linearize_with_words(c)],
            f"){evalb_label(tree.label)}"]


def linearize_bare_close(tree):
    return [t if t[0] != ")" else ")" for t in linearize_ok(tree)]


def linearize_keeps_function_tags(tree):
    if len(tree.children) == 1 and isinstance(tree.children[0], str):
        return ["XX"]
    return [f"({tree.label}", *[t for c in tree.children for t in linearize_keeps_function_tags(c)],
            f"){tree.label}"]


def linearize_preterminal_brackets(tree):
    if len(tree.children) == 1 and isinstance(tree.children[0], str):
        return [f"({tree.label}", "XX", f"){tree.label}"]
    return [f"({evalb_label(tree.label)}", *[t for c in tree.children for t in linearize_preterminal_brackets(c)],
            f"){evalb_label(tree.label)}"]


def f1_fraction(gold, test):
    return tuple(v / 100 for v in f1_ok(gold, test))


def f1_swapped(gold, test):
    p, r, f = f1_ok(gold, test)
    return r, p, f


CASES = {
    "check_linearize": (linearize_ok, [
        ("words instead of XX", linearize_with_words, r"hint: the words are in the output"),
        ("')' without its label", linearize_bare_close, r"hint: a closing bracket carries its label"),
        ("function tag kept", linearize_keeps_function_tags, r"tree 3.*hint: the function tag is kept"),
        ("brackets on the tags", linearize_preterminal_brackets, r"hint: a part-of-speech node gets no brackets"),
        ("a string", lambda tree: " ".join(linearize_ok(tree)), r"expected a list of token strings"),
    ]),
    "check_bracket_f1": (f1_ok, [
        ("fractions", f1_fraction, r"hint: the answer is a fraction"),
        ("P and R swapped", f1_swapped, r"pair 2.*hint: precision and recall are swapped"),
        ("preterminals counted", lambda g, t: f1_ok(g, t, with_preterminals=True),
         r"pair 2.*hint: the preterminals .* are counted"),
        ("labels ignored", lambda g, t: f1_ok(g, t, labels=False), r"pair 3.*hint: the labels are ignored"),
        ("one number", lambda g, t: f1_ok(g, t)[2], r"expected a tuple of three numbers"),
    ]),
    "check_repair": (repair_ok, [
        ("open brackets left open", lambda t, n: repair_ok(t, n, close_at_end=False),
         r"case 2.*still ill-formed \(step 4.*hint: close every bracket"),
        ("stray bracket kept", lambda t, n: repair_ok(t, n, drop_stray=False),
         r"case 3.*still ill-formed \(step 2.*hint: a closing bracket with nothing open"),
        ("the closing label kept", lambda t, n: repair_ok(t, n, relabel=False),
         r"case 4.*still ill-formed \(step 3.*hint: a closing bracket closes the innermost"),
        ("missing XX inside", lambda t, n: repair_ok(t, n, append_to_root=False),
         r"case 5.*hint: the missing XX go at the end"),
        ("surplus XX kept", lambda t, n: repair_ok(t, n, trim=False),
         r"case 6.*still ill-formed \(step 7"),
    ]),
}

(test_every_checker_has_cases, test_correct_answer_passes,
 test_stub_is_not_attempted, test_wrong_answer_gets_its_hint) = contract_tests(ex, CASES)


def test_the_repair_cases_need_the_steps_they_name():
    needed = [tuple(r.split(":")[0] for r in read_linearized(t.split(), ["w"] * n).repairs)
              for t, n in ex.REPAIR_CASES]
    assert needed == [(), ("step 4",), ("step 2",), ("step 3",), ("step 7",), ("step 7",)]


def test_the_f1_cases_separate_the_mistakes():
    """Each hint's wrong answer differs from the right one on at least one pair, or the hint could never fire."""
    pairs = [(parse_tree(g), parse_tree(t)) for g, t in ex.F1_CASES]
    for wrong in (f1_swapped, lambda g, t: f1_ok(g, t, with_preterminals=True),
                  lambda g, t: f1_ok(g, t, labels=False)):
        assert any(wrong(g, t) != f1_ok(g, t) for g, t in pairs)

