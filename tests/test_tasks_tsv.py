"""Synthetic copy/reverse tasks and the TSV corpus reader/writer."""

import os

import numpy as np
import pytest

from minitransformer.data.tasks import (
    copy_pairs,
    reverse_pairs,
    symbols,
    synthetic_vocab,
)
from minitransformer.data.tsv import DataError, load_tsv, write_tsv
from minitransformer.data.vocab import BOS, EOS, PAD, UNK

# -- synthetic tasks --------------------------------------------------------------------


def test_symbols():
    assert symbols(3) == ["0", "1", "2"]
    assert symbols(12) == [str(i) for i in range(10)] + ["s10", "s11"]


def test_copy_pairs():
    pairs = copy_pairs(200, np.random.default_rng(0), n_symbols=5, min_len=2, max_len=4)
    assert len(pairs) == 200
    lengths = {len(src) for src, _ in pairs}
    assert lengths == {2, 3, 4}  # both ends of the range occur
    for src, tgt in pairs:
        assert tgt == src
        assert set(src) <= {"0", "1", "2", "3", "4"}


def test_reverse_pairs_have_the_same_sources_as_copy():
    copies = copy_pairs(50, np.random.default_rng(3))
    reverses = reverse_pairs(50, np.random.default_rng(3))
    for (src_c, _), (src_r, tgt_r) in zip(copies, reverses):
        assert src_c == src_r
        assert tgt_r == src_r[::-1]


def test_tasks_are_deterministic():
    assert copy_pairs(20, np.random.default_rng(1)) == copy_pairs(20, np.random.default_rng(1))
    assert copy_pairs(20, np.random.default_rng(1)) != copy_pairs(20, np.random.default_rng(2))


def test_target_is_not_an_alias_of_the_source():
    (src, tgt), = copy_pairs(1, np.random.default_rng(0))
    tgt.append("x")
    assert src != tgt


def test_synthetic_vocab():
    v = synthetic_vocab(12)
    assert v.tokens == [PAD, BOS, EOS, UNK] + symbols(12)
    for src, _ in reverse_pairs(30, np.random.default_rng(0), n_symbols=12):
        assert v.unk_id not in v.encode(src)


@pytest.mark.parametrize("task", [copy_pairs, reverse_pairs])
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(min_len=0), "min_len must be >= 1, got min_len=0"),
        (dict(min_len=5, max_len=3), "min_len must be <= max_len, got min_len=5, max_len=3"),
        (dict(n_symbols=0), "n_symbols must be >= 1, got n_symbols=0"),
        (dict(n=-1), "n must be >= 0, got n=-1"),
    ],
)
def test_task_bad_input(task, kwargs, message):
    args = dict(n=5, rng=np.random.default_rng(0)) | kwargs
    with pytest.raises(ValueError, match=message):
        task(**args)


def test_task_wants_a_generator():
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        copy_pairs(5, 0)


def test_synthetic_vocab_bad_input():
    with pytest.raises(ValueError, match="n_symbols must be >= 1, got n_symbols=0"):
        synthetic_vocab(0)


# -- TSV ----------------------------------------------------------------------------------


def _write_bytes(tmp_path, data: bytes):
    path = tmp_path / "data.tsv"
    path.write_bytes(data)
    return path


def test_load_tsv_basic_blank_lines_crlf_and_bom(tmp_path):
    data = "\ufeffhello world\tbonjour le monde\r\n\r\n   \n  chat \t cat\nÄpfel\tapples".encode()
    assert load_tsv(_write_bytes(tmp_path, data)) == [
        ("hello world", "bonjour le monde"),
        ("chat", "cat"),
        ("Äpfel", "apples"),
    ]


@pytest.mark.parametrize(
    "data, message",
    [
        (b"a\tb\nno tab here\n", r":2: missing tab between source and target"),
        (b"a\tb\tc\n", r":1: 2 tabs on the line; expected exactly one"),
        (b"a\tb\n\n \tb\n", r":3: empty source"),
        (b"a\t  \n", r":1: empty target"),
        (b"a\tb\n\xff\xfe\tc\n", r":2: not valid UTF-8"),
    ],
)
def test_load_tsv_bad_lines_name_file_and_line(tmp_path, data, message):
    path = _write_bytes(tmp_path, data)
    with pytest.raises(DataError, match=str(path).replace("\\", "\\\\") + message):
        load_tsv(path)


@pytest.mark.parametrize("data", [b"", b"\n  \n\r\n"])
def test_load_tsv_empty_file(tmp_path, data):
    with pytest.raises(DataError, match="no source<TAB>target pairs found"):
        load_tsv(_write_bytes(tmp_path, data))


def test_load_tsv_missing_file(tmp_path):
    path = tmp_path / "nope.tsv"
    with pytest.raises(FileNotFoundError, match="TSV data file not found: .*nope.tsv"):
        load_tsv(path)


def test_data_error_is_a_value_error():
    assert issubclass(DataError, ValueError)


def test_write_then_load_round_trip(tmp_path):
    pairs = [("hello world", "bonjour"), ("ein Hund", "a dog"), ("日本", "Japan")]
    path = tmp_path / "out.tsv"
    write_tsv(path, pairs)
    assert load_tsv(path) == pairs
    assert path.read_bytes().count(b"\r") == 0
    write_tsv(path, pairs[:1])  # overwriting works
    assert load_tsv(path) == pairs[:1]
    assert os.listdir(tmp_path) == ["out.tsv"]  # no temporary file left behind


@pytest.mark.parametrize(
    "pair, message",
    [
        (("a\tb", "c"), r"pair 1: source 'a\\tb' contains a tab"),
        (("a", "b\nc"), r"pair 1: target 'b\\nc' contains a newline"),
        (("a", "b\r"), "contains a carriage return"),
        (("", "b"), "pair 1: source is empty"),
        (("a",), "must be a \\(source, target\\) tuple"),
        (("a", 3), "target must be a str"),
    ],
)
def test_write_tsv_bad_pairs_leave_the_old_file_alone(tmp_path, pair, message):
    path = tmp_path / "out.tsv"
    write_tsv(path, [("old", "file")])
    with pytest.raises(ValueError, match=message):
        write_tsv(path, [("ok", "ok"), pair])
    assert load_tsv(path) == [("old", "file")]
    assert os.listdir(tmp_path) == ["out.tsv"]


def test_write_tsv_is_atomic_when_the_rename_fails(tmp_path, monkeypatch):
    path = tmp_path / "out.tsv"
    write_tsv(path, [("old", "file")])

    def failing_replace(src, dst):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk on fire"):
        write_tsv(path, [("new", "file")])
    monkeypatch.undo()
    assert load_tsv(path) == [("old", "file")]
    assert os.listdir(tmp_path) == ["out.tsv"]  # the temporary file was removed
