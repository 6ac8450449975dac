"""Data-parallel training, in one process: sharding a global batch, the token-weighted gradient,
gradient accumulation, the gradient sum's packing, the parameter hash check, the watchdog, and the
errors without MPI. The runs under mpiexec are in tests/test_mpi.py."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from parameter_compare import compare

from minitransformer import backend, distributed
from minitransformer.data.batching import batch_plan, make_batch
from minitransformer.data.registry import load_task
from minitransformer.distributed import (
    GradientSum,
    RanksOutOfSync,
    SingleProcess,
    agree_to_stop,
    check_in_sync,
    shard_batch,
    step_batches,
)
from minitransformer.errors import EnvironmentVariableError
from minitransformer.runsetup import build_model
from minitransformer.stops import StopSignals
from minitransformer.train import Trainer, TrainSettings, encode_pairs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def copy_pairs():
    task = load_task("copy", seed=0)
    return task, encode_pairs(task.vocab, task.train[:600])


# -- sharding ---------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shards_cover_the_batch_once_contiguously_and_balanced(size, seed):
    rng = np.random.default_rng(seed)
    B = int(rng.integers(size, 40))
    indices = [int(i) for i in rng.permutation(1000)[:B]]
    costs = sorted(int(c) for c in rng.integers(3, 60, B))
    shards = [shard_batch(indices, costs, r, size) for r in range(size)]
    assert sum(shards, []) == indices                                  # each once, in order: contiguous
    assert all(shards), "a rank got nothing although there are enough sentences"
    cost_of = dict(zip(indices, costs))
    loads = [sum(cost_of[k] for k in shard) for shard in shards]
    assert max(loads) <= sum(costs) / size + max(costs), loads          # within one sentence of an even split


def test_fewer_sentences_than_ranks_leave_the_last_ranks_empty():
    assert [shard_batch([5, 9], [4, 4], r, 4) for r in range(4)] == [[5], [9], [], []]
    with pytest.raises(ValueError, match="2 indices but 1 costs"):
        shard_batch([5, 9], [4], 0, 2)


def test_step_batches_count_the_whole_global_batch(copy_pairs):
    task, pairs = copy_pairs
    v = task.vocab
    plan = batch_plan(pairs, 64, None, np.random.default_rng(0))[0]
    whole = sum(len(pairs[k][1]) + 1 for k in plan)
    for size in (1, 2, 3):
        for k in (1, 3):
            per_rank = [step_batches(plan, pairs, FakeRanks(r, size), v.pad_id, v.bos_id, v.eos_id, accumulate=k)
                        for r in range(size)]
            assert all(w.n_tokens == whole for w in per_rank)            # every rank knows n without asking
            assert all(len(w.shards) == k for w in per_rank)
            assert sum(b.n_tokens for w in per_rank for b in w.shards if b is not None) == whole
            assert sum(b.src.shape[0] for w in per_rank for b in w.shards) == len(plan) == 64


# -- the token-weighted gradient: the whole batch, in pieces ------------------------------------

def _gradients(model, criterion, batch, scale=1.0):
    """Add this batch's gradient, dlogits scaled by ``scale``, into the parameters' grads."""
    logits = model.forward(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    criterion.forward(logits, batch.tgt_out)
    model.backward(criterion.backward() * scale)


def test_token_weighted_shards_give_the_whole_batch_gradient_and_the_plain_average_does_not(f64, copy_pairs,
                                                                                          capsys):
    from minitransformer.layers.loss import LabelSmoothedCrossEntropy

    task, pairs = copy_pairs
    v = task.vocab
    model = build_model(task, "tiny", seed=0, P_drop=0.0, eps_ls=0.1)
    criterion = LabelSmoothedCrossEntropy(v.pad_id, 0.1)
    indices = sorted(range(48), key=lambda k: (len(pairs[k][0]), len(pairs[k][1])))   # lengths 1..10, sorted
    costs = [len(pairs[k][0]) + len(pairs[k][1]) + 1 for k in indices]

    def batch_of(ks):
        return make_batch([pairs[k][0] for k in ks], [pairs[k][1] for k in ks], v.pad_id, v.bos_id, v.eos_id)

    model.zero_grad()
    _gradients(model, criterion, batch_of(indices))
    whole = np.concatenate([p.grad.ravel().copy() for p in model.parameters()])
    for size in (2, 3):
        # Split by sentence count (equal numbers of sentences, unequal tokens) and by tokens.
        for split in ("sentences", "tokens"):
            if split == "tokens":
                shards = [shard_batch(indices, costs, r, size) for r in range(size)]
            else:
                shards = [list(a) for a in np.array_split(indices, size)]
            batches = [batch_of(s) for s in shards]
            n = sum(b.n_tokens for b in batches)
            results = {}
            for rule in ("n_r / n", "1 / N"):
                model.zero_grad()
                for b in batches:
                    _gradients(model, criterion, b, b.n_tokens / n if rule == "n_r / n" else 1 / size)
                g = np.concatenate([p.grad.ravel() for p in model.parameters()])
                results[rule] = float(np.abs(g - whole).max() / np.abs(whole).max())
            print(f"N={size}, split by {split}: token counts {[b.n_tokens for b in batches]}, max relative "
                  f"difference from one process: n_r/n weights {results['n_r / n']:.1e}, "
                  f"plain average {results['1 / N']:.1e}")
            assert results["n_r / n"] < 1e-12
            if len({b.n_tokens for b in batches}) > 1:
                assert results["1 / N"] > 1e-4                          # the trap: wrong whenever counts differ
    out = capsys.readouterr().out
    with capsys.disabled():
        print("\n" + out, end="")


# -- gradient accumulation: the same identity in time ---------------------------------------------

def test_accumulate_k_on_a_global_batch_equals_the_whole_batch(f64, copy_pairs, capsys):
    """--accumulate K cuts each global batch into K micro-batches (in time) as mpiexec -n K cuts it into
    shards (in space): the update is the whole batch's."""
    task, pairs = copy_pairs
    v = task.vocab
    K, steps = 4, 20
    plan = [b for epoch in (0, 1) for b in batch_plan(pairs, 48, None, np.random.default_rng([0, epoch]))]
    settings = TrainSettings(steps=steps, batch_size=48, accumulate=K, warmup_steps=10, valid_every=10**9)
    trainers = [Trainer(build_model(task, "tiny", seed=0, P_drop=0.0), v, pairs, [], settings) for _ in range(2)]
    one = SingleProcess()
    for step in range(steps):
        micro = step_batches(plan[step], pairs, one, v.pad_id, v.bos_id, v.eos_id, accumulate=K)
        assert len(micro.shards) == K and sum(b.src.shape[0] for b in micro.shards) == len(plan[step])
        trainers[0].train_step(micro)
        trainers[1].train_step(step_batches(plan[step], pairs, one, v.pad_id, v.bos_id, v.eos_id))
    d = compare(trainers[1].model.named_parameters(), trainers[0].model.named_parameters())
    with capsys.disabled():
        print(f"\naccumulate {K}: batches of 48 in {K} micro-batches vs whole, {steps} steps, float64: max relative "
              f"difference {d['max_rel']:.1e} ({d['worst']}); key biases b_K (rounding noise) {d['b_K']:.1e}")
    assert d["max_rel"] < 1e-10 and d["b_K"] < 1e-8
    assert trainers[0].optimizer.step_count == steps


