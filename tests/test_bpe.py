"""Byte-pair encoding (minitransformer/data/bpe.py): proven equal to the reference, subword-nmt 0.3.8.

* merges: ours == ``subword-nmt learn-bpe -s N``, line for line, on every named task's training
  text (both columns: the joint vocabulary), the copy task's text, a TSV the test writes, and a
  text built to have ties and rare characters; the efficient learner == the recounting one;
* applying: ours == ``subword-nmt apply-bpe`` (its Python class, and its command line);
* properties (hypothesis): the exact text comes back, no piece spans two words, the vocabulary
  is the specials + the initial symbols + one symbol per merge;
* codes files and refused text: named errors with file:line.

The reference tests skip, saying so, when subword-nmt 0.3.8 is not installed (it is in the [dev] extra).

Why an exact "most frequent pair" gives the reference's merges although subword-nmt, for
speed, drops rare pairs from its statistics and brings them back when the best pair falls
below a threshold: that shortcut is exact as long as a pair's frequency never rises after
the merge that creates it, which holds when every merge makes a symbol that did not exist
before. The vocabulary test below checks that on random corpora (each merge adds one symbol).
"""

from __future__ import annotations

import contextlib
import doctest
import importlib.metadata
import io
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minitransformer.data import bpe as bpe_module
from minitransformer.data.bpe import (
    BPE,
    CODES_HEADER,
    END,
    BPEError,
    BPETextError,
    CodesFileError,
    detokenize,
    initial_symbols,
    learn_bpe,
    learn_bpe_by_recounting,
    read_codes,
    unapply,
    word_counts,
    write_codes,
)
from minitransformer.data.bpe_learn import _merge_in_word
from minitransformer.data.tasks import copy_pairs
from minitransformer.data.tsv import load_tsv, write_tsv
from minitransformer.data.vocab import SPECIALS, Vocab

REFERENCE_VERSION = "0.3.8"
try:
    _installed = importlib.metadata.version("subword-nmt")
except importlib.metadata.PackageNotFoundError:
    _installed = None
needs_reference = pytest.mark.skipif(
    _installed != REFERENCE_VERSION,
    reason=f"the reference BPE, subword-nmt=={REFERENCE_VERSION}, is not installed (pip install -e '.[dev]')"
    if _installed is None else f"subword-nmt {_installed} is installed; these tests compare with {REFERENCE_VERSION}")

PROFILE = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- the reference, through its Python API and its command line --------------------------

def reference_merges(lines: list[str], num_merges: int, min_frequency: int = 2) -> list[tuple[str, str]]:
    """subword-nmt's learn_bpe on ``lines``: the merges of the codes file it writes."""
    from subword_nmt.learn_bpe import learn_bpe as reference_learn

    codes = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):       # it reports "no pair has frequency >= 2. Stopping"
        reference_learn(io.StringIO("".join(line + "\n" for line in lines)), codes, num_merges, min_frequency)
    header, *body = codes.getvalue().splitlines()
    assert header == CODES_HEADER
    return [tuple(line.split(" ")) for line in body]


def reference_apply(merges, lines: list[str]) -> list[str]:
    """subword-nmt's apply-bpe (its BPE class, process_line) on ``lines``, with our merges."""
    from subword_nmt.apply_bpe import BPE as ReferenceBPE

    codes = io.StringIO(CODES_HEADER + "\n" + "".join(f"{a} {b}\n" for a, b in merges))
    reference = ReferenceBPE(codes)
    return [reference.process_line(line) for line in lines]


def reference_cli(*args: str, stdin: str | None = None) -> str:
    """The ``subword-nmt`` command (its console entry point, run in a fresh interpreter)."""
    code = "import sys; from subword_nmt.subword_nmt import main; sys.argv[0] = 'subword-nmt'; main()"
    done = subprocess.run([sys.executable, "-c", code, *args], input=stdin, capture_output=True, text=True,
                          encoding="utf-8", check=True)
    return done.stdout


def first_difference(ours, theirs) -> str:
    k = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return (f"{len(ours)} merges vs the reference's {len(theirs)}; first difference at line {k + 2} of the codes "
            f"file: ours {ours[k:k + 1]}, reference {theirs[k:k + 1]}")


