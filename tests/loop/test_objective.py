"""The evidence and answer objectives through the loop: run-config checks, one evolution round, one harness per
stores."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from evolve.benchmarks import load_benchmark
from evolve.benchmarks.synthetic import write_locomo
from evolve.state.records import decision_report, dump_record, load_record
from evolve.observe.ladder import ANSWER_LOSSES
from evolve.verify.decision import AcceptanceRules, CostLimits, decide
from workflow_fixtures import cli, write_config

SMALL = dict(benchmark="synthetic:0:3", limit=60, probe_size=20, rounds=1, candidates_per_round=2)


@pytest.mark.parametrize("settings, needle", [
    ({"objective": "evidnce"}, "objective: Input should be 'accuracy', 'evidence' or 'answer'"),
    ({"cost": {"max_context_words": -5}}, "cost.max_context_words: Input should be greater than 0"),
    ({"cost": {"max_context_words": "lots"}}, "cost.max_context_words"),
    ({"cost": {"max_relative_increase": -0.5}}, "cost.max_relative_increase: Input should be greater than or equal"),
    ({"cost": {"max_words": 100}}, "cost.max_words: Extra inputs are not permitted"),
    ({"acceptance": {"secondary": "evidnce"}}, "acceptance.secondary: Input should be 'accuracy', 'evidence' or"),
    ({"acceptance": {"non_inferiority_margin": -0.1}}, "acceptance.non_inferiority_margin: Input should be greater"),
    ({"planner": {"paths": ["retrival.*"]}}, "planner.paths: 'retrival.*': matches no path the run can move"),
    ({"planner": {"paths": []}}, "planner.paths: List should have at least 1 item"),
    ({"objective": "answer", "acceptance": {"secondary": "answer"}},
     "acceptance.secondary: 'answer' is the objective itself; name another outcome (accuracy, evidence)"),
])
def test_bad_objective_cost_or_planner_settings_exit_2_before_the_stores(capsys, tmp_path, settings, needle):
    config = write_config(tmp_path / "run.yaml", **SMALL, stores=tmp_path / "stores", **settings)
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and str(config) in out and needle in out, out
    assert not (tmp_path / "stores").exists()


def test_evidence_objective_on_a_benchmark_without_gold_evidence_is_refused(capsys, tmp_path):
    bench = load_benchmark("synthetic:0:2")
    bare = dataclasses.replace(bench, questions=[dataclasses.replace(q, evidence=()) for q in bench.questions])
    write_locomo(bare, tmp_path / "bare.json")
    config = write_config(tmp_path / "run.yaml", **{**SMALL, "benchmark": f"locomo:{tmp_path / 'bare.json'}"},
                          stores=tmp_path / "stores", objective="evidence")
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and f"{config}: objective: 'evidence' needs gold evidence turn ids" in out, out
    assert not (tmp_path / "stores").exists()


def test_a_secondary_outcome_the_benchmark_cannot_measure_is_refused(capsys, tmp_path):
    bench = load_benchmark("synthetic:0:2")
    bare = dataclasses.replace(bench, questions=[dataclasses.replace(q, evidence=()) for q in bench.questions])
    write_locomo(bare, tmp_path / "bare.json")
    config = write_config(tmp_path / "run.yaml", **{**SMALL, "benchmark": f"locomo:{tmp_path / 'bare.json'}"},
                          stores=tmp_path / "stores", acceptance={"secondary": "evidence"})
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and f"{config}: acceptance.secondary: 'evidence' needs gold evidence turn ids" in out, out
    assert not (tmp_path / "stores").exists()


@pytest.mark.parametrize("strip, needle", [
    ({"evidence": ()}, "objective: 'answer' needs gold evidence turn ids and a gold answer with a content word"),
    ({"answer": "Yes"}, "objective: 'answer' needs gold evidence turn ids and a gold answer with a content word"),
])
def test_answer_objective_on_a_benchmark_without_evidence_or_answers_is_refused(capsys, tmp_path, strip, needle):
    bench = load_benchmark("synthetic:0:2")
    bare = dataclasses.replace(bench, questions=[dataclasses.replace(q, **strip) for q in bench.questions])
    write_locomo(bare, tmp_path / "bare.json")
    config = write_config(tmp_path / "run.yaml", **{**SMALL, "benchmark": f"locomo:{tmp_path / 'bare.json'}"},
                          stores=tmp_path / "stores", objective="answer")
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and f"{config}: {needle}" in out, out
    assert not (tmp_path / "stores").exists()


@pytest.fixture(scope="module")
def evidence_round(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("evidence")
    config = write_config(base / "run.yaml", **SMALL, stores=base / "stores", objective="evidence",
                          cost={"max_context_words": 400, "max_relative_increase": 0.5})
    from evolve.cli import main

    assert main(["run", "--config", str(config), "--no-tracking"]) == 0
    return base / "stores", config


def test_an_evidence_round_compares_evidence_outcomes_and_records_cost(evidence_round):
    stores, _ = evidence_round
    state = json.loads((stores / "state.json").read_text())
    assert state["harness"]["objective"] == "evidence"
    row = json.loads((stores / "scoreboard.json").read_text())["rounds"][-1]
    assert row["objective"] == "evidence" and row["score"] == row["all_evidence_packed"]
    records = [load_record(json.loads(line))
               for line in (stores / "candidate_outcomes.jsonl").read_text().splitlines()]
    evaluated = [r for r in records if r.paired]
    probed = [r for r in records if r.probe]
    assert probed and all("packed_contexts_changed" in dump_record(r)["probe"] for r in probed)
    for r in evaluated:  # paired over evidence-known questions only, cost recorded, decision replays
        assert r.paired.n == r.summary["n_evidence_known"]
        assert set(dump_record(r)["cost"]) == {"words_parent", "words_candidate"}
        limits = CostLimits(max_context_words=400, max_relative_increase=0.5)
        assert decide(decision_report(r), AcceptanceRules(), limits).to_dict() == dump_record(r)["decision"]


def test_stores_built_for_one_objective_refuse_the_other(capsys, evidence_round, tmp_path):
    stores, _ = evidence_round
    config = write_config(tmp_path / "run.yaml", **{**SMALL, "rounds": 2}, stores=stores)  # accuracy
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and "objective: stores 'evidence'" in out, out


def test_an_answer_round_compares_answer_outcomes_and_aims_at_where_answers_were_lost(tmp_path, capsys):
    config = write_config(tmp_path / "run.yaml", **SMALL, stores=tmp_path / "stores", objective="answer",
                          cost={"max_context_words": 400, "max_relative_increase": 0.5},
                          acceptance={"secondary": "evidence"})
    from evolve.cli import main

    assert main(["run", "--config", str(config), "--no-tracking"]) == 0
    stores = tmp_path / "stores"
    harness = json.loads((stores / "state.json").read_text())["harness"]
    assert harness["objective"] == "answer" and harness["rules"]["acceptance"]["secondary"] == "evidence"
    row = json.loads((stores / "scoreboard.json").read_text())["rounds"][-1]
    assert row["objective"] == "answer" and row["score"] == row["answer_in_evidence"] is not None
    records = [load_record(json.loads(line))
               for line in (stores / "candidate_outcomes.jsonl").read_text().splitlines()]
    assert records and all(r.symptom.split("/")[0].split("[")[0] in ANSWER_LOSSES.values() for r in records)
    assert any(r.paired for r in records)
    for r in records:
        if r.probe:
            assert "packed_contexts_changed" in dump_record(r)["probe"]
        if r.paired:  # paired over the questions the answer check counts; evidence over those whose turns are known
            assert r.paired.n == r.summary["n_answer_known"]
            assert r.secondary is not None and r.secondary.n == r.summary["n_evidence_known"]
            rules = AcceptanceRules(**harness["rules"]["acceptance"])
            assert decide(decision_report(r), rules, CostLimits(**harness["rules"]["cost"])) == r.decision
    shown = next(r for r in records if r.paired)
    code, out = cli(capsys, "show", shown.candidate_id, "--config", config)
    assert code == 0 and f"secondary outcome (all evidence packed) on {shown.secondary.n} questions" in out, out


def test_an_answer_round_with_probes_decides_on_labelled_and_probe_questions_together(tmp_path):
    config = write_config(tmp_path / "run.yaml", benchmark="synthetic:0:1", limit=None, probe_size=10, rounds=1,
                          candidates_per_round=1, stores=tmp_path / "stores", objective="answer", augment="probes",
                          cost={"max_context_words": 400, "max_relative_increase": 0.5})
    from evolve.cli import main

    assert main(["run", "--config", str(config), "--no-tracking"]) == 0
    stores = tmp_path / "stores"
    harness = json.loads((stores / "state.json").read_text())["harness"]
    labelled = [q for q in load_benchmark("synthetic:0:1").questions if q.category != "adversarial"]
    assert harness["n_questions"] > len(labelled)  # the probes joined the labelled questions
    row = json.loads((stores / "scoreboard.json").read_text())["rounds"][-1]
    assert row["objective"] == "answer" and row["score"] == row["answer_in_evidence"] is not None
