"""How a training run stops without losing its work: stop signals, a lost output, an unwritable file.

    StopSignals          while training, SIGINT (Ctrl-C), SIGTERM, SIGHUP (the terminal was
                         closed) and SIGPIPE (a pipe was closed) only ask the loop to stop;
                         so does a standard output or error whose reader is gone
                         (``streams.output_lost``): the step finishes, a checkpoint is saved
    TrainingInterrupted  what the loop raises after that save; ``exit_code`` 128 + signal
    OutputWriteError     a checkpoint or the log could not be written (a full disk): names
                         the file, the step, and the last checkpoint that is intact

The training loop (train.py) uses them; the command line turns them into its messages
and exit codes.
"""

from __future__ import annotations

import signal
import threading

from . import streams

_STOP_REASONS = {int(getattr(signal, name)): why for name, why in (
    ("SIGHUP", " (the terminal was closed)"), ("SIGPIPE", " (the output was closed: a pipe's reader exited)"))
    if hasattr(signal, name)}


class StopSignals:
    """While active, SIGINT (Ctrl-C), SIGTERM, SIGHUP (closing the terminal) and SIGPIPE (closing
    a pipe) ask the loop to stop instead of killing it; so does a standard output or error whose
    reader is gone (``streams.output_lost``, which ``requested`` checks).

    The handler only records the signal: the step in progress finishes, then the
    loop saves a checkpoint and stops. A second signal while that happens is
    acknowledged and changes nothing (a checkpoint half-written by a second
    Ctrl-C is what this avoids). Signal handlers can only be installed from the
    main thread; elsewhere this does nothing and signals behave as usual.
    """

    SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE")
                    if hasattr(signal, name))

    def __init__(self, announce: bool = True):
        self.signum: int | None = None
        self.announce = announce               # False on ranks other than 0 of mpiexec: one message per run
        self._previous: dict = {}

    def requested(self) -> bool:
        """True once a stop was asked for: a signal, or standard output or error found gone."""
        if self.signum is None and streams.output_lost():
            self.signum = int(signal.SIGPIPE) if hasattr(signal, "SIGPIPE") else int(signal.SIGTERM)
            self._say(f"\nstandard {'output' if streams.output_lost() == 'stdout' else 'error'} "
                      "was closed: finishing this step, then saving a checkpoint...\n")
        return self.signum is not None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        # os.write, not print: a handler may run in the middle of a print, and
        # Python's buffered streams refuse to be re-entered.
        # streams.write_stderr: the terminal or pipe it goes to may be gone (SIGHUP, SIGPIPE).
        name = signal.Signals(signum).name + _STOP_REASONS.get(int(signum), "")
        if self.signum is None:
            self.signum = signum
            self._say(f"\n{name} received: finishing this step, then saving a checkpoint...\n")
        else:
            self._say(f"\n{name} received again: still saving the checkpoint; stopping as soon as it is written\n")

    def _say(self, text: str) -> None:
        if self.announce:
            streams.write_stderr(text)

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


class TrainingInterrupted(Exception):
    """A signal, or the loss of the output's reader, stopped the run; a checkpoint of the current
    step was saved first.

    signum: the signal (SIGINT, SIGTERM, SIGHUP; SIGPIPE also stands for a standard
    output or error found gone); step: the step saved; checkpoint: the file written
    (None when the trainer has no out_dir). ``exit_code`` is the shell's convention,
    128 + signum: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP, 141 for a closed pipe
    (what a shell reports for a program that a closed pipe killed).
    """

    def __init__(self, signum: int, step: int, checkpoint: str | None):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        self.exit_code = 128 + int(signum)
        where = f"; checkpoint saved: {checkpoint}" if checkpoint else ""
        why = _STOP_REASONS.get(int(signum), "")
        super().__init__(f"interrupted by {signal.Signals(signum).name}{why} at step {step}{where}")


class OutputWriteError(RuntimeError):
    """A file of the run (the checkpoint, metrics.jsonl) could not be written: a full disk, a folder
    made read-only. The run stops; the last checkpoint written is intact (an atomic save never
    touches it before the new file is complete).

    path: the file; step: the step it was for; reason: the operating system's words;
    intact: (path, step) of the checkpoint a resume can start from, or None.
    """

    def __init__(self, path: str, step: int, reason: str, intact: tuple[str, int] | None):
        self.path, self.step, self.reason, self.intact = path, step, reason, intact
        kept = (f"the previous checkpoint, {intact[0]} (step {intact[1]}), is intact" if intact else
                "no checkpoint was written before it, so there is nothing to resume from")
        super().__init__(f"could not write {path} at step {step} ({reason}); {kept}")


__all__ = ["StopSignals", "TrainingInterrupted", "OutputWriteError"]
