"""Fault injection on real training processes (issue 11): Ctrl-C and resume, SIGTERM from
outside, kill -9 in the middle of a save, a gradient that turns infinite, and progress
output on a pipe. Each test runs `python -m minitransformer train` (through a small driver
that injects the fault) in a subprocess, on a 64-pair corpus and the tiny preset.

The driver injects faults at exact moments by wrapping functions of the package (never by
editing it): a SIGINT sent to itself right after a given step, a second one while the
checkpoint is being written, a hang inside the write of the N-th checkpoint (so the test
can kill -9 it there), an inf written into a gradient.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from minitransformer.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "one two three four five six seven eight".split()
STEPS = 30

DRIVER = r"""
import json, os, signal, sys, time
faults, argv = json.loads(sys.argv[1]), sys.argv[2:]
import minitransformer.model as model_module
import minitransformer.train as train
from minitransformer.__main__ import main

sent = []
if "signal_at_step" in faults:                       # a signal to ourselves right after step k
    real_step = train.Trainer.train_step
    def train_step(self, batch):
        loss = real_step(self, batch)
        if self.step == faults["signal_at_step"]:
            sent.append(1)
            os.kill(os.getpid(), getattr(signal, faults["signal"]))
        return loss
    train.Trainer.train_step = train_step

partial_fds, saves = set(), []
real_open, real_fsync = os.open, os.fsync
def traced_open(path, flags, mode=0o777, *args, **kwargs):
    fd = real_open(path, flags, mode, *args, **kwargs)
    name = os.path.basename(str(path))              # .checkpoint.npz.<pid>-<random>.partial
    if name.startswith(".checkpoint.npz.") and name.endswith(".partial"):
        partial_fds.add(fd)
    return fd
def traced_fsync(fd):
    if fd in partial_fds:                            # the checkpoint's bytes are being written
        partial_fds.discard(fd)
        saves.append(1)
        if faults.get("second_signal_while_saving") and sent:
            os.kill(os.getpid(), signal.SIGINT)      # Ctrl-C again, in the middle of the save
        if faults.get("hang_in_save") == len(saves):
            with open(faults["marker"], "w") as f:
                f.write("saving")
            time.sleep(600)                          # the test kills us here
    return real_fsync(fd)
os.open, os.fsync = traced_open, traced_fsync

if "inf_gradient_from_call" in faults:               # from the k-th backward on, one gradient is inf
    real_backward, calls = model_module.Transformer.backward, []
    def backward(self, dlogits):
        real_backward(self, dlogits)
        calls.append(1)
        if len(calls) >= faults["inf_gradient_from_call"]:
            self.E.grad[0, 0] = float("inf")
    model_module.Transformer.backward = backward

sys.exit(main(argv))
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("faults")
    data = d / "pairs.tsv"
    data.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in WORDS for b in WORDS), encoding="utf-8")
    return d, str(data)


def _argv(data, out, *extra):
    return ["train", "--data", data, "--level", "word", "--preset", "tiny", "--steps", str(STEPS),
            "--valid-every", "10", "--batch-size", "16", "--seed", "0", "--out", str(out), *extra]


def _env():
    return {**os.environ, "PYTHONPATH": ROOT}


def _run(argv, faults=None, **kwargs):
    cmd = [sys.executable, "-c", DRIVER, json.dumps(faults or {}), *argv]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=180, **kwargs)


def _start(argv, faults=None):
    cmd = [sys.executable, "-c", DRIVER, json.dumps(faults or {}), *argv]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)


def _params(path):
    ck = load_checkpoint(str(path))
    return ck.step, {name: p.data.copy() for name, p in ck.model.named_parameters()}, ck


