"""Every number in a lesson's prose is checked (issue 34): lessons/prose_numbers.py finds the unchecked ones.

The check runs over every lesson source (quick: it reads the sources, it runs nothing), and a number planted
in a copy of a lesson makes it fail, naming the lesson, the line and the number."""

from __future__ import annotations

import importlib.util
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("prose_numbers", ROOT / "lessons" / "prose_numbers.py")
numbers = importlib.util.module_from_spec(_spec)
sys.modules["prose_numbers"] = numbers
_spec.loader.exec_module(numbers)

SOURCES = numbers.sources()
HEADER = (ROOT / "lessons" / "src" / "00_how_to_use.py").read_text(encoding="utf-8").split("# %%")[0]


@pytest.mark.parametrize("path", SOURCES, ids=[p.name[:2] for p in SOURCES])
def test_no_lesson_has_an_unchecked_number(path):
    found = numbers.unchecked(path)
    assert not found, (f"{len(found)} unchecked number(s) in {path.name} (lessons/src/README.md, 'Numbers in "
                       "prose', says how to fix each):\n" + "\n".join(numbers.describe(n) for n in found))


def lesson(tmp_path, body: str, name: str = "42_planted.py") -> pathlib.Path:
    """A lesson source made of ``body`` (percent-format cells) under a jupytext header."""
    path = tmp_path / name
    path.write_text(HEADER + body, encoding="utf-8")
    return path


def verdicts(path) -> dict[str, str]:
    return {n.text: n.verdict for n in numbers.lesson_numbers(path)}


