"""The reference lifecycle: one fixed lifecycle pass that neither a candidate nor the serving strategy chose.

The versioned reference strategy ``evolve/data/referee.yaml`` (the baseline's ingestion with every lifecycle
mechanism on: correction supersession, slot supersession, retractions under the forget guard, hard expiry of every
dated fact, ``hide_passed``) with the rule extractor and no embeddings. A replay's referee judges stale context by it
(:mod:`evolve.serve.referee`), and probe questions learn from it which statements a later one made stale
(:meth:`ReferenceLifecycle.events`, a :class:`~evolve.benchmarks.probe_time.Timeline`).
"""
from __future__ import annotations

import numpy as np

from evolve.benchmarks.probe_time import LifecycleEvent
from evolve.benchmarks.types import Conversation
from evolve.data import REFEREE_PATH
from evolve.runtime.extractor import RuleExtractor
from evolve.runtime.ingest import build_store
from evolve.runtime.store import MemoryItem, MemoryStore
from evolve.runtime.text import split_attribution
from evolve.strategy.artifact import ingestion_key, load_strategy, strategy_hash
from evolve.strategy.policy import Policy


def no_vectors(texts: list[str]) -> np.ndarray:
    """The reference pass retrieves nothing: its store needs no embeddings."""
    return np.zeros((len(texts), 1), dtype=np.float32)


def _body(item: MemoryItem) -> str:
    return split_attribution(item.text)[2]


class ReferenceLifecycle:
    """The reference lifecycle pass (``evolve/data/referee.yaml`` with the rule extractor)."""

    def __init__(self) -> None:
        strategy = load_strategy(REFEREE_PATH)
        self.version: int = strategy["version"]
        self.policy = Policy.from_strategy(strategy)
        self.extractor = RuleExtractor()
        self.strategy_hash = strategy_hash(strategy)
        self.key = f"referee\0{ingestion_key(strategy)}\0{self.extractor.name}"

    def store(self, conversation: Conversation) -> MemoryStore:
        """The reference memory of ``conversation``."""
        return build_store(conversation, self.policy, self.extractor, no_vectors, "none")

    def events(self, conversation: Conversation) -> list[LifecycleEvent]:
        """Every statement of ``conversation``'s facts (L0) that a later value of its slot superseded or a later
        statement retracted, in store order. A correction that names no slot is not an event here: what it corrects
        is not known well enough to say which answer it makes stale (on LoCoMo dev4 the rule pass reads 25, nearly
        all a later "actually" that corrects nothing)."""
        store = self.store(conversation)
        out = []
        for item in store.items:
            if item.layer != "L0" or item.settled or not item.source_ids:
                continue
            later = [("superseded", v, item.meta.slot) for v in item.versions[:1]]
            later += [("retracted", item.retracted_by, None)] if item.retracted_by else []
            for state, by, slot in later:
                new = store.item(by)
                if new.source_ids and new.source_ids[0] != item.source_ids[0]:
                    out.append(LifecycleEvent(state, item.source_ids[0], new.source_ids[0], _body(item), _body(new),
                                              slot))
        return out
