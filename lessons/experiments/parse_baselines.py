"""§6.3 in miniature, before any training: the treebank, the two references a trained parser is
held to, and the floor.

    python lessons/experiments/parse_baselines.py            # writes lessons/experiments/parse_baselines.json
    python lessons/experiments/parse_baselines.py --quick    # one seed, small sets (smoke test), to --out

For each data seed it builds the splits of ``data/pcfg.py`` (the "small" and "large"
training sets of Table 4 in miniature, the validation and test sets) and reports:

* the grammar: rules, words, phrase labels, words with more than one tag;
* lengths: words per sentence and target tokens per linearized tree, per split;
* the two references, bracket F1 (evalb, ``data.evalb.bracket_f1``) on the test set of what the
  grammar itself would answer: the most probable tree (Viterbi CKY, ``data/cky.py``) and the
  max-expected-F1 parse (inside-outside posteriors, ``data/posterior.py``, at the threshold that
  maximises the expected corpus F1; the plain "every bracket with posterior above 0.5" beside it),
  and the better of the two, which a trained parser's F1 is read against;
* the floor: a right-branching tree;
* the speed of both on the test set (sentences per second, one thread).

Writes JSON through ``_record`` (commit, command, dates, machine, BLAS, load); the §6.3
lesson reads it.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))                  # _record, when a test loads this file by path

import _record

from minitransformer.data import pcfg
from minitransformer.data.cky import ViterbiParser
from minitransformer.data.posterior import PosteriorParser, decode, max_expected_f1
from minitransformer.data.trees import right_branching
from minitransformer.data.evalb import bracket_f1


def _lengths(values: list[int]) -> dict:
    return {"mean": round(statistics.fmean(values), 2), "median": statistics.median(values),
            "max": max(values), "min": min(values)}


def _score(score) -> dict:
    return {"f1": round(score.f1, 2), "precision": round(score.precision, 2), "recall": round(score.recall, 2),
            "exact": round(score.exact, 2), "sentences": score.sentences}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--quick", action="store_true", help="seed 0 only, 400 training trees, 200 test trees")
    p.add_argument("--out", default=str(HERE / "parse_baselines.json"))
    args = p.parse_args()
    prov = _record.start(threads=1)
    seeds = [0] if args.quick else args.seeds
    n_large = 400 if args.quick else pcfg.SIZES["large"]
    n_valid, n_test = (100, 200) if args.quick else (500, 1_000)

    grammar = pcfg.GRAMMAR
    ambiguous = {w: grammar.tags_of(w) for w in grammar.words if len(grammar.tags_of(w)) > 1}
    record = {
        "grammar": {"rules": len(grammar.rules), "words": len(grammar.words),
                    "tag_entries": sum(len(w) for w in grammar.lexicon.values()),
                    "tags": len(grammar.lexicon), "phrase_labels": grammar.phrase_labels,
                    "ambiguous_words": ambiguous, "max_words": pcfg.MAX_WORDS,
                    "vocab_size": len(pcfg.parse_vocab())},
        "sizes": {"small": pcfg.SIZES["small"], "large": n_large, "valid": n_valid, "test": n_test},
        "seeds": [],
    }
    viterbi_parser, posterior_parser = ViterbiParser(), PosteriorParser()
    for seed in seeds:
        splits = pcfg.parse_splits(n_large, seed, n_valid=n_valid, n_test=n_test)
        small = splits.train[:pcfg.SIZES["small"]]
        lengths = {}
        for name, split in (("train_small", small), ("train_large", splits.train),
                            ("valid", splits.valid), ("test", splits.test)):
            words = [len(e.words) for e in split]
            lengths[name] = {"words": _lengths(words), "target_tokens": _lengths([len(e.target) for e in split])}
        histogram = [0] * (pcfg.MAX_WORDS + 1)
        for e in splits.train:
            histogram[len(e.words)] += 1

        gold = [e.tree for e in splits.test]
        t0 = time.perf_counter()
        viterbi = [viterbi_parser.parse(e.words).tree for e in splits.test]
        viterbi_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        posteriors = [posterior_parser.posteriors(e.words) for e in splits.test]
        best = max_expected_f1(posteriors)
        posterior_seconds = time.perf_counter() - t0
        scores = {"most_probable_tree": bracket_f1(gold, viterbi),
                  "max_expected_f1": bracket_f1(gold, best.trees),
                  "posterior_above_half": bracket_f1(gold, [decode(p, 0.5) for p in posteriors])}
        better = max(("most_probable_tree", "max_expected_f1"), key=lambda name: scores[name].f1)
        floor = bracket_f1(gold, [right_branching(e.words) for e in splits.test])
        record["seeds"].append({
            "seed": seed, "lengths": lengths, "train_large_words_histogram": histogram,
            "most_probable_tree": _score(scores["most_probable_tree"]),
            "max_expected_f1": {**_score(scores["max_expected_f1"]), "threshold": round(best.threshold, 4),
                                "expected_f1": round(best.expected_f1, 2)},
            "posterior_above_half": _score(scores["posterior_above_half"]),
            "better_reference": better, "better_reference_f1": round(scores[better].f1, 2),
            "floor_right_branching": _score(floor),
            "cky_sentences_per_second": round(len(gold) / viterbi_seconds, 1),
            "inside_outside_sentences_per_second": round(len(gold) / posterior_seconds, 1)})
        print(f"seed {seed}: test {len(gold)} sentences, mean {lengths['test']['words']['mean']} words; "
              f"most probable tree {scores['most_probable_tree']}; max expected F1 (threshold "
              f"{best.threshold:.4f}) {scores['max_expected_f1']}; posterior > 0.5 {scores['posterior_above_half']}; "
              f"right-branching {floor}", flush=True)

    for name in ("most_probable_tree", "max_expected_f1", "posterior_above_half", "floor_right_branching"):
        record[f"{name}_f1_mean"] = round(statistics.fmean(s[name]["f1"] for s in record["seeds"]), 2)
    record["better_reference_f1_mean"] = round(statistics.fmean(s["better_reference_f1"] for s in record["seeds"]), 2)
    record = {"provenance": [_record.finish(prov)], **record}
    _record.write(args.out, record)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
