"""Checkers for the exercises of lessons 4-7 (§3.1, §3.4, §3.5).

Each ``check_*`` function takes the learner's function, runs it on fixed
random inputs (float64, NumPy) and compares the answer with the package's own
implementation and, for gradients, with central differences
(:func:`minitransformer.gradcheck.numerical_gradient`). The contract:

* the function returns None (the stub, not attempted yet): print a note and
  return False, without raising, so a notebook still runs top to bottom;
* the answer is wrong: raise AssertionError saying what is wrong (a shape:
  expected vs got; values: the max relative error vs the reference and vs the
  numerical gradient);
* the answer is right: print "correct" with the measured errors, return True.

Lesson 4, residuals and LayerNorm:   check_layernorm_backward,
    check_post_ln_residual_backward, check_pre_ln_residual_backward
Lesson 5, embeddings and softmax:    check_embedding_backward, check_tied_embedding_grad
Lesson 6, positional encoding:       check_sinusoidal_pe, check_pe_similarity
Lesson 7, the encoder-decoder:       check_shift_right, check_encoder_layer_params,
    check_transformer_params
"""

from __future__ import annotations

import math

import numpy

from .. import backend
from ..data.batching import make_batch
from ..gradcheck import numerical_gradient, rel_error
from ..layers.embedding import embedding_backward, embedding_forward
from ..layers.layernorm import layernorm_backward, layernorm_forward
from ..layers.linear import linear_backward, linear_forward
from ..layers.positional import sinusoidal_table

NOT_ATTEMPTED = "not attempted yet: fill in the cell above and run this cell again"
REF_TOL = 1e-8     # vs the package's implementation (the same maths, so only rounding differs)
NUM_TOL = 1e-6     # vs central differences in float64 (gradcheck's DEFAULT_TOL)


# -- shared helpers ------------------------------------------------------------------

def _not_attempted() -> bool:
    print(NOT_ATTEMPTED)
    return False


def _array(name, got):
    """The learner's answer as a host float64 array, or an AssertionError saying why not."""
    if got is None:
        raise AssertionError(f"{name} is None: return an array")
    try:
        arr = backend.to_numpy(got)
    except Exception as exc:  # noqa: BLE001 - anything that is not array-like
        raise AssertionError(f"{name} must be an array, got {type(got).__name__}") from exc
    if arr.dtype.kind not in "fiub":
        raise AssertionError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    return arr.astype(numpy.float64) if arr.dtype.kind != "b" else arr


def _unpack(name, got, parts):
    """Check that ``got`` is a tuple of len(parts) and return it as a tuple of arrays."""
    if not isinstance(got, (tuple, list)) or len(got) != len(parts):
        what = f"a tuple of {len(got)}" if isinstance(got, (tuple, list)) else type(got).__name__
        raise AssertionError(f"{name} must return a tuple ({', '.join(parts)}), got {what}")
    return tuple(_array(p, g) for p, g in zip(parts, got))


def _shape(name, got, expected) -> None:
    if tuple(got.shape) != tuple(expected):
        raise AssertionError(f"{name}: expected shape {tuple(expected)}, got {tuple(got.shape)}")


def _compare(name, got, reference, numeric=None):
    """Max relative errors of got vs the reference (and vs the numerical gradient)."""
    _shape(name, got, reference.shape)
    if not numpy.all(numpy.isfinite(got)):
        raise AssertionError(f"{name}: contains NaN or inf")
    e_ref = rel_error(got, reference)
    e_num = None if numeric is None else rel_error(got, numeric)
    if e_ref > REF_TOL or (e_num is not None and e_num > NUM_TOL):
        msg = f"{name}: wrong values: max relative error {e_ref:.2e} vs the reference (tol {REF_TOL:.0e})"
        if e_num is not None:
            msg += f", {e_num:.2e} vs the numerical gradient (tol {NUM_TOL:.0e})"
        raise AssertionError(msg)
    return e_ref, e_num


def _report(errors) -> bool:
    """Print 'correct' with the errors of every checked tensor; return True."""
    parts = []
    for name, (e_ref, e_num) in errors.items():
        s = f"{name}: {e_ref:.1e} vs reference"
        if e_num is not None:
            s += f", {e_num:.1e} vs numerical gradient"
        parts.append(s)
    print("correct (max relative errors)  " + ";  ".join(parts))
    return True


def _rng(seed):
    return numpy.random.default_rng(seed)


# -- lesson 4: residuals and LayerNorm ---------------------------------------------

