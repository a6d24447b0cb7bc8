"""Engine rounds: recorded decisions replay, best-ever auto-restore at the threshold, escalation, the lock."""
import json
from pathlib import Path

import pytest

from evolve.loop.config import RunConfig
from evolve.verify.decision import AcceptanceRules, decide
from evolve.loop.engine import Engine
from evolve.files import StoreError
from evolve.state.records import decision_report, load_record
from evolve.state.stores import RoundBundle, StoreSet
from evolve.data import BASELINE_PATH
from evolve.strategy.artifact import derive, dump_yaml, load_strategy, strategy_hash


def tiny(stores: Path, **overrides) -> RunConfig:
    settings = dict(benchmark="synthetic:0", limit=60, probe_size=20, rounds=1, candidates_per_round=2,
                    stores=stores)
    settings.update(overrides)
    return RunConfig(**settings)


def records(stores: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (stores / name).read_text().splitlines()]


@pytest.fixture(scope="module")
def one_round(tmp_path_factory) -> Path:
    stores = tmp_path_factory.mktemp("engine") / "stores"
    Engine(tiny(stores), track=False, progress=False).run()
    return stores


def test_round_records_every_candidate_and_decisions_replay(one_round):
    outcomes = records(one_round, "candidate_outcomes.jsonl")
    assert outcomes and all(r["decision"]["verdict"] and r["decided_by"] for r in outcomes)
    rules = AcceptanceRules()
    for r in (r for r in outcomes if r.get("paired")):
        # the record's decision report: paired, dcr and, with several compared candidates, their adjusted p
        assert decide(decision_report(load_record(r)), rules).to_dict() == r["decision"]
    journal = records(one_round, "journal.jsonl")
    assert [e["type"] for e in journal][-2:] == ["ROUND", "NIGHT"]  # the run's last round ends its night
    assert sum(e["type"] == "CANDIDATE" for e in journal) == len(outcomes)
    state = json.loads((one_round / "state.json").read_text())
    assert state["last_committed_round"] == 1 and state["harness"]["schema_hash"]


def _force_current(stores: Path, strategy: dict) -> None:
    with StoreSet(stores) as s:
        s.commit_round(s.last_committed_round + 1,
                       RoundBundle(strategies=[strategy], state={"current_strategy": strategy_hash(strategy)}))


@pytest.mark.parametrize("margin,restored", [(-0.01, True), (+0.01, False)])
def test_auto_restore_at_the_threshold(tmp_path, margin, restored):
    stores = tmp_path / "stores"
    Engine(tiny(stores, candidates_per_round=1), track=False, progress=False).run()
    best = json.loads((stores / "scoreboard.json").read_text())["rounds"][-1]["best_score"]
    bad = derive(load_strategy(BASELINE_PATH), {"extraction.min_fact_tokens": 16, "extraction.supplement": False})
    _force_current(stores, bad)
    probe = Engine(tiny(stores), track=False, progress=False)
    gap = best - probe.harness.evaluate(bad, probe.question_ids).summary.accuracy
    probe.stores.close()
    assert gap > 0.05
    # One more round whose candidates cannot close the gap (the bad strategy's ingestion loses nearly everything).
    config = tiny(stores, rounds=3, candidates_per_round=1,
                  acceptance=AcceptanceRules(restore_threshold=round(gap + margin, 4) if margin > 0 else 0.01))
    summary = Engine(config, track=False, progress=False, new_rules="restore threshold around the gap").run()
    journal = records(stores, "journal.jsonl")
    assert [e["payload"]["changed"][0]["rule"] for e in journal if e["type"] == "RULES"] == \
        ["acceptance.restore_threshold"]
    restores = [e for e in journal if e["type"] == "RESTORE" and e["round"] == 3]
    if restored:
        assert restores and restores[0]["payload"]["to"] == summary["best"]["hash"]
        assert summary["current"]["hash"] == summary["best"]["hash"]
    else:
        assert not restores and summary["current"]["hash"] != summary["best"]["hash"]


def test_schema_bound_directions_escalate(tmp_path):
    at_bound = derive(load_strategy(BASELINE_PATH), {"answering.max_answer_tokens": 64, "assembly.source_window": 5})
    strategy_file = tmp_path / "at_bound.yaml"
    strategy_file.write_text(dump_yaml(at_bound))
    stores = tmp_path / "stores"
    Engine(tiny(stores, strategy=strategy_file, escalation_threshold=1, candidates_per_round=1),
           track=False, progress=False).run()
    escalated = json.loads((stores / "escalations.json").read_text())["escalated"]
    # Only moves past a schema bound escalate, not directions that are merely already set.
    assert escalated and set(escalated) <= {"answering.max_answer_tokens::increase", "assembly.source_window::increase",
                                            "lifecycle.prune_threshold::decrease"}  # baseline sits at 0.0
    assert any(e["type"] == "ESCALATE" for e in records(stores, "journal.jsonl"))


def test_planner_paths_confine_every_candidate(one_round, tmp_path):
    unconfined = {k.split("::")[0] for r in records(one_round, "candidate_outcomes.jsonl") for k in r["change_keys"]}
    stores = tmp_path / "stores"
    Engine(tiny(stores, planner={"paths": ["retrieval.*"]}), track=False, progress=False).run()
    confined = {k.split("::")[0] for r in records(stores, "candidate_outcomes.jsonl") for k in r["change_keys"]}
    assert any(not p.startswith("retrieval.") for p in unconfined)  # the planner's first choice lies outside
    assert confined and all(p.startswith("retrieval.") for p in confined), confined


def test_second_run_on_locked_stores_is_refused(tmp_path):
    stores = tmp_path / "stores"
    with StoreSet(stores):
        with pytest.raises(StoreError, match="lock"):
            Engine(tiny(stores), track=False, progress=False)
