"""Expansion along the memory graph (``retrieval.graph``): a memory that shares no word with the question reaches
the retrieved set through one that does; causal edges follow a fused pack's members in time order; a strategy
without the section keeps its hash."""
from __future__ import annotations

from datetime import datetime

import pytest

from evolve.benchmarks import load_benchmark
from evolve.benchmarks.scene_gen import generate_scenes
from evolve.data import BASELINE_PATH
from evolve.runtime import MemoryRuntime
from evolve.runtime.graph import adjacency
from evolve.strategy.artifact import StrategyError, load_strategy, policy_hash, validate_strategy
from evolve.strategy.policy import Fusion, Graph
from test_lifecycle_policies import conversation, runtime

CLEATS = "cleats"
CLUB = conversation(
    (datetime(2023, 5, 1, 10), ["The kids have football training on Thursday with the Riverside Hornets.",
                                "The kids love pizza on Fridays.", "The kids watch cartoons after school.",
                                "The kids sleep at eight on weekdays.", "The kids collect shiny stones."]),
    (datetime(2023, 5, 9, 10), ["The Hornets cleats are drying near the doorway.",
                                "The garage needs a new lamp.", "The garden hose leaks again."]))
QUESTION = "What should the kids bring to training?"


def _graph(**changes) -> dict:
    return {**Graph(enabled=True, edges=("semantic", "entity"), min_shared=1, max_share=0.2,
                    weight=3.0).model_dump(mode="json"),
            **changes}


def _retrieved(rt: MemoryRuntime) -> list[tuple[str, dict]]:
    store = rt.ingest(CLUB)
    return [(store.item(h.id).text, h.channels) for h in rt.ask(store, QUESTION, answer=False).retrieved]


def test_a_memory_sharing_no_word_with_the_question_is_reached_through_one_that_does():
    plain = _retrieved(runtime(retrieval__top_k=5))
    expanded = _retrieved(runtime(retrieval__top_k=5, retrieval__graph=_graph()))
    assert not any(CLEATS in text for text, _ in plain)
    reached = [channels for text, channels in expanded if CLEATS in text]
    assert reached and "graph" in reached[0] and "bm25" not in reached[0]


def test_edges_off_or_a_word_too_common_to_tell_reach_nothing():
    assert not any(CLEATS in text for text, _ in _retrieved(runtime(retrieval__top_k=5,
                                                                    retrieval__graph=_graph(enabled=False))))
    # the cleats share one telling word with the training day ("hornets"): with two required, no edge forms
    common = _retrieved(runtime(retrieval__top_k=5, retrieval__graph=_graph(edges=["semantic"], min_shared=2)))
    assert not any(CLEATS in text for text, _ in common)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    path = tmp_path_factory.mktemp("scenes") / "home.json"
    path.write_text(generate_scenes(3, homes=1).model_dump_json())
    return next(iter(load_benchmark(f"scenes:{path}").conversations.values()))


def test_causal_edges_join_consecutive_members_of_a_pack_and_nothing_else(home, embedder):
    strategy = load_strategy(BASELINE_PATH)
    fused = {**strategy, "features": {**strategy["features"], "fusion": Fusion(enabled=True).model_dump()}}
    store = MemoryRuntime(fused, embedder=embedder).ingest(home)
    edges = adjacency(store, Graph(enabled=True, per_node=10))["causal"]
    pack = next(item for item in store.items if item.layer == "PK" and len(item.source_ids) >= 3)
    first, second, third = (next(i for i, item in enumerate(store.items) if item.layer != "PK"
                                 and item.source_ids == (t,)) for t in pack.source_ids[:3])
    assert {first, third} <= {j for j, _ in edges[second]}
    assert second in {j for j, _ in edges[first]} and first not in {j for j, _ in edges[first]}
    assert not any(edges[i] for i, item in enumerate(store.items) if item.layer == "PK")


def test_a_strategy_without_the_graph_keeps_its_hash_and_a_bad_edge_type_is_named():
    strategy = load_strategy(BASELINE_PATH)
    assert "graph" not in strategy["retrieval"]
    with_graph = {**strategy, "retrieval": {**strategy["retrieval"], "graph": Graph().model_dump(mode="json")}}
    assert policy_hash(with_graph) != policy_hash(strategy)
    validate_strategy(with_graph)
    bad = {**strategy, "retrieval": {**strategy["retrieval"], "graph": {**Graph().model_dump(mode="json"),
                                                                       "edges": ["causal", "telepathy"]}}}
    with pytest.raises(StrategyError, match=r"retrieval\.graph\.edges"):
        validate_strategy(bad)
