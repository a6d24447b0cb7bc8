"""Governance after a decision, through the CLI: the FEATURE_FLAG registry and its re-verification, escalations,
and approved promotions, on stores of real small runs."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evolve.cli import main
from evolve.ops.history import History
from evolve.files import read_json
from workflow_fixtures import cli, commit_accept_round, journal, snapshot, write_config


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A real one-round run through ``memevolve run`` (two FEATURE_FLAG candidates; a blocked direction escalated at
    once with ``escalation_threshold: 1``); its config lies beside the stores."""
    base = tmp_path_factory.mktemp("governed")
    config = write_config(base / "run.yaml", stores="stores", rounds=1, candidates_per_round=2, limit=120,
                          probe_size=20, escalation_threshold=1, acceptance={"protected_slices": ["temporal"]})
    assert main(["run", "--config", str(config), "--no-tracking"]) == 0
    return base


@pytest.fixture
def governed(run_dir: Path, tmp_path: Path) -> Path:
    """A private, writable copy of ``run_dir``: its config and stores."""
    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def flag_rows(out: str) -> dict[str, str]:
    return {line.split()[0]: line for line in out.splitlines() if line.startswith("r0")}


# ---------------------------------------------------------------- flags


def test_flags_lists_the_flagged_candidates_with_reasons_and_status(capsys, run_dir):
    records = {r.candidate_id: r for r in History(run_dir / "stores").records}
    flagged = {cid for cid, r in records.items() if r.verdict == "FEATURE_FLAG"}
    assert flagged == {"r001-c00", "r001-c01"}
    code, out = cli(capsys, "flags", "--config", run_dir / "run.yaml")
    assert code == 0
    rows = flag_rows(out.split("\nreasons:")[0])
    assert set(rows) == flagged
    for cid in flagged:
        r = records[cid]
        assert r.decision.rule in rows[cid] and r.strategy_hash[:12] in rows[cid]
        assert rows[cid].split()[-2:] == ["open", "-"]
        assert f"  {cid}: {r.reason}" in out
    assert "Δ +0.0000 p=1" in rows["r001-c00"] and "probe Δ +0.000 on 20" in rows["r001-c01"]
    assert "2 flagged candidate(s), none applied" in out


def test_a_later_accept_supersedes_a_flag_or_makes_it_current(capsys, governed):
    stores = governed / "stores"
    commit_accept_round(stores, {"answering.span": "sentence"})  # moves the path r001-c00 flagged
    code, out = cli(capsys, "flags", "--stores", stores)
    rows = flag_rows(out)
    assert code == 0 and "superseded by r002-c00" in rows["r001-c00"]
    assert "open (strategy moved on)" in rows["r001-c01"]
    commit_accept_round(stores, {"extraction.max_facts_per_window": 7})  # the very move r001-c01 flagged
    code, out = cli(capsys, "flags", "--stores", stores, "--round", 1)
    assert code == 0 and "in current" in flag_rows(out)["r001-c01"]
    code, out = cli(capsys, "flags", "--stores", stores, "--config", governed / "run.yaml", "--verify", "r001-c01")
    assert code == 1 and "already holds its change; nothing to re-verify" in out
    assert "REVERIFY" not in [e["type"] for e in journal(stores)]


def test_verify_reevaluates_a_flag_against_the_current_strategy_and_journals_it(capsys, governed):
    stores, config = governed / "stores", governed / "run.yaml"
    record = History(stores).record("r001-c00")
    before = snapshot(stores, skip=("journal.jsonl", "state.json", "cache"))
    state = read_json(stores / "state.json")
    code, out = cli(capsys, "flags", "--config", config, "--verify", "r001-c00")
    assert code == 0, out
    p = record.paired  # nothing was accepted since, so the current strategy is the flag's parent
    assert (f"paired comparison on {p.n} questions (accuracy): current {p.acc_baseline:.3f} -> candidate "
            f"{p.acc_candidate:.3f}  Δ {p.delta:+.4f}") in out
    assert "the decision contract would now say FEATURE_FLAG (rule inconclusive)" in out
    entry = journal(stores)[-1]
    assert f"journal entry {entry['index']} REVERIFY" in out
    payload = entry["payload"]
    assert entry["type"] == "REVERIFY" and payload["candidate_id"] == "r001-c00" and payload["applied"] is False
    assert payload["current_strategy"] == state["current_strategy"] == record.parent_hash
    assert payload["candidate_strategy"] == record.strategy_hash  # the same change on the same parent
    assert {k: payload["paired"][k] for k in ("n", "delta", "improved", "regressed", "both_correct")} == \
        {k: getattr(p, k) for k in ("n", "delta", "improved", "regressed", "both_correct")}
    assert payload["would_decide"] == record.decision.to_dict()
    # never applied: records, strategies and the current strategy are as they were
    assert snapshot(stores, skip=("journal.jsonl", "state.json", "cache")) == before
    assert read_json(stores / "state.json")["current_strategy"] == state["current_strategy"]
    code, out = cli(capsys, "journal", "verify", "--stores", stores)
    assert code == 0 and out.startswith("ok: ")
    code, out = cli(capsys, "flags", "--stores", stores)
    assert "1× (last Δ +0.0000)" in flag_rows(out)["r001-c00"]
    assert f"re-verified: entry {entry['index']}" in out and "would be FEATURE_FLAG (inconclusive); not applied" in out
    code, out = cli(capsys, "show", "r001-c00", "--stores", stores)
    assert code == 0 and f"re-verifications (memevolve flags --verify):\n  entry {entry['index']}" in out


