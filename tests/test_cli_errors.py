"""One error surface for the command line (issue 11): every bad input prints one line,
``error: <what> (<which option, file or variable>)``, exits with 2 (1 for run-time
failures), and never prints a traceback unless --debug or MINITRANSFORMER_DEBUG asks."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from minitransformer import backend
from minitransformer.__main__ import main
from minitransformer.data.registry import load_task
from minitransformer.runsetup import make_trainer, settings_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = "one two three four five six seven eight".split()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A TSV corpus, a checkpoint of an (untrained) model for it, and some bad files."""
    d = tmp_path_factory.mktemp("cli")
    data = d / "pairs.tsv"
    data.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in WORDS for b in WORDS), encoding="utf-8")
    task = load_task(data=str(data), level="word")
    preset, settings = settings_for(task, preset="tiny", steps=5)
    trainer = make_trainer(task, settings, preset, str(d / "run"))
    (d / "run").mkdir()
    trainer.step = 5                                   # as if trained: --steps 5 is then "nothing to train"
    trainer.save(str(d / "run" / "checkpoint.npz"))      # (a path: the same call works on the old Trainer)
    (d / "afile").write_text("x")
    (d / "tiny.tsv").write_text("a b\tb a\n")
    (d / "badline.tsv").write_text("a b\tb a\nno tab here\n")
    (d / "reserved.tsv").write_text("a b\tb a\nc <eos>\td c\n")
    other = d / "other.tsv"
    other.write_text("".join(f"{a}{b}\t{b}{a}\n" for a in "xyz" for b in "xyz"))
    return {"dir": d, "data": str(data), "ckpt": str(d / "run" / "checkpoint.npz"), "afile": str(d / "afile"),
            "tiny": str(d / "tiny.tsv"), "badline": str(d / "badline.tsv"), "reserved": str(d / "reserved.tsv"),
            "other": str(other)}


def _fill(args, f):
    return [a.format(**f) for a in args]


TRAIN = ["train", "--data", "{data}", "--level", "word", "--preset", "tiny", "--no-progress", "--out", "{dir}/r"]

