"""Step into LayerNorm, the loss's backward and Adam's update in a debugger: the plain math.

Run it plainly:                 python lessons/debug_layers.py
Stop before the first call:     python lessons/debug_layers.py --break
See every function that runs:   python lessons/debug_layers.py --trace

The arrays are lesson-sized (one sentence of 3 positions, d_model = 4, a vocabulary
of 6), so each fits on the screen. Stepping in shows the formulas of each
docstring, one line each, on whole arrays: no closures, no blocks of rows, no
threads. (The one speed variant among them, Adam's update in blocks, lives in
minitransformer/layers/fast.py and runs only for parameters of 2**18 elements or
more.) `--trace` lists every function of the package that each call enters. WALKTHROUGH is the one list of pdb commands
that the `--break` hint prints and tests/test_debugger_walkthrough.py types;
change it here only.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from debug_attention import Transcript, line_of, run_pdb

import minitransformer
from minitransformer import backend
from minitransformer.layers.layernorm import LayerNorm, layernorm_backward, layernorm_forward
from minitransformer.layers.loss import LabelSmoothedCrossEntropy, cross_entropy_backward
from minitransformer.layers.parameter import Parameter
from minitransformer.optim import Adam

PACKAGE = pathlib.Path(minitransformer.__file__).resolve().parent

LN_Y = line_of(layernorm_forward, "y = gamma * x_hat + beta")
LN_DX = line_of(layernorm_backward, "dx = rstd * (g - mean_g - x_hat * mean_g_xhat)")
LOSS_SCALE = line_of(cross_entropy_backward, "dlogits *= ")
ADAM_UPDATE = line_of(Adam.step, "p.data -= lr * m_hat / (xp.sqrt(v_hat) + self.eps)")

# (command, what it shows). Run with --break, which stops just before `y = ln.forward(x)`.
WALKTHROUGH = [
    ("s", "step into LayerNorm.forward (pdb stops on its `def` line: --Call--)"),
    (f"b {LN_Y}", "a breakpoint on layernorm_forward's last formula, y = gamma x_hat + beta"),
    ("c", "the shape check runs, then mu, x - mu, var, rstd and x_hat, one line each"),
    ("p mu[0, 0], var[0, 0], rstd[0, 0]", "one position's mean, biased variance and 1/sqrt(var + eps)"),
    ("p x_hat.mean(-1), (x_hat ** 2).mean(-1)", "x_hat has mean 0 and mean square ~1 at every position"),
    (f"tbreak {LN_DX}", "a one-shot breakpoint in layernorm_backward, before the boxed formula for dx"),
    ("c", "the script calls ln.backward(dy): g = dy gamma and the two means are done"),
    ("p g[0, 0], mean_g[0, 0], mean_g_xhat[0, 0]", "the gradient reaching x_hat, and the two means it loses"),
    ("n", "dx = rstd (g - mean(g) - x_hat mean(g x_hat))"),
    ("p dx.sum(-1)", "~0 at every position: normalizing removed the shift of all features"),
    (f"tbreak {LOSS_SCALE}", "a one-shot breakpoint in the loss's backward, before the 1/n_tokens"),
    ("c", "the loss forward and the start of its backward run: dlogits = p - q so far"),
    ("p dlogits[0], dlogits.sum(-1)", "p - q per position: negative at the target; rows sum to 0 (p and q sum to 1)"),
    ("n", "times 1/n_tokens, and 0 at the padded position"),
    ("p dlogits[0, -1], n_tokens", "the padded position passes no gradient; 2 real target tokens"),
    (f"tbreak {ADAM_UPDATE}", "a one-shot breakpoint on Adam's last line, the update of p"),
    ("c", "Adam.step: the non-finite check, then m, v, m_hat and v_hat of the first parameter"),
    ("p t, lr", "the first step, with the constant learning rate"),
    ("p m_hat / (xp.sqrt(v_hat) + self.eps)", "±1 at step 1: m_hat = g and v_hat = g², so the step is lr·sign(g)"),
    (f"cl {LN_Y}", "clear the forward's breakpoint"),
    ("c", "run to the end"),
]


def lesson_inputs():
    """The script's small, seeded inputs (float64, as for a gradient check)."""
    rng = np.random.default_rng(0)
    dtype = backend.default_dtype()
    backend.set_default_dtype("float64")
    ln = LayerNorm(4, name="ln")
    backend.set_default_dtype(dtype)
    ln.gamma.data[...] = [1.0, 0.5, 2.0, 1.5]
    x = rng.standard_normal((1, 3, 4)) * 2 + 1              # (B=1, S=3, d_model=4)
    dy = rng.standard_normal((1, 3, 4))                     # pretend dL/dy came from the layer above
    logits = rng.standard_normal((1, 3, 6))                 # (B=1, T=3, V=6)
    targets = np.array([[4, 2, 0]])                         # the last position is padding (id 0)
    criterion = LabelSmoothedCrossEntropy(pad_id=0, eps_ls=0.1)
    w = Parameter(rng.standard_normal((2, 3)), "w")
    w.grad[...] = rng.standard_normal((2, 3))
    optimizer = Adam([w], lr=0.01)
    return ln, x, dy, criterion, logits, targets, optimizer


