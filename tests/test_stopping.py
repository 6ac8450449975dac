"""How a run stops without losing work (issue 19, items 3, 4, 14 and 15): a closed pipe on standard
output (or standard error) and every signal that closing a terminal or a pipe sends (SIGHUP,
SIGPIPE) are handled like SIGTERM: the step finishes, a checkpoint is saved, the messages go to
standard error and the exit code is 128 + the signal. An output that cannot encode a character
gets an escape instead of a crash; a diverging run ends with the divergence message, and NumPy's
overflow warnings never reach the output."""

from __future__ import annotations

import errno
import io
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from minitransformer import streams
from minitransformer.__main__ import main
from minitransformer.checkpoint import load_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "one two three four five six seven eight".split()
LONG = "100000"                                       # steps: a run that would go on for a long time


def _env(**extra):
    return {**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "1", **extra}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "pairs.tsv"
    path.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in WORDS for b in WORDS), encoding="utf-8")
    return str(path)


def _train(data, out, *extra):
    return ["train", "--data", data, "--level", "word", "--preset", "tiny", "--batch-size", "16", "--out", str(out),
            *extra]


def _command(data, out, *extra):
    return [sys.executable, "-m", "minitransformer", *_train(data, out, *extra)]


def _stopped_at(err: str, name: str) -> int:
    line = next(line for line in err.splitlines() if line.startswith(f"interrupted by {name}"))
    return int(line.split(" at step ")[1].split(";")[0])


def _wait_for(predicate, proc, seconds=120):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert proc.poll() is None, f"the run ended early (rc {proc.returncode})"
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.05)


def _clean(err: str) -> None:
    for bad in ("Traceback", "Exception ignored", "BrokenPipeError", "error:", "RuntimeWarning"):
        assert bad not in err, err


# -- item 3: a closed standard output ------------------------------------------------------------

@pytest.mark.slow
def test_train_piped_into_head_stops_saves_and_exits_141_quietly(data, tmp_path):
    """``train … | head -3``: head reads three lines and exits; the next write finds the pipe closed."""
    out = tmp_path / "head"
    proc = subprocess.Popen(_command(data, out, "--steps", LONG, "--valid-every", "2", "--no-progress"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), cwd=ROOT)
    lines = [proc.stdout.readline() for _ in range(3)]
    proc.stdout.close()                                  # what head does after its three lines
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert lines[0].startswith(b"task pairs.tsv:")
    assert proc.returncode == 141, err
    _clean(err)
    assert "standard output was closed: finishing this step, then saving a checkpoint" in err or \
        "SIGPIPE (the output was closed: a pipe's reader exited) received" in err
    step = _stopped_at(err, "SIGPIPE")
    assert load_checkpoint(str(out / "checkpoint.npz")).step == step < int(LONG)
    assert "resume with: python -m minitransformer train" in err
    assert [n for n in os.listdir(out) if n.endswith(".partial")] == []


@pytest.mark.slow
def test_train_with_both_streams_into_a_closed_pipe_still_saves(data, tmp_path):
    """``train … 2>&1 | head -3``: the progress lines on standard error find the pipe gone; nothing
    can be said any more, but the step finishes and the checkpoint is saved."""
    out = tmp_path / "both"
    proc = subprocess.Popen(_command(data, out, "--steps", LONG, "--progress-every", "0.01"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT)
    for line in iter(proc.stdout.readline, b""):   # past the banner and warnings, to the first progress lines
        if line.startswith(b"step "):
            break
    proc.stdout.readline()
    proc.stdout.close()
    proc.wait(timeout=120)
    assert proc.returncode == 141
    ckpt = load_checkpoint(str(out / "checkpoint.npz"))
    assert 0 < ckpt.step < int(LONG)


# -- items 3 and 4: every signal closing a terminal or a pipe sends ------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("sig, code, why", [(signal.SIGHUP, 129, "the terminal was closed"),
                                            (signal.SIGPIPE, 141, "the output was closed: a pipe's reader exited")])
