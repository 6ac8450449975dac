"""The package is built in layers, lowest first; a module imports only from its own
layer or below, and no two modules import each other (directly or in a circle).

    foundation  errors, backend, files, runlock, streams, machine, threads, options
    layers      layers/* (layers/fast.py: the speed variants), gradcheck
    model       model (+ kvcache), settings, optim, data/*, metrics
    search      decoding (+ decoding_inputs), checkpoint, average, snapshots, plot, progress, stops, distributed
    translate   translate
    train       train
    run setup   runsetup
    cli         __main__, cli/*

The teaching harness (``lessonkit``: the exercise checkers, the grader, the lessons' prose and runtime
helpers) is a sibling package above all of them: it imports the library, and the library imports it
only where the command line's ``grade`` reaches it. docs/architecture.md draws the same graph. Imports
inside functions count too: hiding one there does not make a cycle go away.
"""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "minitransformer"
HARNESS = PACKAGE.parent / "lessonkit"

LAYERS = [
    ("foundation", ["errors", "backend", "files", "runlock", "streams", "machine", "threads", "options",
                    "__init__"]),
    ("layers", ["layers.fast", "layers.*", "gradcheck"]),
    ("model", ["model", "kvcache", "settings", "optim", "data.*", "metrics"]),
    ("search", ["decoding", "decoding_inputs", "checkpoint", "average", "snapshots", "plot", "progress", "stops",
                "distributed"]),
    ("translate", ["translate"]),
    ("train", ["train"]),
    ("run setup", ["runsetup"]),
    ("cli", ["__main__", "cli.*"]),
]


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _level(module: str) -> int:
    for i, (_, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            if module == pattern or (pattern.endswith(".*") and module.startswith(pattern[:-2])):
                return i
    raise AssertionError(f"module {module!r} is in no layer of tests/test_layering.py: add it")


def _imports(path: pathlib.Path, module: str) -> set[str]:
    """The package modules ``module`` imports (relative or absolute, anywhere in the file)."""
    package = module.split(".")[:-1] if path.name != "__init__.py" else module.split(".")
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("minitransformer"):
                target = node.module[len("minitransformer"):].lstrip(".")
            else:
                continue
            names = [f"{target}.{a.name}" if target else a.name for a in node.names]
            for name in [target, *names]:
                if name and (PACKAGE / (name.replace(".", "/") + ".py")).exists() or \
                        (name and (PACKAGE / name.replace(".", "/") / "__init__.py").exists()):
                    found.add(name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("minitransformer."):
                    found.add(a.name[len("minitransformer."):])
    found.discard(module)
    return {m for m in found if m not in ("data", "layers")}   # the bare packages


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p, _module_name(p)) for p in PACKAGE.rglob("*.py")}


