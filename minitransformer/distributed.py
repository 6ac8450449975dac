"""Data-parallel training on several processes through MPI (§5.2: the paper trained on 8 GPUs).

Started as ``mpiexec -n N python -m minitransformer train ...``, every process (a *rank*)
runs the same program on its own share of each batch:

    every rank       builds the same initial weights (same seed) and the same batch plan
    rank r           takes its shard of the global batch, balanced by tokens (shard_batch), and with
                     --accumulate K cuts it into K micro-batches the same way (split_batch)
    forward/backward on the shard only; each shard's dlogits is scaled by n_r / n
                     (n_r: its non-pad target tokens, n: those of the whole global batch),
                     so that the SUM of the ranks' gradients is the gradient of the mean
                     over all n tokens, the single process's gradient exactly
    Allreduce        sums the gradients (one flat host buffer, GradientSum); every rank
                     then holds the same gradient
    Adam             on every rank, identically: the same gradient and the same state give
                     the same update, so the parameters stay bit-identical (checked by a
                     hash, check_in_sync) without sending them anywhere

Why n_r / n and not a plain average: each rank's loss is a mean over its own n_r tokens,
and shards hold different numbers of tokens (and of padding). Averaging the ranks' mean
gradients weights every rank equally instead of every token, which is wrong whenever the
n_r differ (lesson 14 shows it with numbers). ``n`` needs no communication: every rank
holds the whole plan of the global batch, so it counts the tokens of every shard itself.

The single process is the special case N = 1: :class:`SingleProcess` has the same methods
and does nothing, so the training loop has no ``if`` for it, and a single process never
imports mpi4py (:func:`world` imports it only when a launcher started more than one rank).

Stopping. mpiexec forwards Ctrl-C and SIGTERM to every rank, each at its own moment; before
every step the ranks agree (:func:`agree_to_stop`), so that all stop after the same step and
rank 0 saves one checkpoint.

A rank that dies. MPICH's ``mpiexec`` (hydra) kills every other rank with SIGKILL as soon
as one rank dies (measured: within 0.1 s to a second, and mpiexec exits with the dead rank's
code), so no rank is left waiting, and none is left to say anything either: hydra prints
its "BAD TERMINATION" banner and that is all (with ``-disable-auto-cleanup`` it sends SIGUSR1
first and still kills the ranks that are inside an MPI call). So rank 0 starts, before MPI,
a *sentinel* (:func:`start_sentinel`): a small Python process in a session of its own, which
hydra's cleanup does not reach, holding rank 0's standard error. Rank 0 keeps telling it the
line to print if the run ends without a word (the last checkpoint and the command that
resumes from it, :meth:`MPICommunicator.saved`); when rank 0 ends, the sentinel's input
closes, and it prints that line unless rank 0 said goodbye first (``sentinel_quiet``: every
ending that prints its own message does). hydra waits for the sentinel to close the output
it holds, so the line comes after the banner and before mpiexec returns.

Ranks started with different options (``mpiexec -n 1 … : -n 1 … --set d_ff=32``) would meet
in an Allreduce of different sizes and crash inside MPI; before the first collective of
training they compare what makes a run one run (:func:`check_same_run`: model
configuration, training settings, vocabulary, data) and name the first difference.

A rank that hangs (stopped, stuck)
is not noticed by hydra: the others would wait in their Allreduce for ever. So every
collective here runs under a watchdog: a rank that waits longer than
MINITRANSFORMER_MPI_TIMEOUT seconds (default 30, at least 5: a shorter wait would stop healthy
runs at their first slow step; 0 turns it off; ten times that for the first collective,
since the ranks load their data at different speeds) prints one line naming what it waited
for and the last checkpoint, and exits with code 1; mpiexec then stops the rest. The
waits that depend on rank 0's file writing alone (a checkpoint) have no timeout: a single
process would wait for its disk too. Checkpoints are written atomically (files.py), so a
kill at any moment leaves the last complete one.

On CuPy the gradients are copied to host memory, summed there and copied back: that
works with any MPI library. A device-direct path (CUDA-aware MPI, NCCL) is not built.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass

import numpy

from . import backend
from .data.batching import Batch, make_batch
from .errors import EnvironmentVariableError

# The variables a launcher sets in every process it starts: MPICH's and Intel MPI's hydra
# (PMI_*), Open MPI (OMPI_COMM_WORLD_*), MVAPICH (MV2_COMM_WORLD_*).
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
INSTALL_HINT = "pip install -e '.[mpi]' (mpi4py and the MPICH wheel)"
TIMEOUT_VARIABLE = "MINITRANSFORMER_MPI_TIMEOUT"
DEFAULT_TIMEOUT = 30.0
MIN_TIMEOUT = 5.0           # a shorter wait stops healthy runs at their first slow step (or the first GC pause)


class MPIUnavailable(RuntimeError):
    """A launcher started several ranks, but this Python cannot join them (no mpi4py, another MPI)."""

    def __init__(self, message: str, variable: str):
        super().__init__(message)
        self.variable = variable


class RanksOutOfSync(RuntimeError):
    """The ranks' parameters (or their share of a batch) differ: the run cannot go on."""


