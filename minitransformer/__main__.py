"""Command line: ``python -m minitransformer {train,translate,evaluate,tasks} --help``.

Errors reach the user as one line, ``error: <what> (<which option, file or variable>)``,
with exit code 2 for bad input (options, files, data, environment variables) and 1
for failures at run time (a diverged run, a full disk). No traceback is printed
unless ``--debug`` is given or MINITRANSFORMER_DEBUG=1 is set. An interrupted
``train`` saves a checkpoint, prints how to resume, and exits with 130 (Ctrl-C,
SIGINT) or 143 (SIGTERM).
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


# -- errors ----------------------------------------------------------------------------


class CliError(Exception):
    """An error to show as ``error: <what> (<which>)`` and exit with ``code``."""

    def __init__(self, what: str, which: str | None = None, code: int = 2):
        super().__init__(what)
        self.what, self.which, self.code = what, which, code

    def __str__(self) -> str:
        return f"{self.what} ({self.which})" if self.which else self.what


class _Terminated(BaseException):
    """SIGTERM outside the training loop (which handles it itself): exit 143 without a traceback."""


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


def _report(model, task, vocab, pairs, beam_sizes=(1,), n_samples=5, stream=None) -> dict:
    """Decode ``pairs`` (token lists), print samples and scores; return the scores.

    A task with its own hooks (``loading.Task``: render, scores, max_output_len)
    prints its samples through ``render`` and its own scores instead of BLEU and chrF.
    """
    from .data.vocab import detokenize  # noqa: PLC0415
    from .translate import score_translations  # noqa: PLC0415

    stream = stream or sys.stdout   # looked up now: a default of sys.stdout would miss redirections
    entry = task.entry
    render = entry.render if entry is not None and entry.render is not None else None
    results = {}
    for beam in beam_sizes:
        r = score_translations(model, vocab, pairs, task.tgt_level, task.bleu_tokenize, beam_size=beam,
                               max_len=entry.max_output_len if entry is not None else None,
                               scores=entry.scores if entry is not None else None, src_level=task.src_level)
        name = "greedy" if beam == 1 else f"beam {beam}"
        if beam == beam_sizes[0] and n_samples > 0:
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


def _resume_command(argv: list[str], checkpoint: str) -> str:
    """The command line that continues an interrupted run: the same options, with --resume CHECKPOINT."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--resume":
            skip = True
        elif not arg.startswith("--resume="):
            kept.append(arg)
    return shlex.join(["python", "-m", "minitransformer", *kept, "--resume", checkpoint])


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
    from .model import DATA_FIELDS, PRESETS  # noqa: PLC0415

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


