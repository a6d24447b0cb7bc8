"""Every :class:`~evolve.serve.backend.Backend` behaves alike: one suite, run against the embedded file store and
PostgreSQL (pgserver's real server, a new database per test), covering every member of the protocol. A new store
joins by adding its name to :data:`STORES` and its case to :func:`store`."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

import subprocess

import numpy as np
import pytest

from evolve.benchmarks.observations import DeviceMeta, ImageObservation, Provenance
from evolve.runtime.ikb import build_ikb
from evolve.runtime.store import MemoryItem, MemoryStore
from evolve.serve.backend import Backend, UnknownTurn
from evolve.serve.filestore import FileBackend
from evolve.serve.records import (CloseEvent, PackedRef, RecallRecord, ShadowPart, Tombstone, TurnRecord, TurnsEvent,
                                  turns_in)

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
    #: Whether any stored byte of the user's (every file and every Git object; every row) holds the text.
    holds: Callable[[str, str], bool]


@pytest.fixture(params=STORES)
def store(request, tmp_path) -> Iterator[Subject]:
    if request.param == "files":
        line = len(_recall(0).to_json()) + 1
        backend = FileBackend(tmp_path / "data", recall_log_bytes=RECALLS_BOUND * line)

        def tamper(user: str) -> None:
            record = next((tmp_path / "data/users" / user / "records").rglob("0000-*.md"))
            record.write_text(record.read_text().replace("Lisbon", "Porto"))

        def holds(user: str, text: str) -> bool:
            folder = tmp_path / "data/users" / user
            if not folder.exists():  # nothing of the user's is stored
                return False
            objects = subprocess.run(["git", "-C", str(folder), "cat-file", "--batch-all-objects", "--batch"],
                                     capture_output=True, check=True).stdout
            return text.encode() in objects or any(text.encode() in p.read_bytes() for p in folder.rglob("*")
                                                   if p.is_file() and ".git" not in p.parts)

        yield Subject(backend, tamper, 2 * RECALLS_BOUND, shared=False, holds=holds)  # the log rotates at the bound
        return
    from evolve.serve.pgstore import _USER_TABLES, PostgresBackend

    url = request.getfixturevalue("pg_url")
    backend = PostgresBackend(url, recalls_kept=RECALLS_BOUND)

    def tamper(user: str) -> None:
        with backend.pool.connection() as conn:
            conn.execute("UPDATE mem_records SET body = replace(body, 'Lisbon', 'Porto') WHERE user_id = %s", (user,))

    def holds(user: str, text: str) -> bool:
        with backend.pool.connection() as conn:
            return any(conn.execute(f"SELECT 1 FROM {table} t WHERE t.user_id = %s AND t::text LIKE %s LIMIT 1",
                                    (user, f"%{text}%")).fetchone() for table in _USER_TABLES)

    yield Subject(backend, tamper, 2 * RECALLS_BOUND - 1, shared=True, holds=holds)  # pruned every RECALLS_BOUND
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
    assert backend.events("ann") == []
    sent = [TurnsEvent(turns=_turns("D1", 3)), CloseEvent(close="D1"), TurnsEvent(turns=_turns("D2", 2))]
    for event in sent:
        backend.append("ann", event)
    events = backend.events("ann")
    assert [e.model_copy(update={"at": None}) for e in events] == sent
    assert all(isinstance(e.at, str) and e.at.endswith("Z") for e in events)
    assert [datetime.fromisoformat(e.at) for e in events] == sorted(datetime.fromisoformat(e.at) for e in events)
    assert backend.events("ann", since=1) == events[1:] and backend.events("ann", since=3) == []
    assert backend.events("bo") == []


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


def test_an_organised_photo_keeps_its_ikb_row_and_an_event_its_device_until_the_user_is_erased(store):
    backend = store.backend
    turns = _turns("D1", 2)
    turns[1] = turns[1].model_copy(update={"time": "2023-05-02T10:00:00", "event": DeviceMeta(
        device="doorbell_cam_7", event="object_seen")})
    backend.append("ann", TurnsEvent(turns=turns))
    assert backend.events("ann")[0].turns[1].event.device == "doorbell_cam_7"
    memory = _memory(turns)
    photo = ImageObservation(id="D1:IMG_001", session="D1", time=None, caption="a photo of a cat named Whiskerino",
                             source_turn="D1:0", speaker="Bo", provenance=Provenance(source="client", record="D1:0"))
    memory.ikb = build_ikb([photo], [t.turn() for t in turns])
    backend.organise("ann", "D1", [t.turn() for t in turns], memory, "h" * 64)
    assert backend.verify("ann") == [] and store.holds("ann", "Whiskerino") and store.holds("ann", "D1:IMG_001")
    assert store.holds("ann", "doorbell_cam_7")
    backend.erase("ann")
    assert not any(store.holds("ann", text) for text in ("Whiskerino", "D1:IMG_001", "doorbell_cam_7"))


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
    assert backend.events("ann") == [] and backend.organised("ann") == set()
    assert len(turns_in(backend.events("bo"))) == 1  # another user untouched
    backend.append("ann", TurnsEvent(turns=_turns("D9", 1)))  # captured again after erasure: a new memory
    assert backend.exists("ann") and len(turns_in(backend.events("ann"))) == 1 and backend.recalls("ann") == []


def test_rewrite_replaces_the_log_and_drops_what_was_derived_from_it(store):
    """A retention purge: the log becomes the events kept (an event appended after those read follows them), the
    organisation marks and records go (organised again from what is kept), recall-log lines that packed a purged
    turn (or whose shadow did) go, the others stay, the generation advances; a rewrite read under an older generation
    changes nothing; a log left with no turn is erased."""
    backend = store.backend
    purged, kept = _turns("D1", 2), _turns("D2", 2)
    for event in (TurnsEvent(turns=purged), CloseEvent(close="D1"), TurnsEvent(turns=kept)):
        backend.append("ann", event)
    backend.append("bo", TurnsEvent(turns=_turns("D1", 1)))
    backend.organise("ann", "D1", [t.turn() for t in purged], _memory(purged), "h" * 64)
    packing = [_recall(0), _recall(1).model_copy(update={"packed": [PackedRef(id="L0:1", layer="L0",
                                                                              source_ids=["D2:0"], words=3)]})]
    shadowed = _recall(2).model_copy(update={"packed": packing[1].packed, "shadow": ShadowPart(
        strategy="t" * 64, source="candidate", packed=packing[0].packed, words=3, overlap=0.0, latency_ms=1.0)})
    for record in (*packing, shadowed):
        backend.log_recall("ann", record)
    generation, events = backend.generation("ann"), backend.events("ann")
    backend.append("ann", CloseEvent(close="D2"))  # appended after the purge read the log (another replica)
    assert backend.rewrite("ann", events[2:], {t.id for t in purged}, len(events), generation) is True
    assert backend.events("ann")[:1] == events[2:] and isinstance(backend.events("ann")[1], CloseEvent)
    assert backend.organised("ann") == set() and backend.verify("ann") == []
    assert backend.recalls("ann") == [packing[1]]  # D1:0 packed by the first, and by the third's shadow
    assert backend.generation("ann") == generation + 1 and backend.generation("bo") == 0
    assert backend.exists("ann") and len(turns_in(backend.events("bo"))) == 1  # another user untouched
    assert backend.rewrite("ann", [], set(), 2, generation) is False  # read before the rewrite: refused
    assert len(backend.events("ann")) == 2
    backend.append("ann", TurnsEvent(turns=_turns("D3", 1)))  # the log goes on after the rewrite
    assert [t.id for t in turns_in(backend.events("ann", since=1))] == ["D3:0"]
    assert backend.rewrite("ann", [], {"D2:0", "D2:1", "D3:0"}, 3, generation + 1) is True  # nothing kept: erased
    assert not backend.exists("ann") and backend.tombstone("ann").turns_erased == 3
    assert backend.generation("ann") == generation + 2


def test_the_erasure_generation_of_a_user_id_grows_with_every_erasure_and_outlives_it(store):
    backend = store.backend
    assert backend.generation("ann") == 0
    backend.append("ann", TurnsEvent(turns=_turns("D1", 2)))
    backend.append("bo", TurnsEvent(turns=_turns("D1", 1)))
    assert backend.generation("ann") == 0  # a capture does not move it
    backend.erase("ann")
    assert backend.generation("ann") == 1 and backend.generation("bo") == 0
    backend.append("ann", TurnsEvent(turns=_turns("D2", 3)))  # the id captured again: the generation stays
    assert backend.generation("ann") == 1
    backend.erase("ann")
    assert backend.generation("ann") == 2


def test_erase_turn_leaves_no_word_of_it_and_the_rest_as_it_was(store):
    backend = store.backend
    first, second = _turns("D1", 3), _turns("D2", 2, start=5)
    backend.append("ann", TurnsEvent(turns=first))
    backend.append("ann", CloseEvent(close="D1"))
    backend.organise("ann", "D1", [t.turn() for t in first], _memory(first), "h" * 64)
    backend.append("ann", TurnsEvent(turns=second))
    backend.organise("ann", "D2", [t.turn() for t in second], _memory(first + second), "h" * 64)  # a later step
    gone = first[1].text
    assert store.holds("ann", gone) and backend.generation("ann") == 0
    erased = backend.erase_turn("ann", "D1:1")
    assert (erased.turn, erased.session, erased.organised) == ("D1:1", "D1", True)
    assert not store.holds("ann", gone)
    assert [t.id for t in turns_in(backend.events("ann"))] == ["D1:0", "D1:2", "D2:5", "D2:6"]
    assert len(backend.events("ann")) == 3  # the capture request that held it stays, without it
    assert backend.organised("ann") == {"D2"} and backend.generation("ann") == 1 and backend.verify("ann") == []
    assert store.holds("ann", first[0].text) and store.holds("ann", second[0].text)
    with pytest.raises(UnknownTurn, match="no turn 'D1:1'"):
        backend.erase_turn("ann", "D1:1")
    assert backend.generation("ann") == 1  # a refused erasure changes nothing
    erased = backend.erase_turn("ann", "D2:6")  # a turn of a session never organised since the first step
    assert erased.session == "D2" and backend.organised("ann") == set() and not store.holds("ann", second[1].text)


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
    assert len(backend.events("ann")) == 1
    backend.append("ann", TurnsEvent(turns=_turns("D1", 1, start=1)))
    assert [t.id for t in turns_in(backend.events("ann"))] == ["D1:0", "D1:1"]