def test_flags_refuse_unknown_and_unflagged_candidates(capsys, engine_stores):
    outcomes = engine_stores / "candidate_outcomes.jsonl"
    before = snapshot(engine_stores)
    for argv in (("flags", "r042-c00"), ("flags", "--verify", "r042-c00")):
        code, out = cli(capsys, *argv, "--stores", engine_stores)
        assert code == 2 and f"error: {outcomes}: no candidate 'r042-c00'" in out
    for argv in (("flags", "r002-c00"), ("flags", "--verify", "r002-c00")):
        code, out = cli(capsys, *argv, "--stores", engine_stores)
        assert code == 2 and "r002-c00 was not FEATURE_FLAG but ACCEPT" in out and str(outcomes) in out
    assert snapshot(engine_stores) == before


def test_verify_without_a_run_config_exits_2(capsys, governed, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMEVOLVE_CONFIG", raising=False)
    code, out = cli(capsys, "flags", "--stores", governed / "stores", "--verify", "r001-c00")
    assert code == 2 and "flags --verify: no run config" in out


# ---------------------------------------------------------------- escalations


def test_escalations_list_round_reason_candidates_and_status(capsys, run_dir, engine_stores):
    entry = next(e for e in journal(run_dir / "stores") if e["type"] == "ESCALATE")
    key = entry["payload"]["key"]
    code, out = cli(capsys, "escalations", "--config", run_dir / "run.yaml")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith(key))
    assert row.split()[1:3] == [str(entry["round"]), "1"] and row.endswith(f"escalated (entry {entry['index']}), open")
    assert f"  {key}: " in out.split("reasons:")[1] and "1 escalated, 0 blocked" in out
    code, out = cli(capsys, "escalations", "--stores", engine_stores)  # the default threshold: blocked, not escalated
    assert code == 0 and "blocked in 1 round(s), not escalated" in out and "0 escalated" in out


# ---------------------------------------------------------------- approved promotions


def test_promote_records_the_approver_in_journal_witness_and_history(capsys, stores, serving):
    code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores, "--approver", "alice",
                    "--reason", "gain confirmed on the nightly benchmark")
    assert code == 0 and "approval approved by alice: gain confirmed on the nightly benchmark" in out
    approved = journal(stores)[-1]
    assert approved["type"] == "PROMOTE" and approved["payload"]["approval"] == {
        "approver": "alice", "reason": "gain confirmed on the nightly benchmark"}
    witness = [json.loads(line) for line in serving.with_name("serving.yaml.witness").read_text().splitlines()]
    assert witness[-1]["index"] == approved["index"] and witness[-1]["approval"]["approver"] == "alice"
    code, out = cli(capsys, "serving", "--path", serving, "--stores", stores)
    assert code == 0 and "promotion of r002-c00 (ACCEPT), approved by alice: gain confirmed" in out

    code, out = cli(capsys, "promote", "r003-c00", "--to", serving, "--stores", stores, "--accept-monitor")
    assert code == 0 and "approval UNAPPROVED (promoted without --approver)" in out
    assert journal(stores)[-1]["payload"]["approval"] is None
    last = json.loads(serving.with_name("serving.yaml.witness").read_text().splitlines()[-1])
    assert "approval" in last and last["approval"] is None
    code, out = cli(capsys, "serving", "--path", serving, "--stores", stores)
    assert "promotion of r003-c00 (ACCEPT_WITH_MONITOR), UNAPPROVED" in out
    code, out = cli(capsys, "show", "r003-c00", "--stores", stores)
    assert f"promoted: entry {journal(stores)[-1]['index']}" in out and "UNAPPROVED" in out
    code, out = cli(capsys, "show", "r002-c00", "--stores", stores)
    assert f"promoted: entry {approved['index']}" in out and "approved by alice" in out
    code, out = cli(capsys, "journal", "verify", "--stores", stores, "--serving", serving)
    assert code == 0 and out.startswith("ok: ")


def test_promote_refuses_an_empty_approver_or_a_reason_without_one(capsys, stores, serving):
    before = serving.read_bytes(), len(journal(stores))
    with pytest.raises(SystemExit) as exc:
        main(["promote", "r002-c00", "--to", str(serving), "--stores", str(stores), "--approver", "  "])
    assert exc.value.code == 2 and "argument --approver: is empty" in capsys.readouterr().err
    code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores, "--reason", "looks fine")
    assert code == 2 and "promote --reason: needs --approver NAME" in out
    assert (serving.read_bytes(), len(journal(stores))) == before


# ---------------------------------------------------------------- report


def test_report_shows_flags_escalations_and_approvals(capsys, governed, tmp_path, serving):
    stores = governed / "stores"
    commit_accept_round(stores, {"retrieval.top_k": 7})
    assert cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores, "--approver", "bob")[0] == 0
    out_html, out_md = tmp_path / "report.html", tmp_path / "report.md"
    assert cli(capsys, "report", "--stores", stores, "--out", out_html, "--markdown", out_md)[0] == 0
    text = out_html.read_text()
    flags = text[text.index("<h2 id='flags'>"):text.index("<h2 id='escalations'>")]
    assert 'href="#cand-r001-c00"' in flags and "inconclusive" in flags and "open (strategy moved on)" in flags
    escalations = text[text.index("<h2 id='escalations'>"):text.index("<h2 id='candidates'>")]
    assert "escalated (entry" in escalations
    assert "approved by bob" in text[text.index("<h2>Serving</h2>"):text.index("<h2 id='flags'>")]
    md = out_md.read_text()
    assert "Feature flags: 2 (2 open; `memevolve flags`)" in md and "Escalations: `" in md
