"""Small offline translation tasks, built from data that Python packages ship.

Nothing is downloaded: the sentence pairs are generated on the fly from

* num2words (number names): ``numbers-en-fr``, ``numbers-en-de``
* babel's copy of the Unicode CLDR (full and long date formats): ``dates-en-de``, ``dates-en-ko``
* emoji's CLDR short names: ``emoji-en-fr``, ``emoji-en-de``, ``emoji-en-ko``

Numbers and dates are deterministic, rule-based "languages": a small
Transformer should reach BLEU >= 95 on them, which makes them good smoke tests
for a from-scratch implementation. The emoji names are real, human-made
translations of short noun phrases with ~1.7k pairs: a genuinely hard,
low-resource task where most test words were never seen in training.

See docs/datasets.md for pair counts, licences and the tokenization choices.

    >>> pairs = generate_pairs("numbers-en-fr")
    >>> pairs[21]
    ('twenty-one', 'vingt et un')
    >>> splits = load_splits("numbers-en-fr", seed=0)
    >>> {k: len(v) for k, v in splits.items()}
    {'train': 8500, 'valid': 500, 'test': 1000}
"""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..model import TransformerConfig
from ..settings import Recipe, recipe
from .loading import Task
from .phrasing import DATE_PHRASING, NUMBER_PHRASING, check_number_name, date_check
from .tsv import write_tsv

__all__ = [
    "TranslationTask", "TASKS", "PRESETS", "PINNED_VERSIONS", "UnknownTaskError", "generate_pairs",
    "load_splits", "export_tsv",
]

# The data is only reproducible for these exact package versions: a new
# num2words or CLDR release may change a spelling or a date pattern, which
# would silently change the test set and make scores incomparable.
PINNED_VERSIONS = {"num2words": "0.5.14", "babel": "2.19.0", "emoji": "2.16.0"}

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class TranslationTask:
    """What a named task is, where its data comes from and how to tokenize it."""

    name: str            # e.g. "numbers-en-fr"
    description: str
    source: str          # package and pinned version the data comes from
    license: str         # the data's license
    src_level: str       # "word", "space" or "char": how the source side is tokenized
    tgt_level: str       # the same for the target (see minitransformer.data.vocab.tokenize)
    bleu_tokenize: str   # metrics.corpus_bleu tokenize mode for this target side
    recipe: Recipe       # how the task trains by default (measured: docs/translation_results.md)
    bpe_merges: int | None = None   # merges for --level bpe, where measured (docs/translation_results.md)
    train_level: str | None = None  # "bpe": `train --task` trains on pieces unless --level says otherwise
    phrasing: str = ""              # the forms of its sources, for a person typing one (data/phrasing.py)
    check_input: Callable[[str], str | None] | None = None   # a typed source: None if in those forms, else why


# The model of a --data file's and of the records' recipes: preset "translate" (the emoji tasks': it, with
# more label smoothing, "translate-emoji").
# The numbers and dates recipes train a model of half the width, "translate-small" (d_k = 16): issue 37's
# search (lessons/experiments/task_recipe_search.py) found it solves them in as few steps as "translate",
# each step about half the time.
PRESETS = {
    "translate": TransformerConfig(vocab_size=100, d_model=128, h=4, N=2, d_ff=512, P_drop=0.1, eps_ls=0.1,
                                   max_len=128),
    "translate-small": TransformerConfig(vocab_size=100, d_model=64, h=4, N=2, d_ff=256, P_drop=0.1, eps_ls=0.1,
                                         max_len=128),
    # The emoji tasks' model: "translate" with label smoothing ε_ls 0.2. On their ~1,300 training phrases,
    # in byte-pair pieces, it gave 0.6-1.8 more chrF than ε_ls 0.1 with P_drop 0.3 (issue 37's search).
    "translate-emoji": TransformerConfig(vocab_size=100, d_model=128, h=4, N=2, d_ff=512, P_drop=0.1, eps_ls=0.2,
                                         max_len=128),
}