def cmd_train(args) -> int:
    from . import backend  # noqa: PLC0415
    from .data.loading import MAX_DATA_LENGTH  # noqa: PLC0415
    from .data.registry import load_task  # noqa: PLC0415
    from .errors import NonFiniteError  # noqa: PLC0415
    from .files import check_writable_dir  # noqa: PLC0415
    from .model import describe  # noqa: PLC0415
    from .train import TrainingInterrupted, TrainSettings, make_trainer, settings_for  # noqa: PLC0415

    _set_backend(args)
    if (args.task is None) == (args.data is None):
        raise CliError("give exactly one of --task NAME or --data pairs.tsv", "--task/--data")
    if args.task is not None:
        # These shape how a --data file is read; a named task fixes its own tokenization.
        for option, given in (("--level", args.level is not None), ("--header", args.header),
                              ("--max-length", args.max_length is not None)):
            if given:
                raise CliError(f"{option} applies to --data files only; task {args.task!r} fixes its own "
                               "tokenization and splits", option)
    changes = _model_changes(args)
    # Everything that can be checked is checked before the first step.
    ckpt, saved = None, None
    if args.resume:
        ckpt = _load_checkpoint(args.resume, "--resume")
        with _about(f"--resume {args.resume}"):
            saved = TrainSettings.from_dict(ckpt.extra.get("settings", {}), "the checkpoint's training settings")
        _check_resumed_model(ckpt, args.preset, changes, args.resume)
    # The seed splits a --data file and orders the batches: a resumed run keeps its own.
    seed = args.seed if args.seed is not None else saved.seed if saved is not None else 0
    if saved is not None and seed != saved.seed:
        raise CliError(f"the checkpoint was trained with seed {saved.seed}; another seed would split the data and "
                       "order the batches differently (leave --seed out when resuming)", f"--seed {args.seed}")
    with _about(f"--task {args.task}" if args.task else f"--data {args.data}"):
        task = load_task(args.task, args.data, level=args.level or "char", seed=seed, header=args.header,
                         max_length=args.max_length if args.max_length is not None else MAX_DATA_LENGTH)
    for note in task.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.out is not None and not args.out.strip():
        raise CliError("the output folder is empty; leave --out out for runs/TASK, or name a folder", "--out")
    out_dir = args.out if args.out is not None else os.path.join("runs", task.name)
    with _about(f"--out {out_dir}"):
        check_writable_dir(out_dir)
    earlier = os.path.join(out_dir, "checkpoint.npz")
    continuing = args.resume is not None and os.path.exists(earlier) and os.path.samefile(args.resume, earlier)
    if os.path.exists(earlier) and not continuing and not args.overwrite:
        # A new run would replace the earlier one's checkpoint: never without being asked.
        raise CliError(f"{earlier} holds an earlier run; continue it with --resume {earlier}, train into another "
                       "folder with --out DIR, or replace it with --overwrite", f"--out {out_dir}")
    overrides = dict(steps=args.steps, batch_size=args.batch_size, max_tokens=args.max_tokens,
                     lr_factor=args.lr_factor, warmup_steps=args.warmup, clip_norm=args.clip_norm,
                     seed=seed, valid_every=args.valid_every, checkpoint_every=args.checkpoint_every)
    preset, settings = settings_for(task, preset=args.preset, **overrides)
    if saved is not None:
        # A resumed run continues with its own settings and model; options given now override the settings.
        preset = ckpt.extra.get("preset") or args.preset or preset
        with _about(f"--resume {args.resume}"):
            given = {k: v for k, v in overrides.items() if v is not None}
            settings = TrainSettings(**{**vars(saved), **given})
    with _about(f"--resume {args.resume}" if args.resume else
                " ".join([f"--preset {preset}", *(f"--set {t}" for t in args.set or [])])):
        trainer = make_trainer(task, settings, preset, out_dir, resume=ckpt, config=changes)
    model, vocab, cfg = trainer.model, trainer.vocab, trainer.model.cfg
    print(f"task {task.name}: {len(task.train)} train / {len(task.valid)} valid / {len(task.test)} test pairs, "
          f"vocabulary {len(vocab)}")
    changed = "".join(f" --set {name}={value}" for name, value in changes.items())
    print(f"model: preset {preset}{changed}, {model.num_parameters():,} parameters, backend {backend.backend_name()}")
    print(f"  config: {describe(cfg)}")
    if ckpt is not None:
        print(f"resuming from {args.resume} at step {trainer.step}")
    first_step = trainer.step
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            # A diverging step makes NumPy warn about overflow at each line it reaches; the
            # non-finite policy (optim.Adam) already reports such a step once, naming the tensor.
            warnings.filterwarnings("ignore", r"(overflow|invalid value|divide by zero) encountered", RuntimeWarning)
            trainer.run(progress=not args.no_progress, progress_every=args.progress_every)
    except TrainingInterrupted as stop:
        print(f"{stop}", file=sys.stderr)
        if stop.checkpoint and stop.step >= settings.steps:
            # The signal came during the last step: training is complete, only the report was skipped.
            source = f"--task {task.name}" if args.task else f"--data {shlex.quote(args.data)}"
            print(f"training is complete ({stop.step} of {settings.steps} steps); the test-set report was skipped. "
                  f"Score the checkpoint with: python -m minitransformer evaluate --checkpoint "
                  f"{shlex.quote(stop.checkpoint)} {source}", file=sys.stderr)
        elif stop.checkpoint:
            print(f"resume with: {_resume_command(args.argv, stop.checkpoint)}", file=sys.stderr)
        return stop.exit_code
    except NonFiniteError as exc:
        raise CliError(str(exc), None, 1) from exc
    checkpoint = trainer.checkpoint_path
    trained = trainer.step - first_step
    resumed = f" (steps {first_step + 1}-{trainer.step}, resumed at step {first_step})" if first_step else ""
    print(f"trained {trained} steps{resumed} in {time.perf_counter() - t0:.1f}s; checkpoint: "
          f"{checkpoint}, log: {os.path.join(out_dir, 'metrics.jsonl')}, "
          f"curve: {os.path.join(out_dir, 'loss.png')}")
    print(f"held-out test set ({task.name}: {len(task.test)} pairs never used in training or validation):")
    _report(model.eval(), task, vocab, task.test, beam_sizes=tuple(args.eval_beams))
    return 0


