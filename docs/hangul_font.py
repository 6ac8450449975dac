"""Make the web font that shows the site's Hangul on a machine with no Korean font.

    python docs/hangul_font.py            # write docs/_static/fonts/hangul-gothic.woff
    python docs/hangul_font.py --check    # exit 1 if the committed font lacks a Hangul character the docs use

The font is a subset of NanumGothic (© NHN Corporation, SIL Open Font License 1.1), the font the
koreanize-matplotlib wheel ships and the lessons' plots already use (``plot.label_fonts()``): the 2,350
syllables of KS X 1001 (the common ones), the compatibility jamo, and every other Hangul syllable the
Korean pages and lessons use, unhinted, as WOFF (zlib; fontTools needs no other package for it), about
0.2 MB. The licence lets a modified font be redistributed under the same licence provided it does not
use the Reserved Font Names, so the subset is renamed "mt Hangul Gothic". docs/_static/fonts/OFL.txt is
the licence; docs/_static/hangul.css declares the font for the Hangul ranges only, so a browser fetches
it only for a page that shows Hangul and uses it for those characters alone.
tests/test_docs.py checks that the site's Hangul is covered and (in headless Chromium, with no Korean
system font) that the font loads.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FONT = ROOT / "docs" / "_static" / "fonts" / "hangul-gothic.woff"
FAMILY = "mt Hangul Gothic"
HANGUL = re.compile(r"[\uac00-\ud7a3\u3131-\u318e]")
# Where the site's Korean comes from: its pages, the glossary's data, the lessons' translations.
TEXTS = ("docs/*.md", "docs/ko/*.md", "docs/glossary.tsv", "lessons/ko/src/*.toml", "lessons/ko/README.md",
         "lessonkit/ko.toml", "README.md")


def source_font() -> pathlib.Path:
    spec = importlib.util.find_spec("koreanize_matplotlib")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = pathlib.Path(folder) / "fonts" / "NanumGothic.ttf"
        if path.is_file():
            return path
    raise SystemExit("error: NanumGothic.ttf not found: pip install koreanize-matplotlib==0.1.1 (the [lessons] extra)")


def used_hangul() -> set[int]:
    return {ord(c) for pattern in TEXTS for path in ROOT.glob(pattern)
            for c in HANGUL.findall(path.read_text(encoding="utf-8"))}


def wanted() -> set[int]:
    common = {ord(bytes([a, b]).decode("euc_kr")) for a in range(0xB0, 0xC9) for b in range(0xA1, 0xFF)}
    return common | set(range(0x3131, 0x318F)) | used_hangul()


def make(path: pathlib.Path = FONT) -> None:
    from fontTools import subset  # noqa: PLC0415  (matplotlib installs fontTools)
    from fontTools.ttLib import TTFont  # noqa: PLC0415

    logging.getLogger("fontTools.subset").setLevel(logging.ERROR)   # not the source's VTT tables it drops
    font = TTFont(source_font(), recalcTimestamp=False)
    options = subset.Options()
    options.hinting = False
    options.name_IDs = ["*"]
    options.name_languages = ["*"]
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=wanted() & set(font["cmap"].getBestCmap()))
    subsetter.subset(font)
    name = font["name"]
    for record in list(name.names):                       # the Reserved Font Name goes: OFL §3
        if record.nameID in (1, 3, 4, 6, 16):
            name.removeNames(nameID=record.nameID)
    for name_id, text in ((1, FAMILY), (3, f"{FAMILY} 3.021 subset"), (4, FAMILY),
                          (10, "A subset of NanumGothic 3.021 (NHN Corporation) for minitransformer's docs"),
                          (6, FAMILY.replace(" ", "")), (13, "SIL Open Font License, Version 1.1"),
                          (14, "https://openfontlicense.org")):
        name.setName(text, name_id, 3, 1, 0x409)
    font.flavor = "woff"                                  # zlib-compressed
    path.parent.mkdir(parents=True, exist_ok=True)
    font.save(path)


def missing(path: pathlib.Path = FONT) -> list[str]:
    """The Hangul characters the docs and lessons use that the committed font lacks."""
    from fontTools.ttLib import TTFont  # noqa: PLC0415

    have = set(TTFont(path)["cmap"].getBestCmap())
    return sorted(chr(c) for c in used_hangul() - have)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the font lacks a Hangul character the docs use")
    args = parser.parse_args(argv)
    if args.check:
        lacking = missing()
        print(f"the font lacks {''.join(lacking)}: run python docs/hangul_font.py" if lacking
              else "the font covers the docs' Hangul", file=sys.stderr)
        return 1 if lacking else 0
    make()
    print(f"wrote {FONT.relative_to(ROOT)} ({FONT.stat().st_size / 1024:.0f} KB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