# -- which rank am I: from the launcher's environment, without importing MPI ------------------


def launched() -> tuple[int, int, str | None]:
    """(rank, size, the variable that said so) from the launcher's environment; (0, 1, None) if none.

    Read without importing mpi4py, so that error messages and quiet ranks can be decided before
    (or without) MPI starts. An unreadable value is an EnvironmentVariableError.
    """
    for size_var, rank_var in zip(SIZE_VARIABLES, RANK_VARIABLES):
        raw = os.environ.get(size_var)
        if raw is None:
            continue
        try:
            size, rank = int(raw), int(os.environ.get(rank_var, "0"))
        except ValueError:
            raise EnvironmentVariableError(size_var, raw, "a whole number of ranks (set by mpiexec)") from None
        if size < 1 or not 0 <= rank < size:
            raise EnvironmentVariableError(size_var, raw, f"a rank count ≥ 1 with {rank_var} in 0..size-1")
        return rank, size, size_var
    return 0, 1, None


def _env_timeout() -> float:
    """MINITRANSFORMER_MPI_TIMEOUT: seconds a rank waits for the others (0: for ever; at least MIN_TIMEOUT)."""
    raw = os.environ.get(TIMEOUT_VARIABLE, "")
    try:
        value = float(raw.strip() or DEFAULT_TIMEOUT)
    except ValueError:
        value = -1.0
    if not (value == 0 or MIN_TIMEOUT <= value < float("inf")):
        raise EnvironmentVariableError(TIMEOUT_VARIABLE, raw, f"a number of seconds ≥ {MIN_TIMEOUT:g} (0: no timeout; "
                                       "a shorter wait would stop healthy runs at their first slow step)")
    return value


# -- the sentinel: one line after a SIGKILL, which leaves no rank to say it ---------------------------

# The sentinel's program (standard library only, so it starts in a few milliseconds): each line it reads
# replaces the one to print; an empty line means "say nothing"; at the end of its input it prints the last.
_SENTINEL_PROGRAM = """
import signal, sys
for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE"):
    if hasattr(signal, name):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
last = b""
for line in sys.stdin.buffer:
    last = line
if last.strip():
    try:
        sys.stderr.buffer.write(last if last.endswith(b"\\n") else last + b"\\n")
        sys.stderr.flush()
    except OSError:
        pass
"""

_sentinel: subprocess.Popen | None = None


