"""Synthetic sequence-to-sequence tasks: copy, reverse and sort.

Before training on translation, a Transformer should learn to copy its input
or to reverse it. These tasks need no data files, train in seconds, and have
one right answer, so a model that fails them has a bug, not too little data.
Reversal is the harder of the two: output position i must attend to input
position n-1-i, so it exercises the encoder-decoder attention (§3.2.3).
Sorting asks for more than a position: output position i holds the i-th
smallest symbol, so the model must find it by content, and count how many
copies of each symbol it has already written.

Symbols are token strings: "0".."9" for the first ten, then "s10", "s11", ...
(``symbols(n)``). The digits keep small examples readable; the "s" prefix keeps
bigger alphabets from producing multi-digit tokens such as "12" that a reader
could take for "1" followed by "2".

Pairs are *token* lists; encode them with ``synthetic_vocab(n_symbols)``.

Each task is one entry of ``TASKS`` below (a ``loading.Task``: description,
recipe, splits), which the task registry (registry.py), ``python -m
minitransformer tasks``, ``train --help`` and docs/tasks.md's task table read; the
model sizes its recipe names are in ``PRESETS`` below, beside it. Adding a
synthetic task means a generator, an entry here (and a preset, if none fits),
nothing else.
"""

from __future__ import annotations

import numpy

from ..model import TransformerConfig
from ..settings import recipe
from .loading import Task
from .vocab import Vocab

Pair = tuple[list[str], list[str]]


def symbols(n_symbols: int) -> list[str]:
    """The n_symbols symbol tokens: "0".."9", then "s10", "s11", ..."""
    _check_int("n_symbols", n_symbols, 1)
    return [str(i) if i < 10 else f"s{i}" for i in range(n_symbols)]


