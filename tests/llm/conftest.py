"""The packaged SmolLM2 model behind llama.cpp's server, shared by the test files that need it."""
from __future__ import annotations

from typing import Iterator

import pytest

from evolve.llm.local import LocalLLMServer, missing_requirements
from local_model import MODEL, THREADS


@pytest.fixture(scope="session")
def local_llm() -> Iterator[LocalLLMServer]:
    """The packaged SmolLM2 model behind llama.cpp's server on 127.0.0.1, stopped after the session (one per test
    worker: ``--dist loadfile`` runs the files that use it on any worker)."""
    reason = missing_requirements(MODEL)
    if reason:
        pytest.skip(reason)
    with LocalLLMServer(MODEL, threads=THREADS) as server:
        yield server
    assert not server.running
