"""Per-user served memory: capture into the durable log, incremental derived stores (built again off the request
path once a user's captures pause), organisation off the request path (a closed session's records and Git commit),
erasure; one lock per user serialises its writers."""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from evolve.errors import EvolveError
from evolve.benchmarks.locomo import parse_locomo_date
from evolve.benchmarks.types import Turn
from evolve.runtime.cache import EmbeddingCache
from evolve.runtime.live import CaptureError, LiveConversation
from evolve.runtime.store import MemoryStore
from evolve.serve.backend import Backend
from evolve.serve.strategy import Loaded

log = logging.getLogger(__name__)

#: Seconds a user's captures must pause before their memory is built again in the background (a conversation
#: imported turn by turn is built once at its end, not after every turn).
WARM_QUIET_S = 0.1


def parse_time(text: str, where: str) -> datetime:
    """An ISO 8601 or LoCoMo-style (``1:56 pm on 8 May, 2023``) moment; :class:`CaptureError` naming ``where``."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    try:
        return parse_locomo_date(text)
    except ValueError:
        raise CaptureError(f"{where}: unparseable time {text!r} (ISO 8601 or e.g. '1:56 pm on 8 May, 2023')") from None


def turn_record(raw: dict, where: str) -> dict:
    """A request's turn as the capture log keeps it: the image caption folded into the text (as the LoCoMo adapter
    folds it), the time in ISO form."""
    caption = (raw.get("image_caption") or "").strip()
    text = f"{raw['text']} [shares a photo of {caption}]" if caption else raw["text"]
    when = parse_time(raw["time"], f"{where}.time").isoformat() if raw.get("time") else None
    return {"id": raw["id"], "speaker": raw["speaker"], "text": text, "session": raw["session"], "time": when}


def _turn(record: dict) -> Turn:
    when = datetime.fromisoformat(record["time"]) if record.get("time") else None
    return Turn(record["id"], record["speaker"], record["text"], record["session"], when)


class UnknownUser(EvolveError, LookupError):
    """No memory is held for the user (never captured, or erased)."""


@dataclass
class _User:
    live: LiveConversation
    embeddings: EmbeddingCache
    lock: threading.RLock = field(default_factory=threading.RLock)
    last_capture: float = field(default_factory=time.monotonic)
    capturing: int = 0  # capture requests in progress (some may wait for the lock behind organisation)
    seen: int = 0  # capture-log events applied (with a shared store other replicas append too)


class MemoryService:
    """Every user's memory over one :class:`Backend`; ``current`` gives the strategy organisation runs under."""

    def __init__(self, backend: Backend, current: Callable[[], Loaded]):
        self.backend, self.current = backend, current
        self._users: dict[str, _User] = {}
        self._registry = threading.Lock()
        self._queue: "queue.Queue[tuple[str, str]]" = queue.Queue()
        self._captured: set[str] = set()  # users whose memory is stale since their last capture
        self._capture_seen = threading.Condition()
        self.warmed = 0
        self.organised_steps = 0
        self.organise_failures = 0

    # ---------------------------------------------------------------- loading and repair

    def _load(self, user: str) -> _User:
        live = LiveConversation(user)
        events = self.backend.events(user)
        for event in events:
            for record in event.get("turns", ()):
                live.add(_turn(record))
            if "close" in event:
                live.close(event["close"])
        return _User(live, EmbeddingCache(self.backend.embeddings_dir(user)), seen=len(events))

    def _sync(self, user: str, state: _User) -> list[str]:
        """With a shared store (``backend.shared``), apply the events other replicas appended since the last look,
        in log order, queueing the sessions they closed; :class:`UnknownUser` if the user was erased meanwhile."""
        if not getattr(self.backend, "shared", False):
            return []
        with state.lock:
            events = self.backend.events(user, since=state.seen)
            if not events and state.seen and self.backend.event_count(user) < state.seen:
                with self._registry:
                    self._users.pop(user, None)
                raise UnknownUser(user)
            closed = []
            for event in events:
                closed += [c for c in (state.live.add(_turn(r)) for r in event.get("turns", ())) if c is not None]
                if "close" in event and state.live.close(event["close"]) is not None:
                    closed.append(event["close"])
            state.seen += len(events)
            for session in closed:
                self._queue.put((user, session))
            return closed

    def _get(self, user: str, create: bool = False) -> _User:
        with self._registry:
            state = self._users.get(user)
            if state is None:
                if not create and user not in self.backend.users():
                    raise UnknownUser(user)
                state = self._users[user] = self._load(user)
            return state

    def recover(self) -> int:
        """Load every stored user and queue the organisation of closed sessions whose step never completed (a crash
        mid-organisation); return the number of users."""
        users = self.backend.users()
        for user in users:
            state = self._get(user)
            for session in sorted(state.live.closed - self.backend.organised(user)):
                self._queue.put((user, session))
        return len(users)

    def loaded(self) -> list[str]:
        with self._registry:
            return list(self._users)

    # ---------------------------------------------------------------- capture, close, read

    def capture(self, user: str, turns: list[dict]) -> dict:
        """Validate every turn, append them as one durable log line, then add them to memory; all or nothing."""
        records = [turn_record(raw, f"turns[{i}]") for i, raw in enumerate(turns)]
        state = self._get(user, create=True)
        with self._capture_seen:
            state.capturing += 1
        try:
            return self._capture(user, state, records)
        finally:
            with self._capture_seen:
                state.capturing -= 1
                self._captured.add(user)
                self._capture_seen.notify()

    def _capture(self, user: str, state: _User, records: list[dict]) -> dict:
        with state.lock:
            self._sync(user, state)
            state.live.check([_turn(r) for r in records])
            self.backend.append(user, {"turns": records})
            if getattr(self.backend, "shared", False):
                closed = self._sync(user, state)  # this capture and any other replica's, in log order
            else:
                closed = [c for c in (state.live.add(_turn(r)) for r in records) if c is not None]
                for session in closed:
                    self._queue.put((user, session))
            state.last_capture = time.monotonic()
            return {"captured": len(records), "turns": len(state.live), "open_session": state.live.open_session,
                    "closed_sessions": closed}

    def close(self, user: str) -> str | None:
        """Close the user's open session (logged), queueing its organisation; the id closed, if any."""
        state = self._get(user)
        with state.lock:
            session = state.live.open_session
            if session is None:
                return None
            self.backend.append(user, {"close": session})
            if getattr(self.backend, "shared", False):
                self._sync(user, state)
            else:
                state.live.close(session)
                self._queue.put((user, session))
            return session

    def store(self, user: str, loaded: Loaded) -> MemoryStore:
        """The user's memory store under ``loaded``'s ingestion policy (rebuilt from memoised parts when stale)."""
        state = self._get(user)
        self._sync(user, state)
        rt = loaded.runtime
        return state.live.store(loaded.key, rt.policy, rt.extractor,
                                lambda texts: state.embeddings.encode(rt.embedder, texts), rt.embedder.name)

    def turn_count(self, user: str) -> int:
        return len(self._get(user).live)

    def erase(self, user: str) -> dict:
        """Forget the user everywhere (memory, caches, logs, records and their history); the tombstone."""
        state = self._get(user)
        with state.lock:
            with self._registry:
                self._users.pop(user, None)
            return self.backend.erase(user)

    def forget_strategies(self, keep: set[str]) -> None:
        for user in self.loaded():
            self._get(user).live.forget(keep)

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
            except UnknownUser:  # erased meanwhile
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
            try:
                state = self._get(user)
            except UnknownUser:  # erased meanwhile
                continue
            with state.lock:
                if session in self.backend.organised(user):
                    continue
                loaded = self.current()
                try:
                    store = self.store(user, loaded)
                    self.backend.organise(user, session, state.live.session_turns(session), store,
                                          loaded.strategy_hash)
                    self.organised_steps += 1
                except Exception:  # noqa: BLE001 - logged and retried at the next start, never lost
                    self.organise_failures += 1
                    log.exception("organising session %s of user %s failed", session, user)
            done += 1

    def close_idle(self, idle_seconds: float) -> list[str]:
        """Close the open session of every user idle for ``idle_seconds``; the users closed."""
        now = time.monotonic()
        closed = []
        for user in self.loaded():
            try:
                state = self._get(user)
            except UnknownUser:
                continue
            if state.live.open_session is not None and now - state.last_capture >= idle_seconds:
                if self.close(user) is not None:
                    closed.append(user)
        return closed

    def pending(self) -> int:
        return self._queue.qsize()
