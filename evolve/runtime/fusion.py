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
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Sequence

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


def fuse(turns: Sequence[Turn], policy: Fusion) -> list[Pack]:
    """The packs of ``turns`` (time order, ties by order given) with two members or more."""
    telling = telling_words(turns, policy.max_share)
    window = timedelta(hours=policy.window_hours)
    packs: list[Pack] = []
    open_: list[Pack] = []  # in time order, a pack whose window has passed never opens again
    for turn in sorted((t for t in turns if t.timestamp is not None), key=lambda t: t.timestamp):
        open_ = [p for p in open_ if turn.timestamp <= p.anchor.timestamp + window]
        words = telling[turn.id]
        best, shared = None, policy.min_shared - 1
        for pack in open_:
            if len(pack.members) < policy.max_members:
                overlap = len(words & telling[pack.anchor.id])
                if overlap > shared:
                    best, shared = pack, overlap
        if best is not None:
            best.members.append(turn)
        else:
            packs.append(pack := Pack(turn, [turn]))
            open_.append(pack)
    return [p for p in packs if len(p.members) > 1]


def pack_items(turns: Sequence[Turn], policy: Fusion) -> list[MemoryItem]:
    """One ``PK`` memory per pack: its members as ``source: words`` in time order, headed by its anchor's date and
    stamped with its last member's time, so a question asked before the pack was complete does not see it (nor the
    words of a member observed after the question)."""
    out = []
    for index, pack in enumerate(fuse(turns, policy)):
        when = f" ({format_date(pack.anchor.timestamp)})" if pack.anchor.timestamp else ""
        text = f"Linked observations{when}: " + " | ".join(f"{t.speaker}: {t.text}" for t in pack.members)
        out.append(MemoryItem(f"{PACK_LAYER}:{index}", PACK_LAYER, text, tuple(t.id for t in pack.members), None,
                              pack.members[-1].timestamp, "pack", 1.0))
    return out
