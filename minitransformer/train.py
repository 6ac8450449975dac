"""Training: data for a task, the loop (§5), validation, logging and checkpoints.

One training step (§5.3):
    logits = model.forward(src, tgt_in)            # teacher forcing
    loss   = label-smoothed cross-entropy (§5.4)
    model.backward(dloss/dlogits)                    # fills every .grad
    Adam step with lr = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)

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
* SIGINT (Ctrl-C) or SIGTERM stop the run at the end of the current step, save
  a checkpoint and raise :class:`TrainingInterrupted`; a second signal during
  that save is acknowledged and ignored until the file is written;
* a step whose loss or gradient is not finite is skipped (no update) with a
  warning; ``max_consecutive_skips`` of them in a row stop the run with
  :class:`NonFiniteLossError` or ``optim.NonFiniteGradientError``;
* metrics.jsonl is strict JSON (a NaN or inf is written as null), and a last
  line cut short by a killed run is dropped, with a warning, on resume;
* temporary files a killed save left behind are removed when a run starts.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, fields, replace

import numpy

from .checkpoint import save_checkpoint
from .data.batching import batch_iterator
from .data.tasks import SYNTHETIC_TASKS, synthetic_vocab
from .data.tsv import DataError, looks_like_header, read_tsv_rows
from .data.vocab import Vocab, tokenize
from .errors import NonFiniteError
from .files import atomic_write_text, check_writable_dir, remove_stale_partials
from .layers.loss import LabelSmoothedCrossEntropy
from .model import PRESETS, Transformer
from .optim import Adam, NoamSchedule, NonFiniteGradientError
from .plot import plot_loss_curve
from .translate import source_ids, translate_ids


class NonFiniteLossError(NonFiniteError):
    """The loss was NaN or infinite for ``max_consecutive_skips`` steps in a row; training stops."""


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM stopped the run; a checkpoint of the current step was saved first.

    signum: the signal (signal.SIGINT or signal.SIGTERM); step: the step saved;
    checkpoint: the file written (None when the trainer has no out_dir).
    ``exit_code`` is the shell's convention, 128 + signum (130 for Ctrl-C, 143 for SIGTERM).
    """

    def __init__(self, signum: int, step: int, checkpoint: str | None):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        self.exit_code = 128 + int(signum)
        where = f"; checkpoint saved: {checkpoint}" if checkpoint else ""
        super().__init__(f"interrupted by {signal.Signals(signum).name} at step {step}{where}")


# -- tasks and their data --------------------------------------------------------------


@dataclass
class TaskData:
    """Token-level splits of one task and the shared source/target vocabulary."""

    name: str
    vocab: Vocab
    train: list          # [(src_tokens, tgt_tokens)]
    valid: list
    test: list
    src_level: str = "word"
    tgt_level: str = "word"
    bleu_tokenize: str = "13a"
    notes: list = field(default_factory=list)    # what loading did that the user should know

    @property
    def levels(self) -> dict:
        return {"src": self.src_level, "tgt": self.tgt_level, "bleu_tokenize": self.bleu_tokenize}


