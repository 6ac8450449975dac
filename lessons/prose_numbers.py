"""Every number in a lesson's prose is checked: a constant of the paper, a reference, or tied to the code.

    python lessons/prose_numbers.py            # every lesson: list each unchecked number (exit 1 if any)
    python lessons/prose_numbers.py 08 15      # only these lessons
    python lessons/prose_numbers.py --explain 15   # every number of lesson 15 and the rule that passed it

A measured number typed into prose goes stale the first time the code changes, and the learner reads
prose that contradicts the output under it (lessons/src/README.md, "Numbers in prose"). This module reads
the markdown cells of ``lessons/src/NN_*.py`` and classifies every number in them. A number passes if it is

1. **not a quantity**: inside code (`` `h=1e-5` ``, a fenced block), a link's address or an HTML comment;
   a heading's or a numbered list's own number; an integer inside LaTeX math (an exponent, an index,
   the size of a worked example: ``$d_k = 4$``, ``$O(n^2)$``); a single digit 0-9 in the text with no
   unit after it (a count or an index of the text's own: "two heads", "row 0", "8 stacks");
2. **a reference**: after § or a word that names a part of something, "§3.2.1", "Eq. (1)", "Table 3",
   "Figure 1", "lesson 9", "lessons 0–3", "exercise 9.2", "section 23", "step 7", "row 2", "Python 3.11";
   a year in a citation, "(Vaswani et al., 2017)", "Press & Wolf, 2016"; a number in a table column whose
   header is such a word ("| lesson |");
3. **a constant of the paper**: in ``PAPER`` below, with its section, on a line (or just after one) that
   names it: each constant lists the words that may stand beside it, so ``0.1`` passes beside "P_drop"
   or "label smoothing", not beside "a learning rate factor of", and ``64`` beside "d_k", not beside
   "batches of";
4. **asserted or tied to the code of its own section** (from its ``##`` heading to the next): the same
   value is a number in a ``claim(...)`` / ``claim_true(...)`` (its sentence or its arguments) or in an
   ``assert`` of a code cell there, or a literal of a code cell there (``steps=400`` ties "400 steps":
   change one and the check fails until the other follows). A number with a unit of measurement (%, s,
   MiB, x, times, points) is a measurement: only a claim or an assert passes it, not a bare literal.
   A power of ten ``$10^{-10}$`` also passes when the claim states its exponent (claims on a log scale).

Anything else is an **unchecked number**, reported with its lesson, the source line and the number.
Fix it by rendering the sentence from the run (``show_markdown(f"...")``), by following it with a
``claim``, by citing the paper's constant (add it to ``PAPER`` with its section if it is missing), or by
writing it in words when it is not a quantity at all. The check reads markdown cells only: a number
rendered by ``show_markdown(f"... {x:.2f} ...")`` is computed, but one typed into the literal text of that
f-string is as typed as one in markdown, and nothing checks it (keep those to the paper's constants).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import math
import pathlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy

HERE = pathlib.Path(__file__).resolve().parent


# -- the paper's constants -----------------------------------------------------------------------------
# (values as the paper writes them, section, what, names that may stand beside them on the line)

@dataclass(frozen=True)
class Constant:
    values: tuple[str, ...]
    section: str
    what: str
    names: tuple[str, ...] = ()


D_MODEL = ("d_model", r"d_\text{model}", "d_{model}")
D_FF = ("d_ff", r"d_\text{ff}", "d_{ff}")
T2, T3, T4 = ("Table 2",), ("Table 3", "row"), ("Table 4",)

PAPER: tuple[Constant, ...] = (
    # §3: the base model
    Constant(("6",), "§3.1, Table 3", "N, the layers of each stack", ("N =", "N=", "layers", "stack")),
    Constant(("512",), "§3.1, Table 3", "d_model of the base model", D_MODEL + ("base", "2048 / 512")),
    Constant(("8",), "§3.2.2, Table 3", "h, the heads of the base model", ("h =", "h=", "heads")),
    Constant(("64",), "§3.2.2, Table 3", "d_k = d_v = d_model / h", ("d_k", "d_v", "keys of 64")),
    Constant(("2048",), "§3.3, Table 3", "d_ff, the inner layer of the feed-forward network", D_FF + ("inner",)),
    Constant(("10000", "10 000", "10,000"), "§3.5", "the base of the sinusoids' wavelengths",
             ("10000^", "10000 \\cdot", "10000·", "wavelength", "omega", r"\omega")),
    # §5: training
    Constant(("4.5",), "§5.1", "million sentence pairs of WMT 2014 English-German", ("million",)),
    Constant(("37000", "37 000", "37,000"), "§5.1", "tokens of the shared English-German BPE vocabulary",
             ("vocabulary",)),
    Constant(("36",), "§5.1", "million sentences of WMT 2014 English-French", ("million", "36M")),
    Constant(("32000", "32 000", "32,000"), "§5.1", "word-pieces of the English-French vocabulary",
             ("word-piece", "wordpiece")),
    Constant(("25000", "25 000", "25,000"), "§5.1", "source tokens and target tokens per batch",
             ("source", "target tokens", "-token batch")),
    Constant(("8",), "§5.2", "P100 GPUs", ("P100", "GPU")),
    Constant(("0.4",), "§5.2", "seconds per step of the base model", ("per step", "steps of 0.4", "of about 0.4")),
    Constant(("100000", "100 000", "100,000", "100K"), "§5.2, Table 3", "training steps of the base model",
             ("steps",)),
    Constant(("12",), "§5.2", "hours of training of the base model", ("hours",)),
    Constant(("1.0",), "§5.2", "seconds per step of the big model", ("per step", "steps of 1.0")),
    Constant(("300000", "300 000", "300,000", "300K"), "§5.2, Table 3", "training steps of the big model",
             ("steps",)),
    Constant(("3.5",), "§5.2, §6.1", "days of training of the big model", ("days",)),
    Constant(("0.9",), "§5.3", "Adam's β1", ("beta_1", r"\beta_1", "β1", "β₁")),
    Constant(("0.98",), "§5.3", "Adam's β2", ("beta_2", r"\beta_2", "β2", "β₂")),
    Constant(("1e-9", "10^{-9}", "10⁻⁹"), "§5.3", "Adam's ε", ("epsilon", "ε", "varepsilon")),
    Constant(("4000", "4 000", "4,000"), "§5.3", "warmup_steps", ("warm",)),
    Constant(("0.5", "1.5"), "§5.3, Eq. (3)", "the exponents of the learning-rate schedule",
             ("^{-0.5}", "^{-1.5}", "^-0.5", "^-1.5", "-0.5", "-1.5", "step^", "lrate")),
    Constant(("0.1",), "§5.4, Table 3", "P_drop and ε_ls of the base model",
             ("P_drop", r"P_\text{drop}", "P_{drop}", "dropout", "_{ls}", "eps_ls", "ε_ls", "smoothing")),
    Constant(("0.2",), "Table 3 (D)", "ε_ls of row D's stronger label smoothing",
             ("_{ls}", "eps_ls", "ε_ls", "smoothing")),
    # §6: results
    Constant(("28.4",), "§6.1, Table 2", "BLEU of the big model on English-German", ("BLEU",)),
    Constant(("41.8",), "Table 2, abstract", "BLEU of the big model on English-French", ("BLEU",)),
    Constant(("41.0",), "§6.1", "BLEU of the big model on English-French, as §6.1's text gives it", ("BLEU",)),
    Constant(("27.3", "38.1"), "Table 2", "BLEU of the base model, English-German and English-French",
             ("BLEU", "base")),
    Constant(("2.0",), "§6.1", "BLEU the big model gains over the best earlier models", ("BLEU",)),
    Constant(("0.9",), "§6.2", "BLEU that single-head attention is below the best setting",
             ("one head", "single-head", "single head")),
    Constant(("0.3",), "§6.1, Table 3", "P_drop of the big model", ("P_drop", r"P_\text{drop}", "dropout")),
    Constant(("5",), "§6.1", "checkpoints averaged for the base models", ("checkpoint",)),
    Constant(("10",), "§6.1", "minutes between the checkpoints", ("minute",)),
    Constant(("20",), "§6.1", "checkpoints averaged for the big models", ("checkpoint",)),
    Constant(("4",), "§6.1", "the beam size", ("beam",)),
    Constant(("0.6",), "§6.1", "α, the length penalty", ("alpha", "α", "penalty")),
    Constant(("50",), "§6.1", "the longest output: input length + 50", ("+ 50", "+50")),
    Constant(("3.3e18", "2.3e19"), "Table 2", "training cost (FLOPs) of the base and the big model",
             ("FLOP",) + T2),
    Constant(("65",), "Table 3", "million parameters of the base model", ("65M", "65 M", "65\\times10^6",
                                                                        "million")),
    Constant(("213",), "Table 3", "million parameters of the big model", ("213M", "213 M", "213\\times10^6",
                                                                        "million")),
    Constant(("4.92", "25.8"), "Table 3", "perplexity and BLEU of the base model",
             ("PPL", "perplexity", "BLEU", "base") + T3),
    Constant(("4.33", "26.4"), "Table 3", "perplexity and BLEU of the big model", ("PPL", "perplexity", "BLEU",
                                                                                 "big") + T3),
    Constant(("5.29", "24.9", "5.00", "25.5", "4.91", "5.01", "25.4"), "Table 3 (A)",
             "the rows with 1, 4, 16, 32 heads", ("PPL", "perplexity", "BLEU", "head") + T3),
    Constant(("5.16", "25.1", "58", "60"), "Table 3 (B)", "the rows with smaller d_k",
             ("PPL", "BLEU", "d_k", "58M", "60M") + T3),
    Constant(("6.11", "23.7", "5.19", "25.3", "4.88", "5.75", "24.5", "4.66", "26.0", "5.12", "4.75", "26.2"),
             "Table 3 (C)", "the rows of other sizes (perplexity, BLEU)", ("PPL", "perplexity", "BLEU") + T3),
    Constant(("36", "50", "80", "28", "168", "53", "90"), "Table 3 (C)", "the rows of other sizes (parameters)",
             ("M parameters", "M)", "million") + T3),
    Constant(("5.77", "24.6", "4.95", "4.67", "5.47", "25.7"), "Table 3 (D), (E)",
             "the rows with other dropout and label smoothing, and learned positions",
             ("PPL", "perplexity", "BLEU") + T3),
    Constant(("1024",), "Table 3, §6.3", "d_model of the big model and of the parser", D_MODEL),
    Constant(("4096",), "Table 3", "d_ff of the big model", D_FF),
    Constant(("16",), "Table 3", "h, the heads of the big model", ("h =", "h=", "heads")),
    Constant(("4",), "§6.3", "layers of the parsing model", ("4-layer", "4 layers", "(4 layers)")),
    Constant(("40000", "40 000", "40,000", "40K"), "§6.3", "WSJ training sentences", ("WSJ", "Wall Street")),
    Constant(("17",), "§6.3", "million sentences of the semi-supervised setting", ("million", "17M")),
    Constant(("16000", "16K", "32K"), "§6.3", "vocabulary sizes of the parsing runs", ("vocabulary",)),
    Constant(("300",), "§6.3", "the parser's longest output: input length + 300", ("+ 300", "+300")),
    Constant(("21",), "§6.3", "the parser's beam size", ("beam",)),
    Constant(("0.3",), "§6.3", "α of the parser's beam", ("alpha", "α")),
    Constant(("91.3", "92.7", "88.3", "92.1", "90.4", "91.7", "93.0", "93.3"), "Table 4",
             "WSJ section 23 F1 of the Transformer and of the other parsers", ("F1", "WSJ") + T4),
    Constant(("23",), "§6.3, Table 4", "the WSJ section scored", ("section", "WSJ")),
)


# -- constants of the code, read from the code ------------------------------------------------------------------
# A constant the package defines and several lessons name (the checkers' tolerance, the slow-cell threshold):
# each is read from the code when the check runs, so the prose cannot keep a value the code has left.

@dataclass(frozen=True)
class CodeConstant:
    values: tuple[str, ...]
    what: str
    names: tuple[str, ...]
    read: Callable[[], float]                 # the value in the code now


def _default(module: str, function: str, parameter: str) -> float:
    return inspect.signature(getattr(importlib.import_module(module), function)).parameters[parameter].default


def _attribute(module: str, name: str) -> float:
    return getattr(importlib.import_module(module), name)


def _eps(dtype: str) -> float:
    return float(numpy.finfo(dtype).eps)


CODE: tuple[CodeConstant, ...] = (
    CodeConstant(("1e-6", "10^{-6}"), "the tolerance of the gradient checks and of every exercise checker",
                 ("tolerance",), lambda: _attribute("minitransformer.gradcheck", "DEFAULT_TOL")),
    CodeConstant(("1e-5", "10^{-5}"), "the step h of the numerical gradient (gradcheck.numerical_gradient)",
                 ("h =", "h=", "finite-difference step"),
                 lambda: _default("minitransformer.gradcheck", "numerical_gradient", "h")),
    CodeConstant(("2.2e-16",), "float64's machine epsilon", ("float64",), lambda: _eps("float64")),
    CodeConstant(("1.2e-7",), "float32's machine epsilon", ("float32",), lambda: _eps("float32")),
    CodeConstant(("20",), "seconds after which lessons/build.py flags a cell as slow", ("flagged",),
                 lambda: _attribute("lessonkit.runtimes", "SLOW_CELL_SECONDS")),
    CodeConstant(("30",), "seconds a rank waits for the others (MINITRANSFORMER_MPI_TIMEOUT's default)",
                 ("MPI_TIMEOUT",), lambda: _attribute("minitransformer.distributed", "DEFAULT_TIMEOUT")),
)


def _agrees(typed: str, actual: float) -> bool:
    """The typed value is the code's, to the digits typed (2.2e-16 for 2.220446e-16)."""
    mantissa = re.match(r"\d+(?:\.(\d+))?", typed.replace(" ", ""))
    digits = len(mantissa.group(1) or "") if mantissa else 0
    value = _typed_value(typed)
    if value == 0:
        return actual == 0
    scale = 10.0 ** math.floor(math.log10(abs(value)))
    return abs(actual - value) <= 0.5 * scale * 10.0 ** -digits * (1 + 1e-9)


