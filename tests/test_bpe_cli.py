"""Byte-pair encoding from the command line and in training (issue 21, item 2):

* ``bpe learn`` writes the codes ``subword-nmt learn-bpe`` writes (a TSV's two columns both count),
  ``subword-nmt apply-bpe`` reads them, and ``bpe apply`` writes what it writes; one output line
  per input line; bad codes files, bad text and bad options are one-line named errors, exit 2;
* ``train --level bpe --bpe-merges N`` learns the merges on the training split only (never valid or
  test), shares one vocabulary between source and target, saves the merges in the checkpoint, and a
  resumed run keeps them; ``translate`` and ``evaluate`` tokenize as training did and give back the
  exact text; a checkpoint whose BPE entry is damaged is refused at load.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from test_bpe import needs_reference, reference_cli, reference_merges

from minitransformer.__main__ import main
from minitransformer.checkpoint import CheckpointError, load_checkpoint
from minitransformer.data.bpe import BPE, BPETextError, read_codes
from minitransformer.data.loading import bpe_of, learn_joint_bpe, load_tsv_task
from minitransformer.data.registry import load_task
from minitransformer.data.vocab import SPECIALS, bpe_vocab, detokenize, tokenize


def run(argv, stdin: str | bytes | None = None, monkeypatch=None) -> tuple[int, str, str]:
    """main(argv) with standard input ``stdin``: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    if stdin is not None and monkeypatch is not None:
        data = stdin if isinstance(stdin, bytes) else stdin.encode("utf-8")
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline=""))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def one_error_line(err: str, *fragments: str) -> str:
    line = err.strip()
    assert line.startswith("error: ") and "\n" not in line and "Traceback" not in line, err
    for fragment in fragments:
        assert fragment in line, line
    return line


# A small parallel corpus: English number names -> German compounds, lots to merge.
def number_pairs(n: int = 240) -> list[tuple[str, str]]:
    from minitransformer.data.translation import generate_pairs
    return generate_pairs("numbers-en-de")[:n]


@pytest.fixture
def tsv(tmp_path):
    path = tmp_path / "numbers.tsv"
    path.write_text("".join(f"{a}\t{b}\n" for a, b in number_pairs()), encoding="utf-8")
    return path


# -- bpe learn / bpe apply -------------------------------------------------------------------------

@needs_reference
def test_learn_on_a_tsv_counts_both_columns_and_equals_subword_nmt(tmp_path, tsv):
    codes = tmp_path / "codes.bpe"
    code, _, err = run(["bpe", "learn", tsv, "--merges", 150, "-o", codes])
    assert code == 0, err
    both_columns = [a for a, _ in number_pairs()] + [b for _, b in number_pairs()]
    assert read_codes(codes) == reference_merges(both_columns, 150)
    # the file itself is what subword-nmt writes, byte for byte
    plain = tmp_path / "both.txt"
    plain.write_text("".join(line + "\n" for line in both_columns), encoding="utf-8")
    assert codes.read_text(encoding="utf-8") == reference_cli("learn-bpe", "-s", "150", "-i", str(plain))


@needs_reference
def test_learn_on_plain_text_and_min_frequency_equal_subword_nmt(tmp_path):
    lines = ["the lower lowest low", "newer newest wider widest", "low low low", "ab ab ba"]
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for frequency in (1, 2, 3):
        codes = tmp_path / f"codes{frequency}.bpe"
        assert run(["bpe", "learn", text, "--merges", 40, "--min-frequency", frequency, "-o", codes])[0] == 0
        assert read_codes(codes) == reference_merges(lines, 40, frequency)


