"""MLflow tracking read back: one engine round logged into a SQLite tracking store holds a round run with the
round's metrics and one nested run per recorded candidate, with its decision and its record as an artifact."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from evolve.loop.config import RunConfig
from evolve.loop.engine import Engine
from evolve.verify.decision import AcceptanceRules, CostLimits

EXPERIMENT = "memevolve-tracking-test"


@pytest.fixture(scope="module")
def tracked_round(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("tracking")
    uri = f"sqlite:///{base / 'mlflow.db'}"
    config = RunConfig(benchmark="synthetic:0", limit=60, probe_size=20, rounds=1, candidates_per_round=2,
                       stores=base / "stores", tracking_uri=uri, experiment=EXPERIMENT,
                       acceptance=AcceptanceRules(bootstrap_resamples=400, protected_slices=["temporal"],
                                                  secondary="evidence"),
                       cost=CostLimits(max_relative_increase=4.0))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(base)  # the default artifact root is experiments/mlartifacts under the working directory
        summary = Engine(config, track=True, progress=False).run()
    return {"base": base, "uri": uri, "stores": config.stores, "summary": summary}


def _records(stores: Path) -> list[dict]:
    return [json.loads(line) for line in (stores / "candidate_outcomes.jsonl").read_text().splitlines()]


def test_round_and_candidate_runs_read_back(tracked_round):
    client = MlflowClient(tracking_uri=tracked_round["uri"])
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    scoreboard = json.loads((tracked_round["stores"] / "scoreboard.json").read_text())["rounds"]
    records = _records(tracked_round["stores"])
    assert len(scoreboard) == 1 and records

    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert [r.info.run_name for r in parents] == ["round-001"]
    round_run = parents[0]
    assert round_run.info.status == "FINISHED"
    assert round_run.data.tags["memevolve.round"] == "1"
    assert round_run.data.tags["accepted"] == (scoreboard[0]["accepted"] or "none")
    assert round_run.data.params["benchmark"] == "synthetic:0"
    assert round_run.data.params["stores"] == str(tracked_round["stores"])
    assert round_run.data.params["strategy_hash"] == scoreboard[0]["strategy_hash"]
    accuracy = round_run.data.metrics["accuracy"]
    assert accuracy == pytest.approx(scoreboard[0]["accuracy"], abs=1e-12)
    assert accuracy == pytest.approx(tracked_round["summary"]["current"]["accuracy"], abs=1e-12)
    assert 0.0 < accuracy < 1.0
    assert {"f1", "dcr_at_3", "recall_at_10"} <= set(round_run.data.metrics)
    # the run's only round ended its night: why, and (no confirmation set) no verdict
    assert round_run.data.tags["night.ended"] == tracked_round["summary"]["night"]["ended"] == "rounds"
    assert round_run.data.tags["night.verdict"] == "none"
    assert round_run.data.metrics["night.rounds"] == 1

    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == len(records) == len(runs) - 1
    by_name = {r.info.run_name: r for r in children}
    assert sorted(by_name) == sorted(r["candidate_id"] for r in records)
    for record in records:
        child = by_name[record["candidate_id"]]
        tags = child.data.tags
        assert child.info.status == "FINISHED"
        assert tags["mlflow.parentRunId"] == round_run.info.run_id
        assert tags["decision"] == tags["memevolve.decision"] == record["decision"]["verdict"]
        assert tags["decided_by"] == record["decided_by"]
        assert tags["applied"] == str(record["applied"])
        assert tags["rule"] == record["decision"]["rule"]
        if record.get("paired"):
            assert child.data.metrics["paired.delta"] == pytest.approx(record["paired"]["delta"], abs=1e-12)
            assert child.data.metrics["secondary.mcnemar_p"] == pytest.approx(record["secondary"]["mcnemar_p"],
                                                                           abs=1e-12)
    assert any(r.get("secondary") for r in records)
    assert scoreboard[0]["decisions"] == {r["candidate_id"]: r["decision"]["verdict"] for r in records}


def test_round_run_carries_the_decision_rules_as_params(tracked_round):
    client = MlflowClient(tracking_uri=tracked_round["uri"])
    experiment = client.get_experiment_by_name(EXPERIMENT)
    round_run = next(r for r in client.search_runs([experiment.experiment_id], max_results=1000)
                     if r.info.run_name == "round-001")
    params = round_run.data.params
    assert params["rules.acceptance.bootstrap_resamples"] == "400"
    assert params["rules.acceptance.alpha"] == "0.05" and params["rules.acceptance.dcr_tau"] == "3"
    assert params["rules.acceptance.protected_slices"] == "['temporal']"
    assert params["rules.cost.max_relative_increase"] == "4.0" and params["rules.cost.max_context_words"] == "None"
    rules = {k.removeprefix("rules."): v for k, v in params.items() if k.startswith("rules.")}
    assert len(rules) == len(AcceptanceRules.model_fields) + len(CostLimits.model_fields)
    for record in _records(tracked_round["stores"]):
        assert record["harness"]["rules"]["acceptance"]["bootstrap_resamples"] == 400
        if record.get("paired"):
            assert record["paired"]["n_resamples"] == 400


def test_candidate_artifacts_download_and_match_the_stores(tracked_round, tmp_path):
    client = MlflowClient(tracking_uri=tracked_round["uri"])
    experiment = client.get_experiment_by_name(EXPERIMENT)
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id], max_results=1000)}
    # Artifacts land under the run's own working directory, not in the repository.
    assert Path(runs["round-001"].info.artifact_uri.removeprefix("file://")).is_relative_to(tracked_round["base"])

    round_summary = json.loads(Path(client.download_artifacts(runs["round-001"].info.run_id, "round_summary.json",
                                                               str(tmp_path))).read_text())
    records = _records(tracked_round["stores"])
    assert round_summary["round"] == 1
    assert [c["id"] for c in round_summary["candidates"]] == [r["candidate_id"] for r in records]
    assert round_summary["accuracy_after"] == pytest.approx(runs["round-001"].data.metrics["accuracy"], abs=1e-12)
    observed = json.loads(Path(client.download_artifacts(runs["round-001"].info.run_id, "summary.json",
                                                         str(tmp_path))).read_text())
    assert {r["parent_hash"] for r in records} == {observed["strategy_hash"]}  # the candidates' parent
    assert "traces.jsonl" in {a.path for a in client.list_artifacts(runs["round-001"].info.run_id)}

    evaluated = 0
    for record in records:
        run = runs[record["candidate_id"]]
        dest = tmp_path / record["candidate_id"]
        dest.mkdir()
        downloaded = json.loads(Path(client.download_artifacts(run.info.run_id, "record.json", str(dest))).read_text())
        assert downloaded == record
        listed = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"record.json", "gates.json"} <= listed
        if record["strategy_hash"]:
            assert {"candidate.yaml", "diff.txt"} <= listed
            candidate = Path(client.download_artifacts(run.info.run_id, "candidate.yaml", str(dest))).read_text()
            stored = tracked_round["stores"] / "strategies" / f"{record['strategy_hash']}.yaml"
            assert candidate == stored.read_text()
        if record.get("summary"):
            evaluated += 1
            assert {"summary.json", "traces.jsonl"} <= listed
    assert evaluated >= 1  # at least one candidate was fully evaluated, so its traces were logged


def test_a_tracked_rounds_candidates_are_reviewed_from_its_artifacts(tracked_round, tmp_path, monkeypatch, capsys):
    """The round run keeps the parent's traces and each fully compared candidate's run its own: ``memevolve
    review`` finds both under the default artifact root and writes the page; with no run directory it says where
    it looked and how to provide them."""
    from evolve.cli.main import main

    compared = [r for r in _records(tracked_round["stores"]) if r.get("paired")]
    record = max(compared, key=lambda r: len(r["paired"]["improved"]) + len(r["paired"]["regressed"]))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracked_round["uri"])  # its artifacts are a default run-directory root
    page = tmp_path / "review.html"
    assert main(["review", record["candidate_id"], "--stores", str(tracked_round["stores"]), "--out", str(page)]) == 0
    out = capsys.readouterr().out
    n = len(record["paired"]["improved"]) + len(record["paired"]["regressed"])
    assert f"{n} discordances" in out
    text = page.read_text()
    assert text.count("<section class='disc'") == n
    assert f"parent traces <code>{tracked_round['base'] / 'mlartifacts'}" in text
    assert text.count("/artifacts/traces.jsonl") == 2
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.chdir(tmp_path)
    assert main(["review", record["candidate_id"], "--stores", str(tracked_round["stores"]), "--out",
                 str(page)]) == 2
    assert "holds the parent's traces" in capsys.readouterr().err
