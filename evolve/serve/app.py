"""The memory service: an ASGI app (FastAPI; OpenAPI schema at ``/docs``) over :class:`MemoryService` and the
verified serving strategy. Every error is a JSON ``{"error": {"status", "message"}}`` with a 4xx/5xx status."""
from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime
from typing import Annotated

from fastapi import BackgroundTasks, FastAPI, Path as PathParam, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from evolve.errors import EvolveError
from evolve.files import StoreError, now_iso
from evolve.observe.answer import carried
from evolve.runtime.live import CaptureError
from evolve.runtime.roles import RoleError
from evolve.runtime.text import count_tokens
from evolve.runtime.usage import UsageStats
from evolve.serve.backend import USER_ID, StoreUnavailable, valid_user
from evolve.serve.batching import BatchingEmbedder
from evolve.serve.memory import MemoryService, Quarantined, UnknownUser, parse_time
from evolve.serve.metrics import Metrics
from evolve.serve.strategy import CanaryRun, Loaded, StrategySlot

log = logging.getLogger(__name__)

#: Largest request body accepted (bytes), longest turn text, most turns per capture, longest question.
MAX_BODY_BYTES = 1 * 2**20
MAX_TURN_CHARS = 20_000
MAX_TURNS = 500
MAX_QUESTION_CHARS = 2_000

UserId = Annotated[str, PathParam(description="The user (tenant) whose memory is read or written: letters, digits, "
                                              "'_', '-', '.', at most 128 characters.", max_length=200)]


class TurnIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=128, description="the caller's turn id, unique per user (e.g. D1:3)")
    speaker: str = Field(min_length=1, max_length=128)
    text: str = Field(min_length=1, max_length=MAX_TURN_CHARS)
    time: str | None = Field(None, max_length=64, description="ISO 8601 or LoCoMo style '1:56 pm on 8 May, 2023'")
    session: str = Field(min_length=1, max_length=128, description="session id; a new one closes the previous")
    image_caption: str | None = Field(None, max_length=2_000)


class CaptureIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turns: list[TurnIn] = Field(min_length=1, max_length=MAX_TURNS)


class CaptureOut(BaseModel):
    captured: int
    turns: int = Field(description="turns held for the user after this capture")
    open_session: str | None
    closed_sessions: list[str] = Field(description="sessions this capture closed (organised in the background)")


class RecallIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)
    asked_at: str | None = Field(None, max_length=64, description="when the question is asked (default: the "
                                                                   "newest memory's time)")


class PackedItem(BaseModel):
    id: str
    text: str
    layer: str
    source_ids: list[str]
    words: int


class RecallOut(BaseModel):
    packed: list[PackedItem]
    words: int
    trace_id: str
    strategy: str = Field(description="hash of the strategy that built this context")
    role: str = Field(description="serving, or canary when the user falls in the running canary's share")
    latency_ms: float


class AnswerOut(RecallOut):
    answer: str
    support_ids: list[str]


class _Problem(EvolveError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status)


def _user(user: str) -> str:
    if not valid_user(user):
        raise _Problem(400, f"invalid user id {user!r}: must match {USER_ID.pattern} and hold no '..'")
    return user


def _packed(result) -> list[dict]:
    return [{"id": c.id, "text": c.text, "layer": c.layer, "source_ids": list(c.source_ids),
             "words": count_tokens(c.text)} for c in result.packed]


#: Model-role usage counters exported on ``/metrics``, per role.
LLM_COUNTERS = ("requests", "failures", "prompt_tokens", "completion_tokens")


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