# Words after which a number names a part of something (a reference, not a quantity).
REFERENCE_WORDS = (r"§", r"Eqs?\.", r"[Ee]quations?", r"Tables?", r"Figures?", r"Figs?\.", r"[Ll]essons?",
                   r"[Ee]xercises?", r"[Ss]ections?", r"[Ss]teps?", r"[Cc]hapters?", r"[Ff]ootnotes?",
                   r"[Pp]arts?", r"[Rr]ows?", r"[Cc]ells?", r"[Cc]olumns?", r"[Pp]ages?", r"Python", r"[Vv]ersion",
                   r"[Ll]ines?", r"[Ll]evels?", r"[Bb]ugs?")
# Names after which a number is a version, not a quantity ("Python 3.11", "subword-nmt 0.3.8").
VERSIONED = ("Python", "torch", "PyTorch", "NumPy", "numpy", "CuPy", "OpenBLAS", "sacrebleu", "subword-nmt",
             "jupytext", "nbformat", "mpich", "MPICH", "CUDA")
# Units that make a number a measurement (only a claim or an assert passes it).
UNITS = ("%", "percent", "s", "ms", "µs", "us", "ns", "min", "seconds", "minutes", "hours", "days", "MiB",
         "GiB", "KiB", "kB", "MB", "GB", "x", "×", "times", "points", "BLEU", "F1", "TFLOPS", "GFLOPS")

