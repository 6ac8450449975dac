"""The package's CuPy path, run on a CPU through a strict stand-in for CuPy (tests/fake_cupy.py).

The stand-in fails where CuPy fails (implicit conversion to NumPy, a host array inside a device
operation, a function CuPy does not have) and counts the calls that make the CPU wait for the GPU
("host syncs"). Here the layers' float64 gradient checks, a short training run, greedy and beam
decoding and a checkpoint round trip run through it, and every result is compared with the NumPy
run of the same seed.

The tests that take ``device_cp`` (tests/conftest.py) run twice: ``[stand-in]`` everywhere, and
``[cupy]`` on the real CuPy where a CUDA device is present (``python -m pytest -m gpu``; skipped
elsewhere). On a GPU they check the package's CuPy path on the device itself, and the stand-in's
claims about what CuPy refuses. The host-sync counts need the stand-in and run only there.

Host-sync budget. One training step (Trainer.train_step: forward, loss, backward, Adam) may
make at most SYNCS_PER_STEP host syncs, and the number may not depend on the model's size:
    3  the token-id range checks of the two embeddings and the loss targets (one bool each)
    2  the loss: its count of non-pad tokens (int) and its value (float), returned to the caller
    1  the global gradient norm: clip_grad_norm's when clipping, else Adam's (for the log)
A sync per layer or per parameter, inside the loop, fails test_host_syncs_per_training_step.
Decoding, per output position (DECODE_SYNCS_PER_POSITION, again the same for every depth), for
every strategy (greedy, sampling with and without top-k / top-p, beam search):
    2  "may the search stop?" (bool, asked through backend.host_flag, the one place decoding asks)
       and the embedding's check of the new tokens' ids (bool)
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import io
import re
import sys

import fake_cupy
import numpy as np
import pytest
from conftest import is_stand_in

from minitransformer import backend
from minitransformer.__main__ import main
from minitransformer.checkpoint import load_checkpoint, save_checkpoint
from minitransformer.data.batching import make_source_batch
from minitransformer.data.registry import load_task
from minitransformer.decoding import Beam, Greedy, Sample, beam_search, decode, greedy_decode
from minitransformer.gradcheck import check_layer, gradcheck
from minitransformer.layers.attention import (
    MultiHeadAttention,
    attention_backward,
    attention_forward,
)
from minitransformer.layers.dropout import Dropout
from minitransformer.layers.embedding import Embedding, TiedOutputProjection
from minitransformer.layers.feedforward import FeedForward
from minitransformer.layers.layernorm import LayerNorm
from minitransformer.layers.linear import Linear
from minitransformer.layers.loss import LabelSmoothedCrossEntropy
from minitransformer.layers.parameter import Layer, Parameter
from minitransformer.layers.positional import PositionalEncoding
from minitransformer.layers.residual import Residual
from minitransformer.model import (
    DecoderLayer,
    EncoderLayer,
    Transformer,
    TransformerConfig,
)
from minitransformer.runsetup import build_model
from minitransformer.train import Trainer, TrainSettings, encode_pairs
from minitransformer.translate import attention_maps

SYNCS = fake_cupy.SYNCS
SYNCS_PER_STEP = 6
DECODE_SYNCS_PER_POSITION = 2


@contextlib.contextmanager
def backend_as(name: str):
    """Build new parameters on ``name`` inside the block (to make the NumPy twin of a stand-in model)."""
    before = backend.backend_name()
    backend.set_backend(name)
    try:
        yield
    finally:
        backend.set_backend(before)


def _host(a):
    return backend.to_numpy(a) if a is not None else None


# ---------------------------------------------------------------------------------------------
# The stand-in itself: each check here fails if the stand-in stops behaving like CuPy
# ---------------------------------------------------------------------------------------------

def test_implicit_conversion_to_numpy_raises(device_cp):
    x = device_cp.asarray(np.arange(6.0).reshape(2, 3))
    h = np.arange(6.0).reshape(2, 3)
    conversions = {
        "numpy.asarray": np.asarray,
        "numpy.array": np.array,
        "numpy.savez": lambda a: np.savez(io.BytesIO(), a=a),
        "numpy.add.at": lambda a: np.add.at(a, [0], 1.0),
    }
    if not is_stand_in(device_cp):
        # CuPy 14.2 with NumPy 2.5 converts implicitly (measured on an H200, 2026-12-04): a hidden
        # device-to-host copy. The stand-in keeps refusing, so the package never leans on one.
        pytest.skip("the real CuPy 14 converts implicitly; the stand-in is stricter on purpose")
    for convert in conversions.values():
        convert(h)                                             # a host array is fine ...
        with pytest.raises(TypeError):                         # ... a device array is not
            convert(x)
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        np.asarray(x)


def test_host_array_inside_a_device_operation_raises(device_cp):
    h = np.arange(6.0).reshape(2, 3)
    x = device_cp.asarray(h)
    mixes = {
        "device + host": lambda: x + h,
        "host + device": lambda: h + x,
        "host * device": lambda: h * x,
        "device @ host": lambda: x @ h.T,
        "cupy.where(host mask)": lambda: device_cp.where(h > 2, x, 0.0),
        "cupy.concatenate": lambda: device_cp.concatenate([x, h]),
        "cupy.matmul": lambda: device_cp.matmul(x, h.T),
    }
    for name, mix in mixes.items():
        with pytest.raises(TypeError, match="numpy.ndarray"):
            mix()
            pytest.fail(f"{name} did not raise")
    with pytest.raises(TypeError):
        x += h
    with pytest.raises(ValueError, match="cannot be used for fill"):
        x[0:2] = h                                   # CuPy's fill takes scalars only
    # What CuPy does accept: scalars (Python and NumPy), host indices, advanced-index values.
    np.testing.assert_array_equal((x * 2.0 + np.float32(1.0)).get(), h * 2 + 1)
    x[[0, 1]] = h                                    # advanced index: CuPy copies the values over
    x[...] = 0.5
    np.testing.assert_array_equal(x[np.array([1])].get(), np.full((1, 3), 0.5))


def test_numpy_ufuncs_and_functions_run_on_the_device(device_cp):
    h = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    x = device_cp.asarray(h)
    for result, expected in [(np.exp(x), np.exp(h)), (np.maximum(x, 0.0), np.maximum(h, 0.0)),
                             (np.concatenate([x, x]), np.concatenate([h, h])), (np.sum(x, axis=0), h.sum(axis=0))]:
        assert isinstance(result, device_cp.ndarray)
        np.testing.assert_allclose(result.get(), expected)


def test_reductions_and_elements_stay_on_the_device(device_cp):
    x = device_cp.asarray(np.arange(6.0).reshape(2, 3))
    for value in (x.sum(), x.max(), x[1, 2], device_cp.vdot(x.reshape(-1), x.reshape(-1)), x.argmax(),
                  device_cp.allclose(x, x), device_cp.count_nonzero(x)):
        assert isinstance(value, device_cp.ndarray) and value.ndim == 0, type(value)
    assert SYNCS.total == 0 or not is_stand_in(device_cp)     # nothing above waited for the device
    assert x.astype(np.float64, copy=False) is x and x.astype(np.float32) is not x


def test_transfers_copy_both_ways(device_cp):
    h = np.arange(4.0)
    x = device_cp.asarray(h)
    h[0] = -1.0                                      # the device copy does not alias the host array
    back = x.get()
    back[1] = -2.0                                   # nor does the host copy alias the device
    np.testing.assert_array_equal(x.get(), [0.0, 1.0, 2.0, 3.0])
    assert type(backend.to_numpy(x)) is np.ndarray
    if is_stand_in(device_cp):
        assert dict(SYNCS.kinds) == {"get": 3} and sum(SYNCS.to_device.values()) == 1


def test_host_syncs_are_counted_by_kind_and_call_site(fake_cp):
    x = fake_cp.asarray(np.array([[1.0, -2.0], [3.0, 4.0]]))
    y = (x * 2.0).sum(axis=0) + x.max()              # device work only: no sync
    assert SYNCS.total == 0
    float(y[0])
    int(x[0, 0])
    bool(x[1, 1] > 0)
    x[0, 0].item()
    x.tolist()
    x.get()
    fake_cp.asnumpy(y)
    repr(x)
    x[x > 0]                                         # the result's size depends on the data
    x[x < 0] = 0.0
    assert dict(SYNCS.kinds) == {"float": 1, "int": 1, "bool": 1, "item": 1, "tolist": 1, "get": 1,
                                 "asnumpy": 1, "repr": 1, "bool_mask_index": 2}
    sites = {kind: site for kind, site in SYNCS.sites}
    assert sites["float"].startswith("tests/test_fake_cupy.py:") and "test_host_syncs_are_counted" in sites["float"]
    assert "float" in SYNCS.report() and "tests/test_fake_cupy.py" in SYNCS.report()


@pytest.mark.parametrize("root, filename, expected", [
    # a clone named like the package: its name must not be taken for the package folder
    ("/home/u/minitransformer", "/home/u/minitransformer/tests/test_x.py", "tests/test_x.py:2 (probe)"),
    ("/home/u/minitransformer", "/home/u/minitransformer/minitransformer/optim.py",
     "minitransformer/optim.py:2 (probe)"),
    ("/home/u/mt", "/home/u/mt/tests/test_x.py", "tests/test_x.py:2 (probe)"),
    # an installed copy of the package, outside the checkout
    ("/home/u/mt", "/usr/lib/python3/site-packages/minitransformer/decoding.py",
     "minitransformer/decoding.py:2 (probe)"),
])
def test_call_sites_are_named_from_the_checkout(monkeypatch, root, filename, expected):
    monkeypatch.setattr(fake_cupy, "_ROOT", root)
    namespace = {"_call_site": fake_cupy._call_site}
    exec(compile("def probe():\n    return _call_site()\n", filename, "exec"), namespace)
    assert namespace["probe"]() == expected


def test_what_cupy_lacks_raises_attribute_error(device_cp):
    # Any name the stand-in does not provide fails with its name (these two exist nowhere);
    # the list in fake_cupy.py holds only names CuPy has. On the real CuPy the same names must
    # be missing too (its messages are its own).
    stand_in = is_stand_in(device_cp)
    with pytest.raises(AttributeError, match=r"cupy\.no_such_function " if stand_in else None):
        _ = device_cp.no_such_function
    with pytest.raises(AttributeError, match=r"cupy\.random\.no_such_sampler " if stand_in else None):
        _ = device_cp.random.no_such_sampler
    rng = device_cp.random.default_rng(0)
    with pytest.raises(AttributeError, match=r"Generator\.normal .*standard_normal" if stand_in else None):
        _ = rng.normal
    with pytest.raises(TypeError):                   # CuPy's ndarray has no __index__
        range(device_cp.asarray(3))
    if stand_in:
        # The stand-in refuses NumPy 2's ``x.device`` (CuPy's means a CUDA device, not "cpu"), so
        # package code cannot lean on it; and it has no vecdot (CuPy's documentation shows none),
        # so backend.rowdot's plain formula runs here.
        with pytest.raises(AttributeError, match=r"cupy\.ndarray\.device "):
            _ = device_cp.zeros(3).device
        assert getattr(device_cp, "vecdot", None) is None


def test_random_generator_is_cupys(device_cp):
    rng = device_cp.random.default_rng(7)
    u = rng.random((2, 3), dtype=np.float32)
    assert isinstance(u, device_cp.ndarray) and u.dtype == np.float32 and u.shape == (2, 3)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert isinstance(rng.random(), device_cp.ndarray) and rng.random().ndim == 0    # not a Python float
    assert rng.standard_normal((4,), dtype=np.float32).dtype == np.float32
    with pytest.raises(TypeError, match="Unsupported dtype"):
        rng.standard_normal((4,), dtype=np.int64)
    again = device_cp.random.default_rng(7).random((2, 3), dtype=np.float32)
    np.testing.assert_array_equal(again.get(), u.get())                            # a seed repeats
    numpy_draws = np.random.default_rng(7).random((2, 3), dtype=np.float32)
    assert not np.allclose(numpy_draws, u.get())     # but the stream is not NumPy's (XORWOW on a GPU)
    assert backend.rng_state(rng) is None            # CuPy's generators have no state dict to save
    assert isinstance(backend.seeded_rng(3), device_cp.random.Generator)


def test_scatter_add_is_cupyx_with_cupys_dtypes(device_cp):
    rows = np.array([4, 1, 4, 4, 0])
    values = np.random.default_rng(0).standard_normal((5, 3))
    expected = np.zeros((6, 3))
    np.add.at(expected, rows, values)
    for dtype in (np.float32, np.float64):
        table = device_cp.zeros((6, 3), dtype=dtype)
        backend.scatter_add(table, device_cp.asarray(rows), device_cp.asarray(values.astype(dtype)))
        np.testing.assert_allclose(table.get(), expected, rtol=1e-6)
    # No atomicAdd for one-byte integers: refused (the package scatters floats only).
    with pytest.raises(TypeError):
        backend.scatter_add(device_cp.zeros((6, 3), dtype=np.int8), device_cp.asarray(rows),
                            device_cp.asarray(np.ones((5, 3), np.int8)))


def test_installed_restores_sys_modules_and_backend_sees_it():
    before = sys.modules.get("cupy")
    with fake_cupy.installed() as cupy:
        assert sys.modules["cupy"] is cupy and backend.cupy_available()
        x = cupy.ones(2)
        assert backend.get_array_module(x) is cupy and not backend.on_cpu(x)
        with backend_as("cupy"):
            assert backend.xp_default() is cupy
            assert isinstance(Linear(3, 2, np.random.default_rng(0)).W.data, cupy.ndarray)
    assert sys.modules.get("cupy") is before and backend.backend_name() == "numpy"
    if before is None:
        assert not backend.cupy_available()


# ---------------------------------------------------------------------------------------------
# Gradient checks (float64) of every layer through the stand-in, and agreement with NumPy
# ---------------------------------------------------------------------------------------------

class _Call(Layer):
    """A layer called with fixed keyword arguments (a mask), so check_layer can drive it."""

    def __init__(self, layer, **kwargs):
        super().__init__()
        self.layer, self._kwargs = layer, kwargs

    def forward(self, *inputs):
        return self.layer.forward(*inputs, **self._kwargs)

    def backward(self, dout):
        return self.layer.backward(dout)


class _ResidualFFN(Layer):
    """LayerNorm(x + Dropout(FFN(x))), or pre-LN: the residual wrapper around a real sub-layer."""

    def __init__(self, rng, pre_ln):
        super().__init__()
        self.ffn = FeedForward(6, 10, rng)
        self.res = Residual(6, 0.0, pre_ln=pre_ln)

    def forward(self, x):
        return self.res.forward(x, self.ffn.forward)

    def backward(self, dy):
        return self.res.backward(dy, self.ffn.backward)


def _randomized(layer, rng):
    """Give every parameter random values, so that a zero bias or a unit gain hides nothing."""
    for p in layer.parameters():
        p.data[...] = backend.to_backend(rng.standard_normal(p.data.shape) * 0.5, backend.get_array_module(p.data))
    return layer


def _mask(B, S_q, S_k, causal=False, lengths=None, dead_row=None):
    m = np.ones((B, 1, S_q, S_k), bool)
    if causal:
        m &= np.tril(np.ones((S_q, S_k), bool))
    if lengths is not None:
        m &= (np.arange(S_k) < np.array(lengths)[:, None])[:, None, None, :]
    if dead_row is not None:
        m[dead_row] = False                            # a query row that may attend to nothing
    return m


# name -> (build the layer from an rng, the host inputs)
LAYERS = {
    "Linear": (lambda r: Linear(4, 3, r), lambda r: [r.standard_normal((2, 5, 4))]),
    "Embedding": (lambda r: Embedding(6, 4, r), lambda r: [np.array([[1, 3, 1, 1], [5, 3, 0, 1]])]),
    "TiedOutputProjection": (lambda r: TiedOutputProjection(Parameter(backend.to_backend(r.standard_normal((5, 4))))),
                             lambda r: [r.standard_normal((2, 3, 4))]),
    "PositionalEncoding": (lambda r: PositionalEncoding(6, max_len=10), lambda r: [r.standard_normal((2, 5, 6))]),
    "Dropout(mask)": (lambda r: _Call(Dropout(0.3), mask=backend.to_backend((r.random((2, 3, 4)) > 0.3) / 0.7)),
                      lambda r: [r.standard_normal((2, 3, 4))]),
    "LayerNorm": (lambda r: LayerNorm(6), lambda r: [r.standard_normal((2, 3, 6)) * 2 + 1]),
    "FeedForward": (lambda r: FeedForward(4, 8, r), lambda r: [r.standard_normal((2, 3, 4))]),
    "Residual(post-LN)": (lambda r: _ResidualFFN(r, pre_ln=False), lambda r: [r.standard_normal((2, 3, 6))]),
    "Residual(pre-LN)": (lambda r: _ResidualFFN(r, pre_ln=True), lambda r: [r.standard_normal((2, 3, 6))]),
    "MHA self, padding + dead row": (
        lambda r: _Call(MultiHeadAttention(8, 2, r), mask=backend.to_backend(_mask(2, 4, 4, lengths=[4, 3], dead_row=(1, 0, 2)))),
        lambda r: [r.standard_normal((2, 4, 8))]),
    "MHA masked decoder self": (
        lambda r: _Call(MultiHeadAttention(8, 2, r), mask=backend.to_backend(_mask(2, 4, 4, causal=True, lengths=[4, 2]))),
        lambda r: [r.standard_normal((2, 4, 8))]),
    "MHA encoder-decoder": (
        lambda r: _Call(MultiHeadAttention(8, 2, r), mask=backend.to_backend(_mask(2, 1, 5, lengths=[5, 3]))),
        lambda r: [r.standard_normal((2, 3, 8)), r.standard_normal((2, 5, 8))]),
    "EncoderLayer": (
        lambda r: _Call(EncoderLayer(TransformerConfig(vocab_size=5, d_model=4, h=2, N=1, d_ff=8, P_drop=0.0), r, None),
                        src_mask=backend.to_backend(_mask(2, 1, 3, lengths=[3, 2]))),
        lambda r: [r.standard_normal((2, 3, 4))]),
    "DecoderLayer": (
        lambda r: _Call(DecoderLayer(TransformerConfig(vocab_size=5, d_model=4, h=2, N=1, d_ff=8, P_drop=0.0), r, None),
                        src_mask=backend.to_backend(_mask(2, 1, 3, lengths=[3, 2])),
                        tgt_mask=backend.to_backend(_mask(2, 2, 2, causal=True))),
        lambda r: [r.standard_normal((2, 2, 4)), r.standard_normal((2, 3, 4))]),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_gradients_through_the_stand_in(device_cp, name):
    """check_layer on the stand-in (analytic backward vs central differences, float64), and
    the stand-in's output and every gradient equal to the NumPy layer's of the same seed."""
    build, make_inputs = LAYERS[name]
    backend.set_default_dtype("float64")
    host_inputs = make_inputs(np.random.default_rng(1))
    with backend_as("numpy"):
        reference = build(np.random.default_rng(0))
    layer = build(np.random.default_rng(0))
    _randomized(reference, np.random.default_rng(2))
    _randomized(layer, np.random.default_rng(2))
    inputs = [device_cp.asarray(a) for a in host_inputs]
    assert all(isinstance(p.data, device_cp.ndarray) for p in layer.parameters())

    report = check_layer(layer, *inputs)
    assert report.errors, "the gradient check compared no tensors"
    report.assert_ok()

    G = np.random.default_rng(3).standard_normal(reference.forward(*host_inputs).shape)
    out = layer.forward(*inputs)
    assert isinstance(out, device_cp.ndarray)
    np.testing.assert_allclose(out.get(), reference.forward(*host_inputs), rtol=1e-12, atol=1e-12)
    reference.zero_grad()
    layer.zero_grad()
    reference.forward(*host_inputs)
    d_ref = reference.backward(G)
    d_dev = layer.backward(device_cp.asarray(G))
    d_ref = d_ref if isinstance(d_ref, tuple) else (d_ref,)
    d_dev = d_dev if isinstance(d_dev, tuple) else (d_dev,)
    for a, b in zip(d_dev, d_ref):
        if b is not None:
            np.testing.assert_allclose(_host(a), b, rtol=1e-10, atol=1e-12)
    for (pname, p), (_, q) in zip(layer.named_parameters(), reference.named_parameters()):
        np.testing.assert_allclose(p.grad.get(), q.grad, rtol=1e-10, atol=1e-12, err_msg=pname)


def test_attention_functions_and_dropout_rng_through_the_stand_in(device_cp):
    backend.set_default_dtype("float64")
    r = np.random.default_rng(4)
    Q, K, V = (device_cp.asarray(r.standard_normal((2, 2, 3, 4))) for _ in range(3))
    mask = device_cp.asarray(_mask(2, 3, 3, causal=True))
    G = device_cp.asarray(r.standard_normal((2, 2, 3, 4)))

    def f():
        return (attention_forward(Q, K, V, mask)[0] * G).sum()

    _, cache = attention_forward(Q, K, V, mask)
    dQ, dK, dV = attention_backward(G, cache)
    gradcheck(f, {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV}).assert_ok()

    # Dropout drawing its masks from CuPy's generator API (random(shape, dtype=)), re-seeded per call.
    drop = Dropout(0.25)
    x = device_cp.asarray(r.standard_normal((3, 5)))

    def reseed():
        drop.rng = device_cp.random.default_rng(11)

    report = check_layer(drop, x, before_forward=reseed)
    report.assert_ok()
    reseed()
    y = drop.forward(x).get()
    kept = y != 0
    assert 0 < kept.sum() < kept.size                                   # some dropped, some kept
    np.testing.assert_allclose(y[kept], x.get()[kept] / 0.75)


def test_label_smoothed_loss_through_the_stand_in(device_cp):
    backend.set_default_dtype("float64")
    r = np.random.default_rng(5)
    logits_h, targets_h = r.standard_normal((2, 4, 7)), np.array([[1, 2, 3, 0], [6, 6, 0, 0]])
    loss, ref = LabelSmoothedCrossEntropy(pad_id=0, eps_ls=0.1), LabelSmoothedCrossEntropy(pad_id=0, eps_ls=0.1)
    logits, targets = device_cp.asarray(logits_h), device_cp.asarray(targets_h)
    value = loss.forward(logits, targets)
    assert type(value) is float
    assert value == pytest.approx(ref.forward(logits_h, targets_h), rel=1e-13)
    dlogits = loss.backward()
    np.testing.assert_allclose(dlogits.get(), ref.backward(), rtol=1e-12)
    gradcheck(lambda: loss.forward(logits, targets), {"logits": logits}, {"logits": dlogits}).assert_ok()


def test_whole_model_gradients_through_the_stand_in(device_cp):
    backend.set_default_dtype("float64")
    cfg = TransformerConfig(vocab_size=7, d_model=4, h=2, N=1, d_ff=8, P_drop=0.0, max_len=16)
    model = Transformer(cfg, seed=0)
    src = device_cp.asarray(np.array([[3, 4, 5, 0], [6, 2, 3, 4]]))
    tgt_in = device_cp.asarray(np.array([[1, 3, 4], [1, 6, 0]]))
    report = check_layer(model, src, tgt_in)
    assert len(report.errors) == len(model.parameters())
    report.assert_ok()
    with backend_as("numpy"):
        reference = Transformer(cfg, seed=0)
    np.testing.assert_allclose(model.forward(src, tgt_in).get(), reference.forward(src.get(), tgt_in.get()),
                               rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Training, decoding and checkpoints through the stand-in, against NumPy
# ---------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _copy_data():
    task = load_task("copy", seed=0)
    return task, encode_pairs(task.vocab, task.train[:400]), encode_pairs(task.vocab, task.valid[:24])


def _copy_trainer(steps=30, clip_norm=None, out_dir=None, valid=False, **model_changes):
    """The tiny preset on the copy task, built on the current backend from seed 0."""
    task, train, valid_pairs = _copy_data()
    model = build_model(task, "tiny", seed=0, **model_changes)
    settings = TrainSettings(steps=steps, batch_size=16, warmup_steps=20, lr_factor=1.0, seed=0,
                             clip_norm=clip_norm, valid_every=10 if valid else 10**9, log_every=10,
                             valid_decode=8)
    return Trainer(model, task.vocab, train, valid_pairs if valid else [], settings, out_dir)


def _train(trainer, steps):
    batches = trainer.batches()
    return [trainer.train_step(next(batches)) for _ in range(steps)]


@pytest.mark.parametrize("dtype, clip_norm", [("float64", 1.0), ("float64", None), ("float32", 1.0)])
def test_training_matches_numpy(device_cp, dtype, clip_norm):
    """30 steps of the tiny copy model on the stand-in and on NumPy, from the same seed."""
    backend.set_default_dtype(dtype)
    with backend_as("numpy"):
        reference = _copy_trainer(clip_norm=clip_norm)
    trainer = _copy_trainer(clip_norm=clip_norm)
    assert isinstance(trainer.model.E.data, device_cp.ndarray) and trainer.xp is device_cp
    expected, losses = _train(reference, 30), _train(trainer, 30)
    assert all(type(v) is float for v in losses)
    assert losses[-1] < 0.8 * losses[0]                                   # it did learn something
    if dtype == "float32":
        # Rounding differs a little between the two runs, and Adam carries it along: 4.5e-5
        # relative at step 30, measured (the same with and without NumPy's vecdot). Adam
        # also moves parameters whose gradient is ~0 (the key bias, rows of E for rare tokens)
        # by ~lr per step in directions set by that rounding, so parameters are compared in float64.
        np.testing.assert_allclose(losses[:10], expected[:10], rtol=1e-5)
        np.testing.assert_allclose(losses, expected, rtol=1e-4)
        return
    np.testing.assert_allclose(losses, expected, rtol=1e-12)
    assert trainer.optimizer.last_grad_norm == pytest.approx(reference.optimizer.last_grad_norm, rel=1e-10)
    for (name, p), (_, q) in zip(trainer.model.named_parameters(), reference.model.named_parameters()):
        # atol 1e-8: the key bias b^K has a gradient of exactly 0 in exact arithmetic (q·b^K is
        # added to a whole row of scores, and softmax ignores that), so Adam steps on its
        # rounding noise: 1.7e-10 apart after 30 steps, measured.
        np.testing.assert_allclose(p.data.get(), q.data, rtol=1e-9, atol=1e-8, err_msg=name)
    for i, (m, m_ref) in enumerate(zip(trainer.optimizer.m, reference.optimizer.m)):
        np.testing.assert_allclose(m.get(), m_ref, rtol=1e-7, atol=1e-10, err_msg=f"Adam m.{i}")


@functools.lru_cache(maxsize=1)
def _trained_host_model():
    """A float64 copy model trained for 40 steps on NumPy: far from copying, but its outputs
    depend on the input (greedy: <eos> at once for some sentences, none before the length
    limit for others; beam: hypotheses of several lengths), unlike an untrained model's."""
    before = backend.default_dtype()
    backend.set_default_dtype("float64")
    try:
        with backend_as("numpy"):
            trainer = _copy_trainer(steps=40, clip_norm=1.0)
            _train(trainer, 40)
    finally:
        backend.set_default_dtype(before)
    return trainer.model


