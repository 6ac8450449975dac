"""Step into LayerNorm, multi-head attention, the loss's backward and Adam's update in a debugger: the plain math.

Run it plainly:                 python lessons/debug_layers.py
Stop before the first call:     python lessons/debug_layers.py --break
See every function that runs:   python lessons/debug_layers.py --trace
Count pdb's `step` presses:     python lessons/debug_layers.py --presses

The arrays are lesson-sized (one sentence of 3 positions, d_model = 4, 2 heads, a
vocabulary of 6), so each fits on the screen. Stepping in shows the formulas of each
docstring, one line each, on whole arrays: no closures, no blocks of rows, no
threads. (The one speed variant among them, Adam's update in blocks, lives in
minitransformer/layers/fast.py and runs only for parameters of 2**18 elements or
more.) The checks of a layer's arguments (and Adam's non-finite-gradient policy) run
in a wrapper before the layer's own method starts: `s` stops in the wrapper first, `n`
runs the checks, `s` enters the math.

`--trace` lists every function of the package that each call enters; `--presses`
counts, for each call, the stops of pdb's `step` from entering the layer's own method to
leaving it, how many are lines of the layer's own file, and how many presses it takes to
reach the first line of math. WALKTHROUGH is the one list of pdb commands that the
`--break` hint prints and tests/test_debugger_walkthrough.py types; change it here only.
"""

from __future__ import annotations

import argparse
import bdb
import inspect
import os
import pathlib
import sys
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from debug_attention import Transcript, line_of, run_pdb

import minitransformer
from minitransformer import backend
from minitransformer.layers.attention import MultiHeadAttention
from minitransformer.layers.layernorm import LayerNorm, layernorm_backward, layernorm_forward
from minitransformer.layers.loss import LabelSmoothedCrossEntropy, cross_entropy_backward
from minitransformer.layers.masks import causal_mask
from minitransformer.layers.parameter import Parameter
from minitransformer.optim import Adam

PACKAGE = pathlib.Path(minitransformer.__file__).resolve().parent

LN_Y = line_of(layernorm_forward, "y = gamma * x_hat + beta")
LN_DX = line_of(layernorm_backward, "dx = rstd * (g - mean_g - x_hat * mean_g_xhat)")
LOSS_SCALE = line_of(cross_entropy_backward, "dlogits *= ")
ADAM_UPDATE = line_of(Adam.step, "p.data -= lr * m_hat / (xp.sqrt(v_hat) + self.eps)")

