"""Typed observations: what enters memory, one payload model per kind, each with its provenance.

A :class:`DialogueTurn` is a turn as a client or a benchmark file states it; an :class:`ImageObservation` is a photo a
turn shares, with an id of its own (``D3:IMG_001``: its session, numbered in turn order) that retrieval, packing
and traces keep; a :class:`DeviceEvent` is what a device observed. Admission
(:func:`evolve.benchmarks.turns.admit_session`, :func:`evolve.benchmarks.scenes.admit_event`) turns them into the
runtime's turns (an event keeps its id as the turn's).
"""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Provenance(_Payload):
    """Where an observation came from: its ``source`` (``locomo:FILE``, ``client``) and the record there it was
    read from (a LoCoMo ``dia_id``, a client's turn id)."""

    source: str
    record: str


class Photo(_Payload):
    """The photo a turn shares, as it was stated: a caption, a URL or a local path (the capture log keeps it)."""

    caption: str | None = None
    url: str | None = None
    path: str | None = None

    @property
    def shared(self) -> bool:
        """Whether there is a photo at all (a non-blank caption, a URL or a path)."""
        return bool((self.caption or "").strip() or self.url or self.path)


class DialogueTurn(_Payload):
    """A turn as it is stated: its text, speaker, session name and time as sent (``None``: the session's), and the
    photo it shares, if any (a caption, a URL or a local path)."""

    kind: Literal["turn"] = "turn"
    id: str
    speaker: str
    text: str
    session: str
    time: str | None = None
    image_caption: str | None = None
    image_url: str | None = None
    image_path: str | None = None
    provenance: Provenance

    @property
    def photo(self) -> Photo:
        """The photo the turn shares (:attr:`Photo.shared` is false when it shares none)."""
        return Photo(caption=self.image_caption, url=self.image_url, path=self.image_path)


class ImageObservation(_Payload):
    """A photo shared in a conversation: a stable id, its session and time, the caption it was described by, the
    turn that shared it and who spoke it, and its URL or path when given."""

    kind: Literal["image"] = "image"
    id: str
    session: str
    time: datetime | None
    caption: str
    source_turn: str
    speaker: str
    url: str | None = None
    path: str | None = None
    provenance: Provenance


class DeviceMeta(_Payload):
    """What a device event states besides its words and time: which device (``camera``, ``phone_calendar``, ``car``,
    ...), of whose (``owner``, ``None``: the household's), what kind of observation, how important and urgent it is
    (0 to 1), and who may see it (``household``: every user of the home; ``private``: its owner only)."""

    device: str = Field(min_length=1, max_length=128)
    owner: str | None = Field(None, max_length=128)
    event: str = Field(min_length=1, max_length=128)
    importance: float = Field(0.5, ge=0, le=1)
    urgency: float = Field(0.0, ge=0, le=1)
    visibility: Literal["household", "private"] = "household"

    def visible_to(self, user: str) -> bool:
        return self.visibility == "household" or self.owner == user

    @property
    def meta(self) -> "DeviceMeta":
        """The device fields alone (of an event or of a request that states one)."""
        return DeviceMeta(**self.model_dump(include=set(DeviceMeta.model_fields)))

    @property
    def source(self) -> str:
        """Who states it, as memory names a speaker: ``Ana's car``, ``camera``."""
        return f"{self.owner}'s {self.device.replace('_', ' ')}" if self.owner else self.device.replace("_", " ")


class DeviceEvent(DeviceMeta):
    """Something a device observed, as an atomic event with its provenance: its id, when, what it recorded in words,
    and the :class:`DeviceMeta`."""

    kind: Literal["event"] = "event"
    id: str
    time: datetime
    text: str
    provenance: Provenance


class ObservationRef(_Payload):
    """An observation a packed item comes from, as a recall names it: its stable id, its kind and when it was made."""

    id: str
    kind: Literal["turn", "image", "event"]
    time: datetime | None
    device: str | None = None  # an event's device


def image_id(session: str, number: int) -> str:
    """The id of the ``number``-th (1-based) image of ``session``: ``D3:IMG_001``."""
    return f"{session}:IMG_{number:03d}"
