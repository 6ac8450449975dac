"""Constituency trees, bracket strings, and trees written as a sentence (§6.3).

§6.3 of the paper parses English with the translation model unchanged: the
"target language" is the parse tree written out as a token sequence, after
Vinyals et al. (2015), "Grammar as a Foreign Language" (§2 of that paper,
https://arxiv.org/abs/1412.7449). This module holds the three pieces that make
a tree into such a sentence and back:

* ``Tree``: a labelled node and its children, a child being a ``Tree`` or a
  word (a ``str``). A *preterminal* is a node whose one child is a word: its
  label is the part-of-speech tag. Bracket strings in the Penn Treebank style
  go both ways: ``parse_tree("(S (NP (NNP Alice)) (VP (VI slept)))")`` and
  ``str(tree)``.
* ``linearize(tree)``: the tree as target tokens, the way Vinyals et al. wrote
  it, a depth-first walk that opens a bracket with its label and closes it
  with its label again, each part-of-speech tag replaced by ``XX``::

      (S (NP (NNP Alice)) (VP (VT saw) (NP (DT a) (NN dog))))
      ->  (S (NP XX )NP (VP XX (NP XX XX )NP )VP )S

  ``linearize(tree, words=True)`` writes each word in place of its ``XX``:
  ``(S (NP Alice )NP (VP saw (NP a dog )NP )VP )S``, what the parse tasks
  train on (below).
* ``read_linearized(tokens, words)``: a decoded token sequence back into a
  tree over the sentence's words, repairing an ill-formed one by a fixed rule
  (below) and saying what it repaired, so the ill-formed outputs can be
  counted. It reads either form.

What the target keeps, and why
------------------------------
Vinyals et al. replaced every part-of-speech tag by ``XX`` and left the words
out of the output: bracket F1 (evalb, ``evalb.bracket_f1``) scores
constituents and ignores preterminals, so the tags would be output the model
has to learn and nobody scores, and the input gives the words, in order. One
leaf token per word is kept because it places the brackets between words: the
i-th leaf is the i-th input word, which is how a tree is read back.

The parse tasks (``data/parsing.py``) keep the *words* as the leaves instead
of ``XX``, for a reason we measured: to place a bracket the decoder must know
which word comes next, and with ``XX`` it has to count the leaves it has
written, which our small models barely learn; with the words it can find its
place in the input by content, the way it copies in the copy task. The same
model and recipe trained on both forms are compared in
``lessons/experiments/parse_table4.json`` (its ``xx_targets`` row; lesson 15
prints it, docs/datasets.md has the search that found it). The scores do not
change: a leaf is read back as the input's word at its position whatever it
says (step 8 below), so both forms give the same trees, brackets and F1.

We keep the phrase labels on *both* brackets, ``(NP`` and ``)NP``, as Vinyals
et al. did: the closing label is redundant in a well-formed output, but it
makes each closing token say which bracket it closes (the lesson looks at what
the heads attend to there), and a closing label that disagrees with the open
bracket is one more sign of an ill-formed output. Function tags (the ``-REL``
of ``SBAR-REL``) are dropped from the target, as evalb drops them before
scoring (``evalb_label``). The target vocabulary is therefore one ``(X`` and
one ``)X`` per phrase label, and ``XX`` or the words.

The repair rule for ill-formed outputs
--------------------------------------
A decoder is free to emit any token sequence, so some outputs are not trees,
and a scorer needs a tree for every sentence. Vinyals et al. (2015) discuss
such outputs; we could not check the wording of what they did with them, so
this module does not claim to reproduce their procedure. ``read_linearized``
applies one fixed rule of its own (close what is open, add a bracket where one
is missing, never move a word), in this order, and names every step it took
(``ReadBack.repairs``); an output needing none is well-formed:

1. A token that is neither ``(X``, ``)X`` nor a leaf (``XX`` or a word) is
   dropped: a special token such as ``<unk>``, or a bracket without a label.
2. A closing bracket with no bracket open is dropped.
3. A closing bracket whose label differs from the open one closes it anyway;
   the opening bracket's label is kept.
4. Brackets still open at the end are closed there (brackets added at the end).
5. A constituent with no ``XX`` in it is removed.
6. If what is left is not one bracketed tree (several trees side by side, or
   ``XX`` outside every bracket), everything is put under one new root
   labelled ``S`` (a bracket added at the beginning and one at the end).
7. Too few leaves for the sentence: the missing ones are appended as the
   root's last children. Too many: the surplus leaves are removed from the
   right, and constituents left empty are removed as in step 5.
8. A leaf written as a word other than the sentence's word at its place is
   read as the sentence's word (leaves are read by position; an ``XX`` leaf
   never needs this step).

The leaves become preterminals ``(XX word)`` over the sentence's words,
so a read-back tree has the same words as the gold tree and evalb can compare
them (it ignores the tags).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .vocab import SPECIALS

__all__ = [
    "Tree", "parse_tree", "evalb_label", "linearize", "read_linearized", "ReadBack",
    "right_branching", "target_tokens", "XX", "ROOT_LABEL",
]

XX = "XX"            # the placeholder for every part-of-speech tag (Vinyals et al., 2015)
ROOT_LABEL = "S"     # the label of a root added by the repair rule (step 6)


class Tree(NamedTuple):
    """A labelled node of a constituency tree; a child is a ``Tree`` or a word.

    ``Tree("NP", (Tree("DT", ("the",)), Tree("NN", ("dog",))))`` is the bracket
    string ``(NP (DT the) (NN dog))``; ``str(tree)`` writes it, ``parse_tree``
    reads it.
    """

    label: str
    children: tuple[Tree | str, ...]

    def is_preterminal(self) -> bool:
        """True for a part-of-speech node: one child, and that child a word."""
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def words(self) -> list[str]:
        """The words under this node, left to right."""
        out: list[str] = []
        for child in self.children:
            if isinstance(child, str):
                out.append(child)
            else:
                out.extend(child.words())
        return out

    def tags(self) -> list[str]:
        """The part-of-speech tags, one per word (the labels of the preterminals)."""
        out: list[str] = []
        for child in self.children:
            if isinstance(child, Tree):
                out.extend([child.label] if child.is_preterminal() else child.tags())
        return out

    def depth(self) -> int:
        """Edges on the longest path from this node down to a word: (NN dog) has depth 1."""
        return 1 + max(0 if isinstance(c, str) else c.depth() for c in self.children)

    def __repr__(self) -> str:
        return f"parse_tree({str(self)!r})"

    def __str__(self) -> str:
        parts = [child if isinstance(child, str) else str(child) for child in self.children]
        return f"({self.label} {' '.join(parts)})"


# --------------------------------------------------------------------------
# Bracket strings
# --------------------------------------------------------------------------

def _bracket_tokens(text: str) -> list[tuple[str, int]]:
    """Split a bracket string into "(", ")" and symbols, each with its character offset."""
    tokens, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "()":
            tokens.append((ch, i))
            i += 1
        else:
            start = i
            while i < len(text) and not text[i].isspace() and text[i] not in "()":
                i += 1
            tokens.append((text[start:i], start))
    return tokens


def parse_tree(text: str) -> Tree:
    """Read one Penn-Treebank-style bracket string, such as ``(NP (DT the) (NN dog))``.

    Every bracket is ``(LABEL child ...)`` with at least one child, a child
    being a bracket or a word. Anything else (unbalanced brackets, a bracket
    without a label or without children, text after the tree) is a ValueError
    naming the character offset.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_tree expects a str, got {type(text).__name__}")
    tokens = _bracket_tokens(text)
    if not tokens:
        raise ValueError("empty bracket string: expected a tree such as (S (NP (NNP Alice)) (VP (VI slept)))")
    stack: list[tuple[str, list]] = []
    root = None
    for k, (tok, at) in enumerate(tokens):
        if root is not None:
            raise ValueError(f"text after the end of the tree at character {at}: {text[at:at + 20]!r}")
        if tok == "(":
            label = tokens[k + 1][0] if k + 1 < len(tokens) else ")"
            if label in "()":
                raise ValueError(f"a bracket needs a label right after '(' (character {at})")
            stack.append((label, []))
        elif tok == ")":
            if not stack:
                raise ValueError(f"unbalanced brackets: ')' at character {at} closes nothing")
            label, children = stack.pop()
            if not children:
                raise ValueError(f"bracket ({label} ...) closed at character {at} has no children")
            node = Tree(label, tuple(children))
            if stack:
                stack[-1][1].append(node)
            else:
                root = node
        elif not stack:
            raise ValueError(f"word {tok!r} at character {at} is outside every bracket")
        elif tokens[k - 1][0] == "(":
            continue                     # the label, already taken by the "(" above
        else:
            stack[-1][1].append(tok)
    if stack:
        raise ValueError(f"unbalanced brackets: {len(stack)} bracket(s) still open at the end, "
                         f"innermost ({stack[-1][0]} ...)")
    return root