def test_greedy_and_beam_decoding_match_numpy(device_cp):
    task, _, _ = _copy_data()
    v = task.vocab
    reference = _trained_host_model()
    model = copy.deepcopy(reference).to("cupy")
    assert isinstance(model.E.data, device_cp.ndarray)
    sources = [p[0] for p in encode_pairs(v, task.test[:6])]
    src_host, _ = make_source_batch(sources, v.pad_id, np)
    src, _ = make_source_batch(sources, v.pad_id, device_cp)

    greedy = greedy_decode(model, src, v.bos_id, v.eos_id)
    assert greedy == greedy_decode(reference, src_host, v.bos_id, v.eos_id)
    assert greedy == greedy_decode(model, src, v.bos_id, v.eos_id, use_cache=False)
    assert len({len(s) for s in greedy}) > 1                              # <eos> at varied places

    beams = beam_search(model, src, v.bos_id, v.eos_id, beam_size=3, n_best=3)
    expected = beam_search(reference, src_host, v.bos_id, v.eos_id, beam_size=3, n_best=3)
    assert [[ids for ids, _ in b] for b in beams] == [[ids for ids, _ in b] for b in expected]
    np.testing.assert_allclose([[s for _, s in b] for b in beams], [[s for _, s in b] for b in expected], rtol=1e-10)
    assert beam_search(model, src, v.bos_id, v.eos_id, beam_size=1) == greedy


