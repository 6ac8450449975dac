"""Check before you allocate, and load only what can be saved again (issue 19, items 2, 8, 11, 12):
the loader applies the save-time rules (dtype, finiteness, the too-large-to-square bound), refuses a
config whose pad_id disagrees with its vocabulary, reads entry sizes from the zip directory and
shapes from the .npy headers before any data, and refuses a model that cannot fit in memory, naming
the field. Out-of-memory messages name what caused them; the layers name empty inputs and integer
logits instead of failing inside NumPy."""

from __future__ import annotations

import io
import json
import time
import tracemalloc
import zipfile

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.__main__ import main
from minitransformer.checkpoint import CheckpointError, NonFiniteStateError, load_checkpoint, save_checkpoint
from minitransformer.data.registry import PRESETS
from minitransformer.data.vocab import Vocab
from minitransformer.errors import ShapeError
from minitransformer.layers.attention import MultiHeadAttention
from minitransformer.layers.loss import LabelSmoothedCrossEntropy
from minitransformer.model import ModelTooLargeError, Transformer, check_fits
from minitransformer.optim import Adam

VOCAB = Vocab(list("abcdefghij"))
WORDS = "one two three four five six seven eight".split()


def _model():
    return Transformer(PRESETS["tiny"].with_(vocab_size=len(VOCAB)), seed=0)


@pytest.fixture
def saved(tmp_path):
    model = _model()
    opt = Adam(model.parameters(), lr=1e-3)
    path = tmp_path / "checkpoint.npz"
    save_checkpoint(str(path), model, VOCAB, opt, step=3, extra={"levels": {"src": "word", "tgt": "word"}})
    return path


def _arrays(path):
    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}


def _write(path, arrays, meta_changes=None):
    if meta_changes:
        meta = json.loads(str(arrays["meta"]))
        for key, value in meta_changes.items():
            target = meta
            *parents, last = key.split(".")
            for parent in parents:
                target = target[parent]
            target[last] = value
        arrays = {**arrays, "meta": np.array(json.dumps(meta))}
    np.savez(path, **arrays)


# -- item 2: what saving refuses, loading refuses -----------------------------------------------

E = "param/E"
BAD_PARAMETERS = [
    ("float16", lambda a: a.astype(np.float16), "has dtype float16; checkpoints hold float32 or float64 arrays"),
    ("1e30", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 0, np.float32(1e30), a).astype(a.dtype),
     "has entries up to 1e+30, too large to square in float32"),
    ("nan", lambda a: np.full_like(a, np.nan), "contains NaN"),
    ("inf", lambda a: np.full_like(a, -np.inf), "contains inf"),
    ("int", lambda a: a.astype(np.int32), "must be a float array, got dtype int32"),
]


@pytest.mark.parametrize("name, doctor, message", BAD_PARAMETERS, ids=[b[0] for b in BAD_PARAMETERS])
def test_the_loader_refuses_what_the_saver_refuses(saved, tmp_path, name, doctor, message):
    arrays = _arrays(saved)
    arrays[E] = doctor(arrays[E])
    for key in (k for k in arrays if k.startswith("param/") and name == "float16"):
        arrays[key] = arrays[key].astype(np.float16)          # a whole float16 model, not one odd tensor
    _write(saved, arrays)
    with pytest.raises(CheckpointError, match=f"^{saved}: 'param/E' " + message.replace("+", r"\+")):
        load_checkpoint(str(saved))
    # ... and the same state is refused by save_checkpoint: one rule.
    model = _model()
    model.E.data = doctor(model.E.data)
    if name == "float16":
        for p in model.parameters():
            p.data = p.data.astype(np.float16)
    with pytest.raises((CheckpointError, NonFiniteStateError), match="param/E " + message.replace("+", r"\+")):
        save_checkpoint(str(tmp_path / "again.npz"), model, VOCAB)
    assert not (tmp_path / "again.npz").exists()


