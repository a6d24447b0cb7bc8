"""Deterministic critic labels and their precedence, on diffs of real strategies."""
from __future__ import annotations

import json

import pytest

from evolve.verify.critic import CriticPacket, DeterministicCritic, group_of
from evolve.strategy.diff import change_keys, effective_diff as strategy_diff
from evolve.data import BASELINE_PATH
from evolve.strategy.artifact import derive, load_strategy

BASE = load_strategy(BASELINE_PATH)
CRITIC = DeterministicCritic()


def packet(changes: dict, root_cause: str | None = "retrieval_gap", category: str = "multi_hop",
           **extra) -> CriticPacket:
    child = derive(BASE, changes)
    return CriticPacket(strategy_diff(BASE, child), change_keys(BASE, child), root_cause, category, **extra)


def test_in_scope_change_is_actionable():
    review = CRITIC.review(packet({"retrieval.top_k": 7}))
    assert review.label == "actionable" and not review.blocks
    assert "retrieval.top_k::increase" in review.reasons[0]


@pytest.mark.parametrize("root_cause, changes", [
    ("ingestion_gap", {"extraction.supplement": True}),
    ("retrieval_gap", {"expansion.keywords": True}),
    ("kf_filtered", {"assembly.token_budget": 256}),
    ("generation_error", {"answering.span": "sentence"}),
])
def test_each_root_cause_maps_to_its_stage(root_cause, changes):
    assert CRITIC.review(packet(changes, root_cause)).label == "actionable"


def test_change_outside_the_symptom_stage_is_out_of_scope():
    review = CRITIC.review(packet({"assembly.format": "json"}, "retrieval_gap"))
    assert review.label == "out_of_scope" and review.blocks
    assert "retrieval" in review.reasons[0] and "assembly" in review.reasons[0]


def test_prompt_changes_belong_to_their_section_stage():
    assert group_of("answering.prompt.template") == "answering"
    assert group_of("extraction.prompt.version") == "ingestion"
    assert group_of("retrieval.intent_overrides.temporal.weights.vector") == "retrieval"
    assert group_of("version") is None
    child = derive(BASE, {"answering.prompt.template": BASE["answering"]["prompt"]["template"] + "Be exact.\n",
                          "answering.prompt.version": 2})
    p = CriticPacket(strategy_diff(BASE, child), change_keys(BASE, child), "generation_error", "temporal")
    assert CRITIC.review(p).label == "actionable"


def test_root_cause_without_stage_skips_the_scope_check():
    review = CRITIC.review(packet({"assembly.format": "json"}, "unresolved"))
    assert review.label == "actionable" and "scope not checked" in review.reasons[0]


def test_same_keys_as_a_recent_candidate_is_duplicate():
    p = packet({"retrieval.top_k": 7, "expansion.keywords": True},
               recent_keys=[["retrieval.top_k::decrease"], ["retrieval.top_k::increase", "expansion.keywords::enable"]])
    review = CRITIC.review(p)
    assert review.label == "duplicate" and review.blocks
    other = packet({"retrieval.top_k": 7}, recent_keys=[["retrieval.top_k::decrease"]])
    assert CRITIC.review(other).label == "actionable"


def test_bad_reputation_is_risky():
    review = CRITIC.review(packet({"retrieval.top_k": 7}, reputations={"retrieval.top_k::increase": -0.8}))
    assert review.label == "risky" and not review.blocks and "reputation" in review.reasons[0]
    fine = packet({"retrieval.top_k": 7}, reputations={"retrieval.top_k::increase": -0.2, "other::enable": -5.0})
    assert CRITIC.review(fine).label == "actionable"


def test_large_jump_is_risky():
    review = CRITIC.review(packet({"retrieval.top_k": 11}))  # 6 > 0.5 * max_step 10
    assert review.label == "risky" and "jump 6" in review.reasons[0]
    assert CRITIC.review(packet({"retrieval.top_k": 10})).label == "actionable"  # exactly half
    assert DeterministicCritic(jump_fraction=1.0).review(packet({"retrieval.top_k": 11})).label == "actionable"


def test_label_precedence_out_of_scope_then_duplicate_then_risky():
    keys = ["assembly.format::set:json"]
    p = packet({"assembly.format": "json"}, "retrieval_gap", recent_keys=[keys])
    assert CRITIC.review(p).label == "out_of_scope"
    p = packet({"retrieval.top_k": 12}, recent_keys=[["retrieval.top_k::increase"]])
    assert CRITIC.review(p).label == "duplicate"


def test_empty_diff_is_out_of_scope_and_reviews_serialise():
    empty = CriticPacket({}, [], "retrieval_gap", "temporal")
    assert CRITIC.review(empty).label == "out_of_scope"
    p = packet({"retrieval.top_k": 7}, examples=[{"question_id": "q1", "question": "When?", "category": "temporal"}])
    data = json.loads(json.dumps({"packet": p.to_dict(), "review": CRITIC.review(p).to_dict()}))
    assert data["review"] == {"label": "actionable", "reasons": data["review"]["reasons"], "blocks": False}
    assert data["packet"]["diff"] == {"retrieval.top_k": [5, 7]}
    with pytest.raises(ValueError, match="jump_fraction"):
        DeterministicCritic(jump_fraction=0)


def test_scope_follows_the_evidence_loss_ladder():
    from evolve.verify.critic import CriticPacket, DeterministicCritic, fixing_groups

    critic = DeterministicCritic()
    upstream = CriticPacket({"assembly.source_window": [0, 1]}, ["assembly.source_window::increase"],
                            "generation_error", "single_hop")
    downstream = CriticPacket({"answering.max_answer_tokens": [12, 14]}, ["answering.max_answer_tokens::increase"],
                              "ingestion_gap", "single_hop")
    assert critic.review(upstream).label == "actionable"
    assert critic.review(downstream).label == "out_of_scope"
    assert fixing_groups("retrieval_gap") == ("ingestion", "retrieval")


def test_a_probe_loss_makes_the_critic_call_the_change_risky():
    child = derive(BASE, {"retrieval.top_k": BASE["retrieval"]["top_k"] + 1})
    fell = CriticPacket(strategy_diff(BASE, child), change_keys(BASE, child), "retrieval_gap", "temporal",
                        probe={"n": 80, "delta": -0.025})
    review = DeterministicCritic().review(fell)
    assert review.label == "risky" and "probe: the objective fell -0.0250 on 80 questions" in review.reasons
    rose = CriticPacket(fell.diff, fell.change_keys, "retrieval_gap", "temporal", probe={"n": 80, "delta": 0.025})
    assert DeterministicCritic().review(rose).label == "actionable"