def test_accumulate_cuts_one_global_batch_of_the_plan_per_step(copy_pairs):
    task, pairs = copy_pairs
    settings = TrainSettings(steps=3, batch_size=16, accumulate=3, warmup_steps=10, valid_every=10**9)
    trainer = Trainer(build_model(task, "tiny", seed=0), task.vocab, pairs, [], settings)
    whole = Trainer(build_model(task, "tiny", seed=0), task.vocab, pairs, [], TrainSettings(batch_size=16))
    batches, plain = trainer.batches(), whole.batches()
    for step in (1, 2):
        cut, one = next(batches), next(plain)
        assert len(cut.shards) == 3 and trainer.batch_in_epoch == whole.batch_in_epoch == step
        assert (cut.n_tokens, cut.tokens) == (one.n_tokens, one.tokens)              # the same global batch
        assert sum(b.src.shape[0] for b in cut.shards) == one.shards[0].src.shape[0] == 16
    with pytest.raises(ValueError, match="TrainSettings: accumulate must be ≥ 1, got 0"):
        TrainSettings(accumulate=0)
    # At least one pair per micro-batch: no more micro-batches than a global batch can hold pairs (issue 36).
    assert TrainSettings(batch_size=16, accumulate=16).accumulate == 16
    with pytest.raises(ValueError, match=r"TrainSettings: accumulate=17 cuts each global batch into more micro-batches "
                                         r"than it can hold pairs \(batch_size=16\); give accumulate 16 or less"):
        TrainSettings(batch_size=16, accumulate=17)
    with pytest.raises(ValueError, match=r"\(max_tokens=8\); give accumulate 8"):
        TrainSettings(batch_size=16, max_tokens=8, accumulate=9)


