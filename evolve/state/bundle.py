"""What one round changes, gathered for an all-or-nothing commit by :meth:`evolve.state.stores.StoreSet.commit_round`."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from evolve.numbers import is_real
from evolve.state.journal import ENTRY_TYPES
from evolve.state.layout import DOC_STORES, JSONL_STORES

#: ``state.json`` fields maintained by the commit protocol (a bundle may set any other field).
RESERVED_STATE = ("last_committed_round", "journal_head", "committed_at")


@dataclass
class RoundBundle:
    """Everything one round changes; committed all-or-nothing by :meth:`StoreSet.commit_round`.

    ``checkpoint`` is ``{"strategy": dict, "score": float, "meta": dict}`` to save as best-ever in this round;
    ``state`` holds extra ``state.json`` fields such as ``current_strategy`` (a strategy hash).
    """

    records: dict[str, list[dict]] = field(default_factory=dict)
    docs: dict[str, Any] = field(default_factory=dict)
    journal: list[tuple[str, dict]] = field(default_factory=list)
    strategies: list[dict] = field(default_factory=list)
    checkpoint: dict | None = None
    state: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """Raise ``ValueError`` naming the offending store/field if the bundle is malformed."""
        for name, records in self.records.items():
            if name not in JSONL_STORES:
                raise ValueError(f"records: unknown JSONL store {name!r}; expected one of {', '.join(JSONL_STORES)}")
            seen: set[str] = set()
            for i, record in enumerate(records):
                key = record.get("key") if isinstance(record, dict) else None
                if not isinstance(key, str) or not key:
                    raise ValueError(f"records.{name}[{i}]: every record needs a non-empty string 'key'")
                if key in seen:
                    raise ValueError(f"records.{name}[{i}]: duplicate key {key!r} within the round")
                seen.add(key)
        for name in self.docs:
            if name not in DOC_STORES:
                raise ValueError(f"docs: unknown document store {name!r}; expected one of {', '.join(DOC_STORES)}")
        for i, item in enumerate(self.journal):
            if not isinstance(item, (tuple, list)) or len(item) != 2 or item[0] not in ENTRY_TYPES or not isinstance(item[1], dict):
                raise ValueError(f"journal[{i}]: expected (type in {ENTRY_TYPES}, payload dict), got {item!r:.120}")
        for i, strategy in enumerate(self.strategies):
            if not isinstance(strategy, dict):
                raise ValueError(f"strategies[{i}]: expected a dict, got {type(strategy).__name__}")
        if self.checkpoint is not None:
            cp = self.checkpoint
            score = cp.get("score") if isinstance(cp, dict) else None
            if (not isinstance(cp, dict) or not isinstance(cp.get("strategy"), dict)
                    or not is_real(score) or not math.isfinite(score)
                    or not isinstance(cp.get("meta", {}), dict)):
                raise ValueError("checkpoint: expected {'strategy': dict, 'score': finite number, 'meta': dict}")
        reserved = sorted(set(self.state) & set(RESERVED_STATE))
        if reserved:
            raise ValueError(f"state: {', '.join(reserved)} is maintained by the commit protocol")

    def to_json(self) -> dict:
        return {"records": self.records, "docs": self.docs, "journal": [list(item) for item in self.journal],
                "strategies": self.strategies, "checkpoint": self.checkpoint, "state": self.state}

    @classmethod
    def from_json(cls, data: dict) -> "RoundBundle":
        bundle = cls(records=data["records"], docs=data["docs"], journal=[tuple(i) for i in data["journal"]],
                     strategies=data["strategies"], checkpoint=data["checkpoint"], state=data["state"])
        bundle.check()
        return bundle
