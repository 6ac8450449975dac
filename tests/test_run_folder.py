"""The run folder (issue 19, items 1, 5 and 13): one run at a time holds it (an OS lock that dies
with its process), temporary files are unique per writer and cleaned up only when their writer is
gone, a checkpoint that cannot be written names the one that is intact and how to resume, and an
--out or --attention folder that cannot be written is a usage error naming the option."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from minitransformer import files, runlock
from minitransformer.__main__ import main
from minitransformer.checkpoint import load_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "one two three four five six seven eight".split()

HOLDER = """
import sys, time
from minitransformer import runlock
with runlock.hold(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def _env():
    return {**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "pairs.tsv"
    path.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in WORDS for b in WORDS), encoding="utf-8")
    return str(path)


def _train(data, out, *extra):
    return ["train", "--data", data, "--level", "word", "--preset", "tiny", "--no-progress", "--batch-size", "16",
            "--out", str(out), *extra]


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock of tmp_path/"run"; yields (folder, its PID)."""
    folder = tmp_path / "run"
    folder.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, env=_env(), cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == b"held"
        yield folder, proc
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def _errors(err):
    return [line for line in err.splitlines() if line.startswith("error: ")]


# -- item 1: the lock ----------------------------------------------------------------------------

def test_a_held_folder_is_refused_naming_the_folder_and_the_pid(holder):
    folder, proc = holder
    with pytest.raises(runlock.FolderInUseError) as caught:
        with runlock.hold(folder):
            pass
    assert caught.value.pid == proc.pid and caught.value.directory == str(folder)
    assert f"{folder} is in use by another training run (PID {proc.pid})" in str(caught.value)


def test_the_lock_dies_with_its_process_so_it_is_never_stale(holder):
    folder, proc = holder
    proc.kill()                                       # SIGKILL: no handler, no cleanup
    proc.wait()
    with runlock.hold(folder):                        # free at once, with nothing to clean up
        assert runlock.holds(folder)
        assert (folder / runlock.LOCK_NAME).read_text().strip() == str(os.getpid())
    assert not runlock.holds(folder)


def test_the_lock_is_reentrant_within_a_process(tmp_path):
    with runlock.hold(tmp_path):
        with runlock.hold(tmp_path):                  # the command line holds it, then Trainer.run again
            assert runlock.holds(tmp_path)
        assert runlock.holds(tmp_path)
    assert not runlock.holds(tmp_path)


def test_train_into_a_held_folder_is_one_line_naming_the_pid_and_option(holder, data, capsys):
    folder, proc = holder
    rc = main(_train(data, folder, "--steps", "2"))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert _errors(err) == [f"error: {folder} is in use by another training run (PID {proc.pid}); wait for it to "
                            f"finish, or train into another folder (--out {folder})"]
    assert not (folder / "checkpoint.npz").exists() and not (folder / "metrics.jsonl").exists()


@pytest.mark.slow
def test_two_trainings_started_together_into_one_folder_both_end_with_a_named_outcome(data, tmp_path):
    """Issue 19's reproduction: before the lock, one of them always died with an exit-2 "No such
    file" about a hidden temporary file. Now one trains; the other is refused, named."""
    out = tmp_path / "shared"
    argv = [sys.executable, "-m", "minitransformer", *_train(data, out, "--steps", "40", "--checkpoint-every", "1")]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)
             for _ in range(2)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    codes = sorted(rc for rc, _, _ in results)
    assert codes == [0, 2], [(rc, err[-500:]) for rc, _, err in results]
    (_, _, refused), = [r for r in results if r[0] == 2]
    lines = _errors(refused)
    assert len(lines) == 1 and lines[0].endswith(f"(--out {out})"), refused
    assert "is in use by another training run (PID " in lines[0] or "holds an earlier run" in lines[0]
    assert "No such file" not in refused and "Traceback" not in refused
    assert load_checkpoint(str(out / "checkpoint.npz")).step == 40               # intact, and complete
    assert [n for n in os.listdir(out) if n.endswith(".partial")] == []


# -- item 1: temporary names, and what the cleanup removes -------------------------------------

