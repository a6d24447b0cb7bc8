"""The strategy schema (the framework's, packaged; or an external system's knob schema, :func:`activate`): its hash,
the evolvable dimensions it marks with ``x-evolvable`` (group, range, step limits), and the markers each prompt role
needs (``x-required-markers``)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from evolve.data import BUNDLES_PATH, SCHEMA_PATH
from evolve.canonical import canonical_json


@dataclass(frozen=True)
class EvolvableDimension:
    """One schema path the optimizer may change."""

    path: str
    kind: str  # "integer" | "number" | "boolean" | "enum" | "prompt"
    group: str
    low: float | None = None
    high: float | None = None
    step: float | None = None
    max_step: float | None = None
    choices: tuple[str, ...] = ()
    role: str | None = None  # a prompt's runtime role: it evolves only while an LLM serves that role


#: An external memory system's knob schema standing in for the framework's (:func:`activate`), with its bundle table.
_ACTIVE: tuple[dict, Path | None] | None = None


@lru_cache(maxsize=1)
def framework_schema() -> dict:
    """The framework's strategy schema (read once, never changed at run time)."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def load_schema() -> dict:
    """The strategy schema of this process: an activated knob schema, else the framework's."""
    return _ACTIVE[0] if _ACTIVE is not None else framework_schema()


def activate(schema: dict | None, bundles: Path | None = None) -> None:
    """Make ``schema`` (an external system's knob schema, with the bundle table its planner reads; none when only
    stored strategies are read) the strategy schema of this process, so that validation, hashing, diffs, moves and the
    planner work on its knobs; ``None`` restores the framework's schema. A run config sets it before anything reads a
    strategy, and so do commands reading stores a run on an external system made (:mod:`evolve.loop.setup`)."""
    global _ACTIVE
    _ACTIVE = None if schema is None else (schema, None if bundles is None else Path(bundles))


def is_framework() -> bool:
    """Whether strategies follow the framework's schema (its cross-field invariants and prompts then apply)."""
    return _ACTIVE is None


def bundles_path() -> Path:
    """The bundle table of the active schema."""
    if _ACTIVE is None:
        return BUNDLES_PATH
    if _ACTIVE[1] is None:
        raise ValueError("the active knob schema was read from stores, without the bundle table a run config names")
    return _ACTIVE[1]


def schema_hash() -> str:
    """SHA-256 of the active schema's canonical JSON."""
    return hashlib.sha256(canonical_json(load_schema()).encode()).hexdigest()


def evolvable_dimensions(schema: dict | None = None) -> dict[str, EvolvableDimension]:
    """Every path marked ``x-evolvable`` in the schema, with its range and step limits."""
    schema = schema or load_schema()
    dims: dict[str, EvolvableDimension] = {}

    def walk(node: dict, path: str) -> None:
        spec = node.get("x-evolvable")
        if "$ref" in node:  # a prompt template
            if spec is not None:
                dims[path] = EvolvableDimension(path, "prompt", spec["group"], role=spec["role"])
            return
        if spec is not None:
            if "enum" in node:
                dims[path] = EvolvableDimension(path, "enum", spec["group"], choices=tuple(node["enum"]))
            elif node["type"] == "boolean":
                dims[path] = EvolvableDimension(path, "boolean", spec["group"])
            else:
                dims[path] = EvolvableDimension(
                    path, node["type"], spec["group"], node["minimum"], node["maximum"], spec["step"], spec["max_step"]
                )
        for key, child in node.get("properties", {}).items():
            walk(child, f"{path}.{key}" if path else key)

    walk(schema, "")
    return dims


def live_dimensions(llm_roles: set[str], dims: dict[str, EvolvableDimension] | None = None
                    ) -> dict[str, EvolvableDimension]:
    """The dimensions a run can usefully move: every one but the prompts of roles no LLM serves (the embedded
    extractor, expander and answerer read no prompt, so editing one would change nothing)."""
    dims = dims if dims is not None else evolvable_dimensions()
    return {path: dim for path, dim in dims.items() if dim.kind != "prompt" or dim.role in llm_roles}


def restrict_dimensions(dims: dict[str, EvolvableDimension], patterns: Sequence[str] | None
                        ) -> dict[str, EvolvableDimension]:
    """The dimensions whose path matches one of the ``fnmatch`` ``patterns`` (``None``: all of them). Raises
    ``ValueError`` naming each pattern that matches none of ``dims``."""
    if patterns is None:
        return dims
    unmatched = [p for p in patterns if not any(fnmatchcase(path, p) for path in dims)]
    if unmatched:
        raise ValueError(f"{', '.join(map(repr, unmatched))}: matches no path the run can move (they are listed "
                         f"in docs/reference/strategy.md, e.g. {', '.join(sorted(dims)[:3])})")
    return {path: dim for path, dim in dims.items() if any(fnmatchcase(path, p) for p in patterns)}


@lru_cache(maxsize=1)
def framework_markers() -> dict[str, tuple[str, ...]]:
    """The markers each prompt role needs, by dotted prompt path (``x-required-markers`` in the schema)."""
    found: dict[str, tuple[str, ...]] = {}
    for section, spec in framework_schema()["properties"].items():
        for key, child in spec.get("properties", {}).items():
            if "x-required-markers" in child:
                found[f"{section}.{key}"] = tuple(child["x-required-markers"])
    return found
