"""The i18n helper (lessonkit/i18n.py): prose rendered by code in the edition's language,
from the same code. Templates, the lookup at the call site, the fields of a translation, the edition
marker (a Korean notebook's kernel speaks Korean and moves to lessons/), and the package's own Korean
table (lessonkit/ko.toml) against the package's tr(...) calls."""

import ast
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from lessonkit import i18n, runtimes
from lessonkit.prose import claim, claim_true, show_markdown

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lessonkit"


def _template(source: str) -> str | None:
    return i18n.template(ast.parse(source, mode="eval").body)


@pytest.mark.parametrize("source, expected", [
    ('"plain {braces}"', "plain {{braces}}"),
    ('f"{n:,} parameters, {x!r} and {share:.0%}"', "{n:,} parameters, {x!r} and {share:.0%}"),
    ('(f"two {a} "\n "pieces")', "two {a} pieces"),
    (r'r"derivative $\mathbb{1}[z > 0]$"', r"derivative $\mathbb{{1}}[z > 0]$"),
    ('f"{d[\'k\']} {value:{width}.2f} { {1: 2}[1] }"', "{d['k']} {value:{width}.2f} { {1: 2}[1]}"),
    ("name", None),
    ("f(x)", None),
])
def test_a_template_is_the_string_as_the_code_writes_it(source, expected):
    assert _template(source) == expected


def test_a_pair_must_keep_the_fields():
    assert i18n.check_pair("{n:,} parameters of {name}", "{name}의 파라미터 {n:,}개") is None
    assert "missing {n:,}" in i18n.check_pair("{n:,} parameters", "파라미터 {n}개")
    assert "not in the English {m}" in i18n.check_pair("{n} parameters", "파라미터 {n}개, {m}")
    assert "no template" in i18n.check_pair("x", "짝이 없는 {괄호")


@pytest.fixture
def korean(tmp_path):
    """A Korean table with a few strings of this file, in force for one test."""
    (tmp_path / "99_test.toml").write_text(textwrap.dedent("""\
        [[text]]
        en = '''{n:,} parameters in {name}'''
        ko = '''{name}의 파라미터 {n:,}개'''

        [[text]]
        en = '''a plain sentence'''
        ko = '''평범한 문장'''

        [[text]]
        en = '''the loss is {loss:.2f}'''
        ko = '''손실은 {loss:.2f}입니다'''

        [[text]]
        en = '''the loss levels off'''
        ko = '''손실이 더 내려가지 않는다'''

        [[text]]
        en = '''a wrong {field}'''
        ko = '''틀린 {other}'''

        [[text]]
        en = '''the copy run'''
        ko = '''복사 태스크 학습'''
        """), encoding="utf-8")
    with i18n.use("ko", tmp_path):
        yield


def test_tr_is_the_identity_in_english():
    n, name = 1024, "FFN"
    with i18n.use("en"):
        assert i18n.tr(f"{n:,} parameters in {name}") == "1,024 parameters in FFN"


def test_tr_renders_the_translation_with_the_callers_values(korean):
    n, name = 1024, "FFN"
    assert i18n.tr(f"{n:,} parameters in {name}") == "FFN의 파라미터 1,024개"
    assert i18n.tr("a plain sentence") == "평범한 문장"
    assert [i18n.tr(f"{n:,} parameters in {name}") for n in (1, 2000)] == ["FFN의 파라미터 1개", "FFN의 파라미터 2,000개"]


def test_what_has_no_translation_stays_english(korean):
    text, field = "untranslated", 3
    assert i18n.tr("no such sentence") == "no such sentence"
    assert i18n.tr(text) == "untranslated"                       # not a literal: nothing to look up
    assert i18n.tr(f"a wrong {field}") == "a wrong 3"             # a translation whose fields differ is not used


def test_the_prose_functions_translate_their_sentence(korean, capsys):
    loss = 0.251
    show_markdown(f"the loss is {loss:.2f}")
    assert capsys.readouterr().out == "손실은 0.25입니다\n"
    with pytest.raises(AssertionError) as failed:
        claim("the loss levels off", 2.0, 1.0, tol=0.1)
    assert "'손실이 더 내려가지 않는다'" in str(failed.value) and "1 ± 0.1" in str(failed.value)
    with pytest.raises(AssertionError, match="손실이 더 내려가지 않는다"):
        claim_true("the loss levels off", False)


def test_a_slow_cells_label_is_translated_as_data(korean):
    """show_slow_cell("09", "the copy run"): the label reaches the package as data; the scan finds it as a string
    the lesson shows, and the flag shows its Korean."""
    record = {"slow_cell_seconds": 20, "lessons": {"09": {"machine": {"cores": 2, "cpu": "x"}, "seconds": 60,
                                                          "cells": [{"index": 3, "seconds": 30, "label": "the copy run"}]}}}
    assert "(복사 태스크 학습)" in runtimes.slow_cell_markdown("09", "the copy run", record)
    assert "복사 태스크 학습 (30초)" in runtimes.cost_markdown("09", record)
    found = i18n.translatable(ast.parse('show_slow_cell("09", "the copy run")'))
    assert found == [("show_slow_cell", 1, "the copy run")]


def test_a_reveals_label_is_found_by_keyword_and_shown_in_korean():
    """reveal(..., what="..."): the label is a keyword argument; the scan finds it, and the reveal's sentence
    shows the Korean the lesson's table gives (lesson 3's first prediction)."""
    found = i18n.translatable(ast.parse('reveal(p, 0.5, what="share of ReLU outputs that are 0, standard normal inputs")'))
    assert found == [("reveal", 1, "share of ReLU outputs that are 0, standard normal inputs")]
    assert i18n.translatable(ast.parse('reveal(p, 0.5)')) == []
    with i18n.use("ko"):
        assert i18n.tr_label("share of ReLU outputs that are 0, standard normal inputs") == \
            "ReLU 출력 가운데 0인 것의 비율, 표준정규분포 입력"


