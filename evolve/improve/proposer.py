"""The round's plan: every source of directions behind one queue, one order and one de-duplication rule.

Order. A round starts from its plan: the last round's accepted runners-up first, then the LLM advisor's directions,
then the rule planner's. While candidates are verified, two kinds of follow-up join:

* a *relief* move (a gain the cost rule blocked, joined with a context-shrinking move) goes to the head of the queue,
  so the newest relief is verified first;
* a *merge* of this round's accepts takes the slot of the direction at the head (which waits for the next slot); with
  nothing waiting the round ends, merge or not.

De-duplication. A direction is admitted only if no direction with its key was admitted this round before (queued,
verified or merged); while the plan is made, it must also move no path that a runner-up re-applies.

Follow-ups record :data:`RULED` as their priority: they are placed by the order above, not ranked.
"""
from __future__ import annotations

from typing import Iterable, Protocol

from evolve.improve.digest import Digest
from evolve.improve.planner import Direction

#: Priority recorded for a direction placed by the plan's order rule rather than ranked (runner-up, merge, relief).
RULED = 1e6


class Proposer(Protocol):
    """Anything that turns a digest into ranked directions: :class:`~evolve.improve.planner.Planner` (rules), the
    LLM planner's advisor, or a whole :class:`RoundPlan`. ``words`` is the current strategy's mean context words."""

    def plan(self, digest: Digest, strategy: dict, n: int, *, words: float | None = None) -> list[Direction]: ...


class RoundPlan:
    """One round's direction queue over the rule planner, an optional advisor and the loop's follow-ups. During
    planning the hypothesis tree is written only through this plan's planner (bound marks)."""

    def __init__(self, planner: Proposer, advisor: Proposer | None = None, max_directions: int = 6):
        self.planner, self.advisor, self.max_directions = planner, advisor, max_directions
        self._queue: list[Direction] = []
        self._merge: Direction | None = None
        self._seen: set[str] = set()
        self._claimed: set[str] = set()

    def plan(self, digest: Digest, strategy: dict, n: int, *, words: float | None = None,
             carried: Iterable[Direction] = ()) -> list[Direction]:
        """Start a round verifying up to ``n`` candidates: ``carried`` (runners-up) first, then the advisor's ``n``
        directions, then the planner's (at least ``max_directions``, and three per candidate). Returns the queue."""
        planned = self.planner.plan(digest, strategy, max(self.max_directions, 3 * n), words=words)
        advised = self.advisor.plan(digest, strategy, n, words=words) if self.advisor is not None else []
        self._queue, self._merge, self._seen, self._claimed = [], None, set(), set()
        for direction in carried:
            self._admit(direction)
        self._claimed = {path for d in self._queue for path in d.move.paths}
        for direction in advised + planned:
            self._admit(direction)
        self._claimed = set()
        return list(self._queue)

    def next(self) -> Direction | None:
        """The direction to verify in the next slot; ``None`` when nothing is queued."""
        if not self._queue:
            return None
        if self._merge is not None:
            direction, self._merge = self._merge, None
            return direction
        return self._queue.pop(0)

    def follow_up(self, *, relief: Direction | None = None, merge: Direction | None = None) -> None:
        """After a verified candidate: queue its relief move (if any), and offer the round's current merge."""
        if relief is not None and self._fresh(relief):
            self._admit(relief, head=True)
        self._merge = merge if merge is not None and self._fresh(merge) else None
        if self._merge is not None:
            self._seen.add(self._merge.key)

    def _fresh(self, direction: Direction) -> bool:
        """The de-duplication rule (see the module docstring)."""
        return direction.key not in self._seen and not self._claimed & direction.move.paths

    def _admit(self, direction: Direction, head: bool = False) -> None:
        if self._fresh(direction):
            self._seen.add(direction.key)
            self._queue.insert(0 if head else len(self._queue), direction)
