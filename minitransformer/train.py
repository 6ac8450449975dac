"""Training: the loop (§5), validation, the metrics log and checkpoints.

(``runsetup.py`` sets a run up: the model, the task's recipe, the checks before a resume.)

One training step (§5.3):
    logits = model.forward(src, tgt_in)            # teacher forcing
    loss   = label-smoothed cross-entropy (§5.4)
    model.backward(dloss/dlogits)                    # fills every .grad
    Adam step with lr = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)   (the default schedule)

Resuming is exact: the checkpoint stores the parameters, Adam's moments, the
step and the position in the epoch; the batches of an epoch are a pure function
of (seed, epoch), and the dropout masks of a step a pure function of (seed,
step). A resumed run therefore repeats, bit for bit, what the uninterrupted run
would have done, on NumPy and on CuPy alike (CuPy's generators have no state
that a checkpoint could save, so the masks must not depend on one).

Nothing is lost, nothing is silent:

* the run saves ``checkpoint.npz`` at every validation, every
  ``checkpoint_every`` steps and at the end, keeping the file it replaces as
  ``checkpoint.prev.npz``; a state with NaN or inf is never saved;
* SIGINT (Ctrl-C), SIGTERM, SIGHUP (the terminal was closed) or SIGPIPE, or a
  standard output or error whose reader is gone (``train … | head``, see
  ``streams``), stop the run at the end of the current step, save a checkpoint
  and raise :class:`TrainingInterrupted`; a second signal during that save is
  acknowledged and ignored until the file is written;
* one run per output folder: the folder's lock (``runlock``) is held for the
  whole run, and a second run into it stops at once naming the first one's PID;
* a checkpoint (or the log) that cannot be written, for a full disk say, stops
  the run with :class:`OutputWriteError`, which names the file, the step, and
  the last checkpoint that is intact;
* the checkpoint records a fingerprint of the data and of its split
  (``data.fingerprint``): resuming on other data, or on the same data split
  differently, is refused (``runsetup.make_trainer``);
* a step whose loss or gradient is not finite is skipped (no update) with a
  warning; ``max_consecutive_skips`` of them in a row stop the run with
  :class:`NonFiniteLossError` or ``optim.NonFiniteGradientError``;
* metrics.jsonl is strict JSON (a NaN or inf is written as null), and a last
  line cut short by a killed run is dropped, with a warning, on resume;
* temporary files a killed save left behind are removed when a run starts.

Stopping when solved (``settings.stop_when_solved = K``, the copy and reverse recipes'
K = 2): the run ends after the validation that makes K validations in a row at 100%
exact match, saying "solved at step N". On several ranks every rank takes the same
decision at the same step, because it reads the same figure: ``validate`` sums the ranks'
counts of correct sequences with Allreduce, and a sum of whole numbers is exact, so every
rank holds the same count. The number of 100% validations in a row so far is saved in the
checkpoint (``solved_streak``), so a resumed run carries on counting where it stopped.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import asdict

import numpy

from . import distributed, runlock, snapshots
from .checkpoint import save_checkpoint
from .data.batching import Batch, batch_iterator, batch_plan
from .data.vocab import Vocab
from .decoding import NonFiniteOutputError
from .distributed import GradientSum, SingleProcess, StepBatches, agree_to_stop, check_in_sync, step_batches
from .errors import NonFiniteError
from .files import atomic_write_text, check_writable_dir, remove_stale_partials
from .layers.loss import LabelSmoothedCrossEntropy
from .model import Transformer
from .optim import Adam, NonFiniteGradientError, schedule_for
from .plot import plot_loss_curve
from .progress import Progress
from .settings import TrainSettings, solved_words
from .stops import OutputWriteError, StopSignals, TrainingInterrupted
from .translate import source_ids, translate_ids


class NonFiniteLossError(NonFiniteError):
    """The loss was NaN or infinite for ``max_consecutive_skips`` steps in a row; training stops."""


def encode_pairs(vocab: Vocab, pairs) -> list[tuple[list[int], list[int]]]:
    """Token pairs -> (source ids + <eos>, target ids); batching adds <bos>/<eos> to targets."""
    return [(source_ids(vocab, s), vocab.encode(t)) for s, t in pairs]


# -- the loop ------------------------------------------------------------------------


def _json_safe(record: dict) -> dict:
    """The record with every NaN or inf float replaced by None (JSON has no such numbers)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