# -- the gradient sum and the hash check, with a stand-in for the other ranks ------------------------

class FakeRanks(SingleProcess):
    """Rank ``rank`` of ``size`` identical ranks: a sum over them is ``size`` times this rank's value."""

    def __init__(self, rank=0, size=2, digests=None):
        self.rank, self.size, self.is_root = rank, size, rank == 0
        self.digests = digests

    def allreduce_sum(self, buf, what):
        buf *= self.size
        return buf

    def allgather(self, obj, what):
        return self.digests or [obj] * self.size


@pytest.mark.parametrize("on", ["numpy", "fake cupy"])
def test_gradient_sum_adds_every_gradient_and_the_loss(on, request, copy_pairs):
    task, pairs = copy_pairs
    if on == "fake cupy":
        request.getfixturevalue("fake_cp")             # gradients on the CuPy stand-in: staged through the host
    model = build_model(task, "tiny", seed=0)
    rng = np.random.default_rng(0)
    expected = []
    for p in model.parameters():
        g = rng.standard_normal(p.grad.shape).astype(p.grad.dtype)
        p.grad[...] = backend.to_backend(g, backend.get_array_module(p.grad))
        expected.append(2 * g)
    v = task.vocab
    work = step_batches([0, 1, 2], pairs, FakeRanks(0, 1), v.pad_id, v.bos_id, v.eos_id)
    work.n_tokens *= 2                                  # two ranks holding the same shard
    summed = GradientSum(model.parameters())
    assert summed.nbytes == (sum(p.grad.size for p in model.parameters()) + 2) * np.dtype(backend.default_dtype()).itemsize
    loss = summed(FakeRanks(0, 2), 0.25, work, step=1)
    assert loss == 0.5
    for p, g in zip(model.parameters(), expected):
        assert type(p.grad).__module__.split(".")[0] == ("cupy" if on == "fake cupy" else "numpy")
        np.testing.assert_array_equal(backend.to_numpy(p.grad), g)
    work.n_tokens += 1
    with pytest.raises(RanksOutOfSync, match="hold .* target tokens, but the global batch has"):
        summed(FakeRanks(0, 2), 0.25, work, step=2)


def test_the_hash_check_passes_equal_ranks_and_names_the_ones_that_differ(copy_pairs):
    task, _ = copy_pairs
    params = build_model(task, "tiny", seed=0).parameters()
    digest = check_in_sync(FakeRanks(0, 3), params, step=4)
    assert digest == distributed.parameter_digest(params) and len(digest) == 64
    x = params[0].data
    x.flat[0] = np.nextafter(x.flat[0], np.inf, dtype=x.dtype)        # one bit of difference is enough
    assert distributed.parameter_digest(params) != digest
    with pytest.raises(RanksOutOfSync, match=r"after step 4 the ranks' parameters differ .*rank 1: 000000000000"):
        check_in_sync(FakeRanks(0, 2, digests=[digest, "0" * 64]), params, step=4)


