"""Lesson 14, data parallelism (§5.2): the ring allreduce, the checkers of its exercises, and the
script the lesson runs under ``mpiexec``.

ring_allreduce          the sum over the ranks of a NumPy vector, on every rank: reduce-scatter,
                        then all-gather, around a ring, with point-to-point Sendrecv calls
ring_trace              which ranks' contributions every chunk holds after each step (the picture)
SimulatedRanks          N ranks as threads of one process, with the Sendrecv/Send/Recv of mpi4py's
                        buffer interface; counts the bytes each rank sends (the checkers use it,
                        so that a learner's ring runs without mpiexec)
check_ring_allreduce    Exercise 14.1: a learner's ring allreduce, on 2, 3 and 4 simulated ranks
check_token_weighted    Exercise 14.2: combine the ranks' gradients into the whole batch's

``python -m lessonkit.exercises.lesson_14 SIZES...`` under ``mpiexec -n N`` times
ring_allreduce against MPI's own Allreduce for vectors of each size (float32 elements) and prints
one JSON line (rank 0): the lesson runs it on 2 and 4 ranks. mpi4py is imported there only.

The checkers follow the contract of ``_common``: an answer of None prints ``NOT_ATTEMPTED`` and
returns a false Verdict; a wrong answer raises WrongAnswer (an AssertionError) with a ``hint:`` line
for the usual slips, and so does a simulated rank left waiting (a deadlock); a right one prints
``correct`` and returns a true Verdict.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import numpy

from minitransformer.data.batching import make_batch
from minitransformer.gradcheck import rel_error
from minitransformer.layers.loss import cross_entropy_backward, cross_entropy_forward

from ..i18n import tr
from ._common import (
    NOT_ATTEMPTED,
    TOL,
    WrongAnswer,
    as_array,
    case_rng,
    describe,
    drive,
    edge,
    exercise,
    not_attempted,
    report_correct,
    visible,
)

__all__ = ["NOT_ATTEMPTED", "RING_RANKS", "SimulatedRanks", "check_ring_allreduce", "check_token_weighted",
           "ring_allreduce", "ring_bytes", "ring_trace", "run_ring", "shards_for_exercise"]

RING_RANKS = (2, 3, 4)                   # the rank counts Exercise 14.1 is checked on
RING_SIZES = (12, 10, 1)                 # vector lengths: divisible by N, not divisible, shorter than N


# -- the ring ------------------------------------------------------------------------------------

def ring_allreduce(comm, x: numpy.ndarray) -> numpy.ndarray:
    """The sum of ``x`` over all ranks, returned on every rank (x itself is not changed).

    The vector is cut into N chunks. Reduce-scatter: in each of N - 1 steps every rank sends
    one chunk to its right neighbour and adds the chunk arriving from its left one; afterwards
    rank r holds the whole sum of chunk (r + 1) mod N. All-gather: N - 1 more steps pass the
    finished chunks around the ring, each rank overwriting the chunk it receives. Every rank
    sends 2(N - 1) chunks, 2(N - 1)/N of the vector, whatever N is: the bandwidth term does not
    grow with the number of ranks.
    """
    rank, N = comm.Get_rank(), comm.Get_size()
    flat = numpy.array(x, copy=True).reshape(-1)
    chunks = numpy.array_split(flat, N)                  # views into flat: writes land in it
    right, left = (rank + 1) % N, (rank - 1) % N
    for s in range(N - 1):                               # reduce-scatter
        send, recv = (rank - s) % N, (rank - s - 1) % N
        incoming = numpy.empty_like(chunks[recv])
        comm.Sendrecv(chunks[send], dest=right, recvbuf=incoming, source=left)
        chunks[recv] += incoming
    for s in range(N - 1):                               # all-gather
        send, recv = (rank - s + 1) % N, (rank - s) % N
        comm.Sendrecv(chunks[send], dest=right, recvbuf=chunks[recv], source=left)
    return flat.reshape(numpy.shape(x))


def ring_trace(N: int) -> list[tuple[str, list[list[frozenset]]]]:
    """Which ranks' vectors each chunk holds on each rank, after each step of a ring allreduce of N ranks:
    [(label, state)], state[r][c] = the set of ranks whose chunk c has been added into rank r's copy.
    The same steps as ring_allreduce, with sets for numbers (what the lesson draws)."""
    state = [[frozenset([r]) for _ in range(N)] for r in range(N)]
    trace = [("start", [row[:] for row in state])]
    for phase, steps in (("reduce-scatter", N - 1), ("all-gather", N - 1)):
        for s in range(steps):
            # Every rank sends at once: read the messages first, then deliver them.
            if phase == "reduce-scatter":
                messages = [((r + 1) % N, (r - s) % N, state[r][(r - s) % N]) for r in range(N)]
            else:
                messages = [((r + 1) % N, (r - s + 1) % N, state[r][(r - s + 1) % N]) for r in range(N)]
            for dest, chunk, held in messages:
                state[dest][chunk] = state[dest][chunk] | held if phase == "reduce-scatter" else held
            trace.append((f"{phase} step {s + 1}", [row[:] for row in state]))
    return trace


def ring_bytes(n_bytes: int, N: int) -> float:
    """What one rank sends in a ring allreduce of ``n_bytes``: 2(N - 1)/N of them."""
    return 2 * (N - 1) / N * n_bytes


# -- ranks as threads -----------------------------------------------------------------------------

class SimulatedRanks:
    """N ranks as threads of one process, each with a communicator that has the point-to-point calls
    of mpi4py's buffer interface: ``Get_rank``, ``Get_size``, ``Send(buf, dest)``, ``Recv(buf, source)``
    and ``Sendrecv(sendbuf, dest, sendtag=0, recvbuf=None, source=..., recvtag=0)``.

    Messages are copied (as MPI does). ``Send`` blocks until the matching ``Recv`` has taken the message,
    as MPI's does for a message past its eager limit (tens of KB: a real gradient): a ring in which every
    rank sends before it receives deadlocks, here as under ``mpiexec``. ``Sendrecv`` posts its send and
    its receive together, so it does not. When every rank waits and nothing moves, that is a deadlock, and
    the waiting calls raise a WrongAnswer that names it; a rank that waits ``timeout`` seconds raises one
    too. ``bytes_sent[r]``: what rank r sent.
    """

    def __init__(self, N: int, timeout: float = 10.0, blocking: bool = True):
        self.N, self.timeout, self.blocking = N, timeout, blocking
        self.boxes = {(a, b): [] for a in range(N) for b in range(N)}     # [message, taken]
        self.bytes_sent = [0] * N
        self.cv = threading.Condition()
        self.version = 0                      # bumped by every send, receive and finished rank
        self.waiting: dict[int, str] = {}     # rank -> what it waits for
        self.finished = 0
        self.deadlock: str | None = None

    def _changed(self) -> None:
        self.version += 1
        self.cv.notify_all()

    def _wait(self, rank: int, ready, what: str) -> None:
        """Wait (holding cv) until ``ready()``; a deadlock or the time limit raises a WrongAnswer."""
        deadline = time.monotonic() + self.timeout
        self.waiting[rank] = what
        try:
            while not ready():
                if self.deadlock:
                    raise WrongAnswer(self.deadlock)
                version = self.version
                self.cv.wait(0.05)
                if ready():
                    break
                if self.version == version and len(self.waiting) + self.finished == self.N:
                    stuck = "; ".join(f"rank {r} in {w}" for r, w in sorted(self.waiting.items()))
                    sends = any(w.startswith("Send") for w in self.waiting.values())
                    self.deadlock = (tr(f"deadlock: every rank waits and none can go on ({stuck})") + (
                        "\n  hint: " + tr("a blocking Send waits until its message is received; when every rank sends "
                        "first and receives after, no rank ever receives (MPI does this past its eager limit, "
                        "so the ring hangs under mpiexec on real gradients): use Sendrecv, which sends and "
                        "receives at once, or let even ranks send first and odd ranks receive first")
                        if sends else "\n  hint: " + tr("the ranks disagree on how many messages to send")))
                    self.cv.notify_all()
                    raise WrongAnswer(self.deadlock)
                if time.monotonic() > deadline:
                    raise WrongAnswer(tr(f"rank {rank} waited {self.timeout:g} s in {what}: a deadlock, or the ranks "
                                         "disagree on how many messages to send"))
        finally:
            del self.waiting[rank]

    class Comm:
        def __init__(self, ranks: SimulatedRanks, rank: int):
            self._ranks, self._rank = ranks, rank

        def Get_rank(self) -> int:
            return self._rank

        def Get_size(self) -> int:
            return self._ranks.N

        def _post(self, buf, dest: int) -> list:
            ranks = self._ranks
            buf = numpy.asarray(buf)
            entry = [buf.copy(), False]
            with ranks.cv:
                ranks.bytes_sent[self._rank] += buf.nbytes
                ranks.boxes[(self._rank, int(dest))].append(entry)
                ranks._changed()
            return entry

        def _until_taken(self, entry: list, dest: int) -> None:
            ranks = self._ranks
            if ranks.blocking:
                with ranks.cv:
                    ranks._wait(self._rank, lambda: entry[1], f"Send to rank {dest}")

        def Send(self, buf, dest: int, tag: int = 0) -> None:
            self._until_taken(self._post(buf, dest), int(dest))

        def Recv(self, buf, source: int, tag: int = 0) -> None:
            ranks = self._ranks
            box = ranks.boxes[(int(source), self._rank)]
            with ranks.cv:
                ranks._wait(self._rank, lambda: bool(box), f"Recv from rank {source}")
                entry = box.pop(0)
                entry[1] = True
                ranks._changed()
            message = entry[0]
            if not isinstance(buf, numpy.ndarray) or buf.shape != message.shape:
                raise WrongAnswer(tr(f"rank {self._rank}: the receive buffer is {describe(buf)}, but rank {source} "
                                     f"sent {message.shape[0] if message.ndim else 1} elements: make it an array of "
                                     "the size of the chunk that arrives"))
            buf[...] = message

        def Sendrecv(self, sendbuf, dest: int, sendtag: int = 0, recvbuf=None, source: int = 0,
                     recvtag: int = 0) -> None:
            entry = self._post(sendbuf, dest)
            self.Recv(recvbuf, source)
            self._until_taken(entry, int(dest))

    def run(self, fn, inputs: list) -> list:
        """fn(comm_r, inputs[r]) on every rank at once; the N results (an exception re-raised)."""
        results, errors = [None] * self.N, [None] * self.N

        def one(r):
            try:
                results[r] = fn(self.Comm(self, r), inputs[r])
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                errors[r] = exc
            finally:
                with self.cv:
                    self.finished += 1
                    self._changed()

        threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(self.N)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.timeout + 5)
        for exc in sorted((e for e in errors if e is not None), key=lambda e: not isinstance(e, WrongAnswer)):
            raise exc
        return results


def run_ring(fn, N: int, inputs: list) -> dict:
    """The learner's ring on N simulated ranks, run where it lives: {"results", "bytes_sent", "refused"}
    as plain data ("refused": the simulator's finding, a deadlock or a wrong receive buffer)."""
    ranks = SimulatedRanks(N)
    try:
        results = ranks.run(fn, inputs)
    except WrongAnswer as exc:
        return {"results": None, "bytes_sent": ranks.bytes_sent, "refused": str(exc)}
    results = [r.tolist() if isinstance(r, numpy.ndarray) and r.dtype == object else r for r in results]
    return {"results": results, "bytes_sent": ranks.bytes_sent, "refused": None}


# -- Exercise 14.1: a ring allreduce -------------------------------------------------------------

@exercise("14.1")
def check_ring_allreduce(fn) -> bool:
    """fn(comm, x) -> the sum of x over the ranks, on every rank, through comm.Sendrecv (or Send/Recv).

    Run on 2, 3 and 4 simulated ranks (threads; ``SimulatedRanks``: a Send blocks until it is received)
    with vectors of 12, 10 and 1 float64 entries; checked: every rank's result against the sum, and the
    bytes each rank sent against a ring's 2(N - 1)/N of the vector.
    """
    rng = case_rng(14)
    worst, first = 0.0, True
    cases = [(N, n) for N in RING_RANKS for n in RING_SIZES]
    if not visible():
        cases = [(int(rng.integers(2, 6)), int(rng.integers(1, 40))),
                 (int(rng.integers(3, 6)), edge([64, 1, 2, 97]))]
    for N, n in cases:
        inputs = [rng.standard_normal(n) for _ in range(N)]
        run = drive(fn, run_ring, N, [x.copy() for x in inputs])
        if not isinstance(run, dict) or set(run) != {"results", "bytes_sent", "refused"}:
            raise WrongAnswer(tr(f"the simulated ranks did not report back (got {describe(run)})"))
        if run["refused"]:
            raise WrongAnswer(tr(f"{N} ranks, a vector of {n}: {run['refused']}"))
        results = run["results"]
        if first and not_attempted(results[0]):
            return False
        first = False
        total = numpy.sum(inputs, axis=0)
        where = tr(f"{N} ranks, a vector of {n}")
        got = [as_array(tr(f"rank {r}'s result ({where})"), res).astype(numpy.float64) for r, res in enumerate(results)]
        for r, g in enumerate(got):
            if g.shape != total.shape:
                raise WrongAnswer(tr(f"{where}: rank {r} returned shape {g.shape}, expected {total.shape}"))
        errors = [rel_error(g, total) for g in got]
        if max(errors) > TOL:
            msg = (tr(f"{where}: wrong sums: max relative error {max(errors):.2e} (rank {int(numpy.argmax(errors))}) "
                      f"vs the sum over the ranks (tolerance {TOL:.0e})"))
            chunks = numpy.array_split(numpy.arange(n), N)
            only_own = all(rel_error(g[chunks[(r + 1) % N]], total[chunks[(r + 1) % N]]) <= TOL
                           for r, g in enumerate(got) if len(chunks[(r + 1) % N]))
            if all(rel_error(g, x) <= TOL for g, x in zip(got, inputs)):
                msg += "\n  hint: " + tr("each rank returned its own vector: add what arrives from the left neighbour")
            elif all(rel_error(g, total / N) <= TOL for g in got):
                msg += ("\n  hint: " + tr("the result is the mean, sum / N: an allreduce sums (the trainer's weights "
                                         "n_r / n turn the sum into the mean)"))
            elif only_own:
                msg += ("\n  hint: " + tr("only the reduce-scatter half: rank r holds the finished sum of chunk (r "
                                          "+ 1) "
                                         "mod N alone; the all-gather passes the finished chunks around the ring"))
            raise WrongAnswer(msg)
        worst = max(worst, *errors)
        ring = ring_bytes(n * 8, N)
        slack = 2 * (N - 1) * 8                           # chunks of unequal size (n not divisible by N)
        for r, sent in enumerate(run["bytes_sent"]):
            if sent > ring + slack:
                msg = (tr(f"{where}: rank {r} sent {sent} bytes; a ring sends 2(N-1)/N of the vector, "
                          f"{ring:.0f} bytes ({8 * n} bytes in all)"))
                if sent >= 2 * (N - 1) * 8 * n:
                    msg += "\n  hint: " + tr("every message carries the whole vector: send one chunk, 1/N of it")
                elif N >= 3 and sent >= (N - 1) * 8 * n:   # at N = 2 a ring and an all-to-all send as much
                    msg += ("\n  hint: " + tr("(N-1) whole vectors: sending every rank its own copy is an "
                                              "all-to-all, not "
                                             "a ring; pass one chunk per step to the right neighbour"))
                raise WrongAnswer(msg)
    return report_correct({tr("sum on every rank"): (worst, None)})


# -- Exercise 14.2: the token-weighted gradient ----------------------------------------------------

def shards_for_exercise(seed: int = 0, ranks: int = 3, sentences: int = 12):
    """A batch of 12 target sequences of lengths 1 to 9 (padded), split between 3 ranks by
    sentence count, as a naive split would: (logits (B, T, V), targets (B, T), pad_id, rank_rows).
    ``seed`` may be a generator (a hidden case's)."""
    rng = seed if isinstance(seed, numpy.random.Generator) else numpy.random.default_rng(seed)
    pad, V = 0, 7
    lengths = numpy.sort(rng.integers(1, 10, sentences))
    tgt = [list(rng.integers(4, V, L)) for L in lengths]
    batch = make_batch([[5]] * len(tgt), tgt, pad_id=pad, bos_id=1, eos_id=2, xp=numpy)
    logits = rng.standard_normal((*batch.tgt_out.shape, V))
    return logits, batch.tgt_out, pad, numpy.array_split(numpy.arange(len(tgt)), ranks)


def _bias_gradient(logits, targets, pad, eps_ls=0.1):
    """The gradient of the mean label-smoothed loss with respect to a bias b added to every logit:
    sum over positions of dL/dlogits, shape (V,)."""
    _, cache = cross_entropy_forward(logits, targets, pad, eps_ls)
    return cross_entropy_backward(cache).reshape(-1, logits.shape[-1]).sum(axis=0)


def _token_weighted_reference(grads, n_tokens):
    """The whole batch's gradient: each rank's mean-loss gradient weighted by its share of the tokens."""
    return sum(n * g for n, g in zip(n_tokens, grads)) / sum(n_tokens)


@exercise("14.2")
def check_token_weighted(fn) -> bool:
    """fn(grads, n_tokens) -> the whole batch's gradient, from each rank's gradient of its own
    mean loss (grads[r]: an array, all of one shape) and its non-pad target tokens (n_tokens[r]).

    The gradients are real ones: of the label-smoothed loss (ε_ls = 0.1) with respect to a bias
    on the logits, for 3 ranks holding 4 sentences each of one batch (shards_for_exercise), so
    they hold different numbers of tokens and of padding. Checked against the whole batch's.
    """
    if visible():
        logits, targets, pad, rows = shards_for_exercise()
    else:
        rng = case_rng(142)
        n_ranks = int(rng.integers(2, 6))
        logits, targets, pad, rows = shards_for_exercise(rng, n_ranks, n_ranks * int(rng.integers(1, 5)))
    whole = _bias_gradient(logits, targets, pad)
    grads = [_bias_gradient(logits[r], targets[r], pad) for r in rows]
    counts = [int((targets[r] != pad).sum()) for r in rows]
    assert abs(rel_error(_token_weighted_reference(grads, counts), whole)) <= TOL, "internal: the reference"
    got = fn([g.copy() for g in grads], list(counts))
    if not_attempted(got):
        return False
    got = as_array(tr("the combined gradient"), got).astype(numpy.float64)
    if got.shape != whole.shape:
        raise WrongAnswer(tr(f"the combined gradient has shape {got.shape}, expected {whole.shape} (one rank's)"))
    err = rel_error(got, whole)
    if err > TOL:
        msg = (tr(f"the combined gradient differs from the whole batch's: max relative error {err:.2e} "
                  f"(tolerance {TOL:.0e}); the ranks hold {counts} tokens"))
        N = len(counts)
        sentences = [len(r) for r in rows]
        padded = [int(targets[r].size) for r in rows]
        hints = [
            (sum(grads) / N, tr("the plain average of the ranks' gradients: right only when every rank holds the "
                                "same number of tokens; weight rank r by n_r / n")),
            (sum(grads), tr("the plain sum: each rank's gradient is already a mean over its tokens; weight rank r "
                            "by n_r / n")),
            (sum(c * g for c, g in zip(counts, grads)), tr("weighted by n_r but not divided by n = sum of n_r")),
            (sum(b * g for b, g in zip(sentences, grads)) / sum(sentences),
             tr("weighted by sentences: the loss is a mean over target tokens, not over sentences")),
            (sum(p * g for p, g in zip(padded, grads)) / sum(padded),
             tr("weighted by padded positions: padding is not in the loss; count the non-pad targets")),
        ]
        for wrong, text in hints:
            if rel_error(got, wrong) <= TOL:
                msg += f"\n  hint: {text}"
                break
        raise WrongAnswer(msg)
    return report_correct({tr("combined gradient"): (err, None)})


# -- the script the lesson runs under mpiexec ---------------------------------------------------------

def _time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _slowest(comm, MPI, fn, repeats: int) -> float:
    """The slowest rank's best time of ``fn`` over ``repeats`` runs (the ranks start together)."""
    comm.Barrier()
    return comm.allreduce(_time(fn, repeats), op=MPI.MAX)


def main(argv=None) -> int:
    """Time ring_allreduce and MPI's Allreduce on float32 vectors of the given sizes; rank 0 prints
    {"ranks", "library", "sizes", "ring_s", "mpi_s", "max_difference", "exact_on_integers"} as JSON."""
    from mpi4py import MPI  # noqa: PLC0415  (only here, under mpiexec)

    sizes = [int(a) for a in (sys.argv[1:] if argv is None else argv)] or [1000, 100_000, 1_000_000]
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    out = {"ranks": comm.Get_size(), "library": " ".join(MPI.Get_library_version().splitlines()[0].split()),
           "sizes": sizes, "ring_s": [], "mpi_s": [], "max_difference": [], "exact_on_integers": []}
    for n in sizes:
        x = numpy.random.default_rng([rank, n]).standard_normal(n).astype(numpy.float32)
        reference = x.copy()
        comm.Allreduce(MPI.IN_PLACE, reference)
        ring = ring_allreduce(comm, x)
        out["max_difference"].append(float(numpy.abs(ring - reference).max() / numpy.abs(reference).max()))
        k = numpy.random.default_rng([rank, n, 1]).integers(-1000, 1000, n).astype(numpy.float32)
        k_ring, k_mpi = ring_allreduce(comm, k), k.copy()
        comm.Allreduce(MPI.IN_PLACE, k_mpi)
        out["exact_on_integers"].append(bool(numpy.array_equal(k_ring, k_mpi)))
        repeats = 5 if n >= 1_000_000 else 20
        buf = x.copy()
        out["ring_s"].append(_slowest(comm, MPI, lambda x=x: ring_allreduce(comm, x), repeats))
        out["mpi_s"].append(_slowest(comm, MPI, lambda buf=buf: comm.Allreduce(MPI.IN_PLACE, buf), repeats))
    if rank == 0:
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
