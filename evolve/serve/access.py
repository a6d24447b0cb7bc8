"""Who may call the memory service, and the audit every call goes to: admission over the keys file
(:mod:`evolve.serve.keys`) and the audit (:mod:`evolve.serve.audit`). The routes declare it as FastAPI ``Security``
dependencies with the scope they need (:mod:`evolve.serve.routes.deps`).

``401`` without a valid key (``Authorization: Bearer mev_...``); ``403`` for a key outside its scopes or its users,
with the same words whether the user exists or not, so a key learns nothing about users it may not act for. Every
refusal is an audit line (``DENY``). Without ``--auth`` every caller passes (key id ``null`` in the audit).
"""
from __future__ import annotations

from dataclasses import dataclass

from evolve.errors import EvolveError
from evolve.files import StoreError
from evolve.serve.backend import StoreUnavailable
from evolve.serve.audit import Audit, AuditEvent, user_hash
from evolve.serve.keys import ApiKey, KeyStore


class AuditFailed(EvolveError):
    """An operation's audit line could not be written (503)."""


class Denied(EvolveError):
    """A refused request (401 or 403), already audited."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class Access:
    """The keys (``None``: no authentication) and the audit (``None``: none kept, e.g. a bare test app)."""

    def __init__(self, keys: KeyStore | None = None, audit: Audit | None = None):
        self.keys, self.audit = keys, audit

    def record(self, type: str, key: str | None, user: str | None, **event) -> None:
        """One audit line for ``user`` (named by its hash); :class:`AuditFailed` if it cannot be written."""
        if self.audit is None:
            return
        try:
            self.audit.record(type, AuditEvent(key=key, user=user_hash(user) if user else None, **event))
        except (StoreError, StoreUnavailable) as exc:
            raise AuditFailed(f"the audit line of this {type.lower()} could not be written ({exc}); a capture, "
                              "close or erasure was carried out, a recall's reply is withheld") from None

    def deny(self, status: int, message: str, key: str | None, user: str | None, operation: str,
             reason: str) -> Denied:
        """The refusal, audited."""
        self.record("DENY", key, user, operation=operation, status=status, reason=reason)
        return Denied(status, message)

    def admit(self, scope: str, secret: str | None, user: str | None) -> "Caller":
        """The caller of ``scope`` (for ``user``, if the route names one); :class:`Denied` (audited) if refused."""
        if self.keys is None:
            return Caller(self, None, scope)
        key: ApiKey | None = self.keys.authenticate(secret)
        if key is None:
            claimed = KeyStore.key_id(secret)
            raise self.deny(401, "a valid API key is required: Authorization: Bearer <secret from `memevolve keys "
                                 "add`>", claimed, user, scope,
                             "no key" if secret is None else "unknown or revoked key")
        if scope not in key.scopes:
            raise self.deny(403, f"key {key.id} may not {scope}", key.id, user, scope, "scope")
        if user is not None and not key.acts_for(user):
            raise self.deny(403, f"key {key.id} may not act for user {user!r}", key.id, user, scope, "user")
        return Caller(self, key.id, scope)


@dataclass(frozen=True)
class Caller:
    """An admitted request: its key id (``None`` without ``--auth``) and the scope it was admitted for; what it does
    is audited under its key."""

    access: Access
    key: str | None
    scope: str

    def record(self, type: str, user: str | None, **event) -> None:
        """The audit line of this caller's ``type`` operation on ``user`` (see :meth:`Access.record`)."""
        self.access.record(type, self.key, user, **event)

    def deny(self, message: str, user: str, reason: str) -> Denied:
        """A 403 for this caller, audited (a refusal past admission, e.g. a purpose that does not match)."""
        return self.access.deny(403, message, self.key, user, self.scope, reason)
