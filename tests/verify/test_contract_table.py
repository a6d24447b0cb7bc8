"""The decision contract against D²ACCI's table: reports built with its figures reach its verdicts; the round's
multiple-testing adjustment; the confabulation guard branch by branch."""
from __future__ import annotations

import json

import pytest

from evolve.loop.candidate import CandidateResult
from evolve.loop.family import decide_family
from evolve.state.record import CandidateRecord
from evolve.state.records import decision_report, dump_record, load_record
from evolve.verify.decision import AcceptanceRules, CostLimits, Verdict, decide
from evolve.verify.multiplicity import adjust
from evolve.verify.statistics import PairedBrief, PairedReport, paired_comparison
from evolve.ops.contract_cases import CASES, SHIPPED, report, shipped_rules
from test_statistics import outcomes

#: D²ACCI's pre-specified important slice in its LoCoMo table.
D2ACCI = AcceptanceRules(protected_slices=["multi_hop"])
#: E²MEND's rule: every category vetoes.
E2MEND = AcceptanceRules(protected_slices=["multi_hop"], veto="all_categories")

CASE = {case.name: list(case.rows) for case in CASES}
SUPPLEMENT, CLEAN, HARM, NOISE = CASE["supplement"], CASE["clean"], CASE["harm"], CASE["noise"]
SINGLE_HOP_FALLS = CASE["single_hop_falls"]


def test_the_supplement_figures_are_the_reported_ones():
    paired = report(SUPPLEMENT)["paired"]
    assert paired["n"] == 996 and round(paired["delta"] * 100, 2) == 2.71
    assert round(paired["mcnemar_p"], 4) == 0.0009
    assert round(paired["per_category"]["multi_hop"]["delta"] * 100, 1) == -2.6


@pytest.mark.parametrize("rows, rules, verdict, rule", [
    (SUPPLEMENT, D2ACCI, Verdict.ACCEPT_WITH_MONITOR, "protected_slice_regression"),
    (SUPPLEMENT, E2MEND, Verdict.REJECT, "category_regression"),
    (SUPPLEMENT, AcceptanceRules(veto_slices=["multi_hop"]), Verdict.REJECT, "category_regression"),
    (CLEAN, D2ACCI, Verdict.ACCEPT, "accept"),
    (CLEAN, E2MEND, Verdict.ACCEPT, "accept"),
    (HARM, D2ACCI, Verdict.REJECT, "significant_harm"),
    (NOISE, D2ACCI, Verdict.FEATURE_FLAG, "inconclusive"),
])
def test_the_d2acci_table_replays(rows, rules, verdict, rule):
    d = decide(report(rows), rules)
    assert (d.verdict, d.rule) == (verdict, rule), d
    assert decide(json.loads(json.dumps(report(rows))), rules) == d


def test_the_supplement_is_accepted_with_monitor_naming_the_slice():
    d = decide(report(SUPPLEMENT), D2ACCI)
    assert "multi_hop -0.0260" in d.reason and d.changes_strategy
    # without pre-specified slices nothing vetoes or is monitored: a plain accept that names the loss
    plain = decide(report(SUPPLEMENT), AcceptanceRules())
    assert plain.rule == "accept" and "no veto): multi_hop" in plain.reason


# ---------------------------------------------------------------- multiple testing


