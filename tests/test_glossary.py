"""The glossary (docs/glossary.tsv -> docs/glossary.md, docs/glossary.py) and the Korean edition held to it.

Wherever an English cell or string uses a term, its Korean translation uses the glossary's rendering;
the other spellings readers meet appear only in parentheses; a wrong rendering (변압기, 자기 관심, ...)
appears nowhere in the Korean edition (the lessons' translations, the package's Korean strings, the
Korean pages of the docs, the README's Korean section). Planted cases show each check failing.
"""

import importlib.util
import pathlib
import re

import pytest
from repo_scripts import load

from lessonkit import i18n

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = ROOT / "lessons"


glossary = load("docs_glossary", ROOT / "docs" / "glossary.py")
TERMS = glossary.load()


def test_the_page_is_rendered_from_the_data():
    assert (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8") == glossary.render(TERMS), \
        "docs/glossary.md is stale: run python docs/glossary.py"


def test_the_glossary_covers_the_papers_sections_and_the_lessons_terms():
    english = {t.en.split(" (")[0] for t in TERMS}
    for term in ("recurrent neural network", "convolution", "path length", "complexity", "restricted self-attention",
                 "separable convolution", "vanishing gradient", "perplexity", "byte-pair encoding", "parsing, parser",
                 "data parallelism", "residual connection", "sub-layer", "normalization", "regularization",
                 "self-attention", "Transformer", "label smoothing", "beam search", "gradient check"):
        assert term in english, term
    assert len(TERMS) >= 150
    by_en = {t.en: t for t in TERMS}
    assert by_en["normalization"].ko == "정규화" and by_en["regularization"].ko == "규제"
    assert "정규화" in by_en["regularization"].note and "규제" in by_en["normalization"].note
    assert {"레지듀얼 커넥션"} <= set(by_en["residual connection"].also)
    assert {"서브 레이어", "하위 층"} <= set(by_en["sub-layer"].also)
    assert "변압기" in by_en["Transformer"].wrong and "자기 관심" in by_en["self-attention"].wrong
    renderings = [t.ko for t in TERMS]
    assert {ko for ko in renderings if renderings.count(ko) > 1} == {"역전파"}   # backward pass, backpropagation


def test_a_bad_line_of_the_data_is_named(tmp_path):
    good = (ROOT / "docs" / "glossary.tsv").read_text(encoding="utf-8").split("\n")
    for bad, message in ((good[1].replace("\t", " ", 1), "line 2: 8 tab-separated columns"),
                         (good[1].replace("paper\t", "nowhere\t", 1), "line 2: group 'nowhere'"),
                         (good[1].rsplit("\t", 1)[0] + "\t(unclosed", "line 2: match '(unclosed'")):
        (tmp_path / "g.tsv").write_text("\n".join([good[0], bad, *good[2:]]), encoding="utf-8")
        with pytest.raises(ValueError, match=re.escape(message)):
            glossary.load(tmp_path / "g.tsv")


# -- the Korean edition against the glossary ---------------------------------------------------------

editions = load("lessons_editions", LESSONS / "editions.py") if importlib.util.find_spec("jupytext") else None


def _pairs():
    """(where, English, Korean) of every translated cell and string of the Korean edition."""
    pairs = []
    for path in sorted((LESSONS / "ko" / "src").glob("*.toml")):
        source = LESSONS / "src" / f"{path.stem}.py"
        translation = i18n.read_translation(path)
        if editions is not None:
            english = [c.source for c in editions._english().notebook(source).cells if c.cell_type == "markdown"]
            pairs += [(f"{path.name}, [[cell]] {k + 1}", en, cell["ko"])
                      for k, (en, cell) in enumerate(zip(english, translation["cell"]))]
        pairs += [(f"{path.name}, [[text]] {entry['en'][:40]!r}", entry["en"], entry["ko"]) for entry in translation["text"]]
    package = i18n.read_translation(ROOT / "lessonkit" / "ko.toml")
    pairs += [(f"ko.toml, {e['en'][:40]!r}", e["en"], e["ko"]) for e in package["text"]]
    return pairs


def _korean_pages():
    """Korean prose with no English to pair: the docs' Korean pages, the README's Korean section."""
    pages = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs" / "ko").glob("*.md"))}
    pages["lessons/ko/README.md"] = (LESSONS / "ko" / "README.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## 한국어.*?(?=^## |\Z)", readme, re.M | re.S)   # the last section, or not
    assert section, "README.md has no Korean section (## 한국어...)"
    pages["README.md (## 한국어)"] = section.group(0)
    return pages


def test_the_korean_edition_follows_the_glossary():
    pairs = _pairs()
    assert len(pairs) > 40
    found = [f"{where}: {p}" for where, en, ko in pairs for p in glossary.problems(TERMS, ko, en)]
    found += [f"{where}: {p}" for where, text in _korean_pages().items() for p in glossary.problems(TERMS, text)]
    assert not found, "\n".join(found)


def test_a_planted_wrong_rendering_fails():
    if editions is None:       # the learner's install ([lessons] + [test]) has no jupytext: no cells to pair
        pytest.skip("pairing the Korean cells with the English needs jupytext (pip install -r requirements-dev.txt)")
    where, english, korean = next(p for p in _pairs() if "트랜스포머" in p[2])
    planted = korean.replace("트랜스포머", "변압기", 1)
    assert glossary.problems(TERMS, korean, english) == [], where
    assert "'변압기' is a wrong rendering of 'Transformer': write '트랜스포머'" in glossary.problems(TERMS, planted, english)
    assert glossary.problems(TERMS, "셀프 어텐션을 자기 관심이라고 옮기면 안 됩니다.") == \
        ["'자기 관심' is a wrong rendering of 'self-attention': write '셀프 어텐션'"]


def test_another_spelling_only_in_parentheses():
    assert glossary.problems(TERMS, "잔차 연결(residual connection, 레지듀얼 커넥션)은 입력을 더합니다.") == []
    assert glossary.problems(TERMS, "레지듀얼 커넥션은 입력을 더합니다.") == \
        ["'레지듀얼 커넥션' for 'residual connection': write '잔차 연결' (레지듀얼 커넥션 only in parentheses)"]
    assert glossary.problems(TERMS, "정규화와 규제는 다릅니다.") == []        # 정규화 is a rendering, not a misspelling
    assert glossary.problems(TERMS, "나머지 가중치는 내려갑니다.") == []     # 머지 (merge) inside 나머지 is another word
    assert glossary.problems(TERMS, "머지 규칙을 배웁니다.") == \
        ["'머지' for 'merge (a BPE merge)': write '병합' (머지 only in parentheses)"]


def test_a_term_the_english_uses_must_be_rendered():
    english = "Each sub-layer has a residual connection around it."
    assert glossary.problems(TERMS, "각 서브층은 잔차 연결로 감싸여 있습니다.", english) == []
    assert glossary.problems(TERMS, "각 서브층은 지름길로 감싸여 있습니다.", english) == \
        ["the English uses 'residual connection': the glossary's rendering '잔차 연결' is missing"]
    # a shorter term inside a longer one counts as the longer: no 내적 needed for scaled dot-product attention
    assert glossary.problems(TERMS, "스케일드 닷-프로덕트 어텐션", "scaled dot-product attention") == []
    assert glossary.problems(TERMS, "`x`", "the `gradient` in code is not prose") == []


@pytest.mark.parametrize("edition", ["en", "ko"])
def test_every_lesson_links_to_the_glossary(edition):
    # through lessons/docs/, the copy of the pages the lessons link, beside the notebooks (lessonkit/links.py)
    folder, link = (LESSONS, "](docs/glossary.md)") if edition == "en" else (LESSONS / "ko", "](../docs/glossary.md)")
    notebooks = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    assert notebooks
    import json
    missing = [p.name for p in notebooks if link not in "".join(c["source"] if isinstance(c["source"], str)
                                                                 else "".join(c["source"])
                                                                 for c in json.loads(p.read_text())["cells"]
                                                                 if c["cell_type"] == "markdown")]
    assert not missing, f"lessons that do not link the glossary ({link}): {missing}"
