"""The exercise checkers of lesson 9: a right answer passes, each classic wrong answer
raises AssertionError with its hint, the untouched stub (returns None) returns False
without raising. The right answers here are written independently of the package."""

import numpy as np
from checker_contract import contract_tests

from lessonkit.exercises import lesson_09 as ex

# -- correct answers -----------------------------------------------------------------------

def noam(step, d_model, warmup_steps):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def adam(p, g, m, v, t, lr):
    b1, b2, eps = 0.9, 0.98, 1e-9
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g ** 2
    return p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps), m, v


def smoothed_target(targets, V, eps_ls):
    return (1 - eps_ls) * np.eye(V)[targets] + eps_ls / V


def dlogits(logits, targets, pad_id, eps_ls):
    z = logits - logits.max(-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    keep = (targets != pad_id)[..., None]
    return (p - smoothed_target(targets, logits.shape[-1], eps_ls)) * keep / keep.sum()


# -- wrong answers, each with the hint its checker must give -----------------------------------

def adam_with(**changes):
    def step(p, g, m, v, t, lr):
        b1, b2, eps = changes.get("b1", 0.9), changes.get("b2", 0.98), changes.get("eps", 1e-9)
        m_new = b1 * m + (1 - b1) * (g * g if changes.get("m_g2") else g)
        v_new = b2 * v + (1 - b2) * g ** 2
        tt = t + changes.get("t_shift", 0)
        m_hat = m_new / (1 - b1 ** tt) if changes.get("correct_m", True) else m_new
        v_hat = v_new / (1 - b2 ** tt) if changes.get("correct_v", True) else v_new
        denom = np.sqrt(v_hat + eps) if changes.get("eps_inside") else np.sqrt(v_hat) + eps
        p_new = p + changes.get("sign", -1.0) * lr * m_hat / denom
        if changes.get("return_hats"):
            return p_new, m_hat, v_new
        return p_new, m_new, v_new
    return step


def dlogits_with(**changes):
    def grad(logits, targets, pad_id, eps_ls):
        V = logits.shape[-1]
        axis = changes.get("axis", -1)
        z = logits - logits.max(axis, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis, keepdims=True)
        onehot = np.eye(V)[targets]
        q = {"ls": smoothed_target(targets, V, eps_ls), "none": onehot,
             "v-1": (1 - eps_ls) * onehot + eps_ls / (V - 1) * (1 - onehot),
             "not-at-y": (1 - eps_ls) * onehot + eps_ls / V * (1 - onehot)}[changes.get("q", "ls")]
        keep = (targets != pad_id)[..., None]
        n = {"tokens": keep.sum(), "positions": targets.size, "one": 1}[changes.get("n", "tokens")]
        d = changes.get("sign", 1.0) * (p - q) / n
        return d * keep if changes.get("mask", True) else d
    return grad


CASES = {
    "check_noam_lr": (noam, [
        ("max for min", lambda s, d, w: d ** -0.5 * max(s ** -0.5, s * w ** -1.5), r"min and max swapped"),
        ("no d_model factor", lambda s, d, w: min(s ** -0.5, s * w ** -1.5), r"d_model\^-0.5 factor is missing"),
        ("d_model^+0.5", lambda s, d, w: d ** 0.5 * min(s ** -0.5, s * w ** -1.5), r"d_model\^\+0.5"),
        ("warmup^-0.5", lambda s, d, w: d ** -0.5 * min(s ** -0.5, s * w ** -0.5), r"warmup_steps\^-1.5"),
        ("no warm-up", lambda s, d, w: d ** -0.5 * s ** -0.5, r"warm-up is missing"),
        ("steps from 0", lambda s, d, w: noam(s + 1, d, w), r"off by one"),
        ("a string", lambda s, d, w: "0.1 or so", r"expected a number"),
    ]),
    "check_adam_step": (adam, [
        ("no bias correction", adam_with(correct_m=False, correct_v=False), r"p_new.*no bias correction"),
        ("v not corrected", adam_with(correct_v=False), r"v is not bias-corrected"),
        ("m not corrected", adam_with(correct_m=False), r"m is not bias-corrected"),
        ("beta^(t-1)", adam_with(t_shift=-1), r"off by one.*not β\^\(t-1\)"),
        ("beta^(t+1)", adam_with(t_shift=1), r"off by one.*not β\^\(t\+1\)"),
        ("eps inside the root", adam_with(eps_inside=True), r"ε is inside the square root"),
        ("beta2 0.999", adam_with(b2=0.999), r"p_new.*β2 = 0.999 is Adam's usual default"),
        ("eps 1e-8", adam_with(eps=1e-8), r"ε = 1e-8 is Adam's usual default"),
        ("gradient ascent", adam_with(sign=1.0), r"uphill"),
        ("m from g squared", adam_with(m_g2=True), r"p_new.*m averages g"),
        ("returns m_hat", adam_with(return_hats=True), r"m_new.*not the bias-corrected m_hat"),
        ("two arrays", lambda *a: adam(*a)[:2], r"expected a tuple of 3 arrays"),
    ]),
    "check_dlogits": (dlogits, [
        ("q - p", dlogits_with(sign=-1.0), r"sign is flipped"),
        ("no smoothing", dlogits_with(q="none"), r"label smoothing is missing"),
        ("smoothing over V-1", dlogits_with(q="v-1"), r"V - 1 wrong tokens"),
        ("eps/V not at the target", dlogits_with(q="not-at-y"), r"target token gets ε_ls/V too"),
        ("pad not ignored", dlogits_with(mask=False), r"padding is not ignored"),
        ("mean over B*T", dlogits_with(n="positions"), r"divided by B·T"),
        ("sum, not mean", dlogits_with(n="one"), r"1/n of the mean is missing"),
        ("softmax over T", dlogits_with(axis=1), r"softmax over the wrong axis"),
        ("pad kept, mean over B*T", dlogits_with(mask=False, n="positions"), r"padding is not ignored"),
        ("(B*T, V)", lambda *a: dlogits(*a).reshape(-1, a[0].shape[-1]), r"shape mismatch: expected \(2, 4, 7\)"),
    ]),
}


(test_every_checker_has_cases, test_correct_answer_passes, test_stub_is_not_attempted,
 test_wrong_answer_gets_its_hint) = contract_tests(ex, CASES)


def test_the_checkers_inputs_tell_the_classic_mistakes_apart():
    """Each wrong answer above differs from the right one by far more than the tolerance
    (measured smallest: about 3e-4, the Adam bias correction off by one), so a right answer
    cannot be mistaken for a slip, nor a slip pass as right."""
    from lessonkit.exercises._common import TOL
    logits, targets, pad_id, eps_ls = ex._loss_inputs()
    right = dlogits(logits, targets, pad_id, eps_ls)
    for label, wrong, _ in CASES["check_dlogits"][1][:-1]:
        assert np.abs(wrong(logits, targets, pad_id, eps_ls) - right).max() > 100 * TOL * np.abs(right).max(), label
    p, g, m, v, t, lr = ex._adam_inputs()
    right = adam(p, g, m, v, t, lr)
    for label, wrong, _ in CASES["check_adam_step"][1][:-1]:
        errors = [np.abs(a - b).max() / np.abs(b).max() for a, b in zip(wrong(p, g, m, v, t, lr), right)]
        assert max(errors) > 100 * TOL, label


def test_the_dlogits_checker_needs_padding_and_smoothing_in_its_inputs():
    _, targets, pad_id, eps_ls = ex._loss_inputs()
    assert (targets == pad_id).any() and (targets != pad_id).any() and eps_ls > 0
    assert (targets == pad_id).sum(axis=1).tolist() != [0, 0]
