"""Checking cells for the exercises of lessons 0-3.

Every checker follows one contract (the lesson notebooks and their tests rely on it):

* it calls the learner's function on fixed, seeded float64 inputs (copies, so an
  answer that writes into its inputs cannot spoil the reference);
* if the function returns ``None`` (the stub, not attempted yet) it prints
  ``NOT_ATTEMPTED`` and returns False, without raising, so a notebook still
  runs top to bottom;
* if the answer is wrong it raises ``AssertionError`` saying what is wrong: a
  shape mismatch (expected vs got), or the values' max relative error against
  the reference answer and against the numerical gradient (central differences
  from ``minitransformer.gradcheck``), with a hint when the mistake is a common one;
* if the answer is right it prints ``correct`` with the measured errors and
  returns True.

Lesson 0 (how to use):       check_numerical_gradient, check_linear_backward
Lesson 1 (§3.2.1, Eq. 1):    check_softmax_backward, check_causal_mask, check_attention_backward
Lesson 2 (§3.2.2-3.2.3):     check_merge_heads_backward, check_attention_flops, check_decoder_mask
Lesson 3 (§3.3, Eq. 2):      check_relu_backward, check_ffn_backward
"""

from __future__ import annotations

import numpy as np

from .. import backend
from ..layers.masks import causal_mask, padding_mask
from ..gradcheck import numerical_gradient, rel_error
from ..layers.attention import (
    AttentionCache,
    attention_backward,
    attention_forward,
    merge_heads,
    softmax_lastaxis,
    split_heads,
)
from ..layers.linear import LinearCache, linear_backward, linear_forward

NOT_ATTEMPTED = "not attempted yet: fill in the cell above and run this cell again"
TOL = 1e-6   # max relative error allowed, against the reference and the numerical gradient

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
    "check_relu_backward",
    "check_ffn_backward",
]


# -- shared helpers ------------------------------------------------------------------

def _not_attempted(result) -> bool:
    if result is None:
        print(NOT_ATTEMPTED)
        return True
    return False


def _describe(value) -> str:
    if hasattr(value, "shape"):
        return f"an array of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"{type(value).__name__} {value!r}"[:80]


def _unpack(result, names):
    """The learner's tuple of arrays, checked for length."""
    if not isinstance(result, (tuple, list)) or len(result) != len(names):
        raise AssertionError(
            f"expected a tuple of {len(names)} arrays ({', '.join(names)}), got {_describe(result)}"
        )
    return list(result)


def _as_array(name, value):
    if value is None:
        raise AssertionError(f"{name} is None: return an array for it")
    try:
        return np.asarray(backend.to_numpy(value))
    except Exception as exc:  # noqa: BLE001 - say what arrived instead of a deep traceback
        raise AssertionError(f"{name}: expected an array, got {_describe(value)}") from exc


def _check_array(name, got, reference, numeric=None, tol=TOL, hints=()):
    """Compare one returned array with the reference (and the numerical gradient).

    hints: (alternative, text) pairs; if ``got`` matches ``alternative`` (a wrong
    answer someone often writes), ``text`` is added to the error message.
    Returns (error vs reference, error vs numerical gradient or None).
    """
    got = _as_array(name, got)
    if got.shape != reference.shape:
        msg = f"{name}: shape mismatch: expected {tuple(reference.shape)}, got {tuple(got.shape)}"
        if sorted(got.shape) == sorted(reference.shape):
            msg += "\n  hint: the same sizes in another order: check which axes you transposed or swapped"
        raise AssertionError(msg)
    if got.dtype.kind not in "fiu":
        raise AssertionError(f"{name}: expected a float array, got dtype {got.dtype}")
    got = got.astype(np.float64)
    if not np.all(np.isfinite(got)):
        raise AssertionError(f"{name}: contains NaN or inf")
    err_ref = rel_error(got, reference)
    err_num = rel_error(got, numeric) if numeric is not None else None
    if err_ref > tol or (err_num is not None and err_num > tol):
        msg = f"{name}: wrong values: max relative error {err_ref:.2e} vs the reference"
        if err_num is not None:
            msg += f" and {err_num:.2e} vs the numerical gradient"
        msg += f" (tolerance {tol:.0e})"
        for alternative, text in hints:
            if alternative.shape == got.shape and rel_error(got, alternative) <= tol:
                msg += f"\n  hint: {text}"
                break
        raise AssertionError(msg)
    return err_ref, err_num


