"""Small data handled as a user expects (issue 39): `train --data` warns when the validation or
test split is too small for its score to mean anything, says when the run will stop (and, when
not once solved, why not), and a BLEU of 0 from outputs too short for 4-grams is explained."""

import contextlib
import io

import pytest

from minitransformer.__main__ import main
from minitransformer.cli.scoring import why_bleu_is_zero
from minitransformer.cli.train import _stopping
from minitransformer.data import registry
from minitransformer.data.loading import MIN_SCORED_PAIRS, small_split_warnings
from minitransformer.metrics import corpus_bleu
from minitransformer.settings import TrainSettings


def _tsv(tmp_path, n: int):
    lines = [f"{' '.join(str(d) for d in f'{i:03d}')}\t{'x' if i % 2 else 'y'}\n" for i in range(n)]
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(lines), encoding="utf-8")
    return str(path)


def _train(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["train", "--no-progress", "--preset", "tiny", *args])
    return code, out.getvalue(), err.getvalue()


def test_a_42_line_file_is_warned_about_its_2_pair_splits_with_the_threshold_and_why(tmp_path):
    code, out, err = _train("--data", _tsv(tmp_path, 42), "--level", "word", "--steps", "1",
                            "--out", str(tmp_path / "run"))
    assert code == 0, err
    assert "task pairs.tsv: 38 train / 2 valid / 2 test pairs" in out
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2
    valid, test = warnings
    assert "the validation split has 2 pair(s), under the 100 a score needs to mean something" in valid
    assert "one pair is 50 points of exact match" in valid and "means 2 sentence(s) right" in valid
    assert "the test split has 2 pair(s)" in test and "uncertain by about ±69 points (95% interval near 50%)" in test


def test_splits_of_100_pairs_or_more_are_not_warned_about():
    assert MIN_SCORED_PAIRS == 100
    assert small_split_warnings([None] * 100, [None] * 250, "f.tsv") == []
    assert len(small_split_warnings([None] * 99, [None] * 100, "f.tsv")) == 1


def test_a_data_file_stops_once_solved_as_copy_and_reverse_do():
    settings = registry.DATA_RECIPE.settings
    copy = registry.get_task("copy").recipe.settings
    assert settings.stop_when_solved == copy.stop_when_solved == 2
    assert settings.valid_every == 250 and settings.steps == 2000


@pytest.mark.parametrize("stop, steps_given, says", [
    (2, False, "stops: once solved (100% validation exact match at 2 validations in a row, every 250 steps, "
               "on up to 200 validation pairs), at most 2,000 steps"),
    (0, True, "stops: after exactly 2,000 steps (--steps), solved or not; add --stop-when-solved 2"),
    (0, False, "stops: after 2,000 steps, the fixed length of dates-en-ko's recipe (it does not stop once solved)"),
])
def test_the_run_says_when_it_stops_and_why_not_once_solved(stop, steps_given, says):
    settings = TrainSettings(steps=2000, valid_every=250, stop_when_solved=stop)
    assert _stopping(settings, steps_given, "dates-en-ko").startswith(says)


def test_train_prints_its_stopping_rule(tmp_path):
    code, out, err = _train("--data", _tsv(tmp_path, 42), "--level", "word", "--steps", "3",
                            "--out", str(tmp_path / "run"))
    assert code == 0, err
    assert "stops: after exactly 3 steps (--steps), solved or not" in out


def test_bleu_zero_is_explained_only_when_the_outputs_are_too_short_for_4_grams():
    short = corpus_bleu(["a b c", "d e"], ["a b c", "d e"])
    assert short.score == 0
    assert why_bleu_is_zero(short, "13a").startswith("BLEU is 0 because no output has 4 tokens (13a tokenizer; "
                                                     "the longest has 3)")
    assert why_bleu_is_zero(corpus_bleu(["a b c d"], ["a b c d"]), "13a") is None     # BLEU 100
    assert why_bleu_is_zero(corpus_bleu(["a b c d"], ["w x y z"]), "13a") is None     # 0, and rightly so
    assert why_bleu_is_zero(corpus_bleu([""], ["w x y z"]), "13a") is None            # nothing was output
