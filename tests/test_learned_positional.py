"""The learned positional embedding in the model (Table 3, row E): the config switch,
the parameter count, checkpoints, cached decoding and the length limit.
(Its gradient checks are in test_layers_gradcheck.py, its PyTorch parity in
test_torch_parity.py.)"""

import json

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.checkpoint import load_checkpoint, save_checkpoint
from minitransformer.data.registry import load_task
from minitransformer.errors import ShapeError
from minitransformer.layers.masks import padding_mask
from minitransformer.layers.parameter import eval_mode
from minitransformer.layers.positional import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
)
from minitransformer.model import (
    KVCache,
    Transformer,
    TransformerConfig,
    count_parameters,
)
from minitransformer.runsetup import build_model

CFG = TransformerConfig(vocab_size=12, d_model=16, h=2, N=2, d_ff=24, P_drop=0.1, max_len=20,
                        positional="learned")


def test_config_default_is_the_papers_sinusoids():
    assert TransformerConfig().positional == "sinusoidal"
    model = Transformer(CFG.with_(positional="sinusoidal"))
    assert isinstance(model.src_pos, PositionalEncoding) and not hasattr(model, "P")


@pytest.mark.parametrize("bad", ["Learned", "rope", "", None, 1])
def test_config_rejects_unknown_positional(bad):
    with pytest.raises(ValueError, match="positional must be one of 'sinusoidal', 'learned'"):
        TransformerConfig(positional=bad)


def test_one_table_shared_by_both_sides():
    model = Transformer(CFG, seed=0)
    assert isinstance(model.src_pos, LearnedPositionalEmbedding)
    assert model.src_pos.P is model.tgt_pos.P is model.P
    names = [n for n, _ in model.named_parameters()]
    assert names.count("P") == 1 and not any(n.endswith(".P") for n in names)
    assert model.P.shape == (CFG.max_len, CFG.d_model)


def test_other_weights_equal_the_sinusoidal_models():
    """P has its own generator: row E changes the positions and nothing else."""
    learned = dict(Transformer(CFG, seed=4).named_parameters())
    fixed = dict(Transformer(CFG.with_(positional="sinusoidal"), seed=4).named_parameters())
    assert set(learned) - set(fixed) == {"P"}
    for name, p in fixed.items():
        assert np.array_equal(p.data, learned[name].data), name


def test_init_matches_the_sinusoids_scale():
    """Entries N(0, 1/2): the mean squared row norm is d_model/2, as every sinusoidal row's."""
    cfg = CFG.with_(d_model=64, max_len=400)
    P = backend.to_numpy(Transformer(cfg, seed=0).P.data).astype(np.float64)
    mean_sq_norm = float((P ** 2).sum(axis=1).mean())
    assert abs(mean_sq_norm - 32.0) < 0.05 * 32.0, mean_sq_norm


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
@pytest.mark.parametrize("pre_ln", [False, True])
def test_count_parameters_matches_the_model(positional, pre_ln):
    cfg = CFG.with_(positional=positional, pre_ln=pre_ln)
    assert count_parameters(cfg) == Transformer(cfg).num_parameters()


def test_count_parameters_adds_the_table_once():
    fixed = count_parameters(CFG.with_(positional="sinusoidal"))
    assert count_parameters(CFG) - fixed == CFG.max_len * CFG.d_model
    # The base model with a learned table of 512 positions.
    base = TransformerConfig()
    assert count_parameters(base.with_(positional="learned")) == count_parameters(base) + 512 * 512


def test_config_json_round_trip_and_old_configs():
    assert TransformerConfig.from_json(CFG.to_json()) == CFG
    old = json.loads(CFG.to_json())
    del old["positional"]                                   # a checkpoint from before the field existed
    assert TransformerConfig.from_json(json.dumps(old)).positional == "sinusoidal"


def test_checkpoint_round_trips_the_table(tmp_path):
    task = load_task("copy")
    model = build_model(task, "tiny", seed=1, positional="learned")
    model.P.data[...] = np.random.default_rng(0).standard_normal(model.P.shape)   # as if trained
    path = str(tmp_path / "ck.npz")
    save_checkpoint(path, model, task.vocab, step=2)
    ck = load_checkpoint(path)
    assert ck.model.cfg.positional == "learned"
    assert ck.model.src_pos.P is ck.model.tgt_pos.P is ck.model.P       # still one shared table
    np.testing.assert_array_equal(backend.to_numpy(ck.model.P.data), backend.to_numpy(model.P.data))
    src = np.array([[4, 5, 6, 2]])
    tgt_in = np.array([[1, 6, 5]])
    with eval_mode(model), eval_mode(ck.model):
        np.testing.assert_array_equal(model.forward(src, tgt_in), ck.model.forward(src, tgt_in))


def test_cached_decoding_equals_teacher_forcing(f64):
    """decode_step feeds position t with offset t: the same rows of P as the full forward."""
    model = Transformer(CFG, seed=2)
    rng = np.random.default_rng(3)
    src = rng.integers(3, CFG.vocab_size, size=(2, 6))
    tgt_in = rng.integers(3, CFG.vocab_size, size=(2, 5))
    tgt_in[:, 0] = 1
    with eval_mode(model):
        memory = model.encode(src)
        src_mask = padding_mask(src, CFG.pad_id)
        full = model.decode(tgt_in, memory, src_mask)
        cache = KVCache(model, memory, src_mask, T_max=tgt_in.shape[1])
        steps = np.stack([model.decode_step(tgt_in[:, t:t + 1], t, cache) for t in range(tgt_in.shape[1])], 1)
    np.testing.assert_allclose(steps, full, rtol=1e-10, atol=1e-10)


def test_model_refuses_lengths_past_the_table():
    model = Transformer(CFG, seed=0)
    long_src = np.full((1, CFG.max_len + 1), 4)
    with pytest.raises(ShapeError, match="max_len=20"):
        model.forward(long_src, np.array([[1, 4]]))
    with eval_mode(model):
        memory = model.encode(np.array([[4, 5, 2]]))
        cache = KVCache(model, memory, np.ones((1, 1, 1, 3), bool), T_max=CFG.max_len)
        for t in range(CFG.max_len):                                         # rows 0 .. max_len-1 exist
            model.decode_step(np.array([[4]]), t, cache)
        with pytest.raises(ShapeError, match="cannot extrapolate"):
            model.tgt_pos.forward(np.zeros((1, 1, CFG.d_model), dtype=model.P.data.dtype), offset=CFG.max_len)