def test_checkpoint_saved_on_cupy_loads_on_numpy_and_back(device_cp, tmp_path):
    # A short run through the whole loop on the stand-in: validation, greedy decoding, checkpoint.
    trainer = _copy_trainer(steps=12, clip_norm=1.0, out_dir=str(tmp_path / "run"), valid=True)
    history = trainer.run(progress=False)
    assert history[-1]["step"] == 12 and "valid_exact_match" in history[-1]
    path = str(tmp_path / "run" / "checkpoint.npz")

    on_host = load_checkpoint(path, "numpy")
    for (name, p), (_, q) in zip(trainer.model.named_parameters(), on_host.model.named_parameters()):
        assert type(q.data) is np.ndarray
        np.testing.assert_array_equal(q.data, p.data.get(), err_msg=name)
    for i, m in enumerate(trainer.optimizer.m):
        np.testing.assert_array_equal(on_host.optimizer_state[f"m.{i}"], m.get())
    assert on_host.step == 12

    on_device = load_checkpoint(path, "cupy")
    assert all(isinstance(p.data, device_cp.ndarray) for p in on_device.model.parameters())
    again = str(tmp_path / "again.npz")
    save_checkpoint(again, on_device.model, on_device.vocab, step=on_device.step)
    for (name, p), (_, q) in zip(load_checkpoint(again, "numpy").model.named_parameters(),
                                 on_host.model.named_parameters()):
        np.testing.assert_array_equal(p.data, q.data, err_msg=name)

    # Both resume (Trainer.restore, as the command line does): their next steps agree.
    _, train, _ = _copy_data()
    losses = {}
    for name, ckpt in (("numpy", on_host), ("cupy", on_device)):
        resumed = Trainer(ckpt.model, ckpt.vocab, train, [], TrainSettings(**{**trainer.settings.__dict__, "steps": 15}))
        resumed.restore(ckpt)
        assert resumed.xp is (np if name == "numpy" else device_cp)
        losses[name] = _train(resumed, 3)
    np.testing.assert_allclose(losses["cupy"], losses["numpy"], rtol=1e-5)


