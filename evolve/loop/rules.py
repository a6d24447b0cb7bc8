"""The decision rules a run works under (the run config's ``acceptance:`` and ``cost:`` sections), as recorded with
the stores' harness identity and every candidate record, and the check that a run keeps the rules its stores were
made under: a change of rules is a human decision (``memevolve run --new-rules REASON``), journaled as ``RULES``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from evolve.files import StoreError, read_json
from evolve.state.layout import StoreLayout
from evolve.verify.decision import AcceptanceRules, CostLimits

#: Rule sections of a run config, each with the model whose defaults fill a rule recorded before it existed.
SECTIONS: dict[str, type[AcceptanceRules] | type[CostLimits]] = {"acceptance": AcceptanceRules, "cost": CostLimits}


def rules_of(acceptance: AcceptanceRules, cost: CostLimits) -> dict[str, dict]:
    """The rules as recorded: ``{"acceptance": {...}, "cost": {...}}``."""
    return {"acceptance": acceptance.model_dump(mode="json"), "cost": cost.model_dump(mode="json")}


#: Rules whose default changed the earlier behaviour: the value a record made before the rule existed stands for.
RECORDED_BEFORE: dict[str, dict[str, Any]] = {"acceptance": {"category_floor": False, "hypothesis_check": "off"}}


def _flat(rules: Mapping[str, Any]) -> dict[str, Any]:
    """``section.rule`` -> value, a rule missing from the record taking the value that keeps the behaviour it was
    decided under: its default, or for a rule whose default changed that behaviour, :data:`RECORDED_BEFORE`'s."""
    out: dict[str, Any] = {}
    for section, model in SECTIONS.items():
        values = {**model().model_dump(mode="json"), **RECORDED_BEFORE.get(section, {}), **(rules.get(section) or {})}
        out.update({f"{section}.{name}": value for name, value in values.items()})
    return out


def recorded_rules(rules: Mapping[str, Any]) -> tuple[AcceptanceRules, CostLimits]:
    """The rules a record was decided under, as models (a rule missing from the record as :func:`_flat` reads it)."""
    flat = _flat(rules)
    acceptance, cost = ({name.split(".", 1)[1]: value for name, value in flat.items() if name.startswith(f"{s}.")}
                        for s in SECTIONS)
    return AcceptanceRules.model_validate(acceptance, strict=False), CostLimits.model_validate(cost, strict=False)


#: Rules that act only under another rule's value: ``section.rule`` -> (``section.other``, the values it acts under).
ACTS_UNDER: dict[str, tuple[str, tuple[Any, ...]]] = {"acceptance.fdr_q": ("acceptance.multiple_testing", ("bh",))}


def _acts(name: str, flat: Mapping[str, Any]) -> bool:
    """Whether rule ``name`` takes part in a decision under the rules ``flat``."""
    condition = ACTS_UNDER.get(name)
    return condition is None or flat.get(condition[0]) in condition[1]


def rule_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(rule, old value, new value)`` of every rule that differs, by name, among the rules that act under the old
    rules or the new (:data:`ACTS_UNDER`: ``fdr_q`` only under ``bh``): a rule no decision reads is no change."""
    before, after = _flat(old), _flat(new)
    return [(name, before.get(name), after.get(name)) for name in sorted({*before, *after})
            if before.get(name) != after.get(name) and (_acts(name, before) or _acts(name, after))]


def rule_params(rules: Mapping[str, Any]) -> dict[str, Any]:
    """The rules as flat tracking parameters, ``rules.acceptance.alpha`` -> value."""
    return {f"rules.{name}": value for name, value in _flat(rules).items()}


class RulesChanged(StoreError):
    """The stores were made under other decision rules (or under rules not recorded) than the run config's."""


@dataclass(frozen=True)
class RulesChange:
    """A change of rules a run was told to make: the stores' rules (``None``: not recorded), the run's, and why."""

    old: dict | None
    new: dict
    reason: str

    def payload(self) -> dict:
        """The ``RULES`` journal entry's payload."""
        changed = [{"rule": name, "old": a, "new": b} for name, a, b in rule_changes(self.old, self.new)] \
            if self.old is not None else None
        return {"old": self.old, "new": self.new, "changed": changed, "reason": self.reason}


def check_rules(layout: StoreLayout, rules: dict, reason: str | None) -> RulesChange | None:
    """The change from the rules the stores at ``layout`` were made under to ``rules``, when ``reason`` allows it;
    ``None`` when nothing changes (or nothing is recorded yet). Without a reason a change is refused
    (:class:`RulesChanged`, before anything is written), naming each differing rule with both values."""
    harness = (read_json(layout.state, {}) or {}).get("harness") if layout.state.is_file() else None
    if not harness:
        return None
    recorded = harness.get("rules")
    if recorded is None:
        if reason is None:
            raise RulesChanged(layout.state, "these stores were made before decision rules were recorded, so the "
                                             "rules behind their decisions are unknown; `memevolve run --new-rules "
                                             "REASON` records the run config's rules and continues, or use a new "
                                             "stores directory (--stores)")
        return RulesChange(None, rules, reason)
    changes = rule_changes(recorded, rules)
    if not changes:
        return None
    if reason is None:
        shown = "; ".join(f"{name}: stores {a!r}, run config {b!r}" for name, a, b in changes)
        raise RulesChanged(layout.state, f"these stores were made under other decision rules ({shown}); a change of "
                                         "rules is a decision of its own: `memevolve run --new-rules REASON` "
                                         "journals it and continues, or use a new stores directory (--stores)")
    return RulesChange(recorded, rules, reason)
