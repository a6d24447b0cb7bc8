"""Budgeted context assembly: conflict resolution, packing units (memory text, source turns, query-relevant
sentences of them; what a retrieved fact packs of the turn it came from), reserved shares, source windows,
raw-dialogue backfill."""
from __future__ import annotations

from dataclasses import dataclass, replace

from evolve.benchmarks.types import Turn
from evolve.strategy.policy import Policy
from evolve.runtime.roles import ContextItem
from evolve.runtime.retrieval import Hit
from evolve.runtime.store import MemoryItem, MemoryStore
from evolve.runtime.render import render
from evolve.runtime.extractor import resolved
from evolve.runtime.text import attribute, content_set, count_words, jaccard, sentences, split_attribution

#: Body token-Jaccard at which two same-speaker memories are taken to describe the same thing.
CONFLICT_JACCARD = 0.5
#: Layers whose items are fragments of a turn (extracted facts and their profile copies): ``assembly.fact_unit``
#: chooses what of their turn they pack. Items of :data:`WHOLE_TURN_LAYERS` are a whole turn already.
FRAGMENT_LAYERS = ("L0", "L2")
WHOLE_TURN_LAYERS = ("RT", "SM")


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


def compress(text: str, wanted: frozenset[str], keep: int) -> str:
    """The ``keep`` sentences of ``text`` sharing most content words with ``wanted`` (earlier first on ties), in
    their original order; ``text`` itself when it has no more sentences than that."""
    parts = sentences(text)
    if len(parts) <= keep:
        return text
    best = sorted(range(len(parts)), key=lambda i: (-len(content_set(parts[i]) & wanted), i))[:keep]
    return " ".join(parts[i] for i in sorted(best))


def span(text: str, fact: str, around: int) -> str:
    """The sentence of ``text`` sharing most content words with ``fact`` (the one it was extracted from; the earliest
    on ties) and ``around`` sentences on each side of it, in their original order."""
    parts = sentences(text)
    if len(parts) <= 1:
        return text
    wanted = content_set(fact)
    best = max(range(len(parts)), key=lambda i: (len(content_set(parts[i]) & wanted), -i))
    return " ".join(parts[max(0, best - around):best + around + 1])


def raw_turn(turn: Turn, fmt: str, score: float = 0.0, body: str | None = None) -> ContextItem:
    """A raw dialogue turn as a dated context line (``body`` replaces its text, e.g. compressed)."""
    said = attribute(turn.speaker, turn.timestamp, turn.text if body is None else body)
    return ContextItem(f"RAW:{turn.id}", render(f"RAW:{turn.id}", "RAW", said, turn.timestamp, fmt), "RAW",
                       (turn.id,), turn.timestamp, score)


def _share(item: MemoryItem) -> str:
    if item.layer == "L2" and item.kind == "profile":
        return "profile"
    return "correction" if item.kind == "correction" else "general"