def _resume_gap(tmp_path, P_drop) -> tuple[float, float]:
    """12 steps straight, against 7 steps + checkpoint + load + 5 more (the resume), and against
    the same 12 steps again (the repeat): the largest parameter difference of each. The stand-in,
    like NumPy, repeats bit for bit; a GPU need not (atomic adds, e.g. the embedding's scatter-add,
    sum in no fixed order), so a resume must be as exact as a repeat, no more."""
    _, train, _ = _copy_data()
    full, again, first = (_copy_trainer(steps=12, P_drop=P_drop), _copy_trainer(steps=12, P_drop=P_drop),
                          _copy_trainer(steps=7, P_drop=P_drop))
    _train(full, 12)
    _train(again, 12)
    _train(first, 7)
    first.save(str(tmp_path / "checkpoint.npz"))
    ckpt = load_checkpoint(str(tmp_path / "checkpoint.npz"))
    resumed = Trainer(ckpt.model, ckpt.vocab, train, [], first.settings)
    resumed.restore(ckpt)
    _train(resumed, 5)

    def gap(other):
        return max(float(np.max(np.abs(_host(p.data) - _host(q.data))))
                   for p, q in zip(full.model.parameters(), other.model.parameters()))
    return gap(resumed), gap(again)


@pytest.mark.parametrize("P_drop", [0.0, 0.1], ids=["without dropout", "with dropout"])
def test_resume_is_as_exact_as_a_repeat_on_cupy(device_cp, tmp_path, P_drop):
    """With dropout too: CuPy's generators have no state a checkpoint could save, so the trainer
    draws the masks of step t from a generator seeded by (seed, t), and resuming needs none."""
    resume, repeat = _resume_gap(tmp_path, P_drop)
    if is_stand_in(device_cp):
        assert resume == repeat == 0.0
    else:                                       # 12 float32 steps of lr ~1e-3: a lost state moves far more
        assert resume <= max(10 * repeat, 1e-6), (resume, repeat)


