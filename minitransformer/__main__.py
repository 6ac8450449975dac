"""Command line: ``python -m minitransformer {train,translate,evaluate,bpe,average,tasks,grade} --help``.

Errors reach the user as one line, ``error: <what> (<which option, file or variable>)``,
with exit code 2 for bad input (options, files, data, environment variables) and 1
for failures at run time (a diverged run, a full disk). No traceback is printed
unless ``--debug`` is given or MINITRANSFORMER_DEBUG=1 is set. An interrupted
``train`` saves a checkpoint, prints how to resume, and exits with 128 + the
signal: 130 (Ctrl-C, SIGINT), 143 (SIGTERM), 129 (SIGHUP: the terminal was
closed). A standard output whose reader went away (``train … | head -3``) is
treated like SIGTERM: the step finishes, a checkpoint is saved, the messages go
to standard error, and the exit code is 141 (128 + SIGPIPE, what a shell shows
for a program a closed pipe stopped); ``translate`` and ``evaluate`` exit with
141 too, quietly. Characters the output's encoding cannot show are written as
backslash escapes (``\\u03b5``), with ``PYTHONIOENCODING=latin-1`` say.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import signal
import sys
import threading
import time
import traceback
import warnings
from contextlib import contextmanager

# Only the standard library and the version (minitransformer/__init__.py holds
# nothing else) at the top: the package's own modules are imported inside
# main(), so that a bad environment variable (read when backend.py is imported)
# is reported like every other error.
from . import __version__

DEBUG_VARIABLE = "MINITRANSFORMER_DEBUG"
_several_ranks = False          # set once MPI has started with more than one rank (train under mpiexec -n N)


# -- errors ----------------------------------------------------------------------------


class CliError(Exception):
    """An error to show as ``error: <what> (<which>)`` and exit with ``code``.

    Under ``mpiexec -n N`` every rank meets a CliError alike (the same options, files and
    parameters), so rank 0 alone prints it.
    """

    def __init__(self, what: str, which: str | None = None, code: int = 2):
        super().__init__(what)
        self.what, self.which, self.code = what, which, code

    def __str__(self) -> str:
        return f"{self.what} ({self.which})" if self.which else self.what


class _Terminated(BaseException):
    """SIGTERM or SIGHUP outside the training loop (which handles them itself): exit 128 + signal,
    without a traceback."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


# The exit code of a command whose standard output was closed before it finished: 128 + SIGPIPE.
OUTPUT_CLOSED = 141


def _message(exc: BaseException, which: str | None = None) -> str:
    """The readable part of an exception; a leading "<path>: " that ``which`` already names is dropped."""
    if isinstance(exc, OSError) and exc.strerror:         # "[Errno 28] ..." reads better without the number
        text = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    else:
        text = str(exc) or type(exc).__name__
    path = which.split(" ", 1)[-1] if which else None
    if path and text.startswith(f"{path}: "):
        text = text[len(path) + 2:]
    return text


BAD_INPUT = (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


@contextmanager
def _about(which: str):
    """Report a bad-input error raised inside the block as coming from ``which`` (an option and its value)."""
    try:
        yield
    except CliError:
        raise
    except BAD_INPUT as exc:
        raise CliError(_message(exc, which), which, 2) from exc


@contextmanager
def _memory_for(what: str, which: str | None, hint: str = ""):
    """An out-of-memory error inside the block, reported as ``out of memory <what>`` from ``which``
    (the option or file that asked for the memory), with ``hint`` (what to make smaller)."""
    try:
        yield
    except MemoryError as exc:
        raise CliError(f"out of memory {what}{'; ' + hint if hint else ''}", which, 1) from exc


@contextmanager
def _quiet_numpy():
    """No NumPy overflow / invalid-value warnings inside the block.

    A diverging step makes NumPy warn at each line it reaches; the package reports
    such a state once, by name (a skipped step names the tensor, decoding raises on
    NaN scores, a diverged checkpoint is refused at load), so the warnings only repeat
    it, in the middle of the output.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"(overflow|invalid value|divide by zero) encountered", RuntimeWarning)
        yield


def _check_output_dir(path: str, option: str) -> None:
    """``files.check_writable_dir`` for the folder an option names: a folder that is not one, or
    cannot be written (permissions, a read-only mount), is a usage error (2); a full disk is a
    run-time failure (1); both name the option."""
    from .files import check_writable_dir  # noqa: PLC0415

    which = f"{option} {path}"
    with _about(which):
        try:
            check_writable_dir(path)
        except OSError as exc:
            if isinstance(exc, BAD_INPUT):
                raise
            raise CliError(_message(exc, which), which, 1) from exc


def _debug_requested(argv: list[str]) -> bool:
    if "--debug" in argv:
        return True
    raw = os.environ.get(DEBUG_VARIABLE, "")
    value = raw.strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise CliError(f"environment variable {DEBUG_VARIABLE}={raw!r} is not valid: expected 1 or 0",
                   DEBUG_VARIABLE)


# -- option types: every number is checked by argparse, naming the option ---------------


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def positive_int(text: str) -> int:
    """An integer ≥ 1. (0 is never a stand-in for "the default": leave the option out for that.)"""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number ≥ 1, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number ≥ 0, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (no nan, no inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def probability(text: str) -> float:
    """A number p with 0 < p ≤ 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:            # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text}")
    return value


def beam_size(text: str) -> int:
    """A beam size: a whole number in 1..decoding.MAX_BEAM_SIZE (checked here, before anything runs)."""
    from .decoding import MAX_BEAM_SIZE  # noqa: PLC0415

    value = positive_int(text)
    if value > MAX_BEAM_SIZE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BEAM_SIZE} (§6.1 uses 4), got {text}")
    return value


