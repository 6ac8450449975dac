"""The program: the parser of every command, and ``main``, which runs one and turns whatever it
raises into the one-line error and the exit code of ``cli/__init__.py``'s contract."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import traceback

from .. import __version__
from .common import (
    BAD_INPUT,
    DEBUG_VARIABLE,
    OUTPUT_CLOSED,
    RANKS,
    CliError,
    Parser,
    Terminated,
    debug_requested,
    message,
)


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser: each module under cli/ registers its own."""
    # Imported here, after _run has imported the backend (a bad environment variable is one line).
    from .average import register as average  # noqa: PLC0415
    from .bpe import register as bpe  # noqa: PLC0415
    from .evaluate import register as evaluate  # noqa: PLC0415
    from .grade import register as grade  # noqa: PLC0415
    from .tasks import register as tasks  # noqa: PLC0415
    from .train import register as train  # noqa: PLC0415
    from .translate import register as translate  # noqa: PLC0415

    parser = Parser(prog="python -m minitransformer",
                    description="Train, run and evaluate the Transformer of 'Attention Is All You Need'.",
                    epilog=f"Errors print one line and exit with 2 (bad input) or 1 (run-time failure); "
                           f"--debug or {DEBUG_VARIABLE}=1 adds the traceback.")
    parser.add_argument("--version", action="version", version=f"minitransformer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for register in (train, translate, evaluate, bpe, average, tasks, grade):
        register(sub)
    return parser


def _run(argv: list[str]) -> int:
    from ..errors import EnvironmentVariableError, NonFiniteError  # noqa: PLC0415

    try:
        from .. import backend  # noqa: F401, PLC0415  (reads the environment variables)
    except EnvironmentVariableError as exc:
        raise CliError(str(exc), exc.variable, 2) from exc
    from ..distributed import RanksOutOfSync, launched  # noqa: PLC0415

    args = build_parser().parse_args(argv)
    args.argv = argv
    _, size, variable = launched()
    if size > 1 and args.command != "train":
        raise CliError(f"only train runs on several ranks; run {args.command} as one process, without mpiexec",
                       f"{variable}={size}")
    try:
        return args.handler(args)
    except (NonFiniteError, RanksOutOfSync) as exc:     # every rank meets these alike
        raise CliError(str(exc), None, 1) from exc


def _launched_rank() -> int:
    """This process's rank as its launcher says (0 without mpiexec), read without starting MPI."""
    try:
        from ..distributed import launched  # noqa: PLC0415

        return launched()[0]
    except Exception:  # noqa: BLE001 - an unreadable environment is reported as an error of its own
        return 0


# Signals that end a command outside the training loop (which saves first): exit 128 + signal.
_TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def main(argv=None) -> int:
    """Run the command line; returns the exit code (0 success, 2 bad input, 1 failure, 128 + signal for
    a signal: 130 SIGINT, 143 SIGTERM, 129 SIGHUP, 141 a closed standard output)."""
    from .. import streams  # noqa: PLC0415  (standard library only)

    with streams.guard_standard_streams():
        code = _main(list(sys.argv[1:] if argv is None else argv))
        if code == 0 and streams.output_lost() == "stdout":
            code = OUTPUT_CLOSED            # the output was cut short: say so in the exit code, quietly
    _quiet_sentinel()                       # the run ends in its own words: a killed rank's line is not needed
    if code and RANKS.several:
        # MPI_Finalize, which a normal exit calls, would wait for ranks that may be stuck in a
        # collective: leave at once, and mpiexec stops the others.
        for stream in (sys.stdout, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code


def _quiet_sentinel() -> None:
    """Under mpiexec, rank 0's sentinel (distributed.start_sentinel) prints nothing when this process ends."""
    distributed = sys.modules.get(f"{__package__.rpartition('.')[0]}.distributed")
    if distributed is not None:
        distributed.sentinel_quiet()


class _Failure:
    """Prints ``error: line`` for ``_main`` (after the traceback if --debug asked for it)."""

    debug = False

    def __call__(self, line: str, code: int, exc: BaseException | None = None, alike: bool = True) -> int:
        """Print the line; return ``code``. Under mpiexec: an error every rank meets ``alike`` (bad
        input, a diverged run) is printed by rank 0 alone; any other by the rank that met it, which
        names itself."""
        rank = _launched_rank()
        if rank and alike:
            return code
        stream = sys.__stderr__ if rank else sys.stderr      # other ranks' sys.stderr is /dev/null
        if self.debug and exc is not None:
            traceback.print_exception(exc, file=stream)
        print(f"error: {f'rank {rank}: ' if rank else ''}{line}", file=stream, flush=True)
        _quiet_sentinel()       # at once: mpiexec may kill this rank any moment now (another rank has ended)
        return code


def _main(argv: list[str]) -> int:
    previous: dict = {}
    if threading.current_thread() is threading.main_thread():
        def on_term(signum, frame):
            raise Terminated(signum)
        for sig in _TERMINATING:
            previous[sig] = signal.signal(sig, on_term)
    fail = _Failure()
    try:
        fail.debug = debug_requested(argv)
        return _run(argv)
    except CliError as exc:
        return fail(str(exc), exc.code, exc.__cause__)
    except KeyboardInterrupt as exc:
        return fail("interrupted (Ctrl-C)", 130, exc)
    except Terminated as exc:
        return fail(f"terminated ({signal.Signals(exc.signum).name})", 128 + int(exc.signum))
    except BAD_INPUT as exc:
        return fail(message(exc), 2, exc)
    except MemoryError as exc:
        # The commands name what ran out of memory (common.memory_for); this is anything else.
        return fail(f"out of memory ({exc})" if str(exc) else "out of memory", 1, exc, alike=False)
    except OSError as exc:
        return fail(message(exc), 1, exc, alike=False)
    except Exception as exc:  # noqa: BLE001 - the one place every other error is turned into a line
        hint = "" if fail.debug else f" (run with --debug or {DEBUG_VARIABLE}=1 for the traceback)"
        return fail(f"internal error: {type(exc).__name__}: {exc}{hint}", 1, exc, alike=False)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
