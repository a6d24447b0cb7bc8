"""The strategy lifecycle in service: only a verified serving file serves; a tampered one is refused while the
previous strategy keeps serving; a rollback reloads under load with no failed request; shadow and canary."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from evolve.files import CRASH_ENV, CRASH_SIGNAL_ENV
from evolve.canonical import sha256_hex
from evolve.serve.strategy import RuntimeParts, StrategySlot, canary_share
from server_process import ServeProcess
from workflow_fixtures import cli

SAID = ["I moved to Porto for a new job at a bakery.", "My sister Lena visits in June.",
        "Actually my favourite bread is rye now.", "I run every Tuesday with my neighbour."]
TURNS = [{"id": f"t{i}", "speaker": "Ann", "text": text, "session": "s1", "time": f"2024-03-0{i + 1}T10:00:00"}
         for i, text in enumerate(SAID)]


def _wait(predicate, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def test_a_refused_file_keeps_the_old_strategy_and_a_rollback_reloads_under_load(capsys, stores, serving, tmp_path):
    code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)
    assert code == 0, out
    untracked = tmp_path / "other.yaml"
    untracked.write_bytes(serving.read_bytes() + b"# hand edit\n")
    refused = ServeProcess(tmp_path / "refused-data", untracked, stores)
    with pytest.raises(RuntimeError, match="refused: .*unjournaled"):
        refused.start()

    with ServeProcess(tmp_path / "data", serving, stores, "--reload-interval", "0.2", "--shadow", "r001-c01",
                      "--canary", "r003-c00:0.5", "--approver", "ops") as server:
        first = httpx.get(f"{server.url}/v1/strategy").json()
        assert first["serving"]["state"] == "tracked" and first["serving"]["lineage"][-1] == "r002-c00"
        assert first["serving"]["journal_entry"]["type"] == "PROMOTE"
        users = {"serving": next(u for u in (f"u{i}" for i in range(100)) if canary_share(u) >= 0.5),
                 "canary": next(u for u in (f"u{i}" for i in range(100)) if canary_share(u) < 0.5)}
        for user in users.values():
            reply = httpx.post(f"{server.url}/v1/users/{user}/turns", json={"turns": TURNS}, timeout=60)
            assert reply.status_code == 201

        def recall(user: str) -> httpx.Response:
            return httpx.post(f"{server.url}/v1/users/{user}/recall", json={"question": "Where does Ann work?"},
                              timeout=60)

        for role, user in users.items():
            reply = recall(user).json()
            assert reply["role"] == role
            assert reply["strategy"] == (first["canary"]["hash"] if role == "canary" else first["serving"]["hash"])

        original = serving.read_bytes()
        serving.write_bytes(original.replace(b"token_budget:", b"token_budget: 99 #", 1))  # tampered by hand
        refusal = _wait(lambda: httpx.get(f"{server.url}/v1/strategy").json()["refused"])
        assert "drift" in refusal["reason"]
        assert httpx.get(f"{server.url}/v1/strategy").json()["serving"]["hash"] == first["serving"]["hash"]
        assert "memevolve_strategy_refused 1" in httpx.get(f"{server.url}/metrics").text
        assert recall(users["serving"]).json()["strategy"] == first["serving"]["hash"]
        serving.write_bytes(original)
        _wait(lambda: httpx.get(f"{server.url}/v1/strategy").json()["refused"] is None)

        failures, replies, stop = [], [], threading.Event()

        def load() -> None:
            while not stop.is_set():
                reply = recall(users["serving"])
                (replies if reply.status_code == 200 else failures).append(reply)

        workers = [threading.Thread(target=load) for _ in range(4)]
        for w in workers:
            w.start()
        code, out = cli(capsys, "rollback", "--target", serving, "--stores", stores)
        assert code == 0, out
        after = _wait(lambda: (s := httpx.get(f"{server.url}/v1/strategy").json())["reloads"] == 1 and s)
        time.sleep(0.5)
        stop.set()
        for w in workers:
            w.join()
        assert failures == [] and len(replies) > 4
        assert after["serving"]["hash"] != first["serving"]["hash"] and after["serving"]["journal_entry"]["type"] == \
            "ROLLBACK"
        assert {r.json()["strategy"] for r in replies} <= {first["serving"]["hash"], after["serving"]["hash"]}
        assert recall(users["serving"]).json()["strategy"] == after["serving"]["hash"]

        log = server.data / "users" / users["serving"] / "recalls.jsonl"
        records = _wait(lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else None)
        shadowed = [r for r in records if "shadow" in r]
        assert shadowed and shadowed[0]["shadow"]["strategy"] == first["shadow"]["hash"]
        assert 0 <= shadowed[0]["shadow"]["overlap"] <= 1


def test_a_rollback_seen_between_its_swap_and_its_journal_entry_is_served_once_the_entry_lands(capsys, stores, serving,
                                                                                               tmp_path, embedder):
    code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)
    assert code == 0, out
    slot = StrategySlot(stores, serving, RuntimeParts(embedder))
    promoted = slot.current.file_sha256
    env = {**os.environ, CRASH_ENV: "swap", CRASH_SIGNAL_ENV: "SIGSTOP"}
    child = subprocess.Popen([sys.executable, "-m", "evolve.cli", "rollback", "--target", str(serving), "--stores",
                              str(stores)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait(lambda: sha256_hex(serving.read_bytes()) != promoted)  # swapped, its ROLLBACK entry not yet appended
        assert slot.check() is False and "drift" in slot.refused["reason"]
    finally:
        child.send_signal(signal.SIGCONT)
    assert child.wait(timeout=120) == 0, child.stderr.read()
    assert slot.check() is True and slot.refused is None and slot.reloads == 1
    assert slot.current.file_sha256 != promoted and slot.current.entry.type.value == "ROLLBACK"
