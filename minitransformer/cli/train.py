"""``train``: a Transformer trained on a named task or a TSV file, every option checked before the
first step; a checkpoint at every validation and at the end; the test set decoded at the end."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from .common import (
    OPTION_NAMES,
    OUTPUT_CLOSED,
    RANKS,
    CliError,
    about,
    add_common,
    add_parents_option,
    check_output_dir,
    load_checkpoint,
    memory_for,
    positive_float,
    positive_int,
    quiet_numpy,
    set_backend,
    train_option,
)
from .resume import check_resumed_model, model_changes, resume_command, train_tokenization
from .scoring import check_decoding_fits, report
from .strategies import add_eval_option, eval_strategies


@dataclass(frozen=True)
class TrainRequest:
    """What ``train`` was asked for, as the options gave it (None: not given)."""

    task: str | None = None
    data: str | None = None
    level: str | None = None
    bpe_merges: int | None = None
    header: bool = False
    max_length: int | None = None
    preset: str | None = None
    model: tuple[str, ...] = ()          # --set FIELD=VALUE, as typed
    settings: dict = field(default_factory=dict)     # the TrainSettings fields given (field -> value)
    eval: tuple | None = None            # --eval's strategies
    out: str | None = None
    overwrite: bool = False
    resume: str | None = None
    check_sync_every: int | None = None
    progress: bool = True
    progress_every: float = 30.0
    backend: str | None = None
    argv: tuple[str, ...] = ()           # the whole command line, for the resume command
    parents: bool = False                # --parents: create every missing folder of --out

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TrainRequest:
        from ..options import given  # noqa: PLC0415

        settings = given(args, args.settings_options)
        return cls(args.task, args.data, args.level, args.bpe_merges, args.header, args.max_length, args.preset,
                   tuple(args.set or ()), settings, tuple(args.eval) if args.eval else None, args.out,
                   args.overwrite, args.resume, args.check_sync_every, not args.no_progress, args.progress_every,
                   args.backend, tuple(args.argv), args.parents)

    @property
    def source(self) -> str:
        """The option that names the data, for messages."""
        return f"--task {self.task}" if self.task else f"--data {self.data}"


def _task_names_help() -> str:
    """The task names for --help, read from the registry (its modules import only numpy)."""
    from ..data.registry import task_names  # noqa: PLC0415

    return ", ".join(task_names())


def register(sub) -> None:
    from ..data.loading import MAX_DATA_LENGTH  # noqa: PLC0415
    from ..data.registry import PRESETS  # noqa: PLC0415
    from ..model import DATA_FIELDS, TransformerConfig  # noqa: PLC0415
    from ..options import add_options, field_help  # noqa: PLC0415
    from ..settings import TrainSettings  # noqa: PLC0415

    p = sub.add_parser("train", help="train a model on a task or a TSV file",
                       description=f"Train a Transformer on a named task ({_task_names_help()}; "
                                   "`python -m minitransformer tasks` describes them) or a TSV file. A checkpoint "
                                   "is saved at every validation and at the end (the one replaced is kept as "
                                   "checkpoint.prev.npz); Ctrl-C, SIGTERM, SIGHUP or a closed output pipe save "
                                   "one and print how to resume.")
    p.add_argument("--task", help=f"a named task: {_task_names_help()} (see the 'tasks' command)")
    p.add_argument("--data", help="a TSV file of source<TAB>target lines (instead of --task); duplicate pairs "
                                  "are removed and the rest split into train / valid / test")
    p.add_argument("--level", choices=["char", "word", "space", "bpe"], default=None,
                   help="tokenization of both sides of --data: char (default); word (punctuation split off: "
                        "'March 5, 2024' is March|5|,|2024, but twenty-one and 1,234 stay whole); space (split "
                        "at spaces only, for text that is already tokens); or bpe (byte-pair pieces, "
                        "§5.1, learned on the training split, one vocabulary for source and target; give "
                        "--bpe-merges). With --task: bpe, or the task's own level; left out, the task's own "
                        "tokenization (the emoji tasks: byte-pair pieces, 1,000 merges)")
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
                        f"--set positional=learned --set P_drop=0. Fields (preset base's values): "
                        f"{field_help(TransformerConfig, DATA_FIELDS)}")
    # Every TrainSettings field is an option (options.add_options), checked and explained by the field itself.
    p.set_defaults(settings_options=add_options(p, TrainSettings, aliases=OPTION_NAMES["TrainSettings"]))
    add_eval_option(p)
    p.add_argument("--out", help="output directory (default: runs/TASK); its folder must exist (see --parents)")
    add_parents_option(p)
    p.add_argument("--overwrite", action="store_true",
                   help="start afresh even if --out holds an earlier run's checkpoint (it is replaced)")
    p.add_argument("--resume", help="continue from this checkpoint")
    p.add_argument("--check-sync-every", type=positive_int, metavar="STEPS",
                   help="under mpiexec -n N: compare a hash of the parameters on every rank every STEPS steps "
                        "(default: at every checkpoint; one process: no effect)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    p.add_argument("--progress-every", type=positive_float, default=30.0, metavar="SECONDS",
                   help="when the output is not a terminal, print a progress line this often (default 30)")
    add_common(p)
    p.set_defaults(handler=lambda args: run(TrainRequest.from_args(args)))


def _ranks(req: TrainRequest):
    """The communicator of this run (``distributed.world()``): one process, or the ranks of mpiexec.

    On ranks other than 0, standard output and error go to /dev/null: rank 0 speaks for the run
    (an error only one rank meets still reaches the terminal, see ``app.main``)."""
    from .. import distributed  # noqa: PLC0415
    from ..errors import EnvironmentVariableError  # noqa: PLC0415

    rank, size, _ = distributed.launched()
    if rank == 0 and size > 1:
        # Before MPI starts: the one process left to speak if a rank is killed (distributed.start_sentinel).
        if req.resume:
            distributed.start_sentinel(distributed.lost_rank_message(
                f"the checkpoint it resumed from, {req.resume}, is intact",
                resume_command(list(req.argv), req.resume, size)))
        else:
            distributed.start_sentinel(distributed.lost_rank_message(
                "no checkpoint was saved yet", None) + "; start it again: " + shlex.join(
                    ["mpiexec", "-n", str(size), "python", "-m", "minitransformer", *req.argv]))
    try:
        comm = distributed.world()
    except (distributed.MPIUnavailable, EnvironmentVariableError) as exc:
        raise CliError(str(exc), exc.variable, 2) from None
    if comm.size > 1:
        RANKS.several = True
        comm.check_every = req.check_sync_every
        comm.resume_hint = lambda path: resume_command(list(req.argv), path, comm.size)
    if not comm.is_root:
        sys.stdout = sys.stderr = open(os.devnull, "w", encoding="utf-8")      # for the rest of the process
    return comm


def _check_options(req: TrainRequest) -> None:
    if (req.task is None) == (req.data is None):
        raise CliError("give exactly one of --task NAME or --data pairs.tsv", "--task/--data")
    if req.task is not None:
        # These shape how a --data file is read; a named task fixes its own tokenization (which
        # --level bpe may replace: byte-pair pieces learned on its training split; --level with
        # the task's own level names it, which the emoji tasks need to train on characters) and splits.
        from ..data.registry import get_task  # noqa: PLC0415

        with about(f"--task {req.task}"):
            own = get_task(req.task).own_level
        for option, given in (("--level", req.level not in (None, "bpe", own)),
                              ("--header", req.header), ("--max-length", req.max_length is not None)):
            if given:
                allowed = "--level bpe" + (f" or --level {own}, its own" if own else "")
                raise CliError(f"{option} applies to --data files only; task {req.task!r} fixes its own "
                               f"tokenization and splits (except {allowed})", option)


def _check_outputs(req: TrainRequest, out_dir: str) -> None:
    """No file the run writes into ``out_dir`` is its --data file (files.refuse_inputs; --resume may be
    the folder's own checkpoint: that is how a run continues)."""
    from ..files import refuse_inputs  # noqa: PLC0415
    from ..snapshots import output_files  # noqa: PLC0415

    if req.data is None:
        return
    for path in output_files(out_dir):
        with about(f"--out {out_dir}"):
            refuse_inputs(path, [("--data", req.data)])


def _resumed(req: TrainRequest, changes: dict):
    """(checkpoint, its TrainSettings) of --resume, checked against the options; (None, None) without it."""
    from ..runsetup import check_resumable  # noqa: PLC0415
    from ..settings import TrainSettings  # noqa: PLC0415

    if req.resume is not None and not req.resume.strip():
        # An empty --resume would otherwise be "no --resume": a fresh run where a resumed one was asked for.
        raise CliError("the checkpoint to resume from is empty; name a checkpoint.npz, or leave --resume out",
                       "--resume")
    if not req.resume:
        return None, None
    with memory_for("loading the checkpoint", f"--resume {req.resume}"):
        ckpt = load_checkpoint(req.resume, "--resume")
    with about(f"--resume {req.resume}"):
        saved = TrainSettings.from_dict(ckpt.extra.get("settings", {}), "the checkpoint's training settings")
    check_resumed_model(ckpt, req.preset, changes, req.resume)
    with about(f"--resume {req.resume}"):
        check_resumable(ckpt)
    return ckpt, saved


def run(req: TrainRequest) -> int:
    from ..data.loading import MAX_DATA_LENGTH  # noqa: PLC0415
    from ..data.registry import load_task  # noqa: PLC0415

    set_backend(req.backend)
    comm = _ranks(req)
    strategies = eval_strategies(req.eval)        # checked when parsed; used after the last step
    _check_options(req)
    changes = model_changes(req.model)
    # Everything that can be checked is checked before the first step.
    ckpt, saved = _resumed(req, changes)
    tokenization = train_tokenization(req, ckpt)
    # The seed splits a --data file and orders the batches: a resumed run keeps its own.
    given_seed = req.settings.get("seed")
    seed = given_seed if given_seed is not None else saved.seed if saved is not None else 0
    if saved is not None and seed != saved.seed:
        raise CliError(f"the checkpoint was trained with seed {saved.seed}; another seed would split the data and "
                       "order the batches differently (leave --seed out when resuming)", f"--seed {given_seed}")
    with about(req.source), memory_for("reading the data", req.source):
        task = load_task(req.task, req.data, seed=seed, header=req.header,
                         max_length=req.max_length if req.max_length is not None else MAX_DATA_LENGTH,
                         **tokenization)
    for note in task.notes:
        print(f"note: {note}", file=sys.stderr)
    if req.out is not None and not req.out.strip():
        raise CliError("the output folder is empty; leave --out out for runs/TASK, or name a folder", "--out")
    out_dir = req.out if req.out is not None else os.path.join("runs", task.name)
    _check_outputs(req, out_dir)
    if not comm.is_root:                        # rank 0 alone writes into the folder and holds its lock
        return _train_locked(req, task, out_dir, ckpt, saved, seed, changes, strategies, comm)
    # --out as typed creates its last missing folder (all of them with --parents); the default,
    # runs/TASK, is the package's own choice, and may create runs/ too.
    check_output_dir(out_dir, "--out", parents=req.parents or req.out is None)
    with _run_lock(out_dir):
        return _train_locked(req, task, out_dir, ckpt, saved, seed, changes, strategies, comm)


def _settings(req: TrainRequest, task, ckpt, saved, seed: int):
    """(preset, TrainSettings) of the run: the task's recipe, or the resumed run's own settings, with the
    options given (``TrainSettings.with_given``: the rules between them live with the settings)."""
    from ..runsetup import settings_for  # noqa: PLC0415

    given = {**req.settings, "seed": seed}
    preset, recipe = settings_for(task, preset=req.preset)
    if saved is None:
        _check_rules(recipe, req.settings, "the task's")
        return preset, recipe.with_given(given)
    # A resumed run continues with its own settings and model; options given now override the settings.
    preset = ckpt.extra.get("preset") or req.preset or preset
    _check_rules(saved, req.settings, "the checkpoint's")
    with about(f"--resume {req.resume}"):
        return preset, saved.with_given(given)


def _check_rules(base, given: dict, whose: str) -> None:
    """The rules between the settings (``settings.check_rules``), on ``base`` with the options ``given``,
    in the options' words: ``--keep-last 2``, and ``the task's --keep-last 5`` for a value not given."""
    from dataclasses import asdict  # noqa: PLC0415

    from ..settings import RuleError, check_rules  # noqa: PLC0415

    def words(name: str, *value) -> str:
        if not value:
            return train_option(name)
        if value[0] is None:
            return f"no {train_option(name)}"
        return ("" if name in given else f"{whose} ") + f"{train_option(name)} {value[0]}"

    try:
        check_rules({**asdict(base), **given}, words)
    except RuleError as exc:
        raise CliError(str(exc), "/".join(map(train_option, exc.fields))) from None


def _train_locked(req: TrainRequest, task, out_dir: str, ckpt, saved, seed: int, changes: dict, strategies: list,
                  comm) -> int:
    """The rest of ``train``, holding ``out_dir``'s run lock: no other run can start into the folder
    between the check for an earlier run below and this run's last save."""
    from .. import backend  # noqa: PLC0415
    from ..distributed import describe as describe_ranks  # noqa: PLC0415
    from ..model import describe  # noqa: PLC0415
    from ..runsetup import make_trainer  # noqa: PLC0415

    earlier = os.path.join(out_dir, "checkpoint.npz")
    continuing = req.resume is not None and os.path.exists(earlier) and os.path.samefile(req.resume, earlier)
    if os.path.exists(earlier) and not continuing and not req.overwrite:
        # A new run would replace the earlier one's checkpoint: never without being asked.
        raise CliError(f"{earlier} holds an earlier run; continue it with --resume {earlier}, train into another "
                       "folder with --out DIR, or replace it with --overwrite", f"--out {out_dir}")
    preset, settings = _settings(req, task, ckpt, saved, seed)
    model_options = " ".join([f"--preset {preset}", *(f"--set {t}" for t in req.model)])
    with about(f"--resume {req.resume}" if req.resume else model_options), \
            memory_for("building the model", model_options, "choose a smaller --preset or --set smaller sizes"):
        trainer = make_trainer(task, settings, preset, out_dir, resume=ckpt, config=changes, comm=comm)
    model, vocab, cfg = trainer.model, trainer.vocab, trainer.model.cfg
    check_decoding_fits(model, [src for src, _ in task.test], strategies, "--eval", " at the end (the test set)",
                        max_len=task.entry.max_output_len if task.entry is not None else None)
    print(f"task {task.name}: {len(task.train)} train / {len(task.valid)} valid / {len(task.test)} test pairs, "
          f"vocabulary {len(vocab)}")
    for warning in task.warnings:                # after every check: an error stays the only line
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    if task.bpe is not None:
        print(f"  tokenization: byte-pair encoding, {len(task.bpe.merges)} merges learned on the training split "
              f"(both sides); one vocabulary of {len(vocab)} pieces for source and target")
    changed = "".join(f" --set {name}={value}" for name, value in changes.items())
    print(f"model: preset {preset}{changed}, {model.num_parameters():,} parameters, backend {backend.backend_name()}")
    print(f"  config: {describe(cfg)}")
    print(_stopping(settings, "steps" in req.settings, task.name))
    ranks_line = describe_ranks(comm, settings)
    if ranks_line:
        print(ranks_line)
    if ckpt is not None:
        print(f"resuming from {req.resume} at step {trainer.step}")
    return _train_and_report(req, task, trainer, settings, out_dir, strategies)


def _stopping(settings, steps_given: bool, name: str) -> str:
    """When the run will end, and, when it will not stop once solved, why not."""
    from ..settings import solved_words  # noqa: PLC0415

    s = settings
    if s.stop_when_solved:
        return (f"stops: once solved ({solved_words(s)} validation exact match at {s.stop_when_solved} validations "
                f"in a row, "
                f"every {s.valid_every} steps, on up to {s.valid_decode} validation pairs), at most {s.steps:,} steps")
    if steps_given:
        return (f"stops: after exactly {s.steps:,} steps (--steps), solved or not; add --stop-when-solved 2 to stop "
                "once validation exact match is 100% twice in a row")
    return (f"stops: after {s.steps:,} steps, the fixed length of {name}'s recipe (it does not stop once solved); "
            "--stop-when-solved 2 would stop at the second 100% validation in a row")


@contextmanager
def _run_lock(out_dir: str):
    """Hold ``out_dir``'s run lock (``runlock``); another run holding it is a one-line error naming its PID."""
    from ..runlock import FolderInUseError, hold  # noqa: PLC0415

    try:
        with hold(out_dir):
            yield
    except FolderInUseError as exc:
        raise CliError(str(exc), f"--out {out_dir}", 2) from exc


def _train(req: TrainRequest, trainer, settings, source: str) -> int | None:
    """The training loop; None when it ran to its end, else the exit code of the run it stopped."""
    from .. import distributed  # noqa: PLC0415
    from ..errors import NonFiniteError  # noqa: PLC0415
    from ..train import OutputWriteError, TrainingInterrupted  # noqa: PLC0415

    try:
        with quiet_numpy(), memory_for("while training", None,
                                       "try a smaller --batch-size or --max-tokens, or a smaller model"):
            trainer.run(progress=req.progress, progress_every=req.progress_every)
    except TrainingInterrupted as stop:
        print(f"{stop}", file=sys.stderr)
        if stop.checkpoint and stop.step >= settings.steps:
            # The signal came during the last step: training is complete, only the report was skipped.
            print(f"training is complete ({stop.step} of {settings.steps} steps); the test-set report was skipped. "
                  f"Score the checkpoint with: python -m minitransformer evaluate --checkpoint "
                  f"{shlex.quote(stop.checkpoint)} {source}", file=sys.stderr)
        elif stop.checkpoint:
            print(f"resume with: {resume_command(list(req.argv), stop.checkpoint, trainer.comm.size)}",
                  file=sys.stderr)
        distributed.sentinel_quiet()   # the run has said how it ended; mpiexec may kill this rank any moment now
        return stop.exit_code
    except OutputWriteError as exc:
        how = (f"; make room (or fix the folder's permissions) and resume with: "
               f"{resume_command(list(req.argv), exc.intact[0], trainer.comm.size)}" if exc.intact else
               "; make room (or fix the folder's permissions) and start the run again")
        raise CliError(f"{exc}{how}", None, 1) from exc
    except NonFiniteError as exc:
        raise CliError(str(exc), None, 1) from exc
    return None


def _train_and_report(req: TrainRequest, task, trainer, settings, out_dir: str, strategies: list) -> int:
    """The training loop, then the test-set report (decoded with ``strategies``, train --eval):
    what ``train`` does once everything is checked."""
    from .. import streams  # noqa: PLC0415
    from ..data.fingerprint import proves_held_out  # noqa: PLC0415

    source = f"--task {task.name}" if req.task else f"--data {shlex.quote(req.data)}"
    first_step = trainer.step
    t0 = time.perf_counter()
    stopped = _train(req, trainer, settings, source)
    if stopped is not None:
        return stopped
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
    _test_report(trainer, task, strategies, checkpoint, source)
    trainer.comm.barrier("the end of the run (rank 0 decoding the test set)", timeout=False)
    if streams.output_lost() == "stdout":
        print(f"standard output was closed: the test-set report was cut short; the checkpoint is saved ({checkpoint}). "
              f"Score it with: python -m minitransformer evaluate --checkpoint {shlex.quote(checkpoint)} {source}",
              file=sys.stderr)
        return OUTPUT_CLOSED
    return 0


def _test_report(trainer, task, strategies: list, checkpoint: str, source: str) -> None:
    """The test set decoded with each strategy of --eval, by the last step's model and (average_last) the average."""
    with quiet_numpy(), memory_for("scoring the test set", "--eval",
                                   f"the checkpoint is saved ({checkpoint}): score it with a smaller beam, "
                                   f"python -m minitransformer evaluate --checkpoint {shlex.quote(checkpoint)} "
                                   f"{source} --beam 1"):
        if trainer.average is not None:
            print(f"the last step's checkpoint ({checkpoint}):")
        report(trainer.model.eval(), task, trainer.vocab, task.test, strategies)
        if trainer.average is not None:           # average_last (§6.1): the average is scored too
            from ..checkpoint import load_checkpoint as load  # noqa: PLC0415

            path, steps = trainer.average
            print(f"the average of the last {len(steps)} checkpoints (§6.1; steps "
                  f"{', '.join(f'{k:,}' for k in steps)}): {path}")
            report(load(path).model.eval(), task, trainer.vocab, task.test, strategies, n_samples=0)
