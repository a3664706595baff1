"""Fixtures shared by the unit tests: the operator kernels (``operators.kernel``)."""

from __future__ import annotations

import pytest

from .kernels import KERNELS


@pytest.fixture(params=KERNELS)
def kernel(request: pytest.FixtureRequest) -> str:
    """Each kernel in turn: a test taking ``kernel`` runs its operators on both."""
    return str(request.param)