_REF_NUMBER = r"\(?\d+(?:\.\d+)*[a-z]?\)?(?!(?:,|\u202f| )\d{3}(?!\d))"      # not "steps 100 000"
_REFERENCE = re.compile(r"(?:(?:§|Eqs?\.|[Ee]quations?)\s*|(?:" + "|".join(REFERENCE_WORDS[3:]) + r")\s+)"
                        + _REF_NUMBER + r"(?:\s*(?:,|–|-|—|and|or|to|&)\s*(?:§\s*)?" + _REF_NUMBER + r")*")
_VERSION = re.compile(r"(?:" + "|".join(re.escape(v) for v in VERSIONED) + r")\s+v?\d+(?:\.\d+)+")
_NAME_NUMBER = re.compile(r"(?<=[A-Za-z]-)\d+|\b\d+(?=[a-wyz]\b)|\b\d+(?:\.\d+){2,}\b")  # SHA-256, "13a", 0.3.8
_EXERCISE_LABEL = re.compile(r"(?m)^\*\*\d+\.\d+\.?\*\*")                                  # **12.1.**
_CITATION = re.compile(r"(?:et al\.?|\bal\.|[A-Z][\w&. ]+?),?\s*\(?((?:19|20)\d\d)[a-z]?\b|\(((?:19|20)\d\d)[a-z]?[,;)]")
_NUMBER = re.compile(
    r"(?P<base>\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|×|·)\s*10\^\{?(?P<exp1>[-−]?\d+)\}?"   # 2.2\times 10^{-16}
    r"|(?<![\w.])10\^\{?(?P<exp2>[-−]?\d+)\}?"                                          # 10^{-9}
    r"|(?<![\w.])10(?P<sup>[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)"                                              # 10⁻⁹
    r"|(?<![\w.])(?P<plain>\d{1,3}(?:(?:,|\u202f|\u2009| )\d{3})+(?!\d)(?:\.\d+)?"       # 25 000, 1,500
    r"|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"                                                 # 0.547, 1e-5
)
_SUPERSCRIPTS = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")