@needs_reference
def test_subword_nmt_apply_bpe_reads_our_codes_and_our_apply_writes_what_it_writes(tmp_path, tsv, monkeypatch):
    codes = tmp_path / "codes.bpe"
    assert run(["bpe", "learn", tsv, "--merges", 120, "-o", codes])[0] == 0
    # held-out text, with a character never seen in learning, spaces at the ends and in a row
    text = ("nine thousand, nine hundred and ninety-nine\nneuntausendneunhundertneunundneunzig\n"
            "  zwölf  Straße é \n\nsiebentausend\n")
    theirs = reference_cli("apply-bpe", "-c", str(codes), stdin=text)
    code, ours, err = run(["bpe", "apply", "--codes", codes], stdin=text, monkeypatch=monkeypatch)
    assert code == 0, err
    assert ours == theirs
    assert ours.count("\n") == text.count("\n")
    assert "neun@@" in ours                                    # it did split something


def test_apply_splits_lines_on_newline_only_and_keeps_their_endings(tmp_path, monkeypatch):
    codes = tmp_path / "codes.bpe"
    codes.write_text("#version: 0.2\nl o\nlo w</w>\n", encoding="utf-8")
    text = "low lower\r\n\n  slow \nlow"                      # CRLF, an empty line, spaces, no final newline
    code, out, err = run(["bpe", "apply", "--codes", codes], stdin=text, monkeypatch=monkeypatch)
    assert code == 0, err
    assert out == "low lo@@ w@@ e@@ r\r\n\n  s@@ low \nlow"
    # U+2028 is a line break to str.splitlines, not to this command: the line holds a whitespace
    # character inside a word, which BPE refuses by name (split there, it would pass unnoticed)
    code, out, err = run(["bpe", "apply", "--codes", codes], stdin="low\nslow\u2028low\n", monkeypatch=monkeypatch)
    assert code == 2 and out == ""
    one_error_line(err, "U+2028", "(standard input, line 2)")


def test_apply_refuses_a_word_the_text_would_not_survive_naming_the_line(tmp_path, monkeypatch):
    codes = tmp_path / "codes.bpe"
    codes.write_text("#version: 0.2\nl o\n", encoding="utf-8")
    code, out, err = run(["bpe", "apply", "--codes", codes], stdin="low\nlow\tlow\n", monkeypatch=monkeypatch)
    assert code == 2 and out == ""
    one_error_line(err, "whitespace character '\\t'", "(standard input, line 2)")
    code, _, err = run(["bpe", "apply", "--codes", codes], stdin=b"low\n\xff\n", monkeypatch=monkeypatch)
    assert code == 2
    one_error_line(err, "not valid UTF-8", "(standard input, line 2)")


@pytest.mark.parametrize("content, message", [
    ("l o\n", "codes.bpe:1: expected the header '#version: 0.2'"),
    ("#version: 0.2\nl o\nl o w\n", "codes.bpe:3: 3 space-separated parts"),
    ("#version: 0.2\n</w> a\n", "codes.bpe:2: merge '</w>' 'a'"),
])
def test_a_bad_codes_file_is_one_named_error(tmp_path, monkeypatch, content, message):
    codes = tmp_path / "codes.bpe"
    codes.write_text(content, encoding="utf-8")
    code, out, err = run(["bpe", "apply", "--codes", codes], stdin="low\n", monkeypatch=monkeypatch)
    assert code == 2 and out == ""
    one_error_line(err, message, "(--codes ")


