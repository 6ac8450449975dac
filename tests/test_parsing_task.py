"""The parse tasks (§6.3) and the task hooks they use: render, scores, max_output_len.

The hooks are generic (``loading.Task``); the parse entries are the tasks that
define them. A tiny model trained for two steps is enough to check that
``translate`` prints trees and ``evaluate`` prints bracket F1: what is checked
is the route from the checkpoint to the hook, not the model's quality.
"""

import contextlib
import dataclasses
import io
import pathlib

import numpy as np
import pytest

from minitransformer.__main__ import main
from minitransformer.checkpoint import load_checkpoint
from minitransformer.cli.scoring import report as _report
from minitransformer.data import parsing, pcfg
from minitransformer.data.evalb import bracket_f1
from minitransformer.data.loading import Task, TaskData
from minitransformer.data.registry import PRESETS, TASKS, get_task, load_task, saved_task
from minitransformer.data.tasks import synthetic_vocab
from minitransformer.data.trees import linearize, parse_tree, read_linearized, right_branching
from minitransformer.decoding import GREEDY
from minitransformer.model import Transformer
from minitransformer.runsetup import make_trainer, settings_for
from minitransformer.settings import recipe

TREE = parse_tree("(S (NP (NNP Alice)) (VP (VT saw) (NP (DT the) (NN dog)) (PP (IN with) (NP (DT a) (NN hat)))))")
SENTENCE = " ".join(TREE.words())
TARGET = " ".join(linearize(TREE, words=True))   # the task's target: the words in place of XX


# -- the entries ----------------------------------------------------------------------------

def test_both_parse_tasks_are_registered_with_their_hooks_and_a_known_preset():
    for name, size in (("parse", "small"), ("parse-large", "large")):
        task = get_task(name)
        assert task.recipe.preset in PRESETS
        assert task.render is parsing.render_tree and task.scores is parsing.tree_scores
        assert task.max_output_len == parsing.PARSE_MAX_OUTPUT
        assert f"{pcfg.SIZES[size]:,} trees" in task.description
    assert list(TASKS)[-2:] == ["parse", "parse-large"]


@pytest.fixture(scope="module")
def parse_task():
    """The parse task of seed 0 (sampling its 5,500 trees takes seconds: the tests using it are slow)."""
    return load_task("parse", seed=0)


@pytest.mark.slow
def test_the_parse_task_is_the_treebank_of_parse_splits(parse_task):
    splits = pcfg.parse_splits(pcfg.SIZES["small"], 0)
    assert len(parse_task.train) == pcfg.SIZES["small"] and len(parse_task.test) == 1_000
    assert parse_task.test[0] == (splits.test[0].words, linearize(splits.test[0].tree, words=True))
    assert parse_task.train[-1] == (splits.train[-1].words, linearize(splits.train[-1].tree, words=True))
    assert parse_task.vocab == pcfg.parse_vocab()
    assert parse_task.entry is get_task("parse")
    assert (parse_task.src_level, parse_task.tgt_level) == ("space", "space")   # split on spaces: a bracket is a token of its own


@pytest.mark.slow
def test_parse_large_shares_valid_and_test_and_starts_with_parse():
    small = parsing.parse_text_splits(300)(5)
    large = parsing.parse_text_splits(900)(5)
    assert small["valid"] == large["valid"] and small["test"] == large["test"]
    assert large["train"][:300] == small["train"]


def test_the_output_limit_holds_the_longest_tree_the_grammar_can_give_a_20_word_sentence():
    """Every phrase has two or more children or is a unary over one tag (NP -> NNP), so a tree
    over n words has at most n + (n - 1) phrases: at most 5n - 2 target tokens, + <eos>."""
    grammar = pcfg.GRAMMAR
    assert all(len(r.rhs) >= 2 or r.rhs[0] in grammar.lexicon for r in grammar.rules)
    assert 5 * pcfg.MAX_WORDS - 2 + 1 <= parsing.PARSE_MAX_OUTPUT
    trees = pcfg.sample_treebank(500, np.random.default_rng(1))
    for tree in trees:
        n = len(tree.words())
        assert (len(linearize(tree)) - n) // 2 <= 2 * n - 1
    # §6.1's limit, input + 50 (the source's n words + <eos>), is too short for the longest trees.
    assert 5 * pcfg.MAX_WORDS - 2 + 1 > pcfg.MAX_WORDS + 1 + 50


