"""Layer-A root causes on constructed traces, DCR, and the deterministic judge."""
import pytest

from evolve.observe.diagnosis import dcr, dcr_by_tau, diagnose, recorded_stages, root_cause_counts
from evolve.observe.trace import DCR_TAUS, STAGE_FIELDS, Trace
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


RESULTS = {"question_id": "q", "category": "single_hop", "correct": False, "scored": True}
#: Each stage's fields, as the harness records them (filtering by either of its two fields).
STAGE_RECORD = {"ingestion": {"stored_ids": ["m1"]},
                "retrieval": {"retrieved": [{"id": "m1", "rank": 1, "score": 0.5, "source_ids": ["D1:1"]}]},
                "filtering": {"filtered": []},
                "assembly": {"packed": [{"id": "m1", "text": "x", "source_ids": ["D1:1"]}]},
                "generation": {"answer": "x", "answer_support": ["m1"]}}


def recorded(*stages: str, **extra) -> Trace:
    record = dict(RESULTS)
    for stage in stages:
        record.update(STAGE_RECORD[stage])
    return Trace.from_dict({**record, **extra})


def test_dcr_of_a_results_only_log_is_zero():
    """The verdict alone is no stage: generation is the answer with its verdict."""
    log = [recorded(), recorded(correct=True)]
    assert [t.stages for t in log] == [["results"], ["results"]]
    assert {tau: dcr(log, tau) for tau in DCR_TAUS} == {1: 0.0, 3: 0.0, 5: 0.0, 6: 0.0}
    assert dcr_by_tau(log) == {"1": 0.0, "3": 0.0, "5": 0.0, "6": 0.0}


def test_a_claimed_stage_list_is_not_trusted():
    assert recorded(stages=list(STAGE_FIELDS)).stages == ["results"]


def test_each_missing_stage_lowers_dcr_at_six():
    full = recorded(*STAGE_RECORD)
    assert full.stages == list(STAGE_FIELDS)
    for stage in STAGE_RECORD:
        partial = recorded(*(s for s in STAGE_RECORD if s != stage))
        assert stage not in partial.stages and len(partial.stages) == 5
        assert dcr([full, partial], 6) == 0.5 < dcr([full, full], 6) == 1.0


def test_filtering_counts_only_when_recorded():
    assert "filtering" not in recorded("ingestion", "retrieval", "assembly").stages
    assert "filtering" in recorded(dropped=[]).stages and "filtering" in recorded(filtered=[]).stages
    assert "filtering" not in recorded(filtered=None, dropped=None).stages
    assert "generation" not in recorded(answer="x").stages  # an answer without its support


def test_dcr_at_each_tau_over_the_scored_failures():
    log = [recorded(*STAGE_RECORD), recorded("ingestion", "retrieval", "filtering", "assembly"),
           recorded("ingestion", "retrieval"), recorded(), recorded(*STAGE_RECORD, scored=False),
           recorded(correct=True)]
    assert [len(t.stages) for t in log] == [6, 5, 3, 1, 6, 1]
    # counted: 6; 5 (the constraints come with the assembly, no answer); 2; 0 (a verdict alone)
    assert [len(recorded_stages(t)) for t in log[:4]] == [6, 5, 2, 0]
    assert dcr_by_tau(log) == {"1": 0.75, "3": 0.5, "5": 0.5, "6": 0.25}
    assert dcr([], 3) == 1.0 == dcr([recorded(correct=True)], 6)  # nothing failed: nothing to diagnose


def test_dcr_over_a_named_failure_set():
    log = [recorded(*STAGE_RECORD, question_id="a"), recorded(question_id="b")]
    assert dcr(log, 3, failures={"a"}) == 1.0 and dcr(log, 3, failures={"b"}) == 0.0
    assert dcr(log, 3, failures={"a", "b"}) == 0.5


def test_an_invalid_or_empty_stage_record_does_not_count():
    unranked = recorded("ingestion", "filtering", "assembly", retrieved=[{"id": "m1"}])
    assert "retrieval" in unranked.stages and dcr([unranked], 5) == 0.0  # a field present, but not schema-valid
    assert dcr([recorded(*STAGE_RECORD, answer="")], 6) == 0.0  # an empty answer is no answer
    assert dcr([Trace("q", "single_hop")], 1) == 0.0  # built in code with nothing in it: no stage is recorded


def test_a_trace_built_in_code_records_the_stages_it_names():
    t = diagnose(trace())
    assert Trace(question_id="q", category="single_hop").stages == []
    assert t.stages == ["ingestion", "retrieval", "filtering", "assembly", "results"]  # no answer_support recorded


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