@pytest.mark.parametrize("argv, message", [
    (["bpe", "apply", "--codes", "no-such.bpe"], "BPE codes file not found: no-such.bpe"),
    (["bpe", "learn", "no-such.txt", "--merges", "5", "-o", "c.bpe"], "text file not found: no-such.txt"),
    (["bpe", "learn", "x.txt", "--merges", "0", "-o", "c.bpe"], "must be a whole number ≥ 1, got 0 (--merges)"),
    (["bpe", "learn", "x.txt", "-o", "c.bpe"], "the following arguments are required: --merges"),
])
def test_bad_options_and_missing_files_are_one_named_error(argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(argv, stdin="x\n", monkeypatch=monkeypatch)
    assert code == 2
    one_error_line(err, message)
    assert not (tmp_path / "c.bpe").exists()


def test_learn_names_the_bad_line_of_a_tsv_or_text_file(tmp_path):
    bad_tsv = tmp_path / "bad.tsv"
    bad_tsv.write_text("one\teins\ntwo zwei\n", encoding="utf-8")
    code, _, err = run(["bpe", "learn", bad_tsv, "--merges", 5, "-o", tmp_path / "c.bpe"])
    assert code == 2
    one_error_line(err, "bad.tsv:2")
    bad_text = tmp_path / "bad.txt"
    bad_text.write_text("fine words\nend@@ of word\n", encoding="utf-8")
    code, _, err = run(["bpe", "learn", bad_text, "--merges", 5, "-o", tmp_path / "c.bpe"])
    assert code == 2
    one_error_line(err, "bad.txt:2: word 'end@@' ends in '@@'")
    assert not (tmp_path / "c.bpe").exists()


# -- training with --level bpe ----------------------------------------------------------------------

TRAIN = ["--preset", "tiny", "--steps", "4", "--valid-every", "2", "--no-progress"]


def test_merges_are_learned_on_the_training_split_only(tsv):
    task = load_tsv_task(str(tsv), "bpe", seed=0, bpe_merges=60)
    train_text = [(detokenize(s, "bpe"), detokenize(t, "bpe")) for s, t in task.train]
    assert task.bpe == BPE.learn([s for s, _ in train_text] + [t for _, t in train_text], 60)
    every_pair = number_pairs()
    assert task.bpe.merges != BPE.learn([s for s, _ in every_pair] + [t for _, t in every_pair], 60).merges
    # and a named task, the same way
    from minitransformer.data.translation import load_splits
    named = load_task("numbers-en-de", level="bpe", bpe_merges=80)
    splits = load_splits("numbers-en-de", seed=0)
    assert named.bpe == learn_joint_bpe(splits["train"], 80)
    held_out_too = splits["train"] + splits["valid"] + splits["test"]
    assert named.bpe.merges != learn_joint_bpe(held_out_too, 80).merges
    for part in ("train", "valid", "test"):           # every split is encoded with the training split's merges
        assert [tokenize(s, "bpe", named.bpe) for s, _ in splits[part]] == [s for s, _ in getattr(named, part)]


def test_one_vocabulary_for_both_sides_of_size_specials_symbols_merges(tsv):
    task = load_tsv_task(str(tsv), "bpe", seed=0, bpe_merges=60)
    assert task.vocab == bpe_vocab(task.bpe)
    assert len(task.vocab) == len(SPECIALS) + len(task.bpe.symbols) + len(task.bpe.merges)
    used = {t for s, g in task.train for t in s + g}
    assert used <= set(task.vocab.tokens)                     # no training piece is <unk>


def test_a_piece_spelled_like_a_special_token_is_refused():
    text = ["x<eos> y<eos> z<eos>"] * 5
    with pytest.raises(BPETextError, match="the piece '<eos>', spelled like the special token"):
        bpe_vocab(BPE.learn(text, 40))


def test_train_saves_the_merges_and_translate_tokenizes_as_training_did(tmp_path, tsv, monkeypatch):
    out = tmp_path / "run"
    code, stdout, err = run(["train", "--data", tsv, "--level", "bpe", "--bpe-merges", 60, "--out", out, *TRAIN])
    assert code == 0, err
    assert "byte-pair encoding, 60 merges learned on the training split" in stdout
    ckpt = load_checkpoint(str(out / "checkpoint.npz"))
    task = load_tsv_task(str(tsv), "bpe", seed=0, bpe_merges=60)
    assert ckpt.extra["levels"]["src"] == ckpt.extra["levels"]["tgt"] == "bpe"
    assert bpe_of(ckpt.extra["levels"]) == task.bpe and ckpt.vocab == task.vocab

    # translate: the model replaced by one that returns its source, so the output must be the input, exactly
    seen = []

    def echo(model, vocab, sources, strategy=None, batch_size=100, max_len=None):
        seen.extend(sources)
        return [list(s) for s in sources]

    monkeypatch.setattr("minitransformer.translate.translate_tokens", echo)
    sentences = ["nine hundred and ninety-nine", "zweitausenddreihundertvierundvierzig"]
    code, stdout, err = run(["translate", "--checkpoint", out / "checkpoint.npz", *sentences])
    assert code == 0, err
    assert stdout.splitlines() == sentences
    assert seen == [tokenize(s, "bpe", task.bpe) for s in sentences]
    assert any(len(piece) > 1 for s in seen for piece in s)      # pieces, not characters


def test_evaluate_scores_detokenized_text_and_gives_back_the_exact_references(tmp_path, monkeypatch):
    # A copy corpus (target == source): an echoing model must score 100 on every metric, which it
    # can only if evaluate tokenizes as training did and detokenizes back to the exact text.
    copy = tmp_path / "copy.tsv"
    rows = [a for a, _ in number_pairs(120)] + [b for _, b in number_pairs(120)]
    copy.write_text("".join(f"{r}\t{r}\n" for r in rows), encoding="utf-8")
    out = tmp_path / "run"
    assert run(["train", "--data", copy, "--level", "bpe", "--bpe-merges", 50, "--out", out, *TRAIN])[0] == 0
    monkeypatch.setattr("minitransformer.translate.translate_tokens",
                        lambda model, vocab, sources, strategy=None, batch_size=100, max_len=None: [list(s) for s in sources])
    code, stdout, err = run(["evaluate", "--checkpoint", out / "checkpoint.npz", "--data", copy, "--beam", "1",
                             "--samples", 3])
    assert code == 0, err
    assert f"exact match 100.00% ({len(rows)} sentences), BLEU 100.00, chrF 100.00" in stdout
    samples = [line for line in stdout.splitlines() if line.startswith("  ✓ ")]
    assert [line.split(" -> ")[1] for line in samples] == [repr(r) for r in rows[:3]]


def test_evaluate_a_named_task_with_the_checkpoints_merges(tmp_path, monkeypatch):
    out = tmp_path / "run"
    code, _, err = run(["train", "--task", "numbers-en-de", "--level", "bpe", "--bpe-merges", 80, "--out", out,
                        "--preset", "tiny", "--steps", "2", "--valid-every", "2", "--no-progress"])
    assert code == 0, err
    seen = []

    def echo(model, vocab, sources, strategy=None, batch_size=100, max_len=None):
        seen.extend(sources)
        return [["x"] for _ in sources]

    monkeypatch.setattr("minitransformer.translate.translate_tokens", echo)
    code, _, err = run(["evaluate", "--checkpoint", out / "checkpoint.npz", "--task", "numbers-en-de", "--limit", 5,
                        "--beam", "1", "--samples", 0])
    assert code == 0, err
    bpe = bpe_of(load_checkpoint(str(out / "checkpoint.npz")).extra["levels"])
    assert len(bpe.merges) == 80
    assert seen == [s for s, _ in load_task("numbers-en-de", level="bpe", bpe=bpe).test[:5]]


@pytest.mark.parametrize("argv, message, which", [
    (["--bpe-merges", "50"], "--bpe-merges applies to byte-pair encoding; add --level bpe", "(--bpe-merges 50)"),
    (["--level", "bpe"], "--level bpe needs --bpe-merges N", "(--level bpe)"),
    (["--level", "word", "--bpe-merges", "5"], "--bpe-merges applies to byte-pair encoding", "(--bpe-merges 5)"),
])
def test_bpe_options_that_do_not_fit_are_refused_before_anything_runs(tmp_path, tsv, argv, message, which):
    code, _, err = run(["train", "--data", tsv, "--out", tmp_path / "run", *argv, *TRAIN])
    assert code == 2
    one_error_line(err, message, which)
    assert not (tmp_path / "run").exists()


def test_a_named_task_takes_level_bpe_but_no_other_level(tmp_path):
    code, _, err = run(["train", "--task", "copy", "--level", "word", "--out", tmp_path / "run", *TRAIN])
    assert code == 2
    one_error_line(err, "--level applies to --data files only", "(--level)")
    code, _, err = run(["train", "--task", "copy", "--level", "bpe", "--out", tmp_path / "run", *TRAIN])
    assert code == 2
    one_error_line(err, "--level bpe needs --bpe-merges N")


def test_a_resumed_run_keeps_its_merges_and_refuses_others(tmp_path, tsv):
    out = tmp_path / "run"
    assert run(["train", "--data", tsv, "--level", "bpe", "--bpe-merges", 60, "--out", out, *TRAIN])[0] == 0
    first = load_checkpoint(str(out / "checkpoint.npz"))
    resume = ["train", "--data", tsv, "--resume", out / "checkpoint.npz", "--out", out, "--steps", "6",
              "--no-progress"]
    code, _, err = run([*resume, "--bpe-merges", 61])
    assert code == 2
    one_error_line(err, "has 60 BPE merges, not 61", "(--bpe-merges 61)")
    code, _, err = run([*resume, "--level", "char"])
    assert code == 2
    one_error_line(err, "byte-pair encodes its text, not char-level", "(--level char)")
    code, _, err = run(resume)                                # no --level: the checkpoint's merges
    assert code == 0, err
    again = load_checkpoint(str(out / "checkpoint.npz"))
    assert again.step == 6 and again.extra["levels"] == first.extra["levels"] and again.vocab == first.vocab


def test_translate_refuses_another_level_for_a_bpe_model_and_names_unseen_characters(tmp_path, tsv):
    out = tmp_path / "run"
    assert run(["train", "--data", tsv, "--level", "bpe", "--bpe-merges", 30, "--out", out, *TRAIN])[0] == 0
    code, _, err = run(["translate", "--checkpoint", out / "checkpoint.npz", "--level", "char", "one"])
    assert code == 2
    one_error_line(err, "reads byte-pair pieces", "(--level char)")
    code, stdout, err = run(["translate", "--checkpoint", out / "checkpoint.npz", "--beam", "1", "one  Ωmega"])
    assert code == 0 and len(stdout.splitlines()) == 1
    assert "the input was lower-cased" in err                  # numbers are lower-case: Ω became ω
    assert "tokens not in the vocabulary (read as <unk>): " in err and "'ω@@'" in err
    assert "never seen in training at that place in a word" in err


# -- the BPE entry of a checkpoint is checked when it is loaded -------------------------------------

def _rewrite_levels(path, change) -> None:
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["meta"]))
    change(meta["extra"]["levels"])
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(path, **arrays)


