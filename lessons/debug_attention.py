"""A tiny script to step through attention's forward and backward in a debugger.

Run it plainly:                python lessons/debug_attention.py
Stop at breakpoint():          python lessons/debug_attention.py --break
In VS Code:                    Run and Debug -> "Lesson script: debug_attention.py"
                               (set a red-dot breakpoint on any line below first, then
                               press F11 on a call to step into the package's code)

Everything is small (one sentence, one head, 3 positions, d_k = 2) so every
array fits on the screen. Lesson 0 (00_how_to_use.ipynb) explains the commands.
"""

import argparse

import numpy as np

from minitransformer import backend
from minitransformer.layers.masks import causal_mask
from minitransformer.gradcheck import gradcheck
from minitransformer.layers.attention import attention_backward, attention_forward


def main(stop: bool = False) -> None:
    backend.set_default_dtype("float64")          # gradient checks need float64
    np.set_printoptions(precision=4, suppress=True)
    rng = np.random.default_rng(0)
    B, h, S, d_k = 1, 1, 3, 2
    Q = rng.standard_normal((B, h, S, d_k))
    K = rng.standard_normal((B, h, S, d_k))
    V = rng.standard_normal((B, h, S, d_k))
    mask = causal_mask(S, np)                     # (1, 1, S, S), True = may attend

    # Forward, §3.2.1 Eq. (1). Step into attention_forward (F11 / pdb "s") to watch
    # the scores being scaled, masked and normalised.
    out, cache = attention_forward(Q, K, V, mask)
    print("attention weights A (row i: how much query i looks at each key):")
    print(cache.A[0, 0])
    print("cache fields:", {name: getattr(value, "shape", value) for name, value in cache._asdict().items()})

    dout = rng.standard_normal(out.shape)         # pretend dL/d(out) came from above
    if stop:
        # Execution stops here with --break. Try:  p cache.A.sum(-1)   s   n   n   p dA.shape   c
        breakpoint()
    # Backward: step into attention_backward to see dA, dS, dQ, dK, dV appear in turn.
    dQ, dK, dV = attention_backward(dout, cache)

    def loss():                                   # L = sum(out * dout), so dL/d(out) = dout
        return float((attention_forward(Q, K, V, mask)[0] * dout).sum())

    report = gradcheck(loss, {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV})
    print(report)
    report.assert_ok()
    print("gradient check passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--break", dest="stop", action="store_true",
                        help="call breakpoint() just before the backward pass")
    main(parser.parse_args().stop)
