"""A conversation that grows one turn at a time, whose memory store equals batch ingestion of the turns so far.

Capturing a turn only appends it. The expensive per-window and per-fact stages (extraction, fact metadata,
embeddings) run once per window or fact and are memoised (:class:`IngestMemo`, the embedding cache); the
order-dependent stages (de-duplication against earlier facts, supersession and retraction marks, item ids, the
BM25 index) are recomputed from those parts when the store is next read, so the store a question sees is, by
construction, the one :func:`build_store` builds from the same turns. Session rollups (organisation) cover closed
sessions only: a session closes when a turn of a later session arrives, or when the owner closes it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from evolve.benchmarks.observations import DeviceEvent, DeviceMeta, ImageObservation, Photo, Provenance
from evolve.benchmarks.turns import shared_image
from evolve.benchmarks.types import Conversation, Session, Turn
from evolve.errors import EvolveError
from evolve.runtime.fusion import FusionJudge
from evolve.runtime.ingest import Embed, IngestMemo, build_store
from evolve.runtime.roles import Extractor
from evolve.runtime.store import MemoryStore
from evolve.strategy.policy import Policy


class CaptureError(EvolveError, ValueError):
    """A turn cannot be captured (duplicate id, closed session); the message says which and why."""


@dataclass(frozen=True)
class _Open:
    id: str
    timestamp: datetime | None
    images: list[ImageObservation] = field(default_factory=list)  # the photos its turns share, in turn order
    events: list[DeviceEvent] = field(default_factory=list)  # the device events among its turns


class LiveConversation:
    """The turns of one conversation in capture order, grouped into sessions; thread-safe."""

    def __init__(self, conversation_id: str, speakers: tuple[str, ...] = ()):
        self.id = conversation_id
        self._speakers = list(speakers)
        self._sessions: list[tuple[_Open, list[Turn]]] = []
        self._ids: set[str] = set()
        self.closed: set[str] = set()
        self.version = 0  # bumped by every change; a built store remembers the version it saw
        self._lock = threading.RLock()
        self._built: dict[str, tuple[int, MemoryStore]] = {}
        self._memos: dict[str, IngestMemo] = {}
        self._building: dict[str, threading.Lock] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def check(self, turns: list[Turn]) -> None:
        """:class:`CaptureError` naming the first of ``turns`` that cannot follow the turns so far (and the ones
        before it in ``turns``): a repeated id, a closed session, or a session that is not the open one."""
        with self._lock:
            ids, closed = set(self._ids), set(self.closed)
            known = [s.id for s, _ in self._sessions]
            for i, turn in enumerate(turns):
                where = f"turns[{i}]" if len(turns) > 1 else "turn"
                if turn.id in ids:
                    raise CaptureError(f"{where}: turn id {turn.id!r} was already captured")
                if turn.session_id in closed:
                    raise CaptureError(f"{where}: session {turn.session_id!r} is closed; a new turn needs a new "
                                       "session id")
                if turn.session_id in known and known[-1] != turn.session_id:
                    raise CaptureError(f"{where}: session {turn.session_id!r} is not the open session {known[-1]!r}")
                if not known or known[-1] != turn.session_id:
                    if known:
                        closed.add(known[-1])
                    known.append(turn.session_id)
                ids.add(turn.id)

    def add(self, turn: Turn, photo: Photo | None = None, event: DeviceMeta | None = None) -> str | None:
        """Append ``turn`` (its session opens on its first turn, stamped with that turn's time), the image
        observation of the ``photo`` it shares (numbered in its session as the LoCoMo reader numbers) and, when the
        turn is a device event, the event (its ``event`` fields, the turn's id, time and words); return the id of the
        session this closed, if any (not one closed before)."""
        with self._lock:
            self.check([turn])
            closed = None
            if not self._sessions or self._sessions[-1][0].id != turn.session_id:
                if self._sessions and self._sessions[-1][0].id not in self.closed:  # else closed before
                    closed = self._sessions[-1][0].id
                    self.closed.add(closed)
                self._sessions.append((_Open(turn.session_id, turn.timestamp), []))
            self._sessions[-1][1].append(turn)
            session = self._sessions[-1][0]
            if photo is not None and photo.shared:
                session.images.append(shared_image(turn, photo, len(session.images), session.timestamp,
                                                   Provenance(source="client", record=turn.id)))
            if event is not None:
                session.events.append(DeviceEvent(**event.model_dump(), id=turn.id, time=turn.timestamp,
                                                  text=turn.text, provenance=Provenance(source="client", record=turn.id)))
            self._ids.add(turn.id)
            if turn.speaker not in self._speakers:
                self._speakers.append(turn.speaker)
            self.version += 1
            return closed

    def close(self, session_id: str | None = None) -> str | None:
        """Close the open session (or ``session_id`` if it is the open one); return the id closed, if any."""
        with self._lock:
            if not self._sessions:
                return None
            current = self._sessions[-1][0].id
            if (session_id is not None and session_id != current) or current in self.closed:
                return None
            self.closed.add(current)
            self.version += 1
            return current

    @property
    def open_session(self) -> str | None:
        with self._lock:
            if self._sessions and self._sessions[-1][0].id not in self.closed:
                return self._sessions[-1][0].id
            return None

    def images_of(self, turn_ids: set[str]) -> list[str]:
        """Ids of the image observations that ``turn_ids`` share, in capture order."""
        with self._lock:
            return [i.id for s, _ in self._sessions for i in s.images if i.source_turn in turn_ids]

    def session_turns(self, session_id: str) -> list[Turn]:
        with self._lock:
            return next((list(turns) for s, turns in self._sessions if s.id == session_id), [])

    def conversation(self) -> Conversation:
        """The turns so far as a :class:`Conversation`, each turn stamped as batch ingestion stamps it."""
        with self._lock:
            sessions = tuple(Session(s.id, s.timestamp, tuple(turns), tuple(s.images), tuple(s.events))
                             for s, turns in self._sessions)
            return Conversation(self.id, tuple(self._speakers), sessions)

    def store(self, key: str, policy: Policy, extractor: Extractor, embed: Embed, embedder_name: str,
              fuser: FusionJudge | None = None) -> MemoryStore:
        """The memory store of the turns so far under the ingestion policy whose key is ``key``; rebuilt from
        memoised parts only when a turn or a closed session came since the last read. One build per key at a time,
        outside the conversation's lock: captures and reads under other keys (the strategy serving while a reload
        builds the next one's store) never wait for it."""
        with self._lock:
            built = self._built.get(key)
            if built is not None and built[0] == self.version:
                return built[1]
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                built = self._built.get(key)
                if built is not None and built[0] == self.version:  # built by the caller we waited for
                    return built[1]
                version, conversation, closed = self.version, self.conversation(), set(self.closed)
                memo = self._memos.setdefault(key, IngestMemo())
            store = build_store(conversation, policy, extractor, embed, embedder_name, memo=memo,
                                rollup_sessions=closed, fuser=fuser)
            with self._lock:
                if key in self._memos:  # not forgotten meanwhile
                    self._built[key] = (version, store)
            return store

    def building(self) -> bool:
        """Whether a store is being built now (under any key)."""
        with self._lock:
            return any(lock.locked() for lock in self._building.values())

    def forget(self, keep: set[str]) -> None:
        """Drop the stores and memos of ingestion policies not in ``keep`` (a strategy no longer served)."""
        with self._lock:
            for table in (self._built, self._memos, self._building):
                for key in [k for k in table if k not in keep]:
                    del table[key]
