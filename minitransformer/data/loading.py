"""What a task is, and how its data becomes token-level splits.

    Task       one entry of the task registry (data/registry.py): a name, a
               one-line description, a recipe (how it trains by default), a
               function giving its train / valid / test sentence pairs for a
               seed, and how each side is tokenized
    TaskData   the loaded splits, tokenized, and the vocabulary both sides share
    read_pairs / split_pairs / load_tsv_task
               the same for a user's TSV file (``train --data pairs.tsv``):
               checked line by line, deduplicated, split three ways

A task's pairs are plain text, ``(source sentence, target sentence)``; the
task's levels say how each side becomes tokens (``vocab.tokenize``), so every
task, built in or a user's file, reaches the model the same way.

Byte-pair encoding (level "bpe", §5.1) is one more level, with one rule of its
own: the merges are learned on the training split only, on both of its sides
(one joint vocabulary, so the three-way tying of §3.4 is the paper's), and the
valid and test splits are then encoded with them, as new text would be.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy

from ..settings import Recipe
from . import fingerprint as _fingerprint
from .bpe import BPE
from .bpe import detokenize as detokenize_bpe
from .tsv import DataError, looks_like_header, read_tsv_rows
from .vocab import LEVELS, PLAIN_LEVELS, WORD_RULE, WORD_RULE_KEY, Vocab, bpe_vocab, tokenize

TextPair = tuple[str, str]                     # (source sentence, target sentence)
TokenPair = tuple[list[str], list[str]]        # the same, tokenized

SPLITS = ("train", "valid", "test")


@dataclass
class TaskData:
    """Token-level splits of one task and the shared source/target vocabulary."""

    name: str
    vocab: Vocab
    train: list          # [(src_tokens, tgt_tokens)]
    valid: list
    test: list
    src_level: str = "word"
    tgt_level: str = "word"
    bleu_tokenize: str = "13a"
    notes: list = field(default_factory=list)    # what loading did that the user should know
    warnings: list = field(default_factory=list)  # what the user should worry about (splits too small to score)
    src_lowercase: bool = False                  # no training source holds a capital: lower-case new input
    recipe: Recipe | None = None                 # how it trains by default (the registry's, or DATA_RECIPE)
    bpe: BPE | None = None                       # level "bpe": the merges, learned on the training split
    entry: Task | None = None                    # the registry entry it came from (None: a --data file)

    @property
    def levels(self) -> dict:
        """How the task tokenizes, saved in checkpoints so translate and evaluate do the same
        (for "bpe", with the merges and initial symbols: ``levels["bpe"]``, see ``bpe_of``)."""
        levels = {"src": self.src_level, "tgt": self.tgt_level, "bleu_tokenize": self.bleu_tokenize,
                  "src_lowercase": self.src_lowercase, WORD_RULE_KEY: WORD_RULE}
        if self.bpe is not None:
            levels["bpe"] = self.bpe.to_dict()
        return levels

    def fingerprint(self) -> dict:
        """Digests of the corpus and of its split (``data.fingerprint``), saved in checkpoints so a
        resume or an evaluation can tell whether it sees the data the model was trained on."""
        return _fingerprint.fingerprint(self.name, self.train, self.valid, self.test,
                                        self.bpe.to_dict() if self.bpe is not None else None)


def bpe_of(levels: dict) -> BPE | None:
    """The merges saved in a checkpoint's ``extra["levels"]`` (``TaskData.levels``), or None when
    it does not byte-pair encode. A malformed entry is a ``bpe.BPEError`` (a ValueError)."""
    return BPE.from_dict(levels["bpe"]) if isinstance(levels, dict) and "bpe" in levels else None


def learn_joint_bpe(train: list[TextPair], num_merges: int) -> BPE:
    """Merges learned on both sides of the training pairs (text), and on nothing else: the joint
    source-target vocabulary of §5.1. ``vocab.bpe_vocab`` makes the Vocab from it."""
    return BPE.learn([src for src, _ in train] + [tgt for _, tgt in train], num_merges)


def _check_bpe_request(level: str | None, bpe_merges: int | None, bpe: BPE | None, where: str) -> None:
    if level is not None and level not in LEVELS:
        raise ValueError(f"{where}: level must be one of {LEVELS}, got {level!r}")
    if bpe_merges is not None and (isinstance(bpe_merges, bool) or not isinstance(bpe_merges, int)
                                   or bpe_merges < 1):
        raise ValueError(f"{where}: bpe_merges must be an integer ≥ 1, got {bpe_merges!r}")
    if level != "bpe" and (bpe_merges is not None or bpe is not None):
        raise ValueError(f"{where}: BPE merges apply to level 'bpe' only, not {level!r}")
    if level == "bpe" and bpe_merges is None and bpe is None:
        raise ValueError(f"{where}: level 'bpe' needs the number of merges to learn (bpe_merges)")
    if bpe_merges is not None and bpe is not None:
        raise ValueError(f"{where}: give a number of merges to learn (bpe_merges) or learned merges (bpe), "
                         "not both")


@dataclass(frozen=True)
class Task:
    """One entry of the task registry: everything the command line, the help text and the README know of it.

    name: what ``--task`` takes. description: one line (``tasks`` and ``train --help``
    print it). recipe: the default model preset and training settings. splits:
    seed -> {"train", "valid", "test"}: lists of (source, target) text pairs,
    disjoint. src_level / tgt_level: "char", "word" or "space" tokenization of each
    side (``vocab.tokenize``).
    bleu_tokenize: sacrebleu's tokenizer for scoring the target side. vocab:
    the training token pairs -> the Vocab (None: built from both sides of the
    training split). bpe_merges: the number of merges ``level="bpe"`` learns when
    none is given (``train --task NAME --level bpe``), where one was measured to
    work (docs/translation_results.md); None: the caller must give one.
    train_level: what ``train --task NAME`` trains on when no --level is given:
    None, the task's own src_level / tgt_level; "bpe", byte-pair pieces
    (bpe_merges of them), where they were measured to train it better. ``load``
    keeps the task's own tokenization either way. source, license: where the
    data comes from.

    Optional hooks, for a task whose output means more than a sentence (a
    parse tree, say); None keeps the plain text behaviour:

    render: (source text, output text) -> the line ``translate`` prints for it.
    scores: (sources, outputs, references), lists of texts -> {name: value},
        the task's own scores, which ``evaluate`` (and the report at the end of
        ``train``) print instead of BLEU and chrF.
    max_output_len: the most tokens decoding may produce (<eos> included) for
        every sentence; None: the input length + 50 (§6.1).

    What a person may type to its model: ``phrasing``, one line naming the forms
    of the sources it was trained on (``tasks`` and ``translate --help`` print it),
    and ``check_input``: sentence (tokenized and joined back) -> None when it is
    in one of those forms, else the reason ``translate`` refuses it with (one line;
    ``data/phrasing.py``). None: every sentence is translated, unknown words named.

    A checkpoint saves its task's name, so ``translate`` and ``evaluate`` find
    the hooks again through the registry.
    """

    name: str
    description: str
    recipe: Recipe
    splits: Callable[[int], dict]
    src_level: str = "word"
    tgt_level: str = "word"
    bleu_tokenize: str = "13a"
    vocab: Callable[[list], Vocab] | None = None
    source: str = "generated by the package"
    license: str = ""
    bpe_merges: int | None = None
    train_level: str | None = None
    render: Callable[[str, str], str] | None = None
    scores: Callable[[list, list, list], dict] | None = None
    max_output_len: int | None = None
    phrasing: str = ""
    check_input: Callable[[str], str | None] | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or self.name != self.name.strip() or " " in self.name:
            raise ValueError(f"Task: name must be a word like 'copy', got {self.name!r}")
        if not isinstance(self.description, str) or not self.description.strip() or "\n" in self.description:
            raise ValueError(f"Task {self.name!r}: description must be one non-empty line")
        if not isinstance(self.recipe, Recipe):
            raise TypeError(f"Task {self.name!r}: every task needs a recipe (settings.Recipe), got "
                            f"{type(self.recipe).__name__}")
        if not callable(self.splits):
            raise TypeError(f"Task {self.name!r}: splits must be a function seed -> {{train, valid, test}}")
        for side in ("src_level", "tgt_level"):
            if getattr(self, side) not in PLAIN_LEVELS:
                raise ValueError(f"Task {self.name!r}: {side} must be one of {PLAIN_LEVELS} (a BPE task gives "
                                 f"bpe_merges), got {getattr(self, side)!r}")
        if self.bpe_merges is not None:
            _check_bpe_request("bpe", self.bpe_merges, None, f"Task {self.name!r}")
        if self.train_level not in (None, "bpe") or (self.train_level == "bpe" and self.bpe_merges is None):
            raise ValueError(f"Task {self.name!r}: train_level must be None (its own tokenization) or 'bpe' "
                             f"with bpe_merges, got {self.train_level!r}")
        if not isinstance(self.phrasing, str) or "\n" in self.phrasing:
            raise ValueError(f"Task {self.name!r}: phrasing must be one line")
        for hook in ("render", "scores", "check_input"):
            if getattr(self, hook) is not None and not callable(getattr(self, hook)):
                raise TypeError(f"Task {self.name!r}: {hook} must be a function or None")
        n = self.max_output_len
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"Task {self.name!r}: max_output_len must be an integer >= 1 or None, got {n!r}")

    @property
    def own_level(self) -> str | None:
        """The level both sides are tokenized at, where they share one ("char" for emoji), else None:
        ``train --task NAME --level`` takes it to mean the task's own tokenization."""
        return self.src_level if self.src_level == self.tgt_level else None

    def load(self, seed: int = 0, level: str | None = None, bpe_merges: int | None = None,
             bpe: BPE | None = None) -> TaskData:
        """The task's splits for ``seed``, tokenized, with their vocabulary.

        level: None, the task's own tokenization; "char", "word" or "space", both sides at that
        level; "bpe", both sides byte-pair encoded, with ``bpe_merges`` merges learned on
        this seed's training split (both sides, never valid or test; default: the task's
        own ``bpe_merges``), or with the given learned merges ``bpe`` (a checkpoint's:
        ``bpe_of(ckpt.extra["levels"])``).
        """
        if level == "bpe" and bpe is None and bpe_merges is None:
            bpe_merges = self.bpe_merges
        _check_bpe_request(level, bpe_merges, bpe, f"task {self.name!r}")
        splits = self.splits(seed)
        if not isinstance(splits, dict) or set(splits) != set(SPLITS):
            raise ValueError(f"task {self.name!r}: splits() must return a dict with keys {SPLITS}")
        src_level, tgt_level = (self.src_level, self.tgt_level) if level is None else (level, level)
        if level == "bpe" and bpe is None:
            bpe = learn_joint_bpe(splits["train"], bpe_merges)          # the training split only
        tokens = {name: [(tokenize(s, src_level, bpe), tokenize(t, tgt_level, bpe)) for s, t in pairs]
                  for name, pairs in splits.items()}
        train = tokens["train"]
        if bpe is not None:
            vocab = bpe_vocab(bpe)
        elif self.vocab is not None and level is None:
            vocab = self.vocab(train)
        else:
            vocab = Vocab.build([s for s, _ in train] + [t for _, t in train])
        return TaskData(self.name, vocab, train, tokens["valid"], tokens["test"], src_level, tgt_level,
                        self.bleu_tokenize, src_lowercase=_all_lowercase(train), recipe=self.recipe, bpe=bpe,
                        entry=self)


