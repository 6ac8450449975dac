"""The pdb walkthrough of lesson 0 works: every `p` in it prints a value.

`lessons/debug_attention.py` holds the one list of commands (WALKTHROUGH) that its
`--break` hint prints and lesson 0 runs. Here the script runs with `--break` in a
subprocess, the commands are typed at its `(Pdb)` prompts, and each `p` (and `display`)
must print a value, not an error such as `*** NameError: name 'dA' is not defined`.
"""

import importlib.util
import pathlib

LESSONS = pathlib.Path(__file__).resolve().parents[1] / "lessons"

_spec = importlib.util.spec_from_file_location("debug_attention", LESSONS / "debug_attention.py")
debug_attention = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(debug_attention)


def failed_prints(transcript) -> list[str]:
    """The `p`/`pp`/`display` commands whose output is empty or an error, with that output."""
    failures = []
    for command, output in transcript.steps:
        if command.split()[0] in ("p", "pp", "display"):
            first_line = (output.strip().splitlines() or ["(nothing)"])[0]
            if not output.strip() or output.startswith("***") or "** raised" in output:
                failures.append(f"{command!r} printed {first_line!r}")
    return failures


def test_every_print_in_the_walkthrough_shows_a_value():
    transcript = debug_attention.run_walkthrough()
    commands = [command for command, _ in debug_attention.WALKTHROUGH]
    assert transcript.returncode == 0, transcript.stderr[-2000:]
    assert len(transcript.steps) == len(commands), (
        f"pdb showed {len(transcript.steps)} prompts for {len(commands)} commands:\n{transcript}")
    assert failed_prints(transcript) == [], str(transcript)
    assert "gradient check passed; it ran attention_forward 36 times" in transcript.steps[-1][1]


def test_the_walkthrough_stops_where_it_says():
    steps = debug_attention.run_walkthrough().steps

    def output_after(prefix):                 # what pdb printed after the first command starting with prefix
        return next(output for command, output in steps if command.startswith(prefix))

    def output_of_next(prefix):               # ... after the command that follows it
        i = next(i for i, (command, _) in enumerate(steps) if command.startswith(prefix))
        return steps[i + 1][1]

    assert "--Call--" in output_after("s") and "attention_forward()" in output_after("s")
    assert "[old: " in output_of_next("display"), "display did not show row 2 of S change in the softmax"
    assert output_after("p A is S").strip() == "True" and output_after("p dA is dS").strip() == "True"
    stop = output_of_next("tbreak")
    assert "attention_backward()" in stop and "dQ = backend.matmul(dS, K)" in stop
    assert "Deleted breakpoint" in output_after("cl ")


def test_the_check_catches_the_old_walkthrough():
    """The walkthrough lesson 0 used to print: stopped before the backward, `s n n` only
    reaches the line that computes dA, so `p dA.shape` was a NameError."""
    old = ["p cache.A.sum(-1)", "s", "n", "n", "p dA.shape", "c"]
    transcript = debug_attention.run_walkthrough(old, stop="backward")
    assert failed_prints(transcript) == ["'p dA.shape' printed \"*** NameError: name 'dA' is not defined\""]


def test_breakpoint_lines_are_found_by_their_text():
    path, line = debug_attention.BACKWARD_DQ.rsplit(":", 1)
    assert pathlib.Path(path).read_text().splitlines()[int(line) - 1].strip().startswith("dQ = backend.matmul(dS, K)")
    path, line = debug_attention.FORWARD_RETURN.rsplit(":", 1)
    assert pathlib.Path(path).read_text().splitlines()[int(line) - 1].strip().startswith("return out, AttentionCache")


# -- LayerNorm, attention, the loss's backward and Adam's update (issues 18 and 33) --------------

_spec_layers = importlib.util.spec_from_file_location("debug_layers", LESSONS / "debug_layers.py")
debug_layers = importlib.util.module_from_spec(_spec_layers)
_spec_layers.loader.exec_module(debug_layers)

# Functions outside a layer's own file that stepping into it may enter, and why each is allowed:
# none of them does the layer's math.
ALLOWED_OUTSIDE = {
    ("backend.py", "get_array_module"): "a one-liner: numpy or cupy",
    ("backend.py", "rowdot"): "a one-liner: the row sums of a ⊙ b (NumPy 2's vecdot where it can)",
    ("errors.py", "check_input"): "the argument's dtype check",
    ("errors.py", "check_last_dim"): "the argument's shape check",
    ("errors.py", "check_mask"): "the mask's dtype and shape check",
    ("errors.py", "check_mask.<locals>.<genexpr>"): "the mask's shape check, axis by axis",
    ("errors.py", "check_gradient"): "the incoming gradient's shape and dtype check",
    ("layers/parameter.py", "checked_forward.<locals>.decorate.<locals>.checked"):
        "the wrapper that runs the arguments' checks before the forward",
    ("layers/parameter.py", "checked_backward.<locals>.checked"):
        "the wrapper that checks the incoming gradient before the backward",
    ("layers/parameter.py", "Layer._forward_ran"): "remembers the output's shape for the backward's check",
    ("layers/parameter.py", "Layer._check_dout"): "the incoming gradient's check",
    ("threads.py", "check"): "the BLAS thread policy in Adam.step's wrapper: one clock read per step",
}
# Closures in a layer's own file that are machinery around the math, not the math.
ALLOWED_CLOSURES = {
    ("optim.py", "_skips_nonfinite_gradients.<locals>.checked"): "Adam's non-finite policy, before the update",
}


