"""One rule for text that enters a strategy, a journal or a terminal.

*Printable* text holds no control character (C0, DEL, C1 such as NEL U+0085), no Unicode line or paragraph
separator (U+2028, U+2029) and no lone surrogate (not encodable as UTF-8). A line of text must be printable; a
template may also hold ``\\n`` and ``\\t``. YAML and ``str.splitlines`` treat NEL, U+2028/U+2029, VT and FF as
line breaks, so letting one through would change the line count of a prompt or break a strategy's YAML round trip.

Operator text (a promotion's approver and reason) is bounded by :data:`MAX_OPERATOR_CHARS` and shown through
:func:`escaped`, so a newline or an ANSI escape sequence in it cannot forge lines in a terminal.
"""
from __future__ import annotations

import unicodedata

#: Longest approver or reason (characters) a promotion accepts: a name or a sentence, not a document.
MAX_OPERATOR_CHARS = 500
#: How much of a long value an error message quotes.
QUOTE_CHARS = 80
_REFUSED_CATEGORIES = {"Cc": "a control character", "Zl": "a line separator", "Zp": "a paragraph separator",
                       "Cs": "a lone surrogate"}


def refused_char(text: str, allow: str = "") -> str | None:
    """Why ``text`` is not printable (the first refused character, its code point and position), or ``None``;
    characters in ``allow`` are accepted."""
    for i, ch in enumerate(text):
        kind = _REFUSED_CATEGORIES.get(unicodedata.category(ch))
        if kind is not None and ch not in allow:
            return f"{kind} (U+{ord(ch):04X}) at position {i}"
    return None


def surrogate_at(text: str) -> int | None:
    """The position of the first lone surrogate in ``text`` (text that cannot be written as UTF-8), or ``None``."""
    return next((i for i, ch in enumerate(text) if "\ud800" <= ch <= "\udfff"), None)


def check_line(text: str, what: str) -> str:
    """``text`` unchanged if it is one printable line; ValueError naming ``what`` and the character otherwise."""
    problem = refused_char(text)
    if problem is not None:
        raise ValueError(f"{what} must be one line of printable text; it holds {problem}")
    return text


def check_template(text: str, what: str) -> str:
    """``text`` unchanged if it is printable apart from newlines and tabs; ValueError otherwise."""
    problem = refused_char(text, allow="\n\t")
    if problem is not None:
        raise ValueError(f"{what} may hold only printable text, newlines and tabs; it holds {problem}")
    return text


def escaped(text: str) -> str:
    """``text`` for a terminal: every character :func:`refused_char` refuses (newlines, ESC, ...) shown as a Python
    escape (``\\n``, ``\\x1b``), backslashes doubled; printable text unchanged."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif unicodedata.category(ch) in _REFUSED_CATEGORIES:
            out.append(repr(ch)[1:-1])
        else:
            out.append(ch)
    return "".join(out)


def quoted(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` as an error message quotes it: escaped, ``repr``-style, and cut to ``limit`` characters with the
    full length said."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def operator_text(text: str, *, blank: bool = False) -> str:
    """``text`` as an approver or reason: not blank (unless ``blank``), at most :data:`MAX_OPERATOR_CHARS` characters
    and encodable (no lone surrogate, as undecodable bytes in an argument become); ValueError saying which not."""
    if not blank and not text.strip():
        raise ValueError("is empty; give a name")
    if len(text) > MAX_OPERATOR_CHARS:
        raise ValueError(f"has {len(text)} characters; at most {MAX_OPERATOR_CHARS}")
    bad = surrogate_at(text)
    if bad is not None:
        raise ValueError(f"is not valid text (an undecodable byte or lone surrogate at position {bad})")
    return text