def _all_lowercase(pairs: list[TokenPair]) -> bool:
    """True when no source token of ``pairs`` has a capital letter: a model trained on them has
    never seen one, so new input is lower-cased before lookup (``data.vocab.normalize_source``)."""
    return all(token == token.lower() for src, _ in pairs for token in src)


# -- a user's TSV file -----------------------------------------------------------------------

# A --data line longer than this (in tokens, either side) is an error: one very long
# line would otherwise raise the model's max_len, and every batch it joins would be
# padded to it (the attention scores of such a batch grow with its square).
MAX_DATA_LENGTH = 256


def read_pairs(path: str, src_level: str, tgt_level: str, header: bool = False,
               max_length: int | None = MAX_DATA_LENGTH, max_source_length: int | None = None,
               bpe: BPE | None = None) -> tuple[list[TokenPair], list[str]]:
    """Tokenized (source, target) pairs of a TSV file, checked line by line; and notes for the user.

    A line that cannot be tokenized (a reserved character or word), or with a
    side longer than ``max_length`` tokens, is a DataError naming the file and
    the line. ``max_source_length``: the most source tokens a trained model
    takes (its max_len less the <eos>; ``evaluate`` gives it), a longer source
    is a DataError naming the line too. A first line that looks like column
    names is reported in the notes (``header=True`` skips it). ``bpe``: the
    learned merges, for a side of level "bpe".
    """
    rows = read_tsv_rows(path, header=header)
    notes = []
    if not header and looks_like_header(rows[0][1], rows[0][2]):
        notes.append(f"{path}:{rows[0][0]}: the first line {rows[0][1]!r} / {rows[0][2]!r} looks like a header "
                     "row; it is read as a sentence pair (pass --header to skip it)")
    pairs = []
    for lineno, src, tgt in rows:
        sides = []
        for side, text, level in (("source", src, src_level), ("target", tgt, tgt_level)):
            try:
                tokens = tokenize(text, level, bpe if level == "bpe" else None)
            except ValueError as exc:
                raise DataError(f"{path}:{lineno}: {side}: {exc}") from None
            if max_length is not None and len(tokens) > max_length:
                raise DataError(f"{path}:{lineno}: the {side} has {len(tokens):,} {level} tokens, more than the "
                                f"limit of {max_length} (--max-length); shorten or remove the line, or raise "
                                "the limit")
            sides.append(tokens)
        if max_source_length is not None and len(sides[0]) > max_source_length:
            raise DataError(f"{path}:{lineno}: the source has {len(sides[0]):,} {src_level} tokens; with <eos> that "
                            f"is more than the model's max_len of {max_source_length + 1} positions")
        pairs.append((sides[0], sides[1]))
    return pairs, notes


