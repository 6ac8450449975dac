"""The offline translation tasks: content, determinism, splits and TSV export."""

import importlib.metadata
import os
import warnings

import pytest

from minitransformer.data import translation as tr
from minitransformer.data.translation import TASKS, export_tsv, generate_pairs, load_splits

ALL = sorted(TASKS)
# Generation is cached per process, so these stay fast after the first use.
SMALL = ["emoji-en-fr", "emoji-en-ko"]


def test_task_table():
    assert set(ALL) == {"numbers-en-fr", "numbers-en-de", "dates-en-de", "dates-en-ko",
                        "emoji-en-fr", "emoji-en-de", "emoji-en-ko"}
    for name, task in TASKS.items():
        assert task.name == name
        assert task.src_level in ("word", "space", "char") and task.tgt_level in ("word", "space", "char")
        assert task.bleu_tokenize == ("char" if task.tgt_level == "char" else "13a")
        pkg = task.source.split()[0]
        assert task.source == f"{pkg} {tr.PINNED_VERSIONS[pkg]}"
        assert task.license and task.description


@pytest.mark.parametrize("name, index, pair", [
    ("numbers-en-fr", 21, ("twenty-one", "vingt et un")),
    ("numbers-en-fr", 80, ("eighty", "quatre-vingts")),
    ("numbers-en-fr", 1234, ("one thousand, two hundred and thirty-four",
                             "mille deux cent trente-quatre")),
    ("numbers-en-de", 21, ("twenty-one", "einundzwanzig")),
    ("numbers-en-de", 9999, ("nine thousand, nine hundred and ninety-nine",
                             "neuntausendneunhundertneunundneunzig")),
    ("dates-en-de", 0, ("Sunday, January 1, 1950", "Sonntag, 1. Januar 1950")),
    ("dates-en-ko", -1, ("Friday, December 31, 2049", "2049년 12월 31일 금요일")),
])
def test_known_pairs(name, index, pair):
    assert generate_pairs(name)[index] == pair


def test_known_emoji_pairs():
    assert dict(generate_pairs("emoji-en-fr"))["grinning face"] == "visage rieur"
    assert dict(generate_pairs("emoji-en-de"))["grinning face"] == "grinsendes gesicht"
    assert dict(generate_pairs("emoji-en-ko"))["grinning face"] == "활짝 웃는 얼굴"


def test_sizes():
    assert len(generate_pairs("numbers-en-fr")) == 10_000
    assert len(generate_pairs("dates-en-ko")) == 36_525  # 100 years, 24 of them leap
    assert 1_500 <= len(generate_pairs("emoji-en-de")) <= 2_000
    assert {k: len(v) for k, v in load_splits("numbers-en-de").items()} == {
        "train": 8_500, "valid": 500, "test": 1_000}
    assert {k: len(v) for k, v in load_splits("dates-en-de").items()} == {
        "train": 35_025, "valid": 500, "test": 1_000}


@pytest.mark.parametrize("name", ALL)
def test_clean_text_and_unique_sources(name):
    pairs = generate_pairs(name)
    sources = [s for s, _ in pairs]
    assert len(set(sources)) == len(sources)
    for src, tgt in pairs:
        for text in (src, tgt):
            assert text and text == " ".join(text.split())  # no tab/newline/odd spaces
            assert "\t" not in text and "\n" not in text
            # vocab.tokenize(..., "char") uses U+2581 as the visible space token
            # and refuses text that already contains it.
            assert "\u2581" not in text


def test_no_skin_tones_or_country_flags():
    import emoji

    def name(e):
        return emoji.EMOJI_DATA[e]["en"].strip(":").replace("_", " ")

    toned = {name(e) for e in emoji.EMOJI_DATA
             if any(0x1F3FB <= ord(c) <= 0x1F3FF for c in e)}
    flags = {name(e) for e in emoji.EMOJI_DATA  # regional-indicator pairs and tag sequences
             if any(0x1F1E6 <= ord(c) <= 0x1F1FF or 0xE0020 <= ord(c) <= 0xE007F for c in e)}
    assert "Finland" in flags and len(toned) > 1000  # the filters have something to remove
    for task in ("emoji-en-fr", "emoji-en-de", "emoji-en-ko"):
        sources = {s for s, _ in generate_pairs(task)}
        assert not any("skin tone" in s for s in sources)
        assert not sources & toned
        assert not sources & flags
        assert "chequered flag" in sources  # not a country flag: kept on purpose
        assert not any(s.startswith(":") or "_" in s for s in sources)