def translation_recipe(steps: int, batch_size: int, valid_every: int = 500, preset: str = "translate",
                       **settings) -> Recipe:
    """The translation tasks share a preset and a schedule; they differ in length of training.

    Factor 1.0 without clipping spikes on them (held-out exact match dips mid-run,
    and greedy decoding loops on rare patterns); 0.5 with clipping does not.
    """
    return recipe(preset, steps=steps, batch_size=batch_size, lr_factor=0.5, warmup_steps=400,
                  clip_norm=1.0, valid_every=valid_every, **settings)


def solved_recipe(steps: int, lr_factor: float = 0.25, **settings) -> Recipe:
    """The numbers and dates tasks' recipe, from issue 37's search (lessons/experiments/task_recipe_search.py:
    every candidate over three seeds, the test set scored where each run stopped).

    What made them fast is what made copy fast (tasks.py). First, a stop once the task is solved: the whole
    validation split (500 pairs) decoded greedily every 50 steps, 100% at two validations in a row (with it,
    even the old recipe solves the dates in 200-250 steps, not 1,500). Then batches of 128 random pairs of
    mixed lengths and a small learning-rate factor after a short warm-up (100 steps): with batches of one
    length numbers-en-fr was not solved in 1,000 steps (98.6-99.8% on the test set), with mixed ones and a
    factor of 0.125-0.5 it was in 200-450. ``steps`` is only the cap for a run that never gets there.

    German numbers (character level) take a cosine decay instead (``schedule="cosine"``, ``steps=800``):
    under 1/sqrt(step) their validation kept one or two near-misses among the 500 pairs for hundreds of
    steps (one seed needed 1,350 steps), while a rate that falls to zero at step 800 settles them, so a
    run stops at 100% or ends at step 800, by when every seed tried was at least 99.8% right on the test
    set. There ``steps`` is also the length of the decay.
    """
    return recipe("translate-small", steps=steps, batch_size=128, batch_by_length=False, lr_factor=lr_factor,
                  warmup_steps=100, clip_norm=1.0, valid_every=50, valid_decode=500, stop_when_solved=2, **settings)


# Emoji names: ~1.3k training pairs. Issue 37's search (lessons/experiments/task_recipe_search.py;
# docs/translation_results.md, "In pieces: 1,000 byte-pair merges"): byte-pair pieces, 1,000 merges
# learned on both sides of the training split, with mixed batches and ε_ls 0.2, raised the mean test
# chrF of seeds 0-2 over characters by 14.5 (fr) and 12.5 (de) points in 40-60% of the time. So
# `train --task emoji-en-X` trains on pieces (the entries' train_level), `--level char` on characters;
# load_task keeps characters. Korean gained least: +8.3 in 2,000 steps, where no brake of the search
# took it to +10; 3,000 steps gave +10.3, at 1.27 times the character recipe's time on the same machine.
_EMOJI_RECIPE = translation_recipe(steps=2000, batch_size=64, valid_every=250, preset="translate-emoji",
                                   batch_by_length=False)
_EMOJI_KO_RECIPE = translation_recipe(steps=3000, batch_size=64, valid_every=250, preset="translate-emoji",
                                      batch_by_length=False)
_EMOJI_BPE_MERGES = 1000
_EMOJI_PHRASING = "CLDR emoji short names in English, lower case: 'grinning face', 'red heart'"


def _src(pkg: str) -> str:
    return f"{pkg} {PINNED_VERSIONS[pkg]}"


_NUM2WORDS_LICENSE = "LGPL-2.1 (num2words)"
_CLDR_LICENSE = ("Unicode License v3 (CLDR locale data, as shipped in babel/locale-data; "
                 "babel's own code is BSD-3-Clause)")
_EMOJI_LICENSE = ("BSD-3-Clause (emoji package); the names are derived from Unicode emoji "
                  "data and CLDR annotations (Unicode License v3)")