BAD = [
    # (argv, exit code, what the message must contain, the "(which)" it must end with)
    (TRAIN + ["--steps", "0"], 2, "must be a whole number in 1..1000000000, got 0", "(--steps)"),
    (TRAIN + ["--steps", "-5"], 2, "must be a whole number in 1..1000000000, got -5", "(--steps)"),
    (TRAIN + ["--steps", "ten"], 2, "'ten' is not a whole number", "(--steps)"),
    (TRAIN + ["--batch-size", "0"], 2, "must be a whole number ≥ 1", "(--batch-size)"),
    (TRAIN + ["--max-tokens", "0"], 2, "must be a whole number ≥ 1", "(--max-tokens)"),
    (TRAIN + ["--valid-every", "-1"], 2, "must be a whole number ≥ 1, got -1", "(--valid-every)"),
    (TRAIN + ["--checkpoint-every", "-1"], 2, "must be a whole number ≥ 1, got -1", "(--checkpoint-every)"),
    (TRAIN + ["--eval", "greedy", "beam0"], 2, "'beam0': size must be in 1..64, got 0", "(--eval)"),
    (TRAIN + ["--warmup", "0"], 2, "must be a whole number in 1..1000000000, got 0", "(--warmup)"),
    # Issue 36, item 4: an option that enters a formula or sizes memory is bounded before the first step.
    (TRAIN + ["--warmup", "9" * 400], 2, "must be a whole number in 1..1000000000, got 999", "(--warmup)"),
    (TRAIN + ["--steps", "99999999999999999999"], 2, "must be a whole number in 1..1000000000", "(--steps)"),
    (TRAIN + ["--accumulate", "99999999999999999999"], 2, "--accumulate 99999999999999999999 cuts each global batch "
     "into more micro-batches than it can hold pairs (the task's --batch-size 64); give --accumulate 64 or less",
     "(--accumulate/--batch-size)"),
    (TRAIN + ["--batch-size", "8", "--accumulate", "9"], 2, "(--batch-size 8); give --accumulate 8 or less",
     "(--accumulate/--batch-size)"),
    (TRAIN + ["--max-tokens", "30", "--accumulate", "31"], 2, "(--max-tokens 30); give --accumulate 30 or less",
     "(--accumulate/--max-tokens)"),
    (TRAIN + ["--eval", "greedy", "beam:size=4,alpha=400"], 2, "alpha must be in [0, 10]", "(--eval)"),
    # Issue 36, item 7: in the words the user typed, not the dataclasses' ("Sample: top_p ... got 2.0").
    (TRAIN + ["--eval", "sample:top_p=2"], 2, "error: 'sample:top_p=2': top_p must be in (0, 1], got 2 (--eval)",
     "(--eval)"),
    (TRAIN + ["--eval", "beam:alpha=1e300"], 2, "error: 'beam:alpha=1e300': alpha must be in [0, 10], got 1e300 ",
     "(--eval)"),
    (TRAIN + ["--set", "d_model=7"], 2, "error: d_model=7 must be divisible by h=", "(--preset tiny --set d_model=7)"),
    (TRAIN + ["--set", "P_drop=2"], 2, "error: P_drop must be a probability in [0, 1)", "(--preset tiny --set P_drop=2)"),
    (["translate", "--checkpoint", "{ckpt}", "--alpha", "400", "one"], 2, "must be a number in [0, 10], got 400",
     "(--alpha)"),
    (TRAIN + ["--lr-factor", "nan"], 2, "must be a finite number > 0, got nan", "(--lr-factor)"),
    (TRAIN + ["--lr-factor", "-1"], 2, "must be a finite number > 0", "(--lr-factor)"),
    (TRAIN + ["--clip-norm", "inf"], 2, "must be a finite number > 0, got inf", "(--clip-norm)"),
    (TRAIN + ["--seed", "-1"], 2, "must be a whole number ≥ 0, got -1", "(--seed)"),
    (TRAIN + ["--max-length", "0"], 2, "must be a whole number ≥ 1", "(--max-length)"),
    (TRAIN + ["--progress-every", "0"], 2, "must be a finite number > 0", "(--progress-every)"),
    (TRAIN + ["--preset", "huge"], 2, "invalid choice: 'huge'", "(--preset)"),
    (TRAIN[:1] + ["--no-progress"], 2, "give exactly one of --task NAME or --data", "(--task/--data)"),
    (TRAIN + ["--task", "copy"], 2, "give exactly one of --task NAME or --data", "(--task/--data)"),
    (["train", "--task", "bogus"], 2, "unknown task 'bogus'", "(--task bogus)"),
    (["train", "--data", "{dir}/missing.tsv"], 2, "TSV data file not found", "(--data {dir}/missing.tsv)"),
    (["train", "--data", "{dir}"], 2, "is a directory, not a TSV file", "(--data {dir})"),
    (["train", "--data", "{tiny}"], 2, "at least 3 are needed to split into train, valid and test",
     "(--data {tiny})"),
    (["train", "--data", "{badline}"], 2, "{badline}:2: missing tab", "(--data {badline})"),
    (["train", "--data", "{reserved}", "--level", "word"], 2, "{reserved}:2: source: word-level text may not "
     "contain '<eos>'", "(--data {reserved})"),
    (TRAIN[:-1] + ["{afile}"], 2, "exists and is not a directory", "(--out {afile})"),
    (TRAIN[:-1] + ["{afile}/sub"], 2, "is a file, not a directory", "(--out {afile}/sub)"),
    (TRAIN + ["--resume", "{dir}/missing.npz"], 2, "checkpoint not found", "(--resume {dir}/missing.npz)"),
    (TRAIN + ["--resume", "{data}"], 2, "not a .npz checkpoint", "(--resume {data})"),
    (TRAIN + ["--resume", "{ckpt}", "--steps", "5"], 2, "the checkpoint is at step 5, and --steps 5 leaves nothing "
     "to train", "(--resume {ckpt})"),
    (TRAIN + ["--resume", "{ckpt}", "--steps", "9", "--seed", "3"], 2, "the checkpoint was trained with seed 0; "
     "another seed would split the data", "(--seed 3)"),
    (["train", "--data", "{other}", "--no-progress", "--out", "{dir}/o", "--resume", "{ckpt}", "--steps", "9"], 2,
     "cannot resume: the data differs from what the checkpoint was trained on", "(--resume {ckpt})"),
    (["translate", "--checkpoint", "{ckpt}", ""], 2, "the sentence is empty", "(argument 1)"),
    (["translate", "--checkpoint", "{ckpt}", "one two", "   "], 2, "the sentence is empty", "(argument 2)"),
    (["translate", "--checkpoint", "{ckpt}", "one <eos> two"], 2, "word-level text may not contain '<eos>'",
     "(argument 1)"),
    (["translate", "--checkpoint", "{ckpt}", "one", " ".join(["two"] * 64)], 2,
     "the sentence has 64 word tokens; with <eos> that is more than the model's max_len of 64", "(argument 2)"),
    (TRAIN[:-1] + [""], 2, "the output folder is empty", "(--out)"),
    (TRAIN[:-1] + ["{dir}/run"], 2, "{dir}/run/checkpoint.npz holds an earlier run; continue it with --resume "
     "{dir}/run/checkpoint.npz, train into another folder with --out DIR, or replace it with --overwrite",
     "(--out {dir}/run)"),
    (TRAIN[:-1] + ["{dir}/run", "--resume", "{dir}/missing.npz"], 2, "checkpoint not found", None),
    (["translate", "--checkpoint", "{ckpt}", "--beam", "0", "one"], 2, "must be a whole number ≥ 1", "(--beam)"),
    (["translate", "--checkpoint", "{dir}/missing.npz", "one"], 2, "checkpoint not found",
     "(--checkpoint {dir}/missing.npz)"),
    (["translate", "--checkpoint", "{dir}", "one"], 2, "is a directory", "(--checkpoint {dir})"),
    (["translate", "--checkpoint", "{data}", "one"], 2, "not a .npz checkpoint", "(--checkpoint {data})"),
    (["translate", "--checkpoint", "{ckpt}", "--attention", "{afile}", "one"], 2, "exists and is not a directory",
     "(--attention {afile})"),
    (["translate", "one"], 2, "the following arguments are required: --checkpoint", None),
    (["evaluate", "--checkpoint", "{ckpt}", "--data", "{data}", "--limit", "0"], 2, "must be a whole number ≥ 1",
     "(--limit)"),
    (["evaluate", "--checkpoint", "{ckpt}", "--data", "{data}", "--samples", "-1"], 2, "must be a whole number ≥ 0",
     "(--samples)"),
    (["evaluate", "--checkpoint", "{ckpt}", "--data", "{data}", "--split", "valid"], 2,
     "--split chooses a split of --task", "(--split)"),
    (["evaluate", "--checkpoint", "{ckpt}"], 2, "give exactly one of --data", "(--task/--data)"),
    (["evaluate", "--checkpoint", "{ckpt}", "--data", "{badline}"], 2, "{badline}:2: missing tab",
     "(--data {badline})"),
    (["frobnicate"], 2, "invalid choice: 'frobnicate'", None),
]


