"""Monitoring after ACCEPT_WITH_MONITOR: the monitored slice checked in later rounds and on the holdout, and a
regression journaled (MONITOR) and shown."""
from __future__ import annotations

import json
from pathlib import Path

from evolve.data import BASELINE_PATH
from evolve.loop.config import RunConfig
from evolve.loop.engine import Engine
from evolve.loop.monitor import check_at_acceptance, check_later, monitored_slices
from evolve.state.record import CandidateRecord
from evolve.ops.history import History
from evolve.cli.main import main
from evolve.ops.monitors import monitor_regressions
from evolve.ops.report import _monitors_html, render_markdown
from evolve.ops.review import render_record
from evolve.state.records import dump_record
from evolve.state.stores import RoundBundle, StoreSet
from evolve.strategy.artifact import load_strategy, strategy_hash
from evolve.verify.decision import AcceptanceRules, Decision, Verdict
from evolve.verify.outcomes import HoldoutComparison
from evolve.verify.statistics import paired_comparison

RULES = AcceptanceRules(protected_slices=["temporal"])


def accepted_with_monitor(temporal_after: float, *, applied: bool = True, verdict=Verdict.ACCEPT_WITH_MONITOR,
                          holdout: HoldoutComparison | None = None) -> CandidateRecord:
    """An applied accept of round 1 whose temporal slice fell from 1.0 to ``temporal_after`` (10 questions)."""
    right = round(temporal_after * 10)
    base = {f"t{i}": {"correct": True, "category": "temporal"} for i in range(10)}
    cand = {f"t{i}": {"correct": i < right, "category": "temporal"} for i in range(10)}
    base.update({f"s{i}": {"correct": False, "category": "single_hop"} for i in range(40)})
    cand.update({f"s{i}": {"correct": True, "category": "single_hop"} for i in range(40)})
    record = CandidateRecord("r001-c00", 1, {"key": "retrieval.top_k::increase"}, "retrieval_gap/*", "0" * 64, {},
                             paired=paired_comparison(base, cand, n_resamples=200), dcr=1.0, applied=applied,
                             holdout=holdout)
    record.close(Decision(verdict, "accepted; protected slice regressed", "protected_slice_regression"), "decision")
    return record


def temporal(score: float) -> dict[str, dict]:
    return {f"t{i}": {"correct": i < round(score * 10), "category": "temporal"} for i in range(10)}


def test_only_an_applied_accept_with_monitor_is_monitored_on_its_regressed_protected_slices():
    assert monitored_slices(accepted_with_monitor(0.8), RULES) == ["temporal"]
    assert monitored_slices(accepted_with_monitor(0.8, applied=False), RULES) == []
    assert monitored_slices(accepted_with_monitor(0.8, verdict=Verdict.ACCEPT), RULES) == []
    assert monitored_slices(accepted_with_monitor(0.8), AcceptanceRules()) == []


def test_later_rounds_check_the_slice_against_its_score_when_accepted():
    history = [accepted_with_monitor(0.8)]
    holding, = check_later(history, 2, RULES, temporal(0.8))
    assert (holding.where, holding.accepted_score, holding.score, holding.regressed) == ("dev", 0.8, 0.8, False)
    fell, = check_later(history, 3, RULES, temporal(0.5))
    assert fell.regressed and fell.round == 3 and fell.candidate_id == "r001-c00"
    assert check_later(history, 1, RULES, temporal(0.0)) == []  # not before a later round


def _held(delta_temporal: float) -> HoldoutComparison:
    rows = {"temporal": {"n": 10, "acc_baseline": 0.9, "acc_candidate": 0.9 + delta_temporal,
                         "delta": delta_temporal}}
    return HoldoutComparison(10, delta_temporal, 1.0, -0.1, 0.1, per_category=rows, score_parent=0.9,
                             score_candidate=0.9 + delta_temporal, improved=0, regressed=0)


def test_the_holdout_checks_the_slice_at_acceptance_and_later():
    dropped = accepted_with_monitor(0.8, holdout=_held(-0.3))
    at, = check_at_acceptance(dropped, RULES)
    assert at.where == "holdout at acceptance" and at.regressed
    assert not check_at_acceptance(accepted_with_monitor(0.8, holdout=_held(0.0)), RULES)[0].regressed
    later = check_later([accepted_with_monitor(0.8, holdout=_held(0.0))], 2, RULES, temporal(0.8), temporal(0.4))
    assert [(c.where, c.regressed) for c in later] == [("dev", False), ("holdout", True)]


def test_a_later_round_journals_and_shows_a_monitored_slice_regression(tmp_path: Path, capsys):
    stores = tmp_path / "stores"
    baseline = load_strategy(BASELINE_PATH)
    record = accepted_with_monitor(1.0)
    record.paired.per_category["temporal"].update(acc_baseline=1.0, acc_candidate=1.0, delta=-0.5)
    record.strategy_hash = record.parent_hash = strategy_hash(baseline)
    with StoreSet(stores) as s:  # round 1 applied it with a perfect temporal slice
        s.commit_round(1, RoundBundle(strategies=[baseline], records={"candidate_outcomes": [dump_record(record)]},
                                      state={"current_strategy": strategy_hash(baseline)}))
    config = RunConfig(benchmark="synthetic:0", limit=60, probe_size=20, rounds=2, candidates_per_round=1,
                       stores=stores, acceptance=RULES)
    summary = Engine(config, track=False, progress=False).run()
    assert summary["rounds"] == 2
    journal = [json.loads(line) for line in (stores / "journal.jsonl").read_text().splitlines()]
    monitors = [e for e in journal if e["type"] == "MONITOR"]
    assert monitors and monitors[0]["round"] == 2 and [e["type"] for e in journal][-2:] == ["ROUND", "NIGHT"]
    payload = monitors[0]["payload"]
    assert (payload["candidate_id"], payload["category"], payload["where"]) == ("r001-c00", "temporal", "dev")
    assert payload["score"] < 1.0 - RULES.epsilon("temporal")
    view = History(stores)
    assert [e.index for e in monitor_regressions(view, "r001-c00")] == [monitors[0]["index"]]
    text = render_record(view.record("r001-c00"), view)
    assert "monitored slices regressed again:" in text and "r001-c00 temporal: dev in round 2" in text
    assert "r001-c00 temporal: dev in round 2" in render_markdown(view)
    section = _monitors_html(monitor_regressions(view))
    assert "r001-c00" in section and "temporal" in section and "No slice" in _monitors_html([])
    assert main(["escalations", "--stores", str(stores)]) == 0
    out = capsys.readouterr().out
    assert "monitored slices regressed again" in out and "r001-c00" in out and "temporal" in out
