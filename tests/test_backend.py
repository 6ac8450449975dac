"""The backend switch (NumPy/CuPy, float32/float64), scatter_add, and the source rule.

The source rule: compute code never imports NumPy for math; it asks its inputs
for their array module (backend.get_array_module), so the same code runs on a
GPU. Only backend.py and modules that build host-side data may import NumPy.
"""

from __future__ import annotations

import ast
import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minitransformer
from minitransformer import backend, machine
from minitransformer.layers.attention import MultiHeadAttention
from minitransformer.layers.embedding import Embedding
from minitransformer.layers.feedforward import FeedForward
from minitransformer.layers.layernorm import LayerNorm
from minitransformer.layers.linear import Linear
from minitransformer.layers.loss import cross_entropy_backward, cross_entropy_forward

PACKAGE = Path(minitransformer.__file__).resolve().parent
REPO = PACKAGE.parent


@pytest.fixture(autouse=True)
def _restore_backend():
    name, dtype = backend.backend_name(), backend.default_dtype()
    yield
    backend.set_backend(name)
    backend.set_default_dtype(dtype)


# ---------------------------------------------------------------------------
# Switching by function
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64", np.float64, np.dtype("float32")])
def test_set_default_dtype(dtype, rng):
    backend.set_default_dtype(dtype)
    want = np.dtype(dtype)
    assert backend.default_dtype() == want
    lin = Linear(3, 2, rng)
    assert lin.W.data.dtype == want and lin.b.data.dtype == want and lin.W.grad.dtype == want
    assert LayerNorm(3).gamma.data.dtype == want
    assert MultiHeadAttention(4, 2, rng).W_qkv.data.dtype == want
    assert Embedding(5, 4, rng).E.data.dtype == want


@pytest.mark.parametrize("bad", ["float16", "int32", np.int64])
def test_set_default_dtype_rejects(bad):
    before = backend.default_dtype()
    with pytest.raises(ValueError, match=rf"float32.*float64.*{np.dtype(bad).name}"):
        backend.set_default_dtype(bad)
    assert backend.default_dtype() == before


def test_set_backend_numpy(rng):
    backend.set_backend(" NumPy ")
    assert backend.backend_name() == "numpy"
    assert backend.xp_default() is np
    assert type(Linear(2, 2, rng).W.data) is np.ndarray


def test_set_backend_rejects_unknown():
    with pytest.raises(ValueError, match=r"numpy.*cupy.*'tpu'"):
        backend.set_backend("tpu")
    assert backend.backend_name() == "numpy"


@pytest.mark.skipif(backend.cupy_available(), reason="a GPU is present: set_backend('cupy') succeeds here")
def test_set_backend_cupy_without_gpu():
    before = backend.backend_name()
    assert backend.cupy_available() is False
    with pytest.raises(RuntimeError, match=r"cupy.*(CUDA|CuPy)"):
        backend.set_backend("cupy")
    assert backend.backend_name() == before          # a failed switch changes nothing


# ---------------------------------------------------------------------------
# Switching by environment variable (read once, at import)
# ---------------------------------------------------------------------------

PROBE = (
    "import numpy as np\n"
    "from minitransformer import backend\n"
    "from minitransformer.layers.linear import Linear\n"
    "lin = Linear(3, 2, np.random.default_rng(0))\n"
    "print(backend.backend_name(), backend.default_dtype().name, lin.W.data.dtype.name, type(lin.W.data).__module__)\n"
)


def _run_probe(**env_vars):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINITRANSFORMER_")}
    env.update(env_vars)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_env_backend_and_dtype():
    r = _run_probe(MINITRANSFORMER_BACKEND="numpy", MINITRANSFORMER_DTYPE="float64")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["numpy", "float64", "float64", "numpy"]
    r = _run_probe(MINITRANSFORMER_BACKEND=" NUMPY ", MINITRANSFORMER_DTYPE="Float32")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["numpy", "float32", "float32", "numpy"]
    r = _run_probe()                                  # defaults
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["numpy", "float32", "float32", "numpy"]


@pytest.mark.parametrize("var, value", [("MINITRANSFORMER_BACKEND", "tpu"),
                                        ("MINITRANSFORMER_DTYPE", "float16")])
def test_env_invalid_value(var, value):
    r = _run_probe(**{var: value})
    assert r.returncode != 0
    assert "EnvironmentVariableError" in r.stderr                # a ValueError that names the variable
    assert var in r.stderr and repr(value) in r.stderr, r.stderr


