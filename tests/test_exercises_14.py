"""The exercise checkers of lesson 14: a right answer passes, each classic wrong answer raises
AssertionError with its hint, the untouched stub (returns None) returns False without raising.
The right answers here are written independently of the package."""

import time

import numpy as np
import pytest
from checker_contract import contract_tests

from lessonkit.exercises import lesson_14 as ex

# -- correct answers -----------------------------------------------------------------------------

def ring(comm, x):
    """A ring with Send/Recv in an order that cannot deadlock (even ranks send first), chunks by hand."""
    r, N = comm.Get_rank(), comm.Get_size()
    y = x.astype(float).copy()
    bounds = [len(y) * i // N for i in range(N + 1)]
    part = [slice(bounds[i], bounds[i + 1]) for i in range(N)]

    def exchange(send, recv):
        incoming = np.empty(part[recv].stop - part[recv].start)
        if r % 2 == 0:
            comm.Send(y[part[send]].copy(), dest=(r + 1) % N)
            comm.Recv(incoming, source=(r - 1) % N)
        else:
            comm.Recv(incoming, source=(r - 1) % N)
            comm.Send(y[part[send]].copy(), dest=(r + 1) % N)
        return incoming

    for s in range(N - 1):
        y[part[(r - s - 1) % N]] += exchange((r - s) % N, (r - s - 1) % N)
    for s in range(N - 1):
        y[part[(r - s) % N]] = exchange((r - s + 1) % N, (r - s) % N)
    return y


def combine(grads, n_tokens):
    n = sum(n_tokens)
    return sum(g * (k / n) for g, k in zip(grads, n_tokens))


# -- wrong answers -----------------------------------------------------------------------------------

def own_vector(comm, x):
    return x


def mean_not_sum(comm, x):
    return ex.ring_allreduce(comm, x) / comm.Get_size()


def reduce_scatter_only(comm, x):
    rank, N = comm.Get_rank(), comm.Get_size()
    flat = x.copy()
    chunks = np.array_split(flat, N)
    for s in range(N - 1):
        send, recv = (rank - s) % N, (rank - s - 1) % N
        incoming = np.empty_like(chunks[recv])
        comm.Sendrecv(chunks[send], dest=(rank + 1) % N, recvbuf=incoming, source=(rank - 1) % N)
        chunks[recv] += incoming
    return flat


def pass_whole_vectors(comm, x):
    """Right sums, but each of N - 1 steps forwards a whole vector around the ring: (N-1)·n sent."""
    rank, N = comm.Get_rank(), comm.Get_size()
    total, travelling = x.copy(), x.copy()
    for _ in range(N - 1):
        incoming = np.empty_like(travelling)
        comm.Sendrecv(travelling, dest=(rank + 1) % N, recvbuf=incoming, source=(rank - 1) % N)
        total += incoming
        travelling = incoming
    return total


def whole_vector_both_phases(comm, x):
    """Right sums, 2(N-1) whole vectors: the ring's steps, but no chunks."""
    rank, N = comm.Get_rank(), comm.Get_size()
    total = pass_whole_vectors(comm, x)
    for _ in range(N - 1):
        incoming = np.empty_like(total)
        comm.Sendrecv(total, dest=(rank + 1) % N, recvbuf=incoming, source=(rank - 1) % N)
    return total


CASES = {
    "check_ring_allreduce": (ring, [
        ("returns its own vector", own_vector, r"wrong sums.*hint: each rank returned its own vector"),
        ("mean instead of sum", mean_not_sum, r"hint: the result is the mean"),
        ("no all-gather", reduce_scatter_only, r"hint: only the reduce-scatter half"),
        ("(N-1) whole vectors", pass_whole_vectors, r"sent \d+ bytes.*hint: \(N-1\) whole vectors"),
        ("whole vectors in both phases", whole_vector_both_phases, r"hint: every message carries the whole vector"),
    ]),
    "check_token_weighted": (combine, [
        ("plain average", lambda g, n: sum(g) / len(g), r"hint: the plain average"),
        ("plain sum", lambda g, n: sum(g), r"hint: the plain sum"),
        ("not divided by n", lambda g, n: sum(k * x for k, x in zip(n, g)), r"hint: weighted by n_r but not divided"),
        ("a wrong shape", lambda g, n: np.stack(g), r"has shape \(3, 7\), expected \(7,\)"),
    ]),
}

(test_every_checker_has_cases, test_correct_answer_passes, test_stub_is_not_attempted,
 test_wrong_answer_gets_its_hint) = contract_tests(ex, CASES)


def test_the_packaged_ring_passes_its_own_checker_and_sends_what_the_ring_formula_says(capsys):
    assert ex.check_ring_allreduce(ex.ring_allreduce).correct
    ranks = ex.SimulatedRanks(4)
    ranks.run(ex.ring_allreduce, [np.ones(1000) for _ in range(4)])
    assert ranks.bytes_sent == [ex.ring_bytes(8000, 4)] * 4               # 2(N-1)/N of 8000 bytes each


def test_a_ring_that_deadlocks_is_named_not_hung():
    def everyone_receives_first(comm, x):
        buf = np.empty_like(x)
        comm.Recv(buf, source=(comm.Get_rank() - 1) % comm.Get_size())
        return buf

    ranks = ex.SimulatedRanks(2, timeout=30)
    t0 = time.perf_counter()
    try:
        ranks.run(everyone_receives_first, [np.ones(3), np.ones(3)])
    except AssertionError as exc:
        assert "deadlock: every rank waits" in str(exc) and "rank 0 in Recv from rank 1" in str(exc)
    else:
        raise AssertionError("the deadlock was not reported")
    assert time.perf_counter() - t0 < 10             # found when every rank waits, not at the time limit


def test_a_blocking_send_then_recv_deadlocks_as_under_mpiexec_and_sendrecv_does_not():
    """Issue 35: Send blocks until its message is received (MPI past its eager limit), so send-then-receive
    on every rank is a deadlock the checker names; the same ring with Sendrecv passes."""
    def send_first(comm, x):
        buf = np.empty_like(x)
        N, r = comm.Get_size(), comm.Get_rank()
        comm.Send(x, dest=(r + 1) % N)
        comm.Recv(buf, source=(r - 1) % N)
        return buf

    def sendrecv(comm, x):
        buf = np.empty_like(x)
        N, r = comm.Get_size(), comm.Get_rank()
        comm.Sendrecv(x, dest=(r + 1) % N, recvbuf=buf, source=(r - 1) % N)
        return buf

    for N in (2, 3, 4):
        with pytest.raises(AssertionError, match="(?s)deadlock.*Send to rank.*hint: a blocking Send"):
            ex.SimulatedRanks(N).run(send_first, [np.full(4, float(r)) for r in range(N)])
        out = ex.SimulatedRanks(N).run(sendrecv, [np.full(4, float(r)) for r in range(N)])
        assert [o[0] for o in out] == [(r - 1) % N for r in range(N)]
    with pytest.raises(ex.WrongAnswer, match="(?s)deadlock.*hint: a blocking Send"):
        ex.check_ring_allreduce(send_first)
