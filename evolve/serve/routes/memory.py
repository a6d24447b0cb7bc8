"""The users' routes: capture turns (or typed observations: turns and the photos they share), recall (or answer) a
question, close the open session, erase the user or one turn."""
from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime, timezone
from typing import Annotated, Literal, Union

from fastapi import APIRouter, BackgroundTasks
from pydantic import BaseModel, ConfigDict, Field, field_validator

from evolve.benchmarks.observations import DeviceEvent, DeviceMeta, ObservationRef, Photo, Provenance
from evolve.benchmarks.scenes import admit_event
from evolve.files import now_iso
from evolve.observe.answer import carried
from evolve.runtime.live import CaptureError
from evolve.runtime.store import MemoryStore
from evolve.runtime.text import count_words
from evolve.serve.access import Caller
from evolve.serve.answers import Answer
from evolve.serve.capturelog import parse_time
from evolve.serve.memory import MemoryService
from evolve.serve.tenants import Quarantined, UnknownUser
from evolve.serve.metrics import Metrics
from evolve.serve.records import (PURPOSE, GuardPair, PackedRef, RecallRecord, ShadowPart, context_overlap, utc,
                                  words_of)
from evolve.serve.routes.deps import (Answerer, Answers, Capturer, Eraser, Memory, Problem, Recaller, RequestMetrics,
                                      Slot, UserId)
from evolve.serve.strategy import CanaryRun, Loaded, StrategySlot

log = logging.getLogger(__name__)

#: Longest turn text, most turns per capture, longest question.
MAX_TURN_CHARS = 20_000
MAX_TURNS = 500
MAX_QUESTION_CHARS = 2_000
#: Longest photo caption, URL or path.
MAX_CAPTION_CHARS = 2_000
MAX_LOCATION_CHARS = 4_096

router = APIRouter(prefix="/v1/users/{user}", tags=["memory"])


class TurnIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=128, description="the caller's turn id, unique per user (e.g. D1:3)")
    speaker: str = Field(min_length=1, max_length=128)
    text: str = Field(min_length=1, max_length=MAX_TURN_CHARS)
    time: str | None = Field(None, max_length=64, description="ISO 8601 or LoCoMo style '1:56 pm on 8 May, 2023'")
    session: str = Field(min_length=1, max_length=128, description="session id; a new one closes the previous")
    image_caption: str | None = Field(None, max_length=MAX_CAPTION_CHARS, description="the caption of the photo the "
                                                                                    "turn shares")
    image_url: str | None = Field(None, max_length=MAX_LOCATION_CHARS, description="the photo's URL")
    image_path: str | None = Field(None, max_length=MAX_LOCATION_CHARS, description="the photo's local path")


class _Capture(BaseModel):
    """What every capture may say: the purpose its turns are for and when they are purged."""

    model_config = ConfigDict(extra="forbid")
    purpose: str | None = Field(None, pattern=PURPOSE, description="what these turns may be recalled for; a user's "
                                "memory holds one purpose (default: the user's, none for a new user)")
    retain_until: datetime | None = Field(None, description="ISO 8601 moment after which these turns are purged "
                                          "(earlier than the service's --retention-days if both apply); a moment "
                                          "already past is refused (422): such a turn is never stored nor served")

    @field_validator("retain_until")
    @classmethod
    def _ahead(cls, moment: datetime | None) -> datetime | None:
        if moment is not None and utc(moment) <= datetime.now(timezone.utc):
            raise ValueError(f"{utc(moment).isoformat()} has already passed: turns past their retention are not "
                             "stored (give a later moment, or leave it out)")
        return moment


class CaptureIn(_Capture):
    turns: list[TurnIn] = Field(min_length=1, max_length=MAX_TURNS)


class TurnObservation(TurnIn):
    kind: Literal["turn"]


