"""The memory service: an ASGI app (FastAPI; OpenAPI schema at ``/docs``) over :class:`MemoryService` and the
verified serving strategy. Its routes live in :mod:`evolve.serve.routes` (the users' memory, the service's own), each
declaring what it needs as dependencies (:mod:`evolve.serve.routes.deps`). Every error is a JSON
``{"error": {"status", "message"}}`` with a 4xx/5xx status."""
from __future__ import annotations

import logging
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from evolve.files import StoreError
from evolve.runtime.live import CaptureError
from evolve.runtime.roles import RoleError
from evolve.runtime.usage import UsageStats
from evolve.serve.access import Access, AuditFailed, Denied
from evolve.serve.answers import Answer
from evolve.serve.backend import StoreUnavailable, UnknownTurn
from evolve.serve.keys import KeysUnreadable
from evolve.serve.memory import MemoryService
from evolve.serve.tenants import Quarantined, UnknownUser
from evolve.serve.metrics import Metrics
from evolve.serve.records import RecordError
from evolve.serve.routes import memory as memory_routes, service as service_routes
from evolve.serve.routes.deps import Problem, admitted
from evolve.serve.strategy import StrategySlot

log = logging.getLogger(__name__)

#: Largest request body accepted (bytes).
MAX_BODY_BYTES = 1 * 2**20


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status)


class _BodyLimit:
    """Pure ASGI middleware: 413 for a body over ``limit`` bytes, declared or streamed."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await _error(413, f"request body of {int(declared)} bytes exceeds {self.limit}")(scope, receive,
                                                                                                     send)
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise HTTPException(413, f"request body exceeds {self.limit} bytes")  # FastAPI re-raises this kind
            return message

        return await self.app(scope, limited, send)


class _Measure:
    """Pure ASGI middleware: each request's route, method, status and seconds to its last body byte (background
    tasks after it excluded) into ``metrics``."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), 500

        async def sending(message):
            nonlocal status
            await send(message)
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                route = getattr(scope.get("route"), "path", "unmatched")
                self.metrics.observe(route, scope["method"], status, time.perf_counter() - started)

        await self.app(scope, receive, sending)


def _unknown(request: Request, exc: UnknownUser) -> JSONResponse:
    user = exc.args[0]
    try:
        stone = request.app.state.memory.backend.tombstone(user)
        note = f" (erased at {stone.erased_at})" if stone is not None else ""
    except (StoreError, StoreUnavailable, RecordError) as error:  # an unreadable tombstone changes no answer
        note = f" (its tombstone is unreadable: {error})"
    return _error(404, f"unknown user {user!r}: no memory is held{note}")


def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    if exc.status_code == 404:
        return _error(404, f"no route {request.method} {request.url.path} (a user id holds no '/')")
    return _error(exc.status_code, str(exc.detail))


def _denied(_: Request, exc: Denied) -> JSONResponse:
    response = _error(exc.status, exc.message)
    if exc.status == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
    if first.get("type") == "json_invalid":
        return _error(400, f"malformed JSON: {first.get('ctx', {}).get('error', first.get('msg'))}")
    return _error(422, f"{where}: {first.get('msg')}")


#: Each failure the routes let through, as the status and message the client gets.
HANDLERS = {
    Problem: lambda _, exc: _error(exc.status, exc.message),
    Denied: _denied,
    AuditFailed: lambda _, exc: _error(503, str(exc)),
    KeysUnreadable: lambda _, exc: _error(503, f"{exc}; every request is refused until the keys file reads again"),
    HTTPException: _http_error,
    RequestValidationError: _invalid,
    UnknownUser: _unknown,
    UnknownTurn: lambda _, exc: _error(404, str(exc)),
    StoreUnavailable: lambda _, exc: _error(503, f"{exc}; retry later (nothing was stored by this request)"),
    # a store write refused (507 for a full disk, else 503): the request changed nothing; reads go on
    StoreError: lambda _, exc: _error(507 if exc.out_of_space else 503, f"{exc}; nothing was changed by this "
                                                                        "request, retry once the store can be written"),
    Quarantined: lambda _, exc: _error(503, f"{exc}; the other users are served (repair or erase this user's memory, "
                                            "then restart)"),
    RoleError: lambda _, exc: _error(503, f"a model role failed: {exc}; retry later (captured turns are kept)"),
    CaptureError: lambda _, exc: _error(409 if "already" in str(exc) or "session" in str(exc) else 422, str(exc)),
}


def _audited(handler):
    """``handler``, and an audit line (``FAIL``: the key, the user's hash, the scope, the status and the failure's
    kind) when an admitted request fails with a client error: a key probing which users or turns exist is seen."""
    def handle(request: Request, exc: Exception) -> JSONResponse:
        response = handler(request, exc)
        found = admitted(request)
        if found is not None and 400 <= response.status_code < 500:
            caller, user = found
            try:
                caller.record("FAIL", user, operation=caller.scope, status=response.status_code,
                              reason=type(exc).__name__)
            except AuditFailed as failed:  # the reply stands; the operator sees the log
                log.warning("%s", failed)
        return response
    return handle


#: The handlers of failures an admitted request can meet, audited (a denial is audited as DENY already).
AUDITED = {kind: _audited(handler) for kind, handler in HANDLERS.items() if kind not in (Denied, AuditFailed)}


def create_app(slot: StrategySlot, memory: MemoryService, usage: UsageStats | None = None,
               answers: dict[tuple[str, str], Answer] | None = None, access: Access | None = None) -> FastAPI:
    """The service over ``memory``, serving ``slot``'s strategy (and its shadow or canary); ``usage``: the model
    roles' counters, exported on ``/metrics``; ``answers``: the operator's ``(user, question) -> entry``, by which
    the canary guard judges the paired contexts of the recalls they cover; ``access``: the keys callers must present
    and the audit (default: neither)."""
    app = FastAPI(title="memevolve memory service", version="1",
                  description="The promoted strategy as a per-user memory service: capture turns, recall packed "
                              "context, erase a user or one of its turns.", exception_handlers={**HANDLERS, **AUDITED})
    app.state.slot, app.state.memory, app.state.metrics, app.state.usage = slot, memory, Metrics(), usage
    app.state.answers, app.state.access = answers or {}, access or Access()
    app.add_middleware(_Measure, metrics=app.state.metrics)
    app.add_middleware(_BodyLimit, limit=MAX_BODY_BYTES)
    app.include_router(memory_routes.router)
    app.include_router(service_routes.router)
    return app
