"""Packaging: one version, one place for the pins, the requirements split by who needs
what, the license, and the command line's --version and help texts."""

import argparse
import re
import tomllib
from pathlib import Path

import pytest

import minitransformer
from minitransformer.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _requirement_name(spec: str) -> str:
    return re.match(r"[A-Za-z0-9_.\-]+", spec).group(0).lower().replace("_", "-")


def _closure(extra: str) -> dict[str, str]:
    """Every requirement an extra brings in (name -> spec), following minitransformer[...]."""
    project = PYPROJECT["project"]
    specs = {_requirement_name(s): s for s in project["dependencies"]}
    todo, seen = [extra], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for spec in project["optional-dependencies"][name]:
            inner = re.fullmatch(r"minitransformer\[([\w,\s-]+)\]", spec)
            if inner:
                todo.extend(e.strip() for e in inner.group(1).split(","))
            else:
                specs[_requirement_name(spec)] = spec
    return specs


def _requirement_lines(name: str) -> list[str]:
    lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("name, extra", [("requirements.txt", "lessons"),
                                         ("requirements-dev.txt", "dev"),
                                         ("requirements-gpu.txt", "gpu")])
def test_requirements_files_only_name_an_extra(name, extra):
    # The version pins live in pyproject.toml alone, so the two lists cannot drift.
    assert _requirement_lines(name) == [f"-e .[{extra}]"]
    assert extra in PYPROJECT["project"]["optional-dependencies"]


def test_the_learner_gets_jupyterlab_and_no_torch_or_test_tools():
    learner = _closure("lessons")
    for needed in ("numpy", "matplotlib", "tqdm", "num2words", "babel", "emoji", "jupyterlab"):
        assert needed in learner, needed
    for heavy in ("torch", "pytest", "sacrebleu", "sphinx"):
        assert heavy not in learner, heavy


def test_the_developer_gets_every_tool_the_tests_benchmarks_and_docs_use():
    dev = _closure("dev")
    for needed in ("jupyterlab", "pytest", "hypothesis", "nbmake", "sacrebleu", "threadpoolctl",
                   "pyinstrument", "ruff", "jupytext", "nbclient", "sphinx", "myst-nb", "sphinx-book-theme",
                   "nltk", "pyevalb"):
        assert needed in dev, needed
    assert dev["torch"].replace(" ", "") == "torch==2.13.0"    # any other version pulls GBs


def test_mpi_is_an_extra_of_its_own_pinned_in_the_developer_install_and_not_the_learners():
    mpi = {_requirement_name(spec): spec.replace(" ", "") for spec in PYPROJECT["project"]["optional-dependencies"]["mpi"]}
    assert mpi["mpi4py"] == "mpi4py==4.1.2"
    assert mpi["mpich"].startswith("mpich==5.0.2;")          # the MPI library itself, as a wheel
    assert {"mpi4py", "mpich"} <= set(_closure("dev"))        # CI runs tests/test_mpi.py
    for install in ("lessons", "test"):
        assert not {"mpi4py", "mpich"} & set(_closure(install)), install
    from minitransformer.distributed import INSTALL_HINT
    assert "'.[mpi]'" in INSTALL_HINT                          # the error without mpi4py names this extra


def test_version_is_written_once():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "minitransformer.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", minitransformer.__version__)


def test_license_is_spdx_with_a_license_file():
    assert PYPROJECT["project"]["license"] == "MIT"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "the minitransformer authors" in text
    requires = PYPROJECT["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in requires)


def test_version_option_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"minitransformer {minitransformer.__version__}"


def _parsers(parser):
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_option_has_help_text():
    missing = [f"{prog} {'/'.join(action.option_strings) or action.dest}"
               for prog, parser in _parsers(build_parser())
               for action in parser._actions
               if not isinstance(action, argparse._SubParsersAction) and not action.help]
    assert not missing, f"options without help text: {missing}"


def test_what_the_commands_write_is_ignored_and_the_sources_are_not():
    """.gitignore: the folders the README's commands write at the top of the checkout (runs/,
    maps/ from translate --attention, data/ from export) are ignored; the package's and the
    tests' data folders, which share the names, are not."""
    import shutil
    import subprocess

    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (or git is not installed): .gitignore not checked")

    def ignored(path):
        result = subprocess.run([git, "check-ignore", "--quiet", "--no-index", path], cwd=ROOT)
        assert result.returncode in (0, 1), f"git check-ignore failed on {path}"
        return result.returncode == 0

    for path in ("runs/copy/checkpoint.npz", "maps/layer1_head1.png", "data/numbers-en-fr.train.tsv"):
        assert ignored(path), f"{path} is not ignored"
    for path in ("minitransformer/data/tasks.py", "minitransformer/data/new_task.py", "tests/data/case.tsv",
                 "docs/datasets.md", "lessons/src/maps.py"):
        assert not ignored(path), f"{path} is ignored, but it is a source file"
