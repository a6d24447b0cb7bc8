"""Prompt edits: the bounded change a move makes to a prompt template.

A prompt evolves by one instruction line at a time (move ``<section>.prompt::edit:<instruction>``): the line goes in
before the template's last non-empty line (where every shipped template asks for its output), and the version rises
by one. An instruction is one line of printable text (:mod:`evolve.safe_text`): no braces (it cannot add or remove a
placeholder), no shouted ``WORD:`` marker (it cannot open a section the reply parsers read), nothing of the move
syntax. A move may also set a
whole prompt object (``set:<JSON>``), which is how a recorded prompt change is replayed exactly.
"""
from __future__ import annotations

import json
import re
from typing import Any

from evolve.safe_text import check_line, check_template
from evolve.strategy.schema import load_schema

MIN_CHARS, MAX_CHARS = 8, 200
_MARKER = re.compile(r"\b[A-Z]{3,}:")
_SYNTAX = ("::", "&", "{", "}")


def check_instruction(text: Any) -> str:
    """``text`` as an instruction line (stripped); ValueError saying what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"an instruction must be a string, got {type(text).__name__}")
    line = check_line(text.strip(), "an instruction")
    if not MIN_CHARS <= len(line) <= MAX_CHARS:
        raise ValueError(f"an instruction has {MIN_CHARS} to {MAX_CHARS} characters, got {len(line)}")
    bad = [s for s in _SYNTAX if s in line]
    if bad:
        raise ValueError(f"an instruction may not contain {' or '.join(repr(s) for s in bad)}")
    marker = _MARKER.search(line)
    if marker:
        raise ValueError(f"an instruction may not contain a section marker ({marker.group(0)!r})")
    return line


def check_prompt(value: Any) -> dict:
    """A whole prompt object from its JSON text (or the object itself); ValueError if it is not one."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"a prompt set value must be a JSON object: {exc.msg}") from None
    keys = load_schema()["$defs"]["prompt"]["required"]  # the schema's prompt object: these keys, no others
    if not isinstance(value, dict) or sorted(value) != sorted(keys):
        raise ValueError(f"a prompt set value must be an object with exactly {', '.join(keys)}")
    if isinstance(value["template"], str):
        check_template(value["template"], "a prompt template")
    return value


def label(prompt: dict) -> str:
    """A prompt named by its id and version, ``<id>@v<version>``."""
    return f"{prompt['id']}@v{prompt['version']}"


def add_instruction(prompt: dict, instruction: str) -> dict | None:
    """``prompt`` with ``instruction`` inserted before its last non-empty line and its version bumped; ``None`` when
    the template already holds that line."""
    line = check_instruction(instruction)
    lines = prompt["template"].splitlines(keepends=True)
    if any(existing.strip() == line for existing in lines):
        return None
    last = max((i for i, existing in enumerate(lines) if existing.strip()), default=len(lines))
    template = "".join(lines[:last] + [line + "\n"] + lines[last:])
    return {**prompt, "template": template, "version": prompt["version"] + 1}


def added_instruction(old: dict, new: dict) -> str | None:
    """The one legal instruction line ``new`` adds to ``old``'s template (all else equal but the version), if so."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return None
    a, b = old.get("template", "").splitlines(), new.get("template", "").splitlines()
    rest = {k: v for k, v in new.items() if k not in ("template", "version")}
    if len(b) != len(a) + 1 or rest != {k: v for k, v in old.items() if k not in ("template", "version")}:
        return None
    for i, line in enumerate(b):
        if b[:i] + b[i + 1:] == a:
            try:
                return check_instruction(line)
            except ValueError:
                return None
    return None
