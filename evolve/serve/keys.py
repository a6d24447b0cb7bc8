"""API keys of the memory service: a keys file the operator manages (``memevolve keys add|revoke|list``), read by
``memevolve serve --auth FILE``.

The file (JSON) holds, per key, its id, the SHA-256 of its secret (never the secret), the users it may act for
(exact ids, ``prefix*``, or ``*`` for every user) and its scopes. A secret reads ``mev_<id>_<token>`` (a 256-bit
random token): the id finds the key, the secret's SHA-256 is compared with the stored one by
:func:`hmac.compare_digest`, in constant time. A plain SHA-256 suffices because the token is random, not a password.
The service reads the file again whenever it changes on disk, so an added or revoked key counts from the next
request; a file that no longer reads fails every request (503) rather than keep a revoked key alive.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evolve.errors import ConfigError, first_problem
from evolve.files import StoreError, atomic_write_json, now_iso, read_json

#: What a key may do: capture (and close sessions), recall, answer, erase, admin (``/v1/strategy``, ``/metrics``).
SCOPES = ("capture", "recall", "answer", "erase", "admin")
Scope = Literal["capture", "recall", "answer", "erase", "admin"]
KEY_ID = re.compile(r"[0-9a-f]{12}")
SECRET = re.compile(r"mev_([0-9a-f]{12})_[A-Za-z0-9_-]{43}")
_NO_KEY_HASH = hashlib.sha256(b"no such key").hexdigest()


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def valid_binding(pattern: str) -> bool:
    """``*``, an exact user id, or a user-id prefix followed by ``*``."""
    from evolve.serve.backend import valid_user  # not at import: the CLI's parser imports this module

    return pattern == "*" or valid_user(pattern.removesuffix("*"))


class ApiKey(BaseModel):
    """One key as the keys file keeps it."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=KEY_ID.pattern)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the secret")
    users: list[str] = Field(min_length=1, description="user ids, 'prefix*', or '*' (every user)")
    scopes: list[Scope] = Field(min_length=1)
    note: str = Field("", max_length=200)
    created: str
    revoked: str | None = None
    purposes: list[str] | None = Field(None, description="the purposes the key may capture and recall memory for "
                                                        "(null: any, the request's own purpose checked against the "
                                                        "memory's)")

    @field_validator("purposes")
    @classmethod
    def _purposes(cls, purposes: list[str] | None) -> list[str] | None:
        from evolve.serve.records import PURPOSE  # not at import: the CLI's parser imports this module

        bad = next((p for p in purposes or () if not re.fullmatch(PURPOSE, p)), None)
        if bad is not None:
            raise ValueError(f"{bad!r} is not a purpose (letters, digits, '_', '.', ':', '-'; at most 64)")
        if purposes is not None and not purposes:
            raise ValueError("give at least one purpose, or none at all (any purpose)")
        return purposes

    def serves(self, purpose: str | None) -> bool:
        """Whether this key may recall memory held for ``purpose`` (``None``: memory bound to none)."""
        return self.purposes is None or purpose is None or purpose in self.purposes

    def captures(self, purpose: str | None) -> bool:
        """Whether this key may capture turns for ``purpose`` (a purpose-bound key must name one of its own)."""
        return self.purposes is None or purpose in self.purposes

    @field_validator("users")
    @classmethod
    def _bindings(cls, users: list[str]) -> list[str]:
        bad = [u for u in users if not valid_binding(u)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a user id, 'prefix*' or '*'")
        return users

    def acts_for(self, user: str) -> bool:
        """Whether this key may act for ``user``."""
        return any(user.startswith(b[:-1]) if b.endswith("*") else user == b for b in self.users)


class KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keys: list[ApiKey] = []

    @field_validator("keys")
    @classmethod
    def _one_entry_per_id(cls, keys: list[ApiKey]) -> list[ApiKey]:
        """A key id names one key: a file holding one twice (a hand merge, a restore) could be revoked in one entry
        and live in the other, so it is refused until one entry is removed."""
        first: dict[str, int] = {}
        for n, key in enumerate(keys):
            if key.id in first:
                raise ValueError(f"key id {key.id!r} appears twice (entries {first[key.id]} and {n}); a key id names "
                                 "one key: remove one entry (keep the revoked one if either is revoked)")
            first[key.id] = n
        return keys


class KeysUnreadable(StoreError):
    """The keys file cannot be read or does not validate; every request fails (503) until it is fixed."""


def read_keys(path: Path) -> KeysFile:
    """The keys file at ``path``; :class:`KeysUnreadable` naming the file and the field at fault."""
    try:
        data = read_json(path)
    except StoreError as exc:
        raise KeysUnreadable(path, exc.cause) from None
    try:
        return KeysFile.model_validate(data)
    except ValidationError as exc:
        where, problem = first_problem(exc, "top level")
        raise KeysUnreadable(path, f"{where}: {problem}") from None


def write_keys(path: Path, keys: KeysFile) -> None:
    """Replace the keys file atomically (owner-only permissions)."""
    atomic_write_json(path, keys.model_dump())
    os.chmod(path, 0o600)


def add_key(path: Path, users: list[str], scopes: list[str], note: str = "",
            purposes: list[str] | None = None) -> tuple[ApiKey, str]:
    """A new key appended to the keys file (created if missing); the key and its secret, which is kept nowhere."""
    keys = read_keys(path) if path.exists() else KeysFile()
    key_id = secrets.token_hex(6)
    while any(k.id == key_id for k in keys.keys):
        key_id = secrets.token_hex(6)
    secret = f"mev_{key_id}_{secrets.token_urlsafe(32)}"
    try:
        key = ApiKey(id=key_id, sha256=_digest(secret), users=users, scopes=list(dict.fromkeys(scopes)),
                     note=note, created=now_iso(), purposes=list(dict.fromkeys(purposes)) if purposes else None)
    except ValidationError as exc:
        raise ConfigError("{}: {}".format(*first_problem(exc))) from None
    write_keys(path, KeysFile(keys=[*keys.keys, key]))
    return key, secret


def revoke_key(path: Path, key_id: str) -> ApiKey:
    """Mark ``key_id`` revoked (kept in the file, so its id stays meaningful in the audit); the key."""
    keys = read_keys(path)
    found = next((k for k in keys.keys if k.id == key_id), None)
    if found is None:
        raise ConfigError(f"{path}: no key {key_id!r} (see `memevolve keys list --auth {path}`)")
    if found.revoked is None:
        found.revoked = now_iso()
        write_keys(path, keys)
    return found


class KeyStore:
    """The keys file as the service reads it: again whenever the file changes (size, mtime, inode)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise ConfigError(f"--auth {self.path}: no keys file (create one with `memevolve keys add --auth "
                              f"{self.path} --user USER --scope recall`)")
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._keys: dict[str, ApiKey] = {}
        self._current()

    def _current(self) -> dict[str, ApiKey]:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise KeysUnreadable(self.path, exc.strerror or str(exc)) from None
        seen = (st.st_size, st.st_mtime_ns, st.st_ino)
        with self._lock:
            if seen != self._seen:
                self._keys = {k.id: k for k in read_keys(self.path).keys}
                self._seen = seen
            return self._keys

    def authenticate(self, secret: str | None) -> ApiKey | None:
        """The live key whose secret is ``secret`` (compared in constant time), or ``None``."""
        keys = self._current()
        match = SECRET.fullmatch(secret or "")
        key = keys.get(match.group(1)) if match else None
        same = hmac.compare_digest(_digest(secret or ""), key.sha256 if key is not None else _NO_KEY_HASH)
        return key if same and key is not None and key.revoked is None else None

    @staticmethod
    def key_id(secret: str | None) -> str | None:
        """The key id a presented secret claims (for the audit of a refusal), or ``None``."""
        match = SECRET.fullmatch(secret or "")
        return match.group(1) if match else None
