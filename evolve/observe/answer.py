"""Answer-bearing context: whether the packed context carries the gold answer, and through the gold evidence.

The check needs nothing of this runtime but each packed item's text and source turn ids, so any memory system's
context can be measured the same way.

A *content word* (:func:`content_words`) is a lower-case alphanumeric token that is not in :data:`STOPWORDS`, after

* possessive ``'s`` is stripped and thousands separators are dropped (``1,000`` -> ``1000``);
* number words become digits (``one``..``twenty``, ``thirty``..``ninety``, ``hundred``; ``twenty-five`` -> ``25``);
* ordinals become their number (``7th`` and ``seventh`` -> ``7``);
* month names and abbreviations become the full month name (``Sept`` -> ``september``; ``may`` is always a month).

Per question, with ``A`` the content words of the gold answer:

* **answer in evidence** — ``A`` is contained in the union of the content words of the packed items whose source
  turn ids intersect the gold evidence turn ids;
* **answer anywhere** — ``A`` is contained in the content words of the whole packed text.

A question whose gold answer has no content word, or that has no gold evidence, is left out (both ``None``).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable, Iterable

from evolve.observe.ladder import derives_from

STOPWORDS = frozenset("""
a an the and or but if of to in on at by for with from as is are was were be been being am do does did have has had
i you he she it we they me him her us them my your his its our their this that these those what which who whom whose
when where why how not no yes so too very can could will would shall should might must just about into over after
before than then there here also all any some such only own same other each both few more most s t don doesn didn
isn wasn aren weren hasn haven hadn won wouldn couldn shouldn let get got really like oh yeah hey
""".split())

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_UNITS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_TEENS = ("ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
          "nineteen")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_ORDINAL_UNITS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth")
_ORDINAL_TEENS = ("tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth",
                  "seventeenth", "eighteenth", "nineteenth")
_ORDINAL_TENS = ("twentieth", "thirtieth", "fortieth", "fiftieth", "sixtieth", "seventieth", "eightieth",
                 "ninetieth")

#: Canonical form of a token: month names and abbreviations, number and ordinal words.
CANONICAL: dict[str, str] = {
    **{m: m for m in _MONTHS}, **{m[:3]: m for m in _MONTHS}, "sept": "september",
    **{w: str(n) for n, w in enumerate(_UNITS, 1)}, **{w: str(n) for n, w in enumerate(_ORDINAL_UNITS, 1)},
    **{w: str(n) for n, w in enumerate(_TEENS, 10)}, **{w: str(n) for n, w in enumerate(_ORDINAL_TEENS, 10)},
    **{w: str(n) for n, w in zip(range(20, 100, 10), _TENS)},
    **{w: str(n) for n, w in zip(range(20, 100, 10), _ORDINAL_TENS)},
    "hundred": "100",
}
_TENS_WORDS = frozenset(_TENS + _ORDINAL_TENS)
_UNIT_WORDS = frozenset(_UNITS + _ORDINAL_UNITS)

_POSSESSIVE = re.compile(r"['\u2019]s\b")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)")
_TOKEN = re.compile(r"[a-z0-9]+")


@lru_cache(maxsize=200_000)
def content_words(text: str) -> frozenset[str]:
    """The content words of ``text`` (see the module docstring)."""
    raw = _TOKEN.findall(_THOUSANDS.sub("", _POSSESSIVE.sub("", text.lower())))
    out: list[str] = []
    for i, token in enumerate(raw):
        if (match := _ORDINAL.fullmatch(token)) is not None:
            token = match.group(1)
        if token in _UNIT_WORDS and i and raw[i - 1] in _TENS_WORDS:  # twenty-five -> 25
            out[-1] = str(int(out[-1]) + int(CANONICAL[token]))
            continue
        token = CANONICAL.get(token, token)
        if token not in STOPWORDS:
            out.append(token)
    return frozenset(out)


#: :func:`content_words` without its cache: for texts read once (a streamed trace file), which the cache would keep.
content_words_once: Callable[[str], frozenset[str]] = content_words.__wrapped__


def _union(texts: Iterable[str], words: Callable[[str], frozenset[str]] = content_words) -> set[str]:
    out: set[str] = set()
    for text in texts:
        out |= words(text)
    return out


def carried(answer: str, texts: Iterable[str], words: Callable[[str], frozenset[str]] = content_words) -> bool:
    """Whether every content word of ``answer`` is among the content words of ``texts`` taken together (``words``:
    :func:`content_words`, or :data:`content_words_once`)."""
    return content_words(answer) <= _union(texts, words)


def answer_check(answer: str, evidence: Iterable[str], packed: Iterable[dict],
                 words: Callable[[str], frozenset[str]] = content_words) -> tuple[bool | None, bool | None]:
    """``(answer in evidence, answer anywhere)`` of one question: ``answer`` is the gold answer, ``evidence`` its
    gold evidence turn ids, ``packed`` the packed items (``{"text", "source_ids"}``), ``words`` how their texts'
    content words are found. ``(None, None)`` when the question is left out (no content word in the answer, or no
    gold evidence)."""
    gold, packed = set(evidence), list(packed)
    if not gold or not content_words(answer):
        return None, None
    from_evidence = [p.get("text", "") for p in packed if derives_from(p, gold)]
    return carried(answer, from_evidence, words), carried(answer, (p.get("text", "") for p in packed), words)