def test_a_number_planted_in_a_real_lesson_fails_naming_the_lesson_the_line_and_the_number(tmp_path):
    source = ROOT / "lessons" / "src" / "09_training.py"
    copy = tmp_path / source.name
    lines = source.read_text(encoding="utf-8").split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("# # Lesson 9"))
    lines.insert(at + 1, "# After 500 steps the loss fell to 0.731, and the attention maps took 4 MiB.")
    copy.write_text("\n".join(lines), encoding="utf-8")
    assert not numbers.unchecked(source)                      # the lesson itself is clean ...
    found = numbers.unchecked(copy)                           # ... the planted line is not
    assert [(n.lesson, n.line, n.text) for n in found] == [("09", at + 2, "500"), ("09", at + 2, "0.731"),
                                                           ("09", at + 2, "4")]
    message = numbers.describe(found[1])
    assert message.startswith(f"lessons/src/09_training.py:{at + 2}: unchecked number '0.731'")
    # The command line says the same, and fails.
    shutil.copytree(ROOT / "lessons", tmp_path / "lessons", ignore=shutil.ignore_patterns("*.ipynb", "experiments"))
    (tmp_path / "lessons" / "src" / source.name).write_text(copy.read_text(encoding="utf-8"), encoding="utf-8")
    run = subprocess.run([sys.executable, str(tmp_path / "lessons" / "prose_numbers.py"), "9"], capture_output=True,
                         text=True, cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert run.returncode == 1, run.stderr
    assert f"09_training.py:{at + 2}: unchecked number '0.731'" in run.stdout
    assert "3 unchecked number(s)" in run.stderr


def test_what_is_not_a_quantity_passes(tmp_path):
    path = lesson(tmp_path, """
# %% [markdown]
# ## 3. Heading numbers
#
# 1. a numbered list; §3.2.1, Eq. (1), Table 3, Figures 1–2, lessons 9 and 10, exercise 9.2, step 7.
# A citation (Vaswani et al., 2017) and Press & Wolf, 2016. Python 3.11, subword-nmt 0.3.8, SHA-256, "13a".
# Code: `h=1e-5` and a link [here](../docs/derivations.md#5-attention-321-eq-1). Integers in math: $d_k = 512$.
# Two heads, row 0, 8 stacks.
""")
    found = numbers.lesson_numbers(path)
    assert found and all(n.verdict for n in found), [(n.text, n.verdict) for n in found if not n.verdict]
    assert "12345" not in {n.text for n in found}


@pytest.mark.parametrize("typed", ["0.547", "$0.547$", "10 s", "4 MiB", "38%", "1 329", "$10^{-7}$", "2.5x"])
def test_what_is_a_quantity_fails(tmp_path, typed):
    path = lesson(tmp_path, f"\n# %% [markdown]\n# ## 1. A section\n#\n# We measured {typed} here.\n")
    assert numbers.unchecked(path), typed


def test_a_paper_constant_passes_only_beside_its_name(tmp_path):
    path = lesson(tmp_path, """
# %% [markdown]
# Label smoothing of 0.1 (§5.4), warm-up for 4000 steps, $d_k = 64$ keys of 64 dimensions.
#
# A learning rate factor of 0.1, and batches of 64000 sentences.
""")
    found = {(n.line, n.text): n.verdict for n in numbers.lesson_numbers(path)}
    passed = {text for (line, text), v in found.items() if v}
    failed = {text for (line, text), v in found.items() if not v}
    assert {"0.1", "4000", "64"} <= passed and failed == {"0.1", "64000"}
    assert next(v for (_, t), v in found.items() if t == "4000").startswith("the paper's warmup_steps (§5.3)")


def test_a_claim_or_assert_checks_a_number_of_its_own_section_only(tmp_path):
    path = lesson(tmp_path, """
# %% [markdown]
# ## 1. First
#
# The loss levels off near 0.95, in 300 ms; the model has 1 329 parameters.

# %%
claim("the loss levels off near 0.95", loss, 0.95, tol=0.05)
claim_true("it takes 300 ms", seconds < 0.5)
assert n_parameters == 1329

# %% [markdown]
# ## 2. Second
#
# Again 0.95, and 400 steps with a literal.

# %%
train(steps=400)
""")
    found = [(n.text, bool(n.verdict)) for n in numbers.lesson_numbers(path)]
    assert found == [("0.95", True), ("300", True), ("1 329", True), ("0.95", False), ("400", True)]


def test_a_literal_of_the_code_does_not_pass_a_measurement(tmp_path):
    path = lesson(tmp_path, """
# %% [markdown]
# It ran for 400 steps and took 400 s, a 3x speed-up at 3 layers.

# %%
run(steps=400, layers=3)
""")
    assert [(n.text, n.unit, bool(n.verdict)) for n in numbers.lesson_numbers(path)] == [
        ("400", None, True), ("400", "s", False), ("3", "x", False), ("3", None, True)]


def test_table_columns_and_rows(tmp_path):
    path = lesson(tmp_path, """
# %% [markdown]
# | lesson | $d_\\text{model}$ | $P_{drop}$ |
# | --- | --- | --- |
# | 12 | 512 | 0.1 |
# | here, toy | 64 | 0.1 |
""")
    found = [(n.text, bool(n.verdict)) for n in numbers.lesson_numbers(path)]
    # "12" is a lesson number; the paper's values pass beside their column's name, but not in a row of our own
    assert found == [("512", True), ("0.1", True), ("64", False), ("0.1", False)]


def test_constants_of_the_code_are_read_from_the_code(tmp_path, monkeypatch):
    path = lesson(tmp_path, """
# %% [markdown]
# Every checker uses one tolerance, $10^{-6}$, and float64's machine epsilon is $2.2\\times 10^{-16}$.
""")
    assert all(n.verdict.endswith("(read from the code)") for n in numbers.lesson_numbers(path))
    stale = numbers.CodeConstant(("1e-6", "10^{-6}"), "a tolerance the code no longer has", ("tolerance",),
                                 lambda: 1e-7)
    monkeypatch.setattr(numbers, "CODE", (stale,) + numbers.CODE[1:])
    assert [n.text for n in numbers.unchecked(path)] == ["10^{-6}"]


def test_every_code_constant_agrees_with_the_code_and_every_paper_constant_parses():
    for constant in numbers.CODE:
        assert any(numbers._agrees(v, constant.read()) for v in constant.values), (constant.what, constant.read())
    for constant in numbers.PAPER:
        assert constant.section.startswith(("§", "Table")), constant
        assert constant.names, constant
        for value in constant.values:
            assert numbers._typed_value(value) > 0, value


@pytest.mark.parametrize("path", SOURCES, ids=[p.name[:2] for p in SOURCES])
def test_the_check_reads_the_markdown_jupytext_reads(path):
    """lesson_numbers reads the .py itself (to name source lines); its markdown cells must be jupytext's."""
    jupytext = pytest.importorskip("jupytext")
    want = [c.source for c in jupytext.read(path).cells if c.cell_type == "markdown"]
    have = ["\n".join(c.lines) for c in numbers.cells(path) if c.kind == "markdown"]
    assert have == want
