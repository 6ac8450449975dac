"""Checking cells for the exercises of lessons 0-3.

Every checker follows the contract of ``lessonkit.exercises._common`` (one
tolerance, TOL = 1e-6, for every comparison; a ``hint:`` line naming the likely
mistake when a wrong answer matches a common one).

Exercise 0.1 check_numerical_gradient      Exercise 0.2 check_linear_backward
Exercise 1.1 check_softmax_backward        Exercise 1.2 check_causal_mask
Exercise 1.3 check_attention_backward
Exercise 2.1 check_merge_heads_backward    Exercise 2.2 check_attention_flops
Exercise 2.3 check_decoder_mask            Exercise 2.4 check_qkv_projection_backward
Exercise 3.1 check_relu_backward           Exercise 3.2 check_ffn_backward
"""

from __future__ import annotations

import numpy as np

from minitransformer import backend
from minitransformer.gradcheck import numerical_gradient
from minitransformer.layers.attention import (
    AttentionCache,
    MultiHeadAttention,
    attention_backward,
    attention_forward,
    merge_heads,
    softmax_lastaxis,
    split_heads,
)
from minitransformer.layers.linear import LinearCache, linear_backward, linear_forward
from minitransformer.layers.masks import causal_mask, padding_mask

from ..i18n import tr
from ._common import (
    NOT_ATTEMPTED,
    WrongAnswer,
    as_array,
    built,
    case_rng,
    check_array,
    copy_all,
    describe,
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
    "check_numerical_gradient",
    "check_linear_backward",
    "check_softmax_backward",
    "check_causal_mask",
    "check_attention_backward",
    "check_merge_heads_backward",
    "check_attention_flops",
    "check_decoder_mask",
    "check_qkv_projection_backward",
    "check_relu_backward",
    "check_ffn_backward",
]


# -- lesson 0: how to use ------------------------------------------------------------

def _sin_cube(state):
    """f() = sum(sin(x) c + x³/3), reading ``state["x"]`` (the array the learner's function perturbs)."""
    x, c = state["x"], state["c"]

    def f():
        return float(np.sum(np.sin(x) * c + x ** 3 / 3))

    return f


@exercise("0.1")
def check_numerical_gradient(fn) -> bool:
    """fn(f, x, h) -> the central-difference gradient of the scalar f() w.r.t. x.

    f takes no argument and reads x, so fn must perturb x in place (and restore it).
    """
    rng = case_rng(0)
    shape = sizes(rng, (3, 4))
    x = rng.standard_normal(shape)
    c = rng.standard_normal(shape)
    f = _sin_cube({"x": x, "c": c})
    exact = np.cos(x) * c + x ** 2             # the derivative, worked out by hand
    x_before = x.copy()
    got = fn(built(fn, _sin_cube, {"x": x, "c": c}), x, 1e-5)
    if not_attempted(got):
        return False
    if not np.array_equal(x, x_before):
        raise WrongAnswer(
            tr("x was left changed after your function returned: put every entry back to "
               "its old value after perturbing it (f reads x, so later calls would see a wrong x)")
        )
    numeric = numerical_gradient(f, x, 1e-5)
    # The one-sided difference (f(x+h) - f(x)) / h: right idea, error O(h) instead of O(h²).
    one_sided = np.zeros_like(x)
    f0 = f()
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + 1e-5
        one_sided[i] = (f() - f0) / 1e-5
        x[i] = old
    err = check_array("grad", got, exact, numeric, hints=[
        (one_sided, tr("this is the one-sided difference (f(x+h) - f(x)) / h, whose error "
                       "shrinks only like h; use the central difference (f(x+h) - f(x-h)) / (2h)")),
        (-exact, tr("the sign is flipped: (f(x+h) - f(x-h)), not (f(x-h) - f(x+h))")),
        (2 * exact, tr("twice the right answer: divide by 2h, not h")),
    ])
    return report_correct({"grad": err})


