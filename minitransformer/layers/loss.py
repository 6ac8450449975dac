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


# The loss works on blocks of this many logits (1 MiB of float32): large enough
# that a block is a few rows even at V = 37,000, small enough to spread over the cores.
LOSS_BLOCK = 1 << 18


def cross_entropy_forward(logits: Array, targets: Array, pad_id: int, eps_ls: float = 0.0) -> tuple[float, LossCache]:
    """logits: (B, T, V), targets: (B, T) ints -> (loss: float, cache).

    With logZ = log Σ_v exp(z_v) per position, log p_v = z_v - logZ, so
        -log p_y                 = logZ - z_y
        -(1/V) Σ_v log p_v       = logZ - mean_v(z_v)
    and no (B, T, V) array of log-probabilities is needed: the only large
    array built is p = softmax(z), which the backward needs anyway.
    """
    xp = backend.get_array_module(logits)
    V = logits.shape[-1]
    z = logits.reshape(-1, V)                                            # (B·T, V): one row per position
    y = targets.reshape(-1, 1)                                           # (B·T, 1)
    probs = xp.empty_like(z)                                             # the one new (B·T, V) array
    per_token = xp.empty(z.shape[0], dtype=logits.dtype)                 # (B·T,)

    def rows(r):                                                         # the formulas above, for rows r
        z_max = z[r].max(axis=-1, keepdims=True)                         # (rows, 1)
        p = xp.subtract(z[r], z_max, out=probs[r])
        xp.exp(p, out=p)                                                 # exp(z - max): never overflows
        sum_exp = p.sum(axis=-1, keepdims=True)
        p /= sum_exp                                                     # p = softmax(z)
        logZ = (z_max + xp.log(sum_exp))[:, 0]                           # (rows,)
        nll = logZ - xp.take_along_axis(z[r], y[r], axis=-1)[:, 0]       # -log p_y
        smooth = logZ - backend.rowsum(z[r])[:, 0] / V                   # -(1/V) Σ_v log p_v
        per_token[r] = (1.0 - eps_ls) * nll + eps_ls * smooth

    # Blocks of rows on all CPU cores (see backend.for_row_blocks); each row is computed
    # exactly as it would be alone, so the numbers do not depend on the number of threads.
    backend.for_row_blocks(rows, *z.shape, xp=xp, block=LOSS_BLOCK)
    valid = targets != pad_id
    n_tokens = int(valid.sum())
    if n_tokens == 0:
        raise ValueError("cross_entropy: every target is padding; the mean over non-pad tokens is undefined")
    loss = float((per_token.reshape(targets.shape) * valid).sum()) / n_tokens
    return loss, LossCache(probs.reshape(logits.shape), targets, valid, n_tokens, eps_ls)


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
    dlogits = probs if overwrite_cache else xp.empty_like(probs)
    flat, p_flat = dlogits.reshape(-1, V), probs.reshape(-1, V)          # (B·T, V) views
    y = targets.reshape(-1)
    weight = (valid / n_tokens).reshape(-1, 1).astype(dlogits.dtype)    # 1/n_tokens, or 0 at padding

    def rows(r):                                                         # the formula above, for rows r
        d = xp.subtract(p_flat[r], eps_ls / V, out=flat[r])             # p - ε/V everywhere ...
        d[xp.arange(d.shape[0]), y[r]] -= 1.0 - eps_ls                   # ... and -(1-ε) more at y
        d *= weight[r]

    backend.for_row_blocks(rows, *flat.shape, xp=xp, block=LOSS_BLOCK)   # blocks of rows on all cores
    return dlogits


def cross_entropy_reference(logits: Array, targets: Array, pad_id: int, eps_ls: float = 0.0) -> tuple[float, Array]:
    """The loss and its gradient from the definitions, plainly: (loss, dlogits).

    Builds log p and the smoothed target q as whole (B, T, V) arrays. The functions
    above compute the same numbers block by block with less memory;
    tests/test_perf_helpers.py compares them with this.
    """
    xp = backend.get_array_module(logits)
    V = logits.shape[-1]
    log_p = log_softmax(logits)                                           # (B, T, V)
    q = xp.full(logits.shape, eps_ls / V, dtype=logits.dtype)             # ε/V everywhere ...
    q_rows = q.reshape(-1, V)
    q_rows[xp.arange(q_rows.shape[0]), targets.reshape(-1)] += 1.0 - eps_ls  # ... and 1-ε more at y
    valid = targets != pad_id
    n_tokens = int(valid.sum())
    loss = float((-(q * log_p).sum(axis=-1) * valid).sum()) / n_tokens
    dlogits = (xp.exp(log_p) - q) * (valid / n_tokens)[..., None]
    return loss, dlogits


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