@pytest.mark.parametrize("change, message", [
    (lambda levels: levels.pop("bpe"), "byte-pair encoded, but the merges (extra.levels.bpe) are missing"),
    (lambda levels: levels["bpe"]["merges"].append(["a</w>", "b"]), "extra.levels.bpe: merge"),
    (lambda levels: levels["bpe"].update(symbols=["ab"]), "extra.levels.bpe: symbol 0"),
    (lambda levels: levels["bpe"]["merges"].pop(), "the merges stored in it (extra.levels.bpe) make another "
                                                   "vocabulary than its own (70 tokens by the merges, 71 in the "
                                                   "vocabulary): the merges were changed after training, not the data"),
    (lambda levels: levels.update(src="char", tgt="char"), "neither side is byte-pair encoded"),
])
def test_a_damaged_bpe_entry_is_refused_at_load(tmp_path, tsv, change, message):
    out = tmp_path / "run"
    assert run(["train", "--data", tsv, "--level", "bpe", "--bpe-merges", 30, "--out", out, *TRAIN])[0] == 0
    path = str(out / "checkpoint.npz")
    _rewrite_levels(path, change)
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_checkpoint(path)


def _tampered(tmp_path, tsv, consistent: bool):
    """A BPE run's checkpoint whose stored merges were changed: the first two swapped (the vocabulary, made
    from the merges in order, no longer matches), or (consistent) one replaced together with the vocabulary."""
    from minitransformer.data.bpe import BPE as Merges
    from minitransformer.data.vocab import bpe_vocab

    out = tmp_path / "run"
    assert run(["train", "--data", tsv, "--level", "bpe", "--bpe-merges", 30, "--out", out, *TRAIN])[0] == 0
    path = out / "checkpoint.npz"
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["meta"]))
    bpe = meta["extra"]["levels"]["bpe"]
    merges = bpe["merges"]
    if consistent:
        merges[-1] = [merges[0][0], merges[0][0]]
        meta["vocab"] = bpe_vocab(Merges.from_dict(bpe)).to_dict()
    else:
        merges[0], merges[1] = merges[1], merges[0]
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("consistent", [False, True])
def test_tampered_merges_are_named_as_the_merges_at_load_and_on_resume(tmp_path, tsv, consistent):
    """issue 36: swapped merges said "(55 tokens, the merges make 55)"; merges changed with their vocabulary
    loaded, and the resume said "the data differs (then: 263/15/15 ... now: 263/15/15)"."""
    path = _tampered(tmp_path, tsv, consistent)
    for argv, option in ((["translate", "--checkpoint", path, "one"], "--checkpoint"),
                         (["train", "--data", tsv, "--level", "bpe", "--resume", path, "--out", tmp_path / "run",
                           "--steps", "8", "--no-progress"], "--resume")):
        code, _, err = run(argv)
        assert code == 2, err
        line = one_error_line(err, "the merges were changed after training", f"({option} {path})")
        assert "data differs" not in line and "the merges make" not in line, line
        if not consistent:
            assert "tokens each, but token " in line and " in the vocabulary and " in line, line


