"""The translated editions of the lessons (the Korean one: lessons/ko/), built from the English lessons.

``lessons/build.py`` calls this module; ``docs/translating.md`` is the translator's guide.

An edition in language ``ko`` is the folder ``lessons/ko/``:

* ``edition.toml``: the marker that tells the kernel its language (``lessonkit.i18n``);
* ``src/NN_name.toml``: the translation file of lesson NN, one per lesson, the only file a translator
  edits: each markdown cell of the English source in Korean, with the hash of the English cell it
  translates (``[[cell]]``), and the Korean of each string the code shows as prose (``[[text]]``);
* ``NN_name.ipynb``: the notebook, built from the English source's code cells (unchanged, with their
  tags and ids) and the translation's markdown cells, executed in its folder, committed with outputs.

A lesson without a translation file has no Korean notebook. ``problems`` says what keeps a lesson's
two editions out of step (tests/test_editions.py runs it): an English markdown cell edited after its
translation, a cell in one edition only, a string the code shows without its Korean, a notebook whose
code cells are not the English ones.
"""

from __future__ import annotations

import ast
import copy
import difflib
import hashlib
import importlib.util
import json
import pathlib
import re
import subprocess
import sys
import time

import nbformat

from lessonkit import i18n, runtimes

HERE = pathlib.Path(__file__).resolve().parent
LANGUAGES = ("ko",)                     # the translated editions (English is the source)
TRANSLATIONS = "src"                    # lessons/ko/src/NN_name.toml
HANGUL = re.compile(r"[\uac00-\ud7a3]")
# What a student edition of a translated lesson says first (the English one: build.STUDENT_HEADER).
STUDENT_HEADER = {"ko": """\
> **{lesson}강의 학생용 판(student edition)**: 풀이(solution)가 빠져 있고, 연습 문제 셀과 여러분이 결과를
> 예측해야 하는 셀의 출력도 지워져 있습니다.
>
> **답 확인하기.** 연습 문제마다 함수를 채운 다음 바로 아래의 확인 셀을 실행하세요. 함수가 아직 `None`을
> 돌려주면 *not attempted yet*(아직 풀지 않음)을 출력하고, 답이 틀리면 무엇이 틀렸는지 말하는 `WrongAnswer`로
> 멈추며(흔한 실수와 같으면 `hint:` 줄이 붙습니다), 맞으면 `correct`를 출력합니다. `# 답(또는 예측)을 적은 다음에
> 실행하세요`로 시작하는 셀은 답을 보여 줍니다. 여러분이 직접 작성할 연습 문제의 패키지 코드이거나, 예측하라고 한
> 결과입니다. 먼저 여러분의 답을 적어 두세요.
>
> **제출하기.** 노트북 전체를 한 번 더 실행하세요(*Kernel → Restart Kernel and Run All Cells*). 채점도 같은
> 방식으로, 새 커널에서 `python -m minitransformer grade {name}`으로 합니다. 노트북이 출력한 내용이 아니라 확인
> 함수(checker)가 찾은 것만 점수가 됩니다. 이 명령은 여러분이 직접 실행해 볼 수도 있습니다."""}
REVEAL_LINE = {"ko": "# 답(또는 예측)을 적은 다음에 실행하세요: 이 셀의 출력이 답을 알려 줍니다."}


