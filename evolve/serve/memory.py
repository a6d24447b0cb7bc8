"""Per-user served memory: capture into the durable log, incremental derived stores (built again off the request
path once a user's captures pause), organisation off the request path (a closed session's records and Git commit),
erasure; one lock per user serialises its writers. A user whose stored memory cannot be read is quarantined (503 for
that user, the others served)."""
from __future__ import annotations

import logging
import queue
import threading
import time
from contextlib import nullcontext
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Iterable, TypeVar

import numpy as np

from evolve.errors import EvolveError
from evolve.benchmarks.turns import TurnError, client_turn, parse_moment
from evolve.files import StoreError
from evolve.runtime.cache import EmbeddingCache
from evolve.runtime.live import CaptureError, LiveConversation
from evolve.runtime.store import MemoryStore
from evolve.serve import heap
from evolve.serve.backend import Backend, StoreUnavailable
from evolve.serve.records import (CaptureEvent, CloseEvent, RecallRecord, RecordError, Tombstone, TurnErased,
                                  TurnRecord, TurnsEvent, turns_in)
from evolve.serve.strategy import Loaded

log = logging.getLogger(__name__)

#: Seconds a user's captures must pause before their memory is built again in the background (a conversation
#: imported turn by turn is built once at its end, not after every turn).
WARM_QUIET_S = 0.1


def parse_time(text: str, where: str) -> datetime:
    """An ISO 8601 or LoCoMo-style (``1:56 pm on 8 May, 2023``) moment, a zoned one as naive UTC;
    :class:`CaptureError` naming ``where``."""
    try:
        return parse_moment(text)
    except ValueError:
        raise CaptureError(f"{where}: unparseable time {text!r} (ISO 8601 or e.g. '1:56 pm on 8 May, 2023')") from None


def turn_record(raw: dict, where: str) -> TurnRecord:
    """A request's turn as the capture log keeps it: the turn the LoCoMo reader would read
    (:func:`~evolve.benchmarks.turns.client_turn`), its time in ISO form (naive UTC for a zoned one)."""
    try:
        turn = client_turn(raw["id"], raw["speaker"], raw["text"], raw["session"], raw.get("time"),
                           raw.get("image_caption"), where)
    except TurnError as exc:
        raise CaptureError(str(exc)) from None
    return TurnRecord(id=turn.id, speaker=turn.speaker, text=turn.text, session=turn.session_id,
                      time=turn.timestamp.isoformat() if turn.timestamp else None)


def apply_events(live: LiveConversation, events: Iterable[CaptureEvent], first: int = 1) -> list[str]:
    """Apply capture-log events to ``live`` in log order (numbered from ``first``); the sessions they closed. A
    ``ValueError`` naming the event for a turn the conversation refuses or an unparseable time."""
    closed: list[str] = []
    for n, event in enumerate(events, first):
        try:
            if isinstance(event, TurnsEvent):
                closed += [c for c in (live.add(record.turn()) for record in event.turns) if c is not None]
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



class UnknownUser(EvolveError, LookupError):
    """No memory is held for the user (never captured, or erased)."""


class _Stale(EvolveError):
    """The user's capture log was erased or rewritten through another replica since this one loaded it (its
    :meth:`Backend.generation` moved): the memory held here is dropped; look the user up again."""


class Quarantined(EvolveError):
    """The user's stored memory cannot be read (a corrupt, damaged or foreign file); the service answers 503 for
    this user until the file is repaired and the service restarted, and serves the others."""

    def __init__(self, user: str, reason: str):
        super().__init__(f"user {user!r} is quarantined: {reason}")
        self.user, self.reason = user, reason


#: What loading one user's stored memory can fail with (a corrupt line, a missing field, an inconsistent log).
LOAD_ERRORS = (StoreError, ValueError, OSError)


T = TypeVar("T")


