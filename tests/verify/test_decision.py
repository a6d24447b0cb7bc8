"""The decision contract branch by branch, replay from saved JSON, probe screen and probe subset."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from pydantic import ValidationError

from evolve.verify.decision import AcceptanceRules, CostLimits, Decision, Verdict, decide, probe_screen
from evolve.verify.probe import stratified_probe
from test_statistics import outcomes

from evolve.verify.statistics import paired_comparison

RULES = AcceptanceRules()


def report(rows: list[tuple[str, bool, bool, int]], dcr: float = 0.95) -> dict:
    """A real comparison report from ``(category, base_correct, cand_correct, count)`` rows."""
    return {"paired": paired_comparison(*outcomes(rows), n_resamples=500).to_dict(), "dcr": dcr}


#: A clear, significant gain spread over two categories.
GAIN = [("temporal", False, True, 20), ("temporal", True, True, 30),
        ("single_hop", False, True, 10), ("single_hop", True, True, 40)]
#: The same gain, but single_hop also loses 5 of 55 (about -0.09).
GAIN_WITH_SLICE_LOSS = GAIN[:2] + [("single_hop", True, True, 50), ("single_hop", True, False, 5)]


def test_accept_on_significant_gain():
    d = decide(report(GAIN), RULES)
    assert (d.verdict, d.rule) == (Verdict.ACCEPT, "accept")
    assert d.changes_strategy


@pytest.mark.parametrize("mutate, needle", [
    (lambda r: r.pop("paired"), "lacks paired"),
    (lambda r: r.pop("dcr"), "lacks dcr"),
    (lambda r: r["paired"].pop("ci_high"), "ci_high"),
    (lambda r: r["paired"].update(delta="big"), "paired.delta must be a number"),
    (lambda r: r["paired"].update(missing_in_candidate=["q9999"]), "1 missing in candidate"),
    (lambda r: r.update(dcr="high"), "dcr must be a number"),
])
def test_incomplete_reports_are_feature_flagged(mutate, needle):
    r = report(GAIN)
    mutate(r)
    d = decide(r, RULES)
    assert (d.verdict, d.rule) == (Verdict.FEATURE_FLAG, "incomplete")
    assert needle in d.reason
    assert not d.changes_strategy


def test_empty_alignment_is_incomplete():
    r = {"paired": paired_comparison({}, {}).to_dict(), "dcr": 1.0}
    d = decide(r, RULES)
    assert d.rule == "incomplete" and "n = 0" in d.reason
    assert decide("not a report", RULES).rule == "incomplete"


def test_significant_harm_rejects_before_the_dcr_floor():
    harm = [(c, True, False, k) for c, _, _, k in GAIN]
    d = decide(report(harm, dcr=0.1), RULES)
    assert (d.verdict, d.rule) == (Verdict.REJECT, "significant_harm")


def test_dcr_below_floor_is_feature_flagged():
    d = decide(report(GAIN, dcr=0.85), RULES)
    assert (d.verdict, d.rule) == (Verdict.FEATURE_FLAG, "dcr_floor")
    assert decide(report(GAIN, dcr=0.9), RULES).verdict == Verdict.ACCEPT


SMALL_GAIN = [("temporal", False, True, 3), ("temporal", True, False, 1), ("temporal", True, True, 20)]


def test_inconclusive_is_feature_flagged():
    r = report(SMALL_GAIN)
    assert r["paired"]["mcnemar_p"] > 0.05 and r["paired"]["delta"] > 0
    d = decide(r, RULES)
    assert (d.verdict, d.rule) == (Verdict.FEATURE_FLAG, "inconclusive")


def test_non_significant_harm_is_inconclusive_not_rejected():
    loss = [("temporal", True, False, 3), ("temporal", False, True, 1), ("temporal", True, True, 20)]
    assert decide(report(loss), RULES).rule == "inconclusive"


def test_without_required_significance_a_positive_result_proceeds():
    lenient = AcceptanceRules(require_significance=False)
    assert decide(report(SMALL_GAIN), lenient).verdict == Verdict.ACCEPT
    flat = [("temporal", True, False, 2), ("temporal", False, True, 2), ("temporal", True, True, 20)]
    assert decide(report(flat), lenient).rule == "inconclusive"
    # still subject to a per-category veto
    slice_loss = SMALL_GAIN + [("single_hop", True, False, 1), ("single_hop", True, True, 9)]
    assert decide(report(slice_loss), lenient).rule == "accept"
    vetoing = AcceptanceRules(require_significance=False, veto_slices=["single_hop"])
    assert decide(report(slice_loss), vetoing).rule == "category_regression"


#: E²MEND's per-category non-regression: every category vetoes.
VETO_ALL = AcceptanceRules(veto="all_categories")


def test_category_regression_rejects_and_names_the_category():
    d = decide(report(GAIN_WITH_SLICE_LOSS), VETO_ALL)
    assert (d.verdict, d.rule) == (Verdict.REJECT, "category_regression")
    assert "single_hop" in d.reason and "temporal" not in d.reason
    listed = decide(report(GAIN_WITH_SLICE_LOSS), AcceptanceRules(veto_slices=["single_hop"]))
    assert (listed.verdict, listed.rule) == (Verdict.REJECT, "category_regression")


def test_an_unprotected_category_regression_does_not_veto_by_default():
    d = decide(report(GAIN_WITH_SLICE_LOSS), RULES)
    assert (d.verdict, d.rule) == (Verdict.ACCEPT, "accept")
    assert "unprotected category regressed (no veto): single_hop" in d.reason
    assert decide(report(GAIN_WITH_SLICE_LOSS), AcceptanceRules(veto_slices=["temporal"])).rule == "accept"


def test_a_vetoing_category_rejects_even_when_protected():
    rules = AcceptanceRules(veto="all_categories", protected_slices=["single_hop"])
    assert decide(report(GAIN_WITH_SLICE_LOSS), rules).rule == "category_regression"
    with pytest.raises(ValidationError, match="veto_slices"):
        AcceptanceRules(veto="all_categories", veto_slices=["temporal"])
    with pytest.raises(ValidationError, match="unknown category"):
        AcceptanceRules(veto_slices=["temporl"])


def test_category_epsilon_override_tolerates_the_drop():
    rules = AcceptanceRules(veto="all_categories", epsilon_by_category={"single_hop": 0.1})
    assert decide(report(GAIN_WITH_SLICE_LOSS), rules).verdict == Verdict.ACCEPT


def test_drop_exactly_epsilon_is_not_a_regression():
    # single_hop: 1 of 50 lost -> delta -0.02 in floating point
    rows = GAIN[:2] + [("single_hop", True, True, 49), ("single_hop", True, False, 1)]
    assert decide(report(rows), VETO_ALL).verdict == Verdict.ACCEPT


def test_protected_slice_regression_accepts_with_monitor():
    rules = AcceptanceRules(protected_slices=["single_hop"])
    d = decide(report(GAIN_WITH_SLICE_LOSS), rules)
    assert (d.verdict, d.rule) == (Verdict.ACCEPT_WITH_MONITOR, "protected_slice_regression")
    assert "single_hop" in d.reason and d.changes_strategy


def test_replay_from_saved_json_gives_the_identical_decision(tmp_path):
    rules = AcceptanceRules(protected_slices=["single_hop"], epsilon_by_category={"temporal": 0.05})
    for rows in (GAIN, GAIN_WITH_SLICE_LOSS, SMALL_GAIN):
        r = report(rows)
        first = decide(r, rules)
        path = tmp_path / "report.json"
        path.write_text(json.dumps({"report": r, "rules": rules.model_dump(), "decision": first.to_dict()}))
        saved = json.loads(path.read_text())
        replayed = decide(saved["report"], AcceptanceRules(**saved["rules"]))
        assert replayed == first == Decision.from_dict(saved["decision"])


def test_rules_validate_their_fields():
    with pytest.raises(ValidationError, match="alpha"):
        AcceptanceRules(alpha=1.5)
    with pytest.raises(ValidationError, match="unknown"):
        AcceptanceRules(unknown=1)
    assert AcceptanceRules(epsilon_by_category={"temporal": 0.1}).epsilon("temporal") == 0.1
    assert RULES.epsilon("temporal") == RULES.epsilon_default


# ---------------------------------------------------------------- probe


def test_probe_screen_rejects_only_drops_beyond_delta_one():
    d = probe_screen(0.60, 0.55, RULES)
    assert d is not None and (d.verdict, d.rule) == (Verdict.REJECT, "probe_screen")
    assert probe_screen(0.50, 0.48, RULES) is None  # exactly delta_1
    assert probe_screen(0.50, 0.70, RULES) is None


def questions(counts: dict[str, int]) -> dict[str, str]:
    return {f"{c}-{i:03d}": c for c, n in counts.items() for i in range(n)}


def test_stratified_probe_is_proportional_with_one_per_category():
    qs = questions({"single_hop": 280, "multi_hop": 90, "temporal": 120, "open_domain": 8, "rare": 2})
    probe = stratified_probe(qs, size=80, seed=0)
    assert len(probe) == 80 and probe == sorted(probe) and len(set(probe)) == 80
    counts = Counter(qs[q] for q in probe)
    total = len(qs)
    for category, n in Counter(qs.values()).items():
        assert counts[category] >= 1
        assert abs(counts[category] - 80 * n / total) < 1.0 + 1e-9  # largest remainder stays within one
    assert counts["single_hop"] == 45 and counts["temporal"] == 19


def test_stratified_probe_is_deterministic_and_seeded():
    qs = questions({"single_hop": 50, "temporal": 30})
    assert stratified_probe(qs, 20, seed=1) == stratified_probe(dict(reversed(qs.items())), 20, seed=1)
    assert stratified_probe(qs, 20, seed=1) != stratified_probe(qs, 20, seed=2)


def test_stratified_probe_accepts_outcomes_and_small_inputs():
    outcomes = {"a": {"correct": True, "category": "x"}, "b": {"correct": False, "category": "y"}}
    assert stratified_probe(outcomes, size=80) == ["a", "b"]
    qs = questions({"a": 5, "b": 5, "c": 5})
    assert Counter(q[0] for q in stratified_probe(qs, size=2)) == {"a": 1, "b": 1, "c": 1}
    with pytest.raises(ValueError, match=r"probe input\['z'\]"):
        stratified_probe({"z": 3})
    with pytest.raises(ValueError, match="size"):
        stratified_probe(qs, size=0)


# ---------------------------------------------------------------- the cost rule


def costly(words_parent: float, words_candidate: float, rows=GAIN) -> dict:
    return {**report(rows), "cost": {"words_parent": words_parent, "words_candidate": words_candidate}}


@pytest.mark.parametrize("limits, words, verdict, rule, needle", [
    (CostLimits(max_context_words=160), (100, 150), Verdict.ACCEPT, "accept", "accepted"),
    (CostLimits(max_context_words=160), (100, 170), Verdict.FEATURE_FLAG, "cost", "exceed max_context_words 160"),
    (CostLimits(max_relative_increase=0.25), (100, 125), Verdict.ACCEPT, "accept", "accepted"),
    (CostLimits(max_relative_increase=0.25), (100, 126), Verdict.FEATURE_FLAG, "cost", "more than max_relative"),
    (CostLimits(), (100, 900), Verdict.ACCEPT, "accept", "accepted"),  # no limits: cost never decides
])
def test_cost_limits_branch_by_branch(limits, words, verdict, rule, needle):
    d = decide(costly(*words), RULES, limits)
    assert (d.verdict, d.rule) == (verdict, rule) and needle in d.reason, d


def test_cost_never_turns_a_rejection_into_a_flag_and_needs_its_figures():
    harm = [("temporal", True, False, 30), ("temporal", True, True, 30)]
    limits = CostLimits(max_context_words=50)
    assert decide(costly(100, 400, harm), RULES, limits).verdict == Verdict.REJECT
    missing = report(GAIN)
    d = decide(missing, RULES, limits)
    assert (d.verdict, d.rule) == (Verdict.FEATURE_FLAG, "incomplete") and "lacks cost" in d.reason


def test_cost_decision_replays_from_the_saved_record():
    from evolve.state.record import CandidateRecord
    from evolve.state.records import decision_report, dump_record, load_record
    from evolve.verify.outcomes import ContextCost
    from evolve.verify.statistics import PairedReport

    limits = CostLimits(max_relative_increase=0.1)
    saved = costly(97.0, 145.0)
    record = CandidateRecord("r001-c00", 1, {"key": "retrieval.top_k::increase"}, "kf_filtered/*", "0" * 64, {},
                             paired=PairedReport.from_dict(saved["paired"]), dcr=saved["dcr"],
                             cost=ContextCost(**saved["cost"]))
    record.close(decide(decision_report(record), RULES, limits), "decision")
    again = load_record(json.loads(json.dumps(dump_record(record))))
    assert decide(decision_report(again), RULES, limits) == again.decision
    assert again.decision.rule == "cost"


@pytest.mark.parametrize("cost", [{"max_context_words": -5}, {"max_context_words": "many"},
                                  {"max_relative_increase": -0.1}, {"max_tokens": 3}])
def test_bad_cost_limits_are_refused(cost):
    with pytest.raises(ValidationError):
        CostLimits(**cost)


#: A significant loss on held-out questions, and a small one that is not significant.
HELD_LOSS = [("temporal", True, False, 15), ("temporal", True, True, 35)]
HELD_NOISE = [("temporal", True, False, 2), ("temporal", False, True, 1), ("temporal", True, True, 47)]


def test_a_gain_that_regresses_on_the_holdout_is_feature_flagged_and_replays():
    def held(rows):
        paired = paired_comparison(*outcomes(rows), n_resamples=500).to_dict()
        return {k: paired[k] for k in ("n", "delta", "mcnemar_p", "ci_low", "ci_high")}

    blocked = {**report(GAIN), "holdout": held(HELD_LOSS)}
    d = decide(blocked, RULES)
    assert (d.verdict, d.rule) == (Verdict.FEATURE_FLAG, "holdout") and "regresses on 50 held-out" in d.reason
    assert decide(json.loads(json.dumps(blocked)), RULES) == d  # from the saved record alone
    assert decide({**report(GAIN), "holdout": held(HELD_NOISE)}, RULES).rule == "accept"
    assert decide({**report(GAIN), "holdout": {"n": 3}}, RULES).rule == "incomplete"
    # The dev data decides first: a dev loss is rejected whatever the holdout says.
    assert decide({**report([("temporal", True, False, 20), ("temporal", True, True, 30)]),
                   "holdout": held(HELD_NOISE)}, RULES).rule == "significant_harm"
