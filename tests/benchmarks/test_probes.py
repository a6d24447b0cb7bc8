"""Probe questions: what each generator asks of a conversation, the quality filter, and the benchmark spec and run
config that use them."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from evolve.benchmarks import Benchmark, BenchmarkError, Conversation, Session, Turn, load_benchmark, write_locomo
from evolve.benchmarks.probe_base import verbatim_pairs
from evolve.benchmarks.probe_lists import name_facts
from evolve.benchmarks.probe_mix import FirstHit, ProbeSettings, quotas
from evolve.benchmarks.probes import (Probe, augment, candidates, conversation_probes, probe_quality, probe_questions,
                                      resolve_time)
from evolve.benchmarks.types import PROBE_CATEGORIES
from evolve.loop.config import load_config
from evolve.loop.setup import RunSetup

DEV4 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo" / "locomo_dev4.json"
FIRST, SECOND = datetime(2023, 5, 8, 13, 56), datetime(2023, 5, 25, 13, 14)


def _session(sid: str, when: datetime, lines: list[tuple[str, str]]) -> Session:
    return Session(sid, when, tuple(Turn(f"D{sid}:{i}", who, text, sid, when) for i, (who, text) in enumerate(lines, 1)))


CONVERSATION = Conversation("c1", ("Ana", "Ben"), (
    _session("1", FIRST, [
        ("Ana", "Hi Ben! I went to a pottery workshop yesterday with my sister."),
        ("Ben", "Nice! My favorite hobby is birdwatching in the marsh."),
        ("Ana", "I adopted a puppy named Biscuit, he is so fluffy."),
        ("Ben", "I visited Lisbon last year and loved the tiled facades."),
        ("Ana", "I painted a stormy seascape for the library auction. [shares a photo of a canvas with dark waves]"),
        ("Ben", "I'm going to a jazz festival next month with my cousin."),
    ]),
    _session("2", SECOND, [
        ("Ana", "I took Biscuit to the lakeside park last week and he chased geese."),
        ("Ben", "Honestly, Lisbon keeps calling me back, the custard tarts were unforgettable."),
        ("Ana", "I painted a quiet harbour at dawn for my grandmother."),
        ("Ben", "I've been restoring vintage bicycles for 3 years now."),
        ("Ben", "We camped by the river last weekend, it was chilly."),
    ]),
))


def _by_kind(conversation: Conversation = CONVERSATION) -> dict[str, list]:
    out: dict[str, list] = {}
    for probe in candidates(conversation):
        out.setdefault(probe.kind, []).append(probe)
    return out


def test_temporal_probes_date_every_event_with_absolute_and_relative_answers():
    when = {p.question: p for p in _by_kind()["temporal"]}
    workshop = when["When did Ana go to a pottery workshop with their sister?"]
    assert (workshop.answer, workshop.evidence) == ("7 May 2023", ("D1:1",))
    assert when["When did Ana take Biscuit to the lakeside park?"].answer == "the week before 25 May 2023"
    assert when["When did Ben visit Lisbon?"].answer == "2022"
    assert when["When was Ben planning to go to a jazz festival with their cousin?"].answer == "June 2023"
    assert when["When was it that Ben camped by the river?"].answer == "the weekend before 25 May 2023"
    assert when["How long has Ben been restoring vintage bicycles?"].answer == "3 years"
    assert resolve_time("last Saturday", SECOND) == "the Saturday before 25 May 2023"
    assert resolve_time("last Fri", SECOND) == "the Friday before 25 May 2023"
    assert resolve_time("two days ago", SECOND) == "23 May 2023"
    assert resolve_time("a few weeks ago", SECOND) == "a few weeks before 25 May 2023"
    assert resolve_time("last month", SECOND) == "April 2023"
    assert resolve_time("next month", datetime(2023, 12, 3)) == "January 2024"
    assert resolve_time("next week", SECOND) == "the week after 25 May 2023"


def test_paraphrases_repeat_no_word_pair_of_their_turn_beyond_names_and_answer():
    turns = {t.id: t for t in CONVERSATION.turns()}
    paraphrases = _by_kind()["paraphrase"]
    assert {p.answer for p in paraphrases} >= {"stormy seascape", "quiet harbour"}
    for p in paraphrases:
        allowed = {"ana", "ben", *p.answer.lower().split()}
        assert verbatim_pairs(p.question, turns[p.evidence[0]].text, allowed) == [], p.question
    assert verbatim_pairs("What did Ana paint for the library auction?", turns["D1:5"].text, {"ana"}) == [
        "the library", "library auction"]


def test_aggregation_lists_facts_of_one_kind_from_several_sessions_with_every_evidence_turn():
    lists = {p.question: p for p in _by_kind()["aggregation"]}
    painted = lists["What are all the things Ana has painted?"]
    assert painted.answer == "stormy seascape, quiet harbour" and painted.evidence == ("D1:5", "D2:3")


def test_image_probes_join_the_caption_and_the_turns_words():
    images = {p.question: p for p in _by_kind()["image"]}
    shown = images["Ana shared a picture when telling Ben they had painted a stormy seascape. What did it show?"]
    assert shown.answer == "canvas" and shown.evidence == ("D1:5",)
    said = images["Along with a picture of canvas, what did Ana say they had painted?"]
    assert said.answer == "stormy seascape"


def test_multi_hop_probes_chain_a_name_fact_to_a_later_fact_about_it():
    chained = {p.question: p for p in _by_kind()["multi_hop"]}
    park = chained["When did Ana take their puppy to the lakeside park?"]
    assert park.evidence == ("D1:3", "D2:1") and park.answer == "the week before 25 May 2023"
    named = {name: (turn, description) for name, turn, description in name_facts(CONVERSATION)}
    assert named["pottery workshop"] == ("D1:1", "the place Ana went to in May 2023")
    assert named["Lisbon"] == ("D1:4", "what Ben visited in May 2023")


def test_mix_quotas_match_the_target_and_grow_to_the_minimum():
    mix = ProbeSettings().mix
    exact = quotas({"single_hop": 530, "temporal": 22, "multi_hop": 190, "open_domain": 50}, mix, 10)
    assert exact == {"single_hop": 53, "temporal": 22, "multi_hop": 19, "open_domain": 5}
    grown = quotas({"single_hop": 530, "temporal": 22, "multi_hop": 190, "open_domain": 0}, mix, 200)
    assert sum(grown.values()) == 200 and grown["temporal"] == 22 and "open_domain" not in grown
    assert ProbeSettings(mix={"temporal": 2, "single_hop": 2}).mix == {"temporal": 0.5, "single_hop": 0.5}
    with pytest.raises(ValueError, match="not all 0"):
        ProbeSettings(mix={"temporal": 0})


def test_a_capped_kind_never_fills_its_category_past_its_share():
    mix = {"single_hop": 0.48, "kind:image": 0.05, "temporal": 0.22, "multi_hop": 0.19, "open_domain": 0.05}
    pools = {"single_hop": 40, "kind:image": 300, "temporal": 22, "multi_hop": 190, "open_domain": 5}
    grown = quotas(pools, mix, 300)
    assert sum(grown.values()) == 300 and grown["kind:image"] > 40  # uncapped, it fills what the others lack
    capped = quotas(pools, mix, 300, frozenset({"kind:image"}))
    assert capped["kind:image"] == 15  # 5 % of 300 (the shares are normalised: 0.05 / 0.99)
    assert capped == {**capped, "single_hop": 40, "temporal": 22, "multi_hop": 190, "open_domain": 5}
    assert sum(capped.values()) == 272
    with pytest.raises(ValueError, match="unknown probe kind"):
        ProbeSettings(kind_caps={"photo": 0.1})
    with pytest.raises(ValueError, match=r"shares in \[0, 1\]"):
        ProbeSettings(kind_caps={"image": 2})


def test_a_cap_keeps_dev4s_image_probes_to_their_share():
    bench = load_benchmark(f"locomo:{DEV4}#conv-30")
    capped = [q.category for q in probe_questions(bench, ProbeSettings(kind_caps={"image": 0.05}))]
    uncapped = [q.category for q in probe_questions(bench)]
    assert capped.count("probe_image") <= max(1, 0.05 * len(capped)) < uncapped.count("probe_image")


def test_difficulty_filter_drops_what_raw_turn_bm25_answers_from_its_first_hit():
    peer = FirstHit(CONVERSATION)
    assert peer.first("Ben birdwatching marsh").id == "D1:2"
    easy = Probe("paraphrase", "What is Ben's favorite hobby in the marsh?", "birdwatching", ("D1:2",))
    hard = Probe("paraphrase", "What does the one who visited Lisbon do for fun?", "birdwatching", ("D1:2",))
    assert peer.trivial(easy) and not peer.trivial(hard)
    filtered = ProbeSettings(difficulty="drop_trivial")
    kept = conversation_probes(CONVERSATION, filtered)
    assert not any(peer.trivial(p) for p in kept) and len(kept) >= len(CONVERSATION.turns()) / 3
    tiny = Conversation("c3", ("Ana", "Ben"), (_session("1", FIRST, [
        ("Ana", "We adopted a grey kitten called Pixel."), ("Ben", "Lovely. Our band plays at the Blue Note.")]),))
    few = conversation_probes(tiny, filtered)  # no hard probe: trivial ones fill in up to one per 3 turns
    assert len(few) == 1 and FirstHit(tiny).trivial(few[0])
    assert len(conversation_probes(CONVERSATION)) >= len(kept)  # the default keeps them


def test_every_probe_passes_the_quality_filter_and_generation_is_deterministic():
    turns = {t.id: t for t in CONVERSATION.turns()}
    probes = candidates(CONVERSATION)
    assert {p.kind for p in probes} >= {"attribute", "paraphrase", "temporal", "aggregation", "image", "link",
                                         "multi_hop"}
    for p in probes:
        assert probe_quality(p.question, p.answer, [turns[e] for e in p.evidence]) is None
    assert candidates(CONVERSATION) == probes and conversation_probes(CONVERSATION) == conversation_probes(CONVERSATION)
    assert len({p.question for p in probes}) == len(probes)


def test_quality_filter_rejects_unrecoverable_trivial_and_empty_answers():
    turn = CONVERSATION.sessions[0].turns[0]
    assert "not in the evidence" in probe_quality("Where did Ana go?", "a ceramics fair", [turn])
    assert probe_quality("Where did Ana go with her sister?", "her sister", [turn]) == "answer is in the question"
    assert probe_quality("What did Ana say?", "the", [turn]) == "answer has no content word"
    assert probe_quality("When did Ana go to a workshop?", "7 May 2023", [turn]) is None  # resolved date
    assert probe_quality("Who went to a pottery workshop?", "Ana", [turn]) is None  # the speaker


def test_probes_spec_and_augment(tmp_path):
    path = tmp_path / "conv.json"
    write_locomo(Benchmark("mini", {"c1": CONVERSATION}, []), path)
    bench = load_benchmark(f"probes:{path}")
    assert bench.questions and all(q.category in PROBE_CATEGORIES for q in bench.questions)
    assert [q.id for q in bench.questions] == [f"c1/p{i}" for i in range(len(bench.questions))]
    assert all(q.asked_at == SECOND for q in bench.questions)
    with pytest.raises(BenchmarkError, match="no conversation 'c9'"):
        load_benchmark(f"probes:{path}#c9")
    empty = Conversation("c2", ("A", "B"), (_session("1", FIRST, [("A", "ok"), ("B", "fine")]),))
    write_locomo(Benchmark("bare", {"c2": empty}, []), tmp_path / "bare.json")
    with pytest.raises(BenchmarkError, match="no probe question"):
        load_benchmark(f"probes:{tmp_path / 'bare.json'}")
    labelled = load_benchmark("synthetic:0:2")
    both = augment(labelled)
    assert both.questions[:len(labelled.questions)] == labelled.questions
    assert len(both.questions) == len(labelled.questions) + len(probe_questions(labelled))


def test_probes_spec_reads_a_locomo_file_without_qa(tmp_path):
    path = tmp_path / "unlabelled.json"
    write_locomo(Benchmark("mini", {"c1": CONVERSATION}, []), path)
    samples = json.loads(path.read_text())
    path.write_text(json.dumps([{k: v for k, v in sample.items() if k != "qa"} for sample in samples]))
    bench = load_benchmark(f"probes:{path}")
    assert bench.questions and all(q.category in PROBE_CATEGORIES for q in bench.questions)
    assert load_benchmark(f"locomo:{path}").questions == []


def test_run_config_augment_adds_probes_to_the_search_and_never_to_the_holdout(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"benchmark": "synthetic:0:4", "stores": "stores", "objective": "answer",
                                      "augment": "probes", "holdout": {"split": {"holdout_fraction": 0.5, "seed": 0}}}))
    setup = RunSetup.prepare(load_config(config))
    categories = {q.id: q.category for q in setup.benchmark.questions}
    assert any(categories[q].startswith("probe_") for q in setup.question_ids)
    assert setup.holdout_ids and not any(categories[q].startswith("probe_") for q in setup.holdout_ids)
    held = {q.conversation_id for q in setup.benchmark.questions if q.id in set(setup.holdout_ids)}
    assert not any(q.conversation_id in held for q in setup.benchmark.questions if q.id in set(setup.question_ids))


@pytest.mark.skipif(not DEV4.exists(), reason="LoCoMo dev4 not available")
def test_dev4_probes_are_usable():
    bench = load_benchmark(f"probes:{DEV4}")
    assert len(bench.questions) >= 300
    for q in bench.questions:
        conv = bench.conversations[q.conversation_id]
        turns = {t.id: t for t in conv.turns()}
        assert probe_quality(q.question, q.answer, [turns[e] for e in q.evidence]) is None
