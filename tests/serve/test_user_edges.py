"""One user's edge cases never reach another user nor undo an erasure: an erasure during a background build or a
shadow recall, zoned and naive times, turns without an indexable word, a corrupt, foreign or truncated capture log
(quarantined: 503 for that user, named in /healthz, the others served), the organisation queue while a step runs,
a serving file replaced by a symlink loop."""
from __future__ import annotations

import os
import threading
from typing import Callable

from evolve.serve.strategy import RuntimeParts, load_serving
from service_fixtures import InProcess, in_process


class Paused:
    """The real embedder; its first call of more than ``above`` texts (a user's build) or of any text (``above=0``)
    runs ``then`` and waits until :attr:`go` is set (another request arriving mid-build)."""

    def __init__(self, inner, above: int = 8, then: Callable[[], None] | None = None, wait: bool = True):
        self.inner, self.name, self.above, self.then, self.wait = inner, inner.name, above, then, wait
        self.entered, self.go = threading.Event(), threading.Event()

    @property
    def dim(self) -> int:
        return self.inner.dim

    def encode(self, texts):
        if len(texts) > self.above and not self.entered.is_set():
            self.entered.set()
            if self.then is not None:
                self.then()
            if self.wait:
                self.go.wait(60)
        return self.inner.encode(texts)


def _turns(n: int, session: str = "s1", start: int = 0) -> list[dict]:
    return [{"id": f"{session}-{i}", "speaker": "Ann", "session": session, "time": f"2024-05-{i % 28 + 1:02d}T09:00:00",
             "text": f"Note {i}: the {('north', 'south', 'east', 'west')[i % 4]} bed gets {i} rows of beans."}
            for i in range(start, start + n)]


def _recall(service: InProcess, user: str, question: str = "How many rows of beans?"):
    return service.client.post(f"/v1/users/{user}/recall", json={"question": question})


