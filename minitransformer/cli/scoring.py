"""What translate, evaluate and the end of train share: a checkpoint's tokenization, the checks
before decoding (levels, lengths, unknown tokens, memory), and the report of a decoded test set."""

from __future__ import annotations

import sys

from .common import CliError


def checkpoint_tokenization(ckpt, level_option: str | None):
    """(source level, target level, BPE merges or None) that the checkpoint's model was trained with.
    ``--level`` may change a char/word source's level, never that of a byte-pair encoded model."""
    from ..data.loading import bpe_of  # noqa: PLC0415

    levels = ckpt.extra.get("levels", {})
    bpe = bpe_of(levels)                                   # checked when the checkpoint was loaded
    if bpe is not None and level_option is not None:
        raise CliError(f"the checkpoint's model reads byte-pair pieces (its {len(bpe.merges)} merges are saved in "
                       "it); leave --level out", f"--level {level_option}")
    src_level = level_option or levels.get("src", "word")
    return src_level, levels.get("tgt", src_level), bpe


def lowercase(tokens: list[str], level: str, bpe) -> list[str]:
    """A tokenized source, lower-cased. Byte-pair pieces are made again from the lower-cased text:
    the pieces of "Four" lower-cased need not be the pieces of "four"."""
    from ..data.vocab import detokenize, tokenize  # noqa: PLC0415

    if bpe is None:
        return [token.lower() for token in tokens]
    return tokenize(detokenize(tokens, level).lower(), level, bpe)


# translate and evaluate name at most this many sentences with unknown tokens, then count the rest.
MAX_SENTENCES_NAMED = 5


def warn_unknown_tokens(vocab, sources, targets=(), bpe: bool = False, name=None) -> None:
    """The warning ``translate`` and ``evaluate`` give for tokens the model has never seen: one line
    per sentence that has some, naming it (``name(i)``: sentence i, default "sentence i + 1"), up to
    ``MAX_SENTENCES_NAMED``, then a count of the others."""
    name = name or (lambda i: f"sentence {i + 1}")
    # A byte-pair piece is missing only when it holds a character never seen in training (no merge
    # has it), or one seen only at the end of words and now inside one ("x" known, "x@@" not).
    why = "; each holds a character never seen in training at that place in a word" if bpe else ""
    with_unknown = [(i, sorted({t for t in src if t not in vocab})) for i, src in enumerate(sources)]
    with_unknown = [(i, unknown) for i, unknown in with_unknown if unknown]
    for i, unknown in with_unknown[:MAX_SENTENCES_NAMED]:
        print(f"warning: {name(i)}: tokens not in the vocabulary (read as <unk>): {unknown[:10]}{why}",
              file=sys.stderr)
    if len(with_unknown) > MAX_SENTENCES_NAMED:
        rest = with_unknown[MAX_SENTENCES_NAMED:]
        distinct = sorted({t for _, unknown in rest for t in unknown})
        print(f"warning: {len(rest):,} more sentences have tokens not in the vocabulary (read as <unk>), "
              f"{len(distinct):,} distinct: {distinct[:10]}", file=sys.stderr)
    unreachable = sorted({t for tgt in targets for t in tgt if t not in vocab})
    if unreachable:
        print(f"warning: reference tokens not in the vocabulary (the model can never produce them): "
              f"{unreachable[:10]}", file=sys.stderr)


def check_levels(ckpt, src_level: str, tgt_level: str | None, which: str) -> None:
    """Refuse to feed a model tokens of another level than it was trained on: a char-level model
    scored on word-level data (or the other way round) gives 0% with no hint why."""
    levels = ckpt.extra.get("levels", {})
    for side, level in (("source", src_level), ("target", tgt_level)):
        saved = levels.get("src" if side == "source" else "tgt")
        if level is not None and saved is not None and level != saved:
            raise CliError(f"level mismatch: the checkpoint's model was trained on {saved}-level {side}s, not "
                           f"{level}-level ones", which)


def check_source_lengths(model, sources, level: str, where, noun: str = "source") -> None:
    """Every source fits the model's positions (with its <eos>); ``where(i)`` names sentence i."""
    for i, src in enumerate(sources):
        if len(src) + 1 > model.cfg.max_len:
            raise CliError(f"the {noun} has {len(src)} {level} tokens; with <eos> that is more than the model's "
                           f"max_len of {model.cfg.max_len} positions", where(i))


