"""When a probe is asked, and the probes a lifecycle event yields.

A probe is asked at a session's time (``asked_at``: when its last turn was said; a question asked then sees the turns
said by then) at which its
answer holds: not before its last evidence turn was said, and not once a later statement made the answer stale
(:class:`LifecycleEvent`: a later value of the same slot, a retraction, as a :class:`Timeline` reads the
conversation). ``asked: latest`` asks at the latest such session, ``drawn`` at one drawn between the two (by the
question's hash). A probe whose answer is stale at every such session is left out: a superseded value is never the
answer.

Each event also yields probes of its own:

* ``update`` — the slot both statements set (*What is Tomas's favorite fruit?*) asked once the new statement was
  said; the answer is its new value, the old statement is ``outdated``;
* ``prior`` — the same question asked between the two statements: the answer is the old value, current then;
* ``retraction`` — what became of a withdrawn statement, asked after the retraction: the answer is what the
  retraction says instead (*cancelled*, *Norway*).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal, Protocol

from evolve.benchmarks.probe_base import Probe
from evolve.benchmarks.probe_grammar import stable
from evolve.benchmarks.types import Conversation
from evolve.words import content_words

#: How many words of a value an event's probe answers with.
VALUE_WORDS = 4
#: Probe kinds that ask what happened or was said, not what holds now: a later change makes none of them stale.
HISTORY = frozenset({"aggregation", "link", "temporal"})


@dataclass(frozen=True)
class LifecycleEvent:
    """A statement (turn ``old``) that a later one (turn ``new``) superseded or retracted; ``slot`` is
    ``subject|attribute`` when both set one slot (a superseding event has one)."""

    state: Literal["superseded", "retracted"]
    old: str
    new: str
    old_text: str
    new_text: str
    slot: str | None = None

    def stales(self, answer: str) -> bool:
        """Whether ``answer`` is the value this event made stale: a superseded word the new statement does not
        say, or a word of the retracted statement."""
        words, old = content_words(answer), content_words(self.old_text)
        return bool(words & (old - content_words(self.new_text)) if self.state == "superseded" else words & old)


class Timeline(Protocol):
    """Reads which statements of a conversation later ones made stale (the reference lifecycle,
    :class:`evolve.runtime.reference.ReferenceLifecycle`)."""

    def events(self, conversation: Conversation) -> list[LifecycleEvent]: ...


class _Clock:
    """When each turn was said, and each session's time: when its last turn was said (a question asked then sees
    the whole session)."""

    def __init__(self, conversation: Conversation):
        self.said = {t.id: t.timestamp or s.timestamp for s in conversation.sessions for t in s.turns}
        ends = [max((self.said[t.id] for t in s.turns if self.said[t.id] is not None), default=s.timestamp)
                for s in conversation.sessions]
        self.sessions = sorted({end for end in ends if end is not None})

    def window(self, evidence: tuple[str, ...], until: datetime | None) -> list[datetime]:
        """The session times at which ``evidence`` has all been said, before ``until``."""
        known = [self.said[e] for e in evidence if self.said.get(e) is not None]
        start = max(known) if known else None
        return [s for s in self.sessions if (start is None or s >= start) and (until is None or s < until)]


def place(conversation: Conversation, probes: list[Probe], events: list[LifecycleEvent],
          asked: Literal["latest", "drawn"]) -> list[Probe]:
    """``probes`` each with the session time it is asked at (its own, when it has one), those whose answer is stale
    at every session after their evidence left out."""
    clock, out = _Clock(conversation), []
    for probe in probes:
        stale = [] if probe.kind in HISTORY else [
            clock.said[e.new] for e in events if e.old in probe.evidence and clock.said.get(e.new) is not None
            and e.stales(probe.answer)]
        window = clock.window(probe.evidence, min(stale, default=None))
        if probe.asked_at is not None:
            window = [probe.asked_at] if probe.asked_at in window else []
        if window:
            at = window[-1] if asked == "latest" else window[stable(probe.question) % len(window)]
            out.append(replace(probe, asked_at=at))
    return out


#: Words that say nothing of a value: the speaker's own contractions, the cue words of a correction or a retraction
#: (but those that say what became of a plan: cancelled, dropped, called off).
_EMPTY = frozenset("i'm i've i'd i'll we're we've we'd we'll that's actually now anymore instead forget forgot said say true mentioned "
                   "scratch ignore told".split())


_WORD = re.compile(r"[A-Za-z0-9][\w'-]*")


def _telling(word: str) -> bool:
    """Whether ``word`` can say a value or a topic: a content word, not one of :data:`_EMPTY`."""
    return word.lower() not in _EMPTY and bool(content_words(word))


def _value(text: str, other: str) -> str:
    """The words of ``text`` that ``other`` does not say (its first :data:`VALUE_WORDS` content words)."""
    drop = content_words(other)
    words = [w for w in _WORD.findall(text) if _telling(w) and not content_words(w) <= drop]
    return " ".join(dict.fromkeys(words[:VALUE_WORDS]))


def _topic(event: LifecycleEvent) -> str:
    """What both statements speak of: the old statement's words from the first to the last word both say (at most
    six words, else those words alone)."""
    shared = content_words(event.old_text) & content_words(event.new_text)
    words = _WORD.findall(event.old_text)
    at = [i for i, w in enumerate(words) if _telling(w) and content_words(w) <= shared]
    if not at:
        return ""
    span = words[at[0]:at[-1] + 1]
    return " ".join(span if len(span) <= 6 else [words[i] for i in at][:3])


_TIME_WORD = re.compile(r"\d|\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|january|february|"
                        r"march|april|may|june|july|august|september|october|november|december)\b", re.IGNORECASE)


def _slot_question(slot: str, values: tuple[str, str], conversation: Conversation) -> str | None:
    """The question a slot's values answer (*What is Tomas's favorite fruit?*; *When is Tomas's vet appointment?*
    when both are times); ``None`` for a count, whose slot holds a word stem."""
    who, _, attribute = slot.partition("|")
    if attribute.startswith("count "):
        return None
    name = next((s for s in conversation.speakers if s.lower().split()[0] == who), who.capitalize())
    return f"{'When' if all(_TIME_WORD.search(v) for v in values) else 'What'} is {name}'s {attribute}?"


def event_probes(conversation: Conversation, events: list[LifecycleEvent]) -> list[Probe]:
    """The ``update``, ``prior`` and ``retraction`` probes of ``events``, each with the session time it is asked at."""
    clock, speaker = _Clock(conversation), {t.id: t.speaker for t in conversation.turns()}
    out = []
    for event in events:
        new_at, topic = clock.said.get(event.new), _topic(event)
        if new_at is None or event.old not in speaker:
            continue
        if event.state == "retracted":
            answer = _value(event.new_text, event.old_text)
            if topic and answer:
                out.append(Probe("retraction", f"What became of {speaker[event.old]}'s {topic}?", answer,
                                 (event.new,), outdated=(event.old,)))
            continue
        new, old = _value(event.new_text, event.old_text), _value(event.old_text, event.new_text)
        question = _slot_question(event.slot, (new, old), conversation) if event.slot else None
        if question is None or not new or not old:
            continue
        out.append(Probe("update", question, new, (event.new,), outdated=(event.old,)))
        before = clock.window((event.old,), new_at)
        if before:
            out.append(Probe("prior", question, old, (event.old,), asked_at=before[-1]))
    return out
