"""Checkers for the exercises of lesson 9, training (§5.3, §5.4).

Every checker follows the contract of ``lessonkit.exercises._common``: fixed
float64 inputs; the stub (returns None) prints a note and returns a false Verdict; a wrong answer
raises WrongAnswer with the max relative error against the package's answer (and
against the numerical gradient where there is one), one tolerance (TOL = 1e-6), plus a
``hint:`` line when it matches a common mistake; a right answer prints "correct".

Exercise 9.1 check_noam_lr       the learning rate of §5.3        vs optim.NoamSchedule
Exercise 9.2 check_adam_step     one Adam update, paper settings  vs optim.Adam
Exercise 9.3 check_dlogits       the label-smoothed loss gradient vs layers.loss.cross_entropy_backward
"""

from __future__ import annotations

import numpy

from minitransformer.gradcheck import numerical_gradient
from minitransformer.layers.loss import cross_entropy_backward, cross_entropy_forward
from minitransformer.layers.parameter import Parameter
from minitransformer.optim import Adam, NoamSchedule

from ..i18n import tr
from ._common import (
    NOT_ATTEMPTED,
    WrongAnswer,
    case_rng,
    check_array,
    copy_all,
    describe,
    edge,
    exercise,
    not_attempted,
    report_correct,
    sizes,
    unpack,
    visible,
)

__all__ = ["NOT_ATTEMPTED", "check_noam_lr", "check_adam_step", "check_dlogits"]

# The settings the checkers use, public so the tests and the lesson quote the same numbers.
NOAM_CASES = ((512, 4000), (64, 200), (128, 10))          # (d_model, warmup_steps)
NOAM_STEPS = (1, 2, 5, 10, 50, 199, 200, 201, 1000, 3999, 4000, 4001, 20000)
PAPER_BETAS, PAPER_EPS = (0.9, 0.98), 1e-9


def _noam_cases():
    """NOAM_CASES and NOAM_STEPS, or (a hidden case) others, with the steps around warm-up's end."""
    if visible():
        return NOAM_CASES, NOAM_STEPS
    r = case_rng(91)
    cases = tuple((int(r.choice([16, 32, 64, 128, 256, 512, 1024])), int(r.integers(2, 5000))) for _ in range(2))
    steps = sorted({1, 2, *(int(s) for s in r.integers(3, 30000, size=6)),
                    *(w + dw for _, w in cases for dw in (-1, 0, 1))})
    return cases, tuple(steps)


# -- Exercise 9.1: the learning-rate schedule ------------------------------------------------

def _noam(step, d_model, warmup, d_power=-0.5, warmup_power=-1.5, pick=min):
    """§5.3's formula, with one of the usual slips selectable (defaults: the right answer)."""
    return d_model ** d_power * pick(step ** -0.5, step * warmup ** warmup_power)


@exercise("9.1")
def check_noam_lr(fn) -> bool:
    """fn(step, d_model, warmup_steps) -> lrate (a float) for step = 1, 2, ...:
    lrate = d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)  (§5.3).
    Compared with ``optim.NoamSchedule`` at the steps of NOAM_STEPS for each case of NOAM_CASES."""
    got = []
    noam_cases, noam_steps = _noam_cases()
    for d_model, warmup in noam_cases:
        for step in noam_steps:
            value = fn(step, d_model, warmup)
            if not got and not_attempted(value):
                return False
            try:
                got.append(float(value))
            except (TypeError, ValueError):
                raise WrongAnswer(tr(f"lrate(step={step}, d_model={d_model}, warmup_steps={warmup}): expected a "
                                        f"number, got {describe(value)}")) from None
    got = numpy.array(got)

    def table(**slip):
        return numpy.array([_noam(s, d, w, **slip) for d, w in noam_cases for s in noam_steps])

    reference = numpy.array([NoamSchedule(d, w)(s) for d, w in noam_cases for s in noam_steps])
    hints = [
        (table(pick=max), tr("min and max swapped: the rate is the *smaller* of the two terms (it rises, peaks at "
                             "warmup_steps, then decays)")),
        (table(d_power=0.0), tr("the d_model^-0.5 factor is missing")),
        (table(d_power=0.5), tr("d_model^+0.5: the factor is d_model to the power -0.5 (wider models take smaller "
                                "steps)")),
        (table(warmup_power=-0.5), tr("warmup_steps^-0.5 in the warm-up term: it is warmup_steps^-1.5, so that the two "
                                      "terms meet at step = warmup_steps")),
        (table(pick=lambda decay, warm: decay),
         tr("the warm-up is missing: before warmup_steps the rate grows linearly, step · warmup_steps^-1.5")),
        (numpy.array([_noam(s + 1, d, w) for d, w in noam_cases for s in noam_steps]),
         tr("off by one: steps count from 1 (the first update is step 1), use step as given")),
    ]
    errors = {"lrate": check_array("lrate", got, reference, hints=hints)}
    return report_correct(errors)


