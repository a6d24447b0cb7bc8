"""The IKB route: which questions go to the image knowledge base (counting, listing, naming what photos showed),
the deterministic query that answers them, and the one context item that carries the answer (its image ids, dates,
captions and names), packed before what normal retrieval packs or alone (``images`` in the strategy)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from evolve.runtime.assembly import Packing, assemble
from evolve.runtime.ikb import NAME_REACH, ImageEntry, ImageKB, caption_body, category_table
from evolve.runtime.retrieval import Hit
from evolve.runtime.render import render
from evolve.runtime.roles import ContextItem
from evolve.runtime.store import MemoryStore
from evolve.runtime.text import count_words, format_date, stem, tokens
from evolve.strategy.policy import ImageNames, ImagePacking, ImageRoute, Images, Policy

#: The IKB item's layer in a packed context and a trace.
IKB_LAYER = "IKB"
_COUNTING = re.compile(r"\bhow many\b|\bnumber of\b", re.IGNORECASE)
_NAMING = re.compile(r"\bnames?\b|\bnamed\b|\bcalled\b", re.IGNORECASE)
_ENUMERATION = re.compile(r"^\W*(?:what|which|list|name)\b", re.IGNORECASE)
_KINDS = re.compile(r"\b(?:kinds?|types?|sorts?) of\b", re.IGNORECASE)


@dataclass(frozen=True)
class IKBAnswer:
    """What the IKB answers a routed question with: the rule that routed it, the categories it asked for, the
    images filed under them (earliest first), the speaker whose photos they are (when the question names one) and
    the names recovered for them."""

    route: str
    categories: tuple[str, ...]
    images: tuple[ImageEntry, ...]
    speakers: tuple[str, ...]
    names: tuple[str, ...]


def _lists(question: str) -> bool:
    """Whether a what/which question asks for a list: "kinds of", or a category named in the plural or by what was
    done ("what pets", "what has she painted")."""
    if not _ENUMERATION.search(question):
        return False
    if _KINDS.search(question):
        return True
    table = category_table()
    return any(stem(t) in table.words or stem(t) in table.groups for t in tokens(question)
               if stem(t) != t and t.endswith(("s", "ed")))


def route_of(question: str, rules: ImageRoute) -> str | None:
    """The rule that sends ``question`` to the IKB: ``counting`` (how many), ``naming`` (a name asked for), else
    ``enumeration`` (a list asked for, :func:`_lists`); ``None`` when no rule that is on matches (or routing is
    off)."""
    if not rules.enabled:
        return None
    if rules.counting and _COUNTING.search(question):
        return "counting"
    if rules.naming and _NAMING.search(question):
        return "naming"
    if rules.enumeration and _lists(question):
        return "enumeration"
    return None


def _filed(kb: ImageKB, question: str, images: Images) -> tuple[tuple[str, ...], list[ImageEntry]]:
    """The categories the question asks for and the images filed under them: every category the caption names
    (``synonyms``), or the caption's head noun only (``head``)."""
    if images.categories == "synonyms":
        asked = tuple(category_table().asked(question))
        return asked, [e for e in kb.images if set(e.categories) & set(asked)]
    stems = {stem(t) for t in tokens(question)}
    found = [e for e in kb.images if e.head and e.head in stems]
    return tuple(dict.fromkeys(e.head for e in found)), found


def query(kb: ImageKB, question: str, images: Images) -> IKBAnswer | None:
    """The IKB's answer to ``question`` when a rule routes it and the IKB holds images of what it asks for (of the
    speakers it names, when they shared some); else ``None`` (normal retrieval answers it)."""
    route = route_of(question, images.route)
    if route is None or not kb:
        return None
    asked, found = _filed(kb, question, images)
    words = {t.lower() for t in re.findall(r"[A-Za-z]+", question)}
    speakers = tuple(s for s in dict.fromkeys(e.image.speaker for e in found) if s.split()[0].lower() in words)
    if speakers:
        found = [e for e in found if e.image.speaker in speakers]
    if not found:
        return None
    reach = images.names.reach
    names = tuple(dict.fromkeys(n for e in found if images.names.enabled and (n := e.name(reach)) is not None))
    shown = {c for e in found for c in (e.categories if images.categories == "synonyms" else (e.head,))}
    ordered = sorted(found, key=lambda e: (e.image.time or datetime.min, e.id))
    return IKBAnswer(route, tuple(c for c in asked if c in shown), tuple(ordered), speakers, names)