def test_dropout_seeds_differ_by_rank_and_batch_and_keep_the_single_process_seed(copy_pairs):
    task, pairs = copy_pairs
    trainer = Trainer(build_model(task, "tiny", seed=0), task.vocab, pairs, [], TrainSettings(seed=3))
    seeds = {trainer.dropout_seed(step, rank, k) for step in range(3) for rank in range(3) for k in range(2)}
    assert len(seeds) == 18
    old = int(np.random.SeedSequence([3, 5]).generate_state(1)[0])   # the single process's (seed, step) rule
    assert trainer.dropout_seed(5) == trainer.dropout_seed(5, 0, 0) == old


def test_the_banner_says_how_the_batch_is_split():
    class Two(SingleProcess):
        size, library = 2, "MPICH Version: 5.0.2"
    assert distributed.describe(SingleProcess(), TrainSettings()) is None
    line = distributed.describe(Two(), TrainSettings(batch_size=64, accumulate=4))
    assert line.startswith("data parallel: 2 ranks (MPICH Version: 5.0.2): each global batch of up to 64 pairs")
    assert "split between them by tokens" in line and "Adam on every rank" in line
    assert line.endswith("; gradient accumulation: each rank's shard split into 4 micro-batches by tokens, run one "
                         "after another, one update")
    assert distributed.describe(SingleProcess(), TrainSettings(batch_size=64, accumulate=4)) == (
        "gradient accumulation: each global batch of up to 64 pairs split into 4 micro-batches by tokens, run one "
        "after another, one update")


# -- the launcher's environment, without MPI ----------------------------------------------------------

def test_launched_reads_the_launchers_variables(monkeypatch):
    for name in (*distributed.SIZE_VARIABLES, *distributed.RANK_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    assert distributed.launched() == (0, 1, None)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    assert distributed.launched() == (2, 3, "OMPI_COMM_WORLD_SIZE")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    with pytest.raises(EnvironmentVariableError, match="OMPI_COMM_WORLD_SIZE"):
        distributed.launched()


def _cli(args, env_changes, tmp_path, blocked_mpi4py=False):
    env = {k: v for k, v in os.environ.items() if k not in (*distributed.SIZE_VARIABLES, *distributed.RANK_VARIABLES)}
    env.update(env_changes, PYTHONPATH=ROOT, OPENBLAS_NUM_THREADS="1")
    if blocked_mpi4py:
        shim = tmp_path / "shim" / "mpi4py"
        shim.mkdir(parents=True)
        (shim / "__init__.py").write_text("raise ImportError('No module named mpi4py (blocked by the test)')\n")
        env["PYTHONPATH"] = f"{shim.parent}{os.pathsep}{ROOT}"
    code = ("import sys; from minitransformer.__main__ import main; code = main(sys.argv[1:]); "
            "print('mpi4py imported' if 'mpi4py' in sys.modules else 'no mpi4py', file=sys.stderr); sys.exit(code)")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp_path)


def test_without_mpi4py_several_ranks_get_one_line_naming_the_extra(tmp_path):
    args = ["train", "--data", _small_tsv(tmp_path), "--preset", "tiny", "--steps", "2", "--out",
            str(tmp_path / "run")]
    for rank, lines in (("0", 1), ("1", 0)):            # rank 0 says it; the others exit alike, silently
        out = _cli(args, {"PMI_SIZE": "2", "PMI_RANK": rank}, tmp_path / rank, blocked_mpi4py=True)
        errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
        assert out.returncode == 2 and len(errors) == lines, out.stderr
        if lines:
            assert "rank 0 of 2 (PMI_SIZE=2), but mpi4py is not installed" in errors[0]
            assert "pip install -e '.[mpi]'" in errors[0] and errors[0].endswith("(PMI_SIZE)")