def evalb_label(label: str) -> str:
    """The label evalb scores: a function tag after "-" or "=" is cut off.

    evalb strips "NP-SBJ" to "NP" and "NP=2" to "NP" before comparing labels
    (its README, section 7.2); so does this package, in the metric and in the
    target. Our grammar's one function tag is the "-REL" of "SBAR-REL".
    """
    if label.startswith("-"):          # -NONE-, -LRB-: a label starting with "-" is kept whole
        return label
    for k, ch in enumerate(label):
        if ch in "-=":
            return label[:k]
    return label


# --------------------------------------------------------------------------
# Trees as target sentences (Vinyals et al., 2015, §2)
# --------------------------------------------------------------------------

def linearize(tree: Tree, words: bool = False) -> list[str]:
    """The tree as target tokens: ``(X`` ... ``)X`` around each phrase, ``XX`` per word.

    ``(S (NP (NNP Alice)) (VP (VI slept)))`` -> ``["(S", "(NP", "XX", ")NP", "(VP", "XX", ")VP", ")S"]``.
    words=True: the word itself in place of each ``XX`` (``["(S", "(NP", "Alice", ")NP", ...]``),
    the target of the parse tasks. Labels lose their function tags (``evalb_label``).
    """
    if tree.is_preterminal():
        return [tree.children[0] if words else XX]
    if any(isinstance(child, str) for child in tree.children):
        raise ValueError(f"({tree.label} ...) mixes words and brackets; every word needs a tag: {tree}")
    label = evalb_label(tree.label)
    tokens = [f"({label}"]
    for child in tree.children:
        tokens.extend(linearize(child, words))
    tokens.append(f"){label}")
    return tokens