# -- translate ---------------------------------------------------------------------------


def _read_sentences(args) -> list[tuple[str, str]]:
    """(sentence, where it came from) for each input; an empty one is an error naming it.

    The rule: every input line gets exactly one output line, so an empty or
    whitespace-only sentence (which has nothing to translate) is refused
    rather than skipped or given a made-up translation.
    """
    if args.text:
        sentences = [(text, f"argument {i}") for i, text in enumerate(args.text, start=1)]
    else:
        sentences = [(line, f"standard input, line {i}")
                     for i, line in enumerate(sys.stdin.read().splitlines(), start=1)]
        if not sentences:
            raise CliError("no sentences: give them as arguments or on standard input", "standard input")
    for text, where in sentences:
        if not text.strip():
            raise CliError("the sentence is empty; there is nothing to translate", where)
    return sentences


def cmd_translate(args) -> int:
    from .data.registry import saved_task  # noqa: PLC0415
    from .data.vocab import detokenize, tokenize  # noqa: PLC0415
    from .files import check_writable_dir  # noqa: PLC0415
    from .translate import translate_tokens  # noqa: PLC0415

    _set_backend(args)
    sentences = _read_sentences(args)
    if args.attention:
        with _about(f"--attention {args.attention}"):
            check_writable_dir(args.attention)
    ckpt = _load_checkpoint(args.checkpoint, "--checkpoint")
    levels = ckpt.extra.get("levels", {})
    src_level = args.level or levels.get("src", "word")
    tgt_level = levels.get("tgt", src_level)
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
        with _about(where):
            sources.append(tokenize(text, src_level))
        if len(sources[-1]) + 1 > model.cfg.max_len:          # + 1: the <eos> the source ends with
            raise CliError(f"the sentence has {len(sources[-1])} {src_level} tokens; with <eos> that is more "
                           f"than the model's max_len of {model.cfg.max_len} positions", where)
    unknown = sorted({t for src in sources for t in src if t not in ckpt.vocab})
    if unknown:
        print(f"warning: tokens not in the vocabulary (read as <unk>): {unknown[:10]}", file=sys.stderr)
    # A task whose outputs mean more than text (a parser's trees) prints them its own way.
    entry = saved_task(ckpt.extra)
    max_len = entry.max_output_len if entry is not None else None
    for src, hyp in zip(sources, translate_tokens(model, ckpt.vocab, sources, beam_size=args.beam, max_len=max_len)):
        output = detokenize(hyp, tgt_level)
        print(entry.render(detokenize(src, src_level), output) if entry is not None and entry.render else output)
    if args.attention:
        from .translate import save_attention_maps  # noqa: PLC0415
        paths = save_attention_maps(model, ckpt.vocab, sources[0], args.attention, src_level, tgt_level,
                                    beam_size=args.beam)
        print(f"wrote {len(paths)} attention heatmaps to {args.attention}", file=sys.stderr)
    return 0


# -- evaluate ----------------------------------------------------------------------------


