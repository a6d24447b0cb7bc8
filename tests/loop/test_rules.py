"""The decision rules on record: in the stores' harness identity and every candidate record; a run on stores made under
other rules (or under rules not recorded) is refused naming the rule, unless ``--new-rules REASON`` journals the
change (RULES) and continues."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import get_args

import pytest

from evolve.cli import main
from evolve.loop.rules import RulesChange, rule_changes, rules_of
from evolve.observe.trace import DCR_TAUS
from evolve.state.journal import Journal
from evolve.strategy.schema import schema_hash
from evolve.verify.decision import AcceptanceRules, CostLimits, decide
from evolve.verify.statistics import paired_comparison
from tests.workflow_fixtures import cli, journal, snapshot, write_config

OLD_STORES = Path(__file__).parents[1] / "fixtures" / "stores_6991b56"
RULES = {"alpha": 0.05, "bootstrap_resamples": 300}


def test_rule_changes_name_each_rule_with_both_values():
    old = rules_of(AcceptanceRules(**RULES), CostLimits())
    new = rules_of(AcceptanceRules(**{**RULES, "alpha": 0.01}, epsilon_by_category={"temporal": 0.1}),
                   CostLimits(max_context_words=300.0))
    assert rule_changes(old, new) == [("acceptance.alpha", 0.05, 0.01),
                                      ("acceptance.epsilon_by_category", {}, {"temporal": 0.1}),
                                      ("cost.max_context_words", None, 300.0)]
    assert rule_changes(old, old) == []


def test_a_rule_recorded_before_it_existed_takes_its_default():
    new = rules_of(AcceptanceRules(), CostLimits())
    old = {"acceptance": {k: v for k, v in new["acceptance"].items() if k != "dcr_tau"}, "cost": new["cost"]}
    assert rule_changes(old, new) == []
    assert rule_changes(old, rules_of(AcceptanceRules(dcr_tau=5), CostLimits())) == [("acceptance.dcr_tau", 3, 5)]


def test_fdr_q_is_compared_only_where_bh_reads_it():
    holm_old, holm_new = (rules_of(AcceptanceRules(fdr_q=q), CostLimits()) for q in (0.05, 0.01))
    assert rule_changes(holm_old, holm_new) == []
    bh_old, bh_new = (rules_of(AcceptanceRules(multiple_testing="bh", fdr_q=q), CostLimits()) for q in (0.05, 0.01))
    assert rule_changes(bh_old, bh_new) == [("acceptance.fdr_q", 0.05, 0.01)]
    assert rule_changes(holm_old, bh_new) == [("acceptance.fdr_q", 0.05, 0.01),
                                              ("acceptance.multiple_testing", "holm", "bh")]


def test_the_journal_payload_keeps_old_and_new_rules_and_the_reason():
    old, new = rules_of(AcceptanceRules(), CostLimits()), rules_of(AcceptanceRules(rho_min=0.5), CostLimits())
    payload = RulesChange(old, new, "DCR floor lowered for the thin traces").payload()
    assert payload == {"old": old, "new": new, "reason": "DCR floor lowered for the thin traces",
                       "changed": [{"rule": "acceptance.rho_min", "old": 0.9, "new": 0.5}]}
    assert RulesChange(None, new, "r").payload()["changed"] is None


@pytest.mark.parametrize("text,expected", [("dcr_tau: 4", "acceptance.dcr_tau"),
                                           ("bootstrap_resamples: 0", "acceptance.bootstrap_resamples")])
def test_bad_rule_values_are_refused_by_name(text, expected, tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(f"stores: {tmp_path / 'stores'}\nacceptance: {{{text}}}\n")
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and expected in out, out
    assert not (tmp_path / "stores").exists()


def test_stores_without_recorded_rules_are_refused_as_rules_unknown(tmp_path, capsys):
    root = tmp_path / "stores"
    shutil.copytree(OLD_STORES / "accuracy", root)
    state = json.loads((root / "state.json").read_text())
    harness = state["harness"]
    # On today's schema (the fixture's is older, which the harness check refuses first), only the rules are unknown.
    state["harness"]["schema_hash"] = schema_hash()
    (root / "state.json").write_text(json.dumps(state))
    config = write_config(tmp_path / "run.yaml", benchmark=harness["benchmark"], stores=root, limit=None)
    before = snapshot(root)
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2, out
    assert "made before decision rules were recorded" in out and "--new-rules REASON" in out, out
    assert snapshot(root) == before


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> tuple[Path, Path]:
    """Stores after one round under ``RULES`` (alpha 0.05)."""
    base = tmp_path_factory.mktemp("rules")
    config = write_config(base / "run.yaml", stores=base / "stores", rounds=1, acceptance=RULES)
    assert main(["run", "--config", str(config), "--no-tracking"]) == 0
    return base, base / "stores"


def test_records_and_state_carry_the_rules(first_run):
    base, root = first_run
    expected = rules_of(AcceptanceRules(**RULES), CostLimits())
    assert json.loads((root / "state.json").read_text())["harness"]["rules"] == expected
    records = [json.loads(line) for line in (root / "candidate_outcomes.jsonl").read_text().splitlines()]
    assert records and all(r["harness"]["rules"] == expected for r in records)
    assert all(r["paired"]["n_resamples"] == 300 for r in records if r.get("paired"))
    rounds = [e for e in journal(root) if e["type"] == "ROUND"]
    assert rounds[-1]["payload"]["harness"]["rules"] == expected


def test_changed_rules_are_refused_then_journaled_with_new_rules(first_run, tmp_path, capsys):
    base, committed = first_run
    root = tmp_path / "stores"
    shutil.copytree(committed, root)
    config = write_config(tmp_path / "run.yaml", stores=root, rounds=2, acceptance={**RULES, "alpha": 0.04})
    before = snapshot(root)
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2, out
    assert "acceptance.alpha: stores 0.05, run config 0.04" in out and "--new-rules" in out, out
    assert snapshot(root) == before  # refused before anything is written

    code, out = cli(capsys, "run", "--config", config, "--no-tracking", "--new-rules", "a stricter alpha for the night")
    assert code == 0, out
    entries = journal(root)
    rules = [e for e in entries if e["type"] == "RULES"]
    assert len(rules) == 1
    payload = rules[0]["payload"]
    assert payload["reason"] == "a stricter alpha for the night"
    assert payload["old"]["acceptance"]["alpha"] == 0.05 and payload["new"]["acceptance"]["alpha"] == 0.04
    assert payload["changed"] == [{"rule": "acceptance.alpha", "old": 0.05, "new": 0.04}]
    assert entries.index(rules[0]) < entries.index(next(e for e in entries if e["type"] == "ROUND" and e["round"] == 2))
    state = json.loads((root / "state.json").read_text())
    assert state["last_committed_round"] == 2 and state["harness"]["rules"]["acceptance"]["alpha"] == 0.04
    assert Journal(root / "journal.jsonl").verify(state["journal_head"]).ok
    code, out = cli(capsys, "journal", "verify", "--stores", root)
    assert code == 0, out
    round2 = [json.loads(line) for line in (root / "candidate_outcomes.jsonl").read_text().splitlines()
              if json.loads(line)["round"] == 2]
    assert round2 and all(r["harness"]["rules"]["acceptance"]["alpha"] == 0.04 for r in round2)

    code, out = cli(capsys, "run", "--config", config, "--no-tracking")  # the new rules are the stores' now
    assert code == 0 and "0 rounds run" in out, out
    assert [e["type"] for e in journal(root)].count("RULES") == 1


def _recorded_fdr_q(root: Path, **acceptance) -> None:
    """Rewrite the stores' recorded rules as made under the former default ``fdr_q: 0.05`` (and ``acceptance``)."""
    state = json.loads((root / "state.json").read_text())
    state["harness"]["rules"]["acceptance"].update(fdr_q=0.05, **acceptance)
    (root / "state.json").write_text(json.dumps(state))


