"""The Korean edition of the lessons (lessons/ko/) is kept in step with the English (lessons/editions.py).

Every translated lesson: its translation file (lessons/ko/src/NN_name.toml) holds one Korean cell per
English markdown cell, each recording the hash of the English it translates, and the Korean of every
string the code shows; the committed notebook lessons/ko/NN_name.ipynb holds the English code cells
unchanged and the translation's markdown, with outputs rendered in Korean and no missing glyph. The
planted tests show each check failing, naming the lesson and the cell.
"""

import json
import pathlib
import re
import shutil

import pytest

for _module in ("jupytext", "nbformat"):
    pytest.importorskip(_module, reason=f"{_module} is not installed (pip install -r requirements-dev.txt): "
                                        "edition tests skipped")
import nbformat  # noqa: E402
from repo_scripts import load  # noqa: E402

from lessonkit import i18n  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = ROOT / "lessons"


editions = load("lessons_editions", LESSONS / "editions.py")
build = editions._english()
KO = editions.translated("ko")


def test_the_pilot_lessons_are_translated():
    assert {"00", "03"} <= set(KO)


@pytest.mark.parametrize("number", sorted(KO))
def test_the_translation_is_in_step_with_the_english(number):
    assert editions.problems(KO[number], "ko") == []


@pytest.mark.parametrize("number", sorted(KO))
def test_the_notebook_holds_the_english_code_and_the_translation(number):
    assert editions.first_difference(KO[number], "ko") is None


def test_the_korean_edition_checks_clean():
    """What python lessons/build.py --check --lang ko runs: the above, the runtime cells, no orphans."""
    assert editions.check(list(build.lessons()), "ko") == []


@pytest.mark.parametrize("number", sorted(KO))
def test_the_notebook_opens_as_a_korean_edition(number):
    nb = nbformat.read(editions.notebook_path(KO[number], "ko"), as_version=4)
    english = nbformat.read(build.notebook_path(KO[number]), as_version=4)
    assert nb.metadata.kernelspec == build.KERNELSPEC
    assert nb.metadata["minitransformer"] == {"lesson": int(number), "language": "ko"}
    assert "jupytext" not in nb.metadata          # no pairing: JupyterLab's jupytext would write lessons/ko/src/NN.py
    code = [(c.id, c.source, c.metadata.get("tags")) for c in nb.cells if c.cell_type == "code"]
    assert code == [(c.id, c.source, c.metadata.get("tags")) for c in english.cells if c.cell_type == "code"]