# ---------------------------------------------------------------------------
# get_array_module, to_numpy, scatter_add, seeded_rng
# ---------------------------------------------------------------------------

def test_get_array_module_numpy():
    a = np.zeros(3)
    assert backend.get_array_module(a) is np
    assert backend.get_array_module(a, np.ones((2, 2), np.float32)) is np
    assert backend.get_array_module(np.float64(1.0), 3, None) is np
    assert backend.get_array_module() is np
    assert backend.to_numpy(a) is a
    assert isinstance(backend.to_numpy([1, 2]), np.ndarray)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scatter_add_matches_add_at(rng, dtype):
    V, d = 7, 3
    rows = np.array([4, 1, 4, 4, 0, 1, 6, 4])             # repeats, unsorted, rows 2, 3, 5 unused
    values = rng.standard_normal((rows.size, d)).astype(dtype)
    start = rng.standard_normal((V, d)).astype(dtype)
    table = start.copy()
    backend.scatter_add(table, rows, values)
    ref = start.copy()
    np.add.at(ref, rows, values)
    np.testing.assert_allclose(table, ref, rtol=1e-6 if dtype == np.float32 else 1e-13)
    assert table.dtype == dtype
    np.testing.assert_array_equal(table[[2, 3, 5]], start[[2, 3, 5]])
    # the naive fancy-index += keeps only one of the repeats: scatter_add must not
    naive = start.copy()
    naive[rows] += values
    assert not np.allclose(naive[4], table[4])


def test_scatter_add_single_row_and_all_same():
    table = np.zeros((3, 2))
    backend.scatter_add(table, np.array([2, 2, 2]), np.ones((3, 2)))
    np.testing.assert_array_equal(table, [[0, 0], [0, 0], [3, 3]])
    backend.scatter_add(table, np.array([0]), np.full((1, 2), 5.0))
    np.testing.assert_array_equal(table, [[5, 5], [0, 0], [3, 3]])


def test_scatter_add_no_rows():
    """An empty batch's embedding backward adds nothing (and must not crash in reduceat)."""
    table = np.ones((3, 2))
    backend.scatter_add(table, np.zeros(0, dtype=np.int64), np.zeros((0, 2)))
    np.testing.assert_array_equal(table, np.ones((3, 2)))


