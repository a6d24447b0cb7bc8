"""The evidence-loss ladder on constructed traces: each stage reached or not, under both predicates."""
import json

import pytest

from evolve.observe.diagnosis import root_cause
from evolve.observe.ladder import (ANSWER_LOSSES, RUNGS, RootCause, Stage, all_reach, derives_from, lost_at, reaches,
                                   stage_of, through)
from evolve.observe.objective import evidence_root_cause
from evolve.observe.trace import Trace
from evolve.verify.critic import fixing_groups, loss_group

GOLD = ["D1:1", "D1:2"]


def trace(stored=("m1",), retrieved=(("m1", GOLD),), filtered=(), packed=(("m1", GOLD),), carried=GOLD,
          correct=False) -> Trace:
    """A question with gold turns D1:1 and D1:2; ``carried`` are the gold turns the packed context carries."""
    return Trace("q", "single_hop", gold_evidence=list(GOLD), evidence_known=True, stored_ids=list(stored),
                 retrieved=[{"id": i, "rank": r, "source_ids": list(s)} for r, (i, s) in enumerate(retrieved, 1)],
                 filtered=[{"id": i, "reason": "superseded"} for i in filtered],
                 packed=[{"id": i, "text": "t", "source_ids": list(s)} for i, s in packed],
                 packed_evidence=list(carried), all_evidence_packed=list(carried) == GOLD, correct=correct)


def test_stages_and_rungs_follow_the_pipeline():
    assert [s.value for s in Stage] == ["ingestion", "retrieval", "filtering", "assembly", "generation"]
    assert list(RUNGS) == [Stage.INGESTION, Stage.RETRIEVAL, Stage.ASSEMBLY, Stage.GENERATION]
    assert through(Stage.FILTERING) == (Stage.INGESTION, Stage.RETRIEVAL, Stage.FILTERING)
    assert stage_of("kf_filtered") is Stage.ASSEMBLY and stage_of("unresolved") is None and stage_of("x") is None
    assert set(ANSWER_LOSSES.values()) < set(RootCause)


def test_values_serialise_as_plain_strings():
    assert json.dumps({RootCause.KF_FILTERED: [Stage.FILTERING]}) == '{"kf_filtered": ["filtering"]}'
    assert f"{RootCause.RETRIEVAL_GAP}/temporal" == "retrieval_gap/temporal"


def test_derives_from_reads_source_ids():
    assert derives_from({"source_ids": ["D1:9", "D1:2"]}, GOLD)
    assert not derives_from({"source_ids": ["D1:9"]}, GOLD)
    assert not derives_from({"source_ids": None}, GOLD) and not derives_from({}, GOLD)


@pytest.mark.parametrize("kwargs,first_missed", [
    ({"correct": True}, None),
    ({}, Stage.GENERATION),
    ({"packed": (("m9", ["D2:1"]),)}, Stage.ASSEMBLY),
    ({"retrieved": (("m9", ["D2:1"]),)}, Stage.RETRIEVAL),
    ({"stored": ()}, Stage.INGESTION),
])
def test_some_gold_item_reaches(kwargs, first_missed):
    t = trace(**kwargs)
    reached = [s for s in RUNGS if reaches(t, s)]
    missed = [s for s in RUNGS if not reaches(t, s)]
    assert (missed[0] if missed else None) is first_missed
    assert all(s not in reached for s in missed)
    assert root_cause(t) == (RUNGS[first_missed] if first_missed else None)


def test_filtering_is_reached_by_a_gold_item_the_filter_did_not_hide():
    assert reaches(trace(), Stage.FILTERING) and all_reach(trace(), Stage.FILTERING)
    assert not reaches(trace(filtered=("m1",)), Stage.FILTERING)
    both = trace(retrieved=(("m1", ["D1:1"]), ("m2", ["D1:2"])), filtered=("m2",))
    assert reaches(both, Stage.FILTERING) and not all_reach(both, Stage.FILTERING)


@pytest.mark.parametrize("kwargs,cause", [
    ({}, None),
    ({"carried": ["D1:1"]}, RootCause.KF_FILTERED),  # cited by a packed item, one turn's words are not there
    ({"retrieved": (("m1", ["D1:1"]),), "carried": ["D1:1"]}, RootCause.RETRIEVAL_GAP),
    ({"stored": (), "carried": []}, RootCause.INGESTION_GAP),
])
def test_every_gold_turn_reaches(kwargs, cause):
    t = trace(**kwargs)
    assert evidence_root_cause(t) == cause
    assert lost_at(t, all_reach) == cause
    assert all_reach(t, Stage.GENERATION) == all_reach(t, Stage.ASSEMBLY) == (cause is None)


def test_the_two_predicates_differ_on_a_citing_item_without_the_words():
    t = trace(carried=[])
    assert reaches(t, Stage.ASSEMBLY) and not all_reach(t, Stage.ASSEMBLY)
    assert root_cause(t) == RootCause.GENERATION_ERROR and evidence_root_cause(t) == RootCause.KF_FILTERED


def test_critic_groups_map_through_the_stages():
    assert [loss_group(c) for c in RootCause] == ["ingestion", "retrieval", "assembly", "answering", None]
    assert fixing_groups("kf_filtered") == ("ingestion", "retrieval", "assembly")
    assert fixing_groups("generation_error") == ("ingestion", "retrieval", "assembly", "answering")
    assert fixing_groups("unresolved") == ()