# -- the corpora ---------------------------------------------------------------------------

def task_text(name: str) -> tuple[list[str], list[str]]:
    """(training lines, held-out lines) of a named task: source and target columns together."""
    from minitransformer.data.translation import load_splits

    splits = load_splits(name, seed=0)
    return ([side for pair in splits["train"] for side in pair],
            [side for pair in splits["test"] for side in pair])


def copy_task_text() -> list[str]:
    """The copy task's text: its symbols ("0".."9", "s10".."s19") as words, and the digit
    sequences written as one word each (random strings over ten characters: many ties)."""
    pairs = copy_pairs(400, np.random.default_rng(0), n_symbols=20, min_len=1, max_len=12)
    as_words = [" ".join(side) for pair in pairs for side in pair]
    digits = ["".join(t for t in src if len(t) == 1) or "0" for src, _ in pairs]
    return as_words + [" ".join(digits[i:i + 5]) for i in range(0, len(digits), 5)]


# Characters chosen to trip an implementation up: the pieces of "</w>" (tie-breaks compare symbols
# with the marker), regular-expression and replacement metacharacters (the reference merges with
# re.sub), "@" (the continuation marker), combining accents, a zero-width joiner, Hangul, and
# characters outside the Basic Multilingual Plane.
RARE = ["<", "/", "w", ">", "\\", "\\1", "\\g<0>", "$", ".", "*", "(", ")", "[", "]", "|", "^", "?", "+",
        "@", "e\u0301", "\u200d", "한", "국", "😀", "𝔘", "ß", "İ", "ǅ"]


def ties_text() -> list[str]:
    """Words repeated equally often (every pair of letters ties with others at each count), rare
    characters once or twice each, and words that are one character (nothing to merge)."""
    lines = []
    for count, words in ((3, ["ab", "ba", "abab", "baba"]), (2, ["xyz", "zyx", "yzx", "q"]), (1, ["aa", "aaa"])):
        lines += [" ".join(words)] * count
    lines += [f"{a}{b}x x{a}{b} {a}" for a, b in zip(RARE, RARE[1:])]
    lines += ["w<w</ww>w>" + ch for ch in "abc"]
    lines += ["@@x x@@y @x@ <//w>"] * 2
    return lines


def tsv_corpus(tmp_path) -> tuple[str, list[str]]:
    """A TSV file written by the test (English and Spanish/Italian number names, some repeated,
    plus a few rare characters); returns its path and both of its columns as lines."""
    from num2words import num2words

    pairs = [(num2words(n, lang="en"), num2words(n, lang="es" if n % 2 else "it")) for n in range(0, 3000, 7)]
    pairs += [(f"{a}x{b}", f"{b}y{a}") for a, b in zip(RARE[::2], RARE[1::2])]
    path = tmp_path / "pairs.tsv"
    write_tsv(path, pairs)
    return str(path), [side for pair in load_tsv(path) for side in pair]


# -- merges equal to the reference's ---------------------------------------------------------

FAST_TASKS = [("numbers-en-fr", 400), ("dates-en-de", 400), ("dates-en-ko", 400),
              ("emoji-en-fr", 200), ("emoji-en-de", 200), ("emoji-en-ko", 200)]


@needs_reference
@pytest.mark.parametrize("name, num_merges", FAST_TASKS)
def test_merges_equal_the_reference_on_each_task(name, num_merges):
    lines, _ = task_text(name)
    ours = learn_bpe(lines, num_merges)
    theirs = reference_merges(lines, num_merges)
    assert ours == theirs, f"{name}: {first_difference(ours, theirs)}"
    assert len(ours) >= 200, "too few merges to prove anything"


@needs_reference
@pytest.mark.slow
@pytest.mark.parametrize("min_frequency", [2, 1])
@pytest.mark.parametrize("name", ["numbers-en-fr", "numbers-en-de", "dates-en-de", "dates-en-ko",
                                  "emoji-en-fr", "emoji-en-de", "emoji-en-ko"])
