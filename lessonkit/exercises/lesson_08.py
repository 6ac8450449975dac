"""Checking cells for the exercises of lesson 8 (why self-attention: §1, §2, §4, Table 1).

The checkers follow the contract documented at the top of ``_common`` and reuse its
helpers: a stub that returns None prints ``NOT_ATTEMPTED`` and returns a false Verdict; a wrong
answer raises WrongAnswer naming the likely mistake; a right one prints ``correct``
with the measured errors and returns a true Verdict. Inputs are fixed, seeded float64 arrays,
handed over as copies.

check_additive_attention_backward   the backward of additive (Bahdanau) attention, which
                                    §3.2.1 compares with dot-product attention
check_layers_needed                 maximum path length: layers a stack needs before
                                    output position n-1 depends on input position 0
check_layer_flops                   the exact matrix-product FLOPs of a recurrent, a
                                    self-attention and a restricted self-attention layer
check_head_ablation                 a multi-head attention layer's output with one head
                                    removed (§4's interpretability: which heads matter)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from minitransformer import backend
from minitransformer.gradcheck import numerical_gradient
from minitransformer.layers.attention import MultiHeadAttention, attention_forward, softmax_lastaxis

from ..i18n import tr
from ._common import (
    NOT_ATTEMPTED,
    WrongAnswer,
    built,
    case_rng,
    check_array,
    describe,
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
    "AdditiveCache",
    "check_additive_attention_backward",
    "check_head_ablation",
    "check_layers_needed",
    "check_layer_flops",
    "layers_needed_by_propagation",
]


# -- Exercise 8.1: additive attention's backward ------------------------------------

class AdditiveCache(NamedTuple):
    Q: object       # (B, n_q, d_k)
    K: object       # (B, n_k, d_k)
    V: object       # (B, n_k, d_v)
    W_q: object     # (d_k, d_a)
    W_k: object     # (d_k, d_a)
    v: object       # (d_a,)
    T: object       # (B, n_q, n_k, d_a)  tanh(q_i W_q + k_j W_k) for every pair
    A: object       # (B, n_q, n_k)       the attention weights


def _additive_forward(Q, K, V, W_q, W_k, v):
    """e_ij = v · tanh(q_i W_q + k_j W_k), A = softmax_rows(e), out = A V."""
    T = np.tanh((Q @ W_q)[:, :, None, :] + (K @ W_k)[:, None, :, :])
    A = softmax_lastaxis(T @ v)
    return A @ V, AdditiveCache(Q, K, V, W_q, W_k, v, T, A)


def _additive_backward(dout, c, *, tanh_grad=True, rowsum=True, times_v=True):
    """The reference backward; the keyword switches build common wrong answers for the hints."""
    dA = dout @ c.V.swapaxes(-1, -2)                                   # (B, n_q, n_k)
    dV = c.A.swapaxes(-1, -2) @ dout                                   # (B, n_k, d_v)
    dE = c.A * (dA - (dA * c.A).sum(axis=-1, keepdims=True)) if rowsum else c.A * dA
    dT = dE[..., None] * c.v if times_v else np.repeat(dE[..., None], c.v.size, axis=-1)
    dv = np.einsum("bij,bija->a", dE, c.T)
    dU = dT * (1.0 - c.T ** 2) if tanh_grad else dT                    # U = q_i W_q + k_j W_k
    dQa, dKa = dU.sum(axis=2), dU.sum(axis=1)                          # (B, n_q, d_a), (B, n_k, d_a)
    d_k = c.Q.shape[-1]
    dW_q = c.Q.reshape(-1, d_k).T @ dQa.reshape(-1, dQa.shape[-1])
    dW_k = c.K.reshape(-1, d_k).T @ dKa.reshape(-1, dKa.shape[-1])
    return dQa @ c.W_q.T, dKa @ c.W_k.T, dV, dW_q, dW_k, dv


@exercise("8.1")
def check_additive_attention_backward(fn) -> bool:
    """fn(dout, cache) -> (dQ, dK, dV, dW_q, dW_k, dv) for additive attention.

    cache is an AdditiveCache (Q, K, V, W_q, W_k, v, T, A) of the forward
    e_ij = v · tanh(q_i W_q + k_j W_k), A = softmax_rows(e), out = A V;
    dout = dL/dout: (B, n_q, d_v).
    """
    rng = case_rng(80)
    B, n_q, n_k, d_k, d_a, d_v = sizes(rng, (2, 3, 5, 4, 6, 2), 1, 5)
    Q = rng.standard_normal((B, n_q, d_k))
    K = rng.standard_normal((B, n_k, d_k))
    V = rng.standard_normal((B, n_k, d_v))
    W_q = rng.standard_normal((d_k, d_a)) / np.sqrt(d_k)
    W_k = rng.standard_normal((d_k, d_a)) / np.sqrt(d_k)
    v = rng.standard_normal(d_a)
    out, cache = _additive_forward(Q, K, V, W_q, W_k, v)
    dout = rng.standard_normal(out.shape)
    got = fn(dout.copy(), AdditiveCache(*(a.copy() for a in cache)))
    if not_attempted(got):
        return False
    names = ["dQ", "dK", "dV", "dW_q", "dW_k", "dv"]
    got = unpack(got, names)
    ref = _additive_backward(dout, cache)

    def f():
        return float(np.sum(_additive_forward(Q, K, V, W_q, W_k, v)[0] * dout))

    numeric = [numerical_gradient(f, a) for a in (Q, K, V, W_q, W_k, v)]
    wrong = {
        tr("the tanh derivative is missing: multiply dT by (1 − T²) before going back to q_i W_q + k_j W_k"):
            _additive_backward(dout, cache, tanh_grad=False),
        tr("the softmax backward lacks the row-sum term: dE = A ⊙ (dA − rowsum(dA ⊙ A)) (lesson 1)"):
            _additive_backward(dout, cache, rowsum=False),
        tr("e_ij = v · T_ij, so dT_ij = dE_ij · v: the factor v is missing"):
            _additive_backward(dout, cache, times_v=False),
    }
    for i, name in enumerate(names[:2]):            # dQ, dK: the sum over pairs, on the wrong axis
        shape = getattr(got[i], "shape", None)
        if shape is not None and tuple(shape) == ref[1 - i].shape != ref[i].shape:
            raise WrongAnswer(
                tr(f"{name}: shape mismatch: expected {ref[i].shape}, got {tuple(shape)}\n  hint: q_i W_q is "
                   "added to every pair (i, j), so dQ sums dU over the keys j (axis 2); k_j W_k's "
                   "gradient dK sums over the queries i (axis 1)"))
    errors = {}
    for i, name in enumerate(names):
        hints = [(alt[i], text) for text, alt in wrong.items()]
        if name == "dv":
            hints.append((ref[5] / (B * n_q * n_k), tr("dv is the mean over the pairs (i, j); the loss "
                                                      "adds them up, so sum them")))
        if name in ("dW_q", "dW_k"):
            hints.append((ref[i] / B, tr("dW is averaged over the batch; the loss adds the sentences up, so sum")))
        errors[name] = check_array(name, got[i], ref[i], numeric[i], hints=hints)
    return report_correct(errors)


# -- Exercise 8.2: maximum path length ----------------------------------------------

KINDS = ("conv", "dilated_conv", "restricted_attention")


def layers_needed_by_propagation(kind: str, n: int, k: int) -> int:
    """The smallest number of stacked layers after which output position n-1 depends on
    input position 0, found by propagating "depends on x_0" up the stack one layer at a
    time (no closed formula is used, so it can check one).

    kind "conv": causal convolutions of kernel width k (output t reads inputs t-k+1 .. t);
    "dilated_conv": the same with dilation k^(l-1) in layer l = 1, 2, ... (ByteNet, WaveNet);
    "restricted_attention": each position attends to the positions within k of it.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if n < 2 or k < (1 if kind == "restricted_attention" else 2):
        raise ValueError(f"need n >= 2 and k >= 2 (r >= 1 for attention), got n={n}, k={k}")
    depends = np.zeros(n, dtype=bool)        # which positions of the current layer depend on x_0
    depends[0] = True
    for layer in range(1, n + 1):
        if kind == "conv":
            reads = range(k)                                  # output t reads t - j
        elif kind == "dilated_conv":
            reads = [j * k ** (layer - 1) for j in range(k)]
        else:
            reads = range(-k, k + 1)                          # both sides, |i - j| <= r
        nxt = np.zeros(n, dtype=bool)
        for s in reads:
            if abs(s) >= n:
                continue                                      # reads only padding
            if s >= 0:
                nxt[s:] |= depends[:n - s]
            else:
                nxt[:n + s] |= depends[-s:]
        depends = nxt
        if depends[n - 1]:
            return layer
    raise AssertionError("unreachable: the reach grows by at least one position per layer")