# -- the hooks ------------------------------------------------------------------------------

def test_render_puts_the_words_back_in_place_of_xx():
    assert parsing.render_tree(SENTENCE, TARGET) == \
        "(S (NP Alice) (VP saw (NP the dog) (PP with (NP a hat))))"


def test_render_repairs_an_ill_formed_output_and_keeps_every_word():
    # Two brackets left open, one word missing: closed at the end, the missing word appended.
    shown = parsing.render_tree("Alice saw Bob", "(S (NP Alice )NP (VP saw")
    assert shown == "(S (NP Alice) (VP saw) Bob)"
    assert parse_tree(shown).words() == ["Alice", "saw", "Bob"]


def test_without_tags_writes_preterminals_other_than_xx_as_they_are():
    assert parsing.without_tags(TREE).startswith("(S (NP (NNP Alice))")
    assert parsing.without_tags(read_linearized(linearize(TREE), TREE.words()).tree).startswith("(S (NP Alice)")


def test_scores_are_evalb_bracket_f1_exact_trees_and_the_ill_formed_rate():
    perfect = parsing.tree_scores([SENTENCE], [TARGET], [TARGET])
    assert perfect == {"bracket F1": 100.0, "precision": 100.0, "recall": 100.0, "exact trees %": 100.0,
                       "ill-formed %": 0.0}
    # The PP attached to the object NP instead of the VP, and an output cut short.
    wrong = "(S (NP Alice )NP (VP saw (NP (NP the dog )NP (PP with (NP a hat )NP )PP )NP )VP )S"
    ill = "(S (NP XX )NP (VP XX (NP XX XX )NP"                  # XX leaves are read too
    got = parsing.tree_scores([SENTENCE] * 2, [wrong, ill], [TARGET] * 2)
    reads = [read_linearized(h.split(), SENTENCE.split()) for h in (wrong, ill)]
    expected = bracket_f1([TREE, TREE], [r.tree for r in reads], [r.ill_formed for r in reads])
    assert got["bracket F1"] == pytest.approx(expected.f1)
    assert got["exact trees %"] == 0.0 and got["ill-formed %"] == 50.0
    # By hand, the attachment error alone: gold has S, NP, VP, NP, PP, NP (6 brackets); the output has
    # those 6 and one more, NP over "the dog with a hat": precision 6/7, recall 6/6.
    alone = parsing.tree_scores([SENTENCE], [wrong], [TARGET])
    assert alone["precision"] == pytest.approx(100 * 6 / 7) and alone["recall"] == 100.0


def test_scores_refuse_a_reference_that_is_not_a_tree():
    with pytest.raises(ValueError, match=r"reference 2 is not a well-formed tree of its 7 words \(step 4"):
        parsing.tree_scores([SENTENCE] * 2, [TARGET] * 2, [TARGET, "(S (NP Alice )NP (VP saw the dog with a hat"])
    with pytest.raises(ValueError, match=r"reference 1 .*\(step 8"):
        parsing.tree_scores([SENTENCE], [TARGET], [TARGET.replace("Alice", "Bob")])
    with pytest.raises(ValueError, match="2 sources, 1 outputs and 2 references"):
        parsing.tree_scores([SENTENCE] * 2, [TARGET], [TARGET] * 2)


