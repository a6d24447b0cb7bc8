"""The runtime retrieves and packs what it did when the pin was written, and its BM25 sums are bm25s's own.

Speed work on retrieval must not change a context: ``tests/fixtures/pinned_contexts.json`` holds, per question of
``synthetic:0:2``, a digest of the retrieval and packing fields of the trace for the baseline and the turn
strategy, and each hit's dense score, which another CPU may round one unit of its last decimal the other way
(``same_contexts.mismatch``). Rewrite it (``python experiments/bench/same_contexts.py --pin
tests/fixtures/pinned_contexts.json``) only for a deliberate change of what the runtime retrieves or packs.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import bm25s
import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from evolve.runtime import MemoryRuntime
from evolve.runtime.cache import SHARED_EMBEDDINGS_ENV
from evolve.runtime.store import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
PIN = ROOT / "tests" / "fixtures" / "pinned_contexts.json"


def _tool():
    """``experiments/bench/same_contexts.py``, imported once (its pydantic models resolve in ``sys.modules``)."""
    if "same_contexts" not in sys.modules:
        spec = importlib.util.spec_from_file_location("same_contexts", ROOT / "experiments/bench/same_contexts.py")
        sys.modules["same_contexts"] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules["same_contexts"]


@pytest.mark.parametrize("strategy", ["baseline.yaml", "locomo_answer_turns.yaml"])
def test_contexts_match_the_pin(strategy, tmp_path, monkeypatch):
    # Vectors of this run's own batches, as the pin's were: a text another test embedded among other batch-mates
    # may differ in its last bits (1e-7), enough to swap a near tie.
    monkeypatch.delenv(SHARED_EMBEDDINGS_ENV)
    tool = _tool()
    pinned = tool.Pin.model_validate_json(PIN.read_text())
    assert pinned.benchmark == tool.PINNED_BENCH
    path = next(s for s in tool.STRATEGIES if s.name == strategy)
    want = pinned.strategies[strategy]
    # the second evaluation by the same harness reads the stores, vectors and channel results the first cached
    for n, run in enumerate(tool.traces(tool.PINNED_BENCH, path, tmp_path, passes=2), start=1):
        assert run.keys() == want.keys()
        changed = {qid: why for qid in sorted(run) if (why := tool.mismatch(want[qid], run[qid]))}
        assert not changed, (f"{strategy}, pass {n}: {len(changed)} of {len(want)} questions retrieve or pack "
                             f"differently from the pin, first {list(changed.items())[:5]}")


def _trace(dense: float, bm25: float = 1.267428, order: tuple[str, str] = ("L0:1", "L0:2")) -> dict:
    """A trace's pinned fields: two hits, the first with the given dense and BM25 scores."""
    hits = [{"id": i, "rank": r, "score": 0.03 - r / 1000, "source_ids": [], "fact": {},
             "channels": {"bm25": {"rank": r, "score": bm25 if r == 1 else 0.5}, "vector": {"rank": r, "score": dense}}}
            for r, i in enumerate(order, start=1)]
    return {"intent": "single_hop", "subqueries": [], "retrieved": hits, "filtered": [], "dropped": [],
            "packed": [{"id": order[0], "text": "Tomas has two cats"}], "context_tokens": 4, "answer": "two",
            "answer_support": [order[0]]}


def test_a_pinned_dense_score_may_round_one_unit_the_other_way_and_nothing_else_may_change():
    tool = _tool()
    pinned = tool.pin_of(_trace(0.81072))
    assert pinned.dense == [0.81072, 0.81072] and tool.mismatch(pinned, _trace(0.81072)) is None
    assert tool.mismatch(pinned, _trace(0.81071)) is None and tool.mismatch(pinned, _trace(0.81073)) is None
    assert "dense score 0.8107" in tool.mismatch(pinned, _trace(0.8107))
    assert tool.mismatch(pinned, _trace(0.81072, bm25=1.267429)) is not None
    assert tool.mismatch(pinned, _trace(0.81072, order=("L0:2", "L0:1"))) is not None


def _store(texts: list[str]) -> MemoryStore:
    from evolve.runtime.store import MemoryItem

    items = [MemoryItem(f"m{i}", "L0", text, (f"t{i}",), None, None, "fact", 0.5) for i, text in enumerate(texts)]
    return MemoryStore("c", items, [], np.zeros((len(items), 4), dtype=np.float32), "none")


def test_bm25_scores_are_bm25s_scores_bit_for_bit():
    from evolve.runtime.text import content_tokens

    texts = ["Caroline went to the adoption agency in May", "Melanie paints sunsets by the lake",
             "The agency called Caroline back about adoption", "Lake trips with the kids every summer", ""]
    store = _store(texts)
    reference = bm25s.BM25()
    reference.index([content_tokens(t) for t in texts], show_progress=False)
    queries = [content_tokens("When did Caroline call the adoption agency?"), ["lake", "lake", "kid"],
               ["unknown"], [], content_tokens("paints sunsets")]
    rows = store.bm25_scores_many(queries)
    assert rows.shape == (len(queries), len(texts)) and rows.dtype == np.float32
    for row, query in zip(rows, queries):
        known = [t for t in query if t in reference.vocab_dict]
        expected = reference.get_scores(known) if known else np.zeros(len(texts), dtype=np.float32)
        assert np.array_equal(row, expected), query
        assert np.array_equal(store.bm25_scores(query), row)
    assert rows[1].max() > 0 and not rows[2].any()


def test_a_runtime_runs_blas_on_one_thread(baseline_strategy, embedder):
    threadpool_limits(limits=2, user_api="blas")
    assert {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"} == {2}
    MemoryRuntime(baseline_strategy, embedder=embedder)
    assert {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"} == {1}