def reachable(kb: ImageKB, question: str) -> tuple[str, ...]:
    """Ids of the images the IKB would answer ``question`` with under every rule, synonyms and every name in reach
    (empty: no rule routes it, or it asks for nothing the IKB holds); what a missed route would have packed."""
    every = Images(categories="synonyms", names=ImageNames(enabled=True, reach=NAME_REACH),
                   route=ImageRoute(enabled=True, counting=True, enumeration=True, naming=True),
                   packing=ImagePacking(mode="lead", max_images=len(kb) or 1, text="caption"))
    answer = query(kb, question, every)
    return tuple(e.id for e in answer.images) if answer else ()


def _entry_text(entry: ImageEntry, store: MemoryStore, images: Images) -> str:
    """One image as the item states it: dated, its caption (or the words of its turn), and its name."""
    when = f"[{format_date(entry.image.time)}] " if entry.image.time else ""
    turn = store.turns.get(entry.image.source_turn)
    if images.packing.text == "turn" and turn is not None:
        said = f"{turn.speaker}: {turn.text}"
    else:
        said = caption_body(entry.image.caption) or "a photo"
    name = entry.name(images.names.reach) if images.names.enabled else None
    return f"{when}{said}{f' (named {name})' if name else ''}"


def ikb_item(answer: IKBAnswer, store: MemoryStore, images: Images, budget: int, fmt: str) -> ContextItem:
    """The one context item of ``answer``: a header with the count (photos, and named subjects) and up to
    ``packing.max_images`` images, as many as ``budget`` words hold; it cites the turns that shared them and carries
    their image ids."""
    whose = f" shared by {' and '.join(answer.speakers)}" if answer.speakers else ""
    what = ", ".join(answer.categories) or "photos"
    named = f"; {len(answer.names)} named: {', '.join(answer.names)}" if answer.names else ""
    header = f"Photos of {what}{whose}: {len(answer.images)} photos{named}."
    shown = list(answer.images[:images.packing.max_images])
    while True:
        text = " ".join([header, *(f"{_entry_text(e, store, images)};" for e in shown)]).rstrip(";")
        line = render(f"{IKB_LAYER}:{answer.route}", IKB_LAYER, text, None, fmt)
        if count_words(line) <= budget or not shown:
            break
        shown.pop()
    return ContextItem(f"{IKB_LAYER}:{answer.route}", line, IKB_LAYER,
                       tuple(dict.fromkeys(e.image.source_turn for e in shown)),
                       max((e.image.time for e in shown if e.image.time), default=None), 1.0, tuple(e.id for e in shown))


def pack(store: MemoryStore, answer: IKBAnswer, hits: list[Hit], policy: Policy,
         wanted: frozenset[str] = frozenset()) -> Packing:
    """A routed question's context: the IKB item first, then (``packing.mode: lead``) what normal assembly packs of
    ``hits`` in the budget left, or (``alone``) the item alone."""
    budget = policy.assembly.token_budget
    item = ikb_item(answer, store, policy.images, budget, policy.assembly.format)
    if policy.images.packing.mode == "alone":
        return Packing([item], [(h.id, "budget") for h in hits], count_words(item.text))
    rest = policy.assembly.model_copy(update={"token_budget": max(0, budget - count_words(item.text))})
    packing = assemble(store, hits, policy.model_copy(update={"assembly": rest}), wanted)
    return Packing([item, *packing.packed], packing.dropped, count_words(item.text) + packing.context_tokens)