def _in_thread(work: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_an_erasure_during_the_background_build_is_not_undone(tmp_path, serving, embedder):
    paused = Paused(embedder)
    service = in_process(tmp_path / "data", serving, RuntimeParts(paused))
    service.memory.capture("ann", _turns(40))
    builder = _in_thread(lambda: service.memory.warm_captured(lambda user: service.slot.current, quiet=0,
                                                              timeout=0.01))
    assert paused.entered.wait(60)  # the build is embedding the new turns
    assert service.client.delete("/v1/users/ann").status_code == 200
    paused.go.set()
    builder.join(60)
    assert not builder.is_alive()
    assert not (service.data / "users/ann").exists()  # the build wrote no embedding shard into an erased folder
    assert _recall(service, "ann").status_code == 404
    assert service.restarted().memory.loaded() == []


def test_an_erasure_during_a_shadow_recall_drops_the_log_line_quietly(service, serving, embedder):
    assert service.client.post("/v1/users/ann/turns", json={"turns": _turns(6)}).status_code == 201
    erase = Paused(embedder, above=0, then=lambda: service.memory.erase("ann"), wait=False)
    service.slot.shadow = load_serving(None, serving, RuntimeParts(erase), allow_untracked=True)
    reply = _recall(service, "ann")  # the shadow's question embedding runs after the reply; the user is erased then
    assert reply.status_code == 200 and erase.entered.is_set()
    assert not (service.data / "users/ann").exists() and _recall(service, "ann").status_code == 404
    assert service.memory.recall_log_failures == 0


def test_zoned_and_naive_turn_times_of_one_user_recall(service):
    turns = _turns(2)
    turns[0]["time"] = "2024-05-01T09:00:00+02:00"
    assert service.client.post("/v1/users/ann/turns", json={"turns": turns}).status_code == 201
    for asked_at in (None, "2024-05-03T10:00:00Z", "2024-05-03T10:00:00"):
        reply = service.client.post("/v1/users/ann/recall", json={"question": "Which bed?", "asked_at": asked_at})
        assert reply.status_code == 200, reply.text
    line = (service.data / "users/ann/capture.jsonl").read_text()
    assert '"time":"2024-05-01T07:00:00"' in line  # kept as naive UTC


def test_turns_without_an_indexable_word_recall(service):
    turns = [{"id": f"q{i}", "speaker": "A", "session": "s1", "text": text} for i, text in enumerate(("ok", "?!..."))]
    assert service.client.post("/v1/users/ann/turns", json={"turns": turns}).status_code == 201
    reply = _recall(service, "ann", "what?")
    assert reply.status_code == 200, reply.text
    assert {p["source_ids"][0] for p in reply.json()["packed"]} <= {"q0", "q1"}


def _stored_user(service: InProcess, user: str, log: bytes) -> None:
    folder = service.data / "users" / user
    folder.mkdir(parents=True)
    (folder / "capture.jsonl").write_bytes(log)


def test_a_users_corrupt_capture_log_quarantines_that_user_only(service):
    assert service.client.post("/v1/users/ann/turns", json={"turns": _turns(3)}).status_code == 201
    _stored_user(service, "bob", b'{"turns": [{"id": "b1", "text": "hello", "session": "s1"}]}\n')
    restarted = service.restarted()
    health = restarted.client.get("/healthz").json()
    assert list(health["quarantined"]) == ["bob"] and "speaker" in health["quarantined"]["bob"]
    assert "hello" not in health["quarantined"]["bob"]  # the reason names the field, not the stored text
    for reply in (_recall(restarted, "bob"),
                  restarted.client.post("/v1/users/bob/turns", json={"turns": _turns(1)})):
        assert reply.status_code == 503 and "quarantined" in reply.json()["error"]["message"]
    assert _recall(restarted, "ann").status_code == 200
    assert "memevolve_users_quarantined 1" in restarted.client.get("/metrics").text
    assert restarted.client.delete("/v1/users/bob").status_code == 200  # erasure still reaches it
    assert _recall(restarted, "bob").status_code == 404 and restarted.memory.quarantined == {}


def test_a_fifo_in_place_of_a_capture_log_is_quarantined_without_hanging(service):
    assert service.client.post("/v1/users/ann/turns", json={"turns": _turns(3)}).status_code == 201
    (service.data / "users/bob").mkdir()
    fifo = service.data / "users/bob/capture.jsonl"
    os.mkfifo(fifo)
    restarted: list[InProcess] = []
    start = _in_thread(lambda: restarted.append(service.restarted()))
    start.join(20)
    if start.is_alive():  # release the reader stuck in open()
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert restarted, "start-up hung opening the FIFO"
    assert "FIFO" in restarted[0].memory.quarantined["bob"]
    assert _recall(restarted[0], "ann").status_code == 200


def test_a_capture_log_that_lost_organised_sessions_is_quarantined(service):
    client = service.client
    for session in ("s1", "s2"):
        assert client.post("/v1/users/ann/turns", json={"turns": _turns(3, session)}).status_code == 201
    assert client.post("/v1/users/ann/close").status_code == 200
    assert service.memory.organise_pending() == 2
    log = service.data / "users/ann/capture.jsonl"
    for damage in (lambda: log.write_bytes(b""), log.unlink):  # emptied, then deleted
        damage()
        restarted = service.restarted()
        assert "lacks session(s) s1, s2 that were organised" in restarted.memory.quarantined["ann"]
        assert restarted.memory.pending() == 0  # nothing organised over the damaged log


def test_organisation_pending_counts_the_step_running(tmp_path, serving, embedder):
    paused = Paused(embedder)
    service = in_process(tmp_path / "data", serving, RuntimeParts(paused))
    service.memory.capture("ann", _turns(20))
    service.memory.capture("ann", _turns(1, "s2"))  # closes s1: its organisation is queued
    organiser = _in_thread(service.memory.organise_pending)
    assert paused.entered.wait(60)  # the step is building the memory it organises
    assert service.client.get("/healthz").json()["organisation_pending"] == 1
    paused.go.set()
    organiser.join(60)
    assert service.memory.pending() == 0 and service.memory.organised_steps == 1


def test_a_serving_file_replaced_by_a_symlink_loop_is_refused_with_its_reason(service):
    slot, path = service.slot, service.slot.path
    path.write_text("not: [a strategy")
    assert slot.check() is False and "malformed YAML" in slot.refused["reason"]
    path.unlink()
    path.symlink_to(path.name)  # a link to itself
    assert slot.check() is False
    assert "symlink loop" in slot.refused["reason"].lower() and slot.refusals == 2


def test_a_recall_whose_user_is_erased_while_its_memory_builds_answers_404(tmp_path, serving, embedder):
    """The recall's build is embedding the user's turns when the user is erased (its embedding folder removed under
    it): the recall answers 404, not 500 and not a context of an erased user's memory."""
    holder: list = []
    erase = Paused(embedder, then=lambda: holder[0].memory.erase("ann"), wait=False)
    service = in_process(tmp_path / "data", serving, RuntimeParts(erase))
    holder.append(service)
    assert service.client.post("/v1/users/ann/turns", json={"turns": _turns(20)}).status_code == 201
    reply = _recall(service, "ann")
    assert erase.entered.is_set() and reply.status_code == 404, reply.text
    assert not (service.data / "users/ann").exists()
