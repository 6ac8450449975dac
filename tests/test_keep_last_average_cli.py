"""Checkpoint averaging from the command line (§6.1; issue 21, items 5 and 6):

* ``train --keep-last K`` keeps the checkpoints written at the validation interval (and the last
  step's) as ``checkpoint.stepNNNNNN.npz``, each the same bytes as the checkpoint of that step, the
  oldest beyond K removed; a resumed run first removes the kept checkpoints of the steps it will
  write again; a bad K is refused before step 1;
* ``average A.npz B.npz … -o avg.npz`` writes their mean, marked as an average; ``translate`` and
  ``evaluate`` take it, ``train --resume`` refuses it saying it is an average; checkpoints that cannot
  be averaged are refused, each with a one-line named error.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.__main__ import main
from minitransformer.checkpoint import load_checkpoint
from minitransformer.snapshots import kept_checkpoints, step_path


def run(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def one_error_line(err: str, *fragments: str) -> None:
    line = err.strip().splitlines()[-1] if err.strip() else ""
    assert line.startswith("error: ") and "Traceback" not in err, err
    assert len([x for x in err.splitlines() if x.startswith("error: ")]) == 1
    for fragment in fragments:
        assert fragment in line, line


@pytest.fixture
def tsv(tmp_path):
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    lines = [f"{a} {b}\t{b} {a}" for a in words for b in words]
    path = tmp_path / "pairs.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


TRAIN = ["--level", "word", "--preset", "tiny", "--valid-every", "5", "--no-progress"]


def _params(path) -> dict:
    return {name: backend.to_numpy(p.data) for name, p in load_checkpoint(str(path)).model.named_parameters()}


def test_keep_last_keeps_the_last_k_interval_checkpoints(tmp_path, tsv):
    out = tmp_path / "run"
    code, _, err = run(["train", "--data", tsv, "--out", out, "--steps", "22", "--keep-last", "3", *TRAIN])
    assert code == 0, err
    kept = kept_checkpoints(str(out))
    assert [k for k, _ in kept] == [15, 20, 22]                 # validations at 5, 10, 15, 20 and the last step
    assert os.path.basename(kept[-1][1]) == "checkpoint.step000022.npz"
    with open(out / "checkpoint.npz", "rb") as f, open(kept[-1][1], "rb") as g:
        assert f.read() == g.read()                             # the last step's checkpoint, the same bytes
    for step, path in kept:
        assert load_checkpoint(path).step == step


@pytest.mark.slow
def test_keep_last_under_mpiexec_keeps_the_same_steps_written_by_rank_0(tmp_path, tsv):
    """Two ranks (the [mpi] extra): rank 0 alone writes, so the kept steps are those of one process."""
    import shutil
    import subprocess
    import sys

    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if mpiexec is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("the [mpi] extra (mpi4py, mpich) is not installed: pip install -e '.[mpi]'")
    out = tmp_path / "run"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "minitransformer", "train", "--data", str(tsv),
                           "--out", str(out), "--steps", "22", "--keep-last", "3", *TRAIN],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=root, OPENBLAS_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr
    kept = kept_checkpoints(str(out))
    assert [k for k, _ in kept] == [15, 20, 22]
    for step, path in kept:
        assert load_checkpoint(path).step == step


def test_without_keep_last_no_step_files_are_written(tmp_path, tsv):
    out = tmp_path / "run"
    assert run(["train", "--data", tsv, "--out", out, "--steps", "10", *TRAIN])[0] == 0
    assert kept_checkpoints(str(out)) == []


def test_a_resumed_run_replaces_the_kept_checkpoints_after_its_step(tmp_path, tsv):
    out = tmp_path / "run"
    assert run(["train", "--data", tsv, "--out", out, "--steps", "20", "--keep-last", "4", *TRAIN])[0] == 0
    before = {k: open(p, "rb").read() for k, p in kept_checkpoints(str(out))}
    assert sorted(before) == [5, 10, 15, 20]
    # go back to step 10 and train on to 25 (replacing the folder's run: --overwrite): steps 15 and 20
    # are written again, by this run
    code, _, err = run(["train", "--data", tsv, "--out", out, "--resume", step_path(str(out), 10), "--steps", "25",
                        "--overwrite", "--no-progress"])
    assert code == 0, err
    assert "removed 2 kept checkpoint(s) of steps after 10" in err
    after = dict(kept_checkpoints(str(out)))
    assert sorted(after) == [10, 15, 20, 25]                   # keep_last 4 was saved with the settings
    assert open(after[10], "rb").read() == before[10]


@pytest.mark.parametrize("value, message", [("0", "must be a whole number ≥ 1, got 0"), ("x", "'x' is not a whole number")])
def test_a_bad_keep_last_is_refused_before_step_1(tmp_path, tsv, value, message):
    out = tmp_path / "run"
    code, _, err = run(["train", "--data", tsv, "--out", out, "--steps", "10", "--keep-last", value, *TRAIN])
    assert code == 2
    one_error_line(err, message, "(--keep-last)")
    assert not out.exists()


# -- average -------------------------------------------------------------------------------------

@pytest.fixture
def run_dir(tmp_path, tsv):
    out = tmp_path / "run"
    code, _, err = run(["train", "--data", tsv, "--out", out, "--steps", "20", "--keep-last", "3", *TRAIN])
    assert code == 0, err
    return out


def test_average_writes_the_mean_marked_as_an_average(run_dir, tmp_path):
    paths = [p for _, p in kept_checkpoints(str(run_dir))]
    avg = tmp_path / "avg.npz"
    code, _, err = run(["average", *paths, "-o", avg])
    assert code == 0, err
    assert "averaged 3 checkpoint(s) (steps 10, 15, 20)" in err
    ckpt = load_checkpoint(str(avg))
    assert ckpt.optimizer_state is None
    assert ckpt.extra["average"] == {"sources": paths, "steps": [10, 15, 20]}
    sources = [_params(p) for p in paths]
    for name, value in _params(avg).items():
        mean = sum(s[name].astype(np.float64) for s in sources) / 3
        np.testing.assert_array_equal(value, mean.astype(value.dtype), err_msg=name)


def test_translate_and_evaluate_take_an_average_and_train_refuses_to_resume_it(run_dir, tmp_path, tsv):
    avg = tmp_path / "avg.npz"
    assert run(["average", *[p for _, p in kept_checkpoints(str(run_dir))], "-o", avg])[0] == 0
    code, out, err = run(["translate", "--checkpoint", avg, "--beam", "1", "one two", "three four"])
    assert code == 0 and len(out.splitlines()) == 2, err
    code, out, err = run(["evaluate", "--checkpoint", avg, "--data", tsv, "--limit", "5", "--samples", "0",
                          "--beam", "1"])
    assert code == 0 and "exact match" in out, err
    code, _, err = run(["train", "--data", tsv, "--resume", avg, "--steps", "30", "--no-progress"])
    assert code == 2
    one_error_line(err, "is an average of 3 checkpoints (steps 10, 15, 20, written by `average`)",
                   "training cannot resume from it", f"(--resume {avg})")


def test_average_refuses_checkpoints_of_another_run_and_other_bad_input(run_dir, tmp_path, tsv):
    other = tmp_path / "other"
    assert run(["train", "--data", tsv, "--out", other, "--steps", "5", "--seed", "1", *TRAIN])[0] == 0
    mine = step_path(str(run_dir), 20)
    cases = [
        ([mine, other / "checkpoint.npz"], "have different vocabularies",   # another seed splits the data otherwise
         "(the checkpoints to average)"),
        ([mine, mine], "is given twice", "(the checkpoints to average)"),
        ([mine, tsv], "not a .npz checkpoint", f"(checkpoint {tsv})"),
        ([mine, tmp_path / "missing.npz"], "checkpoint not found", "(checkpoint "),
    ]
    for paths, message, which in cases:
        code, _, err = run(["average", *paths, "-o", tmp_path / "avg.npz"])
        assert code == 2, (paths, err)
        one_error_line(err, message, which)
        assert not (tmp_path / "avg.npz").exists()
    code, _, err = run(["average", mine, step_path(str(run_dir), 15), "-o", mine])
    assert code == 2
    one_error_line(err, "is a checkpoint to average too", "(--output ")
    code, _, err = run(["average", mine, "-o", tsv / "avg.npz"])            # a folder that is a file
    assert code == 2
    one_error_line(err, "exists and is not a directory", "(--output ")


# -- issue 36, item 1: the same checkpoint under any name; runs of other data; the average keeps its data --

def test_average_refuses_one_checkpoint_under_two_names(run_dir, tmp_path):
    """``checkpoint.npz`` is a hard link to the last step's file and ``checkpoint.prev.npz`` to the one
    before it, so ``average run/checkpoint*.npz`` named steps 15 and 20 twice each (it was accepted:
    "averaged 5 checkpoint(s) (steps 20, 15, 10, 15, 20)"). A copy of a step file is the same step of
    the same run, and an average given with one of its own steps holds that step twice."""
    import glob
    import shutil

    last = step_path(str(run_dir), 20)
    copy = tmp_path / "copy-of-20.npz"
    shutil.copyfile(last, copy)
    avg = tmp_path / "avg.npz"
    assert run(["average", *[p for _, p in kept_checkpoints(str(run_dir))], "-o", avg])[0] == 0
    cases = [
        (sorted(glob.glob(str(run_dir / "checkpoint*.npz"))),       # checkpoint.prev.npz is step 15's file
         [str(run_dir / "checkpoint.prev.npz"), step_path(str(run_dir), 15)], "are one file under two names"),
        ([step_path(str(run_dir), 15), last, copy], [last, str(copy)], "are both step 20 of the same run"),
        ([avg, last], [str(avg), last], "already holds step 20 (it averages steps 10, 15, 20)"),
    ]
    for paths, named, message in cases:
        code, _, err = run(["average", *paths, "-o", tmp_path / "out.npz"])
        assert code == 2, (paths, err)
        one_error_line(err, message, *named, "it would count twice", "(the checkpoints to average)")
        assert not (tmp_path / "out.npz").exists()


def test_average_refuses_an_average_as_a_source(run_dir, tmp_path):
    """An average among the sources would weigh its steps by another share than the others'."""
    avg = tmp_path / "avg.npz"
    assert run(["average", step_path(str(run_dir), 15), step_path(str(run_dir), 20), "-o", avg])[0] == 0
    code, _, err = run(["average", avg, step_path(str(run_dir), 10), "-o", tmp_path / "out.npz"])
    assert code == 2, err
    one_error_line(err, f"{avg} is already an average (of steps 15, 20)", "average the checkpoints it was made from")


