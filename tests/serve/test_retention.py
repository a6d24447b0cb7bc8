"""Retention: turns past their ``retain_until`` (or ``--retention-days``) are purged by an audited background step,
with what was derived from them (organised records and their Git history, embeddings, recall-log lines), and what is
kept is organised again."""
from __future__ import annotations

import subprocess
import time
from datetime import datetime, timedelta, timezone

from fastapi.testclient import TestClient

from evolve.serve.pseudonym import Pseudonyms
from evolve.serve.filestore import FileBackend
from evolve.serve.memory import MemoryService
from evolve.serve.server import ServeConfig, Service

MARKER = "Zanzibarquetzal"


def _turns(session: str, n: int, text: str) -> list[dict]:
    return [{"id": f"{session}:{i}", "speaker": "Ann", "text": f"{text} note {i}.", "session": session,
             "time": f"2023-05-0{1 + int(session[1])}T10:0{i}:00"} for i in range(n)]


def _everything_under(folder) -> bytes:
    """Every file's bytes under ``folder`` and every object of the Git repositories there, uncompressed."""
    out = b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())
    for git in folder.rglob(".git"):
        out += subprocess.run(["git", "-C", str(git.parent), "cat-file", "--batch-all-objects", "--batch"],
                              capture_output=True).stdout
    return out


def test_expired_turns_are_purged_audited_and_their_derived_state_rebuilt(tmp_path, serving):
    service = Service(ServeConfig(tmp_path / "data", serving, None, allow_untracked=True, reload_seconds=3600.0))
    client = TestClient(service.app)
    soon = datetime.now(timezone.utc) + timedelta(seconds=1.5)
    assert client.post("/v1/users/ann/turns", json={"turns": _turns("D1", 3, f"My code word is {MARKER}"),
                                                    "retain_until": soon.isoformat()}).status_code == 201
    assert client.post("/v1/users/ann/turns", json={"turns": _turns("D2", 2, "I keep bees")}).status_code == 201
    client.post("/v1/users/ann/close")
    service.memory.organise_pending()
    assert client.post("/v1/users/ann/recall", json={"question": f"What is {MARKER}?"}).status_code == 200
    assert MARKER.encode() in _everything_under(tmp_path / "data" / "users")
    time.sleep(max(0.0, (soon - datetime.now(timezone.utc)).total_seconds()) + 0.05)
    service.housekeeping()
    service.memory.organise_pending()
    assert MARKER.encode() not in _everything_under(tmp_path / "data" / "users")
    purge = [e for e in service.access.audit.entries() if e["type"] == "PURGE"]
    assert [p["payload"]["ids"] for p in purge] == [["D1:0", "D1:1", "D1:2"]]
    assert purge[0]["payload"]["user"] == Pseudonyms().of("ann") and purge[0]["payload"]["counts"] == {"turns": 3}
    packed = client.post("/v1/users/ann/recall", json={"question": "What do I keep?"}).json()["packed"]
    assert packed and all(s.startswith("D2:") for p in packed for s in p["source_ids"])
    backend = FileBackend(tmp_path / "data")
    assert backend.organised("ann") == {"D2"} and backend.verify("ann") == []
    assert service.memory.purge_expired(lambda *_: None) == 0  # nothing left to purge
    assert service.access.audit.verify().ok


def test_retention_days_purge_a_user_whole_into_a_tombstone(tmp_path, serving):
    from evolve.serve.strategy import StrategySlot, RuntimeParts
    from evolve.runtime import default_embedder

    slot = StrategySlot(None, serving, RuntimeParts(default_embedder()), allow_untracked=True)
    memory = MemoryService(FileBackend(tmp_path / "data"), lambda: slot.current, retention=timedelta(days=30))
    memory.capture("bo", _turns("D1", 2, "I like tea"))
    purged: list = []
    assert memory.purge_expired(lambda user, ids: purged.append((user, ids))) == 0  # not yet
    later = datetime.now(timezone.utc) + timedelta(days=31)
    assert memory.purge_expired(lambda user, ids: purged.append((user, ids)), now=later) == 2
    assert purged == [("bo", ["D1:0", "D1:1"])]
    assert not memory.backend.exists("bo") and memory.backend.tombstone("bo").turns_erased == 2


def test_a_capture_already_past_its_retention_is_refused_and_nothing_is_stored(tmp_path, serving):
    service = Service(ServeConfig(tmp_path / "data", serving, None, allow_untracked=True, reload_seconds=3600.0))
    client = TestClient(service.app)
    for past in ("2020-01-01T00:00:00Z", 1, (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()):
        reply = client.post("/v1/users/ann/turns", json={"turns": _turns("D1", 1, f"My code word is {MARKER}"),
                                                         "retain_until": past})
        assert reply.status_code == 422 and "has already passed" in reply.text, reply.text
    assert not FileBackend(tmp_path / "data").exists("ann")
    assert MARKER.encode() not in _everything_under(tmp_path / "data")
    service.stop()