def test_a_large_finite_weight_that_squares_is_accepted_by_both(saved, tmp_path):
    arrays = _arrays(saved)
    arrays[E] = np.full_like(arrays[E], 1e18)                    # (1e18)² = 1e36 < 3.4e38: fine in float32
    _write(saved, arrays)
    model = load_checkpoint(str(saved)).model
    save_checkpoint(str(tmp_path / "again.npz"), model, VOCAB)


@pytest.mark.parametrize("name", ["float16", "1e30"])
def test_resuming_from_a_checkpoint_that_could_not_be_saved_again_is_refused_before_any_step(tmp_path, capsys,
                                                                                            name):
    """Issue 19: such a file used to load, train, then fail to save: every resumed step was lost."""
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in WORDS for b in WORDS))
    train = ["train", "--data", str(data), "--level", "word", "--preset", "tiny", "--no-progress", "--out",
             str(tmp_path / "run")]
    assert main(train + ["--steps", "2"]) == 0
    path = tmp_path / "run" / "checkpoint.npz"
    arrays = _arrays(path)
    doctor = dict((b[0], b[1]) for b in BAD_PARAMETERS)[name]
    for key in [k for k in arrays if k.startswith("param/")][: None if name == "float16" else 1]:
        arrays[key] = doctor(arrays[key])
    _write(path, arrays)
    before = path.read_bytes()
    capsys.readouterr()
    assert main(train + ["--steps", "6", "--resume", str(path)]) == 2
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("error: ")]
    assert line.endswith(f"(--resume {path})") and "'param/E'" in line, line
    assert path.read_bytes() == before and "RuntimeWarning" not in err


def test_translating_a_float16_checkpoint_is_one_named_error(saved, capsys):
    arrays = _arrays(saved)
    for key in [k for k in arrays if k.startswith("param/")]:
        arrays[key] = arrays[key].astype(np.float16)
    _write(saved, arrays)
    assert main(["translate", "--checkpoint", str(saved), "a b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: 'param/E' has dtype float16") and err.rstrip().endswith(f"(--checkpoint {saved})")
    assert "RuntimeWarning" not in err


# -- item 8: special ids that disagree with the vocabulary -------------------------------------

@pytest.mark.parametrize("pad_id", [1, 2, 3, 13])
def test_a_pad_id_that_is_not_the_vocabularys_is_refused(saved, pad_id):
    _write(saved, _arrays(saved), {"config.pad_id": pad_id})
    with pytest.raises(CheckpointError, match=f"config has pad_id={pad_id}, but the vocabulary's <pad> is id 0"):
        load_checkpoint(str(saved))


# -- item 11: sizes from the zip directory and the .npy headers, before any data is read -------

def _peak_bytes_while(fn):
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_a_small_file_with_a_huge_compressed_entry_is_refused_without_reading_it(saved):
    arrays = _arrays(saved)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for key, value in arrays.items():
            if key != E:
                with zf.open(f"{key}.npy", "w") as f:
                    np.lib.format.write_array(f, value)
        with zf.open(f"{E}.npy", "w", force_zip64=True) as f:       # 200 MB of zeros, a few hundred kB zipped
            np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (50_000_000,)})
            chunk = bytes(10_000_000)
            for _ in range(20):
                f.write(chunk)
    saved.write_bytes(buffer.getvalue())
    assert saved.stat().st_size < 2_000_000

    def load():
        with pytest.raises(CheckpointError, match=r"the entry 'param/E' holds 200.0 MB, but the model's config "
                                                  r"needs at most 3.6 kB for it"):
            load_checkpoint(str(saved))
    assert _peak_bytes_while(load) < 20_000_000