@dataclass
class Number:
    lesson: str
    line: int                  # in lessons/src/NN_name.py, from 1
    text: str                  # as typed
    value: float
    exponent: int | None       # for a power of ten
    math: bool
    unit: str | None
    source_line: str
    verdict: str = ""          # why it passes ("" = unchecked)
    source: str = ""           # the lesson source's file name, "09_training.py"


# -- reading a lesson source ------------------------------------------------------------------------------

@dataclass
class Cell:
    kind: str                  # "markdown" or "code"
    first_line: int            # line number (from 1) of the cell's first content line
    lines: list[str]
    section: int


def cells(path: pathlib.Path) -> list[Cell]:
    """The cells of a jupytext percent-format source, with the source line of each content line.
    Markdown lines lose their "# " prefix (tests/test_prose_numbers.py checks this reading against jupytext)."""
    out: list[Cell] = []
    lines = path.read_text(encoding="utf-8").split("\n")
    k = 0
    if lines and lines[0] == "# ---":                     # the jupytext header
        k = lines.index("# ---", 1) + 1
    section = 0
    current: Cell | None = None
    for n in range(k, len(lines)):
        line = lines[n]
        if line.startswith("# %%"):
            kind = "markdown" if line.startswith("# %% [markdown]") else "code"
            current = Cell(kind, n + 2, [], section)
            out.append(current)
            continue
        if current is None:
            continue
        if current.kind == "markdown":
            text = line[2:] if line.startswith("# ") else ("" if line == "#" else line)
            if text.startswith("## ") and not current.lines:
                section += 1
                current.section = section
            elif text.startswith("## "):
                section += 1                  # a heading inside a cell: the rest of it is the new section
            current.lines.append(text)
        else:
            current.lines.append(line)
    for cell in out:                                      # drop the blank lines jupytext puts between cells
        while cell.lines and cell.lines[-1] == "":
            cell.lines.pop()
    return out


