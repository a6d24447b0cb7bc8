"""Channel results remembered per store: a query answered from the memo retrieves exactly what a fresh computation
does, under every policy that changes what the channels compute, and a store's memo stays within its budget."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from evolve.benchmarks import load_benchmark
from evolve.runtime import IngestionCache, MemoryRuntime, retrieval
from evolve.strategy.artifact import derive

pytestmark = pytest.mark.heavy

#: Policies that change what the channels compute or how their results are used.
VARIANTS = [
    {},
    {"retrieval.candidate_pool": 7},
    {"features.session_memory": False},
    {"retrieval.weights.subquery": 0.0},
    {"retrieval.weights.vector": 0.0},
    {"retrieval.weights.bm25": 0.0},
    {"retrieval.lexical.stopwords": "english", "retrieval.lexical.stemmer": "snowball"},
    {"lifecycle.category_channel.enabled": True},
    {"retrieval.second_hop.enabled": True},
    {"retrieval.rerank.enabled": True, "retrieval.rrf_kappa": 10},
]


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("synthetic:0:2")


def _hits(runtime: MemoryRuntime, store, questions) -> list[list[dict]]:
    return [[h.to_dict() for h in runtime.ask(store, q.question, q.asked_at, answer=False).retrieved]
            for q in questions]


def test_remembered_channels_retrieve_what_a_fresh_store_does(baseline_strategy, embedder, bench):
    conv = next(iter(bench.conversations.values()))
    questions = [q for q in bench.questions if q.conversation_id == conv.id]
    cache = IngestionCache()  # question vectors embedded once
    store = MemoryRuntime(baseline_strategy, embedder=embedder, cache=cache).ingest(conv)
    for changes in VARIANTS:
        runtime = MemoryRuntime(derive(baseline_strategy, changes), embedder=embedder, cache=cache)
        first = _hits(runtime, store, questions)  # later variants find the entries earlier ones left
        again = _hits(runtime, store, questions)
        fresh = _hits(runtime, pickle.loads(pickle.dumps(store)), questions)  # a copy: no memo
        assert first == fresh and again == fresh, changes
    memo = retrieval._memos[store]
    assert len(memo.entries) >= len(questions)
    for channels in memo.entries.values():
        for ranked, scores in channels.values():
            assert not ranked.flags.writeable and not scores.flags.writeable
            with pytest.raises(ValueError):
                scores[0] = 1.0


def test_a_store_memo_keeps_within_its_budget(baseline_strategy, embedder, bench, monkeypatch):
    conv = next(iter(bench.conversations.values()))
    questions = [q for q in bench.questions if q.conversation_id == conv.id]
    runtime = MemoryRuntime(baseline_strategy, embedder=embedder)
    store = runtime.ingest(conv)
    budget = 3 * 20 * len(store) + 3 * 2048  # about three queries' worth
    monkeypatch.setattr(retrieval, "CHANNEL_MEMO_BYTES", budget)
    first = _hits(runtime, store, questions)
    memo = retrieval._memos[store]
    assert 0 < len(memo.entries) < len(questions) and memo.nbytes <= budget
    kept = dict(memo.entries)
    assert _hits(runtime, store, questions) == first  # remembered and recomputed queries alike
    assert memo.entries.keys() == kept.keys()  # a full memo keeps what it holds and takes no more
    assert all(memo.entries[key] is kept[key] for key in kept)
    assert np.isfinite([h["score"] for hits in first for h in hits]).all()
