"""Per-user served memory: capture into the durable log, incremental derived stores (built again off the request
path once a user's captures pause: :mod:`evolve.serve.background`), organisation off the request path (a closed
session's records and Git commit), erasure, users unloaded beyond a bound; one lock per user serialises its writers.
A user whose stored memory cannot be read is quarantined (503 for that user, the others served)."""
from __future__ import annotations

import logging
import queue
import threading
import time
from contextlib import nullcontext
from collections import OrderedDict
from datetime import datetime, timedelta, timezone
from typing import Callable

from evolve.benchmarks.types import Conversation
from evolve.runtime.live import CaptureError, LiveConversation
from evolve.runtime.store import MemoryStore
from evolve.serve import heap
from evolve.serve.backend import Backend, StoreUnavailable
from evolve.serve.background import Background
from evolve.serve.capturelog import apply_events, prune, purpose_of, turn_record
from evolve.serve.records import CloseEvent, RecallRecord, Tombstone, TurnErased, TurnsEvent
from evolve.serve.strategy import Loaded
from evolve.serve.tenants import LOAD_ERRORS, Quarantined, Stale, Tenant, UnknownUser, UserState

log = logging.getLogger(__name__)


class MemoryService(Background):
    """Every user's memory over one :class:`Backend`; ``current`` gives the strategy organisation runs under."""

    def __init__(self, backend: Backend, current: Callable[[], Loaded], max_users: int | None = None,
                 retention: timedelta | None = None):
        if max_users is not None and max_users < 1:
            raise ValueError(f"max_users must be >= 1, got {max_users}")
        self.backend, self.current, self.max_users, self.retention = backend, current, max_users, retention
        #: When each loaded (or once loaded) user's next turn expires (users with no expiring turn absent).
        self._expiry: dict[str, datetime] = {}
        self.purged = 0
        self._users: OrderedDict[str, UserState] = OrderedDict()  # least recently used first
        self._tenants: dict[str, Tenant] = {}
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

    def _load(self, user: str) -> UserState:
        """The user's memory from the capture log, read under the erasure lock (a memory loaded while an erasure runs
        is already marked erased); a load error (see :data:`LOAD_ERRORS`) naming the event, or the sessions
        organised that the log lacks (a log truncated, emptied or deleted)."""
        with self._registry:
            tenant = self._tenants.setdefault(user, Tenant())
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
            return UserState(live, self.backend.embeddings_dir(user), tenant, seen=len(events), generation=generation,
                         purpose=purpose_of(events))

    def _note_expiry(self, user: str, when: datetime | None) -> None:
        """Record that one of ``user``'s turns expires at ``when`` (if sooner than the one known)."""
        if when is not None:
            with self._registry:
                self._expiry[user] = min(when, self._expiry.get(user, when))

    def _sync(self, user: str, state: UserState) -> list[str]:
        """With a shared store (:attr:`Backend.shared`), apply the events other replicas appended since the last look,
        in log order, queueing the sessions they closed; :class:`Stale` (the memory dropped) if the user or one of
        its turns was erased meanwhile, even if the user id was captured again since."""
        if not self.backend.shared:
            return []
        with state.lock:
            events = self.backend.events(user, since=state.seen)
            if self.backend.generation(user) != state.generation:  # read after the events: it covers them
                self._forget(user, state)
                raise Stale(user)
            if not len(state.live):  # a new memory: its first capture names its purpose
                state.purpose = purpose_of(events)
            closed = apply_events(state.live, events, state.seen + 1)
            state.seen += len(events)
            for session in closed:
                self._queue.put((user, session))
            return closed

    def _get(self, user: str, create: bool = False) -> UserState:
        """The user's loaded state (loaded now if it is not); :class:`UnknownUser` if none is stored (unless
        ``create``), :class:`Quarantined` if the stored one cannot be read."""
        while True:
            state = self._lookup(user, create)
            if state is not None:
                return state

    def _lookup(self, user: str, create: bool) -> UserState | None:
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

    def _unload(self, user: str, state: UserState) -> bool:
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

    def _forget(self, user: str, state: UserState) -> None:
        """Drop ``state`` as erased (its lock held): no embedding shard or recall line of it is written after."""
        state.tenant.erase()
        self._drop(user, state)

    def _applied(self, user: str, state: UserState) -> tuple[UserState, list[str]]:
        """After this replica appended an event (``state``'s lock held): the memory with it and the sessions closed.
        When the user's log was rewritten through another replica meanwhile, the memory is loaded again and the
        closed sessions not yet organised are queued (the event appended is in the new log)."""
        try:
            return state, self._sync(user, state)
        except Stale:
            fresh = self._get(user)
            return fresh, self._organise_unorganised(user, fresh)

    def _organise_unorganised(self, user: str, state: UserState) -> list[str]:
        """Queue the organisation of ``state``'s closed sessions whose step has not completed; those sessions."""
        closed = sorted(state.live.closed - self.backend.organised(user))
        for session in closed:
            self._queue.put((user, session))
        return closed

    def _drop(self, user: str, state: UserState) -> None:
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
            except Stale:  # erased through another replica: captured into the user's new memory
                continue
            finally:
                with self._capture_seen:
                    state.capturing -= 1
                    self._captured.add(user)
                    self._capture_seen.notify()

    def _capture(self, user: str, state: UserState, event: TurnsEvent) -> dict:
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
                "closed_sessions": closed, "images": state.live.images_of({r.id for r in event.turns})}

    def close(self, user: str) -> str | None:
        """Close the user's open session (logged), queueing its organisation; the id closed, if any."""
        while True:
            state = self._get(user)
            with state.lock:
                if state.gone:  # erased (the next look says so) or evicted meanwhile
                    continue
                try:
                    self._sync(user, state)
                except Stale:
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
            except Stale:
                continue
            if not state.erased:
                return built

    def _store(self, user: str, state: UserState, loaded: Loaded) -> MemoryStore:
        self._sync(user, state)
        rt = loaded.runtime
        return state.live.store(loaded.key, rt.policy, rt.extractor,
                                lambda texts: state.embeddings.encode(rt.embedder, texts), rt.embedder.name, rt.fuser)

    def purpose(self, user: str) -> str | None:
        """What the user's memory was captured for (``None``: any purpose); :class:`UnknownUser` if none is held."""
        return self._get(user).purpose

    def conversation(self, user: str) -> Conversation:
        """The user's captured turns as a conversation (its sessions in capture order; read under the live
        conversation's own lock, like :meth:`turn_count`, so a build holding the user's lock does not hold it up)."""
        return self._get(user).live.conversation()

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
                state: UserState | None = self._get(user)
            except Quarantined:
                state = None
            with state.lock if state is not None else nullcontext():
                if state is not None and state.gone:  # evicted (or erased) while this waited
                    continue
                with self._registry:
                    tenant = self._tenants.setdefault(user, Tenant())
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

    def forget_strategies(self, keep: set[str]) -> None:
        with self._registry:
            states = list(self._users.values())
        for state in states:
            state.live.forget(keep)