def test_holm_and_bonferroni_adjust_like_their_definitions():
    ps = {"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.5}
    assert adjust(ps, "bonferroni") == pytest.approx({"a": 0.04, "b": 0.16, "c": 0.12, "d": 1.0})
    # Holm: sorted 0.01, 0.03, 0.04, 0.5 times 4, 3, 2, 1, kept monotone
    assert adjust(ps, "holm") == pytest.approx({"a": 0.04, "b": 0.09, "c": 0.09, "d": 0.5})
    assert adjust(ps, "none") == ps
    assert adjust({"a": 0.03}, "holm") == {"a": 0.03}


#: A lone gain with McNemar p about 0.035 (12 improved, 3 regressed), and three null candidates.
LONE = [("single_hop", False, True, 12), ("single_hop", True, False, 3), ("single_hop", True, True, 85)]
NULLS = [[("single_hop", False, True, 3), ("single_hop", True, False, 3), ("single_hop", True, True, 94)],
         [("single_hop", False, True, 2), ("single_hop", True, False, 4), ("single_hop", True, True, 94)],
         [("single_hop", True, True, 100)]]


def _round(rules: AcceptanceRules, rows_list) -> list[CandidateResult]:
    results = []
    for i, rows in enumerate(rows_list):
        r = report(rows)
        record = CandidateRecord(f"r001-c{i:02d}", 1, {"key": f"k{i}"}, "retrieval_gap/*", "0" * 64, {},
                                 paired=PairedReport.from_dict(r["paired"]), dcr=r["dcr"])
        record.close(decide(decision_report(record), rules), "decision")
        results.append(CandidateResult(record, {}, None))
    return results


@pytest.mark.parametrize("method, verdict", [("holm", Verdict.FEATURE_FLAG), ("bonferroni", Verdict.FEATURE_FLAG),
                                             ("none", Verdict.ACCEPT)])
def test_a_lone_p_of_003_among_four_candidates(method, verdict):
    rules = AcceptanceRules(multiple_testing=method)
    results = _round(rules, [LONE] + NULLS)
    lone = results[0].record
    assert 0.0125 < lone.paired.mcnemar_p < 0.05 and lone.decision.verdict == Verdict.ACCEPT  # alone it accepts
    changed = decide_family(results, rules)
    assert lone.decision.verdict == verdict
    assert [r.record.candidate_id for r in changed] == ([] if method == "none" else ["r001-c00"])
    if method == "none":
        assert lone.multiple_testing is None
        return
    assert lone.decision.rule == "inconclusive" and f"{method}-adjusted p" in lone.decision.reason
    assert lone.multiple_testing.family == ["r001-c00", "r001-c01", "r001-c02", "r001-c03"]
    assert lone.multiple_testing.p_adjusted == pytest.approx(min(1.0, 4 * lone.paired.mcnemar_p))
    # replay from the stored record alone
    again = load_record(json.loads(json.dumps(dump_record(lone))))
    assert again.multiple_testing == lone.multiple_testing
    assert decide(decision_report(again), rules) == lone.decision


def test_a_single_candidate_round_keeps_its_decision_and_record():
    rules = AcceptanceRules()
    results = _round(rules, [LONE])
    before = dump_record(results[0].record)
    assert decide_family(results, rules) == [] and dump_record(results[0].record) == before
    assert results[0].record.decision.verdict == Verdict.ACCEPT


def test_a_strong_gain_survives_holm_and_old_records_read_with_the_raw_p():
    rules = AcceptanceRules()
    results = _round(rules, [CLEAN] + NULLS)
    decide_family(results, rules)
    assert results[0].record.decision.verdict == Verdict.ACCEPT
    stored = dump_record(results[0].record)
    del stored["multiple_testing"]
    assert load_record(stored).multiple_testing is None
    assert decide(decision_report(load_record(stored)), rules).verdict == Verdict.ACCEPT


# ---------------------------------------------------------------- confabulation guard


def brief(rows) -> dict:
    """A paired brief (the confabulation guard's, the secondary outcome's, the holdout's) from
    ``(category, base, cand, count)`` rows."""
    paired = paired_comparison(*outcomes(rows), n_resamples=500).to_dict()
    return {k: paired[k] for k in ("n", "delta", "mcnemar_p", "ci_low", "ci_high")}


#: 20 abstentions turned into confident wrong answers, none the other way.
MORE_CONFAB = [("single_hop", False, True, 20), ("single_hop", False, False, 380)]
#: 3 more, 2 fewer: no significant rise.
SAME_CONFAB = [("single_hop", False, True, 3), ("single_hop", True, False, 2), ("single_hop", False, False, 395)]
#: 15 fewer.
LESS_CONFAB = [("single_hop", True, False, 15), ("single_hop", False, False, 385)]


@pytest.mark.parametrize("rows, confab_rows, verdict, rule", [
    (CLEAN, MORE_CONFAB, Verdict.REJECT, "confabulation"),
    (CLEAN, SAME_CONFAB, Verdict.ACCEPT, "accept"),
    (CLEAN, LESS_CONFAB, Verdict.ACCEPT, "accept"),
    (NOISE, MORE_CONFAB, Verdict.REJECT, "confabulation"),   # a rise rejects even an inconclusive gain
    (HARM, MORE_CONFAB, Verdict.REJECT, "significant_harm"),  # harm on the objective is named first
    (CLEAN, None, Verdict.ACCEPT, "accept"),                 # no answers judged (evidence / answer objective)
])
def test_confabulation_guard_branch_by_branch(rows, confab_rows, verdict, rule):
    r = report(rows)
    if confab_rows is not None:
        r["confabulation"] = brief(confab_rows)
    d = decide(r, D2ACCI)
    assert (d.verdict, d.rule) == (verdict, rule), d
    if rule == "confabulation":
        assert "answers flagged as confabulated rise on 400 questions" in d.reason


def test_a_malformed_confabulation_brief_is_incomplete_and_the_brief_replays_from_the_record():
    assert decide({**report(CLEAN), "confabulation": {"n": 3}}, D2ACCI).rule == "incomplete"
    r = report(CLEAN)
    from evolve.verify.statistics import PairedBrief
    record = CandidateRecord("r001-c00", 1, {"key": "k"}, "generation_error/*", "0" * 64, {},
                             paired=PairedReport.from_dict(r["paired"]), dcr=r["dcr"],
                             confabulation=PairedBrief.from_dict(brief(MORE_CONFAB)))
    record.close(decide(decision_report(record), D2ACCI), "decision")
    again = load_record(json.loads(json.dumps(dump_record(record))))
    assert again.confabulation == record.confabulation and again.decision.rule == "confabulation"
    assert decide(decision_report(again), D2ACCI) == record.decision


# ---------------------------------------------------------------- secondary outcome (fixed-sequence step of rule 5)

#: Under a secondary rule: evidence decides where the answer objective cannot tell.
SECONDARY = AcceptanceRules(protected_slices=["multi_hop"], secondary="evidence", non_inferiority_margin=0.02)
#: Non-inferior and inconclusive on the objective: 2 improved, none regressed, of 200.
FLAT = [("single_hop", False, True, 2), ("single_hop", True, True, 98), ("single_hop", False, False, 100)]
#: Inconclusive with a CI reaching below -2 pp: 9 improved against 8 regressed.
WIDE = [("single_hop", False, True, 9), ("single_hop", True, False, 8), ("single_hop", True, True, 183)]
#: A small, non-significant loss: 1 regressed.
DIP = [("single_hop", True, False, 1), ("single_hop", True, True, 99), ("single_hop", False, False, 100)]
#: Secondary outcomes: a clear gain (12 improved, none regressed), and noise.
MORE_EVIDENCE = [("single_hop", False, True, 12), ("single_hop", True, True, 88), ("single_hop", False, False, 100)]
SAME_EVIDENCE = [("single_hop", False, True, 4), ("single_hop", True, False, 3), ("single_hop", True, True, 193)]


@pytest.mark.parametrize("rows, secondary_rows, rules, verdict, rule", [
    (FLAT, MORE_EVIDENCE, SECONDARY, Verdict.ACCEPT, "accept_secondary"),
    (FLAT, MORE_EVIDENCE, D2ACCI, Verdict.FEATURE_FLAG, "inconclusive"),        # no secondary rule: not consulted
    (FLAT, SAME_EVIDENCE, SECONDARY, Verdict.FEATURE_FLAG, "inconclusive"),     # no secondary gain
    (FLAT, None, SECONDARY, Verdict.FEATURE_FLAG, "inconclusive"),              # no brief (a record made before)
    (WIDE, MORE_EVIDENCE, SECONDARY, Verdict.FEATURE_FLAG, "inconclusive"),     # not shown non-inferior
    (DIP, MORE_EVIDENCE, SECONDARY, Verdict.FEATURE_FLAG, "inconclusive"),      # the objective's estimate fell
    (CLEAN, SAME_EVIDENCE, SECONDARY, Verdict.ACCEPT, "accept"),                # the objective decides first
    (HARM, MORE_EVIDENCE, SECONDARY, Verdict.REJECT, "significant_harm"),
])
def test_the_secondary_outcome_decides_only_where_the_objective_cannot(rows, secondary_rows, rules, verdict, rule):
    r = report(rows)
    if secondary_rows is not None:
        r["secondary"] = brief(secondary_rows)
    d = decide(r, rules)
    assert (d.verdict, d.rule) == (verdict, rule), d
    assert decide(json.loads(json.dumps(r)), rules) == d
    if rule == "accept_secondary":
        assert "non-inferior (margin 0.02), secondary evidence: delta=+0.0600" in d.reason and d.changes_strategy


def test_a_secondary_accept_still_meets_the_slice_cost_and_holdout_rules():
    flat_slice_loss = [("multi_hop", True, False, 2), ("multi_hop", True, True, 18), ("single_hop", False, True, 6),
                       ("single_hop", True, True, 74), ("single_hop", False, False, 100)]
    r = {**report(flat_slice_loss), "secondary": brief(MORE_EVIDENCE)}
    d = decide(r, SECONDARY)
    assert (d.verdict, d.rule) == (Verdict.ACCEPT_WITH_MONITOR, "protected_slice_regression"), d
    assert "secondary evidence" in d.reason
    costly = {**report(FLAT), "secondary": brief(MORE_EVIDENCE),
              "cost": {"words_parent": 100, "words_candidate": 170}}
    assert decide(costly, SECONDARY, CostLimits(max_context_words=160)).rule == "cost"
    held_loss = {**report(FLAT), "secondary": brief(MORE_EVIDENCE),
                 "holdout": brief([("temporal", True, False, 15), ("temporal", True, True, 35)])}
    assert decide(held_loss, SECONDARY).rule == "holdout"


def test_a_malformed_secondary_entry_is_incomplete():
    for entry in ({"secondary": {"n": 3}},
                  {"secondary": brief(MORE_EVIDENCE), "secondary_testing": {"p_adjusted": "x"}}):
        d = decide({**report(FLAT), **entry}, SECONDARY)
        assert (d.verdict, d.rule) == (Verdict.FEATURE_FLAG, "incomplete"), d


def test_holm_adjusts_the_secondary_outcome_over_the_round_and_the_record_replays():
    """A lone secondary gain (p about 0.03) among four candidates is accepted alone and inconclusive under Holm (the
    unsplit procedure, secondary at alpha, under which such records were decided)."""
    unsplit = SECONDARY.model_copy(update={"secondary_alpha": None})
    lone = [("single_hop", False, True, 6), ("single_hop", True, True, 94), ("single_hop", False, False, 100)]
    rows_list = [FLAT, FLAT, FLAT, FLAT]
    secondaries = [lone, SAME_EVIDENCE, SAME_EVIDENCE, MORE_EVIDENCE]
    results = []
    for i, (rows, sec) in enumerate(zip(rows_list, secondaries)):
        r = report(rows)
        record = CandidateRecord(f"r001-c{i:02d}", 1, {"key": f"k{i}"}, "retrieval_gap/*", "0" * 64, {},
                                 paired=PairedReport.from_dict(r["paired"]), dcr=r["dcr"],
                                 secondary=PairedBrief.from_dict(brief(sec)))
        record.close(decide(decision_report(record), unsplit), "decision")
        results.append(CandidateResult(record, {}, None))
    first = results[0].record
    assert first.decision.rule == "accept_secondary" and 0.0125 < first.secondary.mcnemar_p < 0.05
    changed = decide_family(results, unsplit)
    assert [r.record.candidate_id for r in changed] == ["r001-c00"] and first.decision.rule == "inconclusive"
    assert first.secondary_testing.p_adjusted == pytest.approx(min(1.0, 3 * first.secondary.mcnemar_p))
    strong = results[3].record
    assert strong.decision.rule == "accept_secondary" and "holm-adjusted p=" in strong.decision.reason
    again = load_record(json.loads(json.dumps(dump_record(strong))))
    assert (again.secondary, again.secondary_testing) == (strong.secondary, strong.secondary_testing)
    assert decide(decision_report(again), unsplit) == strong.decision
    # records written before the rule existed keep their stored form: no secondary keys
    assert "secondary" not in dump_record(_round(D2ACCI, [CLEAN])[0].record)


# ---------------------------------------------------------------- every category has a floor

@pytest.mark.parametrize("config", [name for name in SHIPPED if name != "lifecycle.yaml"])
@pytest.mark.parametrize("rows, verdict, rule", [
    (SUPPLEMENT, Verdict.ACCEPT_WITH_MONITOR, "protected_slice_regression"),
    (CLEAN, Verdict.ACCEPT, "accept"),
    (HARM, Verdict.REJECT, "significant_harm"),
    (NOISE, Verdict.FEATURE_FLAG, "inconclusive"),
    (SINGLE_HOP_FALLS, Verdict.REJECT, "category_floor"),
])
def test_the_d2acci_table_replays_under_every_shipped_config(config, rows, verdict, rule):
    rules = shipped_rules(config)
    if rows is SUPPLEMENT and rules.alpha >= 0.2:
        # a search at alpha 0.2 under a night's confirmation holds every category's floor to the same alpha: the
        # multi-hop fall (Holm-adjusted p 0.19 over 3 categories) is significant there
        verdict, rule = Verdict.REJECT, "category_floor"
    d = decide(report(rows), rules)
    assert (d.verdict, d.rule) == (verdict, rule), d


def test_a_ten_point_single_hop_fall_is_rejected_unless_the_category_is_exempt():
    r = report(SINGLE_HOP_FALLS)
    assert r["paired"]["delta"] > 0 and r["paired"]["mcnemar_p"] < 0.05
    assert r["paired"]["per_category"]["single_hop"]["delta"] == pytest.approx(-0.10)
    d = decide(r, D2ACCI)
    assert d.verdict == Verdict.REJECT and "single_hop -0.1000" in d.reason and "Holm-adjusted over 3" in d.reason
    exempt = decide(r, AcceptanceRules(protected_slices=["multi_hop"], floor_exempt=["single_hop"]))
    assert exempt.rule == "accept" and "floor-exempt category: single_hop" in exempt.reason


def test_a_protected_slice_falling_significantly_is_rejected_not_monitored():
    rows = [("multi_hop", False, True, 1), ("multi_hop", True, False, 16), ("multi_hop", True, True, 80),
            ("multi_hop", False, False, 103), ("single_hop", False, True, 60), ("single_hop", True, True, 140),
            ("single_hop", False, False, 200)]
    assert decide(report(rows), D2ACCI).rule == "category_floor"


def test_the_floor_is_not_applied_to_records_without_category_p():
    r = report(SINGLE_HOP_FALLS)
    for row in r["paired"]["per_category"].values():
        for key in ("improved", "regressed", "mcnemar_p"):
            del row[key]
    d = decide(r, D2ACCI)
    assert d.rule == "accept" and "no veto): single_hop" in d.reason


def test_floor_exempt_names_known_categories():
    with pytest.raises(ValueError, match="unknown category 'single'"):
        AcceptanceRules(floor_exempt=["single"])


# ---------------------------------------------------------------- Benjamini-Hochberg and the probe in the family

#: Five candidates' p-values: Holm at 0.01 accepts two of them, Benjamini-Hochberg at q = 0.01 all four below 0.01.
FIVE = {"c1": 0.0009, "c2": 0.0021, "c3": 0.0052, "c4": 0.0078, "c5": 0.21}


def test_bh_and_holm_on_five_p_values():
    holm, bh = adjust(FIVE, "holm"), adjust(FIVE, "bh")
    assert [c for c, p in holm.items() if p <= 0.01] == ["c1", "c2"]
    assert [c for c, p in bh.items() if p <= 0.01] == ["c1", "c2", "c3", "c4"]
    # BH's step-up: the i-th smallest p times m / i, made monotone from the top
    assert bh == pytest.approx({"c1": 0.0045, "c2": 0.00525, "c3": 0.00867, "c4": 0.00975, "c5": 0.21}, abs=1e-5)


def test_bh_holds_the_adjusted_p_to_fdr_q():
    rules = AcceptanceRules(multiple_testing="bh", fdr_q=0.01)
    results = _round(rules, [LONE] + NULLS)
    decide_family(results, rules)
    lone = results[0].record
    assert lone.multiple_testing.method == "bh" and lone.decision.rule == "inconclusive"
    assert "q=0.01" in lone.decision.reason
    loose = AcceptanceRules(multiple_testing="bh", fdr_q=0.2)
    results = _round(loose, [LONE] + NULLS)
    decide_family(results, loose)
    assert results[0].record.decision.verdict == Verdict.ACCEPT


def _probe_stopped(cid: str, p: float | None, rule: str = "probe_screen") -> CandidateResult:
    from evolve.verify.decision import Decision
    from evolve.verify.outcomes import ProbeOutcome
    record = CandidateRecord(cid, 1, {"key": cid}, "retrieval_gap/*", "0" * 64, {},
                             probe=ProbeOutcome(80, 0.5, 0.45, -0.05, answers_changed=6, mcnemar_p=p))
    record.close(Decision(Verdict.FEATURE_FLAG if rule == "probe-inert" else Verdict.REJECT, "probe", rule),
                 "critic" if rule == "critic" else "probe")
    return CandidateResult(record, {}, None)


def test_probe_stopped_candidates_join_the_family_with_their_probe_p():
    rules = AcceptanceRules()
    results = _round(rules, [LONE]) + [_probe_stopped("r001-c01", 1.0), _probe_stopped("r001-c02", 0.6, "critic"),
                                       _probe_stopped("r001-c03", 0.3), _probe_stopped("r001-c04", 1.0, "probe-inert")]
    lone = results[0].record
    assert decide_family(results, rules) == [results[0]]
    assert lone.multiple_testing.family == ["r001-c00", "r001-c01", "r001-c02", "r001-c03"]
    assert lone.multiple_testing.p_adjusted == pytest.approx(4 * lone.paired.mcnemar_p)
    assert lone.decision.rule == "inconclusive"
    # the inert candidate was no test; a probe record from before the probe kept its p takes no part either
    old = _round(rules, [LONE]) + [_probe_stopped("r001-c01", None)]
    assert decide_family(old, rules) == [] and old[0].record.multiple_testing is None
    assert "mcnemar_p" not in _probe_stopped("x", None).record.probe.to_dict()


# ---------------------------------------------------------------- the hypothesis check

def _causes(rows, cause: str = "retrieval_gap") -> tuple[dict, dict]:
    """Each question of ``rows`` ``(category, base correct, candidate correct, count)`` with its category and root
    cause on each side: a failure's is ``cause``."""
    base, cand, i = {}, {}, 0
    for category, b, c, count in rows:
        for _ in range(count):
            base[f"q{i}"], cand[f"q{i}"] = (category, None if b else cause), (category, None if c else cause)
            i += 1
    return base, cand


def _with_hypothesis(rows, symptom: str, alpha: float = 0.05, author: str = "engineer") -> dict:
    """The report of ``rows`` with the hypothesis that ``symptom``'s failure category falls, predicted by ``author``
    (an engineer's, as ``gate`` takes it, unless told)."""
    from dataclasses import replace

    from evolve.verify.hypothesis import check, predicted
    found = check(replace(predicted(symptom), author=author), *_causes(rows), alpha)
    r = report(rows)
    return {**r, "hypothesis": found.to_dict()} if found else r


@pytest.mark.parametrize("symptom, setting, rule", [
    ("retrieval_gap/single_hop", "flag", "accept"),          # 30 single-hop questions left the category: p = 1.9e-9
    ("retrieval_gap/temporal", "flag", "hypothesis_mismatch"),  # temporal's failures did not move
    ("retrieval_gap/temporal", "record", "accept"),
    ("retrieval_gap/temporal", "off", "accept"),
    ("retrieval_gap/*", "flag", "accept"),                   # a wildcard symptom is checked over every category
    ("ingestion_gap/*", "flag", "hypothesis_mismatch"),      # no failure has that root cause
    ("generation_error/single_hop", "flag", "hypothesis_mismatch"),
])
def test_a_gain_whose_target_failure_category_did_not_fall_is_flagged(symptom, setting, rule):
    rows = [("single_hop", False, True, 30), ("single_hop", True, True, 270), ("temporal", True, True, 50),
            ("temporal", False, False, 50)]
    d = decide(_with_hypothesis(rows, symptom), AcceptanceRules(hypothesis_check=setting))
    assert d.rule == rule, d
    if symptom == "retrieval_gap/temporal" and setting != "off":
        assert ("predicted retrieval_gap/temporal down: 50 -> 50 of 100 questions (+0.0000; 0 left, 0 entered, "
                "exact McNemar p=1, alpha 0.05) (mismatch)") in d.reason


def test_the_planners_own_hypothesis_never_flags_a_gain_the_contract_accepts():
    """In a night the planner predicts the mechanism of its own move; a mismatch is named in the accept's reason (and
    refutes the mechanism in the planner, tests/improve), while an engineer's prediction keeps the human rule. A
    record made before authors were kept reads as an engineer's, so it replays as it was decided."""
    rows = [("single_hop", False, True, 30), ("single_hop", True, True, 270), ("temporal", True, True, 50),
            ("temporal", False, False, 50)]
    planner = _with_hypothesis(rows, "retrieval_gap/temporal", author="planner")
    assert planner["hypothesis"]["author"] == "planner"
    d = decide(planner, AcceptanceRules(hypothesis_check="flag"))
    assert d.verdict == "ACCEPT" and d.rule == "accept", d
    assert "planner hypothesis predicted retrieval_gap/temporal down" in d.reason and "(mismatch)" in d.reason
    engineer = _with_hypothesis(rows, "retrieval_gap/temporal")
    assert decide(engineer, AcceptanceRules(hypothesis_check="flag")).rule == "hypothesis_mismatch"
    legacy = {**planner, "hypothesis": {k: v for k, v in planner["hypothesis"].items() if k != "author"}}
    assert decide(legacy, AcceptanceRules(hypothesis_check="flag")).rule == "hypothesis_mismatch"
    with pytest.raises(Exception, match="author 'robot' is not planner or engineer"):
        from evolve.verify.hypothesis import HypothesisCheck
        HypothesisCheck.from_dict({**planner["hypothesis"], "author": "robot"})


def test_a_move_that_is_not_significant_is_a_mismatch():
    """Any delta matched before; now 4 questions leaving the category against 1 entering it (p = 0.375) does not."""
    rows = [("temporal", False, True, 4), ("temporal", True, False, 1), ("temporal", True, True, 40),
            ("single_hop", False, True, 40), ("single_hop", True, True, 200)]
    r = _with_hypothesis(rows, "retrieval_gap/temporal")
    assert r["hypothesis"]["observed_delta"] < 0 and r["hypothesis"]["mcnemar_p"] == pytest.approx(0.375)
    assert decide(r, AcceptanceRules()).rule == "hypothesis_mismatch"
    assert decide(_with_hypothesis(rows, "retrieval_gap/temporal", alpha=0.4), AcceptanceRules()).rule == "accept"


def test_a_mismatch_only_adds_flags():
    """The check never turns a verdict other than an accept into another one, and a match never accepts."""
    for case in CASES:
        for symptom in ("retrieval_gap/*", "ingestion_gap/*"):
            plain, checked = report(case.rows), _with_hypothesis(case.rows, symptom)
            before, after = decide(plain, AcceptanceRules()), decide(checked, AcceptanceRules())
            assert after == before or (before.changes_strategy and after.rule == "hypothesis_mismatch"), case.name


def test_the_hypothesis_check_round_trips_and_replays_from_the_record():
    from evolve.verify.hypothesis import HypothesisCheck
    r = _with_hypothesis([("temporal", False, True, 20), ("single_hop", False, True, 30),
                          ("single_hop", True, True, 270)], "retrieval_gap/temporal")
    record = CandidateRecord("r001-c00", 1, {"key": "k"}, "retrieval_gap/temporal", "0" * 64, {},
                             paired=PairedReport.from_dict(r["paired"]), dcr=r["dcr"],
                             hypothesis=HypothesisCheck.from_dict(r["hypothesis"]))
    record.close(decide(decision_report(record), AcceptanceRules()), "decision")
    assert record.hypothesis.matches and record.decision.rule == "accept"
    again = load_record(json.loads(json.dumps(dump_record(record))))
    assert again.hypothesis == record.hypothesis and decide(decision_report(again), AcceptanceRules()) == record.decision
    assert decide({**r, "hypothesis": {"category": "temporal"}}, AcceptanceRules()).rule == "incomplete"
    assert decide({**r, "hypothesis": {**r["hypothesis"], "alpha": None}}, AcceptanceRules()).rule == "incomplete"


def test_a_check_recorded_before_the_paired_test_replays_as_decided():
    """A record holding a question category that was to rise, matched by any delta, reads back and decides as
    it did."""
    from evolve.verify.hypothesis import HypothesisCheck
    legacy = {"category": "temporal", "predicted": "up", "observed_delta": 0.02, "n": 100}
    check = HypothesisCheck.from_dict(legacy)
    assert check.legacy and check.matches and check.to_dict() == legacy
    assert not HypothesisCheck.from_dict({**legacy, "observed_delta": 0.0}).matches
    rows = [("single_hop", False, True, 30), ("single_hop", True, True, 270)]
    assert decide({**report(rows), "hypothesis": {**legacy, "observed_delta": 0.0}}, AcceptanceRules()).rule == \
        "hypothesis_mismatch"


def test_rules_recorded_before_the_floor_and_the_check_read_as_off():
    from evolve.loop.rules import rule_changes, rules_of
    from evolve.verify.decision import CostLimits
    new = rules_of(AcceptanceRules(), CostLimits())
    old = {"acceptance": {k: v for k, v in new["acceptance"].items() if k not in ("category_floor", "hypothesis_check")},
           "cost": new["cost"]}
    assert [name for name, *_ in rule_changes(old, new)] == ["acceptance.category_floor", "acceptance.hypothesis_check"]


# ---------------------------------------------------------------- one typed comparison

def test_a_comparison_and_its_stored_report_decide_alike():
    from evolve.verify.comparison import Comparison
    r = _with_hypothesis(SUPPLEMENT, "retrieval_gap/multi_hop")
    r = {**r, "cost": {"words_parent": 100.0, "words_candidate": 120.0},
         "secondary": report(CLEAN)["paired"] | {}, "multiple_testing": {"method": "holm", "family": ["a", "b"],
                                                                          "p_raw": 0.0009, "p_adjusted": 0.0018}}
    r["secondary"] = {k: r["secondary"][k] for k in ("n", "delta", "mcnemar_p", "ci_low", "ci_high")}
    comparison = Comparison.from_report(r)
    assert comparison.problems == {} and comparison.hypothesis.category == "retrieval_gap/multi_hop"
    assert comparison.to_report() == r
    for rules in (D2ACCI, E2MEND, AcceptanceRules(hypothesis_check="record")):
        assert decide(comparison, rules) == decide(r, rules)
    # a malformed optional entry is kept as a problem and decided as incomplete at its rule, not before
    broken = Comparison.from_report({**report(HARM), "holdout": {"n": 3}})
    assert set(broken.problems) == {"holdout"} and decide(broken, D2ACCI).rule == "significant_harm"


def test_the_generated_contract_table_is_what_decide_says():
    from evolve.ops.contract_cases import verdicts
    from evolve.cli.docs_reference import contract_page
    rows = {line.split(" | ")[0]: line.strip(" |").split(" | ")[2:] for line in contract_page().splitlines()
            if line.startswith("| `")}
    for case, by_config in verdicts().items():
        assert rows[f"| `{case}`"] == [f"{d.verdict.value} (`{d.rule}`)" for d in by_config.values()]