def test_merges_equal_the_reference_on_each_task_up_to_8000_merges(name, min_frequency):
    lines, _ = task_text(name)
    ours = learn_bpe(lines, 8000, min_frequency)
    theirs = reference_merges(lines, 8000, min_frequency)
    assert ours == theirs, f"{name}: {first_difference(ours, theirs)}"


@needs_reference
@pytest.mark.parametrize("min_frequency", [1, 2, 3])
def test_merges_equal_the_reference_on_the_copy_task_and_a_text_of_ties(min_frequency):
    for what, lines in (("copy task", copy_task_text()), ("ties and rare characters", ties_text())):
        ours = learn_bpe(lines, 2000, min_frequency)
        theirs = reference_merges(lines, 2000, min_frequency)
        assert ours == theirs, f"{what}, min_frequency {min_frequency}: {first_difference(ours, theirs)}"
        assert ours, what


def test_the_tie_break_is_the_greatest_pair():
    # Every pair of "ab ba" occurs twice; subword-nmt takes the greatest (first, second):
    # ('b', 'a</w>') > ('a', 'b</w>'). Then ('a', 'b</w>') is the only one left.
    assert learn_bpe(["ab ba", "ab ba"], 10) == [("b", "a</w>"), ("a", "b</w>")]
    # ('z', 'y</w>'), ('z', 'y') and ('y', 'x</w>') occur twice each; "y</w>" > "y" as strings
    # (a string sorts after its own beginning), so the word-final pair wins the tie.
    assert learn_bpe(["zy zyx", "zy zyx"], 1) == [("z", "y</w>")]


@needs_reference
def test_the_command_line_reference_agrees_on_a_tsv_file(tmp_path):
    """``subword-nmt learn-bpe -s N`` and ``apply-bpe -c codes`` run as commands, on a TSV the
    test wrote (both columns: a joint vocabulary): the codes files are byte for byte ours, and
    so is the segmented text."""
    path, lines = tsv_corpus(tmp_path)
    text = "".join(line + "\n" for line in lines)
    (tmp_path / "both.txt").write_text(text, encoding="utf-8")
    for num_merges in (600,):
        theirs = reference_cli("learn-bpe", "-s", str(num_merges), "-i", str(tmp_path / "both.txt"))
        ours_path = tmp_path / f"ours{num_merges}.bpe"
        write_codes(ours_path, learn_bpe(lines, num_merges))
        assert ours_path.read_text(encoding="utf-8") == theirs, f"{num_merges} merges: the codes files differ"
        applied = reference_cli("apply-bpe", "-c", str(ours_path), stdin=text)
        bpe = BPE(read_codes(ours_path))
        assert applied == "".join(bpe.apply(line) + "\n" for line in lines)
        assert [unapply(line) for line in applied.splitlines()] == lines


# -- the efficient learner and the recounting one -----------------------------------------------

def test_the_efficient_learner_equals_the_recounting_one_on_task_text():
    for name, num_merges in (("emoji-en-ko", 60), ("dates-en-de", 400)):
        lines, _ = task_text(name)
        counts = word_counts(lines)
        assert learn_bpe(counts, num_merges) == learn_bpe_by_recounting(counts, num_merges), name
    for lines in (copy_task_text(), ties_text()):
        assert learn_bpe(lines, 500, 1) == learn_bpe_by_recounting(lines, 500, 1)


words = st.text(alphabet="abcé한<>/w@", min_size=1, max_size=10).filter(
    lambda w: END not in w and not w.endswith("@@"))
corpora = st.dictionaries(words, st.integers(1, 40), min_size=1, max_size=25)


@PROFILE
@given(counts=corpora, num_merges=st.integers(0, 80), min_frequency=st.integers(1, 4))
def test_the_efficient_learner_equals_the_recounting_one(counts, num_merges, min_frequency):
    assert learn_bpe(counts, num_merges, min_frequency) == learn_bpe_by_recounting(counts, num_merges, min_frequency)