def test_sighup_and_sigpipe_from_another_process_save_like_sigterm(data, tmp_path, sig, code, why):
    out = tmp_path / sig.name
    proc = subprocess.Popen(_command(data, out, "--steps", LONG, "--valid-every", "5", "--no-progress"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)
    _wait_for(lambda: (out / "checkpoint.npz").exists(), proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    _clean(err)
    assert f"{sig.name} ({why}) received: finishing this step, then saving a checkpoint" in err
    step = _stopped_at(err, sig.name)
    assert load_checkpoint(str(out / "checkpoint.npz")).step == step >= 5
    assert "resume with: python -m minitransformer train" in err


@pytest.mark.slow
def test_closing_the_terminal_saves_the_run(data, tmp_path):
    """The real thing: the run's terminal (a pseudo-terminal here) is closed under it. The kernel
    sends SIGHUP, and every later write to the terminal fails with EIO."""
    out = tmp_path / "tty"
    pid, master = pty.fork()
    if pid == 0:                                          # the child: its terminal is the pty
        os.chdir(ROOT)
        os.execve(sys.executable, _command(data, out, "--steps", LONG, "--valid-every", "2", "--no-progress"),
                  _env())
    seen, deadline = b"", time.monotonic() + 120
    while b"valid loss" not in seen and time.monotonic() < deadline:      # it is training
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
    os.close(master)                                      # the terminal window closes
    _, status = os.waitpid(pid, 0)
    assert b"valid loss" in seen, seen[-2000:]
    assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGHUP
    ckpt = load_checkpoint(str(out / "checkpoint.npz"))
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert 2 <= ckpt.step < int(LONG) and records[-1]["step"] <= ckpt.step


def test_sighup_before_training_ends_the_command_with_129(data, tmp_path, monkeypatch, capsys):
    import minitransformer.data.registry as registry

    def hung_up(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGHUP)               # the terminal closes while the data loads
        time.sleep(1)
        raise AssertionError("SIGHUP was not handled")
    monkeypatch.setattr(registry, "load_task", hung_up)
    assert main(_train(data, tmp_path / "r", "--steps", "2")) == 129
    assert capsys.readouterr().err.strip() == "error: terminated (SIGHUP)"


def test_translate_into_a_closed_pipe_exits_141_without_a_word(data, tmp_path, capsys):
    assert main(_train(data, tmp_path / "r", "--steps", "2", "--no-progress")) == 0
    capsys.readouterr()

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
    real = sys.stdout
    sys.stdout = ClosedPipe()
    try:
        rc = main(["translate", "--checkpoint", str(tmp_path / "r" / "checkpoint.npz"), "--beam", "1", "one", "two"])
    finally:
        sys.stdout = real
    assert rc == 141
    assert capsys.readouterr().err == ""


# -- the guard itself ---------------------------------------------------------------------------

@pytest.mark.parametrize("err_no", sorted(streams.GONE))
def test_a_guarded_stream_swallows_a_lost_reader_and_says_so(err_no):
    class Gone(io.StringIO):
        def write(self, text):
            raise OSError(err_no, os.strerror(err_no))
    with streams.guard_standard_streams():
        guarded = streams.GuardedStream(Gone(), "stdout")
        assert guarded.write("x") == 1 and guarded.lost
        assert streams.output_lost() == "stdout"
        guarded.write("more")                             # swallowed, no second error
    assert streams.output_lost() is None                  # the guard's state ends with its block


def test_a_guarded_stream_still_raises_a_real_write_error():
    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")
    with streams.guard_standard_streams():
        with pytest.raises(OSError, match="No space left"):
            streams.GuardedStream(Full(), "stdout").write("x")


# -- item 14: an output that cannot encode a character -----------------------------------------

@pytest.mark.parametrize("encoding", ["latin-1", "ascii"])
def test_a_non_utf8_output_gets_escapes_not_a_crash(data, tmp_path, monkeypatch, encoding):
    stdout = io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors="strict", write_through=True)
    stderr = io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)
    rc = main(_train(data, tmp_path / "r", "--steps", "2", "--no-progress", "--set", "eps_ls=0.1"))
    out = stdout.buffer.getvalue().decode(encoding)
    assert rc == 0, stderr.buffer.getvalue()
    assert "\\u2717 " in out or "\\u2713 " in out          # the report's ✓ / ✗ marks, escaped
    assert "held-out test set" in out


# -- item 15: divergence, and no NumPy warning in the output -----------------------------------

def test_a_huge_lr_factor_ends_with_the_divergence_message_and_its_hint(capsys, tmp_path):
    """Issue 19's reproduction: the weights after a step overflow in the validation forward; the run
    used to end with "decoding … (a diverged checkpoint?)"."""
    rc = main(["train", "--task", "copy", "--steps", "40", "--valid-every", "5", "--lr-factor", "1e12",
               "--no-progress", "--out", str(tmp_path / "div")])
    err = capsys.readouterr().err
    assert rc == 1, err
    (line,) = [line for line in err.splitlines() if line.startswith("error: ")]
    assert line.startswith("error: training stopped at step ") and line.endswith(
        "Try a smaller --lr-factor, or --clip-norm 1.0"), line
    assert "decoding" not in line or "validation" in line
    assert "RuntimeWarning" not in err and "overflow encountered" not in err


def test_no_numpy_warning_leaks_into_the_final_report(data, tmp_path, monkeypatch, capsys):
    import minitransformer.translate as translate
    real = translate.score_translations

    def overflowing(*args, **kwargs):
        np.float32(3e38) * np.float32(10)                 # what a barely-finite model does in its forward
        return real(*args, **kwargs)
    monkeypatch.setattr(translate, "score_translations", overflowing)
    assert main(_train(data, tmp_path / "r", "--steps", "2", "--no-progress")) == 0
    captured = capsys.readouterr()
    assert "RuntimeWarning" not in captured.err and "overflow" not in captured.err


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_a_model_that_overflows_says_so_without_numpy_warnings(data, tmp_path, capsys, command):
    """Weights of 1e18 are finite and square without overflow in float32 (so the loader accepts
    them), but their products overflow in the forward pass: one named error, no warnings."""
    assert main(_train(data, tmp_path / "r", "--steps", "2", "--no-progress")) == 0
    capsys.readouterr()
    path = tmp_path / "r" / "checkpoint.npz"
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    for key in arrays:
        if key.startswith("param/"):
            arrays[key] = np.full_like(arrays[key], 1e18)
    np.savez(path, **arrays)
    argv = (["translate", "--checkpoint", str(path), "--beam", "1", "one two"] if command == "translate" else
            ["evaluate", "--checkpoint", str(path), "--data", data, "--beam", "1"])
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "RuntimeWarning" not in err and "overflow encountered" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("error: ")]
    assert "NaN" in line and "diverged" in line
