"""Dimension effects: what each move (keyed by its stored text, :mod:`evolve.strategy.moves`) did when tried, and its
reputation.

Reputation (documented rule, recomputed on every record and on load)::

    reputation = (accepts + 1) / (tries + 2) - 0.5      # Laplace-smoothed accept rate, centred on 0
                 + sum_delta / tries                    # mean paired accuracy delta (0 if untried)

An untried direction scores 0; every revert lowers the smoothed rate (one revert: -0.17,
two: -0.25) and a harmful mean delta lowers it further, while accepts raise it. The planner
adds its own per-symptom penalty on top via :meth:`DimensionEffects.reverts` and
:meth:`DimensionEffects.mismatches` (gains that did not move the failure category the planner predicted for that
symptom: the mechanism refuted there, the move's own record untouched).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evolve.numbers import is_real
from evolve.strategy.moves import Move


@dataclass
class Effect:
    tries: int = 0
    accepts: int = 0
    reverts: int = 0
    reverts_by_symptom: dict[str, int] = field(default_factory=dict)
    mismatches_by_symptom: dict[str, int] = field(default_factory=dict)
    sum_delta: float = 0.0
    #: Fully evaluated tries, and the sum of their relative growth of mean context words over the parent.
    costed: int = 0
    sum_growth: float = 0.0

    @property
    def reputation(self) -> float:
        mean_delta = self.sum_delta / self.tries if self.tries else 0.0
        return (self.accepts + 1) / (self.tries + 2) - 0.5 + mean_delta

    @property
    def growth(self) -> float | None:
        """Mean relative growth of context words per fully evaluated try (None before any)."""
        return self.sum_growth / self.costed if self.costed else None

    def to_dict(self) -> dict:
        out = {"tries": self.tries, "accepts": self.accepts, "reverts": self.reverts,
               "reverts_by_symptom": dict(sorted(self.reverts_by_symptom.items())),
               "sum_delta": self.sum_delta, "reputation": round(self.reputation, 6)}
        if self.mismatches_by_symptom:
            out["mismatches_by_symptom"] = dict(sorted(self.mismatches_by_symptom.items()))
        return {**out, "costed": self.costed, "sum_growth": self.sum_growth} if self.costed else out


class DimensionEffects:
    """Per-direction track record across rounds (contract format of the shared brief), keyed by a move's text
    (:class:`~evolve.strategy.moves.Move`), as stored."""

    def __init__(self) -> None:
        self._effects: dict[str, Effect] = {}

    def record(self, key: str, symptom_key: str, accepted: bool, delta: float, growth: float | None = None,
               mechanism: bool | None = None) -> None:
        """One evaluated candidate that moved ``key`` to address ``symptom_key`` (``growth``: its relative change of
        mean context words over the parent, when fully evaluated; ``mechanism``: whether the failure category the
        planner predicted for it moved so, ``None`` when untested)."""
        Move.parse(key)
        effect = self._effects.setdefault(key, Effect())
        effect.tries += 1
        effect.sum_delta += float(delta)
        if growth is not None:
            effect.costed += 1
            effect.sum_growth += float(growth)
        if accepted:
            effect.accepts += 1
        else:
            effect.reverts += 1
            effect.reverts_by_symptom[symptom_key] = effect.reverts_by_symptom.get(symptom_key, 0) + 1
        if mechanism is False:
            effect.mismatches_by_symptom[symptom_key] = effect.mismatches_by_symptom.get(symptom_key, 0) + 1

    def reputation(self, key: str) -> float:
        effect = self._effects.get(key)
        return effect.reputation if effect else 0.0

    def reverts(self, key: str, symptom_key: str | None = None) -> int:
        """Reverts of ``key`` overall, or only those recorded against ``symptom_key``."""
        effect = self._effects.get(key)
        if effect is None:
            return 0
        return effect.reverts if symptom_key is None else effect.reverts_by_symptom.get(symptom_key, 0)

    def mismatches(self, key: str, symptom_key: str) -> int:
        """Evaluations of ``key`` for ``symptom_key`` whose predicted failure category did not move as predicted."""
        effect = self._effects.get(key)
        return effect.mismatches_by_symptom.get(symptom_key, 0) if effect else 0

    def growth(self, key: str) -> float | None:
        """Expected relative growth of context words of moving ``key``: its own record, else the sum over the parts
        of a coupled key that have one; None when nothing is known."""
        own = self._effects.get(key)
        if own is not None and own.growth is not None:
            return own.growth
        known = [e.growth for step in Move.parse(key).steps
                 if (e := self._effects.get(str(step))) is not None and e.growth is not None]
        return sum(known) if known else None

    def get(self, key: str) -> Effect | None:
        return self._effects.get(key)

    def keys(self) -> list[str]:
        return sorted(self._effects)

    def to_dict(self) -> dict:
        return {key: self._effects[key].to_dict() for key in sorted(self._effects)}

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dimension effects>") -> "DimensionEffects":
        """Inverse of :meth:`to_dict`; ValueError naming the entry and field on malformed input."""
        if not isinstance(data, dict):
            raise ValueError(f"{source}: expected a mapping of direction keys, got {type(data).__name__}")
        out = cls()
        for key, entry in data.items():
            where = f"{source}: {key}"
            try:
                Move.parse(key)
            except ValueError as exc:
                raise ValueError(f"{source}: {exc}") from None
            if not isinstance(entry, dict):
                raise ValueError(f"{where}: expected a mapping, got {type(entry).__name__}")
            counts = {}
            for name in ("tries", "accepts", "reverts"):
                value = entry.get(name)
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise ValueError(f"{where}: {name}: expected a non-negative integer, got {value!r}")
                counts[name] = value
            if counts["accepts"] + counts["reverts"] != counts["tries"]:
                raise ValueError(f"{where}: tries must equal accepts + reverts")
            by_symptom = {name: entry.get(name, {}) for name in ("reverts_by_symptom", "mismatches_by_symptom")}
            for name, counts_by in by_symptom.items():
                if not isinstance(counts_by, dict) or not all(
                        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts_by.values()):
                    raise ValueError(f"{where}: {name}: expected a mapping of non-negative integers")
            sum_delta = entry.get("sum_delta")
            if not is_real(sum_delta):
                raise ValueError(f"{where}: sum_delta: expected a number, got {sum_delta!r}")
            costed, sum_growth = entry.get("costed", 0), entry.get("sum_growth", 0.0)
            if not isinstance(costed, int) or isinstance(costed, bool) or not 0 <= costed <= counts["tries"]:
                raise ValueError(f"{where}: costed: expected an integer between 0 and tries, got {costed!r}")
            if not is_real(sum_growth):
                raise ValueError(f"{where}: sum_growth: expected a number, got {sum_growth!r}")
            out._effects[key] = Effect(reverts_by_symptom=dict(by_symptom["reverts_by_symptom"]),
                                       mismatches_by_symptom=dict(by_symptom["mismatches_by_symptom"]),
                                       sum_delta=float(sum_delta),
                                       costed=costed, sum_growth=float(sum_growth), **counts)
        return out