@needs_reference
@PROFILE
@given(counts=corpora, num_merges=st.integers(1, 80), min_frequency=st.integers(1, 3))
def test_the_merges_equal_the_reference_on_random_corpora(counts, num_merges, min_frequency):
    lines = [" ".join([word] * count) for word, count in counts.items()]
    if all(len(word) == 1 for word in counts):
        return                                           # no pair at all: subword-nmt fails on max() of nothing
    assert learn_bpe(lines, num_merges, min_frequency) == reference_merges(lines, num_merges, min_frequency)


@PROFILE
@given(old=st.lists(st.sampled_from(["a", "b", "ab", "c"]), min_size=1, max_size=12),
       pair=st.sampled_from([("a", "b"), ("a", "a"), ("b", "a"), ("ab", "ab"), ("ab", "c")]),
       weight=st.integers(1, 5))
def test_one_merge_moves_the_pair_frequencies_exactly(old, pair, weight):
    """The incremental update of one word == recounting its pairs before and after."""
    first, second = pair
    change, new_pairs = Counter(), []
    new = _merge_in_word(list(old), first, second, first + second, weight, change, new_pairs)
    recounted = Counter(zip(new, new[1:]))
    recounted.subtract(Counter(zip(old, old[1:])))
    assert {p: d for p, d in change.items() if d} == {p: weight * d for p, d in recounted.items() if d}
    # new_pairs: the pairs made at the merge sites (a pair with the merged symbol that the word
    # already had, which real learning never produces, need not be listed again)
    with_merged = {p for p in zip(new, new[1:]) if first + second in p}
    assert with_merged - set(zip(old, old[1:])) <= set(new_pairs) <= with_merged
    assert new == bpe_module._merge_symbols(old, first, second, first + second)


# -- applying, equal to the reference's ------------------------------------------------------------

@needs_reference
@pytest.mark.parametrize("name", ["numbers-en-fr", "dates-en-ko", "emoji-en-de"])
def test_apply_equals_the_reference_on_training_and_held_out_text(name):
    lines, held_out = task_text(name)
    merges = learn_bpe(lines, 300)
    sample = lines[:500] + held_out[:500]                # held-out text has words, and characters, never seen
    odd = ["  leading and trailing  ", "two  spaces", "", "   ", "x\n", "y \r\n"]
    assert [BPE(merges).apply(line) for line in sample + odd] == reference_apply(merges, sample + odd)


@needs_reference
def test_apply_equals_the_reference_on_the_copy_task_and_the_text_of_ties():
    for lines in (copy_task_text(), ties_text()):
        for num_merges in (5, 40, 400):
            merges = learn_bpe(lines, num_merges, 1)
            assert [BPE(merges).apply(line) for line in lines] == reference_apply(merges, lines)


@needs_reference
def test_apply_takes_the_first_of_a_repeated_merge_like_the_reference():
    merges = [("a", "b"), ("b", "c</w>"), ("a", "b"), ("ab", "c</w>")]
    lines = ["abc abcabc bc ab"]
    assert [BPE(merges).apply(line) for line in lines] == reference_apply(merges, lines)


# -- properties ----------------------------------------------------------------------------

text_words = st.text(alphabet="abcdeé한😀<>/w@\\", min_size=1, max_size=8).filter(
    lambda w: END not in w and not w.endswith("@@"))
lines_of_words = st.lists(text_words, min_size=0, max_size=6).map(" ".join)


@PROFILE
@given(corpus=st.lists(lines_of_words, min_size=1, max_size=12), probe=lines_of_words,
       num_merges=st.integers(0, 60), min_frequency=st.integers(1, 3))
def test_the_exact_text_comes_back_and_no_piece_spans_two_words(corpus, probe, num_merges, min_frequency):
    bpe = BPE.learn(corpus, num_merges, min_frequency)
    for line in [*corpus, probe]:                        # the probe has characters never seen in learning
        tokens = bpe.tokens(line)
        assert detokenize(tokens) == line
        assert unapply(bpe.apply(line)) == line
        # Group the pieces into words: a word ends at a piece without "@@". One group per word.
        groups, current = [], []
        for tok in tokens:
            current.append(tok.removesuffix("@@"))
            if not tok.endswith("@@"):
                groups.append("".join(current))
                current = []
        assert not current and groups == line.split(" ") if line else groups == []
    for first, second in bpe.merges:                     # no merge joins a word's end to anything
        assert END not in first and (END not in second or second.endswith(END))


