"""Prompt files and reply parsing shared by every LLM role: fill a versioned prompt, pull lines, citations or JSON
out of a reply, and re-ask with the validation errors until a structured reply parses."""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Collection, TypeVar

from pydantic import ValidationError

from evolve.data import PROMPTS_DIR
from evolve.llm.client import LLMClient

REPAIR_PROMPT = "repair.v1"
T = TypeVar("T")
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")
_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def load_prompt(name: str) -> str:
    """A framework prompt by versioned name, e.g. ``judge.v2``."""
    path = PROMPTS_DIR / f"{name}.txt"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no framework prompt named {name!r}") from None


def fill(template: str, **values: str) -> str:
    """Replace each ``{name}`` placeholder in one pass (other braces are left alone)."""
    missing = [k for k in values if "{" + k + "}" not in template]
    if missing:
        raise ValueError(f"prompt template lacks placeholder(s) {['{' + k + '}' for k in missing]}")
    pattern = re.compile(r"\{(" + "|".join(map(re.escape, values)) + r")\}")
    return pattern.sub(lambda m: values[m.group(1)], template)


def after_marker(reply: str, marker: str) -> str:
    """The text after the last ``marker`` in ``reply`` (case-insensitive), or the whole reply."""
    at = reply.upper().rfind(marker.upper())
    return reply[at + len(marker):] if at >= 0 else reply


def reply_lines(text: str) -> list[str]:
    """Non-empty lines without bullets or numbering."""
    return [s for s in (_BULLET.sub("", line).strip() for line in text.splitlines()) if s]


def strip_citations(text: str, ids: Collection[str]) -> tuple[str, list[str]]:
    """``text`` without bracketed groups naming known ``ids`` (whitespace collapsed), and the ids cited."""
    cited: list[str] = []

    def citation(m: re.Match) -> str:
        valid = [tok for tok in re.split(r"[,;\s]+", m.group(1)) if tok in ids]
        cited.extend(tok for tok in dict.fromkeys(valid) if tok not in cited)
        return "" if valid else m.group(0)

    return " ".join(_BRACKET.sub(citation, text).split()), cited


def json_payload(reply: str) -> Any:
    """The first JSON value in ``reply`` (code fences and surrounding prose are ignored)."""
    text = re.sub(r"```(?:json)?", "", reply).strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
    for start in sorted(starts):
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0]
        except json.JSONDecodeError:
            continue
    raise ValueError("reply contains no valid JSON")


def pretty(data: Any) -> str:
    """``data`` as JSON on one line for a prompt: keys sorted, no indentation (which a model reads as tokens too)."""
    return json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)


def user_message(prompt: str, system: str | None = None) -> list[dict]:
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": prompt}]


def structured(client: LLMClient, schema: dict) -> dict[str, Any]:
    """Request parameters asking for replies that follow the JSON ``schema``, as the role's ``structured`` setting
    says: ``{"response_format": {"type": "json_object", "schema": ...}}`` (llama.cpp's constrained decoding), or none
    when it is ``off``. They are part of the request, hence of the cache key."""
    if client.cfg.structured == "json_object":
        return {"response_format": {"type": "json_object", "schema": schema}}
    return {}


def ask_json(client: LLMClient, prompt: str, parse: Callable[[str], tuple[T, list[str]]],
              max_attempts: int, schema: dict) -> tuple[T, list[str], int]:
    """Ask, and re-ask with the validation errors until ``parse`` reports none or attempts run out. ``schema``
    describes a valid reply (sent when the role decodes ``structured``; ``parse`` validates in any case).

    Returns the last parsed value, its remaining errors and the number of attempts made.
    """
    messages, attempt, params = user_message(prompt), 1, structured(client, schema)
    while True:
        reply = client.complete(messages, **params)
        value, errors = parse(reply)
        if not errors or attempt >= max_attempts:
            return value, errors, attempt
        repair = fill(load_prompt(REPAIR_PROMPT), errors="\n".join(f"- {e}" for e in errors))
        messages = [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": repair}]
        attempt += 1


def validation_errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"] else e["msg"] for e in exc.errors())
