"""Typed observations in service: photos captured as their own observations (or as a turn's caption) become the image
observations the LoCoMo reader makes, the served image knowledge base packs what the offline one packs, a recall
names each item's observations, and the organised records keep the IKB's rows until the user is erased; device
events are admitted as the scene reader admits them, fused alike, and named with their device."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from evolve.benchmarks import load_benchmark
from evolve.benchmarks.scene_gen import generate_scenes
from evolve.benchmarks.scenes import conversation_of
from evolve.benchmarks.turns import fold_caption
from evolve.runtime import MemoryRuntime
from evolve.serve.export import export_user
from evolve.serve.strategy import RuntimeParts
from evolve.strategy.policy import Fusion, Graph
from service_fixtures import in_process

DEV4 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo" / "locomo_dev4.json"
SESSIONS = 4
QUESTIONS = ["How many photos of paintings has Melanie shared?", "What kinds of things has Melanie painted?",
             "What pets does Caroline have?", "What did Melanie paint?", "Where did Caroline go?"]


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    """conv-26's first sessions (photos among them) as a LoCoMo file of their own, without questions."""
    raw = next(s for s in json.loads(DEV4.read_text()) if s["sample_id"] == "conv-26")
    conversation = {k: v for k, v in raw["conversation"].items() if k.startswith("speaker_")}
    for n in range(1, SESSIONS + 1):
        conversation[f"session_{n}"] = raw["conversation"][f"session_{n}"]
        conversation[f"session_{n}_date_time"] = raw["conversation"][f"session_{n}_date_time"]
    path = tmp_path_factory.mktemp("observations") / "conv26.json"
    path.write_text(json.dumps([{"sample_id": "conv-26", "conversation": conversation, "qa": []}]))
    return path


def _observations(sample: Path) -> list[dict]:
    """The sample's turns as typed observations, each photo an image observation after its turn."""
    conversation = json.loads(sample.read_text())[0]["conversation"]
    out = []
    for n in range(1, SESSIONS + 1):
        for turn in conversation[f"session_{n}"]:
            out.append({"kind": "turn", "id": turn["dia_id"], "speaker": turn["speaker"], "text": turn["text"],
                        "session": f"session_{n}", "time": conversation[f"session_{n}_date_time"]})
            if turn.get("blip_caption"):
                out.append({"kind": "image", "turn": turn["dia_id"], "caption": turn["blip_caption"],
                            "url": turn["img_url"][0] if turn.get("img_url") else None})
    return out


@pytest.fixture
def ikb_serving(serving: Path) -> Path:
    strategy = yaml.safe_load(serving.read_text())
    strategy["images"]["route"]["enabled"] = True
    serving.write_text(yaml.safe_dump(strategy, sort_keys=False))
    return serving


def test_photos_as_observations_serve_what_the_offline_ikb_packs(sample, ikb_serving, tmp_path, embedder):
    service = in_process(tmp_path / "data", ikb_serving, RuntimeParts(embedder))
    reply = service.client.post("/v1/users/mel/observations", json={"observations": _observations(sample)})
    assert reply.status_code == 201, reply.text
    offline = next(iter(load_benchmark(f"locomo:{sample}").conversations.values()))
    assert reply.json()["images"] == [i.id for i in offline.images()] and len(offline.images()) >= 5
    service.memory.close("mel")  # every session rolled up, as batch ingestion rolls them up

    served = service.memory.conversation("mel")
    assert [i.model_dump(exclude={"provenance"}) for i in served.images()] == \
        [i.model_dump(exclude={"provenance"}) for i in offline.images()]
    assert [t.text for t in served.turns()] == [t.text for t in offline.turns()]  # captions folded alike
    runtime = MemoryRuntime(yaml.safe_load(ikb_serving.read_text()), embedder=embedder)
    batch = runtime.ingest(offline)
    routed = 0
    for question in QUESTIONS:
        recall = service.client.post("/v1/users/mel/recall", json={"question": question})
        assert recall.status_code == 200, recall.text
        expected = runtime.ask(batch, question, answer=False).packed
        packed = recall.json()["packed"]
        assert [(p["id"], p["text"]) for p in packed] == [(c.id, c.text) for c in expected], question
        for item, chunk in zip(packed, expected):
            kinds = [(o["id"], o["kind"]) for o in item["observations"]]
            assert kinds == [(t, "turn") for t in chunk.source_ids if t in batch.turns] + \
                [(i, "image") for i in chunk.image_ids]
        routed += any(p["layer"] == "IKB" for p in packed)
    assert routed  # the counting and enumeration questions took the IKB route


