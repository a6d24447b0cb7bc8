"""Layered memory of one conversation: items, raw turns, BM25 index and item embeddings (built once)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Sequence

import bm25s
import numpy as np

from evolve.benchmarks.observations import DeviceEvent, ObservationRef
from evolve.benchmarks.types import Turn
from evolve.runtime.facts import EVENT_CATEGORIES, FactMeta
from evolve.runtime.ikb import ImageKB
from evolve.runtime.lexical import DEFAULT, Analyzer
from evolve.runtime.text import content_tokens, split_attribution
from evolve.strategy.policy import FACT_CATEGORIES

@dataclass(frozen=True)
class MemoryItem:
    """One memory. ``L0`` facts, ``L1`` session rollups, ``L2`` profile/correction entries, ``SM`` recent turns,
    ``RT`` every raw turn (the turn layer)."""

    id: str
    layer: str
    text: str
    source_ids: tuple[str, ...]
    speaker: str | None
    timestamp: datetime | None
    kind: str
    salience: float
    superseded_by: str | None = None
    #: The retraction that withdrew this item, if any.
    retracted_by: str | None = None
    meta: FactMeta = FactMeta()
    #: Later items stating the same slot, oldest first (candidates to supersede this one at query time).
    versions: tuple[str, ...] = ()
    #: Text the item is found by besides its own (e.g. the turn a raw turn replies to); never packed.
    context: str = ""

    @property
    def retracted(self) -> bool:
        return self.retracted_by is not None

    @property
    def settled(self) -> bool:
        """Whether the item has no successor, retraction, later version or dated event: active for every question."""
        return self.superseded_by is None and not self.retracted and not self.versions and self.meta.event_time is None

    @property
    def index_text(self) -> str:
        """What retrieval matches: the item's text, after its context."""
        return f"{self.context} {self.text}" if self.context else self.text


