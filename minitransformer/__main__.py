"""Command line: ``python -m minitransformer {train,translate,evaluate,tasks} --help``."""

from __future__ import annotations

import argparse
import os
import sys
import time

from . import __version__, backend
from .model import PRESETS


def _add_backend(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=["numpy", "cupy"], default=None,
                   help="array library: numpy (CPU, default) or cupy (CUDA GPU); "
                        "also settable with MINITRANSFORMER_BACKEND")


def _set_backend(args) -> None:
    if args.backend:
        backend.set_backend(args.backend)


def _report(model, task, vocab, pairs, beam_sizes=(1,), n_samples=5, stream=None) -> dict:
    """Decode ``pairs`` (token lists), print samples and scores; return the scores."""
    from .data.vocab import detokenize  # noqa: PLC0415
    from .translate import score_translations  # noqa: PLC0415

    stream = stream or sys.stdout   # looked up now: a default of sys.stdout would miss redirections
    results = {}
    for beam in beam_sizes:
        r = score_translations(model, vocab, pairs, task.tgt_level, task.bleu_tokenize, beam_size=beam)
        name = "greedy" if beam == 1 else f"beam {beam}"
        if beam == beam_sizes[0] and n_samples > 0:
            print("sample decodes:", file=stream)
            for (src, _), hyp, ref in list(zip(pairs, r["hyps"], r["refs"]))[:n_samples]:
                mark = "✓" if hyp == ref else "✗"
                print(f"  {mark} {detokenize(src, task.src_level)!r} -> {hyp!r}"
                      + ("" if hyp == ref else f"  (expected {ref!r})"), file=stream)
        results[name] = {k: r[k] for k in ("exact_match", "bleu", "chrf", "seconds")}
        print(f"{name:>7}: exact match {100 * r['exact_match']:.2f}% ({len(pairs)} sentences), "
              f"BLEU {r['bleu']:.2f}, chrF {r['chrf']:.2f}  [{r['seconds']:.1f}s]", file=stream)
    return results


# -- train -------------------------------------------------------------------------------


def cmd_train(args) -> int:
    from .checkpoint import load_checkpoint  # noqa: PLC0415
    from .data.tsv import DataError  # noqa: PLC0415
    from .train import NonFiniteLossError, TrainSettings, load_task, make_trainer, settings_for  # noqa: PLC0415

    _set_backend(args)
    if (args.task is None) == (args.data is None):
        print("error: give exactly one of --task NAME or --data pairs.tsv", file=sys.stderr)
        return 2
    try:
        task = load_task(args.task, args.data, level=args.level, seed=args.seed)
    except (DataError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    overrides = dict(steps=args.steps, batch_size=args.batch_size, max_tokens=args.max_tokens,
                     lr_factor=args.lr_factor, warmup_steps=args.warmup, clip_norm=args.clip_norm,
                     seed=args.seed, valid_every=args.valid_every, checkpoint_every=args.checkpoint_every)
    preset, settings = settings_for(task.name, preset=args.preset, **overrides)
    ckpt = None
    if args.resume:
        ckpt = load_checkpoint(args.resume)
        # A resumed run continues with its own settings; flags given now override them.
        saved = TrainSettings(**ckpt.extra.get("settings", {}))
        settings = TrainSettings(**{**vars(saved), **{k: v for k, v in overrides.items() if v is not None}})
    out_dir = args.out or os.path.join("runs", task.name)
    try:
        trainer = make_trainer(task, settings, preset, out_dir, resume=ckpt)
    except ValueError as exc:
        print(f"error: {args.resume}: {exc}", file=sys.stderr)
        return 2
    model, vocab, cfg = trainer.model, trainer.vocab, trainer.model.cfg
    print(f"task {task.name}: {len(task.train)} train / {len(task.valid)} valid / {len(task.test)} test pairs, "
          f"vocabulary {len(vocab)}")
    print(f"model: preset {preset}, d_model={cfg.d_model} h={cfg.h} N={cfg.N} d_ff={cfg.d_ff} "
          f"P_drop={cfg.P_drop} ε_ls={cfg.eps_ls}, {model.num_parameters():,} parameters, "
          f"backend {backend.backend_name()}")
    if ckpt is not None:
        print(f"resuming from {args.resume} at step {trainer.step}")
    t0 = time.perf_counter()
    try:
        trainer.run(progress=not args.no_progress)
    except NonFiniteLossError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"trained {trainer.step} steps in {time.perf_counter() - t0:.1f}s; checkpoint: "
          f"{os.path.join(out_dir, 'checkpoint.npz')}, log: {os.path.join(out_dir, 'metrics.jsonl')}, "
          f"curve: {os.path.join(out_dir, 'loss.png')}")
    print(f"held-out test set ({task.name}):")
    _report(model.eval(), task, vocab, task.test, beam_sizes=tuple(args.eval_beams))
    return 0