@pytest.mark.parametrize("key, header, message", [
    (E, {"descr": "<f4", "fortran_order": False, "shape": (10**9,)},
     r"'param/E' has shape \(1000000000,\), the config expects \(14, 32\)"),
    ("meta", {"descr": "<U100000000", "fortran_order": False, "shape": ()},
     r"the entry 'meta' would take 400.0 MB, more than the 67.1 MB the config allows for it"),
    (E, {"descr": "|O", "fortran_order": False, "shape": (14, 32)}, "holds object objects, not numbers"),
])
def test_a_header_that_lies_about_its_size_is_refused_before_allocating(saved, key, header, message):
    """A tiny entry whose .npy header claims a huge array: NumPy's own reader would allocate it."""
    arrays = _arrays(saved)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, value in arrays.items():
            with zf.open(f"{name}.npy", "w") as f:
                if name == key:
                    np.lib.format.write_array_header_1_0(f, header)
                    f.write(b"\0" * 64)
                else:
                    np.lib.format.write_array(f, value)
    saved.write_bytes(buffer.getvalue())

    def load():
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(str(saved))
    assert _peak_bytes_while(load) < 20_000_000


@pytest.mark.parametrize("field, value", [("max_len", 10**10), ("d_ff", 10**10), ("N", 10**6), ("d_model", 2**20),
                                          ("vocab_size", 10**11)])
def test_a_config_that_cannot_fit_is_refused_naming_the_field_before_allocating(saved, field, value):
    changes = {f"config.{field}": value}
    if field == "vocab_size":
        changes["vocab"] = {"tokens": [f"t{i}" for i in range(10)]}   # refused for the size, not the vocabulary
    _write(saved, _arrays(saved), changes)
    t0 = time.perf_counter()
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(str(saved))
    assert time.perf_counter() - t0 < 5
    if field != "vocab_size":
        assert f"make {field}={value} smaller" in str(caught.value)
        assert "more than the" in str(caught.value) and "this machine has" in str(caught.value)


def test_check_fits_names_each_part(monkeypatch):
    cfg = PRESETS["tiny"].with_(vocab_size=14)
    check_fits(cfg, "float32", limit=10**9)                      # a small model fits in a gigabyte
    with pytest.raises(ModelTooLargeError) as caught:
        check_fits(cfg.with_(max_len=10**7), "float32", limit=10**9)
    assert caught.value.field == "max_len" and caught.value.needed > caught.value.limit == 10**9
    assert "the positional table (max_len × d_model)" in str(caught.value)
    monkeypatch.setattr(backend, "memory_limit", lambda xp=None: 10**6)
    with pytest.raises(ModelTooLargeError):
        Transformer(PRESETS["translate"].with_(vocab_size=100))   # the model checks before it allocates


@pytest.mark.parametrize("assignment, field", [("d_ff=10000000000", "d_ff"), ("max_len=10000000000", "max_len"),
                                               ("N=1000000", "N")])
def test_train_set_of_a_size_that_cannot_fit_is_one_line_naming_the_option(tmp_path, capsys, assignment, field):
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in WORDS for b in WORDS))
    t0 = time.perf_counter()
    rc = main(["train", "--data", str(data), "--level", "word", "--preset", "tiny", "--set", assignment,
               "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert time.perf_counter() - t0 < 30
    (line,) = [line for line in err.splitlines() if line.startswith("error: ")]
    assert f"make {field}={assignment.split('=')[1]} smaller" in line
    assert line.endswith(f"(--preset tiny --set {assignment})") and "--batch-size" not in line


# -- item 11: every out-of-memory message names its cause --------------------------------------

def _oom(*args, **kwargs):
    raise MemoryError()


@pytest.fixture
def corpus(tmp_path):
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in WORDS for b in WORDS))
    return str(data)


def _train_argv(corpus, tmp_path, *extra):
    return ["train", "--data", corpus, "--level", "word", "--preset", "tiny", "--no-progress", "--steps", "2",
            "--out", str(tmp_path / "r"), *extra]


@pytest.mark.parametrize("target, says, which", [
    ("minitransformer.data.registry.load_task", "out of memory reading the data", "(--data {corpus})"),
    ("minitransformer.runsetup.make_trainer", "out of memory building the model; choose a smaller --preset",
     "(--preset tiny)"),
    ("minitransformer.train.Trainer.run", "out of memory while training; try a smaller --batch-size", None),
    ("minitransformer.translate.score_translations", "out of memory scoring the test set; the checkpoint is saved",
     "(--eval)"),
])
def test_out_of_memory_in_train_names_its_cause(corpus, tmp_path, monkeypatch, capsys, target, says, which):
    monkeypatch.setattr(target, _oom)
    rc = main(_train_argv(corpus, tmp_path, "--eval", "greedy", "beam4"))
    err = capsys.readouterr().err
    assert rc == 1, err
    (line,) = [line for line in err.splitlines() if line.startswith("error: ")]
    assert line.startswith(f"error: {says}"), line
    if which is not None:
        assert line.endswith(which.format(corpus=corpus)), line
    if "training" not in says:
        assert "--batch-size" not in line                # the batch was not the cause