def _sections_of_markdown_lines(cell: Cell) -> list[int]:
    """The section of each line of a markdown cell (a '## ' heading inside the cell starts a new one)."""
    section, out = cell.section, []
    for i, text in enumerate(cell.lines):
        if text.startswith("## ") and i > 0:
            section += 1
        out.append(section)
    return out


# -- what the code of a section asserts and contains ---------------------------------------------------------

_CLAIMS = ("claim", "claim_true")


def _key(value: float) -> float:
    """Numbers are compared to nine significant digits, sign dropped (a claim on |x| or on -x checks x)."""
    return float(f"{abs(value):.9g}")


def _numbers_in_text(text: str) -> set[float]:
    found = set()
    for m in _NUMBER.finditer(text):
        value, exponent = _value(m)
        found.add(_key(value))
        if exponent is not None:
            found.add(_key(exponent))
    return found


def _literals(node: ast.AST) -> set[float]:
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant):
            if isinstance(sub.value, bool):
                continue
            if isinstance(sub.value, (int, float)):
                found.add(_key(sub.value))
            elif isinstance(sub.value, str):
                found |= _numbers_in_text(sub.value)
    return found


def _code_numbers(source: str) -> tuple[set[float], set[float]]:
    """(asserted, literal): the numbers of claims and asserts, and every numeric literal of the code."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        from IPython.core.inputtransformer2 import TransformerManager
        tree = ast.parse(TransformerManager().transform_cell(source))
    asserted, literal = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if name in _CLAIMS:
                args = node.args[:2] if name == "claim_true" else node.args
                for arg in list(args) + [kw.value for kw in node.keywords if kw.arg != "detail"]:
                    asserted |= _literals(arg)
        elif isinstance(node, ast.Assert):
            asserted |= _literals(node.test)
        elif isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            literal.add(_key(node.value))
    return asserted, literal | asserted


# -- classifying the numbers of the prose --------------------------------------------------------------------

def _value(m: re.Match) -> tuple[float, int | None]:
    if m.group("exp1") is not None:
        exponent = int(m.group("exp1").replace("−", "-"))
        return float(m.group("base")) * 10.0 ** exponent, None
    if m.group("exp2") is not None:
        exponent = int(m.group("exp2").replace("−", "-"))
        return 10.0 ** exponent, exponent
    if m.group("sup") is not None:
        exponent = int(m.group("sup").translate(_SUPERSCRIPTS))
        return 10.0 ** exponent, exponent
    text = re.sub(r"[,\u202f\u2009 ]", "", m.group("plain"))
    return float(text), None


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def _mask(text: str, pattern: re.Pattern | str, flags: int = 0) -> str:
    for m in reversed(list(re.finditer(pattern, text, flags))):
        text = _blank(text, m.start(), m.end())
    return text


def _mask_reference_columns(lines: list[str]) -> list[str]:
    """In a Markdown table whose header names a reference (| lesson | ...), blank that column's numbers."""
    out = list(lines)
    header: list[str] | None = None
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            header = None
            continue
        cells_ = line.strip().strip("|").split("|")
        if header is None:
            header = [c.strip().lower() for c in cells_]
            continue
        columns = [k for k, name in enumerate(header) if re.fullmatch(r"(lesson|§|section|exercise|step|row|"
                                                                        r"paper|eq\.?|table)s?", name)]
        if not columns:
            continue
        pieces = line.split("|")
        for k in columns:
            if k + 1 < len(pieces):
                pieces[k + 1] = re.sub(r"\d", " ", pieces[k + 1])
        out[i] = "|".join(pieces)
    return out


