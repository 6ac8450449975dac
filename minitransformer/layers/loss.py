"""Softmax cross-entropy with label smoothing, ignoring padding (§5.4).

With V classes, target y and smoothing ε_ls, the target distribution is

    q_v = (1 - ε_ls) · [v = y] + ε_ls / V

(the same convention as PyTorch's ``CrossEntropyLoss(label_smoothing=ε)``),
and the loss of one position is the cross-entropy -Σ_v q_v log p_v with
p = softmax(logits). The batch loss is the mean over non-pad target tokens.

Stability: log p comes from log-softmax, log p = z - max(z) - log Σ exp(z - max(z)),
so it never takes log(0) and exp() never overflows, whatever the logits.
"""

from __future__ import annotations

from typing import NamedTuple

from .. import backend
from ..backend import Array
from ..errors import ShapeError, check_input, check_token_ids


class LossCache(NamedTuple):
    probs: object     # (B, T, V) softmax of the logits
    targets: object   # (B, T)
    valid: object     # (B, T) bool, True at non-pad targets
    n_tokens: int     # the number of non-pad targets, the mean's divisor
    eps_ls: float     # ε_ls, the label smoothing


def log_softmax(logits: Array) -> Array:
    """(…, V) -> (…, V) log-probabilities, computed stably."""
    xp = backend.get_array_module(logits)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))


def cross_entropy_forward(logits: Array, targets: Array, pad_id: int, eps_ls: float = 0.0) -> tuple[float, LossCache]:
    """logits: (B, T, V), targets: (B, T) ints -> (loss: float, cache).

    With logZ = log Σ_v exp(z_v) per position, log p_v = z_v - logZ, so
        -log p_y                 = logZ - z_y
        -(1/V) Σ_v log p_v       = logZ - mean_v(z_v)
    and no (B, T, V) array of log-probabilities is needed: the only large
    array built is p = softmax(z), which the backward needs anyway
    (at the base size one (B, T, V) float32 array is 76 MB).
    """
    xp = backend.get_array_module(logits)
    z_max = logits.max(axis=-1, keepdims=True)                   # (B, T, 1)
    shifted = logits - z_max                                     # (B, T, V)  z - max(z) <= 0, the one new large array
    exp_shifted = xp.exp(shifted, out=shifted)                   # exp(z - max(z)) <= 1: never overflows (in place)
    sum_exp = exp_shifted.sum(axis=-1, keepdims=True)            # (B, T, 1)
    probs = xp.divide(exp_shifted, sum_exp, out=exp_shifted)     # p = softmax(z), in place: probs is exp_shifted
    logZ = z_max + xp.log(sum_exp)                               # (B, T, 1)  log Σ_v exp(z_v)
    z_y = xp.take_along_axis(logits, targets[..., None], axis=-1)    # (B, T, 1)  the target's logit
    nll = logZ - z_y                                             # (B, T, 1)  -log p_y
    smooth = logZ - logits.mean(axis=-1, keepdims=True)          # (B, T, 1)  -(1/V) Σ_v log p_v
    per_token = ((1.0 - eps_ls) * nll + eps_ls * smooth)[..., 0]     # (B, T)  -Σ_v q_v log p_v
    valid = targets != pad_id                                    # (B, T)
    n_tokens = int(valid.sum())
    if n_tokens == 0:
        raise ValueError("cross_entropy: every target is padding; the mean over non-pad tokens is undefined")
    loss = float((per_token * valid).sum()) / n_tokens           # the mean over non-pad targets
    return loss, LossCache(probs, targets, valid, n_tokens, eps_ls)


def cross_entropy_backward(cache: LossCache, overwrite_cache: bool = False) -> Array:
    """The gradient of the mean label-smoothed cross-entropy with respect to the logits.

    d/dz of -Σ_v q_v log softmax(z)_v is p - q: softmax minus the smoothed
    target, put at the target index by index (not found by value). Pad
    positions get 0; the 1/n_tokens comes from the mean.

    overwrite_cache=True builds dlogits in the cached probabilities' buffer
    (saves one (B, T, V) array; the cache is unusable afterwards).

    Returns:
        dlogits: (B, T, V), the loss's gradient (the loss is the start: no dloss comes in)
    """
    xp = backend.get_array_module(cache.probs)
    probs, targets, valid, n_tokens, eps_ls = cache
    V = probs.shape[-1]
    # p - q with q = (1 - ε_ls)·[v = y] + ε_ls/V: first p - ε_ls/V everywhere ...
    dlogits = xp.subtract(probs, eps_ls / V, out=probs if overwrite_cache else None)     # (B, T, V)
    rows = dlogits.reshape(-1, V)                                # (B·T, V) view: one row per position
    rows[xp.arange(rows.shape[0]), targets.reshape(-1)] -= 1.0 - eps_ls                 # ... and -(1 - ε_ls) at y
    dlogits *= (valid / n_tokens).astype(dlogits.dtype)[..., None]     # 1/n_tokens, or 0 at padding
    return dlogits


class LabelSmoothedCrossEntropy:
    """Loss object holding ε_ls and the pad id; forward returns a Python float."""

    def __init__(self, pad_id: int, eps_ls: float = 0.1):
        if not 0.0 <= eps_ls < 1.0:
            raise ValueError(f"label smoothing ε_ls must be in [0, 1), got {eps_ls}")
        self.pad_id, self.eps_ls = pad_id, eps_ls
        self._cache = None

    def forward(self, logits: Array, targets: Array) -> float:
        """logits: (B, T, V), targets: (B, T) ids -> the mean loss over non-pad targets."""
        check_input("cross_entropy", "logits", logits)                  # a float array (not ids)
        if logits.ndim != 3 or targets.shape != logits.shape[:2]:
            raise ShapeError(
                f"cross_entropy: logits must be (B, T, V) and targets (B, T); got logits "
                f"{tuple(logits.shape)} and targets {tuple(targets.shape)}"
            )
        if targets.size == 0:
            raise ShapeError(f"cross_entropy: there are no target positions (B={targets.shape[0]}, "
                             f"T={targets.shape[1]}); the loss of an empty batch is undefined")
        check_token_ids("cross_entropy targets", targets, logits.shape[-1])
        loss, self._cache = cross_entropy_forward(logits, targets, self.pad_id, self.eps_ls)
        return loss

    def backward(self) -> Array:
        """-> dlogits: (B, T, V) for the last forward."""
        if self._cache is None:
            raise RuntimeError("LabelSmoothedCrossEntropy.backward called before forward")
        cache, self._cache = self._cache, None
        return cross_entropy_backward(cache, overwrite_cache=True)      # the cache is spent: reuse its buffer