def test_codes_from_bpe_learn_apply_in_a_fresh_subword_nmt_process(tmp_path, tsv):
    """The codes file needs nothing of this package: subword-nmt's own command line reads it."""
    pytest.importorskip("subword_nmt")
    codes = tmp_path / "codes.bpe"
    assert run(["bpe", "learn", tsv, "--merges", 40, "-o", codes])[0] == 0
    done = subprocess.run([sys.executable, "-m", "subword_nmt.apply_bpe", "-c", str(codes)], input="neunhundert\n",
                          capture_output=True, text=True, encoding="utf-8", env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout == BPE(read_codes(codes)).apply("neunhundert\n")


def test_a_task_may_carry_a_measured_merge_count_for_level_bpe():
    from minitransformer.data.loading import Task
    from minitransformer.settings import recipe

    pairs = {"train": number_pairs(60), "valid": number_pairs(62)[60:], "test": number_pairs(64)[62:]}
    task = Task("t", "a test task", recipe("tiny", steps=1), lambda seed: pairs, "word", "char", bpe_merges=30)
    assert task.load().src_level == "word" and task.load().bpe is None     # its own tokenization by default
    assert len(task.load(level="bpe").bpe.merges) == 30                    # --level bpe: the measured count
    assert len(task.load(level="bpe", bpe_merges=12).bpe.merges) == 12
    with pytest.raises(ValueError, match="bpe_merges must be an integer ≥ 1, got 0"):
        Task("u", "a test task", recipe("tiny", steps=1), lambda seed: pairs, bpe_merges=0)
    plain = Task("v", "a test task", recipe("tiny", steps=1), lambda seed: pairs)
    with pytest.raises(ValueError, match="level 'bpe' needs the number of merges"):
        plain.load(level="bpe")


def test_numbers_en_de_has_a_measured_merge_count_and_tasks_shows_it(tmp_path):
    code, out, _ = run(["tasks"])
    assert code == 0
    (line,) = [line for line in out.splitlines() if line.startswith("numbers-en-de ")]
    assert "--level bpe: 200 merges" in line
    code, stdout, err = run(["train", "--task", "numbers-en-de", "--level", "bpe", "--out", tmp_path / "run",
                             "--preset", "tiny", "--steps", "1", "--valid-every", "1", "--no-progress"])
    assert code == 0, err
    assert "byte-pair encoding, 200 merges learned on the training split" in stdout


def test_the_emoji_tasks_have_a_measured_merge_count():
    """1,000 merges, measured on all three emoji tasks (docs/translation_results.md): `--level bpe` alone
    learns them on the training split, `tasks` says the tasks train on them, and load_task keeps
    characters (lesson 9's padding figure reads the emoji names character by character)."""
    code, out, _ = run(["tasks"])
    assert code == 0
    for name in ("emoji-en-fr", "emoji-en-de", "emoji-en-ko"):
        (line,) = [line for line in out.splitlines() if line.startswith(f"{name} ")]
        assert "trains on byte-pair pieces, 1000 merges" in line and "--level char: characters" in line, line
        data = load_task(name, level="bpe")
        assert len(data.bpe.merges) == 1000 and data.src_level == data.tgt_level == "bpe"
        plain = load_task(name)
        assert plain.bpe is None and plain.src_level == plain.tgt_level == "char"


def test_train_on_an_emoji_task_learns_pieces_unless_told_characters(tmp_path):
    """The emoji tasks' train_level: a new run learns the measured 1,000 merges without --level; --level char
    (their own level) trains on characters; --bpe-merges alone changes the count; a resumed character run
    stays on characters; another level is refused, naming the two it takes."""
    def levels(out):
        return load_checkpoint(str(out / "checkpoint.npz")).extra["levels"]

    argv = ["train", "--task", "emoji-en-fr", *TRAIN]
    assert run([*argv, "--out", tmp_path / "pieces"])[0] == 0
    assert len(bpe_of(levels(tmp_path / "pieces")).merges) == 1000
    assert run([*argv, "--bpe-merges", 40, "--out", tmp_path / "forty"])[0] == 0
    assert len(bpe_of(levels(tmp_path / "forty")).merges) == 40
    assert run([*argv, "--level", "char", "--out", tmp_path / "chars"])[0] == 0
    chars = levels(tmp_path / "chars")
    assert bpe_of(chars) is None and (chars["src"], chars["tgt"]) == ("char", "char")
    code, _, err = run(["train", "--task", "emoji-en-fr", "--resume", tmp_path / "chars" / "checkpoint.npz",
                        "--out", tmp_path / "chars", "--steps", "6", "--no-progress"])
    assert code == 0, err
    assert levels(tmp_path / "chars") == chars
    code, _, err = run([*argv, "--level", "word", "--out", tmp_path / "words"])
    assert code == 2
    one_error_line(err, "--level applies to --data files only", "except --level bpe or --level char, its own",
                   "(--level)")
    assert not (tmp_path / "words").exists()


def test_a_task_train_level_is_none_or_bpe_with_a_merge_count():
    from minitransformer.data.loading import Task
    from minitransformer.settings import recipe

    pairs = {"train": number_pairs(4), "valid": number_pairs(4), "test": number_pairs(4)}
    with pytest.raises(ValueError, match="train_level must be None .* or 'bpe' with bpe_merges, got 'bpe'"):
        Task("t", "a test task", recipe("tiny", steps=1), lambda seed: pairs, train_level="bpe")
    with pytest.raises(ValueError, match="got 'word'"):
        Task("t", "a test task", recipe("tiny", steps=1), lambda seed: pairs, bpe_merges=3, train_level="word")