def _as_count(got, label):
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, float, np.integer, np.floating)):
        raise WrongAnswer(tr(f"{label}: expected a whole number of layers, got {describe(got)}"))
    if float(got) != round(float(got)):
        raise WrongAnswer(tr(f"{label}: expected a whole number of layers, got {got!r} "
                                f"(round up: a fraction of a layer does not exist)"))
    return int(round(float(got)))


@exercise("8.2")
def check_layers_needed(fn) -> bool:
    """fn(kind, n, k) -> layers needed before output position n-1 depends on input position 0.

    kind: "conv" (kernel k, causal), "dilated_conv" (kernel k, dilation k^(l-1) in
    layer l) or "restricted_attention" (k = r, the positions attended on each side).
    """
    cases = [("conv", 2, 2), ("conv", 9, 3), ("conv", 10, 3), ("conv", 64, 3), ("conv", 100, 5),
             ("dilated_conv", 9, 3), ("dilated_conv", 10, 3), ("dilated_conv", 64, 2),
             ("dilated_conv", 65, 2), ("dilated_conv", 125, 5), ("dilated_conv", 216, 6),
             ("restricted_attention", 2, 1), ("restricted_attention", 20, 2), ("restricted_attention", 9, 4),
             ("restricted_attention", 10, 4), ("restricted_attention", 64, 8),
             ("restricted_attention", 100, 7)]
    if not visible():
        rng = case_rng(82)
        k, L = int(rng.integers(2, 7)), int(rng.integers(2, 5))
        cases = [(kind, int(rng.integers(2, 300)), int(rng.integers(2 if kind != "restricted_attention" else 1, 9)))
                 for kind in KINDS for _ in range(2)]
        cases += [("dilated_conv", k ** L, k), ("dilated_conv", k ** L + 1, k), ("conv", 2, 2),
                  ("restricted_attention", int(rng.integers(2, 9)) * 2 + 1, 2)]        # powers: where float log slips
    first = fn(*cases[0])
    if not_attempted(first):
        return False
    for case in cases:
        kind, n, k = case
        label = f"{kind}, n={n}, k={k}"
        got = _as_count(first if case == cases[0] else fn(*case), label)
        expected = layers_needed_by_propagation(kind, n, k)
        if got == expected:
            continue
        msg = tr(f"{label}: expected {expected} layers, got {got}")
        step = k - 1 if kind == "conv" else k        # new positions reached per layer
        if kind in ("conv", "restricted_attention"):
            if got == math.ceil(n / step):
                msg += ("\n  hint: " + tr(f"off by one: output n−1 must reach back n−1 = {n - 1} positions "
                                         f"(to position 0), not n; each layer reaches {step} further"))
            elif kind == "conv" and got in (math.ceil(n / k), math.ceil((n - 1) / k)):
                msg += ("\n  hint: " + tr("a kernel of width k reaches k−1 positions back, not k: one of its "
                                         "k taps is the position itself"))
            elif kind == "restricted_attention" and got == 1:
                msg += ("\n  hint: " + tr("with a window of r positions on each side, one layer reaches only r "
                                         "back: restricting attention raises the path length from 1 to about n/r"))
            elif kind == "restricted_attention" and got == math.ceil((n - 1) / (2 * k)):
                msg += ("\n  hint: " + tr("the window is 2r+1 wide but centred: it reaches r positions back, not 2r"))
        else:
            if got == math.ceil(math.log(n, k)):
                msg += ("\n  hint: " + tr(f"math.log({n}, {k}) = {math.log(n, k)!r} in floating point; count "
                                         "with integers instead (multiply the reach by k until it covers n positions)"))
            elif got == math.ceil((n - 1) / (k - 1)):
                msg += ("\n  hint: " + tr("that is the contiguous stack; with dilations 1, k, k², … the covered "
                                         "span multiplies by k with every layer"))
            elif got == math.ceil(math.log(n - 1, k)) or got == math.floor(math.log(n, k)):
                msg += ("\n  hint: " + tr(f"after L layers the stack covers k^L positions (t − k^L + 1 .. t); "
                                         f"it needs k^L ≥ n = {n}"))
        raise WrongAnswer(msg)
    say(tr("correct"))
    say(tr(f"  all {len(cases)} cases match the layer counts found by propagating the dependence "
             f"on x_0 up a stack, one layer at a time"))
    return True