@PROFILE
@given(corpus=st.lists(lines_of_words, min_size=1, max_size=12), num_merges=st.integers(0, 60),
       min_frequency=st.integers(1, 3))
def test_the_vocabulary_is_specials_plus_symbols_plus_merges(corpus, num_merges, min_frequency):
    """Symbols: the characters seen inside a word ("a", written "a@@" as a token) and the characters
    seen at a word's end ("a</w>", written "a"), counted apart. Each merge adds one symbol."""
    counts = word_counts(corpus)
    bpe = BPE.learn(counts, num_merges, min_frequency)
    internal = {ch for word in counts for ch in word[:-1]}
    final = {word[-1] for word in counts}
    assert len(initial_symbols(counts)) == len(internal) + len(final)
    vocab = Vocab(bpe.vocabulary())
    assert len(vocab) == len(SPECIALS) + len(internal) + len(final) + len(bpe.merges)
    # and it holds every piece of the learning text: the model never sees <unk> on its training data
    assert all(tok in vocab for line in corpus for tok in bpe.tokens(line))


def test_on_the_real_task_text_the_vocabulary_is_specials_plus_symbols_plus_merges():
    lines, held_out = task_text("emoji-en-ko")
    bpe = BPE.learn(lines, 1000)
    vocab = Vocab(bpe.vocabulary())
    assert len(vocab) == len(SPECIALS) + len(initial_symbols(word_counts(lines))) + 1000
    assert not bpe.unknown(tok for line in lines for tok in bpe.tokens(line))
    assert bpe.unknown(tok for line in held_out for tok in bpe.tokens(line))  # unseen Hangul syllables
    assert all(detokenize(bpe.tokens(line)) == line for line in held_out)


# -- characters never seen in learning ---------------------------------------------------------

def test_an_unseen_character_becomes_a_piece_of_its_own_and_comes_back():
    bpe = BPE.learn(["lower lowest", "lower newer"], 20)
    tokens = bpe.tokens("zlower løwer")
    assert tokens[0] == "z@@" and "ø@@" in tokens
    assert detokenize(tokens) == "zlower løwer"
    assert bpe.unknown(tokens) == ["z@@", "ø@@"]
    # "t" is seen only at the end of a word, so "t" inside a word is a piece the vocabulary lacks
    assert bpe.unknown(bpe.tokens("lotter")) == ["t@@"]
    with pytest.raises(BPEError, match="initial symbols"):
        BPE(bpe.merges).vocabulary()


# -- codes files ------------------------------------------------------------------------------

def test_codes_files_round_trip_and_match_the_format(tmp_path):
    merges = learn_bpe(ties_text(), 100, 1)
    path = tmp_path / "codes.bpe"
    write_codes(path, merges)
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == "#version: 0.2" and text.endswith("\n")
    assert text.splitlines()[1:] == [f"{a} {b}" for a, b in merges]
    assert read_codes(path) == merges
    assert not list(tmp_path.glob(".*partial")), "written atomically: no temporary file is left"
    (tmp_path / "crlf.bpe").write_bytes(text.replace("\n", "\r\n").encode() + b"\r\n\n")
    assert read_codes(tmp_path / "crlf.bpe") == merges


@pytest.mark.parametrize("content, message", [
    ("", r"codes.bpe:1: expected the header '#version: 0.2'"),
    ("a b\nc d\n", r"codes.bpe:1: expected the header .*version 0.1"),
    ("#version: 0.2\na b\n\nc d\n", r"codes.bpe:3: an empty line"),
    ("#version: 0.2\na b\nc\n", r"codes.bpe:3: 1 space-separated parts"),
    ("#version: 0.2\na b c\n", r"codes.bpe:2: 3 space-separated parts"),
    ("#version: 0.2\na  b\n", r"codes.bpe:2: 3 space-separated parts"),
    ("#version: 0.2\na</w> b\n", r"codes.bpe:2: .* first symbol contains '</w>'"),
    ("#version: 0.2\na b</w>c\n", r"codes.bpe:2: .* may only end the second symbol"),
    ("#version: 0.2\na </w>\n", r"codes.bpe:2: .* other than '</w>'"),
    ("#version: 0.2\na\tb c\n", r"codes.bpe:2: .* contains whitespace '\\t'"),
])
def test_a_bad_codes_file_is_refused_naming_the_line(tmp_path, content, message):
    path = tmp_path / "codes.bpe"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CodesFileError, match=message):
        read_codes(path)