def test_no_module_imports_a_higher_layer():
    bad = []
    for module, deps in sorted(_graph().items()):
        for dep in sorted(deps):
            if _level(dep) > _level(module):
                bad.append(f"{module} ({LAYERS[_level(module)][0]}) imports {dep} ({LAYERS[_level(dep)][0]})")
    assert not bad, "imports against the layering:\n  " + "\n  ".join(bad)


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}          # 1 = on the current path, 2 = done

    def visit(node, path):
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(dep):] + [dep]))
            if dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_checker_sees_imports_and_can_fail(tmp_path, monkeypatch):
    # A layer importing the model must be reported; a function-level import must be seen.
    fake = tmp_path / "minitransformer"
    (fake / "layers").mkdir(parents=True)
    (fake / "model.py").write_text("from .layers import linear\n")
    (fake / "layers" / "__init__.py").write_text("")
    (fake / "layers" / "linear.py").write_text("def f():\n    from ..model import Transformer\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake)
    graph = _graph()
    assert graph["layers.linear"] == {"model"} and graph["model"] == {"layers.linear"}
    import pytest
    with pytest.raises(AssertionError, match="layers.linear .layers. imports model"):
        test_no_module_imports_a_higher_layer()
    with pytest.raises(AssertionError, match="import cycle"):
        test_no_import_cycles()


def _harness_imports(path: pathlib.Path) -> list[str]:
    """The ``lessonkit`` imports of one file: ``line: module``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        found += [f"{node.lineno}: {n}" for n in names if n == "lessonkit" or n.startswith("lessonkit.")]
    return found


def test_the_library_holds_no_teaching_harness():
    """Issue 33.4: the checkers, the verdict channel and the grader live in lessonkit, beside the package;
    the package reaches them only from the command line's grade (one lazy import there)."""
    assert not (PACKAGE / "exercises").exists() and not (PACKAGE / "grade.py").exists()
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for line in _harness_imports(path):
            if not (rel == "__main__.py" or rel.startswith("cli/")) or not line.endswith(": lessonkit.grade"):
                bad.append(f"minitransformer/{rel}:{line}")
    assert not bad, "the library imports the teaching harness: " + ", ".join(bad)
    # ... and nothing in the package defines a checker or imports a notebook runner
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        checkers = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("check_")
                    and any(isinstance(d, ast.Call) and getattr(d.func, "id", "") == "exercise" for d in n.decorator_list)]
        assert not checkers, f"{path.name} defines exercise checkers {checkers}: they belong in lessonkit/exercises/"
        runners = [n for n in _imported_modules(tree) if n.split(".")[0] in ("nbclient", "nbformat", "IPython")]
        assert not runners, f"{path.name} imports {runners}: notebook machinery belongs in lessonkit"


def _imported_modules(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.append(node.module)
    return out


def test_the_harness_sits_above_the_library_and_imports_nothing_of_the_lessons():
    """lessonkit imports the library and itself; the library's layers hold whatever lessonkit needs."""
    for path in sorted(HARNESS.rglob("*.py")):
        for module in _imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
            top = module.split(".")[0]
            assert top != "lessons", f"lessonkit/{path.relative_to(HARNESS)} imports {module}"
            if top == "minitransformer":
                assert not module.startswith(("minitransformer.__main__", "minitransformer.cli")), \
                    f"lessonkit/{path.relative_to(HARNESS)} imports the command line ({module})"


def test_the_harness_check_can_fail(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import os\nfrom lessonkit.exercises import catalogue\ndef g():\n    import lessonkit.grade\n")
    assert _harness_imports(f) == ["2: lessonkit.exercises", "4: lessonkit.grade"]


def _foreign_cache_reads(path: pathlib.Path) -> list[str]:
    """Lines where something other than ``self`` touches a ``_cache`` attribute."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr == "_cache":
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                bad.append(f"{path.name}:{node.lineno}")
    return bad


def test_nothing_reads_another_layers_private_cache():
    """A layer's _cache is for its own backward; what others need is public
    (MultiHeadAttention.attention_weights, Transformer.attention_maps)."""
    lessons = PACKAGE.parent / "lessons"
    files = [*PACKAGE.rglob("*.py"), *HARNESS.rglob("*.py"), *lessons.rglob("*.py"), *(PACKAGE.parent / "benchmarks").glob("*.py")]
    bad = [line for path in files for line in _foreign_cache_reads(path)]
    assert not bad, f"reads of another object's _cache: {bad}"


def test_the_cache_privacy_check_can_fail(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("def g(attn):\n    return attn._cache.attn.A\n")
    assert _foreign_cache_reads(f) == ["x.py:2"]


def test_train_module_holds_the_loop_only():
    """train.py is the loop (issue 18: under 500 lines, training only); setting a run up
    (the model, the recipe, the checks before a resume) lives in runsetup.py."""
    source = (PACKAGE / "train.py").read_text(encoding="utf-8")
    lines = source.count("\n")
    assert lines < 500, f"train.py has {lines} lines; move what is not the training loop out (runsetup.py, data/)"
    defined = {node.name for node in ast.parse(source).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    moved = {"build_model", "settings_for", "check_resumable", "make_trainer", "load_task", "read_pairs"}
    assert not defined & moved, f"train.py defines {sorted(defined & moved)}, which belong to runsetup.py or data/"
