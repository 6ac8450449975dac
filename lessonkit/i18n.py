"""One computation, prose in the reader's language: how a lesson's code speaks Korean in the Korean edition.

The lessons exist in editions: the English one (``lessons/NN_name.ipynb``) and translated ones
(``lessons/ko/NN_name.ipynb``). Every edition runs the *same* code cells, the English ones; what
differs is the prose. Markdown cells are translated in the lesson's translation file
(``lessons/ko/src/NN_name.toml``, built in by ``lessons/build.py``). Prose that a code cell renders
is translated here, at run time, with the code unchanged:

* ``show_markdown(f"...")``, ``claim("...", ...)`` and ``claim_true("...", ...)`` translate their
  sentence themselves;
* any other string meant as prose (a ``print``, a plot's title or axis label) is wrapped in ``tr``:
  ``print(tr(f"FFN {n_ffn:,} parameters"))``, ``ax.set(title=tr("ReLU and its derivative"))``.

In English ``tr`` returns its argument. In another language it looks up the string *as written in
the code*, its template (an f-string's text with its ``{expression:format}`` fields, e.g.
``FFN {n_ffn:,} parameters``), in the edition's tables and evaluates the translation's fields, the
same expressions in the translation's order, in the caller's namespace: ``FFN 파라미터 {n_ffn:,}개``.
A string with no translation stays English (``tests/test_editions.py`` finds every one).

**Which language.** ``language()`` is, in this order: the one ``use()`` set (the build, the tests),
the environment variable ``MINITRANSFORMER_LANG`` (``en`` or ``ko``: the grader's hook, below), the
edition marker ``edition.toml`` in the folder the kernel started in (a notebook's kernel starts in
the notebook's folder, in JupyterLab, VS Code, under ``pytest --nbmake`` and ``lessons/build.py``),
else English. The marker of ``lessons/ko/`` says::

    language = "ko"
    lessons = ".."          # the folder whose files the lessons read: the kernel moves there
    translations = "src"    # the translation files

so a Korean notebook's kernel, on its first question about the language (``show_cost``, the first
cell of every lesson, asks it), moves to ``lessons/``: ``experiments/``, ``debug_attention.py`` and
``runtimes.json`` are found exactly as in the English edition, and Korean plot labels get a Hangul
font (``plot.label_fonts()``: NanumGothic from the koreanize-matplotlib wheel).

**The checkers' hook.** A checker that wants its hints in the reader's language calls ``tr`` on
them (its Korean lines go in ``ko.toml`` beside this module) or asks ``language()``. A grader
that runs a notebook elsewhere reads the notebook's metadata ``minitransformer.language`` (the build
writes ``"ko"`` into every Korean notebook, teacher's and student's) and starts the kernel with
``MINITRANSFORMER_LANG`` set to it.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import os
import pathlib
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass

__all__ = ["ENV", "LABEL_ARGUMENTS", "LANGUAGES", "MARKER", "TRANSLATED_CALLS", "Edition", "edition", "fields",
           "language", "notebook_language", "read_translation", "table", "template", "tr", "tr_label",
           "translate_argument", "use"]

ENV = "MINITRANSFORMER_LANG"
LANGUAGES = ("en", "ko")
MARKER = "edition.toml"
# The calls whose first argument is prose: tr itself, and the prose functions that translate their sentence.
TRANSLATED_CALLS = ("tr", "show_markdown", "claim", "claim_true")
# Calls with a plain string argument that the package shows in a sentence (by position): a slow cell's label.
LABEL_ARGUMENTS = {"show_slow_cell": 1}
# ... and by keyword: what a prediction's reveal names (lessonkit.predict.reveal(..., what="...")).
LABEL_KEYWORDS = {"reveal": "what"}
_HERE = pathlib.Path(__file__).resolve().parent
_REPO_LESSONS = _HERE.parent / "lessons"          # an editable install: the repository's lessons/


@dataclass(frozen=True)
class Edition:
    """The language of the lessons this process runs, and where its files are.

    folder: the edition's folder (the one holding ``edition.toml``), None for the English edition;
    lessons: the folder whose files the lessons read (the kernel runs there);
    translations: the folder of the translation files (``NN_name.toml``), None if there are none."""

    language: str
    folder: pathlib.Path | None = None
    lessons: pathlib.Path | None = None
    translations: pathlib.Path | None = None


_forced: list[Edition] = []        # use()'s stack
_found: Edition | None = None      # what the first question found (the kernel's edition)


def read_marker(folder: pathlib.Path) -> Edition:
    """The edition described by ``folder/edition.toml``."""
    path = folder / MARKER
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: not a readable edition marker ({exc})") from None
    lang = data.get("language")
    if lang not in LANGUAGES:
        raise ValueError(f"{path}: language = {lang!r}; the editions are {', '.join(LANGUAGES)}")
    lessons = (folder / data.get("lessons", ".")).resolve()
    translations = (folder / data["translations"]).resolve() if "translations" in data else None
    return Edition(lang, folder.resolve(), lessons, translations)


def _repo_translations(lang: str) -> pathlib.Path | None:
    folder = _REPO_LESSONS / lang / "src"
    return folder if lang != "en" and folder.is_dir() else None


def _discover() -> Edition:
    here = pathlib.Path.cwd()
    found = read_marker(here) if (here / MARKER).is_file() else None
    wanted = os.environ.get(ENV, "").strip()
    if wanted:
        if wanted not in LANGUAGES:
            raise ValueError(f"{ENV}={wanted!r}: the languages are {', '.join(LANGUAGES)}")
        if found is None or found.language != wanted:
            return Edition(wanted, None, None, _repo_translations(wanted))
    if found is None:
        return Edition("en")
    if found.lessons is not None and found.lessons != here.resolve():
        os.chdir(found.lessons)        # the lessons' relative paths are the English edition's
    if found.language != "en":
        _hangul_plots()
    return found


def _hangul_plots() -> None:
    """Plot labels in Hangul: matplotlib falls back glyph by glyph from DejaVu Sans to a CJK font.

    Set when matplotlib is first imported, not before: a lesson's first cell asks the language, and importing
    matplotlib there would import NumPy before the lesson's own settings (lesson 2 pins BLAS threads with
    environment variables that only work before NumPy's first import)."""
    if "matplotlib" in sys.modules:
        _label_fonts()
    elif not any(isinstance(finder, _AfterMatplotlib) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterMatplotlib())


