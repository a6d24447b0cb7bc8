"""Deterministic text primitives shared by every runtime stage: tokens, sentences, dates, cue phrases."""
from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Callable

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

STOPWORDS = frozenset("""
a about above after again against all also am an and any are aren't as at be because been before being below
between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each few
for from further get gets got had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers
herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself just let's me more
most much mustn't my myself no nor not now of off on once only or other ought our ours ourselves out over own
really said same say says shan't she she'd she'll she's should shouldn't so some such than that that's the their
theirs them themselves then there there's these they they'd they'll they're they've this those through to too
under until up very was wasn't we we'd we'll we're we've were weren't what what's when when's where where's which
while who who's whom why why's will with won't would wouldn't yes you you'd you'll you're you've your yours
yourself yourselves oh hey hi wow yeah yea okay ok thanks thank lot like well gonna wanna gotta btw lol haha
way thing things stuff pretty super totally sure
""".split())

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_WORD = re.compile(r"\S+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_CLAUSE_BREAK = re.compile(r"\s*[,;:]\s+|\s+-+\s+|\s+(?:but|because|so|although|though|while|whereas)\s+", re.I)


def normalise(text: str) -> str:
    return text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (apostrophe contractions kept together)."""
    return _TOKEN.findall(normalise(text).lower())


@lru_cache(maxsize=200_000)
def stem(token: str) -> str:
    """A light, deterministic suffix stripper: researched/researching/research -> research."""
    if token.endswith("'s"):
        token = token[:-2]
    if token.isdigit() or len(token) <= 3:
        return token
    if token.endswith("ies") and len(token) > 4:
        return token[:-3] + "y"
    for suffix, min_len in (("ing", 6), ("ed", 5)):
        if token.endswith(suffix) and len(token) >= min_len:
            token = token[: -len(suffix)]
            if len(token) > 2 and token[-1] == token[-2] and token[-1] not in "aeiousl":
                token = token[:-1]
            break
    else:
        if token.endswith("s") and not token.endswith(("ss", "us", "is")):
            token = token[:-1]
    if token.endswith("e") and len(token) > 3:
        token = token[:-1]
    return token


def content_tokens(text: str) -> list[str]:
    """Stems of the non-stopword tokens, in order (duplicates kept)."""
    return [stem(t) for t in tokens(text) if t not in STOPWORDS]


@lru_cache(maxsize=100_000)
def content_set(text: str) -> frozenset[str]:
    """The set of :func:`content_tokens` (memoised: the same memory texts recur across questions)."""
    return frozenset(content_tokens(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def words(text: str) -> list[str]:
    """Whitespace words: the unit of every token budget."""
    return _WORD.findall(text)


@lru_cache(maxsize=100_000)
def count_words(text: str) -> int:
    """The size of ``text`` in whitespace words: what a token budget, a trace's ``context_tokens`` and the service's
    ``words`` count (not a model tokenizer's tokens)."""
    return len(words(text))


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(normalise(text)) if s and s.strip()]


def clauses(sentence: str) -> list[str]:
    return [c.strip(" ,;:-") for c in _CLAUSE_BREAK.split(sentence) if c and c.strip(" ,;:-")]


def specific_count(text: str) -> int:
    """Names and numbers: capitalised words after the first, and tokens with digits."""
    ws = words(normalise(text))
    caps = sum(1 for w in ws[1:] if w[:1].isupper() and w.strip(".,!?;:'\"").lower() not in STOPWORDS)
    return caps + sum(1 for w in ws if any(ch.isdigit() for ch in w))


def salience(content: list[str], doc_freq: dict[str, int] | None = None, specific: int = 0) -> float:
    """Informativeness in [0, 1): content tokens weighted by rarity (1/df in the window) plus names/numbers."""
    df = doc_freq or {}
    info = sum(1.0 / df.get(t, 1) for t in set(content)) + 0.5 * specific
    return round(1.0 - math.exp(-info / 6.0), 6)


# ---------------------------------------------------------------- dates


def format_date(moment: datetime) -> str:
    return f"{moment.day} {MONTHS[moment.month - 1]} {moment.year}"


def format_month(year: int, month: int) -> str:
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    return f"{MONTHS[month - 1]} {year}"


_MONTH_ALT = "|".join(MONTHS)
DATE_PATTERN = re.compile(
    rf"(?:the (?:week|weekend) of )?\d{{1,2}} (?:{_MONTH_ALT}),? \d{{4}}"
    rf"|(?:{_MONTH_ALT}) \d{{1,2}},? \d{{4}}|(?:{_MONTH_ALT}) \d{{4}}|\b(?:19|20)\d{{2}}\b",
    re.I,
)
_NUMBER_WORDS = {"a couple of": 2, "couple of": 2, "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4,
                 "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_NUM = r"(\d+|" + "|".join(_NUMBER_WORDS) + ")"
_PREP = r"(?:\b(in|on|since|from|until|by|during|before|after|of)\s+)?"


def _number(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBER_WORDS[word.lower()]


def _week_of(day: datetime) -> str:
    return f"the week of {format_date(day - timedelta(days=day.weekday()))}"


def _weekend_of(day: datetime) -> str:
    """The weekend ``day`` falls in (a Sunday's began the day before) or, on a weekday, the one that follows it,
    named by its Saturday."""
    return f"the weekend of {format_date(day + timedelta(days=5 - day.weekday()))}"


#: Weekday abbreviations a speaker writes after "last" ("last Fri", "last Tues."); "Sat", "Sun" and "Mon" are left
#: out ("the last sun", "last mon" are not days).
_WEEKDAY_ABBREVIATIONS = {"tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4}


def _relative_rules(ref: datetime) -> list[tuple[re.Pattern[str], Callable[[re.Match[str]], tuple[str, str]]]]:
    """``(pattern, resolve)``: ``resolve(match)`` gives the preposition the resolved date takes (``""``: none) and
    the date, e.g. ``("on", "7 May 2023")`` or ``("", "the week of 1 May 2023")``."""
    def on(day: datetime):
        return lambda m: (m.group(1) or "on", format_date(day))

    def month(offset: int):
        return lambda m: (m.group(1) or "in", format_month(ref.year, ref.month + offset))

    def year(offset: int):
        return lambda m: (m.group(1) or "in", str(ref.year + offset))

    def week(offset_days: int):
        return lambda m: (m.group(1) or "", _week_of(ref + timedelta(days=offset_days)))

    def weekend(offset_weeks: int):
        return lambda m: (m.group(1) or "", _weekend_of(ref + timedelta(weeks=offset_weeks)))

    def ago(m: re.Match[str]) -> tuple[str, str]:
        n, unit, prep = _number(m.group(2)), m.group(3).lower(), m.group(1)
        if unit.startswith("weekend"):
            return prep or "", _weekend_of(ref - timedelta(weeks=n))
        if unit.startswith("day"):
            return prep or "on", format_date(ref - timedelta(days=n))
        if unit.startswith("week"):
            return prep or "", _week_of(ref - timedelta(weeks=n))
        if unit.startswith("month"):
            return prep or "in", format_month(ref.year, ref.month - n)
        return prep or "in", str(ref.year - n)

    def last_weekday(m: re.Match[str]) -> tuple[str, str]:
        named = m.group(2).lower()
        target = _WEEKDAY_ABBREVIATIONS[named] if named in _WEEKDAY_ABBREVIATIONS else WEEKDAYS.index(named)
        back = (ref.weekday() - target) % 7 or 7
        return m.group(1) or "on", f"{WEEKDAYS[target].capitalize()} {format_date(ref - timedelta(days=back))}"

    def last_season(m: re.Match[str]) -> tuple[str, str]:
        # the latest such season over before the month the speaker is in (spring: March to May, and so on)
        season = m.group(2).lower()
        ends = {"spring": 5, "summer": 8, "fall": 11, "autumn": 11}[season]
        return m.group(1) or "in", f"the {season} of {ref.year if ref.month > ends else ref.year - 1}"

    def rule(pattern: str) -> re.Pattern[str]:
        return re.compile(_PREP + pattern, re.I)

    return [
        (rule(r"\bthe day before yesterday\b"), on(ref - timedelta(days=2))),
        (rule(r"\b(?:yesterday|last night)\b"), on(ref - timedelta(days=1))),
        (rule(r"\b(?:today|tonight|this morning|this afternoon|this evening)\b"), on(ref)),
        (rule(r"\btomorrow\b"), on(ref + timedelta(days=1))),
        (rule(r"\b" + _NUM + r" (days?|weekends?|weeks?|months?|years?) ago\b"), ago),
        (rule(r"\blast (" + "|".join((*WEEKDAYS, *_WEEKDAY_ABBREVIATIONS)) + r")\b"), last_weekday),
        (rule(r"\b(?:(?:this |the )?past|last) weekend\b"), weekend(-1)),
        (re.compile(r"\b(over) the weekend\b(?! of)", re.I), weekend(-1)),
        (rule(r"\blast (spring|summer|fall|autumn)\b"), last_season),
        (rule(r"\bthis weekend\b"), weekend(0)),
        (rule(r"\bnext weekend\b"), weekend(1)),
        (rule(r"\blast week\b"), week(-7)),
        (rule(r"\bthis week\b"), week(0)),
        (rule(r"\bnext week\b"), week(7)),
        (rule(r"\blast month\b"), month(-1)),
        (rule(r"\bthis month\b"), month(0)),
        (rule(r"\bnext month\b"), month(1)),
        (rule(r"\blast year\b"), year(-1)),
        (rule(r"\bthis year\b"), year(0)),
        (rule(r"\bnext year\b"), year(1)),
    ]


#: How :func:`resolve_relative_dates` writes a resolved date: in place of the speaker's words ("on 5 May 2023"),
#: or after them, in parentheses ("last Friday (5 May 2023)"), which keeps the words a question may use.
DATE_STYLES = ("replace", "annotate")
#: An annotation :func:`resolve_relative_dates` wrote: a later rule matching the words before it leaves them be.
_ANNOTATION = re.compile(r" \((?:the (?:week|weekend|spring|summer|fall|autumn) of )?(?:[A-Z][a-z]+day )?(?:\d{1,2} )?"
                         r"(?:[A-Z][a-z]+ )?\d{4}\)")


@lru_cache(maxsize=100_000)
def resolve_relative_dates(text: str, ref: datetime | None, style: str = "replace") -> str:
    """Rewrite relative time expressions ("yesterday", "last week", "3 days ago", ...) as absolute dates, in the
    :data:`DATE_STYLES` ``style`` (cached: a packed turn is resolved again for every question that packs it)."""
    if ref is None:
        return text
    if style not in DATE_STYLES:
        raise ValueError(f"date style {style!r} is not one of {DATE_STYLES}")
    for pattern, resolve in _relative_rules(ref):
        def write(m: re.Match[str], resolve=resolve) -> str:
            if style == "annotate":
                if _ANNOTATION.match(m.string, m.end()):
                    return m.group(0)
                date = resolve(m)[1]
                weekday, _, rest = date.partition(" ")
                if weekday.lower() in WEEKDAYS and weekday.lower() in m.group(0).lower():
                    date = rest  # "last Friday (5 May 2023)"; an abbreviation keeps it: "last Fri (Friday ...)"
                return f"{m.group(0)} ({date})"
            return " ".join(resolve(m)).lstrip()
        text = pattern.sub(write, text)
    return text


def find_date(text: str) -> str | None:
    """The first absolute date expression in ``text``."""
    match = DATE_PATTERN.search(text)
    return match.group(0) if match else None


# ---------------------------------------------------------------- attribution


_ATTRIBUTION = re.compile(r"^(?P<speaker>[^:()]{1,80}?) said(?: \((?P<date>[^)]*)\))?: (?P<body>.*)$", re.S)


def attribute(speaker: str, moment: datetime | None, body: str) -> str:
    """``Caroline said (8 May 2023): <body>`` -- the text form of every dialogue-derived memory."""
    when = f" ({format_date(moment)})" if moment else ""
    return f"{speaker} said{when}: {body}"


@lru_cache(maxsize=100_000)
def split_attribution(text: str) -> tuple[str | None, str | None, str]:
    """Inverse of :func:`attribute`: ``(speaker, date, body)``; unattributed text gives ``(None, None, text)``."""
    match = _ATTRIBUTION.match(text)
    if not match:
        return None, None, text
    return match.group("speaker"), match.group("date"), match.group("body")


# ---------------------------------------------------------------- fact kinds

#: Phrases that withdraw an earlier statement (regular expressions over lower-cased text, matched as whole words):
#: explicit retractions, and plans cancelled, scrapped, dropped, called off, declared dead or given up.
RETRACTION_CUES = (
    r"forget (?:what i said about|about what i said|i said anything about|i said|i mentioned|about)", "scratch that",
    r"never ?mind about", r"(?:that's|that is) (?:not true anymore|not true any more|no longer true)",
    r"(?:disregard|ignore) what i said", r"i take (?:that|it) back", "i take back what i said",
    r"scrap(?:ped|ping|s)?", r"call(?:ed|ing|s)? off", r"call(?:ed|ing|s)? (?:it|that|the \w+(?: \w+)?) off",
    r"(?:is|are|was|got|been|get) (?:cancell?ed|scrapped)", r"cancel(?:l?ed|l?ing|s)?",
    r"drop(?:ped|ping|s)?(?! (?:off|by|in|out|me|him|her|them|us|you)\b)",
    r"(?:plan|idea|thing|deal|project|move|trip)s? (?:is|are|'s) (?:dead|off)(?: in the water)?",
    r"is dead in the water",
    r"chang(?:ed|ing|e) (?:my|our) minds? about", r"chang(?:ed|ing|e) (?:my|our) minds?",
    r"no longer", r"not (?:\w+ing|going to \w+) .{0,40}?(?:anymore|any more|after all)",
    r"(?:gave|give|giving) up on", r"decided against", r"(?:backed|backing|pulled|pulling) out of",
)
#: Retraction cues that only retract when no replacement follows ("I no longer work as a teacher; I'm a nurse
#: now" corrects, "I'm no longer moving to Denver" retracts).
_REPLACEABLE = re.compile(r"^(?:no longer|chang(?:ed|ing|e) (?:my|our) minds?|not )")
_REPLACEMENT = re.compile(r"(?<![a-z])(?:now|instead|switched|rather|going with|go with|prefer|but i|;)(?![a-z])")
_NEGATED = re.compile(r"(?<![a-z])(?:not|never|n't|won't|didn't|don't)(?: \w+){0,2} $")
CORRECTION_CUES = ("actually", "no longer", "not anymore", "any more", "changed my mind", "now prefer",
                   "switched to", "moved to", "i now", "these days i", "instead of", "not really into")
PROFILE_CUES = ("i am a ", "i am an ", "i'm a ", "i'm an ", "i am from", "i'm from", "my favorite", "my favourite",
                "i love ", "i prefer", "i live in", "i work as", "i work at", "i work in", "my name is", "i enjoy",
                "my hobby", "my hobbies", "i hate ", "i'm allergic", "i am allergic", "my job")
#: Stems of cue words; they do not count as topic overlap in supersession and retraction.
CUE_STEMS = frozenset(content_tokens(" ".join(CORRECTION_CUES) + " forget said mentioned scratch never nevermind "
                                     "disregard ignore take back scrap scrapped cancel cancelled canceled drop dropped "
                                     "call called dead mind minds plan idea anymore true decided gave give backed "
                                     "pulled water"))
_RETRACTION = re.compile(r"(?<![a-z])(?:" + "|".join(RETRACTION_CUES) + r")(?![a-z])")


def _cue_pattern(cues: tuple[str, ...]) -> re.Pattern[str]:
    """Matches wherever any cue occurs as whole words (not inside a longer word)."""
    return re.compile(r"(?<![a-z])(?:" + "|".join(re.escape(cue.strip()) for cue in cues) + r")(?![a-z])")


_KIND_CUES = (("correction", _cue_pattern(CORRECTION_CUES)), ("profile", _cue_pattern(PROFILE_CUES)))


def retraction_cue(sentence: str) -> re.Match[str] | None:
    """Where ``sentence`` withdraws an earlier statement: the first retraction cue that is not negated ("I didn't
    cancel"), not asked about ("should I cancel?") and, for "no longer" / "changed my mind", not followed by a
    replacement (that is a correction)."""
    lowered = " " + normalise(sentence).lower().strip() + " "
    if lowered.rstrip().endswith("?"):
        return None
    for match in _RETRACTION.finditer(lowered):
        if _NEGATED.search(lowered[:match.start()]):
            continue
        if _REPLACEABLE.match(match.group(0)) and _REPLACEMENT.search(lowered[match.end():]):
            continue
        return match
    return None


def classify_kind(sentence: str) -> str:
    """``retraction`` | ``correction`` | ``profile`` | ``fact`` by cue phrase (first match wins); a question
    corrects nothing ("Any more paintings coming up?")."""
    if retraction_cue(sentence) is not None:
        return "retraction"
    lowered = " " + normalise(sentence).lower() + " "
    asked = lowered.rstrip().endswith("?")
    for kind, pattern in _KIND_CUES:
        if pattern.search(lowered) and not (asked and kind == "correction"):
            return kind
    return "fact"


def retraction_topic(sentence: str) -> frozenset[str]:
    """Content stems of what a retraction retracts: the words after its cue ("we scrapped the trip"), else those
    within it ("not moving to Denver after all", "the trip is off"), else those before it ("the flight got
    cancelled", "the dog thing is dead"); empty for a bare "scratch that"."""
    match = retraction_cue(sentence)
    if match is None:
        return frozenset()
    lowered = " " + normalise(sentence).lower().strip() + " "
    for part in (lowered[match.end():], match.group(0), lowered[:match.start()]):
        topic = frozenset(content_tokens(part)) - CUE_STEMS
        if topic:
            return topic
    return frozenset()


def topic_overlap(topic: frozenset[str], body: frozenset[str]) -> int:
    """How many stems of a retraction's ``topic`` the ``body`` mentions, a stem also matching one of its word family
    (the same first six letters: "renovation" and "renovating")."""
    prefixes = {s[:6] for s in body if len(s) >= 6}
    return sum(1 for s in topic if s in body or (len(s) >= 6 and s[:6] in prefixes))
