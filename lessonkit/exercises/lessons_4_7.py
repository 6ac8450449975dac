"""Checkers for the exercises of lessons 4-7 (§3.1, §3.4, §3.5).

Every checker follows the contract of ``lessonkit.exercises._common``: fixed
float64 inputs; the stub (returns None) prints a note and returns a false Verdict; a wrong
answer raises WrongAnswer with the max relative error vs the package's answer and
vs the numerical gradient (one tolerance, TOL = 1e-6), plus a ``hint:`` line when it
matches a common mistake; a right answer prints "correct" with the errors.

Exercise 4.1 check_layernorm_backward       Exercise 4.2 check_post_ln_residual_backward
Exercise 4.3 check_pre_ln_residual_backward
Exercise 5.1 check_embedding_backward       Exercise 5.2 check_tied_embedding_grad
Exercise 6.1 check_sinusoidal_pe            Exercise 6.2 check_pe_similarity
Exercise 7.1 check_shift_right              Exercise 7.2 check_encoder_layer_params
Exercise 7.3 check_transformer_params
"""

from __future__ import annotations

import math

import numpy

from minitransformer import backend
from minitransformer.data.batching import make_batch
from minitransformer.gradcheck import numerical_gradient
from minitransformer.layers.embedding import embedding_backward, embedding_forward
from minitransformer.layers.layernorm import layernorm_backward, layernorm_forward
from minitransformer.layers.linear import linear_backward, linear_forward
from minitransformer.layers.positional import sinusoidal_table

from ..i18n import tr
from ._common import (
    NOT_ATTEMPTED,
    WrongAnswer,
    case_rng,
    check_array,
    check_count,
    copy_all,
    edge,
    exercise,
    not_attempted,
    report_correct,
    say,
    sizes,
    unpack,
    visible,
)

__all__ = [
    "NOT_ATTEMPTED",
    "check_layernorm_backward",
    "check_post_ln_residual_backward",
    "check_pre_ln_residual_backward",
    "check_embedding_backward",
    "check_tied_embedding_grad",
    "check_sinusoidal_pe",
    "check_pe_similarity",
    "check_shift_right",
    "check_encoder_layer_params",
    "check_transformer_params",
]


# -- lesson 4: residuals and LayerNorm ---------------------------------------------

def _layernorm_backward_variant(dy, x, gamma, eps, ddof=0, eps_outside=False, mean_path=True, var_path=True,
                                use_gamma=True):
    """LayerNorm's backward with one of the usual mistakes switched on (all off: the right answer)."""
    d = x.shape[-1]
    xc = x - x.mean(axis=-1, keepdims=True)
    var = (xc ** 2).sum(axis=-1, keepdims=True) / (d - ddof)
    rstd = 1.0 / (numpy.sqrt(var) + eps) if eps_outside else 1.0 / numpy.sqrt(var + eps)
    x_hat = xc * rstd
    g = dy * gamma if use_gamma else dy
    dx = g.copy()
    if mean_path:
        dx -= g.mean(axis=-1, keepdims=True)
    if var_path:
        dx -= x_hat * (g * x_hat).mean(axis=-1, keepdims=True)
    return rstd * dx, (dy * x_hat).reshape(-1, d).sum(axis=0), dy.reshape(-1, d).sum(axis=0)