def check_layernorm_backward(fn, eps: float = 1e-5) -> bool:
    """fn(dy, x, gamma, eps) -> (dx, dgamma, dbeta) for y = LayerNorm(x) = gamma ⊙ x_hat + beta.

    x, dy: (B, S, d_model); gamma: (d_model,). Compared with
    ``layernorm_backward`` and with numerical gradients of sum(y ⊙ dy).
    """
    r = _rng(40)
    B, S, d = 2, 3, 6
    x = r.standard_normal((B, S, d)) * 2.0 + 0.5
    gamma = 1.0 + 0.3 * r.standard_normal(d)
    beta = 0.1 * r.standard_normal(d)
    dy = r.standard_normal((B, S, d))
    got = fn(dy.copy(), x.copy(), gamma.copy(), eps)
    if got is None:
        return _not_attempted()
    dx, dgamma, dbeta = _unpack("layernorm_backward", got, ("dx", "dgamma", "dbeta"))

    _, cache = layernorm_forward(x, gamma, beta, eps)
    ref = layernorm_backward(dy, cache)

    def f():
        return float((layernorm_forward(x, gamma, beta, eps)[0] * dy).sum())

    num = [numerical_gradient(f, a) for a in (x, gamma, beta)]
    errors = {}
    for name, g, rf, nm in zip(("dx", "dgamma", "dbeta"), (dx, dgamma, dbeta), ref, num):
        errors[name] = _compare(name, g, rf, nm)
    return _report(errors)


def _post_ln(x, W, eps):
    d = x.shape[-1]
    h, lin_cache = linear_forward(x, W, numpy.zeros(d))
    y, ln_cache = layernorm_forward(x + h, numpy.ones(d), numpy.zeros(d), eps)
    return y, (lin_cache, ln_cache)


def _pre_ln(x, W, eps):
    d = x.shape[-1]
    n, ln_cache = layernorm_forward(x, numpy.ones(d), numpy.zeros(d), eps)
    h, lin_cache = linear_forward(n, W, numpy.zeros(d))
    return x + h, (lin_cache, ln_cache)


def _residual_check(fn, name, pre_ln: bool, eps: float) -> bool:
    r = _rng(42 if pre_ln else 41)
    B, S, d = 2, 3, 5
    x = r.standard_normal((B, S, d))
    W = r.standard_normal((d, d)) / math.sqrt(d)
    dy = r.standard_normal((B, S, d))
    got = fn(dy.copy(), x.copy(), W.copy(), eps)
    if got is None:
        return _not_attempted()
    dx, dW = _unpack(name, got, ("dx", "dW"))

    forward = _pre_ln if pre_ln else _post_ln
    _, (lin_cache, ln_cache) = forward(x, W, eps)
    if pre_ln:
        dn, ref_dW, _ = linear_backward(dy, lin_cache)
        ref_dx = dy + layernorm_backward(dn, ln_cache)[0]
    else:
        dz = layernorm_backward(dy, ln_cache)[0]
        dxl, ref_dW, _ = linear_backward(dz, lin_cache)
        ref_dx = dz + dxl

    def f():
        return float((forward(x, W, eps)[0] * dy).sum())

    errors = {"dx": _compare("dx", dx, ref_dx, numerical_gradient(f, x)),
              "dW": _compare("dW", dW, ref_dW, numerical_gradient(f, W))}
    return _report(errors)


def check_post_ln_residual_backward(fn, eps: float = 1e-5) -> bool:
    """fn(dy, x, W, eps) -> (dx, dW) for the paper's post-LN block with a linear
    sub-layer:  y = LayerNorm(x + x W)  (gamma = 1, beta = 0, no dropout).
    x, dy: (B, S, d); W: (d, d)."""
    return _residual_check(fn, "post_ln_residual_backward", pre_ln=False, eps=eps)


def check_pre_ln_residual_backward(fn, eps: float = 1e-5) -> bool:
    """fn(dy, x, W, eps) -> (dx, dW) for the pre-LN block with a linear
    sub-layer:  y = x + LayerNorm(x) W  (gamma = 1, beta = 0, no dropout)."""
    return _residual_check(fn, "pre_ln_residual_backward", pre_ln=True, eps=eps)


# -- lesson 5: embeddings and softmax ----------------------------------------------