@exercise("0.2")
def check_linear_backward(fn) -> bool:
    """fn(dy, x, W, b) -> (dx, dW, db) for y = x W + b with x: (B, S, d_in)."""
    rng = case_rng(1)
    B, S, d_in, d_out = sizes(rng, (2, 3, 4, 5), 2, 5)
    x = rng.standard_normal((B, S, d_in))
    W = rng.standard_normal((d_in, d_out))
    b = rng.standard_normal(d_out)
    dy = rng.standard_normal((B, S, d_out))
    got = fn(*copy_all(dy, x, W, b))
    if not_attempted(got):
        return False
    dx, dW, db = unpack(got, ["dx", "dW", "db"])
    ref = linear_backward(dy, LinearCache(x, W))

    def f():
        return float(np.sum(linear_forward(x, W, b)[0] * dy))

    numeric = [numerical_gradient(f, a) for a in (x, W, b)]
    n_rows = x.shape[0] * x.shape[1]
    errors = {
        "dx": check_array("dx", dx, ref[0], numeric[0]),
        "dW": check_array("dW", dW, ref[1], numeric[1], hints=[
            (ref[1] / n_rows, tr("dW is the mean over the B·S rows; the loss adds them up, so sum them")),
        ]),
        "db": check_array("db", db, ref[2], numeric[2], hints=[
            (ref[2] / n_rows, tr("db is the mean over the B·S rows; the loss adds them up, so sum them")),
        ]),
    }
    return report_correct(errors)


# -- lesson 1: scaled dot-product attention (§3.2.1) -------------------------------

def _softmax_backward_reference(dA, A):
    """dS for A = softmax(S) over the last axis: A ⊙ (dA − Σ_j dA_j A_j)."""
    return A * (dA - (dA * A).sum(axis=-1, keepdims=True))


@exercise("1.1")
def check_softmax_backward(fn) -> bool:
    """fn(dA, A) -> dS, where A = softmax(S) over the last axis and dA = dL/dA."""
    rng = case_rng(2)
    S = 2.0 * rng.standard_normal(sizes(rng, (2, 2, 3, 4), 2, 5))
    A = softmax_lastaxis(S.copy())
    dA = rng.standard_normal(A.shape)
    got = fn(*copy_all(dA, A))
    if not_attempted(got):
        return False
    reference = _softmax_backward_reference(dA, A)

    def f():
        return float(np.sum(softmax_lastaxis(S.copy()) * dA))

    numeric = numerical_gradient(f, S)
    err = check_array("dS", got, reference, numeric, hints=[
        (A * dA, tr("only the diagonal of the Jacobian: subtract the row sum Σ_j dA_j·A_j "
                    "before multiplying by A (each weight depends on every score in its row)")),
        (A * (1 - A) * dA, tr("only the diagonal of the Jacobian, A_i(1 - A_i); the off-diagonal "
                              "terms -A_i·A_j matter too")),
        (A * (dA - (dA * A).sum(axis=-2, keepdims=True)),
         tr("the sum must run over the last axis (the keys), the axis the softmax normalises")),
        (-reference, tr("the sign is flipped")),
    ])
    return report_correct({"dS": err})


def _explain_mask_difference(got, expected, key_is_pad=None) -> str:
    """Describe the first entry where two (T_q, T_k) boolean masks differ, and why it matters."""
    i, j = (int(v) for v in np.argwhere(got != expected)[0])
    where = tr(f"entry [{i}, {j}]")
    if got[i, j] and not expected[i, j]:
        why = tr("it is padding") if key_is_pad is not None and key_is_pad[j] else tr(f"it comes after position {i}")
        return tr(f"{where} is True, but query {i} must not see key {j} ({why})")
    return tr(f"{where} is False, but query {i} should be allowed to see key {j}")


