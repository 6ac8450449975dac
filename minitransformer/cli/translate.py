"""``translate``: sentences in, one output line per input line, with a trained checkpoint."""

from __future__ import annotations

import argparse
import sys
import textwrap
from dataclasses import dataclass

from .common import CliError, about, add_common, check_output_dir, load_checkpoint, memory_for, quiet_numpy, set_backend
from .scoring import (
    check_decoding_fits,
    check_levels,
    check_source_lengths,
    checkpoint_tokenization,
    warn_unknown_tokens,
)
from .strategies import DecoderChoice, add_strategy_options


@dataclass(frozen=True)
class TranslateRequest:
    text: tuple[str, ...]            # sentences given as arguments; empty: read standard input
    checkpoint: str
    decoder: DecoderChoice
    level: str | None = None
    attention: str | None = None     # a folder for the first sentence's heatmaps
    backend: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TranslateRequest:
        return cls(tuple(args.text), args.checkpoint, DecoderChoice.from_args(args), args.level, args.attention,
                   args.backend)


def _phrasings() -> str:
    """What each task's model was trained to read, for the help text (from the task registry)."""
    from ..data.registry import TASKS  # noqa: PLC0415

    groups: dict[str, list[str]] = {}
    for name, task in TASKS.items():
        if task.phrasing:
            groups.setdefault(task.phrasing, []).append(name)
    lines = [textwrap.fill(f"{', '.join(names)}: {phrasing}", 79, initial_indent="  ", subsequent_indent="    ")
             for phrasing, names in groups.items()]
    return "What the model of each task was trained to read:\n" + "\n".join(lines)


def register(sub) -> None:
    p = sub.add_parser("translate", help="translate sentences with a trained checkpoint",
                       formatter_class=argparse.RawDescriptionHelpFormatter, description=textwrap.fill(
                                   "Translate sentences, one output line per input. An empty sentence is an "
                                   "error (it has nothing to translate). Words are split from punctuation as in "
                                   "training (level word: 'March 5, 2024' is March|5|,|2024). If every source the "
                                   "model was trained on is lower-case (the numbers tasks, for one), the input is "
                                   "lower-cased first, with a note; words still unknown after that are named in a "
                                   "warning, with their sentence. A numbers or dates model refuses, by name, a "
                                   "sentence in a form it was not trained on (digits, '25th of December') and "
                                   "says which form it knows.", 79),
                       epilog=_phrasings())
    p.add_argument("text", nargs="*", help="sentences (default: read lines from standard input)")
    p.add_argument("--checkpoint", required=True, help="a checkpoint.npz written by train")
    add_strategy_options(p)
    p.add_argument("--level", choices=["char", "word", "space"],
                   help="source tokenization (default: the checkpoint's)")
    p.add_argument("--attention", metavar="OUT_DIR",
                   help="also save attention heatmaps (every layer and head) for the first sentence")
    add_common(p)
    p.set_defaults(handler=lambda args: run(TranslateRequest.from_args(args)))


def stdin_lines() -> list[str]:
    """The lines of standard input, split on "\\n" only (a trailing "\\r" of Windows line ends dropped).

    ``str.splitlines`` would also split on "\\v", "\\f", "\\x1c"-"\\x1e", "\\x85",
    U+2028, U+2029 and a lone "\\r": one input line could then give two output lines,
    and every later output would be misaligned with its input. Bytes that are not
    valid in the stream's encoding are an error naming the line.
    """
    stream = sys.stdin
    if stream is None:
        return []
    buffer = getattr(stream, "buffer", None)
    if buffer is None:                       # a text stream without bytes underneath (a test's StringIO)
        text = stream.read()
    else:
        data = buffer.read()
        encoding, errors = stream.encoding or "utf-8", stream.errors or "strict"
        try:
            text = data.decode(encoding, errors)
        except UnicodeDecodeError as exc:
            line_start = data.rfind(b"\n", 0, exc.start) + 1
            lineno = data.count(b"\n", 0, exc.start) + 1
            raise CliError(f"not valid {encoding} text ({exc.reason} at byte {exc.start - line_start + 1} of the "
                           "line)", f"standard input, line {lineno}") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()                          # the newline that ends the last line starts no new one
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_sentences(text: tuple[str, ...]) -> list[tuple[str, str]]:
    """(sentence, where it came from) for each input; an empty one is an error naming it.

    The rule: every input line gets exactly one output line, so an empty or
    whitespace-only sentence (which has nothing to translate) is refused
    rather than skipped or given a made-up translation.
    """
    if text:
        sentences = [(t, f"argument {i}") for i, t in enumerate(text, start=1)]
    else:
        sentences = [(line, f"standard input, line {i}") for i, line in enumerate(stdin_lines(), start=1)]
        if not sentences:
            raise CliError("no sentences: give them as arguments or on standard input", "standard input")
    for t, where in sentences:
        if not t.strip():
            raise CliError("the sentence is empty; there is nothing to translate", where)
    return sentences


