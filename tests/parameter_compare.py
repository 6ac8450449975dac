"""How far apart two models' parameters are, for the data-parallel equality tests.

The measure: max |a - b| over every parameter entry, divided by max |a| over all of them (the
parameters' scale), so "relative 1e-10" means 1e-10 of that scale.

The key biases b_K (the middle third of every attention's ``b_qkv``) are measured apart. Their
gradient is zero in exact arithmetic: adding q·b_K to every score of a query adds the same
constant to all of them, and softmax does not see it (§3.2.1, Eq. (1)). What the backward
computes for them is rounding noise, about 1e-17 of the other gradients, and Adam turns noise
into updates of about lr · noise / ε: b_K holds only noise, which another summation order (another
split of the batch) changes completely, at about 1e-10 of the scale after 20 steps of the toy
runs. Those entries change nothing the model computes.
"""

from __future__ import annotations

import numpy as np

from minitransformer import backend


def compare(named_a, named_b) -> dict:
    """{"max_rel": over every entry but b_K, "worst": its tensor, "b_K": the b_K entries' max |a - b| / scale}."""
    named_a, named_b = list(named_a), list(named_b)
    assert [n for n, _ in named_a] == [n for n, _ in named_b], "the two models have different parameters"
    scale = max(float(np.abs(backend.to_numpy(p.data)).max()) for _, p in named_a)
    worst, worst_name, b_k = 0.0, None, 0.0
    for (name, p), (_, q) in zip(named_a, named_b):
        d = np.abs(backend.to_numpy(p.data).astype(np.float64) - backend.to_numpy(q.data))
        if name.endswith("b_qkv"):
            third = d.size // 3
            b_k = max(b_k, float(d[third:2 * third].max()) / scale)
            d = np.concatenate([d[:third], d[2 * third:]])
        if float(d.max()) / scale >= worst:
            worst, worst_name = float(d.max()) / scale, name
    return {"max_rel": worst, "worst": worst_name, "b_K": b_k, "scale": scale}