@exercise("4.1")
def check_layernorm_backward(fn, eps: float = 1e-5) -> bool:
    """fn(dy, x, gamma, eps) -> (dx, dgamma, dbeta) for y = LayerNorm(x) = gamma ⊙ x_hat + beta.

    x, dy: (B, S, d_model); gamma: (d_model,). Compared with
    ``layernorm_backward`` and with numerical gradients of sum(y ⊙ dy).
    """
    r = case_rng(40)
    B, S, d = sizes(r, (2, 3, 6), 3, 7)
    x = r.standard_normal((B, S, d)) * 2.0 + 0.5
    gamma = 1.0 + 0.3 * r.standard_normal(d)
    beta = 0.1 * r.standard_normal(d)
    dy = r.standard_normal((B, S, d))
    got = fn(*copy_all(dy, x, gamma), eps)
    if not_attempted(got):
        return False
    dx, dgamma, dbeta = unpack(got, ["dx", "dgamma", "dbeta"])

    _, cache = layernorm_forward(x, gamma, beta, eps)
    ref = layernorm_backward(dy, cache)

    def f():
        return float((layernorm_forward(x, gamma, beta, eps)[0] * dy).sum())

    num = [numerical_gradient(f, a) for a in (x, gamma, beta)]

    def variant(**mistake):
        return _layernorm_backward_variant(dy, x, gamma, eps, **mistake)[0]

    x_hat = (x - x.mean(axis=-1, keepdims=True)) * cache.rstd
    hints = {
        "dx": [
            (variant(ddof=1), tr("you used the unbiased variance (divide by n - 1); LayerNorm's is biased: divide "
                                 "by n")),
            (variant(eps_outside=True), tr("eps is outside the square root: r = 1 / sqrt(var + eps)")),
            (variant(mean_path=False, var_path=False),
             tr("you treated the mean and the variance as constants; they depend on x: subtract mean(g) and "
                "x_hat ⊙ mean(g ⊙ x_hat)")),
            (variant(var_path=False), tr("the variance path is missing: subtract x_hat ⊙ mean(g ⊙ x_hat) too")),
            (variant(mean_path=False), tr("the mean path is missing: subtract mean(g) too")),
            (variant(use_gamma=False), tr("gamma is missing: the gradient reaching x_hat is g = dy ⊙ gamma")),
        ],
        "dgamma": [
            ((dy * x).reshape(-1, d).sum(axis=0), tr("dgamma multiplies x_hat (the normalized input), not x")),
            (dy * x_hat, tr("gamma is shared by every position: sum dy ⊙ x_hat over batch and positions")),
        ],
        "dbeta": [(dy, tr("beta is shared by every position: sum dy over batch and positions"))],
    }
    errors = {name: check_array(name, g, rf, nm, hints=hints[name])
              for name, g, rf, nm in zip(("dx", "dgamma", "dbeta"), (dx, dgamma, dbeta), ref, num)}
    return report_correct(errors)


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


def _residual_reference(dy, x, W, eps, pre_ln: bool):
    """(dx, dW) of the pre-LN (or post-LN) block with a linear sub-layer, from the package's layers."""
    _, (lin_cache, ln_cache) = (_pre_ln if pre_ln else _post_ln)(x, W, eps)
    if pre_ln:
        dn, dW, _ = linear_backward(dy, lin_cache)
        return dy + layernorm_backward(dn, ln_cache)[0], dW
    dz = layernorm_backward(dy, ln_cache)[0]
    dxl, dW, _ = linear_backward(dz, lin_cache)
    return dz + dxl, dW


def _residual_check(fn, name, pre_ln: bool, eps: float) -> bool:
    r = case_rng(42 if pre_ln else 41)
    B, S, d = sizes(r, (2, 3, 5), 3, 6)
    x = r.standard_normal((B, S, d))
    W = r.standard_normal((d, d)) / math.sqrt(d)
    dy = r.standard_normal((B, S, d))
    got = fn(*copy_all(dy, x, W), eps)
    if not_attempted(got):
        return False
    dx, dW = unpack(got, ["dx", "dW"])

    forward = _pre_ln if pre_ln else _post_ln
    _, (lin_cache, ln_cache) = forward(x, W, eps)
    fold = x.reshape(-1, d)
    ref_dx, ref_dW = _residual_reference(dy, x, W, eps, pre_ln)
    if pre_ln:
        n = lin_cache.x                                        # LN(x), the branch's input
        dn, _, _ = linear_backward(dy, lin_cache)
        hints = {
            "dx": [(ref_dx - dy, tr("the skip connection's term is missing: y = x + ..., so dx = dy + (the branch's "
                                    "dx)")),
                   (dy + dn, tr("the branch's gradient must also go back through the LayerNorm (layernorm_backward)"))],
            "dW": [(fold.T @ dy.reshape(-1, d), tr("the sub-layer's input is LN(x), not x: dW = LN(x)ᵀ dy")),
                   (dy.reshape(-1, d).T @ n.reshape(-1, d), tr("transposed: dW = LN(x)ᵀ dy, rows index LN(x)'s "
                                                               "features"))],
        }
    else:
        dz = layernorm_backward(dy, ln_cache)[0]
        dxl, _, _ = linear_backward(dz, lin_cache)
        hints = {
            "dx": [(dxl, tr("the skip connection's term is missing: z = x + x W, so dx = dz + dz Wᵀ")),
                   (dy + dxl, tr("the skip term carries dz (the gradient after the LayerNorm backward), not dy")),
                   (dy + dy @ W.T, tr("go back through the LayerNorm first: dz = layernorm_backward(dy, ...)"))],
            "dW": [(fold.T @ dy.reshape(-1, d), tr("dW must use dz (after the LayerNorm backward), not dy: dW = xᵀ "
                                                   "dz")),
                   (dz.reshape(-1, d).T @ fold, tr("transposed: dW = xᵀ dz, rows index x's features"))],
        }

    def f():
        return float((forward(x, W, eps)[0] * dy).sum())

    errors = {"dx": check_array("dx", dx, ref_dx, numerical_gradient(f, x), hints=hints["dx"]),
              "dW": check_array("dW", dW, ref_dW, numerical_gradient(f, W), hints=hints["dW"])}
    return report_correct(errors)