@exercise("1.2")
def check_causal_mask(fn) -> bool:
    """fn(T) -> bool array (1, 1, T, T), True where query i may attend to key j (j <= i)."""
    first = True
    sizes = (1, 5) if visible() else (int(case_rng(3).integers(2, 10)), edge([1, 7, 2, 9]))
    for T in sizes:
        got = fn(T)
        if first and not_attempted(got):
            return False
        first = False
        got = as_array(f"mask (T={T})", got)
        if got.dtype != np.bool_:
            raise WrongAnswer(
                tr(f"mask (T={T}): must be a boolean array (True = may attend), got dtype {got.dtype}")
            )
        expected = backend.to_numpy(causal_mask(T, np))
        if got.shape != expected.shape:
            raise WrongAnswer(
                tr(f"mask (T={T}): shape mismatch: expected {expected.shape} (so it broadcasts against "
                   f"the scores (B, h, S_q, S_k)), got {tuple(got.shape)}")
            )
        if not np.array_equal(got, expected):
            n_bad = int((got != expected).sum())
            why = _explain_mask_difference(got[0, 0], expected[0, 0])
            msg = tr(f"mask (T={T}): {n_bad} of {T * T} entries are wrong; {why}")
            if np.array_equal(got, expected.swapaxes(-1, -2)):
                msg += ("\n  hint: " + tr("this is the transpose: rows are queries, columns are keys; "
                                         "a query sees the keys at or before it"))
            elif np.array_equal(got, expected & ~np.eye(T, dtype=bool)):
                msg += "\n  hint: " + tr("the diagonal is masked: a position may attend to itself")
            raise WrongAnswer(msg)
    # What the mask buys: changing the last token cannot change any earlier output.
    rng = np.random.default_rng(3)
    T = max(sizes)
    got = as_array("mask", fn(T)) if T != sizes[-1] else got
    Q, K, V = (rng.standard_normal((1, 1, T, 4)) for _ in range(3))
    out1, _ = attention_forward(Q, K, V, got)
    K[..., -1, :] += 10.0
    V[..., -1, :] -= 10.0
    out2, _ = attention_forward(Q, K, V, got)
    change = float(np.abs(out2[..., :-1, :] - out1[..., :-1, :]).max())
    say(tr("correct"))
    say(tr(f"  all entries match for T={sizes[0]} and T={sizes[1]}; changing the last key and value moved the "
             f"earlier outputs by {change:.1e}"))
    return True


@exercise("1.3")
def check_attention_backward(fn) -> bool:
    """fn(dout, cache) -> (dQ, dK, dV); cache is the AttentionCache of attention_forward."""
    rng = case_rng(4)
    B, h, S_q, S_k, d_k, d_v = sizes(rng, (2, 2, 3, 4, 5, 3), 2, 5)
    Q = rng.standard_normal((B, h, S_q, d_k))
    K = rng.standard_normal((B, h, S_k, d_k))
    V = rng.standard_normal((B, h, S_k, d_v))
    mask = np.ones((B, 1, 1, S_k), dtype=bool)
    mask[1, ..., -1] = False                  # the second sequence has one padded key
    out, cache = attention_forward(Q, K, V, mask)
    dout = rng.standard_normal(out.shape)
    learner_cache = AttentionCache(*copy_all(cache.Q, cache.K, cache.V, cache.A), cache.scale)
    got = fn(dout.copy(), learner_cache)
    if not_attempted(got):
        return False
    dQ, dK, dV = unpack(got, ["dQ", "dK", "dV"])
    ref = attention_backward(dout, cache)

    def f():
        return float(np.sum(attention_forward(Q, K, V, mask)[0] * dout))

    numeric = [numerical_gradient(f, a) for a in (Q, K, V)]
    scale = cache.scale
    # The wrong answers people often write, to name them in the hint.
    A = cache.A
    dA = dout @ V.swapaxes(-1, -2)
    dS_no_rowsum = A * dA * scale
    errors = {}
    for i, (name, value) in enumerate((("dQ", dQ), ("dK", dK), ("dV", dV))):
        hints = []
        if name in ("dQ", "dK"):
            hints += [
                (ref[i] / scale, tr("the 1/sqrt(d_k) factor is missing: S = Q Kᵀ · scale, so dQ and dK carry it")),
                (ref[i] * scale, tr("the 1/sqrt(d_k) factor is applied twice")),
                (dS_no_rowsum @ K if name == "dQ" else dS_no_rowsum.swapaxes(-1, -2) @ Q,
                 tr("the softmax backward lacks the row-sum term: dS = A ⊙ (dA - rowsum(dA ⊙ A))")),
            ]
        else:
            hints.append((-ref[i], tr("the sign of dV is flipped")))
        errors[name] = check_array(name, value, ref[i], numeric[i], hints=hints)
    return report_correct(errors)


