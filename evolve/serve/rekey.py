"""Keying a store's user names: the naming a service checks at start, and ``memevolve audit rekey``.

A store written before ``MEMEVOLVE_USER_KEY`` names users by the unkeyed sha256 of their ids. :func:`rekey` turns
every such name (audit lines, tombstones, erasure generations) into HMAC-SHA256(key, name) without any user id,
chains the audit again (each line's time kept; a REKEY line at its end names the old head), and rewrites the
audit's witness files so each witnessed head is the new chain's line at the same index, after checking it was the
old chain's. Run it once, with every service on the store stopped.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from evolve.canonical import canonical_json
from evolve.errors import ConfigError
from evolve.files import StoreError, atomic_write_text, iter_jsonl
from evolve.serve.audit import audit_of, verify_audit
from evolve.serve.backend import Backend
from evolve.serve.pseudonym import LEGACY, USER_KEY_ENV, Pseudonyms, check_naming

#: Beside a witness file: its rewrite, staged before the store commits and moved in place after.
STAGED = ".rekey"


def claim_naming(backend: Backend) -> None:
    """At a service's start: a new store records its names' scheme; any other must name users as this service
    does (:class:`ConfigError` otherwise, before anything is written)."""
    stored = backend.naming()
    if stored is None:
        backend.set_naming(backend.names.naming)
    else:
        check_naming(stored, backend.names, f"the store {backend.where}")


@dataclass(frozen=True)
class Rekeyed:
    """What :func:`rekey` did."""

    lines: int  # audit lines chained again (the REKEY line not counted)
    renamed: int  # tombstones and generations renamed
    witnesses: list[str]  # witness files rewritten
    head: dict  # the audit's new head: the REKEY line


def rekey(backend: Backend, names: Pseudonyms, witnesses: list[Path]) -> Rekeyed:
    """Key ``backend``'s names under ``names``; :class:`ConfigError` if it is keyed already or its audit or a
    witnessed head does not verify (nothing changed)."""
    if names.key is None:
        raise ConfigError(f"{USER_KEY_ENV} is not set: the key to name users by")
    stored = backend.naming()
    if stored is not None and stored != LEGACY:
        check_naming(stored, names, "the store")
        _finish_witnesses(witnesses)  # a run interrupted after its commit
        raise ConfigError("the store's names are keyed already under this key: nothing to do (witness files "
                          "staged by an interrupted run moved in place)")
    for path in witnesses:  # staged by a run interrupted before its commit
        path.with_name(path.name + STAGED).unlink(missing_ok=True)
    audit = audit_of(backend)
    result, problems, _ = verify_audit(audit, witnesses)
    if not result.ok or problems:
        raise ConfigError(f"the audit does not verify ({result.reason or '; '.join(problems)}): fix it before "
                          "re-keying, which chains it again")
    lines = audit.read()
    old = f"{lines[-1].index}:{lines[-1].hash}" if lines else "none"
    chained = audit.rechained(lines, names.keyed, f"user names keyed (hmac-sha256); {len(lines)} line(s) "
                                                  f"chained again; head before: {old}")
    staged = [_stage_witness(path, audit.where, chained) for path in witnesses]
    renamed = backend.rekey(names, [canonical_json(e) for e in chained])
    _finish_witnesses(witnesses)
    return Rekeyed(len(lines), renamed, [str(p) for p in staged], chained[-1])


def _stage_witness(path: Path, where: str, chained: list[dict]) -> Path:
    """``path``'s lines with each head of the audit at ``where`` moved to the re-chained line of its index, written
    beside it (moved in place once the store has committed)."""
    lines = []
    for _, line in iter_jsonl(path):
        if line.get("stores") == where:
            line = {**line, "hash": chained[int(line["index"])]["hash"]}
        lines.append(canonical_json(line) + "\n")
    atomic_write_text(path.with_name(path.name + STAGED), "".join(lines))
    return path


def _finish_witnesses(witnesses: list[Path]) -> None:
    for path in witnesses:
        staged = path.with_name(path.name + STAGED)
        if staged.exists():
            try:
                os.replace(staged, path)
            except OSError as exc:
                raise StoreError(path, f"cannot move the re-keyed witness in place: {exc}") from None
