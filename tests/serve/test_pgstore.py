"""The shared PostgreSQL store (a real server: pgserver's self-contained PostgreSQL): the same packed
contexts as the file store for the same captures, two service processes sharing memory, 503 while the database is
down and recovery when it is back."""
from __future__ import annotations

from pathlib import Path

import json

import httpx
import pytest
from fastapi.testclient import TestClient

from evolve.benchmarks.synthetic import generate_synthetic
from evolve.data import BASELINE_PATH
from evolve.serve.app import create_app
from evolve.serve.filestore import FileBackend
from evolve.serve.memory import MemoryService
from evolve.serve.tenants import UnknownUser
from evolve.serve.records import turns_in
from evolve.serve.replay import replay, stored_recalls
from evolve.serve.strategy import RuntimeParts, StrategySlot
from server_process import ServeProcess, turns_of
from workflow_fixtures import cli

pgserver = pytest.importorskip("pgserver")
from evolve.serve.pgstore import PostgresBackend  # noqa: E402  (needs the postgres extra)

BENCH = generate_synthetic(1, n_personas=1, n_sessions=5)
CONVERSATION = next(iter(BENCH.conversations.values()))
QUESTIONS = [q for q in BENCH.questions if q.conversation_id == CONVERSATION.id][:8]
SESSIONS = 2