def strategy_spec(text: str):
    """A decoding strategy by name: greedy, beam4, sample:temperature=0.7,top_k=10 (decoding.parse_strategy)."""
    from .decoding import parse_strategy  # noqa: PLC0415

    try:
        return parse_strategy(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors in the package's one format: ``error: <what> (<option>)``, exit 2."""

    def error(self, message: str):
        which = None
        if message.startswith("argument "):
            which, _, message = message[len("argument "):].partition(": ")
            which = which.split("/")[-1]                      # "-h/--help" -> "--help"
        raise CliError(message if which else f"{message}; see {self.prog} --help", which, 2)


# -- helpers -------------------------------------------------------------------------------


def _add_common(p: argparse.ArgumentParser, backend_option: bool = True) -> None:
    if backend_option:
        p.add_argument("--backend", choices=["numpy", "cupy"], default=None,
                       help="array library: numpy (CPU, default) or cupy (CUDA GPU); "
                            "also settable with MINITRANSFORMER_BACKEND")
    p.add_argument("--debug", action="store_true",
                   help=f"show the full traceback of an error (also: {DEBUG_VARIABLE}=1)")


def _set_backend(args) -> None:
    from . import backend  # noqa: PLC0415

    if args.backend:
        with _about(f"--backend {args.backend}"):
            try:
                backend.set_backend(args.backend)
            except RuntimeError as exc:
                raise CliError(str(exc), f"--backend {args.backend}") from None
    elif backend.backend_name() == "cupy" and not backend.cupy_available():
        raise CliError("the cupy backend was asked for, but CuPy cannot use a CUDA device here",
                       "MINITRANSFORMER_BACKEND")


def _load_checkpoint(path: str, option: str):
    from .checkpoint import load_checkpoint  # noqa: PLC0415

    with _about(f"{option} {path}"):
        return load_checkpoint(path)


def _warn_unknown_tokens(vocab, sources, targets=(), bpe: bool = False) -> None:
    """The warning ``translate`` and ``evaluate`` give for tokens the model has never seen."""
    unknown = sorted({t for src in sources for t in src if t not in vocab})
    if unknown:
        # A byte-pair piece is missing only when it holds a character never seen in training (no merge
        # has it), or one seen only at the end of words and now inside one ("x" known, "x@@" not).
        why = "; each holds a character never seen in training at that place in a word" if bpe else ""
        print(f"warning: tokens not in the vocabulary (read as <unk>): {unknown[:10]}{why}", file=sys.stderr)
    unreachable = sorted({t for tgt in targets for t in tgt if t not in vocab})
    if unreachable:
        print(f"warning: reference tokens not in the vocabulary (the model can never produce them): "
              f"{unreachable[:10]}", file=sys.stderr)


def _check_levels(ckpt, src_level: str, tgt_level: str | None, which: str) -> None:
    """Refuse to feed a model tokens of another level than it was trained on: a char-level model
    scored on word-level data (or the other way round) gives 0% with no hint why."""
    levels = ckpt.extra.get("levels", {})
    for side, level in (("source", src_level), ("target", tgt_level)):
        saved = levels.get("src" if side == "source" else "tgt")
        if level is not None and saved is not None and level != saved:
            raise CliError(f"level mismatch: the checkpoint's model was trained on {saved}-level {side}s, not "
                           f"{level}-level ones", which)


def _check_source_lengths(model, sources, level: str, where, noun: str = "source") -> None:
    """Every source fits the model's positions (with its <eos>); ``where(i)`` names sentence i."""
    for i, src in enumerate(sources):
        if len(src) + 1 > model.cfg.max_len:
            raise CliError(f"the {noun} has {len(src)} {level} tokens; with <eos> that is more than the model's "
                           f"max_len of {model.cfg.max_len} positions", where(i))


# -- decoding strategies: one set of options for translate and evaluate, --eval for train ---

_SAMPLING_OPTIONS = (("temperature", "--temperature"), ("top_k", "--top-k"), ("top_p", "--top-p"),
                     ("sample_seed", "--sample-seed"))


def _add_strategy_options(p: argparse.ArgumentParser, default_beam: int = 4) -> None:
    """--beam, or --sample with --temperature / --top-k / --top-p / --sample-seed (read by _strategy_from_args)."""
    p.add_argument("--beam", type=beam_size, default=None, metavar="K",
                   help=f"beam size (1 = greedy; default {default_beam}, as in §6.1)")
    p.set_defaults(default_beam=default_beam)
    p.add_argument("--sample", action="store_true",
                   help="sample each token from the model's distribution instead of searching (not with --beam)")
    p.add_argument("--temperature", type=positive_float, metavar="T",
                   help="with --sample: divide the logits by T (< 1 sharper, > 1 flatter; default 1)")
    p.add_argument("--top-k", type=positive_int, metavar="K", help="with --sample: only the K most probable tokens")
    p.add_argument("--top-p", type=probability, metavar="P",
                   help="with --sample: only the most probable tokens holding probability P (nucleus, 0 < P ≤ 1)")
    p.add_argument("--sample-seed", type=non_negative_int, metavar="N",
                   help="with --sample: seed of the draws (default 0; the same seed gives the same outputs)")


def _strategy_from_args(args):
    """The decoding strategy the options of ``_add_strategy_options`` ask for (CliError if they conflict)."""
    from .decoding import GREEDY, Beam, Sample  # noqa: PLC0415

    given = [(name, option) for name, option in _SAMPLING_OPTIONS if getattr(args, name) is not None]
    if not args.sample:
        if given:
            raise CliError(f"{given[0][1]} applies only to sampling; add --sample", given[0][1])
        size = args.beam if args.beam is not None else args.default_beam
        return GREEDY if size == 1 else Beam(size)
    if args.beam is not None:
        raise CliError(f"--sample and --beam {args.beam} ask for two different decoders; give one of them",
                       "--sample/--beam")
    settings = {name: getattr(args, name) for name, _ in given}
    settings["seed"] = settings.pop("sample_seed", 0)
    with _about("--sample-seed"):
        return Sample(**settings)


def _strategy_option(args) -> str:
    """The option that chose the decoder, for a message: "--sample" or "--beam K"."""
    return "--sample" if args.sample else f"--beam {args.beam if args.beam is not None else args.default_beam}"


def _after_greedy(strategy) -> list:
    """evaluate's list: greedy first, as the baseline, then ``strategy`` unless it is greedy."""
    from .decoding import GREEDY  # noqa: PLC0415

    return [GREEDY] if strategy == GREEDY else [GREEDY, strategy]


def _add_eval_option(p: argparse.ArgumentParser) -> None:
    """train --eval: the strategies the test set is decoded with at the end, checked when the options are parsed."""
    p.add_argument("--eval", type=strategy_spec, nargs="+", default=None, metavar="STRATEGY",
                   help="decode the test set at the end with each of these: greedy, beamK (e.g. beam4), "
                        "beam:size=K,alpha=A, sample, sample:temperature=T,top_k=K,top_p=P,seed=N "
                        "(default: greedy)")


def _eval_strategies(args) -> list:
    """The strategies of train --eval, duplicates dropped (default: greedy)."""
    from .decoding import GREEDY  # noqa: PLC0415

    return list(dict.fromkeys(args.eval or [GREEDY]))


def _check_decoding_fits(model, sources, strategies, which: str, when: str = "", max_len: int | None = None) -> None:
    """Refuse, before decoding starts (for ``train``: before the first step), strategies whose
    decoding cannot fit in memory (``translate.decoding_bytes``); ``which`` names the option;
    ``max_len``: the task's longest output (``loading.Task.max_output_len``), if it has one."""
    from . import backend  # noqa: PLC0415
    from .model import count_parameters  # noqa: PLC0415
    from .translate import decoding_bytes  # noqa: PLC0415

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


def _report(model, task, vocab, pairs, strategies, n_samples=5, stream=None) -> dict:
    """Decode ``pairs`` (token lists) with each strategy, print samples and scores; return the scores.

    A task with its own hooks (``loading.Task``: render, scores, max_output_len)
    prints its samples through ``render`` and its own scores instead of BLEU and chrF.
    """
    from .data.vocab import detokenize  # noqa: PLC0415
    from .translate import score_translations  # noqa: PLC0415

    stream = stream or sys.stdout   # looked up now: a default of sys.stdout would miss redirections
    entry = task.entry
    render = entry.render if entry is not None and entry.render is not None else None
    results = {}
    for i, strategy in enumerate(strategies):
        r = score_translations(model, vocab, pairs, task.tgt_level, task.bleu_tokenize, strategy=strategy,
                               max_len=entry.max_output_len if entry is not None else None,
                               scores=entry.scores if entry is not None else None, src_level=task.src_level)
        name = str(strategy)
        if i == 0 and n_samples > 0:
            print("sample decodes:", file=stream)
            for (src, _), hyp, ref in list(zip(pairs, r["hyps"], r["refs"]))[:n_samples]:
                mark = "✓" if hyp == ref else "✗"
                text = detokenize(src, task.src_level)
                shown, expected = (render(text, hyp), render(text, ref)) if render else (hyp, ref)
                print(f"  {mark} {text!r} -> {shown!r}" + ("" if hyp == ref else f"  (expected {expected!r})"),
                      file=stream)
        results[name] = {k: r[k] for k in ("exact_match", "bleu", "chrf", "seconds")}
        if "scores" in r:
            results[name]["scores"] = r["scores"]
            shown = ", ".join(f"{label} {value:.2f}" for label, value in r["scores"].items())
            print(f"{name:>7}: {shown} ({len(pairs)} sentences)  [{r['seconds']:.1f}s]", file=stream)
        else:
            print(f"{name:>7}: exact match {100 * r['exact_match']:.2f}% ({len(pairs)} sentences), "
                  f"BLEU {r['bleu']:.2f}, chrF {r['chrf']:.2f}  [{r['seconds']:.1f}s]", file=stream)
    return results


def _resume_command(argv: list[str], checkpoint: str, ranks: int = 1) -> str:
    """The command line that continues an interrupted run: the same options, with --resume CHECKPOINT
    (under ``mpiexec -n ranks`` if it ran on several; a checkpoint resumes on any number)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--resume":
            skip = True
        elif not arg.startswith("--resume="):
            kept.append(arg)
    launcher = ["mpiexec", "-n", str(ranks)] if ranks > 1 else []
    return shlex.join([*launcher, "python", "-m", "minitransformer", *kept, "--resume", checkpoint])


# -- train -------------------------------------------------------------------------------


def _model_changes(args) -> dict:
    """The TransformerConfig fields given with ``--set FIELD=VALUE``, parsed (one generic route)."""
    from .model import config_changes  # noqa: PLC0415

    changes: dict = {}
    for text in args.set or []:
        with _about(f"--set {text}"):
            ((name, value),) = config_changes([text]).items()
            if name in changes:
                raise ValueError(f"{name} is given twice")
            changes[name] = value
    return changes


def _check_resumed_model(ckpt, preset: str | None, changes: dict, path: str) -> None:
    """A resumed run keeps its model: a --preset or --set that disagrees with the checkpoint is refused."""
    from .data.registry import PRESETS  # noqa: PLC0415
    from .model import DATA_FIELDS  # noqa: PLC0415

    cfg = ckpt.model.cfg
    for name, value in changes.items():
        if getattr(cfg, name) != value:
            raise CliError(f"the checkpoint {path} was trained with {name}={getattr(cfg, name)!r}, not {value!r}; "
                           "a resumed run keeps its model (leave --set out, or start a new run)",
                           f"--set {name}={value}")
    if preset is None:
        return
    saved = ckpt.extra.get("preset")
    if saved is not None:
        if saved != preset:
            raise CliError(f"the checkpoint {path} was trained with preset {saved!r}, not {preset!r} (leave "
                           "--preset out when resuming)", f"--preset {preset}")
        return
    # Older checkpoints do not name their preset: compare the fields a preset decides.
    for name, value in vars(PRESETS[preset]).items():
        if name not in DATA_FIELDS and name != "max_len" and name not in changes and getattr(cfg, name) != value:
            raise CliError(f"the checkpoint {path} has {name}={getattr(cfg, name)!r}, but preset {preset!r} has "
                           f"{name}={value!r} (leave --preset out when resuming)", f"--preset {preset}")


def _train_tokenization(args, ckpt) -> dict:
    """``load_task``'s level / bpe_merges / bpe for train's options (checked here, before anything runs).

    --bpe-merges N needs --level bpe; --level bpe needs --bpe-merges (the right number depends
    on the corpus, so there is no general default) unless the task has a measured one (its
    registry entry's ``bpe_merges``). A resumed run keeps the checkpoint's tokenization: its
    merges are used as saved (not learned again), and a --level or --bpe-merges that
    disagrees with them is refused.
    """
    from .data.loading import bpe_of  # noqa: PLC0415
    from .data.registry import get_task  # noqa: PLC0415

    level, merges = args.level, args.bpe_merges
    if ckpt is not None:
        levels = ckpt.extra.get("levels", {})
        saved = bpe_of(levels)                         # checked when the checkpoint was loaded
        if saved is not None:
            if level not in (None, "bpe"):
                raise CliError(f"the checkpoint {ckpt.path} byte-pair encodes its text, not {level}-level "
                               "(leave --level out when resuming)", f"--level {level}")
            if merges is not None and merges != len(saved.merges):
                raise CliError(f"the checkpoint {ckpt.path} has {len(saved.merges)} BPE merges, not {merges} "
                               "(leave --bpe-merges out when resuming)", f"--bpe-merges {merges}")
            return {"level": "bpe", "bpe": saved}
        if level == "bpe" or merges is not None:
            which = "--level bpe" if level == "bpe" else f"--bpe-merges {merges}"
            raise CliError(f"the checkpoint {ckpt.path} was trained on {levels.get('tgt', 'word')}-level text, not "
                           "byte-pair encoded (leave the option out when resuming)", which)
        if level is None and args.data is not None and levels.get("src") == levels.get("tgt"):
            level = levels.get("src")                  # a --data run resumes at its own level
    if merges is not None and level != "bpe":
        raise CliError("--bpe-merges applies to byte-pair encoding; add --level bpe", f"--bpe-merges {merges}")
    if level == "bpe" and merges is None:
        with _about(f"--task {args.task}"):
            merges = get_task(args.task).bpe_merges if args.task is not None else None   # a measured default
        if merges is None:
            raise CliError("--level bpe needs --bpe-merges N, the number of merges to learn on the training split "
                           "(a few hundred for a small task; the paper's vocabulary had about 37,000 pieces)",
                           "--level bpe")
    return {"level": level, "bpe_merges": merges}


def _ranks(args):
    """The communicator of this run (``distributed.world()``): one process, or the ranks of mpiexec.

    On ranks other than 0, standard output and error go to /dev/null: rank 0 speaks for the run
    (an error only one rank meets still reaches the terminal, see ``_main``)."""
    from . import distributed  # noqa: PLC0415

    try:
        comm = distributed.world()
    except distributed.MPIUnavailable as exc:
        raise CliError(str(exc), exc.variable, 2) from None
    if comm.size > 1:
        global _several_ranks
        _several_ranks = True
        comm.check_every = args.check_sync_every
    if not comm.is_root:
        sys.stdout = sys.stderr = open(os.devnull, "w", encoding="utf-8")      # for the rest of the process
    return comm


def cmd_train(args) -> int:
    from .data.loading import MAX_DATA_LENGTH  # noqa: PLC0415
    from .data.registry import load_task  # noqa: PLC0415
    from .runsetup import check_resumable  # noqa: PLC0415
    from .settings import TrainSettings  # noqa: PLC0415

    _set_backend(args)
    comm = _ranks(args)
    strategies = _eval_strategies(args)        # checked when parsed; used after the last step
    if (args.task is None) == (args.data is None):
        raise CliError("give exactly one of --task NAME or --data pairs.tsv", "--task/--data")
    if args.task is not None:
        # These shape how a --data file is read; a named task fixes its own tokenization (which
        # --level bpe may replace: byte-pair pieces learned on its training split) and splits.
        for option, given in (("--level", args.level not in (None, "bpe")), ("--header", args.header),
                              ("--max-length", args.max_length is not None)):
            if given:
                raise CliError(f"{option} applies to --data files only; task {args.task!r} fixes its own "
                               "tokenization and splits (--level bpe excepted)", option)
    changes = _model_changes(args)
    # Everything that can be checked is checked before the first step.
    ckpt, saved = None, None
    if args.resume is not None and not args.resume.strip():
        # An empty --resume would otherwise be "no --resume": a fresh run where a resumed one was asked for.
        raise CliError("the checkpoint to resume from is empty; name a checkpoint.npz, or leave --resume out",
                       "--resume")
    if args.resume:
        with _memory_for("loading the checkpoint", f"--resume {args.resume}"):
            ckpt = _load_checkpoint(args.resume, "--resume")
        with _about(f"--resume {args.resume}"):
            saved = TrainSettings.from_dict(ckpt.extra.get("settings", {}), "the checkpoint's training settings")
        _check_resumed_model(ckpt, args.preset, changes, args.resume)
        with _about(f"--resume {args.resume}"):
            check_resumable(ckpt)
    tokenization = _train_tokenization(args, ckpt)
    # The seed splits a --data file and orders the batches: a resumed run keeps its own.
    seed = args.seed if args.seed is not None else saved.seed if saved is not None else 0
    if saved is not None and seed != saved.seed:
        raise CliError(f"the checkpoint was trained with seed {saved.seed}; another seed would split the data and "
                       "order the batches differently (leave --seed out when resuming)", f"--seed {args.seed}")
    source = f"--task {args.task}" if args.task else f"--data {args.data}"
    with _about(source), _memory_for("reading the data", source):
        task = load_task(args.task, args.data, seed=seed, header=args.header,
                         max_length=args.max_length if args.max_length is not None else MAX_DATA_LENGTH,
                         **tokenization)
    for note in task.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.out is not None and not args.out.strip():
        raise CliError("the output folder is empty; leave --out out for runs/TASK, or name a folder", "--out")
    out_dir = args.out if args.out is not None else os.path.join("runs", task.name)
    if not comm.is_root:                        # rank 0 alone writes into the folder and holds its lock
        return _train_locked(args, task, out_dir, ckpt, saved, seed, changes, strategies, comm)
    _check_output_dir(out_dir, "--out")
    with _run_lock(out_dir):
        return _train_locked(args, task, out_dir, ckpt, saved, seed, changes, strategies, comm)


def _train_locked(args, task, out_dir: str, ckpt, saved, seed: int, changes: dict, strategies: list, comm) -> int:
    """The rest of ``train``, holding ``out_dir``'s run lock: no other run can start into the folder
    between the check for an earlier run below and this run's last save."""
    from . import backend  # noqa: PLC0415
    from .distributed import describe as describe_ranks  # noqa: PLC0415
    from .model import describe  # noqa: PLC0415
    from .runsetup import make_trainer, settings_for  # noqa: PLC0415
    from .settings import TrainSettings  # noqa: PLC0415

    earlier = os.path.join(out_dir, "checkpoint.npz")
    continuing = args.resume is not None and os.path.exists(earlier) and os.path.samefile(args.resume, earlier)
    if os.path.exists(earlier) and not continuing and not args.overwrite:
        # A new run would replace the earlier one's checkpoint: never without being asked.
        raise CliError(f"{earlier} holds an earlier run; continue it with --resume {earlier}, train into another "
                       "folder with --out DIR, or replace it with --overwrite", f"--out {out_dir}")
    overrides = dict(steps=args.steps, batch_size=args.batch_size, max_tokens=args.max_tokens,
                     accumulate=args.accumulate, lr_factor=args.lr_factor, warmup_steps=args.warmup,
                     clip_norm=args.clip_norm, seed=seed, valid_every=args.valid_every,
                     checkpoint_every=args.checkpoint_every, keep_last=args.keep_last, average_last=args.average_last,
                     stop_when_solved=args.stop_when_solved)
    if args.steps is not None and args.stop_when_solved is None:
        overrides["stop_when_solved"] = 0         # --steps N: exactly N steps, solved or not
    preset, settings = settings_for(task, preset=args.preset, **overrides)
    if saved is not None:
        # A resumed run continues with its own settings and model; options given now override the settings.
        preset = ckpt.extra.get("preset") or args.preset or preset
        with _about(f"--resume {args.resume}"):
            given = {k: v for k, v in overrides.items() if v is not None}
            settings = TrainSettings(**{**vars(saved), **given})
    model_options = " ".join([f"--preset {preset}", *(f"--set {t}" for t in args.set or [])])
    with _about(f"--resume {args.resume}" if args.resume else model_options), \
            _memory_for("building the model", model_options, "choose a smaller --preset or --set smaller sizes"):
        trainer = make_trainer(task, settings, preset, out_dir, resume=ckpt, config=changes, comm=comm)
    model, vocab, cfg = trainer.model, trainer.vocab, trainer.model.cfg
    _check_decoding_fits(model, [src for src, _ in task.test], strategies, "--eval", " at the end (the test set)",
                         max_len=task.entry.max_output_len if task.entry is not None else None)
    print(f"task {task.name}: {len(task.train)} train / {len(task.valid)} valid / {len(task.test)} test pairs, "
          f"vocabulary {len(vocab)}")
    if task.bpe is not None:
        print(f"  tokenization: byte-pair encoding, {len(task.bpe.merges)} merges learned on the training split "
              f"(both sides); one vocabulary of {len(vocab)} pieces for source and target")
    changed = "".join(f" --set {name}={value}" for name, value in changes.items())
    print(f"model: preset {preset}{changed}, {model.num_parameters():,} parameters, backend {backend.backend_name()}")
    print(f"  config: {describe(cfg)}")
    ranks_line = describe_ranks(comm, settings)
    if ranks_line:
        print(ranks_line)
    if ckpt is not None:
        print(f"resuming from {args.resume} at step {trainer.step}")
    return _train_and_report(args, task, trainer, settings, out_dir, strategies)


@contextmanager
def _run_lock(out_dir: str):
    """Hold ``out_dir``'s run lock (``runlock``); another run holding it is a one-line error naming its PID."""
    from .runlock import FolderInUseError, hold  # noqa: PLC0415

    try:
        with hold(out_dir):
            yield
    except FolderInUseError as exc:
        raise CliError(str(exc), f"--out {out_dir}", 2) from exc


def _train_and_report(args, task, trainer, settings, out_dir: str, strategies: list) -> int:
    """The training loop, then the test-set report (decoded with ``strategies``, train --eval):
    what ``train`` does once everything is checked."""
    from . import streams  # noqa: PLC0415
    from .data.fingerprint import proves_held_out  # noqa: PLC0415
    from .errors import NonFiniteError  # noqa: PLC0415
    from .train import OutputWriteError, TrainingInterrupted  # noqa: PLC0415

    model, vocab = trainer.model, trainer.vocab
    source = f"--task {task.name}" if args.task else f"--data {shlex.quote(args.data)}"
    first_step = trainer.step
    t0 = time.perf_counter()
    try:
        with _quiet_numpy(), _memory_for("while training", None,
                                         "try a smaller --batch-size or --max-tokens, or a smaller model"):
            trainer.run(progress=not args.no_progress, progress_every=args.progress_every)
    except TrainingInterrupted as stop:
        print(f"{stop}", file=sys.stderr)
        if stop.checkpoint and stop.step >= settings.steps:
            # The signal came during the last step: training is complete, only the report was skipped.
            print(f"training is complete ({stop.step} of {settings.steps} steps); the test-set report was skipped. "
                  f"Score the checkpoint with: python -m minitransformer evaluate --checkpoint "
                  f"{shlex.quote(stop.checkpoint)} {source}", file=sys.stderr)
        elif stop.checkpoint:
            print(f"resume with: {_resume_command(args.argv, stop.checkpoint, trainer.comm.size)}", file=sys.stderr)
        return stop.exit_code
    except OutputWriteError as exc:
        how = (f"; make room (or fix the folder's permissions) and resume with: "
               f"{_resume_command(args.argv, exc.intact[0], trainer.comm.size)}" if exc.intact else
               "; make room (or fix the folder's permissions) and start the run again")
        raise CliError(f"{exc}{how}", None, 1) from exc
    except NonFiniteError as exc:
        raise CliError(str(exc), None, 1) from exc
    checkpoint = trainer.checkpoint_path
    trained = trainer.step - first_step
    resumed = f" (steps {first_step + 1}-{trainer.step}, resumed at step {first_step})" if first_step else ""
    solved = f" (solved at step {trainer.solved_at})" if trainer.solved_at is not None else ""
    print(f"trained {trained} steps{resumed} in {time.perf_counter() - t0:.1f}s{solved}; checkpoint: "
          f"{checkpoint}, log: {os.path.join(out_dir, 'metrics.jsonl')}, "
          f"curve: {os.path.join(out_dir, 'loss.png')}")
    if not trainer.comm.is_root:                # rank 0 reports; the others wait for it to finish
        trainer.comm.barrier("the end of the run (rank 0 decoding the test set)", timeout=False)
        return 0
    if proves_held_out(trainer.data_fingerprint):
        print(f"held-out test set ({task.name}: {len(task.test)} pairs never used in training or validation):")
    else:
        since = trainer.data_fingerprint.get("since_step") if trainer.data_fingerprint else None
        print(f"test set ({task.name}: {len(task.test)} pairs; the checkpoint this run resumed from does not record "
              f"the data it was trained on{f' in its first {since} steps' if since else ''}, so that these pairs "
              "were held out cannot be checked):")
    with _quiet_numpy(), _memory_for("scoring the test set", "--eval",
                                     f"the checkpoint is saved ({checkpoint}): score it with a smaller beam, "
                                     f"python -m minitransformer evaluate --checkpoint {shlex.quote(checkpoint)} "
                                     f"{source} --beam 1"):
        if trainer.average is not None:
            print(f"the last step's checkpoint ({checkpoint}):")
        _report(model.eval(), task, vocab, task.test, strategies)
        if trainer.average is not None:           # average_last (§6.1): the average is scored too
            from .checkpoint import load_checkpoint  # noqa: PLC0415

            path, steps = trainer.average
            print(f"the average of the last {len(steps)} checkpoints (§6.1; steps "
                  f"{', '.join(f'{k:,}' for k in steps)}): {path}")
            _report(load_checkpoint(path).model.eval(), task, vocab, task.test, strategies, n_samples=0)
    trainer.comm.barrier("the end of the run (rank 0 decoding the test set)", timeout=False)
    if streams.output_lost() == "stdout":
        print(f"standard output was closed: the test-set report was cut short; the checkpoint is saved ({checkpoint}). "
              f"Score it with: python -m minitransformer evaluate --checkpoint {shlex.quote(checkpoint)} {source}",
              file=sys.stderr)
        return OUTPUT_CLOSED
    return 0


# -- translate ---------------------------------------------------------------------------


def _stdin_lines() -> list[str]:
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


def _read_sentences(args) -> list[tuple[str, str]]:
    """(sentence, where it came from) for each input; an empty one is an error naming it.

    The rule: every input line gets exactly one output line, so an empty or
    whitespace-only sentence (which has nothing to translate) is refused
    rather than skipped or given a made-up translation.
    """
    if args.text:
        sentences = [(text, f"argument {i}") for i, text in enumerate(args.text, start=1)]
    else:
        sentences = [(line, f"standard input, line {i}") for i, line in enumerate(_stdin_lines(), start=1)]
        if not sentences:
            raise CliError("no sentences: give them as arguments or on standard input", "standard input")
    for text, where in sentences:
        if not text.strip():
            raise CliError("the sentence is empty; there is nothing to translate", where)
    return sentences


def _checkpoint_tokenization(ckpt, level_option: str | None):
    """(source level, target level, BPE merges or None) that the checkpoint's model was trained with.
    ``--level`` may change a char/word source's level, never that of a byte-pair encoded model."""
    from .data.loading import bpe_of  # noqa: PLC0415

    levels = ckpt.extra.get("levels", {})
    bpe = bpe_of(levels)                                   # checked when the checkpoint was loaded
    if bpe is not None and level_option is not None:
        raise CliError(f"the checkpoint's model reads byte-pair pieces (its {len(bpe.merges)} merges are saved in "
                       "it); leave --level out", f"--level {level_option}")
    src_level = level_option or levels.get("src", "word")
    return src_level, levels.get("tgt", src_level), bpe


def _lowercase(tokens: list[str], level: str, bpe) -> list[str]:
    """A tokenized source, lower-cased. Byte-pair pieces are made again from the lower-cased text:
    the pieces of "Four" lower-cased need not be the pieces of "four"."""
    from .data.vocab import detokenize, tokenize  # noqa: PLC0415

    if bpe is None:
        return [token.lower() for token in tokens]
    return tokenize(detokenize(tokens, level).lower(), level, bpe)


def cmd_translate(args) -> int:
    from .data.registry import saved_task  # noqa: PLC0415
    from .data.vocab import detokenize, tokenize  # noqa: PLC0415
    from .translate import translate_tokens  # noqa: PLC0415

    _set_backend(args)
    strategy = _strategy_from_args(args)
    if args.attention is not None:
        if not args.attention.strip():
            raise CliError("the folder for the heatmaps is empty; name a folder, or leave --attention out",
                           "--attention")
        _check_output_dir(args.attention, "--attention")
    sentences = _read_sentences(args)
    with _memory_for("loading the checkpoint", f"--checkpoint {args.checkpoint}"):
        ckpt = _load_checkpoint(args.checkpoint, "--checkpoint")
    levels = ckpt.extra.get("levels", {})
    src_level, tgt_level, bpe = _checkpoint_tokenization(ckpt, args.level)
    if args.level is not None:
        _check_levels(ckpt, args.level, None, f"--level {args.level}")
    model = ckpt.model.eval()
    if levels.get("src_lowercase"):
        # The model never saw a capital letter in a source: "Four Thousand" would be two unknown words.
        lowered = [(text.lower(), where) for text, where in sentences]
        if lowered != sentences:
            print("note: the input was lower-cased: this model was trained on lower-case sources only",
                  file=sys.stderr)
        sentences = lowered
    sources = []
    for text, where in sentences:
        if bpe is not None:
            text = " ".join(text.split())        # words, as at word level: runs of whitespace separate them
        with _about(where):
            sources.append(tokenize(text, src_level, bpe))
    _check_source_lengths(model, sources, src_level, lambda i: sentences[i][1], "sentence")
    _warn_unknown_tokens(ckpt.vocab, sources, bpe=bpe is not None)
    # A task whose outputs mean more than text (a parser's trees) prints them its own way.
    entry = saved_task(ckpt.extra)
    max_len = entry.max_output_len if entry is not None else None
    _check_decoding_fits(model, sources, [strategy], _strategy_option(args), max_len=max_len)
    with _quiet_numpy(), _memory_for(f"translating {len(sources)} sentence(s)", _strategy_option(args),
                                     "a smaller --beam, or fewer sentences at a time"):
        for src, hyp in zip(sources, translate_tokens(model, ckpt.vocab, sources, strategy, max_len=max_len)):
            output = detokenize(hyp, tgt_level)
            print(entry.render(detokenize(src, src_level), output) if entry is not None and entry.render
                  else output)
        if args.attention is not None:
            from .translate import save_attention_maps  # noqa: PLC0415
            paths = save_attention_maps(model, ckpt.vocab, sources[0], args.attention, src_level, tgt_level,
                                        strategy=strategy)
            print(f"wrote {len(paths)} attention heatmaps to {args.attention}", file=sys.stderr)
    return 0


# -- evaluate ----------------------------------------------------------------------------


def _trained_on(ckpt, task, split: str, seed: int, trained_seed) -> None:
    """Say loudly when the pairs about to be scored are not known to be held out from training.

    ``evaluate --task T --seed S`` with another seed than the checkpoint's splits the task
    differently: most of that "test set" may be training data. The pairs are counted
    against the training split of the checkpoint's own seed (whose fingerprint, where the
    checkpoint records one, must match, or nothing can be said).
    """
    from .data.registry import load_task  # noqa: PLC0415

    saved = ckpt.extra.get("data")
    if saved is not None and saved.get("task") != task.name:
        print(f"warning: the checkpoint was trained on {saved.get('task')!r}, not {task.name!r}", file=sys.stderr)
        return
    if split == "train":
        return
    if seed == trained_seed and (saved is None or task.fingerprint()["split"] == saved["split"]):
        return                                        # the split the model was trained with
    if not isinstance(trained_seed, int):
        print(f"warning: the checkpoint does not record its seed, so whether these {split} pairs were held out "
              "from its training cannot be checked", file=sys.stderr)
        return
    trained = task if seed == trained_seed else load_task(task.name, seed=trained_seed)
    if saved is not None and trained.fingerprint()["split"] != saved["split"]:
        print(f"warning: task {task.name!r} with seed {trained_seed} no longer gives the split the checkpoint was "
              f"trained on (another version of its data?), so whether these {split} pairs were held out cannot be "
              "checked", file=sys.stderr)
        return
    seen = {tuple(src) for src, _ in trained.train}
    pairs = getattr(task, split)
    overlap = sum(tuple(src) in seen for src, _ in pairs)
    if overlap:
        print(f"warning: {overlap:,} of the {len(pairs):,} {split} pairs of --seed {seed} were in the checkpoint's "
              f"training data (it was trained with seed {trained_seed}): these scores are not held out; leave "
              "--seed out to score the pairs it never saw", file=sys.stderr)


def cmd_evaluate(args) -> int:
    from .data import fingerprint  # noqa: PLC0415
    from .data.loading import TaskData, read_pairs  # noqa: PLC0415
    from .data.registry import load_task, saved_task  # noqa: PLC0415

    _set_backend(args)
    strategy = _strategy_from_args(args)
    if (args.task is None) == (args.data is None):
        raise CliError("give exactly one of --data pairs.tsv or --task NAME", "--task/--data")
    if args.data and args.split is not None:
        raise CliError("--split chooses a split of --task; with --data the whole file is evaluated", "--split")
    if args.data and args.seed is not None:
        raise CliError("--seed chooses how --task is split; with --data the whole file is evaluated", "--seed")
    if args.task:
        for option, given in (("--level", args.level is not None), ("--header", args.header)):
            if given:
                raise CliError(f"{option} applies to --data files only; task {args.task!r} fixes its own "
                               "tokenization", option)
    with _memory_for("loading the checkpoint", f"--checkpoint {args.checkpoint}"):
        ckpt = _load_checkpoint(args.checkpoint, "--checkpoint")
    levels = ckpt.extra.get("levels", {})
    model = ckpt.model.eval()
    src_level, tgt_level, bpe = _checkpoint_tokenization(ckpt, args.level)
    if args.data:
        if args.level is not None:
            _check_levels(ckpt, args.level, args.level, f"--level {args.level}")
        with _about(f"--data {args.data}"), _memory_for("reading the data", f"--data {args.data}"):
            pairs, notes = read_pairs(args.data, src_level, tgt_level, header=args.header, max_length=None,
                                      max_source_length=model.cfg.max_len - 1, bpe=bpe)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        if levels.get("src_lowercase"):      # as translate does: the model saw lower-case sources only
            pairs = [(_lowercase(src, src_level, bpe), tgt) for src, tgt in pairs]
        task = TaskData(os.path.basename(args.data), ckpt.vocab, [], [], pairs, src_level, tgt_level,
                        levels.get("bleu_tokenize", "char" if tgt_level == "char" else "13a"),
                        entry=saved_task(ckpt.extra))       # the trained task's scores, if it has its own
        saved = ckpt.extra.get("data")
        if saved is not None and fingerprint.digest(pairs) == saved["corpus"]:
            print(f"warning: {args.data} holds the pairs the checkpoint was trained on (its train, valid and test "
                  "splits together): these scores are not held out", file=sys.stderr)
        where = f"--data {args.data}"
    else:
        saved_seed = ckpt.extra.get("settings", {}).get("seed", 0)
        seed = args.seed if args.seed is not None else saved_seed if isinstance(saved_seed, int) else 0
        with _about(f"--task {args.task}"):
            # The task's text, tokenized as the checkpoint's model was trained (its merges, for BPE).
            task = load_task(args.task, seed=seed, **({"level": "bpe", "bpe": bpe} if bpe is not None else {}))
        _check_levels(ckpt, task.src_level, task.tgt_level, f"--task {args.task}")
        split = args.split or "test"
        pairs = getattr(task, split)
        _trained_on(ckpt, task, split, seed, saved_seed)
        _check_source_lengths(model, [src for src, _ in pairs], task.src_level,
                              lambda i: f"--task {args.task}, {split} pair {i + 1}")
        where = f"--task {args.task}"
    if args.limit is not None:
        pairs = pairs[: args.limit]
    _warn_unknown_tokens(ckpt.vocab, [src for src, _ in pairs], [tgt for _, tgt in pairs], bpe=bpe is not None)
    _check_decoding_fits(model, [src for src, _ in pairs], _after_greedy(strategy), _strategy_option(args),
                         max_len=task.entry.max_output_len if task.entry is not None else None)
    with _quiet_numpy(), _memory_for(f"scoring {len(pairs)} pairs", _strategy_option(args),
                                     f"a smaller --beam, or --limit to score fewer pairs of {where}"):
        _report(model, task, ckpt.vocab, pairs, _after_greedy(strategy), n_samples=args.samples)
    return 0


# -- bpe ------------------------------------------------------------------------------------


def _stdin_text() -> str:
    """All of standard input, decoded as UTF-8 (an undecodable line is an error naming it)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:                          # a text stream without bytes underneath (a test's StringIO)
        return sys.stdin.read()
    data = buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        lineno = data.count(b"\n", 0, exc.start) + 1
        raise CliError(f"not valid UTF-8 text ({exc.reason})", f"standard input, line {lineno}") from None


def cmd_bpe_learn(args) -> int:
    from .data.bpe import BPE, read_corpus, write_codes  # noqa: PLC0415
    from .files import check_writable_dir  # noqa: PLC0415

    if not args.output.strip() or os.path.isdir(args.output):
        raise CliError("name a codes file to write (not a folder)", f"--output {args.output}")
    with _about(f"--output {args.output}"):
        check_writable_dir(os.path.dirname(os.path.abspath(args.output)))
    with _about(" ".join(args.files)):
        counts = read_corpus(args.files)
    if not counts:
        raise CliError("the files hold no words to learn from", " ".join(args.files))
    t0 = time.perf_counter()
    bpe = BPE.learn(counts, args.merges, args.min_frequency)
    seconds = time.perf_counter() - t0
    with _about(f"--output {args.output}"):
        write_codes(args.output, bpe.merges)
    stopped = "" if len(bpe.merges) == args.merges else (
        f" (stopped early: no pair of symbols occurs {args.min_frequency} times or more)")
    print(f"learned {len(bpe.merges)} merges{stopped} from {sum(counts.values()):,} words ({len(counts):,} distinct, "
          f"{len(bpe.symbols)} initial symbols) in {seconds:.1f}s; vocabulary {len(bpe.vocabulary()):,} pieces; "
          f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_bpe_apply(args) -> int:
    from .data.bpe import BPE, read_codes  # noqa: PLC0415

    with _about(f"--codes {args.codes}"):
        bpe = BPE(read_codes(args.codes))
    # One output line per input line: split on "\n" only (str.splitlines would also split on
    # "\r", "\x0b", "\u2028" ...), and each line keeps its own ending, as subword-nmt's does.
    lines = _stdin_text().split("\n")
    out = []
    for lineno, line in enumerate(lines, start=1):
        with _about(f"standard input, line {lineno}"):
            out.append(bpe.apply(line))
    sys.stdout.write("\n".join(out))
    return 0


# -- average --------------------------------------------------------------------------------


def cmd_average(args) -> int:
    from .average import AverageError, average_checkpoints, save_average  # noqa: PLC0415
    from .files import check_writable_dir  # noqa: PLC0415

    _set_backend(args)
    if not args.output.strip() or os.path.isdir(args.output):
        raise CliError("name a checkpoint file to write (not a folder)", f"--output {args.output}")
    with _about(f"--output {args.output}"):
        check_writable_dir(os.path.dirname(os.path.abspath(args.output)))
    for path in args.checkpoints:
        if os.path.exists(path) and os.path.exists(args.output) and os.path.samefile(path, args.output):
            raise CliError(f"{args.output} is one of the checkpoints to average; write the average to another "
                           "file", f"--output {args.output}")
    checkpoints = [_load_checkpoint(path, "checkpoint") for path in args.checkpoints]
    try:
        average = average_checkpoints(checkpoints)
    except AverageError as exc:
        raise CliError(str(exc), "the checkpoints to average") from None
    with _about(f"--output {args.output}"):
        save_average(args.output, average)
    steps = ", ".join(str(k) for k in average.extra["average"]["steps"])
    print(f"averaged {len(checkpoints)} checkpoint(s) (steps {steps}) into {args.output}; translate and evaluate "
          "read it like any checkpoint (it holds no optimizer state, so training cannot resume from it)",
          file=sys.stderr)
    return 0


def cmd_tasks(args) -> int:
    from .data.registry import TASKS  # noqa: PLC0415

    for task in TASKS.values():
        s = task.recipe.settings
        steps = f"until solved, at most {s.steps} steps" if s.stop_when_solved else f"{s.steps} steps"
        bpe = f"; --level bpe: {task.bpe_merges} merges" if task.bpe_merges else ""
        print(f"{task.name:<16} {task.description}  [{task.source}{'; ' + task.license if task.license else ''}; "
              f"recipe: preset {task.recipe.preset}, {steps}{bpe}]")
    return 0


def cmd_grade(args) -> int:
    from .grade import run  # noqa: PLC0415

    return run(args)


def _task_names_help() -> str:
    """The task names for --help, read from the registry (its modules import only numpy)."""
    from .data.registry import task_names  # noqa: PLC0415

    return ", ".join(task_names())


def build_parser() -> argparse.ArgumentParser:
    from .data.loading import MAX_DATA_LENGTH  # noqa: PLC0415
    from .data.registry import PRESETS  # noqa: PLC0415
    from .model import field_help  # noqa: PLC0415

    parser = _Parser(prog="python -m minitransformer",
                     description="Train, run and evaluate the Transformer of 'Attention Is All You Need'.",
                     epilog=f"Errors print one line and exit with 2 (bad input) or 1 (run-time failure); "
                            f"--debug or {DEBUG_VARIABLE}=1 adds the traceback.")
    parser.add_argument("--version", action="version", version=f"minitransformer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a model on a task or a TSV file",
                       description=f"Train a Transformer on a named task ({_task_names_help()}; "
                                   "`python -m minitransformer tasks` describes them) or a TSV file. A checkpoint "
                                   "is saved at every validation and at the end (the one replaced is kept as "
                                   "checkpoint.prev.npz); Ctrl-C, SIGTERM, SIGHUP or a closed output pipe save "
                                   "one and print how to resume.")
    p.add_argument("--task", help=f"a named task: {_task_names_help()} (see the 'tasks' command)")
    p.add_argument("--data", help="a TSV file of source<TAB>target lines (instead of --task); duplicate pairs "
                                  "are removed and the rest split into train / valid / test")
    p.add_argument("--level", choices=["char", "word", "bpe"], default=None,
                   help="tokenization of both sides of --data: char (default), word, or bpe (byte-pair pieces, "
                        "§5.1, learned on the training split, one vocabulary for source and target; give "
                        "--bpe-merges). With --task only bpe: the task's own tokenization otherwise")
    p.add_argument("--bpe-merges", type=positive_int, default=None, metavar="N",
                   help="with --level bpe: the number of merges to learn (the vocabulary is about 4 + the "
                        "characters + N pieces)")
    p.add_argument("--header", action="store_true", help="the first line of --data holds column names: skip it")
    p.add_argument("--max-length", type=positive_int, default=None, metavar="TOKENS",
                   help=f"longest --data sentence accepted, in tokens per side (default {MAX_DATA_LENGTH}); "
                        "a longer line is an error naming it")
    p.add_argument("--preset", choices=list(PRESETS), help="model size preset; default: the task's")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE",
                   help="change one field of the preset's model configuration; repeat for more, e.g. "
                        f"--set positional=learned --set P_drop=0. Fields (preset base's values): {field_help()}")
    p.add_argument("--steps", type=positive_int,
                   help="optimizer steps (default: the task's); exactly this many, even once solved")
    p.add_argument("--batch-size", type=positive_int, help="sentence pairs per batch")
    p.add_argument("--max-tokens", type=positive_int, help="cap on padded tokens per batch")
    p.add_argument("--accumulate", type=positive_int, metavar="K",
                   help="K batches per optimizer step, their gradients summed (gradient accumulation: the "
                        "update of one batch K times larger, in the memory of one; default 1)")
    p.add_argument("--lr-factor", type=positive_float, help="multiplier on the §5.3 learning-rate schedule")
    p.add_argument("--warmup", type=positive_int, help="warm-up steps of the schedule")
    p.add_argument("--clip-norm", type=positive_float, help="clip the global gradient norm to this value")
    p.add_argument("--valid-every", type=positive_int,
                   help="validate (and save a checkpoint) every this many steps")
    p.add_argument("--checkpoint-every", type=positive_int,
                   help="also save a checkpoint every this many steps")
    p.add_argument("--keep-last", type=positive_int, metavar="K",
                   help="keep the last K checkpoints saved at those intervals (and the last step's) as "
                        "checkpoint.stepNNNNNN.npz, for `average` (§6.1 averages the last 5)")
    p.add_argument("--average-last", type=positive_int, metavar="K",
                   help="at the last step, also write average.npz, the average of the last K kept checkpoints "
                        "(§6.1; needs --keep-last K or more), and score it on the test set too")
    p.add_argument("--stop-when-solved", type=non_negative_int, metavar="K",
                   help="stop once validation exact match is 100%% at K validations in a row (0: never; "
                        "default: the task's, 2 for copy and reverse, 0 when --steps is given)")
    _add_eval_option(p)
    p.add_argument("--seed", type=non_negative_int, default=None,
                   help="seed of the data split, the initial weights and dropout (default 0; when resuming, "
                        "the checkpoint's)")
    p.add_argument("--out", help="output directory (default: runs/TASK)")
    p.add_argument("--overwrite", action="store_true",
                   help="start afresh even if --out holds an earlier run's checkpoint (it is replaced)")
    p.add_argument("--resume", help="continue from this checkpoint")
    p.add_argument("--check-sync-every", type=positive_int, metavar="STEPS",
                   help="under mpiexec -n N: compare a hash of the parameters on every rank every STEPS steps "
                        "(default: at every checkpoint; one process: no effect)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    p.add_argument("--progress-every", type=positive_float, default=30.0, metavar="SECONDS",
                   help="when the output is not a terminal, print a progress line this often (default 30)")
    _add_common(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("translate", help="translate sentences with a trained checkpoint",
                       description="Translate sentences, one output line per input. An empty sentence is an "
                                   "error (it has nothing to translate). If every source the model was trained "
                                   "on is lower-case (the numbers tasks, for one), the input is lower-cased "
                                   "first, with a note; words still unknown after that are named in a warning.")
    p.add_argument("text", nargs="*", help="sentences (default: read lines from standard input)")
    p.add_argument("--checkpoint", required=True, help="a checkpoint.npz written by train")
    _add_strategy_options(p)
    p.add_argument("--level", choices=["char", "word"], help="source tokenization (default: the checkpoint's)")
    p.add_argument("--attention", metavar="OUT_DIR",
                   help="also save attention heatmaps (every layer and head) for the first sentence")
    _add_common(p)
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("evaluate", help="exact match, BLEU and chrF of a checkpoint on a TSV file or a task split "
                                        "(a parser: bracket F1, exact trees, ill-formed outputs)",
                       description="Score a checkpoint: greedy decoding first, then the decoder chosen with "
                                   "--beam K (default 4) or --sample.")
    p.add_argument("--checkpoint", required=True, help="a checkpoint.npz written by train")
    p.add_argument("--data", help="a TSV file of source<TAB>target lines (all of it is evaluated)")
    p.add_argument("--header", action="store_true", help="the first line of --data holds column names: skip it")
    p.add_argument("--task", help="a named task (uses its --split)")
    p.add_argument("--split", choices=["train", "valid", "test"], default=None,
                   help="which split of --task to evaluate (default: test)")
    p.add_argument("--level", choices=["char", "word"], help="tokenization of --data (default: the checkpoint's)")
    _add_strategy_options(p)      # scored after greedy (--beam 1: greedy only)
    p.add_argument("--limit", type=positive_int, help="evaluate only the first N pairs")
    p.add_argument("--samples", type=non_negative_int, default=5, help="sample decodes to print (0: none)")
    p.add_argument("--seed", type=non_negative_int, default=None,
                   help="split seed of --task (default: the one the checkpoint was trained with)")
    _add_common(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("bpe", help="learn byte-pair merges from text files, or apply them (subword-nmt's format)",
                       description="Byte-pair encoding (§5.1; Sennrich et al. 2016), compatible with subword-nmt "
                                   "0.3.8: `bpe learn` writes a codes file that `subword-nmt apply-bpe -c` reads, "
                                   "and `bpe apply` writes what `subword-nmt apply-bpe` writes.")
    bpe_commands = p.add_subparsers(dest="bpe_command", required=True, parser_class=_Parser)
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
    _add_common(q, backend_option=False)
    q.set_defaults(func=cmd_bpe_learn)
    q = bpe_commands.add_parser("apply", help="apply merges to standard input, line by line",
                                description="Read standard input, write each line as byte-pair pieces, '@@' "
                                            "ending every piece but a word's last (as subword-nmt apply-bpe); one "
                                            "output line per input line. Deleting every '@@ ' gives the text back.")
    q.add_argument("--codes", required=True, metavar="CODES", help="a codes file (from `bpe learn` or subword-nmt)")
    _add_common(q, backend_option=False)
    q.set_defaults(func=cmd_bpe_apply)

    p = sub.add_parser("average", help="average the parameters of checkpoints of one run (§6.1)",
                       description="Write one checkpoint whose parameters are the element-wise mean of the given "
                                   "checkpoints' (§6.1: the base model averaged the last 5). They must come from "
                                   "one run: the same model, vocabulary, tokenization and seed. The average has "
                                   "no optimizer state, so `train --resume` refuses it; translate and evaluate "
                                   "accept it. Usually: average runs/X/checkpoint.step*.npz -o runs/X/average.npz "
                                   "after `train --keep-last 5`.")
    p.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT", help="checkpoint .npz files of one run")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="the averaged checkpoint to write")
    _add_common(p)
    p.set_defaults(func=cmd_average)

    p = sub.add_parser("tasks", help="list the built-in tasks")
    _add_common(p, backend_option=False)
    p.set_defaults(func=cmd_tasks)

    from .grade import add_arguments as add_grade_arguments  # noqa: PLC0415

    p = sub.add_parser("grade", help="score lesson notebooks with the lessons' own checkers (this runs them)",
                       description="Run each notebook top to bottom in a fresh kernel and score its exercises "
                                   "with the checkers (docs/teachers.md). This runs the notebooks' code with your "
                                   "permissions: grade in a container or under a throwaway account.")
    add_grade_arguments(p)
    _add_common(p, backend_option=False)
    p.set_defaults(func=cmd_grade)
    return parser


def _run(argv: list[str]) -> int:
    from .errors import EnvironmentVariableError, NonFiniteError  # noqa: PLC0415

    try:
        from . import backend  # noqa: F401, PLC0415  (reads the environment variables)
    except EnvironmentVariableError as exc:
        raise CliError(str(exc), exc.variable, 2) from exc
    from .distributed import RanksOutOfSync, launched  # noqa: PLC0415

    args = build_parser().parse_args(argv)
    args.argv = argv
    _, size, variable = launched()
    if size > 1 and args.func is not cmd_train:
        raise CliError(f"only train runs on several ranks; run {args.command} as one process, without mpiexec",
                       f"{variable}={size}")
    try:
        return args.func(args)
    except (NonFiniteError, RanksOutOfSync) as exc:     # every rank meets these alike
        raise CliError(str(exc), None, 1) from exc


def _launched_rank() -> int:
    """This process's rank as its launcher says (0 without mpiexec), read without starting MPI."""
    try:
        from .distributed import launched  # noqa: PLC0415

        return launched()[0]
    except Exception:  # noqa: BLE001 - an unreadable environment is reported as an error of its own
        return 0


# Signals that end a command outside the training loop (which saves first): exit 128 + signal.
_TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def main(argv=None) -> int:
    """Run the command line; returns the exit code (0 success, 2 bad input, 1 failure, 128 + signal for
    a signal: 130 SIGINT, 143 SIGTERM, 129 SIGHUP, 141 a closed standard output)."""
    from . import streams  # noqa: PLC0415  (standard library only)

    with streams.guard_standard_streams():
        code = _main(list(sys.argv[1:] if argv is None else argv))
        if code == 0 and streams.output_lost() == "stdout":
            code = OUTPUT_CLOSED            # the output was cut short: say so in the exit code, quietly
    if code and _several_ranks:
        # MPI_Finalize, which a normal exit calls, would wait for ranks that may be stuck in a
        # collective: leave at once, and mpiexec stops the others.
        for stream in (sys.stdout, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code


def _main(argv: list[str]) -> int:
    previous: dict = {}
    if threading.current_thread() is threading.main_thread():
        def on_term(signum, frame):
            raise _Terminated(signum)
        for sig in _TERMINATING:
            previous[sig] = signal.signal(sig, on_term)
    debug = False

    def fail(line: str, code: int, exc: BaseException | None = None, alike: bool = True) -> int:
        """Print ``error: line`` (after exc's traceback if --debug asked for it); return ``code``.

        Under mpiexec: an error every rank meets ``alike`` (bad input, a diverged run) is printed
        by rank 0 alone; any other is printed by the rank that met it, which names itself."""
        rank = _launched_rank()
        if rank and alike:
            return code
        stream = sys.__stderr__ if rank else sys.stderr      # other ranks' sys.stderr is /dev/null
        if debug and exc is not None:
            traceback.print_exception(exc, file=stream)
        print(f"error: {f'rank {rank}: ' if rank else ''}{line}", file=stream, flush=True)
        return code

    try:
        debug = _debug_requested(argv)
        return _run(argv)
    except CliError as exc:
        return fail(str(exc), exc.code, exc.__cause__)
    except KeyboardInterrupt as exc:
        return fail("interrupted (Ctrl-C)", 130, exc)
    except _Terminated as exc:
        return fail(f"terminated ({signal.Signals(exc.signum).name})", 128 + int(exc.signum))
    except BAD_INPUT as exc:
        return fail(_message(exc), 2, exc)
    except MemoryError as exc:
        # The commands name what ran out of memory (_memory_for); this is anything else.
        return fail(f"out of memory ({exc})" if str(exc) else "out of memory", 1, exc, alike=False)
    except OSError as exc:
        return fail(_message(exc), 1, exc, alike=False)
    except Exception as exc:  # noqa: BLE001 - the one place every other error is turned into a line
        hint = "" if debug else f" (run with --debug or {DEBUG_VARIABLE}=1 for the traceback)"
        return fail(f"internal error: {type(exc).__name__}: {exc}{hint}", 1, exc, alike=False)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
