"""Min-p sampling (Sample(min_p=P)): only the tokens at least P times as probable as the most probable one
are drawn, in proportion to their probabilities. One field in decoding.py; its option (--min-p), its check,
its help and its place in --eval come from the field (options.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from minitransformer.cli import build_parser, main
from minitransformer.decoding import Sample, decode, greedy_decode, parse_strategy
from minitransformer.model import Transformer, TransformerConfig

PROBS = np.array([0.40, 0.25, 0.15, 0.09, 0.06, 0.05])     # P_max = 0.4


def _draws(strategy, rows=40_000):
    logp = np.log(np.tile(PROBS, (rows, 1)))
    return strategy.choose(logp, strategy.make_rng(np))


@pytest.mark.parametrize("min_p", [0.2, 0.5, 0.7])
def test_min_p_draws_only_the_tokens_near_the_best_in_proportion(min_p):
    kept = PROBS / PROBS.max() >= min_p
    expected = np.where(kept, PROBS, 0) / PROBS[kept].sum()
    counts = np.bincount(_draws(Sample(min_p=min_p, seed=3)), minlength=len(PROBS))
    assert np.all(counts[~kept] == 0)                                   # never a token below the cut
    freq = counts / counts.sum()
    sigma = np.sqrt(expected * (1 - expected) / counts.sum())
    assert np.all(np.abs(freq - expected) <= 5 * sigma + 1e-12), (freq, expected)


def test_min_p_applies_to_the_tempered_distribution_and_one_is_greedy():
    # At T = 2 the ratios are square roots: sqrt(0.05 / 0.4) = 0.354 >= 0.3, so every token stays.
    counts = np.bincount(_draws(Sample(temperature=2.0, min_p=0.3, seed=1), rows=20_000), minlength=len(PROBS))
    assert np.all(counts > 0)
    assert set(_draws(Sample(min_p=1.0, seed=2), rows=1000).tolist()) == {0}


def test_min_p_one_decodes_as_greedy():
    cfg = TransformerConfig(vocab_size=12, d_model=16, h=2, N=1, d_ff=32, P_drop=0.0, max_len=32)
    model = Transformer(cfg, seed=4)
    src = np.array([[3, 4, 5, 6, 2], [7, 8, 9, 2, 0]])
    greedy = greedy_decode(model, src, 1, 2)
    assert decode(model, src, 1, 2, Sample(min_p=1.0, temperature=3.0, seed=5)) == greedy
    assert decode(model, src, 1, 2, Sample(temperature=3.0, seed=5)) != greedy      # unsure: T = 3 alone is not


def test_min_p_is_checked_named_and_shown():
    assert Sample(min_p=0.1) == parse_strategy("sample:min_p=0.1")
    assert str(Sample(temperature=0.7, min_p=0.05, seed=2)) == "sample (T=0.7, min-p 0.05, seed 2)"
    for bad, message in [(0, "Sample: min_p must be in (0, 1], got 0.0"), (1.5, "must be in (0, 1], got 1.5"),
                         (math.nan, "min_p must be a finite number")]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("]", r"\]")):
            Sample(min_p=bad)


def test_translate_and_evaluate_have_a_min_p_option(capsys):
    parser = build_parser()
    for command in ("translate", "evaluate"):
        sub = next(a for a in parser._subparsers._group_actions[0].choices.values() if a.prog.endswith(command))
        assert "--min-p P" in sub.format_help() and "with --sample: only the tokens at least P times" in \
            sub.format_help()
    assert main(["translate", "--checkpoint", "none.npz", "--sample", "--min-p", "0", "x"]) == 2
    assert capsys.readouterr().err.strip() == "error: must be a number in (0, 1], got 0 (--min-p)"
    assert main(["translate", "--checkpoint", "none.npz", "--min-p", "0.1", "x"]) == 2
    assert "--min-p applies only to sampling; add --sample (--min-p)" in capsys.readouterr().err