def test_temporary_names_are_unique_per_writer_and_name_their_target(tmp_path):
    target = tmp_path / "checkpoint.npz"
    a, b = files.partial_path(target), files.partial_path(target)
    assert a != b
    for name in (a, b):
        base = os.path.basename(name)
        assert base.startswith(f".checkpoint.npz.{os.getpid()}-") and base.endswith(".partial")
        assert files.partial_target(name) == "checkpoint.npz"
    assert files.partial_target(tmp_path / ".checkpoint.npz.partial") == "checkpoint.npz"    # the old name
    assert files.partial_target(tmp_path / "checkpoint.npz") is None


def test_the_cleanup_removes_old_and_new_leftovers_but_not_a_live_writers_file(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        keep = ["checkpoint.npz", runlock.LOCK_NAME, "notes.partial", f".checkpoint.npz.{live.pid}-0a1b2c3d.partial"]
        stale = [".checkpoint.npz.partial", ".metrics.jsonl.partial", ".tmp-k2j3h4checkpoint.npz",
                 f".checkpoint.npz.{dead_pid}-deadbeef.partial", f".write-test.{dead_pid}-00ff00ff.partial",
                 f".metrics.jsonl.{os.getpid()}-12345678.partial"]      # this process's own: not being written
        for name in keep + stale:
            (tmp_path / name).write_bytes(b"x")
        removed = files.remove_stale_partials(tmp_path)
        assert sorted(os.path.basename(p) for p in removed) == sorted(stale)
        assert sorted(os.listdir(tmp_path)) == sorted(keep)
    finally:
        live.kill()
        live.wait()


def test_a_failed_write_names_the_target_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError) as caught:
        files.atomic_write_text(tmp_path / "metrics.jsonl", "{}\n")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / "metrics.jsonl")
    assert os.listdir(tmp_path) == []


def test_a_failed_start_up_write_test_leaves_no_probe(tmp_path, monkeypatch):
    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="cannot write files there .No space left on device"):
        files.check_writable_dir(tmp_path)
    assert os.listdir(tmp_path) == []                  # no .write-test.….partial left behind


# -- item 13: an --out or --attention folder that cannot be written -----------------------------

def _refuse_probe(monkeypatch, err_no, text):
    """Make files.check_writable_dir's probe fail as a read-only or forbidden folder would (we may be root)."""
    real_open = open

    def fake_open(path, *args, **kwargs):
        if ".write-test." in os.fspath(path):
            raise OSError(err_no, text, os.fspath(path))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(files, "open", fake_open, raising=False)


@pytest.mark.parametrize("err_no, text, says", [(errno.EROFS, "Read-only file system", "the file system is read-only"),
                                                (errno.EACCES, "Permission denied", "no permission to create")])
def test_an_unwritable_out_folder_is_a_usage_error_naming_the_option(data, tmp_path, monkeypatch, capsys,
                                                                     err_no, text, says):
    out = tmp_path / "ro"
    out.mkdir()
    _refuse_probe(monkeypatch, err_no, text)
    rc = main(_train(data, out, "--steps", "2"))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert _errors(err) == [f"error: {says}" + ("" if err_no == errno.EROFS else " or write files there")
                            + f" (--out {out})"]


