"""Scene-to-sensor files: the generator, the format any user file follows, per-user visibility, event ids kept through
the runtime, the checklist judged by content, and fusion into packs."""
from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta

import pytest

from evolve.benchmarks import BenchmarkError, Turn, load_benchmark
from evolve.benchmarks.scene_gen import generate_scenes
from evolve.benchmarks.scenes import carried, coverage, linked_pairs
from evolve.data import BASELINE_PATH
from evolve.runtime import MemoryRuntime
from evolve.runtime.fusion import fuse
from evolve.strategy.artifact import INGESTION_PATHS, ingestion_key, ingestion_view, load_strategy
from evolve.strategy.policy import Fusion


@pytest.fixture(scope="module")
def one_home(tmp_path_factory):
    path = tmp_path_factory.mktemp("scenes") / "home.json"
    path.write_text(generate_scenes(3, homes=1).model_dump_json())
    return path


def test_the_generator_is_seeded_and_its_file_reads_back_as_the_same_benchmark(one_home):
    assert generate_scenes(3, homes=1) == generate_scenes(3, homes=1) != generate_scenes(4, homes=1)
    generated, read = load_benchmark("scenegen:3:1"), load_benchmark(f"scenes:{one_home}")
    assert generated.questions == read.questions and generated.conversations == read.conversations
    assert {q.category for q in read.questions} == {"scene_event", "scene_device", "scene_causal", "scene_conflict"}
    assert all(q.checklist and q.asked_at is not None for q in read.questions)


def test_each_user_sees_the_households_events_and_their_own(one_home):
    scenes = generate_scenes(3, homes=1)
    home = scenes.homes[0]
    bench = load_benchmark(f"scenes:{one_home}")
    a, b = (bench.conversations[f"{home.id}/{u}"] for u in home.users)
    ids_a, ids_b = {t.id for t in a.turns()}, {t.id for t in b.turns()}
    private = [e for e in home.events if e.visibility == "private"]
    assert private and all((e.id in ids_a) == (e.owner == home.users[0]) for e in private)
    assert all((e.id in ids_b) == (e.owner == home.users[1]) for e in private)
    household = {e.id for e in home.events if e.visibility == "household"}
    assert household <= ids_a and household <= ids_b
    speakers = Counter(t.speaker for t in a.turns())
    assert speakers["camera"] > 0 and speakers[f"{home.users[0]}'s car"] > 0
    for q in bench.questions:  # evidence is observed before the question is asked, by a device the asker sees
        turns = {t.id: t for t in bench.conversations[q.conversation_id].turns()}
        assert all(turns[e].timestamp <= q.asked_at for e in q.evidence), q.question


def test_a_packed_event_keeps_its_id_and_its_words_reach_the_checklist(one_home, embedder):
    bench = load_benchmark(f"scenes:{one_home}")
    runtime = MemoryRuntime(load_strategy(BASELINE_PATH), embedder=embedder)
    question = next(q for q in bench.questions if q.category == "scene_event" and "car" in q.question)
    store = runtime.ingest(bench.conversations[question.conversation_id])
    packed = runtime.ask(store, question.question, question.asked_at, answer=False).packed
    events = {t.id for t in bench.conversations[question.conversation_id].turns()}
    assert any(set(c.source_ids) & set(question.evidence) for c in packed)
    assert all(set(c.source_ids) <= events | {""} for c in packed if c.layer in ("L0", "RT"))
    context = "\n".join(c.text for c in packed)
    assert coverage(question.checklist, context) == 1.0 and carried(question.answer, context)


def test_checklist_items_count_only_when_every_content_word_arrives():
    assert carried("football boots doorway", "the FOOTBALL boots by the doorway")
    assert not carried("football boots doorway", "football boots in the car")
    assert coverage(("camera", "suitcase coat rack"), "camera: a suitcase") == 0.5
    assert coverage((), "anything") == 0.0


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(format="scenes/0"), "format"),
    (lambda d: d["homes"][0]["questions"][0].update(evidence=["nope"]), "evidence ['nope'] is no event"),
    (lambda d: d["homes"][0]["questions"][0].update(user="Zed"), "user 'Zed' is not one of"),
    (lambda d: d["homes"][0]["events"][0].update(importance=3), "homes.0.events.0.importance"),
])
def test_a_broken_scene_file_is_refused_naming_the_field(edit, message, one_home, tmp_path):
    raw = json.loads(one_home.read_text())
    edit(raw)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(raw))
    with pytest.raises(BenchmarkError, match="broken.json") as err:
        load_benchmark(f"scenes:{broken}")
    assert message in str(err.value)