def split_pairs(pairs, seed: int = 0, valid_fraction: float = 0.05, test_fraction: float = 0.05,
                where: str = "data") -> tuple[list, list, list, int]:
    """Deduplicate, then split token pairs three ways: (train, valid, test, duplicates removed).

    Identical pairs are kept once. The split is drawn over distinct *sources*:
    all pairs of one source sentence land in the same split, so no source seen
    in training is scored as held out. valid and test get ``fraction`` of the
    sources each, at least one; train keeps the rest, at least one. Too few
    sources to do that is a DataError.
    """
    unique, seen = [], set()
    for src, tgt in pairs:
        key = (tuple(src), tuple(tgt))
        if key not in seen:
            seen.add(key)
            unique.append((src, tgt))
    duplicates = len(pairs) - len(unique)
    by_source: dict[tuple, list] = {}
    for src, tgt in unique:
        by_source.setdefault(tuple(src), []).append((src, tgt))
    sources = list(by_source)
    n = len(sources)
    if n < 3:
        raise DataError(f"{where}: {n} distinct source sentence(s) after removing {duplicates} duplicate "
                        "pair(s); at least 3 are needed to split into train, valid and test")
    n_test = max(1, round(n * test_fraction))
    n_valid = max(1, round(n * valid_fraction))
    if n_test + n_valid >= n:
        n_test = n_valid = 1
    order = numpy.random.default_rng(seed).permutation(n)
    parts = (order[:n_test], order[n_test:n_test + n_valid], order[n_test + n_valid:])
    test, valid, train = ([pair for i in part for pair in by_source[sources[i]]] for part in parts)
    return train, valid, test, duplicates


