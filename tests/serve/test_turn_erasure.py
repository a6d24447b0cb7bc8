"""``DELETE /v1/users/{user}/turns/{id}`` on both stores: one turn erased, its session organised again without it,
no stored byte holding its words (Git history and every row included), its embeddings dropped, the other turns
served as before; and a turn erasure a crash interrupted, finished when the file store is next opened."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from evolve.benchmarks.synthetic import generate_synthetic
from evolve.runtime.cache import _text_key
from evolve.runtime.ingest import embedding_text
from evolve.serve.app import create_app
from evolve.serve.filestore import FileBackend
from evolve.serve.memory import MemoryService
from evolve.serve.records import TurnErased, turns_in
from evolve.serve.strategy import RuntimeParts, StrategySlot
from server_process import turns_of

MARKER = "Quillfeather"
CONVERSATION = next(iter(generate_synthetic(0, n_personas=1, n_sessions=5).conversations.values()))


def _turns() -> list[dict]:
    turns = turns_of(CONVERSATION, sessions=2)
    turns[1] = {**turns[1], "text": f"My grandmother's parrot is called {MARKER}, she taught it to sing."}
    return turns


def _stored_bytes(backend, data: Path) -> bytes:
    """Every byte stored for user ann: files and Git objects, or every row of the user's tables."""
    if isinstance(backend, FileBackend):
        folder = data / "users" / "ann"
        objects = subprocess.run(["git", "-C", str(folder), "cat-file", "--batch-all-objects", "--batch"],
                                 capture_output=True, check=True).stdout
        return objects + b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file() and ".git" not in p.parts)
    from evolve.serve.pgstore import _USER_TABLES

    with backend.pool.connection() as conn:
        return "".join(r[0] for table in _USER_TABLES
                       for r in conn.execute(f"SELECT t::text FROM {table} t WHERE user_id = 'ann'")).encode()


def _shard_keys(folder: Path) -> set[str]:
    return {k for shard in folder.glob("*.npz") for k in np.load(shard)["keys"].tolist()}


@pytest.fixture(params=["files", "postgres"])
def backend(request, tmp_path):
    if request.param == "files":
        yield FileBackend(tmp_path / "data")
        return
    pytest.importorskip("pgserver")
    from evolve.serve.pgstore import PostgresBackend

    database = PostgresBackend(request.getfixturevalue("pg_url"))
    yield database
    database.close()


def test_erasing_a_turn_leaves_no_word_of_it_and_organises_its_session_again(backend, tmp_path, serving, embedder):
    slot = StrategySlot(None, serving, RuntimeParts(embedder), allow_untracked=True)
    memory = MemoryService(backend, lambda: slot.current)
    client = TestClient(create_app(slot, memory))
    turns = _turns()
    gone, session = turns[1], turns[1]["session"]
    assert client.post("/v1/users/ann/turns", json={"turns": turns}).status_code == 201
    assert client.post("/v1/users/ann/close").status_code == 200
    assert memory.organise_pending() == 2
    question = {"question": "What is the name of the grandmother's parrot?"}
    before = client.post("/v1/users/ann/recall", json=question).json()["packed"]
    assert any(MARKER in p["text"] for p in before)
    assert MARKER.encode() in _stored_bytes(backend, tmp_path / "data")
    embeddings = backend.embeddings_dir("ann")
    marked = {_text_key(embedder.name, embedding_text(item)) for item in memory.store("ann", slot.current).items
              if MARKER in embedding_text(item)}

    embeddings_before = _shard_keys(embeddings) if embeddings is not None else set()
    reply = client.delete(f"/v1/users/ann/turns/{gone['id']}")
    assert reply.status_code == 200, reply.text
    assert TurnErased.model_validate(reply.json()["turn"]).model_dump(exclude={"erased_at"}) == {
        "turn": gone["id"], "session": session, "organised": True}
    assert MARKER.encode() not in _stored_bytes(backend, tmp_path / "data")
    assert memory.organise_pending() == 1  # its session's records, rollup and facts recomputed without it
    assert backend.organised("ann") == {t["session"] for t in turns} and backend.verify("ann") == []
    after = client.post("/v1/users/ann/recall", json=question).json()["packed"]
    assert after and not any(MARKER in p["text"] or gone["id"] in p["source_ids"] for p in after)
    assert [t.id for t in turns_in(backend.events("ann"))] == [t["id"] for t in turns if t is not gone]
    assert MARKER.encode() not in _stored_bytes(backend, tmp_path / "data")
    if embeddings is not None:  # the shards written since hold vectors of the remaining texts only
        keys = _shard_keys(embeddings)
        assert marked and marked <= embeddings_before and keys and not marked & keys

    missing = client.delete(f"/v1/users/ann/turns/{gone['id']}")
    assert missing.status_code == 404 and f"no turn {gone['id']!r}" in missing.json()["error"]["message"]
    assert client.delete("/v1/users/bo/turns/D1:1").status_code == 404  # an unknown user