def _tokenized(ckpt, sentences, src_level: str, bpe) -> list[list[str]]:
    """The sentences as the model's source tokens (lower-cased first if it saw lower-case sources only)."""
    from ..data.vocab import tokenize  # noqa: PLC0415

    if ckpt.extra.get("levels", {}).get("src_lowercase"):
        # The model never saw a capital letter in a source: "Four Thousand" would be two unknown words.
        lowered = [(t.lower(), where) for t, where in sentences]
        if lowered != sentences:
            print("note: the input was lower-cased: this model was trained on lower-case sources only",
                  file=sys.stderr)
        sentences = lowered
    sources = []
    for t, where in sentences:
        if bpe is not None:
            t = " ".join(t.split())        # words, as at word level: runs of whitespace separate them
        with about(where):
            sources.append(tokenize(t, src_level, bpe))
    return sources


def run(req: TranslateRequest) -> int:
    from ..data.registry import saved_task  # noqa: PLC0415
    from ..data.vocab import detokenize  # noqa: PLC0415
    from ..translate import translate_tokens  # noqa: PLC0415

    set_backend(req.backend)
    strategy = req.decoder.strategy()
    if req.attention is not None:
        if not req.attention.strip():
            raise CliError("the folder for the heatmaps is empty; name a folder, or leave --attention out",
                           "--attention")
        check_output_dir(req.attention, "--attention")
    sentences = read_sentences(req.text)
    with memory_for("loading the checkpoint", f"--checkpoint {req.checkpoint}"):
        ckpt = load_checkpoint(req.checkpoint, "--checkpoint")
    src_level, tgt_level, bpe = checkpoint_tokenization(ckpt, req.level)
    if req.level is not None:
        check_levels(ckpt, req.level, None, f"--level {req.level}")
    model = ckpt.model.eval()
    sources = _tokenized(ckpt, sentences, src_level, bpe)
    check_source_lengths(model, sources, src_level, lambda i: sentences[i][1], "sentence")
    entry = saved_task(ckpt.extra)
    if entry is not None and entry.check_input is not None:
        for (_, where), src in zip(sentences, sources):      # a form the model never saw gets an invented answer
            problem = entry.check_input(detokenize(src, src_level))
            if problem is not None:
                raise CliError(problem, where)
    warn_unknown_tokens(ckpt.vocab, sources, bpe=bpe is not None,
                        name=lambda i: f"{sentences[i][1]} ({sentences[i][0]!r})")
    # A task whose outputs mean more than text (a parser's trees) prints them its own way.
    max_len = entry.max_output_len if entry is not None else None
    check_decoding_fits(model, sources, [strategy], req.decoder.option, max_len=max_len)
    with quiet_numpy(), memory_for(f"translating {len(sources)} sentence(s)", req.decoder.option,
                                   "a smaller --beam, or fewer sentences at a time"):
        for src, hyp in zip(sources, translate_tokens(model, ckpt.vocab, sources, strategy, max_len=max_len)):
            output = detokenize(hyp, tgt_level)
            print(entry.render(detokenize(src, src_level), output) if entry is not None and entry.render
                  else output)
        if req.attention is not None:
            from ..translate import save_attention_maps  # noqa: PLC0415
            paths = save_attention_maps(model, ckpt.vocab, sources[0], req.attention, src_level, tgt_level,
                                        strategy=strategy)
            print(f"wrote {len(paths)} attention heatmaps to {req.attention}", file=sys.stderr)
    return 0
