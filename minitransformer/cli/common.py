"""What every command shares: the one-line error contract, the option types, the backend option.

The contract: an error reaches the user as one line, ``error: <what> (<which option, file or
variable>)``, with exit code 2 for bad input (options, files, data, environment variables) and 1
for failures at run time (a diverged run, a full disk); ``--debug`` or MINITRANSFORMER_DEBUG=1
adds the traceback. A command raises :class:`CliError`; ``about`` and ``memory_for`` turn the
package's own exceptions into one. ``app.main`` prints the line and returns the exit code.

Only the standard library (and ``options``, which uses nothing else) is imported at the top, the
package's other modules inside functions, so that a bad environment variable, read when ``backend``
is imported, is reported like every other error.
"""

from __future__ import annotations

import argparse
import os
import warnings
from contextlib import contextmanager

from ..options import Bound, option_type

DEBUG_VARIABLE = "MINITRANSFORMER_DEBUG"

# The options not named after their field (``options.add_options`` makes ``--field-name`` of the rest):
# {dataclass: {field: option}}.
OPTION_NAMES = {"TrainSettings": {"warmup_steps": "--warmup"}, "Sample": {"seed": "--sample-seed"}}


def train_option(name: str) -> str:
    """The option of TrainSettings field ``name``, as ``train`` spells it: ``--keep-last``, ``--warmup``."""
    return OPTION_NAMES["TrainSettings"].get(name, "--" + name.replace("_", "-"))

# The dataclasses whose fields the options set: a message of theirs starts "TransformerConfig: ...", which
# the user never typed (the "(which)" names the option), so ``message`` drops it.
OPTION_CLASSES = ("TrainSettings", "TransformerConfig", "Sample", "Beam")

# The exit code of a command whose standard output was closed before it finished: 128 + SIGPIPE.
OUTPUT_CLOSED = 141


# -- errors ----------------------------------------------------------------------------


class CliError(Exception):
    """An error to show as ``error: <what> (<which>)`` and exit with ``code``.

    Under ``mpiexec -n N`` every rank meets a CliError alike (the same options, files and
    parameters), so rank 0 alone prints it.
    """

    def __init__(self, what: str, which: str | None = None, code: int = 2):
        super().__init__(what)
        self.what, self.which, self.code = what, which, code

    def __str__(self) -> str:
        return f"{self.what} ({self.which})" if self.which else self.what


class Terminated(BaseException):
    """SIGTERM or SIGHUP outside the training loop (which handles them itself): exit 128 + signal,
    without a traceback."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _Ranks:
    """Whether MPI has started with more than one rank (train under mpiexec -n N): ``app.main`` then
    leaves at once on an error, since MPI_Finalize would wait for ranks stuck in a collective."""

    several = False


RANKS = _Ranks()


def message(exc: BaseException, which: str | None = None) -> str:
    """The readable part of an exception; a leading "<path>: " that ``which`` already names is dropped."""
    if isinstance(exc, OSError) and exc.strerror:         # "[Errno 28] ..." reads better without the number
        text = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    else:
        text = str(exc) or type(exc).__name__
    path = which.split(" ", 1)[-1] if which else None
    if path and text.startswith(f"{path}: "):
        text = text[len(path) + 2:]
    for name in OPTION_CLASSES:
        text = text.removeprefix(f"{name}: ")
    return text


BAD_INPUT = (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


@contextmanager
def about(which: str):
    """Report a bad-input error raised inside the block as coming from ``which`` (an option and its value)."""
    try:
        yield
    except CliError:
        raise
    except BAD_INPUT as exc:
        raise CliError(message(exc, which), which, 2) from exc


@contextmanager
def memory_for(what: str, which: str | None, hint: str = ""):
    """An out-of-memory error inside the block, reported as ``out of memory <what>`` from ``which``
    (the option or file that asked for the memory), with ``hint`` (what to make smaller)."""
    try:
        yield
    except MemoryError as exc:
        raise CliError(f"out of memory {what}{'; ' + hint if hint else ''}", which, 1) from exc


@contextmanager
def quiet_numpy():
    """No NumPy overflow / invalid-value warnings inside the block.

    A diverging step makes NumPy warn at each line it reaches; the package reports
    such a state once, by name (a skipped step names the tensor, decoding raises on
    NaN scores, a diverged checkpoint is refused at load), so the warnings only repeat
    it, in the middle of the output.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"(overflow|invalid value|divide by zero) encountered", RuntimeWarning)
        yield


PARENTS_HINT = "give --parents to create them all"


