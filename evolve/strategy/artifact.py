"""The strategy artifact: loading, validation, canonical form, content hash and dotted paths.

A strategy is a plain nested ``dict`` validated against the packaged schema (``evolve/data/strategy.schema.json``, also ``schemas/``)
plus the cross-field invariants below; :class:`evolve.strategy.policy.Policy` gives typed access.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import yaml

from evolve.data import BASELINE_PATH, SCHEMA_PATH
from evolve.strategy import strict_yaml
from evolve.strategy.strict_yaml import YAMLInputError, clip

#: Sections whose values change what ingestion stores; they key the ingestion cache.
INGESTION_PATHS = ("extraction", "lifecycle", "features.session_rollups", "features.profile_layer")


class StrategyError(ValueError):
    """A strategy violates the schema or an invariant; says where and which rule."""

    def __init__(self, source: str, path: str, message: str, line: int | None = None, value: Any = None):
        self.source, self.path, self.line, self.value, self.rule = source, path, line, value, message
        where = f"{source}:{line}" if line else source
        shown = "" if value is None else f" (value: {clip(repr(value))})"
        super().__init__(f"{where}: {path or '<root>'}: {clip(message, 300)}{shown}")


@dataclass(frozen=True)
class EvolvableDimension:
    """One schema path the optimizer may change."""

    path: str
    kind: str  # "integer" | "number" | "boolean" | "enum"
    group: str
    low: float | None = None
    high: float | None = None
    step: float | None = None
    max_step: float | None = None
    choices: tuple[str, ...] = ()


@lru_cache(maxsize=1)
def load_schema() -> dict:
    """The framework's strategy schema (read once, never changed at run time)."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def schema_hash() -> str:
    """SHA-256 of the schema file's canonical JSON."""
    return hashlib.sha256(canonical_json(load_schema()).encode()).hexdigest()


# ---------------------------------------------------------------- canonical form


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def strategy_hash(strategy: dict) -> str:
    """SHA-256 of the canonical JSON form: equal strategies always hash equal."""
    return hashlib.sha256(canonical_json(strategy).encode()).hexdigest()


def policy_hash(strategy: dict) -> str:
    """Hash of the behaviour-determining content only (``parent``, ``name`` and ``version`` excluded)."""
    return strategy_hash({k: v for k, v in strategy.items() if k not in ("parent", "name", "version")})


def dump_yaml(strategy: dict) -> str:
    """Canonical YAML (sorted keys, block style, literal multi-line strings)."""

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    return yaml.dump(strategy, Dumper=_Dumper, sort_keys=True, default_flow_style=False, allow_unicode=True, width=100)


# ---------------------------------------------------------------- dotted paths


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


def ingestion_view(strategy: dict) -> dict:
    """The part of a strategy that determines what ingestion stores."""
    return {p: get_path(strategy, p) for p in INGESTION_PATHS}


def ingestion_key(strategy: dict) -> str:
    return hashlib.sha256(canonical_json(ingestion_view(strategy)).encode()).hexdigest()


# ---------------------------------------------------------------- evolvable space


def evolvable_dimensions(schema: dict | None = None) -> dict[str, EvolvableDimension]:
    """Every path marked ``x-evolvable`` in the schema, with its range and step limits."""
    schema = schema or load_schema()
    dims: dict[str, EvolvableDimension] = {}

    def walk(node: dict, path: str) -> None:
        if "$ref" in node:
            return  # prompts evolve only through reviewed template versions
        spec = node.get("x-evolvable")
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


# ---------------------------------------------------------------- validation


def _line_index(text: str) -> dict[str, int]:
    """1-based line of every mapping key, by dotted path (empty if the text is refused)."""
    try:
        return strict_yaml.compose(text)[1]
    except YAMLInputError:
        return {}