def test_average_refuses_runs_of_different_data(tmp_path):
    """Seed 0 on copy and seed 0 on reverse: same model, vocabulary, tokenization and seed, other data."""
    for task in ("copy", "reverse"):
        code, _, err = run(["train", "--task", task, "--out", tmp_path / task, "--steps", "2", "--valid-every", "2",
                            "--preset", "tiny", "--no-progress"])
        assert code == 0, err
    a, b = tmp_path / "copy" / "checkpoint.npz", tmp_path / "reverse" / "checkpoint.npz"
    code, _, err = run(["average", a, b, "-o", tmp_path / "avg.npz"])
    assert code == 2, err
    one_error_line(err, f"{a} and {b} were trained on different data", "'copy'", "'reverse'")
    assert not (tmp_path / "avg.npz").exists()


def test_an_average_keeps_the_data_fingerprint_and_evaluate_warns_on_the_training_file(run_dir, tmp_path, tsv):
    avg = tmp_path / "avg.npz"
    paths = [p for _, p in kept_checkpoints(str(run_dir))]
    assert run(["average", *paths, "-o", avg])[0] == 0
    assert load_checkpoint(str(avg)).extra["data"] == load_checkpoint(paths[-1]).extra["data"]
    code, _, err = run(["evaluate", "--checkpoint", avg, "--data", tsv, "--limit", "3", "--samples", "0",
                        "--beam", "1"])
    assert code == 0, err
    assert f"warning: {tsv} holds the pairs the checkpoint was trained on" in err


