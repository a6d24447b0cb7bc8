"""Whether a recorded accept may reach users (``promote``, ``canary``): only what the contract confirmed at a sound
level does.

A night searches at a liberal alpha (0.2 in the shipped LoCoMo configs) and holds its false promotion at 0.05 only
through the confirmation of its final on held-back questions (:mod:`evolve.loop.night`). So a strategy is promotable
when it is

1. the final of a night whose confirmation CONFIRMED it (its ``NIGHT`` journal entry), or
2. a candidate decided at or below the promotion level (``acceptance.promotion_level``, default 0.05), every floor
   of the contract included (a gate's verdict, a night searching at 0.05), and not the final of a night whose
   confirmation REFUSED it.

An intermediate accept of a liberal search is not promotable even when its own p would pass at 0.05: re-deciding the
night's candidates one by one at 0.05 and promoting any that passes is a test per candidate across the night's rounds,
whose chance of promoting a null change grows with the rounds (``experiments/bench/night_simulation.md``). Anything
refused is said with the reason, naming the night, its confirmation and the level.
"""
from __future__ import annotations

from dataclasses import dataclass

from evolve.loop.night import NightRecord
from evolve.loop.rules import recorded_rules
from evolve.ops.history import History
from evolve.state.record import CandidateRecord
from evolve.verify.decision import TOLERANCE, changes_strategy


@dataclass(frozen=True)
class Promotability:
    """Whether a record's strategy may serve users, and why (or why not)."""

    ok: bool
    why: str


def _night_of(view: History, record: CandidateRecord) -> tuple[int, NightRecord] | None:
    """The ended night whose rounds hold the record's round (``None``: a gate's record, or a night still open)."""
    return next(((i, n) for i, n in view.nights if n.first_round <= record.round <= n.last_round), None)


def promotability(view: History, record: CandidateRecord) -> Promotability:
    """Whether ``record`` (already a strategy-changing verdict the journal agrees with) may reach users."""
    cid = record.candidate_id
    found = _night_of(view, record)
    if found is not None:
        index, night = found
        confirmation = night.confirmation
        named = (f"the night of rounds {night.first_round}-{night.last_round} (journal entry {index}, ended on "
                 f"{night.final[:12]})")
        if night.final == record.strategy_hash:
            if confirmation is not None and confirmation.verdict == "CONFIRMED" and night.restored is None:
                return Promotability(True, f"the confirmed final of {named}: {confirmation.reason}")
            if confirmation is not None and confirmation.verdict == "REFUSED":
                return Promotability(False, f"{cid} is the final of {named}, whose confirmation REFUSED it "
                                            f"({confirmation.reason}); the start was restored")
        context = (f"{named}: confirmation {confirmation.verdict}" if confirmation is not None
                   else f"{named}: no confirmation")
    else:
        context = "no night confirmed it"
    acceptance = recorded_rules(record.rules or {})[0]
    level = acceptance.promotion_level
    if acceptance.alpha <= level + TOLERANCE:
        return Promotability(True, f"decided at alpha {acceptance.alpha:g}, at or below the promotion level {level:g}")
    return Promotability(False, f"{cid} was accepted at alpha {acceptance.alpha:g}, above the promotion level "
                                f"{level:g}: an intermediate accept of a search whose error only the night's "
                                f"confirmation bounds ({context}); promote the night's confirmed final")


def said(view: History, record: CandidateRecord) -> Promotability | None:
    """:func:`promotability` of a strategy-changing record the journal agrees with (``None`` for any other: it is
    not promotable for reasons ``promote`` names first)."""
    if not changes_strategy(record.verdict) or view.record_problem(record) is not None:
        return None
    return promotability(view, record)