@dataclass
class TrainSettings:
    """How one training run goes (the model's own hyperparameters are in TransformerConfig)."""

    steps: int = 600
    batch_size: int | None = 64
    max_tokens: int | None = None
    lr_factor: float = 1.0
    warmup_steps: int = 4000               # §5.3's value for the base model
    clip_norm: float | None = None
    seed: int = 0
    valid_every: int = 250
    log_every: int = 10
    checkpoint_every: int | None = None    # None: only at validations and at the end
    valid_decode: int = 200                # sentences decoded greedily at each validation
    max_consecutive_skips: int = 5         # non-finite steps in a row before the run stops

    def __post_init__(self):
        """Every field checked here, so a bad value is named before any work is done."""
        def check(name, ok, what):
            value = getattr(self, name)
            if not ok(value):
                raise ValueError(f"TrainSettings: {name} must be {what}, got {value!r}")

        def is_int(v):
            return isinstance(v, int | numpy.integer) and not isinstance(v, bool)

        def is_number(v):
            return isinstance(v, int | float | numpy.floating | numpy.integer) and not isinstance(v, bool) \
                and math.isfinite(v)

        for name in ("steps", "warmup_steps", "valid_every", "log_every", "max_consecutive_skips"):
            check(name, lambda v: is_int(v) and v >= 1, "an integer ≥ 1")
        for name in ("batch_size", "max_tokens", "checkpoint_every"):
            check(name, lambda v: v is None or (is_int(v) and v >= 1), "an integer ≥ 1 or None")
        check("seed", lambda v: is_int(v) and v >= 0, "an integer ≥ 0")
        check("valid_decode", lambda v: is_int(v) and v >= 0, "an integer ≥ 0")
        check("lr_factor", lambda v: is_number(v) and v > 0, "a finite number > 0")
        check("clip_norm", lambda v: v is None or (is_number(v) and v > 0), "a finite number > 0 or None")
        if self.batch_size is None and self.max_tokens is None:
            raise ValueError("TrainSettings: give batch_size or max_tokens (or both)")

    @classmethod
    def from_dict(cls, data: dict, where: str = "settings") -> TrainSettings:
        """Settings saved with ``asdict`` (in a checkpoint); unknown fields are a ValueError naming them."""
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object of training settings, got {type(data).__name__}")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"{where}: unknown training settings {unknown}")
        try:
            return cls(**data)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None


@dataclass
class Recipe:
    """A task's defaults: the model preset and the training settings (each overridable)."""

    preset: str
    settings: TrainSettings = field(default_factory=TrainSettings)


def _recipe(preset: str, **settings) -> Recipe:
    return Recipe(preset, TrainSettings(**settings))


def _translation_recipe(steps: int, batch_size: int, valid_every: int = 500) -> Recipe:
    """The translation tasks share a preset and a schedule; they differ in length of training."""
    return _recipe("translate", steps=steps, batch_size=batch_size, lr_factor=0.5, warmup_steps=400,
                   clip_norm=1.0, valid_every=valid_every)


RECIPES: dict[str, Recipe] = {
    # Measured on the copy task: factor 0.25 with clipping trains smoothly; 0.5
    # and above spike and stall below 100% held-out exact match.
    "copy": _recipe("copy", steps=3000, batch_size=64, lr_factor=0.25, warmup_steps=200, clip_norm=1.0,
                    valid_every=500),
    "reverse": _recipe("copy", steps=3000, batch_size=64, lr_factor=0.25, warmup_steps=200, clip_norm=1.0,
                       valid_every=500),
    # Translation tasks (measured results: docs/translation_results.md). Factor 1.0
    # without clipping spikes here too (held-out exact match dips mid-run, and
    # greedy decoding loops on rare patterns); 0.5 with clipping does not.
    "numbers-en-fr": _translation_recipe(steps=3000, batch_size=128),
    "numbers-en-de": _translation_recipe(steps=3000, batch_size=64),
    "dates-en-de": _translation_recipe(steps=1500, batch_size=128),
    "dates-en-ko": _translation_recipe(steps=1500, batch_size=128),
    # Emoji names: ~1.3k training pairs. Validation loss is lowest near step 500 and
    # then rises while chrF still creeps up; 4000 steps gave +1 chrF over 2000.
    "emoji-en-fr": _translation_recipe(steps=2000, batch_size=64, valid_every=250),
    "emoji-en-de": _translation_recipe(steps=2000, batch_size=64, valid_every=250),
    "emoji-en-ko": _translation_recipe(steps=2000, batch_size=64, valid_every=250),
}
# A user's TSV file (--data): the translation preset, 2,000 steps.
DATA_RECIPE = _translation_recipe(steps=2000, batch_size=64)
SYNTHETIC_SIZES = {"train": 20000, "valid": 500, "test": 1000}


def _translation_module():
    from .data import translation  # noqa: PLC0415  (imports num2words, babel, emoji only when needed)
    return translation


def task_names() -> list[str]:
    return list(SYNTHETIC_TASKS) + list(_translation_module().TASKS)


def _tokenize_pairs(pairs, src_level, tgt_level):
    return [(tokenize(s, src_level), tokenize(t, tgt_level)) for s, t in pairs]


# A --data line longer than this (in tokens, either side) is an error: one very long
# line would otherwise raise the model's max_len, and every batch it joins would be
# padded to it (the attention scores of such a batch grow with its square).
MAX_DATA_LENGTH = 256