def _math_spans(text: str) -> list[tuple[int, int]]:
    spans = [(m.start(), m.end()) for m in re.finditer(r"\$\$.*?\$\$", text, re.S)]
    masked = text
    for a, b in spans:
        masked = _blank(masked, a, b)
    spans += [(m.start(), m.end()) for m in re.finditer(r"(?<!\\)\$[^$\n]+?(?<!\\)\$", masked)]
    return spans


def _unit_after(text: str, end: int) -> str | None:
    rest = text[end:end + 12]
    for unit in sorted(UNITS, key=len, reverse=True):
        if re.match(r"\s?" + re.escape(unit) + r"(?![A-Za-z])", rest):
            return unit
    return None


OURS = "\0ours"


def _names_nearby(constant: Constant | CodeConstant, context: str) -> bool:
    if context == OURS:
        return False
    return any(name in context for name in constant.names)


def _typed_value(typed: str) -> float:
    """A constant as the lists write it: "25 000", "100K", "3.3e18", "10^{-9}"."""
    typed = typed.replace("K", "000")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)e(-?\d+)", typed)
    if m:
        return float(m.group(1)) * 10.0 ** int(m.group(2))
    return _value(_NUMBER.search(typed))[0]


def _paper_constant(value: float, context: str) -> Constant | None:
    for constant in PAPER:
        for typed in constant.values:
            if math.isclose(_typed_value(typed), value, rel_tol=1e-9) and _names_nearby(constant, context):
                return constant
    return None