@dataclass(eq=False)
class _Tenant:
    """What outlives a user's loaded memory in this process: the erasure lock, held by the erasure and by the writes
    that run outside the user's lock (embedding shards, recall-log lines), a leaf lock; and the number of erasures,
    so a memory loaded before one never writes after it (even once the user has captured again)."""

    erasing: threading.Lock = field(default_factory=threading.Lock)
    erasures: int = 0
    #: Turns erased or purged while this process ran: a recall that packed one, logged after, is dropped.
    gone_turns: set[str] = field(default_factory=set)

    def erase(self, change: Callable[[], T] = lambda: None, turns: Iterable[str] = ()) -> T:
        """Run ``change`` (what the store erases; ``turns``: the turns it removes) under the erasure lock and count
        one erasure: every memory loaded before it writes nothing after it."""
        with self.erasing:
            done = change()
            self.erasures += 1
            self.gone_turns.update(turns)
        return done


class _UserEmbeddings(EmbeddingCache):
    """A user's embedding cache: its shards are read at the first build, not at load (a user loaded at start and
    never recalled holds no vector); a shard is written only while the memory it belongs to is not erased (checked
    under the tenant's erasure lock), so a build that ran across an erasure never re-creates the user's folder; a
    shard that cannot be written (a full or read-only disk) is logged, the vectors kept in memory."""

    def __init__(self, directory: Path | None, tenant: _Tenant, erasures: int):
        super().__init__()
        self.directory, self.tenant, self.erasures = directory, tenant, erasures

    def _write_shard(self, keys: list[str], vectors: np.ndarray) -> None:
        with self.tenant.erasing:
            if self.erasures != self.tenant.erasures:  # erased since the memory was loaded
                return
            try:
                super()._write_shard(keys, vectors)
            except StoreError as exc:
                log.warning("embedding shard not persisted (kept in memory): %s", exc)


@dataclass(eq=False)
class _User:
    live: LiveConversation
    directory: Path | None  # where the embedding cache persists
    tenant: _Tenant
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: Set (under ``lock``) once this is no longer the user's loaded memory (erased or evicted): a writer that
    #: waited for ``lock`` looks the user up again.
    gone: bool = False
    last_capture: float = field(default_factory=time.monotonic)
    capturing: int = 0  # capture requests in progress (some may wait for the lock behind organisation)
    seen: int = 0  # capture-log events applied (with a shared store other replicas append too)
    generation: int = 0  # the user id's erasure generation the memory was loaded under
    purpose: str | None = None  # what the memory was captured for (its first capture's purpose); None: any

    def __post_init__(self) -> None:
        self.erasures = self.tenant.erasures
        self.embeddings = _UserEmbeddings(self.directory, self.tenant, self.erasures)  # no cycle: freed on unload

    @property
    def erased(self) -> bool:
        return self.erasures != self.tenant.erasures

    def idle(self) -> bool:
        """Nothing in progress on this memory (no capture, no build); a capture may still be on its way."""
        return not self.capturing and not self.live.building()