def test_attention_maps_through_the_stand_in(device_cp):
    reference = _trained_host_model()
    model = copy.deepcopy(reference).to("cupy")
    got, expected = attention_maps(model, [4, 5, 6], [1, 4, 5]), attention_maps(reference, [4, 5, 6], [1, 4, 5])
    for kind in expected:
        assert type(got[kind]) is np.ndarray
        np.testing.assert_allclose(got[kind], expected[kind], rtol=1e-10, atol=1e-12)


def test_command_line_translate_and_evaluate_on_cupy(device_cp, tmp_path, capsys):
    """`translate --backend cupy` and `evaluate --backend cupy` print what the NumPy backend
    prints for the same checkpoint (timings aside)."""
    task, _, _ = _copy_data()
    ckpt = str(tmp_path / "checkpoint.npz")
    save_checkpoint(ckpt, _trained_host_model(), task.vocab)
    printed = {}
    for name in ("numpy", "cupy"):
        assert main(["translate", "--checkpoint", ckpt, "--backend", name, "--beam", "2", "3 4 5 6", "7 8"]) == 0
        assert main(["evaluate", "--checkpoint", ckpt, "--task", "copy", "--limit", "12", "--beam", "2",
                     "--backend", name]) == 0
        printed[name] = re.sub(r"\[[0-9.]+s\]", "[time]", capsys.readouterr().out)
    assert "beam 2: exact match" in printed["cupy"] and "chrF" in printed["cupy"]
    assert printed["cupy"] == printed["numpy"]


