"""Writing files so that nothing the user saved is ever half-written.

Every file the package writes (checkpoints, metrics logs, TSV exports, PNG
pictures) goes through :func:`atomic_write_bytes`: the bytes go to a temporary
file in the same directory, are flushed to disk (fsync), and the temporary
file is then renamed over the target with ``os.replace``, which is atomic.
A reader, or a crash at any moment, sees the old file or the new one, never
half of one. Same directory, because a rename across file systems is not atomic.

The temporary file has a fixed name per target, ``.<name>.partial``: a save
killed half-way (``kill -9``, a power cut) leaves at most one such file, and
the next save of the same target simply overwrites it.
"""

from __future__ import annotations

import os

PARTIAL_SUFFIX = ".partial"


def partial_path(path: str | os.PathLike) -> str:
    """The temporary file a save of ``path`` writes first: ``dir/.name.partial``."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}{PARTIAL_SUFFIX}")


def _umask() -> int:
    mask = os.umask(0)      # the only way to read the umask is to set it
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring).

    The file gets the permissions an ordinary new file would get (0666 minus
    the umask). The directory must exist: a missing one is the caller's error
    to report (with the option that named it), not something to create silently.
    """
    tmp = partial_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())       # on disk before the rename makes it visible
        os.replace(tmp, path)          # atomic on POSIX and Windows
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """``atomic_write_bytes`` of UTF-8 text; newlines are written as given ("\\n" on every OS)."""
    atomic_write_bytes(path, text.encode("utf-8"))


__all__ = ["atomic_write_bytes", "atomic_write_text", "partial_path", "PARTIAL_SUFFIX"]
