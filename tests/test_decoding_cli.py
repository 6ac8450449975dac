"""The decoding strategies on the command line: translate / evaluate --beam | --sample (with
--temperature, --top-k, --top-p, --sample-seed), train --eval STRATEGY..., each checked before
anything runs, with the package's one-line errors (``error: <what> (<option>)``, exit 2)."""

from __future__ import annotations

import os
import time

import pytest

from minitransformer.__main__ import main
from minitransformer.data.registry import load_task
from minitransformer.decoding import MAX_BEAM_SIZE
from minitransformer.runsetup import make_trainer, settings_for

WORDS = "one two three four five six seven eight".split()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A word-level TSV corpus and a checkpoint of an (untrained, tiny) model for it."""
    d = tmp_path_factory.mktemp("strategies")
    data = d / "pairs.tsv"
    data.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in WORDS for b in WORDS), encoding="utf-8")
    task = load_task(data=str(data), level="word")
    preset, settings = settings_for(task, preset="tiny", steps=5)
    trainer = make_trainer(task, settings, preset, str(d / "run"))
    (d / "run").mkdir()
    trainer.save(str(d / "run" / "checkpoint.npz"))
    return {"dir": str(d), "data": str(data), "ckpt": str(d / "run" / "checkpoint.npz")}


def _run(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _one_error(err: str) -> str:
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0]


BAD = [
    # (options after `translate --checkpoint CKPT`, what the message says, the option it names)
    (["--sample", "--beam", "2"], "--sample and --beam 2 ask for two different decoders; give one of them",
     "(--sample/--beam)"),
    (["--sample", "--beam", "1"], "--sample and --beam 1 ask for two different decoders", "(--sample/--beam)"),
    (["--temperature", "0.5"], "--temperature applies only to sampling; add --sample", "(--temperature)"),
    (["--beam", "2", "--top-k", "3"], "--top-k applies only to sampling; add --sample", "(--top-k)"),
    (["--top-p", "0.9"], "--top-p applies only to sampling", "(--top-p)"),
    (["--sample-seed", "1"], "--sample-seed applies only to sampling", "(--sample-seed)"),
    (["--sample", "--temperature", "0"], "must be a finite number > 0, got 0", "(--temperature)"),
    (["--sample", "--temperature", "nan"], "must be a finite number > 0, got nan", "(--temperature)"),
    (["--sample", "--temperature", "-1"], "must be a finite number > 0", "(--temperature)"),
    (["--sample", "--top-k", "0"], "must be a whole number ≥ 1, got 0", "(--top-k)"),
    (["--sample", "--top-k", "2.5"], "'2.5' is not a whole number", "(--top-k)"),
    (["--sample", "--top-p", "0"], "must be a number in (0, 1], got 0", "(--top-p)"),
    (["--sample", "--top-p", "1.5"], "must be a number in (0, 1], got 1.5", "(--top-p)"),
    (["--sample", "--top-p", "nan"], "must be a number in (0, 1], got nan", "(--top-p)"),
    (["--sample", "--top-p", "high"], "'high' is not a number", "(--top-p)"),
    (["--sample", "--sample-seed", "-1"], "must be a whole number in 0..9223372036854775807, got -1",
     "(--sample-seed)"),
    (["--sample", "--sample-seed", str(2 ** 63)], f"must be a whole number in 0..{2 ** 63 - 1}, got {2 ** 63}",
     "(--sample-seed)"),
    (["--beam", "0"], "must be a whole number ≥ 1, got 0", "(--beam)"),
    (["--beam", "100000"], f"must be at most {MAX_BEAM_SIZE} (§6.1 uses 4), got 100000", "(--beam)"),
    (["--beam", str(2 ** 63)], f"must be at most {MAX_BEAM_SIZE}", "(--beam)"),
    (["--beam", str(10 ** 40)], f"must be at most {MAX_BEAM_SIZE}", "(--beam)"),
]


@pytest.mark.parametrize("command", ["translate", "evaluate"])
@pytest.mark.parametrize("options, what, which", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_strategy_options_are_one_line_errors(files, capsys, command, options, what, which):
    extra = ["one two"] if command == "translate" else ["--data", files["data"]]
    t0 = time.perf_counter()
    rc, _, err = _run([command, "--checkpoint", files["ckpt"], *options, *extra], capsys)
    assert rc == 2, err
    line = _one_error(err)
    assert what in line and line.endswith(which), line
    assert time.perf_counter() - t0 < 5                    # refused before any decoding


def test_strategy_options_are_checked_before_the_checkpoint_is_read(files, capsys):
    missing = os.path.join(files["dir"], "missing.npz")
    for options, which in ((["--beam", "100000"], "(--beam)"), (["--sample", "--beam", "3"], "(--sample/--beam)")):
        rc, _, err = _run(["translate", "--checkpoint", missing, *options, "one"], capsys)
        assert rc == 2 and _one_error(err).endswith(which), err


def test_translate_samples_repeatably_and_top_k_one_is_greedy(files, capsys):
    base = ["translate", "--checkpoint", files["ckpt"], "one two", "three four five", "six"]
    greedy = _run(base + ["--beam", "1"], capsys)
    assert greedy[0] == 0 and len(greedy[1].splitlines()) == 3
    assert _run(base + ["--sample", "--top-k", "1", "--sample-seed", "5"], capsys)[1] == greedy[1]
    hot = base + ["--sample", "--temperature", "5", "--sample-seed", "3"]
    first = _run(hot, capsys)
    assert first[0] == 0 and len(first[1].splitlines()) == 3
    assert _run(hot, capsys)[1] == first[1]                               # same seed, same lines
    assert _run(hot[:-1] + ["4"], capsys)[1] != first[1]                 # another seed, other lines
    assert _run(base + ["--sample", "--top-p", "0.5"], capsys)[0] == 0


def test_evaluate_scores_greedy_then_the_chosen_strategy(files, capsys):
    base = ["evaluate", "--checkpoint", files["ckpt"], "--data", files["data"], "--limit", "6", "--samples", "0"]
    rc, out, err = _run(base + ["--sample", "--temperature", "0.5", "--top-k", "3"], capsys)
    assert rc == 0, err
    names = [line.split(":")[0].strip() for line in out.splitlines() if "exact match" in line]
    assert names == ["greedy", "sample (T=0.5, top-k 3, seed 0)"]
    rc, out, _ = _run(base, capsys)                                       # default: greedy and beam 4 (§6.1)
    assert [line.split(":")[0].strip() for line in out.splitlines() if "exact match" in line] == ["greedy", "beam 4"]
    rc, out, _ = _run(base + ["--beam", "1"], capsys)
    assert [line.split(":")[0].strip() for line in out.splitlines() if "exact match" in line] == ["greedy"]


TRAIN = ["train", "--data", "{data}", "--level", "word", "--preset", "tiny", "--no-progress", "--steps", "2"]


@pytest.mark.parametrize("spec, what", [
    ("beam100000", f"'beam100000': size must be in 1..{MAX_BEAM_SIZE}, got 100000"),
    (f"beam{2 ** 63}", f"size must be in 1..{MAX_BEAM_SIZE}, got {2 ** 63}"),
    ("beam0", "'beam0': size must be in 1..64, got 0"),
    ("sample:top_p=2", "'sample:top_p=2': top_p must be in (0, 1], got 2 "),
    ("sample:temperature=0", "'sample:temperature=0': temperature must be > 0, got 0 "),
    ("topk", "unknown decoding strategy 'topk'"),
])
def test_train_eval_is_checked_before_the_first_step(files, capsys, tmp_path, spec, what):
    out = tmp_path / "never"
    argv = [a.format(**files) for a in TRAIN] + ["--out", str(out), "--eval", "greedy", spec]
    rc, stdout, err = _run(argv, capsys)
    assert rc == 2, err
    line = _one_error(err)
    assert what in line and line.endswith("(--eval)"), line
    assert not out.exists() and "step" not in stdout                    # nothing trained, nothing written


def test_train_eval_decodes_the_test_set_with_each_strategy(files, capsys, tmp_path):
    argv = [a.format(**files) for a in TRAIN] + ["--out", str(tmp_path / "r"), "--eval", "greedy", "beam2",
                                                 "sample:top_k=1,seed=4", "greedy"]
    rc, out, err = _run(argv, capsys)
    assert rc == 0, err
    scores = {line.split(": exact match")[0].strip(): line.split(": exact match")[1] for line in out.splitlines()
              if ": exact match" in line and not line.startswith("step")}
    assert list(scores) == ["greedy", "beam 2", "sample (T=1, top-k 1, seed 4)"]     # the duplicate dropped
    assert scores["sample (T=1, top-k 1, seed 4)"].split("[")[0] == scores["greedy"].split("[")[0]   # = greedy
