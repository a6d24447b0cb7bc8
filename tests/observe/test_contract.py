"""The trace contract: our harness's traces are valid records of it and read back with the same outcomes; the
envelope is refused with the field named; an invalid stage is kept out of the stages and of DCR."""
from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from evolve.observe.contract import (DCR_STAGES, ContractError, check, dcr_stages, from_trace, schema, to_trace,
                                     valid_stages)
from evolve.observe.diagnosis import dcr
from evolve.observe.harness import Harness
from evolve.observe.objective import OBJECTIVES, success
from evolve.observe.trace import STAGE_FIELDS
from evolve.benchmarks import load_benchmark


@pytest.fixture(scope="module")
def run(baseline_strategy, embedder):
    bench = load_benchmark("synthetic:0")
    return Harness(bench).evaluate(baseline_strategy, [q.id for q in bench.questions][:40])


def test_harness_traces_are_valid_contract_records_with_the_same_outcomes(run):
    validator = Draft202012Validator(schema())
    for trace in run.traces:
        record = from_trace(trace)
        assert not list(validator.iter_errors(record)), trace.question_id
        again = to_trace(check(record, trace.question_id))
        assert valid_stages(record) == again.stages == [*list(STAGE_FIELDS)[:4], "constraint", "generation", "results"]
        assert record["trace_version"] == "2" and record["constraints"][0].startswith("token_budget:")
        assert again.dcr_stages == list(DCR_STAGES) or not (record["stored"] or trace.gold_evidence)
        assert {o: success(again, o) for o in OBJECTIVES} == {o: success(trace, o) for o in OBJECTIVES}
        assert again.context_tokens == trace.context_tokens


def test_the_envelope_is_refused_naming_the_field():
    with pytest.raises(ContractError, match="f.jsonl:3: .*'id' is a required property"):
        check({"trace_version": "1", "category": "temporal"}, "f.jsonl:3")
    with pytest.raises(ContractError, match="f.jsonl:1: gold.evidence.0: 3 is not of type 'string'"):
        check({"trace_version": "1", "id": "a", "category": "c", "gold": {"evidence": [3]}}, "f.jsonl:1")
    with pytest.raises(ContractError, match="Additional properties are not allowed \\('answers' was unexpected"):
        check({"trace_version": "1", "id": "a", "category": "c", "answers": "x"}, "f.jsonl:1")
    with pytest.raises(ContractError, match="trace_version: '3' is not one of \\['1', '2'\\]"):
        check({"trace_version": "3", "id": "a", "category": "c"}, "f.jsonl:1")


def test_an_invalid_stage_is_not_recorded_but_the_record_is_read():
    record = check({"trace_version": "1", "id": "a", "category": "c", "retrieved": [{"id": "m1"}],
                    "packed": [{"text": "Paris", "source_ids": ["D1:1"]}], "answer": "Paris",
                    "judge": {"correct": False}}, "here")
    assert valid_stages(record) == ["assembly", "generation", "results"]  # retrieved lacks ranks
    trace = to_trace(record)
    assert trace.retrieved == [] and trace.dcr_stages == ["assembly", "generation"]
    assert dcr([trace], 2) == 1.0 and dcr([trace], 3) == 0.0


FULL = {"id": "a", "category": "c", "gold": {"answer": "Paris", "evidence": ["D1:1"]}, "stored": ["m1"],
        "retrieved": [{"id": "m1", "rank": 1, "score": 0.5, "source_ids": ["D1:1"]}],
        "filtered": [{"id": "m1", "decision": "kept", "reason": "passed"}],
        "packed": [{"text": "Paris", "source_ids": ["D1:1"]}], "constraints": ["token_budget:160"],
        "answer": "Paris", "judge": {"correct": True}}


def test_dcr_counts_the_six_stages_of_the_paper():
    """Answer and judge are one stage, constraints are one, retrieval counts with its scores; a log of the packed
    context, answer and judge counts 2 stages (it reached DCR@3 under the first count)."""
    assert dcr_stages({**FULL, "trace_version": "2"}) == list(DCR_STAGES)
    v1 = {k: v for k, v in FULL.items() if k != "constraints"}
    assert dcr_stages(check({**v1, "trace_version": "1"}, "v1")) == [s for s in DCR_STAGES if s != "constraint"]
    assert dcr_stages({**FULL, "retrieved": [{"id": "m1", "rank": 1}]}) == [s for s in DCR_STAGES
                                                                            if s != "retrieval"]
    assert dcr_stages({**FULL, "judge": None}) == list(DCR_STAGES[:5])  # an answer without its verdict
    packed_only = {k: FULL[k] for k in ("id", "category", "packed", "answer", "judge")}
    assert dcr_stages(packed_only) == ["assembly", "generation"]


def test_an_empty_stage_counts_only_where_emptiness_is_its_result():
    empty = {**FULL, "stored": [], "retrieved": [], "filtered": [], "packed": [], "constraints": []}
    # nothing of the named gold turns stored is a result; an empty retrieval over an empty store, and what follows
    # from retrieving nothing, are not
    assert dcr_stages(empty) == ["ingestion", "generation"]
    assert dcr_stages({**empty, "gold": {"answer": "Paris"}}) == ["generation"]
    some = {**FULL, "filtered": [], "packed": [], "constraints": []}  # retrieved items, none filtered or packed
    assert dcr_stages(some) == list(DCR_STAGES)
    assert dcr_stages({**empty, "stored": ["m1"]}) == ["ingestion", "retrieval", "generation"]


def test_outcomes_of_a_record_from_another_system():
    record = {"trace_version": "1", "id": "a", "category": "temporal",
              "gold": {"answer": "7 May 2023", "evidence": ["D1:3", "D1:9"]},
              "packed": [{"text": "On 7 May 2023 she went", "source_ids": ["D1:3"]},
                         {"text": "unrelated", "source_ids": ["D2:1"]}]}
    trace = to_trace(check(record, "here"))
    assert trace.answer_in_evidence is True and trace.all_evidence_packed is False
    assert trace.packed_evidence == ["D1:3"] and trace.context_tokens == 7
    assert to_trace({**record, "packed_evidence": ["D1:3", "D1:9"]}).all_evidence_packed is True