def _assert_same_parameters(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert np.array_equal(a[name], b[name]), f"parameter {name} differs from the uninterrupted run"


def _leftovers(directory):
    return sorted(name for name in os.listdir(directory) if name.endswith(".partial") or name.startswith(".tmp-"))


def _wait_for(predicate, proc, seconds=120):
    deadline = time.monotonic() + seconds
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended early (rc {proc.returncode}): {proc.communicate()[1][-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out waiting for the run")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def reference(corpus):
    """An uninterrupted run of STEPS steps, with its output going to pipes (not a terminal)."""
    d, data = corpus
    done = _run(_argv(data, d / "reference", "--progress-every", "0.01"))
    assert done.returncode == 0, done.stderr
    step, params, _ = _params(d / "reference" / "checkpoint.npz")
    assert step == STEPS
    return params, done


def test_progress_on_a_pipe_is_plain_lines(reference):
    _, done = reference
    assert "\r" not in done.stdout + done.stderr                 # no carriage-return flood
    lines = [line for line in done.stderr.splitlines() if line.startswith("step ")]
    assert lines and lines[-1].startswith(f"step {STEPS}/{STEPS}, loss ")
    assert [line for line in done.stdout.splitlines() if line.startswith("step ")] == [
        line for line in done.stdout.splitlines() if "valid loss" in line]
    assert sum("valid loss" in line for line in done.stdout.splitlines()) == 3    # steps 10, 20, 30


def test_ctrl_c_twice_saves_once_prints_the_resume_command_and_resume_is_exact(corpus, reference):
    d, data = corpus
    out = d / "sigint"
    done = _run(_argv(data, out, "--no-progress"), {"signal": "SIGINT", "signal_at_step": 13,
                                                    "second_signal_while_saving": True})
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "SIGINT received: finishing this step, then saving a checkpoint" in done.stderr
    assert "SIGINT received again: still saving the checkpoint" in done.stderr
    assert f"interrupted by SIGINT at step 13; checkpoint saved: {out}/checkpoint.npz" in done.stderr
    step, _, _ = _params(out / "checkpoint.npz")
    assert step == 13
    assert _params(out / "checkpoint.prev.npz")[0] == 10          # the validation save before it, kept
    assert _leftovers(out) == []
    # Resume with exactly the command it printed.
    command = next(line for line in done.stderr.splitlines() if line.startswith("resume with: "))
    argv = shlex.split(command[len("resume with: "):])
    assert argv[:3] == ["python", "-m", "minitransformer"] and argv[-2:] == ["--resume", f"{out}/checkpoint.npz"]
    resumed = _run(argv[3:])
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stdout and "at step 13" in resumed.stdout
    step, params, _ = _params(out / "checkpoint.npz")
    assert step == STEPS
    _assert_same_parameters(params, reference[0])
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "valid_loss" in r] == [10, 20, 30]


def test_sigterm_from_another_process_saves_and_exits_143(corpus):
    d, data = corpus
    out = d / "sigterm"
    argv = _argv(data, out, "--no-progress")
    argv[argv.index("--steps") + 1] = "100000"                       # it would run for a long time
    proc = _start(argv)
    _wait_for(lambda: (out / "checkpoint.npz").exists(), proc)        # the first validation save (step 10)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    line = next(line for line in err.splitlines() if line.startswith("interrupted by SIGTERM at step "))
    step = int(line.split("at step ")[1].split(";")[0])
    assert step >= 10
    assert _params(out / "checkpoint.npz")[0] == step
    assert "resume with: python -m minitransformer" in err
    assert _leftovers(out) == []


def test_kill_9_during_a_save_keeps_the_good_checkpoint_and_resume_cleans_up(corpus, reference):
    d, data = corpus
    out, marker = d / "kill9", d / "kill9.marker"
    argv = _argv(data, out, "--no-progress")
    proc = _start(argv, {"hang_in_save": 2, "marker": str(marker)})   # save 2 is the step-20 checkpoint
    _wait_for(marker.exists, proc)
    proc.kill()                                                        # SIGKILL: no handler, no cleanup
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    step, _, _ = _params(out / "checkpoint.npz")
    assert step == 10                                                  # the good checkpoint is intact
    left = _leftovers(out)                                             # what the kill left behind:
    assert len(left) == 1 and left[0].startswith(f".checkpoint.npz.{proc.pid}-"), left   # named by its writer
    resumed = _run(argv + ["--resume", str(out / "checkpoint.npz")])
    assert resumed.returncode == 0, resumed.stderr
    assert f"removed {out}/{left[0]}" in resumed.stderr                # its writer is dead: removed
    assert _leftovers(out) == []
    step, params, _ = _params(out / "checkpoint.npz")
    assert step == STEPS
    _assert_same_parameters(params, reference[0])


def test_an_infinite_gradient_is_skipped_then_stops_and_the_checkpoint_is_the_last_good_one(corpus):
    d, data = corpus
    out = d / "nonfinite"
    done = _run(_argv(data, out, "--no-progress"), {"inf_gradient_from_call": 15})
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    skips = [line for line in done.stderr.splitlines() if line.startswith("warning: step")]
    assert [line.split(":")[1].strip() for line in skips] == ["step 15", "step 16", "step 17", "step 18"]
    assert "the gradient of 'E' contains inf" in skips[0]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1
    assert errors[0].startswith("error: training stopped at step 19: the gradient of 'E' contains inf; "
                                "steps 15 to 19 were all skipped")
    assert f"the last checkpoint, {out}/checkpoint.npz, is from step 10" in errors[0]
    step, params, ck = _params(out / "checkpoint.npz")
    assert step == 10 and all(np.isfinite(p).all() for p in params.values())
    assert all(np.isfinite(v).all() for v in ck.optimizer_state.values() if hasattr(v, "shape"))

    def refuse(name):
        raise AssertionError(f"metrics.jsonl holds the non-JSON literal {name}")
    records = [json.loads(line, parse_constant=refuse) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [10]                        # logged every 10 steps; 19 stopped it
