"""The glossary: docs/glossary.tsv is the data, docs/glossary.md is rendered from it, and the Korean
edition is checked against it.

    python docs/glossary.py            # rewrite docs/glossary.md from docs/glossary.tsv
    python docs/glossary.py --check    # exit 1 if docs/glossary.md is stale

docs/glossary.tsv has one term per line, tab-separated, with a header line:

    group     where it is listed (GROUPS below)
    en        the English term as the lessons write it
    ko        the one Korean rendering the Korean edition uses
    also      other renderings Korean readers meet elsewhere, separated by "; ": shown in the glossary,
              and in the Korean edition allowed only in parentheses (잔차 연결(레지듀얼 커넥션))
    wrong     renderings that are wrong (a machine translation's 변압기), separated by "; ": never used
    section   the paper's section that introduces it
    code      where the package implements it (MyST roles: {py:class}`...`)
    note      a warning, in Korean (where Korean merges two English terms, say)
    match     when the Korean edition must use ``ko``: a regular expression (case-insensitive) that finds
              the term in English prose; empty: the English term itself (plural allowed); "-": never

tests/test_glossary.py checks the rendering, and the Korean edition (lessons/ko/src/*.toml, the
package's lessonkit/ko.toml, the Korean docs pages): every English markdown cell or
string that uses a term has a translation that uses the term's ``ko``, no ``also`` outside parentheses,
no ``wrong`` anywhere (``problems``).
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
from dataclasses import dataclass

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE / "glossary.tsv"
PAGE = HERE / "glossary.md"
COLUMNS = ("group", "en", "ko", "also", "wrong", "section", "code", "note", "match")
# group -> (heading): the glossary's sections, in order.
GROUPS = {
    "paper": "The paper and the model's structure (논문과 모델 구조), §1–§3.1",
    "attention": "Attention (어텐션), §3.2",
    "components": "The other parts of the model (그 밖의 구성 요소), §3.3–§3.5",
    "why": "Why self-attention (왜 셀프 어텐션인가), §1, §2, §4",
    "training": "Training (학습), §5",
    "results": "Decoding, evaluation and results (디코딩, 평가, 결과), §6",
    "math": "Gradients and numbers (기울기와 수치 계산)",
    "tools": "The lessons and their tools (강의와 도구)",
}


@dataclass(frozen=True)
class Term:
    group: str
    en: str
    ko: str
    also: tuple[str, ...]
    wrong: tuple[str, ...]
    section: str
    code: str
    note: str
    match: re.Pattern | None       # None: the Korean edition is not required to use ``ko``
    line: int


def _default_match(en: str) -> str:
    word = re.sub(r"\s*\(.*\)$", "", en)
    return r"\b" + re.sub(r"(?:\\ |\\-|-| )", "[- ]", re.escape(word)) + r"(?:s|es)?\b"


def load(path: pathlib.Path = DATA) -> list[Term]:
    """The terms of the glossary, checked: ValueError naming the line of the first problem."""
    lines = path.read_text(encoding="utf-8").split("\n")
    if tuple(lines[0].split("\t")) != COLUMNS:
        raise ValueError(f"{path.name}, line 1: the header must be {' '.join(COLUMNS)} (tab-separated)")
    terms, seen = [], {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != len(COLUMNS):
            raise ValueError(f"{path.name}, line {number}: {len(cells)} tab-separated columns, not {len(COLUMNS)}")
        row = dict(zip(COLUMNS, (c.strip() for c in cells)))
        if row["group"] not in GROUPS:
            raise ValueError(f"{path.name}, line {number}: group {row['group']!r} is none of {', '.join(GROUPS)}")
        if not row["en"] or not row["ko"]:
            raise ValueError(f"{path.name}, line {number}: a term needs en and ko")
        if row["en"] in seen:
            raise ValueError(f"{path.name}, line {number}: {row['en']!r} is also on line {seen[row['en']]}")
        seen[row["en"]] = number
        pattern = None if row["match"] == "-" else row["match"] or _default_match(row["en"])
        try:
            match = re.compile(pattern, re.IGNORECASE) if pattern else None
        except re.error as exc:
            raise ValueError(f"{path.name}, line {number}: match {pattern!r} is no regular expression "
                             f"({exc})") from None
        split = [tuple(x.strip() for x in row[k].split(";") if x.strip()) for k in ("also", "wrong")]
        terms.append(Term(row["group"], row["en"], row["ko"], split[0], split[1], row["section"], row["code"],
                          row["note"], match, number))
    return terms


# -- the page ---------------------------------------------------------------------------------

INTRO = """\
# Glossary: English–Korean (용어집)