@pytest.mark.parametrize("argv, code, what, which", BAD, ids=[" ".join(b[0][:1] + b[0][-2:]) for b in BAD])
def test_bad_input_is_one_line_with_the_option_and_no_traceback(files, capsys, argv, code, what, which):
    rc = main(_fill(argv, files))
    out, err = capsys.readouterr()
    assert rc == code, err
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    assert what.format(**files) in lines[0], lines[0]
    if which is not None:
        assert lines[0].endswith(which.format(**files)), lines[0]


def test_an_empty_line_on_standard_input_is_named(files, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("one two\n\nthree four\n"))
    assert main(["translate", "--checkpoint", files["ckpt"]]) == 2
    assert capsys.readouterr().err.strip() == ("error: the sentence is empty; there is nothing to translate "
                                               "(standard input, line 2)")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["translate", "--checkpoint", files["ckpt"]]) == 2
    assert "no sentences" in capsys.readouterr().err


def test_translate_prints_one_line_per_input_line(files, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("one two\nthree four\n"))
    assert main(["translate", "--checkpoint", files["ckpt"], "--beam", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_a_zero_limit_is_not_everything(files, capsys):
    """--limit 0 used to mean "no limit"; now it is refused, and --limit 3 evaluates 3."""
    assert main(["evaluate", "--checkpoint", files["ckpt"], "--data", files["data"], "--limit", "3",
                 "--beam", "1", "--samples", "0"]) == 0
    assert "(3 sentences)" in capsys.readouterr().out


@pytest.mark.skipif(backend.cupy_available(), reason="this machine has a GPU: --backend cupy works")
def test_cupy_without_a_gpu_names_the_option(files, capsys):
    assert main(["translate", "--checkpoint", files["ckpt"], "--backend", "cupy", "one"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.rstrip().endswith("(--backend cupy)") and "Traceback" not in err


@pytest.mark.parametrize("last", [False, True])
def test_an_interrupt_prints_a_command_that_works(files, capsys, monkeypatch, tmp_path, last):
    """Ctrl-C mid-run: the resume command. Ctrl-C during the last step: training is complete, so
    resuming would have nothing to train; the message says so and gives the evaluate command."""
    import signal

    import minitransformer.train as train

    def interrupted_run(self, **kwargs):
        self.step = self.settings.steps if last else 2
        path = str(tmp_path / "r" / "checkpoint.npz")
        self.save(path)
        raise train.TrainingInterrupted(signal.SIGINT, self.step, path)
    monkeypatch.setattr(train.Trainer, "run", interrupted_run)
    argv = _fill(TRAIN[:-1], files) + [str(tmp_path / "r"), "--steps", "4"]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    command = err.splitlines()[-1]
    monkeypatch.undo()                                   # the printed command runs for real
    if last:
        assert "training is complete (4 of 4 steps); the test-set report was skipped" in command
        assert command.endswith(f"evaluate --checkpoint {tmp_path / 'r' / 'checkpoint.npz'} "
                                f"--data {files['data']}")
        rc = main(command.split("python -m minitransformer ", 1)[1].split() + ["--beam", "1", "--samples", "0"])
    else:
        assert command.startswith("resume with: python -m minitransformer train")
        rc = main(command.split("python -m minitransformer ", 1)[1].split() + ["--steps", "3"])
    assert rc == 0, capsys.readouterr().err


def test_overwrite_replaces_an_earlier_run_only_when_asked(files, capsys, tmp_path):
    out = tmp_path / "again"
    argv = _fill(TRAIN[:-1], files) + [str(out), "--steps", "2", "--eval", "greedy"]
    assert main(argv) == 0
    first = (out / "checkpoint.npz").read_bytes()
    assert main(argv) == 2 and "holds an earlier run" in capsys.readouterr().err
    assert (out / "checkpoint.npz").read_bytes() == first                     # nothing was touched
    assert main(argv + ["--seed", "1", "--overwrite"]) == 0
    assert (out / "checkpoint.npz").read_bytes() != first


def test_an_internal_error_is_one_line_with_exit_1_and_debug_shows_the_traceback(files, capsys, monkeypatch):
    import minitransformer.data.registry as registry

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")
    monkeypatch.setattr(registry, "load_task", broken)
    argv = _fill(TRAIN, files)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.strip() == ("error: internal error: ZeroDivisionError: a bug (run with --debug or "
                           "MINITRANSFORMER_DEBUG=1 for the traceback)")
    assert main(argv + ["--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError: a bug" in err
    monkeypatch.setenv("MINITRANSFORMER_DEBUG", "1")
    assert main(argv) == 1
    assert "Traceback" in capsys.readouterr().err


def test_debug_shows_the_traceback_of_a_bad_input_too(files, capsys):
    assert main(["translate", "--checkpoint", files["data"], "--debug", "one"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.splitlines()[-1].startswith("error: not a .npz checkpoint")


# -- environment variables: read when the package is imported, so in a fresh process ------------

@pytest.mark.parametrize("variable, value, expected", [
    ("MINITRANSFORMER_BACKEND", "tpu", "one of numpy, cupy"),
    ("MINITRANSFORMER_DTYPE", "float16", "one of float32, float64"),
    ("MINITRANSFORMER_DEBUG", "maybe", "1 or 0"),
])
def test_a_bad_environment_variable_is_named(variable, value, expected):
    env = {**os.environ, variable: value, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-m", "minitransformer", "tasks"], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    line = done.stderr.strip()
    assert "\n" not in line, line
    assert line.startswith(f"error: environment variable {variable}={value!r} is not valid: expected {expected}")
    assert line.endswith(f"({variable})"), line
