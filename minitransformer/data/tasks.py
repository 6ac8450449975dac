"""Synthetic sequence-to-sequence tasks: copy and reverse.

Before training on translation, a Transformer should learn to copy its input
or to reverse it. These tasks need no data files, train in seconds, and have
one right answer, so a model that fails them has a bug, not too little data.
Reversal is the harder of the two: output position i must attend to input
position n-1-i, so it exercises the encoder-decoder attention (§3.2.3).

Symbols are token strings: "0".."9" for the first ten, then "s10", "s11", ...
(``symbols(n)``). The digits keep small examples readable; the "s" prefix keeps
bigger alphabets from producing multi-digit tokens such as "12" that a reader
could take for "1" followed by "2".

Pairs are *token* lists; encode them with ``synthetic_vocab(n_symbols)``.
"""

from __future__ import annotations

import numpy

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


SYNTHETIC_TASKS = {"copy": copy_pairs, "reverse": reverse_pairs}