def check_decoding_fits(model, sources, strategies, which: str, when: str = "", max_len: int | None = None) -> None:
    """Refuse, before decoding starts (for ``train``: before the first step), strategies whose
    decoding cannot fit in memory (``translate.decoding_bytes``); ``which`` names the option;
    ``max_len``: the task's longest output (``loading.Task.max_output_len``), if it has one."""
    from .. import backend  # noqa: PLC0415
    from ..model import count_parameters  # noqa: PLC0415
    from ..translate import decoding_bytes  # noqa: PLC0415

    limit = backend.memory_limit(model.xp)
    if limit is None or not sources:
        return
    longest = max(len(src) for src in sources)
    # The model itself holds its parameters, their gradients and Adam's two moments.
    available = limit - 4 * count_parameters(model.cfg) * model.E.data.dtype.itemsize
    for strategy in strategies:
        needed = decoding_bytes(model, len(sources), longest, strategy, max_len=max_len)
        if needed > available:
            raise CliError(f"decoding {len(sources):,} sentences with {strategy}{when} would need about "
                           f"{backend.format_bytes(needed)} of memory, more than the "
                           f"{backend.format_bytes(max(available, 0))} this machine has beside the model; choose a "
                           "smaller beam", which, 2)


def report(model, task, vocab, pairs, strategies, n_samples=5, stream=None) -> dict:
    """Decode ``pairs`` (token lists) with each strategy, print samples and scores; return the scores.

    A task with its own hooks (``loading.Task``: render, scores, max_output_len)
    prints its samples through ``render`` and its own scores instead of BLEU and chrF.
    """
    from ..translate import score_translations  # noqa: PLC0415

    stream = stream or sys.stdout   # looked up now: a default of sys.stdout would miss redirections
    entry = task.entry
    results, explained = {}, False
    for i, strategy in enumerate(strategies):
        r = score_translations(model, vocab, pairs, task.tgt_level, task.bleu_tokenize, strategy=strategy,
                               max_len=entry.max_output_len if entry is not None else None,
                               scores=entry.scores if entry is not None else None, src_level=task.src_level)
        name = str(strategy)
        if i == 0 and n_samples > 0:
            _print_samples(task, pairs, r, n_samples, stream)
        results[name] = {k: r[k] for k in ("exact_match", "bleu", "chrf", "seconds")}
        if "scores" in r:
            results[name]["scores"] = r["scores"]
            shown = ", ".join(f"{label} {value:.2f}" for label, value in r["scores"].items())
            print(f"{name:>7}: {shown} ({len(pairs)} sentences)  [{r['seconds']:.1f}s]", file=stream)
        else:
            print(f"{name:>7}: exact match {100 * r['exact_match']:.2f}% ({len(pairs)} sentences), "
                  f"BLEU {r['bleu']:.2f}, chrF {r['chrf']:.2f}  [{r['seconds']:.1f}s]", file=stream)
            why = None if explained else why_bleu_is_zero(r["bleu_stats"], task.bleu_tokenize)
            if why:
                print(f"         ({why})", file=stream)
                explained = True
    return results


def why_bleu_is_zero(bleu, tokenize: str) -> str | None:
    """Why a BLEU of 0 is no verdict on the outputs, when it is because they are too short to
    have n-grams of BLEU's highest order (metrics.BleuScore's totals); None otherwise."""
    if bleu.score != 0 or not bleu.totals or bleu.totals[0] == 0 or bleu.totals[-1] != 0:
        return None
    order = len(bleu.totals)
    longest = bleu.totals.index(0)          # no output has this many tokens: the longest has fewer
    return (f"BLEU is 0 because no output has {order} tokens ({tokenize} tokenizer; the longest has {longest}): "
            f"BLEU multiplies the precisions of 1- to {order}-grams, and with no {order}-gram the product is 0. "
            "Exact match and chrF are the scores to read for sentences this short")


def _print_samples(task, pairs, r, n_samples: int, stream) -> None:
    """The first ``n_samples`` decodes of ``r`` (score_translations' result), each marked right or wrong."""
    from ..data.vocab import detokenize  # noqa: PLC0415

    entry = task.entry
    render = entry.render if entry is not None and entry.render is not None else None
    print("sample decodes:", file=stream)
    for (src, _), hyp, ref in list(zip(pairs, r["hyps"], r["refs"]))[:n_samples]:
        mark = "✓" if hyp == ref else "✗"
        text = detokenize(src, task.src_level)
        shown, expected = (render(text, hyp), render(text, ref)) if render else (hyp, ref)
        print(f"  {mark} {text!r} -> {shown!r}" + ("" if hyp == ref else f"  (expected {expected!r})"),
              file=stream)
