"""Path-level diff of two strategies: changed / added / removed dotted paths, prompt text as unified diff."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from evolve.strategy.artifact import flatten

#: Paths that describe lineage, not behaviour; shown but never counted as a policy change.
LINEAGE = ("parent", "name", "version")


@dataclass
class StrategyDiff:
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    added: dict[str, Any] = field(default_factory=dict)
    removed: dict[str, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.changed or self.added or self.removed)

    def policy_paths(self) -> list[str]:
        """Changed/added/removed paths other than lineage fields."""
        return sorted(p for p in {*self.changed, *self.added, *self.removed} if p not in LINEAGE)

    def to_dict(self) -> dict:
        return {"changed": {p: [a, b] for p, (a, b) in self.changed.items()}, "added": self.added, "removed": self.removed}

    def params(self) -> dict[str, str]:
        """``{path: "old -> new"}`` for tracking systems (prompt texts summarised)."""
        out = {p: f"{_short(a)} -> {_short(b)}" for p, (a, b) in self.changed.items()}
        out.update({p: f"(added) {_short(v)}" for p, v in self.added.items()})
        out.update({p: f"(removed) {_short(v)}" for p, v in self.removed.items()})
        return out

    def render(self) -> str:
        """Human-readable diff; multi-line strings as unified diffs."""
        lines: list[str] = []
        for path, (old, new) in sorted(self.changed.items()):
            if isinstance(old, str) and isinstance(new, str) and ("\n" in old or "\n" in new):
                lines.append(f"~ {path}:")
                lines.extend("    " + l.rstrip("\n") for l in difflib.unified_diff(
                    old.splitlines(True), new.splitlines(True), "old", "new", lineterm=""))
            else:
                lines.append(f"~ {path}: {old!r} -> {new!r}")
        lines.extend(f"+ {p}: {v!r}" for p, v in sorted(self.added.items()))
        lines.extend(f"- {p}: {v!r}" for p, v in sorted(self.removed.items()))
        return "\n".join(lines)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def diff_strategies(old: dict, new: dict) -> StrategyDiff:
    a, b = flatten(old), flatten(new)
    return StrategyDiff(
        changed={p: (a[p], b[p]) for p in sorted(a.keys() & b.keys()) if a[p] != b[p] or type(a[p]) is not type(b[p])},
        added={p: b[p] for p in sorted(b.keys() - a.keys())},
        removed={p: a[p] for p in sorted(a.keys() - b.keys())},
    )
