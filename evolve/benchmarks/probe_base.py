"""What every probe generator shares: the probe record, dates and relative time expressions, the text a reader of a
turn knows, the quality filter, and the paraphrase check (no verbatim word pair of the evidence turn)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from evolve.benchmarks.types import Conversation, Turn
from evolve.words import STOPWORDS, content_words

_NUMBER = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a couple of": 2, "couple of": 2}
_WEEKDAY = (r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|mon|tues?|wed|thur?s?|fri|sat|sun")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
#: Relative time expressions :func:`resolve_time` resolves against the date they were said on.
TIME = re.compile(rf"\b(yesterday|last night|today|tonight|tomorrow|this morning|earlier today|"
                  rf"(?:last|next) (?:week(?:end)?|month|year)|(?:last|next) (?:{_WEEKDAY})|"
                  rf"(\d+|a|one|two|three|four|five|six|a couple of|couple of|a few|few) (day|week|month|year)s? ago)\b",
                  re.IGNORECASE)
#: Words whose referent the clause alone does not give (the addressee, "this", "that"): a question built on them is
#: ambiguous.
DEICTIC = re.compile(r"\b(?:you|your|yours|this|that|these|those|it|there|here|one|ones)\b", re.IGNORECASE)
#: The photo caption the LoCoMo reader appends to a turn's text: ``[shares a photo of ...]``.
CAPTION = re.compile(r"\s*\[shares a photo of ([^\]]*)\]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_PAIR_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Probe:
    """One generated question before it is numbered: its kind, text, answer and evidence turn ids; when it is asked
    (``None``: after the last session) and the turns whose statement it made stale."""

    kind: str
    question: str
    answer: str
    evidence: tuple[str, ...]
    asked_at: datetime | None = None
    outdated: tuple[str, ...] = ()


class Questioner(Protocol):
    """Writes probes about a conversation (the LLM question-generation role, :mod:`evolve.llm.questions`)."""

    def probes(self, conversation: Conversation) -> list[Probe]: ...


def format_date(day: datetime) -> str:
    """``7 May 2023``: the date style of LoCoMo's answers."""
    return f"{day.day} {day:%B} {day.year}"


def _month(day: datetime, step: int) -> str:
    index = day.year * 12 + day.month - 1 + step
    return f"{datetime(index // 12, index % 12 + 1, 1):%B} {index // 12}"


def resolve_time(expression: str, said: datetime) -> str:
    """The date a relative time expression said at ``said`` refers to, in words (``yesterday`` → ``7 May 2023``,
    ``last week`` → ``the week before 9 June 2023``, ``next month`` → ``July 2023``, ``last year`` → ``2022``)."""
    e = " ".join(expression.lower().split())
    if e in ("yesterday", "last night"):
        return format_date(said - timedelta(days=1))
    if e in ("today", "tonight", "this morning", "earlier today"):
        return format_date(said)
    if e == "tomorrow":
        return format_date(said + timedelta(days=1))
    direction, _, unit = e.partition(" ")
    if direction in ("last", "next") and unit in ("week", "weekend"):
        return f"the {unit} {'before' if direction == 'last' else 'after'} {format_date(said)}"
    if direction in ("last", "next") and unit == "month":
        return _month(said, -1 if direction == "last" else 1)
    if direction in ("last", "next") and unit == "year":
        return str(said.year + (-1 if direction == "last" else 1))
    if direction in ("last", "next"):
        unit = next(d for d in _WEEKDAYS if d.startswith(unit))
        return f"the {unit.capitalize()} {'before' if direction == 'last' else 'after'} {format_date(said)}"
    count, unit = re.fullmatch(r"(.+) (day|week|month|year)s? ago", e).groups()
    if count in ("a few", "few"):
        return f"a few {unit}s before {format_date(said)}"
    n = int(count) if count.isdigit() else _NUMBER[count]
    if unit == "day":
        return format_date(said - timedelta(days=n))
    if unit == "year":
        return str(said.year - n)
    return f"{n} {unit}{'s' if n > 1 else ''} before {format_date(said)}"


def turn_facts(turn: Turn) -> str:
    """What a reader of ``turn`` knows: its speaker, its text, its session date and the dates its relative time
    expressions resolve to (the text a probe's answer must be recoverable from)."""
    dates = [] if turn.timestamp is None else [format_date(turn.timestamp)] + [
        resolve_time(m.group(0), turn.timestamp) for m in TIME.finditer(turn.text)]
    return " ".join([turn.speaker, turn.text, *dates])


def probe_quality(question: str, answer: str, evidence: list[Turn]) -> str | None:
    """Why a probe is unusable, or ``None``: its answer has no content word, the question already holds all of them
    (trivial), or its evidence turns do not (not recoverable)."""
    words = content_words(answer)
    if not words:
        return "answer has no content word"
    if words <= content_words(question):
        return "answer is in the question"
    known: set[str] = set()
    for turn in evidence:
        known |= content_words(turn_facts(turn))
    if not words <= known:
        return f"answer words {sorted(words - known)} are not in the evidence turns"
    return None


def verbatim_pairs(question: str, turn_text: str, allowed: frozenset[str] | set[str]) -> list[str]:
    """The word pairs of ``question`` that ``turn_text`` also holds, side by side, other than those whose words are
    all function words or ``allowed`` (names, the answer's words): a paraphrase has none."""
    words = _PAIR_WORD.findall(question.lower())
    said = _PAIR_WORD.findall(turn_text.lower())
    seen = set(zip(said, said[1:]))
    free = STOPWORDS | set(allowed)
    return [f"{a} {b}" for a, b in zip(words, words[1:]) if (a, b) in seen and not {a, b} <= free]


def sentences(turn: Turn) -> list[str]:
    """The sentences of ``turn``'s own words (its photo caption left out)."""
    return [s.strip() for s in _SENTENCE.split(CAPTION.sub("", turn.text)) if s.strip()]


def caption(turn: Turn) -> str | None:
    """The photo caption of ``turn``, if it shares one."""
    match = CAPTION.search(turn.text)
    return match.group(1).strip() if match else None


def third_person(clause: str) -> str:
    """A first-person clause told of its speaker: ``my`` → ``their``, ``me``/``myself`` → ``them``/``themselves``."""
    swaps = {"my": "their", "me": "them", "myself": "themselves", "i": "they", "i'm": "they're", "mine": "theirs",
             "we": "they", "our": "their", "us": "them", "i've": "they've", "we're": "they're", "i'd": "they'd"}
    return re.sub(r"\b(my|me|myself|I'm|I've|I'd|I|mine|we're|we|our|us)\b", lambda m: swaps[m.group(0).lower()],
                  clause, flags=re.IGNORECASE)


def clean_clause(text: str) -> str:
    """``text`` with trailing punctuation and repeated spaces removed."""
    return re.sub(r"\s+", " ", re.sub(r"[,;:\s'\"“”]+$", "", text)).strip(" '\"“”")