# -- Exercise 9.2: one Adam update ---------------------------------------------------------

def _adam_inputs():
    """p, g, m, v of shape (3, 4) at step t = 3 (so m and v have a history). Row 2 has
    gradients of size ~1e-8, where sqrt(v_hat) is comparable to ε and ε matters."""
    r = case_rng(92)
    shape = sizes(r, (3, 4), 3, 6)
    p = r.standard_normal(shape)
    g = r.standard_normal(shape)
    m = 0.2 * r.standard_normal(shape)
    v = 0.5 * r.random(shape) + 0.05
    g[2] *= 1e-8
    m[2] *= 1e-8
    v[2] *= 1e-16
    t = 3 if visible() else edge([1, int(r.integers(2, 40)), 1000])
    lr = 0.01 if visible() else float(10 ** r.uniform(-4, -1))
    return p, g, m, v, t, lr


def _adam_variant(p, g, m, v, t, lr, beta1=0.9, beta2=0.98, eps=1e-9, correct=(True, True), t_shift=0,
                  eps_inside=False, sign=1.0, m_uses_g2=False):
    """One Adam update written out, with one of the usual slips selectable (defaults: right)."""
    m = beta1 * m + (1 - beta1) * (g * g if m_uses_g2 else g)
    v = beta2 * v + (1 - beta2) * g * g
    tt = t + t_shift
    m_hat = m / (1 - beta1 ** tt) if correct[0] else m
    v_hat = v / (1 - beta2 ** tt) if correct[1] else v
    denom = numpy.sqrt(v_hat + eps) if eps_inside else numpy.sqrt(v_hat) + eps
    return p - sign * lr * m_hat / denom, m, v


@exercise("9.2")
def check_adam_step(fn) -> bool:
    """fn(p, g, m, v, t, lr) -> (p_new, m_new, v_new): the t-th Adam update (t = 1, 2, ...)
    with the paper's β1 = 0.9, β2 = 0.98, ε = 1e-9 (§5.3), on float64 arrays of one shape.

    m, v come in as they were after step t-1. Compared with ``optim.Adam``: a Parameter
    holding p with gradient g, its state loaded with m, v and step_count t-1, one step()."""
    p, g, m, v, t, lr = _adam_inputs()
    got = fn(*copy_all(p, g, m, v), t, lr)
    if not_attempted(got):
        return False
    p_new, m_new, v_new = unpack(got, ["p_new", "m_new", "v_new"])

    param = Parameter(p.copy(), "p")
    param.grad[...] = g
    adam = Adam([param], lr=lr, betas=PAPER_BETAS, eps=PAPER_EPS)
    adam.load_state_dict({"step_count": t - 1, "m.0": m, "v.0": v})
    adam.step()
    reference = {"p_new": param.data, "m_new": adam.m[0], "v_new": adam.v[0]}

    def variant(**slip):
        return _adam_variant(p, g, m, v, t, lr, **slip)

    p_hints = [
        (variant(correct=(False, False))[0], tr("no bias correction: divide m by (1 - β1^t) and v by (1 - β2^t) "
                                                "(both start at 0, so early averages are too small)")),
        (variant(correct=(True, False))[0], tr("v is not bias-corrected: v_hat = v / (1 - β2^t)")),
        (variant(correct=(False, True))[0], tr("m is not bias-corrected: m_hat = m / (1 - β1^t)")),
        (variant(t_shift=-1)[0], tr("off by one in the bias correction: this is update t, use β^t (not β^(t-1))")),
        (variant(t_shift=+1)[0], tr("off by one in the bias correction: this is update t, use β^t (not β^(t+1))")),
        (variant(eps_inside=True)[0], tr("ε is inside the square root: the paper's Adam divides by sqrt(v_hat) + ε")),
        (variant(beta2=0.999)[0], tr("β2 = 0.999 is Adam's usual default; the paper uses β2 = 0.98 (§5.3)")),
        (variant(eps=1e-8)[0], tr("ε = 1e-8 is Adam's usual default; the paper uses ε = 1e-9 (§5.3); "
                                  "it matters where gradients are tiny (row 2 here)")),
        (variant(sign=-1.0)[0], tr("the update goes uphill: subtract lr · m_hat / (sqrt(v_hat) + ε) from p")),
        (variant(m_uses_g2=True)[0], tr("m averages g (the first moment), v averages g² (the second)")),
    ]
    hints = {
        "p_new": p_hints,
        "m_new": [(variant(beta1=0.98)[1], tr("m uses β1 = 0.9 (β2 = 0.98 is v's)")),
                  (variant(m_uses_g2=True)[1], tr("m averages g (the first moment), not g²")),
                  (variant(correct=(True, True))[1] / (1 - 0.9 ** t),
                   tr("return m itself, not the bias-corrected m_hat: the next step continues from m"))],
        "v_new": [(variant(beta2=0.999)[2], tr("β2 = 0.999 is Adam's usual default; the paper uses β2 = 0.98")),
                  (variant(beta2=0.9)[2], tr("v uses β2 = 0.98 (β1 = 0.9 is m's)")),
                  (variant()[2] / (1 - 0.98 ** t),
                   tr("return v itself, not the bias-corrected v_hat: the next step continues from v"))],
    }
    errors = {name: check_array(name, got_, reference[name], hints=hints[name])
              for name, got_ in (("p_new", p_new), ("m_new", m_new), ("v_new", v_new))}
    return report_correct(errors)


