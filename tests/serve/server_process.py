"""A real ``memevolve serve`` in a child process on a free 127.0.0.1 port, for the service tests."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """``start()`` waits until ``/healthz`` answers; ``stop()`` ends the child (SIGTERM, then SIGKILL)."""

    def __init__(self, data: Path, serving: Path, stores: Path | None = None, *extra: str,
                 env: dict[str, str] | None = None):
        self.data, self.serving, self.stores, self.extra = data, serving, stores, extra
        self.env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = data.parent / f"serve-{self.port}.log"

    def start(self, timeout: float = 120.0) -> "ServeProcess":
        args = [sys.executable, "-m", "evolve.cli", "serve", "--data", str(self.data), "--serving", str(self.serving),
                "--port", str(self.port), "--stores", str(self.stores or self.data.parent / "no-stores"), *self.extra]
        self.proc = subprocess.Popen(args, cwd=REPO, env=self.env, stdout=open(self.log, "wb"),
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited {self.proc.returncode}: {self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"serve did not answer within {timeout}s: {self.log.read_text()}")

    def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "ServeProcess":
        return self.start()

    def __exit__(self, *_) -> None:
        self.stop()


def turns_of(conversation, sessions=None) -> list[dict]:
    """A benchmark conversation's turns as capture requests' turns."""
    out = []
    for session in conversation.sessions[:sessions]:
        for t in session.turns:
            when = t.timestamp or session.timestamp
            out.append({"id": t.id, "speaker": t.speaker, "text": t.text, "session": session.id,
                        "time": when.isoformat() if when else None})
    return out