def test_hooks_are_checked_when_an_entry_is_made():
    with pytest.raises(TypeError, match="render must be a function or None"):
        Task("t", "a task", recipe("copy"), lambda seed: {}, render="no")
    with pytest.raises(TypeError, match="scores must be a function or None"):
        Task("t", "a task", recipe("copy"), lambda seed: {}, scores=3)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="max_output_len must be an integer >= 1 or None"):
            Task("t", "a task", recipe("copy"), lambda seed: {}, max_output_len=bad)


def test_saved_task_finds_the_entry_of_a_checkpoint_or_none():
    assert saved_task({"task": "parse"}) is get_task("parse")
    for extra in ({}, {"task": None}, {"task": "no-such-task"}, {"task": 3}, None):
        assert saved_task(extra) is None


def _toy(entry: Task | None) -> TaskData:
    pairs = [(["1", "2"], ["1", "2"]), (["3"], ["3"])]
    return TaskData("toy", synthetic_vocab(10), pairs, pairs, pairs, bleu_tokenize="none", entry=entry)


def test_report_prints_a_tasks_own_scores_instead_of_bleu_and_renders_its_samples():
    """The generic route, with a made-up task: no scores hook, BLEU; a hook, its scores and its rendering."""
    calls = []

    def scores(sources, hyps, refs):
        calls.append((list(sources), list(hyps), list(refs)))
        return {"my score": 12.5}

    base = dataclasses.replace(TASKS["copy"], render=lambda src, out: f"<{src}|{out}>", scores=scores,
                               max_output_len=3)
    model = Transformer(PRESETS["tiny"].with_(vocab_size=14), seed=0)
    plain, hooked = io.StringIO(), io.StringIO()
    _report(model, _toy(None), _toy(None).vocab, _toy(None).test, [GREEDY], n_samples=1, stream=plain)
    results = _report(model, _toy(base), _toy(base).vocab, _toy(base).test, [GREEDY], n_samples=1, stream=hooked)
    assert "BLEU" in plain.getvalue() and "my score" not in plain.getvalue()
    text = hooked.getvalue()
    assert "greedy: my score 12.50 (2 sentences)" in text and "BLEU" not in text
    assert "'1 2' -> '<1 2|" in text                         # the sample went through render
    assert calls[0][0] == ["1 2", "3"] and calls[0][2] == ["1 2", "3"]
    assert results["greedy"]["scores"] == {"my score": 12.5}
    assert all(len(h.split()) <= 3 for h in calls[0][1])      # max_output_len reached the decoder (<eos> in 3)


# -- through the command line, on a parser trained for two steps -----------------------------

