"""Fusion of atomic observations into packs (``features.fusion``): MemFuse's fusion session with a rule judge.

Turns (dialogue turns, or device events admitted as turns) are judged in time order, each against the open packs:
a pack is opened by an anchor and stays open for ``window_hours`` after it. A turn that shares at least
``min_shared`` telling words with an open pack's anchor joins the best such pack (UpdatePack); otherwise it opens one
of its own (CreatePack), which becomes a pack only if another turn joins it, and stays a standalone observation if
none does. Telling words are content stems a source does not say every time: held by at most ``max_share`` of the
turns of the same speaker or device (a camera's "left on the floor near the doorway" is no evidence of belonging).
Ambiguous turns stay atomic: a pack never swallows its members, which keep their own items and ids.

Each pack becomes one ``PK`` memory: its members' words in time order, citing every member, so retrieval that finds
it by any member's words reaches all of them (the causal chain "training" -> "boots by the door" -> "detour home"),
and ``assembly.unit`` packs it whole (``memory``) or as its members' turns (``turn``).

The session holds three bounded zones: the latest closed packs (the recent happenings, at most ``recent``, shown to
the judge as they ended), the open packs (today's events: at most ``max_open``; opening one more closes the oldest,
whose members stay packed) and the current turn's candidates (the open packs with room whose anchor shares a telling
word with it, most shared first, at most ``candidates``). The decision for each turn is a judge's
(:class:`FusionJudge`): the rule judge (:class:`RuleJudge`, the default) takes the first candidate with at least
``min_shared`` and reads nothing else; an LLM judge (:class:`evolve.llm.fuser.LLMFusionJudge`) reads the candidates
and the recent happenings. A turn either judge keeps
standalone neither joins nor opens a pack, and stays an atomic observation.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal, Protocol, Sequence

from evolve.benchmarks.types import Turn
from evolve.runtime.store import MemoryItem
from evolve.runtime.text import content_tokens, format_date
from evolve.strategy.policy import Fusion


#: The layer of a fused pack's memory.
PACK_LAYER = "PK"


@dataclass
class Pack:
    """An anchor and the turns that joined it (the anchor first, in time order)."""

    anchor: Turn
    members: list[Turn] = field(default_factory=list)


def telling_words(turns: Sequence[Turn], max_share: float) -> dict[str, frozenset[str]]:
    """Each turn's content stems that are not its source's boilerplate: held by at most ``max_share`` of the turns of
    the same speaker or device ("left on the floor near the doorway" of every camera event), digits left out."""
    stems = {t.id: frozenset(content_tokens(t.text)) for t in turns}
    by_source: dict[str, Counter[str]] = {}
    counts: Counter[str] = Counter()
    for t in turns:
        by_source.setdefault(t.speaker, Counter()).update(stems[t.id])
        counts[t.speaker] += 1
    return {t.id: frozenset(s for s in stems[t.id] if not s.isdigit()
                            and by_source[t.speaker][s] <= max(1.0, max_share * counts[t.speaker])) for t in turns}


@dataclass(frozen=True)
class Candidate:
    """An open pack a turn may join, and how many telling words the turn shares with its anchor."""

    pack: Pack
    shared: int


@dataclass(frozen=True)
class Decision:
    """CreatePack, UpdatePack (``pack``: the index of the chosen candidate) or Standalone."""

    action: Literal["create", "update", "standalone"]
    pack: int | None = None


class FusionJudge(Protocol):
    name: str

    def decide(self, turn: Turn, candidates: Sequence[Candidate], policy: Fusion,
               recent: Sequence[Pack] = ()) -> Decision: ...


class RuleJudge:
    """The first candidate sharing at least ``min_shared`` telling words (UpdatePack), else CreatePack."""

    name = "rule"

    def decide(self, turn: Turn, candidates: Sequence[Candidate], policy: Fusion,
               recent: Sequence[Pack] = ()) -> Decision:
        for index, candidate in enumerate(candidates):
            if candidate.shared >= policy.min_shared:
                return Decision("update", index)
        return Decision("create")


def fuse(turns: Sequence[Turn], policy: Fusion, judge: FusionJudge | None = None) -> list[Pack]:
    """The packs of ``turns`` (time order, ties by order given) with two members or more, as ``judge`` (default:
    :class:`RuleJudge`) decides."""
    judge = judge or RuleJudge()
    telling = telling_words(turns, policy.max_share)
    window = timedelta(hours=policy.window_hours)
    packs: list[Pack] = []
    open_: list[Pack] = []  # anchors in time order: the packs that close (window passed, zone full) are the first
    recent: list[Pack] = []  # the latest closed packs of two members or more, oldest first

    def close(count: int) -> None:
        nonlocal open_, recent
        closed, open_ = open_[:count], open_[count:]
        recent = [*recent, *(p for p in closed if len(p.members) > 1)][-policy.recent:] if policy.recent else []

    for turn in sorted((t for t in turns if t.timestamp is not None), key=lambda t: t.timestamp):
        close(sum(turn.timestamp > p.anchor.timestamp + window for p in open_))
        words = telling[turn.id]
        ranked = sorted(((len(words & telling[p.anchor.id]), n) for n, p in enumerate(open_)
                         if len(p.members) < policy.max_members), key=lambda e: (-e[0], e[1]))
        candidates = [Candidate(open_[n], k) for k, n in ranked if k > 0][:policy.candidates]
        decision = judge.decide(turn, candidates, policy, recent)
        if decision.action == "update" and decision.pack is not None and 0 <= decision.pack < len(candidates):
            candidates[decision.pack].pack.members.append(turn)
        elif decision.action != "standalone":
            packs.append(pack := Pack(turn, [turn]))
            close(max(0, len(open_) + 1 - policy.max_open))  # the zone full: the oldest pack closes
            open_.append(pack)
    return [p for p in packs if len(p.members) > 1]


def pack_items(turns: Sequence[Turn], policy: Fusion, judge: FusionJudge | None = None) -> list[MemoryItem]:
    """One ``PK`` memory per pack: its members as ``source: words`` in time order, headed by its anchor's date and
    stamped with its last member's time, so a question asked before the pack was complete does not see it (nor the
    words of a member observed after the question)."""
    out = []
    for index, pack in enumerate(fuse(turns, policy, judge)):
        when = f" ({format_date(pack.anchor.timestamp)})" if pack.anchor.timestamp else ""
        text = f"Linked observations{when}: " + " | ".join(f"{t.speaker}: {t.text}" for t in pack.members)
        out.append(MemoryItem(f"{PACK_LAYER}:{index}", PACK_LAYER, text, tuple(t.id for t in pack.members), None,
                              pack.members[-1].timestamp, "pack", 1.0))
    return out