def main(stop: bool = False) -> None:
    np.set_printoptions(precision=4, suppress=True)
    ln, x, dy, criterion, logits, targets, optimizer = lesson_inputs()
    if stop:
        print_hint()
        breakpoint()                                        # pdb: `s` steps into LayerNorm.forward
    y = ln.forward(x)                                       # §3.1: LayerNorm(x + Sublayer(x))
    dx = ln.backward(dy)
    loss = criterion.forward(logits, targets)               # §5.4: label-smoothed cross-entropy
    dlogits = criterion.backward()
    optimizer.step()                                        # §5.3: Adam
    print(f"y[0, 0] = {y[0, 0]}, dx[0, 0] = {dx[0, 0]}, loss = {loss:.4f}, "
          f"dlogits[0, 0] = {dlogits[0, 0]}, w after one step = {optimizer.params[0].data[0]}")


def print_hint() -> None:
    """The walkthrough, on stderr, when the script stops (not when PYTHONBREAKPOINT=0 turns it off)."""
    if os.environ.get("PYTHONBREAKPOINT") == "0":
        return
    print("Stopping before LayerNorm.forward. Type each command at a (Pdb) prompt:", file=sys.stderr)
    for command, note in WALKTHROUGH:
        print(f"  {command:<40}  # {note}", file=sys.stderr)


def run_walkthrough(commands: list[str] | None = None, timeout: float = 120) -> Transcript:
    """Run this script with `--break` in a subprocess and type `commands` (default: WALKTHROUGH)."""
    commands = [command for command, _ in WALKTHROUGH] if commands is None else commands
    return run_pdb([__file__, "--break"], commands, timeout)


# -- what a call runs ---------------------------------------------------------------------

class Entered(NamedTuple):
    """The functions one call entered, as (file relative to the package, qualified name),
    in order of first entry; `threads`: whether any frame of threading or concurrent.futures
    ran in the calling thread (a hand-off to another thread)."""

    functions: list[tuple[str, str]]
    threads: bool


def functions_entered(call) -> Entered:
    """Run `call()` under sys.settrace and list every package function it enters."""
    seen: dict[tuple[str, str], None] = {}
    threads = False

    def tracer(frame, event, arg):
        nonlocal threads
        if event == "call":
            path = pathlib.Path(frame.f_code.co_filename).resolve()
            if path.is_relative_to(PACKAGE):
                seen.setdefault((path.relative_to(PACKAGE).as_posix(), frame.f_code.co_qualname), None)
            elif path.name == "threading.py" or "concurrent" in path.parts:
                threads = True
        return None                                         # no line events: only calls matter

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(before)
    return Entered(list(seen), threads)


def the_four_calls():
    """(name, the layer's own file, a function that makes the call) for LayerNorm.forward,
    LayerNorm.backward, the loss's backward and Adam.step, on the lesson-sized inputs."""
    ln, x, dy, criterion, logits, targets, optimizer = lesson_inputs()
    criterion.forward(logits, targets)                      # the backward below needs its cache
    return [
        ("LayerNorm.forward", "layers/layernorm.py", lambda: ln.forward(x)),   # (run in this order)
        ("LayerNorm.backward", "layers/layernorm.py", lambda: ln.backward(dy)),
        ("the loss's backward", "layers/loss.py", criterion.backward),
        ("Adam.step", "optim.py", optimizer.step),
    ]


def trace_report() -> str:
    lines = []
    for name, own_file, call in the_four_calls():
        entered = functions_entered(call)
        lines.append(f"{name} ({own_file}){'; a thread hand-off ran' if entered.threads else ''}:")
        lines += [f"    {'  ' if file == own_file else '->'} {file}: {function}"
                  for file, function in entered.functions]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--break", dest="stop", action="store_true", help="call breakpoint() before LayerNorm.forward")
    parser.add_argument("--trace", action="store_true", help="print every package function each call enters")
    args = parser.parse_args()
    if args.trace:
        print(trace_report())
    else:
        main(args.stop)
