"""Checkers for the exercises of lesson 11 (§6.2, Table 3: model variations).

Every checker follows the contract of ``lessonkit.exercises._common``: fixed
float64 inputs; the stub (returns None) prints a note and returns a false Verdict; a wrong
answer raises WrongAnswer saying what is wrong, with a ``hint:`` line when it
matches a common mistake; a right answer prints "correct".

Exercise 11.1 check_learned_pe_backward     the backward of x + P[offset : offset + S]
Exercise 11.2 check_perplexity              Table 3's PPL column: exp of the mean token NLL
Exercise 11.3 check_variation_params        Table 3's params column for a variation (d_k ≠ d_v allowed)
"""

from __future__ import annotations

import math

import numpy

from minitransformer.gradcheck import numerical_gradient
from minitransformer.layers.loss import cross_entropy_forward
from minitransformer.layers.positional import LearnedPositionalEmbedding
from minitransformer.model import TransformerConfig, count_parameters

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

__all__ = ["NOT_ATTEMPTED", "check_learned_pe_backward", "check_perplexity", "check_variation_params"]


# -- Exercise 11.1: the learned positional embedding's backward ----------------------------

@exercise("11.1")
def check_learned_pe_backward(fn) -> bool:
    """fn(dout, offset, max_len) -> (dx, dP) for out = x + P[offset : offset + S].

    dout: (B, S, d_model); dx: (B, S, d_model); dP: (max_len, d_model), zero in the
    rows that were not used. Compared with ``LearnedPositionalEmbedding.backward``
    and with central differences of sum(out ⊙ dout).
    """
    r = case_rng(110)
    errors = {}
    cases = ((3, 4, 5, 9, 0), (2, 3, 4, 8, 4))
    if not visible():
        B, S, d = sizes(r, (3, 4, 5), 1, 6)
        extra = int(r.integers(0, 6))
        cases = ((B, S, d, S + extra, int(r.integers(0, extra + 1))), (2, 3, 4, 8, edge([4, 5, 0, 2])))
    for B, S, d, max_len, offset in cases:
        x = r.standard_normal((B, S, d))
        P = r.standard_normal((max_len, d))
        dout = r.standard_normal((B, S, d))
        got = fn(dout.copy(), offset, max_len)
        if not_attempted(got):
            return False
        dx, dP = unpack(got, ["dx", "dP"])

        layer = LearnedPositionalEmbedding(d, max_len, rng=r)
        layer.P.data = P                              # float64, as the checks need
        layer.P.grad = numpy.zeros_like(P)
        layer.forward(x, offset=offset)
        ref_dx = layer.backward(dout)
        ref_dP = layer.P.grad.copy()

        def f(layer=layer, x=x, offset=offset, dout=dout):
            return float((layer.forward(x, offset=offset) * dout).sum())

        num_dx, num_dP = numerical_gradient(f, x), numerical_gradient(f, P)
        where = f"(B={B}, S={S}, offset={offset})"
        no_offset = numpy.zeros_like(P)
        no_offset[:S] = dout.sum(axis=0)
        mean_rows = numpy.zeros_like(P)
        mean_rows[offset: offset + S] = dout.mean(axis=0)
        hints_dP = [
            (no_offset, tr("the rows start at 0: the positions used are offset .. offset + S - 1, so the "
                           "gradient goes into P[offset : offset + S]")),
            (mean_rows, tr("the mean over the batch: every batch row adds P's row once, so its gradient is the "
                           "sum over the batch, not the mean")),
            (dout, tr("dP has the table's shape (max_len, d_model): sum dout over the batch, into the rows used")),
            (dout.sum(axis=0), tr("dP has the table's shape (max_len, d_model), with zeros in the rows not used; "
                                  "you returned only the S rows used")),
        ]
        hints_dx = [(numpy.zeros_like(dout), tr("x reaches the output through the identity: dx = dout, not 0"))]
        errors[f"dx {where}"] = check_array(f"dx {where}", dx, ref_dx, num_dx, hints=hints_dx)
        errors[f"dP {where}"] = check_array(f"dP {where}", dP, ref_dP, num_dP, hints=hints_dP)
    return report_correct(errors)


# -- Exercise 11.2: perplexity ---------------------------------------------------------------

