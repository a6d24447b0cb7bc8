"""Best-ever checkpoint with verified generations and fallback.

Layout under the checkpoint directory::

    gen-0007/strategy.yaml   canonical YAML of the strategy
    gen-0007/manifest.json   {generation, strategy_hash, file_sha256, score, round, meta, saved_at, manifest_sha256}
    CURRENT                  "gen-0007" -- written atomically, last, so a crash mid-save keeps the old checkpoint

The newest ``keep`` generations are kept. :meth:`Checkpoint.load` refuses a generation whose files do
not match its manifest and falls back to the newest older intact one, saying which it refused.
"""
from __future__ import annotations

import logging
import math
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from evolve.canonical import canonical_hash, sha256_hex
from evolve.numbers import is_real
from evolve.files import (
    MAX_DOC_BYTES, MAX_TEXT_BYTES, StoreError, atomic_write_json, atomic_write_text, crash_point, now_iso, os_error,
    read_bounded, read_json,
)
from evolve.state.strategy_files import strategy_from_yaml, strategy_to_yaml
from evolve.strategy.artifact import strategy_hash

log = logging.getLogger(__name__)

_GEN_RE = re.compile(r"^gen-(\d{4,})$")
_MANIFEST_FIELDS = frozenset(
    {"generation", "strategy_hash", "file_sha256", "score", "round", "meta", "saved_at", "manifest_sha256"})


@dataclass(frozen=True)
class CheckpointRecord:
    """A verified checkpoint; ``fallback_from`` names what was refused first (``None`` if CURRENT was intact)."""

    strategy: dict
    strategy_hash: str
    score: float
    round: int
    meta: dict
    saved_at: str
    generation: str
    fallback_from: str | None = None
    refused: tuple[tuple[str, str], ...] = ()  # (generation or "CURRENT", reason) for everything skipped


def _gen_name(number: int) -> str:
    return f"gen-{number:04d}"