# -- train --average-last: the average written at the end of the run --------------------------------

def test_average_last_writes_the_mean_of_the_last_k_and_scores_it(tmp_path, tsv):
    out = tmp_path / "run"
    code, stdout, err = run(["train", "--data", tsv, "--out", out, "--steps", "22", "--keep-last", "3",
                             "--average-last", "3", *TRAIN])
    assert code == 0, err
    avg = load_checkpoint(str(out / "average.npz"))
    assert avg.optimizer_state is None and avg.extra["average"]["steps"] == [15, 20, 22]
    assert load_checkpoint(str(out / "checkpoint.npz")).step == 22      # the run's checkpoint is the last step's
    sources = [_params(p) for _, p in kept_checkpoints(str(out))]
    for name, value in _params(out / "average.npz").items():
        mean = sum(s[name].astype(np.float64) for s in sources) / 3
        np.testing.assert_array_equal(value, mean.astype(value.dtype), err_msg=name)
    # the test report is printed twice: the last step's checkpoint, then the average
    assert f"the last step's checkpoint ({out / 'checkpoint.npz'}):" in stdout
    assert f"the average of the last 3 checkpoints (§6.1; steps 15, 20, 22): {out / 'average.npz'}" in stdout
    assert stdout.index("the last step's checkpoint") < stdout.index("the average of the last 3")
    assert stdout.count("exact match") >= 2, stdout


