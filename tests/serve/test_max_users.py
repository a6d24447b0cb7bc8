"""``--max-users``: least recently used idle users are unloaded and loaded again from the store when they return;
nothing acknowledged is lost, queued organisation and idle closing still reach them, and what a recall packs equals
batch ingestion even when every user is unloaded between its captures and its recalls."""
from __future__ import annotations

import weakref

from evolve.benchmarks.synthetic import generate_synthetic
from evolve.data import BASELINE_PATH
from evolve.runtime import MemoryRuntime
from evolve.serve.filestore import FileBackend
from evolve.serve.memory import MemoryService
from evolve.serve.strategy import RuntimeParts, StrategySlot
from evolve.strategy.artifact import load_strategy
from server_process import turns_of
from test_user_edges import Paused, _in_thread, _turns

BENCH = generate_synthetic(2, n_personas=2, n_sessions=5)


def _memory(tmp_path, serving, embedder, max_users: int) -> tuple[StrategySlot, MemoryService]:
    slot = StrategySlot(None, serving, RuntimeParts(embedder), allow_untracked=True)
    return slot, MemoryService(FileBackend(tmp_path / "data"), lambda: slot.current, max_users=max_users)


def test_every_user_unloaded_between_capture_and_recall_still_packs_what_batch_ingestion_packs(
        tmp_path, serving, embedder):
    slot, memory = _memory(tmp_path, serving, embedder, max_users=1)
    conversations = list(BENCH.conversations.values())
    users = {f"u{i}": c for i, c in enumerate(conversations)}
    streams = {user: turns_of(c) for user, c in users.items()}
    for step in range(max(map(len, streams.values()))):  # turn by turn, alternating: each capture unloads the other
        for user, turns in streams.items():
            if step < len(turns):
                memory.capture(user, [turns[step]])
                assert memory.loaded() == [user]
    assert memory.evictions >= 2 * min(map(len, streams.values())) - 1
    for user in users:  # batch ingestion rolls every session up: close the last one
        assert memory.close(user) is not None
    runtime = MemoryRuntime(load_strategy(BASELINE_PATH), embedder=embedder)
    for user, conversation in users.items():
        batch = runtime.ingest(conversation)
        for q in [q for q in BENCH.questions if q.conversation_id == conversation.id][:10]:
            other = next(u for u in users if u != user)
            memory.store(other, slot.current)  # the other user is loaded, this one unloaded, before each recall
            served = slot.current.runtime.ask(memory.store(user, slot.current), q.question, q.asked_at, answer=False)
            expected = runtime.ask(batch, q.question, q.asked_at, answer=False)
            assert [(c.id, c.text, c.source_ids) for c in served.packed] == \
                [(c.id, c.text, c.source_ids) for c in expected.packed], q.question


def test_an_unloaded_users_memory_is_freed_and_handed_back_once(tmp_path, serving, embedder):
    slot, memory = _memory(tmp_path, serving, embedder, max_users=1)
    first, second = list(BENCH.conversations.values())[:2]
    memory.capture("a", turns_of(first)[:20])
    built = weakref.ref(memory.store("a", slot.current))
    assert not memory.release()  # nothing unloaded yet
    memory.capture("b", turns_of(second)[:20])  # unloads a
    assert memory.loaded() == ["b"]
    assert memory.release() and not memory.release()
    assert built() is None  # nothing in the service holds the unloaded memory


def test_unloading_keeps_queued_organisation_and_idle_closing(tmp_path, serving, embedder):
    _, memory = _memory(tmp_path, serving, embedder, max_users=1)
    memory.capture("ann", _turns(3, "s1"))
    memory.capture("ann", _turns(1, "s2"))  # closes s1: its organisation is queued
    memory.capture("bob", _turns(2, "b1"))  # unloads ann, whose session s2 is open
    assert memory.loaded() == ["bob"] and memory.pending() == 1
    assert memory.organise_pending() == 1  # loads ann again for the step
    assert memory.backend.organised("ann") == {"s1"}
    memory.capture("bob", _turns(1, "b1", start=5))  # ann unloaded again
    assert "ann" not in memory.loaded()
    assert sorted(memory.close_idle(0)) == ["ann", "bob"]  # an unloaded user's idle session closes too
    assert memory.organise_pending() == 2
    assert memory.backend.organised("ann") == {"s1", "s2"} and memory.backend.organised("bob") == {"b1"}
    restarted = MemoryService(FileBackend(tmp_path / "data"), memory.current, max_users=1)
    assert restarted.recover() == 2 and restarted.loaded() == []  # start-up holds no user's memory
    assert restarted.turn_count("ann") == 4 and restarted.turn_count("bob") == 3 and restarted.loaded() == ["bob"]


def test_start_up_reads_every_user_once_and_holds_none_an_interrupted_organisation_still_queued(
        tmp_path, serving, embedder):
    slot, memory = _memory(tmp_path, serving, embedder, max_users=None)
    for user in ("ann", "bob", "cy"):
        memory.capture(user, _turns(3, "s1"))
        memory.capture(user, _turns(1, "s2", start=3))  # s1 closed, its organisation never run (a crash)
    restarted = MemoryService(FileBackend(tmp_path / "data"), memory.current)
    assert restarted.recover() == 3 and restarted.loaded() == [] and restarted.pending() == 3
    assert restarted.organise_pending() == 3 and restarted.backend.organised("cy") == {"s1"}
    assert sorted(restarted.close_idle(0)) == ["ann", "bob", "cy"]  # unloaded users' open sessions still close


def test_a_user_whose_memory_is_being_built_is_not_unloaded(tmp_path, serving, embedder):
    paused = Paused(embedder)
    slot = StrategySlot(None, serving, RuntimeParts(paused), allow_untracked=True)
    memory = MemoryService(FileBackend(tmp_path / "data"), lambda: slot.current, max_users=1)
    memory.capture("ann", _turns(20))
    builder = _in_thread(lambda: memory.store("ann", slot.current))
    assert paused.entered.wait(60)
    memory.capture("bob", _turns(1, "b1"))
    assert sorted(memory.loaded()) == ["ann", "bob"]  # over the bound while ann's build runs
    paused.go.set()
    builder.join(60)
    memory.capture("bob", _turns(1, "b1", start=3))
    assert memory.loaded() == ["bob"]


def test_a_user_loaded_at_start_holds_no_vector_until_recalled(tmp_path, serving, embedder):
    slot, memory = _memory(tmp_path, serving, embedder, max_users=10)
    memory.capture("ann", _turns(5))
    memory.store("ann", slot.current)  # writes ann's embedding shards
    restarted = MemoryService(FileBackend(tmp_path / "data"), memory.current, max_users=10)
    assert restarted.recover() == 1
    vectors = restarted._get("ann").embeddings
    assert len(vectors) == 0  # loaded, not recalled: the shards stay on disk
    restarted.store("ann", slot.current)
    assert len(vectors) > 0 and vectors.misses == 0  # read from the shards at the first build, nothing encoded
