"""The neutral referee of a replay: which packed items are stale is decided by neither strategy compared.

The reference lifecycle pass (:class:`~evolve.runtime.reference.ReferenceLifecycle`: ``evolve/data/referee.yaml``
with the rule extractor), fixed for every replay and chosen by neither side, is built over each user's captured turns
as they stood at the recall; each replay records its version and hash. For each recall it marks the captured
statements that are superseded, retracted or expired for that question at its time: the client's ``asked_at``, else
the recall's own time (the recall record's ``time``). Questions the lifecycle design lets see old facts are exempt
(its query-conditioned mask: a question about the past, :func:`~evolve.runtime.lifecycle.asks_past`, or about a
change or a withdrawal): nothing is stale for them.

Both contexts are judged by the same marks through their items' source turns: a packed item is stale when one of its
``source_ids`` holds a marked statement and the item carries its stale value, whatever the item's own store says.
A superseded statement's value is what it says that its replacement does not, its slot what both say: "I live in
Lisbon with my cat" replaced by "I live in Porto with my cat" is carried by an item of the old turn saying a word of
each (*Ann lived in Lisbon*, a paraphrase included), not by one of the old turn about something else. A retracted or
expired statement, or one sharing nothing with its replacement, is carried only whole (its content words, dates
aside). A strategy that switches detection off still packs stale items, and
one that detects them gets the credit.

Per slice, the paired outcomes meet the decision contract's category floor
(:func:`evolve.verify.decision.floor_breaches`), each way: a slice whose rate falls beyond its epsilon with an exact
McNemar p, Holm-adjusted over the slices, at most alpha.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Iterable, Mapping


from evolve.runtime.dates import without_dates
from evolve.runtime.lifecycle import Cues, standing
from evolve.runtime.live import LiveConversation
from evolve.runtime.reference import ReferenceLifecycle, no_vectors
from evolve.runtime.roles import ContextItem
from evolve.runtime.store import MemoryStore
from evolve.runtime.text import content_set, split_attribution
from evolve.verify.decision import AcceptanceRules, floor_breaches, holm_by_category
from evolve.verify.statistics import PairedReport

#: What a stale item can be, as the referee marks it.
STATES = ("superseded", "retracted", "expired")


@lru_cache(maxsize=100_000)  # the same memory texts recur across recalls
def statement(text: str) -> frozenset[str]:
    """The content stems of ``text``'s body (its speaker and date attribution left out) outside its date spans."""
    return content_set(without_dates(split_attribution(text)[2]))


@dataclass(frozen=True)
class Mark:
    """A stale statement: its stale ``value`` and the ``slot`` it shares with its replacement (empty: none)."""

    value: frozenset[str]
    slot: frozenset[str]
    state: str

    @classmethod
    def of(cls, stems: frozenset[str], state: str, replacement: frozenset[str] = frozenset()) -> "Mark":
        value = stems - replacement
        return cls(value, stems & replacement, state) if value else cls(stems, frozenset(), state)

    def carried_by(self, said: frozenset[str]) -> bool:
        """Whether an item saying the stems ``said`` carries this stale value: a word of the value and one of the
        slot, or, with no slot, the whole statement."""
        return bool(self.value & said and self.slot & said) if self.slot else self.value <= said


@dataclass(frozen=True)
class Marks:
    """One recall's marks: per captured turn id, the stale statements it holds."""

    by_turn: Mapping[str, frozenset[Mark]]

    def judge(self, packed: Iterable[ContextItem]) -> list[str | None]:
        """Per packed item, the state of a marked statement whose stale value it carries from one of its source
        turns, else ``None``."""
        out = []
        for item in packed:
            said = statement(item.text)
            out.append(next((mark.state for turn in item.source_ids for mark in
                             sorted(self.by_turn.get(turn, ()), key=lambda m: (STATES.index(m.state), sorted(m.value)))
                             if mark.carried_by(said)), None))
        return out


