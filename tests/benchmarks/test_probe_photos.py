"""Photo probes: how many photos of a kind a speaker shared and the names given to their subjects, from the photos
the reference image knowledge base files, and the setting that asks them."""
from __future__ import annotations

from pathlib import Path

import pytest

from evolve.benchmarks import load_benchmark
from evolve.benchmarks.probe_mix import KIND_CATEGORY, ProbeSettings
from evolve.benchmarks.probe_photos import GalleryPhoto, photo_counts, photo_names
from evolve.benchmarks.probes import candidates, conversation_probes
from evolve.runtime.reference import ReferenceGallery
from tests.image_fixtures import PETS

DEV4 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo" / "locomo_dev4.json"


def test_the_gallery_counts_a_speakers_photos_of_a_kind_and_names_their_subjects_with_the_naming_turn():
    photos = ReferenceGallery().photos(PETS)
    assert [(p.id, p.categories[:1], p.name, p.name_turn) for p in photos if p.speaker == "Ana"] == [
        ("D1:IMG_001", ("dog",), "Luna", "D1:3"), ("D2:IMG_001", ("dog",), "Oliver", "D2:1")]
    counted = {p.question: p for p in photo_counts(PETS, photos)}
    assert counted["How many photos of dogs has Ana shared?"].answer == "2"
    assert counted["How many photos of dogs has Ana shared?"].evidence == ("D1:1", "D2:1")
    assert not any("Ben" in q for q in counted)  # one painting, one set of bowls: nothing to count
    (named,) = photo_names(PETS, photos)
    assert (named.question, named.answer) == ("What are the names of the dogs in Ana's photos?", "Luna, Oliver")
    assert set(named.evidence) == {"D1:1", "D2:1", "D1:3"}  # the photos and the turn that named Luna
    assert {KIND_CATEGORY["photo_count"], KIND_CATEGORY["photo_name"]} == {"multi_hop"}


def test_counts_need_two_sessions_and_names_need_a_naming_turn_that_holds_them():
    one_session = [GalleryPhoto(f"D1:IMG_00{i}", f"D1:{i}", "Ana", None, ("dog",)) for i in (1, 2)]
    assert photo_counts(PETS, one_session) == []
    unsaid = [GalleryPhoto("D1:IMG_001", "D1:1", "Ana", None, ("dog",), "Rex", "D1:2")]  # D1:2 never says Rex
    assert photo_names(PETS, unsaid) == []


def test_photo_probes_are_asked_only_under_the_gallery_setting():
    gallery = ReferenceGallery()
    kinds = {p.kind for p in candidates(PETS)}
    assert not kinds & {"photo_count", "photo_name"}
    assert {p.kind for p in candidates(PETS, gallery)} == kinds | {"photo_count", "photo_name"}
    assert conversation_probes(PETS, gallery=gallery) == conversation_probes(PETS)  # off by default
    asked = conversation_probes(PETS, ProbeSettings(gallery=True), gallery=gallery)
    assert {p.kind for p in asked} & {"photo_count", "photo_name"}


@pytest.mark.skipif(not DEV4.exists(), reason="LoCoMo dev4 not available")
def test_on_dev4_the_gallery_names_marias_dogs_as_locomos_own_question_does():
    bench = load_benchmark(f"locomo:{DEV4}#conv-41")
    named = {p.question: p.answer for p in photo_names(bench.conversations["conv-41"],
                                                        ReferenceGallery().photos(bench.conversations["conv-41"]))}
    assert named["What are the names of the dogs in Maria's photos?"] == "Coco, Shadow"
    labelled = {q.question: q.answer for q in bench.questions}
    assert labelled["What are Maria's dogs' names?"] == "Coco, Shadow"