# -- translate ---------------------------------------------------------------------------


def cmd_translate(args) -> int:
    from .checkpoint import load_checkpoint  # noqa: PLC0415
    from .data.vocab import detokenize, tokenize  # noqa: PLC0415
    from .translate import translate_tokens  # noqa: PLC0415

    _set_backend(args)
    ckpt = load_checkpoint(args.checkpoint)
    levels = ckpt.extra.get("levels", {})
    src_level = args.level or levels.get("src", "word")
    tgt_level = levels.get("tgt", src_level)
    model = ckpt.model.eval()
    sentences = args.text or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not sentences:
        print("error: give sentences as arguments or on standard input", file=sys.stderr)
        return 2
    sources = [tokenize(s, src_level) for s in sentences]
    unknown = sorted({t for src in sources for t in src if t not in ckpt.vocab})
    if unknown:
        print(f"warning: tokens not in the vocabulary (read as <unk>): {unknown[:10]}", file=sys.stderr)
    for sentence, hyp in zip(sentences, translate_tokens(model, ckpt.vocab, sources, beam_size=args.beam)):
        print(detokenize(hyp, tgt_level))
    if args.attention:
        from .translate import save_attention_maps  # noqa: PLC0415
        paths = save_attention_maps(model, ckpt.vocab, sources[0], args.attention, src_level, tgt_level,
                                    beam_size=args.beam)
        print(f"wrote {len(paths)} attention heatmaps to {args.attention}", file=sys.stderr)
    return 0


# -- evaluate ----------------------------------------------------------------------------


