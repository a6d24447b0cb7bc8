"""Layer-A root causes on constructed traces, DCR, and the deterministic judge."""
import pytest

from evolve.observe.diagnosis import dcr, diagnose, root_cause_counts
from evolve.observe.trace import Trace
from evolve.observe.judge import TokenF1Judge, evidence_recall, token_f1


def trace(correct=False, known=True, stored=("m1",), retrieved=(("m1", ("D1:1",)),), packed=(("m1", ("D1:1",)),),
          category="single_hop"):
    return Trace.from_dict({
        "question_id": "q", "category": category, "correct": correct, "scored": True,
        "gold_evidence": ["D1:1"] if known else [], "evidence_known": known, "stored_ids": list(stored),
        "intent": "single_hop", "retrieved": [{"id": i, "source_ids": list(s)} for i, s in retrieved],
        "filtered": [], "packed": [{"id": i, "source_ids": list(s)} for i, s in packed], "dropped": [],
        "token_budget": 100, "answer": "x", "judge": {"name": "token-f1@0.5"},
    })


@pytest.mark.parametrize("kwargs,cause", [
    ({"correct": True}, None),
    ({"known": False}, "unresolved"),
    ({"stored": ()}, "ingestion_gap"),
    ({"retrieved": (("m2", ("D1:2",)),)}, "retrieval_gap"),
    ({"packed": (("m2", ("D1:2",)),)}, "kf_filtered"),
    ({}, "generation_error"),
])
def test_each_root_cause_branch(kwargs, cause):
    assert diagnose(trace(**kwargs)).root_cause == cause


def test_dcr_counts_failures_with_enough_stages():
    full = diagnose(trace())
    assert len(full.stages) == 5
    thin = diagnose(trace(retrieved=(("m2", ("D1:2",)),)))
    thin.stages = ["ingestion", "retrieval"]
    unresolved = diagnose(trace(known=False))
    assert dcr([full, thin, unresolved], tau=3) == pytest.approx(1 / 3)
    assert dcr([diagnose(trace(correct=True))]) == 1.0


def test_root_cause_counts_by_category():
    traces = [diagnose(trace(stored=())), diagnose(trace(category="temporal")), diagnose(trace(correct=True))]
    overall, by_cat = root_cause_counts(traces)
    assert overall == {"ingestion_gap": 1, "generation_error": 1}
    assert by_cat == {"single_hop": {"ingestion_gap": 1}, "temporal": {"generation_error": 1}}


def test_token_f1_and_judge():
    assert token_f1("7 May 2023", "7 May, 2023") == 1.0
    assert token_f1("the cat", "a dog") == 0.0
    assert token_f1("green", "Green.") == 1.0
    judge = TokenF1Judge(0.5)
    assert judge.judge("q", "green", "now green").correct
    long = judge.judge("q", "green", "she said her favorite color is now green after all")
    assert not long.correct and 0 < long.score < 0.5
    with pytest.raises(ValueError):
        TokenF1Judge(0)


def test_evidence_recall_at_k():
    sources = [["D1:9"], ["D1:1"], ["D1:2", "D1:3"]]
    assert evidence_recall(["D1:1", "D1:2"], sources, 1) == 0.0
    assert evidence_recall(["D1:1", "D1:2"], sources, 2) == 0.5
    assert evidence_recall(["D1:1", "D1:2"], sources, 10) == 1.0
