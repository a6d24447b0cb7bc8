"""Shared test fixtures."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from evolve.data import BASELINE_PATH
from evolve.strategy.artifact import load_strategy
from evolve.files import TEST_HOOKS_ENV
from evolve.runtime.cache import SHARED_EMBEDDINGS_ENV
from llm_server import LoopbackLLMServer

os.environ[TEST_HOOKS_ENV] = "1"  # the crash-injection hook (evolve.files.crash_point) works in tests only


@pytest.fixture(scope="session", autouse=True)
def shared_embeddings(tmp_path_factory, worker_id) -> Iterator[Path]:
    """One embedding cache for the session's runs, subprocesses and test workers included
    (``$MEMEVOLVE_EMBEDDING_CACHE``): a run whose texts are all embedded already never loads the model."""
    root = tmp_path_factory.getbasetemp()
    directory = (root.parent if worker_id != "master" else root) / "embeddings"
    os.environ[SHARED_EMBEDDINGS_ENV] = str(directory)
    yield directory
    os.environ.pop(SHARED_EMBEDDINGS_ENV, None)


@pytest.fixture(scope="session")
def baseline_strategy() -> dict:
    """The validated baseline strategy. Shared: derive variants with ``set_path``/``derive``, never mutate it."""
    return load_strategy(BASELINE_PATH)


@pytest.fixture(scope="session")
def embedder():
    """The bundled all-MiniLM-L6-v2 embedder (loaded once per test session)."""
    from evolve.runtime import default_embedder

    return default_embedder()


@pytest.fixture(scope="session")
def engine_stores(tmp_path_factory) -> Path:
    """Real stores, shared and read-only: one engine round, then a committed ACCEPT (round 2, applied) and an
    ACCEPT_WITH_MONITOR (round 3, not applied); see ``workflow_fixtures.build``."""
    from workflow_fixtures import build

    return build(tmp_path_factory.mktemp("engine"))


@pytest.fixture
def stores(engine_stores: Path, tmp_path: Path) -> Path:
    """A private, writable copy of ``engine_stores``."""
    return Path(shutil.copytree(engine_stores, tmp_path / "stores"))


@pytest.fixture
def llm_server() -> Iterator[LoopbackLLMServer]:
    """A started loopback OpenAI-compatible server with the echo responder; tests replace ``responder`` as needed."""
    with LoopbackLLMServer() as server:
        yield server


@pytest.fixture
def serving(tmp_path: Path, monkeypatch) -> Path:
    """``<tmp>/strategies/serving.yaml`` holding the baseline; its directory is the configured serving directory."""
    path = tmp_path / "strategies" / "serving.yaml"
    path.parent.mkdir()
    path.write_bytes(BASELINE_PATH.read_bytes())
    monkeypatch.setenv("MEMEVOLVE_SERVING_DIR", str(path.parent))
    return path


@pytest.fixture(autouse=True)
def framework_schema() -> Iterator[None]:
    """A run config's knob schema (``runtime:``, made the process's strategy schema) never outlives its test."""
    yield
    from evolve.strategy.schema import activate

    activate(None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of files marked ``heavy`` first, each file's tests in their order: with ``--dist loadfile`` a
    worker takes a long file while the other works through the short ones, so no long file starts last."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)
