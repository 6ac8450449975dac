"""Standard output and standard error that cannot take a run down with them.

Two things go wrong with writing to them that have nothing to do with the work:

* the stream is gone. The program reading a pipe exited (``train … | head -3``:
  after three lines ``head`` closes the pipe, and every later write fails with
  EPIPE), or the terminal was closed (writes fail with EIO). A training run
  must not die of it in the middle of a step: it should stop as it does for
  SIGTERM, saving a checkpoint (``train.Trainer.run`` asks ``output_lost()``
  after every step);
* the stream cannot encode a character (``PYTHONIOENCODING=latin-1`` and a
  banner holding "ε" or a report holding "✓"): the character is written as
  an escape (``\\u03b5``) instead, as Python does on standard error.

``guard_standard_streams()`` wraps ``sys.stdout`` and ``sys.stderr`` (the
command line does it for the whole of ``main``). A guarded stream that finds
its reader gone remembers it, swallows every later write, and points its file
descriptor at ``os.devnull``, so that the final flush at exit does not print
"Exception ignored … BrokenPipeError" either.
"""

from __future__ import annotations

import errno
import io
import os
import sys
from contextlib import contextmanager

# The errors that mean "nobody reads this stream any more", not "this write failed".
GONE = frozenset({errno.EPIPE, errno.EIO, errno.ECONNRESET, errno.ENXIO})

_lost: set[str] = set()            # names of the guarded streams found gone ("stdout", "stderr")


class GuardedStream:
    """A text stream (sys.stdout or sys.stderr) whose writes never raise for a lost reader or
    an unencodable character. Everything else (``fileno``, ``isatty``, ``encoding`` …) is the
    wrapped stream's."""

    def __init__(self, stream, name: str):
        self._stream, self._name = stream, name
        self.lost = False

    def _gone(self, exc: OSError) -> bool:
        if exc.errno not in GONE:
            return False
        self.lost = True
        _lost.add(self._name)
        try:                                          # the pending bytes drain into /dev/null at exit
            fd = self._stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
        except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
            pass
        return True

    def write(self, text: str) -> int:
        if self.lost:
            return len(text)
        try:
            try:
                return self._stream.write(text)
            except UnicodeEncodeError:
                encoding = getattr(self._stream, "encoding", None) or "ascii"
                safe = text.encode(encoding, "backslashreplace").decode(encoding, "replace")
                return self._stream.write(safe)
        except OSError as exc:
            if self._gone(exc):
                return len(text)
            raise

    def flush(self) -> None:
        if self.lost:
            return
        try:
            self._stream.flush()
        except OSError as exc:
            if not self._gone(exc):
                raise

    def __getattr__(self, name):
        return getattr(self._stream, name)


def output_lost() -> str | None:
    """"stdout" or "stderr" if a guarded standard stream found its reader gone, else None."""
    return "stdout" if "stdout" in _lost else "stderr" if _lost else None


@contextmanager
def guard_standard_streams():
    """Inside the block, sys.stdout and sys.stderr are GuardedStreams (restored afterwards)."""
    saved = sys.stdout, sys.stderr
    lost_before = set(_lost)
    _lost.clear()
    if sys.stdout is not None and not isinstance(sys.stdout, GuardedStream):
        sys.stdout = GuardedStream(sys.stdout, "stdout")
    if sys.stderr is not None and not isinstance(sys.stderr, GuardedStream):
        sys.stderr = GuardedStream(sys.stderr, "stderr")
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        _lost.clear()
        _lost.update(lost_before)


def write_stderr(text: str) -> None:
    """Write to file descriptor 2 directly (what a signal handler may do), ignoring a lost reader."""
    try:
        os.write(2, text.encode(errors="backslashreplace"))
    except OSError:
        pass


__all__ = ["GuardedStream", "guard_standard_streams", "output_lost", "write_stderr", "GONE"]