def add_parents_option(p: argparse.ArgumentParser) -> None:
    """``--parents``: the one way to ask a command to create more than the last missing folder of its output."""
    p.add_argument("--parents", action="store_true",
                   help="create every missing folder of the output path (as mkdir -p); without it, only the last "
                        "missing folder is created and a mistyped path is an error")


def _output_check(which: str):
    """A bad output path is a usage error (2); a full disk is a run-time failure (1); both name ``which``."""
    @contextmanager
    def checking():
        with about(which):
            try:
                yield
            except OSError as exc:
                if isinstance(exc, BAD_INPUT):
                    raise
                raise CliError(message(exc, which), which, 1) from exc
    return checking()


def check_output_dir(path: str, option: str, parents: bool = False) -> None:
    """``files.check_output_folder`` for the folder an option names: created if it is the one missing
    folder (every missing one with ``parents``), and writable; each problem names the option."""
    from ..files import check_output_folder  # noqa: PLC0415

    with _output_check(f"{option} {path}"):
        check_output_folder(path, parents, PARENTS_HINT)


def check_output_file(path: str, option: str, inputs=(), parents: bool = False) -> None:
    """``files.check_output_file`` for the file an option names: a file name, not one of the command's
    ``inputs`` ((what, path) pairs), in a folder that exists or is the one created; the error names the option."""
    from ..files import check_output_file as check  # noqa: PLC0415

    with _output_check(f"{option} {path}"):
        check(path, inputs, parents, PARENTS_HINT)


def debug_requested(argv: list[str]) -> bool:
    if "--debug" in argv:
        return True
    raw = os.environ.get(DEBUG_VARIABLE, "")
    value = raw.strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise CliError(f"environment variable {DEBUG_VARIABLE}={raw!r} is not valid: expected 1 or 0",
                   DEBUG_VARIABLE)


# -- option types: every number is checked by argparse, naming the option ---------------
# (the same checks, in the same words, as the options options.add_options makes of dataclass fields)

positive_int = option_type(int, Bound(lo=1))             # 0 is never "the default": leave the option out for that
non_negative_int = option_type(int, Bound(lo=0))
positive_float = option_type(float, Bound(lo=0, lo_open=True))     # finite, > 0


class Parser(argparse.ArgumentParser):
    """argparse, with its errors in the package's one format: ``error: <what> (<option>)``, exit 2."""

    def error(self, message: str):
        which = None
        if message.startswith("argument "):
            which, _, message = message[len("argument "):].partition(": ")
            which = which.split("/")[-1]                      # "-h/--help" -> "--help"
        raise CliError(message if which else f"{message}; see {self.prog} --help", which, 2)


# -- options every command takes -----------------------------------------------------------


def add_common(p: argparse.ArgumentParser, backend_option: bool = True) -> None:
    if backend_option:
        p.add_argument("--backend", choices=["numpy", "cupy"], default=None,
                       help="array library: numpy (CPU, default) or cupy (CUDA GPU); "
                            "also settable with MINITRANSFORMER_BACKEND")
    p.add_argument("--debug", action="store_true",
                   help=f"show the full traceback of an error (also: {DEBUG_VARIABLE}=1)")


def set_backend(name: str | None) -> None:
    """Switch to the array library ``--backend`` names (None: the default, or MINITRANSFORMER_BACKEND's)."""
    from .. import backend  # noqa: PLC0415

    if name:
        with about(f"--backend {name}"):
            try:
                backend.set_backend(name)
            except RuntimeError as exc:
                raise CliError(str(exc), f"--backend {name}") from None
    elif backend.backend_name() == "cupy" and not backend.cupy_available():
        raise CliError("the cupy backend was asked for, but CuPy cannot use a CUDA device here",
                       "MINITRANSFORMER_BACKEND")


def load_checkpoint(path: str, option: str):
    """``checkpoint.load_checkpoint``, a bad file reported as coming from ``option``."""
    from ..checkpoint import load_checkpoint as load  # noqa: PLC0415

    with about(f"{option} {path}"):
        return load(path)


__all__ = ["BAD_INPUT", "CliError", "DEBUG_VARIABLE", "OPTION_CLASSES", "OPTION_NAMES", "OUTPUT_CLOSED", "Parser",
           "RANKS", "Terminated", "about", "add_common", "add_parents_option", "check_output_dir", "check_output_file",
           "debug_requested", "load_checkpoint", "memory_for", "message", "non_negative_int", "positive_float",
           "positive_int", "quiet_numpy", "set_backend", "train_option"]
