"""Shared inputs of the tests that run the LLM roles against the packaged SmolLM2 model (``tests/llm/test_local_*``):
the model name, a baseline policy, a conversation window, packed context, questions and two helpers."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from evolve.benchmarks.types import Turn
from evolve.data import BASELINE_PATH
from evolve.llm import LLMClient, ResponseCache, RoleConfig, UsageStats
from evolve.llm.local import LocalLLMServer
from evolve.runtime.roles import ContextItem
from evolve.strategy.artifact import load_strategy
from evolve.strategy.policy import Policy

MODEL = "smollm2"
#: One llama.cpp thread a server: under ``-n auto`` every core already runs a test worker, and threads that wait on
#: each other at every layer lose their turn to the other worker's process.
THREADS = 1
POLICY = Policy.from_strategy(load_strategy(BASELINE_PATH))
DAY = datetime(2023, 5, 8)
WINDOW = [Turn(id="D1:1", session_id="S1", speaker="Caroline", timestamp=DAY,
               text="I went to the LGBTQ support group yesterday, it was so powerful."),
          Turn(id="D1:2", session_id="S1", speaker="Melanie", timestamp=DAY,
               text="That's great! I painted a sunrise over the lake last week."),
          Turn(id="D1:3", session_id="S1", speaker="Caroline", timestamp=DAY,
               text="I want to become a counselor for trans youth.")]
CONTEXT = [ContextItem("m1", "Caroline wants to become a counselor for trans youth.", "L1", ("D1:3",), DAY),
           ContextItem("m2", "Melanie painted a sunrise over the lake.", "L1", ("D1:2",), DAY),
           ContextItem("m3", "Anna bought a red car in April.", "L1", ("D2:1",), DAY)]
QUESTIONS = ("What did Melanie paint?", "What color is Anna's car?", "What does Caroline want to become?")


def entries(cache: Path, role: str) -> list[dict]:
    """The cached replies of ``role`` under ``cache``."""
    found = [json.loads(p.read_text()) for p in cache.rglob("*.json")]
    return [e for e in found if e["role"] == role]


def client(server: LocalLLMServer, cache: Path, stats: UsageStats, role: str, **settings: object) -> LLMClient:
    """A client of ``server`` for ``role``, caching in ``cache`` and counting into ``stats``."""
    cfg = RoleConfig(backend="llm", base_url=server.base_url, model=server.model, seed=0, **settings)
    return LLMClient(cfg, ResponseCache(cache), stats, role=role)
