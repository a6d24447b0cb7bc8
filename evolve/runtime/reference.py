"""The reference lifecycle: one fixed lifecycle pass that neither a candidate nor the serving strategy chose.

The versioned reference strategy ``evolve/data/referee.yaml`` (the baseline's ingestion with every lifecycle
mechanism on: correction supersession, slot supersession, retractions under the forget guard, hard expiry of every
dated fact, ``hide_passed``) with the rule extractor and no embeddings. A replay's referee judges stale context by it
(:mod:`evolve.serve.referee`), and probe questions learn from it which statements a later one made stale
(:meth:`ReferenceLifecycle.events`, a :class:`~evolve.benchmarks.probe_time.Timeline`). The reference gallery
(:class:`ReferenceGallery`) is the image knowledge base's passes, which no strategy chooses, filing the photos that
photo probes ask about.
"""
from __future__ import annotations

import numpy as np

from evolve.benchmarks.probe_photos import GalleryPhoto
from evolve.benchmarks.probe_time import LifecycleEvent
from evolve.benchmarks.types import Conversation
from evolve.data import REFEREE_PATH
from evolve.runtime.extractor import RuleExtractor
from evolve.runtime.ikb import build_ikb, category_table
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


class ReferenceGallery:
    """The photos of a conversation as its image knowledge base files them (:func:`evolve.runtime.ikb.build_ikb`:
    categories with synonyms, names recovered from the dialogue, kept for photos of an animal): a
    :class:`~evolve.benchmarks.probe_photos.Gallery`."""

    def photos(self, conversation: Conversation) -> list[GalleryPhoto]:
        animals = set(category_table().groups.get("animal", ()))
        out = []
        for entry in build_ikb(conversation.images(), conversation.turns()).images:
            named = entry.categories[:1] and entry.categories[0] in animals  # a pet's name, not a person's
            name = entry.names[0] if named and entry.names else None  # the nearest, within the IKB's reach
            out.append(GalleryPhoto(entry.id, entry.image.source_turn, entry.image.speaker, entry.image.time,
                                    entry.categories, name.name if name else None, name.turn if name else None))
        return out
