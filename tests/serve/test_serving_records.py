"""The serving records are models defined once, and what the service stored before them reads back and re-serialises
to the same bytes (no migration): the capture log, the recall log and the tombstone of
``tests/fixtures/serve_records`` were written by the service before its records were typed (plus two hand-made
records of the same shape: an empty context with its shadow, a tombstone of an unreadable log)."""
from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from evolve.benchmarks.types import Turn
from evolve.files import dumps_json
from evolve.runtime.store import MemoryStore
from evolve.runtime.live import LiveConversation
from evolve.serve.filestore import FileBackend, read_record
from evolve.serve.capturelog import apply_events
from evolve.serve.records import (CloseEvent, RecallRecord, RecordError, Tombstone, TurnMeta, TurnRecord,
                                  TurnsEvent, context_overlap, load_record, read_event)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "serve_records"
LINES = {name: (FIXTURES / name).read_bytes().splitlines(keepends=True) for name in ("capture.jsonl", "recalls.jsonl")}
TOMBSTONES = [FIXTURES / "tombstone.json", FIXTURES / "tombstone_unreadable.json"]
ORGANISED = sorted(FIXTURES.glob("record-*.md"))  # an organised session's Markdown records
TURNS = [Turn("D1:1", "Ann", "I moved to Lisbon — café on every corner.", "D1", datetime(2023, 5, 8, 13, 56)),
         Turn("D1:2", "yes", "Nice!\nSend a photo.", "D1", None)]  # the turns those records hold


def _files(tmp_path: Path) -> FileBackend:
    """A file store holding the fixture's user ``ann`` and its tombstones."""
    backend = FileBackend(tmp_path / "data")
    folder = tmp_path / "data" / "users" / "ann"
    folder.mkdir()
    for name in LINES:
        shutil.copyfile(FIXTURES / name, folder / name)
    for path in TOMBSTONES:
        stone = json.loads(path.read_text())
        shutil.copyfile(path, tmp_path / "data" / "tombstones" / f"{stone['user_sha256']}.json")
    return backend


def test_the_file_store_reads_todays_records_and_writes_them_back_byte_for_byte(tmp_path):
    backend = _files(tmp_path)
    events = backend.events("ann")
    assert [type(e) for e in events] == [TurnsEvent, TurnsEvent, CloseEvent, TurnsEvent]
    assert events[0].turns[1].time is None and events[2].close == "D1"
    assert [(e.to_json() + "\n").encode() for e in events] == LINES["capture.jsonl"]
    recalls = backend.recalls("ann")
    assert [r.answer is not None for r in recalls] == [False, True, False, False, False]
    assert [r.shadow is not None for r in recalls] == [False, False, True, True, True]
    assert [(r.to_json() + "\n").encode() for r in recalls] == LINES["recalls.jsonl"]
    stone = backend.tombstone("ann")
    assert stone.turns_erased == 4
    assert dumps_json(stone.stored(), "t").encode() == TOMBSTONES[0].read_bytes()
    unreadable = load_record(Tombstone, json.loads(TOMBSTONES[1].read_text()), "t")
    assert unreadable.turns_erased is None and dumps_json(unreadable.stored(), "t").encode() == \
        TOMBSTONES[1].read_bytes()


def test_the_file_store_appends_the_same_bytes_as_before(tmp_path):
    """Events and recalls written by the store now equal the fixture's lines (the append time aside)."""
    backend = FileBackend(tmp_path / "data")
    old = [json.loads(line) for line in LINES["capture.jsonl"]]
    for raw in old:
        backend.append("bo", read_event({k: v for k, v in raw.items() if k != "at"}, "fixture"))
    for raw in LINES["recalls.jsonl"]:
        backend.log_recall("bo", load_record(RecallRecord, json.loads(raw), "fixture"))
    written = (tmp_path / "data/users/bo/capture.jsonl").read_bytes().splitlines(keepends=True)
    for line, before, raw in zip(written, LINES["capture.jsonl"], old, strict=True):
        assert line.replace(json.loads(line)["at"].encode(), raw["at"].encode()) == before
    assert (tmp_path / "data/users/bo/recalls.jsonl").read_bytes().splitlines(keepends=True) == LINES["recalls.jsonl"]