# ---------------------------------------------------------------------------------------------
# Host syncs: a fixed budget per training step and per decoded position
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("clip_norm", [None, 1.0])
def test_host_syncs_per_training_step(fake_cp, clip_norm, capsys):
    steps, per_step, reports = 4, {}, {}
    for N in (1, 3):
        trainer = _copy_trainer(N=N, clip_norm=clip_norm)
        batches = trainer.batches()
        trainer.train_step(next(batches))
        SYNCS.reset()
        for _ in range(steps):
            trainer.train_step(next(batches))
        per_step[N], reports[N] = SYNCS.total / steps, SYNCS.report(per=steps)
    with capsys.disabled():
        print(f"\n[stand-in] host syncs per training step (tiny copy model, clip_norm={clip_norm}): "
              f"N=1: {per_step[1]:g}, N=3: {per_step[3]:g} (budget {SYNCS_PER_STEP})")
    assert per_step[1] == per_step[3], "host syncs grow with the number of layers:\n" + reports[3]
    assert per_step[3] <= SYNCS_PER_STEP, "over the host-sync budget of a training step:\n" + reports[3]


@pytest.mark.parametrize("strategy", [Greedy(), Sample(), Sample(temperature=0.7, top_k=3, top_p=0.9, seed=5),
                                      Beam(size=1), Beam(size=3)], ids=str)
