"""The safe rate, the confabulation guard and the multiple-testing adjustment as `memevolve show` and the report
print them."""
from __future__ import annotations

from pathlib import Path

from evolve.state.record import CandidateRecord
from evolve.ops.history import History
from evolve.ops.report import _facts
from evolve.ops.review import render_record
from evolve.state.records import dump_record
from evolve.state.stores import RoundBundle, StoreSet
from evolve.verify.confabulation import safe_rate
from evolve.verify.decision import Decision, Verdict
from evolve.verify.multiplicity import Adjustment
from evolve.verify.statistics import PairedBrief, paired_comparison


def record() -> CandidateRecord:
    base = {f"q{i}": {"correct": i < 5, "category": "temporal"} for i in range(20)}
    cand = {f"q{i}": {"correct": i < 15, "category": "temporal"} for i in range(20)}
    r = CandidateRecord("r001-c01", 1, {"key": "answering.span::set"}, "generation_error/*", "0" * 64, {},
                        paired=paired_comparison(base, cand, n_resamples=200), dcr=1.0,
                        summary={"answers": {"correct": 15, "abstain": 1, "confabulated": 4}},
                        confabulation=PairedBrief(20, 0.15, 0.03, 0.05, 0.3),
                        multiple_testing=Adjustment("holm", ["r001-c00", "r001-c01"], 0.002, 0.004))
    r.close(Decision(Verdict.REJECT, "confabulation: ...", "confabulation"), "decision")
    return r


def test_safe_rate_counts_correct_and_abstaining_answers():
    assert safe_rate({"correct": 15, "abstain": 1, "confabulated": 4}) == 0.8
    assert safe_rate({}) is None and safe_rate(None) is None


def test_show_and_report_print_the_safe_rate_guard_and_adjustment(tmp_path: Path):
    with StoreSet(tmp_path) as stores:
        stores.commit_round(1, RoundBundle(records={"candidate_outcomes": [dump_record(record())]}))
    text = render_record(record(), History(tmp_path))
    assert "answers: correct 15, abstain 1, confabulated 4; safe rate (correct + abstain) 0.800" in text
    assert "confabulation guard: 20 questions answered by both, confabulation rate Δ +0.1500" in text
    assert "multiple testing: holm over the round's 2 fully compared candidates (r001-c00, r001-c01): " \
           "McNemar p 0.002 -> adjusted 0.004" in text
    facts = _facts(record())
    assert "safe rate (correct + abstain) 0.800" in facts and "holm over 2 compared candidates" in facts
    assert "confabulation Δ +0.1500" in facts
