"""threads.py: OpenBLAS kept to the cores other processes leave free (issue 25.2).

The arithmetic on fake samples (the free cores, the thread count they give), and the
policy's decisions with a stand-in OpenBLAS controller and a stand-in /proc/stat,
so that no test depends on how busy the machine is while it runs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from minitransformer import backend, threads


def test_free_cores_leaves_out_our_own_time():
    # 2 cores, 1 s of wall time (2 s of core time): the machine was busy 1.9 s, 0.9 s of it ours.
    assert threads.free_cores((0.0, 0.0, 0.0), (1.9, 2.0, 0.9), 2) == pytest.approx(1.0)
    # Only we ran (our spinning workers included): both cores are free to us.
    assert threads.free_cores((10.0, 100.0, 5.0), (12.0, 102.0, 7.0), 2) == pytest.approx(2.0)
    # Another job on both cores: nothing free.
    assert threads.free_cores((0.0, 0.0, 0.0), (2.0, 2.0, 0.0), 2) == pytest.approx(0.0)
    # No time passed (two samples in the same clock tick): assume the machine is ours.
    assert threads.free_cores((1.0, 5.0, 0.0), (1.0, 5.0, 0.0), 4) == 4.0


@pytest.mark.parametrize("free, most, want", [
    (2.0, 2, 2), (1.8, 2, 2), (1.7, 2, 1), (1.0, 2, 1), (0.0, 2, 1), (3.9, 2, 2), (5.75, 8, 6), (5.7, 8, 5),
])
def test_threads_for_counts_cores_at_least_three_quarters_idle(free, most, want):
    assert threads.FREE_SHARE == 0.75
    assert threads.threads_for(free, most) == want


class FakeBlas:
    def __init__(self, n):
        self.num_threads = n
        self.calls = []

    def set_num_threads(self, n):
        self.calls.append(n)
        self.num_threads = n


@pytest.fixture
def policy(monkeypatch):
    """The policy started by hand on a fake 2-thread OpenBLAS, its samples fed from a list."""
    blas = FakeBlas(2)
    samples = []
    monkeypatch.setattr(threads, "sample", lambda: samples.pop(0))
    monkeypatch.setattr(threads, "_wanted", True)
    monkeypatch.setattr(threads, "_next_check", 0.0)
    monkeypatch.setattr(threads, "_state", {"controllers": [blas], "most": 2, "threads": 2,
                                            "last": (0.0, 0.0, 0.0), "cores": 2, "changes": 0})
    clock = [100.0]
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock[0])
    yield blas, samples, clock
    threads._state = None
    threads._next_check = math.inf


def test_policy_follows_the_load(policy):
    blas, samples, clock = policy
    samples.append((1.9, 2.0, 0.9))             # another job took one core: one thread
    threads.check()
    assert blas.calls == [1]
    threads.check()                             # within CHECK_SECONDS: no look, nothing read
    assert blas.calls == [1] and samples == []
    clock[0] += threads.CHECK_SECONDS
    samples.append((2.9, 4.0, 1.9))             # the other job is gone: both threads again
    threads.check()
    assert blas.calls == [1, 2]
    assert threads.status()["changes"] == 2 and threads.status()["threads"] == 2
    clock[0] += threads.CHECK_SECONDS
    samples.append((3.9, 6.0, 2.9))             # still alone: nothing to change
    threads.check()
    assert blas.calls == [1, 2]


def test_set_policy_false_restores_the_start_count_and_stops_looking(policy):
    blas, samples, clock = policy
    samples.append((2.0, 2.0, 0.0))
    threads.check()
    assert blas.num_threads == 1
    threads.set_policy(False)
    assert blas.num_threads == 2 and threads.status()["on"] is False
    clock[0] += 10 * threads.CHECK_SECONDS
    threads.check()                             # off: would pop from the empty list if it looked
    assert blas.calls == [1, 2]


def test_a_count_set_by_someone_else_makes_the_policy_stand_aside(policy):
    blas, samples, clock = policy
    blas.num_threads = 1                        # threadpool_limits(1) in the user's code
    threads.check()                             # would pop from the empty list if it looked
    assert blas.calls == [] and blas.num_threads == 1
    clock[0] += 10 * threads.CHECK_SECONDS
    samples.append((0.0, 2.0, 0.0))             # an idle machine: the policy would want 2 threads
    threads.check()
    assert blas.calls == [] and blas.num_threads == 1


def test_a_thread_count_in_the_environment_turns_the_policy_off(monkeypatch):
    monkeypatch.setattr(threads, "_state", None)
    monkeypatch.setattr(threads, "_wanted", True)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    assert threads._start() is False
    assert threads.status()["why_off"] == "OPENBLAS_NUM_THREADS is set"


def test_the_policy_is_asked_once_per_training_step_and_decoded_batch_never_per_product(monkeypatch):
    """threads.check runs outside the layers' math: once per Trainer.train_step and once per
    decoded batch (every strategy), and not from the products (backend.matmul is ``@``)."""
    from minitransformer.data.registry import load_task
    from minitransformer.decoding import Beam, Greedy, Sample, decode
    from minitransformer.runsetup import make_trainer, settings_for

    calls = []
    monkeypatch.setattr(threads, "check", lambda: calls.append(1))
    a = np.ones((2, 3, 4), dtype=np.float32)
    assert np.all(backend.matmul(a.reshape(6, 4), np.ones((4, 5), dtype=np.float32)) == 4.0)
    assert calls == []
    task = load_task("copy")
    preset, settings = settings_for(task, preset="tiny", steps=2, batch_size=8)
    trainer = make_trainer(task, settings, preset)
    batches = trainer.batches()
    for n in (1, 2):
        trainer.train_step(next(batches))
        assert len(calls) == n
    src = np.array([[4, 5, 6, 2], [7, 8, 2, 0]])
    for strategy in (Greedy(), Sample(seed=1), Beam(2)):
        calls.clear()
        decode(trainer.model, src, bos_id=1, eos_id=2, strategy=strategy, max_len=3)
        assert calls == [1], strategy


def test_sample_reads_this_machine():
    s = threads.sample()
    if s is None:
        pytest.skip("no /proc/stat on this system: the policy is off here")
    busy, total, own = s
    assert 0 <= busy <= total and own >= 0
