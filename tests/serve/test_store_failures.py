"""A store that cannot be written (a full disk, a read-only file system, a torn log tail) on a real small file
system: a refused write leaves every file as it was and answers 507 or 503 with the reason, reads keep working, and
no acknowledged turn is ever lost."""
from __future__ import annotations

import json
import subprocess

from evolve.serve.strategy import RuntimeParts
from service_fixtures import InProcess, fill, in_process


def _turns(start: int, n: int, session: str = "s1") -> list[dict]:
    return [{"id": f"t{i}", "speaker": "Ann", "session": session, "time": f"2024-05-{i % 28 + 1:02d}T09:00:00",
             "text": f"Entry {i}: " + "the allotment plan for beans, kale and leeks, row by row. " * 10}
            for i in range(start, start + n)]


def _capture(service: InProcess, user: str, turns: list[dict]):
    return service.client.post(f"/v1/users/{user}/turns", json={"turns": turns})


def test_a_full_disk_refuses_captures_with_507_and_loses_no_acknowledged_turn(small_fs, serving, embedder):
    service = in_process(small_fs / "data", serving, RuntimeParts(embedder))
    assert _capture(service, "ann", _turns(0, 4)).status_code == 201
    log = service.data / "users/ann/capture.jsonl"
    before = log.read_bytes()
    filler = fill(small_fs)
    for n in range(3):  # 4 x 560-character turns per request, as a client retrying would send them
        refused = _capture(service, "ann", _turns(4 + 4 * n, 4))
        assert refused.status_code == 507, refused.text
        assert "disk full" in refused.json()["error"]["message"]
        assert log.read_bytes() == before  # no half line left behind
    new_user = _capture(service, "bob", _turns(0, 1))
    assert new_user.status_code in (503, 507), new_user.text
    assert not (service.data / "users/bob").exists()  # a refused first capture registers nobody
    assert service.client.post("/v1/users/bob/recall", json={"question": "beans?"}).status_code == 404
    recall = service.client.post("/v1/users/ann/recall", json={"question": "Which rows hold beans?"})
    assert recall.status_code == 200 and recall.json()["packed"]  # reads keep working on a full disk

    filler.unlink()
    acknowledged = [f"t{i}" for i in range(4)]
    for n in range(5):
        turns = _turns(100 + 4 * n, 4)
        assert _capture(service, "ann", turns).status_code == 201
        acknowledged += [t["id"] for t in turns]
    restarted = service.restarted()  # the log reads back whole: every acknowledged turn, each once
    assert restarted.memory.quarantined == {}
    held = [t["id"] for line in log.read_text().splitlines() for t in json.loads(line)["turns"]]
    assert held == acknowledged and restarted.memory.turn_count("ann") == len(acknowledged)


def test_a_read_only_store_answers_503_for_writes_and_keeps_serving_reads(small_fs, serving, embedder):
    service = in_process(small_fs / "data", serving, RuntimeParts(embedder))
    assert _capture(service, "ann", _turns(0, 3)).status_code == 201
    snapshot = {p: p.read_bytes() for p in service.data.rglob("*") if p.is_file()}
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    client = service.client
    for reply in (_capture(service, "ann", _turns(3, 1)), client.post("/v1/users/ann/close"),
                  client.delete("/v1/users/ann"), _capture(service, "cy", _turns(0, 1))):
        assert reply.status_code == 503, reply.text
        assert "read-only file system" in reply.json()["error"]["message"]
    recall = client.post("/v1/users/ann/recall", json={"question": "Which rows hold beans?"})
    assert recall.status_code == 200 and recall.json()["packed"]
    assert service.memory.recall_log_failures == 1  # the log line failed after the reply, counted, not raised
    assert "memevolve_recall_log_failures 1" in client.get("/metrics").text
    assert client.post("/v1/users/cy/recall", json={"question": "beans?"}).status_code == 404
    assert sorted(service.memory.loaded()) == ["ann"]
    assert {p: p.read_bytes() for p in service.data.rglob("*") if p.is_file()} == snapshot


def test_a_torn_recall_log_line_is_dropped_before_the_next_append(service):
    assert _capture(service, "ann", _turns(0, 2)).status_code == 201
    assert service.client.post("/v1/users/ann/recall", json={"question": "beans?"}).status_code == 200
    log = service.data / "users/ann/recalls.jsonl"
    with open(log, "ab") as fh:
        fh.write(b'{"user": "ann", "question": "be')  # a machine crash cut the last, unsynced line
    assert service.client.post("/v1/users/ann/recall", json={"question": "kale?"}).status_code == 200
    assert [r.question for r in service.memory.backend.recalls("ann")] == ["beans?", "kale?"]


def test_a_corrupt_tombstone_still_answers_404(service):
    assert _capture(service, "ann", _turns(0, 1)).status_code == 201
    assert service.client.delete("/v1/users/ann").status_code == 200
    stone = next((service.data / "tombstones").glob("*.json"))
    stone.write_text("{not json")
    reply = service.client.post("/v1/users/ann/recall", json={"question": "beans?"})
    assert reply.status_code == 404 and "tombstone is unreadable" in reply.json()["error"]["message"]
