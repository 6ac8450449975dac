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
