"""Shared test fixtures."""
from __future__ import annotations

import pytest

from evolve.data import BASELINE_PATH

from evolve.strategy.artifact import load_strategy


@pytest.fixture(scope="session")
def baseline_strategy() -> dict:
    """The validated baseline strategy. Shared: derive variants with ``set_path``/``derive``, never mutate it."""
    return load_strategy(BASELINE_PATH)


@pytest.fixture(scope="session")
def embedder():
    """The bundled all-MiniLM-L6-v2 embedder (loaded once per test session)."""
    from evolve.runtime import default_embedder

    return default_embedder()