def test_out_of_memory_in_translate_and_evaluate_names_the_beam(corpus, tmp_path, monkeypatch, capsys):
    assert main(_train_argv(corpus, tmp_path)) == 0
    ckpt = str(tmp_path / "r" / "checkpoint.npz")
    capsys.readouterr()
    monkeypatch.setattr("minitransformer.translate.translate_tokens", _oom)
    assert main(["translate", "--checkpoint", ckpt, "--beam", "50", "one two"]) == 1
    assert capsys.readouterr().err.strip() == ("error: out of memory translating 1 sentence(s); a smaller --beam, or "
                                               "fewer sentences at a time (--beam 50)")
    assert main(["evaluate", "--checkpoint", ckpt, "--data", corpus, "--beam", "50"]) == 1
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("error: ")]
    assert line.startswith("error: out of memory scoring 64 pairs; a smaller --beam, or --limit")
    assert line.endswith("(--beam 50)") and "--batch-size" not in line


# -- item 12: the layer API names empty inputs and integer logits --------------------------------

def test_attention_over_no_positions_is_a_named_shape_error():
    attn = MultiHeadAttention(8, 2, np.random.default_rng(0))
    with pytest.raises(ShapeError, match="at least one position; got S_q=0, S_k=0"):
        attn.forward(np.zeros((1, 0, 8), np.float32))
    with pytest.raises(ShapeError, match="got S_q=3, S_k=0"):
        attn.forward(np.zeros((1, 3, 8), np.float32), np.zeros((1, 0, 8), np.float32))


@pytest.mark.parametrize("which", ["src", "tgt_in"])
def test_the_model_with_an_empty_sentence_is_a_named_shape_error(which):
    model = _model()
    ids = {"src": np.ones((2, 3), np.int64), "tgt_in": np.ones((2, 3), np.int64)}
    ids[which] = np.ones((2, 0), np.int64)
    with pytest.raises(ShapeError, match=f"{which} has length 0"):
        model.forward(ids["src"], ids["tgt_in"])
    if which == "src":
        with pytest.raises(ShapeError, match="src has length 0"):
            model.encode(ids["src"])


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_])
def test_the_loss_of_integer_logits_is_a_named_type_error(dtype):
    loss = LabelSmoothedCrossEntropy(0, 0.1)
    with pytest.raises(TypeError, match=f"cross_entropy: logits must be a float array, got dtype {np.dtype(dtype)}"):
        loss.forward(np.zeros((2, 3, 5), dtype), np.ones((2, 3), np.int64))


@pytest.mark.parametrize("B, T", [(0, 3), (2, 0)])
def test_the_loss_of_an_empty_batch_says_so_not_every_target_is_padding(B, T):
    loss = LabelSmoothedCrossEntropy(0, 0.1)
    with pytest.raises(ShapeError, match=f"no target positions \\(B={B}, T={T}\\)") as caught:
        loss.forward(np.zeros((B, T, 5), np.float32), np.ones((B, T), np.int64))
    assert "padding" not in str(caught.value)
    with pytest.raises(ValueError, match="every target is padding"):           # the real case still says so
        loss.forward(np.zeros((1, 2, 5), np.float32), np.zeros((1, 2), np.int64))


# -- item 10 (the command line's half): options used only after training, checked before the first step

