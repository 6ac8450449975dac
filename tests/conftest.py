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


def pytest_collection_modifyitems(config, items):
    """The lesson notebooks (collected by `--nbmake`) take seconds each: mark them slow,
    so that `pytest --nbmake -m "not slow" tests lessons` leaves them out."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
