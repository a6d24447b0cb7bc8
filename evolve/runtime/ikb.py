"""The image knowledge base (IKB) of one conversation: a side table of the photos its turns share, linked to the
layered memory by image and turn ids, built at ingestion in passes, deterministically and offline:

1. registry: each image observation's id, session, date, caption, source turn and speaker;
2. category normalisation: the caption's head noun and the categories its words name, with synonyms
   (``evolve/data/image_categories.yaml``: dog, puppy and pup are one category);
3. name recovery: a name the dialogue gives the image's subject ("this is Luna, our new puppy") in its turn or a
   turn near it, nearest first;
4. split of over-merged groups: a category whose images carry different names is several entities, one per name;
5. related facts: the turns near the image that speak of it (its caption's words, its name) and its content words.

What a strategy does with it (the route, the names' reach, categories or head nouns) is decided at query time
(:mod:`evolve.runtime.ikb_query`), so one IKB serves every strategy.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Iterable, Sequence

import yaml

from evolve.benchmarks.observations import ImageObservation
from evolve.benchmarks.types import Turn
from evolve.data import IMAGE_CATEGORIES_PATH
from evolve.runtime.text import STOPWORDS, content_set, stem, tokens

#: Turns on each side of an image's own (in its session) searched for its name; a strategy reads up to this many.
NAME_REACH = 3
#: Turns on each side of an image's own (in its session) that may be its related facts.
RELATED_REACH = 2
_CAPTION_PREFIX = re.compile(r"^\s*(?:an? )?(?:close up |closeup )?(?:photo|photography|picture|image|screenshot)"
                             r"(?: of)?\s+", re.IGNORECASE)
#: A caption folded into its turn's text (:func:`evolve.benchmarks.turns.fold_caption`): not what the turn says.
_FOLDED = re.compile(r"\s*\[shares a photo of [^\]]*\]")
#: Words that end a caption's first noun phrase: its head noun is the word before.
_BOUNDARY = frozenset("of with in on at that and who which near next under by from for to while as has have is are "
                      "its their his her".split())
#: Head nouns that count or contain: the caption's subject is the noun phrase after their "of".
_CONTAINERS = frozenset("stack pile bunch group couple pair set lot box bag close view row collection "
                        "handful plate tray basket".split())
_NAME_CUE = re.compile(r"\b(?i:named|called|name is|name's|names are|this is|meet|say hi to|say hello to|"
                       r"(?:pic|photo|picture|shot) of)\s+"
                       r"((?:[A-Z][a-z]+)(?:(?:,\s*|\s+and\s+)[A-Z][a-z]+)*)")
_NOT_NAMES = frozenset("I My Our The This That It He She They We You His Her Their Its A An So And But Just "
                       "Mom Dad Grandma Grandpa".split())


@dataclass(frozen=True)
class CategoryTable:
    """Category of each word stem, and the categories each group word stands for."""

    words: dict[str, str]
    groups: dict[str, tuple[str, ...]]

    def categories_in(self, text: str) -> list[str]:
        """The categories the words of ``text`` name, in the order they are first named."""
        return list(dict.fromkeys(c for t in tokens(text) if (c := self.words.get(stem(t))) is not None))

    def asked(self, text: str) -> list[str]:
        """The categories a question's words name, a group word ("pets") standing for its categories."""
        found: list[str] = []
        for token in tokens(text):
            s = stem(token)
            found += [self.words[s]] if s in self.words else list(self.groups.get(s, ()))
        return list(dict.fromkeys(found))


@lru_cache(maxsize=1)
def category_table() -> CategoryTable:
    """The curated category table (``evolve/data/image_categories.yaml``)."""
    data = yaml.safe_load(IMAGE_CATEGORIES_PATH.read_text(encoding="utf-8"))
    words = {stem(w): name for name, synonyms in data["categories"].items() for w in [name, *synonyms]}
    groups = {stem(g): tuple(members) for g, members in data["groups"].items()}
    unknown = sorted({m for members in groups.values() for m in members} - set(data["categories"]))
    if unknown:
        raise ValueError(f"{IMAGE_CATEGORIES_PATH}: groups name unknown categories {unknown}")
    return CategoryTable(words, groups)


@dataclass(frozen=True)
class RecoveredName:
    """A name the dialogue gives an image's subject: said in ``turn``, ``offset`` turns from the image's own."""

    name: str
    turn: str
    offset: int


@dataclass(frozen=True)
class ImageEntry:
    """One image of the IKB: its observation, then what the passes found."""

    image: ImageObservation
    #: Stem of the caption's head noun ("a black dog laying in the grass": ``dog``); "" for a caption without one.
    head: str = ""
    #: Categories the caption's words name, the head noun's first.
    categories: tuple[str, ...] = ()
    #: Names recovered for its subject, nearest turn first.
    names: tuple[RecoveredName, ...] = ()
    #: Its related turns: the source turn, then nearby turns speaking of it, in dialogue order.
    turns: tuple[str, ...] = ()
    #: Content stems of its caption and names.
    terms: frozenset[str] = frozenset()

    @property
    def id(self) -> str:
        return self.image.id

    def name(self, reach: int) -> str | None:
        """The nearest name recovered within ``reach`` turns of the image's own (``None``: none)."""
        return next((n.name for n in self.names if abs(n.offset) <= reach), None)


@dataclass(frozen=True)
class Entity:
    """What a group of images shows: one category, and one name when the dialogue gave one."""

    category: str
    name: str | None
    image_ids: tuple[str, ...]