def start_sentinel(line: str) -> None:
    """Start the sentinel (module docstring), which prints ``line`` if this process ends before
    ``sentinel_quiet``; ``sentinel_say`` changes the line. Call it before MPI starts (a fork after
    MPI_Init is unsafe in some MPI libraries). POSIX only: elsewhere it does nothing."""
    global _sentinel
    if _sentinel is not None or not hasattr(os, "setsid"):
        return
    try:
        _sentinel = subprocess.Popen([sys.executable, "-I", "-c", _SENTINEL_PROGRAM], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError:
        return                          # no sentinel: a SIGKILL then leaves only mpiexec's banner, as before
    sentinel_say(line)


def sentinel_say(line: str) -> None:
    """The one line the sentinel prints if this process ends without ``sentinel_quiet`` (no-op without one)."""
    if _sentinel is None or _sentinel.stdin is None:
        return
    try:
        _sentinel.stdin.write(" ".join(line.split()).encode("utf-8", "backslashreplace") + b"\n")
        _sentinel.stdin.flush()
    except (OSError, ValueError):
        pass


def sentinel_quiet() -> None:
    """This process ends with its own words (or with none needed): the sentinel says nothing."""
    global _sentinel
    if _sentinel is None or _sentinel.stdin is None:
        return
    try:
        _sentinel.stdin.write(b"\n")
        _sentinel.stdin.close()
    except (OSError, ValueError):
        pass
    _sentinel = None


# -- the communicators -------------------------------------------------------------------------


class SingleProcess:
    """One process, no MPI: every collective is the identity. The loop's code is the same for N = 1."""

    rank, size, is_root = 0, 1, True
    library = "none"
    check_every: int | None = None          # see MPICommunicator
    note = ""
    resume_hint = None                      # see MPICommunicator

    def saved(self, path: str, step: int) -> None:
        """A checkpoint of ``step`` is complete at ``path`` (see MPICommunicator.saved)."""
        self.note = f"the last checkpoint, {path}, is from step {step}"

    def allreduce_sum(self, buf: numpy.ndarray, what: str) -> numpy.ndarray:
        return buf

    def max_int(self, value: int, what: str) -> int:
        return value

    def allgather(self, obj, what: str) -> list:
        return [obj]

    def barrier(self, what: str, timeout: bool = True) -> None:
        pass


class _Watchdog:
    """A thread that ends this rank (one line on stderr, exit code 1) when a collective waits too long.

    mpi4py releases the GIL inside a blocking MPI call, so this thread runs while the main
    thread is stuck in one. ``os._exit``, not ``sys.exit``: the main thread cannot be woken,
    and MPI_Finalize at a normal exit would wait for the missing rank as well.
    """

    FIRST_WAIT = 10      # the first collective may wait this many timeouts: ranks start at different speeds

    def __init__(self, timeout: float, describe):
        self.timeout, self.describe = timeout, describe
        self._waiting: tuple[str, float, float] | None = None      # (what, deadline, the wait allowed)
        self._thread: threading.Thread | None = None
        self._first = True

    @contextmanager
    def guard(self, what: str):
        if self.timeout <= 0:
            yield
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="mpi-watchdog", daemon=True)
            self._thread.start()
        allowed = self.timeout * (self.FIRST_WAIT if self._first else 1)
        self._first = False
        self._waiting = (what, time.monotonic() + allowed, allowed)
        try:
            yield
        finally:
            self._waiting = None

    def _watch(self) -> None:
        tick = min(1.0, self.timeout / 10)
        while True:
            time.sleep(tick)
            waiting = self._waiting
            if waiting is not None and time.monotonic() > waiting[1]:
                os.write(2, f"error: {self.describe(waiting[0], waiting[2])}\n".encode())
                sentinel_quiet()                    # this line says it all
                os._exit(1)


