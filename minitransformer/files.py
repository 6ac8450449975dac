"""Writing files so that nothing the user saved is ever half-written.

Every file the package writes (checkpoints, metrics logs, TSV exports, PNG
pictures) goes through :func:`atomic_write_bytes`: the bytes go to a temporary
file in the same directory, are flushed to disk (fsync), and the temporary
file is then renamed over the target with ``os.replace``, which is atomic.
A reader, or a crash at any moment, sees the old file or the new one, never
half of one. Same directory, because a rename across file systems is not atomic.

The temporary file's name is unique to its writer, ``.<name>.<pid>-<random>.partial``,
so two processes saving the same target at once never write into each
other's temporary file (the last rename wins, and each file is whole). A save
killed half-way (``kill -9``, a power cut) leaves its temporary file behind; a
training run removes such leftovers from its output directory when it starts
(:func:`remove_stale_partials`), holding the folder's run lock (``runlock``),
so no other run is writing there. The cleanup knows the older names too:
``.<name>.partial`` (one fixed name per target) and ``.tmp-…<name>``.

``keep_previous``: the file being replaced is kept under a second name
(``checkpoint.npz`` -> ``checkpoint.prev.npz``), also by renames only, so
at every moment both names hold a complete file.

Reading: :func:`open_to_read` opens a file the user named (a TSV, a text file,
a BPE codes file) and turns the three ways that fails into one line that names
the file and what it should have been. Every reader of user text (``--data`` and
other TSV files, plain-text corpora, BPE codes files, the standard input of
``bpe apply`` and ``translate``) reads through :func:`bounded_lines`, with the
limits defined here (``MAX_LINE_BYTES``, ``MAX_TEXT_BYTES``, ``MAX_CODES_BYTES``):
``/dev/zero`` or a binary file is refused after one line's limit, naming the input
and the line, instead of being read until the memory runs out.

Choosing where to write, before any work (the one rule of every command that writes):
:func:`check_output_file` and :func:`check_output_folder` refuse an output that is one of the
command's own inputs (the same file under any name: a hard link or a symbolic link counts, by
``os.path.samestat``), and create at most the last missing folder of an output path, unless
the caller was asked for more (``parents``: ``--parents`` on the command line, as ``mkdir -p``).
A typo in a path then fails, instead of growing a tree of folders somewhere unexpected.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import secrets

PARTIAL_SUFFIX = ".partial"

# The limits of every reader of user text. A sentence pair is a few hundred bytes, and the largest
# corpus this package can train on in reasonable time is far below a gigabyte. A codes file is a
# list of merges ("e r</w>": about 10 bytes each); 16 MB holds 1.7 million of them, forty times
# the 37,000-token vocabulary of §5.1, and took 0.63 GB of memory once read (measured; 50 MB took 1.19 GB
# of the reader before this limit, without refusing anything).
MAX_LINE_BYTES = 1_000_000
MAX_TEXT_BYTES = 1_000_000_000
MAX_CODES_BYTES = 16_000_000
LEGACY_TEMP_PREFIX = ".tmp-"     # tempfile.mkstemp(prefix=".tmp-", suffix=name): the old temporary names

# ".checkpoint.npz.4242-9f86d081.partial" (this version) or ".checkpoint.npz.partial" (before it).
_PARTIAL_NAME = re.compile(r"^\.(?P<target>.+?)(?:\.(?P<pid>\d+)-[0-9a-f]+)?" + re.escape(PARTIAL_SUFFIX) + "$")


def open_to_read(path: str | os.PathLike, kind: str, short: str | None = None):
    """``open(path, "rb")``; a missing file, a directory or an unreadable file is the same
    error type with a message naming ``path`` and the ``kind`` of file expected ("TSV data
    file"; ``short``, if given, in the other two messages: "TSV file")."""
    name, short = os.fspath(path), short or kind
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise FileNotFoundError(f"{kind} not found: {name}") from None
    except IsADirectoryError:
        raise IsADirectoryError(f"{name} is a directory, not a {short}") from None
    except PermissionError:
        raise PermissionError(f"{name}: no permission to read the {short}") from None


class InputLimitError(ValueError):
    """A line, or a whole input, of user text is longer than its limit. ``where`` (a file or "standard
    input"), ``lineno`` and ``problem`` are kept for a caller that names them its own way."""

    def __init__(self, where: str, lineno: int, problem: str):
        super().__init__(f"{where}:{lineno}: {problem}")
        self.where, self.lineno, self.problem = where, lineno, problem


def bounded_lines(f, where: str, what: str = "a text file", max_line_bytes: int | None = None,
                  max_total_bytes: int | None = None):
    """(line number, bytes of the line with its newline, if it has one) of the binary stream ``f``,
    never more than ``max_line_bytes`` a line (default ``MAX_LINE_BYTES``) nor ``max_total_bytes`` in all
    (default ``MAX_TEXT_BYTES``). Passing either is an InputLimitError naming ``where`` and the line as
    soon as it happens: nothing is read beyond one line's limit at a time. ``what`` ("a BPE codes file")
    says what the input should have been. A long line holding carriage returns is named as a file with
    CR line ends (classic Mac OS), which is what it almost always is."""
    max_line = MAX_LINE_BYTES if max_line_bytes is None else max_line_bytes
    max_total = MAX_TEXT_BYTES if max_total_bytes is None else max_total_bytes
    noun = "standard input" if where == "standard input" else "the file"
    total, lineno = 0, 0
    while True:
        raw = f.readline(max_line + 1)              # never more than one line's limit at a time
        if not raw:
            return
        lineno += 1
        total += len(raw)
        if total > max_total:
            raise InputLimitError(where, lineno, f"{noun} is larger than {max_total:,} bytes, the most this package "
                                                 f"reads of {what}; use a part of it")
        if len(raw) > max_line and not raw.endswith(b"\n"):
            hint = (": the file seems to use CR line ends (classic Mac OS); convert them to newlines"
                    if b"\r" in raw else f"; is this {what}?")
            raise InputLimitError(where, lineno, f"the line is longer than {max_line:,} bytes{hint}")
        yield lineno, raw


def partial_path(path: str | os.PathLike) -> str:
    """A temporary file for a save of ``path``, unique to this writer: ``dir/.name.<pid>-<random>.partial``."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.{os.getpid()}-{secrets.token_hex(4)}{PARTIAL_SUFFIX}")


def partial_target(path: str | os.PathLike) -> str | None:
    """The name of the file a temporary file ``path`` was for (new and old names), or None if it is not one."""
    match = _PARTIAL_NAME.match(os.path.basename(os.fspath(path)))
    return match.group("target") if match else None


def _pid_alive(pid: int) -> bool:
    """True if a process with this PID exists (another user's counts too)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)                  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError, ValueError):
        return False
    return True


def _umask() -> int:
    mask = os.umask(0)      # the only way to read the umask is to set it
    os.umask(mask)
    return mask


def previous_path(path: str | os.PathLike) -> str:
    """Where ``keep_previous`` keeps the replaced file: ``dir/name.prev.ext`` (``checkpoint.prev.npz``)."""
    root, ext = os.path.splitext(os.fspath(path))
    return f"{root}.prev{ext}"


def atomic_write_bytes(path: str | os.PathLike, data: bytes, keep_previous: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring).

    The file gets the permissions an ordinary new file would get (0666 minus
    the umask). The directory must exist: a missing one is the caller's error
    to report (with the option that named it), not something to create silently.

    keep_previous: if ``path`` exists, it becomes ``previous_path(path)``
    (replacing an older one). Order of the steps: the new bytes are complete
    on disk first; then the current file gets its second name (a hard link,
    renamed over the previous one); then the new file is renamed over
    ``path``. A crash between any two steps leaves ``path`` complete (old or
    new) and the previous name complete (older or old).
    """
    tmp = partial_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())       # on disk before the rename makes it visible
        if keep_previous and os.path.isfile(path):
            _link_as(path, previous_path(path))
        os.replace(tmp, path)          # atomic on POSIX and Windows
    except BaseException as exc:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno is not None:
            # The error names the file being saved, not the hidden temporary one.
            raise type(exc)(exc.errno, exc.strerror, os.fspath(path)) from exc
        raise


def _link_as(path: str | os.PathLike, target: str) -> None:
    """Give the file ``path`` the second name ``target`` atomically, keeping ``path`` as it is."""
    staged = partial_path(target)
    try:
        try:
            os.link(path, staged)      # a second name for the same bytes: no copy
        except OSError:                # a file system without hard links: copy the bytes instead
            with open(path, "rb") as src, open(staged, "wb") as dst:
                dst.write(src.read())
                dst.flush()
                os.fsync(dst.fileno())
        os.replace(staged, target)
    except BaseException:
        if os.path.lexists(staged):
            os.unlink(staged)
        raise


def remove_stale_partials(directory: str | os.PathLike) -> list[str]:
    """Delete the temporary files an interrupted save left in ``directory``; return their paths.

    These are ``.<name>.<pid>-<random>.partial`` (this module's names),
    ``.<name>.partial`` and ``.tmp-…`` (what earlier versions wrote). Call it
    holding the folder's run lock (``runlock.hold``), so that no other run is
    writing there; a temporary file whose writer (the PID in its name) is still
    alive, and is not this process, is left alone all the same.
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        return []
    found = glob.glob(os.path.join(glob.escape(directory), f".*{PARTIAL_SUFFIX}"))
    found += glob.glob(os.path.join(glob.escape(directory), f"{LEGACY_TEMP_PREFIX}*"))
    removed = []
    for path in sorted(set(found)):
        match = _PARTIAL_NAME.match(os.path.basename(path))
        pid = match.group("pid") if match else None
        if pid is not None and int(pid) != os.getpid() and _pid_alive(int(pid)):
            continue                                  # its writer may still be writing it
        if os.path.isfile(path) and not os.path.islink(path):
            os.unlink(path)
            removed.append(path)
    return removed


def check_writable_dir(directory: str | os.PathLike) -> None:
    """Make sure files can be written in ``directory`` (created if missing), before any work is done.

    Raises NotADirectoryError if the path is a file, PermissionError if the
    directory cannot be created or written to; both name the path. A probe
    file is written and removed, which is the only reliable test (permissions,
    read-only mounts and full disks all show up here).
    """
    directory = os.fspath(directory)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise NotADirectoryError(f"{directory} exists and is not a directory")
    probe = os.path.join(directory, f".write-test.{os.getpid()}-{secrets.token_hex(4)}{PARTIAL_SUFFIX}")
    try:
        os.makedirs(directory, exist_ok=True)
        try:
            with open(probe, "wb") as f:
                f.write(b"ok")
                f.flush()
                os.fsync(f.fileno())       # a full disk may only say so here
        finally:
            if os.path.lexists(probe):     # a probe that could be created but not written is removed too
                os.unlink(probe)
    except NotADirectoryError:
        raise NotADirectoryError(f"{directory}: a part of the path is a file, not a directory") from None
    except PermissionError:
        raise PermissionError(errno.EACCES, f"{directory}: no permission to create or write files there") from None
    except OSError as exc:
        if exc.errno == errno.EROFS:       # a read-only mount is the same mistake as a read-only folder
            raise PermissionError(errno.EROFS, f"{directory}: the file system is read-only") from None
        raise OSError(exc.errno, f"{directory}: cannot write files there ({exc.strerror})") from None


class OutputPathError(ValueError):
    """An output path a command must not write: one of its own inputs, or under several missing folders."""


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when the two paths name one file: the same inode (a hard link, a symbolic link, ``./x`` and ``x``),
    or, where one of them does not exist, the same resolved path."""
    try:
        return os.path.samestat(os.stat(a), os.stat(b))
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def refuse_inputs(output: str | os.PathLike, inputs) -> None:
    """OutputPathError if the file ``output`` is one of ``inputs``, (what it is, path) pairs such as
    ("a checkpoint to average", "runs/x/checkpoint.npz"): writing it would replace what the command reads."""
    output = os.fspath(output)
    for what, path in inputs:
        if path is None or not same_file(output, path):
            continue
        path = os.fspath(path)
        name = f"{what} too" if os.path.normpath(path) == os.path.normpath(output) else \
            f"the same file as {what} {path}"
        raise OutputPathError(f"{output} is {name}: writing it would replace an input of this command; "
                              "write to another file")


def _missing_folders(folder: str) -> list[str]:
    """The folders of the path ``folder`` that do not exist, the deepest first (as written: relative stays relative)."""
    missing, here = [], os.path.normpath(folder)
    while here and not os.path.exists(here):
        missing.append(here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    return missing


def check_output_folder(folder: str | os.PathLike, parents: bool = False, ask: str = "") -> None:
    """Make ``folder`` ready to write into, before any work: created if it is missing and its parent exists
    (all its missing folders if ``parents``), and writable (``check_writable_dir``). Several missing
    folders without ``parents`` are an OutputPathError naming the topmost; ``ask`` says how to ask for
    them ("give --parents")."""
    folder = os.fspath(folder)
    missing = _missing_folders(folder)
    if len(missing) > 1 and not parents:
        raise OutputPathError(f"{folder}: the folder {missing[-1]} does not exist either; only the last missing folder "
                              f"of an output path is created (check the path{', or ' + ask if ask else ''})")
    check_writable_dir(folder)


def check_output_file(path: str | os.PathLike, inputs=(), parents: bool = False, ask: str = "") -> None:
    """The one rule for a file a command will write, checked before any work: a file name (not empty, not
    a folder), not one of ``inputs`` ((what, path) pairs, ``refuse_inputs``), in a folder that exists or is
    the one missing folder (``check_output_folder``: created, and probed for writing)."""
    path = os.fspath(path)
    if not path.strip() or os.path.isdir(path) or path.endswith(("/", os.sep)):
        raise OutputPathError(f"{path!r} is a folder or no name at all; name a file to write")
    refuse_inputs(path, inputs)
    check_output_folder(os.path.dirname(path) or ".", parents, ask)


def atomic_write_text(path: str | os.PathLike, text: str, keep_previous: bool = False) -> None:
    """``atomic_write_bytes`` of UTF-8 text; newlines are written as given ("\\n" on every OS)."""
    atomic_write_bytes(path, text.encode("utf-8"), keep_previous)


def atomic_second_name(path: str | os.PathLike, target: str | os.PathLike) -> None:
    """Give the complete file ``path`` the second name ``target`` atomically, replacing what
    ``target`` held (a hard link, or a copy on a file system without them); ``path`` stays as it is.
    ``train --keep-last`` keeps its step checkpoints this way, without writing them twice."""
    _link_as(path, os.fspath(target))


__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_second_name", "partial_path", "partial_target",
           "previous_path", "remove_stale_partials", "check_writable_dir", "check_output_file", "check_output_folder",
           "refuse_inputs", "same_file", "OutputPathError", "PARTIAL_SUFFIX", "MAX_LINE_BYTES", "MAX_TEXT_BYTES",
           "MAX_CODES_BYTES", "InputLimitError", "bounded_lines", "open_to_read"]