def test_seeded_rng_reproducible():
    a = backend.seeded_rng(5, np).standard_normal(4)
    b = backend.seeded_rng(5, np).standard_normal(4)
    c = backend.seeded_rng(6, np).standard_normal(4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


# ---------------------------------------------------------------------------
# GPU: the same layers on CuPy agree with NumPy
# ---------------------------------------------------------------------------

class _CuPyMatchesNumPy:
    """The checks; the two classes below run them on a real GPU and on the CPU stand-in."""

    TOL = 1e-5

    @pytest.fixture(autouse=True)
    def _f64(self):
        old = backend.default_dtype()
        backend.set_default_dtype("float64")
        yield
        backend.set_default_dtype(old)

    @staticmethod
    def _to_gpu(layer):
        import cupy

        g = copy.deepcopy(layer)
        for p in g.parameters():
            p.data = cupy.asarray(p.data)
            p.grad = cupy.zeros_like(p.data)
        return g

    def _close(self, gpu, host):
        got = backend.to_numpy(gpu)
        assert type(gpu).__module__.startswith("cupy")
        err = np.abs(got - host).max() / max(np.abs(host).max(), 1e-30)
        assert err <= self.TOL, err

    def _compare(self, layer, inputs, **kwargs):
        import cupy

        rng = np.random.default_rng(1)
        layer.zero_grad()
        glayer = self._to_gpu(layer)
        gin = [cupy.asarray(a) for a in inputs]
        gkw = {k: cupy.asarray(v) for k, v in kwargs.items()}
        y = layer.forward(*inputs, **kwargs)
        gy = glayer.forward(*gin, **gkw)
        self._close(gy, y)
        G = rng.standard_normal(y.shape)
        dx, gdx = layer.backward(G), glayer.backward(cupy.asarray(G))
        for a, b in zip(gdx if isinstance(gdx, tuple) else (gdx,), dx if isinstance(dx, tuple) else (dx,)):
            if b is not None:
                self._close(a, b)
        for (_, gp), (_, p) in zip(glayer.named_parameters(), layer.named_parameters()):
            self._close(gp.grad, p.grad)

    def test_set_backend_cupy(self, rng):
        backend.set_backend("cupy")
        lin = Linear(3, 2, rng)
        assert type(lin.W.data).__module__.startswith("cupy")
        assert backend.get_array_module(lin.W.data).__name__ == "cupy"

    def test_mha_self_and_cross(self, rng):
        mha = MultiHeadAttention(8, 2, rng)
        x = rng.standard_normal((2, 5, 8))
        mask = np.tril(np.ones((5, 5), bool))[None, None] & (np.arange(5) < np.array([[5], [3]]))[:, None, None, :]
        mask[1, 0, 4] = False                        # a fully masked row
        self._compare(mha, [x], mask=mask)
        mem = rng.standard_normal((2, 4, 8))
        self._compare(mha, [x, mem], mask=np.ones((2, 1, 1, 4), bool))

    def test_ffn_layernorm(self, rng):
        self._compare(FeedForward(8, 16, rng), [rng.standard_normal((2, 3, 8))])
        ln = LayerNorm(8)
        ln.gamma.data[...] = rng.standard_normal(8)
        self._compare(ln, [rng.standard_normal((2, 3, 8))])

    def test_embedding_scatter_add(self, rng):
        self._compare(Embedding(6, 4, rng), [np.array([[1, 1, 3], [5, 1, 1]])])

    def test_loss(self, rng):
        import cupy

        logits = rng.standard_normal((2, 4, 7))
        targets = np.array([[1, 2, 3, 0], [6, 6, 0, 0]])
        loss, c = cross_entropy_forward(logits, targets, 0, 0.1)
        gloss, gc = cross_entropy_forward(cupy.asarray(logits), cupy.asarray(targets), 0, 0.1)
        assert abs(gloss - loss) <= self.TOL * abs(loss)
        self._close(cross_entropy_backward(gc), cross_entropy_backward(c))


@pytest.mark.gpu
@pytest.mark.skipif(not backend.cupy_available(), reason="CuPy with a CUDA device is not available")
class TestCuPyMatchesNumPy(_CuPyMatchesNumPy):
    """On a real GPU (real CuPy). Without one these skip, whether or not CuPy is installed."""


@pytest.mark.usefixtures("fake_cupy_installed")
class TestCuPyStandInMatchesNumPy(_CuPyMatchesNumPy):
    """The same checks through the CPU stand-in for CuPy (tests/fake_cupy.py), so they run
    everywhere and are known to work before they first meet a GPU."""


# ---------------------------------------------------------------------------
# The source rule: no NumPy for math outside backend.py and host-data modules
# ---------------------------------------------------------------------------

# Paths relative to minitransformer/; a trailing "/" means a whole package.
ALLOWED = {
    "backend.py": "the one module that chooses between numpy and cupy",
    "machine.py": "names the machine a figure came from, NumPy's version included",
    "data/": "builds token-id batches, vocabularies and masks on the host from Python data",
    "metrics.py": "BLEU / accuracy bookkeeping over host-side token lists",
    "plot.py": "matplotlib needs host (NumPy) arrays",
    "__main__.py": "command-line entry point: prints and saves host data",
    "train.py": "training-loop bookkeeping (host-side logs, seeds, batching)",
    "translate.py": "token lists in and out; attention maps copied to the host for plotting",
    "checkpoint.py": "saves and loads .npz files, which are host arrays",
    "distributed.py": "MPI sums host buffers (gradients staged through the host); shards are planned on the host",
}

# These must be scanned (never allow-listed) whenever they exist.
MUST_SCAN = ["layers/*.py", "model.py", "optim.py", "decoding.py", "gradcheck.py"]

NUMPY_NAMES = {"numpy", "np"}


def _allowed(rel: str) -> bool:
    """"data/" covers the package; "benchmarks" covers benchmarks.py and benchmarks/."""
    for a in ALLOWED:
        if a.endswith("/") and rel.startswith(a):
            return True
        if rel in (a, a + ".py") or rel.startswith(a + "/"):
            return True
    return False


def numpy_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for every way ``source`` reaches NumPy: imports, ``__import__``/
    ``import_module("numpy")``, names np/numpy, and ``something.numpy``.
    Strings, comments and docstrings that merely mention NumPy are fine."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "numpy" or a.name.startswith("numpy."):
                    found.append((node.lineno, f"import {a.name}"))
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod == "numpy" or mod.startswith("numpy."):
                found.append((node.lineno, f"from {mod} import ..."))
            for a in node.names:
                if a.name in NUMPY_NAMES:
                    found.append((node.lineno, f"from {'.' * node.level}{mod} import {a.name}"))
        elif isinstance(node, ast.Call):
            fn = node.func
            fname = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if fname in ("__import__", "import_module") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.split(".")[0] == "numpy":
                    found.append((node.lineno, f"{fname}({arg.value!r})"))
        elif isinstance(node, ast.Name) and node.id in NUMPY_NAMES:
            found.append((node.lineno, f"uses name {node.id!r}"))
        elif isinstance(node, ast.Attribute) and node.attr == "numpy":
            found.append((node.lineno, "uses attribute .numpy"))
    return sorted(set(found))


def _scanned_files(package: Path = PACKAGE):
    files = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if not _allowed(rel):
            files.append((rel, path))
    return files


def source_rule_violations(package: Path = PACKAGE) -> list[str]:
    """One "minitransformer/<file>:<line>: <what>: <code>" entry per offending line."""
    offending = []
    for rel, path in _scanned_files(package):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for lineno, what in numpy_uses(source):
            offending.append(f"minitransformer/{rel}:{lineno}: {what}: {lines[lineno - 1].strip()}")
    return offending


def test_numpy_scanner_detects_and_ignores():
    bad = (
        '"""Docstring: we never import numpy here."""\n'
        "import os, numpy as np\n"
        "from numpy.linalg import norm\n"
        "from .backend import numpy\n"
        "m = __import__('numpy')\n"
        "y = backend.numpy.exp(1)\n"
        "s = 'import numpy'  # import numpy in a comment\n"
    )
    lines = [ln for ln, _ in numpy_uses(bad)]
    assert {2, 3, 4, 5, 6} <= set(lines) and 1 not in lines and 7 not in lines
    clean = '"""NumPy is mentioned."""\nfrom . import backend\nxp = backend.get_array_module(x)\ny = xp.exp(x)\n'
    assert numpy_uses(clean) == []


def test_allow_list_names_only_files_that_exist():
    for rel in ALLOWED:
        assert (PACKAGE / rel).exists(), f"ALLOWED names {rel!r}, which is not in minitransformer/"


def test_allow_list_shape():
    assert not _allowed("layers/attention.py") and not _allowed("model.py") and not _allowed("gradcheck.py")
    assert _allowed("data/batching.py") and _allowed("backend.py")
    assert _allowed("translate.py") and not _allowed("database.py") and not _allowed("data.py")
    for rel in ("model.py", "optim.py", "decoding.py", "gradcheck.py"):
        assert not _allowed(rel)


def test_no_numpy_for_math_in_compute_code():
    scanned = _scanned_files()
    rels = {rel for rel, _ in scanned}
    # everything that must be scanned and exists is scanned
    for pattern in MUST_SCAN:
        for path in PACKAGE.glob(pattern):
            assert path.relative_to(PACKAGE).as_posix() in rels, f"{pattern} must not be allow-listed"
    assert {"layers/attention.py", "layers/linear.py", "layers/loss.py", "gradcheck.py"} <= rels

    offending = source_rule_violations()
    assert not offending, (
        "compute code must not use NumPy directly (use backend.get_array_module / backend.xp_default):\n"
        + "\n".join(offending)
    )


def test_source_rule_reports_file_and_line(tmp_path):
    pkg = tmp_path / "minitransformer"
    (pkg / "layers").mkdir(parents=True)
    (pkg / "data").mkdir()
    (pkg / "layers" / "bad.py").write_text('"""Uses numpy."""\n\nimport numpy as np\nx = np.exp(1.0)\n')
    (pkg / "layers" / "good.py").write_text("from .. import backend\n")
    (pkg / "data" / "host.py").write_text("import numpy\n")          # allow-listed
    (pkg / "backend.py").write_text("import numpy\n")                # allow-listed
    found = source_rule_violations(pkg)
    assert found == ["minitransformer/layers/bad.py:3: import numpy: import numpy as np",
                     "minitransformer/layers/bad.py:4: uses name 'np': x = np.exp(1.0)"]


def test_machine_info_names_the_computer_a_figure_came_from(monkeypatch):
    info = machine.machine_info()
    assert info["cpu"] and isinstance(info["cores"], int) and info["cores"] >= 1
    assert info["numpy"] == np.__version__
    line = machine.machine_summary()
    assert line.startswith(f"{info['cpu']}, {info['cores']} logical CPUs, Python {info['python']}, NumPy")
    monkeypatch.delattr(machine.os, "getloadavg")            # an OS without a load average (Windows)
    assert machine.machine_info()["load_average"] is None and "load" not in machine.machine_summary()
