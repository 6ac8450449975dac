"""The command line: ``python -m minitransformer {train,translate,evaluate,bpe,average,tasks,grade} --help``.

One module per command (``train.py``, ``translate.py``, ``evaluate.py``, ``bpe.py``,
``average.py``, ``tasks.py``, ``grade.py``): each registers its options (``register``) and runs
from a typed request, a small dataclass built from the parsed options (``TrainRequest`` ...).
``common.py`` holds what they share (the error contract, the option types), ``app.py`` the
program (``build_parser``, ``main``).

Errors reach the user as one line, ``error: <what> (<which option, file or variable>)``,
with exit code 2 for bad input (options, files, data, environment variables) and 1
for failures at run time (a diverged run, a full disk). No traceback is printed
unless ``--debug`` is given or MINITRANSFORMER_DEBUG=1 is set. An interrupted
``train`` saves a checkpoint, prints how to resume, and exits with 128 + the
signal: 130 (Ctrl-C, SIGINT), 143 (SIGTERM), 129 (SIGHUP: the terminal was
closed). A standard output whose reader went away (``train … | head -3``) is
treated like SIGTERM: the step finishes, a checkpoint is saved, the messages go
to standard error, and the exit code is 141 (128 + SIGPIPE, what a shell shows
for a program a closed pipe stopped); ``translate`` and ``evaluate`` exit with
141 too, quietly. Characters the output's encoding cannot show are written as
backslash escapes (``\\u03b5``), with ``PYTHONIOENCODING=latin-1`` say.
"""

from __future__ import annotations

from .app import build_parser, main

__all__ = ["build_parser", "main"]
