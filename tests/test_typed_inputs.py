"""Inputs a person would type: punctuation split from words the same way in training and in
``translate``, dates and numbers in the forms people write them understood or refused by name,
and unknown words named with the sentence they belong to."""

import contextlib
import datetime
import io

import pytest

from minitransformer.__main__ import main
from minitransformer.checkpoint import load_checkpoint, save_checkpoint
from minitransformer.data import phrasing, translation
from minitransformer.data.registry import TASKS, load_task
from minitransformer.data.vocab import WORD_RULE, WORD_RULE_KEY, Vocab, detokenize, tokenize
from minitransformer.model import Transformer, TransformerConfig

DATES = ["December 25, 2037", "Friday, December 25, 2037", "25 December 2037", "Friday, 25 December 2037"]


def _checkpoint(path, task: str, tokens, levels: dict | None = None) -> str:
    """An untrained model saved as if trained on ``task`` (its outputs are noise; its checks are the task's)."""
    vocab = Vocab(tokens)
    cfg = TransformerConfig(vocab_size=len(vocab), d_model=8, h=2, N=1, d_ff=16, max_len=32)
    levels = levels or {"src": TASKS[task].src_level, "tgt": TASKS[task].tgt_level, "bleu_tokenize": "13a",
                        "src_lowercase": task.startswith("numbers"), WORD_RULE_KEY: WORD_RULE}
    save_checkpoint(str(path), Transformer(cfg, seed=0), vocab, extra={"task": task, "levels": levels})
    return str(path)


def _translate(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["translate", *args])
    return code, out.getvalue(), err.getvalue()


# -- the checks, against what the generators write ---------------------------------------------

def test_generated_dates_pass_their_check_and_name_their_day():
    first, last = translation.DATE_RANGE
    for i in range(0, (last - first).days + 1, 17):     # every form, weekday and month; 2,149 dates
        day = first + datetime.timedelta(days=i)
        source = translation.format_day(day, *translation.DATE_FORMS[i % 4])   # the generator's i-th source
        assert translation.check_date_input(source) is None, source
        assert phrasing.parse_date(source)[0] == day, source
    assert {translation.check_date_input(text) for text in DATES} == {None}


def test_generated_number_names_pass_their_check():
    for value in [*range(0, 130), *range(130, translation.N_NUMBERS, 7)]:      # 1,540 of the 10,000
        name = translation.number_name(value, "en")
        assert phrasing.number_value(name) == value, name
        assert translation.check_number_input(name) is None, name


@pytest.mark.parametrize("text, names", [
    ("the 25th of December, 2037", ["'the 25th of December, 2037' is not a form it knows",
                                    "did you mean 'Friday, December 25, 2037'?"]),
    ("2037-12-25", ["did you mean 'Friday, December 25, 2037'?"]),
    ("Monday, December 25, 2037", ["December 25, 2037 is a Friday, not a Monday"]),
    ("December 25, 2071", ["2071 is outside 1950-2049"]),
    ("Christmas Day 2037", ["'Christmas Day 2037' is not a form it knows"]),
    ("February 30, 2024", ["'February 30, 2024' is not a form it knows"]),
])
def test_a_date_in_another_form_is_refused_by_name(text, names):
    problem = translation.check_date_input(text)
    assert problem.startswith("this model was trained on English dates of 1950-2049 in four forms: "
                              "'Tuesday, March 5, 2024', 'March 5, 2024', 'Tuesday, 5 March 2024', '5 March 2024'")
    for name in names:
        assert name in problem


@pytest.mark.parametrize("text, name", [
    ("1234", "did you mean 'one thousand, two hundred and thirty-four'?"),
    ("one thousand two hundred thirty-four", "did you mean 'one thousand, two hundred and thirty-four'?"),
    ("twelve thousand", "12,000 is more than 9,999"),
    ("zweiundvierzig", "'zweiundvierzig' is not one"),
])
def test_a_number_in_another_form_is_refused_by_name(text, name):
    assert name in translation.check_number_input(text)


def test_dates_tasks_write_each_form_with_the_matching_target_form():
    """A full form (weekday) becomes the target's full form, a long one its long form: no invented weekday."""
    for task, full, long in (("dates-en-ko", "2037년 12월 25일 금요일", "2037년 12월 25일"),
                             ("dates-en-de", "Freitag, 25. Dezember 2037", "25. Dezember 2037")):
        pairs = dict(translation.generate_pairs(task))
        day = (datetime.date(2037, 12, 25) - translation.DATE_RANGE[0]).days
        source = translation.generate_pairs(task)[day][0]
        assert pairs[source] == (full if source.startswith("Friday") else long)
        forms = {translation.DATE_FORMS[i % 4] for i in range(day, day + 4)}
        assert forms == set(translation.DATE_FORMS)