def check_embedding_backward(fn) -> bool:
    """fn(dout, ids, V) -> dE: (V, d_model) for out = E[ids] · sqrt(d_model).

    ids: (B, S) ints with repeated tokens; dout: (B, S, d_model)."""
    r = _rng(50)
    V, d, B, S = 7, 4, 2, 6
    ids = numpy.array([[1, 3, 3, 0, 5, 3], [5, 1, 6, 6, 2, 1]])      # repeats on purpose; row 4 unused
    E = r.standard_normal((V, d))
    dout = r.standard_normal((B, S, d))
    got = fn(dout.copy(), ids.copy(), V)
    if got is None:
        return _not_attempted()
    dE = _array("dE", got)

    scale = math.sqrt(d)
    ref = numpy.zeros((V, d))
    embedding_backward(dout, embedding_forward(ids, E, scale)[1], ref)

    def f():
        return float((embedding_forward(ids, E, scale)[0] * dout).sum())

    return _report({"dE": _compare("dE", dE, ref, numerical_gradient(f, E))})


def check_tied_embedding_grad(fn) -> bool:
    """fn(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits) -> dE: (V, d_model).

    One matrix E is used three times (§3.4):
        src_emb = E[src_ids] · sqrt(d)    upstream gradient d_src: (B, S, d)
        tgt_emb = E[tgt_ids] · sqrt(d)    upstream gradient d_tgt: (B, T, d)
        logits  = x_dec E^T               upstream gradient dlogits: (B, T, V)
    dE is the gradient of L = Σ d_src⊙src_emb + Σ d_tgt⊙tgt_emb + Σ dlogits⊙logits.
    """
    r = _rng(51)
    V, d, B, S, T = 9, 4, 2, 5, 4
    src_ids = r.integers(0, V, size=(B, S))
    tgt_ids = r.integers(0, V, size=(B, T))
    src_ids[0, :2] = 3                                  # a repeated token
    E = r.standard_normal((V, d))
    d_src = r.standard_normal((B, S, d))
    d_tgt = r.standard_normal((B, T, d))
    x_dec = r.standard_normal((B, T, d))
    dlogits = r.standard_normal((B, T, V))
    got = fn(src_ids.copy(), d_src.copy(), tgt_ids.copy(), d_tgt.copy(), x_dec.copy(), dlogits.copy())
    if got is None:
        return _not_attempted()
    dE = _array("dE", got)

    scale = math.sqrt(d)
    ref = numpy.zeros((V, d))
    embedding_backward(d_src, embedding_forward(src_ids, E, scale)[1], ref)
    embedding_backward(d_tgt, embedding_forward(tgt_ids, E, scale)[1], ref)
    ref += dlogits.reshape(-1, V).T @ x_dec.reshape(-1, d)

    def f():
        return float((embedding_forward(src_ids, E, scale)[0] * d_src).sum()
                     + (embedding_forward(tgt_ids, E, scale)[0] * d_tgt).sum()
                     + ((x_dec @ E.T) * dlogits).sum())

    return _report({"dE": _compare("dE", dE, ref, numerical_gradient(f, E))})


# -- lesson 6: positional encoding ---------------------------------------------------

def check_sinusoidal_pe(fn) -> bool:
    """fn(max_len, d_model) -> PE: (max_len, d_model), the table of §3.5 (even d_model)."""
    errors = {}
    for max_len, d in ((50, 16), (9, 6)):
        got = fn(max_len, d)
        if got is None:
            return _not_attempted()
        name = f"PE(max_len={max_len}, d_model={d})"
        errors[name] = _compare(name, _array(name, got), sinusoidal_table(max_len, d, numpy, numpy.float64))
    return _report(errors)


def check_pe_similarity(fn) -> bool:
    """fn(k, d_model) -> PE(pos) · PE(pos + k) in closed form, for an array of offsets k.

    The answer must not depend on pos; it is compared with dot products of
    rows of the table at two different starting positions."""
    errors = {}
    for d in (16, 64):
        k = numpy.arange(0, 300)
        got = fn(k.copy(), d)
        if got is None:
            return _not_attempted()
        sim = _array(f"similarity(d_model={d})", got)
        table = sinusoidal_table(2000, d, numpy, numpy.float64)
        for pos in (0, 1234):
            ref = table[pos + k] @ table[pos]
            errors[f"d={d}, pos={pos}"] = _compare(f"similarity(k, d_model={d}) at pos={pos}", sim, ref)
    return _report(errors)


# -- lesson 7: the encoder-decoder assembled ---------------------------------------

def _token_array(name, got):
    if got is None:
        raise AssertionError(f"{name} is None: return an array of token ids")
    arr = backend.to_numpy(got)
    if arr.dtype.kind not in "iu":
        raise AssertionError(f"{name}: expected an integer array of token ids, got dtype {arr.dtype}")
    return arr


