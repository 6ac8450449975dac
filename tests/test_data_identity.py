"""The data a model is trained, resumed and scored on is the data it says (issue 19, items 6, 7, 8,
11, 12 and 16): one stdin line gives one translation, whatever characters it holds; a checkpoint
records fingerprints of its corpus and split, so a resume on edited or reordered data is refused
and "never used in training" is printed only when proven; evaluate warns when its pairs were
trained on and refuses a level mismatch; a TSV file is read with caps and its problems named."""

from __future__ import annotations

import io
import json
import random
import sys
import tracemalloc

import numpy as np
import pytest

from minitransformer.__main__ import main
from minitransformer.checkpoint import CheckpointError, load_checkpoint
from minitransformer.data import fingerprint
from minitransformer.data.registry import load_task
from minitransformer.data.tsv import DataError, read_tsv_rows

WORDS = "one two three four five six seven eight".split()
PAIRS = [f"{a} {b}\t{b} {a}" for a in WORDS for b in WORDS]


def _errors(err):
    return [line for line in err.splitlines() if line.startswith("error: ")]


def _train(data, out, *extra):
    return ["train", "--data", str(data), "--level", "word", "--preset", "tiny", "--no-progress", "--batch-size", "16",
            "--out", str(out), *extra]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A word-level model trained 4 steps on PAIRS, and its corpus."""
    d = tmp_path_factory.mktemp("identity")
    data = d / "pairs.tsv"
    data.write_text("\n".join(PAIRS) + "\n", encoding="utf-8")
    assert main(_train(data, d / "run", "--steps", "4")) == 0
    return {"dir": d, "data": data, "ckpt": d / "run" / "checkpoint.npz"}


# -- item 6: one input line, one output line ------------------------------------------------------

# Every character str.splitlines() breaks a line at, besides "\n" (and "\r\n").
SPLITLINES_BREAKS = ["\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


def test_the_list_of_break_characters_is_complete():
    breaks = [chr(c) for c in range(sys.maxunicode + 1) if len(f"a{chr(c)}b".splitlines()) == 2]
    assert sorted(breaks) == sorted(SPLITLINES_BREAKS + ["\n"])


def _translate_stdin(trained, monkeypatch, capsys, data: bytes, errors="strict"):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors=errors))
    rc = main(["translate", "--checkpoint", str(trained["ckpt"]), "--beam", "1"])
    return rc, *capsys.readouterr()


@pytest.mark.parametrize("ch", SPLITLINES_BREAKS, ids=[f"U+{ord(c):04X}" for c in SPLITLINES_BREAKS])
def test_stdin_is_split_on_newlines_only(trained, monkeypatch, capsys, ch):
    first, second = f"one{ch}two", "three four"
    rc, out, err = _translate_stdin(trained, monkeypatch, capsys, f"{first}\n{second}\n".encode())
    assert rc == 0, err
    lines = out.split("\n")[:-1]
    assert len(lines) == 2, out                        # two input lines, two translations
    assert main(["translate", "--checkpoint", str(trained["ckpt"]), "--beam", "1", first, second]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == lines     # each in line with its input


def test_windows_line_ends_and_a_missing_last_newline(trained, monkeypatch, capsys):
    rc, out, err = _translate_stdin(trained, monkeypatch, capsys, b"one two\r\nthree four\r\nfive six")
    assert rc == 0, err
    assert len(out.split("\n")[:-1]) == 3


def test_a_strict_utf8_stdin_error_names_standard_input_and_the_line(trained, monkeypatch, capsys):
    rc, _, err = _translate_stdin(trained, monkeypatch, capsys, b"one two\nthree \xff four\n")
    assert rc == 2
    assert _errors(err) == ["error: not valid utf-8 text (invalid start byte at byte 7 of the line) "
                            "(standard input, line 2)"]


def test_an_empty_resume_is_an_error_not_a_fresh_run(trained, tmp_path, capsys):
    """The neighbour of `translate --attention ""`: an empty value must not read as "not given"."""
    assert main(_train(trained["data"], tmp_path / "r", "--steps", "2", "--resume", "")) == 2
    assert _errors(capsys.readouterr().err) == ["error: the checkpoint to resume from is empty; name a "
                                                "checkpoint.npz, or leave --resume out (--resume)"]
    assert not (tmp_path / "r").exists()


def test_an_empty_attention_folder_is_an_error(trained, capsys):
    assert main(["translate", "--checkpoint", str(trained["ckpt"]), "--attention", "", "one"]) == 2
    assert _errors(capsys.readouterr().err) == ["error: the folder for the heatmaps is empty; name a folder, or leave "
                                                "--attention out (--attention)"]


# -- item 7: fingerprints of the corpus and of its split ---------------------------------------

def test_the_corpus_digest_ignores_order_and_the_split_digest_does_not():
    task = load_task(data=None, name="copy", seed=0)
    a = fingerprint.fingerprint("t", task.train, task.valid, task.test)
    shuffled = list(task.train)
    random.Random(1).shuffle(shuffled)
    b = fingerprint.fingerprint("t", shuffled, task.valid, task.test)
    assert a == b                                                  # order within a split does not matter
    moved = fingerprint.fingerprint("t", task.train[1:], task.valid + task.train[:1], task.test)
    assert moved["corpus"] == a["corpus"] and moved["split"] != a["split"]
    assert "split differently" in fingerprint.compare(a, moved)
    other = fingerprint.fingerprint("t", task.train[1:], task.valid, task.test)
    assert "the data differs" in fingerprint.compare(a, other)
    assert fingerprint.compare(a, b) is None


@pytest.mark.parametrize("bad, message", [
    ([], "must be an object"), ({"task": "x", "corpus": 1, "split": "s", "sizes": [1, 1, 1]}, "field 'corpus' must be a"),
    ({"task": "x", "corpus": "c", "split": "s", "sizes": [1, -1, 1]}, "field 'sizes' must be three counts"),
    ({"task": "x", "corpus": "c", "split": "s", "sizes": [1, 1, 1], "since_step": "0"}, "field 'since_step' must be"),
])
def test_a_malformed_fingerprint_in_a_checkpoint_is_named(trained, tmp_path, bad, message):
    with np.load(trained["ckpt"]) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["meta"]))
    meta["extra"]["data"] = bad
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(tmp_path / "c.npz", **arrays)
    with pytest.raises(CheckpointError, match="extra.data .the fingerprint of the training data. " + message):
        load_checkpoint(str(tmp_path / "c.npz"))


def test_a_checkpoint_records_its_data(trained):
    saved = load_checkpoint(str(trained["ckpt"])).extra["data"]
    task = load_task(data=str(trained["data"]), level="word", seed=0)
    assert saved == task.fingerprint() and saved["sizes"] == [len(task.train), len(task.valid), len(task.test)]


@pytest.fixture
def run(trained, tmp_path):
    """A fresh 4-step run on a copy of the corpus; returns (data path, checkpoint path)."""
    data = tmp_path / "pairs.tsv"
    data.write_text(trained["data"].read_text())
    assert main(_train(data, tmp_path / "run", "--steps", "4")) == 0
    return data, tmp_path / "run" / "checkpoint.npz"


def test_resuming_on_an_edited_corpus_is_refused(run, capsys):
    data, ckpt = run
    data.write_text("\n".join(PAIRS[:-1] + ["nine ten\tten nine"]) + "\n")
    capsys.readouterr()
    assert main(_train(data, ckpt.parent, "--steps", "8", "--resume", str(ckpt))) == 2
    (line,) = _errors(capsys.readouterr().err)
    assert "cannot resume: the data differs from what the checkpoint was trained on (then: 58 train / 3 valid / " \
           "3 test pairs of 'pairs.tsv'; now: " in line
    assert line.endswith(f"(--resume {ckpt})")
    assert load_checkpoint(str(ckpt)).step == 4                       # untouched


def test_resuming_on_a_reordered_corpus_is_refused(run, capsys):
    """Issue 19's reproduction: the same lines in another order split differently, and the final
    report called 5 of 6 trained-on pairs "never used in training"."""
    data, ckpt = run
    lines = list(PAIRS)
    random.Random(3).shuffle(lines)
    data.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(_train(data, ckpt.parent, "--steps", "8", "--resume", str(ckpt))) == 2
    (line,) = _errors(capsys.readouterr().err)
    assert "the same pairs are split differently into train / valid / test" in line
    assert "the lines of the file were reordered" in line


def test_resuming_on_the_same_corpus_proves_the_test_set_held_out(run, capsys):
    data, ckpt = run
    capsys.readouterr()
    assert main(_train(data, ckpt.parent, "--steps", "6", "--resume", str(ckpt))) == 0
    out = capsys.readouterr().out
    assert "held-out test set (pairs.tsv: 3 pairs never used in training or validation):" in out
    assert load_checkpoint(str(ckpt)).extra["data"]["since_step"] == 0


def test_a_checkpoint_without_a_fingerprint_never_claims_a_held_out_test_set(run, capsys):
    data, ckpt = run
    with np.load(ckpt) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["meta"]))
    del meta["extra"]["data"]                                         # as written before fingerprints
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(ckpt, **arrays)
    capsys.readouterr()
    assert main(_train(data, ckpt.parent, "--steps", "6", "--resume", str(ckpt))) == 0
    out = capsys.readouterr().out
    assert "never used in training" not in out
    assert ("test set (pairs.tsv: 3 pairs; the checkpoint this run resumed from does not record the data it was "
            "trained on in its first 4 steps, so that these pairs were held out cannot be checked):") in out
    assert load_checkpoint(str(ckpt)).extra["data"]["since_step"] == 4       # and the next resume knows it too
    assert main(_train(data, ckpt.parent, "--steps", "7", "--resume", str(ckpt))) == 0
    assert "never used in training" not in capsys.readouterr().out


def test_evaluate_on_the_training_file_says_the_scores_are_not_held_out(trained, capsys):
    assert main(["evaluate", "--checkpoint", str(trained["ckpt"]), "--data", str(trained["data"]), "--beam", "1",
                 "--samples", "0"]) == 0
    err = capsys.readouterr().err
    assert f"warning: {trained['data']} holds the pairs the checkpoint was trained on" in err


@pytest.mark.slow
def test_evaluate_with_another_seed_counts_the_training_pairs_it_would_score(tmp_path, capsys):
    """Issue 19's reproduction: `evaluate --seed S` scored a "test set" of which 858 of 1,000 pairs
    were training data, without a word. The warning now gives the exact count."""
    out = tmp_path / "numbers"
    assert main(["train", "--task", "numbers-en-fr", "--preset", "tiny", "--steps", "1", "--no-progress",
                 "--eval", "greedy", "--out", str(out)]) == 0
    capsys.readouterr()
    ckpt = str(out / "checkpoint.npz")
    assert main(["evaluate", "--checkpoint", ckpt, "--task", "numbers-en-fr", "--seed", "3", "--beam", "1",
                 "--limit", "3", "--samples", "0"]) == 0
    err = capsys.readouterr().err
    trained = {tuple(s) for s, _ in load_task("numbers-en-fr", seed=0).train}
    test = load_task("numbers-en-fr", seed=3).test
    expected = sum(tuple(s) in trained for s, _ in test)
    assert expected > len(test) // 2
    assert (f"warning: {expected:,} of the {len(test):,} test pairs of --seed 3 were in the checkpoint's training "
            "data (it was trained with seed 0): these scores are not held out") in err
    assert main(["evaluate", "--checkpoint", ckpt, "--task", "numbers-en-fr", "--beam", "1", "--limit", "3",
                 "--samples", "0"]) == 0
    assert "warning" not in capsys.readouterr().err                    # its own seed: held out, nothing to say


# -- item 8: a task or level that is not the checkpoint's --------------------------------------

def test_evaluate_a_char_model_on_a_space_level_task_is_a_level_mismatch(tmp_path, capsys):
    data = tmp_path / "chars.tsv"
    data.write_text("\n".join(PAIRS) + "\n")
    assert main(["train", "--data", str(data), "--preset", "tiny", "--steps", "1", "--no-progress",
                 "--eval", "greedy", "--out", str(tmp_path / "char")]) == 0          # --level char (default)
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(tmp_path / "char" / "checkpoint.npz"), "--task", "copy"]) == 2
    assert _errors(capsys.readouterr().err) == ["error: level mismatch: the checkpoint's model was trained on "
                                                "char-level sources, not space-level ones (--task copy)"]


@pytest.mark.parametrize("command", ["evaluate", "translate"])
def test_an_explicit_level_that_is_not_the_checkpoints_is_refused(trained, capsys, command):
    argv = (["evaluate", "--data", str(trained["data"])] if command == "evaluate" else ["translate", "one"])
    assert main(argv + ["--checkpoint", str(trained["ckpt"]), "--level", "char"]) == 2
    assert _errors(capsys.readouterr().err) == ["error: level mismatch: the checkpoint's model was trained on "
                                                "word-level sources, not char-level ones (--level char)"]


def test_evaluate_on_another_task_warns_about_the_task_and_the_unknown_tokens(trained, capsys):
    """The word-level pairs model on the dates-en-de task: the same level, but nothing it knows."""
    assert main(["evaluate", "--checkpoint", str(trained["ckpt"]), "--task", "dates-en-de", "--beam", "1",
                 "--limit", "2", "--samples", "0"]) == 0
    err = capsys.readouterr().err
    assert "warning: the checkpoint was trained on 'pairs.tsv', not 'dates-en-de'" in err
    assert "warning: --task dates-en-de, pair 1 (" in err and "tokens not in the vocabulary (read as <unk>): " in err
    assert "warning: reference tokens not in the vocabulary (the model can never produce them): " in err


@pytest.mark.parametrize("extra, option", [(["--level", "word"], "--level"), (["--header"], "--header")])
def test_evaluate_refuses_data_options_with_a_task(trained, capsys, extra, option):
    assert main(["evaluate", "--checkpoint", str(trained["ckpt"]), "--task", "copy", *extra]) == 2
    assert _errors(capsys.readouterr().err) == [f"error: {option} applies to --data files only; task 'copy' fixes "
                                                f"its own tokenization ({option})"]


def test_evaluate_refuses_a_seed_with_data(trained, capsys):
    assert main(["evaluate", "--checkpoint", str(trained["ckpt"]), "--data", str(trained["data"]), "--seed", "3"]) == 2
    assert _errors(capsys.readouterr().err)[0].endswith("(--seed)")


# -- item 12: a sentence longer than the model's positions, named --------------------------------

def test_evaluate_data_with_a_line_longer_than_max_len_names_the_line(trained, tmp_path, capsys):
    data = tmp_path / "long.tsv"
    data.write_text("one two\ttwo one\n" + " ".join(["one"] * 70) + "\tone\n")
    assert main(["evaluate", "--checkpoint", str(trained["ckpt"]), "--data", str(data)]) == 2
    assert _errors(capsys.readouterr().err) == [f"error: {data}:2: the source has 70 word tokens; with <eos> that is "
                                                f"more than the model's max_len of 64 positions (--data {data})"]


def test_evaluate_task_with_a_sentence_longer_than_max_len_names_the_pair(tmp_path, capsys):
    assert main(["train", "--task", "copy", "--preset", "tiny", "--steps", "1", "--no-progress", "--eval", "greedy",
                 "--out", str(tmp_path / "copy")]) == 0
    ckpt = tmp_path / "copy" / "checkpoint.npz"
    with np.load(ckpt) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["meta"]))
    meta["config"]["max_len"] = 4                   # the sinusoidal table is not saved: only the config changes
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(ckpt, **arrays)
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(ckpt), "--task", "copy"]) == 2
    (line,) = _errors(capsys.readouterr().err)
    assert "with <eos> that is more than the model's max_len of 4 positions (--task copy, test pair " in line


# -- items 11 and 16: reading a TSV file -----------------------------------------------------------

def test_dev_zero_is_refused_after_one_line_without_reading_it_all(capsys):
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match=r"/dev/zero:1: the line is longer than 1,000,000 bytes; is this a text"):
            read_tsv_rows("/dev/zero")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000
    assert main(["train", "--data", "/dev/zero"]) == 2
    assert _errors(capsys.readouterr().err)[0].endswith("(--data /dev/zero)")


def test_a_file_larger_than_the_cap_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "big.tsv"
    path.write_text("".join(f"{i} a\ta {i}\n" for i in range(200)))
    with pytest.raises(DataError, match=rf"^{path}:\d+: the file is larger than 1,000 bytes"):
        read_tsv_rows(path, max_file_bytes=1000)
    assert len(read_tsv_rows(path)) == 200


def test_cr_line_ends_are_named_as_such(tmp_path):
    path = tmp_path / "mac.tsv"
    path.write_bytes(("\r".join(PAIRS) + "\r").encode())
    with pytest.raises(DataError, match=rf"^{path}:1: the line holds 63 carriage return\(s\) \(\\r\) inside it: the "
                                        "file seems to use CR line ends") as caught:
        read_tsv_rows(path)
    assert "tabs" not in str(caught.value)
    long = tmp_path / "long_mac.tsv"
    long.write_bytes(("a b\tb a\r" * 200).encode())
    with pytest.raises(DataError, match="longer than 1,000 bytes: the file seems to use CR line ends"):
        read_tsv_rows(long, max_line_bytes=1000)


def test_a_header_only_file_with_header_is_not_called_empty(tmp_path, capsys):
    path = tmp_path / "header.tsv"
    path.write_text("\nsource\ttarget\n\n")
    with pytest.raises(DataError, match=r"no source<TAB>target pairs found: the file holds only the header line "
                                        r"\(line 2, which --header skips\)"):
        read_tsv_rows(path, header=True)
    blank = tmp_path / "blank.tsv"
    blank.write_text("\n \n")
    with pytest.raises(DataError, match="the file is empty or blank"):
        read_tsv_rows(blank)