def target_tokens(labels: Sequence[str]) -> list[str]:
    """Every token a linearized tree over these phrase labels can contain: ``(X``, ``)X``, ``XX``."""
    out = []
    for label in sorted({evalb_label(lab) for lab in labels}):
        out += [f"({label}", f"){label}"]
    return out + [XX]


class ReadBack(NamedTuple):
    """A decoded output read back into a tree.

    tree: over the sentence's words, each tag ``XX``. repairs: one line per
    repair step the output needed (module docstring, steps 1-8); empty when
    the output was well-formed. ``ill_formed`` is ``bool(repairs)``.
    """

    tree: Tree
    repairs: tuple[str, ...]

    @property
    def ill_formed(self) -> bool:
        return bool(self.repairs)


def read_linearized(tokens: Sequence[str], words: Sequence[str]) -> ReadBack:
    """Read target tokens back into a tree over ``words``, repairing them if needed.

    The repair rule is steps 1-8 of the module docstring; each step taken is
    named in ``ReadBack.repairs``. A leaf is ``XX`` or a word (any token that is
    not a bracket or a special token). A well-formed output comes back unchanged:
    ``read_linearized(linearize(t), t.words()).tree`` (or ``linearize(t, words=True)``)
    is ``t`` with every tag ``XX`` and every function tag cut.
    """
    if isinstance(tokens, str) or isinstance(words, str):
        raise TypeError("read_linearized expects lists of tokens and words, got a str (split it first)")
    if len(words) == 0:
        raise ValueError("read_linearized needs the sentence's words: got none")
    repairs: list[str] = []
    # A node under construction is [label, children]; a child is a node or a leaf (a str: XX or a word).
    stack: list[list] = []
    pieces: list = []                   # finished top-level nodes and stray leaves

    def attach(item) -> None:
        (stack[-1][1] if stack else pieces).append(item)

    def close(node: list) -> None:
        if _leaf_count(node) == 0:
            repairs.append(f"step 5: empty constituent ({node[0]} ) removed")
        else:
            attach(node)

    for i, tok in enumerate(tokens):
        if _is_leaf(tok):
            attach(tok)
        elif len(tok) > 1 and tok[0] == "(":
            stack.append([tok[1:], []])
        elif len(tok) > 1 and tok[0] == ")":
            if not stack:
                repairs.append(f"step 2: {tok!r} at position {i} closes nothing; dropped")
                continue
            node = stack.pop()
            if tok[1:] != node[0]:
                repairs.append(f"step 3: {tok!r} at position {i} closes ({node[0]}; label {node[0]} kept")
            close(node)
        else:
            repairs.append(f"step 1: token {tok!r} at position {i} is not a bracket or a leaf; dropped")
    if stack:
        repairs.append(f"step 4: {len(stack)} bracket(s) left open; closed at the end")
        while stack:
            close(stack.pop())

    if len(pieces) == 1 and isinstance(pieces[0], list):
        root = pieces[0]
    else:
        what = f"{len(pieces)} pieces" if pieces else "nothing"
        repairs.append(f"step 6: {what} at the top level; put under a new ({ROOT_LABEL} ...)")
        root = [ROOT_LABEL, pieces]

    have, n = _leaf_count(root), len(words)
    if have < n:
        repairs.append(f"step 7: {have} leaves for {n} words; {n - have} appended to the root")
        root[1].extend([XX] * (n - have))
    elif have > n:
        repairs.append(f"step 7: {have} leaves for {n} words; the last {have - n} removed")
        root = _keep_leaves(root, n)
    wrong = [k for k, leaf in enumerate(_leaves(root)) if leaf != XX and leaf != words[k]]
    if wrong:
        repairs.append(f"step 8: {len(wrong)} leaves are not the sentence's words at their places (first: "
                       f"position {wrong[0]}, {_leaves(root)[wrong[0]]!r} for {words[wrong[0]]!r}); read as the "
                       "sentence's words")

    word_iter = iter(words)
    return ReadBack(_to_tree(root, word_iter), tuple(repairs))