@pytest.mark.parametrize("name", ALL)
def test_splits_disjoint_and_covering(name):
    splits = load_splits(name, seed=0)
    assert list(splits) == ["train", "valid", "test"]
    seen = [p for split in splits.values() for p in split]
    assert len(seen) == len(set(seen)) == len(generate_pairs(name))
    assert set(seen) == set(generate_pairs(name))
    assert all(len(v) > 0 for v in splits.values())


@pytest.mark.parametrize("name", ["numbers-en-fr", "dates-en-ko", "emoji-en-de"])
def test_splits_deterministic(name):
    assert load_splits(name, seed=0) == load_splits(name, seed=0)
    assert load_splits(name, seed=1) == load_splits(name, seed=1)
    assert load_splits(name, seed=0)["test"] != load_splits(name, seed=1)["test"]


def test_split_fractions():
    splits = load_splits("emoji-en-fr", seed=3, valid_fraction=0.2, test_fraction=0.05)
    n = len(generate_pairs("emoji-en-fr"))
    assert len(splits["valid"]) == round(0.2 * n)
    assert len(splits["test"]) == round(0.05 * n)
    with pytest.raises(ValueError):
        load_splits("emoji-en-fr", valid_fraction=0.6, test_fraction=0.5)
    with pytest.raises(ValueError):
        load_splits("emoji-en-fr", test_fraction=1.5)


def test_generate_pairs_returns_a_copy():
    pairs = generate_pairs("emoji-en-fr")
    pairs.clear()
    assert len(generate_pairs("emoji-en-fr")) > 0


@pytest.mark.parametrize("name", SMALL + ["numbers-en-de"])
def test_export_tsv_round_trip(tmp_path, name):
    out = tmp_path / "data"
    paths = export_tsv(name, str(out), seed=7)
    splits = load_splits(name, seed=7)
    assert set(paths) == {"train", "valid", "test"}
    for split, path in paths.items():
        assert os.path.basename(path) == f"{name}.{split}.tsv"
        with open(path, encoding="utf-8", newline="") as f:
            content = f.read()
        lines = content.split("\n")
        assert lines[-1] == ""  # every line, the last one included, ends in \n
        lines = lines[:-1]
        assert len(lines) == len(splits[split])
        assert all(line.count("\t") == 1 for line in lines)
        assert [tuple(line.split("\t")) for line in lines] == splits[split]
    # Nothing left behind but the three files (the temporary files were moved).
    assert sorted(os.listdir(out)) == sorted(f"{name}.{s}.tsv" for s in paths)


def test_export_overwrites(tmp_path):
    first = export_tsv("emoji-en-ko", str(tmp_path), seed=0)
    second = export_tsv("emoji-en-ko", str(tmp_path), seed=1)
    assert first == second
    with open(second["test"], encoding="utf-8") as f:
        assert f.readline().rstrip("\n") == "\t".join(load_splits("emoji-en-ko", seed=1)["test"][0])


@pytest.mark.parametrize("fn", [generate_pairs, load_splits,
                                lambda name: export_tsv(name, "/nonexistent")])
def test_unknown_name(fn):
    with pytest.raises(KeyError) as info:
        fn("numbers-en-xx")
    message = str(info.value)
    assert "numbers-en-xx" in message
    assert all(name in message for name in ALL)
    with pytest.raises(ValueError):  # the same error is also a ValueError
        fn("nope")


def test_version_pin_warning(monkeypatch):
    installed = importlib.metadata.version("emoji")
    monkeypatch.setitem(tr.PINNED_VERSIONS, "emoji", "0.0.1")
    with pytest.warns(UserWarning) as record:
        tr._require("emoji")
    message = str(record[0].message)
    assert f"emoji {installed} is installed" in message and "emoji 0.0.1" in message
    monkeypatch.undo()
    if installed != tr.PINNED_VERSIONS["emoji"]:
        pytest.skip(f"emoji {installed} is not the pinned version")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tr._require("emoji")  # the pinned version: silent
