"""Dotted paths into nested strategy dicts (``"retrieval.rerank.top_n"``)."""
from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from evolve.strategy.policy import FactSpan, Fusion, Graph

#: Sections a strategy may leave out: absent is their defaults (off), so a strategy written before one existed keeps
#: its hash; a move that reaches one of their paths writes the whole section first (:func:`with_value`).
OPTIONAL_SECTIONS: dict[str, type[BaseModel]] = {"features.fusion": Fusion, "retrieval.graph": Graph,
                                                  "assembly.fact_span": FactSpan}


def get_path(data: dict, path: str) -> Any:
    node: Any = data
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(path)
        node = node[key]
    return node


def set_path(data: dict, path: str, value: Any) -> dict:
    """A deep copy of ``data`` with ``path`` set to ``value``."""
    out = copy.deepcopy(data)
    keys = path.split(".")
    node = out
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return out


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf values by dotted path (lists are leaves)."""
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def _absent_section(data: dict, path: str) -> str | None:
    """The optional section (:data:`OPTIONAL_SECTIONS`) ``path`` lies in when ``data`` leaves it out."""
    for section in OPTIONAL_SECTIONS:
        if path.startswith(section + "."):
            try:
                get_path(data, section)
            except KeyError:
                return section
    return None


def value_at(data: dict, path: str) -> Any:
    """:func:`get_path`, reading a path of an optional section ``data`` leaves out as the section's default."""
    section = _absent_section(data, path)
    if section is None:
        return get_path(data, path)
    return get_path(OPTIONAL_SECTIONS[section]().model_dump(mode="json"), path[len(section) + 1:])


def with_value(data: dict, path: str, value: Any) -> dict:
    """:func:`set_path`, writing an optional section ``data`` leaves out whole (its defaults) before ``path``."""
    section = _absent_section(data, path)
    if section is not None:
        data = set_path(data, section, OPTIONAL_SECTIONS[section]().model_dump(mode="json"))
    return set_path(data, path, value)