@exercise("4.2")
def check_post_ln_residual_backward(fn, eps: float = 1e-5) -> bool:
    """fn(dy, x, W, eps) -> (dx, dW) for the paper's post-LN block with a linear
    sub-layer:  y = LayerNorm(x + x W)  (gamma = 1, beta = 0, no dropout).
    x, dy: (B, S, d); W: (d, d)."""
    return _residual_check(fn, "post_ln_residual_backward", pre_ln=False, eps=eps)


@exercise("4.3")
def check_pre_ln_residual_backward(fn, eps: float = 1e-5) -> bool:
    """fn(dy, x, W, eps) -> (dx, dW) for the pre-LN block with a linear
    sub-layer:  y = x + LayerNorm(x) W  (gamma = 1, beta = 0, no dropout)."""
    return _residual_check(fn, "pre_ln_residual_backward", pre_ln=True, eps=eps)


# -- lesson 5: embeddings and softmax ----------------------------------------------

def _fancy_index_add(dout, ids, V, scale):
    """What `dE[ids] += dout · scale` gives: one update per repeated row (the last), not their sum."""
    d = dout.shape[-1]
    dE = numpy.zeros((V, d))
    dE[ids.reshape(-1)] += dout.reshape(-1, d) * scale
    return dE


FANCY_INDEX_HINT = (tr("a token that occurs several times got only one of its updates: `dE[ids] += ...` (or `=`) "
                       "keeps one per repeated row; add them all with np.add.at(dE, ids, ...) "
                       "(the package: backend.scatter_add)"))


@exercise("5.1")
def check_embedding_backward(fn) -> bool:
    """fn(dout, ids, V) -> dE: (V, d_model) for out = E[ids] · sqrt(d_model).

    ids: (B, S) ints with repeated tokens; dout: (B, S, d_model)."""
    r = case_rng(50)
    V, d, B, S = 7, 4, 2, 6
    ids = numpy.array([[1, 3, 3, 0, 5, 3], [5, 1, 6, 6, 2, 1]])      # repeats on purpose; row 4 unused
    if not visible():
        V, d, B, S = sizes(r, (7, 4, 2, 6), 3, 8)
        ids = r.integers(0, V - 1, size=(B, S))                      # the last row unused
        ids[0, -1] = ids[0, 0]                                       # a repeated token, always
    E = r.standard_normal((V, d))
    dout = r.standard_normal((B, S, d))
    got = fn(dout.copy(), ids.copy(), V)
    if not_attempted(got):
        return False

    scale = math.sqrt(d)
    ref = numpy.zeros((V, d))
    embedding_backward(dout, embedding_forward(ids, E, scale)[1], ref)

    def f():
        return float((embedding_forward(ids, E, scale)[0] * dout).sum())

    hints = [(_fancy_index_add(dout, ids, V, scale), FANCY_INDEX_HINT),
             (ref / scale, tr("the sqrt(d_model) factor is missing: out = E[ids] · sqrt(d_model), so dE carries it")),
             (ref / scale ** 2, tr("divided by sqrt(d_model) instead of multiplied: out = E[ids] · sqrt(d_model)"))]
    return report_correct({"dE": check_array("dE", got, ref, numerical_gradient(f, E), hints=hints)})


