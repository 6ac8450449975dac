"""How fast is the hand-written byte-pair encoding? minitransformer.data.bpe against
subword-nmt 0.3.8 (the reference: pure Python, the same algorithm and the same merges),
sentencepiece (its BPE model, C++) and Hugging Face tokenizers (its BPE trainer, Rust).

For each number of merges: the seconds to learn them from the training text (both
columns, a joint vocabulary, starting from the lines in memory), the seconds to apply
them to that whole text, and the tokens per sentence on the held-out test text. Ours
and subword-nmt's are measured in turn, so that a busy machine slows both alike, and
their merges and applied text are checked to be identical. sentencepiece and tokenizers
get the same vocabulary size (specials + initial symbols + merges) and one thread each;
they split whitespace their own way (sentencepiece keeps a "▁" on each word, tokenizers
splits at every whitespace), so their tokens per sentence differ a little.

The default corpus is numbers-en-de: of the offline tasks it has by far the most distinct
words (learning time grows with them, not with the running text; the dates have the most
running text but a few hundred distinct words), and it is the only one on which thousands
of merges exist. Even there, at min_frequency 2 learning stops after a few hundred merges
(German number words, each seen once, are all made of a few dozen pieces), so the default
is min_frequency 1, which merges on until every word is one symbol. ``--task all`` takes
the seven tasks' training text together. The table says how many merges were learned.

    python benchmarks/bench_bpe.py                                  # numbers-en-de, 1k 2k 4k 8k merges
    python benchmarks/bench_bpe.py --merges 1000 8000 --repeats 3
    python benchmarks/bench_bpe.py --task all --min-frequency 2 --merges 1000 4000

A benchmark, not a test: it prints figures and asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from functools import partial

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--task", default="numbers-en-de", help="a translation task's name, or 'all'")
    p.add_argument("--merges", type=int, nargs="+", default=[1000, 2000, 4000, 8000])
    p.add_argument("--min-frequency", type=int, default=1)
    p.add_argument("--repeats", type=int, default=1, help="timed runs of each measurement; the fastest counts")
    p.add_argument("--threads", type=int, default=1, help="threads for sentencepiece and tokenizers")
    return p.parse_args(argv)


def optional(module: str, why: str):
    """The module, or None after saying that it is missing and what is skipped."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        print(f"note: {module} is not installed, so {why} is skipped (pip install -e '.[dev]' installs it)")
        return None


def machine_line() -> str:
    from minitransformer import machine
    return f"{time.strftime('%Y-%m-%d %H:%M')} | {machine.machine_summary()}"


def corpus(task: str) -> tuple[list[str], list[str]]:
    """(training lines, held-out test lines): the source and target columns of the task(s)."""
    from minitransformer.data.translation import TASKS, load_splits

    names = list(TASKS) if task == "all" else [task]
    train, test = [], []
    for name in names:
        splits = load_splits(name, seed=0)
        train += [side for pair in splits["train"] for side in pair]
        test += [side for pair in splits["test"] for side in pair]
    return train, test


