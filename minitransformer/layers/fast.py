"""The speed variants: code that computes what a plain version computes, but reads differently.

A learner stepping into a layer (or into Adam) meets the plain math, the
docstring's formulas one line each on whole arrays. A speed variant lives
here instead, and the code that owns the plain version calls it only above a
size threshold where it was measured to pay: at least 5% of a whole training
step at some size of benchmarks/bench_train.py, on two threads
(docs/performance.md has the keep/drop table; benchmarks/bench_fastpaths.py
measures each variant against its plain version). Each is compared with the
plain version by tests/test_perf_helpers.py.

What is here:

* ``adam_update_in_blocks``: Adam's update of one large parameter, a block of
  ``ADAM_BLOCK`` elements at a time (plain version: the loop in ``Adam.step``).
"""

from __future__ import annotations

import math

from .. import backend
from ..backend import Array

# -- Adam ------------------------------------------------------------------------------------

# Parameters of at least this many elements are updated block by block. Smaller ones
# (every parameter of the lesson and toy models) take the plain loop of Adam.step.
ADAM_MIN = 1 << 18

# Adam updates a large parameter in blocks of this many elements. A block of p, grad,
# m, v and one scratch array (5 × 256 KiB in float32) stays in the CPU's L2 cache
# through all ~13 passes of one update, instead of streaming every whole array through
# memory ~13 times. (A CPU trick: Adam.step takes it only for arrays on the CPU; on a
# GPU, blocks would only multiply kernel launches.)
ADAM_BLOCK = 1 << 16


def adam_update_in_blocks(p: Array, g: Array, m: Array, v: Array, lr: float, beta1: float, beta2: float,
                          eps: float, t: int) -> None:
    """``Adam.step``'s update of one parameter p (with gradient g and moments m, v), in place.

    The same update with the constants folded: with c1 = 1 - beta1^t, c2 = 1 - beta2^t,

        p -= lr · (m / c1) / (sqrt(v / c2) + eps)
           = step_size · m / (sqrt(v) + eps_hat),   step_size = lr·sqrt(c2)/c1, eps_hat = eps·sqrt(c2)

    (equal up to rounding), written into one scratch buffer, block by block.
    """
    xp = backend.get_array_module(p)
    sqrt_c2 = math.sqrt(1.0 - beta2**t)
    step_size = lr * sqrt_c2 / (1.0 - beta1**t)
    eps_hat = eps * sqrt_c2
    arrays = (p, g, m, v)
    if all(a.flags.c_contiguous for a in arrays):
        flat = [a.reshape(-1) for a in arrays]                      # views: writes go to the arrays
        blocks = [tuple(a[i: i + ADAM_BLOCK] for a in flat) for i in range(0, p.size, ADAM_BLOCK)]
    else:
        blocks = [arrays]                                           # not contiguous: one whole block
    scratch = xp.empty(min(p.size, ADAM_BLOCK) if len(blocks) > 1 else p.size, dtype=p.dtype)
    for p_b, g_b, m_b, v_b in blocks:
        buf = scratch[: g_b.size].reshape(g_b.shape)
        m_b *= beta1                                                # m = beta1 m + (1 - beta1) g
        xp.multiply(g_b, 1.0 - beta1, out=buf)
        m_b += buf
        v_b *= beta2                                                # v = beta2 v + (1 - beta2) g²
        xp.multiply(g_b, g_b, out=buf)
        buf *= 1.0 - beta2
        v_b += buf
        xp.sqrt(v_b, out=buf)                                       # p -= step_size m / (sqrt(v) + eps_hat)
        buf += eps_hat
        xp.divide(m_b, buf, out=buf)
        buf *= step_size
        p_b -= buf