def synthetic_vocab(n_symbols: int) -> Vocab:
    """The vocabulary of the synthetic tasks: exactly the 4 specials + the symbols."""
    return Vocab(symbols(n_symbols))


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, numpy.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}: {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {name}={value}")


def _random_sources(
    n: int, rng: numpy.random.Generator, n_symbols: int, min_len: int, max_len: int
) -> list[list[str]]:
    """n random symbol sequences with lengths uniform in [min_len, max_len]."""
    _check_int("n", n, 0)
    _check_int("n_symbols", n_symbols, 1)
    _check_int("min_len", min_len, 1)
    _check_int("max_len", max_len, 1)
    if min_len > max_len:
        raise ValueError(f"min_len must be <= max_len, got min_len={min_len}, max_len={max_len}")
    if not isinstance(rng, numpy.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (numpy.random.default_rng(seed)), got {type(rng).__name__}"
        )
    alphabet = symbols(n_symbols)
    lengths = rng.integers(min_len, max_len + 1, size=n)  # upper bound is exclusive
    return [[alphabet[i] for i in rng.integers(0, n_symbols, size=int(L))] for L in lengths]


def copy_pairs(
    n: int, rng: numpy.random.Generator, n_symbols: int = 10, min_len: int = 1, max_len: int = 10
) -> list[Pair]:
    """n (source, target) pairs with target == source."""
    return [(src, list(src)) for src in _random_sources(n, rng, n_symbols, min_len, max_len)]


def reverse_pairs(
    n: int, rng: numpy.random.Generator, n_symbols: int = 10, min_len: int = 1, max_len: int = 10
) -> list[Pair]:
    """n (source, target) pairs with target == reversed source.

    Given the same rng state, the sources are the same as copy_pairs'.
    """
    return [(src, src[::-1]) for src in _random_sources(n, rng, n_symbols, min_len, max_len)]


def sort_pairs(
    n: int, rng: numpy.random.Generator, n_symbols: int = 10, min_len: int = 1, max_len: int = 10
) -> list[Pair]:
    """n (source, target) pairs with target == source sorted by symbol ("3 1 3 0" -> "0 1 3 3").

    Symbols sort by their index in ``symbols(n_symbols)``, not as strings (so "s10" comes after "9").
    Given the same rng state, the sources are the same as copy_pairs'.
    """
    order = {symbol: i for i, symbol in enumerate(symbols(n_symbols))}
    return [(src, sorted(src, key=order.__getitem__)) for src in _random_sources(n, rng, n_symbols, min_len, max_len)]


# -- the registry entries --------------------------------------------------------------

# Sizes of the splits of every synthetic task; the held-out test set is 1,000 sequences.
SPLIT_SIZES = {"train": 20000, "valid": 500, "test": 1000}


def _splits(make):
    """seed -> {"train", "valid", "test"} text pairs of the generator ``make``, each split from
    its own generator (seed, split index), so the splits never depend on each other's sizes."""
    def splits(seed: int) -> dict:
        return {split: [(" ".join(src), " ".join(tgt)) for src, tgt in make(n, numpy.random.default_rng([seed, i]))]
                for i, (split, n) in enumerate(SPLIT_SIZES.items())}
    return splits


def _vocab(train) -> Vocab:
    return synthetic_vocab(10)       # every symbol, whether or not the training split drew it


# The models of the copy and reverse recipes, chosen by the search in
# lessons/experiments/copy_recipe_search.py: one layer of d_model 128 copies (reversing takes two);
# label smoothing ε_ls = 0.1 reached 100% in fewer steps than none; no dropout (a task with one
# right answer and 20,000 examples has nothing to regularize). They train in well under a minute
# on a laptop CPU. ``vocab_size`` is filled in from the data at training time.
PRESETS = {
    "copy": TransformerConfig(vocab_size=14, d_model=128, h=4, N=1, d_ff=512, P_drop=0.0, eps_ls=0.1, max_len=64),
    "reverse": TransformerConfig(vocab_size=14, d_model=128, h=4, N=2, d_ff=512, P_drop=0.0, eps_ls=0.1,
                                 max_len=64),
}

# The recipes of lessons/experiments/copy_recipe_search.py's search (its JSON holds every
# candidate's curve over 5 seeds): the §5.3 schedule (Adam β2 = 0.98, warm-up, then 1/√step)
# with a small factor, batches of 128 random pairs of mixed lengths (batch_by_length=False:
# one-length batches took thousands of steps), the whole validation set decoded every 50
# steps for copy (25 for reverse), and the run stops at the second 100% validation in a row.
# Copy validated every 25 steps stopped early enough that one seed in five, on two BLAS
# threads, then missed 3 of the 1,000 held-out sequences; every 50 solves 5 of 5 seeds on 1
# and on 2 threads (lessons/experiments/copy_recipe_bench.json). `steps` is only the cap for a
# run that never gets there.
_COPY_RECIPE = recipe("copy", steps=1000, batch_size=128, batch_by_length=False, lr_factor=0.1,
                      warmup_steps=200, clip_norm=1.0, valid_every=50, valid_decode=SPLIT_SIZES["valid"],
                      stop_when_solved=2)
_REVERSE_RECIPE = recipe("reverse", steps=1500, batch_size=128, batch_by_length=False, lr_factor=0.07,
                         warmup_steps=200, clip_norm=1.0, valid_every=25, valid_decode=SPLIT_SIZES["valid"],
                         stop_when_solved=2)

_PHRASING = "1 to 10 of the symbols 0-9, separated by spaces: '3 1 4 1 5'"

# Sorting: the reverse recipe's two-layer model and schedule, validated every 50 steps. Measured
# (seed 0, one BLAS thread): 97% of the validation set sorted at step 150, solved at step 850
# (99.5% of the held-out test set, greedy); `steps` is only the cap.
_SORT_RECIPE = recipe("reverse", steps=2000, batch_size=128, batch_by_length=False, lr_factor=0.07,
                      warmup_steps=200, clip_norm=1.0, valid_every=50, valid_decode=SPLIT_SIZES["valid"],
                      stop_when_solved=2)

TASKS = [
    Task("copy", "synthetic: copy a random sequence of 10 symbols, lengths 1-10", _COPY_RECIPE,
         _splits(copy_pairs), "space", "space", vocab=_vocab, bleu_tokenize="none", phrasing=_PHRASING),
    Task("reverse", "synthetic: reverse a random sequence of 10 symbols, lengths 1-10", _REVERSE_RECIPE,
         _splits(reverse_pairs), "space", "space", vocab=_vocab, bleu_tokenize="none", phrasing=_PHRASING),
    Task("sort", "synthetic: sort a random sequence of 10 symbols, lengths 1-10", _SORT_RECIPE,
         _splits(sort_pairs), "space", "space", vocab=_vocab, bleu_tokenize="none",
         phrasing=_PHRASING),
]
