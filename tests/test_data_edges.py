"""Decoding and data edges (issue 11, item 11): a NaN model, empty sources, a line far longer
than the rest, a header row, duplicate pairs across splits, a real test split for --data,
and the characters and words the tokenizer reserves."""

from __future__ import annotations

import numpy as np
import pytest

from minitransformer.data.loading import split_pairs
from minitransformer.data.registry import load_task
from minitransformer.data.tsv import DataError, load_tsv, looks_like_header, read_tsv_rows
from minitransformer.data.vocab import SPACE, tokenize
from minitransformer.decoding import NonFiniteOutputError, beam_search, greedy_decode
from minitransformer.model import PRESETS, Transformer
from minitransformer.runsetup import build_model

# -- decoding -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def model():
    return Transformer(PRESETS["tiny"].with_(vocab_size=12))


@pytest.mark.parametrize("search", [greedy_decode, beam_search])
def test_a_model_that_outputs_nan_gets_a_named_error(search):
    broken = Transformer(PRESETS["tiny"].with_(vocab_size=12))
    broken.decoder.layers[0].ffn.linear2.b.data[0] = np.nan
    with pytest.raises(NonFiniteOutputError, match=r"scores at output position 0 are NaN for row 0 .*"
                                                   r"parameters are probably NaN or inf"):
        search(broken, np.array([[4, 5, 2]]), 1, 2)


@pytest.mark.parametrize("search", [greedy_decode, beam_search])
def test_a_source_of_length_zero_is_named(model, search):
    with pytest.raises(ValueError, match=r"src has no positions \(shape \(B, 0\)\)"):
        search(model, np.zeros((2, 0), dtype=np.int64), 1, 2)


@pytest.mark.parametrize("search", [greedy_decode, beam_search])
def test_an_all_padding_row_is_named(model, search):
    with pytest.raises(ValueError, match="source row 1 is all padding"):
        search(model, np.array([[4, 5, 2], [0, 0, 0]]), 1, 2)


@pytest.mark.parametrize("search", [greedy_decode, beam_search])
def test_an_empty_batch_decodes_to_nothing(model, search):
    assert search(model, np.zeros((0, 3), dtype=np.int64), 1, 2) == []


# -- TSV files ----------------------------------------------------------------------------------

