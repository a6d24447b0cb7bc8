"""The records the serving wing stores, defined once: the capture-log events (captured turns, a session closed), the
recall record (its packed references and its shadow part), the erasure tombstone and what erasing one turn did.

Every store writes a record as :meth:`Record.to_json` (canonical JSON: sorted keys, compact) and reads it back with
:func:`load_record`, which refuses a record of another shape naming where it lies and which field is wrong (never the
stored value: it may be a user's text). The shapes are those the service has always written, byte for byte, so
stored files and rows need no migration.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evolve.benchmarks.types import Turn
from evolve.canonical import canonical_json
from evolve.errors import EvolveError


class RecordError(EvolveError, ValueError):
    """A stored record of the wrong shape; the message names where it lies and the field, not its value."""


def _absent(value: Any) -> bool:
    return value is None


def _omitted() -> Any:
    """A field left out of the stored JSON while it is unset (the service has never written it as ``null``)."""
    return Field(None, exclude_if=_absent)


class Record(BaseModel):
    """A stored record: exactly the fields declared (an unknown one is refused, so nothing stored is dropped)."""

    model_config = ConfigDict(extra="forbid")

    def to_json(self) -> str:
        """The stored form: canonical JSON."""
        return canonical_json(self.model_dump(mode="json"))

    def stored(self) -> dict:
        """The stored form as data (what a JSON column holds)."""
        return self.model_dump(mode="json")


R = TypeVar("R", bound=Record)


def _field_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"field {'.'.join(map(str, first['loc'])) or '?'}: {first['msg']}"


def load_record(model: type[R], raw: Any, where: str) -> R:
    """``raw`` as a ``model``; :class:`RecordError` naming ``where`` and the first wrong field."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise RecordError(f"{where}: {model.__name__} {_field_error(exc)}") from None


# ---------------------------------------------------------------- the capture log


def naive(moment: datetime) -> datetime:
    """A zoned moment in UTC without its zone, so every time of a user compares (naive ones are taken as given)."""
    return moment.astimezone(timezone.utc).replace(tzinfo=None) if moment.tzinfo is not None else moment


class TurnRecord(Record):
    """A captured turn as the capture log keeps it (its time in ISO form, naive UTC)."""

    id: str
    speaker: str
    text: str
    session: str
    time: str | None = None

    def turn(self) -> Turn:
        """The runtime's turn; ``ValueError`` for an unparseable time."""
        return Turn(self.id, self.speaker, self.text, self.session,
                    naive(datetime.fromisoformat(self.time)) if self.time else None)


class TurnsEvent(Record):
    """One acknowledged capture request: its turns, in order. ``at``: when the store appended it (UTC)."""

    turns: list[TurnRecord]
    at: str | None = _omitted()


class CloseEvent(Record):
    """A session closed by the client or by idleness."""

    close: str
    at: str | None = _omitted()


CaptureEvent = Union[TurnsEvent, CloseEvent]


def read_event(raw: Any, where: str) -> CaptureEvent:
    """A capture-log line as its event (``close`` names a close event, else a turns event); :class:`RecordError`."""
    return load_record(CloseEvent if isinstance(raw, dict) and "close" in raw else TurnsEvent, raw, where)


# ---------------------------------------------------------------- the recall log


class PackedRef(Record):
    """A packed item as the recall log references it (its text is not logged)."""

    id: str
    layer: str
    source_ids: list[str]
    words: int


def words_of(packed: list[PackedRef]) -> int:
    return sum(p.words for p in packed)


class ShadowPart(Record):
    """The shadow strategy's context for the same request, computed after the reply."""

    strategy: str
    source: str
    packed: list[PackedRef]
    words: int
    overlap: float = Field(description="context overlap of the served and the shadow item ids "
                                       "(:func:`evolve.serve.records.context_overlap`)")
    latency_ms: float


class RecallRecord(Record):
    """One served recall (or answer) as the recall log keeps it; replay asks it again."""

    user: str
    question: str
    asked_at: str | None
    time: str
    trace_id: str
    strategy: str
    role: str
    packed: list[PackedRef]
    words: int
    latency_ms: float
    answer: str | None = _omitted()
    shadow: ShadowPart | None = _omitted()


# ---------------------------------------------------------------- erasure


class Tombstone(Record):
    """What erasure leaves of a user: no content, keyed by the sha256 of the user id."""

    user_sha256: str
    erased_at: str
    turns_erased: int | None = Field(description="turns the erased capture log held (None: it was unreadable)")


class TurnErased(Record):
    """What erasing one turn did (no content): the turn and its session, and whether the session had been organised
    (its records, facts and rollups are then organised again without the turn)."""

    turn: str
    session: str
    erased_at: str
    organised: bool


def without_turn(events: list[CaptureEvent], turn: str) -> list[CaptureEvent]:
    """``events`` with turn ``turn`` left out (the capture request that held it stays, without it)."""
    return [e.model_copy(update={"turns": [t for t in e.turns if t.id != turn]}) if isinstance(e, TurnsEvent) else e
            for e in events]


def turns_in(events: list[CaptureEvent]) -> list[TurnRecord]:
    """Every captured turn of ``events``, in log order."""
    return [t for e in events if isinstance(e, TurnsEvent) for t in e.turns]
