"""Whether an answer abstains: a rule classifier over normalised text.

The text is lower-cased, curly apostrophes straightened and contractions expanded (``can't`` -> ``cannot``,
``doesn't`` -> ``does not``, ``I'm`` -> ``i am``), then split into clauses at sentence ends, ``;``, ``,`` and
``but``/``though``. An answer **abstains** when

* it is empty or a bare non-answer (``none``, ``unknown``, ``n/a``, ``?``, ``no answer``, ...), or
* some clause declines (:data:`DECLINE`: the speaker does not know, is not sure, cannot tell or answer; the memory,
  conversation or context does not mention, say or hold it; there is no record, information or mention; it was
  never mentioned, cannot be determined, is unclear) **and** no clause offers a guess (:data:`GUESS`: probably,
  maybe, I think, my guess is, ...): a hedge followed by a guess asserts something, so it is an answer.

Declines are first-person or about a source of memory ("I don't know", "the notes don't say", "you never told
me"), so answers that merely contain a negation ("He doesn't know how to drive", "She has no siblings", "None of
them came") are answers. ``tests/fixtures/abstention_labelled.jsonl`` holds the labelled phrasings the rules are
measured on (``experiments/bench/bench_abstention.py``).
"""
from __future__ import annotations

import re

_CONTRACTIONS = ((r"\bcan'?t\b", "cannot"), (r"\b(do|does|did|could|would|should|is|was|are|were|has|have|had)nt\b",
                  r"\1 not"), (r"\bim\b", "i am"), (r"\bwon't\b", "will not"), (r"\b(\w+)n't\b", r"\1 not"),
                 (r"\bi'm\b", "i am"), (r"\b(\w+)'re\b", r"\1 are"), (r"\b(\w+)'ve\b", r"\1 have"),
                 (r"\b(\w+)'ll\b", r"\1 will"), (r"\b(\w+)'d\b", r"\1 would"),
                 (r"\b(it|that|there|this|what|who|here)'s\b", r"\1 is"))
_CLAUSE = re.compile(r"[.;,!?]+\s*|\s+\b(?:but|though|although|however)\b\s*|\s+-+\s+")

#: Whole answers that decline (after normalisation, punctuation removed).
BARE = frozenset({"", "none", "unknown", "n/a", "na", "nothing", "no answer", "not sure", "unsure", "idk",
                  "no idea", "no clue", "unclear", "not known", "not available", "not applicable", "?", "-"})

_SOURCE = (r"(?:memory|memories|conversation|conversations|context|record|records|notes|chat|chats|history|"
           r"transcript|messages|information|info|data|text|log|logs|dialogue)")
_SAY = (r"(?:mention|mentions|mentioned|say|says|said|state|states|stated|specify|specifies|specified|include|"
        r"includes|included|contain|contains|record|records|recorded|cover|covers|covered|indicate|indicates|show|"
        r"shows|tell|tells|told|reveal|reveals|provide|provides|provided|give|gives|given|discuss|discussed)")
_DONE = (r"(?:mentioned|stated|specified|recorded|said|given|discussed|provided|indicated|noted|included|covered|"
         r"documented|told|shared|available|talked\s+about)")
_KNOW = (r"(?:know|tell|say|recall|remember|find|determine|see|answer|confirm|be sure|be certain|work (?:that|it|this)"
         r" out|infer|provide|help)")