def _is_leaf(token: str) -> bool:
    """XX, or a word: a token that is neither a bracket ("(X", ")X") nor a special token (<unk>, ...)."""
    return token == XX or (token[:1] not in ("(", ")") and token not in SPECIALS and bool(token))


def _leaf_count(node) -> int:
    return 1 if isinstance(node, str) else sum(_leaf_count(child) for child in node[1])


def _leaves(node) -> list[str]:
    return [node] if isinstance(node, str) else [leaf for child in node[1] for leaf in _leaves(child)]


def _keep_leaves(node: list, budget: int) -> list:
    """``node`` with only its first ``budget`` leaves; constituents left empty removed."""
    kept = []
    for child in node[1]:
        if budget == 0:
            break
        if isinstance(child, str):
            kept.append(child)
            budget -= 1
        else:
            n = min(_leaf_count(child), budget)
            kept.append(_keep_leaves(child, n))
            budget -= n
    return [node[0], kept]


def _to_tree(node: list, words) -> Tree:
    children = tuple(Tree(XX, (next(words),)) if isinstance(child, str) else _to_tree(child, words)
                     for child in node[1])
    return Tree(node[0], children)


# --------------------------------------------------------------------------
# The floor: a right-branching tree
# --------------------------------------------------------------------------

def right_branching(words: Sequence[str], root: str = "S", label: str = "NP") -> Tree:
    """The trivial baseline parse: each constituent spans from one word to the end.

    ``right_branching(["a", "b", "c"])`` is ``(S (XX a) (NP (XX b) (XX c)))``:
    the root over all n words, then one bracket ``label`` over words i..n-1 for
    every i = 1..n-2. English leans right, so this guesses many spans that end
    at the sentence end. It learns nothing, labels included: every bracket
    below the root gets ``label``, by default NP, the treebank's most frequent
    label below the root (tests/test_cky.py checks that).
    """
    if isinstance(words, str) or len(words) == 0:
        raise ValueError("right_branching needs a non-empty list of words")
    leaves = [Tree(XX, (w,)) for w in words]
    node: Tree | None = None
    for k in range(len(words) - 1, 0, -1):   # build from the right end inwards
        node = leaves[k] if node is None else Tree(label, (leaves[k], node))
    return Tree(root, (leaves[0],) if node is None else (leaves[0], node))