def _log_softmax(logits):
    z = logits - logits.max(axis=-1, keepdims=True)
    return z - numpy.log(numpy.exp(z).sum(axis=-1, keepdims=True))


def _perplexity_reference(logits, targets, pad_id) -> float:
    """exp of the mean NLL per non-pad target token: the package's loss without smoothing."""
    nll_mean, _ = cross_entropy_forward(logits, targets, pad_id, 0.0)
    return math.exp(nll_mean)


@exercise("11.2")
def check_perplexity(fn) -> bool:
    """fn(logits, targets, pad_id) -> float: exp of the mean negative log-likelihood per
    non-pad target token (natural log), no label smoothing.

    logits: (B, T, V); targets: (B, T) ints, pad_id where there is no token.
    """
    r = case_rng(111)
    errors = {}
    cases = ((3, 5, 7, 0), (2, 6, 9, 3))
    if not visible():
        cases = tuple((*sizes(r, (3, 5, 7), 3, 9), int(r.integers(0, 2))) for _ in range(2))
    for B, T, V, pad_id in cases:
        logits = r.standard_normal((B, T, V)) * 2.0
        targets = r.integers(0, V, size=(B, T))
        targets[targets == pad_id] = (pad_id + 1) % V
        targets[0, T - 2:] = pad_id                   # padding at the end of two sentences
        targets[1, T - 1:] = pad_id
        got = fn(*copy_all(logits), targets.copy(), pad_id)
        if not_attempted(got):
            return False
        if isinstance(got, numpy.ndarray) and got.size == 1:
            got = float(got.reshape(()))
        if isinstance(got, bool) or not isinstance(got, (int, float, numpy.floating)):
            raise WrongAnswer(f"perplexity: expected one number, got {type(got).__name__}: {got!r}"[:120])
        got = float(got)
        want = _perplexity_reference(logits, targets, pad_id)
        logp = numpy.take_along_axis(_log_softmax(logits), targets[..., None], axis=-1)[..., 0]
        real = targets != pad_id
        smoothed, _ = cross_entropy_forward(logits, targets, pad_id, 0.1)
        per_sentence = numpy.mean([math.exp(-logp[b][real[b]].mean()) for b in range(B)])
        wrong = [
            (math.exp(-logp.mean()), tr("the pad positions are counted: average only over targets != pad_id")),
            (2 ** (-logp[real].mean()), tr("2 to the power of a natural-log NLL: use exp (or log2 throughout)")),
            (-logp[real].mean(), tr("that is the mean NLL (the loss); perplexity is its exponential")),
            (math.exp(smoothed), tr("that is the label-smoothed loss's exponential; perplexity uses the plain NLL "
                                    "(eps_ls = 0), which is why label smoothing can raise it (Table 3, row D)")),
            (per_sentence, tr("the mean of per-sentence perplexities; Table 3's PPL is over all tokens at once: "
                              "exp of the mean NLL per token")),
            (math.exp(-logp[real].sum() / B), tr("divided by the number of sentences; divide by the number of "
                                                 "(non-pad) tokens")),
        ]
        name = tr(f"perplexity (B={B}, T={T}, V={V}, pad_id={pad_id})")
        err = abs(got - want) / want
        if err > 1e-9:
            msg = tr(f"{name}: expected {want:.6f}, got {got:.6f}")
            for value, text in wrong:
                if abs(got - value) <= 1e-9 * max(1.0, abs(value)):
                    msg += f"\n  hint: {text}"
                    break
            raise WrongAnswer(msg)
        errors[name] = (err, None)
    return report_correct(errors)


# -- Exercise 11.3: the parameter column of a variation ----------------------------------------

def _variation_params(V, d_model, h, d_k, d_v, d_ff, N, learned_max_len=0):
    """The reference count: attention with h heads of key size d_k and value size d_v."""
    attn = 2 * (d_model * h * d_k + h * d_k) + (d_model * h * d_v + h * d_v) + (h * d_v * d_model + d_model)
    ffn = 2 * d_model * d_ff + d_ff + d_model
    enc = attn + ffn + 2 * 2 * d_model
    dec = 2 * attn + ffn + 3 * 2 * d_model
    return V * d_model + N * (enc + dec) + learned_max_len * d_model