def test_fusion_packs_a_training_days_chain_and_leaves_another_bag_by_the_door_out(one_home, embedder):
    scenes = generate_scenes(3, homes=1)
    home = scenes.homes[0]
    bench = load_benchmark(f"scenes:{one_home}")
    conversation = bench.conversations[f"{home.id}/{home.users[0]}"]
    packs = fuse(conversation.turns(), Fusion(enabled=True))
    text = {e.id: e.text for e in home.events}
    training = next(p for p in packs if "training" in text[p.anchor.id])
    members = [text[t.id] for t in training.members]
    assert any("Car: trip to" in m for m in members) and all("lesson" not in m for m in members)
    truth = linked_pairs(home)
    assert all(frozenset((training.anchor.id, t.id)) in truth for t in training.members[1:])

    strategy = load_strategy(BASELINE_PATH)
    fused = {**strategy, "features": {**strategy["features"], "fusion": Fusion(enabled=True).model_dump()}}
    assert ingestion_key(strategy) != ingestion_key(fused)
    plain = MemoryRuntime(strategy, embedder=embedder).ingest(conversation)
    store = MemoryRuntime(fused, embedder=embedder).ingest(conversation)
    pk = [i for i in store.items if i.layer == "PK"]
    assert not [i for i in plain.items if i.layer == "PK"] and len(pk) == len(packs)
    assert pk[0].source_ids == tuple(t.id for t in packs[0].members)
    assert all(text[t] in pk[0].text for t in pk[0].source_ids)


def test_a_strategy_without_fusion_keeps_its_hash_and_ingestion_key():
    strategy = load_strategy(BASELINE_PATH)
    assert "fusion" not in strategy["features"]
    assert ingestion_key(strategy) == ingestion_key({**strategy, "features": dict(strategy["features"])})
    assert set(ingestion_view(strategy)) == set(INGESTION_PATHS)


def test_a_pack_is_seen_only_by_questions_asked_after_its_last_member(one_home, embedder):
    bench = load_benchmark(f"scenes:{one_home}")
    conversation = next(iter(bench.conversations.values()))
    strategy = load_strategy(BASELINE_PATH)
    fused = {**strategy, "features": {**strategy["features"], "fusion": Fusion(enabled=True).model_dump()}}
    runtime = MemoryRuntime(fused, embedder=embedder)
    store = runtime.ingest(conversation)
    pack = next(i for i in store.items if i.layer == "PK")
    members = [store.turns[t] for t in pack.source_ids]
    assert pack.timestamp == max(t.timestamp for t in members)
    words = members[-1].text
    before = members[-1].timestamp - timedelta(minutes=1)
    assert all(c.id != pack.id for c in runtime.ask(store, words, before, answer=False).packed)
    assert pack.id in [h.id for h in runtime.ask(store, words, members[-1].timestamp, answer=False).retrieved]


def test_a_full_open_pack_zone_closes_its_oldest_pack_and_keeps_what_it_packed():
    day = datetime(2024, 3, 8)
    turns = [Turn(f"E{n}", who, text, "S1", day.replace(hour=hour)) for n, (hour, who, text) in enumerate([
        (8, "Ana's calendar", "Mia football training at Riverside"),
        (9, "Door camera", "Mia football bag near the doorway"),
        (10, "Ana's speaker", "Leo piano lesson on Thursday"),
        (11, "Ana's car", "Trip to Riverside for Mia")], 1)]
    members = [[t.id for t in p.members] for p in fuse(turns, Fusion(enabled=True))]
    assert members == [["E1", "E2", "E4"]]
    # a zone of one: the piano lesson's pack closes the training day's, which keeps its first two members
    assert [[t.id for t in p.members] for p in fuse(turns, Fusion(enabled=True, max_open=1))] == [["E1", "E2"]]