# -- lesson 2: multi-head attention (§3.2.2-3.2.3) ---------------------------------

@exercise("2.1")
def check_merge_heads_backward(fn) -> bool:
    """fn(dconcat, h) -> dheads, the backward of merge_heads: (B, S, d_model) -> (B, h, S, d_k)."""
    rng = case_rng(5)
    B, h, S, d_k = sizes(rng, (2, 3, 4, 2), 2, 5)
    heads = rng.standard_normal((B, h, S, d_k))
    dconcat = rng.standard_normal((B, S, h * d_k))
    got = fn(dconcat.copy(), h)
    if not_attempted(got):
        return False
    reference = np.ascontiguousarray(split_heads(dconcat, h))

    def f():
        return float(np.sum(merge_heads(heads) * dconcat))

    numeric = numerical_gradient(f, heads)
    err = check_array("dheads", got, reference, numeric, hints=[
        (dconcat.reshape(B, h, S, d_k),
         tr("a plain reshape to (B, h, S, d_k) mixes heads and positions: concat is laid out "
            "(B, S, h, d_k) in memory, so reshape to that first, then swap axes 1 and 2")),
    ])
    return report_correct({"dheads": err})


def _mha_flops(B, S_q, S_k, d_model, h):
    """Matmul FLOPs of one multi-head attention forward (a multiply-add = 2 FLOPs)."""
    d_k = d_model // h
    projections = 2 * B * S_q * d_model * d_model          # Q = x_q W^Q
    projections += 2 * 2 * B * S_k * d_model * d_model     # K, V = x_kv W^K, x_kv W^V
    projections += 2 * B * S_q * d_model * d_model         # Concat(heads) W^O
    attention = h * (2 * B * S_q * S_k * d_k)              # Q Kᵀ, every head
    attention += h * (2 * B * S_q * S_k * d_k)             # A V, every head
    return projections + attention


@exercise("2.2")
def check_attention_flops(fn) -> bool:
    """fn(B, S_q, S_k, d_model, h) -> matmul FLOPs of one multi-head attention forward."""
    cases = [(1, 10, 10, 512, 8), (1, 10, 10, 512, 1), (2, 7, 13, 64, 4), (3, 5, 9, 96, 12), (4, 16, 16, 32, 32)]
    if not visible():
        rng = case_rng(6)
        cases = []
        for _ in range(4):
            h = int(rng.choice([2, 3, 4, 6, 8]))
            S_q, S_k = (int(n) for n in rng.choice(np.arange(2, 40), size=2, replace=False))   # S_q != S_k
            cases.append((int(rng.integers(1, 5)), S_q, S_k, h * int(rng.integers(2, 17)), h))
    got0 = fn(*cases[0])
    if not_attempted(got0):
        return False
    worst = 0.0
    for case in cases:
        got = got0 if case == cases[0] else fn(*case)
        B, S_q, S_k, d_model, h = case
        expected = _mha_flops(*case)
        label = f"B={B}, S_q={S_q}, S_k={S_k}, d_model={d_model}, h={h}"
        try:
            value = float(got)
        except (TypeError, ValueError):
            raise WrongAnswer(tr(f"for {label}: expected a number, got {describe(got)}")) from None
        err = abs(value - expected) / expected
        if err > 1e-12:
            msg = (tr(f"for {label}: expected {expected:,} FLOPs, got {value:,.0f} "
                      f"(relative error {err:.2e})"))
            ratio = value / expected
            no_proj = expected - 4 * B * d_model * d_model * (S_q + S_k)
            k_on_q = expected + 4 * B * d_model * d_model * (S_q - S_k)
            if h > 1 and abs(ratio - h) < 1e-9:
                msg += "\n  hint: " + tr("your count grows with h, but each head has only d_k = d_model / h dimensions")
            elif abs(ratio - 0.5) < 1e-9:
                msg += "\n  hint: " + tr("you counted multiply-adds; a multiply-add is 2 FLOPs")
            elif abs(value - no_proj) < 1e-6 * expected:
                msg += "\n  hint: " + tr("that is only Q Kᵀ and A V; count the four projections W^Q, W^K, W^V, W^O too")
            elif S_q != S_k and abs(value - k_on_q) < 1e-6 * expected:
                msg += "\n  hint: " + tr("the K and V projections act on the S_k key positions, not S_q")
            raise WrongAnswer(msg)
        worst = max(worst, err)
    say(tr("correct"))
    say(tr(f"  {len(cases)} settings, max relative error {worst:.1e} vs the reference count "
             f"(a count has no gradient, so there is no numerical check)"))
    return True


