"""docs/paper_map.md cannot fall behind: every part of the paper has a row, and every lesson section, code
name and test a row names exists. Also the tests that pin the deviations the page lists and nothing else pins."""

from __future__ import annotations

import importlib
import pathlib
import re

import numpy as np
import pytest

from minitransformer.layers.dropout import Dropout
from minitransformer.layers.loss import LabelSmoothedCrossEntropy
from minitransformer.layers.positional import sinusoidal_table
from minitransformer.model import Transformer, TransformerConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAP = ROOT / "docs" / "paper_map.md"

# Every section and subsection, table, figure and equation of the paper (arXiv 1706.03762).
PARTS = ["§1", "§2", "§3", "§3.1", "§3.2", "§3.2.1", "§3.2.2", "§3.2.3", "§3.3", "§3.4", "§3.5", "§4", "§5",
         "§5.1", "§5.2", "§5.3", "§5.4", "§6", "§6.1", "§6.2", "§6.3", "§7", "Table 1", "Table 2", "Table 3",
         "Table 4", "Figure 1", "Figure 2", "Eq. (1)", "Eq. (2)", "Eq. (3)"]

LESSON_LINK = re.compile(r"\[(\d+) › ([^\]]+)\]\((\.\./lessons/([^)]+)\.ipynb)\)")
CODE_ROLE = re.compile(r"\{py:(?:class|func|meth|mod)\}`(?:[^`<]*<)?~?([\w.]+)>?`")
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
PATH_REF = re.compile(r"`((?:lessons|docs|minitransformer|benchmarks)/[\w/.]+\.(?:py|json|md))`")


def tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables of ``text``: each a list of rows, each a list of cells (the header row first)."""
    found, current = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if set("".join(cells)) <= set("-: "):
                continue
            if current is None:
                current = []
                found.append(current)
            current.append(cells)
        else:
            current = None
    return found


def headings(stem: str) -> list[str]:
    """The section headings of a lesson source, '$' removed: '3. The learning-rate schedule (§5.3, Eq. 3)'."""
    source = ROOT / "lessons" / "src" / f"{stem}.py"
    assert source.is_file(), f"docs/paper_map.md links lessons/{stem}.ipynb, which has no source {source.name}"
    return [re.sub(r"^# #{2,4} ", "", line).replace("$", "") for line in source.read_text(encoding="utf-8").splitlines()
            if re.match(r"^# #{2,4} ", line)]


def check_row(cells: list[str], needs_lesson: bool = True) -> list[str]:
    """What is wrong with one row: a lesson section, code name, path or test that does not exist."""
    text = " ".join(cells)
    problems = []
    links = LESSON_LINK.findall(text)
    if needs_lesson and not links:
        problems.append("names no lesson section")
    for number, section, _, stem in links:
        if not stem.startswith(f"{int(number):02d}_"):
            problems.append(f"lesson {number} links {stem}.ipynb")
        elif not any(h.startswith(section.strip()) for h in headings(stem)):
            problems.append(f"lesson {number} has no section '{section}'")
    names, paths = CODE_ROLE.findall(text), PATH_REF.findall(text)
    if needs_lesson and not names and not paths:
        problems.append("names no code")
    for name in names:
        if not resolves(name):
            problems.append(f"code name {name} does not import")
    for path in paths:
        if not (ROOT / path).exists():
            problems.append(f"path {path} does not exist")
    tests = TEST_REF.findall(text)
    if not tests:
        problems.append("names no test")
    for path, test in tests:
        file = ROOT / path
        if not file.is_file() or not re.search(rf"^def {test}\(", file.read_text(encoding="utf-8"), re.MULTILINE):
            problems.append(f"test {path}::{test} does not exist")
    return problems


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        try:
            for attr in parts[k:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def the_map() -> tuple[list[list[str]], list[list[str]]]:
    found = tables(MAP.read_text(encoding="utf-8"))
    assert len(found) == 2, "docs/paper_map.md should hold two tables: the map and the deviations"
    return found[0], found[1]


def test_every_part_of_the_paper_has_a_row():
    rows, _ = the_map()
    assert rows[0][0] == "paper"
    covered = " ; ".join(row[0] for row in rows[1:])
    covered = re.sub(r"Eq\. \((\d)\)", r"Eq. (\1)", covered)
    missing = [part for part in PARTS if not re.search(re.escape(part) + r"(?![\d.])", covered)]
    assert not missing, f"docs/paper_map.md has no row for {missing}"


ROWS = the_map()[0][1:]


@pytest.mark.parametrize("cells", ROWS, ids=[cells[0] for cells in ROWS])
def test_every_row_names_a_lesson_section_code_and_a_test_that_exist(cells):
    problems = check_row(cells)
    assert not problems, f"docs/paper_map.md, the row of {cells[0]}: " + "; ".join(problems)


def test_every_deviation_is_pinned_by_a_test_that_exists():
    _, deviations = the_map()
    assert deviations[0] == ["the paper", "this project", "pinned by"]
    assert len(deviations) > 8
    for cells in deviations[1:]:
        problems = check_row(cells, needs_lesson=False)
        assert not problems, f"docs/paper_map.md, the deviation '{cells[0]}': " + "; ".join(problems)


def test_the_check_fails_when_a_section_is_gone():
    row = ["§3.5", "x", "[6 › 9. A section nobody wrote](../lessons/06_positional_encoding.ipynb)",
           "{py:func}`~minitransformer.layers.positional.no_such_function`, `lessons/experiments/nothing.py`",
           "`tests/test_layers_gradcheck.py::test_no_such_test`"]
    assert check_row(row) == ["lesson 6 has no section '9. A section nobody wrote'",
                              "code name minitransformer.layers.positional.no_such_function does not import",
                              "path lessons/experiments/nothing.py does not exist",
                              "test tests/test_layers_gradcheck.py::test_no_such_test does not exist"]
    assert check_row(["§1", "x", "", "", ""]) == ["names no lesson section", "names no code", "names no test"]


# -- the deviations nothing else pins -------------------------------------------------------------------------------

CFG = TransformerConfig(vocab_size=11, d_model=8, h=2, N=2, d_ff=16, P_drop=0.1, max_len=16)


def test_post_ln_is_the_default_and_only_pre_ln_adds_a_final_layernorm():
    assert TransformerConfig(vocab_size=11).pre_ln is False
    post, pre = Transformer(CFG), Transformer(CFG.with_(pre_ln=True))
    assert post.encoder.final_norm is None and post.decoder.final_norm is None
    assert pre.encoder.final_norm is not None and pre.decoder.final_norm is not None
    assert pre.num_parameters() - post.num_parameters() == 2 * 2 * CFG.d_model     # two LayerNorms: γ and β


def test_the_sinusoids_interleave():
    table = sinusoidal_table(20, 8, np, np.float64)
    pos = np.arange(20)[:, None]
    omega = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    np.testing.assert_allclose(table[:, 0::2], np.sin(pos * omega), atol=1e-12)
    np.testing.assert_allclose(table[:, 1::2], np.cos(pos * omega), atol=1e-12)
    assert not np.allclose(table[:, :4], np.sin(pos * omega))                          # not [sin..., cos...]


def test_label_smoothing_spreads_eps_over_every_token():
    eps, V = 0.1, 5
    logits = np.array([[[2.0, -1.0, 0.5, 0.0, 1.0], [0.3, 0.2, 0.1, 0.0, -0.1]]])    # (B=1, T=2, V)
    targets = np.array([[2, 0]])                                                     # the second is <pad> (0)
    loss = LabelSmoothedCrossEntropy(pad_id=0, eps_ls=eps).forward(logits, targets)
    log_p = logits[0, 0] - np.log(np.exp(logits[0, 0]).sum())
    q = np.full(V, eps / V)
    q[2] += 1 - eps                                                                  # ε/V everywhere, 1 − ε more at y
    assert loss == pytest.approx(-(q * log_p).sum(), rel=1e-12)


def test_dropout_sits_where_section_5_4_puts_it():
    model = Transformer(CFG)
    sites = []

    def walk(obj, seen):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, Dropout):
            sites.append(obj)
            return
        for value in getattr(obj, "__dict__", {}).values():
            for item in value if isinstance(value, (list, tuple)) else [value]:
                if hasattr(item, "__dict__") and type(item).__module__.startswith("minitransformer"):
                    walk(item, seen)

    walk(model, set())
    assert len(sites) == 5 * CFG.N + 2                         # 2N + 3N residual sites, 2 embedding sums
    assert len({id(s) for s in sites}) == len(sites)           # each its own object (its own mask)
    for layer in model.encoder.layers + model.decoder.layers:
        for name, value in vars(layer).items():
            if not name.startswith("res") and ("attn" in name or "ffn" in name):
                assert not any(isinstance(v, Dropout) for v in vars(value).values()), name