class ImageObservationIn(BaseModel):
    """A photo, as its own observation: the turn that shares it (earlier in the same request), its caption, URL or
    path. It becomes the image observation a turn's ``image_caption`` yields (the same id, caption and time)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["image"]
    turn: str = Field(min_length=1, max_length=128, description="the id of the turn that shares it, earlier in "
                                                                "this request")
    caption: str | None = Field(None, max_length=MAX_CAPTION_CHARS)
    url: str | None = Field(None, max_length=MAX_LOCATION_CHARS)
    path: str | None = Field(None, max_length=MAX_LOCATION_CHARS)


class EventObservation(DeviceMeta):
    """A device event: its id (unique per user, like a turn's), when (required), what the device recorded in words,
    and its device fields. It is admitted as the offline reader admits it: a turn of the day's session, spoken by its
    source (``Ana's car``)."""

    kind: Literal["event"]
    id: str = Field(min_length=1, max_length=128)
    time: str = Field(min_length=1, max_length=64, description="ISO 8601 or LoCoMo style")
    text: str = Field(min_length=1, max_length=MAX_TURN_CHARS)

    def turn(self, where: str) -> dict:
        event = DeviceEvent(**self.meta.model_dump(), id=self.id, time=parse_time(self.time, where), text=self.text,
                            provenance=Provenance(source="client", record=self.id))
        turn = admit_event(event)
        return {"id": turn.id, "speaker": turn.speaker, "text": turn.text, "session": turn.session_id,
                "time": turn.timestamp.isoformat(), "event": self.meta.model_dump()}


class ObservationsIn(_Capture):
    observations: list[Annotated[Union[TurnObservation, ImageObservationIn, EventObservation],
                                 Field(discriminator="kind")]] = Field(
        min_length=1, max_length=2 * MAX_TURNS, description="typed observations in order: turns, the photos they "
                                                            "share, and device events")

    def turns(self) -> list[dict]:
        """The turns as ``/turns`` takes them, each photo merged into its turn; :class:`Problem` 422 naming the
        observation that names no earlier turn of the request, shares a second photo with one, or is empty."""
        turns: list[dict] = []
        by_id: dict[str, dict] = {}  # a repeated turn id is left for the capture to refuse
        for i, seen in enumerate(self.observations):
            if isinstance(seen, EventObservation):
                try:
                    turns.append(seen.turn(f"observations[{i}].time"))
                except CaptureError as exc:
                    raise Problem(422, str(exc)) from None
                continue
            if isinstance(seen, TurnObservation):
                turns.append(turn := seen.model_dump(exclude={"kind"}))
                by_id.setdefault(seen.id, turn)
                continue
            turn = by_id.get(seen.turn)
            if turn is None:
                raise Problem(422, f"observations[{i}]: turn {seen.turn!r} is not a turn earlier in this request")
            if not Photo(caption=seen.caption, url=seen.url, path=seen.path).shared:
                raise Problem(422, f"observations[{i}]: an image needs a caption, a url or a path")
            if Photo(caption=turn["image_caption"], url=turn["image_url"], path=turn["image_path"]).shared:
                raise Problem(422, f"observations[{i}]: turn {seen.turn!r} already shares a photo (one per turn)")
            turn.update(image_caption=seen.caption, image_url=seen.url, image_path=seen.path)
        return turns


class CaptureOut(BaseModel):
    captured: int
    turns: int = Field(description="turns held for the user after this capture")
    open_session: str | None
    closed_sessions: list[str] = Field(description="sessions this capture closed (organised in the background)")
    images: list[str] = Field(description="stable ids of the image observations its turns share (D3:IMG_001)")


class RecallIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)
    asked_at: str | None = Field(None, max_length=64, description="when the question is asked (default: the "
                                                                   "newest memory's time)")
    purpose: str | None = Field(None, pattern=PURPOSE, description="what the recall is for; must be the purpose the "
                                                                   "user's memory was captured for, if any")


class PackedItem(BaseModel):
    id: str
    text: str
    layer: str
    source_ids: list[str]
    words: int = Field(description="the item's size in words (whitespace words, the unit of the token budget)")
    observations: list[ObservationRef] = Field(description="what the item comes from: its turns, then the images "
                                                           "they share (stable ids, kind and time)")

    def ref(self) -> PackedRef:
        """The recall log's reference to this item (its text left out)."""
        return PackedRef(id=self.id, layer=self.layer, source_ids=self.source_ids, words=self.words)


class RecallOut(BaseModel):
    packed: list[PackedItem]
    words: int = Field(description="the context's size in words")
    trace_id: str
    strategy: str = Field(description="hash of the strategy that built this context")
    role: str = Field(description="serving, or canary when the user falls in the running canary's share")
    latency_ms: float


class AnswerOut(RecallOut):
    answer: str
    support_ids: list[str]


def _asked(body: RecallIn) -> datetime | None:
    try:
        return parse_time(body.asked_at, "asked_at") if body.asked_at else None
    except CaptureError as exc:
        raise Problem(422, str(exc)) from None


def _packed(store: MemoryStore, result) -> list[PackedItem]:
    return [PackedItem(id=c.id, text=c.text, layer=c.layer, source_ids=list(c.source_ids),
                       words=count_words(c.text), observations=store.provenance(c.source_ids, c.image_ids))
            for c in result.packed]


def _context(loaded: Loaded, memory: MemoryService, user: str, body: RecallIn) -> tuple[list[PackedItem], float]:
    """``loaded``'s packed context for the request and its latency (ms)."""
    started = time.perf_counter()
    store = memory.store(user, loaded)
    result = loaded.runtime.ask(store, body.question, _asked(body), answer=False)
    return _packed(store, result), round((time.perf_counter() - started) * 1000, 3)


def _shadow_and_log(slot: StrategySlot, memory: MemoryService, metrics: Metrics, answers: dict[tuple[str, str], Answer],
                    user: str, body: RecallIn, record: RecallRecord, texts: list[str], run: CanaryRun | None) -> None:
    """After the reply: the shadow's context (if any) and the recall-log line; a user erased meanwhile gets
    neither, and nothing here fails the connection. A canary user's shadow is the serving strategy, and the pair,
    where the operator's answers cover the question, goes to the canary's guard."""
    shadow, role = (slot.current, "serving") if run is not None else (slot.shadow, "shadow")
    if shadow is not None:
        try:
            packed, latency = _context(shadow, memory, user, body)
        except (UnknownUser, Quarantined):  # erased (or quarantined) since the reply
            return
        except Exception:  # noqa: BLE001 - after the reply: logged, the served record still logged
            log.exception("shadow recall of user %s failed", user)
            memory.log_recall(user, record)
            return
        refs = [p.ref() for p in packed]
        record.shadow = ShadowPart(strategy=shadow.strategy_hash, source=shadow.source, packed=refs,
                                   words=words_of(refs), overlap=context_overlap([p.id for p in record.packed],
                                                                                 [p.id for p in refs]),
                                   latency_ms=latency, role=role)
        metrics.count("recalls", labels={"role": "shadow"})
        entry = answers.get((user, body.question))
        if run is not None and entry is not None:
            answer = str(entry.answer)
            record.guard = GuardPair(serving=carried(answer, [p.text for p in packed]), canary=carried(answer, texts))
            stop = run.guard.add(record.guard.serving, record.guard.canary, category=entry.category)
            if stop is not None:
                slot.guard_stop(run, stop)
    memory.log_recall(user, record)


def _recall(slot: StrategySlot, memory: MemoryService, metrics: Metrics, answers: dict[tuple[str, str], Answer],
            user: str, body: RecallIn, tasks: BackgroundTasks, caller: Caller, answer: bool) -> RecallOut:
    started = time.perf_counter()
    bound = memory.purpose(user)
    if (bound is not None and body.purpose != bound) or not caller.serves(bound):
        raise caller.deny(f"user {user!r}'s memory was not captured for the purpose this {caller.scope} names, or "
                          "not for one this key holds", user, "purpose")
    run = slot.canary_for(user)  # held to the end: a reload or stop meanwhile does not change it
    loaded, role = (run.loaded, "canary") if run is not None else (slot.current, "serving")
    store = memory.store(user, loaded)
    result = loaded.runtime.ask(store, body.question, _asked(body), answer=answer)
    packed = _packed(store, result)
    out = RecallOut(packed=packed, words=sum(p.words for p in packed), trace_id=uuid.uuid4().hex,
                    strategy=loaded.strategy_hash, role=role,
                    latency_ms=round((time.perf_counter() - started) * 1000, 3))
    if answer:
        out = AnswerOut(**dict(out), answer=result.answer.text, support_ids=list(result.answer.support_ids))
    record = RecallRecord(user=user, question=body.question, asked_at=body.asked_at, time=now_iso(),
                          trace_id=out.trace_id, strategy=loaded.strategy_hash, role=role,
                          packed=[p.ref() for p in packed], words=out.words, latency_ms=out.latency_ms,
                          answer=result.answer.text if answer else None)
    caller.record("ANSWER" if answer else "RECALL", user, purpose=body.purpose,
                  ids=sorted({s for p in packed for s in p.source_ids}),
                  counts={"packed": len(packed), "words": out.words})
    metrics.count("recalls", labels={"role": role})
    tasks.add_task(_shadow_and_log, slot, memory, metrics, answers, user, body, record, [p.text for p in packed], run)
    return out


@router.post("/turns", status_code=201, response_model=CaptureOut,
             summary="Capture one or more turns (durable before the reply)")
def capture(user: UserId, body: CaptureIn, memory: Memory, caller: Capturer) -> dict:
    if not caller.captures(body.purpose):
        raise caller.deny("this key may capture only for its own purposes: name one of them", user, "purpose")
    out = memory.capture(user, [t.model_dump() for t in body.turns], body.purpose, body.retain_until)
    caller.record("CAPTURE", user, ids=[t.id for t in body.turns], purpose=body.purpose,
                  counts={"turns": out["captured"]})
    return out


@router.post("/observations", status_code=201, response_model=CaptureOut,
             summary="Capture typed observations: turns and the photos they share (durable before the reply)")
def observe(user: UserId, body: ObservationsIn, memory: Memory, caller: Capturer) -> dict:
    if not caller.captures(body.purpose):
        raise caller.deny("this key may capture only for its own purposes: name one of them", user, "purpose")
    turns = body.turns()
    out = memory.capture(user, turns, body.purpose, body.retain_until)
    caller.record("CAPTURE", user, ids=[t["id"] for t in turns] + out["images"], purpose=body.purpose,
                  counts={"turns": out["captured"], "images": len(out["images"])})
    return out


@router.post("/recall", response_model=RecallOut, summary="Packed context for a question")
def recall(user: UserId, body: RecallIn, tasks: BackgroundTasks, slot: Slot, memory: Memory,
           metrics: RequestMetrics, answers: Answers, caller: Recaller) -> RecallOut:
    return _recall(slot, memory, metrics, answers, user, body, tasks, caller, answer=False)


@router.post("/answer", response_model=AnswerOut, summary="Packed context and the configured answerer's answer")
def answer(user: UserId, body: RecallIn, tasks: BackgroundTasks, slot: Slot, memory: Memory,
           metrics: RequestMetrics, answers: Answers, caller: Answerer) -> RecallOut:
    return _recall(slot, memory, metrics, answers, user, body, tasks, caller, answer=True)


@router.post("/close", summary="Close the open session now (its organisation runs in the background)")
def close(user: UserId, memory: Memory, caller: Capturer) -> dict:
    closed = memory.close(user)
    caller.record("CLOSE", user, ids=[closed] if closed else [])
    return {"closed": closed}


@router.delete("", summary="Erase the user: memory, records, history, logs")
def erase(user: UserId, memory: Memory, caller: Eraser) -> dict:
    tombstone = memory.erase(user)
    caller.record("ERASE", user, counts={"turns": tombstone.turns_erased or 0})
    return {"erased": True, "tombstone": tombstone}


@router.delete("/turns/{turn:path}", summary="Erase one turn: from the capture log, the records, facts and rollups "
                                              "derived from it (organised again without it), their history, the "
                                              "indexes and embeddings")
def erase_turn(user: UserId, turn: str, memory: Memory, caller: Eraser) -> dict:
    erased = memory.erase_turn(user, turn)
    caller.record("ERASE", user, ids=[turn], counts={"turns": 1})
    return {"erased": True, "turn": erased}