@exercise("2.3")
def check_decoder_mask(fn) -> bool:
    """fn(tgt_ids, pad_id) -> bool (B, 1, T, T): causal AND the key is not padding."""
    pad_id = 0
    tgt_ids = np.array([[1, 5, 6, 7, 0, 0],
                        [1, 3, 4, 5, 6, 7],
                        [1, 9, 0, 0, 0, 0]])
    if not visible():
        rng = case_rng(7)
        B, T = (int(n) for n in rng.integers(2, 7, size=2))
        lengths = rng.integers(1, T + 1, size=B)
        lengths[0] = T                                        # one full row, the others padded
        tgt_ids = np.where(np.arange(T)[None, :] < lengths[:, None], rng.integers(1, 20, size=(B, T)), pad_id)
    got = fn(tgt_ids.copy(), pad_id)
    if not_attempted(got):
        return False
    got = as_array("mask", got)
    T = tgt_ids.shape[1]
    expected = backend.to_numpy(causal_mask(T, np) & padding_mask(tgt_ids, pad_id))
    if got.dtype != np.bool_:
        raise WrongAnswer(tr(f"mask: must be a boolean array (True = may attend), got dtype {got.dtype}"))
    if got.shape != expected.shape:
        raise WrongAnswer(
            tr(f"mask: shape mismatch: expected {expected.shape} = (B, 1, T, T), one mask per sentence "
               f"shared by all heads, got {tuple(got.shape)}")
        )
    if not np.array_equal(got, expected):
        idx = np.argwhere(got != expected)[0]
        b = int(idx[0])
        msg = (tr(f"mask: {int((got != expected).sum())} entries are wrong; in sentence {b}, ")
               + _explain_mask_difference(got[b, 0], expected[b, 0], tgt_ids[b] == pad_id))
        causal_only = np.broadcast_to(backend.to_numpy(causal_mask(T, np)), expected.shape)
        rows_masked = causal_mask(T, np) & (tgt_ids != pad_id)[:, None, :, None]
        if np.array_equal(got, causal_only):
            msg += "\n  hint: " + tr("only causal: padding keys are still visible; AND it with the padding mask")
        elif np.array_equal(got, rows_masked):
            msg += "\n  hint: " + tr("you masked padded queries (rows); the mask must hide padded keys (columns)")
        elif np.array_equal(got, np.broadcast_to(padding_mask(tgt_ids, pad_id), expected.shape)):
            msg += "\n  hint: " + tr("only padding: a decoder position must not see later positions either")
        raise WrongAnswer(msg)
    say(tr("correct"))
    say(tr(f"  all {expected.size} entries match causal_mask(T) & padding_mask(ids, pad_id)"))
    return True


def _qkv_reference(dQ, dK, dV, x, W_qkv):
    """(dx, dW_qkv, db_qkv) of [Q | K | V] = x W_qkv + b_qkv split into heads."""
    B, S, d_model = x.shape
    dqkv = np.concatenate([merge_heads(g) for g in (dQ, dK, dV)], axis=-1).reshape(-1, 3 * d_model)
    return (dqkv @ W_qkv.T).reshape(B, S, d_model), x.reshape(-1, d_model).T @ dqkv, dqkv.sum(axis=0)