def test_an_image_observation_is_the_caption_of_its_turn(ikb_serving, tmp_path, embedder):
    service = in_process(tmp_path / "data", ikb_serving, RuntimeParts(embedder))
    turn = {"id": "t1", "speaker": "Ann", "text": "Meet Luna, our new puppy!", "session": "s1",
            "time": "2024-03-01T10:00:00"}
    as_caption = service.client.post("/v1/users/a/turns", json={"turns": [{**turn, "image_caption": "a photo of a dog",
                                                                           "image_url": "https://x.org/l.jpg"}]})
    as_observation = service.client.post("/v1/users/b/observations", json={"observations": [
        {"kind": "turn", **turn}, {"kind": "image", "turn": "t1", "caption": "a photo of a dog",
                                   "url": "https://x.org/l.jpg"}]})
    assert as_caption.status_code == as_observation.status_code == 201
    assert as_caption.json()["images"] == as_observation.json()["images"] == ["s1:IMG_001"]
    a, b = service.memory.conversation("a"), service.memory.conversation("b")
    assert a.images() == b.images() and a.turns() == b.turns()
    assert a.turns()[0].text == fold_caption(turn["text"], "a photo of a dog")
    stored = [json.loads(line) for line in (tmp_path / "data/users/b/capture.jsonl").read_text().splitlines()]
    assert stored[-1]["turns"][0]["photo"] == {"caption": "a photo of a dog", "url": "https://x.org/l.jpg",
                                               "path": None}

    exported = tmp_path / "export.json"
    exported.write_text(json.dumps([export_user(service.memory.backend, "b", [])]))
    read_back = next(iter(load_benchmark(f"locomo:{exported}").conversations.values()))
    assert read_back.turns()[0].text == b.turns()[0].text
    renamed = {"provenance", "id", "session"}  # the export numbers sessions (s1 is session_1, read back as D1)
    assert [i.model_dump(exclude=renamed) for i in read_back.images()] == \
        [i.model_dump(exclude=renamed) for i in b.images()] and read_back.images()[0].id == "D1:IMG_001"

    service.memory.close("b")
    service.memory.organise_pending()
    record = tmp_path / "data/users/b/records/s1/0000-t1.md"
    meta = yaml.safe_load(record.read_text().split("---\n")[1])
    assert [(i["id"], i["categories"][0], i["names"]) for i in meta["images"]] == [("s1:IMG_001", "dog", ["Luna"])]
    assert service.client.delete("/v1/users/b").status_code == 200
    assert not (tmp_path / "data/users/b").exists()


@pytest.mark.parametrize("observations, error", [
    ([{"kind": "image", "turn": "t1", "caption": "a cat"}], "observations[0]: turn 't1' is not a turn earlier"),
    ([{"kind": "turn", "id": "t1", "speaker": "A", "text": "x", "session": "s"},
      {"kind": "image", "turn": "t1"}], "observations[1]: an image needs a caption, a url or a path"),
    ([{"kind": "turn", "id": "t1", "speaker": "A", "text": "x", "session": "s", "image_caption": "a dog"},
      {"kind": "image", "turn": "t1", "caption": "a cat"}], "observations[1]: turn 't1' already shares a photo"),
])
def test_an_image_that_names_no_turn_of_its_request_is_refused_and_nothing_is_stored(observations, error, ikb_serving,
                                                                                    tmp_path, embedder):
    service = in_process(tmp_path / "data", ikb_serving, RuntimeParts(embedder))
    reply = service.client.post("/v1/users/c/observations", json={"observations": observations})
    assert reply.status_code == 422 and error in reply.text
    assert not (tmp_path / "data/users/c/capture.jsonl").exists()


