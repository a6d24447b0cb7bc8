"""Fail-fast gates a candidate strategy must pass before anything is spent evaluating it.

Gates run in order and stop at the first refusal: ``schema`` -> ``novelty`` -> ``ranges`` ->
``prompt_integrity`` -> ``replay_stability``. Changes are read through the one strategy diff
(:func:`evolve.strategy.diff.effective_changes`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from evolve.numbers import is_real
from evolve.strategy.artifact import StrategyError, policy_hash, validate_strategy
from evolve.strategy.schema import evolvable_dimensions
from evolve.strategy.schema import is_framework
from evolve.strategy.diff import PROMPT_SECTIONS, change_keys, dimension_for, effective_changes, prompt_of

_STEP_SLACK = 1e-9


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

    #: Policies met before, by hash: how each was met (``evaluated in r007-c03``, ``refused in r008-c03 by critic``).
    seen: dict[str, str] = field(default_factory=dict)
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
    if digest in ctx.seen:
        return False, f"policy {digest[:12]} already {ctx.seen[digest]}"
    if not effective_changes(parent, candidate):
        return False, "no effective change from parent"
    return True, f"new policy {digest[:12]}"


def _ranges(candidate: dict, parent: dict, ctx: GateContext) -> tuple[bool, str]:
    dims = evolvable_dimensions()
    checked = 0
    for path, (old, new) in effective_changes(parent, candidate).items():
        if prompt_of(path):
            continue  # prompt_integrity owns prompt changes
        dim = dimension_for(path, dims)
        if dim is None:
            return False, f"{path}: not an evolvable path ({old!r} -> {new!r})"
        if dim.kind in ("integer", "number"):
            if not (is_real(old) and is_real(new)):
                return False, f"{path}: expected numbers, got {old!r} -> {new!r}"
            if abs(new - old) > dim.max_step + _STEP_SLACK:
                return False, f"{path}: moved {old} -> {new} ({abs(new - old):g}), more than max_step {dim.max_step:g}"
        checked += 1
    return True, f"{checked} evolvable change(s) within step limits"


def _prompt_integrity(candidate: dict, parent: dict, ctx: GateContext) -> tuple[bool, str]:
    """Same id, every parent marker kept (the schema gate already proved the template holds each
    listed marker), and the version bumped exactly when template or markers change. An external system's knob
    schema has no prompts."""
    if not is_framework():
        return True, "no prompts in an external system's knobs"
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
