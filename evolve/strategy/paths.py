"""Dotted paths into nested strategy dicts (``"retrieval.rerank.top_n"``)."""
from __future__ import annotations

import copy
from typing import Any


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