# The numbers tasks keep level "space" (split at spaces, the comma of "one thousand, two hundred"
# glued to its word, as num2words writes it): translate accepts num2words' spelling alone
# (check_number_input), so a typed comma never makes an unknown word, and the records trained
# on these tokens (lessons/experiments/table3.json, sublayer_ablations.json, lesson13_bpe.json's
# own level) stay valid. The dates tasks, whose users type commas freely, split punctuation (level word).
def check_number_input(text: str) -> str | None:
    """``translate``'s check of a typed number name (data/phrasing.py), with this generator's spelling."""
    return check_number_name(text, number_name, N_NUMBERS)


def check_date_input(text: str) -> str | None:
    """``translate``'s check of a typed date (data/phrasing.py), with this generator's forms and range."""
    return date_check(text, format_day, DATE_FORMS, DATE_RANGE)


# The recipes these tasks trained with before issue 37's search (lessons/experiments/task_recipe_search.py):
# batches of one length (§5.1), factor 0.5, 400 warm-up steps, a fixed number of steps. The records of
# lesson 13 (lesson13_bpe.py) were trained with them, so that script reads them from here, not the task's
# default recipe; a search that changes a default leaves a record's run as it was.
RECORD_RECIPES: dict[str, Recipe] = {
    "numbers-en-fr": translation_recipe(steps=3000, batch_size=128),
    "numbers-en-de": translation_recipe(steps=3000, batch_size=64),
    "dates-en-de": translation_recipe(steps=1500, batch_size=128),
    "dates-en-ko": translation_recipe(steps=1500, batch_size=128),
}

TASKS: dict[str, TranslationTask] = {t.name: t for t in [
    TranslationTask(
        "numbers-en-fr",
        "English number names to French, 0..9999 "
        "('twenty-one' -> 'vingt et un'). Split at spaces on both sides.",
        _src("num2words"), _NUM2WORDS_LICENSE, "space", "space", "13a",
        solved_recipe(steps=3000), phrasing=NUMBER_PHRASING, check_input=check_number_input),
    TranslationTask(
        "numbers-en-de",
        "English number names to German, 0..9999 "
        "('twenty-one' -> 'einundzwanzig'). English split at spaces, German character "
        "level: German writes each number as one long compound word.",
        _src("num2words"), _NUM2WORDS_LICENSE, "space", "char", "char",
        solved_recipe(steps=800, schedule="cosine"), bpe_merges=200, phrasing=NUMBER_PHRASING,
        check_input=check_number_input),
    TranslationTask(
        "dates-en-de",
        "English dates to German, every day of 1950..2049 in one of four forms "
        "('Tuesday, March 5, 2024' -> 'Dienstag, 5. März 2024'; '5 March 2024' -> '5. März 2024'). Word level.",
        _src("babel"), _CLDR_LICENSE, "word", "word", "13a",
        solved_recipe(steps=3000), phrasing=DATE_PHRASING, check_input=check_date_input),
    TranslationTask(
        "dates-en-ko",
        "English dates to Korean, every day of 1950..2049 in one of four forms "
        "('Tuesday, March 5, 2024' -> '2024년 3월 5일 화요일'; '5 March 2024' -> '2024년 3월 5일'). Word level.",
        _src("babel"), _CLDR_LICENSE, "word", "word", "13a",
        solved_recipe(steps=3000), phrasing=DATE_PHRASING, check_input=check_date_input),
    TranslationTask(
        "emoji-en-fr",
        "CLDR emoji short names, English to French ('grinning face' -> "
        "'visage rieur'). train splits both sides into byte-pair pieces (--level char: characters).",
        _src("emoji"), _EMOJI_LICENSE, "char", "char", "char", _EMOJI_RECIPE, bpe_merges=_EMOJI_BPE_MERGES,
        train_level="bpe", phrasing=_EMOJI_PHRASING),
    TranslationTask(
        "emoji-en-de",
        "CLDR emoji short names, English to German ('grinning face' -> "
        "'grinsendes gesicht'). train splits both sides into byte-pair pieces (--level char: characters).",
        _src("emoji"), _EMOJI_LICENSE, "char", "char", "char", _EMOJI_RECIPE, bpe_merges=_EMOJI_BPE_MERGES,
        train_level="bpe", phrasing=_EMOJI_PHRASING),
    TranslationTask(
        "emoji-en-ko",
        "CLDR emoji short names, English to Korean ('grinning face' -> "
        "'활짝 웃는 얼굴'). train splits both sides into byte-pair pieces "
        "(--level char: characters, Hangul syllables on the Korean side).",
        _src("emoji"), _EMOJI_LICENSE, "char", "char", "char", _EMOJI_KO_RECIPE, bpe_merges=_EMOJI_BPE_MERGES,
        train_level="bpe", phrasing=_EMOJI_PHRASING),
]}