def test_a_blank_caption_is_no_photo_so_an_image_observation_may_follow_its_turn(ikb_serving, tmp_path, embedder):
    service = in_process(tmp_path / "data", ikb_serving, RuntimeParts(embedder))
    reply = service.client.post("/v1/users/c/observations", json={"observations": [
        {"kind": "turn", "id": "t1", "speaker": "A", "text": "Look at this", "session": "s", "image_caption": "  "},
        {"kind": "image", "turn": "t1", "caption": "a dog on a beach"}]})
    assert reply.status_code == 201, reply.text
    assert reply.json()["images"] == ["s:IMG_001"]
    assert "a dog on a beach" in (tmp_path / "data/users/c/capture.jsonl").read_text()


def test_device_events_served_pack_what_offline_packs_and_name_their_device(tmp_path, serving, embedder):
    strategy = yaml.safe_load(serving.read_text())
    strategy["features"]["fusion"] = Fusion(enabled=True).model_dump()
    strategy["retrieval"]["graph"] = Graph(enabled=True).model_dump(mode="json")
    serving.write_text(yaml.safe_dump(strategy, sort_keys=False))
    service = in_process(tmp_path / "data", serving, RuntimeParts(embedder))
    home = generate_scenes(3, homes=1).homes[0]
    user = home.users[0]
    offline = conversation_of(home, user)
    seen = [{"kind": "event", **e.model_dump(mode="json", exclude={"kind", "provenance"})}
            for e in sorted((e for e in home.events if e.visible_to(user)), key=lambda e: (e.time, e.id))]
    for day in range(0, len(seen), 40):
        reply = service.client.post(f"/v1/users/{user}/observations", json={"observations": seen[day:day + 40]})
        assert reply.status_code == 201, reply.text
    service.memory.close(user)
    served = service.memory.conversation(user)
    assert served.turns() == offline.turns()
    assert [e.model_dump(exclude={"provenance"}) for e in served.events()] == \
        [e.model_dump(exclude={"provenance"}) for e in offline.events()]
    runtime = MemoryRuntime(strategy, embedder=embedder)
    batch = runtime.ingest(offline)
    packs = expanded = 0
    for q in [q for q in home.questions if q.user == user][:12]:
        recall = service.client.post(f"/v1/users/{user}/recall", json={"question": q.question,
                                                                       "asked_at": q.asked_at.isoformat()})
        assert recall.status_code == 200, recall.text
        offline_result = runtime.ask(batch, q.question, q.asked_at, answer=False)
        expected = offline_result.packed
        expanded += any("graph" in hit.channels for hit in offline_result.retrieved)
        packed = recall.json()["packed"]
        assert [(p["id"], p["text"]) for p in packed] == [(c.id, c.text) for c in expected], q.question
        for item in packed:
            assert all(o["kind"] == "event" and o["device"] == batch.events[o["id"]].device
                       for o in item["observations"])
        packs += sum(p["layer"] == "PK" for p in packed)
    assert packs and expanded  # fused packs reach recalls, citing their member events; the graph was followed
    stored = (tmp_path / f"data/users/{user}/capture.jsonl").read_text()
    assert '"device":"camera"' in stored.replace(" ", "")
    assert service.client.delete(f"/v1/users/{user}").status_code == 200
    assert not (tmp_path / f"data/users/{user}").exists()


def test_an_event_without_a_readable_time_is_refused(ikb_serving, tmp_path, embedder):
    service = in_process(tmp_path / "data", ikb_serving, RuntimeParts(embedder))
    event = {"kind": "event", "id": "e1", "device": "car", "event": "route", "time": "someday", "text": "Car: home"}
    reply = service.client.post("/v1/users/d/observations", json={"observations": [event]})
    assert reply.status_code == 422 and "observations[0].time: unparseable time 'someday'" in reply.text