def read_pairs(path: str, src_level: str, tgt_level: str, header: bool = False,
               max_length: int | None = MAX_DATA_LENGTH) -> tuple[list[tuple[list[str], list[str]]], list[str]]:
    """Tokenized (source, target) pairs of a TSV file, checked line by line; and notes for the user.

    A line that cannot be tokenized (a reserved character or word), or with a
    side longer than ``max_length`` tokens, is a DataError naming the file and
    the line. A first line that looks like column names is reported in the
    notes (``header=True`` skips it).
    """
    rows = read_tsv_rows(path, header=header)
    notes = []
    if not header and looks_like_header(rows[0][1], rows[0][2]):
        notes.append(f"{path}:{rows[0][0]}: the first line {rows[0][1]!r} / {rows[0][2]!r} looks like a header "
                     "row; it is read as a sentence pair (pass --header to skip it)")
    pairs = []
    for lineno, src, tgt in rows:
        sides = []
        for side, text, level in (("source", src, src_level), ("target", tgt, tgt_level)):
            try:
                tokens = tokenize(text, level)
            except ValueError as exc:
                raise DataError(f"{path}:{lineno}: {side}: {exc}") from None
            if max_length is not None and len(tokens) > max_length:
                raise DataError(f"{path}:{lineno}: the {side} has {len(tokens):,} {level} tokens, more than the "
                                f"limit of {max_length} (--max-length); shorten or remove the line, or raise "
                                "the limit")
            sides.append(tokens)
        pairs.append((sides[0], sides[1]))
    return pairs, notes


def split_pairs(pairs, seed: int = 0, valid_fraction: float = 0.05, test_fraction: float = 0.05,
                where: str = "data") -> tuple[list, list, list, int]:
    """Deduplicate, then split token pairs three ways: (train, valid, test, duplicates removed).

    Identical pairs are kept once. The split is drawn over distinct *sources*:
    all pairs of one source sentence land in the same split, so no source seen
    in training is scored as held out. valid and test get ``fraction`` of the
    sources each, at least one; train keeps the rest, at least one. Too few
    sources to do that is a DataError.
    """
    unique, seen = [], set()
    for src, tgt in pairs:
        key = (tuple(src), tuple(tgt))
        if key not in seen:
            seen.add(key)
            unique.append((src, tgt))
    duplicates = len(pairs) - len(unique)
    by_source: dict[tuple, list] = {}
    for src, tgt in unique:
        by_source.setdefault(tuple(src), []).append((src, tgt))
    sources = list(by_source)
    n = len(sources)
    if n < 3:
        raise DataError(f"{where}: {n} distinct source sentence(s) after removing {duplicates} duplicate "
                        "pair(s); at least 3 are needed to split into train, valid and test")
    n_test = max(1, round(n * test_fraction))
    n_valid = max(1, round(n * valid_fraction))
    if n_test + n_valid >= n:
        n_test = n_valid = 1
    order = numpy.random.default_rng(seed).permutation(n)
    parts = (order[:n_test], order[n_test:n_test + n_valid], order[n_test + n_valid:])
    test, valid, train = ([pair for i in part for pair in by_source[sources[i]]] for part in parts)
    return train, valid, test, duplicates