def test_training_tokens_split_punctuation_and_the_task_text_comes_back():
    task = load_task("dates-en-de")
    src, tgt = next((s, t) for s, t in task.train if "," in s and "." in t)
    assert "," in src and "." in tgt                        # punctuation marks are tokens of their own
    assert not any(tok.endswith((",", ".")) and len(tok) > 1 for tok in src + tgt)
    assert tokenize(detokenize(src, "word"), "word") == src


# -- translate -------------------------------------------------------------------------------------

@pytest.fixture
def dates_checkpoint(tmp_path):
    tokens = ["Friday", "December", "25", ",", "2037", "년", "Dezember"]
    return _checkpoint(tmp_path / "dates.npz", "dates-en-ko", tokens)


def test_translate_refuses_a_date_form_the_model_never_saw_naming_the_sentence(dates_checkpoint):
    code, out, err = _translate("--checkpoint", dates_checkpoint, "December 25, 2037", "the 25th of December, 2037")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: this model was trained on English dates")
    assert "'the 25th of December, 2037' is not a form it knows" in err and err.rstrip().endswith("(argument 2)")


def test_translate_reads_a_sentence_as_training_did_before_checking_it(dates_checkpoint):
    """"Friday,December 25 ,2037" is the tokens of "Friday, December 25, 2037": accepted and translated."""
    code, out, err = _translate("--checkpoint", dates_checkpoint, "--beam", "1", "Friday,December 25 ,2037", *DATES)
    assert code == 0, err
    assert len(out.splitlines()) == 5


def test_unknown_words_are_named_with_their_sentence(tmp_path):
    ckpt = _checkpoint(tmp_path / "emoji.npz", "emoji-en-ko", tokenize("grinning face", "char"))
    code, out, err = _translate("--checkpoint", ckpt, "--beam", "1", "grinning face", "red heart", "zebra")
    assert code == 0, err
    lines = [line for line in err.splitlines() if "not in the vocabulary" in line]
    assert lines == ["warning: argument 2 ('red heart'): tokens not in the vocabulary (read as <unk>): "
                     "['d', 'h', 't']",
                     "warning: argument 3 ('zebra'): tokens not in the vocabulary (read as <unk>): ['b', 'z']"]


def test_many_sentences_with_unknown_words_are_counted_after_the_first_five(tmp_path):
    ckpt = _checkpoint(tmp_path / "emoji.npz", "emoji-en-ko", list("abc"))
    code, _, err = _translate("--checkpoint", ckpt, "--beam", "1", *[f"x{i}" for i in range(8)])
    assert code == 0
    assert sum("tokens not in the vocabulary" in line for line in err.splitlines()) == 6
    assert "warning: 3 more sentences have tokens not in the vocabulary (read as <unk>), " in err


def test_a_checkpoint_from_before_the_word_rule_reads_words_at_spaces(tmp_path):
    """Its vocabulary holds "5," and "Tuesday,": it is read at level "space", the rule it was trained with."""
    path = _checkpoint(tmp_path / "old.npz", "copy", ["Tuesday,", "5,"], levels={"src": "word", "tgt": "word"})
    levels = load_checkpoint(path).extra["levels"]
    assert (levels["src"], levels["tgt"], levels[WORD_RULE_KEY]) == ("space", "space", WORD_RULE)
    code, _, err = _translate("--checkpoint", path, "--beam", "1", "Tuesday, 5,")
    assert code == 0 and "not in the vocabulary" not in err


def test_tasks_and_translate_help_say_what_each_model_reads(capsys):
    assert main(["tasks"]) == 0
    printed = capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["translate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for name, task in TASKS.items():
        assert task.phrasing, name
        assert f"its model reads {task.phrasing}" in printed
        assert " ".join(task.phrasing.split()) in help_text, name


@pytest.mark.slow
def test_a_trained_dates_en_ko_model_translates_the_forms_people_write(tmp_path):
    """The task's recipe, stopped once validation is solved twice in a row (step 500 to 1,000 on a
    2-core machine): every form of 25 December 2037 gets its own Korean form, and a form the task
    does not have is refused by name."""
    out = tmp_path / "ko"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", "--task", "dates-en-ko", "--valid-every", "250", "--stop-when-solved", "2",
                     "--out", str(out), "--no-progress"]) == 0
    code, printed, err = _translate("--checkpoint", str(out / "checkpoint.npz"), *DATES)
    assert code == 0, err
    assert printed.splitlines() == ["2037년 12월 25일", "2037년 12월 25일 금요일", "2037년 12월 25일",
                                    "2037년 12월 25일 금요일"]
    code, _, err = _translate("--checkpoint", str(out / "checkpoint.npz"), "the 25th of December, 2037")
    assert code == 2 and "is not a form it knows; did you mean 'Friday, December 25, 2037'?" in err