def assemble(store: MemoryStore, hits: list[Hit], policy: Policy, wanted: frozenset[str] = frozenset()) -> Packing:
    """Pack ``hits`` (best first) into ``assembly.token_budget`` whitespace tokens; ``wanted`` (the question's
    content words) picks the sentences a turn keeps under ``assembly.unit: sentences``."""
    asm, features = policy.assembly, policy.features
    dropped: list[tuple[str, str]] = []
    if features.conflict_handling:
        hits, dropped = resolve_conflicts(store, hits)
    budget = asm.token_budget
    reserve = {"profile": int(budget * asm.reserved.profile), "correction": int(budget * asm.reserved.corrections)}
    reserve["general"] = budget - reserve["profile"] - reserve["correction"]
    used = {"profile": 0, "correction": 0, "general": 0}
    raw_taken: set[str] = set()
    whole: set[str] = set()  # turns packed word for word (raw turns, turn-layer and session-memory items)
    placed: dict[str, list[ContextItem]] = {}

    def raw_unit(t: Turn, score: float) -> ContextItem:
        body = resolved(t.text, t, policy.extraction)
        return raw_turn(t, asm.format, score, compress(body, wanted, asm.sentences_per_turn)
                        if asm.unit == "sentences" else body)

    def own(hit: Hit, item: MemoryItem) -> ContextItem:
        return ContextItem(hit.id, render(item.id, item.layer, item.text, item.timestamp, asm.format), item.layer,
                           item.source_ids, item.timestamp, hit.score)

    def fact_span(hit: Hit, item: MemoryItem) -> ContextItem | None:
        """The fact's span in the source turn it shares most words with (:func:`span`), citing that turn."""
        fact = split_attribution(item.text)[2]
        options = [(len(content_set(store.turns[s].text) & content_set(fact)), -n, s)
                   for n, s in enumerate(item.source_ids) if s in store.turns]
        if not options:
            return None
        turn = store.turns[max(options)[2]]
        body = span(resolved(turn.text, turn, policy.extraction), fact, asm.fact_span.around)
        said = attribute(turn.speaker, turn.timestamp, body)
        return ContextItem(hit.id, render(item.id, item.layer, said, turn.timestamp, asm.format), item.layer,
                           (turn.id,), turn.timestamp, hit.score)

    def heads(hit: Hit, item: MemoryItem) -> list[list[ContextItem]]:
        """What the hit itself may pack, richest first: its text, or the source turns not packed yet (none: already
        in context); under ``fact_unit`` a fact's whole turn, else its span, else its own text."""
        if asm.unit == "memory" or item.layer == "L1":  # a session summary has no one turn to stand for it
            if asm.fact_unit == "fact" or item.layer not in FRAGMENT_LAYERS + WHOLE_TURN_LAYERS:
                return [[own(hit, item)]]
            if item.source_ids and set(item.source_ids) <= whole:  # its turns are in context word for word
                return [[]]
            if item.layer in WHOLE_TURN_LAYERS:
                return [[own(hit, item)]]
            turns = [raw_unit(store.turns[s], hit.score) for s in item.source_ids
                     if s in store.turns and s not in whole]
            cut = fact_span(hit, item)
            options = ([turns] if asm.fact_unit == "turn" and turns else []) + ([[cut]] if cut else [])
            return [*options, [own(hit, item)]]
        return [[raw_unit(store.turns[s], hit.score) for s in item.source_ids
                 if s in store.turns and f"RAW:{s}" not in raw_taken]]

    def replies(turn_id: str) -> int:
        """Turns packed after ``turn_id``: its replies when it asks something."""
        return asm.replies if "?" in store.turns[turn_id].text else 0

    def variants(hit: Hit, item: MemoryItem) -> list[list[ContextItem]]:
        """The units the hit may pack, first choice first: each head with its window turns, then without them."""
        out: list[list[ContextItem]] = []
        for head in heads(hit, item):
            if not head:
                return [[]]
            ids = {c.id for c in head}
            window = {t.id: t for s in item.source_ids if s in store.turns
                      for t in store.neighbours(s, asm.source_window, max(asm.source_window, replies(s)))}
            extra = [raw_unit(t, hit.score)
                     for tid, t in sorted(window.items(), key=lambda kv: store.turn_position[kv[0]])
                     if f"RAW:{tid}" not in raw_taken and f"RAW:{tid}" not in ids]
            out += [[*head, *extra], head] if extra else [head]
        return out

    def place(hit: Hit, unit: list[ContextItem], share: str) -> None:
        used[share] += sum(count_words(c.text) for c in unit)
        raw_taken.update(c.id for c in unit if c.layer == "RAW")
        whole.update(s for c in unit if c.layer in ("RAW", *WHOLE_TURN_LAYERS) for s in c.source_ids)
        placed[hit.id] = unit

    pending = []
    for hit in hits:
        item = store.item(hit.id)
        share = _share(item)
        for unit in variants(hit, item):
            cost = sum(count_words(c.text) for c in unit)
            target = share if share != "general" and used[share] + cost <= reserve[share] else "general"
            if used[target] + cost <= reserve[target]:
                place(hit, unit, target)
                break
        else:
            pending.append((hit, item))
    for hit, item in pending:  # unused reserved shares are released to everything else
        for unit in variants(hit, item):
            if sum(used.values()) + sum(count_words(c.text) for c in unit) <= budget:
                place(hit, unit, "general")
                break
        else:
            dropped.append((hit.id, "budget"))
    packed = [c for hit in hits if hit.id in placed for c in placed[hit.id]]
    if features.raw_dialogue_backfill:
        for hit in hits:
            if hit.id not in placed or store.item(hit.id).layer in ("SM", "RT"):  # already raw turns
                continue
            for tid in hit.source_ids:
                turn = store.turns.get(tid)
                if turn is None or f"RAW:{tid}" in raw_taken:
                    continue
                raw = raw_turn(turn, asm.format, hit.score, resolved(turn.text, turn, policy.extraction))
                if sum(used.values()) + count_words(raw.text) <= budget:
                    used["general"] += count_words(raw.text)
                    raw_taken.add(raw.id)
                    packed.append(raw)
    if store.ikb:  # each packed item names the images its turns share
        packed = [replace(c, image_ids=store.ikb.image_ids(c.source_ids)) for c in packed]
    return Packing(packed, dropped, sum(count_words(c.text) for c in packed))