def test_stores_recorded_under_the_old_fdr_q_continue_under_holm_but_not_under_bh(first_run, tmp_path, capsys):
    base, committed = first_run
    holm, bh = tmp_path / "holm", tmp_path / "bh"
    shutil.copytree(committed, holm)
    shutil.copytree(committed, bh)
    _recorded_fdr_q(holm)  # Holm, under which fdr_q decides nothing
    code, out = cli(capsys, "run", "--config", write_config(tmp_path / "holm.yaml", stores=holm, acceptance=RULES),
                    "--no-tracking")
    assert code == 0, out
    assert "RULES" not in [e["type"] for e in journal(holm)]
    assert json.loads((holm / "state.json").read_text())["last_committed_round"] == 2

    _recorded_fdr_q(bh, multiple_testing="bh")
    config = write_config(tmp_path / "bh.yaml", stores=bh, acceptance={**RULES, "multiple_testing": "bh"})
    before = snapshot(bh)
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2, out
    assert "acceptance.fdr_q: stores 0.05, run config 0.01" in out and "--new-rules" in out, out
    assert snapshot(bh) == before


def test_new_rules_on_old_stores_records_them_as_unknown_before(first_run, tmp_path, capsys):
    base, committed = first_run
    root = tmp_path / "stores"
    shutil.copytree(committed, root)
    state = json.loads((root / "state.json").read_text())
    del state["harness"]["rules"]  # as stores written before rules were recorded
    (root / "state.json").write_text(json.dumps(state))
    config = write_config(tmp_path / "run.yaml", stores=root, rounds=1, acceptance=RULES)
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and "rules behind their decisions are unknown" in out, out
    code, out = cli(capsys, "run", "--config", config, "--no-tracking", "--new-rules", "record the rules")
    assert code == 0, out
    (entry,) = [e for e in journal(root) if e["type"] == "RULES"]
    assert entry["payload"]["old"] is None and entry["payload"]["changed"] is None
    assert entry["payload"]["new"] == rules_of(AcceptanceRules(**RULES), CostLimits())
    assert json.loads((root / "state.json").read_text())["harness"]["rules"] == entry["payload"]["new"]