def test_the_trainer_averages_at_its_last_step_and_only_with_a_folder(tmp_path):
    """``Trainer.average`` is (path, steps) after a run into a folder; a run with no folder keeps nothing to average."""
    from minitransformer.data.registry import get_task
    from minitransformer.runsetup import make_trainer, settings_for

    task = get_task("copy").load(0)
    preset, settings = settings_for(task, preset="tiny", steps=10, valid_every=5, keep_last=2, average_last=2)
    trainer = make_trainer(task, settings, preset, str(tmp_path / "run"))
    assert trainer.average is None
    trainer.run(progress=False)
    assert trainer.average == (str(tmp_path / "run" / "average.npz"), [5, 10])
    no_dir = make_trainer(task, settings, preset)
    no_dir.run(progress=False)
    assert no_dir.average is None


@pytest.mark.parametrize("args, message", [
    # In the options' words (issue 36, item 7), not the fields' (average_last=3 ... got None).
    (["--keep-last", "2", "--average-last", "3"], "--average-last 3 averages the last 3 kept checkpoints, so it needs "
                                                  "--keep-last 3 or more, got --keep-last 2 (--average-last/--keep-last)"),
    (["--average-last", "3"], "so it needs --keep-last 3 or more, got no --keep-last (--average-last/--keep-last)"),
    (["--keep-last", "3", "--average-last", "1"], "must be a whole number ≥ 2, got 1 (--average-last)"),
])
def test_a_bad_average_last_is_refused_before_step_1(tmp_path, tsv, args, message):
    out = tmp_path / "run"
    code, _, err = run(["train", "--data", tsv, "--out", out, "--steps", "10", *args, *TRAIN])
    assert code == 2, err
    one_error_line(err, message)
    assert not (out / "checkpoint.npz").exists()


def test_an_average_names_the_task_and_preset_of_its_run(tmp_path):
    code, _, err = run(["train", "--task", "copy", "--out", tmp_path / "run", "--steps", "4", "--valid-every", "2",
                        "--keep-last", "2", "--average-last", "2", "--preset", "tiny", "--no-progress"])
    assert code == 0, err
    avg = load_checkpoint(str(tmp_path / "run" / "average.npz"))
    assert (avg.extra["task"], avg.extra["preset"]) == ("copy", "tiny")
