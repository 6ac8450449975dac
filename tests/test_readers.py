"""Every reader of user text has limits, named in its error (issue 36, item 3): the TSV files of
``--data`` had them (1 MB a line, 1 GB in all); BPE codes files, plain-text corpora and the standard
input of ``bpe apply`` and ``translate`` read until the memory ran out, then said "out of memory"
without naming the input. The limits are defined once, in files.py."""

from __future__ import annotations

import tracemalloc

import pytest
from cli_run import one_error_line, run

from minitransformer import files


@pytest.fixture
def codes(tmp_path):
    path = tmp_path / "codes.bpe"
    path.write_text("#version: 0.2\no n\non e</w>\n", encoding="utf-8")
    return path


def _peak_mb(call) -> float:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_the_limits_are_defined_once():
    from minitransformer.data import tsv

    assert files.MAX_LINE_BYTES == 1_000_000 and files.MAX_TEXT_BYTES == 1_000_000_000
    assert tsv.MAX_LINE_BYTES is files.MAX_LINE_BYTES and tsv.MAX_FILE_BYTES is files.MAX_TEXT_BYTES
    assert files.MAX_CODES_BYTES < files.MAX_TEXT_BYTES


def test_a_codes_file_without_line_ends_is_refused_after_one_line(tmp_path, monkeypatch):
    """bpe apply --codes /dev/zero grew until the memory ran out."""
    peak = []
    code, _, err = 0, "", ""

    def call():
        nonlocal code, err
        code, _, err = run(["bpe", "apply", "--codes", "/dev/zero"], b"one\n", monkeypatch)
    peak.append(_peak_mb(call))
    assert code == 2
    one_error_line(err, "/dev/zero:1: the line is longer than 1,000,000 bytes", "(--codes /dev/zero)")
    assert peak[0] < 20, f"{peak[0]:.1f} MB read for a refused codes file"


def test_a_codes_file_over_its_size_limit_is_refused_naming_the_line(codes, monkeypatch):
    monkeypatch.setattr(files, "MAX_CODES_BYTES", 20)
    code, _, err = run(["bpe", "apply", "--codes", codes], b"one\n", monkeypatch)
    assert code == 2
    one_error_line(err, f"{codes}:3: the file is larger than 20 bytes", "a BPE codes file", f"(--codes {codes})")


def test_a_plain_text_corpus_is_read_with_the_limits(tmp_path, monkeypatch):
    """bpe learn /dev/zero grew until the memory ran out."""
    code, _, err = run(["bpe", "learn", "/dev/zero", "--merges", "5", "-o", tmp_path / "c.bpe"])
    assert code == 2
    one_error_line(err, "/dev/zero:1: the line is longer than 1,000,000 bytes", "(/dev/zero)")
    text = tmp_path / "corpus.txt"
    text.write_text("one two\nthree four\nfive six\n", encoding="utf-8")
    monkeypatch.setattr(files, "MAX_TEXT_BYTES", 12)
    code, _, err = run(["bpe", "learn", text, "--merges", "5", "-o", tmp_path / "c.bpe"])
    assert code == 2
    one_error_line(err, f"{text}:2: the file is larger than 12 bytes")
    assert not (tmp_path / "c.bpe").exists()


@pytest.mark.parametrize("command", ["bpe", "translate"])
def test_standard_input_is_read_with_the_limits_and_named(command, codes, tmp_path, monkeypatch):
    """bpe apply < /dev/zero and translate < /dev/zero grew until the memory ran out, then said "out of memory"."""
    argv = ["bpe", "apply", "--codes", codes] if command == "bpe" else ["translate", "--checkpoint", tmp_path / "x"]
    code, _, err = run(argv, "/dev/zero", monkeypatch)
    assert code == 2
    one_error_line(err, "the line is longer than 1,000,000 bytes", "(standard input, line 1)")
    monkeypatch.setattr(files, "MAX_TEXT_BYTES", 10)
    code, _, err = run(argv, b"one\ntwo\nthree\nfour\n", monkeypatch)
    assert code == 2
    one_error_line(err, "standard input is larger than 10 bytes", "(standard input, line 3)")
    monkeypatch.setattr(files, "MAX_TEXT_BYTES", 1000)
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 20)                  # the codes file's lines are shorter
    code, _, err = run(argv, b"one\n" + b"x" * 30 + b"\n", monkeypatch)
    assert code == 2
    one_error_line(err, "the line is longer than 20 bytes", "(standard input, line 2)")


def test_bpe_apply_still_writes_one_line_per_input_line(codes, monkeypatch):
    from minitransformer.data.bpe import BPE, read_codes

    text = "one one\r\nnone\n\nlast"
    code, out, err = run(["bpe", "apply", "--codes", codes], text.encode(), monkeypatch)
    assert code == 0, err
    bpe = BPE(read_codes(codes))
    assert out == "\n".join(bpe.apply(line) for line in text.split("\n"))     # each line keeps its own ending