The terms of the paper and of the lessons, in English and in the one Korean rendering the Korean edition
of the lessons uses, with the other spellings Korean readers meet in other texts. Each term links to the
code that implements it; the § column is the section of Vaswani et al. (2017) that introduces it.
This page is rendered from `docs/glossary.tsv` by `python docs/glossary.py`, and a test holds the Korean
edition to it: the rendering of the 한국어 column wherever the English uses the term, the other spellings
only in parentheses, and never a rendering listed under [renderings to avoid](#renderings-to-avoid).

논문과 강의의 용어를 영어와, 한국어판 강의가 쓰는 한 가지 한국어 표기로 정리했습니다. 다른 글에서 만나는
표기도 함께 적었습니다. 한국어판은 이 표의 표기를 쓰고, 다른 표기는 괄호 안에서만 쓰며, [피해야 할
번역](#renderings-to-avoid)은 쓰지 않습니다(테스트가 확인합니다). 각 용어는 그 개념을 구현한 코드(API
문서)로 연결됩니다.

## Terms Korean merges (헷갈리기 쉬운 용어)

- **정규화** is *normalization* only (층 정규화, layer normalization: mean 0, variance 1). Korean texts often
  write 정규화 for *regularization* (§5.4, dropout and label smoothing) too; here that is **규제**.
  한국어 문헌은 regularization도 정규화라고 흔히 쓰지만, 이 교재에서 정규화는 normalization뿐이고
  regularization은 규제입니다.
- **역전파** is both the *backward pass* and *backpropagation*: the same computation.
- **순환** (*recurrent*) is not **재귀** (*recursive*): 재귀 신경망 is another model.
- **정밀도** is *precision*, **정확도** *accuracy*; **밸류** is the attention's *value* (쿼리, 키, 밸류), while a
  number's *value* stays **값**.
- **주파수** is the *frequency* of a sinusoid (§3.5); how often a pair occurs in byte-pair encoding is **빈도**.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or "—"


def render(terms: list[Term]) -> str:
    """docs/glossary.md."""
    out = [INTRO]
    for group, heading in GROUPS.items():
        out += [f"## {heading}", "", "| English | 한국어 | 다른 표기 (also met) | 참고 (note) | § | code |",
                "| --- | --- | --- | --- | --- | --- |"]
        out += [f"| {_cell(t.en)} | {_cell(t.ko)} | {_cell(', '.join(t.also))} | {_cell(t.note)} | {_cell(t.section)} "
                f"| {_cell(t.code)} |" for t in terms if t.group == group]
        out.append("")
    out += ["## Renderings to avoid", "",
            "피해야 할 번역: 기계 번역이 흔히 만드는 잘못된 표기와, 대신 쓰는 표기입니다.", "",
            "| wrong (피할 표기) | use (쓸 표기) | English |", "| --- | --- | --- |"]
    out += [f"| {_cell(w)} | {_cell(t.ko)} | {_cell(t.en)} |" for t in terms for w in t.wrong]
    return "\n".join(out) + "\n"


# -- the Korean edition, checked ------------------------------------------------------------

_CODE = re.compile(r"```.*?```|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$|<!--.*?-->|\]\([^)]*\)|https?://\S+", re.DOTALL)
_FIELD = re.compile(r"\{[^{}]*\}")


def prose(text: str) -> str:
    """What a reader reads as words: code, math, link targets and template fields blanked out."""
    return _FIELD.sub(" ", _CODE.sub(lambda m: " " * len(m.group(0)) if "\n" not in m.group(0) else "\n", text))


def _contains(text: str, form: str) -> bool:
    return form.lower() in text.lower() if form.isascii() else form in text


def used_terms(terms: list[Term], english: str) -> list[Term]:
    """The terms ``english`` uses (a match inside a longer term's match, dot product in scaled dot-product
    attention, counts as that term only)."""
    text = prose(english)
    spans = [(m.start(), m.end(), t) for t in terms if t.match for m in t.match.finditer(text)]
    kept = {t.en: t for s, e, t in spans
            if not any(s2 <= s and e <= e2 and e2 - s2 > e - s for s2, e2, _ in spans)}
    return list(kept.values())


def _inside_word(text: str, at: int) -> bool:
    """Whether the form found at ``at`` ends a longer Hangul word (머지 in 나머지): Korean words take particles after
    them, never syllables before them, so a form preceded by a Hangul syllable is part of another word."""
    return at > 0 and "\uac00" <= text[at - 1] <= "\ud7a3"


def _in_parentheses(text: str, at: int) -> bool:
    line_start = text.rfind("\n", 0, at) + 1
    line_end = text.find("\n", at)
    line_end = len(text) if line_end < 0 else line_end
    before, after = text[line_start:at], text[at:line_end]
    depth = before.count("(") + before.count("（") - before.count(")") - before.count("）")
    return depth > 0 and (")" in after or "）" in after)


def problems(terms: list[Term], korean: str, english: str | None = None) -> list[str]:
    """What ``korean`` (a translated cell or string; ``english`` what it translates) does against the
    glossary: a wrong rendering, another spelling outside parentheses, a term the English uses whose
    rendering it lacks."""
    found = [f"{w!r} is a wrong rendering of {t.en!r}: write {t.ko!r}" for t in terms for w in t.wrong
             if _contains(korean, w)]
    text = prose(korean)
    masked = text
    for form in sorted({t.ko for t in terms if not t.ko.isascii()}, key=len, reverse=True):
        masked = masked.replace(form, "\0" * len(form))
    for term in terms:
        for other in sorted(term.also, key=len, reverse=True):
            if other.isascii():
                continue
            at = masked.find(other)
            while at >= 0:
                if not _in_parentheses(masked, at) and not _inside_word(masked, at):
                    found.append(f"{other!r} for {term.en!r}: write {term.ko!r} ({other} only in parentheses)")
                    break
                at = masked.find(other, at + 1)
    if english is not None:
        found += [f"the English uses {t.en!r}: the glossary's rendering {t.ko!r} is missing"
                  for t in used_terms(terms, english) if not _contains(text, t.ko)]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/glossary.md is not what the data renders")
    args = parser.parse_args(argv)
    try:
        page = render(load())
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.check:
        stale = PAGE.read_text(encoding="utf-8") != page
        print("docs/glossary.md is stale: run python docs/glossary.py" if stale else "docs/glossary.md is up to date",
              file=sys.stderr)
        return 1 if stale else 0
    PAGE.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
