"""The records the serving wing stores, defined once: the capture-log events (captured turns, a session closed), an
organised turn's metadata, the recall record (its packed references and its shadow part), the erasure tombstone and
what erasing one turn did.

Every store writes a record as :meth:`Record.to_json` (canonical JSON: sorted keys, compact) and reads it back with
:func:`load_record`, which refuses a record of another shape naming where it lies and which field is wrong (never the
stored value: it may be a user's text). The shapes are those the service has always written, byte for byte, so
stored files and rows need no migration.

Sizes are **words**: whitespace words as :func:`evolve.runtime.text.count_words` counts them, the unit the strategy's
``assembly.token_budget``, a trace's ``context_tokens`` and a summary's ``context_words`` count too (not a model's
tokenizer tokens, which ``/metrics`` reports as ``llm_prompt_tokens``). How much two contexts share is
:func:`context_overlap`.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evolve.benchmarks.observations import DeviceMeta, Photo
from evolve.benchmarks.turns import naive
from evolve.benchmarks.types import Turn
from evolve.canonical import canonical_json, sha256_hex
from evolve.errors import EvolveError, first_problem
from evolve.runtime.ikb import ImageEntry, ImageKB


class RecordError(EvolveError, ValueError):
    """A stored record of the wrong shape; the message names where it lies and the field, not its value."""


def _absent(value: Any) -> bool:
    return value is None


def _omitted(**constraints: Any) -> Any:
    """A field left out of the stored JSON while it is unset (the service has never written it as ``null``)."""
    return Field(None, exclude_if=_absent, **constraints)


class Record(BaseModel):
    """A stored record: exactly the fields declared (an unknown one is refused, so nothing stored is dropped)."""

    model_config = ConfigDict(extra="forbid")

    def to_json(self) -> str:
        """The stored form: canonical JSON."""
        return canonical_json(self.stored())

    def stored(self) -> dict:
        """The stored form as data (what a JSON column holds)."""
        return self.model_dump(mode="json")


R = TypeVar("R", bound=Record)


def _field_error(exc: ValidationError) -> str:
    return "field {}: {}".format(*first_problem(exc, "?"))


def load_record(model: type[R], raw: Any, where: str) -> R:
    """``raw`` as a ``model``; :class:`RecordError` naming ``where`` and the first wrong field."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise RecordError(f"{where}: {model.__name__} {_field_error(exc)}") from None


# ---------------------------------------------------------------- the capture log


class TurnRecord(Record):
    """A captured turn as the capture log keeps it (its time in ISO form, naive UTC)."""

    id: str
    speaker: str
    text: str  # the caption of its photo folded in
    session: str
    time: str | None = None
    photo: Photo | None = _omitted()  # the photo it shares, as stated (its image observation is built from it)
    event: DeviceMeta | None = _omitted()  # a device event's device fields (the turn holds its id, time and words)

    def turn(self) -> Turn:
        """The runtime's turn; ``ValueError`` for an unparseable time."""
        return Turn(self.id, self.speaker, self.text, self.session,
                    naive(datetime.fromisoformat(self.time)) if self.time else None)


#: A purpose: what a memory may be used for (named by a capture, checked against a recall's).
PURPOSE = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"


