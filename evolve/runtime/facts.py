"""Lifecycle metadata of a fact, read deterministically from its text: behavioural category, slot key, event time,
confidence and whether it carries a specific number. An LLM extractor may supply the same :class:`FactMeta`."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from evolve.runtime import dates
from evolve.runtime.text import normalise, stem

#: Categories whose facts are about a dated event, and so can expire once it has passed.
EVENT_CATEGORIES = ("obligations", "logistics", "health")
#: Confidence of a tentative statement, of a plain one, and of an explicit change.
TENTATIVE, PLAIN, EXPLICIT = 0.5, 0.9, 0.97

_RELATIONS = ("sister", "brother", "cousin", "friend", "neighbor", "neighbour", "boss", "mom", "mother", "dad",
              "father", "wife", "husband", "partner", "son", "daughter", "kids", "children", "family", "girlfriend",
              "boyfriend", "aunt", "uncle", "grandma", "grandmother", "grandpa", "grandfather", "niece", "nephew")


def _words(*alternatives: str) -> re.Pattern[str]:
    return re.compile(r"(?<![a-z])(?:" + "|".join(alternatives) + r")(?![a-z])")


#: First match wins: a preference about food is a preference, an appointment at the dentist is logistics.
_CATEGORY_CUES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("preferences", _words(r"favou?rite", "prefer", "i love", "i hate", "i'm into", "i am into", "i enjoy")),
    ("financial", re.compile(r"\$\d|(?<![a-z])(?:cost|costs|price|rent|salary|paid|pay|budget|loan|mortgage|"
                             r"savings|invest\w*|dollars?|euros?|bought)(?![a-z])")),
    ("logistics", _words("appointment", "flight", "booked", "booking", "reservation", "ticket", "trip", "travel",
                         "pick up", "delivery", "haircut", "moving day", "check-in")),
    ("obligations", _words("meeting", "lunch with", "dinner with", "session", "deadline", "due", "interview",
                           "have to", "need to", "promised", "book club", "rehearsal", "exam")),
    ("health", _words("doctor", "dentist", "hospital", "allergic", "allergy", "sick", "medication", "therapy",
                      "therapist", "work out", "workout", "gym", "diet", "sleep", "injury", "surgery", "run", "ran",
                      "marathon", "yoga", "fitness")),
    ("relational", _words(*_RELATIONS)),
    ("identity", _words("i live", "we live", "i moved", "we moved", "i'm from", "i am from", "my name", "born",
                        "years old", "i grew up", "lives in", "moved to", "moving to")),
    ("projects", _words("work as", "works as", "job", "work at", "project", "career", "promotion", "office",
                        "colleague", "company", "business", "startup")),
    ("hobbies", _words("hobby", "hobbies", "took up", "play the", "orchestra", "painting", "hiking", "knitting",
                       "pottery", "garden", "gardening", "chess", "guitar", "photography", "concert")),
    ("intellectual", _words("learning", "learn", "book", "books", "read", "reading", "course", "class", "study",
                            "studying", "language", "lecture", "research")),
)
_TENTATIVE = _words("thinking about", "thinking of", "considering", "maybe", "might", "not sure", "haven't decided",
                    "have not decided", "perhaps", "possibly", "toying with", "wondering whether", "wondering if")
_EXPLICIT = _words("actually", "no longer", "not anymore", "switched to", "moved to", "changed", "instead of",
                   "now", "these days")
_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                 "ten": 10}
_COUNT = r"(\d+|" + "|".join(_NUMBER_WORDS) + r")"
_NAME = r"([A-Z][a-z]+)"
#: (pattern over the fact's body, attribute or a function of the match, subject group or None for the speaker).
_SLOTS: tuple[tuple[re.Pattern[str], str | None, int | None], ...] = (
    (re.compile(r"\bmy favou?rite ((?:board )?[a-z]+)", re.I), "favorite {0}", None),
    (re.compile(r"\b(?:i|we)(?:'m| am| are)? (?:[a-z]+ ){0,3}?(?:live|living|moved|moving) (?:in|to)\b", re.I),
     "residence", None),
    (re.compile(r"^" + _NAME + r" (?:lives|lived|moved) (?:in|to)\b"), "residence", 1),
    (re.compile(r"\bi (?:now )?work as\b", re.I), "job", None),
    (re.compile(r"^" + _NAME + r" works as\b"), "job", 1),
    (re.compile(r"\bi work out at\b", re.I), "gym", None),
    (re.compile(r"\bi (?:now )?have " + _COUNT + r" ([a-z]+)", re.I), "count {1}", None),
    (re.compile(r"\b([a-z]+(?: [a-z]+)?) appointment\b", re.I), "{0} appointment", None),
    (re.compile(r"^the ([a-z]+(?: [a-z]+){0,3}?) (?:is|was|has been|got|moved)\b", re.I), "{0}", None),
    (re.compile(r"\bmy ([a-z]+)(?: to [a-z]+)? (?:is|costs?)\b", re.I), "{0}", None),
)
_ARTICLES = frozenset({"a", "an", "another", "the", "my", "new", "next", "first"})


@dataclass(frozen=True)
class FactMeta:
    """``slot`` is ``"subject|attribute"`` (lower case) for facts that hold one value at a time, else ``None``."""

    category: str = "other"  # one of evolve.strategy.policy.FACT_CATEGORIES
    slot: str | None = None
    event_time: datetime | None = None
    confidence: float = PLAIN
    numeric: bool = False
    #: Every category the cue lexicon finds, ``category`` first (soft membership: per-category values are averaged
    #: over them); empty means ``category`` alone.
    categories: tuple[str, ...] = ()

    @property
    def members(self) -> tuple[str, ...]:
        """The categories the fact belongs to (``category`` alone unless the lexicon found several)."""
        return self.categories or (self.category,)

    def to_dict(self) -> dict:
        when = self.event_time
        stamp = None if when is None else (when.date().isoformat() if when.time() == datetime.min.time()
                                           else when.isoformat(timespec="minutes"))
        out = {"category": self.category, "slot": self.slot, "confidence": self.confidence, "numeric": self.numeric,
               "event_time": stamp}
        return {**out, "categories": list(self.members)} if len(self.members) > 1 else out


def categories(body: str) -> tuple[str, ...]:
    """Every category whose cues occur in ``body``, in the lexicon's order (empty when none does)."""
    lowered = " " + normalise(body).lower() + " "
    return tuple(name for name, cue in _CATEGORY_CUES if cue.search(lowered))


