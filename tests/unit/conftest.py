"""Fixtures shared by the unit tests: the DuckDB operator and its pyarrow fallback."""

from __future__ import annotations

import pytest

from .kernels import KERNELS


@pytest.fixture(params=KERNELS)
def kernel(request: pytest.FixtureRequest) -> str:
    """``duckdb`` and ``arrow`` in turn (``kernels``): a test taking ``kernel`` runs the
    DuckDB operator a task runs and the pyarrow operator it falls back to."""
    return str(request.param)
