"""The capture log read as memory: a request's turn as the log keeps it, events applied to a live conversation,
the purpose a log was captured for, and the log pruned of expired turns."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Iterable

from evolve.benchmarks.observations import DeviceMeta, Photo
from evolve.benchmarks.turns import TurnError, client_turn, parse_moment
from evolve.runtime.live import CaptureError, LiveConversation
from evolve.serve.records import CaptureEvent, CloseEvent, TurnRecord, TurnsEvent, turns_in


def parse_time(text: str, where: str) -> datetime:
    """An ISO 8601 or LoCoMo-style (``1:56 pm on 8 May, 2023``) moment, a zoned one as naive UTC;
    :class:`CaptureError` naming ``where``."""
    try:
        return parse_moment(text)
    except ValueError:
        raise CaptureError(f"{where}: unparseable time {text!r} (ISO 8601 or e.g. '1:56 pm on 8 May, 2023')") from None


def turn_record(raw: dict, where: str) -> TurnRecord:
    """A request's turn as the capture log keeps it: the turn the LoCoMo reader would read
    (:func:`~evolve.benchmarks.turns.client_turn`), its time in ISO form (naive UTC for a zoned one), and the photo it
    shares (``image_caption``, ``image_url``, ``image_path``), or its device fields when it is a device event
    (``event``)."""
    photo = Photo(**{k: v for k in ("caption", "url", "path")
                     if isinstance(v := raw.get(f"image_{k}"), str) and v})  # a non-string caption is ignored
    try:
        turn, shared = client_turn(raw["id"], raw["speaker"], raw["text"], raw["session"], raw.get("time"), photo,
                                   where)
    except TurnError as exc:
        raise CaptureError(str(exc)) from None
    event = raw.get("event")
    if event is not None and turn.timestamp is None:
        raise CaptureError(f"{where}: a device event needs its time")
    return TurnRecord(id=turn.id, speaker=turn.speaker, text=turn.text, session=turn.session_id,
                      time=turn.timestamp.isoformat() if turn.timestamp else None, photo=shared,
                      event=DeviceMeta.model_validate(event) if event is not None else None)


def apply_events(live: LiveConversation, events: Iterable[CaptureEvent], first: int = 1) -> list[str]:
    """Apply capture-log events to ``live`` in log order (numbered from ``first``); the sessions they closed. A
    ``ValueError`` naming the event for a turn the conversation refuses or an unparseable time."""
    closed: list[str] = []
    for n, event in enumerate(events, first):
        try:
            if isinstance(event, TurnsEvent):
                closed += [c for c in (live.add(record.turn(), record.photo, record.event) for record in event.turns)
                           if c is not None]
            elif live.close(event.close) is not None:
                closed.append(event.close)
        except ValueError as exc:
            raise ValueError(f"capture log event {n}: {exc}") from None
    return closed


def purpose_of(events: Iterable[CaptureEvent]) -> str | None:
    """What a capture log's memory was captured for: its first capture's purpose (``None``: any)."""
    return next((e.purpose for e in events if isinstance(e, TurnsEvent)), None)


def prune(events: list[CaptureEvent], now: datetime, retention: timedelta | None
          ) -> tuple[list[CaptureEvent], list[str], datetime | None]:
    """The capture log without the turns expired at ``now`` (:meth:`TurnsEvent.expires`) and without the closes of
    sessions left empty, the ids of those turns, and when the next turn kept expires."""
    kept: list[CaptureEvent] = []
    purged: list[str] = []
    soonest: datetime | None = None
    for event in events:
        when = event.expires(retention) if isinstance(event, TurnsEvent) else None
        if when is not None and when <= now:
            purged += [t.id for t in event.turns]
            continue
        if when is not None:
            soonest = when if soonest is None else min(soonest, when)
        kept.append(event)
    sessions = {t.session for t in turns_in(kept)}
    return [e for e in kept if not isinstance(e, CloseEvent) or e.close in sessions], purged, soonest
