"""A loopback HTTP server speaking the OpenAI chat-completions wire protocol, for tests.

Answers come from a scripted ``responder(request_body) -> str``; faults are injected with
:meth:`LoopbackLLMServer.fail_next`; a misbehaving endpoint is scripted with ``rewrite(reply) -> dict | bytes``,
applied to every successful reply (e.g. ``usage`` null, ``choices`` a string, a body that is not JSON). Use it as a
context manager or through the ``llm_server`` fixture.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


Responder = Callable[[dict], str]
Rewrite = Callable[[dict], "dict | bytes"]

#: Fault kinds accepted by :meth:`LoopbackLLMServer.fail_next`.
FAULTS = ("429", "500", "hang", "malformed", "401", "404")


def echo_responder(body: dict) -> str:
    """Default responder: repeats the last user message."""
    return f"echo: {body['messages'][-1]['content']}"


def _words(text: str) -> int:
    return len(text.split())


class LoopbackLLMServer:
    """OpenAI-compatible server on 127.0.0.1 with an ephemeral port, run in a background thread."""

    def __init__(self, responder: Responder = echo_responder, models: tuple[str, ...] = ("test-model",),
                 delay_s: float = 0.0, rewrite: Rewrite | None = None):
        self.responder = responder
        self.rewrite = rewrite  # applied to every successful reply
        self.models = models
        self.delay_s = delay_s  # processing time of every successful request
        self.requests: list[dict] = []  # bodies of chat-completion requests, in arrival order
        self.max_in_flight = 0
        self._in_flight = 0
        self._faults: deque[tuple[str, float]] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    def start(self) -> "LoopbackLLMServer":
        server = self

        class Handler(_Handler):
            owner = server

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()  # releases handlers parked in a "hang" fault
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "LoopbackLLMServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ scripting

    def fail_next(self, kind: str, n: int = 1, *, retry_after: float = 0.0, hang_s: float = 2.0) -> None:
        """The next ``n`` chat requests fail with ``kind`` (one of :data:`FAULTS`).

        ``retry_after`` is sent as the ``Retry-After`` header of 429s; ``hang_s`` is how long a "hang" stalls.
        """
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; expected one of {FAULTS}")
        with self._lock:
            self._faults.extend([(kind, hang_s if kind == "hang" else retry_after)] * n)

    def _take_fault(self) -> tuple[str, float] | None:
        with self._lock:
            return self._faults.popleft() if self._faults else None

    def _enter(self, body: dict) -> None:
        with self._lock:
            self.requests.append(body)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def completion(self, body: dict) -> dict:
        """The chat-completion response object for a request body."""
        content = self.responder(body)
        prompt_tokens = sum(_words(str(m.get("content", ""))) for m in body["messages"])
        completion_tokens = _words(content)
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }


def _error(message: str, type_: str, code: str | None) -> dict:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


class _Handler(BaseHTTPRequestHandler):
    owner: LoopbackLLMServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
        return

    def _send(self, status: int, payload: dict | bytes, headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout); nothing to deliver

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/v1/models":
            self._send(404, _error(f"no route {self.path}", "invalid_request_error", None))
            return
        models = [{"id": m, "object": "model", "created": 0, "owned_by": "loopback"} for m in self.owner.models]
        self._send(200, {"object": "list", "data": models})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, _error(f"no route {self.path}", "invalid_request_error", None))
            return
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            self._send(400, _error("request body is not JSON", "invalid_request_error", None))
            return
        owner = self.owner
        owner._enter(body)
        try:
            self._answer(owner, body)
        finally:
            owner._leave()

    def _answer(self, owner: LoopbackLLMServer, body: dict) -> None:
        fault = owner._take_fault()
        kind, arg = fault if fault else (None, 0.0)
        if kind == "hang":
            owner._closing.wait(arg)
        elif kind == "429":
            self._send(429, _error("Rate limit reached", "rate_limit_error", "rate_limit_exceeded"),
                       {"Retry-After": f"{arg:g}"})
            return
        elif kind == "500":
            self._send(500, _error("The server had an error", "server_error", None))
            return
        elif kind == "401":
            self._send(401, _error("Incorrect API key provided", "invalid_request_error", "invalid_api_key"))
            return
        elif kind == "malformed":
            self._send(200, b'{"id": "chatcmpl-broken", "choices": [{"message": ')
            return
        if kind == "404" or body.get("model") not in owner.models:
            self._send(404, _error(f"The model `{body.get('model')}` does not exist", "invalid_request_error",
                                   "model_not_found"))
            return
        if owner.delay_s:
            time.sleep(owner.delay_s)
        reply = owner.completion(body)
        self._send(200, owner.rewrite(reply) if owner.rewrite else reply)
