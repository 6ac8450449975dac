"""Shared fixtures: float64 parameters for gradient checks, seeded generators; the header line
that says which PyTorch build the parity tests found."""

import ast
import importlib.metadata
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from minitransformer import backend, threads

# Two runs inside one test must get the same BLAS thread count (their results are compared
# bit for bit), so the load-following policy of threads.py is off in the tests that import
# the package; tests/test_threads_policy.py checks the policy itself.
threads.set_policy(False)


@pytest.fixture
def f64():
    """Build parameters in float64 inside the test, then restore the default."""
    old = backend.default_dtype()
    backend.set_default_dtype("float64")
    yield np.float64
    backend.set_default_dtype(old)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def fake_cupy_installed():
    """The CPU stand-in for CuPy (tests/fake_cupy.py) installed as ``cupy``/``cupyx`` for one test,
    the backend left as it is; yields the stand-in ``cupy`` module. ``fake_cupy.SYNCS`` counts host
    syncs (reset on entry). sys.modules (a real CuPy too, if any) is restored afterwards."""
    import fake_cupy

    with fake_cupy.installed() as cupy:
        yield cupy


@pytest.fixture
def fake_cp(fake_cupy_installed):
    """The stand-in installed *and* chosen as the backend: new parameters live on the "GPU".
    The backend and the dtype are restored afterwards."""
    name, dtype = backend.backend_name(), backend.default_dtype()
    backend.set_backend("cupy")
    try:
        yield fake_cupy_installed
    finally:
        backend.set_backend(name)
        backend.set_default_dtype(dtype)


@pytest.fixture(params=["stand-in", pytest.param("cupy", marks=pytest.mark.gpu)])
def device_cp(request):
    """A "GPU" chosen as the backend, twice: the CPU stand-in (always) and the real CuPy (only where
    a CUDA device is there; skipped elsewhere, with the reason). The tests that take it check the
    package's CuPy path against NumPy, so on a GPU machine they run on the real device and check
    the stand-in's claims about CuPy too. The backend and the dtype are restored afterwards."""
    if request.param == "stand-in":
        cp = request.getfixturevalue("fake_cupy_installed")
    else:
        if not backend.cupy_available():
            pytest.skip("CuPy with a CUDA device is not available")
        import cupy as cp
    name, dtype = backend.backend_name(), backend.default_dtype()
    backend.set_backend("cupy")
    try:
        yield cp
    finally:
        backend.set_backend(name)
        backend.set_default_dtype(dtype)


def is_stand_in(cp) -> bool:
    """True for tests/fake_cupy.py's module, False for the real CuPy."""
    import fake_cupy

    return cp is fake_cupy.cupy


def pytest_collection_modifyitems(config, items):
    """The lesson notebooks (collected by `--nbmake`) take seconds each: mark them slow,
    so that `pytest --nbmake -m "not slow" tests lessons` leaves them out."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)


def torch_build() -> str:
    """Which PyTorch the parity tests use, read from its files (importing torch takes seconds):
    'torch 2.13.0+cpu, CPU-only build (torch.version.cuda is None)', or 'torch is not installed'."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "torch is not installed: the parity tests skip"
    version = importlib.metadata.version("torch")
    text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text(encoding="utf-8")
    found = re.search(r"^cuda\b[^=\n]*=\s*(.+)$", text, re.MULTILINE)
    cuda = ast.literal_eval(found.group(1).strip()) if found else None
    kind = "CPU-only build (torch.version.cuda is None)" if cuda is None else f"CUDA {cuda} build"
    return f"torch {version}, {kind}, from {spec.submodule_search_locations[0]}"


def pytest_report_header(config):
    return f"parity tests: {torch_build()}"
