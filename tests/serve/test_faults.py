"""Faults: the server killed (SIGKILL) during organisation and during a capture, then restarted: no acknowledged
turn is lost, no half-written record remains, the store verifies."""
from __future__ import annotations

import subprocess
import time

import httpx
import pytest

from evolve.data import BASELINE_PATH
from evolve.files import CRASH_ENV
from evolve.serve.filestore import FileBackend
from evolve.serve.records import turns_in
from server_process import ServeProcess


def _turns(session: str, n: int, start: int) -> list[dict]:
    return [{"id": f"{session}-{i}", "speaker": "Kim", "text": f"On day {i} I planted {i} rows of beans and kale.",
             "session": session, "time": f"2024-05-{i % 28 + 1:02d}T09:00:00"} for i in range(start, start + n)]


def _capture(server: ServeProcess, turns: list[dict]) -> int:
    return httpx.post(f"{server.url}/v1/users/kim/turns", json={"turns": turns}, timeout=60).status_code


def _settled(server: ServeProcess) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        health = httpx.get(f"{server.url}/healthz").json()
        if health["organisation_pending"] == 0:
            return health
        time.sleep(0.2)
    raise AssertionError("organisation did not finish")


def test_kill_during_organisation_and_capture_loses_no_acknowledged_turn(tmp_path):
    serving = tmp_path / "serving.yaml"
    serving.write_bytes(BASELINE_PATH.read_bytes())
    data = tmp_path / "data"
    acknowledged: list[str] = []

    server = ServeProcess(data, serving, None, "--allow-untracked",
                          env={CRASH_ENV: "serve.organise.before_commit"}).start()
    try:
        for turn in _turns("s1", 6, 0):
            assert _capture(server, [turn]) == 201
            acknowledged.append(turn["id"])
        s2 = _turns("s2", 2, 6)
        assert _capture(server, s2) == 201  # closes s1: its organisation starts in the background and is killed
        acknowledged += [t["id"] for t in s2]
        assert server.wait_exit() == -9
    finally:
        server.stop()
    assert FileBackend(data).organised("kim") == set()
    with open(data / "users/kim/capture.jsonl", "ab") as log:
        log.write(b'{"turns": [{"id": "torn')  # a write cut short by a crash, never acknowledged

    server = ServeProcess(data, serving, None, "--allow-untracked", env={CRASH_ENV: "serve.capture.after_log"}).start()
    try:
        _settled(server)  # the restart repaired the log and finished the interrupted organisation
        recall = httpx.post(f"{server.url}/v1/users/kim/recall", json={"question": "How many rows of beans on day 7?"},
                            timeout=60)
        assert recall.status_code == 200 and any("day 7" in p["text"] for p in recall.json()["packed"])
        with pytest.raises(httpx.HTTPError):
            _capture(server, _turns("s2", 1, 8))  # logged, then killed before the reply
        assert server.wait_exit() == -9
    finally:
        server.stop()
    backend = FileBackend(data)
    held = [t.id for t in turns_in(backend.events("kim"))]
    assert set(acknowledged) <= set(held) and len(held) == len(set(held))
    assert backend.organised("kim") == {"s1"} and backend.verify("kim") == []
    commits = subprocess.run(["git", "-C", str(data / "users/kim"), "log", "--format=%s"], capture_output=True,
                             text=True).stdout.splitlines()
    assert len(commits) == 1 and commits[0].startswith("organise session s1: 6 turn(s)")
