"""Where a chain of device events came apart, and the moves the planner meets each loss with: fusion, installed
whole into a strategy that left it out, then the graph's edges."""
from __future__ import annotations

from evolve.benchmarks import load_benchmark
from evolve.benchmarks.types import Benchmark
from evolve.data import BASELINE_PATH
from evolve.improve.digest import digest
from evolve.improve.planner import load_bundles, move_values
from evolve.observe.diagnosis import event_loss
from evolve.observe.harness import Harness
from evolve.strategy.artifact import derive, load_strategy, validate_strategy
from evolve.strategy.diff import effective_changes
from evolve.strategy.moves import Step
from evolve.strategy.paths import value_at
from evolve.strategy.policy import Fusion
from evolve.strategy.schema import evolvable_dimensions


def test_event_loss_rules():
    gold = ["E1", "E2", "E3"]
    assert event_loss(["E1"], [], []) is None  # one event is no chain
    assert event_loss(gold, gold, []) is None  # the context holds them all
    assert event_loss(gold, ["E1"], [("E1", "E9")]) == "event_unfused"  # no pack holds two of them
    assert event_loss(gold, ["E1"], [("E9", "E2", "E3")]) == "edge_not_followed"


def test_traces_name_the_event_loss_and_the_planner_installs_fusion_to_meet_it():
    bench = load_benchmark("scenegen:3:1")
    causal = [q for q in bench.questions if q.category == "scene_causal"]
    harness = Harness(Benchmark("causal", bench.conversations, causal), progress=False)
    baseline = load_strategy(BASELINE_PATH)
    traces = harness.evaluate(baseline, answer=False).traces
    unfused = [t for t in traces if t.event_loss == "event_unfused"]
    assert unfused and not any(t.event_loss == "edge_not_followed" for t in traces)  # fusion is off: no pack
    symptom = digest(unfused).symptom(f"{unfused[0].root_cause}/*")
    assert symptom.qualifiers["event_unfused"] == 1.0
    assert "features.fusion.enabled::enable" in [key for key, _, _ in load_bundles().lookup(symptom, 0.1)]

    dim = evolvable_dimensions()["features.fusion.enabled"]
    assert "fusion" not in baseline["features"] and value_at(baseline, dim.path) is False
    (value,) = move_values(baseline, dim, Step.to(dim.path, True))
    fused = validate_strategy(derive(baseline, {dim.path: value}))
    assert fused["features"]["fusion"] == Fusion(enabled=True).model_dump()  # the section installed whole
    assert effective_changes(baseline, fused) == {dim.path: (False, True)}  # what the gates judge: one switch
    after = {t.question_id: t for t in harness.evaluate(fused, answer=False).traces}
    assert sum(after[t.question_id].event_loss == "event_unfused" for t in unfused) < len(unfused)
    assert sum(t.all_evidence_packed for t in after.values()) > sum(t.all_evidence_packed for t in traces)
