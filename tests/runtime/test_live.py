"""Turn-by-turn capture builds the store batch ingestion builds: same items, same packed context for every question."""
from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from evolve.benchmarks import load_locomo
from evolve.benchmarks.synthetic import generate_synthetic
from evolve.benchmarks.types import Conversation
from evolve.runtime import MemoryRuntime
from evolve.runtime.ingest import build_store
from evolve.runtime.live import CaptureError, LiveConversation
from evolve.strategy.artifact import ingestion_key, load_strategy

REPO = Path(__file__).resolve().parents[2]
EVOLVED = REPO / "experiments/strategies/locomo_answer_evolved4.yaml"
LOCOMO_DEV4 = REPO / "../shared/data/locomo/locomo_dev4.json"


def _capture(conversation: Conversation) -> LiveConversation:
    live = LiveConversation(conversation.id)
    for session in conversation.sessions:
        for turn in session.turns:
            live.add(turn if turn.timestamp is not None else dataclasses.replace(turn, timestamp=session.timestamp))
    live.close()
    return live


def _packed(runtime: MemoryRuntime, store, questions) -> list[list[tuple]]:
    return [[(c.id, c.text, c.source_ids) for c in runtime.ask(store, q.question, q.asked_at, answer=False).packed]
            for q in questions]


def _live_store(runtime: MemoryRuntime, live: LiveConversation):
    embed = lambda texts: runtime.cache.embeddings.encode(runtime.embedder, texts)  # noqa: E731
    return live.store(ingestion_key(runtime.strategy), runtime.policy, runtime.extractor, embed, runtime.embedder.name)


@pytest.mark.parametrize("source", ["synthetic", "locomo"])
def test_turn_by_turn_capture_packs_what_batch_ingestion_packs(source, embedder, baseline_strategy):
    if source == "synthetic":
        bench, strategy = generate_synthetic(0, n_personas=1, n_sessions=6), baseline_strategy
        conversation = next(iter(bench.conversations.values()))
    else:
        if not LOCOMO_DEV4.is_file():
            pytest.skip(f"{LOCOMO_DEV4} is not present")
        bench, strategy = load_locomo(LOCOMO_DEV4), load_strategy(EVOLVED)
        full = next(iter(bench.conversations.values()))
        conversation = dataclasses.replace(full, sessions=full.sessions[:3])
    questions = [q for q in bench.questions if q.conversation_id == conversation.id][:40]
    runtime = MemoryRuntime(strategy, embedder=embedder)
    live = _capture(conversation)
    batch = runtime.ingest(conversation)
    served = _live_store(runtime, live)
    assert [dataclasses.astuple(i) for i in served.items] == [dataclasses.astuple(i) for i in batch.items]
    assert _packed(runtime, served, questions) == _packed(runtime, batch, questions)


def test_a_grown_store_equals_batch_of_the_same_prefix_and_rollups_wait_for_the_session_to_close(
        embedder, baseline_strategy):
    bench = generate_synthetic(1, n_personas=1, n_sessions=5)
    conversation = next(iter(bench.conversations.values()))
    runtime = MemoryRuntime(baseline_strategy, embedder=embedder)
    live = LiveConversation(conversation.id)
    for n, session in enumerate(conversation.sessions):
        for turn in session.turns:
            live.add(dataclasses.replace(turn, timestamp=turn.timestamp or session.timestamp))
        grown = _live_store(runtime, live)
        prefix = dataclasses.replace(conversation, sessions=conversation.sessions[:n + 1])
        embed = lambda texts: runtime.cache.embeddings.encode(runtime.embedder, texts)  # noqa: E731
        batch = build_store(prefix, runtime.policy, runtime.extractor, embed, runtime.embedder.name,
                            rollup_sessions={s.id for s in prefix.sessions[:n]})
        assert [dataclasses.astuple(i) for i in grown.items] == [dataclasses.astuple(i) for i in batch.items]
        rolled = {grown.turns[i.source_ids[0]].session_id for i in grown.items if i.layer == "L1"}
        assert rolled <= live.closed and session.id not in rolled  # the open session has no rollup yet
    live.close()
    closed = _live_store(runtime, live)
    assert any(i.layer == "L1" and closed.turns[i.source_ids[0]].session_id == conversation.sessions[-1].id
               for i in closed.items)


def test_capture_refuses_a_repeated_id_and_a_turn_for_a_closed_session():
    conversation = next(iter(generate_synthetic(0, n_personas=1, n_sessions=5).conversations.values()))
    first, second = conversation.sessions[:2]
    live = LiveConversation("c")
    live.add(first.turns[0])
    with pytest.raises(CaptureError, match="already captured"):
        live.add(first.turns[0])
    live.add(second.turns[0])
    with pytest.raises(CaptureError, match="is closed"):
        live.add(first.turns[1])
    assert live.closed == {first.id} and live.open_session == second.id


def test_a_build_under_one_policy_never_blocks_reads_and_captures_under_another(embedder, baseline_strategy):
    conversation = next(iter(generate_synthetic(0, n_personas=1, n_sessions=5).conversations.values()))
    runtime = MemoryRuntime(baseline_strategy, embedder=embedder)
    live = _capture(dataclasses.replace(conversation, sessions=conversation.sessions[:2]))
    serving = _live_store(runtime, live)
    started, release = threading.Event(), threading.Event()

    def slow_embed(texts):  # the next strategy's build, held half-way until released
        started.set()
        assert release.wait(30)
        return embedder.encode(texts)

    args = (runtime.policy, runtime.extractor, slow_embed, runtime.embedder.name)
    building = threading.Thread(target=live.store, args=("next", *args))
    building.start()
    assert started.wait(30)
    try:
        reader = threading.Thread(target=_live_store, args=(runtime, live))
        reader.start()
        reader.join(5)
        assert not reader.is_alive(), "a read under the serving policy waited for another policy's build"
        assert _live_store(runtime, live) is serving
        third = conversation.sessions[2]
        live.add(dataclasses.replace(third.turns[0], timestamp=third.turns[0].timestamp or third.timestamp))
        prefix = dataclasses.replace(conversation, sessions=(*conversation.sessions[:2],
                                                             dataclasses.replace(third, turns=third.turns[:1])))
        grown = _live_store(runtime, live)  # a capture meanwhile, and the serving policy's store of it
        assert [dataclasses.astuple(i) for i in grown.items] == \
            [dataclasses.astuple(i) for i in runtime.ingest(prefix).items]
    finally:
        release.set()
        building.join(30)
    assert live.store("next", *args) is not None and not building.is_alive()