def test_the_layers_walkthrough_steps_into_the_plain_math():
    transcript = debug_layers.run_walkthrough()
    commands = [command for command, _ in debug_layers.WALKTHROUGH]
    assert transcript.returncode == 0, transcript.stderr[-2000:]
    assert len(transcript.steps) == len(commands), (
        f"pdb showed {len(transcript.steps)} prompts for {len(commands)} commands:\n{transcript}")
    assert failed_prints(transcript) == [], str(transcript)
    steps = transcript.steps
    # `s` stops in the checking wrapper, `n n` runs the checks, `s` enters LayerNorm.forward itself
    assert "--Call--" in steps[0][1] and "parameter.py" in steps[0][1] and "checked()" in steps[0][1]
    assert "check(self, *args, **kwargs)" in steps[1][1]
    assert "out = forward(self, *args, **kwargs)" in steps[2][1]
    assert "--Call--" in steps[3][1] and "layernorm.py" in steps[3][1] and "forward()" in steps[3][1]
    stops = [output for command, output in steps if command == "c"]
    # each `c` stops on the formula line it names, in the function that holds it
    for stop, function, line in [(stops[0], "layernorm_forward()", "y = gamma * x_hat + beta"),
                                 (stops[1], "layernorm_backward()", "dx = rstd * (g - mean_g - x_hat * mean_g_xhat)"),
                                 (stops[2], "cross_entropy_backward()", "dlogits *= (valid / n_tokens)"),
                                 (stops[3], "step()", "p.data -= lr * m_hat / (xp.sqrt(v_hat) + self.eps)")]:
        assert function in stop and line in stop, stop
    assert "(1, 0.01)" in dict(steps)["p t, lr"]
    assert "y[0, 0] =" in steps[-1][1]                   # the script ran to its end


def test_stepping_into_each_enters_only_its_own_file_and_allowed_helpers():
    """Every function of the package that LayerNorm.forward, LayerNorm.backward, attention's
    forward and backward, the loss's backward and Adam.step enter on the lesson's input: their
    own file's, or one of ALLOWED_OUTSIDE. No closures (but the wrappers named above), no speed
    variants (layers/fast.py), no thread hand-offs."""
    report = []
    for name, own_file, call in debug_layers.the_traced_calls():
        entered = debug_layers.functions_entered(call)
        own = [function for file, function in entered.functions if file == own_file]
        outside = [(file, function) for file, function in entered.functions if file != own_file]
        assert own, f"{name}: the trace saw nothing of {own_file}"
        report += [f"{name}: enters {file}:{function}" for file, function in outside
                   if (file, function) not in ALLOWED_OUTSIDE]
        report += [f"{name}: runs the closure {function}" for function in own
                   if "<locals>" in function and (own_file, function) not in ALLOWED_CLOSURES]
        if entered.threads:
            report.append(f"{name}: hands work to another thread")
    assert report == [], "\n".join(report)


def test_the_trace_check_can_fail():
    """A call into a package helper elsewhere and a thread hand-off are each seen."""
    from concurrent.futures import ThreadPoolExecutor

    from minitransformer import backend

    entered = debug_layers.functions_entered(lambda: backend.to_numpy([1.0]))
    assert ("backend.py", "to_numpy") in entered.functions and not entered.threads
    with ThreadPoolExecutor(1) as pool:
        assert debug_layers.functions_entered(lambda: pool.submit(sum, [1, 2]).result()).threads


# -- pdb's `step`, pressed and counted (issue 33) -------------------------------------------------

# At least this share of the stops of `step` inside each method are lines of its own file
# (the rest: NumPy's own Python, the backend's one-liner, the named caches' constructors).
OWN_SHARE = 0.70
# The first line of math comes at most this many presses after entering (entering is press 1).
PRESSES_TO_MATH = 5


def test_stepping_through_attention_layernorm_and_adam_is_mostly_their_own_math():
    """pdb's own stepping (bdb), with `s` pressed at every stop, from the --Call-- of
    MultiHeadAttention.forward and .backward, LayerNorm.backward and Adam.step to their
    --Return--, on the lesson-sized inputs of lessons/debug_layers.py. The checks of the
    arguments (and Adam's non-finite policy) run in the wrappers before these methods start."""
    report = []
    for name, method, call in debug_layers.the_stepped_calls():
        counted = debug_layers.presses(call, method)
        assert counted.stops[0].event == "call" and counted.stops[-1].event == "return"
        press = counted.presses_to(debug_layers.FIRST_MATH[name])
        line = (f"{name}: {counted.own} of {len(counted.stops)} stops in {counted.own_file} "
                f"({counted.share:.0%}), first line of math at press {press}; elsewhere {counted.by_file()}")
        if counted.share < OWN_SHARE or press > PRESSES_TO_MATH:
            report.append(line)
    assert report == [], "\n".join(report)


def test_the_press_count_sees_machinery_inside_a_method():
    """A method that calls a helper in another file, line by line, is counted against its share:
    the counter can fail."""
    from minitransformer import backend

    def method(x):
        backend.get_array_module(x)
        backend.to_numpy(x)
        backend.on_cpu(x)
        return x

    import numpy as np

    counted = debug_layers.presses(lambda: method(np.zeros(2)), method)
    files = counted.by_file()
    assert files["backend.py"] >= 9 and counted.share < OWN_SHARE, files
    assert counted.presses_to("backend.to_numpy(x)") == 6      # call, line, 3 stops in backend, this line


def test_the_methods_counted_are_the_layers_own_not_their_wrappers():
    """presses() starts at the layer's own method: the checking wrapper has run before it."""
    from minitransformer.layers.attention import MultiHeadAttention
    from minitransformer.optim import Adam

    for method in (MultiHeadAttention.forward, MultiHeadAttention.backward, Adam.step):
        assert method.__wrapped__.__code__.co_filename.endswith(("attention.py", "optim.py"))
        assert method.__code__ is not method.__wrapped__.__code__
