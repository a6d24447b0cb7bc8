"""The loop drives a memory system it did not write: an adapter's knobs are validated, planned, gated, decided and
journaled like the embedded runtime's strategy; a failing adapter or a knob schema without evolvable paths stops
with a clear error and journals nothing."""
from __future__ import annotations

import json

import pytest
import yaml

from evolve.cli.main import main
from evolve.loop.config import load_config
from evolve.loop.engine import Engine
from evolve.strategy.artifact import StrategyError, validate_strategy
from evolve.strategy.schema import activate, evolvable_dimensions, is_framework
from external_fixtures import SCHEMA, write_system
from workflow_fixtures import journal


def test_the_loop_evolves_an_external_systems_knobs(tmp_path, capsys):
    config = load_config(write_system(tmp_path))
    Engine(config, track=False, progress=False).run()
    assert set(evolvable_dimensions()) == {"store.window", "recall.top_k"}  # the knob schema is the strategy schema
    entries = journal(config.stores)
    candidates = [e["payload"] for e in entries if e["type"] == "CANDIDATE"]
    assert len(candidates) == 4 and [e["type"] for e in entries].count("ROUND") == 2
    assert {path for c in candidates for path in c["diff"]["changed"]} - {"parent"} <= {"store.window", "recall.top_k"}
    state = json.loads((config.stores / "state.json").read_text())
    final = yaml.safe_load((config.stores / "strategies" / f"{state['current_strategy']}.yaml").read_text())
    validate_strategy(final)  # what the loop keeps is a valid knob strategy
    accepted = [e for e in entries if e["type"] == "ACCEPT"]
    assert accepted, [e["type"] for e in entries]
    assert final["recall"]["top_k"] > 1  # one recalled turn misses most answers; the accepted move recalls more

    # promote and show read the knob strategies in a fresh command, under the schema the stores recorded
    activate(None)
    serving = tmp_path / "serving" / "overlap.yaml"
    serving.parent.mkdir()
    accepted_id = accepted[-1]["payload"]["candidate_id"]
    code = main(["promote", accepted_id, "--to", str(serving), "--stores", str(config.stores), "--allow-outside"])
    assert code == 0, capsys.readouterr().err
    assert yaml.safe_load(serving.read_text())["recall"] == final["recall"]
    assert main(["show", accepted_id, "--stores", str(config.stores)]) == 0
    assert "recall.top_k" in capsys.readouterr().out


def test_a_run_config_without_runtime_restores_the_framework_schema(tmp_path):
    load_config(write_system(tmp_path / "ext"))
    from evolve.loop.setup import RunSetup

    RunSetup.prepare(load_config(write_system(tmp_path / "ext")))
    assert not is_framework()
    from workflow_fixtures import write_config

    RunSetup.prepare(load_config(write_config(tmp_path / "ours.yaml", stores=tmp_path / "s")))
    assert is_framework() and "retrieval.top_k" in evolvable_dimensions()
    with pytest.raises(StrategyError, match="recall: unknown field"):
        validate_strategy({"version": "1", "name": "x", "store": {"window": 1}, "recall": {"top_k": 1}})


@pytest.mark.parametrize("adapter, message", [
    ("external_fixtures:RaisingSession", r"external_fixtures:RaisingSession: conversation \S+: question .*recall: "
                                         r"raised RuntimeError: index unavailable"),
    ("external_fixtures:HangingSession", r"external_fixtures:HangingSession: .*recall: no answer within 2 s"),
    ("external_fixtures:MalformedSession", r"recall: item 0: source_ids: Field required"),
    ("external_fixtures:Missing", r"adapter 'external_fixtures:Missing': cannot import"),
])
def test_a_failing_adapter_stops_the_run_naming_it_and_the_question(tmp_path, capsys, adapter, message):
    path = write_system(tmp_path, adapter=adapter)
    code = main(["run", "--config", str(path), "--no-tracking"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert __import__("re").search(message, err), err
    assert not (tmp_path / "stores" / "journal.jsonl").exists()  # nothing journaled


def test_a_knob_schema_without_evolvable_paths_is_refused_before_the_stores(tmp_path, capsys):
    frozen = json.loads(json.dumps(SCHEMA).replace('"x-evolvable"', '"x-note"'))
    code = main(["run", "--config", str(write_system(tmp_path, schema=frozen)), "--no-tracking"])
    err = capsys.readouterr().err
    assert code == 2
    assert "knobs.schema.json: <root>: no x-evolvable path" in err, err
    assert not (tmp_path / "stores").exists()


def test_knobs_outside_their_schema_are_refused_naming_the_key(tmp_path, capsys):
    path = write_system(tmp_path)
    (tmp_path / "knobs.yaml").write_text("version: '1'\nname: x\nstore: {window: 1}\nrecall: {top_k: 99}\n")
    assert main(["run", "--config", str(path), "--no-tracking"]) == 2
    assert "knobs.yaml:4: recall.top_k: maximum" in capsys.readouterr().err
    assert not (tmp_path / "stores").exists()


def test_the_top_level_strategy_is_refused_beside_runtime(tmp_path, capsys):
    code = main(["run", "--config", str(write_system(tmp_path, strategy="knobs.yaml")), "--no-tracking"])
    assert code == 2
    assert "leave strategy out" in capsys.readouterr().err


def test_the_system_reaches_worker_processes_without_its_sessions(tmp_path):
    # harness workers receive the roles pickled: the adapter and schema travel, ingested sessions stay behind
    import pickle

    from evolve.benchmarks import load_benchmark
    from evolve.runtime.external import ExternalSystem

    system = ExternalSystem("external_fixtures:OverlapSession", SCHEMA, timeout_s=5)
    conversation = next(iter(load_benchmark("synthetic:0").conversations.values()))
    knobs = {"version": "1", "name": "x", "store": {"window": 1}, "recall": {"top_k": 2}}
    system.runtime(knobs).ingest(conversation)
    copy = pickle.loads(pickle.dumps(system))
    assert (copy.adapter, copy.schema, copy.ingestion) == (system.adapter, SCHEMA, ("store",))
    assert not copy._sessions and len(system._sessions) == 1
    store = copy.runtime(knobs).ingest(conversation)
    assert len(copy.runtime(knobs).ask(store, "What is Tomas's favorite sport?").packed) == 2
