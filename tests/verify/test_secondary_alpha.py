"""The secondary outcome's own level (``acceptance.secondary_alpha``, Wiens' fallback split of alpha): validation,
the boundary of rule 5's secondary branch and of the objective's test, and records decided under the unsplit
procedure replaying with ``secondary_alpha: null``."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from evolve.loop.rules import rule_changes, rules_of
from evolve.verify.decision import AcceptanceRules, CostLimits, Verdict, decide
from evolve.verify.statistics import paired_comparison
from test_statistics import outcomes

#: Flat on the objective: 2 improved, none regressed, of 200 (non-inferior, inconclusive).
FLAT = [("single_hop", False, True, 2), ("single_hop", True, True, 98), ("single_hop", False, False, 100)]
#: Secondary gains: 6 improved, none regressed (p = 0.031, between alpha/5 and alpha), and 12 to none (p = 0.00049).
BETWEEN = [("single_hop", False, True, 6), ("single_hop", True, True, 94), ("single_hop", False, False, 100)]
STRONG = [("single_hop", False, True, 12), ("single_hop", True, True, 88), ("single_hop", False, False, 100)]
#: An objective gain with p = 0.041: 15 improved, 5 regressed, of 400.
NEAR = [("single_hop", False, True, 15), ("single_hop", True, False, 5), ("single_hop", True, True, 180),
        ("single_hop", False, False, 200)]

SPLIT = AcceptanceRules(secondary="evidence")
UNSPLIT = AcceptanceRules(secondary="evidence", secondary_alpha=None)


def _paired(rows) -> dict:
    return paired_comparison(*outcomes(rows), n_resamples=500).to_dict()


def _report(rows, secondary_rows=None) -> dict:
    out = {"paired": _paired(rows), "dcr": 0.95}
    if secondary_rows is not None:
        out["secondary"] = {k: _paired(secondary_rows)[k] for k in ("n", "delta", "mcnemar_p", "ci_low", "ci_high")}
    return out


def test_the_secondary_level_defaults_to_a_fifth_of_alpha_and_the_objective_gets_the_rest():
    assert SPLIT.secondary_alpha == pytest.approx(0.01) and SPLIT.objective_alpha == pytest.approx(0.04)
    tenth = AcceptanceRules(alpha=0.1, secondary="evidence")
    assert tenth.secondary_alpha == pytest.approx(0.02) and tenth.objective_alpha == pytest.approx(0.08)
    assert AcceptanceRules().secondary_alpha is None and AcceptanceRules().objective_alpha == 0.05
    assert UNSPLIT.secondary_level == UNSPLIT.objective_alpha == 0.05
    dumped = SPLIT.model_dump(mode="json")
    assert dumped["secondary_alpha"] == pytest.approx(0.01) and AcceptanceRules(**dumped) == SPLIT


@pytest.mark.parametrize("fields, message", [
    ({"secondary": "evidence", "secondary_alpha": 0.05}, "secondary_alpha: must be below alpha (0.05), got 0.05"),
    ({"secondary": "evidence", "secondary_alpha": 0.2, "alpha": 0.1}, "secondary_alpha: must be below alpha (0.1)"),
    ({"secondary": "evidence", "secondary_alpha": 0.0}, "secondary_alpha\n  Input should be greater than 0"),
    ({"secondary_alpha": 0.01}, "secondary_alpha: set only with secondary"),
])
def test_a_bad_secondary_level_is_refused_naming_the_field(fields, message):
    with pytest.raises(ValidationError) as caught:
        AcceptanceRules(**fields)
    assert message in str(caught.value), caught.value


def test_a_secondary_p_between_secondary_alpha_and_alpha_no_longer_accepts():
    r = _report(FLAT, BETWEEN)
    assert 0.01 < r["secondary"]["mcnemar_p"] < 0.05
    d = decide(r, SPLIT)
    assert (d.verdict, d.rule) == (Verdict.FEATURE_FLAG, "inconclusive"), d
    assert "objective at alpha 0.04, secondary_alpha 0.01" in d.reason
    legacy = decide(json.loads(json.dumps(r)), UNSPLIT)
    assert (legacy.verdict, legacy.rule) == (Verdict.ACCEPT, "accept_secondary"), legacy
    strong = decide(_report(FLAT, STRONG), SPLIT)
    assert (strong.verdict, strong.rule) == (Verdict.ACCEPT, "accept_secondary"), strong
    assert "<= secondary_alpha 0.01" in strong.reason


def test_the_objective_is_tested_at_alpha_less_the_secondary_share():
    r = _report(NEAR, FLAT)
    assert 0.04 < r["paired"]["mcnemar_p"] <= 0.05 and r["paired"]["ci_low"] > 0
    assert decide(r, AcceptanceRules()).rule == "accept"  # no secondary rule: alpha whole
    assert decide(r, UNSPLIT).rule == "accept"  # the unsplit procedure, as recorded before the split
    d = decide(r, SPLIT)  # the objective at 0.04 fails; the secondary (2 of 200) does not gain
    assert (d.verdict, d.rule) == (Verdict.FEATURE_FLAG, "inconclusive"), d


def test_stores_recorded_before_the_split_read_as_unsplit_and_a_split_config_is_a_change_of_rules():
    recorded = rules_of(UNSPLIT, CostLimits())
    del recorded["acceptance"]["secondary_alpha"]  # rules recorded before the knob existed
    assert rule_changes(recorded, rules_of(UNSPLIT, CostLimits())) == []
    assert rule_changes(recorded, rules_of(SPLIT, CostLimits())) == [("acceptance.secondary_alpha", None, 0.01)]
    replayed = AcceptanceRules(**{**recorded["acceptance"], "secondary_alpha": None})
    assert decide(_report(FLAT, BETWEEN), replayed).rule == "accept_secondary"