@pytest.mark.parametrize("number", sorted(KO))
def test_the_outputs_speak_korean_and_draw_hangul(number):
    """The runtime sentence and the prose the code renders are Korean; no output of matplotlib says a glyph
    is missing (a Hangul label drawn as a box: "Font ... does not have a glyph")."""
    nb = nbformat.read(editions.notebook_path(KO[number], "ko"), as_version=4)
    texts = [json.dumps(o, ensure_ascii=False) for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert texts, f"lesson {number}: the Korean notebook has no outputs (execute it)"
    assert not [t for t in texts if "does not have a glyph" in t], f"lesson {number}: a label drawn as boxes"
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "실행 시간" in json.dumps(first.outputs, ensure_ascii=False)
    assert sum(bool(editions.HANGUL.search(t)) for t in texts) >= 3


def test_the_edition_marker_is_the_one_the_kernel_reads():
    edition = i18n.read_marker(LESSONS / "ko")
    assert edition.language == "ko" and edition.lessons == LESSONS and edition.translations == LESSONS / "ko" / "src"


# -- planted problems ---------------------------------------------------------------------------

@pytest.fixture
def copy(tmp_path):
    """lessons/ with lesson 3 in both editions, to plant problems in."""
    lessons = tmp_path / "lessons"
    (lessons / "src").mkdir(parents=True)
    (lessons / "ko" / "src").mkdir(parents=True)
    source = KO["03"]
    shutil.copy(source, lessons / "src" / source.name)
    shutil.copy(build.notebook_path(source), lessons / build.notebook_path(source).name)
    for path in (editions.translation_path(source, "ko"), editions.notebook_path(source, "ko"), LESSONS / "ko" / i18n.MARKER):
        shutil.copy(path, lessons / path.relative_to(LESSONS))
    shutil.copy(LESSONS / "runtimes.json", lessons / "runtimes.json")
    copied = lessons / "src" / source.name
    assert editions.problems(copied, "ko") == [] and editions.first_difference(copied, "ko") is None
    return copied


def _edit(path: pathlib.Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_an_english_cell_edited_after_its_translation_fails(copy):
    _edit(copy, "# ## 2. ReLU and its backward", "# ## 2. ReLU and its gradient")
    found = editions.problems(copy, "ko")
    assert len(found) == 1, found
    assert re.match(r"lesson 03 \(ko/src/03_feed_forward.toml\), cell \d+ \(markdown, '## 2. ReLU and its gradient'\): "
                    "the English changed after its translation", found[0]), found[0]
    with pytest.raises(SystemExit, match="out of step"):
        editions.translated_notebook(copy, "ko")


def test_a_cell_in_one_edition_only_fails(copy):
    _edit(copy, "# %% [markdown]\n# ## 5. Gradient check",
          "# %% [markdown]\n# A new English paragraph.\n\n# %% [markdown]\n# ## 5. Gradient check")
    found = editions.problems(copy, "ko")
    assert len(found) == 1 and re.search(r"cell \d+ \(markdown, 'A new English paragraph.'\): in the English edition only",
                                         found[0]), found   # the cell's number moves as the lesson grows
    translation = editions.translation_path(copy, "ko")
    _edit(copy, "# %% [markdown]\n# A new English paragraph.\n\n", "")
    _edit(translation, '[[cell]]\nen = "8dbc7b5e"', '[[cell]]\nen = "0badc0de"\nko = \'\'\'새 셀\'\'\'\n\n[[cell]]\nen = "8dbc7b5e"')
    found = editions.problems(copy, "ko")
    assert len(found) == 1 and re.search(r"\[\[cell\]\] number \d+ \(en = \"0badc0de\", '새 셀'\): in the Korean edition only",
                                         found[0]), found


def test_a_code_cell_that_differs_between_the_editions_fails(copy):
    path = editions.notebook_path(copy, "ko")
    nb = nbformat.read(path, as_version=4)
    cell = next(i for i, c in enumerate(nb.cells) if "rng = np.random.default_rng(3)" in c.source)
    nb.cells[cell].source = nb.cells[cell].source.replace("default_rng(3)", "default_rng(4)")
    nbformat.write(nb, path)
    assert editions.first_difference(copy, "ko") == \
        f"ko/03_feed_forward.ipynb differs at cell {cell} (code, 'rng = np.random.default_rng(3)'): " \
        "its code is not the English source's"


def test_a_string_the_code_shows_without_its_korean_fails(copy):
    _edit(copy, 'title=tr("ReLU and its derivative")', 'title=tr("ReLU and its slope")')
    found = editions.problems(copy, "ko")
    assert any(re.search(r"cell \d+ \(code, line 13\): the string 'ReLU and its slope' has no Korean", p)
               for p in found), found
    assert any("(en = 'ReLU and its derivative'): the English code no longer shows this string" in p for p in found)


def test_a_translation_with_other_fields_or_no_hangul_fails(copy):
    translation = editions.translation_path(copy, "ko")
    _edit(translation, "ko = '''FFN 파라미터 {n_ffn:,}개, 멀티 헤드 어텐션 파라미터 {n_att:,}개'''",
          "ko = '''FFN 파라미터 {n_ffn}개, 멀티 헤드 어텐션 파라미터 {n_att:,}개'''")
    _edit(translation, "ko = '''위치'''", "ko = '''position'''")
    found = editions.problems(copy, "ko")
    assert any("its fields differ from the English; missing {n_ffn:,}; not in the English {n_ffn}" in p for p in found)
    assert any("(en = 'position'): not translated yet (no Hangul)" in p for p in found)


def test_a_sentence_that_is_not_written_in_the_call_is_named(copy):
    _edit(copy, "print(tr(\"whole batch == one position at a time:\"), ", "label = 'x'\nprint(tr(label), ")
    found = editions.problems(copy, "ko")
    assert any("tr(...) needs a string literal or an f-string written in the call" in p for p in found), found


def test_the_drift_report_shows_the_english_change(copy):
    _edit(copy, "# ## 2. ReLU and its backward", "# ## 2. ReLU and its gradient")
    report = editions.drift(copy, "ko")
    assert "the English changed after its translation" in report
    assert 'write en = "' in report                                  # the line the translator writes once done


def test_the_skeleton_of_a_new_translation_fits_the_english():
    source = build.lessons()["05"]
    text = editions.skeleton(source, "ko")
    import tomllib
    data = tomllib.loads(text)
    english = [c for c in build.notebook(source).cells if c.cell_type == "markdown"]
    assert [c["en"] for c in data["cell"]] == [editions.cell_hash(c.source) for c in english]
    assert [c["ko"].strip("\n") for c in data["cell"]] == [c.source for c in english]
    assert all(t["en"] == t["ko"] for t in data.get("text", []))


# -- the student edition in Korean ----------------------------------------------------------------

@pytest.fixture(scope="module")
def student(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    editions.write_student_edition(out, sorted(KO), "ko")
    return out


def test_the_korean_student_edition(student):
    assert (student / "ko" / i18n.MARKER).is_file() and (student / "debug_attention.py").is_file()
    assert (student / "docs" / "glossary.md").is_file()
    for number, source in KO.items():
        nb = nbformat.read(student / "ko" / editions.notebook_path(source, "ko").name, as_version=4)
        assert nb.metadata["minitransformer"] == {"lesson": int(number), "edition": "student", "language": "ko"}
        assert "학생용 판" in nb.cells[0].source
        assert not [c for c in nb.cells if "solution" in build.tags(c)]
        assert all("](../../docs/" not in c.source for c in nb.cells if c.cell_type == "markdown")
        for cell in nb.cells:
            for target in __import__("re").findall(r"\]\((\.\./docs/[^)#]+)", cell.source):
                assert (student / "ko" / target).resolve().is_file(), target
        strings = i18n.read_translation(student / "ko" / "src" / f"{source.stem}.toml")
        assert strings["cell"] == [] and strings["text"]


@pytest.mark.slow
@pytest.mark.parametrize("number", ["03", "13"])
def test_the_korean_student_edition_runs_and_grades(student, number):
    """Lessons 3 and 13 in Korean: the untouched student notebook runs clean under the grader (its kernel started
    in Korean from the notebook's metadata) and scores 0; the teacher's Korean notebook scores full."""
    from lessonkit import grade
    from lessonkit.exercises import catalogue

    name = editions.notebook_path(KO[number], "ko").name
    untouched = grade.grade_notebook(student / "ko" / name, lessons=LESSONS)
    assert untouched.notes == [] and untouched.cells_run == untouched.cells, untouched.notes
    assert {e.status for e in untouched.exercises} == {"not attempted"} and untouched.score == 0
    assert untouched.max_points == len(catalogue.for_lesson(int(number))) > 0
    assert len(untouched.predictions) >= 1                  # the report names them as the English code does
    teacher = grade.grade_notebook(LESSONS / "ko" / name, lessons=LESSONS)
    assert teacher.notes == [] and teacher.score == teacher.max_points == len(catalogue.for_lesson(int(number)))


def test_a_checker_speaks_the_language_of_its_notebook(capsys):
    """The checkers' messages go through tr(): English as before in the English edition, Korean in the Korean one
    (lessonkit/ko.toml), with the "hint:" line still starting with "hint:" (the grader picks the hint by it)."""
    from lessonkit.exercises import lesson_13
    from lessonkit.exercises._common import NOT_ATTEMPTED

    def no_division(a, b):
        return {name: a[name] + b[name] for name in a}

    said = {}
    for lang in ("en", "ko"):
        with i18n.use(lang):
            assert not lesson_13.check_merge_step(lambda vocab: None)
            with pytest.raises(AssertionError) as wrong:
                lesson_13.check_average_two(no_division)
        said[lang] = capsys.readouterr().out, str(wrong.value)
    assert said["en"][0] == NOT_ATTEMPTED + "\n"
    assert said["en"][1].startswith("E: wrong values: max relative error") and \
        said["en"][1].endswith("\n  hint: no division: the mean of two is their sum / 2")
    assert said["ko"][0].startswith("not attempted yet(아직 풀지 않음): ") and editions.HANGUL.search(said["ko"][0])
    assert said["ko"][1].startswith("E: 값이 틀렸습니다") and "\n  hint: 나눗셈이 없습니다" in said["ko"][1]