def check_shift_right(fn) -> bool:
    """fn(tgt_seqs, pad_id, bos_id, eos_id) -> (tgt_in, tgt_out), each (B, T) ints, T = longest + 1.

    tgt_in is <bos> + sentence, tgt_out is sentence + <eos>, both padded with
    pad_id: the decoder reads tgt_in[:, i] and must predict tgt_out[:, i] (§3.1)."""
    cases = (([[7, 6, 5, 4, 3], [3, 9, 8], [], [5]], 0, 1, 2),
             ([[2, 3], [4, 5, 6, 7]], 9, 0, 1))
    for tgt_seqs, pad_id, bos_id, eos_id in cases:
        got = fn([list(t) for t in tgt_seqs], pad_id, bos_id, eos_id)
        if got is None:
            return _not_attempted()
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise AssertionError(f"shift_right must return a tuple (tgt_in, tgt_out), got {type(got).__name__}")
        ref = make_batch([[3]] * len(tgt_seqs), tgt_seqs, pad_id, bos_id, eos_id, xp=numpy)
        where = f"(pad_id={pad_id}, bos_id={bos_id}, eos_id={eos_id})"
        for name, g, r in (("tgt_in", got[0], ref.tgt_in), ("tgt_out", got[1], ref.tgt_out)):
            arr = _token_array(name, g)
            _shape(f"{name} {where}", arr, r.shape)
            if not numpy.array_equal(arr, r):
                b = int(numpy.argwhere(arr != r)[0][0])
                raise AssertionError(f"{name} {where}: {int((arr != r).sum())} ids wrong; sentence {b} "
                                     f"{tgt_seqs[b]} should give {r[b].tolist()}, got {arr[b].tolist()}")
    print("correct: tgt_in = <bos> + sentence and tgt_out = sentence + <eos>, padded, match make_batch's")
    return True


def check_encoder_layer_params(fn) -> bool:
    """fn(d_model, d_ff) -> int, the number of learnable scalars in one EncoderLayer."""
    from ..model import EncoderLayer, TransformerConfig  # noqa: PLC0415  (model imports are heavier)

    counted = []
    for d_model, h, d_ff in ((8, 2, 16), (24, 4, 40), (512, 8, 2048)):
        got = fn(d_model, d_ff)
        if got is None:
            return _not_attempted()
        cfg = TransformerConfig(vocab_size=10, d_model=d_model, h=h, d_ff=d_ff, N=1)
        expected = EncoderLayer(cfg, backend.host_rng(0), None).num_parameters()
        if not isinstance(got, (int, numpy.integer)) or isinstance(got, bool):
            raise AssertionError(f"encoder layer parameters: expected an int, got {type(got).__name__}")
        if int(got) != expected:
            raise AssertionError(f"encoder layer parameters for d_model={d_model}, d_ff={d_ff}: "
                                 f"expected {expected:,}, got {int(got):,} (off by {int(got) - expected:+,})")
        counted.append(f"{expected:,} for (d_model={d_model}, d_ff={d_ff})")
    print("correct: " + "; ".join(counted))
    return True


def check_transformer_params(fn) -> bool:
    """fn(V, d_model, d_ff, N) -> int, the learnable scalars of the whole (post-LN) Transformer,
    with the embedding matrix shared three ways (§3.4)."""
    from ..model import Transformer, TransformerConfig, count_parameters  # noqa: PLC0415

    counted = []
    for V, d_model, h, d_ff, N in ((10, 8, 2, 16, 1), (13, 8, 2, 12, 2), (37000, 512, 8, 2048, 6),
                                   (37000, 1024, 16, 4096, 6)):
        got = fn(V, d_model, d_ff, N)
        if got is None:
            return _not_attempted()
        cfg = TransformerConfig(vocab_size=V, d_model=d_model, h=h, d_ff=d_ff, N=N)
        expected = count_parameters(cfg) if V > 100 else Transformer(cfg, seed=0).num_parameters()
        if not isinstance(got, (int, numpy.integer)) or isinstance(got, bool):
            raise AssertionError(f"Transformer parameters: expected an int, got {type(got).__name__}")
        if int(got) != expected:
            off = int(got) - expected
            hint = ("; that is 2·V·d_model too many: E is shared by the two embeddings and the output "
                    "projection, count it once") if off == 2 * V * d_model else ""
            raise AssertionError(f"Transformer parameters for V={V}, d_model={d_model}, d_ff={d_ff}, N={N}: "
                                 f"expected {expected:,}, got {int(got):,} (off by {off:+,}){hint}")
        counted.append(f"{expected:,}")
    print("correct: " + ", ".join(counted) + " (two tiny models built and counted, then base and big)")
    return True