def fastest(repeats: int, job):
    """(seconds of the fastest of ``repeats`` runs of job(), the last run's result)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = job()
        best = min(best, time.perf_counter() - t0)
    return best, result


def in_turn(repeats: int, ours, theirs):
    """``fastest`` of two jobs run alternately (ours, theirs, ours, ...): a load that comes
    and goes meanwhile slows both. Returns ((seconds, result) of ours, the same of theirs)."""
    runs = [fastest(1, job) for _ in range(repeats) for job in (ours, theirs)]
    return (min(t for t, _ in runs[0::2]), runs[-2][1]), (min(t for t, _ in runs[1::2]), runs[-1][1])


# -- the four implementations: learn(lines, merges, vocab_size) -> model; apply(model, lines) -> token lists

def ours_learn(lines, num_merges, min_frequency):
    from minitransformer.data.bpe import BPE
    return BPE.learn(lines, num_merges, min_frequency)


def ours_apply(bpe, lines):
    from minitransformer.data.bpe import BPE
    fresh = BPE(bpe.merges)                  # an empty cache of segmented words, like the reference's
    return [fresh.apply(line) for line in lines]


def reference_learn(lines, num_merges, min_frequency):
    from subword_nmt.learn_bpe import learn_bpe
    codes = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):
        learn_bpe(io.StringIO("".join(line + "\n" for line in lines)), codes, num_merges, min_frequency)
    return codes.getvalue()


def reference_apply(codes, lines):
    from subword_nmt.apply_bpe import BPE
    bpe = BPE(io.StringIO(codes))
    return [bpe.process_line(line) for line in lines]


def sentencepiece_learn(spm, lines, vocab_size, threads):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
                                   model_type="bpe", character_coverage=1.0, hard_vocab_limit=False,
                                   num_threads=threads, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def tokenizers_learn(tk, lines, vocab_size, min_frequency):
    from minitransformer.data.vocab import SPECIALS
    tokenizer = tk.Tokenizer(tk.models.BPE(end_of_word_suffix="</w>"))
    tokenizer.pre_tokenizer = tk.pre_tokenizers.WhitespaceSplit()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                     end_of_word_suffix="</w>", special_tokens=list(SPECIALS))
    tokenizer.train_from_iterator(lines, trainer)
    return tokenizer


def measure(args, n: int, train: list[str], test: list[str], reference, spm, tk) -> dict:
    """One row of the tables: every library learning ``n`` merges and applying them."""
    from minitransformer.data.bpe import detokenize

    learn = partial(ours_learn, train, n, args.min_frequency)
    if reference is not None:
        (t_ours, bpe), (t_ref, codes) = in_turn(args.repeats, learn,
                                                partial(reference_learn, train, n, args.min_frequency))
        (ta_ours, applied), (ta_ref, applied_ref) = in_turn(args.repeats, partial(ours_apply, bpe, train),
                                                            partial(reference_apply, codes, train))
    else:
        t_ours, bpe = fastest(args.repeats, learn)
        ta_ours, applied = fastest(args.repeats, partial(ours_apply, bpe, train))
    vocab_size = len(bpe.vocabulary()) + 4
    row = {"merges": len(bpe.merges), "asked": n, "vocab": vocab_size, "learn_ours": t_ours, "apply_ours": ta_ours,
           "tokens_ours": sum(len(bpe.tokens(line)) for line in test) / len(test)}
    assert all(detokenize(bpe.tokens(line)) == line for line in test), "the round trip failed"
    if reference is not None:
        same = codes.splitlines()[1:] == [f"{a} {b}" for a, b in bpe.merges]
        row.update(learn_ref=t_ref, apply_ref=ta_ref, same=same and applied_ref == applied)
    if spm is not None:
        row["learn_sp"], sp = fastest(args.repeats, partial(sentencepiece_learn, spm, train, vocab_size, args.threads))
        row["apply_sp"], _ = fastest(args.repeats, partial(sp.encode, train, out_type=str))
        row["tokens_sp"] = sum(len(t) for t in sp.encode(test, out_type=str)) / len(test)
    if tk is not None:
        row["learn_hf"], hf = fastest(args.repeats, partial(tokenizers_learn, tk, train, vocab_size,
                                                            args.min_frequency))
        row["apply_hf"], _ = fastest(args.repeats, partial(hf.encode_batch, train))
        row["tokens_hf"] = sum(len(e.tokens) for e in hf.encode_batch(test)) / len(test)
    print(f"  {n} merges done", file=sys.stderr, flush=True)
    return row


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")            # subword-nmt draws a progress bar otherwise
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)   # tokenizers' thread pool, read when it starts
    from minitransformer.data.bpe import word_counts

    reference = optional("subword_nmt.learn_bpe", "subword-nmt (the reference)")
    spm = optional("sentencepiece", "sentencepiece")
    tk = optional("tokenizers", "Hugging Face tokenizers")

    train, test = corpus(args.task)
    counts = word_counts(train)
    print(machine_line())
    print(f"corpus: {args.task} training text, both columns: {len(train):,} lines, "
          f"{sum(map(len, train)):,} characters, {len(counts):,} distinct words "
          f"({sum(map(len, counts)):,} characters); held out: {len(test):,} lines; "
          f"min_frequency {args.min_frequency}; best of {args.repeats}; sentencepiece/tokenizers on "
          f"{args.threads} thread(s)")

    rows = []
    for n in args.merges:
        rows.append(measure(args, n, train, test, reference, spm, tk))

    def cell(row, key, fmt="{:.2f}"):
        return fmt.format(row[key]) if key in row else "-"

    print()
    print("learning (seconds; the ratio is subword-nmt's time / ours)")
    print(f"{'merges':>7} {'vocab':>6} {'ours':>7} {'subword-nmt':>12} {'ratio':>6} {'same merges':>12} "
          f"{'sentencepiece':>14} {'tokenizers':>11}")
    for r in rows:
        ratio = f"{r['learn_ref'] / r['learn_ours']:.1f}x" if "learn_ref" in r else "-"
        merges = f"{r['merges']}" + ("" if r["merges"] == r["asked"] else f" of {r['asked']}")
        print(f"{merges:>7} {r['vocab']:>6} {r['learn_ours']:>7.2f} {cell(r, 'learn_ref'):>12} {ratio:>6} "
              f"{('yes' if r['same'] else 'NO') if 'same' in r else '-':>12} {cell(r, 'learn_sp'):>14} "
              f"{cell(r, 'learn_hf'):>11}")
    print()
    print(f"applying to the {len(train):,} training lines (seconds; the ratio is our time / subword-nmt's), "
          f"and tokens per held-out sentence")
    print(f"{'merges':>7} {'ours':>7} {'subword-nmt':>12} {'ratio':>6} {'sentencepiece':>14} {'tokenizers':>11}"
          f" | {'tokens: ours=subword-nmt':>24} {'sentencepiece':>14} {'tokenizers':>11}")
    for r in rows:
        ratio = f"{r['apply_ours'] / r['apply_ref']:.2f}x" if "apply_ref" in r else "-"
        print(f"{r['merges']:>7} {r['apply_ours']:>7.2f} {cell(r, 'apply_ref'):>12} {ratio:>6} "
              f"{cell(r, 'apply_sp'):>14} {cell(r, 'apply_hf'):>11} | {r['tokens_ours']:>24.2f} "
              f"{cell(r, 'tokens_sp'):>14} {cell(r, 'tokens_hf'):>11}")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
