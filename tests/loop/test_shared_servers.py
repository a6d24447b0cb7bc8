"""Shared services a team runs: a real MLflow tracking server on 127.0.0.1 (started and stopped here) and an Optuna
study on a database URL of the run config's choosing, resumed by a second engine; unreachable or malformed
settings are refused before the stores are opened."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from workflow_fixtures import cli, write_config

from evolve.loop.config import RunConfig
from evolve.loop.engine import Engine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """``mlflow server`` with its own SQLite backend and artifact directory in a temporary folder."""
    base = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{base / 'mlflow.db'}",
               "--artifacts-destination", str(base / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1"]
    log = (base / "server.log").open("w")
    server = subprocess.Popen(command, cwd=base, stdout=log, stderr=subprocess.STDOUT)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=1):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"mlflow server did not start: {(base / 'server.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield {"uri": uri, "base": base}
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_a_round_tracked_on_a_running_mlflow_server_reads_back(mlflow_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = RunConfig(benchmark="synthetic:0", limit=60, probe_size=20, rounds=1, candidates_per_round=1,
                       stores=tmp_path / "stores", tracking_uri=mlflow_server["uri"], experiment="shared-server")
    summary = Engine(config, track=True, progress=False).run()
    client = MlflowClient(tracking_uri=mlflow_server["uri"])
    experiment = client.get_experiment_by_name("shared-server")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id], max_results=100)}
    records = [json.loads(line) for line in (tmp_path / "stores" / "candidate_outcomes.jsonl").read_text().splitlines()]
    assert set(runs) == {"round-001", *(r["candidate_id"] for r in records)}
    assert runs["round-001"].data.metrics["accuracy"] == pytest.approx(summary["current"]["accuracy"], abs=1e-12)
    # Artifacts go through the server into its own artifact store, not into the working directory.
    path = client.download_artifacts(runs["round-001"].info.run_id, "round_summary.json", str(tmp_path / "dl"))
    assert json.loads(Path(path).read_text())["round"] == 1
    assert any((mlflow_server["base"] / "artifacts").rglob("round_summary.json"))
    assert not (tmp_path / "experiments").exists() and not (tmp_path / "mlruns").exists()


def test_an_unreachable_tracking_server_is_refused_before_the_stores(capsys, tmp_path):
    config = write_config(tmp_path / "run.yaml", stores=tmp_path / "stores",
                          tracking_uri=f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    code, out = cli(capsys, "run", "--config", config)
    assert code == 2 and f"{config}: tracking_uri: cannot reach the MLflow tracking server" in out
    assert not (tmp_path / "stores").exists() and time.monotonic() - started < 30


def test_optuna_studies_on_another_database_are_resumed_by_a_second_engine(tmp_path):
    url = f"sqlite:///{tmp_path / 'studies' / 'shared.db'}"
    config = RunConfig(benchmark="synthetic:0", limit=60, probe_size=20, rounds=2, candidates_per_round=1,
                       stores=tmp_path / "stores", optuna_storage=url)
    Engine(config, track=False, progress=False).run(1)
    trials = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(url)}
    assert trials and not (tmp_path / "stores" / "optuna.db").exists()
    Engine(config, track=False, progress=False).run(1)  # a second engine, a new process's view of the same studies
    later = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(url)}
    assert sum(later.values()) > sum(trials.values()) and all(later.get(k, 0) >= n for k, n in trials.items())
    rounds = [json.loads(line)["round"] for line in (tmp_path / "stores" / "candidate_outcomes.jsonl").read_text()
              .splitlines()]
    assert sorted(set(rounds)) == [1, 2]


@pytest.mark.parametrize("url, rule", [
    ("not a url", "is not a SQLAlchemy database URL"),
    ("sqlite://", "names no database file"),
])
def test_a_malformed_optuna_storage_url_is_refused_naming_the_field(capsys, tmp_path, url, rule):
    config = write_config(tmp_path / "run.yaml", stores=tmp_path / "stores", optuna_storage=url)
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and f"{config}:" in out and "optuna_storage" in out and rule in out, out
    assert not (tmp_path / "stores").exists()
