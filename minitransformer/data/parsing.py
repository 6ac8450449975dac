"""Constituency parsing as translation (§6.3): the ``parse`` tasks of the registry.

A sentence of the grammar in ``pcfg.py`` is the source; its tree, linearized
as Vinyals et al. (2015) wrote it but with each word in place of its ``XX``
(``trees.linearize(tree, words=True)``; trees.py says why), is the target:

    source  Alice saw the dog
    target  (S (NP Alice )NP (VP saw (NP the dog )NP )VP )S

Two tasks, the two training sets of Table 4 in miniature (``pcfg.SIZES``):

    parse        8,000 training trees, the "WSJ only" analogue
    parse-large  80,000 training trees (the first 8,000 are parse's), the
                 "semi-supervised" analogue

Both share the 500 validation and 1,000 test sentences of a seed, so their
scores are comparable, and one vocabulary (``pcfg.parse_vocab``: the bracket
tokens, XX and every word of the grammar).

What a parser's output means is the task's business, so the entries carry the
two optional hooks of ``loading.Task``:

    render_tree(source, output)      what ``translate`` prints: the output read
                                     back into a tree (``trees.read_linearized``,
                                     repaired if ill-formed) over the input's
                                     words, ``(S (NP Alice) (VP saw ...))``
    tree_scores(sources, hyps, refs) what ``evaluate`` and ``train``'s test report
                                     print: labelled bracket F1 (evalb,
                                     ``evalb.bracket_f1``), exact trees, the
                                     ill-formed rate, and the F1 of the grammar's
                                     own two parses of the same sentences, the
                                     references the model is read against

and a longest output, ``PARSE_MAX_OUTPUT``: §6.3 lets a tree run to the input
length + 300 tokens, where translation (§6.1) allows + 50; here the bound is
exact, the longest linearized tree the grammar can give a 20-word sentence.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model import TransformerConfig
from ..settings import Recipe, recipe
from . import pcfg
from .cky import ViterbiParser
from .evalb import bracket_f1
from .loading import Task
from .posterior import PosteriorParser
from .trees import XX, Tree, escape_word, linearize, read_linearized

__all__ = ["TASKS", "PARSE_MAX_OUTPUT", "PARSE_RECIPE", "TABLE4_RECIPE", "parse_text_splits", "render_tree",
           "tree_scores", "reference_scores", "without_tags"]

# The longest output decoding may produce, <eos> included. Every phrase of the grammar
# spans one word alone (NP -> NNP) or has two or more children, so a tree over n words has
# at most n + (n - 1) = 2n - 1 phrases and its linearization at most n + 2(2n - 1) = 5n - 2
# tokens: 98 for the longest sentence (pcfg.MAX_WORDS = 20 words), plus <eos>. This is the
# scaled equivalent of §6.3's "input + 300": room for any tree the task can have, so a long
# output is never cut short by the limit (§6.1's input + 50 would cut trees of 14+ words).
PARSE_MAX_OUTPUT = 5 * pcfg.MAX_WORDS

# The parse recipes' model (preset "parse"): 8 heads of d_k = 8, as "copy": the decoder finds its
# place in the input by content, like a copy. Measured against "translate" on parse: the same test
# F1 per step with 8 heads at half the width, and 2.5x faster steps (docs/datasets.md).
PRESETS = {
    "parse": TransformerConfig(vocab_size=190, d_model=64, h=8, N=2, d_ff=256, P_drop=0.1, eps_ls=0.1, max_len=128),
    # The same with one layer (N = 1) in each stack: cheaper steps, so more of them fit in the same
    # time (the `parse` task's default; docs/datasets.md, "A faster recipe").
    "parse-1layer": TransformerConfig(vocab_size=190, d_model=64, h=8, N=1, d_ff=256, P_drop=0.1, eps_ls=0.1,
                                      max_len=128),
}

# Table 4's recipe, both tasks' default until 2026-12-05 and parse-large's still (measured:
# lessons/experiments/parse_table4.py; docs/datasets.md, "Where the recipe stands"). 10,000 steps:
# at 5,000 (on 4,000 trees) seed 0's test F1 was 7.6 points under the F1 of the grammar's most
# probable tree. The last checkpoints of one run differ by up to 3.8 F1 points (seed 0, 8,000 trees:
# 91.49 at step 9,000, 87.65 at step 10,000), so the run ends with §6.1's average of its last 5
# checkpoints, 500 steps apart (average.npz, scored beside the last step's checkpoint).
TABLE4_RECIPE = recipe("parse", steps=10000, batch_size=64, lr_factor=1.0, warmup_steps=400, clip_norm=1.0,
                       valid_every=1000, checkpoint_every=500, keep_last=5, average_last=5)
# Table 4's record (lessons/experiments/parse_table4.py, lesson 15) was trained with that recipe, and
# parse_table4.py reads it from here, so a change of the tasks' default leaves the record's runs as they were.

# The `parse` task's default since 2026-12-05: Table 4's recipe with one layer a stack instead of two,
# 9,500 steps in batches of one length (§5.1), one validation at the end. It reaches Table 4's mean F1
# in about half of its time (lessons/experiments/task_recipe_search.py, candidate
# "parse-bylen-N1-noam9500"; docs/datasets.md, "A faster recipe"). Under 1/sqrt(step) the last
# checkpoints still scatter, and §6.1's average of the last 5 (475 steps apart) gathers them.
PARSE_RECIPE = recipe("parse-1layer", steps=9500, batch_size=64, batch_by_length=True, lr_factor=1.0,
                      warmup_steps=400, clip_norm=1.0, valid_every=9500, checkpoint_every=475, keep_last=5,
                      average_last=5)


def parse_text_splits(n_train: int):
    """seed -> {"train", "valid", "test"}: (sentence, linearized tree) text pairs from ``pcfg.parse_splits``."""
    def splits(seed: int) -> dict:
        parts = pcfg.parse_splits(n_train, seed)
        return {name: [(" ".join(e.words), " ".join(linearize(e.tree, words=True))) for e in examples]
                for name, examples in zip(("train", "valid", "test"), parts)}
    return splits


def _vocab(train):
    return pcfg.parse_vocab()          # every word of the grammar, whether the training split drew it or not


# -- the hooks ------------------------------------------------------------------------------

def without_tags(tree: Tree) -> str:
    """A bracket string with each ``(XX word)`` written as the bare word: ``(S (NP Alice) (VP slept))``.
    A bracket inside a word is written as ``str(tree)`` writes it (``trees.escape_word``: ``-LRB-``, ``-RRB-``),
    so the words ``( ) ) (`` print as ``(S -LRB- -RRB- -RRB- -LRB-)`` and ``parse_tree`` reads the line back."""
    parts = []
    for child in tree.children:
        if isinstance(child, str):
            parts.append(escape_word(child))
        elif child.is_preterminal() and child.label == XX:
            parts.append(escape_word(child.children[0]))
        else:
            parts.append(without_tags(child))
    return f"({tree.label} {' '.join(parts)})"


def render_tree(source: str, output: str) -> str:
    """What ``translate`` prints for one sentence: the decoded tokens read back into a tree over
    the source's words (repaired by ``read_linearized``'s rule if ill-formed), written without the XX tags."""
    return without_tags(read_linearized(output.split(), source.split()).tree)


def tree_scores(sources: Sequence[str], hyps: Sequence[str], refs: Sequence[str]) -> dict[str, float]:
    """Bracket F1 (evalb, COLLINS.prm), precision, recall, exact trees and ill-formed outputs, in percent;
    then, when every sentence is one the grammar can parse, the two references (``reference_scores``).

    sources: the sentences; hyps, refs: decoded and reference linearized trees (text).
    A reference that is not a well-formed linearized tree of its sentence is a
    ValueError naming it: a score against a repaired reference would mean nothing.
    """
    if not len(sources) == len(hyps) == len(refs):
        raise ValueError(f"tree_scores: {len(sources)} sources, {len(hyps)} outputs and {len(refs)} references")
    gold, test, ill = [], [], []
    for i, (src, hyp, ref) in enumerate(zip(sources, hyps, refs)):
        words = src.split()
        read_ref = read_linearized(ref.split(), words)
        if read_ref.ill_formed:
            raise ValueError(f"reference {i + 1} is not a well-formed tree of its {len(words)} words "
                             f"({read_ref.repairs[0]}): {ref!r}")
        read_hyp = read_linearized(hyp.split(), words)
        gold.append(read_ref.tree)
        test.append(read_hyp.tree)
        ill.append(read_hyp.ill_formed)
    s = bracket_f1(gold, test, ill)
    scores = {"bracket F1": s.f1, "precision": s.precision, "recall": s.recall, "exact trees %": s.exact,
              "ill-formed %": s.ill_formed}
    references = reference_scores([src.split() for src in sources], gold)
    if references is not None:
        most_probable, max_expected = references
        scores.update({"F1 of the most probable tree": most_probable, "F1 of the max-expected-F1 parse": max_expected,
                       "points under the better": max(most_probable, max_expected) - s.f1})
    return scores


def reference_scores(sentences: Sequence[Sequence[str]], gold: Sequence[Tree],
                     grammar: pcfg.Grammar = pcfg.GRAMMAR) -> tuple[float, float] | None:
    """(F1 of the most probable tree, F1 of the max-expected-F1 parse) of ``grammar`` on the sentences,
    against ``gold``: what the grammar that made the treebank would answer itself (``cky.ViterbiParser``,
    ``posterior.PosteriorParser.parse_corpus``). Neither is a ceiling in the strict sense, but a trained
    parser is read against the better of the two (lesson 15). None when a sentence has a word the grammar
    lacks or no tree under it (a treebank from elsewhere): then there is nothing to compare with."""
    known = set(grammar.words)
    if not sentences or any(w not in known for words in sentences for w in words):
        return None
    viterbi_parser = ViterbiParser(grammar)
    viterbi = [viterbi_parser.parse(words) for words in sentences]
    if any(parse is None for parse in viterbi):
        return None
    best = PosteriorParser(grammar).parse_corpus(sentences)
    return bracket_f1(gold, [p.tree for p in viterbi]).f1, bracket_f1(gold, best.trees).f1


def _entry(name: str, size: str, what: str, default: Recipe) -> Task:
    n = pcfg.SIZES[size]
    return Task(name, f"parsing (§6.3): sentence -> linearized tree, {n:,} trees of a 25-rule PCFG ({what})",
                default, parse_text_splits(n), "space", "space", vocab=_vocab, bleu_tokenize="none",
                render=render_tree, scores=tree_scores, max_output_len=PARSE_MAX_OUTPUT,
                phrasing="sentences of the grammar's words, 1 to 20 of them, no punctuation: 'Alice saw the dog'",
                source="generated by the package (data/pcfg.py)")


TASKS = [
    _entry("parse", "small", "the 'WSJ only' analogue", PARSE_RECIPE),
    # One layer was measured on the small set only, so the large one keeps Table 4's recipe.
    _entry("parse-large", "large", "10x parse, the 'semi-supervised' analogue", TABLE4_RECIPE),
]