def test_a_blank_reason_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli(capsys, "run", "--config", tmp_path / "run.yaml", "--new-rules", "  ")
    assert exc.value.code == 2
    assert "say why the rules change" in capsys.readouterr().err


def test_dcr_tau_is_one_of_the_reported_taus_and_named_in_the_floor_rule():
    assert get_args(AcceptanceRules.model_fields["dcr_tau"].annotation) == DCR_TAUS
    gain = {f"q{i}": {"correct": True, "category": "single_hop"} for i in range(12)}
    base = {q: {**o, "correct": False} for q, o in gain.items()}
    report = {"paired": paired_comparison(base, gain, n_resamples=200).to_dict(), "dcr": 0.5}
    decision = decide(report, AcceptanceRules(dcr_tau=5, rho_min=0.6))
    assert (decision.rule, decision.reason) == ("dcr_floor", "DCR@5 0.500 below floor 0.600")
    assert decide(report, AcceptanceRules(dcr_tau=5, rho_min=0.5)).rule == "accept"


def test_bootstrap_resamples_is_the_paired_comparisons_resample_count():
    assert AcceptanceRules().bootstrap_resamples == 10_000
    base = {f"q{i}": {"correct": i % 2 == 0, "category": "single_hop"} for i in range(40)}
    cand = {q: {**o, "correct": o["correct"] or q in ("q1", "q3", "q5")} for q, o in base.items()}
    few, many = (paired_comparison(base, cand, n_resamples=n) for n in (50, 10_000))
    assert (few.n_resamples, many.n_resamples) == (50, 10_000)
    assert (few.ci_low, few.ci_high) != (many.ci_low, many.ci_high)
