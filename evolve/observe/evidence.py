"""Evidence in the packed context: which gold turns the context the answerer sees actually carries.

A packed item *carries* gold turn ``g`` when ``g`` is one of its sources **and** its text carries ``g``'s content:
at least :data:`MIN_SHARE` of the item's content words are words of ``g`` (a fact or a quote taken from it), or the
item holds at least :data:`MIN_SHARE` of ``g``'s content words. A session summary that merely cites ``g`` among
its sources does not count, so packing source ids cannot game the metric; the trace keeps the packed text, so
anyone can check.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from evolve.observe.ladder import derives_from
from evolve.runtime.text import content_set

#: Share of content words that ties a packed item to a gold turn (either direction).
MIN_SHARE = 0.5


def carries(item_text: str, turn_text: str) -> bool:
    """Whether ``item_text`` carries the content of ``turn_text`` (see the module docstring)."""
    item, turn = content_set(item_text), content_set(turn_text)
    if not item or not turn:
        return False
    common = len(item & turn)
    return common >= MIN_SHARE * len(item) or common >= MIN_SHARE * len(turn)


def packed_evidence(known: Iterable[str], turn_texts: Mapping[str, str], packed: Iterable[dict]) -> list[str]:
    """The known gold turn ids (in their given order) that some packed item carries."""
    packed = list(packed)
    return [g for g in known
            if any(derives_from(item, (g,)) and carries(item.get("text", ""), turn_texts.get(g, ""))
                   for item in packed)]
