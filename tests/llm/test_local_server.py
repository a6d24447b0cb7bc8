"""Serving the packaged models with llama.cpp's server: the ``local-llm`` command, its lifetime, its errors and the
portable build flags. Each test starts the server it needs; skipped, with the reason, when the local-llm extra is
missing."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from evolve.cli import main
from evolve.llm import UsageStats
from evolve.llm.local import HOST, PORTABLE_CMAKE_ARGS, LocalLLMError, LocalLLMServer, missing_requirements
from local_model import MODEL, THREADS, client

needs_model = pytest.mark.skipif(missing_requirements(MODEL) is not None,
                                 reason=str(missing_requirements(MODEL)))


@needs_model
def test_cli_serves_until_sigterm():
    proc = subprocess.Popen([sys.executable, "-m", "evolve.cli", "local-llm", "--model", MODEL],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while not lines or not lines[-1].startswith("serving"):
            line = proc.stdout.readline()
            assert line, f"local-llm ended early: {proc.stderr.read()}"
            lines.append(line.strip())
        base_url = lines[0].removeprefix("base_url: ")
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        assert f"MEMEVOLVE_ANSWERER_BASE_URL={base_url} MEMEVOLVE_ANSWERER_MODEL={MODEL}" in "\n".join(lines)
        with urllib.request.urlopen(f"{base_url}/models", timeout=5) as response:
            assert MODEL in response.read().decode()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    with pytest.raises(urllib.error.URLError):  # the server went with it
        urllib.request.urlopen(f"{base_url}/models", timeout=2)


@needs_model
@pytest.mark.skipif(sys.platform != "linux", reason="the server follows its parent through PR_SET_PDEATHSIG")
def test_a_killed_caller_leaves_no_server():
    script = ("from evolve.llm.local import LocalLLMServer; import time; s = LocalLLMServer('smollm2').start(); "
              "print(s.base_url, flush=True); time.sleep(600)")
    caller = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        base_url = caller.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        urllib.request.urlopen(f"{base_url}/models", timeout=5).close()
    finally:
        caller.kill()  # SIGKILL: no cleanup code of the caller runs
        caller.wait()
    for _ in range(50):
        try:
            urllib.request.urlopen(f"{base_url}/models", timeout=1).close()
        except (urllib.error.URLError, OSError):
            return
        time.sleep(0.2)
    pytest.fail(f"the server at {base_url} outlived its caller")


def test_cli_without_the_extra_exits_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as if llama-cpp-python were not installed
    assert main(["local-llm"]) == 2
    err = capsys.readouterr().err
    assert "llama_cpp" in err and 'pip install -e ".[local-llm]"' in err


@needs_model
def test_cli_refuses_a_taken_port(capsys):
    with socket.socket() as taken:  # a listener holds the port, as a running server would
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["local-llm", "--port", str(port)]) == 2
    assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err


def test_gemma3_base_model_serves_with_usage(tmp_path):
    reason = missing_requirements("gemma3-270m")
    if reason:
        pytest.skip(reason)
    stats = UsageStats()
    with LocalLLMServer("gemma3-270m", threads=THREADS) as server:
        reply = client(server, tmp_path, stats, "answerer", max_tokens=16).complete(
            [{"role": "user", "content": "Name the capital of France."}])
    assert isinstance(reply, str) and stats.get("answerer", "prompt_tokens") > 0
    assert 0 < stats.get("answerer", "completion_tokens") <= 16  # 0 without the gemma chat format


#: A server that answers ``/v1/models`` like llama.cpp's and dies of SIGSEGV on its first completion, as a llama.cpp
#: built for another CPU does.
CRASHING_SERVER = """
import os, signal, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"object": "list", "data": [{"id": "smollm2"}]}'
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        os.kill(os.getpid(), signal.SIGSEGV)

HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


class CrashingServer(LocalLLMServer):
    def command(self, model_path: Path) -> list[str]:
        return [sys.executable, "-c", CRASHING_SERVER, str(self.port)]


@needs_model
def test_a_server_that_crashes_on_its_first_completion_names_the_cause():
    server = CrashingServer(MODEL, startup_timeout_s=30)
    with pytest.raises(LocalLLMError) as caught:
        server.start()
    message = str(caught.value)
    assert "killed by SIGSEGV on its first completion" in message
    assert f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}"' in message and "--force-reinstall" in message
    assert not server.running


def test_the_readme_builds_llama_cpp_with_the_portable_flags():
    """The README's install commands (and so CI's) build llama.cpp with the flags the error message recommends."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    tests_command = next(line for line in readme.splitlines() if line.rstrip().endswith("python -m pytest -q"))
    assert f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}"' in tests_command
