"""Rewrites made for speed (issue 25.4/25.5) that must not change a single bit.

* LayerNorm's forward means as sum / d_model instead of ``.mean()`` (the same sum and the
  same division, without ``.mean()``'s Python wrapper; decoding runs 3N LayerNorms per token);
* the dropout mask written over the uniform draws by ``greater_equal(..., out=u)``
  instead of through a boolean array.

Each is compared with the plain formula it replaced, on the same numbers, with
``array_equal``: a training run must follow the same trajectory as before them.
"""

from __future__ import annotations

import numpy as np
import pytest

from minitransformer.layers.dropout import dropout_mask
from minitransformer.layers.layernorm import layernorm_forward


@pytest.mark.parametrize("shape", [(1, 1, 64), (32, 32, 128), (8, 64, 512), (3, 7, 33)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layernorm_forward_equals_the_mean_formula_bit_for_bit(shape, dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    gamma = rng.standard_normal(shape[-1]).astype(dtype)
    beta = rng.standard_normal(shape[-1]).astype(dtype)
    eps = 1e-5

    mu = x.mean(axis=-1, keepdims=True)                      # the formulas with .mean(), as before
    xc = x - mu
    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)
    y_ref = gamma * (xc * rstd) + beta

    y, cache = layernorm_forward(x, gamma, beta, eps)
    assert y.dtype == dtype
    assert np.array_equal(y, y_ref), "layernorm_forward differs from mean(x), mean((x - mu)^2)"
    assert np.array_equal(cache.rstd, rstd)


@pytest.mark.parametrize("P_drop", [0.1, 0.3, 0.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropout_mask_equals_the_plain_formula_bit_for_bit(P_drop, dtype):
    mask = dropout_mask((16, 9, 24), P_drop, np.random.default_rng(7), dtype)
    u = np.random.default_rng(7).random((16, 9, 24), dtype=dtype)   # the same draws
    plain = (u >= P_drop).astype(dtype) * dtype(1.0 / (1.0 - P_drop))
    assert mask.dtype == dtype
    assert np.array_equal(mask, plain)
    assert set(np.unique(mask)) <= {0.0, dtype(1.0 / (1.0 - P_drop))}