# -- Exercise 8.3: exact FLOPs of a layer -----------------------------------------------

FLOP_KINDS = ("recurrent", "attention", "restricted_attention")


def _counted_attention_flops(n: int, d: int) -> int:
    """Run the package's MultiHeadAttention (h = 1, B = 1) and add up the FLOPs of every
    backend.matmul it calls (2 per multiply-add)."""
    tally = [0]
    original = backend.matmul

    def counting(a, b):
        rows = math.prod(a.shape[:-1]) if b.ndim == 2 else \
            math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])) * a.shape[-2]
        tally[0] += 2 * rows * a.shape[-1] * b.shape[-1]
        return original(a, b)

    old_dtype = backend.default_dtype()
    backend.set_default_dtype("float64")
    backend.matmul = counting
    try:
        MultiHeadAttention(d, 1, np.random.default_rng(0)).forward(np.zeros((1, n, d)))
    finally:
        backend.matmul = original
        backend.set_default_dtype(old_dtype)
    return tally[0]


def _reference_flops(kind: str, n: int, d: int, r: int) -> int:
    if kind == "recurrent":                 # x_t W_x and h_{t-1} W_h at every step
        return 2 * n * d * d + 2 * n * d * d
    if kind == "attention":                 # counted on the package's layer, not from a formula
        return _counted_attention_flops(n, d)
    return 8 * n * d * d + 4 * n * (2 * r + 1) * d   # projections + Q·K and A·V over 2r+1 slots


