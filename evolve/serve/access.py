"""Who may call the memory service, and the audit every call goes to: admission over the keys file
(:mod:`evolve.serve.keys`) and the audit (:mod:`evolve.serve.audit`). The routes declare it as FastAPI ``Security``
dependencies with the scope they need (:mod:`evolve.serve.routes.deps`).

``401`` without a valid key (``Authorization: Bearer mev_...``); ``403`` for a key outside its scopes or its users,
with the same words whether the user exists or not, so a key learns nothing about users it may not act for. Every
refusal is audited (``DENY``): the first of a kind (key id, route, scope, status, reason, user) in a minute is a
line at once; its repeats in that minute are counted and written as one line (``counts.repeated``) when the minute
is over (at the next such refusal, or at the service's next housekeeping, or at its stop), so a flood of bad
requests costs a line a minute, not one each. Without ``--auth`` every caller passes (key id ``null``).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from evolve.errors import EvolveError
from evolve.files import StoreError
from evolve.serve.backend import StoreUnavailable
from evolve.serve.audit import Audit, AuditEvent
from evolve.serve.keys import ApiKey, KeyStore


class AuditFailed(EvolveError):
    """An operation's audit line could not be written (503)."""


class Denied(EvolveError):
    """A refused request (401 or 403), already audited."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


#: Seconds over which repeated refusals of one kind share an audit line.
DENY_WINDOW_S = 60.0


class Access:
    """The keys (``None``: no authentication) and the audit (``None``: none kept, e.g. a bare test app)."""

    def __init__(self, keys: KeyStore | None = None, audit: Audit | None = None):
        self.keys, self.audit = keys, audit
        #: Seconds since the epoch, for the refusal windows.
        self.clock: Callable[[], float] = time.time
        #: Refusals of one kind -> (the window they fall in, its repeats not yet written).
        self._repeats: dict[tuple, tuple[int, int]] = {}
        self._repeats_lock = threading.Lock()

    def record(self, type: str, key: str | None, user: str | None, **event) -> None:
        """One audit line for ``user`` (by the audit's name of it); :class:`AuditFailed` if it cannot be written."""
        if self.audit is None:
            return
        try:
            self.audit.record(type, AuditEvent(key=key, user=self.audit.names.of(user) if user else None, **event))
        except (StoreError, StoreUnavailable) as exc:
            raise AuditFailed(f"the audit line of this {type.lower()} could not be written ({exc}); a capture, "
                              "close or erasure was carried out, a recall's reply is withheld") from None

    def deny(self, status: int, message: str, key: str | None, user: str | None, operation: str,
             reason: str, route: str | None = None) -> Denied:
        """The refusal, audited: a line for the first of its kind in a window, a count for its repeats."""
        kind = (key, route, operation, status, reason, user)
        window = int(self.clock() // DENY_WINDOW_S)
        with self._repeats_lock:
            seen, repeats = self._repeats.get(kind, (None, 0))
            if seen == window:
                self._repeats[kind] = (window, repeats + 1)
                return Denied(status, message)
            self._repeats[kind] = (window, 0)
        if repeats:
            self._write_repeats(kind, repeats)
        self.record("DENY", key, user, operation=operation, status=status, reason=reason)
        return Denied(status, message)

    def flush(self, now: float | None = None) -> int:
        """Write the counted repeats of every window that is over by ``now`` (all of them with ``now=inf``, at a
        stop); the lines written."""
        cutoff = (self.clock() if now is None else now) / DENY_WINDOW_S  # a window below it is over
        with self._repeats_lock:
            due = {kind: (seen, n) for kind, (seen, n) in self._repeats.items() if n and seen + 1 <= cutoff}
            self._repeats.update({kind: (seen, 0) for kind, (seen, _) in due.items()})
        for kind, (_, n) in due.items():
            self._write_repeats(kind, n)
        return len(due)

    def _write_repeats(self, kind: tuple, repeats: int) -> None:
        key, route, operation, status, reason, user = kind
        self.record("DENY", key, user, operation=operation, status=status, reason=reason,
                    counts={"repeated": repeats})

    def admit(self, scope: str, secret: str | None, user: str | None, route: str | None = None) -> "Caller":
        """The caller of ``scope`` (for ``user``, if the route names one); :class:`Denied` (audited) if refused."""
        if self.keys is None:
            return Caller(self, None, scope)
        key: ApiKey | None = self.keys.authenticate(secret)
        if key is None:
            claimed = KeyStore.key_id(secret)
            raise self.deny(401, "a valid API key is required: Authorization: Bearer <secret from `memevolve keys "
                                 "add`>", claimed, user, scope,
                             "no key" if secret is None else "unknown or revoked key", route)
        if scope not in key.scopes:
            raise self.deny(403, f"key {key.id} may not {scope}", key.id, user, scope, "scope", route)
        if user is not None and not key.acts_for(user):
            raise self.deny(403, f"key {key.id} may not act for user {user!r}", key.id, user, scope, "user", route)
        return Caller(self, key.id, scope, route, key)


@dataclass(frozen=True)
class Caller:
    """An admitted request: its key id (``None`` without ``--auth``) and the scope it was admitted for; what it does
    is audited under its key."""

    access: Access
    key: str | None
    scope: str
    route: str | None = None
    api_key: ApiKey | None = None

    def serves(self, purpose: str | None) -> bool:
        """Whether the caller's key may recall memory held for ``purpose`` (any, without a key)."""
        return self.api_key is None or self.api_key.serves(purpose)

    def captures(self, purpose: str | None) -> bool:
        """Whether the caller's key may capture turns for ``purpose`` (any, without a key)."""
        return self.api_key is None or self.api_key.captures(purpose)

    def record(self, type: str, user: str | None, **event) -> None:
        """The audit line of this caller's ``type`` operation on ``user`` (see :meth:`Access.record`)."""
        self.access.record(type, self.key, user, **event)

    def deny(self, message: str, user: str, reason: str) -> Denied:
        """A 403 for this caller, audited (a refusal past admission, e.g. a purpose that does not match)."""
        return self.access.deny(403, message, self.key, user, self.scope, reason, self.route)
