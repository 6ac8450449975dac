"""--batch-size is the global batch everywhere (issue 33.6): --accumulate K cuts it in time as mpiexec -n K
cuts it in space (tests/test_mpi.py compares the three runs from the command line). A checkpoint written
while --accumulate K meant K batches of --batch-size per step is refused on resume, naming the options
that give updates of the same size; one written with accumulate 1 meant the same and resumes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from minitransformer.cli import main
from minitransformer.distributed import shard_batch, split_batch

WORDS = "one two three four five six seven eight".split()


@pytest.fixture()
def tsv(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in WORDS for b in WORDS), encoding="utf-8")
    return str(path)


def _train(tsv, out, *extra):
    return ["train", "--data", tsv, "--level", "word", "--preset", "tiny", "--no-progress", "--out", str(out),
            "--batch-size", "8", *extra]


def _as_written_before(path, accumulate):
    """The checkpoint as the package wrote it before the global batch: no marker, accumulate as given."""
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["meta"]))
    meta["extra"].pop("global_batch", None)
    meta["extra"]["settings"]["accumulate"] = accumulate
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(path, **arrays)


def test_micro_batches_are_cut_as_shards_are():
    indices, costs = list(range(10, 30)), [3 + k % 7 for k in range(20)]
    assert split_batch(indices, costs, 3) == [shard_batch(indices, costs, r, 3) for r in range(3)]
    assert split_batch([4, 5], [2, 2], 3) == [[4], [5], []]


def test_a_checkpoint_of_the_old_accumulate_is_refused_and_one_without_accumulation_resumes(tsv, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_train(tsv, out, "--steps", "2", "--accumulate", "2")) == 0
    ckpt = out / "checkpoint.npz"
    _as_written_before(ckpt, 2)
    capsys.readouterr()
    assert main(_train(tsv, out, "--steps", "4", "--resume", str(ckpt))) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith(f"error: {ckpt} was written when --accumulate 2 meant 2 batches of --batch-size each per "
                          "step; --batch-size and --max-tokens now mean the step's whole batch"), err
    assert "Start a new run with --batch-size 16 --accumulate 2 for updates of the same size" in err
    assert err.endswith(f"(--resume {ckpt})")
    _as_written_before(ckpt, 1)                     # accumulate 1 meant the same under both rules
    assert main(_train(tsv, out, "--steps", "4", "--resume", str(ckpt))) == 0
    assert "trained 2 steps (steps 3-4, resumed at step 2)" in capsys.readouterr().out