@pytest.fixture(scope="module")
def serving(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("serving") / "serving.yaml"
    path.write_bytes(BASELINE_PATH.read_bytes())
    return path


def _packed(client: TestClient, user: str) -> list:
    out = []
    for q in QUESTIONS:
        reply = client.post(f"/v1/users/{user}/recall", json={"question": q.question, "asked_at": None})
        assert reply.status_code == 200, reply.text
        out.append([(p["id"], p["text"], p["source_ids"]) for p in reply.json()["packed"]])
    return out


def test_postgres_packs_what_the_file_store_packs(capsys, postgres, serving, embedder, tmp_path):
    slot = StrategySlot(None, serving, RuntimeParts(embedder), allow_untracked=True)
    database = PostgresBackend(postgres[0].get_uri())
    contexts, services = [], []
    for backend in (FileBackend(tmp_path / "data"), database):
        memory = MemoryService(backend, lambda: slot.current)
        with TestClient(create_app(slot, memory)) as client:
            for turn in turns_of(CONVERSATION, sessions=SESSIONS):
                assert client.post("/v1/users/ann/turns", json={"turns": [turn]}).status_code == 201
            assert client.post("/v1/users/ann/close").status_code == 200
            assert memory.organise_pending() == SESSIONS
            contexts.append(_packed(client, "ann"))
        services.append(memory)
    assert contexts[0] == contexts[1] and any(contexts[0])
    assert database.organised("ann") == {s.id for s in CONVERSATION.sessions[:SESSIONS]}
    assert database.verify("ann") == [] and len(database.recalls("ann")) == len(QUESTIONS)
    with database.pool.connection() as conn:  # the organised facts, as the file store's memory.yaml holds them
        facts = conn.execute("SELECT count(*) FROM mem_facts WHERE user_id = 'ann'").fetchone()[0]
    assert facts > 0
    same = replay(stored_recalls(database), database, slot.current, slot.current)  # replay reads the database
    assert same.n == len(QUESTIONS) and same.overlap["identical"] == 1.0 and same.verdict == "no_difference"
    assert same.reproduced["serving_reproduced"] == {"checked": len(QUESTIONS), "equal": len(QUESTIONS)}
    exports = []
    for data in (tmp_path / "data", postgres[0].get_uri()):  # capture-export reads either store alike
        code, out = cli(capsys, "capture-export", "--data", data, "--out", tmp_path / "bench.json")
        assert code == 0, out
        exports.append(json.loads((tmp_path / "bench.json").read_text()))
    assert exports[0] == exports[1] and len(exports[0][0]["unanswered"]) == len({q.question for q in QUESTIONS})
    database.close()


def test_two_replicas_share_memory_and_answer_503_while_postgres_is_down(postgres, serving, tmp_path):
    server, folder = postgres
    url = server.get_uri()
    turns = turns_of(CONVERSATION, sessions=1)[:12]
    with ServeProcess(tmp_path / "a", serving, None, "--allow-untracked", "--store", url) as a, \
            ServeProcess(tmp_path / "b", serving, None, "--allow-untracked", "--store", url) as b:
        for i, turn in enumerate(turns):  # captures alternate between the replicas
            reply = httpx.post(f"{(a, b)[i % 2].url}/v1/users/bo/turns", json={"turns": [turn]}, timeout=60)
            assert reply.status_code == 201, reply.text
        assert reply.json()["turns"] == len(turns)  # the last replica saw every capture of the other
        again = httpx.post(f"{a.url}/v1/users/bo/turns", json={"turns": [turns[-1]]}, timeout=60)
        assert again.status_code == 409 and "already captured" in again.json()["error"]["message"]
        question = {"question": QUESTIONS[0].question}
        seen = [httpx.post(f"{r.url}/v1/users/bo/recall", json=question, timeout=60).json()["packed"] for r in (a, b)]
        assert seen[0] == seen[1] and seen[0]

        server.cleanup()  # PostgreSQL stops under the service
        down = httpx.post(f"{a.url}/v1/users/bo/recall", json=question, timeout=60)
        assert down.status_code == 503 and "memory store" in down.json()["error"]["message"]
        capture = httpx.post(f"{b.url}/v1/users/bo/turns", json={"turns": [{**turns[-1], "id": "late"}]}, timeout=60)
        assert capture.status_code == 503
        restarted = pgserver.get_server(folder, cleanup_mode="stop")
        assert restarted.get_uri() == url
        back = httpx.post(f"{a.url}/v1/users/bo/recall", json=question, timeout=60)
        assert back.status_code == 200 and back.json()["packed"] == seen[0]

        assert httpx.delete(f"{b.url}/v1/users/bo", timeout=60).status_code == 200  # erased through one replica
        gone = httpx.post(f"{a.url}/v1/users/bo/recall", json=question, timeout=60)
        assert gone.status_code == 404 and "erased at" in gone.json()["error"]["message"]


def test_replicas_extend_one_audit_chain_and_verify_names_an_edited_row(postgres, capsys):
    from evolve.cli.main import main
    from evolve.serve.audit import AuditEvent, PgAudit

    url = postgres[0].get_uri()
    first, second = PostgresBackend(url), PostgresBackend(url)
    try:
        audits = [PgAudit(first), PgAudit(second)]
        start = len(audits[0].entries())
        for i in range(4):  # the two replicas in turn
            audits[i % 2].record("RECALL", AuditEvent(key="0123456789ab", ids=[f"D1:{i}"], counts={"packed": i}))
        assert [e["index"] for e in audits[1].entries()][start:] == list(range(start, start + 4))
        assert main(["audit", "verify", "--store", url]) == 0
        edited = start + 2
        line = first.run(lambda c: c.execute("SELECT line FROM mem_audit WHERE index = %s", (edited,)).fetchone()[0])
        try:
            first.run(lambda c: c.execute("UPDATE mem_audit SET line = %s WHERE index = %s",
                                          (line.replace('"packed":2', '"packed":9'), edited)))
            assert main(["audit", "verify", "--store", url]) == 1
            assert capsys.readouterr().out.splitlines()[-1].startswith(f"verification failed at entry {edited}: ")
        finally:
            first.run(lambda c: c.execute("UPDATE mem_audit SET line = %s WHERE index = %s", (line, edited)))
        assert audits[0].verify().ok
    finally:
        first.close()
        second.close()


def test_a_retention_purge_rewrites_the_users_rows(postgres, serving, embedder):
    from datetime import datetime, timedelta, timezone

    backend = PostgresBackend(postgres[0].get_uri())
    try:
        slot = StrategySlot(None, serving, RuntimeParts(embedder), allow_untracked=True)
        memory = MemoryService(backend, lambda: slot.current)
        turns = turns_of(CONVERSATION, 2)
        first = [t for t in turns if t["session"] == turns[0]["session"]]
        memory.capture("purged-pg", first, retain_until=datetime.now(timezone.utc) - timedelta(seconds=1))
        memory.capture("purged-pg", [t for t in turns if t not in first])
        assert memory.purge_expired(lambda *_: None) == len(first)
        kept = [t.id for t in turns_in(backend.events("purged-pg"))]
        assert kept == [t["id"] for t in turns if t not in first] and backend.verify("purged-pg") == []
        memory.organise_pending()
        assert backend.organised("purged-pg") == set()  # the open session is organised when it closes
    finally:
        backend.close()


def _turn(n: int, text: str) -> dict:
    return {"id": f"t{n}", "speaker": "Ann", "text": text, "session": "S1", "time": None}


def test_a_reused_user_id_never_revives_erased_turns_on_another_replica(pg_url, serving, embedder):
    """The race: replica B has loaded ann; ann is erased through replica A and captured again, past the old event
    count, before B looks; B's next recall must hold only the new turns."""
    slot = StrategySlot(None, serving, RuntimeParts(embedder), allow_untracked=True)
    a, b = (MemoryService(PostgresBackend(pg_url), lambda: slot.current) for _ in range(2))
    for n in range(2):
        a.capture("ann", [_turn(n, f"My secret word is Zanzibarine number {n}.")])
    held = b.store("ann", slot.current).turns.values()
    assert [t.text for t in held] == [f"My secret word is Zanzibarine number {n}." for n in range(2)]
    a.erase("ann")
    for n in range(3):  # three capture events: more than the two B has seen
        a.capture("ann", [_turn(10 + n, f"I like tea, cup {n}.")])
    seen = b.store("ann", slot.current)
    assert [t.text for t in seen.turns.values()] == [f"I like tea, cup {n}." for n in range(3)]
    assert not any("Zanzibarine" in item.text for item in seen.items)
    assert b.turn_count("ann") == 3
    a.erase("ann")  # erased again, not captured since: B answers that the user is unknown
    with pytest.raises(UnknownUser):
        b.store("ann", slot.current)
    for service in (a, b):
        service.backend.close()


def test_a_purge_through_one_replica_reaches_the_others_memory(pg_url, serving, embedder):
    """Replica B has loaded ann; replica A purges ann's expired turns and ann captures again through A; B's next
    recall holds neither the purged turns nor a stale log (the purge advanced the user's generation)."""
    from datetime import datetime, timedelta, timezone

    slot = StrategySlot(None, serving, RuntimeParts(embedder), allow_untracked=True)
    a, b = (MemoryService(PostgresBackend(pg_url), lambda: slot.current) for _ in range(2))
    try:
        a.capture("ann", [_turn(0, "My secret word is Zanzibarine.")],
                  retain_until=datetime.now(timezone.utc) - timedelta(seconds=1))
        a.capture("ann", [_turn(1, "I like tea.")])
        assert b.turn_count("ann") == 2
        assert a.purge_expired(lambda *_: None) == 1
        a.capture("ann", [_turn(2, "I like coffee too.")])  # the log grows back past what B has seen
        seen = b.store("ann", slot.current)
        assert [t.text for t in seen.turns.values()] == ["I like tea.", "I like coffee too."]
        assert not any("Zanzibarine" in item.text for item in seen.items)
    finally:
        for service in (a, b):
            service.backend.close()
