"""How a store names a user where the id itself must not appear: audit lines, tombstones, erasure generations.

The name is the sha256 of the id, keyed when ``MEMEVOLVE_USER_KEY`` holds a per-deployment secret:
HMAC-SHA256(key, sha256(id)). Unkeyed, anyone holding the audit can confirm a guessed id by hashing it, after its
erasure too; keyed, only whoever holds the key can. The key is kept outside the data directory (the environment, a
secrets manager), like ``MEMEVOLVE_AUDIT_KEY``.

Keying the sha256 rather than the id lets ``memevolve audit rekey`` turn a store's existing names into keyed ones
without knowing any user id (:mod:`evolve.serve.rekey`). The same property makes a change of key impossible
without the ids: the key, once set, stays. A store records how it names users (:class:`Naming`, with a check value
that identifies the key without revealing it), and a service whose key differs is refused at start.
"""
from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from evolve.errors import ConfigError
from evolve.serve.records import Record
from evolve.state.journal import chain_key

USER_KEY_ENV = "MEMEVOLVE_USER_KEY"
_CHECK = b"memevolve user names"


class Naming(Record):
    """How a store names users (stored beside them: ``<data>/naming.json``, table ``mem_naming``)."""

    scheme: Literal["sha256", "hmac-sha256"]
    check: str | None = Field(None, description="HMAC-SHA256(key, a fixed text): which key, never the key itself")

    def said(self) -> str:
        return "sha256 of the id (unkeyed)" if self.check is None else f"a keyed hash (key check {self.check[:12]})"


#: How a store written before names were recorded names users.
LEGACY = Naming(scheme="sha256")


@dataclass(frozen=True)
class Pseudonyms:
    """The names of users under ``key`` (``None``: unkeyed sha256)."""

    key: bytes | None = None

    @classmethod
    def from_env(cls) -> "Pseudonyms":
        return cls(chain_key(USER_KEY_ENV))

    def of(self, user: str) -> str:
        """The user's name."""
        return self.keyed(hashlib.sha256(user.encode("utf-8")).hexdigest())

    def keyed(self, digest: str) -> str:
        """The name of the user whose id has the sha256 ``digest`` (what an unkeyed store holds)."""
        if self.key is None:
            return digest
        return hmac.new(self.key, digest.encode("ascii"), hashlib.sha256).hexdigest()

    @property
    def naming(self) -> Naming:
        if self.key is None:
            return LEGACY
        return Naming(scheme="hmac-sha256", check=hmac.new(self.key, _CHECK, hashlib.sha256).hexdigest())


def check_naming(stored: Naming, names: Pseudonyms, where: str) -> None:
    """Refuse (:class:`ConfigError`) a service or command whose names differ from the store's."""
    current = names.naming
    if stored == current:
        return
    if stored == LEGACY:
        raise ConfigError(f"{where} names users by the {stored.said()}, and {USER_KEY_ENV} is set: key its "
                          f"existing names once with `memevolve audit rekey` (service stopped), then start it")
    if current == LEGACY:
        raise ConfigError(f"{where} names users by {stored.said()}: set {USER_KEY_ENV} to the deployment's key")
    raise ConfigError(f"{where} names users by {stored.said()}, not this {USER_KEY_ENV} (key check "
                      f"{current.check[:12] if current.check else ''}): a key cannot change once set")
