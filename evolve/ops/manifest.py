"""The manifest of a benchmark file exported from captured conversations: which users, and which of their turns, went
into which file, so that a later erasure reaches the export (:mod:`evolve.ops.erasure`)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from evolve.errors import first_problem
from evolve.files import StoreError, atomic_write_json, now_iso, read_json


class ExportedUser(BaseModel):
    """One user's sample in the export."""

    model_config = ConfigDict(extra="forbid")
    user: str
    sample_id: str
    turns: list[str]
    questions: int


class ErasedUser(BaseModel):
    """A user erased from the export since: no id, no turn id, only the hash of the user id."""

    model_config = ConfigDict(extra="forbid")
    user_sha256: str
    erased_at: str
    request: str


class ErasedTurn(BaseModel):
    """A turn erased from the export since (its session and the questions citing or quoting it with it): no words,
    no user id, only the hash of user and turn id."""

    model_config = ConfigDict(extra="forbid")
    turn_sha256: str
    erased_at: str
    request: str


class ExportManifest(BaseModel):
    """What a benchmark file holds; ``export`` is relative to the manifest's folder when it lies inside it."""

    model_config = ConfigDict(extra="forbid")
    export: str
    sha256: str
    written_at: str
    users: list[ExportedUser]
    erased: list[ErasedUser] = []
    erased_turns: list[ErasedTurn] = []


def user_sha256(user: str) -> str:
    """The hash of a user id an erased entry keeps (the service's tombstones name users the same way)."""
    return hashlib.sha256(user.encode("utf-8")).hexdigest()


def turn_sha256(user: str, turn: str) -> str:
    """The hash of a user's turn id an erased turn keeps."""
    return hashlib.sha256(f"{user}\0{turn}".encode("utf-8")).hexdigest()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def default_manifest(export: Path) -> Path:
    """Where ``capture-export`` writes the manifest of ``export``: beside it, ``<name>.manifest.json``."""
    return export.with_name(f"{export.stem}.manifest.json")


def manifest_of(export: Path, manifest: Path, samples: list[dict], users: list[str]) -> ExportManifest:
    """The manifest of ``export`` (already written) holding ``samples``, the sample of ``users[i]`` at ``i``."""
    where = export.resolve()
    folder = manifest.resolve().parent
    shown = str(where.relative_to(folder)) if folder in where.parents else str(where)
    return ExportManifest(export=shown, sha256=file_sha256(export), written_at=now_iso(), users=[
        ExportedUser(user=user, sample_id=s["sample_id"], questions=len(s["qa"]),
                     turns=[t["dia_id"] for key, turns in s["conversation"].items()
                            if key.startswith("session_") and isinstance(turns, list) for t in turns])
        for user, s in zip(users, samples)])


def read_manifest(path: Path) -> ExportManifest:
    """The manifest at ``path``; :class:`StoreError` naming the file and field when it is not one."""
    try:
        return ExportManifest.model_validate(read_json(path))
    except ValidationError as exc:
        raise StoreError(path, "not an export manifest: field {}: {}".format(*first_problem(exc))) from None


def checked_export(manifest_path: Path, manifest: ExportManifest, outside: bool = False) -> Path:
    """The file the manifest's export names, links followed (the words are in the target, which is what a rewrite
    must reach), once it checks out: a regular file, inside the manifest's folder (``outside``: anywhere), whose
    bytes hash to the manifest's ``sha256``. :class:`StoreError` saying what is wrong otherwise: an edited manifest
    must not make erasure rewrite a file that was never exported, nor report success while the export holds the
    words elsewhere."""
    named = manifest_path.parent / manifest.export
    try:
        target = named.resolve(strict=True)
    except (OSError, RuntimeError):
        raise StoreError(manifest_path, f"export {manifest.export!r}: {named} does not exist (moved or deleted?); "
                                        "restore it, or give the manifest of where it is now") from None
    if not target.is_file():
        raise StoreError(manifest_path, f"export {manifest.export!r} ({target}) is not a regular file")
    folder = manifest_path.resolve().parent
    if not outside and folder not in target.parents:
        raise StoreError(manifest_path, f"export {manifest.export!r} resolves to {target}, outside the manifest's "
                                        f"folder {folder}; pass --follow-outside if that is where it was exported")
    if file_sha256(target) != manifest.sha256:
        raise StoreError(manifest_path, f"export {target} does not hash to the manifest's sha256 "
                                        f"{manifest.sha256[:12]}…: changed since it was exported, or the manifest "
                                        "was edited; nothing erased")
    return target


def write_manifest(path: Path, manifest: ExportManifest) -> None:
    atomic_write_json(path, manifest.model_dump())
