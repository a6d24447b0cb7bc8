"""Fail-fast gates: each gate's refusal and pass, ordering, and the diff vocabulary."""
from __future__ import annotations

import copy
import json

import pytest

from evolve.strategy.diff import change_keys, effective_diff as strategy_diff
from evolve.verify.gates import GATES, GateContext, run_gates
from evolve.data import BASELINE_PATH
from evolve.strategy.artifact import StrategyError, derive, load_strategy, policy_hash

BASE = load_strategy(BASELINE_PATH)
SYMPTOM = "retrieval_gap/multi_hop"


def gate(candidate: dict, ctx: GateContext | None = None, parent: dict = BASE):
    return run_gates(candidate, parent, ctx or GateContext())


def with_prompt(section: str, **changes) -> dict:
    child = derive(BASE, {})
    child[section]["prompt"].update(changes)
    return child


def test_valid_candidate_passes_every_gate_in_order():
    trail = gate(derive(BASE, {"retrieval.top_k": 8}))
    assert trail.passed and trail.decided_by is None
    assert [r.name for r in trail.results] == [name for name, _ in GATES]
    data = json.loads(json.dumps(trail.to_dict()))
    assert data["passed"] is True and len(data["results"]) == 5


def test_schema_refuses_invariant_and_unknown_field_with_the_error_text():
    trail = gate(derive(BASE, {"extraction.window_overlap": 4}))
    assert trail.decided_by == "schema" and len(trail.results) == 1
    assert "extraction.window_overlap" in trail.results[0].reason and "window_size" in trail.results[0].reason
    trail = gate(derive(BASE, {"retrieval.magic": 1}))
    assert trail.decided_by == "schema" and "retrieval.magic: unknown field" in trail.results[0].reason


def test_novelty_refuses_parent_copies_and_policies_met_before_saying_how_they_were_met():
    renamed = derive(BASE, {"name": "same-policy"})
    assert gate(renamed).decided_by == "novelty"
    child = derive(BASE, {"retrieval.top_k": 6})
    trail = gate(child, GateContext(seen={policy_hash(child): "evaluated in r001-c00"}))
    assert trail.decided_by == "novelty" and trail.results[-1].reason.endswith("already evaluated in r001-c00")
    trail = gate(child, GateContext(seen={policy_hash(child): "refused in r002-c01 by critic"}))
    assert trail.results[-1].reason.endswith("already refused in r002-c01 by critic")
    assert gate(child, GateContext(seen={policy_hash(BASE): "current"})).passed


def test_novelty_refuses_an_override_equal_to_the_base_weights():
    same = derive(BASE, {"retrieval.intent_overrides": {"temporal": {"weights": dict(BASE["retrieval"]["weights"])}}})
    trail = gate(same)
    assert trail.decided_by == "novelty" and "no effective change" in trail.results[-1].reason


def test_ranges_refuses_a_step_beyond_max_step():
    trail = gate(derive(BASE, {"retrieval.top_k": 16}))  # max_step 10
    assert trail.decided_by == "ranges"
    assert "retrieval.top_k" in trail.results[-1].reason and "max_step 10" in trail.results[-1].reason
    assert gate(derive(BASE, {"retrieval.top_k": 15})).passed  # exactly max_step
    assert gate(derive(BASE, {"extraction.dedup_threshold": 1.0})).passed  # 0.1 in floating point


def test_ranges_refuses_non_evolvable_paths():
    trail = gate(derive(BASE, {"version": 2, "retrieval.top_k": 6}))
    assert trail.decided_by == "ranges" and "version: not an evolvable path" in trail.results[-1].reason


def test_ranges_measures_intent_overrides_from_the_base_weight():
    weights = dict(BASE["retrieval"]["weights"])
    near = derive(BASE, {"retrieval.intent_overrides": {"temporal": {"weights": {**weights, "bm25": 2.0}}}})
    assert gate(near).passed
    far = derive(BASE, {"retrieval.intent_overrides": {"temporal": {"weights": {**weights, "bm25": 2.5}}}})
    trail = gate(far)
    assert trail.decided_by == "ranges"
    assert "retrieval.intent_overrides.temporal.weights.bm25" in trail.results[-1].reason


def test_prompt_template_change_needs_a_version_bump():
    template = BASE["answering"]["prompt"]["template"].replace("Be brief.", "Be brief and exact.")
    trail = gate(with_prompt("answering", template=template))
    assert trail.decided_by == "prompt_integrity" and "answering.prompt.version" in trail.results[-1].reason
    bumped = with_prompt("answering", template=template, version=2)
    assert gate(bumped).passed
    assert change_keys(BASE, bumped) == ["answering.prompt::set:answer.short@v2"]


def test_prompt_keeps_its_id_and_parent_markers():
    trail = gate(with_prompt("expansion", id="expand.other", version=2, template="Q: {question}\nSUBQUERIES:"))
    assert trail.decided_by == "prompt_integrity" and "expansion.prompt.id" in trail.results[-1].reason
    dropped = with_prompt("extraction", version=2, template="Extract facts from {window}",
                          required_markers=["{window}"])
    trail = gate(dropped)
    assert trail.decided_by == "prompt_integrity" and "FACTS:" in trail.results[-1].reason


def test_prompt_version_bump_without_content_change_is_refused():
    trail = gate(with_prompt("answering", version=2))
    assert trail.decided_by == "prompt_integrity" and "without a content change" in trail.results[-1].reason


def test_replay_stability_refuses_repeatedly_reverted_changes():
    child = derive(BASE, {"retrieval.top_k": 8})
    effects = {"retrieval.top_k::increase": {"tries": 3, "reverts": 2, "reverts_by_symptom": {SYMPTOM: 2}}}
    trail = gate(child, GateContext(dimension_effects=effects, symptom=SYMPTOM))
    assert trail.decided_by == "replay_stability" and "retrieval.top_k::increase" in trail.results[-1].reason
    assert gate(child, GateContext(dimension_effects=effects, symptom=SYMPTOM, max_reverts=3)).passed
    assert gate(child, GateContext(dimension_effects=effects, symptom="ingestion_gap/temporal")).passed
    assert gate(child, GateContext(dimension_effects=effects, symptom=None)).passed
    lower = derive(BASE, {"retrieval.candidate_pool": 40})
    effects["retrieval.candidate_pool::increase"] = {"reverts_by_symptom": {SYMPTOM: 5}}
    assert gate(lower, GateContext(dimension_effects=effects, symptom=SYMPTOM)).passed


def test_invalid_parent_raises():
    broken = copy.deepcopy(BASE)
    del broken["retrieval"]
    with pytest.raises(StrategyError, match="parent"):
        run_gates(BASE, broken, GateContext())


def test_change_keys_and_diff_name_every_direction():
    child = derive(BASE, {
        "retrieval.top_k": 8, "retrieval.rrf_kappa": 50, "retrieval.rerank.enabled": True,
        "features.session_memory": False, "assembly.format": "json", "name": "child",
    })
    assert change_keys(BASE, child) == [
        "assembly.format::set:json", "features.session_memory::disable", "retrieval.rerank.enabled::enable",
        "retrieval.rrf_kappa::decrease", "retrieval.top_k::increase",
    ]
    assert strategy_diff(BASE, child)["retrieval.top_k"] == [5, 8]
    assert "name" not in strategy_diff(BASE, child)
    assert change_keys(BASE, BASE) == []
