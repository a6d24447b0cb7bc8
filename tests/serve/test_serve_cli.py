"""``memevolve serve`` options and process life: bad periods and ports are refused before anything loads, port 0
prints the port bound, a SIGHUP during start-up is a reload (not a kill), and stopping joins the workers."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from evolve.cli.main import main
from evolve.data import BASELINE_PATH
from evolve.serve.server import ServeConfig, Service
from server_process import REPO


@pytest.mark.parametrize("option, value, words", [
    ("--reload-interval", "0", "not in [0.05, 3600] seconds"),
    ("--reload-interval", "-1", "not in [0.05, 3600] seconds"),
    ("--reload-interval", "nan", "not in [0.05, 3600] seconds"),
    ("--idle", "inf", "not in [1, 2.592e+06] seconds"),
    ("--port", "70000", "not a port in 0..65535"),
    ("--port", "http", "not a port number"),
])
def test_bad_periods_and_ports_are_refused_before_anything_loads(capsys, tmp_path, option, value, words):
    with pytest.raises(SystemExit) as refused:  # the serving file does not exist: nothing past the options is read
        main(["serve", "--data", str(tmp_path / "data"), "--serving", str(tmp_path / "missing.yaml"), option, value])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: " in err and words in err


def _serve(tmp_path, *extra: str) -> subprocess.Popen:
    serving = tmp_path / "serving.yaml"
    serving.write_bytes(BASELINE_PATH.read_bytes())
    return subprocess.Popen([sys.executable, "-m", "evolve.cli", "serve", "--data", str(tmp_path / "data"),
                             "--serving", str(serving), "--stores", str(tmp_path / "no-stores"), "--allow-untracked",
                             *extra], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _catches_sighup(pid: int) -> bool:
    status = open(f"/proc/{pid}/status").read()
    return bool(int(re.search(r"SigCgt:\s*([0-9a-f]+)", status).group(1), 16) & (1 << (signal.SIGHUP - 1)))


def test_port_0_prints_the_port_bound_and_sighup_during_start_up_is_a_reload(tmp_path):
    proc = _serve(tmp_path, "--port", "0")
    try:
        deadline = time.monotonic() + 3
        while not _catches_sighup(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        line = ""
        while not line.startswith("serving"):  # SIGHUP after SIGHUP while the model and the users load
            assert proc.poll() is None, f"serve exited {proc.returncode} on a SIGHUP during start-up"
            proc.send_signal(signal.SIGHUP)
            line = _line_or_empty(proc)
        url = re.search(r"(http://127\.0\.0\.1:(\d+))/docs", line)
        assert url and url.group(2) != "0", line
        assert httpx.get(f"{url.group(1)}/healthz", timeout=10).json()["ok"] is True
        proc.send_signal(signal.SIGHUP)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 143  # stopped by SIGTERM (the CLI's exit code), not aborted
    finally:
        if proc.poll() is None:
            proc.kill()


def _line_or_empty(proc: subprocess.Popen, wait: float = 0.3) -> str:
    """The next line the service printed, or "" if none came within ``wait`` seconds."""
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        return proc.stdout.readline() if sel.select(wait) else ""


def test_stop_waits_for_every_worker(tmp_path, serving):
    service = Service(ServeConfig(tmp_path / "data", serving, None, allow_untracked=True, reload_seconds=3600.0))
    service.start_workers()
    turns = [{"id": f"t{i}", "speaker": "Ann", "text": f"Note {i} about the garden.", "session": "s1"}
             for i in range(30)]
    service.memory.capture("ann", turns)  # the builder wakes to build ann's memory
    workers = [t for t in __import__("threading").enumerate() if t.name.startswith("serve_")]
    assert len(workers) == 5  # watch, organise, build, keep, the guard's probes
    started = time.monotonic()
    service.stop()
    assert [t.name for t in workers if t.is_alive()] == []
    assert time.monotonic() - started < 30  # the watcher's hour-long wait was cut short


@pytest.mark.parametrize("where, said", [
    ("folder", "not a regular file"),
    ("/dev/full", "not a regular file"),
    ("missing/witness.jsonl", "does not exist"),
    ("data/witness.jsonl", "inside the data directory"),
])
def test_an_audit_witness_that_cannot_serve_is_refused_at_start(tmp_path, serving, where, said):
    from evolve.errors import ConfigError

    (tmp_path / "folder").mkdir()
    witness = Path(where) if where.startswith("/") else tmp_path / where
    config = ServeConfig(tmp_path / "data", serving, None, allow_untracked=True, reload_seconds=3600.0,
                         audit_witness=witness)
    with pytest.raises(ConfigError, match=said):
        Service(config)
    fine = Service(ServeConfig(tmp_path / "data", serving, None, allow_untracked=True, reload_seconds=3600.0,
                               audit_witness=tmp_path / "folder" / "witness.jsonl"))  # the lock was released
    assert '"type":"START"' in (tmp_path / "folder" / "witness.jsonl").read_text()  # witnessed at start
    fine.stop()