def test_the_runtime_sentence_speaks_korean():
    record = runtimes.load(ROOT / "lessons" / runtimes.RECORD_NAME)
    with i18n.use("ko"):
        text = runtimes.cost_markdown("03", record)
        missing = runtimes.cost_markdown("99", record)
    assert text.startswith("**실행 시간: ") and "잰 명령: `python lessons/build.py 03`" in text
    assert missing.startswith("**실행 시간:** 아직 기록되지 않았습니다")
    assert runtimes.cost_markdown("03", record).startswith("**Runtime: ")


def _run_in(folder: pathlib.Path, code: str, **env) -> str:
    environment = {key: value for key, value in os.environ.items() if key != i18n.ENV}
    environment.update(PYTHONPATH=str(ROOT), **env)
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True,
                          env=environment, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


PROBE = ("import os; from lessonkit import i18n; "
         "print(i18n.language(), os.path.basename(os.getcwd()))")


def test_a_kernel_in_the_korean_folder_speaks_korean_and_runs_in_lessons(tmp_path):
    """The marker of lessons/ko/ (edition.toml) read where a notebook's kernel starts: Korean, and the
    working folder is lessons/, where the lessons' files are."""
    lessons = tmp_path / "lessons"
    (lessons / "ko").mkdir(parents=True)
    (lessons / "ko" / i18n.MARKER).write_text((ROOT / "lessons" / "ko" / i18n.MARKER).read_text())
    assert _run_in(lessons / "ko", PROBE) == "ko lessons"
    assert _run_in(lessons, PROBE) == "en lessons"
    assert _run_in(lessons, PROBE, **{i18n.ENV: "ko"}) == "ko lessons"      # the grader's hook
    assert _run_in(lessons / "ko", PROBE, **{i18n.ENV: "en"}) == "en ko"


def test_the_first_question_imports_no_numpy_and_plots_get_hangul_later(tmp_path):
    """A Korean notebook's first cell asks the language; NumPy must not be imported by it (lesson 2 pins BLAS
    threads with environment variables that work only before NumPy's first import). The Hangul font is set once
    matplotlib is imported, with matplotlib's own loader underneath (its files are still found)."""
    lessons = tmp_path / "lessons"
    (lessons / "ko").mkdir(parents=True)
    (lessons / "ko" / i18n.MARKER).write_text((ROOT / "lessons" / "ko" / i18n.MARKER).read_text())
    probe = ("import sys; from lessonkit import i18n; i18n.language(); print('numpy' in sys.modules); "
             "import matplotlib.pyplot as plt, matplotlib; from minitransformer import plot; "
             "print(plt.rcParams['font.family'] == plot.label_fonts(), len(plot.label_fonts()) > 1, "
             "matplotlib.get_data_path() != '')")
    assert _run_in(lessons / "ko", probe).split() == ["False", "True", "True", "True"]
    assert _run_in(lessons, probe).split()[:2] == ["False", "False"]       # English: the fonts are left alone


def test_the_grader_reads_a_notebooks_language_from_its_metadata():
    """The hook for the checkers' hints: a grader starts the kernel with MINITRANSFORMER_LANG set to this."""
    import nbformat

    korean = nbformat.read(ROOT / "lessons" / "ko" / "03_feed_forward.ipynb", as_version=4)
    english = nbformat.read(ROOT / "lessons" / "03_feed_forward.ipynb", as_version=4)
    assert i18n.notebook_language(korean.metadata) == "ko" and i18n.notebook_language(english.metadata) == "en"
    assert i18n.notebook_language({"minitransformer": {"language": "fr"}}) == "en"


def test_a_bad_marker_or_language_is_named(tmp_path):
    (tmp_path / i18n.MARKER).write_text('language = "fr"\n')
    with pytest.raises(ValueError, match="language = 'fr'"):
        i18n.read_marker(tmp_path)
    with pytest.raises(ValueError, match="no language 'fr'"):
        with i18n.use("fr"):
            pass


def _package_strings() -> dict[str, list[str]]:
    """{template: [where]} of every tr(...) in the teaching harness's modules."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, line, text in i18n.translatable(ast.parse(path.read_text(encoding="utf-8"))):
            if name == "tr" and text is not None:
                found.setdefault(text, []).append(f"{path.name}:{line}")
    return found


def test_the_package_table_translates_every_tr_of_the_package():
    strings = _package_strings()
    table = i18n.read_translation(PACKAGE / "ko.toml")["text"]
    translated = {entry["en"]: entry["ko"] for entry in table}
    assert len(translated) == len(table), "a string is translated twice in ko.toml"
    missing = {text: where for text, where in strings.items() if text not in translated}
    assert not missing, f"tr(...) without a line in lessonkit/ko.toml: {missing}"
    unused = sorted(set(translated) - set(strings))
    assert not unused, f"lines of ko.toml that no tr(...) of the package shows: {unused}"
    for english, korean in translated.items():
        assert i18n.check_pair(english, korean) is None, (english, i18n.check_pair(english, korean))
    assert "{max(seconds, 0):.0f} s" in strings          # the scan finds what it should


def test_every_tr_of_the_package_is_a_literal():
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, line, text in i18n.translatable(ast.parse(path.read_text(encoding="utf-8"))):
            assert name != "tr" or text is not None, f"{path.name}:{line}: tr(...) of something not a literal"
