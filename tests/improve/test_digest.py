import json

import pytest

from evolve.improve.digest import DigestError, digest
from evolve.strategy.policy import FACT_CATEGORIES


def record(qid, category, cause, *, gold=("D1:1",), retrieved=(), filtered=(), dropped=(), packed=(),
           subqueries=("sub",), f1=0.0, support=(), context_tokens=100, budget=160, scored=True):
    return {
        "question_id": qid, "conversation_id": "c1", "category": category, "question": "?", "gold_answer": "a",
        "gold_evidence": list(gold), "evidence_known": True, "intent": category, "subqueries": list(subqueries),
        "stored_ids": [], "retrieved": [dict(r) for r in retrieved], "filtered": list(filtered),
        "dropped": list(dropped), "packed": list(packed), "context_tokens": context_tokens, "token_budget": budget,
        "answer": "x", "answer_support": list(support), "judge": {}, "correct": cause is None, "f1": f1,
        "evidence_recall": {"1": 0.0, "5": 0.0, "10": 0.0}, "root_cause": cause, "stages": [], "scored": scored,
    }


def hit(mid, rank, sources):
    return {"id": mid, "rank": rank, "score": 1.0 / rank, "source_ids": list(sources), "channels": {}}


GOLD_HIT_LOW = hit("m9", 4, ["D1:1"])
OTHER = [hit("m1", 1, ["D1:5"]), hit("m2", 2, ["D1:6"]), hit("m3", 3, ["D1:7"])]


@pytest.fixture
def traces():
    return [
        record("t1", "temporal", "retrieval_gap", retrieved=OTHER),
        record("t2", "temporal", "retrieval_gap", retrieved=OTHER, subqueries=()),
        record("t3", "temporal", "retrieval_gap", retrieved=OTHER),
        record("t4", "temporal", None),
        record("s1", "single_hop", "retrieval_gap", retrieved=OTHER),
        record("s2", "single_hop", "generation_error", retrieved=[hit("g", 1, ["D1:1"])],
               packed=[{"id": "g", "layer": "L0", "tokens": 10, "source_ids": ["D1:1"]}], support=["g"], f1=0.5),
        record("s3", "single_hop", None),
        record("m1", "multi_hop", "kf_filtered", retrieved=OTHER + [GOLD_HIT_LOW],
               dropped=[{"id": "m9", "reason": "budget"}], context_tokens=158),
        record("m2", "multi_hop", "kf_filtered", retrieved=[hit("m9", 1, ["D1:1"])] + OTHER[1:],
               filtered=[{"id": "m9", "reason": "superseded"}], context_tokens=40),
        record("a1", "adversarial", "generation_error", scored=False),
    ]


def test_symptoms_ranked_by_count_with_shares(traces):
    d = digest(traces)
    assert d.n_questions == 9 and d.n_failures == 7
    assert d.accuracy == pytest.approx(2 / 9)
    top = d.symptoms[0]
    assert top.key == "retrieval_gap/temporal"
    assert top.count == 3
    assert top.share_of_failures == pytest.approx(3 / 7, abs=1e-6)
    assert top.share_of_category == pytest.approx(3 / 4)
    assert [s.count for s in d.symptoms] == sorted((s.count for s in d.symptoms), reverse=True)
    assert {s.key for s in d.symptoms} == {"retrieval_gap/temporal", "retrieval_gap/single_hop",
                                           "kf_filtered/multi_hop", "generation_error/single_hop"}
    agg = d.symptom("retrieval_gap/*")
    assert agg.count == 4 and agg.share_of_category == pytest.approx(4 / 9, abs=1e-6)
    assert agg.evidence["concentration"] == {"category": "temporal", "share": 0.75}
    assert d.ranked()[0].key == "retrieval_gap/*"


def test_unscored_questions_are_ignored(traces):
    d = digest(traces)
    assert all(s.category != "adversarial" for s in d.symptoms)
    assert "a1" not in {q for s in d.symptoms for q in s.evidence["question_ids"]}


def test_qualifiers_split_kf_filtered_by_loss_reason(traces):
    kf = digest(traces).symptom("kf_filtered/multi_hop")
    assert kf.qualifiers == {"budget": 0.5, "superseded": 0.5, "slot_superseded": 0.0, "retracted": 0.0, "expired": 0.0, "pruned": 0.0,
                             "conflict": 0.0, "answer_cut": 0.0, "words_cut": 0.0, "image_not_in_ikb": 0.0,
                             "name_not_recovered": 0.0, "route_missed": 0.0, "event_unfused": 0.0,
                             "edge_not_followed": 0.0}
    assert kf.evidence["loss_reasons"] == {"budget": 1, "superseded": 1}
    assert kf.evidence["gold_rank_mean"] == pytest.approx(2.5)  # best gold ranks 4 and 1
    assert kf.evidence["gold_rank_low_share"] == pytest.approx(0.5)  # 4 of 4 is low, 1 of 3 is not
    assert kf.evidence["context_fill_mean"] == pytest.approx((158 / 160 + 40 / 160) / 2, abs=1e-6)


