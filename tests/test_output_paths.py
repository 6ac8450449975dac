"""One rule for every file a command writes (issue 36, item 2; files.check_output_file /
check_output_folder): an output is never one of the command's own inputs, under any name (a
hard link counts), and at most the last missing folder of an output path is created, unless
``--parents`` asks for all of them (as ``mkdir -p``). Both are checked before any work."""

from __future__ import annotations

import os
import shutil

import pytest
from cli_run import one_error_line, run

from minitransformer.files import OutputPathError, check_output_file, check_output_folder, refuse_inputs, same_file


@pytest.fixture
def tsv(tmp_path):
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in words for b in words), encoding="utf-8")
    return path


# -- the rule itself ------------------------------------------------------------------------------

def test_same_file_sees_hard_links_symbolic_links_and_spellings(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("x")
    os.link(a, tmp_path / "hard.txt")
    os.symlink(a, tmp_path / "soft.txt")
    (tmp_path / "copy.txt").write_text("x")
    for other in ("hard.txt", "soft.txt", "./a.txt"):
        assert same_file(a, tmp_path / other), other
    assert not same_file(a, tmp_path / "copy.txt")
    assert not same_file(a, tmp_path / "missing.txt")
    with pytest.raises(OutputPathError, match=r"hard.txt is the same file as the input .*a.txt"):
        refuse_inputs(tmp_path / "hard.txt", [("the input", a)])
    with pytest.raises(OutputPathError, match=r"a.txt is the input too: writing it would replace an input"):
        refuse_inputs(a, [("the input", a)])
    refuse_inputs(tmp_path / "copy.txt", [("the input", a), ("nothing", None)])


def test_only_the_last_missing_folder_is_created_unless_asked(tmp_path):
    check_output_file(tmp_path / "one" / "x.bpe")                     # one missing folder: created
    assert (tmp_path / "one").is_dir()
    with pytest.raises(OutputPathError, match=r"two/three: the folder .*two does not exist either; only the last "
                                              r"missing folder of an output path is created \(check the path, or "
                                              r"say so\)"):
        check_output_file(tmp_path / "two" / "three" / "x.bpe", ask="say so")
    assert not (tmp_path / "two").exists()
    check_output_folder(tmp_path / "two" / "three" / "four", parents=True)
    assert (tmp_path / "two" / "three" / "four").is_dir()
    with pytest.raises(OutputPathError, match="is a folder or no name at all"):
        check_output_file(tmp_path / "one")


# -- each command -------------------------------------------------------------------------------

def test_bpe_learn_refuses_to_write_over_its_own_corpus(tmp_path, tsv):
    """It replaced the corpus with the codes (bpe learn x.tsv --merges 10 -o x.tsv)."""
    before = tsv.read_bytes()
    os.link(tsv, tmp_path / "linked.tsv")
    for output in (tsv, tmp_path / "linked.tsv"):
        code, _, err = run(["bpe", "learn", tsv, "--merges", "10", "-o", output])
        assert code == 2, err
        one_error_line(err, f"{output} is ", "a file to learn from", "write to another file", f"(--output {output})")
        assert tsv.read_bytes() == before


def test_bpe_learn_creates_one_missing_folder_and_more_only_with_parents(tmp_path, tsv):
    """``-o /no/such/dir/x.bpe`` created /no/such/dir, at any depth, without a word."""
    deep = tmp_path / "no" / "such" / "dir" / "x.bpe"
    code, _, err = run(["bpe", "learn", tsv, "--merges", "10", "-o", deep])
    assert code == 2, err
    one_error_line(err, f"the folder {tmp_path / 'no'} does not exist either", "give --parents to create them all",
                   f"(--output {deep})")
    assert not (tmp_path / "no").exists()
    code, _, err = run(["bpe", "learn", tsv, "--merges", "10", "-o", tmp_path / "codes" / "x.bpe"])
    assert code == 0 and (tmp_path / "codes" / "x.bpe").is_file(), err
    code, _, err = run(["bpe", "learn", tsv, "--merges", "10", "-o", deep, "--parents"])
    assert code == 0 and deep.is_file(), err


def _tiny_run(tmp_path, tsv, name="run"):
    out = tmp_path / name
    code, _, err = run(["train", "--data", tsv, "--out", out, "--steps", "4", "--valid-every", "2", "--keep-last", "2",
                        "--level", "word", "--preset", "tiny", "--no-progress"])
    assert code == 0, err
    return out


def test_average_refuses_missing_folders_and_a_hard_link_to_an_input(tmp_path, tsv):
    out = _tiny_run(tmp_path, tsv)
    sources = [out / "checkpoint.step000002.npz", out / "checkpoint.step000004.npz"]
    deep = tmp_path / "a" / "b" / "avg.npz"
    code, _, err = run(["average", *sources, "-o", deep])
    assert code == 2
    one_error_line(err, "does not exist either", "--parents", f"(--output {deep})")
    assert not (tmp_path / "a").exists()
    code, _, err = run(["average", *sources, "-o", out / "checkpoint.npz"])          # step 4's file, another name
    assert code == 2
    one_error_line(err, "is the same file as a checkpoint to average", str(sources[1]))
    assert run(["average", *sources, "-o", deep, "--parents"])[0] == 0 and deep.is_file()


def test_train_refuses_an_out_folder_whose_files_include_its_data(tmp_path, tsv):
    """--data OUT/metrics.jsonl with --overwrite: the run would replace the file it trains on."""
    out = _tiny_run(tmp_path, tsv)
    data = out / "metrics.jsonl"
    shutil.copyfile(tsv, data)
    before = data.read_bytes()
    code, _, err = run(["train", "--data", data, "--out", out, "--overwrite", "--steps", "2", "--level", "word",
                        "--preset", "tiny", "--no-progress"])
    assert code == 2, err
    one_error_line(err, f"{data} is --data too", f"(--out {out})")
    assert data.read_bytes() == before


def test_train_creates_one_missing_folder_of_out_and_more_with_parents(tmp_path, tsv, monkeypatch):
    deep = tmp_path / "x" / "y" / "run"
    args = ["--data", tsv, "--steps", "2", "--valid-every", "2", "--level", "word", "--preset", "tiny",
            "--no-progress"]
    code, _, err = run(["train", "--out", deep, *args])
    assert code == 2, err
    one_error_line(err, f"the folder {tmp_path / 'x'} does not exist either", f"(--out {deep})")
    assert not (tmp_path / "x").exists()
    assert run(["train", "--out", deep, "--parents", *args])[0] == 0
    assert (deep / "checkpoint.npz").is_file()
    monkeypatch.chdir(tmp_path)                    # the default, runs/TASK, may create runs/ as well
    code, _, err = run(["train", *args])
    assert code == 0, err
    assert (tmp_path / "runs" / "pairs.tsv" / "checkpoint.npz").is_file()


def test_translate_attention_refuses_missing_folders_and_its_own_checkpoint(tmp_path, tsv):
    out = _tiny_run(tmp_path, tsv)
    deep = tmp_path / "m" / "n" / "maps"
    code, _, err = run(["translate", "--checkpoint", out / "checkpoint.npz", "--attention", deep, "--beam", "1",
                        "one two"])
    assert code == 2
    one_error_line(err, "does not exist either", f"(--attention {deep})")
    assert not (tmp_path / "m").exists()
    maps = tmp_path / "maps"
    maps.mkdir()
    shutil.copyfile(out / "checkpoint.npz", maps / "encoder_self.png")     # a checkpoint under a heatmap's name
    code, _, err = run(["translate", "--checkpoint", maps / "encoder_self.png", "--attention", maps, "--beam", "1",
                        "one two"])
    assert code == 2
    one_error_line(err, "is --checkpoint too", f"(--attention {maps})")
    code, _, err = run(["translate", "--checkpoint", out / "checkpoint.npz", "--attention", deep, "--parents",
                        "--beam", "1", "one two"])
    assert code == 0 and (deep / "encoder_self.png").is_file(), err
