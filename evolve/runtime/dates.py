"""The day a fact is about: date and time expressions found by cheap patterns, resolved by ``dateparser`` against
the day the fact was said (``RELATIVE_BASE``), so "tomorrow", "this Saturday", "next week", "in two days",
"2025-09-03", "for March" and "6am tomorrow" all name a day. Only the spans the patterns find reach the parser:
it never guesses dates out of ordinary words, and a sentence without a date-like word costs one regex search.

Precision: an expression without a day of the month ("for March", "next month", "March 2026") resolves to the
month's last day, so an event "in March" has not passed before March has. A time of day sets the hour of the
day it goes with; alone ("at 6am") it names no day. Habitual statements ("every Saturday") name no event day.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta
from functools import lru_cache

import dateparser

from evolve.runtime.text import MONTHS, WEEKDAYS, normalise

_MONTH = r"(?:" + "|".join(MONTHS) + r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec)\.?"
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20)\d{2}"
_WEEKDAY = r"(?:" + "|".join(WEEKDAYS) + r")"
_COUNT = r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few)"
_UNIT = r"(?:days?|weeks?|months?|years?)"
_FULL_MONTH = r"(?:" + "|".join(MONTHS) + r")"
#: A month named alone needs a word that makes it a time ("for March"): "May", "June" and "April" are also names.
_LEAD = r"(?i:(?:in|for|by|until|till|since|during|through|early|mid|late|the end of|end of|this|next|last) )"

#: Expressions naming a day (or a month), most specific first; matched case-insensitively except month names.
_DAY_SPANS = re.compile(
    rf"(?<!\d)\d{{4}}-\d{{1,2}}-\d{{1,2}}(?!\d)|(?<!\d)\d{{4}}/\d{{1,2}}/\d{{1,2}}(?!\d)"
    rf"|(?<![\w-]){_DAY} (?:of )?{_MONTH},? {_YEAR}\b|\b{_MONTH} {_DAY},? {_YEAR}\b"
    rf"|(?<![\w-]){_DAY} (?:of )?{_MONTH}(?![a-z])|\b{_MONTH} {_DAY}\b(?!:)"
    rf"|\b{_MONTH},? {_YEAR}\b"
    rf"|(?i:\bthe day (?:before yesterday|after tomorrow)\b|\b(?:yesterday|today|tonight|tomorrow)\b"
    rf"|\b(?:(?:this|next|last|coming) )?{_WEEKDAY}\b(?!s)"
    rf"|\b(?:this|next|last|coming) (?:week|weekend|month|year)\b"
    rf"|\bin {_COUNT} {_UNIT}\b|\b{_COUNT} {_UNIT} (?:ago|from now)\b)"
    rf"|\b{_LEAD}{_FULL_MONTH}(?![a-z])",
)
#: Times of day; ``hh:mm`` is a time only where it does not continue a date or a score-like number.
_TIMES = re.compile(r"(?i:\b(\d{1,2})(?::(\d{2}))? ?([ap])\.?m\.?(?![a-z])|(?<![\d:.])(\d{1,2}):(\d{2})(?![\d:])"
                    r"|\b(noon|midday|midnight)\b)")
#: Spans that look like dates or times only for :func:`date_spans` (a number they hold is not a quantity).
_OTHER_SPANS = re.compile(r"(?i:\bthe \d{1,2}(?:st|nd|rd|th)\b|\b(?:in|since|by|from|of|until) (?:19|20)\d{2}s?\b"
                          r"|(?<![\d,.$])(?:19|20)\d{2}(?![\d,.%]))")
_HABITUAL = re.compile(r"(?i)\b(?:every|each|usually|always|normally|typically|weekly|daily|most)\b"
                       r"|\b(?:on )?(?:" + "|".join(WEEKDAYS) + r")s\b")
_FUTURE = re.compile(r"(?i)\b(?:will|going to|gonna|plan\w*|booked|scheduled|have to|need to|next|coming|upcoming|"
                     r"tomorrow|due|deadline|until|till|by|can't wait|looking forward)\b|'ll\b")
_PAST = re.compile(r"(?i)\b(?:was|were|did|went|had|got|ago|yesterday|last|finished|visited|came|saw|met|took)\b")
_LEAD_WORD = re.compile(r"^(?:in|for|by|until|till|since|during|through|early|mid|late|the end of|end of) ", re.I)


def _settings(ref: datetime, prefer: str, day: str) -> dict:
    return {"RELATIVE_BASE": ref, "PREFER_DATES_FROM": prefer, "PREFER_DAY_OF_MONTH": day, "TIMEZONE": "UTC",
            "RETURN_AS_TIMEZONE_AWARE": False, "DATE_ORDER": "DMY"}


@lru_cache(maxsize=50_000)
def _parse(span: str, ref: datetime, prefer: str) -> datetime | None:
    """The day ``span`` names, said on the day ``ref``; a month without a day resolves to its last day."""
    lowered = span.lower()
    if lowered.endswith("weekend"):  # "this weekend": the coming Saturday; "next weekend": the one after
        saturday = ref + timedelta(days=(5 - ref.weekday()) % 7)
        shift = {"next": 7, "last": -7}.get(lowered.split()[0], 0)
        return datetime.combine((saturday + timedelta(days=shift)).date(), datetime.min.time())
    text = re.sub(r"^(?:coming|this) (?=" + _WEEKDAY + ")", "", lowered)
    has_day = bool(re.search(r"\d{1,2}(?:st|nd|rd|th)?\b(?![:\d])", text)) and not re.fullmatch(
        _MONTH.lower() + r",? \d{4}", text)
    month_only = not has_day and not re.search(_WEEKDAY + r"|day|yesterday|today|tonight|tomorrow|week", text)
    day = "last" if month_only else "first"
    moment = dateparser.parse(text, languages=["en"], settings=_settings(ref, prefer, day))
    return None if moment is None else datetime.combine(moment.date(), datetime.min.time())  # the day, no instant


def _clock(match: re.Match[str]) -> tuple[int, int] | None:
    hour, minute, half, hh, mm, word = match.groups()
    if word:
        return (0, 0) if word.lower() == "midnight" else (12, 0)
    if half:
        h = int(hour) % 12 + (12 if half.lower() == "p" else 0)
        return (h, int(minute or 0)) if int(hour) <= 12 else None
    h, m = int(hh), int(mm)
    return (h, m) if h < 24 and m < 60 else None


def event_time(text: str, ref: datetime | None) -> datetime | None:
    """The day (and time, if one is given with it) that ``text`` said on ``ref`` is about: its first date
    expression, resolved against ``ref``. Without ``ref`` only expressions naming their year resolve."""
    text = normalise(text)
    spans = list(_DAY_SPANS.finditer(text))
    if not spans or _HABITUAL.search(text):
        return None
    prefer = "future" if _FUTURE.search(text) or not _PAST.search(text) else "past"
    for match in spans:
        span = _LEAD_WORD.sub("", match.group(0)).strip()
        if ref is None and not re.search(_YEAR, span):
            continue
        said = datetime.combine(ref.date(), datetime.min.time()) if ref else datetime(2000, 1, 1)
        moment = _parse(span, said, prefer)
        if moment is None:
            continue
        clock = next((c for c in map(_clock, _TIMES.finditer(text)) if c is not None), None)
        return moment.replace(hour=clock[0], minute=clock[1]) if clock else moment
    return None


def date_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` names a date, a month, a year or a time of day (their digits are not quantities)."""
    found = [m.span() for m in _DAY_SPANS.finditer(text)] + [m.span() for m in _TIMES.finditer(text)]
    return sorted(found + [m.span() for m in _OTHER_SPANS.finditer(text)])


def without_dates(text: str) -> str:
    """``text`` with every :func:`date_spans` span blanked out."""
    chars = list(text)
    for start, end in date_spans(text):
        chars[start:end] = " " * (end - start)
    return "".join(chars)