def _non_finite(data: Any, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(data, float) and not math.isfinite(data):
        yield path, data
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from _non_finite(value, f"{path}.{key}" if path else str(key))


@lru_cache(maxsize=1)
def framework_markers() -> dict[str, tuple[str, ...]]:
    """The markers each prompt role needs, by dotted prompt path (``x-required-markers`` in the schema)."""
    found: dict[str, tuple[str, ...]] = {}
    for section, spec in load_schema()["properties"].items():
        for key, child in spec.get("properties", {}).items():
            if "x-required-markers" in child:
                found[f"{section}.{key}"] = tuple(child["x-required-markers"])
    return found


def _prompts(strategy: dict) -> Iterator[tuple[str, dict]]:
    for path in framework_markers():
        section, key = path.split(".")
        prompt = strategy.get(section, {}).get(key)
        if isinstance(prompt, dict):
            yield path, prompt


def invariant_violations(strategy: dict) -> list[tuple[str, str, Any]]:
    """Cross-field rules JSON Schema cannot express: ``(path, rule, value)`` for each broken one."""
    broken: list[tuple[str, str, Any]] = []
    ex, rt, asm = strategy["extraction"], strategy["retrieval"], strategy["assembly"]
    if ex["window_overlap"] >= ex["window_size"]:
        broken.append(("extraction.window_overlap", "must be < extraction.window_size", ex["window_overlap"]))
    if rt["rerank"]["top_n"] > rt["top_k"]:
        broken.append(("retrieval.rerank.top_n", "must be <= retrieval.top_k", rt["rerank"]["top_n"]))
    if rt["candidate_pool"] < rt["top_k"]:
        broken.append(("retrieval.candidate_pool", "must be >= retrieval.top_k", rt["candidate_pool"]))
    weight_sets = {"retrieval.weights": rt["weights"]}
    weight_sets.update({f"retrieval.intent_overrides.{k}.weights": v["weights"] for k, v in rt["intent_overrides"].items()})
    for path, weights in weight_sets.items():
        if sum(weights.values()) <= 0:
            broken.append((path, "channel weights must sum to more than 0", weights))
    reserved = asm["reserved"]["profile"] + asm["reserved"]["corrections"]
    if reserved >= 1:
        broken.append(("assembly.reserved", "profile + corrections must be < 1", reserved))
    for path, prompt in _prompts(strategy):
        for marker in framework_markers()[path]:
            if marker not in prompt["template"]:
                broken.append((f"{path}.template", f"must contain marker {marker!r}, which the framework requires "
                                                   f"for {path}", None))
        for marker in prompt["required_markers"]:
            if marker not in prompt["template"]:
                broken.append((f"{path}.template", f"must contain required marker {marker!r}", None))
    return broken


def validate_strategy(data: Any, source: str = "<strategy>", text: str | None = None) -> dict:
    """Check ``data`` against the schema and invariants; raise :class:`StrategyError` at the first problem."""
    lines = _line_index(text) if text else {}
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise StrategyError(source, "", f"a strategy must be a mapping, got {kind}")
    for path, value in _non_finite(data):
        raise StrategyError(source, path, "must be a finite number", lines.get(path), value)
    validator = jsonschema.Draft202012Validator(load_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = jsonschema.exceptions.best_match(errors)
        path = ".".join(str(p) for p in err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = err.schema.get("properties", {})
            unknown = sorted(k for k in err.instance if k not in allowed)
            if unknown:
                path = f"{path}.{unknown[0]}" if path else unknown[0]
                raise StrategyError(source, path, "unknown field", lines.get(path))
        value = err.instance if not isinstance(err.instance, (dict, list)) else None
        raise StrategyError(source, path, f"{err.validator}: {err.message}", lines.get(path), value)
    broken = invariant_violations(data)
    if broken:
        path, rule, value = broken[0]
        raise StrategyError(source, path, rule, lines.get(path), value)
    return data


def parse_strategy(text: str, source: str = "<strategy>") -> dict:
    """Parse YAML text strictly (no duplicate keys, bounded depth and aliases) and validate it."""
    try:
        data, _ = strict_yaml.load(text)
    except YAMLInputError as exc:
        raise StrategyError(source, exc.path, exc.problem, exc.line) from None
    return validate_strategy(data, source, text)


def load_strategy(path: str | Path) -> dict:
    """Read and validate a strategy file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise StrategyError(str(path), "", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise StrategyError(str(path), "", f"cannot read: {exc.strerror}") from None
    return parse_strategy(text, str(path))


def derive(parent: dict, changes: dict[str, Any]) -> dict:
    """A child strategy: ``changes`` applied by dotted path, ``parent`` set to the parent's hash."""
    child = copy.deepcopy(parent)
    for path, value in changes.items():
        child = set_path(child, path, value)
    child["parent"] = strategy_hash(parent)
    return child
