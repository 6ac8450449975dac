"""Parity with PyTorch: the same weights in torch.nn modules give the same
outputs and the same gradients for every parameter, in float64, to 1e-9.

torch is optional (torch==2.13.0, in pyproject.toml's [dev] extra); without it these tests
skip and say why. The test header names the build found (pytest_report_header in
conftest.py: the CPU-only build, or a CUDA one); a failure names the tensor that disagrees
and the build it was compared with.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -r requirements-dev.txt; for the "
                                           "CPU-only build add --extra-index-url https://download.pytorch.org/whl/cpu)"
                                           " - parity tests skipped")
nn = torch.nn
F = torch.nn.functional

from minitransformer import backend  # noqa: E402
from minitransformer.layers.loss import LabelSmoothedCrossEntropy  # noqa: E402
from minitransformer.model import DecoderLayer, EncoderLayer, Transformer, TransformerConfig  # noqa: E402

TOL = 1e-9
pytestmark = pytest.mark.torch
TORCH = f"torch {torch.__version__}, " + (f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build")


def rel(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def assert_close(name, ours, theirs):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else theirs
    assert ours.shape == theirs.shape, f"{name}: shape {ours.shape} (ours) vs {theirs.shape} ({TORCH})"
    err = rel(ours, theirs)
    assert err <= TOL, f"{name}: relative error {err:.3e} > {TOL:.0e} against PyTorch ({TORCH})"


def t(a):
    return torch.tensor(np.asarray(a), dtype=torch.float64)


@pytest.fixture(autouse=True)
def float64_params():
    old = backend.default_dtype()
    backend.set_default_dtype("float64")
    yield
    backend.set_default_dtype(old)


def randomize_norms(layer, rng):
    """LayerNorm starts at gamma 1, beta 0; random values test the gradient paths harder."""
    for name, p in layer.named_parameters():
        if name.endswith(("gamma", "beta", ".b", "b_qkv", "b_o")):
            p.data[...] = rng.normal(size=p.shape) * 0.5 + (1.0 if name.endswith("gamma") else 0.0)


def load_attention(ours, theirs: nn.MultiheadAttention):
    with torch.no_grad():
        theirs.in_proj_weight.copy_(t(ours.W_qkv.data.T))       # torch stores (3·d_model, d_model)
        theirs.in_proj_bias.copy_(t(ours.b_qkv.data))
        theirs.out_proj.weight.copy_(t(ours.W_o.data.T))
        theirs.out_proj.bias.copy_(t(ours.b_o.data))


def attention_pairs(ours, theirs):
    return [(f"{ours._name}.W_qkv", ours.W_qkv.grad, theirs.in_proj_weight.grad.T),
            (f"{ours._name}.b_qkv", ours.b_qkv.grad, theirs.in_proj_bias.grad),
            (f"{ours._name}.W_o", ours.W_o.grad, theirs.out_proj.weight.grad.T),
            (f"{ours._name}.b_o", ours.b_o.grad, theirs.out_proj.bias.grad)]


def load_linear(ours, theirs: nn.Linear):
    with torch.no_grad():
        theirs.weight.copy_(t(ours.W.data.T))
        theirs.bias.copy_(t(ours.b.data))


def linear_pairs(ours, theirs, name):
    return [(f"{name}.W", ours.W.grad, theirs.weight.grad.T), (f"{name}.b", ours.b.grad, theirs.bias.grad)]


def load_norm(ours, theirs: nn.LayerNorm):
    with torch.no_grad():
        theirs.weight.copy_(t(ours.gamma.data))
        theirs.bias.copy_(t(ours.beta.data))


def norm_pairs(ours, theirs, name):
    return [(f"{name}.gamma", ours.gamma.grad, theirs.weight.grad), (f"{name}.beta", ours.beta.grad, theirs.bias.grad)]


def load_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer):
    load_attention(ours.self_attn, theirs.self_attn)
    load_linear(ours.ffn.linear1, theirs.linear1)
    load_linear(ours.ffn.linear2, theirs.linear2)
    load_norm(ours.res_attn.norm, theirs.norm1)
    load_norm(ours.res_ffn.norm, theirs.norm2)


def encoder_layer_pairs(ours, theirs, prefix):
    return (attention_pairs(ours.self_attn, theirs.self_attn)
            + linear_pairs(ours.ffn.linear1, theirs.linear1, f"{prefix}.ffn.linear1")
            + linear_pairs(ours.ffn.linear2, theirs.linear2, f"{prefix}.ffn.linear2")
            + norm_pairs(ours.res_attn.norm, theirs.norm1, f"{prefix}.norm1")
            + norm_pairs(ours.res_ffn.norm, theirs.norm2, f"{prefix}.norm2"))


def load_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer):
    load_attention(ours.self_attn, theirs.self_attn)
    load_attention(ours.cross_attn, theirs.multihead_attn)
    load_linear(ours.ffn.linear1, theirs.linear1)
    load_linear(ours.ffn.linear2, theirs.linear2)
    load_norm(ours.res_self.norm, theirs.norm1)
    load_norm(ours.res_cross.norm, theirs.norm2)
    load_norm(ours.res_ffn.norm, theirs.norm3)


def decoder_layer_pairs(ours, theirs, prefix):
    return (attention_pairs(ours.self_attn, theirs.self_attn)
            + attention_pairs(ours.cross_attn, theirs.multihead_attn)
            + linear_pairs(ours.ffn.linear1, theirs.linear1, f"{prefix}.ffn.linear1")
            + linear_pairs(ours.ffn.linear2, theirs.linear2, f"{prefix}.ffn.linear2")
            + norm_pairs(ours.res_self.norm, theirs.norm1, f"{prefix}.norm1")
            + norm_pairs(ours.res_cross.norm, theirs.norm2, f"{prefix}.norm2")
            + norm_pairs(ours.res_ffn.norm, theirs.norm3, f"{prefix}.norm3"))


# Our FFN activations in torch: GELU is the tanh approximation (layers/feedforward.py), which is
# torch's gelu(approximate="tanh"); torch's own activation="gelu" would be the exact erf form.
TORCH_ACTIVATION = {"relu": F.relu, "gelu": lambda x: F.gelu(x, approximate="tanh")}


def torch_layer_kwargs(cfg):
    return dict(d_model=cfg.d_model, nhead=cfg.h, dim_feedforward=cfg.d_ff, dropout=0.0, batch_first=True,
                norm_first=cfg.pre_ln, layer_norm_eps=cfg.ln_eps, activation=TORCH_ACTIVATION[cfg.activation],
                dtype=torch.float64)


CFG = TransformerConfig(vocab_size=11, d_model=16, h=4, N=2, d_ff=24, P_drop=0.0, eps_ls=0.1, max_len=32)
# Lengths of the real tokens in each sentence; the rest is padding (id 0).
SRC_LENS, TGT_LENS = [5, 3, 4], [4, 6, 2]


def padded_ids(lengths, rng, V):
    ids = np.zeros((len(lengths), max(lengths)), dtype=np.int64)
    for b, n in enumerate(lengths):
        ids[b, :n] = rng.integers(3, V, size=n)
    return ids


@pytest.mark.parametrize("pre_ln, activation", [(False, "relu"), (True, "relu"), (False, "gelu")],
                         ids=["post-LN", "pre-LN", "post-LN-GELU"])
def test_encoder_layer_matches_torch(pre_ln, activation):
    rng = np.random.default_rng(0)
    cfg = CFG.with_(pre_ln=pre_ln, activation=activation)
    ours = EncoderLayer(cfg, rng, None, "enc")
    randomize_norms(ours, rng)
    theirs = nn.TransformerEncoderLayer(**torch_layer_kwargs(cfg))
    load_encoder_layer(ours, theirs)
    src = padded_ids(SRC_LENS, rng, cfg.vocab_size)
    x = rng.normal(size=(*src.shape, cfg.d_model))
    G = rng.normal(size=x.shape)

    y = ours.forward(x, (src != 0)[:, None, None, :])
    dx = ours.backward(G)
    xt = t(x).requires_grad_(True)
    yt = theirs(xt, src_key_padding_mask=torch.tensor(src == 0))   # torch: True = ignore this key
    (yt * t(G)).sum().backward()

    assert_close("encoder layer output", y, yt)
    assert_close("encoder layer d(input)", dx, xt.grad)
    for name, g_ours, g_theirs in encoder_layer_pairs(ours, theirs, "enc"):
        assert_close(name, g_ours, g_theirs)


@pytest.mark.parametrize("pre_ln, activation", [(False, "relu"), (True, "relu"), (True, "gelu")],
                         ids=["post-LN", "pre-LN", "pre-LN-GELU"])
def test_decoder_layer_matches_torch(pre_ln, activation):
    rng = np.random.default_rng(1)
    cfg = CFG.with_(pre_ln=pre_ln, activation=activation)
    ours = DecoderLayer(cfg, rng, None, "dec")
    randomize_norms(ours, rng)
    theirs = nn.TransformerDecoderLayer(**torch_layer_kwargs(cfg))
    load_decoder_layer(ours, theirs)
    src, tgt = padded_ids(SRC_LENS, rng, cfg.vocab_size), padded_ids(TGT_LENS, rng, cfg.vocab_size)
    y_in = rng.normal(size=(*tgt.shape, cfg.d_model))
    memory = rng.normal(size=(*src.shape, cfg.d_model))
    G = rng.normal(size=y_in.shape)
    T = tgt.shape[1]
    causal = np.tril(np.ones((T, T), dtype=bool))

    y = ours.forward(y_in, memory, (src != 0)[:, None, None, :], (tgt != 0)[:, None, None, :] & causal)
    dy_in, dmemory = ours.backward(G)
    yt_in, mt = t(y_in).requires_grad_(True), t(memory).requires_grad_(True)
    yt = theirs(yt_in, mt, tgt_mask=torch.tensor(~causal), tgt_key_padding_mask=torch.tensor(tgt == 0),
                memory_key_padding_mask=torch.tensor(src == 0))
    (yt * t(G)).sum().backward()

    assert_close("decoder layer output", y, yt)
    assert_close("decoder layer d(input)", dy_in, yt_in.grad)
    assert_close("decoder layer d(memory)", dmemory, mt.grad)
    for name, g_ours, g_theirs in decoder_layer_pairs(ours, theirs, "dec"):
        assert_close(name, g_ours, g_theirs)


def torch_sinusoids(max_len, d_model):
    """§3.5 written again in torch, independently of layers/positional.py, so a wrong table
    there (sin and cos swapped, say) fails the whole-model comparison below:
    PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    freq = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)[:, : d_model // 2]
    return pe


class TorchTransformer(nn.Module):
    """The same model in torch.nn pieces: tied embeddings scaled by sqrt(d_model),
    sinusoidal PE (a buffer) or a learned one (a Parameter shared by both sides),
    nn.TransformerEncoder/DecoderLayer stacks, tied output projection."""

    def __init__(self, cfg, learned_table=None):
        super().__init__()
        self.cfg = cfg
        self.E = nn.Parameter(torch.zeros(cfg.vocab_size, cfg.d_model, dtype=torch.float64))
        if cfg.positional == "learned":
            self.pe = nn.Parameter(t(learned_table))                 # the weights to compare, copied
        else:
            self.register_buffer("pe", torch_sinusoids(cfg.max_len, cfg.d_model))
        self.enc = nn.ModuleList([nn.TransformerEncoderLayer(**torch_layer_kwargs(cfg)) for _ in range(cfg.N)])
        self.dec = nn.ModuleList([nn.TransformerDecoderLayer(**torch_layer_kwargs(cfg)) for _ in range(cfg.N)])
        self.enc_norm = nn.LayerNorm(cfg.d_model, eps=cfg.ln_eps, dtype=torch.float64) if cfg.pre_ln else None
        self.dec_norm = nn.LayerNorm(cfg.d_model, eps=cfg.ln_eps, dtype=torch.float64) if cfg.pre_ln else None

    def forward(self, src, tgt_in):
        d = self.cfg.d_model
        S, T = src.shape[1], tgt_in.shape[1]
        x = F.embedding(src, self.E) * math.sqrt(d) + self.pe[:S]
        for layer in self.enc:
            x = layer(x, src_key_padding_mask=src == 0)
        if self.enc_norm is not None:
            x = self.enc_norm(x)
        y = F.embedding(tgt_in, self.E) * math.sqrt(d) + self.pe[:T]
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        for layer in self.dec:
            y = layer(y, x, tgt_mask=causal, tgt_key_padding_mask=tgt_in == 0, memory_key_padding_mask=src == 0)
        if self.dec_norm is not None:
            y = self.dec_norm(y)
        return y @ self.E.T


@pytest.mark.parametrize("pre_ln, positional, activation",
                         [(False, "sinusoidal", "relu"), (True, "sinusoidal", "relu"), (False, "learned", "relu"),
                          (False, "sinusoidal", "gelu")],
                         ids=["post-LN", "pre-LN", "post-LN-learned-PE", "post-LN-GELU"])
def test_whole_model_matches_torch(pre_ln, positional, activation):
    rng = np.random.default_rng(2)
    cfg = CFG.with_(pre_ln=pre_ln, positional=positional, activation=activation)
    ours = Transformer(cfg, seed=3)
    randomize_norms(ours, rng)
    learned = positional == "learned"
    theirs = TorchTransformer(cfg, ours.P.data if learned else None)
    with torch.no_grad():
        theirs.E.copy_(t(ours.E.data))
    for o, th in zip(ours.encoder.layers, theirs.enc):
        load_encoder_layer(o, th)
    for o, th in zip(ours.decoder.layers, theirs.dec):
        load_decoder_layer(o, th)
    if pre_ln:
        load_norm(ours.encoder.final_norm, theirs.enc_norm)
        load_norm(ours.decoder.final_norm, theirs.dec_norm)

    src = padded_ids(SRC_LENS, rng, cfg.vocab_size)
    tgt = padded_ids([n + 1 for n in TGT_LENS], rng, cfg.vocab_size)
    tgt[:, 0] = 1                                                    # <bos>
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    tgt_out = np.where(tgt_in == 0, 0, tgt_out)                       # pad where the input is pad

    crit = LabelSmoothedCrossEntropy(0, cfg.eps_ls)
    logits = ours.forward(src, tgt_in)
    loss = crit.forward(logits, tgt_out)
    ours.zero_grad()
    ours.backward(crit.backward())

    logits_t = theirs(torch.tensor(src), torch.tensor(tgt_in))
    loss_t = F.cross_entropy(logits_t.reshape(-1, cfg.vocab_size), torch.tensor(tgt_out).reshape(-1),
                             ignore_index=0, label_smoothing=cfg.eps_ls)
    loss_t.backward()

    assert_close("logits", logits, logits_t)
    assert abs(loss - loss_t.item()) <= TOL * abs(loss_t.item()), f"loss: {loss} vs {loss_t.item()} ({TORCH})"
    assert_close("E (tied: source, target, output)", ours.E.grad, theirs.E.grad)
    pairs = []
    for i, (o, th) in enumerate(zip(ours.encoder.layers, theirs.enc)):
        pairs += encoder_layer_pairs(o, th, f"encoder.{i}")
    for i, (o, th) in enumerate(zip(ours.decoder.layers, theirs.dec)):
        pairs += decoder_layer_pairs(o, th, f"decoder.{i}")
    if pre_ln:
        pairs += norm_pairs(ours.encoder.final_norm, theirs.enc_norm, "encoder.final_norm")
        pairs += norm_pairs(ours.decoder.final_norm, theirs.dec_norm, "decoder.final_norm")
    if learned:
        pairs.append(("P (learned positions: source and target)", ours.P.grad, theirs.pe.grad))
    assert len(pairs) + 1 == len(ours.parameters()), "every parameter must be compared"
    for name, g_ours, g_theirs in pairs:
        assert_close(name, g_ours, g_theirs)


def test_the_header_names_the_torch_build_in_use():
    """The test header (conftest.torch_build, read from torch's files) says what torch itself says."""
    from conftest import torch_build

    header = torch_build()
    assert header.startswith(f"torch {torch.__version__}, "), header
    assert ("CPU-only build" in header) == (torch.version.cuda is None), header
    if torch.version.cuda is not None:
        assert f"CUDA {torch.version.cuda} build" in header, header


def test_swiglu_feedforward_matches_torch_autograd():
    """FeedForward(activation="swiglu") against torch autograd of Shazeer (2020)'s Eq. 6 written
    with torch's own silu: (silu(x W) * (x V)) W_2, no biases; output and every gradient."""
    from minitransformer.layers.feedforward import FeedForward

    rng = np.random.default_rng(5)
    ours = FeedForward(6, 10, rng, activation="swiglu")             # float64: the autouse fixture
    x = rng.normal(size=(3, 4, 6)) * 2
    G = rng.normal(size=(3, 4, 6))
    y = ours.forward(x)
    dx = ours.backward(G)
    W1, W2 = t(ours.linear1.W.data).requires_grad_(True), t(ours.linear2.W.data).requires_grad_(True)
    xt = t(x).requires_grad_(True)
    z = xt @ W1
    yt = (F.silu(z[..., :10]) * z[..., 10:]) @ W2
    (yt * t(G)).sum().backward()
    assert_close("swiglu FFN output", y, yt)
    assert_close("swiglu FFN d(input)", dx, xt.grad)
    assert_close("swiglu FFN dW_1 = [dW | dV]", ours.linear1.W.grad, W1.grad)
    assert_close("swiglu FFN dW_2", ours.linear2.W.grad, W2.grad)