class MPICommunicator:
    """The ranks of ``mpiexec -n N``: MPI's COMM_WORLD, every collective under the watchdog.

    check_every: compare a hash of the parameters across ranks every this many steps
    (None: at every checkpoint only). note: a sentence the trainer keeps up to date (the
    last checkpoint, ``saved``), added to a timeout's message. resume_hint: checkpoint ->
    the command that resumes from it (the command line sets it), for the sentinel's line.
    """

    is_root: bool

    def __init__(self, comm, mpi, timeout: float):
        self._comm, self._mpi = comm, mpi
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.is_root = self.rank == 0
        self.library = " ".join(mpi.Get_library_version().splitlines()[0].split())       # "MPICH Version: 5.0.2"
        self.timeout = timeout
        self.check_every: int | None = None
        self.note = ""
        self.resume_hint = None
        self._watchdog = _Watchdog(timeout, self._timeout_message)

    def saved(self, path: str, step: int) -> None:
        """A checkpoint of ``step`` is complete at ``path``: the note of a timeout, and the sentinel's line
        (rank 0), say so from now on."""
        self.note = f"the last checkpoint, {path}, is from step {step}"
        sentinel_say(lost_rank_message(self.note, self.resume_hint(path) if self.resume_hint else None))

    def _timeout_message(self, what: str, waited: float) -> str:
        note = f"; {self.note}" if self.note else ""
        return (f"rank {self.rank} of {self.size} waited {waited:g} s for the other ranks in {what}: "
                f"a rank has stopped or hung, so this one stops too{note} ({TIMEOUT_VARIABLE})")

    def allreduce_sum(self, buf: numpy.ndarray, what: str) -> numpy.ndarray:
        """Sum ``buf`` (a contiguous host array) over the ranks, in place; returns it."""
        with self._collective(what):
            self._comm.Allreduce(self._mpi.IN_PLACE, buf, op=self._mpi.SUM)
        return buf

    def max_int(self, value: int, what: str) -> int:
        with self._collective(what):
            return int(self._comm.allreduce(int(value), op=self._mpi.MAX))

    def allgather(self, obj, what: str) -> list:
        with self._collective(what):
            return self._comm.allgather(obj)

    def barrier(self, what: str, timeout: bool = True) -> None:
        """Wait until every rank is here; timeout=False for a wait on rank 0's file writing."""
        if timeout:
            with self._collective(what):
                self._comm.Barrier()
        else:
            with self._collective(what, watched=False):
                self._comm.Barrier()

    @contextmanager
    def _collective(self, what: str, watched: bool = True):
        """A collective under the watchdog; a rank that finds a peer gone leaves without a word.

        When a rank is killed, MPI fails the collective on the ranks still alive a moment before
        mpiexec kills them too. A line from them ("internal error: Other MPI error") would be a
        second line beside the one that matters, so they leave at once and say nothing: rank 0's
        sentinel prints the line that names the last checkpoint and the command that resumes.
        """
        try:
            with (self._watchdog.guard(what) if watched else nullcontext()):
                yield
        except self._mpi.Exception:
            for stream in (sys.stdout, sys.__stdout__):
                try:
                    stream.flush()
                except (OSError, ValueError, AttributeError):
                    pass
            os._exit(1)


def lost_rank_message(state: str, resume: str | None) -> str:
    """The sentinel's line: the run ended without a word, ``state`` (what is saved), and how to go on."""
    return (f"error: the run stopped without a word from its ranks: one was killed (SIGKILL, or the out-of-memory "
            f"killer) and mpiexec killed the others; {state}" + (f"; resume with: {resume}" if resume else ""))


def run_identity(trainer) -> dict[str, dict]:
    """What makes a trainer's run one run, which every rank must share (``check_same_run``)."""
    tokens = hashlib.sha256("\n".join(trainer.vocab.tokens).encode("utf-8", "surrogatepass")).hexdigest()
    return {"model configurations": asdict(trainer.model.cfg), "training settings": asdict(trainer.settings),
            "vocabularies": {"size": len(trainer.vocab), "SHA-256": tokens}, "data": trainer.data_fingerprint or {},
            "starting points": {"step": trainer.step, "epoch": trainer.epoch, "batch_in_epoch": trainer.batch_in_epoch}}