def test_a_codes_file_that_is_not_utf8_or_not_there(tmp_path):
    path = tmp_path / "codes.bpe"
    path.write_bytes(b"#version: 0.2\na b\n\xff b\n")
    with pytest.raises(CodesFileError, match=r"codes.bpe:3: not valid UTF-8"):
        read_codes(path)
    with pytest.raises(FileNotFoundError, match="BPE codes file not found"):
        read_codes(tmp_path / "missing.bpe")
    with pytest.raises(IsADirectoryError, match="not a BPE codes file"):
        read_codes(tmp_path)


def test_bad_merges_are_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "codes.bpe"
    with pytest.raises(BPEError, match="merge 1: a merge must be a pair"):
        write_codes(path, [("a", "b"), ("c",)])
    with pytest.raises(BPEError, match="merge 0: .* contains whitespace"):
        BPE([("a b", "c")])
    assert not path.exists()


# -- text that would not come back: refused, naming the line and the word ---------------------

@pytest.mark.parametrize("line, message", [
    ("tab\there", r"text.txt:2: word 'tab\\there' contains the whitespace character '\\t' \(U\+0009\)"),
    ("no\u00a0break", r"text.txt:2: word .* contains the whitespace character '\\xa0' \(U\+00A0\)"),
    ("a</w>b", r"text.txt:2: word 'a</w>b' contains '</w>'"),
    ("ends@@ here", r"text.txt:2: word 'ends@@' ends in '@@'"),
    ("line\u2028separator", r"U\+2028"),
])
def test_text_bpe_cannot_restore_is_refused(line, message):
    with pytest.raises(BPETextError, match=message):
        word_counts(["fine line", line], source="text.txt")
    bpe = BPE([("a", "b")])
    for call in (bpe.tokens, bpe.apply):
        with pytest.raises(BPETextError):
            call(line)


def test_tokens_refuses_spacing_that_would_not_come_back():
    bpe = BPE([("a", "b</w>")])
    for line in (" ab", "ab ", "ab  ab"):
        with pytest.raises(BPETextError, match="spaces at an end or several in a row"):
            bpe.tokens(line, where="pairs.tsv:4: ")
    for line in ("ab\n", "ab\r\n", "a\nb"):
        with pytest.raises(BPETextError, match=r"pairs.tsv:4: word .* contains the whitespace character '\\[nr]'"):
            bpe.tokens(line, where="pairs.tsv:4: ")
    assert bpe.tokens("") == [] and detokenize([]) == ""
    assert bpe.apply("ab  ab") == "ab ab"                # apply follows the reference: one space


def test_bad_arguments_are_named():
    with pytest.raises(BPEError, match="num_merges must be an integer >= 0, got -1"):
        learn_bpe(["ab"], -1)
    with pytest.raises(BPEError, match="min_frequency must be an integer >= 1, got 0"):
        learn_bpe(["ab"], 5, min_frequency=0)
    with pytest.raises(BPEError, match="the count of word 'ab' must be an integer >= 1"):
        learn_bpe({"ab": 0}, 5)
    with pytest.raises(TypeError, match="got one str"):
        learn_bpe("ab ab", 5)
    with pytest.raises(TypeError, match="got one str"):
        detokenize("ab@@ c")
    assert learn_bpe(["a b c"], 10) == [] and learn_bpe([], 10) == []


def test_the_module_examples_run():
    result = doctest.testmod(bpe_module)
    assert result.attempted >= 5 and result.failed == 0