# A held-out split with fewer pairs than this gives a score that means little: one pair is more
# than 1 point of exact match, and the 95% interval of a score near 50% (1.96 * sqrt(p(1-p)/n))
# is wider than ±10 points (±9.8 at 100 pairs). `train --data` warns below it.
MIN_SCORED_PAIRS = 100


def small_split_warnings(valid: list, test: list, where: str) -> list[str]:
    """What to tell the user of a file whose validation or test split is under ``MIN_SCORED_PAIRS``
    pairs: one line each, with what a pair is worth and how uncertain a score is."""
    lines = []
    for split, pairs, role in (("validation", valid, "'solved' (100% exact match, which stops training) means "
                                "{n} sentence(s) right"),
                               ("test", test, "its score at the end is uncertain by about ±{half:.0f} points "
                                "(95% interval near 50%)")):
        n = len(pairs)
        if n < MIN_SCORED_PAIRS:
            lines.append(f"{where}: the {split} split has {n} pair(s), under the {MIN_SCORED_PAIRS} a score needs to "
                         f"mean something: one pair is {100 / n:.0f} points of exact match, and "
                         + role.format(n=n, half=98 / n ** 0.5) + "; add pairs to the file for a score worth reading")
    return lines


def load_tsv_task(path: str, level: str = "char", seed: int = 0, valid_fraction: float = 0.05,
                  test_fraction: float = 0.05, header: bool = False,
                  max_length: int | None = MAX_DATA_LENGTH, bpe_merges: int | None = None,
                  bpe: BPE | None = None) -> TaskData:
    """The splits and vocabulary of a user's TSV file (``train --data``).

    The file is checked line by line (``read_pairs``), deduplicated and split
    three ways (``split_pairs``): train, valid (validation during training) and
    test (scored once at the end; never seen during training or validation).
    ``TaskData.notes`` says what was done (duplicates removed, a likely header).
    Level "bpe": ``bpe_merges`` merges learned on the training split's text (or
    the learned merges ``bpe``), both sides, one vocabulary.
    """
    _check_bpe_request(level, bpe_merges, bpe, path)
    if level == "bpe" and bpe is None:
        # Learn on the training split only. Split the text first: every line is checked
        # by the rules of BPE text (merges-free pieces), so a bad line is named by number.
        # BPE pieces give back their exact text, so equal texts are equal token lists and
        # the token-level split below is this same split.
        checked, _ = read_pairs(path, "bpe", "bpe", header=header, max_length=None, bpe=BPE([]))
        text = [(detokenize_bpe(s), detokenize_bpe(t)) for s, t in checked]
        train_text, _, _, _ = split_pairs(text, seed, valid_fraction, test_fraction, where=path)
        bpe = learn_joint_bpe(train_text, bpe_merges)
    pairs, notes = read_pairs(path, level, level, header=header, max_length=max_length, bpe=bpe)
    train, valid, test, duplicates = split_pairs(pairs, seed, valid_fraction, test_fraction, where=path)
    if duplicates:
        notes.append(f"{path}: removed {duplicates} duplicate pair(s) before splitting")
    warnings = small_split_warnings(valid, test, path)
    vocab = bpe_vocab(bpe) if bpe is not None else Vocab.build([s for s, _ in train] + [t for _, t in train])
    return TaskData(os.path.basename(path), vocab, train, valid, test, level, level,
                    "char" if level == "char" else "13a", notes, src_lowercase=_all_lowercase(train), bpe=bpe,
                    warnings=warnings)


__all__ = ["TaskData", "Task", "TextPair", "TokenPair", "SPLITS", "MAX_DATA_LENGTH", "MIN_SCORED_PAIRS", "read_pairs",
           "split_pairs", "small_split_warnings", "load_tsv_task", "bpe_of", "learn_joint_bpe"]
