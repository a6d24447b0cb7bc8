"""Every :class:`~evolve.serve.backend.Backend` behaves alike: one suite, run against the embedded file store and
PostgreSQL (pgserver's real server, a new database per test), covering every member of the protocol. A new store
joins by adding its name to :data:`STORES` and its case to :func:`store`."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

from evolve.runtime.store import MemoryItem, MemoryStore
from evolve.serve.backend import Backend
from evolve.serve.filestore import FileBackend
from evolve.serve.records import CloseEvent, PackedRef, RecallRecord, Tombstone, TurnRecord, TurnsEvent, turns_in

STORES = ["files", "postgres"]
RECALLS_BOUND = 5  # the recall log's bound each store is opened with (the file store's in bytes, see below)


@dataclass
class Subject:
    """A store under test, with what differs per store: how to corrupt an organised record behind its back, the
    most recall records its bound may hold, and whether other processes may write its users."""

    backend: Backend
    tamper: Callable[[str], None]
    recalls_held: int
    shared: bool


@pytest.fixture(params=STORES)
def store(request, tmp_path) -> Iterator[Subject]:
    if request.param == "files":
        line = len(_recall(0).to_json()) + 1
        backend = FileBackend(tmp_path / "data", recall_log_bytes=RECALLS_BOUND * line)

        def tamper(user: str) -> None:
            record = next((tmp_path / "data/users" / user / "records").rglob("0000-*.md"))
            record.write_text(record.read_text().replace("Lisbon", "Porto"))

        yield Subject(backend, tamper, 2 * RECALLS_BOUND, shared=False)  # the log rotates at the bound: 2x at most
        return
    from evolve.serve.pgstore import PostgresBackend

    url = request.getfixturevalue("pg_url")
    backend = PostgresBackend(url, recalls_kept=RECALLS_BOUND)

    def tamper(user: str) -> None:
        with backend.pool.connection() as conn:
            conn.execute("UPDATE mem_records SET body = replace(body, 'Lisbon', 'Porto') WHERE user_id = %s", (user,))

    yield Subject(backend, tamper, 2 * RECALLS_BOUND - 1, shared=True)  # pruned every RECALLS_BOUND appends
    backend.close()


def _turns(session: str, n: int, start: int = 0) -> list[TurnRecord]:
    return [TurnRecord(id=f"{session}:{i}", speaker="Ann" if i % 2 else "Bo", text=f"I moved to Lisbon in year {i}.",
                       session=session, time=f"2023-05-0{1 + i % 9}T10:00:00" if i % 3 else None)
            for i in range(start, start + n)]


def _recall(i: int) -> RecallRecord:
    return RecallRecord(user="ann", question=f"question {i:04d}?", asked_at=None, time=f"2026-01-01T00:00:{i % 60:02d}Z",
                        trace_id=f"{i:032d}", strategy="s" * 64, role="serving", words=3, latency_ms=1.0,
                        packed=[PackedRef(id="L0:0", layer="L0", source_ids=["D1:0"], words=3)])


def _memory(turns: list[TurnRecord]) -> MemoryStore:
    """A small organised memory: one fact per turn, the last superseding the first."""
    items = [MemoryItem(f"L0:{i}", "L0", t.text, (t.id,), t.speaker, None, "fact", 1.0,
                        superseded_by=f"L0:{len(turns) - 1}" if i == 0 else None) for i, t in enumerate(turns)]
    return MemoryStore("ann", items, [t.turn() for t in turns], np.zeros((len(items), 4)), "none")


def test_users_and_exists(store):
    backend = store.backend
    assert backend.users() == [] and not backend.exists("ann")
    for user in ("bo", "ann"):
        backend.append(user, TurnsEvent(turns=_turns("D1", 1)))
    assert backend.users() == ["ann", "bo"] and backend.exists("ann") and not backend.exists("cy")
    with pytest.raises(ValueError, match="invalid user id"):
        backend.exists("../etc")


def test_append_events_since_and_count(store):
    backend = store.backend
    assert backend.events("ann") == [] and backend.event_count("ann") == 0
    sent = [TurnsEvent(turns=_turns("D1", 3)), CloseEvent(close="D1"), TurnsEvent(turns=_turns("D2", 2))]
    for event in sent:
        backend.append("ann", event)
    events = backend.events("ann")
    assert [e.model_copy(update={"at": None}) for e in events] == sent
    assert all(isinstance(e.at, str) and e.at.endswith("Z") for e in events)
    assert [datetime.fromisoformat(e.at) for e in events] == sorted(datetime.fromisoformat(e.at) for e in events)
    assert backend.event_count("ann") == 3
    assert backend.events("ann", since=1) == events[1:] and backend.events("ann", since=3) == []
    assert backend.events("bo") == [] and backend.event_count("bo") == 0


def test_shared_says_whether_other_processes_write_the_same_users(store):
    assert store.backend.shared is store.shared


def test_organise_organised_and_verify(store):
    backend = store.backend
    turns = _turns("D1", 3)
    backend.append("ann", TurnsEvent(turns=turns))
    backend.append("ann", CloseEvent(close="D1"))
    assert backend.organised("ann") == set()
    backend.organise("ann", "D1", [t.turn() for t in turns], _memory(turns), "h" * 64)
    assert backend.organised("ann") == {"D1"} and backend.verify("ann") == []
    store.tamper("ann")
    problems = backend.verify("ann")
    assert problems and "D1:0" in problems[0]


def test_the_recall_log_keeps_the_newest_records_within_its_bound(store):
    backend = store.backend
    backend.append("ann", TurnsEvent(turns=_turns("D1", 1)))
    sent = [_recall(i) for i in range(4 * RECALLS_BOUND)]
    for record in sent:
        backend.log_recall("ann", record)
    held = backend.recalls("ann")
    assert RECALLS_BOUND <= len(held) <= store.recalls_held
    assert held == sent[-len(held):]  # the newest, oldest first, unchanged


def test_erase_leaves_a_tombstone_and_nothing_else(store):
    backend = store.backend
    backend.append("ann", TurnsEvent(turns=_turns("D1", 3)))
    backend.append("ann", TurnsEvent(turns=_turns("D2", 2)))
    backend.log_recall("ann", _recall(0))
    backend.append("bo", TurnsEvent(turns=_turns("D1", 1)))
    assert backend.tombstone("ann") is None
    stone = backend.erase("ann")
    assert isinstance(stone, Tombstone) and stone.turns_erased == 5 and "ann" not in stone.to_json()
    assert backend.tombstone("ann") == stone
    assert not backend.exists("ann") and backend.users() == ["bo"]
    assert backend.events("ann") == [] and backend.event_count("ann") == 0 and backend.organised("ann") == set()
    assert len(turns_in(backend.events("bo"))) == 1  # another user untouched
    backend.append("ann", TurnsEvent(turns=_turns("D9", 1)))  # captured again after erasure: a new memory
    assert backend.exists("ann") and len(turns_in(backend.events("ann"))) == 1 and backend.recalls("ann") == []


def test_embeddings_dir_is_per_user_if_any(store):
    backend = store.backend
    where = backend.embeddings_dir("ann")
    assert where is None or (isinstance(where, Path) and where != backend.embeddings_dir("bo"))


def test_a_torn_tail_is_dropped_and_the_next_append_does_not_join_it(tmp_path):
    """The file store's own case: a crash mid-append leaves an unterminated last line (PostgreSQL commits a row
    or nothing)."""
    backend = FileBackend(tmp_path / "data")
    backend.append("ann", TurnsEvent(turns=_turns("D1", 1)))
    with open(tmp_path / "data/users/ann/capture.jsonl", "ab") as fh:
        fh.write(b'{"turns": [{"id": "to')
    assert len(backend.events("ann")) == 1 and backend.event_count("ann") == 1
    backend.append("ann", TurnsEvent(turns=_turns("D1", 1, start=1)))
    assert [t.id for t in turns_in(backend.events("ann"))] == ["D1:0", "D1:1"]
