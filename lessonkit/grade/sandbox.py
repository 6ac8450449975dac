"""Where a notebook runs: a private folder of its own, written from copies the grader took before any
notebook ran, and nothing left running after it.

* ``Snapshot.take()`` reads into memory, once, at the start: the two packages (``minitransformer``
  and ``lessonkit``, every file but caches) and the lesson files the notebooks read (``experiments/``,
  ``debug_attention.py``, ``runtimes.json``). A notebook that rewrites a checker's source on disk, or a
  lesson file, changes the disk, not the snapshot: every later notebook gets the snapshot.
* ``Private(snapshot)`` writes one notebook's folder: ``work/`` (the kernel's working folder: the lesson
  files, and nothing else) and ``pkg/`` (the packages, which the kernel imports: its ``PYTHONPATH``
  starts there), made read-only. The folder is removed afterwards.
* ``Leftovers``: on Linux the grader adopts the orphans of its kernels (``PR_SET_CHILD_SUBREAPER``),
  and after each notebook it stops every process of its own that is not a kernel still grading, so a
  process a notebook left behind cannot touch the notebooks graded after it.

The code runs with the grader's account: a process of that account can still read or write anything
the account can, a sibling's folder included, while it runs. ``--jobs 1`` (one notebook at a time, the
default) leaves no sibling running beside it; a container or a throwaway account is the real fence
(docs/teachers.md).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import pathlib
import shutil
import signal
import stat
import sys
import tempfile

from ..i18n import ENV

__all__ = ["LESSON_FILES", "Leftovers", "Private", "Snapshot"]

LESSON_FILES = ("experiments", "debug_attention.py", "runtimes.json")
# Files of the repository a lesson reads beside the package (lesson 0 shows the debugger's launch file),
# written where the lessons look for them: beside the packages' copy.
REPO_FILES = (".vscode/launch.json",)
PACKAGES = ("minitransformer", "lessonkit")
_SKIP = ("__pycache__",)


def _files(root: pathlib.Path) -> dict[str, bytes]:
    found = {}
    if root.is_file():
        return {root.name: root.read_bytes()}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root.parent)
        if path.is_file() and not any(part in _SKIP for part in rel.parts) and path.suffix != ".pyc":
            found[rel.as_posix()] = path.read_bytes()
    return found


class Snapshot:
    """The packages' and the lessons' files as they were when grading began."""

    def __init__(self, packages: dict[str, bytes], lessons: dict[str, bytes], roots: dict[str, pathlib.Path],
                 translations: dict[str, bytes] | None = None):
        self.packages, self.lessons, self.roots = packages, lessons, roots
        self.translations = translations or {}      # lessons/<lang>/src/*.toml, REPO_FILES: beside the copy

    @classmethod
    def take(cls, lessons: pathlib.Path | None) -> Snapshot:
        import lessonkit  # noqa: PLC0415
        import minitransformer  # noqa: PLC0415

        roots = {"minitransformer": pathlib.Path(minitransformer.__file__).parent,
                 "lessonkit": pathlib.Path(lessonkit.__file__).parent}
        packages = {}
        for root in roots.values():
            packages.update(_files(root))
        lesson_files, translations = {}, {}
        for name in LESSON_FILES if lessons is not None else ():
            if (lessons / name).exists():
                lesson_files.update(_files(lessons / name))
        for folder in sorted(lessons.glob("*/src")) if lessons is not None else ():
            translations.update({f"lessons/{folder.parent.name}/{rel}": data for rel, data in _files(folder).items()
                                 if rel.endswith(".toml")})
        for rel in REPO_FILES if lessons is not None else ():
            if (lessons.parent / rel).is_file():
                translations[rel] = (lessons.parent / rel).read_bytes()
        return cls(packages, lesson_files, roots, translations)

    def changed_on_disk(self) -> list[str]:
        """The package files that differ on disk from the snapshot (a notebook wrote them)."""
        changed = []
        for rel, data in self.packages.items():
            top, _, rest = rel.partition("/")
            path = self.roots[top] / rest
            try:
                same = hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(data).digest()
            except OSError:
                same = False
            if not same:
                changed.append(f"{top}/{rest}")
        return changed


def _write_tree(base: pathlib.Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _read_only(root: pathlib.Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    root.chmod(root.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _writable_again(root: pathlib.Path) -> None:
    for path in [root, *root.rglob("*")]:
        try:
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | stat.S_IWUSR)
        except OSError:
            pass


class Private:
    """One notebook's folder (a context manager): ``work`` and ``pkg``, and the kernel's environment."""

    def __init__(self, snapshot: Snapshot):
        self.snapshot = snapshot

    def __enter__(self) -> Private:
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="lessonkit-grade-"))    # mode 0700
        self.work, self.pkg = self.root / "work", self.root / "pkg"
        self.work.mkdir()
        _write_tree(self.work, self.snapshot.lessons)
        _write_tree(self.pkg, self.snapshot.packages)
        _write_tree(self.pkg, self.snapshot.translations)     # where lessonkit.i18n looks, beside the copy
        _read_only(self.pkg)
        return self

    def env(self, language: str = "en") -> dict[str, str]:
        """The kernel's environment: the packages' copy first on the path, and the notebook's language."""
        env = dict(os.environ)
        env[ENV] = language                              # a translated notebook's kernel speaks its language
        rest = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(self.pkg) + (os.pathsep + rest if rest else "")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONSAFEPATH"] = "1"       # the working folder is not on the path: pkg/ is the only copy
        return env

    def imported_from_here(self, module_file: str) -> bool:
        try:
            return pathlib.Path(module_file).resolve().is_relative_to(self.pkg.resolve())
        except (OSError, ValueError):
            return False

    def __exit__(self, *exc) -> None:
        _writable_again(self.root)
        shutil.rmtree(self.root, ignore_errors=True)


# -- processes left behind --------------------------------------------------------------------------

_PR_SET_CHILD_SUBREAPER = 36


class Leftovers:
    """The grader's own children that are no kernel of a notebook being graded: stopped after each
    notebook. Linux only (elsewhere ``adopt_orphans`` does nothing and ``stop`` finds nothing)."""

    def __init__(self):
        self.active = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                self.active = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            except (OSError, AttributeError):
                self.active = False

    @staticmethod
    def children() -> set[int]:
        found: set[int] = set()
        for task in pathlib.Path("/proc/self/task").glob("*"):
            try:
                found |= {int(p) for p in (task / "children").read_text().split()}
            except OSError:
                continue
        return found

    def stop(self, keep: set[int]) -> int:
        """Kill every child of the grader not in ``keep`` (the kernels still grading); how many."""
        if not self.active:
            return 0
        stopped = 0
        for pid in sorted(self.children() - keep):
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                stopped += 1
            except (ProcessLookupError, ChildProcessError, PermissionError):
                continue
        return stopped
