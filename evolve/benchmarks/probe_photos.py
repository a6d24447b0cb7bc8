"""Probe generators over a conversation's photos as a gallery files them (the reference image knowledge base,
:class:`evolve.runtime.reference.ReferenceGallery`), asked the way LoCoMo asks about what photos showed:

* ``photo_count`` — how many photos of one category a speaker shared, told in at least two sessions
  (*How many photos of dogs has Caroline shared?* → 3; evidence: every such photo's turn). A count is recoverable
  by construction, so only "the answer is in the question" is checked;
* ``photo_name`` — the names the dialogue gave the subjects of a speaker's photos of one category, the photo's
  first (*What are the names of the dogs in Melanie's photos?* → Luna, Oliver; evidence: the photos' turns and the
  turns naming them); a gallery names only what it takes for a named subject (the reference one: animals).

Both stand for LoCoMo's multi-hop category (its counting and naming questions are multi-hop).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from evolve.benchmarks.probe_base import Probe, probe_quality
from evolve.benchmarks.types import Conversation
from evolve.words import content_words

#: Categories named in the singular when a question asks for several (mass nouns).
_MASS = frozenset({"fish", "pottery", "music", "food", "camping", "clothing", "sport"})
#: Counts asked: a single photo is not counted, and people do not count past a handful.
MIN_COUNT, MAX_COUNT = 2, 9


@dataclass(frozen=True)
class GalleryPhoto:
    """One photo as a gallery files it: its id, the turn that shared it, its speaker and time, the categories its
    caption names, and the name the dialogue gave its subject with the turn saying it (``None``: none)."""

    id: str
    turn: str
    speaker: str
    time: datetime | None
    categories: tuple[str, ...]
    name: str | None = None
    name_turn: str | None = None


class Gallery(Protocol):
    """Files a conversation's photos (the reference IKB, :class:`evolve.runtime.reference.ReferenceGallery`)."""

    def photos(self, conversation: Conversation) -> list[GalleryPhoto]: ...


def plural(category: str) -> str:
    """How a question names several things of ``category``: ``dogs``, ``pottery``."""
    return category if category in _MASS else f"{category}s"


def _by_speaker_category(photos: list[GalleryPhoto], first: bool = False) -> dict[tuple[str, str], list[GalleryPhoto]]:
    """Photos per (speaker, category): under every category the caption names, or (``first``) its head noun's."""
    grouped: dict[tuple[str, str], list[GalleryPhoto]] = defaultdict(list)
    for photo in photos:
        for category in photo.categories[:1] if first else photo.categories:
            grouped[(photo.speaker, category)].append(photo)
    return grouped


def photo_counts(conversation: Conversation, photos: list[GalleryPhoto]) -> list[Probe]:
    """``photo_count`` probes: a speaker's photos of one category shared in at least two sessions, counted."""
    session = {t.id: t.session_id for t in conversation.turns()}
    out = []
    for (speaker, category), shown in _by_speaker_category(photos).items():
        turns = tuple(dict.fromkeys(p.turn for p in shown))
        if not MIN_COUNT <= len(shown) <= MAX_COUNT or len({session.get(t) for t in turns}) < 2:
            continue
        question = f"How many photos of {plural(category)} has {speaker} shared?"
        answer = str(len(shown))
        if not content_words(answer) <= content_words(question):
            out.append(Probe("photo_count", question, answer, turns))
    return out


def photo_names(conversation: Conversation, photos: list[GalleryPhoto]) -> list[Probe]:
    """``photo_name`` probes: the names given to the subjects of a speaker's photos of one category, when the
    photos' turns and the naming turns hold them (:func:`probe_quality`)."""
    turns = {t.id: t for t in conversation.turns()}
    out = []
    for (speaker, category), shown in _by_speaker_category(photos, first=True).items():
        named = [p for p in shown if p.name and p.name_turn]
        names = list(dict.fromkeys(p.name for p in named))
        if not names:
            continue
        evidence = tuple(dict.fromkeys([p.turn for p in named] + [p.name_turn for p in named]))
        question = (f"What is the name of the {category} in {speaker}'s photos?" if len(names) == 1 else
                    f"What are the names of the {plural(category)} in {speaker}'s photos?")
        answer = ", ".join(names)
        if probe_quality(question, answer, [turns[e] for e in evidence if e in turns]) is None:
            out.append(Probe("photo_name", question, answer, evidence))
    return out


def gallery_probes(conversation: Conversation, gallery: Gallery) -> list[Probe]:
    """Every ``photo_count`` and ``photo_name`` probe of ``conversation``'s photos as ``gallery`` files them."""
    photos = gallery.photos(conversation)
    return photo_counts(conversation, photos) + photo_names(conversation, photos)
