"""Shared fixtures: float64 parameters for gradient checks, seeded generators."""

import numpy as np
import pytest

from minitransformer import backend


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


def pytest_collection_modifyitems(config, items):
    """The lesson notebooks (collected by `--nbmake`) take seconds each: mark them slow,
    so that `pytest --nbmake -m "not slow" tests lessons` leaves them out."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
