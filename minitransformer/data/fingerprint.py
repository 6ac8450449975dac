"""Fingerprints of a task's data: what a checkpoint was trained on, checked on resume and evaluate.

A run saves two digests in its checkpoint (``extra["data"]``):

    corpus   SHA-256 of every distinct (source, target) pair of the task, in sorted
             order: the same pairs give the same digest, whatever the order of
             the lines of the file they came from
    split    SHA-256 of which pairs are in train, in valid and in test

and the sizes of the three splits; a byte-pair encoded task adds

    merges   SHA-256 of the merges that made its tokens (``merges_digest``), so a
             checkpoint whose stored merges were changed says so at load, instead
             of tokenizing the same text otherwise and blaming the data on resume.
 The split of a ``--data`` file is drawn from
its distinct sources in the order they first appear, so an edited, reordered or
re-seeded file splits differently: pairs that were trained on would then be in
the "held-out" test set. Comparing the digests catches that (``compare``): the
same corpus split differently, or another corpus altogether.

``since_step``: the first step trained on this data as far as the checkpoint
can prove. A run resumed from a checkpoint that predates fingerprints records
the step it resumed at; its test set is then not known to be held out, and the
final report says so instead of "never used in training".
"""

from __future__ import annotations

import hashlib
import json

SPLIT_NAMES = ("train", "valid", "test")


def _pair_lines(pairs) -> set[str]:
    """One canonical text line per distinct pair: the repr of a tuple of two tuples of strings,
    which no other pair shares (repr quotes and escapes every token)."""
    return {repr((tuple(src), tuple(tgt))) for src, tgt in pairs}


def _digest_lines(lines: set[str]) -> str:
    h = hashlib.sha256()
    for line in sorted(lines):
        h.update(line.encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return h.hexdigest()


def digest(pairs) -> str:
    """SHA-256 (hex) of the set of (source tokens, target tokens) pairs; the order does not matter."""
    return _digest_lines(_pair_lines(pairs))


def merges_digest(bpe: dict) -> str:
    """SHA-256 (hex) of byte-pair merges in their saved form (``BPE.to_dict()``: merges and symbols, in order)."""
    return hashlib.sha256(json.dumps(bpe, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
                          ).hexdigest()


def fingerprint(name: str, train, valid, test, bpe: dict | None = None) -> dict:
    """The fingerprint of a task's three splits (lists of token pairs): a JSON-ready dict. ``bpe``: the
    merges that made the tokens (``BPE.to_dict()``), if byte-pair encoded; their digest is kept too."""
    lines = {"train": _pair_lines(train), "valid": _pair_lines(valid), "test": _pair_lines(test)}
    parts = {split: _digest_lines(split_lines) for split, split_lines in lines.items()}
    split = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    fp = {"task": name, "corpus": _digest_lines(set().union(*lines.values())), "split": split,
          "sizes": [len(train), len(valid), len(test)], "since_step": 0}
    if bpe is not None:
        fp["merges"] = merges_digest(bpe)
    return fp


def check(saved) -> str | None:
    """What is wrong with a fingerprint read from a checkpoint, or None if it is well formed."""
    if not isinstance(saved, dict):
        return f"must be an object, got {type(saved).__name__}"
    for key in ("task", "corpus", "split"):
        if not isinstance(saved.get(key), str):
            return f"field {key!r} must be a string, got {saved.get(key)!r}"
    if "merges" in saved and not isinstance(saved["merges"], str):
        return f"field 'merges' must be a string, got {saved['merges']!r}"
    sizes = saved.get("sizes")
    if not (isinstance(sizes, list) and len(sizes) == 3
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sizes)):
        return f"field 'sizes' must be three counts, got {sizes!r}"
    since = saved.get("since_step", 0)
    if not (isinstance(since, int) and not isinstance(since, bool) and since >= 0):
        return f"field 'since_step' must be an integer ≥ 0, got {since!r}"
    return None


def _sizes(fp: dict) -> str:
    return "{:,} train / {:,} valid / {:,} test pairs".format(*fp["sizes"])


def describe(fp: dict) -> str:
    """"1,000 train / 100 valid / 100 test pairs of 'copy'": the data a fingerprint stands for, in words."""
    return f"{_sizes(fp)} of {fp['task']!r}"


def compare(saved: dict, now: dict) -> str | None:
    """None if ``now`` is the data ``saved`` describes; else a sentence saying how it differs."""
    if "merges" in saved and "merges" in now and saved["merges"] != now["merges"]:
        return ("the byte-pair merges differ from those the checkpoint was trained with (the text may be the "
                "same; its pieces are not)")
    if saved["corpus"] != now["corpus"]:
        return (f"the data differs from what the checkpoint was trained on (then: {describe(saved)}; "
                f"now: {describe(now)})")
    if saved["split"] != now["split"]:
        return ("the same pairs are split differently into train / valid / test than when the checkpoint was "
                "trained (the lines of the file were reordered, or another seed was given), so pairs it trained "
                "on would be scored as held out")
    return None


class DataMismatchError(ValueError):
    """A run would resume on other data than its checkpoint was trained on, or on the same data split
    differently (so pairs it trained on would be scored as held out)."""


def for_resume(saved: dict | None, now: dict, step: int, where: str = "the checkpoint") -> dict:
    """The fingerprint a run resumed at ``step`` carries on with, given the checkpoint's (``saved``)
    and the data's now (``now``).

    The data's, if it is the data the checkpoint records; else DataMismatchError
    (``where`` names the checkpoint). A checkpoint from before fingerprints
    (``saved`` None) cannot prove what it trained on: the result has
    ``since_step`` = ``step``.
    """
    if saved is None:
        return {**now, "since_step": step}
    difference = compare(saved, now)
    if difference is not None:
        raise DataMismatchError(f"{where}: cannot resume: {difference}; resume with the data it was trained on, "
                                "or start a new run (another --out) to train on this data")
    return {**now, "since_step": saved.get("since_step", 0)}


def proves_held_out(fp: dict | None) -> bool:
    """True when a run's fingerprint proves its test split was never trained on: every step, back
    to step 0, trained on exactly this split."""
    return fp is not None and fp.get("since_step", 0) == 0


__all__ = ["digest", "fingerprint", "merges_digest", "check", "describe", "compare", "for_resume", "proves_held_out",
           "DataMismatchError", "SPLIT_NAMES"]