class Referee(ReferenceLifecycle):
    """The reference lifecycle pass (``evolve/data/referee.yaml``), the same whichever strategies a replay compares."""

    def describe(self) -> dict:
        """What judged, as the journal records it."""
        lc = self.policy.lifecycle
        return {"lifecycle": f"reference v{self.version}", "version": self.version,
                "strategy_hash": self.strategy_hash, "extractor": self.extractor.name,
                "supersession": lc.supersession, "slots": lc.slots.enabled, "forget_guard": lc.forget_guard,
                "expiry": lc.expiry.enabled, "expiry_scope": lc.expiry.scope, "hide_passed": lc.hides_passed,
                "exempt": "questions about the past, a change or a withdrawal",
                "stale": "the superseded value (what its replacement does not say, with a word of the slot); a "
                         "retracted or expired statement whole",
                "time": "asked_at, else the recall's time"}

    def live_store(self, live: LiveConversation) -> MemoryStore:
        """The reference memory of the turns ``live`` holds now."""
        return live.store(self.key, self.policy, self.extractor, no_vectors, "none")

    def marks(self, store: MemoryStore, question: str, asked_at: datetime | None,
              recalled_at: datetime) -> Marks | None:
        """What is stale for ``question`` at ``asked_at`` (else ``recalled_at``); ``None`` for an exempt question."""
        cues = Cues.of(question)
        if not cues.current:
            return None
        now, lc = asked_at or recalled_at, self.policy.lifecycle
        found: dict[str, set[Mark]] = {}
        for item in store.items:
            if item.settled:
                continue
            standing_, stems = standing(store, item, lc, cues, now), statement(item.text)
            if standing_.state != "active" and stems:
                replacement = statement(store.item(standing_.by).text) if standing_.by else frozenset()
                for turn in item.source_ids:
                    found.setdefault(turn, set()).add(Mark.of(stems, standing_.state, replacement))
        return Marks({turn: frozenset(marks) for turn, marks in found.items()})


def stale_counts(states: Iterable[str | None]) -> dict[str, int]:
    """How many judged items are stale, in total and by state."""
    counted = Counter(s for s in states if s is not None)
    return {"total": sum(counted.values()), **{s: counted[s] for s in STATES}}


def slices(paired: PairedReport, rules: AcceptanceRules) -> dict[str, dict]:
    """Per slice of ``paired`` (serving as baseline): its rates, discordant counts, exact McNemar p and its Holm
    adjustment over the slices, epsilon, and which side falls below the contract's floor there (``floor``:
    ``candidate``, ``serving`` or ``None``; ``floor_exempt`` when the contract exempts the slice)."""
    rows = paired.per_category
    mirrored = {c: {**row, "delta": -row["delta"]} for c, row in rows.items()}
    below = {**{c: "serving" for c in floor_breaches(mirrored, rules)},
             **{c: "candidate" for c in floor_breaches(rows, rules)}}
    holm = holm_by_category(rows)
    return {c: {"n": row["n"], "serving": row["acc_baseline"], "candidate": row["acc_candidate"],
                "delta": row["delta"], "improved": row["improved"], "regressed": row["regressed"],
                "mcnemar_p": row["mcnemar_p"], "holm_p": holm[c], "epsilon": rules.epsilon(c), "floor": below.get(c),
                "floor_exempt": c in rules.floor_exempt} for c, row in sorted(rows.items())}


def floor_reasons(outcome: str, table: Mapping[str, dict]) -> tuple[list[str], list[str]]:
    """``(better, worse)``: the candidate's slices above the serving strategy's floor and below its own, described;
    floor-exempt slices are left out."""
    better, worse = [], []
    for name, row in table.items():
        if row["floor"] is None or row["floor_exempt"]:
            continue
        line = (f"{outcome} in slice {name}: serving {row['serving']:.3f} vs candidate {row['candidate']:.3f} "
                f"({row['improved']} improved, {row['regressed']} regressed, McNemar p={row['mcnemar_p']:.4g}, "
                f"Holm-adjusted {row['holm_p']:.4g}, epsilon {row['epsilon']:.3f}, n={row['n']})")
        (better if row["floor"] == "serving" else worse).append(line)
    return better, worse


def slice_lines(outcome: str, table: Mapping[str, dict]) -> list[str]:
    """The per-slice table in words, for the terminal."""
    lines = [f"  {outcome} by slice:  n  serving  candidate  +/-  McNemar p  Holm p  floor"]
    for name, row in table.items():
        floor = "" if row["floor"] is None else f"{row['floor']} below" + (" (exempt)" if row["floor_exempt"] else "")
        lines.append(f"    {name:<12} {row['n']:>4}  {row['serving']:.3f}  {row['candidate']:.3f}  "
                     f"+{row['improved']}/-{row['regressed']}  {row['mcnemar_p']:.4g}  {row['holm_p']:.4g}  {floor}")
    return lines