# (command, what it shows). Run with --break, which stops just before `y = ln.forward(x)`.
WALKTHROUGH = [
    ("s", "step in: pdb stops first in the wrapper that checks the arguments (layers/parameter.py, --Call--)"),
    ("n", "the wrapper's first line: the checks of x"),
    ("n", "run the checks (x is a float64 array whose last axis is d_model = 4); stop before the forward"),
    ("s", "step into LayerNorm.forward itself: the math (--Call--)"),
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


def the_traced_calls():
    """(name, the layer's own file, a function that makes the call) for LayerNorm.forward,
    LayerNorm.backward, attention's forward and backward, the loss's backward and Adam.step,
    on the lesson-sized inputs."""
    ln, x, dy, criterion, logits, targets, optimizer = lesson_inputs()
    mha, x_attn, mask, dy_attn = attention_inputs()
    criterion.forward(logits, targets)                      # the backward below needs its cache
    return [
        ("LayerNorm.forward", "layers/layernorm.py", lambda: ln.forward(x)),   # (run in this order)
        ("LayerNorm.backward", "layers/layernorm.py", lambda: ln.backward(dy)),
        ("MultiHeadAttention.forward", "layers/attention.py", lambda: mha.forward(x_attn, mask=mask)),
        ("MultiHeadAttention.backward", "layers/attention.py", lambda: mha.backward(dy_attn)),
        ("the loss's backward", "layers/loss.py", criterion.backward),
        ("Adam.step", "optim.py", optimizer.step),
    ]


def attention_inputs():
    """Masked self-attention of one sentence: x (1, 3, d_model = 4), 2 heads of d_k = 2, a causal mask
    (1, 1, 3, 3), and a gradient dy for the backward (float64)."""
    rng = np.random.default_rng(1)
    dtype = backend.default_dtype()
    backend.set_default_dtype("float64")
    mha = MultiHeadAttention(4, 2, rng, name="self_attn")
    backend.set_default_dtype(dtype)
    x = rng.standard_normal((1, 3, 4))
    return mha, x, causal_mask(3, np), rng.standard_normal((1, 3, 4))


# -- what pdb's `step` meets ----------------------------------------------------------------

class Stop(NamedTuple):
    """One stop of pdb's `step`: the file (relative to the package, else its name), line, code and event."""

    file: str
    line: int
    function: str
    event: str          # "call" (--Call--), "line", "return" (--Return--) or "exception"
    code: object        # the frame's code object


def _file_name(code) -> str:
    """A code object's file, relative to the package (layers/attention.py), else its bare name."""
    path = pathlib.Path(code.co_filename).resolve()
    return path.relative_to(PACKAGE).as_posix() if path.is_relative_to(PACKAGE) else path.name


class _StepPresser(bdb.Bdb):
    """A debugger that presses `step` at every stop and writes down where it stopped: pdb's
    own stepping (bdb's), with the prompt replaced by an automatic `s`."""

    def __init__(self):
        super().__init__()
        self.stops: list[Stop] = []

    def _stop(self, frame, event):
        self.stops.append(Stop(_file_name(frame.f_code), frame.f_lineno, frame.f_code.co_qualname, event,
                               frame.f_code))
        self.set_step()

    def user_call(self, frame, argument_list):
        if self.stop_here(frame):                               # as pdb's user_call
            self._stop(frame, "call")

    def user_line(self, frame):
        self._stop(frame, "line")

    def user_return(self, frame, return_value):
        self._stop(frame, "return")

    def user_exception(self, frame, exc_info):
        self._stop(frame, "exception")


class Presses(NamedTuple):
    """pdb's `step` inside one method: every stop from its --Call-- to its --Return--."""

    stops: list[Stop]
    own_file: str

    @property
    def own(self) -> int:
        """Stops on lines of the layer's own file."""
        return sum(stop.file == self.own_file for stop in self.stops)

    @property
    def share(self) -> float:
        return self.own / len(self.stops)

    def presses_to(self, text: str) -> int:
        """The `s` presses from outside the method to the first stop on a line starting with
        ``text``: entering (--Call--) is press 1."""
        for i, stop in enumerate(self.stops):
            if stop.event == "line" and _source_line(stop).startswith(text):
                return i + 1
        raise LookupError(f"no stop on a line starting {text!r}")

    def by_file(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for stop in self.stops:
            counts[stop.file] = counts.get(stop.file, 0) + 1
        return counts


def _source_line(stop: Stop) -> str:
    import linecache

    return linecache.getline(stop.code.co_filename, stop.line).strip()


def presses(call, method) -> Presses:
    """Run ``call()`` under a debugger that presses `step` at every stop, and keep the stops
    from entering ``method`` (its own code, past any checking wrapper) to its return."""
    code = inspect.unwrap(method).__code__
    presser = _StepPresser()
    presser.runcall(call)
    stops = presser.stops
    start = next(i for i, stop in enumerate(stops) if stop.code is code and stop.event == "call")
    end = next(i for i in range(start, len(stops)) if stops[i].code is code and stops[i].event == "return")
    return Presses(stops[start: end + 1], _file_name(code))


# The first line of each method's math, as its source starts it (the 5-press rule).
FIRST_MATH = {
    "MultiHeadAttention.forward": "Q, K, V = self.project_qkv(x_q)",
    "MultiHeadAttention.backward": "dy2 = dy.reshape(B * S_q, d)",
    "LayerNorm.backward": "dx, dgamma, dbeta = layernorm_backward(dy, self._cache)",
    "Adam.step": "self.step_count += 1",
}


def the_stepped_calls():
    """(name, the method, a function that makes the call) for the four methods whose pdb steps
    issue 33 measures, on the lesson-sized inputs, each called once before (warm caches)."""
    ln, x, dy, criterion, logits, targets, optimizer = lesson_inputs()
    mha, x_attn, mask, dy_attn = attention_inputs()
    ln.forward(x)
    mha.forward(x_attn, mask=mask)
    return [
        ("MultiHeadAttention.forward", MultiHeadAttention.forward, lambda: mha.forward(x_attn, mask=mask)),
        ("MultiHeadAttention.backward", MultiHeadAttention.backward, lambda: mha.backward(dy_attn)),
        ("LayerNorm.backward", LayerNorm.backward, lambda: ln.backward(dy)),
        ("Adam.step", Adam.step, optimizer.step),
    ]


def presses_report() -> str:
    lines = []
    for name, method, call in the_stepped_calls():
        counted = presses(call, method)
        others = ", ".join(f"{file} {n}" for file, n in sorted(counted.by_file().items(), key=lambda kv: -kv[1])
                           if file != counted.own_file)
        lines.append(f"{name}: {len(counted.stops)} stops, {counted.own} ({counted.share:.0%}) in "
                     f"{counted.own_file}{'; ' + others if others else ''}; first line of math at press "
                     f"{counted.presses_to(FIRST_MATH[name])}")
    return "\n".join(lines)


def trace_report() -> str:
    lines = []
    for name, own_file, call in the_traced_calls():
        entered = functions_entered(call)
        lines.append(f"{name} ({own_file}){'; a thread hand-off ran' if entered.threads else ''}:")
        lines += [f"    {'  ' if file == own_file else '->'} {file}: {function}"
                  for file, function in entered.functions]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--break", dest="stop", action="store_true", help="call breakpoint() before LayerNorm.forward")
    parser.add_argument("--trace", action="store_true", help="print every package function each call enters")
    parser.add_argument("--presses", action="store_true", help="count pdb's `step` presses inside each method")
    args = parser.parse_args()
    if args.trace:
        print(trace_report())
    elif args.presses:
        print(presses_report())
    else:
        main(args.stop)