def _tsv(tmp_path, lines, name="pairs.tsv"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


WORDS = "one two three four five six seven eight".split()
PAIRS = [f"{a} {b}\t{b} {a}" for a in WORDS for b in WORDS]          # 64 distinct pairs


def test_a_line_far_longer_than_the_rest_is_named(tmp_path):
    long_line = " ".join(["one"] * 5000) + "\tone"
    data = _tsv(tmp_path, PAIRS[:10] + [long_line] + PAIRS[10:])
    with pytest.raises(DataError, match=rf"{data}:11: the source has 5,000 word tokens, more than the limit of "
                                        r"256 \(--max-length\)"):
        load_task(data=data, level="word")
    task = load_task(data=data, level="word", max_length=5000)          # a higher limit accepts it
    assert max(len(s) for s, _ in task.train + task.valid + task.test) == 5000


def test_a_header_row_is_detected_and_header_skips_it(tmp_path):
    data = _tsv(tmp_path, ["source\ttarget"] + PAIRS)
    task = load_task(data=data, level="word")
    assert any("looks like a header row" in note and ":1:" in note for note in task.notes)
    skipped = load_task(data=data, level="word", header=True)
    assert not any("header" in note for note in skipped.notes)
    everything = [tuple(s) for s, _ in skipped.train + skipped.valid + skipped.test]
    assert ("source",) not in everything and len(everything) == 64
    assert [row[0] for row in read_tsv_rows(data, header=True)][:2] == [2, 3]   # line numbers stay true


@pytest.mark.parametrize("src, tgt, header", [("source", "target", True), ("SRC", "TGT", True), ("en", "fr", True),
                                              ("en-US", "de-DE", True), ("one two", "two one", False),
                                              ("in", "in", False), ("hello", "bonjour", False)])
def test_looks_like_header(src, tgt, header):
    assert looks_like_header(src, tgt) == header


def test_duplicates_are_removed_before_splitting_and_counted(tmp_path):
    data = _tsv(tmp_path, PAIRS + PAIRS[:20] + [PAIRS[0]] * 5)
    task = load_task(data=data, level="word", seed=3)
    assert any("removed 25 duplicate pair(s)" in note for note in task.notes)
    splits = [{(tuple(s), tuple(t)) for s, t in part} for part in (task.train, task.valid, task.test)]
    assert sum(len(part) for part in splits) == 64
    assert not (splits[0] & splits[1] or splits[0] & splits[2] or splits[1] & splits[2])


def test_one_source_with_two_targets_stays_in_one_split():
    pairs = [(["s", str(i)], ["t"]) for i in range(30)] + [(["s", "0"], ["other"])]
    train, valid, test, duplicates = split_pairs(pairs, seed=1)
    assert duplicates == 0
    where = [name for name, part in (("train", train), ("valid", valid), ("test", test))
             for s, _ in part if s == ["s", "0"]]
    assert len(where) == 2 and len(set(where)) == 1


def test_data_is_split_three_ways_and_the_test_split_is_held_out(tmp_path):
    data = _tsv(tmp_path, PAIRS)
    task = load_task(data=data, level="word")
    assert len(task.train) > 0 and len(task.valid) > 0 and len(task.test) > 0
    assert len(task.train) + len(task.valid) + len(task.test) == 64
    train, valid, test = ({tuple(s) for s, _ in part} for part in (task.train, task.valid, task.test))
    assert not (test & train) and not (test & valid) and not (valid & train)
    # same seed, same split; the vocabulary is built from the training split only
    again = load_task(data=data, level="word")
    assert again.test == task.test and again.vocab == task.vocab


@pytest.mark.parametrize("n", [1, 2])
def test_a_file_too_small_to_split_is_named_before_training(tmp_path, n):
    data = _tsv(tmp_path, PAIRS[:n] + PAIRS[:n])
    with pytest.raises(DataError, match=rf"{n} distinct source sentence\(s\) after removing {n} duplicate pair\(s\); "
                                        r"at least 3 are needed"):
        load_task(data=data, level="word")


def test_three_pairs_are_enough(tmp_path):
    task = load_task(data=_tsv(tmp_path, PAIRS[:3]), level="word")
    assert (len(task.train), len(task.valid), len(task.test)) == (1, 1, 1)
    build_model(task, "tiny")


# -- reserved characters and words ----------------------------------------------------------------

@pytest.mark.parametrize("word", ["<pad>", "<bos>", "<eos>", "<unk>"])
def test_a_special_token_spelled_in_word_level_text_is_refused(word):
    with pytest.raises(ValueError, match=f"word-level text may not contain '{word}'"):
        tokenize(f"stop {word} here", "word")
    assert tokenize(f"stop{word} here", "word") == [f"stop{word}", "here"]     # only whole words are reserved
    assert len(tokenize(word, "char")) == len(word)                             # characters are not


@pytest.mark.parametrize("line, level, message", [
    (f"a{SPACE}b\tc", "char", "source: character-level text may not contain '▁'"),
    ("one two\tthree <eos>", "word", "target: word-level text may not contain '<eos>'"),
])
def test_reserved_text_in_a_tsv_names_file_line_and_side(tmp_path, line, level, message):
    data = _tsv(tmp_path, PAIRS[:5] + [line])
    with pytest.raises(DataError, match=f"{data}:6: {message}"):
        load_task(data=data, level=level)


def test_load_tsv_names_a_directory(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a directory, not a TSV file"):
        load_tsv(tmp_path)
