"""Who may call the memory service, and the audit every call goes to: FastAPI dependencies (``Security`` with the
scope a route needs) over the keys file (:mod:`evolve.serve.keys`) and the audit (:mod:`evolve.serve.audit`).

``401`` without a valid key (``Authorization: Bearer mev_...``); ``403`` for a key outside its scopes or its users,
with the same words whether the user exists or not, so a key learns nothing about users it may not act for. Every
refusal is an audit line (``DENY``). Without ``--auth`` every caller passes (key id ``null`` in the audit).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path as PathParam, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer, SecurityScopes

from evolve.errors import EvolveError
from evolve.files import StoreError
from evolve.serve.backend import StoreUnavailable
from evolve.serve.audit import Audit, AuditEvent, user_hash
from evolve.serve.keys import ApiKey, KeyStore

UserId = Annotated[str, PathParam(description="The user (tenant) whose memory is read or written: letters, digits, "
                                              "'_', '-', '.', at most 128 characters.", max_length=200)]
_bearer = HTTPBearer(auto_error=False, description="an API key from `memevolve keys add` (with --auth)")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


class AuditFailed(EvolveError):
    """An operation's audit line could not be written (503)."""


class Denied(EvolveError):
    """A refused request (401 or 403), already audited."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class Caller:
    """An admitted request: its key id (``None`` without ``--auth``) and the scope it was admitted for."""

    key: str | None
    scope: str


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

    def admit(self, scope: str, secret: str | None, user: str | None) -> Caller:
        """The caller of ``scope`` (for ``user``, if the route names one); :class:`Denied` (audited) if refused."""
        if self.keys is None:
            return Caller(None, scope)
        key: ApiKey | None = self.keys.authenticate(secret)
        if key is None:
            claimed = KeyStore.key_id(secret)
            raise self.deny(401, "a valid API key is required: Authorization: Bearer <secret from `memevolve keys "
                                 "add`>", claimed, user, scope, "no key" if secret is None else "unknown or revoked key")
        if scope not in key.scopes:
            raise self.deny(403, f"key {key.id} may not {scope}", key.id, user, scope, "scope")
        if user is not None and not key.acts_for(user):
            raise self.deny(403, f"key {key.id} may not act for user {user!r}", key.id, user, scope, "user")
        return Caller(key.id, scope)


def _access(request: Request) -> Access:
    return request.app.state.access


def for_user(scopes: SecurityScopes, request: Request, user: UserId, credentials: Credentials) -> Caller:
    """Dependency of a route on one user's memory: ``Security(for_user, scopes=[SCOPE])``."""
    return _access(request).admit(scopes.scopes[0], credentials.credentials if credentials else None, user)


def for_service(scopes: SecurityScopes, request: Request, credentials: Credentials) -> Caller:
    """Dependency of a route on the service itself (``admin``): ``Security(for_service, scopes=["admin"])``."""
    return _access(request).admit(scopes.scopes[0], credentials.credentials if credentials else None, None)
