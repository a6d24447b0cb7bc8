"""Candidate records written by earlier code read back typed, re-serialise byte for byte and still verify against
their journal; every stage outcome survives the round trip."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evolve.canonical import canonical_json
from evolve.ops.history import History
from evolve.files import StoreError
from evolve.state.records import dump_record, load_record, stage_outcomes
from evolve.verify.critic import CriticReview
from evolve.verify.decision import Decision, Verdict
from evolve.verify.gates import GateResult, GateTrail
from evolve.verify.outcomes import ContextCost, HoldoutComparison, ProbeOutcome
from evolve.verify.statistics import PairedBrief, PairedReport

#: Stores written by commit 6991b56 (stage outcomes stored as plain dicts): an evidence run with a holdout and
#: cost limits, and an accuracy run.
OLD_STORES = Path(__file__).parents[1] / "fixtures" / "stores_6991b56"


@pytest.mark.parametrize("name", ["evidence", "accuracy"])
def test_records_of_an_earlier_version_read_typed_and_re_serialise_byte_identically(name, tmp_path):
    root = tmp_path / name
    shutil.copytree(OLD_STORES / name, root)
    lines = (root / "candidate_outcomes.jsonl").read_text().splitlines()
    history = History(root)
    records = history.records
    assert [canonical_json(dump_record(r)) for r in records] == lines
    assert history.record_problems() == []
    audits = [json.loads(line) for line in (root / "stage_audits.jsonl").read_text().splitlines()]
    # the same outcomes per candidate and stage (the stores' audit order is the pipeline's of their day: the critic
    # then ran before the probe)
    assert {(a["candidate_id"], a["stage"]): a["outcome"] for a in audits} == \
        {(r.candidate_id, stage): outcome for r in records for stage, outcome in stage_outcomes(r).items()}
    assert len(audits) == sum(len(stage_outcomes(r)) for r in records)
    assert all(isinstance(r.decision, Decision) and isinstance(r.gates, GateTrail) and isinstance(r.probe, ProbeOutcome)
               for r in records)
    evaluated = [r for r in records if r.paired is not None]
    assert evaluated and all(isinstance(r.paired, PairedReport) and isinstance(r.cost, ContextCost)
                             for r in evaluated)
    if name == "evidence":
        assert any(isinstance(r.holdout, HoldoutComparison) for r in records)
        assert all(r.probe.packed_contexts_changed is not None and r.probe.answers_changed is None for r in records)
    else:
        assert all(r.probe.answers_changed is not None and r.probe.packed_contexts_changed is None for r in records)


def test_an_edited_record_no_longer_verifies(tmp_path):
    root = tmp_path / "evidence"
    shutil.copytree(OLD_STORES / "evidence", root)
    path = root / "candidate_outcomes.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[-1]["probe"]["delta"] += 0.5
    path.write_text("".join(canonical_json(r) + "\n" for r in rows))
    problems = History(root).record_problems()
    assert problems == [f"{rows[-1]['candidate_id']}: the record's evidence does not hash to the report_hash of "
                        f"journal entry {History(root).decision_entries[rows[-1]['candidate_id']].index}"]


def test_screen_outcomes_and_a_refusing_gate_survive_the_round_trip():
    record = load_record(json.loads((OLD_STORES / "evidence" / "candidate_outcomes.jsonl").read_text()
                                    .splitlines()[0]))
    record.gates = GateTrail([GateResult("schema", True, "ok"), GateResult("novelty", False, "seen")])
    record.critic = CriticReview("duplicate", ["same keys"])
    record.evidence_screen = PairedBrief(30, -0.1, 0.01, -0.2, -0.03)
    record.decision = Decision(Verdict.REJECT, "seen", "gate:novelty")
    stored = json.loads(canonical_json(dump_record(record)))
    assert stored["gates"] == {"passed": False, "decided_by": "novelty", "results": [
        {"name": "schema", "passed": True, "reason": "ok"}, {"name": "novelty", "passed": False, "reason": "seen"}]}
    assert stored["critic"] == {"label": "duplicate", "reasons": ["same keys"], "blocks": True}
    assert stored["evidence_screen"] == {"n": 30, "delta": -0.1, "mcnemar_p": 0.01, "ci_low": -0.2, "ci_high": -0.03}
    again = load_record(stored)
    assert again == record and canonical_json(dump_record(again)) == canonical_json(stored)


def test_a_malformed_stage_outcome_is_named():
    row = json.loads((OLD_STORES / "accuracy" / "candidate_outcomes.jsonl").read_text().splitlines()[0])
    del row["paired"]["mcnemar_p"]
    with pytest.raises(StoreError, match=f"record '{row['candidate_id']}' is malformed"):
        load_record(row)