@exercise("11.3")
def check_variation_params(fn) -> bool:
    """fn(V, d_model, h, d_k, d_v, d_ff, N, learned_max_len) -> int: learnable scalars of the
    post-LN Transformer with tied embeddings, h heads of key size d_k and value size d_v
    (W^Q, W^K: d_model × h·d_k; W^V: d_model × h·d_v; W^O: h·d_v × d_model; each with a
    bias), and a learned positional table of learned_max_len rows (0: sinusoids)."""
    cases = [  # (V, d_model, h, d_k, d_v, d_ff, N, learned_max_len)
        (12, 16, 2, 8, 8, 24, 2, 0),           # d_k = d_v = d_model / h: the package builds it
        (12, 16, 4, 4, 4, 24, 1, 20),          # ... with a learned table
        (37000, 512, 8, 64, 64, 2048, 6, 0),   # base
        (37000, 512, 8, 16, 64, 2048, 6, 0),   # Table 3, row B: d_k = 16
        (37000, 512, 1, 512, 512, 2048, 6, 0),  # row A: one head
        (37000, 512, 8, 64, 64, 2048, 6, 512),  # row E with a 512-row table
    ]
    if not visible():
        r = case_rng(113)
        h = int(r.choice([1, 2, 4, 8]))
        d_k, d_v = (int(x) for x in r.choice([4, 8, 16, 32, 64], size=2))
        d = h * int(r.choice([d_k, d_v]))
        cases = [(int(r.integers(10, 40000)), d, h, d_k, d_v, int(r.integers(8, 4096)), int(r.integers(1, 7)),
                  int(edge([0, 64, 0, 512]))),
                 (12, 2 * h, h, 2, 2, 24, 2, int(r.integers(0, 30)))]
    counted = []
    for case in cases:
        V, d, h, d_k, d_v, d_ff, N, L = case
        got = fn(*case)
        if not_attempted(got):
            return False
        expected = _variation_params(*case)
        if d_k == d_v == d // h:                   # the package can build it: the reference must agree
            cfg = TransformerConfig(vocab_size=V, d_model=d, h=h, N=N, d_ff=d_ff,
                                    positional="learned" if L else "sinusoidal", max_len=max(L, 1))
            assert count_parameters(cfg) == expected, "checker's own formula disagrees with the package"
        n_attn = 3 * N                               # attention blocks: 1 per encoder layer, 2 per decoder layer
        what = tr(f"parameters for V={V}, d_model={d}, h={h}, d_k={d_k}, d_v={d_v}, d_ff={d_ff}, N={N}, table={L}")
        check_count(what, got, expected, hints=[
            (expected - L * d, tr("the learned positional table has learned_max_len × d_model parameters "
                                  "(one table shared by both sides)")),
            (expected + L * d, tr("the learned table counted twice: the model shares one between source and target")),
            (expected + n_attn * (2 * (d * h * d_v + h * d_v) - 2 * (d * h * d_k + h * d_k)),
             tr("W^Q and W^K have h·d_k columns (the key size); only W^V and W^O use d_v")),
            (expected + n_attn * ((d * h * d_k + h * d_k) + h * d_k * d - (d * h * d_v + h * d_v) - h * d_v * d),
             tr("W^V and W^O sized with the key size d_k: the values have size d_v, so W^V is d_model × h·d_v (with "
                "its bias h·d_v) and W^O is h·d_v × d_model")),
            (expected + n_attn * ((d * h * d_k + h * d_k) - (d * h * d_v + h * d_v)),
             tr("W^V sized with the key size d_k: it projects to the values, d_model × h·d_v (bias h·d_v)")),
            (expected + n_attn * (h * d_k * d - h * d_v * d),
             tr("W^O sized with the key size d_k: it reads the concatenated values, h·d_v × d_model")),
            (expected + 2 * V * d, tr("the embedding is tied three ways (§3.4): count E once")),
            (expected - n_attn * (2 * h * d_k + h * d_v + d), tr("the attention biases are missing (b^Q, b^K, b^V: "
                                                                "h·d_k, h·d_k, h·d_v; b^O: d_model)")),
        ])
        counted.append(f"{expected:,}")
    say(tr("correct"))
    say("  counts: " + ", ".join(counted) + tr(" (base, row B d_k=16, row A h=1, row E among them)"))
    return True
