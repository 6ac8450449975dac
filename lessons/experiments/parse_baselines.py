"""§6.3 in miniature, before any training: the treebank, and the two parsers a trained model
is compared with.

    python lessons/experiments/parse_baselines.py            # writes lessons/experiments/parse_baselines.json
    python lessons/experiments/parse_baselines.py --quick    # one seed, small sets (smoke test), to --out

For each data seed it builds the splits of ``data/pcfg.py`` (the "small" and "large"
training sets of Table 4 in miniature, the validation and test sets) and reports:

* the grammar: rules, words, phrase labels, words with more than one tag;
* lengths: words per sentence and target tokens per linearized tree, per split;
* the ceiling: bracket F1 (evalb, ``data.evalb.bracket_f1``) of the grammar's own Viterbi
  parse (``data/cky.py``) on the test set, and the floor: a right-branching tree;
* CKY's speed on the test set (sentences per second, one thread).

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
    parser = ViterbiParser()
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
        viterbi = [parser.parse(e.words).tree for e in splits.test]
        seconds = time.perf_counter() - t0
        ceiling = bracket_f1(gold, viterbi)
        floor = bracket_f1(gold, [right_branching(e.words) for e in splits.test])
        record["seeds"].append({
            "seed": seed, "lengths": lengths, "train_large_words_histogram": histogram,
            "ceiling_viterbi": _score(ceiling), "floor_right_branching": _score(floor),
            "cky_sentences_per_second": round(len(gold) / seconds, 1)})
        print(f"seed {seed}: test {len(gold)} sentences, mean {lengths['test']['words']['mean']} words; "
              f"Viterbi {ceiling}; right-branching {floor}; CKY {len(gold) / seconds:.0f} sentences/s", flush=True)

    f1s = [s["ceiling_viterbi"]["f1"] for s in record["seeds"]]
    record["ceiling_f1_mean"] = round(statistics.fmean(f1s), 2)
    record["floor_f1_mean"] = round(statistics.fmean(s["floor_right_branching"]["f1"] for s in record["seeds"]), 2)
    record = {"provenance": [_record.finish(prov)], **record}
    _record.write(args.out, record)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