def check_same_run(comm, identity: dict[str, dict]) -> None:
    """Before the first collective of training: every rank holds the same ``identity`` ({what: {field: value}},
    e.g. "model configurations": the TransformerConfig's fields), or RanksOutOfSync names the first field
    that differs and its value on each rank. (Ranks of different model sizes would otherwise meet in an
    Allreduce of different lengths, and MPI would end them with a page of its own errors.)"""
    if comm.size == 1:
        return
    mine = json.loads(json.dumps(identity, sort_keys=True, default=str))      # plain JSON values, comparable
    every = comm.allgather(mine, "the check that every rank runs the same configuration")
    for what in identity:                                    # in the caller's order: the model first
        for name in sorted(set().union(*(theirs.get(what, {}) for theirs in every))):
            values = [theirs.get(what, {}).get(name) for theirs in every]
            if any(v != values[0] for v in values):
                each = ", ".join(f"{v!r} on rank {r}" if isinstance(v, str) else f"{v} on rank {r}"
                                 for r, v in enumerate(values))
                raise RanksOutOfSync(f"the ranks were started with different {what} ({name}: {each}): every "
                                     "rank of mpiexec must be given the same options")


_WORLD = None


def world():
    """This process's communicator: SingleProcess, unless a launcher started more than one rank.

    Only then is mpi4py imported (which starts MPI). MPIUnavailable if it is missing, or if
    it belongs to another MPI library than the launcher (every process would then think it
    is rank 0 of 1, and all of them would write the same files).
    """
    global _WORLD
    if _WORLD is not None:
        return _WORLD
    rank, size, variable = launched()
    if size == 1:
        _WORLD = SingleProcess()
        return _WORLD
    timeout = _env_timeout()
    try:
        from mpi4py import MPI  # noqa: PLC0415  (only with several ranks: it starts MPI)
    except ImportError:
        raise MPIUnavailable(f"this process was started as rank {rank} of {size} ({variable}={size}), but mpi4py "
                             f"is not installed; install the MPI extra: {INSTALL_HINT}", variable) from None
    comm = MPI.COMM_WORLD
    if comm.Get_size() != size:
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        raise MPIUnavailable(f"the launcher started {size} ranks ({variable}={size}), but mpi4py's MPI sees "
                             f"{comm.Get_size()}: mpiexec and mpi4py come from different MPI libraries; use the "
                             f"mpiexec installed with them ({mpiexec})", variable)
    _WORLD = MPICommunicator(comm, MPI, timeout)
    return _WORLD


def describe(comm, settings) -> str | None:
    """The banner line of a run with gradient accumulation or on several ranks; None for a plain run."""
    k = settings.accumulate
    per_step = (f"{settings.batch_size} pairs" if settings.max_tokens is None else
                f"{settings.max_tokens} padded tokens" if settings.batch_size is None else
                f"{settings.batch_size} pairs or {settings.max_tokens} padded tokens")
    parts = []
    if comm.size > 1:
        parts.append(f"data parallel: {comm.size} ranks ({comm.library}): each global batch of up to {per_step} is "
                     f"split between them by tokens (about 1/{comm.size} each); gradients and token counts summed "
                     "with Allreduce through host memory, Adam on every rank, rank 0 writes the files")
    if k > 1:
        where = "each rank's shard" if comm.size > 1 else f"each global batch of up to {per_step}"
        parts.append(f"gradient accumulation: {where} split into {k} micro-batches by tokens, run one after "
                     "another, one update")
    return "; ".join(parts) or None


# -- splitting a global batch -------------------------------------------------------------------


def split_batch(indices: Sequence[int], costs: Sequence[int], parts: int) -> list[list[int]]:
    """One global batch cut into ``parts`` contiguous runs of ``indices``, balanced by cost: the shards of
    ``mpiexec -n N`` (in space) and the micro-batches of ``--accumulate K`` (in time) are both this cut.

    indices: the batch's sentence indices (the batcher sorts them by length, so a contiguous
    run pads little); costs[k]: the tokens of indices[k] (source + target + 1). The cut
    before part r is where the running total of costs comes closest to r/parts of the whole,
    keeping at least one sentence per part while there are enough. Every sentence goes to
    exactly one part; a batch of fewer sentences than parts leaves the last parts empty.
    """
    B = len(indices)
    if len(costs) != B:
        raise ValueError(f"split_batch: {B} indices but {len(costs)} costs")
    if B <= parts:                                                   # one sentence each, while they last
        cuts = [min(r, B) for r in range(parts + 1)]
    else:
        running = numpy.concatenate([[0], numpy.cumsum(costs)])     # running[k]: cost of indices[:k]
        cuts = [0]
        for r in range(1, parts):
            # At least one sentence for part r - 1 and for each part after r.
            k = numpy.arange(cuts[-1] + 1, B - (parts - r) + 1)
            cuts.append(int(k[numpy.argmin(numpy.abs(running[k] - running[-1] * r / parts))]))
        cuts.append(B)
    return [list(indices[cuts[r]:cuts[r + 1]]) for r in range(parts)]


