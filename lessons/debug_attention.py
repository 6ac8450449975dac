"""A tiny script to step through attention's forward and backward in a debugger.

Run it plainly:                 python lessons/debug_attention.py
Stop before the forward:        python lessons/debug_attention.py --break
Stop before the backward:       python lessons/debug_attention.py --break backward
See the walkthrough:            python lessons/debug_attention.py --walkthrough
In VS Code:                     Run and Debug -> "debug_attention.py --break: step into the
                                forward (F11)": it stops at breakpoint(); F11 steps in

Everything is small (one sentence, one head, 3 positions, d_k = 2) so every array
fits on the screen. Lesson 0 (00_how_to_use.ipynb, §4) explains the commands and runs
WALKTHROUGH below for real; tests/test_debugger_walkthrough.py checks that every `p`
in it prints a value. WALKTHROUGH is the one list of commands that the lesson, this
script's hint and the test share: change it here only.
"""

from __future__ import annotations

import argparse
import inspect
import os
import pathlib
import subprocess
import sys
from typing import NamedTuple

import numpy as np

from minitransformer import backend
from minitransformer.layers.masks import causal_mask
from minitransformer.gradcheck import gradcheck
from minitransformer.layers.attention import attention_backward, attention_forward

# The repository the package is imported from (an editable install), wherever this script was
# copied to: a student edition of the lessons lives outside the repository (docs/teachers.md).
REPO = pathlib.Path(sys.modules["minitransformer"].__file__).resolve().parents[1]


def line_of(func, start: str) -> str:
    """'FILE:LINE' (pdb's `b` syntax) of the first line of `func` whose code starts with `start`.

    The walkthrough finds its breakpoint lines by their text, so it keeps working
    when lines are added above them in the package.
    """
    lines, first = inspect.getsourcelines(func)
    for offset, text in enumerate(lines):
        if text.strip().startswith(start):
            return f"{inspect.getsourcefile(func)}:{first + offset}"
    raise LookupError(f"{func.__name__} has no line starting {start!r}: update WALKTHROUGH in {__file__}")


FORWARD_RETURN = line_of(attention_forward, "return out, AttentionCache")    # out = A V is done here
BACKWARD_DQ = line_of(attention_backward, "dQ = backend.matmul(dS, K)")     # dS has its name here

# (command, what it shows). Run with --break, which stops just before the forward call.
WALKTHROUGH = [
    ("p Q.shape, mask[0, 0]", "stopped before the forward: one head, 3 positions, d_k = 2; the causal mask"),
    ("s", "step into attention_forward (pdb stops on its `def` line: --Call--)"),
    ("n", "next line: the forward's first statement, scale = 1/sqrt(d_k)"),
    ("n", "run it; stop before S = attention_scores(Q, K, mask)"),
    ("n", "run that (n steps over the call); stop before the softmax"),
    ("p S[0, 0]", "the scaled, masked scores Q K^T / sqrt(d_k): -1e9 where the mask blocks a key"),
    ("display S[0, 0, 2].tolist()", "watch row 2 of S at each stop (a list: display cannot compare arrays)"),
    ("n", "the softmax runs in S's own buffer: display shows row 2 turn from scores into weights"),
    ("p A is S", "True: one array under two names, and the scores are gone (attention_scores recomputes them)"),
    ("p A.sum(-1)", "every row of weights sums to 1"),
    (f"b {FORWARD_RETURN}", "a breakpoint on the forward's last line"),
    ("c", "continue until a breakpoint: the mask check and out = A V run"),
    ("p out[0, 0]", "out = A V: row i mixes the value vectors with row i's weights"),
    (f"tbreak {BACKWARD_DQ}", "a one-shot breakpoint in the backward, on the first line after dS gets its name"),
    ("c", "the forward returns, the script calls attention_backward, pdb stops there"),
    ("p dV.shape, dS.shape", "dV = A^T dout is done; dS is dL/dS, the gradient of the scores"),
    ("p dS[0, 0]", "0 wherever the mask blocked a key: no gradient leaks through a mask"),
    ("p dA is dS", "True: the softmax backward ran in dA's buffer"),
    ("n", "dQ = dS K"),
    ("n", "dQ *= scale"),
    ("p dQ[0, 0]", "dL/dQ, one row per query position (row 0 is 0: query 0 sees only key 0)"),
    (f"cl {FORWARD_RETURN}", "clear the forward's breakpoint, or the gradient check stops there 36 times"),
    ("c", "run to the end: the gradient check of dQ, dK, dV"),
]