def load_task(name: str | None = None, data: str | None = None, level: str = "char", seed: int = 0,
              valid_fraction: float = 0.05, test_fraction: float = 0.05, header: bool = False,
              max_length: int | None = MAX_DATA_LENGTH) -> TaskData:
    """The splits and vocabulary of a named task, or of a user's TSV file (``data``).

    A TSV file is checked line by line (``read_pairs``), deduplicated and split
    three ways (``split_pairs``): train, valid (validation during training) and
    test (scored once at the end; never seen during training or validation).
    ``TaskData.notes`` says what was done (duplicates removed, a likely header).
    """
    if data is not None:
        pairs, notes = read_pairs(data, level, level, header=header, max_length=max_length)
        train, valid, test, duplicates = split_pairs(pairs, seed, valid_fraction, test_fraction, where=data)
        if duplicates:
            notes.append(f"{data}: removed {duplicates} duplicate pair(s) before splitting")
        vocab = Vocab.build([s for s, _ in train] + [t for _, t in train])
        return TaskData(os.path.basename(data), vocab, train, valid, test, level, level,
                        "char" if level == "char" else "13a", notes)
    if name in SYNTHETIC_TASKS:
        make = SYNTHETIC_TASKS[name]
        splits = {split: make(n, numpy.random.default_rng([seed, i]))
                  for i, (split, n) in enumerate(SYNTHETIC_SIZES.items())}
        return TaskData(name, synthetic_vocab(10), splits["train"], splits["valid"], splits["test"],
                        "word", "word", "none")
    translation = _translation_module()
    if name not in translation.TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of: {', '.join(task_names())}")
    task = translation.TASKS[name]
    splits = translation.load_splits(name, seed=seed)
    tok = {k: _tokenize_pairs(v, task.src_level, task.tgt_level) for k, v in splits.items()}
    vocab = Vocab.build([s for s, _ in tok["train"]] + [t for _, t in tok["train"]])
    return TaskData(name, vocab, tok["train"], tok["valid"], tok["test"],
                    task.src_level, task.tgt_level, task.bleu_tokenize)


def encode_pairs(vocab: Vocab, pairs) -> list[tuple[list[int], list[int]]]:
    """Token pairs -> (source ids + <eos>, target ids); batching adds <bos>/<eos> to targets."""
    return [(source_ids(vocab, s), vocab.encode(t)) for s, t in pairs]


# -- the loop ------------------------------------------------------------------------


class _StopSignals:
    """While active, SIGINT (Ctrl-C) and SIGTERM ask the loop to stop instead of killing it.

    The handler only records the signal: the step in progress finishes, then the
    loop saves a checkpoint and stops. A second signal while that happens is
    acknowledged and changes nothing (a checkpoint half-written by a second
    Ctrl-C is what this avoids). Signal handlers can only be installed from the
    main thread; elsewhere this does nothing and signals behave as usual.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict = {}

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        # os.write, not print: a handler may run in the middle of a print, and
        # Python's buffered streams refuse to be re-entered.
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum = signum
            os.write(2, f"\n{name} received: finishing this step, then saving a checkpoint...\n".encode())
        else:
            os.write(2, f"\n{name} received again: still saving the checkpoint; stopping as soon as it is "
                        "written\n".encode())

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


class _Progress:
    """Progress output that fits where it goes.

    mode "bar": a live tqdm bar (on a terminal). "lines": a plain line every
    ``every`` seconds, no carriage returns (a pipe or a log file). "off":
    nothing per step. Validation results go to standard output in every mode;
    the bar and the periodic lines go to ``stream`` (standard error).
    """

    def __init__(self, mode: str, total: int, initial: int, every: float = 30.0, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        if mode == "auto":
            isatty = getattr(self.stream, "isatty", None)
            mode = "bar" if isatty is not None and isatty() else "lines"
        if mode not in ("bar", "lines", "off"):
            raise ValueError(f"progress must be 'auto', 'bar', 'lines' or 'off', got {mode!r}")
        if not (isinstance(every, int | float) and math.isfinite(every) and every > 0):
            raise ValueError(f"progress interval must be a positive number of seconds, got {every!r}")
        self.mode, self.total, self.every = mode, total, float(every)
        self.bar = None
        if mode == "bar":
            from tqdm.auto import tqdm  # noqa: PLC0415

            self.bar = tqdm(total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True,
                            file=self.stream)
        self._t_start = self._t_last = time.perf_counter()
        self._postfix: dict = {}

    def update(self, step: int, record: dict | None) -> None:
        if record is not None and record.get("loss") is not None:
            self._postfix = {"loss": f"{record['loss']:.3f}", "tok_s": f"{record['tokens_per_s']:.0f}",
                             "lr": f"{record['lr']:.2e}" if record.get("lr") is not None else "-"}
        if self.bar is not None:
            self.bar.update(1)
            if record is not None and self._postfix:
                self.bar.set_postfix(self._postfix)
        elif self.mode == "lines":
            now = time.perf_counter()
            if now - self._t_last >= self.every or step == self.total:
                self._t_last = now
                self.line(f"step {step}/{self.total}"
                          + "".join(f", {k} {v}" for k, v in self._postfix.items())
                          + f", {now - self._t_start:.0f}s")

    def line(self, text: str) -> None:
        """A line of progress on the progress stream."""
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        elif self.mode == "lines":
            print(text, file=self.stream, flush=True)

    def result(self, text: str) -> None:
        """A result line (validation) on standard output, in every mode."""
        if self.bar is not None:
            self.bar.write(text, file=sys.stdout)
        else:
            print(text, flush=True)

    def warn(self, text: str) -> None:
        """A warning on standard error, in every mode (clearing the bar around it)."""
        if self.bar is not None:
            self.bar.write(f"warning: {text}", file=sys.stderr)
        else:
            print(f"warning: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _json_safe(record: dict) -> dict:
    """The record with every NaN or inf float replaced by None (JSON has no such numbers)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