# Default (valid, test) sizes: an int is a number of pairs, a float a fraction.
# Numbers (10,000 pairs) and dates (36,525) get fixed sizes large enough for a
# stable BLEU; emoji (~1.7k) is too small for that and gets 10% / 10%.
_DEFAULT_SPLIT_SIZES: dict[str, tuple[int | float, int | float]] = {
    "numbers-en-fr": (500, 1000), "numbers-en-de": (500, 1000),
    "dates-en-de": (500, 1000), "dates-en-ko": (500, 1000),
    "emoji-en-fr": (0.1, 0.1), "emoji-en-de": (0.1, 0.1), "emoji-en-ko": (0.1, 0.1),
}


class UnknownTaskError(KeyError, ValueError):
    """An unknown task name. Both a KeyError and a ValueError, so either catches it."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


def _task(name: str) -> TranslationTask:
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise UnknownTaskError(
            f"unknown translation task {name!r}; valid names: {', '.join(sorted(TASKS))}"
        ) from None


# --------------------------------------------------------------------------
# Generators (each cached: the packages are slowish and the data never changes)
# --------------------------------------------------------------------------

@functools.cache
def _installed_version(pkg: str) -> str:
    return importlib.metadata.version(pkg)     # slow (it reads the installed metadata): once per package


def _require(pkg: str):
    """Import a data package, warning when it is not the pinned version."""
    try:
        module = __import__(pkg)
    except ImportError as err:
        raise ImportError(
            f"the translation tasks need {pkg}=={PINNED_VERSIONS[pkg]}; "
            f"install it with: pip install {pkg}=={PINNED_VERSIONS[pkg]}"
        ) from err
    installed = _installed_version(pkg)
    if installed != PINNED_VERSIONS[pkg]:
        warnings.warn(
            f"{pkg} {installed} is installed but the datasets are pinned to "
            f"{pkg} {PINNED_VERSIONS[pkg]}; the generated pairs (and so the "
            f"splits and scores) may differ from the documented ones",
            UserWarning, stacklevel=3,
        )
    return module


def _clean(text: str) -> str:
    """Collapse all whitespace (tabs, newlines, no-break spaces) to single spaces.

    Files are written as one "source<TAB>target" pair per line, so a tab or a
    newline inside a text would corrupt them. CLDR data also likes U+00A0 and
    U+202F (no-break spaces), which look like spaces but are different tokens.
    """
    cleaned = " ".join(text.split())
    if not cleaned:
        raise ValueError(f"empty text after cleaning: {text!r}")
    return cleaned


N_NUMBERS = 10_000                        # numbers 0..9999
DATE_RANGE = (datetime.date(1950, 1, 1), datetime.date(2049, 12, 31))


def number_name(n: int, lang: str, num2words=None) -> str:
    """The name of the number ``n`` in ``lang``, as the numbers tasks write it (num2words, cleaned)."""
    return _clean((num2words or _require("num2words").num2words)(n, lang=lang))


@functools.cache
def _number_names(lang: str) -> tuple[str, ...]:
    num2words = _require("num2words").num2words
    return tuple(number_name(n, lang, num2words) for n in range(N_NUMBERS))


# The English forms a dates task's source is written in: CLDR's full and long date formats of the
# United States and of Britain, "Friday, December 25, 2037", "December 25, 2037", "Friday, 25
# December 2037" and "25 December 2037". A full form (with the weekday) is paired with the target
# language's full format, a long one with its long format ("2037년 12월 25일 금요일", "2037년 12월
# 25일"): a translation never has to invent a weekday its source does not name.
DATE_FORMS = (("en_US", "full"), ("en_US", "long"), ("en_GB", "full"), ("en_GB", "long"))


def format_day(day: datetime.date, locale: str, form: str, checked: bool = False) -> str:
    """A date written in one of CLDR's formats ("full", "long") for a locale, as the tasks write it.
    ``checked``: babel's version was checked already (``_require``), as by a generator's loop."""
    if not checked:
        _require("babel")
    from babel.dates import format_date  # noqa: PLC0415  (babel is imported only when a dates task is built)
    return _clean(format_date(day, format=form, locale=locale))


@functools.cache
def _date_pairs(target_locale: str) -> tuple[tuple[str, str], ...]:
    """Every day of ``DATE_RANGE``, in order, the i-th written in the form ``DATE_FORMS[i % 4]``.

    One form per day keeps the task at one pair per day (36,525), its size before there were
    forms, and every form spans the whole range, every weekday and every month."""
    _require("babel")
    first, last = DATE_RANGE
    pairs = []
    for i in range((last - first).days + 1):
        day = first + datetime.timedelta(days=i)
        locale, form = DATE_FORMS[i % len(DATE_FORMS)]
        pairs.append((format_day(day, locale, form, True), format_day(day, target_locale, form, True)))
    return tuple(pairs)


# Unicode code points that mark the emoji we skip (see _emoji_pairs).
_SKIN_TONES = range(0x1F3FB, 0x1F3FF + 1)        # Fitzpatrick modifiers
_REGIONAL_INDICATORS = range(0x1F1E6, 0x1F1FF + 1)  # pairs of these = country flags
_TAGS = range(0xE0020, 0xE007F + 1)              # tag sequences = subdivision flags


def _short_name(code: str) -> str:
    """':grinning_face:' -> 'grinning face'."""
    if len(code) > 2 and code[0] == ":" and code[-1] == ":":
        code = code[1:-1]
    return _clean(code.replace("_", " "))


@functools.cache
def _emoji_pairs(lang: str) -> tuple[tuple[str, str], ...]:
    emoji = _require("emoji")
    emoji.config.load_language(lang)  # fills EMOJI_DATA[e][lang]
    fully_qualified = emoji.STATUS["fully_qualified"]
    candidates = []
    for emj, data in emoji.EMOJI_DATA.items():
        # Keep one spelling per emoji: the unqualified / minimally-qualified
        # variants (same picture without U+FE0F) and the bare components
        # (skin-tone and hair swatches) are left out.
        if data.get("status") != fully_qualified:
            continue
        codepoints = [ord(c) for c in emj]
        # Skin-tone variants only add a fixed suffix ("..., dark skin tone")
        # and would make up more than half of the data.
        if any(c in _SKIN_TONES for c in codepoints):
            continue
        # Country and region flags are named after places: translating them is
        # knowing exonyms ("Finland" -> "flagge finnland"), not learning a
        # pattern. Other flags ("chequered flag") are ordinary phrases and stay.
        if any(c in _REGIONAL_INDICATORS or c in _TAGS for c in codepoints):
            continue
        if "en" not in data or lang not in data:
            continue
        candidates.append((_short_name(data["en"]), _short_name(data[lang]), emj))
    # Deterministic order and de-duplication: sort by English name, then by
    # the emoji itself, and keep the first target for each English source, so
    # that a source never appears in two splits with different targets.
    candidates.sort()
    pairs, seen = [], set()
    for src, tgt, _ in candidates:
        if src not in seen:
            seen.add(src)
            pairs.append((src, tgt))
    return tuple(pairs)


_GENERATORS: dict[str, Callable[[], tuple[tuple[str, str], ...]]] = {
    "numbers-en-fr": lambda: tuple(zip(_number_names("en"), _number_names("fr"))),
    "numbers-en-de": lambda: tuple(zip(_number_names("en"), _number_names("de"))),
    "dates-en-de": lambda: _date_pairs("de"),
    "dates-en-ko": lambda: _date_pairs("ko"),
    "emoji-en-fr": lambda: _emoji_pairs("fr"),
    "emoji-en-de": lambda: _emoji_pairs("de"),
    "emoji-en-ko": lambda: _emoji_pairs("ko"),
}


@functools.cache
def _pairs(name: str) -> tuple[tuple[str, str], ...]:
    _task(name)
    pairs = _GENERATORS[name]()
    sources = [s for s, _ in pairs]
    # Splits are drawn over pairs; a repeated source could land in train and
    # test at once and leak the answer.
    if len(set(sources)) != len(sources):
        raise RuntimeError(f"{name}: duplicate source sentences in the generated data")
    return pairs


def generate_pairs(name: str) -> list[tuple[str, str]]:
    """All (source, target) pairs of a task, in a fixed, documented order.

    numbers: by value 0..9999; dates: chronological; emoji: by English name.
    """
    return list(_pairs(name))  # a copy: callers may mutate it, the cache stays intact


# --------------------------------------------------------------------------
# Splits and export
# --------------------------------------------------------------------------

def _split_size(spec: int | float, n: int, what: str) -> int:
    if isinstance(spec, float):
        if not 0.0 <= spec < 1.0:
            raise ValueError(f"{what} must be in [0, 1), got {spec}")
        return int(round(spec * n))
    return int(spec)


def load_splits(name: str, seed: int = 0, valid_fraction: float | None = None,
                test_fraction: float | None = None) -> dict[str, list[tuple[str, str]]]:
    """Split a task's pairs into disjoint "train", "valid" and "test" lists.

    The pairs are shuffled with ``numpy.random.default_rng(seed).permutation``
    and cut into test, valid, train (in that order), so the same seed always
    gives the same splits. By default valid/test hold 500/1,000 pairs for
    numbers and dates and 10%/10% for emoji; pass fractions to override.
    Each split keeps the shuffled order.
    """
    pairs = _pairs(name)
    n = len(pairs)
    default_valid, default_test = _DEFAULT_SPLIT_SIZES[name]
    n_valid = _split_size(default_valid if valid_fraction is None else float(valid_fraction),
                          n, "valid_fraction")
    n_test = _split_size(default_test if test_fraction is None else float(test_fraction),
                         n, "test_fraction")
    if n_valid + n_test >= n:
        raise ValueError(f"{name}: valid ({n_valid}) + test ({n_test}) leave no "
                         f"training pairs out of {n}")
    order = np.random.default_rng(seed).permutation(n)
    test_idx, valid_idx, train_idx = (order[:n_test], order[n_test:n_test + n_valid],
                                      order[n_test + n_valid:])
    return {
        "train": [pairs[i] for i in train_idx],
        "valid": [pairs[i] for i in valid_idx],
        "test": [pairs[i] for i in test_idx],
    }


# -- the registry entries --------------------------------------------------------------

def _registry_entry(t: TranslationTask) -> Task:
    """The task registry's view of a translation task: its splits for a seed, as text pairs."""
    return Task(t.name, t.description, t.recipe, functools.partial(load_splits, t.name), t.src_level,
                t.tgt_level, t.bleu_tokenize, source=t.source, license=t.license, bpe_merges=t.bpe_merges,
                train_level=t.train_level, phrasing=t.phrasing, check_input=t.check_input)


REGISTRY_ENTRIES = [_registry_entry(t) for t in TASKS.values()]


def export_tsv(name: str, out_dir: str, seed: int = 0) -> dict[str, str]:
    """Write ``{name}.{split}.tsv`` files (source<TAB>target per line, UTF-8).

    Each file is checked and written atomically by ``tsv.write_tsv``, so a
    crash never leaves half a file under the final name. Returns ``{split: path}``.
    """
    splits = load_splits(name, seed=seed)
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for split in SPLITS:
        path = os.path.join(out_dir, f"{name}.{split}.tsv")
        write_tsv(path, splits[split])
        paths[split] = path
    return paths