def category(body: str) -> str:
    """The first category whose cues occur in ``body``: a preference about food is a preference."""
    return next(iter(categories(body)), "other")


def slot_key(body: str, speaker: str | None) -> str | None:
    """The (subject, attribute) a fact sets, if it matches one of the single-value patterns."""
    text = normalise(body).strip()
    for pattern, attribute, subject_group in _SLOTS:
        match = pattern.search(text)
        if match is None:
            continue
        parts = [" ".join(w for w in g.lower().split() if w not in _ARTICLES) for g in match.groups()]
        if attribute == "count {1}":
            parts = [parts[0], stem(parts[1])]
        name = attribute.format(*parts).strip()
        subject = match.group(subject_group).lower() if subject_group else (speaker or "").lower()
        if name and subject:
            return f"{subject}|{name}"
    return None


def confidence(body: str) -> float:
    lowered = " " + normalise(body).lower() + " "
    if _TENTATIVE.search(lowered):
        return TENTATIVE
    return EXPLICIT if _EXPLICIT.search(lowered) else PLAIN


def numeric(body: str) -> bool:
    """Whether the fact carries a specific number other than a date, a year or a time of day."""
    return any(ch.isdigit() for ch in dates.without_dates(normalise(body)))


def annotate(body: str, speaker: str | None, said: datetime | None = None) -> FactMeta:
    """Metadata of a fact from its body (the text without the ``X said (date):`` attribution), said at ``said``
    (relative dates resolve against it: :func:`evolve.runtime.dates.event_time`)."""
    found = categories(body)
    return FactMeta(found[0] if found else "other", slot_key(body, speaker), dates.event_time(body, said),
                    confidence(body), numeric(body), found if len(found) > 1 else ())


def expired(meta: FactMeta, now: datetime | None, buffer_days: float, scope: str = "events") -> bool:
    """An event fact (any dated fact when ``scope`` is ``"dated"``) whose day lies more than ``buffer_days`` before
    ``now`` (a difference of two dates, which cannot leave datetime's range the way a date plus the buffer can near
    9999-12-31)."""
    return ((scope == "dated" or meta.category in EVENT_CATEGORIES) and meta.event_time is not None and now is not None
            and now - meta.event_time >= timedelta(days=buffer_days + 1))