def _tied_reference(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits, E):
    """dE of the three uses of E, and its three parts (source, target, output projection)."""
    V, d = E.shape
    scale = math.sqrt(d)
    g_src, g_tgt = numpy.zeros((V, d)), numpy.zeros((V, d))
    embedding_backward(d_src, embedding_forward(src_ids, E, scale)[1], g_src)
    embedding_backward(d_tgt, embedding_forward(tgt_ids, E, scale)[1], g_tgt)
    g_out = dlogits.reshape(-1, V).T @ x_dec.reshape(-1, d)
    return g_src + g_tgt + g_out, (g_src, g_tgt, g_out)


@exercise("5.2")
def check_tied_embedding_grad(fn) -> bool:
    """fn(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits) -> dE: (V, d_model).

    One matrix E is used three times (§3.4):
        src_emb = E[src_ids] · sqrt(d)    upstream gradient d_src: (B, S, d)
        tgt_emb = E[tgt_ids] · sqrt(d)    upstream gradient d_tgt: (B, T, d)
        logits  = x_dec E^T               upstream gradient dlogits: (B, T, V)
    dE is the gradient of L = Σ d_src⊙src_emb + Σ d_tgt⊙tgt_emb + Σ dlogits⊙logits.
    """
    r = case_rng(51)
    V, d, B, S, T = sizes(r, (9, 4, 2, 5, 4), 3, 9)
    src_ids = r.integers(0, V, size=(B, S))
    tgt_ids = r.integers(0, V, size=(B, T))
    src_ids[0, :2] = 3 if visible() else src_ids[0, 0]   # a repeated token
    E = r.standard_normal((V, d))
    d_src = r.standard_normal((B, S, d))
    d_tgt = r.standard_normal((B, T, d))
    x_dec = r.standard_normal((B, T, d))
    dlogits = r.standard_normal((B, T, V))
    got = fn(*copy_all(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits))
    if not_attempted(got):
        return False

    scale = math.sqrt(d)
    ref, (g_src, g_tgt, g_out) = _tied_reference(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits, E)

    def f():
        return float((embedding_forward(src_ids, E, scale)[0] * d_src).sum()
                     + (embedding_forward(tgt_ids, E, scale)[0] * d_tgt).sum()
                     + ((x_dec @ E.T) * dlogits).sum())

    hints = [
        (g_tgt + g_out, tr("the source embedding's part is missing: E is used three times, add all three gradients")),
        (g_src + g_out, tr("the target embedding's part is missing: E is used three times, add all three gradients")),
        (g_src + g_tgt, tr("the output projection's part (dlogitsᵀ x_dec) is missing: add all three gradients")),
        (g_out, tr("only the output projection's part: add the two embeddings' gradients too")),
        (_fancy_index_add(d_src, src_ids, V, scale) + _fancy_index_add(d_tgt, tgt_ids, V, scale) + g_out,
         FANCY_INDEX_HINT),
        ((g_src + g_tgt) / scale + g_out, tr("the sqrt(d_model) factor of the two embeddings is missing")),
        ((g_src + g_tgt) * scale + g_out, tr("the output projection has no sqrt(d_model): only the embeddings do")),
    ]
    return report_correct({"dE": check_array("dE", got, ref, numerical_gradient(f, E), hints=hints)})


# -- lesson 6: positional encoding ---------------------------------------------------

