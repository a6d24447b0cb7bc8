"""The holdout: questions of conversations the search never sees (a split by conversation, or a second benchmark);
a would-be accept is compared with its parent there, and the round's current strategy is scored there."""
from __future__ import annotations

import json

import pytest
from workflow_fixtures import cli, write_config

from evolve.benchmarks import write_locomo
from evolve.benchmarks.synthetic import generate_synthetic
from evolve.loop.config import HoldoutConfig, RunConfig
from evolve.loop.engine import Engine
from evolve.loop.setup import RunSetup


def test_a_split_holds_whole_conversations_out_deterministically():
    def split(seed: int) -> RunSetup:
        return RunSetup.prepare(RunConfig(benchmark="synthetic:0:6", holdout=HoldoutConfig.model_validate(
            {"split": {"holdout_fraction": 0.34, "seed": seed}})))

    setup = split(0)
    bench = setup.benchmark
    conv = {q.id: q.conversation_id for q in bench.questions}
    dev, held = {conv[q] for q in setup.question_ids}, {conv[q] for q in setup.holdout_ids}
    assert len(held) == 2 and len(dev) == 4 and not dev & held
    assert set(setup.question_ids) | set(setup.holdout_ids) == set(conv)
    assert set(setup.probe_ids) <= set(setup.question_ids) and set(setup.scored) <= set(setup.question_ids)
    assert split(0).holdout_ids == setup.holdout_ids and split(1).holdout_ids != setup.holdout_ids


def test_a_run_with_a_holdout_checks_accepts_there_and_scores_each_round(tmp_path):
    config = RunConfig(benchmark="synthetic:0:6", probe_size=20, rounds=2, candidates_per_round=2, seed=0,
                       stores=tmp_path / "stores", holdout=HoldoutConfig.model_validate(
                           {"split": {"holdout_fraction": 0.5, "seed": 0}}))
    summary = Engine(config, track=False, progress=False).run()
    records = [json.loads(line) for line in (tmp_path / "stores" / "candidate_outcomes.jsonl").read_text().splitlines()]
    decided = [r for r in records if r["decided_by"] == "decision"]
    assert decided, "no candidate reached a full comparison"
    for r in decided:  # only a would-be accept is taken to the holdout
        would_accept = r["decision"]["verdict"].startswith("ACCEPT") or r["decision"]["rule"] == "holdout"
        assert ("holdout" in r) == would_accept
        if "holdout" in r:
            assert r["holdout"]["n"] > 0 and set(r["holdout"]) >= {"delta", "mcnemar_p", "score_parent"}
    rounds = json.loads((tmp_path / "stores" / "scoreboard.json").read_text())["rounds"]
    assert all(isinstance(row["holdout_score"], float) and isinstance(row["holdout_best_score"], float)
               for row in rounds)
    assert summary["holdout"]["score_candidate"] == pytest.approx(rounds[-1]["holdout_score"])
    state = json.loads((tmp_path / "stores" / "state.json").read_text())
    assert state["harness"]["holdout"] == "split:0.5:0"


def test_a_second_benchmark_can_be_the_holdout(tmp_path):
    write_locomo(generate_synthetic(seed=7, n_personas=2), tmp_path / "other.json")
    config = RunConfig(benchmark="synthetic:0:2", probe_size=10, rounds=1, candidates_per_round=1,
                       stores=tmp_path / "stores",
                       holdout=HoldoutConfig(benchmark=f"locomo:{tmp_path / 'other.json'}"))
    summary = Engine(config, track=False, progress=False).run()
    assert summary["holdout"]["questions"] > 0 and summary["holdout"]["n"] > 0


@pytest.mark.parametrize("holdout, where, rule", [
    ({"split": {"holdout_fraction": 1.5}}, "holdout.split.holdout_fraction", "less than 1"),
    ({"split": {"holdout_fraction": 0}}, "holdout.split.holdout_fraction", "greater than 0"),
    ({}, "holdout", "give exactly one of benchmark"),
    ({"benchmark": "synthetic:0:2", "split": {"holdout_fraction": 0.5}}, "holdout", "give exactly one"),
    ({"benchmark": "synthetic:0:3"}, "holdout.benchmark", "conversation(s) with the benchmark"),
])
def test_bad_holdouts_are_refused_before_the_stores(capsys, tmp_path, holdout, where, rule):
    config = write_config(tmp_path / "run.yaml", benchmark="synthetic:0:2", stores=tmp_path / "stores",
                          holdout=holdout)
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and str(config) in out and where in out and rule in out, out
    assert not (tmp_path / "stores").exists()


def test_a_split_needs_two_conversations(capsys, tmp_path):
    config = write_config(tmp_path / "run.yaml", benchmark="synthetic:0:1", stores=tmp_path / "stores",
                          holdout={"split": {"holdout_fraction": 0.5}})
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and "holdout.split:" in out and "needs at least 2" in out
