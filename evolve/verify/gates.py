"""Fail-fast gates a candidate strategy must pass before anything is spent evaluating it.

Gates run in order and stop at the first refusal: ``schema`` -> ``novelty`` -> ``ranges`` ->
``prompt_integrity`` -> ``replay_stability``. This module also owns the diff vocabulary shared
with the planner, critic and engine: :func:`strategy_diff` and :func:`change_keys`
(``"<dotted.path>::<direction>"``, direction one of increase, decrease, enable, disable, set:<value>).

Intent-override weights (``retrieval.intent_overrides.<intent>.weights.<channel>``) are evolvable
through the matching ``retrieval.weights.<channel>`` dimension; where an override is absent its
effective value is the base weight, so adding or removing an override is measured from that.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from evolve.strategy.artifact import (
    EvolvableDimension,
    StrategyError,
    evolvable_dimensions,
    flatten,
    get_path,
    policy_hash,
    validate_strategy,
)

PROMPT_SECTIONS = ("extraction", "expansion", "answering")
_UNTRACKED = ("parent", "name")  # provenance, not policy
_OVERRIDE = re.compile(r"^retrieval\.intent_overrides\.[a-z_]+\.weights\.([a-z0-9_]+)$")
_MISSING: Any = object()
_STEP_SLACK = 1e-9


# ---------------------------------------------------------------- diff vocabulary


def prompt_of(path: str) -> str | None:
    """``"<section>.prompt"`` when ``path`` lies inside a prompt, else ``None``."""
    for section in PROMPT_SECTIONS:
        root = f"{section}.prompt"
        if path == root or path.startswith(root + "."):
            return root
    return None


def dimension_for(path: str, dims: dict[str, EvolvableDimension] | None = None) -> EvolvableDimension | None:
    """The evolvable dimension governing ``path`` (intent-override weights map to the base weight)."""
    dims = dims if dims is not None else evolvable_dimensions()
    if path in dims:
        return dims[path]
    match = _OVERRIDE.match(path)
    return dims.get(f"retrieval.weights.{match.group(1)}") if match else None


def _leaves(strategy: dict) -> dict[str, Any]:
    return {
        path: value
        for path, value in flatten(strategy).items()
        if path.split(".")[0] not in _UNTRACKED and value != {}
    }


def _effective(strategy: dict, leaves: dict[str, Any], path: str) -> Any:
    if path in leaves:
        return leaves[path]
    match = _OVERRIDE.match(path)
    if match:
        try:
            return get_path(strategy, f"retrieval.weights.{match.group(1)}")
        except KeyError:
            return _MISSING
    return _MISSING


def _changes(parent: dict, candidate: dict) -> dict[str, tuple[Any, Any]]:
    old_leaves, new_leaves = _leaves(parent), _leaves(candidate)
    out: dict[str, tuple[Any, Any]] = {}
    for path in sorted(set(old_leaves) | set(new_leaves)):
        old, new = _effective(parent, old_leaves, path), _effective(candidate, new_leaves, path)
        if old != new or isinstance(old, bool) != isinstance(new, bool):
            out[path] = (old, new)
    return out


def strategy_diff(parent: dict, candidate: dict) -> dict[str, list[Any]]:
    """``{path: [old, new]}`` of every effective leaf change (``None`` where a side lacks the path)."""
    return {
        path: [None if old is _MISSING else old, None if new is _MISSING else new]
        for path, (old, new) in _changes(parent, candidate).items()
    }


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _show(value: Any) -> str:
    return "<absent>" if value is _MISSING else repr(value)


def direction(old: Any, new: Any) -> str:
    """increase / decrease for numbers, enable / disable for booleans, otherwise ``set:<new>``."""
    if isinstance(old, bool) and isinstance(new, bool):
        return "enable" if new else "disable"
    if _is_number(old) and _is_number(new) and old != new:
        return "increase" if new > old else "decrease"
    if new is _MISSING:
        return "set:unset"
    return f"set:{new}" if isinstance(new, str) else f"set:{json.dumps(new, sort_keys=True)}"


def change_keys(parent: dict, candidate: dict) -> list[str]:
    """Sorted ``"path::direction"`` keys of a diff; a changed prompt is one key ``set:<id>@v<version>``."""
    keys: set[str] = set()
    for path, (old, new) in _changes(parent, candidate).items():
        prompt = prompt_of(path)
        if prompt is None:
            keys.add(f"{path}::{direction(old, new)}")
            continue
        try:
            spec = get_path(candidate, prompt)
            keys.add(f"{prompt}::set:{spec['id']}@v{spec['version']}")
        except (KeyError, TypeError):
            keys.add(f"{prompt}::set:unset")
    return sorted(keys)


# ---------------------------------------------------------------- gates


@dataclass(frozen=True)
class GateResult:
    name: str
    passed: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GateContext:
    """What the gates know beyond the two strategies."""

    evaluated: set[str] = field(default_factory=set)  # policy hashes already evaluated
    dimension_effects: dict[str, dict] = field(default_factory=dict)  # keyed by change key
    symptom: str | None = None  # "<root_cause>/<category>" the candidate targets
    max_reverts: int = 2


@dataclass(frozen=True)
class GateTrail:
    results: list[GateResult]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def decided_by(self) -> str | None:
        """Name of the refusing gate, ``None`` when every gate passed."""
        return next((r.name for r in self.results if not r.passed), None)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "decided_by": self.decided_by, "results": [r.to_dict() for r in self.results]}


def _schema(candidate: dict, parent: dict, ctx: GateContext) -> tuple[bool, str]:
    try:
        validate_strategy(candidate, source="candidate")
    except StrategyError as exc:
        return False, str(exc)
    return True, "schema and invariants hold"


def _novelty(candidate: dict, parent: dict, ctx: GateContext) -> tuple[bool, str]:
    digest = policy_hash(candidate)
    if digest == policy_hash(parent):
        return False, "policy identical to parent"
    if digest in ctx.evaluated:
        return False, f"policy {digest[:12]} already evaluated"
    if not _changes(parent, candidate):
        return False, "no effective change from parent"
    return True, f"new policy {digest[:12]}"


def _ranges(candidate: dict, parent: dict, ctx: GateContext) -> tuple[bool, str]:
    dims = evolvable_dimensions()
    checked = 0
    for path, (old, new) in _changes(parent, candidate).items():
        if prompt_of(path):
            continue  # prompt_integrity owns prompt changes
        dim = dimension_for(path, dims)
        if dim is None:
            return False, f"{path}: not an evolvable path ({_show(old)} -> {_show(new)})"
        if dim.kind in ("integer", "number"):
            if not (_is_number(old) and _is_number(new)):
                return False, f"{path}: expected numbers, got {_show(old)} -> {_show(new)}"
            if abs(new - old) > dim.max_step + _STEP_SLACK:
                return False, f"{path}: moved {old} -> {new} ({abs(new - old):g}), more than max_step {dim.max_step:g}"
        checked += 1
    return True, f"{checked} evolvable change(s) within step limits"


def _prompt_integrity(candidate: dict, parent: dict, ctx: GateContext) -> tuple[bool, str]:
    """Same id, every parent marker kept (the schema gate already proved the template holds each
    listed marker), and the version bumped exactly when template or markers change."""
    changed = []
    for section in PROMPT_SECTIONS:
        path = f"{section}.prompt"
        old, new = parent[section]["prompt"], candidate[section]["prompt"]
        if new["id"] != old["id"]:
            return False, f"{path}.id: changed {old['id']!r} -> {new['id']!r}; a prompt keeps its id"
        dropped = [m for m in old["required_markers"] if m not in new["required_markers"]]
        if dropped:
            return False, f"{path}.required_markers: drops parent marker(s) {dropped}"
        content_changed = (new["template"], new["required_markers"]) != (old["template"], old["required_markers"])
        if content_changed and new["version"] <= old["version"]:
            return False, f"{path}.version: content changed but version {new['version']} not above {old['version']}"
        if not content_changed and new["version"] != old["version"]:
            return False, f"{path}.version: changed {old['version']} -> {new['version']} without a content change"
        if content_changed:
            changed.append(f"{path} v{old['version']}->v{new['version']}")
    return True, f"prompt changes: {', '.join(changed)}" if changed else "prompts unchanged"


def _replay_stability(candidate: dict, parent: dict, ctx: GateContext) -> tuple[bool, str]:
    if ctx.symptom is None:
        return True, "no target symptom; replay history not consulted"
    for key in change_keys(parent, candidate):
        reverts = ctx.dimension_effects.get(key, {}).get("reverts_by_symptom", {}).get(ctx.symptom, 0)
        if reverts >= ctx.max_reverts:
            return False, f"{key}: reverted {reverts} time(s) for {ctx.symptom} (limit {ctx.max_reverts})"
    return True, f"no change reverted {ctx.max_reverts}+ times for {ctx.symptom}"


Gate = Callable[[dict, dict, GateContext], tuple[bool, str]]

#: The gates in the order they run.
GATES: tuple[tuple[str, Gate], ...] = (
    ("schema", _schema),
    ("novelty", _novelty),
    ("ranges", _ranges),
    ("prompt_integrity", _prompt_integrity),
    ("replay_stability", _replay_stability),
)


def run_gates(candidate: dict, parent: dict, ctx: GateContext) -> GateTrail:
    """Run :data:`GATES` in order, stopping at the first refusal.

    ``parent`` must itself be a valid strategy; an invalid parent raises :class:`StrategyError`.
    """
    validate_strategy(parent, source="parent")
    results: list[GateResult] = []
    for name, gate in GATES:
        passed, reason = gate(candidate, parent, ctx)
        results.append(GateResult(name, passed, reason))
        if not passed:
            break
    return GateTrail(results)