@exercise("8.3")
def check_layer_flops(fn) -> bool:
    """fn(kind, n, d, r) -> the matrix-product FLOPs of one forward of one sequence (B = 1).

    kind: "recurrent" (h_t = tanh(x_t W_x + h_{t-1} W_h + b), W_x, W_h: (d, d)),
    "attention" (MultiHeadAttention self-attention, any h: the projections W^Q, W^K,
    W^V, W^O and Eq. (1)), "restricted_attention" (the same, each query scoring the 2r+1
    keys of its window; the windows at the ends are padded and scored in full).
    A multiply-add counts as 2 FLOPs; r is ignored unless kind is restricted_attention.
    """
    cases = [("recurrent", 16, 64, 0), ("recurrent", 100, 8, 0), ("attention", 16, 64, 0),
             ("attention", 100, 8, 0), ("attention", 7, 12, 0), ("restricted_attention", 64, 32, 4),
             ("restricted_attention", 50, 16, 3)]
    if not visible():
        rng = case_rng(83)
        cases = [(kind, int(rng.integers(2, 80)), 4 * int(rng.integers(1, 17)), int(rng.integers(1, 6)))
                 for kind in FLOP_KINDS for _ in range(2)]
        cases = [(kind, n, d, r if kind == "restricted_attention" else 0) for kind, n, d, r in cases]
    first = fn(*cases[0])
    if not_attempted(first):
        return False
    for case in cases:
        kind, n, d, r = case
        label = f"{kind}, n={n}, d={d}" + (f", r={r}" if kind == "restricted_attention" else "")
        got = first if case == cases[0] else fn(*case)
        try:
            value = float(got)
        except (TypeError, ValueError):
            raise WrongAnswer(tr(f"{label}: expected a number of FLOPs, got {describe(got)}")) from None
        expected = _reference_flops(kind, n, d, r)
        if value == expected:
            continue
        if not math.isfinite(value) or value != round(value):
            raise WrongAnswer(tr(f"{label}: expected a whole number of FLOPs ({expected:,}), got {got!r}: a count of "
                                 "multiply-adds is an integer; look for a division (/ instead of //, or a mean)"))
        msg = tr(f"{label}: expected {expected:,} FLOPs, got {value:,.0f} (ratio {value / expected:.3f})")
        proj = 8 * n * d * d
        alternatives = []
        if kind == "recurrent":             # half of 4nd²: two mistakes give this number
            alternatives.append((2 * n * d * d, tr("half the count: either only the recurrent product h_{t−1} W_h "
                                                   "(the input product x_t W_x costs as much, 2·n·d² more), or "
                                                   "multiply-adds counted as 1 FLOP instead of 2")))
        alternatives.append((expected / 2, tr("you counted multiply-adds; a multiply-add is 2 FLOPs")))
        if kind == "attention":
            alternatives += [
                (4 * n * n * d, tr("that is only Q Kᵀ and A V; add the projections W^Q, W^K, W^V, W^O (8·n·d²)")),
                (6 * n * d * d + 4 * n * n * d, tr("the output projection W^O is missing (2·n·d²)")),
                (proj + 2 * n * n * d, tr("Q Kᵀ and A V each cost 2·n²·d; you counted one of them")),
            ]
        if kind == "restricted_attention":
            alternatives += [
                (proj + 4 * n * n * d, tr("that is full attention: each query scores only the 2r+1 keys of "
                                          "its window, not all n")),
                (proj + 4 * n * 2 * r * d, tr("the window holds 2r+1 keys: r on each side and the query's own")),
                (proj + 4 * n * r * d, tr("r is the reach on each side: the window holds 2r+1 keys")),
                (4 * n * (2 * r + 1) * d, tr("add the projections W^Q, W^K, W^V, W^O (8·n·d²): restriction "
                                             "changes only the scores and the weighted sum")),
            ]
        for alternative, text in alternatives:
            if text and value == alternative:
                msg += f"\n  hint: {text}"
                break
        raise WrongAnswer(msg)
    say(tr("correct"))
    say(tr(f"  all {len(cases)} cases match (attention: FLOPs counted on the package's "
             f"MultiHeadAttention by wrapping backend.matmul)"))
    return True