def _small_tsv(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{w}\t{w[::-1]}\n" for w in (f"{i:b}" for i in range(1, 61))), encoding="utf-8")
    return str(path)


@pytest.mark.slow
def test_a_single_process_never_imports_mpi4py(tmp_path):
    args = ["train", "--data", _small_tsv(tmp_path), "--preset", "tiny", "--steps", "2", "--valid-every", "2",
            "--out", str(tmp_path / "run")]
    for env in ({}, {"PMI_SIZE": "1", "PMI_RANK": "0"}):                 # plain, and mpiexec -n 1
        out = _cli(args, env, tmp_path)
        assert out.returncode == 0, out.stderr
        assert out.stderr.strip().splitlines()[-1] == "no mpi4py"
        args.append("--overwrite")


def test_only_train_runs_on_several_ranks(tmp_path):
    out = _cli(["translate", "--checkpoint", "none.npz", "1 2"], {"PMI_SIZE": "2", "PMI_RANK": "0"}, tmp_path)
    assert out.returncode == 2
    assert "error: only train runs on several ranks; run translate as one process" in out.stderr


def test_the_watchdog_ends_a_rank_that_waits_too_long():
    code = textwrap.dedent("""
        import time
        from minitransformer.distributed import _Watchdog
        dog = _Watchdog(0.5, lambda what, waited: f"waited {waited:g} s in {what}")
        with dog.guard("the first wait"):
            time.sleep(1.0)                 # the first wait may take ten timeouts (ranks start unevenly)
        with dog.guard("a test wait"):
            time.sleep(0.1)                 # a short wait passes
        with dog.guard("the gradient allreduce of step 3"):
            time.sleep(20)                  # a rank that never answers
        print("not reached")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == "error: waited 0.5 s in the gradient allreduce of step 3"


def test_a_launcher_of_another_mpi_library_is_named_not_run_as_n_copies(tmp_path):
    """Open MPI's mpirun starting this MPICH-built mpi4py: every process would be rank 0 of 1 and
    write the same files. Faked here with Open MPI's variables; mpi4py starts MPI as a singleton."""
    pytest.importorskip("mpi4py", reason="the [mpi] extra is not installed")
    args = ["train", "--data", _small_tsv(tmp_path), "--preset", "tiny", "--steps", "2", "--out", str(tmp_path / "r")]
    out = _cli(args, {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}, tmp_path)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 2 and len(errors) == 1, out.stderr
    assert "started 2 ranks (OMPI_COMM_WORLD_SIZE=2), but mpi4py's MPI sees 1" in errors[0]
    assert "different MPI libraries" in errors[0] and not (tmp_path / "r").exists()


# -- issue 36, item 5: a sane timeout, one run's configuration on every rank, a word after a SIGKILL -------

@pytest.mark.parametrize("raw", ["0.01", "4.9", "-1", "inf", "nan", "soon"])
def test_the_mpi_timeout_has_a_sane_minimum(monkeypatch, raw):
    """MINITRANSFORMER_MPI_TIMEOUT=0.01 was accepted, and every run then died at step 0 blaming the ranks."""
    monkeypatch.setenv(distributed.TIMEOUT_VARIABLE, raw)
    with pytest.raises(EnvironmentVariableError, match=f"MINITRANSFORMER_MPI_TIMEOUT='{raw}' is not valid: expected a "
                                                       "number of seconds ≥ 5 \\(0: no timeout"):
        distributed._env_timeout()
    for ok, value in (("0", 0.0), ("5", 5.0), ("", distributed.DEFAULT_TIMEOUT), (" 60 ", 60.0)):
        monkeypatch.setenv(distributed.TIMEOUT_VARIABLE, ok)
        assert distributed._env_timeout() == value


class _Others(SingleProcess):
    """Rank 0 of ``len(others) + 1``, the other ranks answering an allgather with ``others``."""

    def __init__(self, *others):
        self.size, self.others = len(others) + 1, others

    def allgather(self, obj, what):
        self.asked = what
        return [obj, *(other(obj) for other in self.others)]


def test_ranks_started_with_another_model_configuration_are_named_before_the_first_collective():
    """mpiexec -n 1 ... : -n 1 ... --set d_ff=32 crashed inside MPI ("Message truncated", 20 lines)."""
    identity = {"model configurations": {"d_model": 32, "d_ff": 64}, "training settings": {"seed": 0, "steps": 10},
                "data": {"corpus": "abc"}}

    def narrow(obj):
        return {**obj, "model configurations": {"d_model": 32, "d_ff": 32}}

    def same(obj):
        return obj

    comm = _Others(same, narrow)
    with pytest.raises(RanksOutOfSync) as caught:
        distributed.check_same_run(comm, identity)
    assert str(caught.value) == ("the ranks were started with different model configurations (d_ff: 64 on rank 0, "
                                 "64 on rank 1, 32 on rank 2): every rank of mpiexec must be given the same options")
    assert comm.asked == "the check that every rank runs the same configuration"
    distributed.check_same_run(_Others(same), identity)                      # equal: nothing to say
    distributed.check_same_run(SingleProcess(), identity)                    # one process: nothing to compare

    def other_data(obj):
        return {**obj, "data": {"corpus": "xyz"}}

    with pytest.raises(RanksOutOfSync, match=r"different data \(corpus: 'abc' on rank 0, 'xyz' on rank 1\)"):
        distributed.check_same_run(_Others(other_data), identity)


def _sentinel_run(tail: str) -> subprocess.CompletedProcess:
    code = textwrap.dedent("""
        import os, signal, sys
        from minitransformer import distributed
        distributed.start_sentinel("error: nothing saved yet")
        distributed.sentinel_say("error: the last checkpoint, run/checkpoint.npz, is from step 10; resume with: X")
    """) + textwrap.dedent(tail)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": ROOT})


@pytest.mark.skipif(not hasattr(os, "setsid"), reason="the sentinel runs in a session of its own (POSIX)")
def test_the_sentinel_speaks_once_for_a_rank_0_that_dies_without_a_word():
    """A SIGKILLed rank leaves no message; MPICH's mpiexec kills rank 0 at once. The sentinel, a small process
    of its own session that rank 0 started, prints the last line rank 0 gave it, unless rank 0 said goodbye."""
    killed = _sentinel_run("os.kill(os.getpid(), signal.SIGKILL)")
    assert killed.returncode == -9
    assert killed.stderr == "error: the last checkpoint, run/checkpoint.npz, is from step 10; resume with: X\n"
    quiet = _sentinel_run("distributed.sentinel_quiet(); os.kill(os.getpid(), signal.SIGKILL)")
    assert quiet.returncode == -9 and quiet.stderr == ""
    assert _sentinel_run("distributed.sentinel_quiet()").stderr == ""


class _SignalInTheStopCheck(SingleProcess):
    """Rank 0 of 2 whose peer has no stop to report; the first stop check is where a signal lands.

    A real signal is sent while the collective is "in progress": Python runs its handler only when
    the call returns, after this rank's 0 was sent, which is what happens inside mpi4py's Allreduce.
    """

    size = 2

    def __init__(self):
        self.sent: list[int] = []

    def max_int(self, value, what):
        self.sent.append(value)
        if len(self.sent) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return max(value, 0)


def test_a_signal_that_lands_in_the_stop_check_is_kept_for_the_next_check():
    """Before the fix the agreed 0 overwrote the signal the handler had just recorded: when it landed
    there on every rank, mpiexec's run forgot the stop and trained on (a flaky hang in test_mpi)."""
    comm = _SignalInTheStopCheck()
    with StopSignals(announce=False) as stop:
        assert agree_to_stop(comm, stop, step=7) is False        # the ranks agreed on "no stop" for this step
        assert stop.signum == signal.SIGTERM                      # ... and the signal is still recorded
        assert agree_to_stop(comm, stop, step=8) is True          # the next check sends it: every rank stops
    assert comm.sent == [0, int(signal.SIGTERM)]
    assert stop.signum == signal.SIGTERM


def test_every_rank_takes_the_signal_another_rank_received():
    class Peer(SingleProcess):
        size = 2

        def max_int(self, value, what):
            return max(value, int(signal.SIGINT))

    with StopSignals(announce=False) as stop:
        assert agree_to_stop(Peer(), stop, step=3) is True
        assert stop.signum == signal.SIGINT