def _english():
    """lessons/build.py, the English edition's builder (loaded by path: it is a script, not a package)."""
    if "lessons_build" not in sys.modules:
        spec = importlib.util.spec_from_file_location("lessons_build", HERE / "build.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["lessons_build"] = module
        spec.loader.exec_module(module)
    return sys.modules["lessons_build"]


# -- where things are ----------------------------------------------------------------------

def translation_path(source: pathlib.Path, lang: str) -> pathlib.Path:
    """lessons/src/NN_name.py -> lessons/<lang>/src/NN_name.toml"""
    return source.parent.parent / lang / TRANSLATIONS / f"{source.stem}.toml"


def notebook_path(source: pathlib.Path, lang: str) -> pathlib.Path:
    """lessons/src/NN_name.py -> lessons/<lang>/NN_name.ipynb"""
    return source.parent.parent / lang / f"{source.stem}.ipynb"


def translated(lang: str, folder: pathlib.Path = HERE) -> dict[str, pathlib.Path]:
    """{"03": lessons/src/03_feed_forward.py, ...}: the English sources of the lessons that have a translation."""
    return {n: s for n, s in _english().lessons(folder).items() if translation_path(s, lang).is_file()}


def cell_hash(source: str) -> str:
    """What a translation records of the English markdown cell it translates: the digest of the English
    cell's id (``lessons/build.py``: ``lNN-<hash>``)."""
    return hashlib.sha1(f"markdown\n{source}".encode()).hexdigest()[:8]


def _first_line(text: str, width: int = 60) -> str:
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return line if len(line) <= width else line[:width - 1] + "…"


# -- the strings the code shows -------------------------------------------------------------

def _code(source: str) -> ast.Module | None:
    from IPython.core.inputtransformer2 import TransformerManager  # jupytext brings IPython

    try:
        return ast.parse(TransformerManager().transform_cell(source))
    except SyntaxError:
        return None


def code_strings(nb) -> list[tuple[int, str, int, str | None]]:
    """(cell index, call name, line in the cell, template) of every string the English code cells show as
    prose (``i18n.translatable``)."""
    found = []
    for index, cell in enumerate(nb.cells):
        tree = _code(cell.source) if cell.cell_type == "code" else None
        found += [(index, name, line, text) for name, line, text in (i18n.translatable(tree) if tree else [])]
    return found


# -- keeping the editions in step -----------------------------------------------------------

def problems(source: pathlib.Path, lang: str) -> list[str]:
    """What keeps lesson ``source``'s edition in ``lang`` out of step with the English, one sentence each
    naming the lesson and the cell; empty when the translation file fits the English source."""
    number, path = source.name[:2], translation_path(source, lang)
    where = f"lesson {number} ({path.relative_to(source.parent.parent).as_posix()})"
    try:
        translation = i18n.read_translation(path)
    except ValueError as exc:
        return [f"lesson {number}: {exc}"]
    nb = _english().notebook(source)
    found = _cell_problems(nb, translation["cell"], where, number)
    found += _text_problems(nb, translation["text"], where)
    return found


def _cell_problems(nb, cells: list[dict], where: str, number: str) -> list[str]:
    english = [(i, cell_hash(c.source), c.source) for i, c in enumerate(nb.cells) if c.cell_type == "markdown"]
    want, have = [h for _, h, _ in english], [c["en"] for c in cells]
    found = []

    def missing(k):
        i, h, text = english[k]
        return (f"{where}, cell {i} (markdown, {_first_line(text)!r}): in the English edition only: translate it "
                f"in a [[cell]] with en = \"{h}\" (python lessons/build.py {number} --drift shows where)")

    def extra(k):
        return (f"{where}, [[cell]] number {k + 1} (en = \"{cells[k]['en']}\", {_first_line(cells[k]['ko'])!r}): "
                f"in the Korean edition only: the English has no such cell (removed or edited?)")

    for op, a0, a1, b0, b1 in difflib.SequenceMatcher(a=want, b=have, autojunk=False).get_opcodes():
        if op == "replace":
            for k in range(min(a1 - a0, b1 - b0)):
                i, h, text = english[a0 + k]
                found.append(f"{where}, cell {i} (markdown, {_first_line(text)!r}): the English changed after its "
                             f"translation (translated from {have[b0 + k]}, now {h}): update the Korean, then its "
                             f"en (python lessons/build.py {number} --drift shows what changed)")
            found += [missing(k) for k in range(a0 + b1 - b0, a1)]
            found += [extra(k) for k in range(b0 + a1 - a0, b1)]
        elif op == "delete":
            found += [missing(k) for k in range(a0, a1)]
        elif op == "insert":
            found += [extra(k) for k in range(b0, b1)]
    for k, cell in enumerate(cells):
        if not HANGUL.search(cell["ko"]):
            found.append(f"{where}, [[cell]] number {k + 1} (en = \"{cell['en']}\"): not translated yet (no Hangul)")
    return found


def _text_problems(nb, texts: list[dict], where: str) -> list[str]:
    found, shown = [], {}
    for index, name, line, text in code_strings(nb):
        if text is None:
            if name in ("tr", *i18n.LABEL_ARGUMENTS):
                found.append(f"{where}, cell {index} (code, line {line}): {name}(...) needs a string literal or an "
                             "f-string written in the call")
            else:
                found.append(f"{where}, cell {index} (code, line {line}): the sentence of {name}(...) is not a "
                             "string written in the call, so the Korean edition cannot translate it: write the "
                             f"f-string in the call, or wrap the sentence in tr(...)")
            continue
        shown.setdefault(text, (index, line))
    translations = {}
    for k, entry in enumerate(texts):
        label = f"{where}, [[text]] number {k + 1} (en = {_first_line(entry['en'])!r})"
        if entry["en"] in translations:
            found.append(f"{label}: a second translation of the same English")
        translations[entry["en"]] = entry["ko"]
        if entry["en"] not in shown:
            found.append(f"{label}: the English code no longer shows this string (removed or edited?)")
            continue
        if not HANGUL.search(entry["ko"]):
            found.append(f"{label}: not translated yet (no Hangul)")
        wrong = i18n.check_pair(entry["en"], entry["ko"])
        if wrong:
            found.append(f"{label}: {wrong}")
    for text, (index, line) in shown.items():
        if text not in translations:
            found.append(f"{where}, cell {index} (code, line {line}): the string {_first_line(text)!r} has no "
                         f"Korean: add a [[text]] with en = '''{text}'''")
    return found


# -- building -------------------------------------------------------------------------------

_LINK = re.compile(r"(\]\()([^)\s]+)")


def _localize_links(text: str, lang: str, folder: pathlib.Path) -> str:
    """The translation writes links as the English does, from lessons/; the notebook sits one folder down.
    A link to a lesson that has a translation stays in the edition."""
    def fix(match):
        target = match.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:|#|/", target, re.I):
            return match.group(0)
        name = target.split("#", 1)[0]
        if re.fullmatch(r"\d\d_\w+\.ipynb", name) and (folder / lang / TRANSLATIONS / f"{name[:-6]}.toml").is_file():
            return match.group(0)
        return match.group(1) + "../" + target
    return _LINK.sub(fix, text)


def translated_notebook(source: pathlib.Path, lang: str) -> nbformat.NotebookNode:
    """The lesson's notebook in ``lang``, without outputs: the English cells, each markdown cell's source
    replaced by its translation (SystemExit naming the problems if the translation is out of step)."""
    found = problems(source, lang)
    if found:
        raise SystemExit(f"{notebook_path(source, lang).relative_to(source.parent.parent)} cannot be built, its "
                         "translation is out of step with the English (docs/translating.md says how to refresh "
                         "it):\n  " + "\n  ".join(found))
    nb = _english().notebook(source)
    cells = iter(i18n.read_translation(translation_path(source, lang))["cell"])
    number, seen = source.name[:2], {}
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        cell.source = _localize_links(next(cells)["ko"].strip("\n"), lang, source.parent.parent)
        digest = hashlib.sha1(f"markdown\n{cell.source}".encode()).hexdigest()[:8]
        seen[digest] = seen.get(digest, 0) + 1
        cell.id = f"l{number}-{lang}-{digest}" + (f"-{seen[digest]}" if seen[digest] > 1 else "")
    nb.metadata.pop("jupytext", None)          # no pairing: jupytext would write lessons/ko/src/NN.py
    nb.metadata["minitransformer"] = {"lesson": int(number), "language": lang}
    nbformat.validate(nb)
    return nb


def first_difference(source: pathlib.Path, lang: str) -> str | None:
    """None if lessons/<lang>/NN.ipynb holds the cells the English source and the translation make (types and
    sources; outputs ignored), else a sentence naming the lesson and the first differing cell."""
    path = notebook_path(source, lang)
    if not path.exists():
        return f"{source.name} has a translation but no notebook {lang}/{path.name}: run python lessons/build.py " \
               f"{source.name[:2]} --lang {lang}"
    want = translated_notebook(source, lang).cells
    have = nbformat.read(path, as_version=4).cells
    for i, (w, h) in enumerate(zip(want, have)):
        if (w.cell_type, w.source) != (h.cell_type, h.source):
            kind = "code" if w.cell_type == "code" else w.cell_type
            what = ("its code is not the English source's" if kind == "code" and h.cell_type == "code"
                    else f"{h.cell_type} in the notebook, {w.cell_type} from the source" if w.cell_type != h.cell_type
                    else "its markdown is not the translation's")
            return f"{lang}/{path.name} differs at cell {i} ({kind}, {_first_line(w.source)!r}): {what}"
    if len(want) != len(have):
        return f"{lang}/{path.name} has {len(have)} cells, the English source and its translation make {len(want)}"
    return None


def build(source: pathlib.Path, lang: str, execute: bool, timeout: int = 600) -> bool:
    """Write lessons/<lang>/NN.ipynb (executed in its folder, or with the outputs it had); False if it now lacks
    outputs. The runtime cells render from the English edition's record, in ``lang``: the code is the same."""
    english = _english()
    nb, path = translated_notebook(source, lang), notebook_path(source, lang)
    t0, changed, lesson = time.perf_counter(), [], source.name[:2]
    if execute:
        from nbclient import NotebookClient

        NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        english.merge_streams(nb)
    else:
        changed = english.carry_outputs(nb, path)
    record = runtimes.load(source.parent.parent / runtimes.RECORD_NAME)
    with i18n.use(lang, translation_path(source, lang).parent):
        english.render_runtime_cells(nb, lesson, record)
        for problem in english.runtime_problems(nb, lesson, record):
            print(f"{lang}/{path.name}: {problem}", file=sys.stderr)
    english.write_notebook(nb, path)
    note = f"executed in {time.perf_counter() - t0:.1f} s" if execute else (
        f"{len(changed)} code cells changed and have no outputs (first: cell {changed[0]}): "
        f"run python lessons/build.py {lesson} --lang {lang}" if changed else "outputs kept")
    print(f"{lang}/{path.name}: {note}, {path.stat().st_size / 1024:.0f} KB", file=sys.stderr)
    return not changed


def check(numbers: list[str], lang: str, folder: pathlib.Path = HERE, orphans: bool = True) -> list[str]:
    """Everything --check finds wrong with the edition in ``lang`` of lessons ``numbers`` (those that have a
    translation), and (``orphans``) its notebooks and translations without a lesson."""
    english = _english()
    found, sources = [], translated(lang, folder)
    record = runtimes.load(folder / runtimes.RECORD_NAME)
    for number in [n for n in numbers if n in sources]:
        source = sources[number]
        drift = problems(source, lang)
        if drift:
            found += drift
            continue
        difference = first_difference(source, lang)
        if difference:
            found.append(f"lesson {number}: {difference}")
            continue
        nb = nbformat.read(notebook_path(source, lang), as_version=4)
        with i18n.use(lang, translation_path(source, lang).parent):
            found += [f"{lang}/{notebook_path(source, lang).name}: {p}"
                      for p in english.runtime_problems(nb, number, record)]
    return found + (orphan_files(lang, folder) if orphans else [])


def orphan_files(lang: str, folder: pathlib.Path = HERE) -> list[str]:
    """Notebooks of the edition without a translation, and translations without an English lesson."""
    stems = {s.stem for s in _english().lessons(folder).values()}
    translations = {p.stem for p in (folder / lang / TRANSLATIONS).glob("*.toml")}
    found = [f"{lang}/{p.name} has no translation {lang}/{TRANSLATIONS}/{p.stem}.toml"
             for p in sorted((folder / lang).glob("[0-9][0-9]_*.ipynb")) if p.stem not in translations]
    found += [f"{lang}/{TRANSLATIONS}/{stem}.toml translates no lesson: there is no {_english().SOURCES}/{stem}.py"
              for stem in sorted(translations - stems)]
    return found


# -- for translators ------------------------------------------------------------------------

def _literal(text: str, cell: bool = False) -> str:
    """``text`` as a TOML multi-line literal string ('''...'''), or a basic string where it cannot be one. A
    markdown cell (``cell``) gets its closing quotes on a line of their own (its ends are stripped when read)."""
    if "'''" in text or text.endswith("'") or "\r" in text:
        return json.dumps(text, ensure_ascii=False)
    if "\n" not in text and not cell:
        return f"'''{text}'''"
    return f"'''\n{text}" + ("\n'''" if cell else "'''")


def skeleton(source: pathlib.Path, lang: str) -> str:
    """A new translation file for lesson ``source``: every markdown cell and every shown string of the English,
    still in English, each to be overwritten with its translation."""
    nb = _english().notebook(source)
    out = [f"# The {lang} edition of lessons/src/{source.name}: docs/translating.md says how to write it.",
           "# Each [[cell]] is a markdown cell, en the hash of the English cell it translates; each [[text]] a",
           "# string the code shows, en as the code writes it. Overwrite every ko with its translation.", ""]
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            out += ["[[cell]]", f"en = \"{cell_hash(cell.source)}\"   # cell {index}: {_first_line(cell.source)}",
                    f"ko = {_literal(cell.source, cell=True)}", ""]
    seen = set()
    for _index, _name, _line, text in code_strings(nb):
        if text is not None and text not in seen:
            seen.add(text)
            out += ["[[text]]", f"en = {_literal(text)}", f"ko = {_literal(text)}", ""]
    return "\n".join(out)


def _git(folder: pathlib.Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _english_at(source: pathlib.Path, wanted: set[str]) -> dict[str, str]:
    """{hash: the English markdown cell with that hash} for the hashes in ``wanted``, from the source's history."""
    import jupytext

    found: dict[str, str] = {}
    relative = source.relative_to(source.parent.parent.parent).as_posix()
    for commit in (_git(source.parent, "log", "--format=%H", "--", source.name) or "").split():
        text = _git(source.parent, "show", f"{commit}:{relative}")
        if text is None:
            continue
        for cell in jupytext.reads(text, fmt="py:percent").cells:
            h = cell_hash(cell.source) if cell.cell_type == "markdown" else None
            if h in wanted and h not in found:
                found[h] = cell.source
        if wanted <= set(found):
            break
    return found


def drift(source: pathlib.Path, lang: str) -> str:
    """For a translator: each problem of the lesson, and for an English cell changed since its translation the
    change itself (from git history), the current translation, and the en line to write once it is updated."""
    found = problems(source, lang)
    if not found:
        return f"lesson {source.name[:2]}: the {lang} edition is in step with the English"
    out = list(found)
    try:
        cells = i18n.read_translation(translation_path(source, lang))["cell"]
    except ValueError:
        return "\n".join(out)
    nb = _english().notebook(source)
    english = [c.source for c in nb.cells if c.cell_type == "markdown"]
    changed = [(k, c["en"]) for k, c in enumerate(cells) if k < len(english) and c["en"] != cell_hash(english[k])]
    old = _english_at(source, {h for _, h in changed}) if changed else {}
    for k, h in changed:
        new = english[k]
        out.append(f"\n== [[cell]] number {k + 1}: en = \"{h}\" -> write en = \"{cell_hash(new)}\" once the Korean "
                   "says what the English now says")
        if h in old:
            out += list(difflib.unified_diff(old[h].splitlines(), new.splitlines(), "English then", "English now",
                                             lineterm="", n=1))
        else:
            out.append("(the English it was translated from is not in this checkout's history; the English now:)")
            out.append(new)
    return "\n".join(out)


# -- the student edition --------------------------------------------------------------------

def write_student_edition(folder: pathlib.Path, numbers: list[str], lang: str,
                          lessons_folder: pathlib.Path = HERE) -> list[pathlib.Path]:
    """The student edition in ``lang`` of lessons ``numbers`` (those translated): ``folder/<lang>/NN.ipynb``,
    beside the files the lessons read (as in the English student edition, which may share ``folder``)."""
    english = _english()
    folder = folder.resolve()
    if folder == lessons_folder or lessons_folder in folder.parents:
        raise SystemExit(f"error: the student edition must go outside {lessons_folder} (pytest --nbmake lessons "
                         f"would run it as lessons) (--student {folder})")
    sources = translated(lang, lessons_folder)
    missing = [n for n in numbers if n not in sources]
    if missing:
        print(f"no {lang} edition yet of lesson {', '.join(missing)} (lessons/{lang}/{TRANSLATIONS}/): left out",
              file=sys.stderr)
    chosen = [n for n in numbers if n in sources]
    stale = []
    for n in chosen:
        drifted = problems(sources[n], lang)
        difference = None if drifted else first_difference(sources[n], lang)
        if drifted or difference:
            stale.append(f"lesson {n}: {drifted[0] if drifted else difference}")
    if stale:
        raise SystemExit(f"error: rebuild these notebooks first (python lessons/build.py NN --lang {lang}): "
                         + "; ".join(stale))
    (folder / lang / TRANSLATIONS).mkdir(parents=True, exist_ok=True)
    marker = (lessons_folder / lang / i18n.MARKER).read_text(encoding="utf-8")
    (folder / lang / i18n.MARKER).write_text(marker, encoding="utf-8")
    written = []
    for n in chosen:
        teacher = notebook_path(sources[n], lang)
        student = english.student_edition(nbformat.read(teacher, as_version=4), n, teacher.name)
        student.cells[0].source = STUDENT_HEADER[lang].format(lesson=int(n), name=f"{lang}/{teacher.name}")
        for cell in student.cells[1:]:
            if cell.cell_type == "markdown":
                cell.source = cell.source.replace("](../../docs/", "](../docs/")   # folder/docs, one up
            if cell.source.startswith(english.REVEAL_LINE + "\n"):
                cell.source = REVEAL_LINE[lang] + cell.source[len(english.REVEAL_LINE):]
        student.metadata["minitransformer"]["language"] = lang
        nbformat.validate(student)
        english.write_notebook(student, folder / lang / teacher.name)
        (folder / lang / TRANSLATIONS / f"{teacher.stem}.toml").write_text(
            _student_strings(sources[n], lang), encoding="utf-8")
        written.append(folder / lang / teacher.name)
    english.copy_student_files(folder, lessons_folder)
    print(f"student edition ({lang}) of {len(written)} lessons in {folder / lang}", file=sys.stderr)
    return written


def _student_strings(source: pathlib.Path, lang: str) -> str:
    """The [[text]] entries a student notebook needs at run time: the strings of its cells that are not
    solutions (a student edition holds no solution, nor the markdown of one)."""
    english = _english()
    nb = english.notebook(source)
    kept = copy.deepcopy(nb)
    kept.cells = [c for c in nb.cells if "solution" not in english.tags(c)]
    wanted = {text for _, _, _, text in code_strings(kept) if text is not None}
    texts = i18n.read_translation(translation_path(source, lang))["text"]
    out = [f"# The strings lesson {source.name[:2]}'s code shows, in {lang}: lessonkit.i18n reads them."]
    for entry in texts:
        if entry["en"] in wanted:
            out += ["", "[[text]]", f"en = {_literal(entry['en'])}", f"ko = {_literal(entry['ko'])}"]
    return "\n".join(out) + "\n"