def test_host_syncs_per_decoded_position(fake_cp, strategy, capsys):
    task, _, _ = _copy_data()
    v = task.vocab
    per_position, growing = {}, {}
    for N in (1, 3):
        with backend_as("numpy"):
            model = build_model(task, "tiny", seed=0, N=N).to("cupy")
        src, _ = make_source_batch([[4, 5, 6, 7]] * 3, v.pad_id, fake_cp)
        runs = {}
        decode(model, src, v.bos_id, None, strategy, max_len=15)   # first use: tables copied to the device once
        for max_len in (5, 15):                  # no <eos>: every sentence runs to max_len
            SYNCS.reset()
            out = decode(model, src, v.bos_id, None, strategy, max_len=max_len)
            assert [len(y) for y in out] == [max_len] * 3
            runs[max_len] = (SYNCS.total, SYNCS.report(), collections.Counter(SYNCS.sites),
                             sum(SYNCS.to_device.values()))
        per_position[N] = (runs[15][0] - runs[5][0]) / 10
        # The call sites whose count grows with the number of positions: the syncs made per position.
        growing[N] = {site for (kind, site), n in runs[15][2].items() if n > runs[5][2][(kind, site)]}
    with capsys.disabled():
        print(f"\n[stand-in] host syncs per decoded position ({strategy}): N=1: {per_position[1]:g}, "
              f"N=3: {per_position[3]:g} (budget {DECODE_SYNCS_PER_POSITION})")
    assert per_position[1] == per_position[3], "host syncs grow with the number of layers:\n" + runs[15][1]
    assert per_position[3] == DECODE_SYNCS_PER_POSITION, runs[15][1]
    from_decoding = {site for site in growing[3] if "decoding.py" in site}
    assert len(from_decoding) == 1 and "(host_flag) <- minitransformer/decoding.py" in from_decoding.pop(), \
        "decoding waits for the device per position other than through backend.host_flag:\n" + runs[15][1]
    assert all("decoding.py" in site or "(check_token_ids)" in site for site in growing[3]), runs[15][1]
    assert runs[15][3] == runs[5][3], "host-to-device copies at every position:\n" + runs[15][1]
