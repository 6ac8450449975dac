"""``bpe learn`` and ``bpe apply``: byte-pair encoding (§5.1) in subword-nmt 0.3.8's format."""

from __future__ import annotations

import argparse
import io
import sys
import time
from dataclasses import dataclass

from .common import CliError, Parser, about, add_common, add_parents_option, check_output_file, positive_int


@dataclass(frozen=True)
class LearnRequest:
    files: tuple[str, ...]
    merges: int
    min_frequency: int
    output: str
    parents: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LearnRequest:
        return cls(tuple(args.files), args.merges, args.min_frequency, args.output, args.parents)


@dataclass(frozen=True)
class ApplyRequest:
    codes: str

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ApplyRequest:
        return cls(args.codes)


def register(sub) -> None:
    p = sub.add_parser("bpe", help="learn byte-pair merges from text files, or apply them (subword-nmt's format)",
                       description="Byte-pair encoding (§5.1; Sennrich et al. 2016), compatible with subword-nmt "
                                   "0.3.8: `bpe learn` writes a codes file that `subword-nmt apply-bpe -c` reads, "
                                   "and `bpe apply` writes what `subword-nmt apply-bpe` writes.")
    bpe_commands = p.add_subparsers(dest="bpe_command", required=True, parser_class=Parser)
    q = bpe_commands.add_parser("learn", help="learn merges from text files (a .tsv file's two columns both count)",
                                description="Learn byte-pair merges from the words of FILEs: a .tsv file gives "
                                            "both its columns (one joint vocabulary for source and target, as in "
                                            "§5.1), any other file is plain text, one sentence a line. Writes a "
                                            "codes file: '#version: 0.2', then one merge a line.")
    q.add_argument("files", nargs="+", metavar="FILE", help="text files, or .tsv files of source<TAB>target lines")
    q.add_argument("--merges", type=positive_int, required=True, metavar="N", help="the number of merges to learn")
    q.add_argument("--min-frequency", type=positive_int, default=2, metavar="F",
                   help="stop when no pair of symbols occurs F times or more (default 2, as subword-nmt)")
    q.add_argument("-o", "--output", required=True, metavar="CODES", help="the codes file to write")
    add_parents_option(q)
    add_common(q, backend_option=False)
    q.set_defaults(handler=lambda args: learn(LearnRequest.from_args(args)))
    q = bpe_commands.add_parser("apply", help="apply merges to standard input, line by line",
                                description="Read standard input, write each line as byte-pair pieces, '@@' "
                                            "ending every piece but a word's last (as subword-nmt apply-bpe); one "
                                            "output line per input line. Deleting every '@@ ' gives the text back.")
    q.add_argument("--codes", required=True, metavar="CODES", help="a codes file (from `bpe learn` or subword-nmt)")
    add_common(q, backend_option=False)
    q.set_defaults(handler=lambda args: apply(ApplyRequest.from_args(args)))


def stdin_lines():
    """(line number, text) of each line of standard input, its newline kept if it has one, decoded as UTF-8,
    read with the limits of every reader (files.bounded_lines): an undecodable line, or one over a limit,
    is an error naming it."""
    from ..files import InputLimitError, bounded_lines  # noqa: PLC0415

    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:                          # a text stream without bytes underneath (a test's StringIO)
        buffer = io.BytesIO(sys.stdin.read().encode("utf-8", "surrogateescape"))
    try:
        for lineno, raw in bounded_lines(buffer, "standard input", "text, one sentence a line"):
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CliError(f"not valid UTF-8 text ({exc.reason})", f"standard input, line {lineno}") from None
    except InputLimitError as exc:
        raise CliError(exc.problem, f"standard input, line {exc.lineno}") from None


def learn(req: LearnRequest) -> int:
    from ..data.bpe import BPE, read_corpus, write_codes  # noqa: PLC0415

    check_output_file(req.output, "--output", [("a file to learn from", f) for f in req.files], req.parents)
    with about(" ".join(req.files)):
        counts = read_corpus(list(req.files))
    if not counts:
        raise CliError("the files hold no words to learn from", " ".join(req.files))
    t0 = time.perf_counter()
    bpe = BPE.learn(counts, req.merges, req.min_frequency)
    seconds = time.perf_counter() - t0
    with about(f"--output {req.output}"):
        write_codes(req.output, bpe.merges)
    stopped = "" if len(bpe.merges) == req.merges else (
        f" (stopped early: no pair of symbols occurs {req.min_frequency} times or more)")
    print(f"learned {len(bpe.merges)} merges{stopped} from {sum(counts.values()):,} words ({len(counts):,} distinct, "
          f"{len(bpe.symbols)} initial symbols) in {seconds:.1f}s; vocabulary {len(bpe.vocabulary()):,} pieces; "
          f"wrote {req.output}", file=sys.stderr)
    return 0


def apply(req: ApplyRequest) -> int:
    from ..data.bpe import BPE, read_codes  # noqa: PLC0415

    with about(f"--codes {req.codes}"):
        bpe = BPE(read_codes(req.codes))
    # One output line per input line: split on "\n" only (str.splitlines would also split on
    # "\r", "\x0b", "\u2028" ...), and each line keeps its own ending, as subword-nmt's does.
    # Nothing is written unless every line can be (a bad line stops the command with no output).
    out = []
    for lineno, line in stdin_lines():
        text = line.removesuffix("\n")
        with about(f"standard input, line {lineno}"):
            out.append(bpe.apply(text) + line[len(text):])
    sys.stdout.write("".join(out))
    return 0
