"""Staleness: the synthetic benchmark marks the turns each question's answer has made outdated (superseded
preferences, moved appointments, retracted plans, earlier versions of a number); traces say whether retrieval or the
packed context still carries them, and the summary gives the shares."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path

from evolve import BASELINE_PATH, Harness, load_benchmark, load_strategy
from evolve.observe.evidence import carries
from evolve.strategy.artifact import derive


def test_outdated_turns_precede_the_current_evidence_and_belong_to_the_conversation():
    bench = load_benchmark("synthetic:0:4")
    marked = [q for q in bench.questions if q.outdated]
    assert len(marked) >= 4 * 10
    order = {cid: [t.id for t in c.turns()] for cid, c in bench.conversations.items()}
    for q in marked:
        turns = order[q.conversation_id]
        assert set(q.outdated) <= set(turns) and not set(q.outdated) & set(q.evidence)
        assert max(turns.index(t) for t in q.outdated) < max(turns.index(t) for t in q.evidence)
    assert not any(q.outdated for q in bench.questions if q.category == "adversarial")


def test_turning_lifecycle_masks_off_makes_the_context_stale():
    bench = load_benchmark("synthetic:0:6")
    harness = Harness(bench, progress=False)
    baseline = load_strategy(BASELINE_PATH)
    masked = harness.evaluate(baseline)
    kept = harness.evaluate(derive(baseline, {"lifecycle.supersession": False, "lifecycle.forget_guard": False}))
    assert masked.summary.staleness["n"] == kept.summary.staleness["n"] > 50
    assert kept.summary.staleness["packed"] > masked.summary.staleness["packed"] + 0.1
    assert masked.summary.metrics()["staleness.packed"] == masked.summary.staleness["packed"]
    turn_text = {(cid, t.id): t.text for cid, c in bench.conversations.items() for t in c.turns()}
    stale = [t for t in kept.traces if t.stale_packed]
    assert stale
    for t in stale:  # a stale turn counts only where a packed memory sourced from it carries its content
        assert set(t.stale_packed) <= set(t.gold_outdated)
        for turn in t.stale_packed:
            assert any(turn in item["source_ids"] and carries(item["text"], turn_text[t.conversation_id, turn])
                       for item in t.packed)


def test_benchmarks_without_outdated_turns_keep_their_hash_and_report_no_staleness():
    bench = load_benchmark("synthetic:0:2")
    plain = replace(bench, questions=[replace(q, outdated=()) for q in bench.questions])
    h = hashlib.sha256()
    for cid in sorted(plain.conversations):
        h.update(plain.conversations[cid].content_hash().encode())
    for q in plain.questions:  # the hash as it was before questions had outdated turns
        record = {k: v for k, v in asdict(q).items() if k not in ("outdated", "abstention", "checklist")}  # later
        h.update(json.dumps(record, default=str, sort_keys=True).encode())
    assert plain.content_hash() == h.hexdigest() != bench.content_hash()
    run = Harness(plain, progress=False).evaluate(load_strategy(BASELINE_PATH))
    assert run.summary.staleness == {} and all(t.stale_packed is None for t in run.traces)


def test_stale_failures_are_a_symptom_the_planner_answers_with_lifecycle_moves():
    from evolve.improve.digest import digest
    from evolve.improve.effects import DimensionEffects
    from evolve.improve.planner import Planner, load_bundles

    naive = derive(load_strategy(BASELINE_PATH), {"lifecycle.supersession": False, "lifecycle.forget_guard": False,
                                                   "lifecycle.slots.enabled": False, "lifecycle.expiry.enabled": False})
    run = Harness(load_benchmark("synthetic:0:6"), progress=False).evaluate(naive)
    dg = digest(run.traces)
    stale = [s for s in dg.ranked() if s.root_cause == "generation_error" and s.category == "*"]
    assert stale and stale[0].qualifiers["stale"] >= 0.25
    failures = [t for t in run.traces if t.failed and t.root_cause == "generation_error"]
    assert stale[0].qualifiers["stale"] == round(sum(bool(t.stale_packed) for t in failures) / len(failures), 6)
    # the whole plan: every symptom the table can act on is read, so the lifecycle moves are not among the first few
    planner = Planner(load_bundles(), DimensionEffects())
    plan = {d.key: d.symptom_key for d in planner.plan(dg, naive, max_directions=100)}
    lifecycle = ("lifecycle.supersession::enable", "lifecycle.forget_guard::enable", "lifecycle.slots.enabled::enable",
                 "lifecycle.expiry.enabled::enable")
    assert {key: plan.get(key) for key in lifecycle} == {key: stale[0].key for key in lifecycle}


def test_a_round_records_the_staleness_of_parent_and_candidate_and_show_prints_it(tmp_path, capsys):
    from evolve import Engine
    from evolve.cli import main
    from evolve.loop.config import RunConfig

    naive = Path(__file__).resolve().parents[2] / "experiments" / "strategies" / "lifecycle_naive.yaml"
    stores = tmp_path / "stores"
    Engine(RunConfig(benchmark="lifecycle:0:4", strategy=naive, stores=stores, rounds=1, candidates_per_round=6,
                     probe_size=40), track=False, progress=False).run()
    records = [json.loads(line) for line in (stores / "candidate_outcomes.jsonl").read_text().splitlines()]
    evaluated = [r for r in records if r["paired"]]
    assert evaluated and all(r["staleness"]["parent"]["n"] == r["staleness"]["candidate"]["n"] > 0 for r in evaluated)
    assert all("staleness" not in r for r in records if not r["paired"])
    record = evaluated[0]
    assert main(["show", record["candidate_id"], "--stores", str(stores)]) == 0
    shown = capsys.readouterr().out
    parent, cand = record["staleness"]["parent"], record["staleness"]["candidate"]
    assert (f"outdated turn in the context {parent['packed']:.3f} -> {cand['packed']:.3f}" in shown
            and f"for symptom {record['symptom']}" in shown)