def _pe_variants(max_len, d):
    """The table with the usual mistakes, to name them: (table, hint) pairs."""
    pos = numpy.arange(max_len)[:, None]
    omega = 10000.0 ** (-numpy.arange(0, d, 2) / d)               # one frequency per sin/cos pair
    concatenated = numpy.concatenate([numpy.sin(pos * omega), numpy.cos(pos * omega)], axis=1)
    swapped = numpy.empty((max_len, d))
    swapped[:, 0::2], swapped[:, 1::2] = numpy.cos(pos * omega), numpy.sin(pos * omega)
    per_column = numpy.empty((max_len, d))                        # column c uses exponent c/d: odd columns off
    omega_c = 10000.0 ** (-numpy.arange(d) / d)
    per_column[:, 0::2], per_column[:, 1::2] = numpy.sin(pos * omega_c[0::2]), numpy.cos(pos * omega_c[1::2])
    no_two = numpy.empty((max_len, d))                            # exponent i/d instead of 2i/d
    omega_half = 10000.0 ** (-numpy.arange(d // 2) / d)
    no_two[:, 0::2], no_two[:, 1::2] = numpy.sin(pos * omega_half), numpy.cos(pos * omega_half)
    return [
        (concatenated, tr("all sines then all cosines (concatenated); §3.5 interleaves them: column 2i is "
                          "sin(pos ω_i) and column 2i+1 is cos(pos ω_i), the same frequency side by side")),
        (swapped, tr("sin and cos swapped: even columns (2i) are sines, odd columns (2i+1) cosines")),
        (per_column, tr("the odd columns have their own frequency: a sin/cos pair shares ω_i = 10000^(-2i/d_model), "
                        "with i the pair index (column 2i+1 also uses 2i)")),
        (no_two, tr("the exponent is 2i/d_model, not i/d_model (i counts pairs, 0 .. d_model/2 - 1)")),
    ]


@exercise("6.1")
def check_sinusoidal_pe(fn) -> bool:
    """fn(max_len, d_model) -> PE: (max_len, d_model), the table of §3.5 (even d_model)."""
    errors = {}
    cases = ((50, 16), (9, 6))
    if not visible():
        r = case_rng(60)
        cases = ((int(r.integers(2, 60)), 2 * int(r.integers(1, 33))), (1, edge([2, 4, 8, 64])))
    for max_len, d in cases:
        got = fn(max_len, d)
        if not_attempted(got):
            return False
        name = f"PE(max_len={max_len}, d_model={d})"
        errors[name] = check_array(name, got, sinusoidal_table(max_len, d, numpy, numpy.float64),
                                   hints=_pe_variants(max_len, d))
    return report_correct(errors)


def _pe_similarity_reference(k, d):
    """PE(pos) · PE(pos + k) = Σ_i cos(k ω_i), the closed form (any pos)."""
    omega = 10000.0 ** (-numpy.arange(0, d, 2) / d)
    return numpy.cos(numpy.asarray(k)[:, None] * omega).sum(axis=1)


@exercise("6.2")
def check_pe_similarity(fn) -> bool:
    """fn(k, d_model) -> PE(pos) · PE(pos + k) in closed form, for an array of offsets k.

    The answer must not depend on pos; it is compared with dot products of
    rows of the table at two different starting positions."""
    errors = {}
    r = case_rng(61)
    dims = (16, 64) if visible() else (2 * int(r.integers(1, 17)), 2 * int(r.integers(17, 65)))
    for d in dims:
        k = numpy.arange(0, 300) if visible() else numpy.sort(r.choice(700, size=int(r.integers(1, 200)),
                                                                       replace=False))
        got = fn(k.copy(), d)
        if not_attempted(got):
            return False
        table = sinusoidal_table(2000, d, numpy, numpy.float64)
        omega = 10000.0 ** (-numpy.arange(0, d, 2) / d)
        closed = _pe_similarity_reference(k, d)
        hints = [
            (closed / (d / 2), tr("divided by d_model/2: that is the cosine similarity; the dot product is not "
                                  "normalized (each row has squared norm d_model/2)")),
            (numpy.sin(k[:, None] * omega).sum(axis=1), tr("sin instead of cos: sin a sin b + cos a cos b = cos(a - "
                                                           "b)")),
            (2 * closed, tr("twice the answer: each pair (sin, cos) contributes cos(k ω_i) once")),
            (numpy.cos(k[:, None] * 10000.0 ** (-numpy.arange(d) / d)).sum(axis=1),
             tr("there are d_model/2 frequencies, one per sin/cos pair, not d_model")),
        ]
        for pos in (0, 1234):
            name = f"similarity(k, d_model={d}) at pos={pos}"
            errors[name] = check_array(name, got, table[pos + k] @ table[pos], hints=hints)
    return report_correct(errors)


# -- lesson 7: the encoder-decoder assembled ---------------------------------------

def _token_array(name, got):
    if got is None:
        raise WrongAnswer(tr(f"{name} is None: return an array of token ids"))
    arr = backend.to_numpy(got)
    if arr.dtype.kind not in "iu":
        raise WrongAnswer(tr(f"{name}: expected an integer array of token ids, got dtype {arr.dtype}"))
    return arr


@exercise("7.1")
def check_shift_right(fn) -> bool:
    """fn(tgt_seqs, pad_id, bos_id, eos_id) -> (tgt_in, tgt_out), each (B, T) ints, T = longest + 1.

    tgt_in is <bos> + sentence, tgt_out is sentence + <eos>, both padded with
    pad_id: the decoder reads tgt_in[:, i] and must predict tgt_out[:, i] (§3.1)."""
    cases = (([[7, 6, 5, 4, 3], [3, 9, 8], [], [5]], 0, 1, 2),
             ([[2, 3], [4, 5, 6, 7]], 9, 0, 1))
    if not visible():
        r = case_rng(70)
        pad_id, bos_id, eos_id = (int(i) for i in r.permutation(12)[:3])
        words = [i for i in range(3, 40) if i not in (pad_id, bos_id, eos_id)]
        seqs = [[int(w) for w in r.choice(words, size=int(r.integers(0, 8)))] for _ in range(int(r.integers(2, 6)))]
        seqs[0] = [int(w) for w in r.choice(words, size=7)]          # one long sentence: the others padded
        cases = ((seqs, pad_id, bos_id, eos_id),)
    for tgt_seqs, pad_id, bos_id, eos_id in cases:
        got = fn([list(t) for t in tgt_seqs], pad_id, bos_id, eos_id)
        if not_attempted(got):
            return False
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise WrongAnswer(tr(f"shift_right must return a tuple (tgt_in, tgt_out), got {type(got).__name__}"))
        source = next(i for i in range(3, 50) if i not in (pad_id, bos_id, eos_id))   # a source token, any
        ref = make_batch([[source]] * len(tgt_seqs), tgt_seqs, pad_id, bos_id, eos_id, xp=numpy)
        where = f"(pad_id={pad_id}, bos_id={bos_id}, eos_id={eos_id})"
        arrays = {name: _token_array(name, g) for name, g in zip(("tgt_in", "tgt_out"), got)}
        for name, r in (("tgt_in", ref.tgt_in), ("tgt_out", ref.tgt_out)):
            arr = arrays[name]
            if arr.shape != r.shape:
                msg = tr(f"{name} {where}: shape mismatch: expected {r.shape}, got {arr.shape}")
                if arr.shape == (r.shape[0], r.shape[1] - 1):
                    msg += "\n  hint: " + tr("T = longest sentence + 1: <bos> (tgt_in) or <eos> (tgt_out) needs a "
                                             "place")
                raise WrongAnswer(msg)
            if not numpy.array_equal(arr, r):
                b = int(numpy.argwhere(arr != r)[0][0])
                msg = (tr(f"{name} {where}: {int((arr != r).sum())} ids wrong; sentence {b} "
                          f"{tgt_seqs[b]} should give {r[b].tolist()}, got {arr[b].tolist()}"))
                other = ref.tgt_out if name == "tgt_in" else ref.tgt_in
                if numpy.array_equal(arr, other):
                    msg += ("\n  hint: " + tr("tgt_in and tgt_out are swapped: the decoder reads <bos> + sentence and "
                                             "predicts sentence + <eos>"))
                elif name == "tgt_out" and numpy.array_equal(arr[:, :-1], ref.tgt_in[:, 1:]):
                    msg += "\n  hint: " + tr("<eos> is missing: tgt_out ends every sentence with eos_id")
                raise WrongAnswer(msg)
    say(tr("correct"))
    say(tr("  tgt_in = <bos> + sentence and tgt_out = sentence + <eos>, padded, match make_batch's for 2 batches"))
    return True


def _encoder_layer_reference(d_model: int, h: int, d_ff: int) -> int:
    """The parameters of the package's EncoderLayer, counted on one built."""
    from minitransformer.model import EncoderLayer, TransformerConfig  # noqa: PLC0415  (model imports are heavier)

    cfg = TransformerConfig(vocab_size=10, d_model=d_model, h=h, d_ff=d_ff, N=1)
    return EncoderLayer(cfg, backend.host_rng(0), None).num_parameters()


@exercise("7.2")
def check_encoder_layer_params(fn) -> bool:
    """fn(d_model, d_ff) -> int, the number of learnable scalars in one EncoderLayer."""
    counted = []
    cases = ((8, 2, 16), (24, 4, 40), (512, 8, 2048))
    if not visible():
        r = case_rng(72)
        cases = tuple((h * int(r.integers(1, 9)), h, int(r.integers(1, 80))) for h in (1, 2, 4))
    for d_model, h, d_ff in cases:
        got = fn(d_model, d_ff)
        if not_attempted(got):
            return False
        expected = _encoder_layer_reference(d_model, h, d_ff)
        d = d_model
        check_count(tr(f"encoder layer parameters for d_model={d_model}, d_ff={d_ff}"), got, expected, hints=[
            (expected - 4 * d, tr("4·d_model short: the four attention biases (b^Q, b^K, b^V, b^O), or the two "
                                  "LayerNorms' gamma and beta (2 · 2 · d_model)")),
            (expected - 4 * d - d_ff - d, tr("every bias is missing: attention has 4 (d_model each), the FFN b_1 "
                                             "(d_ff) and b_2 (d_model)")),
            (expected - 2 * d, tr("one LayerNorm short: an encoder layer has two, one per sub-layer")),
            (expected - d * d_ff, tr("the FFN has two matrices, W_1 (d_model × d_ff) and W_2 (d_ff × d_model)")),
            (expected + 8 * d, tr("too many LayerNorms: an encoder layer has two (2 · 2 · d_model scalars)")),
        ])
        counted.append(tr(f"{expected:,} for (d_model={d_model}, d_ff={d_ff})"))
    say(tr("correct"))
    say("  " + "; ".join(counted))
    return True


@exercise("7.3")
def check_transformer_params(fn) -> bool:
    """fn(V, d_model, d_ff, N) -> int, the learnable scalars of the whole (post-LN) Transformer,
    with the embedding matrix shared three ways (§3.4)."""
    from minitransformer.model import Transformer, TransformerConfig, count_parameters  # noqa: PLC0415

    counted = []
    cases = ((10, 8, 2, 16, 1), (13, 8, 2, 12, 2), (37000, 512, 8, 2048, 6), (37000, 1024, 16, 4096, 6))
    if not visible():
        r = case_rng(73)
        cases = tuple((int(r.integers(5, 60)), 2 * h, h, int(r.integers(1, 30)), N)
                      for h, N in ((1, 1), (2, int(r.integers(2, 4))))) + \
            ((int(r.integers(1000, 40000)), 64 * int(r.integers(1, 9)), 4, int(r.integers(100, 3000)), 6),)
    for V, d_model, h, d_ff, N in cases:
        got = fn(V, d_model, d_ff, N)
        if not_attempted(got):
            return False
        cfg = TransformerConfig(vocab_size=V, d_model=d_model, h=h, d_ff=d_ff, N=N)
        expected = count_parameters(cfg) if V > 100 else Transformer(cfg, seed=0).num_parameters()
        d = d_model
        cross_attention = 4 * d * d + 4 * d + 2 * d                # W^Q..W^O, their biases, one LayerNorm
        check_count(tr(f"Transformer parameters for V={V}, d_model={d}, d_ff={d_ff}, N={N}"), got, expected, hints=[
            (expected + 2 * V * d, tr("that is 2·V·d_model too many: E is shared by the two embeddings and the output "
                                      "projection, count it once")),
            (expected + V * d, tr("V·d_model too many: E is shared three ways (source, target, output), count it "
                                  "once")),
            (expected - V * d, tr("the embedding matrix E (V × d_model) is missing")),
            (expected - N * cross_attention, tr("each decoder layer has a third sub-layer, encoder-decoder attention, "
                                                "with its own weights, biases and LayerNorm")),
        ])
        counted.append(f"{expected:,}")
    say(tr("correct"))
    say("  " + ", ".join(counted) + tr(" (two tiny models built and counted, then base and big)"))
    return True