class Trainer:
    """Runs the training loop for a model on encoded sentence pairs."""

    CHECKPOINT = snapshots.CHECKPOINT_FILE

    def __init__(self, model: Transformer, vocab: Vocab, train_pairs, valid_pairs, settings: TrainSettings,
                 out_dir: str | None = None, levels: dict | None = None, comm=None):
        """levels: how the task tokenizes ({"src": "char", "tgt": "word", "bleu_tokenize": ...}),
        saved in checkpoints so ``translate`` and ``evaluate`` tokenize the same way.
        comm: a data-parallel run's ranks (``distributed.world()``; rank 0 writes, the CLI mutes the rest)."""
        self.model, self.vocab, self.settings, self.out_dir = model, vocab, settings, out_dir
        self.comm = comm or SingleProcess()
        self._gradient_sum = GradientSum(model.parameters())          # sums over the ranks (none for one)
        self.levels = levels or {}
        self.preset: str | None = None         # the model preset's name, saved for a resume to check
        self.task: str | None = None           # the registered task's name, saved so translate finds its hooks
        self.train_pairs, self.valid_pairs = train_pairs, valid_pairs
        self.criterion = LabelSmoothedCrossEntropy(vocab.pad_id, model.cfg.eps_ls)
        self.schedule = schedule_for(model.cfg.d_model, settings)       # settings.schedule, by name (optim.py)
        # Adam skips an update with a non-finite gradient; the trainer counts the skips (a
        # non-finite loss skips a step too), warns, and stops the run (_skipped).
        self.optimizer = Adam(model.parameters(), lr=self.schedule, clip_norm=settings.clip_norm)
        self.step = 0
        self.epoch, self.batch_in_epoch = 0, 0
        self.xp = model.xp
        self.skipped_steps, self.consecutive_skips = 0, 0
        self.last_saved: tuple[str, int] | None = None     # (path, step) of the last checkpoint written
        self.resumed_from: tuple[str, int] | None = None   # (path, step) of the checkpoint restored, if any
        self.average: tuple[str, list[int]] | None = None  # (path, steps) of the §6.1 average this run wrote
        # What the run trains on (data.fingerprint), saved in every checkpoint; None: not known.
        self.data_fingerprint: dict | None = None
        self._progress: Progress | None = None
        # Validations in a row at 100% exact match, so far (settings.stop_when_solved), and
        # the step at which their count reached stop_when_solved (None: not solved).
        self.solved_streak = 0
        self.solved_at: int | None = None

    # -- state for checkpoints --------------------------------------------------
    @property
    def checkpoint_path(self) -> str | None:
        return os.path.join(self.out_dir, self.CHECKPOINT) if self.out_dir else None

    def save(self, path: str | None = None) -> str:
        """Save a checkpoint (default: ``out_dir/checkpoint.npz``), keeping the one it replaces
        as ``checkpoint.prev.npz``. Never saves a non-finite state (checkpoint.NonFiniteStateError);
        a file that cannot be written (a full disk) is an OutputWriteError naming the intact one."""
        path = path or self.checkpoint_path
        if path is None:
            raise ValueError("Trainer.save: no path given and the trainer has no out_dir")
        extra = {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch, "solved_streak": self.solved_streak,
                 "settings": asdict(self.settings), "levels": self.levels, "preset": self.preset,
                 "task": self.task, "global_batch": True}   # batch_size is the step's whole batch (runsetup)
        if self.data_fingerprint is not None:
            extra["data"] = self.data_fingerprint
        if self.comm.size > 1:               # only a state every rank holds is saved (by rank 0 alone)
            check_in_sync(self.comm, self.model.parameters(), self.step)
        try:
            if self.comm.is_root:
                save_checkpoint(path, self.model, self.vocab, self.optimizer, self.step, extra, keep_previous=True)
        except OSError as exc:
            raise OutputWriteError(path, self.step, exc.strerror or str(exc), self.intact_checkpoint) from exc
        if self.comm.is_root:         # the file is whole: a rank killed during the barrier leaves a line naming it
            self.comm.saved(path, self.step)
        self.comm.barrier(f"rank 0 writing the checkpoint of step {self.step}", timeout=False)
        self.last_saved = (path, self.step)
        if not self.comm.is_root:
            self.comm.saved(path, self.step)         # a timeout's message (and a killed run's) name it
        return path

    @property
    def intact_checkpoint(self) -> tuple[str, int] | None:
        """(path, step) of the newest checkpoint a resume can start from: the last one this run
        saved, else the one it was resumed from; None if there is none."""
        return self.last_saved or self.resumed_from

    def _keep_step(self) -> None:
        """``keep_last``: the checkpoint just saved at the interval also as checkpoint.stepNNNNNN.npz,
        the oldest beyond ``keep_last`` removed (snapshots.py; §6.1 averages the last 5)."""
        if self.settings.keep_last and self.comm.is_root:       # rank 0 alone writes files
            snapshots.keep(self.checkpoint_path, self.out_dir, self.step, self.settings.keep_last)

    def restore(self, ckpt) -> None:
        """Continue from a loaded Checkpoint (its model must be this trainer's model)."""
        self.optimizer.load_state_dict(ckpt.optimizer_state)
        self.step = ckpt.step
        self.resumed_from = (ckpt.path, ckpt.step) if getattr(ckpt, "path", None) else None
        self.epoch = ckpt.extra.get("epoch", 0)
        self.batch_in_epoch = ckpt.extra.get("batch_in_epoch", 0)
        self.solved_streak = ckpt.extra.get("solved_streak", 0)     # 0 in a checkpoint from before the rule

    # -- batches --------------------------------------------------------------------
    def _plans(self):
        """Endless global batches (index lists) from (epoch, batch_in_epoch); an epoch's depend on (seed, epoch)."""
        s = self.settings
        while True:
            rng = numpy.random.default_rng([s.seed, self.epoch])
            for i, indices in enumerate(batch_plan(self.train_pairs, s.batch_size, s.max_tokens, rng,
                                                   by_length=s.batch_by_length)):
                if i < self.batch_in_epoch:
                    continue                      # already trained on before a resume
                self.batch_in_epoch = i + 1
                yield indices
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0

    def batches(self):
        """Endless steps: one global batch each, as this rank's shard cut into ``accumulate`` micro-batches
        (a ``distributed.StepBatches``). Every rank walks the same plan, so none depends on N or K."""
        plans, v, k = self._plans(), self.vocab, self.settings.accumulate
        while True:
            yield step_batches(next(plans), self.train_pairs, self.comm, v.pad_id, v.bos_id, v.eos_id, self.xp, k)

    # -- one step ---------------------------------------------------------------------
    def train_step(self, batch: Batch | StepBatches) -> float:
        """Forward, loss, backward and one Adam update; returns the loss.

        batch: a Batch, or this rank's micro-batches of the step's global batch (``batches()``): each one's
        dlogits is scaled by n_k / n (n: the step's target tokens on all ranks), so the sums are one batch's.

        A non-finite loss skips the backward and the update; a non-finite
        gradient makes Adam skip the update. Either way the step is counted,
        a warning names it, and ``max_consecutive_skips`` skips in a row raise.
        """
        work = batch if isinstance(batch, StepBatches) else StepBatches.whole(batch)
        model = self.model.train()
        self.optimizer.zero_grad()
        loss = 0.0                                # this rank's part of the step's mean loss
        for k, shard in enumerate(work.shards):
            if shard is None:
                continue                          # an empty shard: no tokens, zero gradient
            if model.cfg.P_drop > 0:
                model.reseed_dropout(self.dropout_seed(self.step, self.comm.rank, k))
            logits = model.forward(shard.src, shard.tgt_in, shard.src_mask, shard.tgt_mask)
            weight = shard.n_tokens / work.n_tokens
            loss += self.criterion.forward(logits, shard.tgt_out) * weight
            if not math.isfinite(loss):
                break                             # every rank sees the sum below, and skips
            dlogits = self.criterion.backward()
            if weight != 1.0:
                dlogits *= weight                 # mean over the shard -> its share of the step's mean
            model.backward(dlogits)
        loss = self._gradient_sum(self.comm, loss, work, self.step + 1)      # the same on every rank
        self.step += 1
        if not math.isfinite(loss):
            self._skipped(f"the training loss is {loss}", NonFiniteLossError)
        elif self.optimizer.step():
            self.consecutive_skips = 0
        else:
            self._skipped(self.optimizer.last_skip, NonFiniteGradientError)
        if self.comm.check_every and self.step % self.comm.check_every == 0:
            check_in_sync(self.comm, model.parameters(), self.step)       # bit-identical on every rank
        return loss

    def dropout_seed(self, step: int, rank: int = 0, micro: int = 0) -> int:
        """The seed of the dropout masks of step ``step`` (0-based), rank ``rank``, batch ``micro``: a pure
        function of them and settings.seed (a resumed run draws the same masks; no two ranks share)."""
        key = [self.settings.seed, step] if rank == micro == 0 else [self.settings.seed, step, rank, micro]
        return int(numpy.random.SeedSequence(key).generate_state(1)[0])

    def _skipped(self, problem: str, error: type) -> None:
        self.skipped_steps += 1
        self.consecutive_skips += 1
        k, limit = self.consecutive_skips, self.settings.max_consecutive_skips
        if k >= limit:
            first = self.step - k + 1
            saved = (f"the last checkpoint, {self.last_saved[0]}, is from step {self.last_saved[1]}"
                     if self.last_saved else "no checkpoint was saved in this run")
            raise error(
                f"training stopped at step {self.step}: {problem}; steps {first} to {self.step} were all skipped "
                f"({k} in a row, the parameters were last updated at step {first - 1}); {saved}. "
                "Try a smaller --lr-factor, or --clip-norm 1.0"
            )
        self._warn(f"step {self.step}: skipped, no update: {problem} ({k} in a row; the run stops at {limit})")

    def _diverged(self, problem: str) -> None:
        """Stop the run: the parameters after this step are finite but their forward is not."""
        saved = (f"the last checkpoint, {self.last_saved[0]}, is from step {self.last_saved[1]}"
                 if self.last_saved else "no checkpoint was saved in this run")
        raise NonFiniteLossError(
            f"training stopped at step {self.step}: {problem}; the parameters after this step overflow in the "
            f"forward pass (the run has diverged); {saved}. Try a smaller --lr-factor, or --clip-norm 1.0")

    def _warn(self, text: str) -> None:
        if self._progress is not None:
            self._progress.warn(text)
        else:
            print(f"warning: {text}", file=sys.stderr, flush=True)

    # -- validation -------------------------------------------------------------------
    def validate(self) -> dict:
        """The validation loss (mean over non-pad target tokens) and the exact match of greedy decodes of
        the first ``valid_decode`` pairs; rank r of N takes every N-th pair from the r-th, and sums."""
        model = self.model.eval()
        v, r, N = self.vocab, self.comm.rank, self.comm.size
        total, n = 0.0, 0
        mine = self.valid_pairs[r::N]
        for batch in batch_iterator(mine, 64, None, None, shuffle=False, pad_id=v.pad_id, bos_id=v.bos_id,
                                    eos_id=v.eos_id, xp=self.xp) if mine else ():
            logits = model.forward(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
            total += self.criterion.forward(logits, batch.tgt_out) * batch.n_tokens
            n += batch.n_tokens
        pairs = self.valid_pairs[: self.settings.valid_decode]
        failed = None
        try:
            hyps = translate_ids(model, v, [s for s, _ in pairs[r::N]]) if pairs[r::N] else []
        except NonFiniteOutputError as exc:
            hyps, failed = [], f"decoding the validation set gave NaN scores ({exc})"
        correct = sum(h == t for h, (_, t) in zip(hyps, pairs[r::N]))
        sums = numpy.array([total, n, correct, failed is not None], dtype=numpy.float64)
        total, n, correct, failures = self.comm.allreduce_sum(sums, f"the validation at step {self.step}").tolist()
        if not math.isfinite(total):
            # The last update left weights whose forward overflows: the run has diverged, and
            # decoding (or saving) such a model would only fail later with a less useful message.
            self._diverged(f"the validation loss is {total / max(1, n)}")
        if failures:
            self._diverged(failed or "decoding the validation set gave NaN scores (on another rank)")
        model.train()
        return {"valid_loss": total / max(1, n), "valid_exact_match": correct / max(1, len(pairs))}

    # -- the loop ---------------------------------------------------------------------
    def _count_solved(self, record: dict) -> bool:
        """After a validation: one more 100% in a row, or back to 0; True when that makes the run solved.

        ``valid_exact_match`` is 1.0 exactly when every decoded sentence is right (a count of whole
        numbers, summed exactly over the ranks), so every rank decides the same."""
        k = self.settings.stop_when_solved
        solved = record["valid_exact_match"] >= self.settings.solved_exact_match
        self.solved_streak = self.solved_streak + 1 if solved else 0
        if not k or self.solved_streak < k:
            return False
        self.solved_at = self.step
        record["solved"] = True
        self._progress.result(f"solved at step {self.step}: validation exact match {solved_words(self.settings)} "
                              f"at {k} validations in a row (every {self.settings.valid_every} steps)")
        return True

    def _trim_log(self, log_path: str) -> list[dict]:
        """Keep only the records up to the current step: a fresh run starts an empty
        log, a resumed run continues its own (dropping what came after the checkpoint).
        Returns the records kept."""
        records = read_metrics(log_path, warn=self._warn)
        kept = [r for r in records if isinstance(r, dict) and isinstance(r.get("step", 0), int)
                and r.get("step", 0) <= self.step]
        atomic_write_text(log_path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in kept))
        return kept

    def _prepare_out_dir(self) -> None:
        """Before the first step (holding the folder's lock): leftovers of a killed save are gone."""
        for path in remove_stale_partials(self.out_dir):
            self._warn(f"removed {path}, a temporary file left by an interrupted save")
        later = snapshots.drop_after(self.out_dir, self.step)
        if later:
            self._warn(f"removed {len(later)} kept checkpoint(s) of steps after {self.step} "
                       f"({os.path.basename(later[0])} ...): this run writes those steps again")

    def _append_log(self, log_path: str, record: dict) -> None:
        try:
            with open(log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, allow_nan=False) + "\n")
        except OSError as exc:
            raise OutputWriteError(log_path, self.step, exc.strerror or str(exc), self.intact_checkpoint) from exc

    def run(self, progress: bool | str = True, progress_every: float = 30.0) -> list[dict]:
        """Train up to ``settings.steps``, or until solved (``settings.stop_when_solved``: then
        ``solved_at`` is the step); returns the metrics records (also in out_dir/metrics.jsonl).

        progress: True or "auto" (a live bar on a terminal, plain lines every
        ``progress_every`` seconds elsewhere), "bar", "lines", or False / "off".
        Raises TrainingInterrupted after saving a checkpoint if a stop signal
        arrives (see ``stops.StopSignals``), NonFiniteLossError / NonFiniteGradientError
        after ``max_consecutive_skips`` non-finite steps in a row (or a validation
        whose forward overflows), OutputWriteError if a file cannot be written, and
        runlock.FolderInUseError if another process is training into ``out_dir``.
        """
        if not self.out_dir or not self.comm.is_root:       # rank 0 alone writes into out_dir
            return self._run(progress, progress_every)
        check_writable_dir(self.out_dir)
        with runlock.hold(self.out_dir):
            return self._run(progress, progress_every)

    def _run(self, progress, progress_every) -> list[dict]:
        s = self.settings
        distributed.check_same_run(self.comm, distributed.run_identity(self))   # before the first collective
        mode = "auto" if progress is True else "off" if progress is False else progress
        writer = self.out_dir if self.comm.is_root else None     # rank 0 alone writes files and progress
        log_path = os.path.join(writer, snapshots.METRICS_FILE) if writer else None
        if writer:
            self._prepare_out_dir()
        history: list[dict] = self._trim_log(log_path) if log_path else []
        self._progress = bar = Progress(mode if self.comm.is_root else "off", s.steps, self.step, progress_every)
        tokens, t0, losses, window_skips = 0, time.perf_counter(), [], 0
        batches = self.batches()
        try:
            with StopSignals(announce=self.comm.is_root) as stop:
                while self.step < s.steps and not agree_to_stop(self.comm, stop, self.step):
                    batch = next(batches)
                    skips_before = self.skipped_steps
                    loss = self.train_step(batch)
                    if self.skipped_steps == skips_before:
                        losses.append(loss)
                    else:
                        window_skips += 1
                    tokens += batch.tokens
                    record = None
                    if self.step % s.log_every == 0 or self.step == s.steps:
                        elapsed = time.perf_counter() - t0
                        record = {"step": self.step, "loss": float(numpy.mean(losses)) if losses else None,
                                  "lr": self.optimizer.last_lr, "tokens_per_s": tokens / max(elapsed, 1e-9),
                                  "grad_norm": self.optimizer.last_grad_norm}
                        if window_skips:
                            record["skipped_steps"] = window_skips
                        tokens, t0, losses, window_skips = 0, time.perf_counter(), [], 0
                    bar.update(self.step, record)
                    validating = self.step % s.valid_every == 0 or self.step == s.steps
                    solved = False
                    if validating and self.valid_pairs:
                        record = (record or {"step": self.step}) | self.validate()
                        bar.result(f"step {self.step}: valid loss {record['valid_loss']:.4f}, "
                                   f"exact match {100 * record['valid_exact_match']:.1f}%")
                        solved = self._count_solved(record)
                    if record is not None:
                        record = _json_safe(record)
                        history.append(record)
                        if log_path:
                            self._append_log(log_path, record)
                    # Saved by default at every validation (and every checkpoint_every steps),
                    # so a crash or a kill loses at most valid_every steps.
                    periodic = validating or (s.checkpoint_every and self.step % s.checkpoint_every == 0)
                    if self.out_dir and periodic and self.step < s.steps:
                        self.save()
                        self._keep_step()
                    if solved:
                        break
                if self.out_dir and (self.last_saved is None or self.last_saved[1] != self.step):
                    self.save()                    # the end, or the step an interruption stopped at
                if self.out_dir and self.step == s.steps:
                    self._keep_step()
                    if s.average_last and self.comm.is_root:     # §6.1, at the end of a whole run
                        self.average = snapshots.write_average(self.out_dir, s.average_last)
                if agree_to_stop(self.comm, stop, self.step):
                    raise TrainingInterrupted(stop.signum, self.step, self.checkpoint_path)
        finally:
            bar.close()
            self._progress = None
        if writer:
            try:
                plot_loss_curve(history, os.path.join(writer, snapshots.LOSS_CURVE_FILE), self.model.cfg.eps_ls)
            except Exception as exc:  # noqa: BLE001 - a picture is not worth losing the run's report
                self._warn(f"could not draw the loss curve ({type(exc).__name__}: {exc}); the checkpoint and "
                           "metrics.jsonl are saved")
        return history


# -- metrics.jsonl -----------------------------------------------------------------------


def read_metrics(path: str, warn=None) -> list[dict]:
    """The records of a metrics.jsonl log ([] if there is none yet).

    A last line that is not valid JSON is what a run killed mid-write leaves:
    it is dropped, and ``warn(message)`` is told (default: a line on standard
    error). An invalid line anywhere else is a ValueError naming the file and line.
    """
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    numbered = [(i, line) for i, line in enumerate(lines, start=1) if line.strip()]
    records = []
    for k, (lineno, line) in enumerate(numbered):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if k == len(numbered) - 1:
                message = f"{path}:{lineno}: dropped an incomplete last line (a run killed while writing it?)"
                (warn or (lambda m: print(f"warning: {m}", file=sys.stderr)))(message)
                break
            raise ValueError(f"{path}:{lineno}: not a JSON record ({exc.msg}); fix or delete the line") from None
    return records


__all__ = ["NonFiniteLossError", "TrainingInterrupted", "OutputWriteError", "TrainSettings", "Trainer",
           "encode_pairs", "read_metrics"]
