"""One training run per folder: an operating-system lock on ``DIR/.lock``, held for the whole run.

Two runs writing into one folder would overwrite each other's checkpoints and
metrics, so a run takes the folder's lock before it looks at what the folder
holds, and keeps it until it has written its last file. A second run into the
same folder is refused at once, with the PID of the run holding the lock.

The lock is ``flock`` on the file ``.lock`` (``msvcrt.locking`` on Windows): the
operating system releases it when the process ends, however it ends (an
exception, ``kill -9``, a power cut), so a lock is never stale and there is
nothing to clean up. The file itself stays in the folder, holding the PID of
the last run that locked it; only the lock on it means anything, so it is
never deleted (deleting it would let a third run lock a new file while a
second still holds the old one).

``hold(directory)`` is re-entrant within one process (the command line takes the
lock before it checks for an earlier run, and ``Trainer.run`` takes it again), and
per process: two threads of one process share it.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

try:
    import fcntl
except ImportError:          # Windows
    fcntl = None
    import msvcrt

LOCK_NAME = ".lock"

_held: dict[str, list] = {}       # real path of the folder -> [file descriptor, how many hold() are open]


class FolderInUseError(RuntimeError):
    """Another process holds the run folder's lock. ``directory``; ``pid``: the holder's PID, or None."""

    def __init__(self, directory: str, pid: int | None):
        self.directory, self.pid = directory, pid
        holder = f"PID {pid}" if pid is not None else "a process whose PID is not written yet"
        super().__init__(f"{directory} is in use by another training run ({holder}); wait for it to finish, "
                         "or train into another folder")


def _try_lock(fd: int) -> bool:
    """Take the lock on ``fd`` without waiting; False if another process holds it."""
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except (BlockingIOError, PermissionError):
        return False
    except OSError as exc:
        if exc.errno in (getattr(os, "EAGAIN", 11), getattr(os, "EACCES", 13)):   # pragma: no cover
            return False
        raise
    return True


def _holder(fd: int) -> int | None:
    """The PID written in the lock file by the process that holds it (None if it is not there yet)."""
    for _ in range(20):                          # the holder writes it just after locking: give it a moment
        try:
            text = os.pread(fd, 32, 0) if hasattr(os, "pread") else b""
        except OSError:
            return None
        if text.strip().isdigit():
            return int(text)
        time.sleep(0.01)
    return None


@contextmanager
def hold(directory: str | os.PathLike):
    """Hold the run lock of ``directory`` (which must exist) inside the block.

    Raises FolderInUseError at once if another process holds it. Closing the
    file at the end of the block (or the process ending) releases it.
    """
    directory = os.fspath(directory)
    key = os.path.realpath(directory)
    if key in _held:                             # this process holds it already
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    fd = os.open(os.path.join(directory, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if not _try_lock(fd):
            raise FolderInUseError(directory, _holder(fd))
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except BaseException:
        os.close(fd)
        raise
    _held[key] = [fd, 1]
    try:
        yield
    finally:
        _held[key][1] -= 1
        if _held[key][1] == 0:
            del _held[key]
            os.close(fd)                         # releases the lock


def holds(directory: str | os.PathLike) -> bool:
    """True while this process holds the run lock of ``directory``."""
    return os.path.realpath(os.fspath(directory)) in _held


__all__ = ["hold", "holds", "FolderInUseError", "LOCK_NAME"]