def _label_fonts() -> None:
    import matplotlib  # noqa: PLC0415  (only a translated edition needs it here)

    from minitransformer import plot  # noqa: PLC0415

    matplotlib.rcParams["font.family"] = plot.label_fonts()


class _AfterMatplotlib:
    """An import hook that sets the label fonts once matplotlib's first import has run (``_hangul_plots``)."""

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib":
            return None
        sys.meta_path.remove(self)
        import importlib.util  # noqa: PLC0415

        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenLabelFonts(spec.loader)
        return spec


class _ThenLabelFonts:
    """matplotlib's own loader, then ``_label_fonts``; anything else is the original loader's."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            _label_fonts()
        except ImportError:          # no minitransformer (never in the lessons): plots stay as they are
            pass


def edition() -> Edition:
    """The edition this process runs (see the module docstring: ``use``, the environment, the marker)."""
    global _found
    if _forced:
        return _forced[-1]
    if _found is None:
        _found = _discover()
    return _found


def language() -> str:
    """"en" or "ko": the language the lessons' prose is shown in."""
    return edition().language


def notebook_language(metadata: dict) -> str:
    """The language a notebook was built in, from its metadata (``minitransformer.language``, which the build
    writes into every translated notebook); "en" when it says none. A grader that runs the notebook elsewhere
    starts its kernel with ``{ENV: notebook_language(nb.metadata)}`` so that the checkers speak it too."""
    meta = metadata.get("minitransformer") if isinstance(metadata, dict) else None
    lang = meta.get("language") if isinstance(meta, dict) else None
    return lang if lang in LANGUAGES else "en"


@contextlib.contextmanager
def use(lang: str, translations: pathlib.Path | None = None):
    """Speak ``lang`` inside the block (the build renders a Korean notebook's runtime cells so), with the
    translation files of ``translations`` (default: the repository's ``lessons/<lang>/src``)."""
    if lang not in LANGUAGES:
        raise ValueError(f"no language {lang!r}; the editions are {', '.join(LANGUAGES)}")
    _forced.append(Edition(lang, None, None, translations or _repo_translations(lang)))
    try:
        yield
    finally:
        _forced.pop()