def _code_constant(value: float, context: str) -> CodeConstant | None:
    for constant in CODE:
        for typed in constant.values:
            if math.isclose(_typed_value(typed), value, rel_tol=1e-9) and _names_nearby(constant, context):
                return constant
    return None


def lesson_numbers(path: pathlib.Path) -> list[Number]:
    """Every number of the lesson's markdown, each with the rule that passes it (``verdict``), or none."""
    lesson = path.name[:2]
    all_cells = cells(path)
    asserted: dict[int, set[float]] = {}
    literal: dict[int, set[float]] = {}
    for cell in all_cells:
        if cell.kind == "code":
            a, lit = _code_numbers("\n".join(cell.lines))
            asserted.setdefault(cell.section, set()).update(a)
            literal.setdefault(cell.section, set()).update(lit)
    found: list[Number] = []
    for cell in all_cells:
        if cell.kind != "markdown":
            continue
        sections = _sections_of_markdown_lines(cell)
        raw = "\n".join(cell.lines)
        text = _mask(raw, r"```.*?```", re.S)
        text = _mask(text, r"`[^`\n]*`")
        text = _mask(text, r"<!--.*?-->", re.S)
        text = _mask(text, r"\]\([^)\n]*\)")
        text = _mask(text, r"https?://\S+")
        text = _mask(text, r"(?m)^#{1,6}\s+\d+[a-z]?(?:\.\d+)*\.?(?=\s)")     # heading numbers
        text = _mask(text, r"(?m)^\s*\d+[.)](?=\s)")                          # numbered lists
        text = "\n".join(_mask_reference_columns(text.split("\n")))
        text = _mask(text, _REFERENCE)
        text = _mask(text, _VERSION)
        text = _mask(text, _NAME_NUMBER)
        text = _mask(text, _EXERCISE_LABEL)
        for m in reversed(list(_CITATION.finditer(text))):
            group = 1 if m.group(1) else 2
            text = _blank(text, m.start(group), m.end(group))
        math_spans = _math_spans(text)
        starts = [0]
        for line in cell.lines:
            starts.append(starts[-1] + len(line) + 1)
        for m in _NUMBER.finditer(text):
            row = next(i for i in range(len(cell.lines)) if starts[i] <= m.start() < starts[i + 1])
            value, exponent = _value(m)
            in_math = any(a <= m.start() < b for a, b in math_spans)
            unit = _unit_after(text, m.end())
            number = Number(lesson, cell.first_line + row, m.group(0), value, exponent, in_math, unit,
                            cell.lines[row], source=path.name)
            context = "\n".join(cell.lines[max(row - 1, 0):row + 1])
            if cell.lines[row].lstrip().startswith("|"):
                context = _table_context(cell.lines, row, m.start() - starts[row])
            number.verdict = _verdict(number, m.group(0), context, asserted.get(sections[row], set()),
                                      literal.get(sections[row], set()))
            found.append(number)
    return found