@exercise("2.4")
def check_qkv_projection_backward(fn) -> bool:
    """fn(dQ, dK, dV, x, W_qkv) -> (dx, dW_qkv, db_qkv), the backward of self-attention's
    fused projection [Q | K | V] = x W_qkv + b_qkv followed by the split into heads.

    dQ, dK, dV: (B, h, S, d_k) as attention_backward returns them; x: (B, S, d_model);
    W_qkv: (d_model, 3·d_model), columns [0, d) for W^Q, [d, 2d) for W^K, [2d, 3d) for W^V.
    """
    rng = case_rng(8)
    B, S, h, d_k = sizes(rng, (2, 3, 2, 4), 2, 4)
    d_model = h * d_k
    x = rng.standard_normal((B, S, d_model))
    W_qkv = rng.standard_normal((d_model, 3 * d_model)) / np.sqrt(d_model)
    b_qkv = 0.1 * rng.standard_normal(3 * d_model)
    dQ, dK, dV = (rng.standard_normal((B, h, S, d_k)) for _ in range(3))
    got = fn(*copy_all(dQ, dK, dV, x, W_qkv))
    if not_attempted(got):
        return False
    dx, dW, db = unpack(got, ["dx", "dW_qkv", "db_qkv"])

    def fold(blocks, merge=merge_heads):
        """dqkv (B·S, 3·d_model) from per-head gradients, in the given block order."""
        return np.concatenate([merge(g) for g in blocks], axis=-1).reshape(-1, 3 * d_model)

    def grads(dqkv):                                   # the linear layer's backward (lesson 0)
        return (dqkv @ W_qkv.T).reshape(B, S, d_model), x.reshape(-1, d_model).T @ dqkv, dqkv.sum(axis=0)

    ref = _qkv_reference(dQ, dK, dV, x, W_qkv)
    # The package's forward, so the numerical gradient does not trust the formula above.
    mha = MultiHeadAttention(d_model, h, rng)
    mha.W_qkv.data, mha.b_qkv.data = W_qkv, b_qkv      # the same arrays: perturbing W_qkv moves the layer

    def f():
        Q, K, V = mha.project_qkv(x)
        return float(np.sum(Q * dQ) + np.sum(K * dK) + np.sum(V * dV))

    numeric = [numerical_gradient(f, a) for a in (x, W_qkv, b_qkv)]
    orders = ((dK, dQ, dV), (dV, dK, dQ), (dQ, dV, dK), (dK, dV, dQ), (dV, dQ, dK))
    wrong_order = [grads(fold(order)) for order in orders]
    plain_reshape = grads(fold((dQ, dK, dV), merge=lambda g: g.reshape(B, S, d_model)))
    only_q = fold((dQ, np.zeros_like(dK), np.zeros_like(dV))) @ W_qkv.T
    dqkv = fold((dQ, dK, dV))
    order_hint = (tr("the three blocks are in the wrong order: columns [0, d) of W_qkv make Q, [d, 2d) K and "
                     "[2d, 3d) V, so write dQ, dK, dV side by side in that order"))
    reshape_hint = (tr("the heads were merged with a plain reshape, which mixes heads and positions: go back to "
                       "(B, S, h, d_k) with a transpose first, then reshape to (B, S, d_model)"))
    hints = {
        "dx": [(alt[0], order_hint) for alt in wrong_order] + [
            (plain_reshape[0], reshape_hint),
            (only_q.reshape(B, S, d_model), tr("only the query path: x feeds Q, K and V, so dx sums all three paths "
                                               "(one product with the whole dqkv does it)")),
        ],
        "dW_qkv": [(alt[1], order_hint) for alt in wrong_order] + [
            (plain_reshape[1], reshape_hint),
            (dqkv.T @ x.reshape(-1, d_model), tr("transposed: dW_qkv = xᵀ dqkv, (d_model, 3·d_model) like W_qkv")),
            (ref[1] / (B * S), tr("the mean over the B·S rows; the loss adds them up, so sum them")),
        ],
        "db_qkv": [(alt[2], order_hint) for alt in wrong_order] + [
            (plain_reshape[2], reshape_hint),
            (dqkv.reshape(B, S, 3 * d_model), tr("b_qkv is added at every position: sum dqkv over the B·S rows")),
            (dqkv.reshape(B, S, 3 * d_model).sum(axis=0), tr("summed over the batch only: sum over positions too")),
            (ref[2] / (B * S), tr("the mean over the B·S rows; the loss adds them up, so sum them")),
        ],
    }
    errors = {name: check_array(name, g, r, n, hints=hints[name])
              for name, g, r, n in zip(("dx", "dW_qkv", "db_qkv"), (dx, dW, db), ref, numeric)}
    return report_correct(errors)


