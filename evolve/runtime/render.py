"""Context line formats (bullets, dialogue, json) and their inverse for answerers that need the plain body."""
from __future__ import annotations

import json
import re
from datetime import datetime

from evolve.runtime.text import format_date, split_attribution

_DIALOGUE = re.compile(r"^(?:\[[^\]]*\] )?(?:(?P<speaker>[^:]{1,80}): )?(?P<body>.*)$", re.S)


def render(item_id: str, layer: str, text: str, timestamp: datetime | None, fmt: str) -> str:
    """One context line for a memory or raw turn whose ``text`` is in attributed form."""
    speaker, date, body = split_attribution(text)
    date = date or (format_date(timestamp) if timestamp else None)
    if fmt == "bullets":
        return f"- {text}"
    if fmt == "dialogue":
        stamp = f"[{date}] " if date else ""
        return f"{stamp}{speaker}: {body}" if speaker else f"{stamp}{text}"
    if fmt == "json":
        return json.dumps({"id": item_id, "layer": layer, "date": date, "speaker": speaker, "text": body},
                          ensure_ascii=False)
    raise ValueError(f"assembly.format: unknown format {fmt!r}")


def plain_parts(line: str) -> tuple[str | None, str]:
    """``(speaker, statement)`` inside a rendered context line, without bullet, date or attribution."""
    if line.startswith("{"):
        try:
            data = json.loads(line)
            return data.get("speaker"), str(data.get("text") or "")
        except (json.JSONDecodeError, AttributeError):
            return None, line
    if line.startswith("- "):
        speaker, _, body = split_attribution(line[2:])
        return speaker, body
    match = _DIALOGUE.match(line)
    return (match.group("speaker"), match.group("body")) if match else (None, line)