def cmd_evaluate(args) -> int:
    from .checkpoint import load_checkpoint  # noqa: PLC0415
    from .data.tsv import DataError, load_tsv  # noqa: PLC0415
    from .data.vocab import tokenize  # noqa: PLC0415
    from .train import TaskData, load_task  # noqa: PLC0415

    _set_backend(args)
    ckpt = load_checkpoint(args.checkpoint)
    levels = ckpt.extra.get("levels", {})
    if (args.task is None) == (args.data is None):
        print("error: give exactly one of --data pairs.tsv or --task NAME", file=sys.stderr)
        return 2
    if args.data:
        src_level = args.level or levels.get("src", "word")
        tgt_level = levels.get("tgt", src_level)
        try:
            pairs = [(tokenize(s, src_level), tokenize(t, tgt_level)) for s, t in load_tsv(args.data)]
        except (DataError, FileNotFoundError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        task = TaskData(os.path.basename(args.data), ckpt.vocab, [], [], pairs, src_level, tgt_level,
                        levels.get("bleu_tokenize", "char" if tgt_level == "char" else "13a"))
    else:
        task = load_task(args.task, seed=args.seed)
        pairs = getattr(task, args.split)
    if args.limit:
        pairs = pairs[: args.limit]
    beams = (1,) if args.beam == 1 else (1, args.beam)
    _report(ckpt.model.eval(), task, ckpt.vocab, pairs, beam_sizes=beams, n_samples=args.samples)
    return 0


def cmd_tasks(args) -> int:
    from .train import RECIPES, task_names  # noqa: PLC0415
    from .data import translation  # noqa: PLC0415

    for name in task_names():
        if name in translation.TASKS:
            t = translation.TASKS[name]
            print(f"{name:<16} {t.description}  [{t.source}; {t.license}]")
        else:
            print(f"{name:<16} synthetic: {name} a random sequence of 10 symbols, lengths 1-10 "
                  f"(default {RECIPES[name].settings.steps} steps)")
    return 0


def _task_names_help() -> str:
    """The task names for --help (the data modules import only numpy, not the data packages)."""
    from .data.tasks import SYNTHETIC_TASKS  # noqa: PLC0415
    from .data.translation import TASKS  # noqa: PLC0415

    return ", ".join([*SYNTHETIC_TASKS, *TASKS])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m minitransformer",
                                     description="Train, run and evaluate the Transformer of 'Attention Is All You Need'.")
    parser.add_argument("--version", action="version", version=f"minitransformer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a model on a task or a TSV file",
                       description="Train a Transformer. Tasks: copy, reverse, and the offline translation "
                                   "tasks listed by `python -m minitransformer tasks`.")
    p.add_argument("--task", help=f"a named task: {_task_names_help()} (see the 'tasks' command)")
    p.add_argument("--data", help="a TSV file of source<TAB>target lines (instead of --task)")
    p.add_argument("--level", choices=["char", "word"], default="char",
                   help="tokenization of --data files (default: char)")
    p.add_argument("--preset", choices=list(PRESETS), help="model size preset; default: the task's")
    p.add_argument("--steps", type=int, help="optimizer steps (default: the task's)")
    p.add_argument("--batch-size", type=int, help="sentence pairs per batch")
    p.add_argument("--max-tokens", type=int, help="cap on padded tokens per batch")
    p.add_argument("--lr-factor", type=float, help="multiplier on the §5.3 learning-rate schedule")
    p.add_argument("--warmup", type=int, help="warm-up steps of the schedule")
    p.add_argument("--clip-norm", type=float, help="clip the global gradient norm to this value")
    p.add_argument("--valid-every", type=int, help="validate every this many steps")
    p.add_argument("--checkpoint-every", type=int, help="also save a checkpoint every this many steps")
    p.add_argument("--eval-beams", type=int, nargs="+", default=[1],
                   help="beam sizes to evaluate the test set with at the end (default: 1 = greedy)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the initial weights, dropout, the batch order and the task's "
                        "train/valid/test split (default: 0; evaluate --seed must match it)")
    p.add_argument("--out", help="output directory (default: runs/TASK)")
    p.add_argument("--resume", help="continue from this checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_backend(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("translate", help="translate sentences with a trained checkpoint")
    p.add_argument("text", nargs="*", help="sentences (default: read lines from standard input)")
    p.add_argument("--checkpoint", required=True, help="a checkpoint.npz written by train")
    p.add_argument("--beam", type=int, default=4, help="beam size (1 = greedy; default 4, as in §6.1)")
    p.add_argument("--level", choices=["char", "word"], help="source tokenization (default: the checkpoint's)")
    p.add_argument("--attention", metavar="OUT_DIR",
                   help="also save attention heatmaps (every layer and head) for the first sentence")
    _add_backend(p)
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("evaluate", help="exact match, BLEU and chrF of a checkpoint on a TSV file or a task split")
    p.add_argument("--checkpoint", required=True, help="a checkpoint.npz written by train")
    p.add_argument("--data", help="a TSV file of source<TAB>target lines")
    p.add_argument("--task", help="a named task (uses its --split)")
    p.add_argument("--split", choices=["train", "valid", "test"], default="test",
                   help="which part of --task to evaluate on (default: test, the held-out pairs)")
    p.add_argument("--level", choices=["char", "word"], help="tokenization of --data (default: the checkpoint's)")
    p.add_argument("--beam", type=int, default=4, help="also evaluate beam search of this size (1: greedy only)")
    p.add_argument("--limit", type=int, help="evaluate only the first N pairs")
    p.add_argument("--samples", type=int, default=5, help="sample decodes to print")
    p.add_argument("--seed", type=int, default=0, help="split seed of --task (must match training)")
    _add_backend(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("tasks", help="list the built-in tasks")
    p.set_defaults(func=cmd_tasks)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
