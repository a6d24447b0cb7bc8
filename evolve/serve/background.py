"""The memory service's work off the request path: retention purges, building the memory of users whose captures
paused, organising closed sessions, closing idle ones (:class:`MemoryService` runs it on the service's workers)."""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from datetime import datetime, timedelta, timezone
from typing import Callable

from evolve.files import StoreError
from evolve.serve.backend import Backend
from evolve.serve.capturelog import prune
from evolve.serve.records import RecordError
from evolve.serve.strategy import Loaded
from evolve.serve.tenants import Quarantined, Stale, UnknownUser, UserState

log = logging.getLogger(__name__)

#: Seconds a user's captures must pause before their memory is built again in the background (a conversation
#: imported turn by turn is built once at its end, not after every turn).
WARM_QUIET_S = 0.1


class Background:
    """The background half of :class:`evolve.serve.memory.MemoryService` (its state is the service's)."""

    backend: Backend
    current: Callable[[], Loaded]
    retention: timedelta | None
    _registry: threading.Lock
    _users: OrderedDict[str, UserState]
    _expiry: dict[str, datetime]
    _open_evicted: dict[str, float]
    _queue: "queue.Queue[tuple[str, str]]"
    _captured: set[str]
    _capture_seen: threading.Condition
    _organising: int
    purged: int
    warmed: int
    organised_steps: int
    organise_failures: int

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
                    except Stale:
                        continue

    def _organise_step(self, user: str, session: str, state: UserState) -> int:
        """The step, the user's lock held."""
        try:
            if session not in state.live.closed or session in self.backend.organised(user):
                return 0  # organised already, or its turns purged since it was queued
            loaded = self.current()
            store = self._store(user, state, loaded)
            self.backend.organise(user, session, state.live.session_turns(session), store, loaded.strategy_hash)
            self.organised_steps += 1
        except Stale:
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