def cmd_evaluate(args) -> int:
    from .data.loading import TaskData, read_pairs  # noqa: PLC0415
    from .data.registry import load_task, saved_task  # noqa: PLC0415

    _set_backend(args)
    if (args.task is None) == (args.data is None):
        raise CliError("give exactly one of --data pairs.tsv or --task NAME", "--task/--data")
    if args.data and args.split is not None:
        raise CliError("--split chooses a split of --task; with --data the whole file is evaluated", "--split")
    ckpt = _load_checkpoint(args.checkpoint, "--checkpoint")
    levels = ckpt.extra.get("levels", {})
    if args.data:
        src_level = args.level or levels.get("src", "word")
        tgt_level = levels.get("tgt", src_level)
        with _about(f"--data {args.data}"):
            pairs, notes = read_pairs(args.data, src_level, tgt_level, header=args.header, max_length=None)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        if levels.get("src_lowercase"):      # as translate does: the model saw lower-case sources only
            pairs = [([token.lower() for token in src], tgt) for src, tgt in pairs]
        task = TaskData(os.path.basename(args.data), ckpt.vocab, [], [], pairs, src_level, tgt_level,
                        levels.get("bleu_tokenize", "char" if tgt_level == "char" else "13a"),
                        entry=saved_task(ckpt.extra))       # the trained task's scores, if it has its own
    else:
        saved_seed = ckpt.extra.get("settings", {}).get("seed", 0)
        seed = args.seed if args.seed is not None else saved_seed if isinstance(saved_seed, int) else 0
        with _about(f"--task {args.task}"):
            task = load_task(args.task, seed=seed)
        pairs = getattr(task, args.split or "test")
    if args.limit is not None:
        pairs = pairs[: args.limit]
    beams = (1,) if args.beam == 1 else (1, args.beam)
    _report(ckpt.model.eval(), task, ckpt.vocab, pairs, beam_sizes=beams, n_samples=args.samples)
    return 0


def cmd_tasks(args) -> int:
    from .data.registry import TASKS  # noqa: PLC0415

    for task in TASKS.values():
        steps = task.recipe.settings.steps
        print(f"{task.name:<16} {task.description}  [{task.source}{'; ' + task.license if task.license else ''}; "
              f"recipe: preset {task.recipe.preset}, {steps} steps]")
    return 0


def _task_names_help() -> str:
    """The task names for --help, read from the registry (its modules import only numpy)."""
    from .data.registry import task_names  # noqa: PLC0415

    return ", ".join(task_names())