#: Clause patterns that decline to answer.
DECLINE = tuple(re.compile(p) for p in (
    # the speaker does not know / cannot tell
    rf"\b(?:i|we)\s+(?:(?:do|did|would|could|can)\s+not|cannot|am\s+not\s+able\s+to|am\s+unable\s+to|have\s+no\s+way"
    rf"\s+(?:to|of)|really\s+(?:do\s+not|cannot|could\s+not))\s+(?:really\s+)?{_KNOW}",
    r"\b(?:i|we)\s+(?:have|had)\s+no\s+way\s+of\s+knowing\b",
    r"\b(?:i|we)\s+am\s+(?:not\s+(?:really\s+)?(?:sure|certain|able)|unsure|uncertain|unable|afraid\s+(?:i|that))\b",
    r"^(?:not|un)\s*(?:sure|certain)\b", r"^(?:i\s+am\s+)?uncertain$", r"^unsure\b",
    r"\b(?:i|we)\s+(?:do\s+not|did\s+not)\s+have\s+(?:that|this|the|any|enough|such|information|details|a\s+record"
    r"|records|notes|memory)\b",
    r"\b(?:i|we)\s+(?:have|had|lack)\s+(?:no|the)?\s*(?:information|record|records|memory|details|notes|idea|clue)\b",
    r"\b(?:i|we)\s+lack\b", r"\b(?:i|we)\s+(?:were|was)\s+not\s+told\b",
    r"\b(?:i|we)\s+(?:cannot|could\s+not|can\s+not)\s+(?:be\s+)?(?:sure|certain)\b",
    r"^(?:no|zero)\s+(?:idea|clue)\b", r"^(?:i\s+have\s+)?(?:no\s+idea|no\s+clue)\b",
    r"^(?:do|does|did)\s+not\s+know\b", r"^(?:who\s+knows|(?:hard|difficult|impossible)\s+to\s+(?:say|tell))\b",
    r"\b(?:hard|difficult|impossible)\s+to\s+(?:say|tell)\b",
    r"\b(?:cannot|can\s+not|could\s+not)\s+say\s+for\s+(?:sure|certain)\b", r"^(?:cannot|can\s+not)\s+say\b",
    r"\bno\s+way\s+to\s+(?:tell|know|say)\b",
    # a source of memory does not hold it
    rf"\b(?:the|my|our|your|this|that|previous|earlier|these|those)\s+(?:\w+\s+)?{_SOURCE}\s+(?:do|does|did|has|have)\s+"
    rf"not\s+{_SAY}",
    rf"\b{_SOURCE}\s+(?:has|have|had|holds?|contains?)\s+(?:no|nothing)\b",
    rf"\b(?:it|that|this|they|he|she)\s+(?:does|do|did)\s+not\s+{_SAY}$",
    rf"\b(?:she|he|they|you)\s+(?:never|did\s+not|have\s+not|has\s+not)\s+{_SAY}\s+(?:it|this|that|so|to\s+me)$",
    rf"^(?:she|he|they|you)\s+(?:never|did\s+not)\s+{_SAY}$",
    rf"\b(?:you|we)\s+(?:never|did\s+not|have\s+not|had\s+not)\s+(?:{_SAY}|talked\s+about|discussed)\b",
    rf"(?:^|\b(?:is|was|were|are|been|be|it|that|this)\s+)(?:not|never)\s+(?:been\s+)?(?:explicitly\s+)?(?:{_DONE}|"
    rf"in\s+(?:the|my|our)\s+{_SOURCE})\b",
    r"^(?:there\s+is|there\s+was|there\s+are)\s+(?:no|not\s+(?:enough|any)|nothing)\b",
    rf"^(?:no|not\s+enough|insufficient)\s+(?:{_SOURCE}|mention|details?)\b",
    r"\bnothing\s+(?:in|about|on|regarding)\s+(?:the|my|our|that|this|it|her|his|a|an)\b",
    rf"^nothing\s+(?:about\s+that\s+)?(?:was|is)\s+{_SAY}",
    r"\b(?:that|this|it|the\s+answer|the\s+date|that\s+detail|the\s+detail)\s+(?:is|was)\s+not\s+(?:in|something|"
    r"anywhere)\b",
    r"\b(?:is|was|are|were)\s+not\s+(?:something\s+)?(?:we|i)\s+(?:talked|discussed)\b",
    r"\b(?:information|details?|answer)\s+(?:is|are|was|were)\s+not\s+(?:available|provided|given|included|known)\b",
    r"^no\s+details?\s+(?:are|were)\s+(?:given|provided)\b",
    # it cannot be determined, is unclear, unanswerable
    r"\b(?:cannot|can\s+not|could\s+not)\s+(?:be\s+)?(?:determined|answered|inferred|known|found|told|confirmed|verified)\b",
    r"(?:^|\b(?:i|we)\s+(?:am\s+|are\s+)?)(?:cannot|can\s+not|could\s+not|unable\s+to)\s+(?:determine|infer|find|answer|tell|"
    r"confirm|verify|work\s+out)\b",
    r"\b(?:it|that|this)\s+(?:is|was)\s+(?:not\s+clear|unclear)$", r"\b(?:it|that|this)\s+(?:is|was)\s+(?:not\s+clear"
    r"|unclear)\s+(?:from|in|based)\b", r"\b(?:is|remains)\s+unknown\b", r"\bunclear\s+from\b",
    r"\bunanswerable\b", r"\bnot\s+(?:enough|sufficient)\s+(?:information|details|context)\b",
    r"\binsufficient\s+(?:information|details|context)\b",
    r"\bnot\s+something\s+(?:we|i)\s+(?:talked|discussed)\b",
    r"\b(?:never|not)\s+(?:came|come)\s+up\b",
))

#: Clause patterns that offer a guess (which makes a hedged reply an answer).
GUESS = tuple(re.compile(p) for p in (
    r"\b(?:probably|maybe|perhaps|possibly|likely|presumably)\b", r"\b(?:i|we)\s+(?:think|believe|suspect|guess)\b",
    r"\b(?:best|my)\s+guess\b", r"\b(?:it|that|she|he|they)\s+(?:might|could|may)\s+(?:be|have)\b",
    r"\bi\s+would\s+(?:say|go\s+with)\b",
))

_NOT_GUESS = re.compile(r"\b(?:would\s+rather\s+not|not)\s+guess\b")


#: Whole-text patterns that decline: what was asked is set apart from what the source holds.
DECLINE_TEXT = tuple(re.compile(p) for p in (
    rf"\b{_SOURCE}\s+(?:mentions?|says?|includes?|has|covers?)\b.*\bnot\s+(?:the|when|where|how|what|which|who|"
    rf"why|whether|if|her|his|their)\b",
))


def normalise(text: str) -> str:
    """Lower case, straight apostrophes, contractions expanded, whitespace collapsed."""
    text = str(text).lower().replace("\u2019", "'").replace("\u2018", "'")
    for pattern, repl in _CONTRACTIONS:
        text = re.sub(pattern, repl, text)
    return " ".join(text.split())


def clauses(text: str) -> list[str]:
    """The clauses of normalised ``text`` (see the module docstring), without surrounding punctuation."""
    return [c.strip(" '\"()") for c in _CLAUSE.split(text) if c.strip(" '\"()")]


def abstains(answer: str) -> bool:
    """Whether ``answer`` declines to answer (see the module docstring)."""
    text = normalise(answer)
    if re.sub(r"[.!'\"\s]+$", "", text).strip() in BARE or not re.search(r"[a-z0-9]", text):
        return True
    parts = clauses(text)
    declines = any(p.search(c) for c in parts for p in DECLINE) or any(p.search(text) for p in DECLINE_TEXT)
    guesses = any(p.search(c) and not _NOT_GUESS.search(c) for c in parts for p in GUESS)
    return declines and not guesses