def main(stop: str | None = None) -> None:
    """stop: None (run through), "forward" or "backward" (call breakpoint() just before it)."""
    backend.set_default_dtype("float64")          # gradient checks need float64
    np.set_printoptions(precision=4, suppress=True)
    rng = np.random.default_rng(0)
    B, h, S, d_k = 1, 1, 3, 2
    Q = rng.standard_normal((B, h, S, d_k))
    K = rng.standard_normal((B, h, S, d_k))
    V = rng.standard_normal((B, h, S, d_k))
    mask = causal_mask(S, np)                     # (1, 1, S, S), True = may attend
    dout = rng.standard_normal((B, h, S, d_k))    # pretend dL/d(out) came from the layer above

    if stop == "forward":
        print_hint()
        breakpoint()                              # pdb: `s` steps into attention_forward
    # Forward, §3.2.1 Eq. (1): S = Q K^T / sqrt(d_k), A = softmax(S), out = A V.
    out, cache = attention_forward(Q, K, V, mask)
    print("attention weights A (row i: how much query i looks at each key):")
    print(cache.A[0, 0])
    print("cache fields:", {name: getattr(value, "shape", value) for name, value in cache._asdict().items()})

    if stop == "backward":
        breakpoint()                              # pdb: `s` steps into attention_backward
    # Backward: dA and dV, then dS (in dA's buffer), then dQ and dK.
    dQ, dK, dV = attention_backward(dout, cache)

    calls = 0

    def loss():                                   # L = sum(out * dout), so dL/d(out) = dout
        nonlocal calls
        calls += 1
        return float((attention_forward(Q, K, V, mask)[0] * dout).sum())

    report = gradcheck(loss, {"Q": Q, "K": K, "V": V}, {"Q": dQ, "K": dK, "V": dV})
    print(report)
    report.assert_ok()
    print(f"gradient check passed; it ran attention_forward {calls} times (twice per entry of Q, K and V)")


def print_hint() -> None:
    """The walkthrough, on stderr, when the script stops (not when PYTHONBREAKPOINT=0 turns it off)."""
    if os.environ.get("PYTHONBREAKPOINT") == "0":
        return
    print("Stopping before the forward. Walkthrough (lesson 0, §4a): type each command at a (Pdb) prompt.",
          file=sys.stderr)
    for command, note in WALKTHROUGH:
        print(f"  {command:<28}  # {note}", file=sys.stderr)


class Transcript(NamedTuple):
    """What pdb printed: `before` the first prompt, then (command, output) per command."""

    before: str
    steps: list[tuple[str, str]]
    returncode: int
    stderr: str

    def __str__(self) -> str:
        return self.before + "".join(f"(Pdb) {command}\n{output}" for command, output in self.steps)


def run_walkthrough(commands: list[str] | None = None, stop: str = "forward", timeout: float = 120) -> Transcript:
    """Run this script with `--break stop` in a subprocess and type `commands` (default:
    WALKTHROUGH) at pdb's prompts. Nothing waits for a person, so notebooks and tests can
    show and check a real session."""
    commands = [command for command, _ in WALKTHROUGH] if commands is None else commands
    return run_pdb([__file__, "--break", stop], commands, timeout)


def run_pdb(argv: list[str], commands: list[str], timeout: float = 120) -> Transcript:
    """Run `python *argv` (a script that calls breakpoint()) and type `commands` at its prompts."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"}    # make sure breakpoint() stops
    run = subprocess.run([sys.executable, *argv], input="\n".join(commands) + "\n",
                         capture_output=True, text=True, env=env, timeout=timeout)
    before, *outputs = run.stdout.split("(Pdb) ")
    return Transcript(before, list(zip(commands, outputs)), run.returncode, run.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--break", dest="stop", nargs="?", const="forward", choices=["forward", "backward"],
                        help="call breakpoint() just before the forward (default) or the backward")
    parser.add_argument("--walkthrough", action="store_true", help="print the walkthrough's commands and exit")
    args = parser.parse_args()
    if args.walkthrough:
        print("\n".join(command for command, _ in WALKTHROUGH))
    else:
        main(args.stop)
