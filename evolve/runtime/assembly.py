"""Budgeted context assembly: conflict resolution, reserved shares, source windows, raw-dialogue backfill."""
from __future__ import annotations

from dataclasses import dataclass

from evolve.benchmarks.types import Turn
from evolve.strategy.policy import Policy
from evolve.runtime.roles import ContextItem
from evolve.runtime.retrieval import Hit
from evolve.runtime.store import MemoryItem, MemoryStore
from evolve.runtime.render import render
from evolve.runtime.text import attribute, count_tokens, jaccard

#: Body token-Jaccard at which two same-speaker memories are taken to describe the same thing.
CONFLICT_JACCARD = 0.5


@dataclass(frozen=True)
class Packing:
    packed: list[ContextItem]
    dropped: list[tuple[str, str]]
    context_tokens: int


def _latest_turn(store: MemoryStore, item: MemoryItem) -> int:
    return max(store.turn_position.get(s, -1) for s in item.source_ids) if item.source_ids else -1


def resolve_conflicts(store: MemoryStore, hits: list[Hit]) -> tuple[list[Hit], list[tuple[str, str]]]:
    """Drop a memory when a newer (or, if as new, better-ranked) same-speaker near-duplicate is also a hit."""
    items = [store.item(h.id) for h in hits]
    sets = [store.body_sets[store.position[h.id]] for h in hits]
    newness = [(_latest_turn(store, item), -h.rank) for item, h in zip(items, hits)]
    kept, dropped = [], []
    for i, hit in enumerate(hits):
        beaten = any(j != i and items[i].speaker is not None and items[j].speaker == items[i].speaker
                     and newness[j] > newness[i] and jaccard(sets[i], sets[j]) >= CONFLICT_JACCARD
                     for j in range(len(hits)))
        if beaten:
            dropped.append((hit.id, "conflict"))
        else:
            kept.append(hit)
    return kept, dropped


def _raw(turn: Turn, fmt: str, score: float) -> ContextItem:
    text = render(f"RAW:{turn.id}", "RAW", attribute(turn.speaker, turn.timestamp, turn.text), turn.timestamp, fmt)
    return ContextItem(f"RAW:{turn.id}", text, "RAW", (turn.id,), turn.timestamp, score)


def _share(item: MemoryItem) -> str:
    if item.layer == "L2" and item.kind == "profile":
        return "profile"
    return "correction" if item.kind == "correction" else "general"


def assemble(store: MemoryStore, hits: list[Hit], policy: Policy) -> Packing:
    """Pack ``hits`` (best first) into ``assembly.token_budget`` whitespace tokens."""
    asm, features = policy.assembly, policy.features
    dropped: list[tuple[str, str]] = []
    if features.conflict_handling:
        hits, dropped = resolve_conflicts(store, hits)
    budget = asm.token_budget
    reserve = {"profile": int(budget * asm.reserved.profile), "correction": int(budget * asm.reserved.corrections)}
    reserve["general"] = budget - reserve["profile"] - reserve["correction"]
    used = {"profile": 0, "correction": 0, "general": 0}
    raw_taken: set[str] = set()
    placed: dict[str, list[ContextItem]] = {}

    def variants(hit: Hit, item: MemoryItem) -> list[list[ContextItem]]:
        head = ContextItem(hit.id, render(item.id, item.layer, item.text, item.timestamp, asm.format), item.layer,
                           item.source_ids, item.timestamp, hit.score)
        window = {t.id: t for s in item.source_ids for t in store.neighbours(s, asm.source_window)}
        extra = [_raw(t, asm.format, hit.score) for tid, t in sorted(window.items(),
                 key=lambda kv: store.turn_position[kv[0]]) if f"RAW:{tid}" not in raw_taken]
        return [[head, *extra], [head]] if extra else [[head]]

    def place(hit: Hit, unit: list[ContextItem], share: str) -> None:
        used[share] += sum(count_tokens(c.text) for c in unit)
        raw_taken.update(c.id for c in unit[1:])
        placed[hit.id] = unit

    pending = []
    for hit in hits:
        item = store.item(hit.id)
        share = _share(item)
        for unit in variants(hit, item):
            cost = sum(count_tokens(c.text) for c in unit)
            target = share if share != "general" and used[share] + cost <= reserve[share] else "general"
            if used[target] + cost <= reserve[target]:
                place(hit, unit, target)
                break
        else:
            pending.append((hit, item))
    for hit, item in pending:  # unused reserved shares are released to everything else
        for unit in variants(hit, item):
            if sum(used.values()) + sum(count_tokens(c.text) for c in unit) <= budget:
                place(hit, unit, "general")
                break
        else:
            dropped.append((hit.id, "budget"))
    packed = [c for hit in hits if hit.id in placed for c in placed[hit.id]]
    if features.raw_dialogue_backfill:
        for hit in hits:
            if hit.id not in placed or store.item(hit.id).layer == "SM":  # SM items already are raw turns
                continue
            for tid in hit.source_ids:
                turn = store.turns.get(tid)
                if turn is None or f"RAW:{tid}" in raw_taken:
                    continue
                raw = _raw(turn, asm.format, hit.score)
                if sum(used.values()) + count_tokens(raw.text) <= budget:
                    used["general"] += count_tokens(raw.text)
                    raw_taken.add(raw.id)
                    packed.append(raw)
    return Packing(packed, dropped, sum(count_tokens(c.text) for c in packed))