class MemoryStore:
    """Immutable after construction; indexes are built here and reused by every question. ``ikb`` is the image
    knowledge base of the conversation's photos (:mod:`evolve.runtime.ikb`), linked to the items by turn ids;
    ``events`` the device events among its turns."""

    def __init__(self, conversation_id: str, items: Sequence[MemoryItem], turns: Sequence[Turn],
                 embeddings: np.ndarray, embedder_name: str, ikb: ImageKB = ImageKB(),
                 events: Sequence[DeviceEvent] = ()):
        if len(embeddings) != len(items):
            raise ValueError(f"{len(items)} items but {len(embeddings)} embeddings")
        self.conversation_id = conversation_id
        self.embedder_name = embedder_name
        self.ikb = ikb
        #: The device events among the turns, by id (:class:`~evolve.benchmarks.observations.DeviceEvent`).
        self.events: dict[str, DeviceEvent] = {e.id: e for e in events}
        self.items: tuple[MemoryItem, ...] = tuple(items)
        self.turns: dict[str, Turn] = {t.id: t for t in turns}
        self.turn_order: tuple[str, ...] = tuple(t.id for t in turns)
        self.turn_position: dict[str, int] = {tid: i for i, tid in enumerate(self.turn_order)}
        self.position: dict[str, int] = {item.id: i for i, item in enumerate(self.items)}
        self.embeddings = np.asarray(embeddings, dtype=np.float32)
        indexed = [content_tokens(item.index_text) for item in self.items]  # tokenised once: sets and BM25 share it
        self.token_sets = [frozenset(tokens) for tokens in indexed]
        self.body_sets = [frozenset(content_tokens(split_attribution(item.text)[2])) for item in self.items]
        #: :attr:`MemoryItem.settled` of every item.
        self.settled = [item.settled for item in self.items]
        self.layers = np.array([item.layer for item in self.items], dtype=object)
        self.days = np.array([day_number(item.timestamp) for item in self.items], dtype=np.float64)
        stamps = [item.timestamp for item in self.items if item.timestamp is not None]
        self.newest: datetime | None = max(stamps) if stamps else None
        known = {c: i for i, c in enumerate(FACT_CATEGORIES)}
        #: Soft category membership, one row per item summing to 1 (:attr:`FactMeta.members`).
        self.membership = np.zeros((len(self.items), len(FACT_CATEGORIES)))
        for i, item in enumerate(self.items):
            for c in item.meta.members:
                self.membership[i, known.get(c, known["other"])] += 1.0 / len(item.meta.members)
        self.numeric = np.array([item.meta.numeric for item in self.items], dtype=bool)
        #: Day number of each item's dated event when it is an event fact (:data:`EVENT_CATEGORIES`), else nan.
        self.event_days = np.array([day_number(item.meta.event_time) if item.meta.category in EVENT_CATEGORIES
                                    else float("nan") for item in self.items], dtype=np.float64)
        #: Day number of every item's dated event whatever its category, else nan (``expiry.scope: dated``).
        self.dated_days = np.array([day_number(item.meta.event_time) for item in self.items], dtype=np.float64)
        self._by_source: dict[str, list[str]] = {}
        for item in self.items:
            for tid in item.source_ids:
                self._by_source.setdefault(tid, []).append(item.id)
        #: Each BM25 index's term postings, by analyser (:func:`term_spans`).
        self._spans: dict[Analyzer, dict[str, tuple[int, int]]] = {}
        self._bm25: bm25s.BM25 | None = _bm25(indexed)
        if self._bm25 is not None:
            self._spans[DEFAULT] = term_spans(self._bm25)
        #: BM25 indexes of other lexical analysers, built when a strategy first asks for one (:meth:`bm25_index`).
        self._analysed: dict[Analyzer, bm25s.BM25 | None] = {}

    def __len__(self) -> int:
        return len(self.items)

    def provenance(self, turn_ids: Sequence[str], image_ids: Sequence[str]) -> list[ObservationRef]:
        """The observations a packed item comes from: its turns (device events named as such, with their device),
        then the images they share, each with its time."""
        def observed(t: str) -> ObservationRef:
            event = self.events.get(t)
            return ObservationRef(id=t, kind="turn", time=self.turns[t].timestamp) if event is None else \
                ObservationRef(id=t, kind="event", time=event.time, device=event.device)

        return [*(observed(t) for t in turn_ids if t in self.turns),
                *(ObservationRef(id=i, kind="image", time=self.ikb.image(i).image.time) for i in image_ids)]

    def item(self, item_id: str) -> MemoryItem:
        return self.items[self.position[item_id]]

    def items_from_sources(self, turn_ids: Iterable[str]) -> list[str]:
        """Ids of the items deriving from any of ``turn_ids`` (store order, no repeats)."""
        found = {self.position[iid] for tid in turn_ids for iid in self._by_source.get(tid, ())}
        return [self.items[i].id for i in sorted(found)]

    def in_layers(self, layers: Iterable[str]) -> list[MemoryItem]:
        wanted = set(layers)
        return [item for item in self.items if item.layer in wanted]

    def bm25_index(self, analyzer: Analyzer = DEFAULT) -> bm25s.BM25 | None:
        """The BM25 index of the items' texts as ``analyzer`` reads them (``None`` when they hold no term)."""
        if analyzer.is_default:
            return self._bm25
        built = self._analysed
        if analyzer not in built:
            built[analyzer] = index = _bm25([analyzer.terms(item.index_text) for item in self.items])
            if index is not None:
                self._spans[analyzer] = term_spans(index)
        return built[analyzer]

    def bm25_scores(self, query_tokens: Sequence[str], analyzer: Analyzer = DEFAULT) -> np.ndarray:
        """BM25 score of every item for query terms already tokenised by ``analyzer`` (:meth:`bm25_scores_many`)."""
        return self.bm25_scores_many([query_tokens], analyzer)[0]

    def bm25_scores_many(self, queries: Sequence[Sequence[str]], analyzer: Analyzer = DEFAULT) -> np.ndarray:
        """BM25 scores of every item for each of several queries tokenised by ``analyzer``, a float32 row each.

        Sums bm25s's precomputed Lucene term scores as ``BM25.get_scores`` does, with ``np.add.at`` term by term
        in query order (the same float32 sums), the postings of every query's terms in one call.
        """
        n = len(self.items)
        scores = np.zeros((len(queries), n), dtype=np.float32)
        bm25 = self.bm25_index(analyzer)
        if bm25 is None:
            return scores
        data, indices, spans = bm25.scores["data"], bm25.scores["indices"], self._spans[analyzer]
        found = [(row * n, span) for row, terms in enumerate(queries) for span in map(spans.get, terms) if span]
        if found:
            at = np.concatenate([indices[start:end] + offset if offset else indices[start:end]
                                 for offset, (start, end) in found])
            np.add.at(scores.reshape(-1), at, np.concatenate([data[start:end] for _, (start, end) in found]))
        return scores

    def newest_day(self) -> float | None:
        return day_number(self.newest) if self.newest is not None else None

    def neighbours(self, turn_id: str, width: int, after: int | None = None) -> list[Turn]:
        """Up to ``width`` turns before ``turn_id`` and ``after`` (default ``width``) after it, within its session, in
        dialogue order."""
        after = width if after is None else after
        at = self.turn_position.get(turn_id)
        if at is None or max(width, after) <= 0:
            return []
        session = self.turns[turn_id].session_id
        lo, hi = max(0, at - width), min(len(self.turn_order), at + after + 1)
        out = [self.turns[self.turn_order[i]] for i in range(lo, hi) if i != at]
        return [t for t in out if t.session_id == session]


def _bm25(tokens: list[list[str]]) -> bm25s.BM25 | None:
    """The BM25 index of tokenised texts; ``None`` when no text holds a term (an empty store, or texts such as "ok"
    or "?!" only: bm25s cannot index an empty vocabulary)."""
    if not any(tokens):
        return None
    index = bm25s.BM25()
    index.index(tokens, show_progress=False)
    return index


def term_spans(index: bm25s.BM25) -> dict[str, tuple[int, int]]:
    """Each indexed term's postings in ``index``: ``(start, end)`` into its ``scores["data"]`` and ``["indices"]``."""
    bounds = index.scores["indptr"].tolist()
    return {term: (bounds[tid], bounds[tid + 1]) for term, tid in index.vocab_dict.items() if tid + 1 < len(bounds)}


def day_number(moment: datetime | None) -> float:
    """Days since the epoch (fractional), ``nan`` when unknown."""
    if moment is None:
        return float("nan")
    return moment.toordinal() + (moment.hour * 3600 + moment.minute * 60 + moment.second) / 86400.0
