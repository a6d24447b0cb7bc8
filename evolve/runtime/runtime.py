"""The locked memory runtime: everything it does is decided by the strategy it is given."""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, Sequence

from evolve.benchmarks.types import Conversation
from evolve.strategy.policy import Policy
from evolve.runtime.roles import AnswerResult, Answerer, ContextItem, Expander, Extractor
from evolve.runtime.answerer import ExtractiveAnswerer
from evolve.runtime.assembly import assemble
from evolve.runtime.cache import IngestionCache
from evolve.runtime.embedder import Embedder, default_embedder
from evolve.runtime.expander import RuleExpander, classify_intent
from evolve.runtime.extractor import RuleExtractor
from evolve.runtime.fusion import FusionJudge, RuleJudge
from evolve.runtime.ikb_query import pack, query
from evolve.runtime.ingest import build_store
from evolve.runtime.retrieval import Hit, Query, filter_hits, retrieve
from evolve.runtime.store import MemoryStore
from evolve.runtime.text import content_tokens, count_words
from evolve.runtime.threads import single_blas_thread
from evolve.strategy.artifact import validate_strategy


@dataclass(frozen=True)
class RuntimeResult:
    """Everything one question went through, stage by stage."""

    intent: str
    subqueries: list[str]
    retrieved: list[Hit]
    filtered: list[tuple[str, str]]
    packed: list[ContextItem]
    dropped: list[tuple[str, str]]
    context_tokens: int
    token_budget: int
    answer: AnswerResult
    #: Wall time of query expansion, retrieval and filtering (milliseconds).
    retrieval_ms: float = 0.0
    #: The rule that routed the question to the image knowledge base (``None``: normal retrieval alone).
    route: str | None = None

    def to_trace(self) -> dict:
        """The retrieval, filtering, assembly and answer fields of a trace record."""
        return {
            "intent": self.intent,
            "subqueries": list(self.subqueries),
            "retrieved": [h.to_dict() for h in self.retrieved],
            "filtered": [{"id": i, "reason": r} for i, r in self.filtered],
            "packed": [{"id": c.id, "layer": c.layer, "tokens": count_words(c.text), "source_ids": list(c.source_ids),
                        "text": c.text, **({"image_ids": list(c.image_ids)} if c.image_ids else {})}
                       for c in self.packed],
            "dropped": [{"id": i, "reason": r} for i, r in self.dropped],
            "context_tokens": self.context_tokens,
            "token_budget": self.token_budget,
            "answer": self.answer.text,
            "answer_support": list(self.answer.support_ids),
            "retrieval_ms": round(self.retrieval_ms, 3),
            "route": self.route,
        }


class Runtime(Protocol):
    """What the evaluator calls: :class:`MemoryRuntime`, or an external system's
    :class:`~evolve.runtime.external.ExternalRuntime`."""

    def ingest(self, conversation: Conversation) -> Any: ...

    def prefetch(self, questions: Sequence[str]) -> None: ...

    def ask(self, store: Any, question: str, asked_at: datetime | None = None, *,
            answer: bool = True) -> RuntimeResult: ...


class MemoryRuntime:
    """Ingests conversations into layered memory and answers questions over it, as ``strategy`` dictates.

    Roles default to the deterministic rule extractor/expander, the extractive answerer and the bundled
    MiniLM embedder; a fresh in-memory :class:`IngestionCache` is used when none is shared. Constructing one
    limits the BLAS libraries loaded in this process to one thread (:func:`single_blas_thread`).
    """

    def __init__(self, strategy: dict, *, extractor: Extractor | None = None, expander: Expander | None = None,
                 answerer: Answerer | None = None, embedder: Embedder | None = None,
                 cache: IngestionCache | None = None, fuser: FusionJudge | None = None):
        self.strategy = validate_strategy(strategy)
        self.policy = Policy.from_strategy(strategy)
        self.extractor: Extractor = extractor or RuleExtractor()
        self.expander: Expander = expander or RuleExpander()
        self.answerer: Answerer = answerer or ExtractiveAnswerer()
        self.fuser: FusionJudge = fuser or RuleJudge()
        self.embedder: Embedder = embedder or default_embedder()
        self.cache = cache if cache is not None else IngestionCache()
        single_blas_thread()

    @property
    def builders(self) -> str:
        """The roles that build a store, by name: the extractor, and the fusion judge when fusion is on and not the
        rule judge (so a store built before judges were roles keeps its key)."""
        if self.policy.features.fusion.enabled and self.fuser.name != RuleJudge.name:
            return f"{self.extractor.name}+{self.fuser.name}"
        return self.extractor.name

    def ingest(self, conversation: Conversation) -> MemoryStore:
        """The conversation's memory store, from the cache when this ingestion policy has built it before."""
        key = IngestionCache.key(self.strategy, conversation, self.builders, self.embedder.name)
        store = self.cache.get(key)
        if store is None:
            store = build_store(conversation, self.policy, self.extractor,
                                lambda texts: self.cache.embeddings.encode(self.embedder, texts), self.embedder.name,
                                fuser=self.fuser)
            self.cache.put(key, store)
        return store

    def prefetch(self, questions: Sequence[str]) -> None:
        """Embed in one call every question whose intent uses the vector channel, so :meth:`ask` finds its
        vector cached (equal to one-by-one encoding up to float rounding: see the embedder)."""
        wanted = [q for q in questions if self.policy.retrieval.weights_for(classify_intent(q)).vector > 0]
        if wanted:
            self.cache.embeddings.encode(self.embedder, wanted)

    def ask(self, store: MemoryStore, question: str, asked_at: datetime | None = None, *,
            answer: bool = True) -> RuntimeResult:
        """Retrieve, filter, assemble and (unless ``answer`` is false: context only) answer one question."""
        if store.embedder_name != self.embedder.name:
            raise ValueError(f"store of conversation {store.conversation_id} was embedded with "
                             f"{store.embedder_name!r}, runtime uses {self.embedder.name!r}")
        policy = self.policy
        started = time.perf_counter()
        intent = classify_intent(question)
        subqueries = tuple(self.expander.expand(question, policy.expansion))[: policy.expansion.max_subqueries]
        vector = None
        if policy.retrieval.weights_for(intent).vector > 0:
            vector = self.cache.embeddings.encode(self.embedder, [question])[0]
        hits = retrieve(store, Query(question, intent, subqueries, vector, asked_at), policy)
        kept, filtered = filter_hits(store, hits, policy)
        retrieval_ms = (time.perf_counter() - started) * 1000
        wanted = (frozenset(content_tokens(" ".join((question, *subqueries)))) if policy.assembly.unit == "sentences"
                  else frozenset())  # only compression reads the question's words
        routed = query(store.ikb, question, policy.images) if policy.images.route.enabled else None
        packing = pack(store, routed, kept, policy, wanted) if routed else assemble(store, kept, policy, wanted)
        reply = (self.answerer.answer(question, packing.packed, policy.answering, intent) if answer
                 else AnswerResult(""))
        return RuntimeResult(intent, list(subqueries), hits, filtered, packing.packed, packing.dropped,
                             packing.context_tokens, policy.assembly.token_budget, reply, retrieval_ms,
                             routed.route if routed else None)
