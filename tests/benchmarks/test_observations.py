"""Admission: a LoCoMo turn that shares a photo yields the same turn as before (caption folded into its text) and an
image observation of its own, with a stable id numbered per session, its provenance, date, caption and URL."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from evolve.benchmarks.locomo import load_locomo
from evolve.benchmarks.observations import DialogueTurn, ImageObservation, Photo, Provenance
from evolve.benchmarks.turns import admit_session, client_turn
from evolve.benchmarks.types import BenchmarkError

SAMPLE = {"sample_id": "s1", "conversation": {
    "speaker_a": "Ana", "speaker_b": "Ben",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        {"speaker": "Ana", "dia_id": "D1:1", "text": "We got a puppy!", "blip_caption": "a photo of a small dog",
         "img_url": ["https://example.org/pup.jpg"], "query": "puppy"},
        {"speaker": "Ben", "dia_id": "D1:2", "text": "So cute. What is his name?"},
        {"speaker": "Ana", "dia_id": "D1:3", "text": "Look at my painting.",
         "blip_caption": "a painting of a sunset over a lake"}],
    "session_2_date_time": "10:00 am on 9 June, 2023",
    "session_2": [{"speaker": "Ben", "dia_id": "D2:1", "text": "My cat.", "blip_caption": "a photo of a cat"}]},
    "qa": [{"question": "What did Ana paint?", "answer": "a sunset", "evidence": ["D1:3"], "category": 4}]}


def _load(tmp_path: Path, sample: dict = SAMPLE):
    path = tmp_path / "conv.json"
    path.write_text(json.dumps([sample]))
    return load_locomo(path).conversations["s1"]


def test_a_shared_photo_becomes_an_image_observation_numbered_per_session(tmp_path):
    conversation = _load(tmp_path)
    images = conversation.images()
    assert [i.id for i in images] == ["D1:IMG_001", "D1:IMG_002", "D2:IMG_001"]
    first = images[0]
    assert (first.session, first.source_turn, first.speaker, first.caption) == ("D1", "D1:1", "Ana",
                                                                               "a photo of a small dog")
    assert first.time == datetime(2023, 5, 8, 13, 56) and first.url == "https://example.org/pup.jpg"
    assert first.provenance == Provenance(source="locomo:conv.json", record="D1:1")
    assert images[1].url is None and images[2].time == datetime(2023, 6, 9, 10, 0)
    # the turn itself is what it always was: the caption folded into its text, no image for a plain turn
    turns = {t.id: t for t in conversation.turns()}
    assert turns["D1:1"].text == "We got a puppy! [shares a photo of a small dog]"
    assert turns["D1:2"].text == "So cute. What is his name?"


def test_the_service_turn_and_the_admitted_turn_agree():
    payload = DialogueTurn(id="D1:1", speaker="Ana", text="Look!", session="session_1", time="2023-05-08T13:56:00",
                           image_caption="a photo of a cat", provenance=Provenance(source="client", record="D1:1"))
    admitted = admit_session([payload])
    turn, photo = client_turn("D1:1", "Ana", "Look!", "session_1", "2023-05-08T13:56:00",
                              Photo(caption="a photo of a cat"))
    assert admitted.turns[0] == turn and photo == Photo(caption="a photo of a cat")
    assert admitted.images[0].id == "D1:IMG_001" and admitted.images[0].session == "D1"


def test_image_ids_do_not_hash_into_the_conversation_but_key_the_store(tmp_path):
    moved = json.loads(json.dumps(SAMPLE))
    moved["conversation"]["session_1"][0]["img_url"] = ["https://example.org/other.jpg"]
    before, after = _load(tmp_path), _load(tmp_path, moved)
    assert before.content_hash() == after.content_hash()  # the benchmark's identity is its words
    assert before.observations_hash() != after.observations_hash()  # what the image knowledge base is built from


def test_an_unparseable_time_names_the_turn(tmp_path):
    broken = json.loads(json.dumps(SAMPLE))
    broken["conversation"]["session_1_date_time"] = "someday"
    with pytest.raises(BenchmarkError, match="session_1_date_time"):
        _load(tmp_path, broken)
    payload = DialogueTurn(id="x", speaker="A", text="t", session="s", time="someday",
                           provenance=Provenance(source="client", record="x"))
    with pytest.raises(ValueError, match=r"session\[0\]\.time: unparseable time"):
        admit_session([payload])


def test_payloads_refuse_unknown_fields_and_are_immutable():
    with pytest.raises(ValidationError):
        ImageObservation(id="D1:IMG_001", session="D1", time=None, caption="c", source_turn="D1:1", speaker="A",
                         provenance=Provenance(source="client", record="D1:1"), colour="red")
    image = ImageObservation(id="D1:IMG_001", session="D1", time=None, caption="c", source_turn="D1:1", speaker="A",
                             provenance=Provenance(source="client", record="D1:1"))
    with pytest.raises(ValidationError):
        image.caption = "other"