# -- Exercise 8.4: remove one head ------------------------------------------------------


def _heads_of(mha, x):
    """The h heads' outputs of self-attention on x, before W^O: (B, h, n, d_k)."""
    Q, K, V = mha.project_qkv(x)
    heads, _ = attention_forward(Q, K, V, None)
    return heads


def _ablated_by_rows(mha, x, head):
    """The reference, by another route: head ``head``'s outputs meet only rows head·d_k .. (head+1)·d_k
    of W^O, so zeroing those rows removes the head from Concat(heads) W^O + b_o."""
    W_o = mha.W_o.data.copy()
    W_o[head * mha.d_k:(head + 1) * mha.d_k, :] = 0
    concat = _heads_of(mha, x).transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], mha.d_model)
    return concat @ W_o + mha.b_o.data


def _mha(state) -> MultiHeadAttention:
    """A float64 MultiHeadAttention of ``state["d_model"]``, ``state["h"]``, with ``state["params"]`` (in the
    order of parameters()) as its parameters' arrays, the very arrays, or fresh ones from ``state["seed"]``."""
    old_dtype = backend.default_dtype()
    backend.set_default_dtype("float64")
    try:
        mha = MultiHeadAttention(state["d_model"], state["h"], np.random.default_rng(state["seed"]))
    finally:
        backend.set_default_dtype(old_dtype)
    for p, data in zip(mha.parameters(), state["params"] or ()):
        p.data = data
    return mha


