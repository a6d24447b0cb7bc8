"""UCB1 hypothesis tree: which move to try next for a symptom.

The root's children are symptom keys (``root_cause/category``; ``ROOT`` collects updates made
without a symptom); their children are hypotheses keyed by a move's stored text
(:mod:`evolve.strategy.moves`). Each hypothesis keeps visits, total reward, best delta and a status:

* ``active``    — still worth trying;
* ``confirmed`` — at least one candidate moving it was accepted (and it is not refuted since);
* ``refuted``   — ``refute_after`` reverts in a row with no gain (delta <= 0) since its last accept, or
  ``refute_after`` gains in a row that did not move the failure category the planner predicted for it (its
  symptom: the mechanism is refuted there; the move's gain still counts, and it stays selectable elsewhere);
* ``exhausted`` — the path sits at its schema bound in this direction (set by the planner via
  :meth:`HypothesisTree.mark_bound`; lifted again when the value moves away from the bound).

Selection ranks a parent's selectable (active/confirmed) children by UCB1::

    ucb(n) = total_reward / visits + c * sqrt(ln N / visits)   (N = visits of all the parent's children)

with unvisited children first. The exploration constant is coupled to how actionable the
critic finds the planner's proposals::

    c = c0 * (1 - actionability),   actionability = share of the last ``window`` critiqued
                                                    proposals labelled actionable (0 with none yet)

When the critic mostly agrees the proposals are actionable, the planner's prior ordering is
trusted and the tree exploits; when it rejects them, the prior is unreliable and the tree explores.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from evolve.strategy.moves import Move

ROOT = "*"
STATUSES = ("active", "confirmed", "refuted", "exhausted")
SELECTABLE = ("active", "confirmed")


def reward_of(accepted: bool, delta: float, scale: float = 0.05) -> float:
    """Reward in [0, 1]: 1 for an accept, else up to 0.5 for a positive delta (full at ``scale``)."""
    if accepted:
        return 1.0
    return 0.5 * min(1.0, max(0.0, delta / scale))


@dataclass
class Hypothesis:
    key: str
    visits: int = 0
    total_reward: float = 0.0
    best_delta: float | None = None
    accepts: int = 0
    no_gain_reverts: int = 0  # consecutive since the last accept
    mismatches: int = 0  # consecutive gains whose predicted failure category did not move
    at_bound: bool = False

    @property
    def mean_reward(self) -> float:
        return self.total_reward / self.visits if self.visits else 0.0

    def status(self, refute_after: int) -> str:
        if self.at_bound:
            return "exhausted"
        if self.no_gain_reverts >= refute_after or self.mismatches >= refute_after:
            return "refuted"
        return "confirmed" if self.accepts else "active"

    def to_dict(self, refute_after: int) -> dict:
        return {"visits": self.visits, "total_reward": self.total_reward, "best_delta": self.best_delta,
                "accepts": self.accepts, "no_gain_reverts": self.no_gain_reverts, "mismatches": self.mismatches,
                "at_bound": self.at_bound, "status": self.status(refute_after)}


class HypothesisTree:
    def __init__(self, c0: float = 1.0, refute_after: int = 2, window: int = 20):
        if c0 < 0 or refute_after < 1 or window < 1:
            raise ValueError("HypothesisTree: need c0 >= 0, refute_after >= 1, window >= 1")
        self.c0, self.refute_after, self.window = float(c0), int(refute_after), int(window)
        self._parents: dict[str, dict[str, Hypothesis]] = {}
        self._critiques: deque[bool] = deque(maxlen=self.window)

    # ------------------------------------------------------------ exploration constant

    def record_critique(self, actionable: bool) -> None:
        """The critic's verdict on one proposed candidate."""
        self._critiques.append(bool(actionable))

    @property
    def actionability(self) -> float:
        return sum(self._critiques) / len(self._critiques) if self._critiques else 0.0

    def exploration(self) -> float:
        return self.c0 * (1.0 - self.actionability)

    # ------------------------------------------------------------ nodes

    def node(self, key: str, parent: str = ROOT) -> Hypothesis | None:
        return self._parents.get(parent, {}).get(key)

    def _ensure(self, key: str, parent: str) -> Hypothesis:
        Move.parse(key)
        return self._parents.setdefault(parent, {}).setdefault(key, Hypothesis(key))

    def status(self, key: str, parent: str = ROOT) -> str:
        node = self.node(key, parent)
        return node.status(self.refute_after) if node else "active"

    def parent_visits(self, parent: str = ROOT) -> int:
        return sum(n.visits for n in self._parents.get(parent, {}).values())

    def ucb(self, key: str, c: float, parent: str = ROOT) -> float:
        """UCB1 score; ``inf`` for an unvisited hypothesis."""
        node = self.node(key, parent)
        if node is None or node.visits == 0:
            return math.inf
        total = self.parent_visits(parent)
        return node.mean_reward + c * math.sqrt(math.log(total) / node.visits)

    def select(self, keys: list[str], c: float | None = None, parent: str = ROOT) -> list[str]:
        """Selectable ``keys`` ranked by UCB1 (unvisited first, ties in input order); refuted/exhausted left out."""
        c = self.exploration() if c is None else c
        live = [k for k in dict.fromkeys(keys) if self.status(k, parent) in SELECTABLE]
        position = {k: i for i, k in enumerate(live)}
        return sorted(live, key=lambda k: (-self.ucb(k, c, parent), position[k]))

    def update(self, key: str, reward: float, delta: float, accepted: bool, parent: str = ROOT,
               mechanism: bool | None = None) -> str:
        """Record one evaluated candidate for ``key`` under ``parent``; return the new status. ``mechanism``: whether
        the failure category predicted for it moved as predicted (``None``: not tested)."""
        if not 0.0 <= reward <= 1.0:
            raise ValueError(f"reward for {key!r} must lie in [0, 1], got {reward!r}")
        node = self._ensure(key, parent)
        node.visits += 1
        node.total_reward += reward
        node.best_delta = delta if node.best_delta is None else max(node.best_delta, delta)
        if accepted:
            node.accepts += 1
            node.no_gain_reverts = 0
        elif delta <= 0:
            node.no_gain_reverts += 1
        if mechanism is not None:
            node.mismatches = 0 if mechanism else node.mismatches + 1
        return node.status(self.refute_after)

    def mark_bound(self, key: str, at_bound: bool, parent: str = ROOT) -> None:
        """Whether ``key``'s path currently sits at its bound in that direction (exhausted while true)."""
        if at_bound:
            self._ensure(key, parent).at_bound = True
        elif (node := self.node(key, parent)) is not None:
            node.at_bound = False

    def exhausted(self) -> list[str]:
        """Keys sitting at their schema bound under any parent (candidates for escalation)."""
        return sorted({k for children in self._parents.values() for k, n in children.items() if n.at_bound})

    # ------------------------------------------------------------ persistence

    def to_dict(self) -> dict:
        return {"c0": self.c0, "refute_after": self.refute_after, "window": self.window,
                "critiques": list(self._critiques),
                "parents": {p: {k: n.to_dict(self.refute_after) for k, n in sorted(children.items())}
                            for p, children in sorted(self._parents.items())}}

    @classmethod
    def from_dict(cls, data: Any, source: str = "<hypothesis tree>") -> "HypothesisTree":
        """Inverse of :meth:`to_dict` (stored statuses are recomputed); ValueError naming the field if malformed."""
        if not isinstance(data, dict):
            raise ValueError(f"{source}: expected a mapping, got {type(data).__name__}")
        try:
            tree = cls(data["c0"], data["refute_after"], data["window"])
            for verdict in data["critiques"]:
                tree.record_critique(verdict)
            for parent, children in data["parents"].items():
                for key, n in children.items():
                    node = tree._ensure(key, parent)
                    node.visits, node.total_reward = int(n["visits"]), float(n["total_reward"])
                    node.best_delta = None if n["best_delta"] is None else float(n["best_delta"])
                    node.accepts, node.no_gain_reverts = int(n["accepts"]), int(n["no_gain_reverts"])
                    node.mismatches = int(n.get("mismatches", 0))  # trees stored before mechanisms were tested
                    node.at_bound = bool(n["at_bound"])
        except KeyError as exc:
            raise ValueError(f"{source}: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{source}: malformed: {exc}") from None
        return tree