def test_an_unwritable_attention_folder_is_a_usage_error_naming_the_option(data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "heatmaps"
    _refuse_probe(monkeypatch, errno.EROFS, "Read-only file system")
    rc = main(["translate", "--checkpoint", str(tmp_path / "unused.npz"), "--attention", str(out), "one"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert _errors(err) == [f"error: the file system is read-only (--attention {out})"]


def test_a_full_disk_at_start_up_is_a_run_time_error_naming_the_option(data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "full"

    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(files.os, "fsync", disk_full)
    rc = main(_train(data, out, "--steps", "2"))
    err = capsys.readouterr().err
    assert rc == 1, err
    assert _errors(err) == [f"error: cannot write files there (No space left on device) (--out {out})"]
    assert os.listdir(out) == []


# -- item 5: a checkpoint that cannot be written mid-run ---------------------------------------

def _fail_checkpoint_writes(monkeypatch, from_save: int):
    """From the ``from_save``-th checkpoint written on, its fsync fails as on a full disk."""
    real_fsync, seen = os.fsync, []

    def fsync(fd):
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if name.startswith(".checkpoint.npz.") and name.endswith(".partial"):
            seen.append(name)
            if len(seen) >= from_save:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)
    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="finds the file of a descriptor in /proc")
def test_a_full_disk_while_saving_names_the_checkpoint_the_intact_one_and_how_to_resume(data, tmp_path,
                                                                                     monkeypatch, capsys):
    out = tmp_path / "run"
    argv = _train(data, out, "--steps", "20", "--valid-every", "5")
    _fail_checkpoint_writes(monkeypatch, from_save=2)                  # the step-10 save fails
    rc = main(argv)
    err = capsys.readouterr().err
    monkeypatch.undo()
    assert rc == 1, err
    ckpt = out / "checkpoint.npz"
    (line,) = _errors(err)
    assert line.startswith(f"error: could not write {ckpt} at step 10 (No space left on device); the previous "
                           f"checkpoint, {ckpt} (step 5), is intact; make room (or fix the folder's permissions) "
                           f"and resume with: python -m minitransformer train --data {data}"), line
    assert line.endswith(f"--resume {ckpt}")
    assert ".partial" not in line and [n for n in os.listdir(out) if n.endswith(".partial")] == []
    assert load_checkpoint(str(ckpt)).step == 5
    resume = line.split("resume with: python -m minitransformer ", 1)[1].split()
    assert main(resume) == 0, capsys.readouterr().err                 # the printed command works
    assert load_checkpoint(str(ckpt)).step == 20


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="finds the file of a descriptor in /proc")
def test_a_first_save_that_fails_says_there_is_nothing_to_resume(data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    _fail_checkpoint_writes(monkeypatch, from_save=1)
    rc = main(_train(data, out, "--steps", "10", "--valid-every", "5"))
    err = capsys.readouterr().err
    assert rc == 1, err
    assert _errors(err) == [f"error: could not write {out / 'checkpoint.npz'} at step 5 (No space left on device); "
                            "no checkpoint was written before it, so there is nothing to resume from; make room (or "
                            "fix the folder's permissions) and start the run again"]


def test_an_unwritable_file_in_the_folder_keeps_the_good_checkpoint(data, tmp_path, capsys):
    """No fault injection: checkpoint.prev.npz is a folder, so keeping the replaced checkpoint fails."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.prev.npz").mkdir()
    rc = main(_train(data, out, "--steps", "10", "--valid-every", "5"))
    err = capsys.readouterr().err
    assert rc == 1, err
    (line,) = _errors(err)
    assert f"could not write {out / 'checkpoint.npz'} at step 10 (" in line
    assert f"the previous checkpoint, {out / 'checkpoint.npz'} (step 5), is intact" in line
    assert load_checkpoint(str(out / "checkpoint.npz")).step == 5
    assert [n for n in os.listdir(out) if n.endswith(".partial")] == []


def test_open_to_read_names_the_file_and_its_kind(tmp_path, monkeypatch):
    """The one reader of user-named files (TSV, text, BPE codes): each way open fails is its own
    error type, naming the path and the kind of file that was expected."""
    open_to_read = files.open_to_read
    with pytest.raises(FileNotFoundError, match=r"^TSV data file not found: .*nope\.tsv$"):
        open_to_read(tmp_path / "nope.tsv", "TSV data file", "TSV file")
    with pytest.raises(IsADirectoryError, match=r"is a directory, not a TSV file$"):
        open_to_read(tmp_path, "TSV data file", "TSV file")
    (tmp_path / "codes.bpe").write_bytes(b"#version: 0.2\n")
    with open_to_read(tmp_path / "codes.bpe", "BPE codes file") as f:
        assert f.read() == b"#version: 0.2\n"

    def refuse(*args, **kwargs):                  # as root, chmod 000 does not stop a read
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr("builtins.open", refuse)
    with pytest.raises(PermissionError, match=r"codes\.bpe: no permission to read the BPE codes file$"):
        open_to_read(tmp_path / "codes.bpe", "BPE codes file")