@exercise("8.4")
def check_head_ablation(fn) -> bool:
    """fn(mha, x, head) -> the self-attention output of the MultiHeadAttention ``mha`` on x (B, n, d_model)
    with head ``head`` (0-based) removed: its output set to zero before W^O, so
    y = Concat(head_1, ..., 0, ..., head_h) W^O + b_o. ``mha`` must be left as it was."""
    rng = case_rng(84)
    d_k, h, B, n = sizes(rng, (3, 4, 2, 5), 2, 6)
    mha = _mha({"d_model": h * d_k, "h": h, "seed": int(rng.integers(1000)), "params": None})
    mha.b_o.data[:] = rng.standard_normal(h * d_k)          # a bias, so that dropping it shows
    x = rng.standard_normal((B, n, h * d_k))
    before = [p.data.copy() for p in mha.parameters()]
    answer_mha = built(fn, _mha, {"d_model": mha.d_model, "h": mha.h, "seed": 0,
                                  "params": [p.data for p in mha.parameters()]})
    heads_asked = (1, 0, 3) if visible() else (int(rng.integers(h)), 0, h - 1)
    first = fn(answer_mha, x.copy(), heads_asked[0])
    if not_attempted(first):
        return False
    errors = {}
    for head in heads_asked:
        got = first if head == heads_asked[0] else fn(answer_mha, x.copy(), head)
        changed = [p.name for p, old in zip(mha.parameters(), before) if not np.array_equal(p.data, old)]
        if changed:
            raise WrongAnswer(tr(f"head {head}: the layer's parameters changed ({', '.join(changed)}): compute the "
                                 "ablated output without writing into mha (or restore what you changed), so the "
                                 "model is intact for the next head"))
        ref = _ablated_by_rows(mha, x, head)
        full = mha.forward(x)
        d_k = mha.d_k
        heads = _heads_of(mha, x)
        hints = [(full, tr("that is the layer's output with every head: set that head's output to zero before W^O")),
                 (ref - mha.b_o.data, tr("the bias b_o is missing: removing a head removes its share of Concat(heads) "
                                         "W^O, not the bias"))]
        for other in {max(head - 1, 0), min(head + 1, mha.h - 1)} - {head}:
            hints.append((_ablated_by_rows(mha, x, other),
                          tr(f"that removes head {other}, not head {head}: heads are "
                             "counted from 0, head i owns columns i·d_k .. (i+1)·d_k")))
        cols = mha.W_o.data.copy()
        cols[:, head * d_k:(head + 1) * d_k] = 0
        concat = heads.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], mha.d_model)
        hints.append((concat @ cols + mha.b_o.data, tr("you zeroed columns of W^O (output features); the head's "
                                                       "output meets W^O's rows head·d_k .. (head+1)·d_k")))
        kept = np.delete(heads, head, axis=1)
        hints.append(((kept.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], -1)
                       @ np.delete(mha.W_o.data, np.s_[head * d_k:(head + 1) * d_k], axis=0)) * mha.h / (mha.h - 1)
                      + mha.b_o.data, tr("the other heads were rescaled by h/(h−1): removing a head leaves the others "
                                         "as they are")))
        errors[f"head {head}"] = check_array(f"head {head}", got, ref, hints=hints)
    return report_correct(errors)
