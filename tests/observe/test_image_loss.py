"""Where a gold image is lost to the image route, and the moves the planner meets each loss with."""
from __future__ import annotations

from evolve.benchmarks.types import Benchmark, Question
from evolve.data import BASELINE_PATH
from evolve.improve.digest import digest
from evolve.improve.planner import load_bundles
from evolve.observe.diagnosis import image_loss
from evolve.observe.harness import Harness
from evolve.strategy.artifact import load_strategy
from evolve.strategy.paths import set_path
from image_fixtures import PETS


def test_image_loss_rules():
    gold = ["D1:IMG_001"]
    assert image_loss(None, [], [], [], ["D1:IMG_001"]) is None  # no gold image
    assert image_loss(None, gold, [], [], ["D1:IMG_001"]) == "route_missed"
    assert image_loss(None, gold, [], [], ["D2:IMG_001"]) is None  # the IKB would not have answered with it
    assert image_loss("enumeration", gold, ["D2:IMG_001"], [], []) == "image_not_in_ikb"
    assert image_loss("naming", gold, gold, gold, []) == "name_not_recovered"
    assert image_loss("counting", gold, gold, gold, []) is None  # no name was asked for


def test_traces_name_the_image_loss_and_the_table_meets_it():
    question = Question("pets/q0", "pets", "What are the names of Ana's puppies?", "Luna, Oliver", "multi_hop",
                        ("D1:1", "D1:3", "D2:1"))
    harness = Harness(Benchmark("pets", {"pets": PETS}, [question]))
    baseline = load_strategy(BASELINE_PATH)
    off = harness.evaluate(baseline).traces[0]
    assert off.route is None and off.gold_images == ["D1:IMG_001", "D2:IMG_001"]
    assert not off.correct and off.image_loss == "route_missed"
    routed = set_path(baseline, "images.route.enabled", True)
    near = harness.evaluate(routed).traces[0]  # Luna is named two turns after her photo, beyond reach 1
    assert near.route == "naming" and near.image_loss == "name_not_recovered"
    far = harness.evaluate(set_path(routed, "images.names.reach", 2)).traces[0]
    assert far.image_loss is None and "Luna" in far.packed[0]["text"] and far.answer_in_evidence
    missed = digest([off]).symptom(f"{off.root_cause}/*")
    assert missed.qualifiers["route_missed"] == 1.0
    table = load_bundles()
    assert "images.route.enabled::enable" in [key for key, _, _ in table.lookup(missed, 0.1)]
    assert table.entries["ingestion_gap[name_not_recovered]/*"] == ("images.names.enabled::enable",
                                                                  "images.names.reach::increase")