def _report_correct(errors: dict) -> bool:
    width = max(len(n) for n in errors)
    lines = ["correct"]
    for name, (err_ref, err_num) in errors.items():
        line = f"  {name:<{width}}  max rel error {err_ref:.1e} vs the reference"
        if err_num is not None:
            line += f", {err_num:.1e} vs the numerical gradient"
        lines.append(line)
    print("\n".join(lines))
    return True


def _copy_all(*arrays):
    return tuple(a.copy() for a in arrays)


# -- lesson 0: how to use ------------------------------------------------------------

def check_numerical_gradient(fn) -> bool:
    """fn(f, x, h) -> the central-difference gradient of the scalar f() w.r.t. x.

    f takes no argument and reads x, so fn must perturb x in place (and restore it).
    """
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4))
    c = rng.standard_normal((3, 4))

    def f():
        return float(np.sum(np.sin(x) * c + x ** 3 / 3))

    exact = np.cos(x) * c + x ** 2             # the derivative, worked out by hand
    x_before = x.copy()
    got = fn(f, x, 1e-5)
    if _not_attempted(got):
        return False
    if not np.array_equal(x, x_before):
        raise AssertionError(
            "x was left changed after your function returned: put every entry back to "
            "its old value after perturbing it (f reads x, so later calls would see a wrong x)"
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
    err = _check_array("grad", got, exact, numeric, tol=1e-7, hints=[
        (one_sided, "this is the one-sided difference (f(x+h) - f(x)) / h, whose error "
                    "shrinks only like h; use the central difference (f(x+h) - f(x-h)) / (2h)"),
        (-exact, "the sign is flipped: (f(x+h) - f(x-h)), not (f(x-h) - f(x+h))"),
        (2 * exact, "twice the right answer: divide by 2h, not h"),
    ])
    return _report_correct({"grad": err})


def check_linear_backward(fn) -> bool:
    """fn(dy, x, W, b) -> (dx, dW, db) for y = x W + b with x: (B, S, d_in)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4))
    W = rng.standard_normal((4, 5))
    b = rng.standard_normal(5)
    dy = rng.standard_normal((2, 3, 5))
    got = fn(*_copy_all(dy, x, W, b))
    if _not_attempted(got):
        return False
    dx, dW, db = _unpack(got, ["dx", "dW", "db"])
    ref = linear_backward(dy, LinearCache(x, W))

    def f():
        return float(np.sum(linear_forward(x, W, b)[0] * dy))

    numeric = [numerical_gradient(f, a) for a in (x, W, b)]
    n_rows = x.shape[0] * x.shape[1]
    errors = {
        "dx": _check_array("dx", dx, ref[0], numeric[0]),
        "dW": _check_array("dW", dW, ref[1], numeric[1], hints=[
            (ref[1] / n_rows, "dW is the mean over the B·S rows; the loss adds them up, so sum them"),
        ]),
        "db": _check_array("db", db, ref[2], numeric[2], hints=[
            (ref[2] / n_rows, "db is the mean over the B·S rows; the loss adds them up, so sum them"),
        ]),
    }
    return _report_correct(errors)


# -- lesson 1: scaled dot-product attention (§3.2.1) -------------------------------

def check_softmax_backward(fn) -> bool:
    """fn(dA, A) -> dS, where A = softmax(S) over the last axis and dA = dL/dA."""
    rng = np.random.default_rng(2)
    S = 2.0 * rng.standard_normal((2, 2, 3, 4))
    A = softmax_lastaxis(S.copy())
    dA = rng.standard_normal(A.shape)
    got = fn(*_copy_all(dA, A))
    if _not_attempted(got):
        return False
    reference = A * (dA - (dA * A).sum(axis=-1, keepdims=True))

    def f():
        return float(np.sum(softmax_lastaxis(S.copy()) * dA))

    numeric = numerical_gradient(f, S)
    err = _check_array("dS", got, reference, numeric, hints=[
        (A * dA, "only the diagonal of the Jacobian: subtract the row sum Σ_j dA_j·A_j "
                 "before multiplying by A (each weight depends on every score in its row)"),
        (A * (1 - A) * dA, "only the diagonal of the Jacobian, A_i(1 - A_i); the off-diagonal "
                           "terms -A_i·A_j matter too"),
        (A * (dA - (dA * A).sum(axis=-2, keepdims=True)),
         "the sum must run over the last axis (the keys), the axis the softmax normalises"),
        (-reference, "the sign is flipped"),
    ])
    return _report_correct({"dS": err})


def _explain_mask_difference(got, expected, key_is_pad=None) -> str:
    """Describe the first entry where two (T_q, T_k) boolean masks differ, and why it matters."""
    i, j = (int(v) for v in np.argwhere(got != expected)[0])
    where = f"entry [{i}, {j}]"
    if got[i, j] and not expected[i, j]:
        why = "it is padding" if key_is_pad is not None and key_is_pad[j] else f"it comes after position {i}"
        return f"{where} is True, but query {i} must not see key {j} ({why})"
    return f"{where} is False, but query {i} should be allowed to see key {j}"


def check_causal_mask(fn) -> bool:
    """fn(T) -> bool array (1, 1, T, T), True where query i may attend to key j (j <= i)."""
    first = True
    for T in (1, 5):
        got = fn(T)
        if first and _not_attempted(got):
            return False
        first = False
        got = _as_array(f"mask (T={T})", got)
        if got.dtype != np.bool_:
            raise AssertionError(
                f"mask (T={T}): must be a boolean array (True = may attend), got dtype {got.dtype}"
            )
        expected = backend.to_numpy(causal_mask(T, np))
        if got.shape != expected.shape:
            raise AssertionError(
                f"mask (T={T}): shape mismatch: expected {expected.shape} (so it broadcasts against "
                f"the scores (B, h, S_q, S_k)), got {tuple(got.shape)}"
            )
        if not np.array_equal(got, expected):
            n_bad = int((got != expected).sum())
            msg = f"mask (T={T}): {n_bad} of {T * T} entries are wrong; {_explain_mask_difference(got[0, 0], expected[0, 0])}"
            if np.array_equal(got, expected.swapaxes(-1, -2)):
                msg += "\n  hint: this is the transpose: rows are queries, columns are keys; a query sees the keys at or before it"
            elif np.array_equal(got, expected & ~np.eye(T, dtype=bool)):
                msg += "\n  hint: the diagonal is masked: a position may attend to itself"
            raise AssertionError(msg)
    # What the mask buys: changing the last token cannot change any earlier output.
    rng = np.random.default_rng(3)
    Q, K, V = (rng.standard_normal((1, 1, 5, 4)) for _ in range(3))
    out1, _ = attention_forward(Q, K, V, got)
    K[..., -1, :] += 10.0
    V[..., -1, :] -= 10.0
    out2, _ = attention_forward(Q, K, V, got)
    change = float(np.abs(out2[..., :-1, :] - out1[..., :-1, :]).max())
    print("correct")
    print(f"  all entries match for T=1 and T=5; changing the last key and value moved the "
          f"earlier outputs by {change:.1e}")
    return True


def check_attention_backward(fn) -> bool:
    """fn(dout, cache) -> (dQ, dK, dV); cache is the AttentionCache of attention_forward."""
    rng = np.random.default_rng(4)
    B, h, S_q, S_k, d_k, d_v = 2, 2, 3, 4, 5, 3
    Q = rng.standard_normal((B, h, S_q, d_k))
    K = rng.standard_normal((B, h, S_k, d_k))
    V = rng.standard_normal((B, h, S_k, d_v))
    mask = np.ones((B, 1, 1, S_k), dtype=bool)
    mask[1, ..., -1] = False                  # the second sequence has one padded key
    out, cache = attention_forward(Q, K, V, mask)
    dout = rng.standard_normal(out.shape)
    learner_cache = AttentionCache(*_copy_all(cache.Q, cache.K, cache.V, cache.A), cache.scale)
    got = fn(dout.copy(), learner_cache)
    if _not_attempted(got):
        return False
    dQ, dK, dV = _unpack(got, ["dQ", "dK", "dV"])
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
                (ref[i] / scale, "the 1/sqrt(d_k) factor is missing: S = Q Kᵀ · scale, so dQ and dK carry it"),
                (ref[i] * scale, "the 1/sqrt(d_k) factor is applied twice"),
                (dS_no_rowsum @ K if name == "dQ" else dS_no_rowsum.swapaxes(-1, -2) @ Q,
                 "the softmax backward lacks the row-sum term: dS = A ⊙ (dA - rowsum(dA ⊙ A))"),
            ]
        else:
            hints.append((-ref[i], "the sign of dV is flipped"))
        errors[name] = _check_array(name, value, ref[i], numeric[i], hints=hints)
    return _report_correct(errors)


# -- lesson 2: multi-head attention (§3.2.2-3.2.3) ---------------------------------

def check_merge_heads_backward(fn) -> bool:
    """fn(dconcat, h) -> dheads, the backward of merge_heads: (B, S, d_model) -> (B, h, S, d_k)."""
    rng = np.random.default_rng(5)
    B, h, S, d_k = 2, 3, 4, 2
    heads = rng.standard_normal((B, h, S, d_k))
    dconcat = rng.standard_normal((B, S, h * d_k))
    got = fn(dconcat.copy(), h)
    if _not_attempted(got):
        return False
    reference = np.ascontiguousarray(split_heads(dconcat, h))

    def f():
        return float(np.sum(merge_heads(heads) * dconcat))

    numeric = numerical_gradient(f, heads)
    err = _check_array("dheads", got, reference, numeric, hints=[
        (dconcat.reshape(B, h, S, d_k),
         "a plain reshape to (B, h, S, d_k) mixes heads and positions: concat is laid out "
         "(B, S, h, d_k) in memory, so reshape to that first, then swap axes 1 and 2"),
    ])
    return _report_correct({"dheads": err})


def _mha_flops(B, S_q, S_k, d_model, h):
    """Matmul FLOPs of one multi-head attention forward (a multiply-add = 2 FLOPs)."""
    d_k = d_model // h
    projections = 2 * B * S_q * d_model * d_model          # Q = x_q W^Q
    projections += 2 * 2 * B * S_k * d_model * d_model     # K, V = x_kv W^K, x_kv W^V
    projections += 2 * B * S_q * d_model * d_model         # Concat(heads) W^O
    attention = h * (2 * B * S_q * S_k * d_k)              # Q Kᵀ, every head
    attention += h * (2 * B * S_q * S_k * d_k)             # A V, every head
    return projections + attention


def check_attention_flops(fn) -> bool:
    """fn(B, S_q, S_k, d_model, h) -> matmul FLOPs of one multi-head attention forward."""
    cases = [(1, 10, 10, 512, 8), (1, 10, 10, 512, 1), (2, 7, 13, 64, 4), (3, 5, 9, 96, 12), (4, 16, 16, 32, 32)]
    got0 = fn(*cases[0])
    if _not_attempted(got0):
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
            raise AssertionError(f"for {label}: expected a number, got {_describe(got)}") from None
        err = abs(value - expected) / expected
        if err > 1e-12:
            msg = (f"for {label}: expected {expected:,} FLOPs, got {value:,.0f} "
                   f"(relative error {err:.2e})")
            ratio = value / expected
            no_proj = expected - 4 * B * d_model * d_model * (S_q + S_k)
            k_on_q = expected + 4 * B * d_model * d_model * (S_q - S_k)
            if h > 1 and abs(ratio - h) < 1e-9:
                msg += "\n  hint: your count grows with h, but each head has only d_k = d_model / h dimensions"
            elif abs(ratio - 0.5) < 1e-9:
                msg += "\n  hint: you counted multiply-adds; a multiply-add is 2 FLOPs"
            elif abs(value - no_proj) < 1e-6 * expected:
                msg += "\n  hint: that is only Q Kᵀ and A V; count the four projections W^Q, W^K, W^V, W^O too"
            elif S_q != S_k and abs(value - k_on_q) < 1e-6 * expected:
                msg += "\n  hint: the K and V projections act on the S_k key positions, not S_q"
            raise AssertionError(msg)
        worst = max(worst, err)
    print("correct")
    print(f"  {len(cases)} settings, max relative error {worst:.1e} vs the reference count "
          f"(a count has no gradient, so there is no numerical check)")
    return True


def check_decoder_mask(fn) -> bool:
    """fn(tgt_ids, pad_id) -> bool (B, 1, T, T): causal AND the key is not padding."""
    pad_id = 0
    tgt_ids = np.array([[1, 5, 6, 7, 0, 0],
                        [1, 3, 4, 5, 6, 7],
                        [1, 9, 0, 0, 0, 0]])
    got = fn(tgt_ids.copy(), pad_id)
    if _not_attempted(got):
        return False
    got = _as_array("mask", got)
    T = tgt_ids.shape[1]
    expected = backend.to_numpy(causal_mask(T, np) & padding_mask(tgt_ids, pad_id))
    if got.dtype != np.bool_:
        raise AssertionError(f"mask: must be a boolean array (True = may attend), got dtype {got.dtype}")
    if got.shape != expected.shape:
        raise AssertionError(
            f"mask: shape mismatch: expected {expected.shape} = (B, 1, T, T), one mask per sentence "
            f"shared by all heads, got {tuple(got.shape)}"
        )
    if not np.array_equal(got, expected):
        idx = np.argwhere(got != expected)[0]
        b = int(idx[0])
        msg = (f"mask: {int((got != expected).sum())} entries are wrong; in sentence {b}, "
               + _explain_mask_difference(got[b, 0], expected[b, 0], tgt_ids[b] == pad_id))
        causal_only = np.broadcast_to(backend.to_numpy(causal_mask(T, np)), expected.shape)
        rows_masked = causal_mask(T, np) & (tgt_ids != pad_id)[:, None, :, None]
        if np.array_equal(got, causal_only):
            msg += "\n  hint: only causal: padding keys are still visible; AND it with the padding mask"
        elif np.array_equal(got, rows_masked):
            msg += "\n  hint: you masked padded queries (rows); the mask must hide padded keys (columns)"
        elif np.array_equal(got, np.broadcast_to(padding_mask(tgt_ids, pad_id), expected.shape)):
            msg += "\n  hint: only padding: a decoder position must not see later positions either"
        raise AssertionError(msg)
    print("correct")
    print(f"  all {expected.size} entries match causal_mask(T) & padding_mask(ids, pad_id)")
    return True


# -- lesson 3: position-wise feed-forward network (§3.3) ---------------------------

def check_relu_backward(fn) -> bool:
    """fn(dh, z) -> dz for h = max(0, z)."""
    rng = np.random.default_rng(6)
    z = rng.standard_normal((2, 3, 6))
    z[np.abs(z) < 1e-3] = 0.5                 # keep the kink at 0 away from the finite differences
    dh = rng.standard_normal(z.shape)
    got = fn(*_copy_all(dh, z))
    if _not_attempted(got):
        return False
    reference = dh * (z > 0)

    def f():
        return float(np.sum(np.maximum(z, 0) * dh))

    numeric = numerical_gradient(f, z)
    err = _check_array("dz", got, reference, numeric, hints=[
        (dh, "the gradient passes everywhere: ReLU blocks it where z < 0"),
        (dh * (z < 0), "inverted: the gradient passes where z > 0 and is blocked where z < 0"),
        (dh * np.maximum(z, 0), "multiplied by max(0, z); the derivative is the 0/1 step, not the value"),
    ])
    return _report_correct({"dz": err})


def _ffn_reference(dy, x, W1, b1, W2, b2):
    z, c1 = linear_forward(x, W1, b1)
    hidden = np.maximum(z, 0)
    _, c2 = linear_forward(hidden, W2, b2)
    dhidden, dW2, db2 = linear_backward(dy, c2)
    dz = dhidden * (z > 0)
    dx, dW1, db1 = linear_backward(dz, c1)
    return (dx, dW1, db1, dW2, db2), dhidden, c1


def check_ffn_backward(fn) -> bool:
    """fn(dy, x, W1, b1, W2, b2) -> (dx, dW1, db1, dW2, db2) for Eq. (2)."""
    rng = np.random.default_rng(7)
    B, S, d_model, d_ff = 2, 3, 4, 6
    x = rng.standard_normal((B, S, d_model))
    W1 = rng.standard_normal((d_model, d_ff)) / 2
    b1 = 0.1 * rng.standard_normal(d_ff)
    W2 = rng.standard_normal((d_ff, d_model)) / 2
    b2 = 0.1 * rng.standard_normal(d_model)
    dy = rng.standard_normal((B, S, d_model))
    got = fn(*_copy_all(dy, x, W1, b1, W2, b2))
    if _not_attempted(got):
        return False
    names = ["dx", "dW1", "db1", "dW2", "db2"]
    got = _unpack(got, names)
    ref, dhidden, c1 = _ffn_reference(dy, x, W1, b1, W2, b2)

    def f():
        hidden = np.maximum(linear_forward(x, W1, b1)[0], 0)
        return float(np.sum(linear_forward(hidden, W2, b2)[0] * dy))

    numeric = [numerical_gradient(f, a) for a in (x, W1, b1, W2, b2)]
    no_relu = linear_backward(dhidden, c1)   # the first layer's grads without the ReLU mask
    hints = {"dx": [(no_relu[0], "the ReLU mask is missing: multiply by (z > 0) before the first layer")],
             "dW1": [(no_relu[1], "the ReLU mask is missing: multiply by (z > 0) before the first layer")],
             "db1": [(no_relu[2], "the ReLU mask is missing: multiply by (z > 0) before the first layer")]}
    errors = {n: _check_array(n, g, r, num, hints=hints.get(n, ()))
              for n, g, r, num in zip(names, got, ref, numeric)}
    return _report_correct(errors)