# -- Exercise 9.3: the gradient of the label-smoothed cross-entropy -----------------------------

def _loss_inputs():
    """logits (B, T, V) = (2, 4, 7), targets with padding (pad_id 0) in both rows, ε_ls = 0.1."""
    r = case_rng(93)
    if visible():
        logits = 2.0 * r.standard_normal((2, 4, 7))
        targets = numpy.array([[3, 5, 2, 0], [6, 2, 0, 0]])
        return logits, targets, 0, 0.1
    B, T, V = sizes(r, (2, 4, 7), 2, 9)
    pad_id = int(r.integers(V))
    logits = 2.0 * r.standard_normal((B, T, V))
    targets = r.integers(0, V, size=(B, T))
    targets[targets == pad_id] = (pad_id + 1) % V
    targets[0, -1] = pad_id                                 # padding in some row, never every position
    return logits, targets, pad_id, float(edge([0.1, 0.2, 0.0, 0.3]))


def _softmax(z, axis=-1):
    e = numpy.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _dlogits_variant(logits, targets, pad_id, eps_ls, q_rule="ls", mask=True, denominator="tokens",
                     sign=1.0, axis=-1):
    """p - q with one of the usual slips selectable (defaults: the right answer)."""
    B, T, V = logits.shape
    p = _softmax(logits, axis)
    onehot = numpy.eye(V)[targets]
    q = {"ls": (1 - eps_ls) * onehot + eps_ls / V,
         "none": onehot,
         "v-1": (1 - eps_ls) * onehot + eps_ls / (V - 1) * (1 - onehot),
         "not-at-y": (1 - eps_ls) * onehot + eps_ls / V * (1 - onehot)}[q_rule]
    valid = targets != pad_id
    n = {"tokens": valid.sum(), "positions": B * T, "one": 1, "rows": B}[denominator]
    d = sign * (p - q) / n
    return d * valid[..., None] if mask else d


@exercise("9.3")
def check_dlogits(fn) -> bool:
    """fn(logits, targets, pad_id, eps_ls) -> dlogits: (B, T, V), the gradient of the mean
    label-smoothed cross-entropy over non-pad targets (§5.4) with respect to the logits.

    logits: (B, T, V) float64, targets: (B, T) ints with pad_id at padding. Compared with
    ``layers.loss.cross_entropy_backward`` and with central differences of the loss."""
    logits, targets, pad_id, eps_ls = _loss_inputs()
    got = fn(*copy_all(logits, targets), pad_id, eps_ls)
    if not_attempted(got):
        return False

    _, cache = cross_entropy_forward(logits, targets, pad_id, eps_ls)
    reference = cross_entropy_backward(cache)
    numeric = numerical_gradient(lambda: cross_entropy_forward(logits, targets, pad_id, eps_ls)[0], logits)

    def variant(**slip):
        return _dlogits_variant(logits, targets, pad_id, eps_ls, **slip)

    hints = [
        (variant(sign=-1.0), tr("the sign is flipped: the gradient is p - q (prediction minus target), not q - p")),
        (variant(q_rule="none"), tr("label smoothing is missing: q = (1 - ε_ls)·onehot(y) + ε_ls/V, not onehot(y)")),
        (variant(q_rule="v-1"), tr("you spread ε_ls over the V - 1 wrong tokens; this package's q (PyTorch's "
                                   "convention) gives ε_ls/V to every token, the target included")),
        (variant(q_rule="not-at-y"), tr("the target token gets ε_ls/V too: q_y = 1 - ε_ls + ε_ls/V, so that q sums "
                                        "to 1")),
        (variant(mask=False), tr("padding is not ignored: positions whose target is pad_id get gradient 0")),
        (variant(denominator="positions"), tr("you divided by B·T; the loss is the mean over the non-pad targets "
                                              "only")),
        (variant(denominator="one"), tr("the 1/n of the mean is missing: divide by the number of non-pad targets")),
        (variant(denominator="rows"), tr("you divided by B (sentences); the mean is over non-pad target *tokens*")),
        (variant(axis=1), tr("softmax over the wrong axis: p = softmax over the vocabulary, the last axis")),
        (variant(mask=False, denominator="positions"),
         tr("padding is not ignored: pad targets get gradient 0 and the mean counts non-pad targets only")),
    ]
    errors = {"dlogits": check_array("dlogits", got, reference, numeric, hints=hints)}
    return report_correct(errors)