def test_the_postgres_store_reads_todays_rows_and_writes_the_same_json(pg_url):
    """Rows as the store wrote them before (``Jsonb`` of the dicts) read back as models whose JSON is the fixture's
    line; rows the store writes now hold equal ``jsonb`` (its text compared)."""
    import psycopg
    from psycopg.types.json import Jsonb

    from evolve.serve.pgstore import PostgresBackend

    backend = PostgresBackend(pg_url)
    try:
        old_events = [json.loads(line) for line in LINES["capture.jsonl"]]
        old_recalls = [json.loads(line) for line in LINES["recalls.jsonl"]]
        stone = json.loads(TOMBSTONES[0].read_text())
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("INSERT INTO mem_users (user_id) VALUES ('ann')")
            for seq, event in enumerate(old_events, 1):
                conn.execute("INSERT INTO mem_events VALUES ('ann', %s, %s)", (seq, Jsonb(event)))
            for record in old_recalls:
                conn.execute("INSERT INTO mem_recalls (user_id, record) VALUES ('ann', %s)", (Jsonb(record),))
            conn.execute("INSERT INTO mem_tombstones VALUES (%s, %s)", (backend.names.of("gone"), Jsonb(stone)))
        events, recalls = backend.events("ann"), backend.recalls("ann")
        assert [(e.to_json() + "\n").encode() for e in events] == LINES["capture.jsonl"]
        assert [(r.to_json() + "\n").encode() for r in recalls] == LINES["recalls.jsonl"]
        assert dumps_json(backend.tombstone("gone").stored(), "t").encode() == TOMBSTONES[0].read_bytes()
        assert backend.events("ann", since=2) == events[2:] and backend.generation("ann") == 0

        for event in events:
            backend.append("bo", event.model_copy(update={"at": None}))
        for record in recalls:
            backend.log_recall("bo", record)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            def rows(sql: str, user: str) -> list[str]:
                return [r[0] for r in conn.execute(sql, (user,))]

            events_sql = "SELECT (event - 'at')::text FROM mem_events WHERE user_id = %s ORDER BY seq"
            recalls_sql = "SELECT record::text FROM mem_recalls WHERE user_id = %s ORDER BY seq"
            assert rows(events_sql, "bo") == rows(events_sql, "ann")
            assert rows(recalls_sql, "bo") == rows(recalls_sql, "ann")
            same = conn.execute("SELECT %s::jsonb = tombstone FROM mem_tombstones WHERE user_sha256 = %s",
                                (Jsonb(backend.tombstone("gone").stored()), backend.names.of("gone"))).fetchone()[0]
            assert same
    finally:
        backend.close()


def _organised(backend) -> None:
    backend.append("ann", TurnsEvent(turns=[TurnRecord(id=t.id, speaker=t.speaker, text=t.text, session="D1",
                                                       time=t.timestamp.isoformat() if t.timestamp else None)
                                            for t in TURNS]))
    backend.organise("ann", "D1", TURNS, MemoryStore("ann", [], TURNS, np.zeros((0, 4)), "none"), "h" * 64)


def test_organised_records_are_written_as_before_and_read_as_turn_meta(tmp_path):
    backend = FileBackend(tmp_path / "data")
    _organised(backend)
    written = sorted((tmp_path / "data/users/ann/records/D1").glob("*.md"))
    assert [p.read_bytes() for p in written] == [p.read_bytes() for p in ORGANISED]
    metas = [load_record(TurnMeta, read_record(p)[0], str(p)) for p in ORGANISED]
    assert metas == [TurnMeta.of(t, "D1") for t in TURNS] and metas[1].speaker == "yes" and metas[1].time is None
    assert backend.verify("ann") == []


def test_postgres_keeps_the_same_turn_meta(pg_url):
    from evolve.serve.pgstore import PostgresBackend

    backend = PostgresBackend(pg_url)
    try:
        _organised(backend)
        with backend.pool.connection() as conn:
            stored = [r[0] for r in conn.execute("SELECT meta FROM mem_records WHERE user_id = 'ann' ORDER BY n")]
        assert stored == [read_record(p)[0] for p in ORGANISED] and backend.verify("ann") == []
    finally:
        backend.close()


