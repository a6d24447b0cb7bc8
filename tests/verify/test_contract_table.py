"""The decision contract against D²ACCI's table: reports built with its figures reach its verdicts; the round's
multiple-testing adjustment; the confabulation guard branch by branch."""
from __future__ import annotations

import json

import pytest

from evolve.loop.candidate import CandidateResult
from evolve.loop.family import decide_family
from evolve.loop.record import CandidateRecord
from evolve.state.records import decision_report, dump_record, load_record
from evolve.verify.decision import AcceptanceRules, CostLimits, Verdict, decide
from evolve.verify.multiplicity import adjust
from evolve.verify.statistics import PairedBrief, PairedReport, paired_comparison
from test_statistics import outcomes

#: D²ACCI's pre-specified important slice in its LoCoMo table.
D2ACCI = AcceptanceRules(protected_slices=["multi_hop"])
#: E²MEND's rule: every category vetoes.
E2MEND = AcceptanceRules(protected_slices=["multi_hop"], veto="all_categories")

#: "Supplement": +2.71 pp over 996 questions (45 improved, 18 regressed: McNemar p = 0.0009), multi-hop -2.6 pp.
SUPPLEMENT = [("multi_hop", False, True, 2), ("multi_hop", True, False, 7), ("multi_hop", True, True, 100),
              ("multi_hop", False, False, 83),
              ("single_hop", False, True, 30), ("single_hop", True, False, 6), ("single_hop", True, True, 300),
              ("single_hop", False, False, 164),
              ("temporal", False, True, 13), ("temporal", True, False, 5), ("temporal", True, True, 200),
              ("temporal", False, False, 86)]
#: A clean gain: +3 pp with no slice losing.
CLEAN = [("multi_hop", False, True, 10), ("multi_hop", True, True, 90), ("single_hop", False, True, 20),
         ("single_hop", True, True, 280), ("temporal", False, True, 5), ("temporal", True, True, 95)]
#: Significant harm: -4 pp.
HARM = [("multi_hop", True, False, 8), ("multi_hop", True, True, 92), ("single_hop", True, False, 12),
        ("single_hop", True, True, 288)]
#: Inconclusive: +1 pp, 9 improved against 5 regressed.
NOISE = [("single_hop", False, True, 9), ("single_hop", True, False, 5), ("single_hop", True, True, 386)]


def report(rows, dcr: float = 0.95) -> dict:
    return {"paired": paired_comparison(*outcomes(rows), n_resamples=500).to_dict(), "dcr": dcr}


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
        assert "confident wrong answers rise on 400 questions" in d.reason


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