def _table_context(lines: list[str], row: int, offset: int) -> str:
    """For a number in a Markdown table: its column's header, its row's first cell and its own cell."""
    top = row
    while top > 0 and lines[top - 1].lstrip().startswith("|"):
        top -= 1
    column = lines[row][:offset].count("|") - 1
    header = lines[top].strip().strip("|").split("|")
    row_cells = lines[row].strip().strip("|").split("|")
    own = row_cells[column] if 0 <= column < len(row_cells) else ""
    if re.search(r"\b(here|ours|toy)\b", row_cells[0]):
        return OURS                           # a row of this project's own settings: no paper constant in it
    return (header[column] if 0 <= column < len(header) else "") + " " + row_cells[0] + " " + own


def _verdict(number: Number, typed: str, context: str, asserted: set[float], literal: set[float]) -> str:
    plain_integer = number.exponent is None and re.fullmatch(r"[\d,\u202f\u2009 ]+", typed) is not None
    if number.math and plain_integer:
        return "an integer in math (notation)"
    if plain_integer and number.value < 10 and number.unit is None and len(typed) == 1:
        return "a single digit with no unit (a count or an index)"
    keys = {_key(number.value)}
    if number.unit in ("%", "percent"):
        keys.add(_key(number.value / 100))
    if number.exponent is not None:
        keys.add(_key(number.exponent))
    if keys & asserted:
        return "asserted in its section (claim / assert)"
    code = _code_constant(number.value, context)
    if code is not None and any(_agrees(t, code.read()) for t in code.values
                                if math.isclose(_typed_value(t), number.value, rel_tol=1e-9)):
        return f"the code's {code.what} (read from the code)"
    constant = _paper_constant(number.value, context)
    if constant is not None:
        return f"the paper's {constant.what} ({constant.section})"
    if number.unit is None and keys & literal:
        return "a literal of its section's code"
    return ""


def unchecked(path: pathlib.Path) -> list[Number]:
    return [n for n in lesson_numbers(path) if not n.verdict]


def describe(n: Number) -> str:
    """One line: where (lessons/src/NN_name.py:line), the number as typed, and the line it stands on."""
    return f"lessons/src/{n.source}:{n.line}: unchecked number {n.text!r} in: {n.source_line.strip()[:100]}"


def sources(numbers: list[str] | None = None) -> list[pathlib.Path]:
    found = sorted(p for p in (HERE / "src").glob("[0-9][0-9]_*.py"))
    return [p for p in found if not numbers or p.name[:2] in numbers]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("lessons", nargs="*", help="lesson numbers (default: all)")
    p.add_argument("--explain", action="store_true", help="list every number and the rule that passed it")
    args = p.parse_args(argv)
    bad = 0
    for path in sources([f"{int(n):02d}" for n in args.lessons]):
        for n in lesson_numbers(path):
            if args.explain:
                print(f"lessons/src/{path.name}:{n.line}: {n.text!r}: {n.verdict or 'UNCHECKED'}")
            elif not n.verdict:
                print(describe(n))
            bad += not n.verdict
    print(f"{bad} unchecked number(s)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