# -- templates: a string as the code writes it ----------------------------------------------

def _literal(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _field(node: ast.FormattedValue) -> str:
    expression = ast.unparse(node.value)
    text = "{" + (" " if expression.startswith("{") else "") + expression
    if node.conversion != -1:
        text += "!" + chr(node.conversion)
    if node.format_spec is not None:
        text += ":" + "".join(_literal(v.value) if isinstance(v, ast.Constant) else _field(v)
                              for v in node.format_spec.values)
    return text + "}"


def template(node: ast.expr) -> str | None:
    """The template of a string literal or f-string (implicitly joined pieces included): its text with
    each field written ``{expression!conversion:format}`` and literal braces doubled. None for
    anything else (a name, a call)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _literal(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(_literal(v.value) if isinstance(v, ast.Constant) else _field(v) for v in node.values)
    return None


def _parse(text: str) -> ast.JoinedStr:
    """A template as an f-string expression (raw, so that LaTeX's backslashes stay as they are)."""
    for quote in ("'''", '"""'):
        if quote not in text and not text.endswith(quote[0]) and not text.endswith("\\"):
            node = ast.parse(f"rf{quote}{text}{quote}", mode="eval").body
            if isinstance(node, ast.Constant):           # no fields: the parser returns the plain string
                node = ast.JoinedStr(values=[node] if node.value else [])
            return node
    raise SyntaxError(f"a template cannot end with a quote or a backslash, nor hold both ''' and \"\"\": {text!r}")


def fields(text: str) -> list[str]:
    """The fields of a template, ``{expression:format}`` each, in order (SyntaxError if it is no template)."""
    return [_field(v) for v in _parse(text).values if isinstance(v, ast.FormattedValue)]


def check_pair(english: str, translated: str) -> str | None:
    """None if ``translated`` can stand for ``english``: a valid template with the same fields (the same
    expressions and formats, each as often, in any order); else what is wrong."""
    try:
        want = Counter(fields(english))
    except SyntaxError as exc:
        return f"the English is no template: {exc}"
    try:
        have = Counter(fields(translated))
    except SyntaxError as exc:
        return f"the translation is no template: {exc}"
    if want != have:
        missing, extra = sorted((want - have).elements()), sorted((have - want).elements())
        return ("its fields differ from the English" + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; not in the English {', '.join(extra)}" if extra else "")
                + " (literal braces are written {{ and }})")
    return None


# -- translation files ----------------------------------------------------------------------

def read_translation(path: pathlib.Path) -> dict:
    """A translation file (TOML): ``{"cell": [{"en": hash, "ko": text}, ...], "text": [{"en": template,
    "ko": template}, ...]}``. Raises ValueError naming the file and what is wrong."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML ({exc})") from None
    unknown = set(data) - {"cell", "text"}
    if unknown:
        raise ValueError(f"{path}: unknown tables {sorted(unknown)}; a translation file has [[cell]] and [[text]]")
    for kind in ("cell", "text"):
        for i, entry in enumerate(data.get(kind, [])):
            if set(entry) != {"en", "ko"} or not all(isinstance(v, str) for v in entry.values()):
                raise ValueError(f"{path}: [[{kind}]] number {i + 1} must have exactly the strings en and ko, "
                                 f"not {sorted(entry)}")
    return {"cell": data.get("cell", []), "text": data.get("text", [])}


_tables: dict[tuple, dict[str, str]] = {}


def table(lang: str, translations: pathlib.Path | None) -> dict[str, str]:
    """{English template: translated template} for ``lang``: the package's own strings (``<lang>.toml``
    beside this module) and every translation file in ``translations``."""
    key = (lang, translations)
    if key not in _tables:
        found: dict[str, str] = {}
        files = [_HERE / f"{lang}.toml"] + (sorted(translations.glob("*.toml")) if translations else [])
        for path in files:
            if path.is_file():
                for entry in read_translation(path)["text"]:
                    found.setdefault(entry["en"], entry["ko"])
        _tables[key] = found
    return _tables[key]


# -- at run time ----------------------------------------------------------------------------

_sites: dict[tuple, str | None] = {}


def _call_template(frame) -> str | None:
    """The template of the first argument of the call ``frame`` is executing, read from its source."""
    code, at = frame.f_code, frame.f_lasti
    if (code, at) not in _sites:
        found = None
        try:
            lineno, end, col, end_col = list(code.co_positions())[at // 2]
        except (IndexError, ValueError):
            lineno = None
        lines = linecache.getlines(code.co_filename, frame.f_globals) if lineno else []
        if lineno and end and col is not None and end_col is not None and len(lines) >= end:
            piece = [line.encode() for line in lines[lineno - 1:end]]   # the offsets count UTF-8 bytes
            piece[-1] = piece[-1][:end_col]
            piece[0] = piece[0][col:]
            try:
                call = ast.parse(b"".join(piece).decode(), mode="eval").body
            except (SyntaxError, UnicodeDecodeError):
                call = None
            if isinstance(call, ast.Call) and call.args:
                found = template(call.args[0])
        _sites[(code, at)] = found
    return _sites[(code, at)]


def _render(translated: str, english: str, frame) -> str | None:
    if check_pair(english, translated) is not None:
        return None
    node = ast.Expression(_parse(translated))
    try:
        return eval(compile(node, "<translation>", "eval"), frame.f_globals, frame.f_locals)
    except (NameError, AttributeError, KeyError, IndexError, TypeError, ValueError):
        return None


def translate_argument(frame, text: str) -> str:
    """``text``, the first argument of the call ``frame`` is executing, in the edition's language: the
    translation of its template, evaluated in ``frame``; ``text`` itself in English, or when the
    argument is not a literal, or has no translation."""
    current = edition()
    if current.language == "en":
        return text
    english = _call_template(frame)
    translated = table(current.language, current.translations).get(english) if english is not None else None
    if translated is None:
        return text
    rendered = _render(translated, english, frame)
    return text if rendered is None else rendered


def tr(text: str) -> str:
    """``text`` (a string literal or f-string written in the call) in the edition's language; in English,
    ``text`` itself. ``print(tr(f"{n:,} parameters"))`` prints ``1,024 parameters`` in English and, with
    the Korean table's ``파라미터 {n:,}개``, ``파라미터 1,024개`` in the Korean edition."""
    if edition().language == "en":
        return text
    return translate_argument(sys._getframe(1), text)


def tr_label(text: str) -> str:
    """A plain string that reaches the package as data, not written in the call (a slow cell's label,
    ``show_slow_cell("09", "the copy run")``), looked up as it is; ``text`` itself if untranslated."""
    current = edition()
    if current.language == "en":
        return text
    return table(current.language, current.translations).get(_literal(text), text).replace("{{", "{").replace("}}", "}")


def translatable(tree: ast.AST) -> list[tuple[str, int, str | None]]:
    """Every string of ``tree`` that a translated edition shows in its language: (the call's name, its
    line, the template), the template None where the argument is not a literal (so it cannot be
    looked up). The calls are ``TRANSLATED_CALLS`` (their first argument), ``LABEL_ARGUMENTS`` and
    ``LABEL_KEYWORDS``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else \
            node.func.attr if isinstance(node.func, ast.Attribute) else None
        if name in TRANSLATED_CALLS and node.args:
            argument = node.args[0]
        elif name in LABEL_ARGUMENTS and len(node.args) > LABEL_ARGUMENTS[name]:
            argument = node.args[LABEL_ARGUMENTS[name]]
        elif name in LABEL_KEYWORDS and any(k.arg == LABEL_KEYWORDS[name] for k in node.keywords):
            argument = next(k.value for k in node.keywords if k.arg == LABEL_KEYWORDS[name])
        else:
            continue
        if name != "tr" and isinstance(argument, ast.Call) and getattr(argument.func, "id", None) == "tr":
            continue                                  # show_markdown(tr(...)): the tr is found by itself
        found.append((name, node.lineno, template(argument)))
    return sorted(found, key=lambda item: item[1])
