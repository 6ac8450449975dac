"""The package's own threads never change a result (issue 25.3).

Training 30 steps of the copy task with 1, 2 or 3 of the package's threads
(``MINITRANSFORMER_THREADS``, i.e. ``backend.set_num_threads``) must give the same
parameters bit for bit: the threads only share out independent blocks (Adam's
update of separate parameter blocks, rows of LayerNorm and of the loss), and the
blocks depend on the array sizes, never on the thread count.

The test makes sure the threads really ran: at the copy size, rows of LayerNorm and
the loss fit in one block, so ``backend.ROW_BLOCK`` (and the loss's ``LOSS_BLOCK``) is made small enough to cut them
into several, and a spy on ``backend.run_in_threads`` records which threads ran the
parts. If the package no longer has a thread pool of its own, there is nothing to
test here, and the test says so.

OpenBLAS's own thread count is another matter: it changes float32 products in their
last bits (lessons/experiments/copy_recipe_search.py records how far that moves a
run), so it is pinned to one thread here, through threadpoolctl, for both runs.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.data.registry import load_task
from minitransformer.layers import loss
from minitransformer.train import make_trainer, settings_for

STEPS = 30


def train_parameters(steps: int) -> list[np.ndarray]:
    """The parameters after ``steps`` steps of the copy recipe (seed 0), as host copies."""
    task = load_task("copy", seed=0)
    preset, settings = settings_for("copy", seed=0, steps=steps, valid_every=10**9)
    trainer = make_trainer(task, settings, preset)
    batches = trainer.batches()
    for _ in range(steps):
        trainer.train_step(next(batches))
    return [backend.to_numpy(p.data).copy() for p in trainer.model.parameters()]


@pytest.fixture
def one_blas_thread():
    threadpoolctl = pytest.importorskip("threadpoolctl", reason="threadpoolctl pins OpenBLAS's thread count")
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        yield


@pytest.mark.slow
def test_package_threads_give_the_same_parameters_bit_for_bit(monkeypatch, one_blas_thread):
    if not hasattr(backend, "run_in_threads"):
        pytest.skip("the package has no thread pool of its own any more (backend.run_in_threads is gone): "
                    "MINITRANSFORMER_THREADS cannot change a result")
    monkeypatch.setattr(backend, "ROW_BLOCK", 2048)         # rows of LayerNorm: several blocks
    monkeypatch.setattr(loss, "LOSS_BLOCK", 2048, raising=False)     # ... and of the loss
    plain = backend.run_in_threads
    ran_on: set[int] = set()

    def spy(fn, items, xp=None):
        def part(p):
            ran_on.add(threading.get_ident())
            return fn(p)
        return plain(part, items, xp)

    monkeypatch.setattr(backend, "run_in_threads", spy)
    before = backend.num_threads()
    try:
        runs = {}
        for n in (1, 2, 3):
            backend.set_num_threads(n)
            ran_on.clear()
            runs[n] = train_parameters(STEPS)
            threads_used = len(ran_on)
            if n == 1:
                assert threads_used == 1, f"with 1 thread, parts ran on {threads_used} threads"
            else:
                assert threads_used > 1, f"with {n} threads the work never left the calling thread: nothing tested"
    finally:
        backend.set_num_threads(before)
    for n in (2, 3):
        for i, (a, b) in enumerate(zip(runs[1], runs[n])):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (
                f"parameter {i} differs after {STEPS} steps with {n} package threads against 1: "
                f"max |difference| {np.abs(a.astype(np.float64) - b).max():.3g}")


@pytest.mark.slow
def test_the_same_thread_counts_repeat_a_run_bit_for_bit(one_blas_thread):
    """Whatever the thread settings, two runs with the same ones give the same bits."""
    first, second = train_parameters(10), train_parameters(10)
    for i, (a, b) in enumerate(zip(first, second)):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"parameter {i} differs between two equal runs"
