"""The strategy artifact: loading, validation, canonical form, content hash and dotted paths.

A strategy is a plain nested ``dict`` validated against the packaged schema (``evolve/data/strategy.schema.json``, also ``schemas/``)
plus the cross-field invariants below; :class:`evolve.strategy.policy.Policy` gives typed access.
"""
from __future__ import annotations

import copy
import hashlib
import math
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import yaml

from evolve.canonical import canonical_json
from evolve.errors import UserError
from evolve.files import MAX_TEXT_BYTES, read_bounded
from evolve.strategy.schema import load_schema
from evolve.strategy.invariants import invariant_violations
from evolve.strategy.paths import get_path, with_value
from evolve.strategy import strict_yaml
from evolve.strategy.strict_yaml import YAMLInputError, clip

#: Top-level fields that describe lineage, not behaviour: shown in diffs, never part of the policy hash.
LINEAGE = ("parent", "name", "version")
#: The lineage a candidate may differ in without that counting as a change (derivation sets ``parent``, ``name``
#: is a label). ``version`` is bumped by people only: a candidate that changes it is refused by the gates.
FREE_LINEAGE = ("parent", "name")
#: Sections whose values change what ingestion stores; they key the ingestion cache.
INGESTION_PATHS = ("extraction", "lifecycle.supersession", "lifecycle.forget_guard", "lifecycle.prune_threshold",
                   "features.session_rollups", "features.profile_layer", "features.turn_layer",
                   "features.turn_context")
#: Optional sections that change what ingestion stores: in the key only when present, so a strategy written before
#: they existed keeps its ingestion key (and its cached stores).
OPTIONAL_INGESTION_PATHS = ("features.fusion",)


class StrategyError(UserError, ValueError):
    """A strategy violates the schema or an invariant; says where and which rule."""

    def __init__(self, source: str, path: str, message: str, line: int | None = None, value: Any = None):
        self.source, self.path, self.line, self.value, self.rule = source, path, line, value, message
        where = f"{source}:{line}" if line else source
        shown = "" if value is None else f" (value: {clip(repr(value))})"
        super().__init__(f"{where}: {path or '<root>'}: {clip(message, 300)}{shown}")


# ---------------------------------------------------------------- canonical form


def strategy_hash(strategy: dict) -> str:
    """SHA-256 of the canonical JSON form: equal strategies always hash equal."""
    return hashlib.sha256(canonical_json(strategy).encode()).hexdigest()


def policy_hash(strategy: dict) -> str:
    """Hash of the behaviour-determining content only (:data:`LINEAGE` fields excluded)."""
    return strategy_hash({k: v for k, v in strategy.items() if k not in LINEAGE})


def dump_yaml(strategy: dict) -> str:
    """Canonical YAML (sorted keys, block style, literal multi-line strings)."""

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    return yaml.dump(strategy, Dumper=_Dumper, sort_keys=True, default_flow_style=False, allow_unicode=True, width=100)


def ingestion_view(strategy: dict) -> dict:
    """The part of a strategy that determines what ingestion stores."""
    view = {p: get_path(strategy, p) for p in INGESTION_PATHS}
    for path in OPTIONAL_INGESTION_PATHS:
        try:
            view[path] = get_path(strategy, path)
        except KeyError:
            pass
    return view


def ingestion_key(strategy: dict) -> str:
    return hashlib.sha256(canonical_json(ingestion_view(strategy)).encode()).hexdigest()


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
        text = read_bounded(path, MAX_TEXT_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StrategyError(str(path), "", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise StrategyError(str(path), "", f"cannot read: {exc.strerror}") from None
    return parse_strategy(text, str(path))


def derive(parent: dict, changes: dict[str, Any]) -> dict:
    """A child strategy: ``changes`` applied by dotted path, ``parent`` set to the parent's hash."""
    child = copy.deepcopy(parent)
    for path, value in changes.items():
        child = with_value(child, path, value)
    child["parent"] = strategy_hash(parent)
    return child