def shard_batch(indices: Sequence[int], costs: Sequence[int], rank: int, size: int) -> list[int]:
    """Rank ``rank``'s part of one global batch (``split_batch`` into ``size`` parts)."""
    if not 0 <= rank < size:
        raise ValueError(f"shard_batch: rank {rank} is not in 0..{size - 1}")
    if len(costs) != len(indices):
        raise ValueError(f"shard_batch: {len(indices)} indices but {len(costs)} costs")
    return split_batch(indices, costs, size)[rank]


@dataclass
class StepBatches:
    """The data of one optimizer step, as this rank sees it.

    shards:   this rank's part of the step's global batch, cut into ``accumulate`` micro-batches:
              a Batch each, or None where a part is empty
    n_tokens: non-pad target tokens of the whole global batch, on all ranks: the loss's
              denominator (every rank counts it from the shared plan)
    tokens:   source + target tokens of the whole global batch, all ranks (for tokens/s)
    """

    shards: list
    n_tokens: int
    tokens: int

    @classmethod
    def whole(cls, batch: Batch) -> StepBatches:
        """One batch, all of it on this process."""
        src_tokens = int((backend.to_numpy(batch.src_mask)).sum())
        return cls([batch], batch.n_tokens, batch.n_tokens + src_tokens)


def step_batches(plan: Sequence[int], pairs, comm, pad_id: int, bos_id: int, eos_id: int, xp=None,
                 accumulate: int = 1) -> StepBatches:
    """This rank's part of the global batch ``plan`` (indices into ``pairs``), cut into ``accumulate``
    micro-batches: rank r of N takes its shard (``split_batch`` into N), and cuts it into K the same way.
    ``--batch-size`` and ``--max-tokens`` are therefore the global batch under any N and K."""
    cost = {k: len(pairs[k][0]) + len(pairs[k][1]) + 1 for k in plan}       # + 1: <eos> on the target
    n_tokens = sum(len(pairs[k][1]) + 1 for k in plan)
    mine = shard_batch(plan, [cost[k] for k in plan], comm.rank, comm.size)
    shards = [make_batch([pairs[k][0] for k in part], [pairs[k][1] for k in part], pad_id=pad_id, bos_id=bos_id,
                         eos_id=eos_id, xp=xp) if part else None
              for part in split_batch(mine, [cost[k] for k in mine], accumulate)]
    return StepBatches(shards, n_tokens, sum(cost.values()))


# -- summing gradients ----------------------------------------------------------------------------