@dataclass(frozen=True)
class ImageKB:
    """The IKB of one conversation (empty for a conversation without images)."""

    images: tuple[ImageEntry, ...] = ()
    entities: tuple[Entity, ...] = ()
    _by_turn: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)
    _by_id: dict[str, ImageEntry] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.images)

    def image(self, image_id: str) -> ImageEntry:
        return self._by_id[image_id]

    def shared_by(self, turn_id: str) -> tuple[ImageEntry, ...]:
        """The entries of the images ``turn_id`` shares."""
        return tuple(self._by_id[i] for i in self._by_turn.get(turn_id, ()))

    def image_ids(self, turn_ids: Iterable[str]) -> tuple[str, ...]:
        """Ids of the images the turns share, in the turns' order, without repeats."""
        return tuple(dict.fromkeys(i for t in turn_ids for i in self._by_turn.get(t, ())))


def caption_body(caption: str) -> str:
    """A caption without its leading "a photo of" (or picture, image, photography)."""
    return _CAPTION_PREFIX.sub("", caption).strip()


def head_noun(caption: str) -> str:
    """Stem of the head noun of a caption's first noun phrase (after "a photo of"; a container's "of" followed):
    "a stack of bowls with different designs" -> ``bowl``."""
    words = tokens(caption_body(caption))
    head = ""
    for i, word in enumerate(words):
        if word in _BOUNDARY or (word.endswith("ing") and head):
            if word == "of" and head in _CONTAINERS:
                head = ""
                continue
            break
        if word not in STOPWORDS and not word.isdigit():
            head = stem(word)
    return head


def _registry(images: Sequence[ImageObservation], table: CategoryTable) -> list[ImageEntry]:
    """Passes 1 and 2: each observation as an entry, with its head noun and categories."""
    out = []
    for image in images:
        head = head_noun(image.caption)
        categories = table.categories_in(image.caption)
        first = table.words.get(head)
        if first is not None:
            categories = [first, *(c for c in categories if c != first)]
        out.append(ImageEntry(image, head, tuple(categories)))
    return out


def _names(text: str, speakers: frozenset[str]) -> list[str]:
    """Names a turn gives something after a naming cue ("named Luna", "this is Oliver and Bailey")."""
    found = []
    for match in _NAME_CUE.finditer(text):
        for name in re.split(r",\s*|\s+and\s+", match.group(1)):
            if name and name not in _NOT_NAMES and name.lower() not in STOPWORDS and name not in speakers:
                found.append(name)
    return found


def _recover_names(entry: ImageEntry, session: Sequence[Turn], speakers: frozenset[str],
                   sharing: frozenset[str]) -> ImageEntry:
    """Pass 3: the names said in the image's turn and the ``NAME_REACH`` turns on each side, nearest first (later
    turns first on ties: a reply names what was shown), but for turns sharing an image of their own (``sharing``):
    what they name is theirs."""
    at = next((i for i, t in enumerate(session) if t.id == entry.image.source_turn), None)
    if at is None:
        return entry
    order = sorted((i for i in range(max(0, at - NAME_REACH), min(len(session), at + NAME_REACH + 1))
                    if i == at or session[i].id not in sharing), key=lambda i: (abs(i - at), i < at))
    names = [RecoveredName(name, session[i].id, i - at) for i in order for name in _names(session[i].text, speakers)]
    unique = list({n.name: n for n in reversed(names)}.values())[::-1]  # each name at its nearest turn
    return replace(entry, names=tuple(unique))


def _related(entry: ImageEntry, session: Sequence[Turn]) -> ImageEntry:
    """Pass 5: the image's content words (its caption's, after "a photo of", and its names) and its related turns:
    its own, and those within ``RELATED_REACH`` that share one of those words."""
    terms = content_set(" ".join([caption_body(entry.image.caption), *(n.name for n in entry.names)]))
    at = next((i for i, t in enumerate(session) if t.id == entry.image.source_turn), None)
    if at is None:
        return replace(entry, turns=(entry.image.source_turn,), terms=terms)
    near = range(max(0, at - RELATED_REACH), min(len(session), at + RELATED_REACH + 1))
    turns = [session[i].id for i in near if i == at or content_set(_FOLDED.sub("", session[i].text)) & terms]
    return replace(entry, turns=tuple(turns), terms=terms)


def split_entities(entries: Sequence[ImageEntry], reach: int = NAME_REACH) -> list[Entity]:
    """Pass 4: per category (an image's first), one entity for its unnamed images and one per name its images
    were given within ``reach`` turns: a category group holding differently named subjects is split."""
    groups: dict[tuple[str, str | None], list[str]] = {}
    for entry in entries:
        if entry.categories:
            groups.setdefault((entry.categories[0], entry.name(reach)), []).append(entry.id)
    return [Entity(category, name, tuple(ids)) for (category, name), ids in groups.items()]


def build_ikb(images: Sequence[ImageObservation], turns: Sequence[Turn]) -> ImageKB:
    """The IKB of a conversation's image observations, over its turns (in dialogue order)."""
    if not images:
        return ImageKB()
    table = category_table()
    speakers = frozenset(t.speaker.split()[0] for t in turns if t.speaker)
    sessions: dict[str, list[Turn]] = {}
    for turn in turns:
        sessions.setdefault(turn.session_id, []).append(turn)
    sharing = frozenset(image.source_turn for image in images)
    entries = []
    for entry in _registry(images, table):
        session = sessions.get(entry.image.session, [])
        entries.append(_related(_recover_names(entry, session, speakers, sharing), session))
    by_turn: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        by_turn[entry.image.source_turn] = by_turn.get(entry.image.source_turn, ()) + (entry.id,)
    return ImageKB(tuple(entries), tuple(split_entities(entries)), by_turn, {e.id: e for e in entries})