class MemoryService:
    """Every user's memory over one :class:`Backend`; ``current`` gives the strategy organisation runs under."""

    def __init__(self, backend: Backend, current: Callable[[], Loaded], max_users: int | None = None,
                 retention: timedelta | None = None):
        if max_users is not None and max_users < 1:
            raise ValueError(f"max_users must be >= 1, got {max_users}")
        self.backend, self.current, self.max_users, self.retention = backend, current, max_users, retention
        #: When each loaded (or once loaded) user's next turn expires (users with no expiring turn absent).
        self._expiry: dict[str, datetime] = {}
        self.purged = 0
        self._users: OrderedDict[str, _User] = OrderedDict()  # least recently used first
        self._tenants: dict[str, _Tenant] = {}
        #: Users evicted with an open session, with their last capture's time (their session still closes when idle).
        self._open_evicted: dict[str, float] = {}
        self._registry = threading.Lock()
        self._queue: "queue.Queue[tuple[str, str]]" = queue.Queue()
        self._captured: set[str] = set()  # users whose memory is stale since their last capture
        self._capture_seen = threading.Condition()
        self._organising = 0  # organisation steps taken off the queue and not finished
        #: Users whose stored memory could not be read, with the reason (503 for them until a restart).
        self.quarantined: dict[str, str] = {}
        self.warmed = 0
        self.organised_steps = 0
        self.organise_failures = 0
        self.recall_log_failures = 0
        self.evictions = 0
        self._released = 0  # evictions whose memory :meth:`release` has handed back

    # ---------------------------------------------------------------- loading and repair

    def _load(self, user: str) -> _User:
        """The user's memory from the capture log, read under the erasure lock (a memory loaded while an erasure runs
        is already marked erased); a load error (see :data:`LOAD_ERRORS`) naming the event, or the sessions
        organised that the log lacks (a log truncated, emptied or deleted)."""
        with self._registry:
            tenant = self._tenants.setdefault(user, _Tenant())
        with tenant.erasing:
            live = LiveConversation(user)
            generation = self.backend.generation(user)  # before the events: an erasure between is seen at a sync
            events = self.backend.events(user)
            apply_events(live, events)
            lost = self.backend.organised(user) - live.closed
            if lost:
                raise ValueError(f"the capture log ({len(events)} event(s)) lacks session(s) {', '.join(sorted(lost))} "
                                 "that were organised: truncated, emptied or deleted? (the organised records hold them)")
            self._note_expiry(user, prune(events, datetime.min.replace(tzinfo=timezone.utc), self.retention)[2])
            return _User(live, self.backend.embeddings_dir(user), tenant, seen=len(events), generation=generation,
                         purpose=purpose_of(events))

    def _note_expiry(self, user: str, when: datetime | None) -> None:
        """Record that one of ``user``'s turns expires at ``when`` (if sooner than the one known)."""
        if when is not None:
            with self._registry:
                self._expiry[user] = min(when, self._expiry.get(user, when))

    def _sync(self, user: str, state: _User) -> list[str]:
        """With a shared store (:attr:`Backend.shared`), apply the events other replicas appended since the last look,
        in log order, queueing the sessions they closed; :class:`_Stale` (the memory dropped) if the user or one of
        its turns was erased meanwhile, even if the user id was captured again since."""
        if not self.backend.shared:
            return []
        with state.lock:
            events = self.backend.events(user, since=state.seen)
            if self.backend.generation(user) != state.generation:  # read after the events: it covers them
                self._forget(user, state)
                raise _Stale(user)
            if not len(state.live):  # a new memory: its first capture names its purpose
                state.purpose = purpose_of(events)
            closed = apply_events(state.live, events, state.seen + 1)
            state.seen += len(events)
            for session in closed:
                self._queue.put((user, session))
            return closed

    def _get(self, user: str, create: bool = False) -> _User:
        """The user's loaded state (loaded now if it is not); :class:`UnknownUser` if none is stored (unless
        ``create``), :class:`Quarantined` if the stored one cannot be read."""
        while True:
            state = self._lookup(user, create)
            if state is not None:
                return state

    def _lookup(self, user: str, create: bool) -> _User | None:
        """:meth:`_get`; ``None`` when the memory loaded was erased before it could be registered (look again)."""
        with self._registry:
            reason = self.quarantined.get(user)
            if reason is not None:
                raise Quarantined(user, reason)
            state = self._users.get(user)
            if state is not None:
                self._users.move_to_end(user)
                self._evict()  # over the bound while a user was busy: unload it now it may be idle
                return state
        if not create and not self.backend.exists(user):  # outside the registry: others are served meanwhile
            raise UnknownUser(user)
        try:
            state = self._load(user)
        except StoreUnavailable:
            raise
        except LOAD_ERRORS as exc:
            with self._registry:
                self.quarantined[user] = str(exc)
            log.error("user %s quarantined (503 for this user; the others are served): %s", user, str(exc))
            raise Quarantined(user, str(exc)) from None
        with self._registry:
            if user in self._users:  # loaded by another request meanwhile
                self._users.move_to_end(user)
                return self._users[user]
            if state.erased:
                return None
            self._users[user] = state
            if user in self._open_evicted:
                state.last_capture = self._open_evicted.pop(user)
            self._evict()
            return state

    def _evict(self) -> None:
        """Unload least recently used idle users beyond ``max_users`` (registry lock held). Nothing is lost: every
        acknowledged turn is in the capture log, queued organisation steps load the user again, and a build due
        after a capture is skipped (the user's next recall builds it); a user with a capture or build in progress
        stays (the bound is then exceeded until it is idle)."""
        if self.max_users is None:
            return
        for user in list(self._users)[:-1]:
            if len(self._users) <= self.max_users:
                return
            self.evictions += self._unload(user, self._users[user])

    def _unload(self, user: str, state: _User) -> bool:
        """Forget ``state`` if it is idle and its lock free (registry lock held; never waiting for the user's lock
        under it): its memory, indexes and vectors are released, an open session still closes when idle, and the
        next request loads the user again from the store. Whether it was unloaded."""
        if not state.idle() or not state.lock.acquire(blocking=False):
            return False
        try:
            if not state.idle():  # a build began meanwhile
                return False
            state.gone = True
            del self._users[user]
            if state.live.open_session is not None:
                self._open_evicted[user] = state.last_capture
            return True
        finally:
            state.lock.release()

    def release(self) -> bool:
        """Hand the memory of users unloaded since the last call back to the operating system (off the request
        path: the service's watcher calls it); whether any was unloaded."""
        with self._registry:
            if self._released == self.evictions:
                return False
            self._released = self.evictions
        heap.release()
        return True

    def _forget(self, user: str, state: _User) -> None:
        """Drop ``state`` as erased (its lock held): no embedding shard or recall line of it is written after."""
        state.tenant.erase()
        self._drop(user, state)

    def _applied(self, user: str, state: _User) -> tuple[_User, list[str]]:
        """After this replica appended an event (``state``'s lock held): the memory with it and the sessions closed.
        When the user's log was rewritten through another replica meanwhile, the memory is loaded again and the
        closed sessions not yet organised are queued (the event appended is in the new log)."""
        try:
            return state, self._sync(user, state)
        except _Stale:
            fresh = self._get(user)
            return fresh, self._organise_unorganised(user, fresh)

    def _organise_unorganised(self, user: str, state: _User) -> list[str]:
        """Queue the organisation of ``state``'s closed sessions whose step has not completed; those sessions."""
        closed = sorted(state.live.closed - self.backend.organised(user))
        for session in closed:
            self._queue.put((user, session))
        return closed

    def _drop(self, user: str, state: _User) -> None:
        """Forget ``state`` (erased, or a new user whose first capture was refused; its lock held): writers that
        waited for its lock look the user up again."""
        state.gone = True
        with self._registry:
            if self._users.get(user) is state:
                del self._users[user]
            self._open_evicted.pop(user, None)

    def recover(self) -> int:
        """Read every stored user once (quarantining those whose files cannot be read), queue the organisation of
        closed sessions whose step never completed (a crash mid-organisation), and unload it again: start-up holds
        no user's memory, each is loaded at its first request. The number of users."""
        users = self.backend.users()
        for user in users:
            try:
                state = self._get(user)
            except Quarantined:
                continue
            self._organise_unorganised(user, state)
            with self._registry:
                if self._users.get(user) is state:
                    self._unload(user, state)
        heap.release()
        return len(users)

    def loaded(self) -> list[str]:
        with self._registry:
            return list(self._users)

    # ---------------------------------------------------------------- capture, close, read

    def capture(self, user: str, turns: list[dict], purpose: str | None = None,
                retain_until: datetime | None = None) -> dict:
        """Validate every turn, append them as one durable log line, then add them to memory; all or nothing.
        ``purpose``: what they may be recalled for (a user's memory holds one; omitted, the user's); ``retain_until``:
        when they are purged (see :meth:`purge_expired`)."""
        event = TurnsEvent(turns=[turn_record(raw, f"turns[{i}]") for i, raw in enumerate(turns)], purpose=purpose,
                           retain_until=retain_until)
        while True:
            state = self._get(user, create=True)
            with self._capture_seen:
                state.capturing += 1
            try:
                with state.lock:
                    if not state.gone:  # else erased or evicted while this waited: look the user up again
                        return self._capture(user, state, event)
            except _Stale:  # erased through another replica: captured into the user's new memory
                continue
            finally:
                with self._capture_seen:
                    state.capturing -= 1
                    self._captured.add(user)
                    self._capture_seen.notify()

    def _capture(self, user: str, state: _User, event: TurnsEvent) -> dict:
        self._sync(user, state)
        if len(state.live):
            if event.purpose is not None and event.purpose != state.purpose:
                held = f"purpose {state.purpose!r}" if state.purpose else "no purpose"
                raise CaptureError(f"user {user!r} already holds memory captured for {held}; turns for purpose "
                                   f"{event.purpose!r} need another user id")
            event = event.model_copy(update={"purpose": state.purpose})
        state.live.check([r.turn() for r in event.turns])
        try:
            self.backend.append(user, event)
        except Exception:
            if not len(state.live):  # a new user's refused first capture registers nobody (nor keeps a shard)
                self._forget(user, state)
            raise
        if self.backend.shared:
            state, closed = self._applied(user, state)  # this capture and any other replica's, in log order
        else:
            state.purpose = event.purpose
            closed = apply_events(state.live, [event])
            for session in closed:
                self._queue.put((user, session))
        self._note_expiry(user, event.model_copy(update={"at": datetime.now(timezone.utc).isoformat()}
                                                 ).expires(self.retention))
        state.last_capture = time.monotonic()
        return {"captured": len(event.turns), "turns": len(state.live), "open_session": state.live.open_session,
                "closed_sessions": closed}

    def close(self, user: str) -> str | None:
        """Close the user's open session (logged), queueing its organisation; the id closed, if any."""
        while True:
            state = self._get(user)
            with state.lock:
                if state.gone:  # erased (the next look says so) or evicted meanwhile
                    continue
                try:
                    self._sync(user, state)
                except _Stale:
                    continue
                session = state.live.open_session
                if session is None:
                    return None
                self.backend.append(user, CloseEvent(close=session))
                if self.backend.shared:
                    self._applied(user, state)
                else:
                    state.live.close(session)
                    self._queue.put((user, session))
                with self._registry:
                    self._open_evicted.pop(user, None)
                return session

    def store(self, user: str, loaded: Loaded) -> MemoryStore:
        """The user's memory store under ``loaded``'s ingestion policy (rebuilt from memoised parts when stale); a
        memory erased while it was built is looked up again (:class:`UnknownUser` once erased)."""
        while True:
            state = self._get(user)
            try:
                built = self._store(user, state, loaded)
            except _Stale:
                continue
            if not state.erased:
                return built

    def _store(self, user: str, state: _User, loaded: Loaded) -> MemoryStore:
        self._sync(user, state)
        rt = loaded.runtime
        return state.live.store(loaded.key, rt.policy, rt.extractor,
                                lambda texts: state.embeddings.encode(rt.embedder, texts), rt.embedder.name)

    def purpose(self, user: str) -> str | None:
        """What the user's memory was captured for (``None``: any purpose); :class:`UnknownUser` if none is held."""
        return self._get(user).purpose

    def turn_count(self, user: str) -> int:
        return len(self._get(user).live)

    def log_recall(self, user: str, record: RecallRecord) -> None:
        """Append ``record`` to the user's recall log unless the user, or a turn it packed, was erased meanwhile.
        Runs after the reply:
        a failed append (a full or read-only disk, the database down) is logged and counted, never raised."""
        with self._registry:
            state, tenant = self._users.get(user), self._tenants.get(user)
        if state is None and not self.backend.exists(user):
            return  # erased since the reply
        try:
            with tenant.erasing if tenant is not None else nullcontext():
                if (state is None or not state.erased) and not (tenant and record.packs(tenant.gone_turns)):
                    self.backend.log_recall(user, record)
        except Exception as exc:  # noqa: BLE001 - telemetry after the reply; the service keeps serving
            self.recall_log_failures += 1
            log.warning("recall of user %s not logged: %s", user, exc)

    def erase(self, user: str) -> Tombstone:
        """Forget the user everywhere (memory, caches, logs, records and their history), a quarantined one too;
        the tombstone. A failed erasure (a read-only disk) changes nothing and raises."""
        while True:
            try:
                state: _User | None = self._get(user)
            except Quarantined:
                state = None
            with state.lock if state is not None else nullcontext():
                if state is not None and state.gone:  # evicted (or erased) while this waited
                    continue
                with self._registry:
                    tenant = self._tenants.setdefault(user, _Tenant())
                tombstone = tenant.erase(lambda: self.backend.erase(user))
                if state is not None:
                    self._drop(user, state)
                with self._registry:
                    self.quarantined.pop(user, None)
                return tombstone

    def erase_turn(self, user: str, turn: str) -> TurnErased:
        """Forget one turn of the user: the store removes it and what holds its words (:meth:`Backend.erase_turn`),
        the memory held here (its indexes and embeddings) is dropped and loaded again without it, and its session,
        if closed, is queued to be organised again (facts and rollups recomputed). :class:`UnknownTurn` if the user
        has no such turn (nothing changed)."""
        while True:
            state = self._get(user)
            with state.lock:
                if state.gone:  # erased or evicted while this waited
                    continue
                erased = state.tenant.erase(lambda: self.backend.erase_turn(user, turn), turns=[turn])
                self._drop(user, state)
            if erased.session in self._get(user).live.closed:
                self._queue.put((user, erased.session))
            return erased

    # ---------------------------------------------------------------- retention (background)

    def purge_expired(self, record: Callable[[str, list[str]], None], now: datetime | None = None) -> int:
        """Purge every turn whose retention has ended by ``now`` (default: now) from the users' capture logs, and
        what was derived from them (organised records and their history, embeddings, recall-log lines that packed
        them; organisation runs again on what is kept). ``record(user, ids)`` (the audit) is called before each
        user's purge is written; a user left with no turn is erased (tombstone). The number of turns purged."""
        now = now or datetime.now(timezone.utc)
        with self._registry:
            due = [user for user, when in self._expiry.items() if when <= now]
        done = 0
        for user in due:
            try:
                done += self._purge(user, now, record)
            except (StoreError, RecordError) as exc:  # a full disk, an unreadable line: tried again at the next look
                log.warning("purging the expired turns of user %s failed: %s", user, exc)
        self.purged += done
        return done

    def _purge(self, user: str, now: datetime, record: Callable[[str, list[str]], None]) -> int:
        while True:
            try:
                state = self._get(user)
            except (UnknownUser, Quarantined):  # erased (nothing to purge) or unreadable (purged once repaired)
                with self._registry:
                    self._expiry.pop(user, None)
                return 0
            with state.lock:
                if state.gone:
                    continue
                generation = self.backend.generation(user)  # before the events, as a load reads them
                events = self.backend.events(user)
                kept, purged, soonest = prune(events, now, self.retention)
                with self._registry:
                    self._expiry.pop(user, None)
                self._note_expiry(user, soonest)
                if not purged:
                    return 0
                record(user, purged)
                # a build or shadow in flight on the old memory writes nothing after it
                done = state.tenant.erase(lambda: self.backend.rewrite(user, kept, set(purged), len(events),
                                                                       generation), turns=purged)
                self._drop(user, state)
                if not done:  # erased or rewritten through another replica meanwhile: loaded again, looked at again
                    continue
                break
        if self.backend.exists(user):  # organise again what was kept
            self._organise_unorganised(user, self._get(user))
        return len(purged)

    def forget_strategies(self, keep: set[str]) -> None:
        with self._registry:
            states = list(self._users.values())
        for state in states:
            state.live.forget(keep)

    # ---------------------------------------------------------------- warming (background)

    def warm_captured(self, strategy_for: Callable[[str], Loaded], quiet: float = WARM_QUIET_S,
                      timeout: float = 0.5) -> int:
        """Build the memory of the users whose captures paused ``quiet`` seconds ago, each under the strategy that
        serves them, so their next recall finds it built (a recall meanwhile waits for the build, not twice the
        work); the number built. Waits up to ``timeout`` for a capture."""
        with self._capture_seen:
            self._capture_seen.wait_for(lambda: self._captured, timeout=timeout)
            with self._registry:
                states = {user: self._users.get(user) for user in self._captured}
            now, due, soonest = time.monotonic(), [], timeout
            for user, state in states.items():
                if state is None:  # erased
                    left = 0.0
                elif state.capturing:  # a capture in progress, perhaps waiting behind organisation: not a pause
                    left = quiet
                else:
                    left = quiet - (now - state.last_capture)
                if left > 0:
                    soonest = min(soonest, left)
                    continue
                self._captured.discard(user)
                if state is not None:  # an erased user needs no build
                    due.append(user)
            if not due and self._captured:
                self._capture_seen.wait(soonest)  # until the first pause is long enough (or another capture)
        for user in due:
            try:
                self.store(user, strategy_for(user))
                self.warmed += 1
            except (UnknownUser, Quarantined):  # erased or quarantined meanwhile
                pass
            except Exception:  # noqa: BLE001 - the recall builds it again and reports what fails
                log.exception("building the memory of user %s after its captures failed", user)
        return len(due)

    # ---------------------------------------------------------------- organisation (background)

    def organise_pending(self, block: bool = False, timeout: float = 0.5) -> int:
        """Run queued organisation steps; the number run."""
        done = 0
        while True:
            try:
                user, session = self._queue.get(block=block and done == 0, timeout=timeout if block else None)
            except queue.Empty:
                return done
            self._organising += 1
            try:
                done += self._organise(user, session)
            finally:
                self._organising -= 1

    def _organise(self, user: str, session: str) -> int:
        """One organisation step; 1 if it ran (or failed), 0 if it was not needed (erased, quarantined, done)."""
        while True:
            try:
                state = self._get(user)
            except (UnknownUser, Quarantined):  # erased or quarantined meanwhile
                return 0
            with state.lock:
                if not state.gone:  # else erased (the next look says so) or evicted meanwhile
                    try:
                        return self._organise_step(user, session, state)
                    except _Stale:
                        continue

    def _organise_step(self, user: str, session: str, state: _User) -> int:
        """The step, the user's lock held."""
        try:
            if session not in state.live.closed or session in self.backend.organised(user):
                return 0  # organised already, or its turns purged since it was queued
            loaded = self.current()
            store = self._store(user, state, loaded)
            self.backend.organise(user, session, state.live.session_turns(session), store, loaded.strategy_hash)
            self.organised_steps += 1
        except _Stale:
            raise
        except Exception:  # noqa: BLE001 - logged and retried at the next start, never lost
            self.organise_failures += 1
            log.exception("organising session %s of user %s failed", session, user)
        return 1

    def close_idle(self, idle_seconds: float) -> list[str]:
        """Close the open session of every user idle for ``idle_seconds``; the users closed."""
        now = time.monotonic()
        closed = []
        with self._registry:
            idle = [user for user, state in self._users.items()
                    if state.live.open_session is not None and now - state.last_capture >= idle_seconds]
            idle += [user for user, last in self._open_evicted.items() if now - last >= idle_seconds]
        for user in idle:
            try:
                if self.close(user) is not None:
                    closed.append(user)
            except (UnknownUser, Quarantined):
                continue
            except StoreError as exc:  # a full or read-only disk: tried again at the next look
                log.warning("closing the idle session of user %s failed: %s", user, exc)
        return closed

    def pending(self) -> int:
        """Closed sessions waiting for organisation, the steps running included."""
        return self._queue.qsize() + self._organising
