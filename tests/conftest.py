"""Fixtures shared by the tests; figures draw off-screen (matplotlib's Agg backend)."""
import os

import numpy as np
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture
def rng():
    return np.random.default_rng(0)