class Trainer:
    """Runs the training loop for a model on encoded sentence pairs."""

    CHECKPOINT = "checkpoint.npz"

    def __init__(self, model: Transformer, vocab: Vocab, train_pairs, valid_pairs, settings: TrainSettings,
                 out_dir: str | None = None, levels: dict | None = None):
        """levels: how the task tokenizes ({"src": "char", "tgt": "word", "bleu_tokenize": ...}),
        saved in checkpoints so ``translate`` and ``evaluate`` tokenize the same way."""
        self.model, self.vocab, self.settings, self.out_dir = model, vocab, settings, out_dir
        self.levels = levels or {}
        self.train_pairs, self.valid_pairs = train_pairs, valid_pairs
        self.criterion = LabelSmoothedCrossEntropy(vocab.pad_id, model.cfg.eps_ls)
        self.schedule = NoamSchedule(model.cfg.d_model, settings.warmup_steps, settings.lr_factor)
        # Adam skips an update with a non-finite gradient; the trainer counts the skips (a
        # non-finite loss skips a step too), warns, and stops the run (_skipped).
        self.optimizer = Adam(model.parameters(), lr=self.schedule, clip_norm=settings.clip_norm)
        self.step = 0
        self.epoch, self.batch_in_epoch = 0, 0
        self.xp = model.xp
        self.skipped_steps, self.consecutive_skips = 0, 0
        self.last_saved: tuple[str, int] | None = None     # (path, step) of the last checkpoint written
        self._progress: _Progress | None = None

    # -- state for checkpoints --------------------------------------------------
    @property
    def checkpoint_path(self) -> str | None:
        return os.path.join(self.out_dir, self.CHECKPOINT) if self.out_dir else None

    def save(self, path: str | None = None) -> str:
        """Save a checkpoint (default: ``out_dir/checkpoint.npz``), keeping the one it replaces
        as ``checkpoint.prev.npz``. Never saves a non-finite state (checkpoint.NonFiniteStateError)."""
        path = path or self.checkpoint_path
        if path is None:
            raise ValueError("Trainer.save: no path given and the trainer has no out_dir")
        extra = {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
                 "settings": asdict(self.settings), "levels": self.levels}
        save_checkpoint(path, self.model, self.vocab, self.optimizer, self.step, extra, keep_previous=True)
        self.last_saved = (path, self.step)
        return path

    def restore(self, ckpt) -> None:
        """Continue from a loaded Checkpoint (its model must be this trainer's model)."""
        self.optimizer.load_state_dict(ckpt.optimizer_state)
        self.step = ckpt.step
        self.epoch = ckpt.extra.get("epoch", 0)
        self.batch_in_epoch = ckpt.extra.get("batch_in_epoch", 0)

    # -- batches --------------------------------------------------------------------
    def _epoch_batches(self, epoch: int):
        """The batches of one epoch, a pure function of (seed, epoch)."""
        s = self.settings
        rng = numpy.random.default_rng([s.seed, epoch])
        return batch_iterator(self.train_pairs, s.batch_size, s.max_tokens, rng, shuffle=True,
                              pad_id=self.vocab.pad_id, bos_id=self.vocab.bos_id, eos_id=self.vocab.eos_id,
                              xp=self.xp)

    def batches(self):
        """Endless batches from the current (epoch, batch_in_epoch) position."""
        while True:
            for i, batch in enumerate(self._epoch_batches(self.epoch)):
                if i < self.batch_in_epoch:
                    continue                      # already trained on before a resume
                self.batch_in_epoch = i + 1
                yield batch
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0

    # -- one step ---------------------------------------------------------------------
    def train_step(self, batch) -> float:
        """Forward, loss, backward and one Adam update; returns the loss.

        A non-finite loss skips the backward and the update; a non-finite
        gradient makes Adam skip the update. Either way the step is counted,
        a warning names it, and ``max_consecutive_skips`` skips in a row raise.
        """
        model = self.model.train()
        if model.cfg.P_drop > 0:
            model.reseed_dropout(self.dropout_seed(self.step))
        logits = model.forward(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        loss = self.criterion.forward(logits, batch.tgt_out)
        self.step += 1
        if not math.isfinite(loss):
            self._skipped(f"the training loss is {loss}", NonFiniteLossError)
            return loss
        self.optimizer.zero_grad()
        model.backward(self.criterion.backward())
        if self.optimizer.step():
            self.consecutive_skips = 0
        else:
            self._skipped(self.optimizer.last_skip, NonFiniteGradientError)
        return loss

    def dropout_seed(self, step: int) -> int:
        """The seed of the dropout masks of step ``step`` (0-based): a pure function of
        (settings.seed, step), so a resumed run draws the same masks as an uninterrupted one."""
        return int(numpy.random.SeedSequence([self.settings.seed, step]).generate_state(1)[0])

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

    def _warn(self, text: str) -> None:
        if self._progress is not None:
            self._progress.warn(text)
        else:
            print(f"warning: {text}", file=sys.stderr, flush=True)

    # -- validation -------------------------------------------------------------------
    def validate(self) -> dict:
        model = self.model.eval()
        v = self.vocab
        total, n = 0.0, 0
        for batch in batch_iterator(self.valid_pairs, 64, None, None, shuffle=False,
                                    pad_id=v.pad_id, bos_id=v.bos_id, eos_id=v.eos_id, xp=self.xp):
            logits = model.forward(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
            total += self.criterion.forward(logits, batch.tgt_out) * batch.n_tokens
            n += batch.n_tokens
        pairs = self.valid_pairs[: self.settings.valid_decode]
        hyps = translate_ids(model, v, [s for s, _ in pairs]) if pairs else []
        acc = sum(h == t for h, (_, t) in zip(hyps, pairs)) / max(1, len(pairs))
        model.train()
        return {"valid_loss": total / max(1, n), "valid_exact_match": acc}

    # -- the loop ---------------------------------------------------------------------
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
        """Before the first step: the directory is writable, and leftovers of a killed save are gone."""
        check_writable_dir(self.out_dir)
        for path in remove_stale_partials(self.out_dir):
            self._warn(f"removed {path}, a temporary file left by an interrupted save")

    def run(self, progress: bool | str = True, progress_every: float = 30.0) -> list[dict]:
        """Train up to ``settings.steps``; returns the metrics records (also in out_dir/metrics.jsonl).

        progress: True or "auto" (a live bar on a terminal, plain lines every
        ``progress_every`` seconds elsewhere), "bar", "lines", or False / "off".
        Raises TrainingInterrupted after saving a checkpoint if SIGINT or
        SIGTERM arrive, NonFiniteLossError / NonFiniteGradientError after
        ``max_consecutive_skips`` non-finite steps in a row.
        """
        s = self.settings
        mode = "auto" if progress is True else "off" if progress is False else progress
        log_path = os.path.join(self.out_dir, "metrics.jsonl") if self.out_dir else None
        if self.out_dir:
            self._prepare_out_dir()
        history: list[dict] = self._trim_log(log_path) if log_path else []
        self._progress = bar = _Progress(mode, s.steps, self.step, progress_every)
        tokens, t0, losses, window_skips = 0, time.perf_counter(), [], 0
        batches = self.batches()
        try:
            with _StopSignals() as stop:
                while self.step < s.steps and stop.signum is None:
                    batch = next(batches)
                    skips_before = self.skipped_steps
                    loss = self.train_step(batch)
                    if self.skipped_steps == skips_before:
                        losses.append(loss)
                    else:
                        window_skips += 1
                    tokens += batch.n_tokens + int((batch.src != self.vocab.pad_id).sum())
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
                    if validating and self.valid_pairs:
                        record = (record or {"step": self.step}) | self.validate()
                        bar.result(f"step {self.step}: valid loss {record['valid_loss']:.4f}, "
                                   f"exact match {100 * record['valid_exact_match']:.1f}%")
                    if record is not None:
                        record = _json_safe(record)
                        history.append(record)
                        if log_path:
                            with open(log_path, "a", encoding="utf-8") as f:
                                f.write(json.dumps(record, allow_nan=False) + "\n")
                    # Saved by default at every validation (and every checkpoint_every steps),
                    # so a crash or a kill loses at most valid_every steps.
                    periodic = validating or (s.checkpoint_every and self.step % s.checkpoint_every == 0)
                    if self.out_dir and periodic and self.step < s.steps:
                        self.save()
                if self.out_dir and (self.last_saved is None or self.last_saved[1] != self.step):
                    self.save()                    # the end, or the step an interruption stopped at
                if stop.signum is not None:
                    raise TrainingInterrupted(stop.signum, self.step, self.checkpoint_path)
        finally:
            bar.close()
            self._progress = None
        if self.out_dir:
            try:
                plot_loss_curve(history, os.path.join(self.out_dir, "loss.png"))
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


# -- setting up a run, as the command line does it --------------------------------------


def build_model(task: TaskData, preset: str = "copy", seed: int = 0, **overrides) -> Transformer:
    """A fresh model of ``preset`` sized for the task (vocabulary, max_len with room for decoding)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
    cfg = PRESETS[preset].with_(vocab_size=len(task.vocab), pad_id=task.vocab.pad_id, **overrides)
    longest = max(max(len(s), len(t)) + 1 for s, t in task.train + task.valid + task.test)
    if cfg.max_len < longest + 51:   # room for decoding input length + 50 (§6.1)
        cfg = cfg.with_(max_len=longest + 51)
    return Transformer(cfg, seed=seed)


def recipe_for(task_name: str) -> Recipe:
    """The task's recipe (preset + training settings); a user's TSV file gets DATA_RECIPE."""
    return RECIPES.get(task_name, DATA_RECIPE)


def settings_for(task_name: str, **overrides) -> tuple[str, TrainSettings]:
    """(preset, settings) of the task's recipe, with ``overrides`` (a None value keeps the recipe's)."""
    recipe = recipe_for(task_name)
    preset = overrides.pop("preset", None) or recipe.preset
    changes = {k: v for k, v in overrides.items() if v is not None}
    return preset, replace(recipe.settings, **changes)


def make_trainer(task: TaskData, settings: TrainSettings, preset: str, out_dir: str | None = None,
                 resume=None) -> Trainer:
    """A Trainer for ``task``: a fresh model of ``preset``, or the model, vocabulary and
    optimizer state of a loaded checkpoint (``resume``, a ``checkpoint.Checkpoint``).

    This is the one way a run is set up: ``python -m minitransformer train`` and
    ``benchmarks/bench_copy.py`` both call it.
    """
    if resume is not None:
        where = getattr(resume, "path", None) or "the checkpoint"
        if resume.vocab != task.vocab:
            raise ValueError(f"{where}: the checkpoint was trained with a different vocabulary than task "
                             f"{task.name!r}")
        if resume.optimizer_state is None:
            raise ValueError(f"{where}: the checkpoint has no optimizer state, so training cannot resume from it")
        if resume.step >= settings.steps:
            raise ValueError(f"{where}: the checkpoint is at step {resume.step}, and steps={settings.steps} "
                             f"leaves nothing to train; give more steps (--steps {resume.step + 1} or more)")
        model, vocab = resume.model, resume.vocab
    else:
        model, vocab = build_model(task, preset, seed=settings.seed), task.vocab
    trainer = Trainer(model, vocab, encode_pairs(vocab, task.train), encode_pairs(vocab, task.valid),
                      settings, out_dir, levels=task.levels)
    if resume is not None:
        trainer.restore(resume)
    return trainer


__all__ = ["NonFiniteLossError", "TrainingInterrupted", "MAX_DATA_LENGTH", "read_pairs", "split_pairs", "TaskData",
           "Recipe", "RECIPES", "DATA_RECIPE", "TrainSettings", "Trainer", "load_task", "encode_pairs", "build_model",
           "task_names", "read_metrics", "recipe_for", "settings_for", "make_trainer"]