class GradientSum:
    """Sums every parameter's ``grad`` over the ranks in place: one Allreduce of one flat host buffer.

    The step's loss and this rank's token count ride along in the same buffer, so a step
    needs one collective for both. On CuPy each gradient is copied to host memory and back
    (staging through the host works with any MPI library).
    """

    def __init__(self, params: Sequence):
        self.params = list(params)
        dtypes = {p.grad.dtype for p in self.params}
        if len(dtypes) != 1:
            raise TypeError(f"GradientSum: the gradients have several dtypes {sorted(map(str, dtypes))}")
        self.dtype = dtypes.pop()
        self.offsets = numpy.concatenate([[0], numpy.cumsum([p.grad.size for p in self.params])]).astype(int).tolist()
        self._buffer: numpy.ndarray | None = None          # made at the first sum over several ranks

    @property
    def nbytes(self) -> int:
        """The bytes one Allreduce sums: every gradient, the loss and the token count."""
        return (self.offsets[-1] + 2) * self.dtype.itemsize

    def __call__(self, comm, loss: float, work: StepBatches, step: int) -> float:
        """Sum the gradients and the loss (this rank's share of the step's mean) over the ranks;
        returns the step's loss (one process: ``loss`` as it is). RanksOutOfSync if the shards do
        not add up to the global batch."""
        if comm.size == 1:
            return loss
        if self._buffer is None:
            self._buffer = numpy.empty(self.offsets[-1] + 2, dtype=self.dtype)   # + the loss and the count
        buf, offsets = self._buffer, self.offsets
        xp = backend.get_array_module(self.params[0].grad)
        grads = [p.grad.reshape(-1) for p in self.params]
        if xp is numpy:
            numpy.concatenate(grads, out=buf[:-2])                    # pack
        else:
            buf[:-2] = backend.to_numpy(xp.concatenate(grads))        # pack on the device, one copy to the host
        buf[-2:] = loss, sum(b.n_tokens for b in work.shards if b is not None)
        comm.allreduce_sum(buf, f"the gradient allreduce of step {step}")
        summed = buf[:-2] if xp is numpy else xp.asarray(buf[:-2])   # one copy back to the device
        for i, p in enumerate(self.params):                           # unpack
            p.grad[...] = summed[offsets[i]:offsets[i + 1]].reshape(p.grad.shape)
        loss, n = float(buf[-2]), round(float(buf[-1]))
        if n != work.n_tokens:
            raise RanksOutOfSync(f"step {step}: the ranks' shards hold {n} target tokens, but the global batch has "
                                 f"{work.n_tokens}: the ranks do not share one batch plan (the same data and seed)")
        return loss


# -- the same parameters everywhere ---------------------------------------------------------------


def parameter_digest(params: Sequence) -> str:
    """SHA-256 of every parameter's bytes, in order (host copies): equal digests, equal parameters."""
    h = hashlib.sha256()
    for p in params:
        h.update(numpy.ascontiguousarray(backend.to_numpy(p.data)).tobytes())
    return h.hexdigest()


def check_in_sync(comm, params: Sequence, step: int) -> str:
    """Raise RanksOutOfSync unless every rank's parameters are bit-identical; returns the digest."""
    digest = parameter_digest(params)
    digests = comm.allgather(digest, f"the parameter check after step {step}")
    if len(set(digests)) > 1:
        which = ", ".join(f"rank {r}: {d[:12]}" for r, d in enumerate(digests))
        raise RanksOutOfSync(f"after step {step} the ranks' parameters differ (SHA-256 {which}); the ranks must "
                             "run the same code, data and thread settings (OPENBLAS_NUM_THREADS)")
    return digest


def agree_to_stop(comm, stop, step: int) -> bool:
    """Has a stop been asked for (``stop``: a ``stops.StopSignals``)? On several ranks: on any of them, whose
    signal every rank takes, so that all stop after the same step. A signal that lands during the check (handled
    after this rank sent 0) is kept for the next one: the agreed 0 must not erase it, or the run trains on."""
    asked = stop.requested()
    if comm.size > 1:
        agreed = comm.max_int(stop.signum or 0, f"the stop check after step {step}")
        asked, stop.signum = agreed != 0, agreed or stop.signum
    return asked


__all__ = ["DEFAULT_TIMEOUT", "GradientSum", "INSTALL_HINT", "MIN_TIMEOUT", "MPICommunicator", "MPIUnavailable",
           "RanksOutOfSync", "SingleProcess", "StepBatches", "TIMEOUT_VARIABLE", "agree_to_stop", "check_in_sync",
           "check_same_run", "describe", "launched", "lost_rank_message", "parameter_digest", "run_identity",
           "sentinel_quiet", "sentinel_say", "shard_batch", "split_batch", "start_sentinel", "step_batches", "world"]