def utc(moment: datetime) -> datetime:
    """``moment`` zoned (a naive one taken as UTC)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


class TurnsEvent(Record):
    """One acknowledged capture request: its turns, in order. ``at``: when the store appended it (UTC);
    ``purpose``: what its turns may be recalled for; ``retain_until``: when they are purged (both omitted when
    unset, as before either existed)."""

    turns: list[TurnRecord]
    at: str | None = _omitted()
    purpose: str | None = _omitted(pattern=PURPOSE)
    retain_until: datetime | None = _omitted()

    @field_validator("retain_until")
    @classmethod
    def _zoned(cls, moment: datetime | None) -> datetime | None:
        return utc(moment) if moment is not None else None

    def expires(self, retention: timedelta | None) -> datetime | None:
        """When its turns expire: ``retain_until``, or the capture time plus ``retention``, whichever comes first;
        ``None`` if neither applies."""
        moments = [self.retain_until] if self.retain_until is not None else []
        if retention is not None and self.at is not None:
            moments.append(utc(datetime.fromisoformat(self.at)) + retention)
        return min(moments, default=None)


class CloseEvent(Record):
    """A session closed by the client or by idleness."""

    close: str
    at: str | None = _omitted()


CaptureEvent = Union[TurnsEvent, CloseEvent]


def read_event(raw: Any, where: str) -> CaptureEvent:
    """A capture-log line as its event (``close`` names a close event, else a turns event); :class:`RecordError`."""
    return load_record(CloseEvent if isinstance(raw, dict) and "close" in raw else TurnsEvent, raw, where)


class ImageMeta(Record):
    """A photo's row of the image knowledge base, kept with the organised turn that shares it: its stable id, time,
    caption, URL or path, the categories its caption names and the names the dialogue gives its subject."""

    id: str
    time: str | None
    caption: str
    url: str | None = None
    path: str | None = None
    categories: list[str]
    names: list[str]

    @classmethod
    def of(cls, entry: ImageEntry) -> "ImageMeta":
        image = entry.image
        return cls(id=image.id, time=image.time.isoformat() if image.time else None, caption=image.caption,
                   url=image.url, path=image.path, categories=list(entry.categories),
                   names=list(dict.fromkeys(n.name for n in entry.names)))


class TurnMeta(Record):
    """An organised turn's metadata (a Markdown record's frontmatter, a ``mem_records`` row's ``meta``): the turn's
    id, speaker, session, time and the sha256 of its text, and the images it shares (the IKB's rows, erased, purged
    and replayed with the turn)."""

    id: str
    speaker: str
    session: str
    time: str | None
    sha256: str
    images: list[ImageMeta] | None = _omitted()

    @classmethod
    def of(cls, turn: Turn, session: str, ikb: ImageKB | None = None) -> "TurnMeta":
        images = [ImageMeta.of(e) for e in ikb.shared_by(turn.id)] if ikb is not None else []
        return cls(id=turn.id, speaker=turn.speaker, session=session,
                   time=turn.timestamp.isoformat() if turn.timestamp else None,
                   sha256=sha256_hex(turn.text.encode("utf-8")), images=images or None)

    def holds(self, body: str, captured: str | None) -> bool:
        """Whether ``body`` is the text this record was written with and the text the capture log holds."""
        return body == captured and sha256_hex(body.encode("utf-8")) == self.sha256


# ---------------------------------------------------------------- the recall log


def _words(description: str) -> Any:
    """A size in words (:func:`evolve.runtime.text.count_words`)."""
    return Field(description=f"{description} in words (whitespace words, the unit of the token budget)")


class PackedRef(Record):
    """A packed item as the recall log references it (its text is not logged)."""

    id: str
    layer: str
    source_ids: list[str]
    words: int = _words("the item's size")


def words_of(packed: list[PackedRef]) -> int:
    return sum(p.words for p in packed)


def context_overlap(a: Iterable[str], b: Iterable[str]) -> float:
    """How much two contexts share: the Jaccard index of their ids, |A & B| / |A | B|. Two empty contexts are the
    same context and score 1.0; an empty and a non-empty one score 0.0."""
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else 1.0


class ShadowPart(Record):
    """The shadow strategy's context for the same request, computed after the reply."""

    strategy: str
    source: str
    packed: list[PackedRef]
    words: int = _words("the shadow context's size")
    overlap: float = Field(description="context overlap of the served and the shadow item ids "
                                       "(:func:`context_overlap`)")
    latency_ms: float
    role: str | None = _omitted()  # "serving" for a canary user's pair, "shadow" for a --shadow candidate


class GuardPair(Record):
    """A canary recall the guard judged: whether each context carries the operator's answer."""

    serving: bool
    canary: bool


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
    words: int = _words("the context's size")
    latency_ms: float
    answer: str | None = _omitted()
    shadow: ShadowPart | None = _omitted()
    guard: GuardPair | None = _omitted()

    def packs(self, turns: set[str]) -> bool:
        """Whether this context (or its shadow's) packed anything drawn from one of ``turns``."""
        packed = [*self.packed, *(self.shadow.packed if self.shadow is not None else ())]
        return any(turns.intersection(p.source_ids) for p in packed)


# ---------------------------------------------------------------- erasure


class Tombstone(Record):
    """What erasure leaves of a user: no content, keyed by the user's name."""

    user_sha256: str = Field(description="the user's name: the sha256 of the id, keyed under MEMEVOLVE_USER_KEY "
                                         "(the field keeps its first name)")
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