# When each `train` option is used. A new option must be added here; one used only at the end needs a
# case below that refuses a bad value before the first step. The options made of TrainSettings fields
# (options.add_options) need no entry: each is checked when the settings are built, before step 1.
TRAIN_OPTIONS = {
    "setup": {"--task", "--data", "--level", "--bpe-merges", "--header", "--max-length", "--preset", "--set", "--seed",
              "--out",
              "--overwrite", "--resume", "--backend", "--debug", "--help"},
    "training": {"--steps", "--batch-size", "--max-tokens", "--accumulate", "--lr-factor", "--warmup", "--clip-norm",
                 "--valid-every", "--checkpoint-every", "--keep-last", "--stop-when-solved", "--check-sync-every",
                 "--no-progress",
                 "--progress-every"},
    "end": {"--eval",
            "--average-last"},     # refused before step 1: test_keep_last_average_cli.py, test_a_bad_average_last_...
}


def test_every_train_option_is_classified():
    from minitransformer.cli import build_parser

    parser = build_parser()
    train = next(a for a in parser._subparsers._group_actions[0].choices.values() if a.prog.endswith("train"))
    options = {s for action in train._actions for s in action.option_strings if s.startswith("--")}
    from_settings = {s for action in train._actions if action.dest in train.get_default("settings_options")
                     for s in action.option_strings}
    assert "--accumulate" in from_settings and "--warmup" in from_settings and "--eval" not in from_settings
    assert options - from_settings == set().union(*TRAIN_OPTIONS.values()) - from_settings


def test_an_eval_beam_that_cannot_fit_in_memory_is_refused_before_the_first_step(corpus, tmp_path, monkeypatch,
                                                                                   capsys):
    """--eval is used only after the last step: a decoder that cannot fit would lose the whole run's report."""
    monkeypatch.setattr(backend, "memory_limit", lambda xp=None: 2_000_000)   # the tiny model fits; beam 64 not
    out = tmp_path / "never"
    rc = main(["train", "--data", corpus, "--level", "word", "--preset", "tiny", "--no-progress", "--steps", "2",
               "--out", str(out), "--eval", "greedy", "beam64"])
    captured = capsys.readouterr()
    assert rc == 2, captured.err
    (line,) = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert line.startswith("error: decoding 3 sentences with beam 64 at the end (the test set) would need about ")
    assert line.endswith("choose a smaller beam (--eval)")
    assert not (out / "checkpoint.npz").exists() and "valid loss" not in captured.out       # nothing trained
    monkeypatch.undo()
    assert main(["train", "--data", corpus, "--level", "word", "--preset", "tiny", "--no-progress", "--steps", "2",
                 "--out", str(out), "--eval", "greedy", "beam64"]) == 0                    # fits here


def test_decoding_memory_grows_with_the_beam_and_the_sentence_length():
    from minitransformer.decoding import GREEDY, Beam
    from minitransformer.translate import decoding_bytes

    model = _model()
    greedy, beam = decoding_bytes(model, 100, 10, GREEDY), decoding_bytes(model, 100, 10, Beam(8))
    assert beam > 7 * greedy
    assert decoding_bytes(model, 100, 20, GREEDY) > greedy
    assert decoding_bytes(model, 5, 10, GREEDY) < greedy                  # a batch of 5 rows, not 100


@pytest.mark.parametrize("command, limit", [("translate", 1_000_000), ("evaluate", 2_500_000)])
def test_a_beam_that_cannot_fit_is_refused_before_decoding(corpus, tmp_path, monkeypatch, capsys, command, limit):
    assert main(_train_argv(corpus, tmp_path)) == 0
    capsys.readouterr()
    monkeypatch.setattr(backend, "memory_limit", lambda xp=None: limit)      # greedy fits, beam 64 does not
    monkeypatch.setattr("minitransformer.translate.translate_tokens", _oom)       # never reached
    ckpt = str(tmp_path / "r" / "checkpoint.npz")
    argv = (["translate", "--checkpoint", ckpt, "--beam", "64", "one two"] if command == "translate" else
            ["evaluate", "--checkpoint", ckpt, "--data", corpus, "--beam", "64"])
    assert main(argv) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert "with beam 64 would need about" in line and line.endswith("choose a smaller beam (--beam 64)"), line
