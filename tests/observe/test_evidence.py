"""The evidence objective: which gold turns the packed context carries, and the per-question outcome."""
from __future__ import annotations

import pytest

from evolve.observe.evidence import carries, packed_evidence
from evolve.observe.objective import outcomes, score, success
from evolve.observe.trace import Trace

TURNS = {"D1:1": "I adopted a grey kitten called Luna from the shelter last week.",
         "D1:2": "My sister Maria moved to Lisbon for her new job at the aquarium.",
         "D1:3": "Nothing much, just watching football with friends tonight."}


def item(text: str, *sources: str) -> dict:
    return {"id": f"x{hash(text) % 1000}", "text": text, "source_ids": list(sources)}


def test_a_fact_from_the_turn_carries_it():
    assert carries("Caroline adopted a grey kitten called Luna", TURNS["D1:1"])
    assert packed_evidence(["D1:1"], TURNS, [item("Caroline adopted a grey kitten called Luna", "D1:1")]) == ["D1:1"]


def test_a_summary_that_only_cites_a_turn_does_not_carry_it():
    summary = item("Session 1: pets, family news, weekend plans and sports.", "D1:1", "D1:2", "D1:3")
    assert packed_evidence(["D1:1", "D1:2"], TURNS, [summary]) == []


def test_content_without_the_source_id_does_not_count():
    assert packed_evidence(["D1:2"], TURNS, [item(TURNS["D1:2"], "D1:3")]) == []


def make(evidence_known: bool, packed: list[str], known: list[str], correct: bool = False, **kw) -> Trace:
    t = Trace("q", "single_hop", gold_evidence=known, evidence_known=evidence_known, correct=correct, **kw)
    if evidence_known:
        t.packed_evidence = packed
        t.evidence_share = len(packed) / len(known)
        t.all_evidence_packed = len(packed) == len(known)
    return t


@pytest.mark.parametrize("packed, expected", [(["D1:1", "D1:2"], True), (["D1:1"], False), ([], False)])
def test_success_needs_every_known_gold_turn(packed, expected):
    trace = make(True, packed, ["D1:1", "D1:2"], correct=not expected)
    assert success(trace, "evidence") is expected
    assert success(trace, "accuracy") is (not expected)  # the accuracy objective reads the judge only


def test_unknown_evidence_and_unscored_questions_are_left_out():
    unknown = make(False, [], [], correct=True)
    assert success(unknown, "evidence") is None and success(unknown, "accuracy") is True
    unscored = make(True, ["D1:1"], ["D1:1"], scored=False)
    assert success(unscored, "evidence") is None and success(unscored, "accuracy") is None
    known = make(True, ["D1:1"], ["D1:1"])
    known.question_id = "k"
    assert outcomes([unknown, unscored, known], "evidence") == {"k": {"correct": True, "category": "single_hop"}}


def test_summary_reports_evidence_and_cost_figures_whatever_the_objective():
    from evolve import BASELINE_PATH, Harness, load_benchmark, load_strategy

    bench = load_benchmark("synthetic:0:2")
    run = Harness(bench).evaluate(load_strategy(BASELINE_PATH))
    m = run.summary
    known = [t for t in run.traces if t.scored and t.evidence_known]
    assert m.n_evidence_known == len(known) > 0
    assert m.all_evidence_packed == pytest.approx(sum(t.all_evidence_packed for t in known) / len(known), abs=1e-4)
    assert score(m, "evidence") == m.all_evidence_packed and score(m, "accuracy") == m.accuracy
    assert 0 < m.context_words["mean"] <= m.context_words["p95"] <= max(t.token_budget for t in run.traces)
    assert m.retrieval_ms["p50"] <= m.retrieval_ms["p95"]
    texts = {cid: {turn.id: turn.text for turn in c.turns()} for cid, c in bench.conversations.items()}
    for t in known:  # the packed text is in the trace, so anyone can recheck the claim from the trace alone
        assert t.packed_evidence == packed_evidence(t.gold_evidence, texts[t.conversation_id], t.packed)
    assert 0 < sum(t.all_evidence_packed for t in known) < len(known)