def test_a_turn_erasure_a_crash_interrupted_is_finished_when_the_store_is_next_opened(tmp_path):
    backend = FileBackend(tmp_path / "data")
    from evolve.serve.records import TurnRecord, TurnsEvent

    backend.append("ann", TurnsEvent(turns=[TurnRecord(id=f"D1:{i}", speaker="Ann", text=f"{MARKER} {i}" if i else
                                                       "hello", session="D1") for i in range(2)]))
    noted = TurnErased(turn="D1:1", session="D1", erased_at="2026-01-01T00:00:00Z", organised=False)
    (tmp_path / "data/users/ann/erasing-turn.json").write_text(noted.to_json())  # what a crash after noting leaves
    assert MARKER.encode() in _stored_bytes(backend, tmp_path / "data")
    reopened = FileBackend(tmp_path / "data")
    assert [t.id for t in turns_in(reopened.events("ann"))] == ["D1:0"] and reopened.generation("ann") == 1
    assert MARKER.encode() not in _stored_bytes(reopened, tmp_path / "data")
    assert not (tmp_path / "data/users/ann/erasing-turn.json").exists()


def test_an_answer_logged_before_a_turn_erasure_is_erased_with_the_turn(backend, tmp_path, serving, embedder):
    """The recall log held the answer drawn from the turn (its words) and the turn among the packed ids: the
    erasure drops those recalls on both stores, so no stored byte holds the marker; other recalls stay."""
    slot = StrategySlot(None, serving, RuntimeParts(embedder), allow_untracked=True)
    memory = MemoryService(backend, lambda: slot.current)
    client = TestClient(create_app(slot, memory))
    turns = _turns()
    gone = turns[1]
    assert client.post("/v1/users/ann/turns", json={"turns": turns}).status_code == 201
    reply = client.post("/v1/users/ann/answer", json={"question": "What is the grandmother's parrot called?"})
    assert reply.status_code == 200 and any(gone["id"] in p["source_ids"] for p in reply.json()["packed"])
    other = client.post("/v1/users/ann/recall", json={"question": turns[0]["text"]}).json()["packed"]
    kept = not any(gone["id"] in p["source_ids"] for p in other)
    logged = backend.recalls("ann")
    assert any(r.packs({gone["id"]}) for r in logged)
    assert MARKER.encode() in _stored_bytes(backend, tmp_path / "data")

    assert client.delete(f"/v1/users/ann/turns/{gone['id']}").status_code == 200
    assert MARKER.encode() not in _stored_bytes(backend, tmp_path / "data")
    left = backend.recalls("ann")
    assert not any(r.packs({gone["id"]}) for r in left)
    assert len(left) == len(logged) - sum(r.packs({gone["id"]}) for r in logged) and (len(left) >= 1 or not kept)