@pytest.mark.parametrize("raw, words", [
    ({"turns": [{"id": "b1", "text": "secret words", "session": "s1"}]}, "TurnsEvent field turns.0.speaker: Field "
                                                                        "required"),
    ({"close": 3}, "CloseEvent field close: Input should be a valid string"),
    ({"turns": [], "colour": "blue"}, "TurnsEvent field colour: Extra inputs are not permitted"),
    ({"turns": [], "purpose": "a b"}, "TurnsEvent field purpose: String should match pattern "
                                      "'^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$'"),
    ({"turns": [], "retain_until": "soon"}, "TurnsEvent field retain_until: Input should be a valid datetime or "
                                            "date, input is too short"),
])
def test_a_record_of_another_shape_is_refused_naming_where_and_the_field_not_the_text(raw, words):
    with pytest.raises(RecordError) as caught:
        read_event(raw, "capture.jsonl: line 3")
    assert str(caught.value) == f"capture.jsonl: line 3: {words}" and "secret" not in str(caught.value)


def test_a_captures_purpose_and_retention_are_stored_only_when_set_and_read_back(tmp_path):
    """Both fields join the stored line only when a capture names them (a line without them keeps its bytes, as the
    fixture tests above pin); a ``retain_until`` without a zone is taken as UTC; a turn's expiry is the sooner of
    ``retain_until`` and its capture time plus the retention."""
    backend = FileBackend(tmp_path / "data")
    turns = [TurnRecord(id="D1:1", speaker="Ann", text="Bees.", session="D1")]
    backend.append("ann", TurnsEvent(turns=turns))
    backend.append("ann", TurnsEvent(turns=turns, purpose="support", retain_until=datetime(2030, 1, 2, 3, 4)))
    plain, bound = (json.loads(line) for line in (tmp_path / "data/users/ann/capture.jsonl").read_text().splitlines())
    assert set(plain) == {"at", "turns"}
    assert bound["purpose"] == "support" and bound["retain_until"] == "2030-01-02T03:04:00Z"
    first, second = backend.events("ann")
    assert first.purpose is None and first.expires(None) is None
    assert second.retain_until == datetime(2030, 1, 2, 3, 4, tzinfo=timezone.utc)
    assert second.expires(None) == second.retain_until and second.expires(timedelta(days=1)) < second.retain_until
    assert first.expires(timedelta(days=1)) == datetime.fromisoformat(first.at) + timedelta(days=1)


def test_one_function_applies_capture_events_and_names_the_one_refused(tmp_path):
    events = _files(tmp_path).events("ann")
    live = LiveConversation("ann")
    assert apply_events(live, events[:3]) == ["D1"]  # the close event closes D1
    assert apply_events(live, events[3:], 4) == [] and live.open_session == "D2" and len(live) == 4
    again = LiveConversation("ann")
    assert apply_events(again, [events[3], events[0]]) == ["D2"]  # a new session closes the open one
    with pytest.raises(ValueError, match="^capture log event 7: "):  # a turn id captured twice
        apply_events(again, events[:1], 7)


@pytest.mark.parametrize("served, other, overlap", [
    ([], [], 1.0),  # two empty contexts are the same context
    ([], ["L0:1"], 0.0), (["L0:1"], [], 0.0),
    (["L0:1", "L0:2"], ["L0:2", "L1:0"], 1 / 3),
    (["L0:1", "L0:2"], ["L0:2", "L0:1"], 1.0),  # order does not matter
])
def test_context_overlap_is_one_jaccard_index(served, other, overlap):
    """The shadow part's ``overlap`` and replay's overlaps: one formula (the service scored two empty contexts 0)."""
    assert context_overlap(served, other) == pytest.approx(overlap)


def test_the_service_counts_words_as_a_trace_counts_context_tokens(service):
    """One size, one formula: a recall's ``words`` (each item's and the context's) are the trace's token counts."""
    turns = [{"id": f"D1:{i}", "speaker": "Ann", "text": f"My locker code is {i}{i}{i}, the gym opens at nine.",
              "session": "D1"} for i in range(4)]
    assert service.client.post("/v1/users/ann/turns", json={"turns": turns}).status_code == 201
    question = "What is the locker code?"
    reply = service.client.post("/v1/users/ann/recall", json={"question": question}).json()
    loaded = service.slot.current
    trace = loaded.runtime.ask(service.memory.store("ann", loaded), question, None, answer=False).to_trace()
    assert reply["words"] == trace["context_tokens"] > 0
    assert [p["words"] for p in reply["packed"]] == [p["tokens"] for p in trace["packed"]]