class Checkpoint:
    """The best-ever strategy, saved as numbered generations under ``directory``."""

    def __init__(self, directory: str | Path, keep: int = 3):
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.dir = Path(directory)
        self.keep = keep
        self.current_path = self.dir / "CURRENT"

    def generations(self) -> list[int]:
        """Generation numbers present on disk, ascending."""
        if not self.dir.is_dir():
            return []
        found = (_GEN_RE.match(p.name) for p in self.dir.iterdir() if p.is_dir())
        return sorted(int(m.group(1)) for m in found if m)

    def save(self, strategy: dict, score: float, round: int, meta: dict | None = None) -> CheckpointRecord:
        """Write a new generation, then point CURRENT at it, then prune old generations."""
        if not is_real(score) or not math.isfinite(score):
            raise ValueError(f"checkpoint score must be a finite number, got {score!r}")
        meta = dict(meta or {})
        previous, _ = self._read_current()
        number = max(self.generations(), default=0) + 1
        gen = _gen_name(number)
        gen_dir = self.dir / gen
        text = strategy_to_yaml(strategy, gen_dir / "strategy.yaml")
        manifest = {
            "generation": gen,
            "strategy_hash": strategy_hash(strategy),
            "file_sha256": sha256_hex(text.encode("utf-8")),
            "score": float(score),
            "round": int(round),
            "meta": meta,
            "saved_at": now_iso(),
        }
        try:
            manifest["manifest_sha256"] = canonical_hash(manifest)
        except (TypeError, ValueError) as exc:
            raise StoreError(gen_dir / "manifest.json", f"checkpoint meta is not JSON-serialisable: {exc}") from None
        atomic_write_text(gen_dir / "strategy.yaml", text)
        atomic_write_json(gen_dir / "manifest.json", manifest)
        crash_point("checkpoint.generation")
        atomic_write_text(self.current_path, gen + "\n")
        self._prune(number, previous)
        return CheckpointRecord(dict(strategy), manifest["strategy_hash"], manifest["score"], manifest["round"],
                                meta, manifest["saved_at"], gen)

    def load(self) -> CheckpointRecord | None:
        """The intact checkpoint CURRENT points to, else the newest intact older generation.

        ``None`` if nothing was ever saved; :class:`StoreError` if generations exist but none is intact.
        """
        current, problem = self._read_current()
        gens = self.generations()
        if current is None and problem is None and not gens:
            return None
        refused: list[tuple[str, str]] = []
        if problem:
            refused.append(("CURRENT", problem))
        order = sorted((g for g in gens if current is None or g <= current), reverse=True)
        if current is not None and current not in gens:
            refused.append((_gen_name(current), "generation directory is missing"))
        for number in order:
            try:
                record = self._verify(_gen_name(number))
            except StoreError as exc:
                refused.append((_gen_name(number), exc.cause))
                continue
            if refused:
                log.warning("%s: checkpoint fallback to %s; refused: %s", self.dir, record.generation, refused)
                return replace(record, fallback_from=refused[0][0], refused=tuple(refused))
            return record
        details = "; ".join(f"{name}: {reason}" for name, reason in refused) or "no generations"
        raise StoreError(self.dir, f"no intact checkpoint generation ({details})")

    def current_manifest(self) -> dict | None:
        """The manifest CURRENT points to if it verifies, else ``None`` (no fallback)."""
        current, _ = self._read_current()
        if current is None:
            return None
        try:
            record = self._verify(_gen_name(current))
        except StoreError:
            return None
        return {"strategy_hash": record.strategy_hash, "round": record.round, "score": record.score,
                "generation": record.generation}

    # ------------------------------------------------------------ internals

    def _read_current(self) -> tuple[int | None, str | None]:
        """``(generation number, problem)``; both ``None`` if CURRENT was never written."""
        try:
            text = read_bounded(self.current_path, MAX_TEXT_BYTES).decode("utf-8")
        except FileNotFoundError:
            return None, ("CURRENT pointer is missing" if self.generations() else None)
        except (OSError, UnicodeDecodeError) as exc:
            return None, f"CURRENT pointer unreadable: {exc}"
        match = _GEN_RE.match(text.strip())
        if not match:
            return None, f"CURRENT pointer is corrupt: {text[:80]!r}"
        return int(match.group(1)), None

    def _verify(self, gen: str) -> CheckpointRecord:
        gen_dir = self.dir / gen
        manifest = read_json(gen_dir / "manifest.json")
        if not isinstance(manifest, dict) or set(manifest) != _MANIFEST_FIELDS:
            raise StoreError(gen_dir / "manifest.json", "manifest has the wrong set of fields (edited)")
        if manifest["manifest_sha256"] != canonical_hash({k: v for k, v in manifest.items() if k != "manifest_sha256"}):
            raise StoreError(gen_dir / "manifest.json", "manifest content does not match its hash (edited)")
        if manifest["generation"] != gen:
            raise StoreError(gen_dir / "manifest.json", f"manifest belongs to {manifest['generation']}, not {gen}")
        path = gen_dir / "strategy.yaml"
        try:
            data = read_bounded(path, MAX_DOC_BYTES)
        except FileNotFoundError:
            raise StoreError(path, "strategy file is missing") from None
        except OSError as exc:
            raise os_error(path, exc, "read") from None
        if sha256_hex(data) != manifest["file_sha256"]:
            raise StoreError(path, "strategy file does not match the manifest's file_sha256 (truncated or edited)")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise StoreError(path, "strategy file is not UTF-8") from None
        strategy = strategy_from_yaml(text, manifest["strategy_hash"], path)
        return CheckpointRecord(strategy, manifest["strategy_hash"], manifest["score"], manifest["round"],
                                manifest["meta"], manifest["saved_at"], gen)

    def _prune(self, newest: int, previous: int | None) -> None:
        """Drop generations never made current (a save interrupted before CURRENT) and all but the newest ``keep``."""
        gens = [g for g in self.generations() if g <= newest]
        orphans = {g for g in gens if previous is not None and previous < g < newest}
        kept = [g for g in gens if g not in orphans][-self.keep:]
        for number in gens:
            if number not in kept:
                try:
                    shutil.rmtree(self.dir / _gen_name(number))
                except OSError as exc:  # the save itself succeeded; an extra old generation is harmless
                    log.warning("%s", os_error(self.dir / _gen_name(number), exc, "prune old checkpoint generation"))