def test_retrieval_and_generation_qualifiers(traces):
    d = digest(traces)
    assert d.symptom("retrieval_gap/temporal").qualifiers == {"no_subqueries": pytest.approx(1 / 3, abs=1e-6),
                                                                      "answer_not_retrieved": 0.0,
                                                                      "image_not_in_ikb": 0.0,
                                                                      "name_not_recovered": 0.0, "route_missed": 0.0,
                                                                      "event_unfused": 0.0, "edge_not_followed": 0.0}
    gen = d.symptom("generation_error/single_hop")
    shares = gen.qualifiers
    assert {q: shares.pop(q) for q in ("near_miss", "wrong_support", "stale", "not_from_evidence")} == {
        "near_miss": 1.0, "wrong_support": 0.0, "stale": 0.0, "not_from_evidence": 0.0}
    losses = {q: shares.pop(q) for q in ("image_not_in_ikb", "name_not_recovered", "route_missed", "event_unfused",
                                         "edge_not_followed")}
    assert not any(losses.values())
    assert set(shares) == {f"stale_{c}" for c in FACT_CATEGORIES} and not any(shares.values())


def test_an_image_loss_qualifies_its_rung_and_those_below_not_those_above():
    lost = [record(f"q{i}", "multi_hop", cause) | {"image_loss": loss}
            for i, (cause, loss) in enumerate([("retrieval_gap", "route_missed"), ("retrieval_gap", "route_missed"),
                                               ("retrieval_gap", None), ("ingestion_gap", "route_missed"),
                                               ("generation_error", "name_not_recovered")])]
    d = digest(lost)
    assert d.symptom("retrieval_gap/multi_hop").qualifiers["route_missed"] == pytest.approx(2 / 3, abs=1e-6)
    # a missed route is met at retrieval: it cannot qualify an ingestion gap
    assert "route_missed" not in d.symptom("ingestion_gap/multi_hop").qualifiers
    assert d.symptom("generation_error/multi_hop").qualifiers["name_not_recovered"] == 1.0



def test_an_event_loss_qualifies_its_rung_and_those_below_not_those_above():
    lost = [record(f"q{i}", "multi_hop", cause) | {"event_loss": loss}
            for i, (cause, loss) in enumerate([("generation_error", "event_unfused"), ("generation_error", None),
                                               ("retrieval_gap", "edge_not_followed"),
                                               ("ingestion_gap", "edge_not_followed")])]
    d = digest(lost)
    assert d.symptom("generation_error/multi_hop").qualifiers["event_unfused"] == 0.5
    assert d.symptom("retrieval_gap/multi_hop").qualifiers["edge_not_followed"] == 1.0
    # an edge not followed is met at retrieval: it cannot qualify an ingestion gap
    assert "edge_not_followed" not in d.symptom("ingestion_gap/multi_hop").qualifiers

def test_run_wide_signals(traces):
    s = digest(traces).signals
    assert s["root_causes"] == {"retrieval_gap": 4, "kf_filtered": 2, "generation_error": 1}
    assert s["budget_drop_share"] == pytest.approx(1 / 9, abs=1e-6)
    assert s["token_budget_mean"] == 160
    assert s["gold_rank_mean"] == pytest.approx((4 + 1 + 1) / 3, abs=1e-6)


def test_to_dict_is_json(traces):
    data = json.loads(json.dumps(digest(traces).to_dict()))
    assert data["symptoms"][0]["key"] == "retrieval_gap/temporal"
    assert data["aggregates"][0]["key"] == "retrieval_gap/*"


def test_no_failures_gives_no_symptoms():
    d = digest([record("ok", "temporal", None)])
    assert d.symptoms == () and d.aggregates == () and d.accuracy == 1.0


def test_bad_records_named():
    bad = record("q7", "temporal", "retrieval_gap")
    bad["root_cause"] = None
    bad["correct"] = False
    with pytest.raises(DigestError, match=r"record 0 \(question_id 'q7'\): root_cause"):
        digest([bad])
    missing = record("q8", "temporal", None)
    del missing["category"]
    with pytest.raises(DigestError, match="'q8'.*category"):
        digest([missing])
    odd = record("q9", "temporal", "lost_somewhere")
    with pytest.raises(DigestError, match="unknown value 'lost_somewhere'"):
        digest([odd])


def test_probe_failures_are_symptoms_of_the_category_their_kind_stands_for(traces):
    probes = [record("p1", "probe_temporal", "ingestion_gap"), record("p2", "probe_aggregation", "kf_filtered"),
              record("p3", "probe_llm", "retrieval_gap")]
    d = digest(traces + probes)
    assert d.symptom("ingestion_gap/temporal").count == 1  # where resolving relative dates is looked up
    assert d.symptom("kf_filtered/multi_hop").count == 3
    assert d.symptom("retrieval_gap/probe_llm").count == 1  # the questioner's probes have no LoCoMo category
    assert d.symptom("retrieval_gap/temporal").share_of_category == pytest.approx(3 / 5)