def _small_parse_data(n_train: int, entry=None) -> TaskData:
    """A few parse pairs from the grammar (quick to make), tokenized as the parse task does."""
    trees = pcfg.sample_treebank(n_train + 8, np.random.default_rng(4))
    pairs = [(t.words(), linearize(t, words=True)) for t in trees]
    return TaskData("parse", pcfg.parse_vocab(), pairs[:n_train], pairs[n_train:], pairs[n_train:], "space", "space",
                    bleu_tokenize="none", recipe=get_task("parse").recipe, entry=entry)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A parser of preset tiny trained for two steps on 64 trees: its outputs are nonsense, which
    is what the read-back and its repairs are for."""
    small = _small_parse_data(64, entry=get_task("parse"))
    _, settings = settings_for(small, steps=2, batch_size=32, valid_every=2)
    out = tmp_path_factory.mktemp("parse")
    trainer = make_trainer(small, settings, "tiny", str(out))
    batches = trainer.batches()
    for _ in range(2):
        trainer.train_step(next(batches))
    return pathlib.Path(trainer.save())


def test_the_checkpoint_knows_its_task(checkpoint):
    assert load_checkpoint(str(checkpoint)).extra["task"] == "parse"


def test_a_data_file_run_saves_no_task(tmp_path):
    data = dataclasses.replace(_small_parse_data(8), valid=[])
    _, settings = settings_for(data, steps=1, batch_size=8)
    trainer = make_trainer(data, settings, "tiny", str(tmp_path))
    assert trainer.task is None
    assert load_checkpoint(trainer.save()).extra["task"] is None


def test_translate_prints_a_tree_over_the_input_words(checkpoint, capsys):
    sentences = [SENTENCE, "Bob slept"]
    assert main(["translate", "--checkpoint", str(checkpoint), "--beam", "1", *sentences]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    for line, sentence in zip(lines, sentences):
        assert line.startswith("(") and "XX" not in line
        assert parse_tree(line).words() == sentence.split()


def test_evaluate_prints_bracket_f1_on_a_data_file(checkpoint, tmp_path):
    tsv = tmp_path / "trees.tsv"
    tsv.write_text(f"{SENTENCE}\t{TARGET}\nBob slept\t(S (NP Bob )NP (VP slept )VP )S\n", encoding="utf-8")
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["evaluate", "--checkpoint", str(checkpoint), "--data", str(tsv), "--beam", "1"]) == 0
    out = buffer.getvalue()
    assert "greedy: bracket F1 " in out and "(2 sentences)" in out and "BLEU" not in out
    assert "'Bob slept' -> '(S " in out                     # the samples are trees, through render


@pytest.mark.slow
def test_evaluate_prints_bracket_f1_on_a_task_split(checkpoint, capsys):
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--task", "parse", "--limit", "4", "--beam", "2",
                 "--samples", "1"]) == 0
    out = capsys.readouterr().out
    for decoder in ("greedy", "beam 2"):
        assert f"{decoder}: bracket F1 " in out and "ill-formed % " in out and "exact trees % " in out
    assert "BLEU" not in out


def test_translate_escapes_brackets_in_the_input_words_so_the_tree_is_never_ambiguous(checkpoint, capsys):
    """issue 36: "( ) ) (" printed "(S ( ) ) ()" and a tree given as input printed "(S (S (NP Alice) (VP saw)))",
    which reads as a real parse. A word's brackets are written -LRB- / -RRB- (the Penn Treebank's way), so the
    printed line reads back, by parse_tree, as a tree over exactly the words typed."""
    sentences = ["( ) ) (", "(S (NP Alice) (VP saw))"]
    assert main(["translate", "--checkpoint", str(checkpoint), "--beam", "1", *sentences]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    for line, sentence in zip(lines, sentences):
        tree = parse_tree(line)
        assert tree.words() == sentence.split(), line
        assert line.count("(") == line.count(")") == len(list(_brackets(tree))), line   # every bracket is structure
    assert "-LRB- -RRB- -RRB- -LRB-" in lines[0] and "-LRB-S" in lines[1]


def _brackets(tree):
    yield tree
    for child in tree.children:
        if not isinstance(child, str):
            yield from _brackets(child)


def test_scores_name_both_references_on_the_grammar_s_sentences():
    """On sentences of the grammar, the report adds what the grammar's own two parsers score on them (the most
    probable tree, the max-expected-F1 parse) and how far the model is under the better of the two."""
    pairs = parsing.parse_text_splits(0)(0)["test"][:60]
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    hyps = refs[:30] + [" ".join(linearize(right_branching(s.split()), words=True)) for s in sources[30:]]
    got = parsing.tree_scores(sources, hyps, refs)
    gold = [read_linearized(r.split(), s.split()).tree for s, r in zip(sources, refs)]
    most_probable, max_expected = parsing.reference_scores([s.split() for s in sources], gold)
    assert got["F1 of the most probable tree"] == most_probable
    assert got["F1 of the max-expected-F1 parse"] == max_expected
    assert got["points under the better"] == pytest.approx(max(most_probable, max_expected) - got["bracket F1"])
    assert 80 < most_probable <= 100 and 80 < max_expected <= 100
    # A sentence with a word the grammar lacks (SENTENCE has "a"): no references, the model's scores alone.
    assert "F1 of the most probable tree" not in parsing.tree_scores([SENTENCE], [TARGET], [TARGET])
