"""The stores directory, declared once: every file and folder the optimizer keeps under one root.

Writers (:class:`~evolve.state.stores.StoreSet`) and readers (:class:`~evolve.state.view.StoreView`) both name
paths through :class:`StoreLayout`, so a file name is spelled in exactly one place.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from evolve.files import StoreError

#: Append-only record stores (``<name>.jsonl``); every record needs a unique string ``key``.
JSONL_STORES = ("candidate_outcomes", "stage_audits", "diagnosis_log")
#: Whole-document stores (``<name>.json``), replaced atomically.
DOC_STORES = ("dimension_effects", "scoreboard", "question_histories", "hypothesis_tree", "escalations")

_HASH_RE = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class StoreLayout:
    """Paths of one stores directory (nothing is created or read here)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def state(self) -> Path:
        """``state.json``: last committed round, recorded journal head, current strategy, harness identity."""
        return self.root / "state.json"

    @property
    def journal(self) -> Path:
        return self.root / "journal.jsonl"

    @property
    def rounds(self) -> Path:
        """Write-ahead log of round commits."""
        return self.root / "rounds"

    @property
    def strategies(self) -> Path:
        """Content-addressed strategy files ``<hash>.yaml``."""
        return self.root / "strategies"

    @property
    def checkpoint(self) -> Path:
        return self.root / "best"

    @property
    def serving(self) -> Path:
        """Byte-exact copies of every serving file installed or replaced (``<sha256>.yaml``)."""
        return self.root / "serving"

    @property
    def summaries(self) -> Path:
        """The full JSON summary of each ``memevolve run`` (``run-<UTC time>.json``): output, never read back."""
        return self.root / "summaries"

    @property
    def gate(self) -> Path:
        """The gate store of ``memevolve gate`` runs under these stores' run config (itself a stores directory)."""
        return self.root / "gate"

    @property
    def content(self) -> Path:
        """Users' words the records refer to (:mod:`evolve.state.content`), redacted by an erasure."""
        return self.root / "content"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def knob_schema(self) -> Path:
        """The knob schema of the external system a run evolved (``runtime:``); absent for the embedded runtime."""
        return self.root / "knob_schema.json"

    @property
    def optuna(self) -> Path:
        """SQLite file of the planner's Optuna studies."""
        return self.root / "optuna.db"

    def store(self, name: str) -> Path:
        """File of a named JSONL or document store."""
        if name in JSONL_STORES:
            return self.root / f"{name}.jsonl"
        if name in DOC_STORES:
            return self.root / f"{name}.json"
        raise StoreError(self.root / name, f"unknown store; expected one of {', '.join(JSONL_STORES + DOC_STORES)}")

    def strategy(self, digest: str) -> Path:
        """Where the strategy with content hash ``digest`` is kept."""
        if not _HASH_RE.match(digest or ""):
            raise StoreError(self.strategies / str(digest), "not a strategy hash (64 lowercase hex digits)")
        return self.strategies / f"{digest}.yaml"

    def contains(self, path: str | Path) -> bool:
        """Whether ``path`` (after resolving symlinks) is the stores directory or lies inside it."""
        root, target = self.root.resolve(), Path(path).resolve()
        return target == root or root in target.parents