# -- lesson 3: position-wise feed-forward network (§3.3) ---------------------------

@exercise("3.1")
def check_relu_backward(fn) -> bool:
    """fn(dh, z) -> dz for h = max(0, z)."""
    rng = case_rng(6)
    z = rng.standard_normal(sizes(rng, (2, 3, 6), 1, 6))
    z[np.abs(z) < 1e-3] = 0.5                 # keep the kink at 0 away from the finite differences
    dh = rng.standard_normal(z.shape)
    got = fn(*copy_all(dh, z))
    if not_attempted(got):
        return False
    reference = dh * (z > 0)

    def f():
        return float(np.sum(np.maximum(z, 0) * dh))

    numeric = numerical_gradient(f, z)
    err = check_array("dz", got, reference, numeric, hints=[
        (dh, tr("the gradient passes everywhere: ReLU blocks it where z < 0")),
        (dh * (z < 0), tr("inverted: the gradient passes where z > 0 and is blocked where z < 0")),
        (dh * np.maximum(z, 0), tr("multiplied by max(0, z); the derivative is the 0/1 step, not the value")),
    ])
    return report_correct({"dz": err})


def _ffn_reference(dy, x, W1, b1, W2, b2):
    z, c1 = linear_forward(x, W1, b1)
    hidden = np.maximum(z, 0)
    _, c2 = linear_forward(hidden, W2, b2)
    dhidden, dW2, db2 = linear_backward(dy, c2)
    dz = dhidden * (z > 0)
    dx, dW1, db1 = linear_backward(dz, c1)
    return (dx, dW1, db1, dW2, db2), dhidden, c1


@exercise("3.2")
def check_ffn_backward(fn) -> bool:
    """fn(dy, x, W1, b1, W2, b2) -> (dx, dW1, db1, dW2, db2) for Eq. (2)."""
    rng = case_rng(7)
    B, S, d_model, d_ff = sizes(rng, (2, 3, 4, 6), 2, 7)
    x = rng.standard_normal((B, S, d_model))
    W1 = rng.standard_normal((d_model, d_ff)) / 2
    b1 = 0.1 * rng.standard_normal(d_ff)
    W2 = rng.standard_normal((d_ff, d_model)) / 2
    b2 = 0.1 * rng.standard_normal(d_model)
    dy = rng.standard_normal((B, S, d_model))
    got = fn(*copy_all(dy, x, W1, b1, W2, b2))
    if not_attempted(got):
        return False
    names = ["dx", "dW1", "db1", "dW2", "db2"]
    got = unpack(got, names)
    ref, dhidden, c1 = _ffn_reference(dy, x, W1, b1, W2, b2)

    def f():
        hidden = np.maximum(linear_forward(x, W1, b1)[0], 0)
        return float(np.sum(linear_forward(hidden, W2, b2)[0] * dy))

    numeric = [numerical_gradient(f, a) for a in (x, W1, b1, W2, b2)]
    no_relu = linear_backward(dhidden, c1)   # the first layer's grads without the ReLU mask
    hints = {"dx": [(no_relu[0], tr("the ReLU mask is missing: multiply by (z > 0) before the first layer"))],
             "dW1": [(no_relu[1], tr("the ReLU mask is missing: multiply by (z > 0) before the first layer"))],
             "db1": [(no_relu[2], tr("the ReLU mask is missing: multiply by (z > 0) before the first layer"))]}
    errors = {n: check_array(n, g, r, num, hints=hints.get(n, ()))
              for n, g, r, num in zip(names, got, ref, numeric)}
    return report_correct(errors)