def create_app(slot: StrategySlot, memory: MemoryService, usage: UsageStats | None = None,
               answers: dict[tuple[str, str], str] | None = None) -> FastAPI:
    """The service over ``memory``, serving ``slot``'s strategy (and its shadow or canary); ``usage``: the model
    roles' counters, exported on ``/metrics``; ``answers``: the operator's ``(user, question) -> answer``, by which
    the canary guard judges the paired contexts of the recalls they cover."""
    answers = answers or {}
    app = FastAPI(title="memevolve memory service", version="1",
                  description="The promoted strategy as a per-user memory service: capture turns, recall packed "
                              "context, erase a user.")
    metrics = Metrics()
    app.state.slot, app.state.memory, app.state.metrics = slot, memory, metrics

    app.add_middleware(_Measure, metrics=metrics)
    app.add_middleware(_BodyLimit, limit=MAX_BODY_BYTES)

    @app.exception_handler(_Problem)
    async def problem(_: Request, exc: _Problem):
        return _error(exc.status, exc.message)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        if exc.status_code == 404:
            return _error(404, f"no route {request.method} {request.url.path} (a user id holds no '/')")
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        if first.get("type") == "json_invalid":
            return _error(400, f"malformed JSON: {first.get('ctx', {}).get('error', first.get('msg'))}")
        return _error(422, f"{where}: {first.get('msg')}")

    @app.exception_handler(UnknownUser)
    def unknown(_: Request, exc: UnknownUser):
        user = exc.args[0]
        try:
            stone = memory.backend.tombstone(user)
            note = f" (erased at {stone['erased_at']})" if isinstance(stone, dict) and "erased_at" in stone else ""
        except (StoreError, StoreUnavailable) as error:  # an unreadable tombstone changes no answer
            note = f" (its tombstone is unreadable: {error})"
        return _error(404, f"unknown user {user!r}: no memory is held{note}")

    @app.exception_handler(StoreUnavailable)
    async def unavailable(_: Request, exc: StoreUnavailable):
        return _error(503, f"{exc}; retry later (nothing was stored by this request)")

    @app.exception_handler(StoreError)
    async def store_failed(_: Request, exc: StoreError):
        """A store write refused (507 for a full disk, else 503): the request changed nothing; reads go on."""
        return _error(507 if exc.out_of_space else 503, f"{exc}; nothing was changed by this request, retry once "
                                                        "the store can be written")

    @app.exception_handler(Quarantined)
    async def quarantined(_: Request, exc: Quarantined):
        return _error(503, f"{exc}; the other users are served (repair or erase this user's memory, then restart)")

    @app.exception_handler(RoleError)
    async def role_failed(_: Request, exc: RoleError):
        return _error(503, f"a model role failed: {exc}; retry later (captured turns are kept)")

    @app.exception_handler(CaptureError)
    async def refused_capture(_: Request, exc: CaptureError):
        return _error(409 if "already" in str(exc) or "session" in str(exc) else 422, str(exc))

    def _asked(body: RecallIn) -> datetime | None:
        try:
            return parse_time(body.asked_at, "asked_at") if body.asked_at else None
        except CaptureError as exc:
            raise _Problem(422, str(exc)) from None

    def _context(loaded: Loaded, user: str, body: RecallIn) -> tuple[list[dict], float]:
        started = time.perf_counter()
        result = loaded.runtime.ask(memory.store(user, loaded), body.question, _asked(body), answer=False)
        return _packed(result), round((time.perf_counter() - started) * 1000, 3)

    def _shadow_and_log(user: str, body: RecallIn, record: dict, texts: list[str], run: CanaryRun | None) -> None:
        """After the reply: the shadow's context (if any) and the recall-log line; a user erased meanwhile gets
        neither, and nothing here fails the connection. A canary user's shadow is the serving strategy, and the
        pair, where the operator's answers cover the question, goes to the canary's guard."""
        shadow, role = (slot.current, "serving") if run is not None else (slot.shadow, "shadow")
        if shadow is not None:
            try:
                packed, latency = _context(shadow, user, body)
            except (UnknownUser, Quarantined):  # erased (or quarantined) since the reply
                return
            except Exception:  # noqa: BLE001 - after the reply: logged, the served record still logged
                log.exception("shadow recall of user %s failed", user)
                memory.log_recall(user, record)
                return
            mine, theirs = {p["id"] for p in record["packed"]}, {p["id"] for p in packed}
            record["shadow"] = {"strategy": shadow.strategy_hash, "source": shadow.source, "role": role,
                                "packed": [{k: p[k] for k in ("id", "layer", "source_ids", "words")} for p in packed],
                                "words": sum(p["words"] for p in packed),
                                "overlap": len(mine & theirs) / max(1, len(mine | theirs)), "latency_ms": latency}
            metrics.count("recalls", labels={"role": "shadow"})
            answer = answers.get((user, body.question))
            if run is not None and answer is not None:
                judged = {"serving": carried(answer, [p["text"] for p in packed]), "canary": carried(answer, texts)}
                record["guard"] = judged
                stop = run.guard.add(judged["serving"], judged["canary"])
                if stop is not None:
                    slot.guard_stop(run, stop)
        memory.log_recall(user, record)

    def _recall(user: str, body: RecallIn, tasks: BackgroundTasks, answer: bool) -> dict:
        started = time.perf_counter()
        run = slot.canary_for(_user(user))  # held to the end: a reload or stop meanwhile does not change it
        loaded, role = (run.loaded, "canary") if run is not None else (slot.current, "serving")
        store = memory.store(user, loaded)
        result = loaded.runtime.ask(store, body.question, _asked(body), answer=answer)
        packed = _packed(result)
        out = {"packed": packed, "words": sum(p["words"] for p in packed), "trace_id": uuid.uuid4().hex,
               "strategy": loaded.strategy_hash, "role": role,
               "latency_ms": round((time.perf_counter() - started) * 1000, 3)}
        if answer:
            out.update(answer=result.answer.text, support_ids=list(result.answer.support_ids))
        record = {"user": user, "question": body.question, "asked_at": body.asked_at, "time": now_iso(),
                  "trace_id": out["trace_id"], "strategy": loaded.strategy_hash, "role": role,
                  "packed": [{k: p[k] for k in ("id", "layer", "source_ids", "words")} for p in packed],
                  "words": out["words"], "latency_ms": out["latency_ms"]}
        if answer:
            record["answer"] = out["answer"]
        metrics.count("recalls", labels={"role": role})
        tasks.add_task(_shadow_and_log, user, body, record, [p["text"] for p in packed], run)
        return out

    @app.post("/v1/users/{user}/turns", status_code=201, response_model=CaptureOut, tags=["memory"],
              summary="Capture one or more turns (durable before the reply)")
    def capture(user: UserId, body: CaptureIn) -> dict:
        return memory.capture(_user(user), [t.model_dump() for t in body.turns])

    @app.post("/v1/users/{user}/recall", response_model=RecallOut, tags=["memory"],
              summary="Packed context for a question")
    def recall(user: UserId, body: RecallIn, tasks: BackgroundTasks) -> dict:
        return _recall(user, body, tasks, answer=False)

    @app.post("/v1/users/{user}/answer", response_model=AnswerOut, tags=["memory"],
              summary="Packed context and the configured answerer's answer")
    def answer(user: UserId, body: RecallIn, tasks: BackgroundTasks) -> dict:
        return _recall(user, body, tasks, answer=True)

    @app.post("/v1/users/{user}/close", tags=["memory"],
              summary="Close the open session now (its organisation runs in the background)")
    def close(user: UserId) -> dict:
        return {"closed": memory.close(_user(user))}

    @app.delete("/v1/users/{user}", tags=["memory"], summary="Erase the user: memory, records, history, logs")
    def erase(user: UserId) -> dict:
        return {"erased": True, "tombstone": memory.erase(_user(user))}

    @app.get("/v1/strategy", tags=["service"], summary="The strategy serving, its lineage and journal entry")
    def strategy() -> dict:
        run = slot.canary
        return {"serving": slot.current.describe(), "refused": slot.refused, "reloads": slot.reloads,
                "shadow": {**slot.shadow.describe(), "serves": "nobody"} if slot.shadow else None,
                "canary": run.describe() if run is not None else None, "canary_stopped": slot.canary_stopped,
                "canary_refused": slot.canary_refused}

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict:
        return {"ok": True, "strategy": slot.current.strategy_hash, "users": len(memory.loaded()),
                "max_users": memory.max_users, "organisation_pending": memory.pending(),
                "quarantined": dict(memory.quarantined)}

    @app.get("/metrics", response_class=PlainTextResponse, tags=["service"], summary="Prometheus text format")
    def prometheus() -> PlainTextResponse:
        current = slot.current
        gauges = [("strategy_info", "The strategy serving (1) by hash and state.",
                   {"hash": current.strategy_hash, "state": current.state}, 1),
                  ("strategy_refused", "1 while the serving file on disk is refused (the previous one serves).", {},
                   1 if slot.refused else 0),
                  ("strategy_reloads", "Serving-file reloads since start.", {}, slot.reloads),
                  ("strategy_refusals", "Serving-file versions refused since start.", {}, slot.refusals),
                  ("users_loaded", "Users whose memory is loaded.", {}, len(memory.loaded())),
                  ("users_evicted", "Users' memories unloaded for --max-users since start.", {}, memory.evictions),
                  ("organisation_pending", "Closed sessions waiting for organisation.", {}, memory.pending()),
                  ("organisation_steps", "Organisation steps completed since start.", {}, memory.organised_steps),
                  ("memory_builds_after_capture", "Users' memories built in the background after their captures "
                   "paused, since start.", {}, memory.warmed),
                  ("organisation_failures", "Organisation steps that failed since start.", {},
                   memory.organise_failures),
                  ("users_quarantined", "Users whose stored memory cannot be read (503 for them).", {},
                   len(memory.quarantined)),
                  ("recall_log_failures", "Recall-log lines that could not be appended since start.", {},
                   memory.recall_log_failures)]
        run = slot.canary
        gauges += [("canary_fraction", "Share of users the running canary serves (0: none runs).",
                    {"candidate": run.candidate_id, "hash": run.loaded.strategy_hash} if run else {},
                    run.fraction if run else 0),
                   ("canary_stopped_by_guard", "1 when the last canary was stopped by its guard.", {},
                    1 if (slot.canary_stopped or {}).get("by") == "guard" else 0)]
        if run is not None:
            status = run.guard.status()
            gauges += [("canary_guard_pairs", "Judged paired recalls of the running canary, by outcome.",
                        {"outcome": k}, status[k]) for k in ("both_good", "both_bad", "harmed", "helped")]
            gauges.append(("canary_guard_looks", "Looks the canary guard has made.", {}, status["looks_made"]))
        embedder = current.runtime.embedder
        if isinstance(embedder, BatchingEmbedder):
            gauges += [("embed_passes", "Forward passes that encoded queued texts (questions) since start.", {},
                        embedder.passes),
                       ("embed_texts", "Texts those passes encoded; over embed_passes, the mean batch.", {},
                        embedder.texts)]
        for role, counts in (usage.by_role() if usage is not None else {}).items():
            gauges += [(f"llm_{counter}", f"Model-role {counter.replace('_', ' ')} since start.", {"role": role}, n)
                       for counter, n in counts.items() if counter in LLM_COUNTERS]
        return PlainTextResponse(metrics.render(gauges), media_type="text/plain; version=0.0.4")

    return app