def build_parser() -> argparse.ArgumentParser:
    from .data.loading import MAX_DATA_LENGTH  # noqa: PLC0415
    from .model import PRESETS, field_help  # noqa: PLC0415

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
                                   "checkpoint.prev.npz); Ctrl-C or SIGTERM save one and print how to resume.")
    p.add_argument("--task", help=f"a named task: {_task_names_help()} (see the 'tasks' command)")
    p.add_argument("--data", help="a TSV file of source<TAB>target lines (instead of --task); duplicate pairs "
                                  "are removed and the rest split into train / valid / test")
    p.add_argument("--level", choices=["char", "word"], default=None,
                   help="tokenization of --data files (default: char)")
    p.add_argument("--header", action="store_true", help="the first line of --data holds column names: skip it")
    p.add_argument("--max-length", type=positive_int, default=None, metavar="TOKENS",
                   help=f"longest --data sentence accepted, in tokens per side (default {MAX_DATA_LENGTH}); "
                        "a longer line is an error naming it")
    p.add_argument("--preset", choices=list(PRESETS), help="model size preset; default: the task's")
    p.add_argument("--set", action="append", metavar="FIELD=VALUE",
                   help="change one field of the preset's model configuration; repeat for more, e.g. "
                        f"--set positional=learned --set P_drop=0. Fields (preset base's values): {field_help()}")
    p.add_argument("--steps", type=positive_int, help="optimizer steps (default: the task's)")
    p.add_argument("--batch-size", type=positive_int, help="sentence pairs per batch")
    p.add_argument("--max-tokens", type=positive_int, help="cap on padded tokens per batch")
    p.add_argument("--lr-factor", type=positive_float, help="multiplier on the §5.3 learning-rate schedule")
    p.add_argument("--warmup", type=positive_int, help="warm-up steps of the schedule")
    p.add_argument("--clip-norm", type=positive_float, help="clip the global gradient norm to this value")
    p.add_argument("--valid-every", type=positive_int,
                   help="validate (and save a checkpoint) every this many steps")
    p.add_argument("--checkpoint-every", type=positive_int,
                   help="also save a checkpoint every this many steps")
    p.add_argument("--eval-beams", type=positive_int, nargs="+", default=[1],
                   help="beam sizes to evaluate the test set with at the end (default: 1 = greedy)")
    p.add_argument("--seed", type=non_negative_int, default=None,
                   help="seed of the data split, the initial weights and dropout (default 0; when resuming, "
                        "the checkpoint's)")
    p.add_argument("--out", help="output directory (default: runs/TASK)")
    p.add_argument("--overwrite", action="store_true",
                   help="start afresh even if --out holds an earlier run's checkpoint (it is replaced)")
    p.add_argument("--resume", help="continue from this checkpoint")
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
    p.add_argument("--beam", type=positive_int, default=4, help="beam size (1 = greedy; default 4, as in §6.1)")
    p.add_argument("--level", choices=["char", "word"], help="source tokenization (default: the checkpoint's)")
    p.add_argument("--attention", metavar="OUT_DIR",
                   help="also save attention heatmaps (every layer and head) for the first sentence")
    _add_common(p)
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("evaluate", help="exact match, BLEU and chrF of a checkpoint on a TSV file or a task split "
                                        "(a parser: bracket F1, exact trees, ill-formed outputs)")
    p.add_argument("--checkpoint", required=True, help="a checkpoint.npz written by train")
    p.add_argument("--data", help="a TSV file of source<TAB>target lines (all of it is evaluated)")
    p.add_argument("--header", action="store_true", help="the first line of --data holds column names: skip it")
    p.add_argument("--task", help="a named task (uses its --split)")
    p.add_argument("--split", choices=["train", "valid", "test"], default=None,
                   help="which split of --task to evaluate (default: test)")
    p.add_argument("--level", choices=["char", "word"], help="tokenization of --data (default: the checkpoint's)")
    p.add_argument("--beam", type=positive_int, default=4,
                   help="also evaluate beam search of this size (1: greedy only)")
    p.add_argument("--limit", type=positive_int, help="evaluate only the first N pairs")
    p.add_argument("--samples", type=non_negative_int, default=5, help="sample decodes to print (0: none)")
    p.add_argument("--seed", type=non_negative_int, default=None,
                   help="split seed of --task (default: the one the checkpoint was trained with)")
    _add_common(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("tasks", help="list the built-in tasks")
    _add_common(p, backend_option=False)
    p.set_defaults(func=cmd_tasks)
    return parser


def _run(argv: list[str]) -> int:
    from .errors import EnvironmentVariableError, NonFiniteError  # noqa: PLC0415

    try:
        from . import backend  # noqa: F401, PLC0415  (reads the environment variables)
    except EnvironmentVariableError as exc:
        raise CliError(str(exc), exc.variable, 2) from exc
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except NonFiniteError as exc:
        raise CliError(str(exc), None, 1) from exc


def main(argv=None) -> int:
    """Run the command line; returns the exit code (0 success, 2 bad input, 1 failure, 130/143 signals)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    previous_term = None
    if threading.current_thread() is threading.main_thread():
        def on_term(signum, frame):
            raise _Terminated()
        previous_term = signal.signal(signal.SIGTERM, on_term)
    debug = False

    def fail(line: str, code: int, exc: BaseException | None = None) -> int:
        """Print ``error: line`` (after exc's traceback if --debug asked for it); return ``code``."""
        if debug and exc is not None:
            traceback.print_exception(exc)
        print(f"error: {line}", file=sys.stderr)
        return code

    try:
        debug = _debug_requested(argv)
        return _run(argv)
    except CliError as exc:
        return fail(str(exc), exc.code, exc.__cause__)
    except KeyboardInterrupt as exc:
        return fail("interrupted (Ctrl-C)", 130, exc)
    except _Terminated:
        return fail("terminated (SIGTERM)", 143)
    except BAD_INPUT as exc:
        return fail(_message(exc), 2, exc)
    except MemoryError as exc:
        return fail("out of memory (try a smaller --batch-size or --max-tokens, or a smaller --preset)", 1, exc)
    except OSError as exc:
        return fail(_message(exc), 1, exc)
    except Exception as exc:  # noqa: BLE001 - the one place every other error is turned into a line
        hint = "" if debug else f" (run with --debug or {DEBUG_VARIABLE}=1 for the traceback)"
        return fail(f"internal error: {type(exc).__name__}: {exc}{hint}", 1, exc)
    finally:
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)


if __name__ == "__main__":
    sys.exit(main())
