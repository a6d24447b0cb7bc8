"""The engineer workflow through the CLI: diff, candidates, show, promote, rollback, journal verify, serving."""
from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from evolve.cli import main
from evolve.state.record import CandidateRecord
from evolve.ops.history import History
from evolve.files import read_json
from evolve.state.stores import RoundBundle, StoreSet
from evolve.data import BASELINE_PATH
from evolve.strategy.artifact import dump_yaml, load_strategy, strategy_hash
from evolve.strategy.paths import set_path
from workflow_fixtures import commit_accept_round


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out + out.err


def accepted(root: Path, verdict: str = "ACCEPT") -> CandidateRecord:
    return next(r for r in History(root).records if r.verdict == verdict)


def journal_types(root: Path) -> list[str]:
    return [e["type"] for e in History(root).journal.entries()]


@pytest.fixture
def serving(tmp_path: Path, monkeypatch) -> Path:
    """A serving file holding the baseline with a comment, so byte-exact restores are observable; its directory
    is the configured serving directory."""
    path = tmp_path / "strategies" / "serving.yaml"
    monkeypatch.setenv("MEMEVOLVE_SERVING_DIR", str(path.parent))
    path.parent.mkdir()
    path.write_bytes(b"# served since the last release\n" + BASELINE_PATH.read_bytes())
    path.chmod(0o640)
    return path


# ---------------------------------------------------------------- diff


def test_diff_exit_codes_paths_and_prompt_text(capsys, tmp_path, baseline_strategy):
    same = tmp_path / "same.yaml"
    same.write_text(dump_yaml(baseline_strategy))  # reformatted, same content
    digest = strategy_hash(baseline_strategy)[:12]
    assert run(capsys, "diff", BASELINE_PATH, same) == (
        0, f"--- {BASELINE_PATH} ({digest})\n+++ {same} ({digest})\nno differences\n")
    changed = set_path(set_path(baseline_strategy, "retrieval.top_k", 7), "answering.prompt.template",
                       baseline_strategy["answering"]["prompt"]["template"] + "Be brief.\n")
    other = tmp_path / "other.yaml"
    other.write_text(dump_yaml(changed))
    code, out = run(capsys, "diff", BASELINE_PATH, other)
    assert code == 1
    assert "~ retrieval.top_k: 5 -> 7" in out
    assert "~ answering.prompt.template:" in out and "    +Be brief." in out
    code, out = run(capsys, "diff", BASELINE_PATH, other, "--format", "json")
    data = json.loads(out)
    assert code == 1 and data["equal"] is False and data["changed"]["retrieval.top_k"] == [5, 7]
    assert data["b"]["hash"] == strategy_hash(changed)


def test_diff_rejects_an_invalid_file_naming_file_path_and_line(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BASELINE_PATH.read_text().replace("  top_k: 5\n", "  top_k: 0\n"))
    line = bad.read_text().splitlines().index("  top_k: 0") + 1
    code, out = run(capsys, "diff", BASELINE_PATH, bad)
    assert code == 2
    assert f"{bad}:{line}: retrieval.top_k" in out


# ---------------------------------------------------------------- candidates and show


def test_candidates_table_and_filters(capsys, engine_stores):
    code, out = run(capsys, "candidates", "--stores", engine_stores)
    assert code == 0
    header = out.splitlines()[0].split()
    assert header[:6] == ["id", "round", "change", "decided_by", "Δ", "p"]
    assert {"r001-c00", "r002-c00", "r003-c00"} <= set(out.split())
    code, out = run(capsys, "candidates", "--stores", engine_stores, "--decision", "accept")
    rows = [line for line in out.splitlines()[1:] if line.startswith("r")]
    assert code == 0 and len(rows) == 1
    assert rows[0].split()[:5] == ["r002-c00", "2", "retrieval.top_k", "5→7", "decision"]
    assert "+0.050" in rows[0] and "[+0.017,+0.090]" in rows[0] and "ACCEPT" in rows[0] and rows[0].endswith("yes")
    code, out = run(capsys, "candidates", "--stores", engine_stores, "--round", "1")
    ids = {line.split()[0] for line in out.splitlines()[1:] if line.startswith("r")}
    assert code == 0 and ids == {"r001-c00", "r001-c01"}
    with pytest.raises(SystemExit) as exc:  # argparse usage errors exit 2
        main(["candidates", "--stores", str(engine_stores), "--decision", "maybe"])
    assert exc.value.code == 2 and "invalid choice: 'maybe'" in capsys.readouterr().err


def test_show_prints_the_complete_record(capsys, engine_stores):
    record = accepted(engine_stores)
    code, out = run(capsys, "show", "r002-c00", "--stores", engine_stores)
    assert code == 0
    example = record.examples["improved"][0]
    for expected in ("candidate r002-c00 (round 2): ACCEPT", "~ retrieval.top_k: 5 -> 7", "gates: passed",
                     "critic: ", "probe: 20 questions", "McNemar p=0.012", "improved questions (2 of 2 shown)",
                     example["question"], f"gold:      {example['gold']}", "root cause: retrieval_gap",
                     "regressed questions (1 of 1 shown)", f"parent file (what was current before): "
                     f"{engine_stores / 'strategies' / (record.parent_hash + '.yaml')}",
                     "promote: memevolve promote r002-c00 --to strategies/serving.yaml"):
        assert expected in out, expected
    code, out = run(capsys, "show", "r001-c01", "--stores", engine_stores)
    assert code == 0 and "not promotable" in out
    assert run(capsys, "show", "r099-c00", "--stores", engine_stores)[0] == 2


# ---------------------------------------------------------------- promote: refusals


def test_promote_refuses_candidates_without_an_accept(capsys, stores, serving):
    before = serving.read_bytes()
    not_accepted = next(r for r in History(stores).records if not r.verdict.startswith("ACCEPT"))
    code, out = run(capsys, "promote", not_accepted.candidate_id, "--to", serving, "--stores", stores)
    assert code == 1 and "was not accepted" in out and not_accepted.verdict in out
    code, out = run(capsys, "promote", "r042-c00", "--to", serving, "--stores", stores)
    assert code == 1 and "no candidate r042-c00" in out
    code, out = run(capsys, "promote", BASELINE_PATH, "--to", serving, "--stores", stores)
    assert code == 1 and "is the baseline strategy" in out and "only strategies with a recorded ACCEPT" in out
    code, out = run(capsys, "promote", "r003-c00", "--to", serving, "--stores", stores)
    assert code == 1 and "ACCEPT_WITH_MONITOR" in out and "--accept-monitor" in out
    assert run(capsys, "promote", "no/such/file.yaml", "--to", serving, "--stores", stores)[0] == 2
    assert serving.read_bytes() == before and "PROMOTE" not in journal_types(stores)


def test_promote_refuses_edited_files(capsys, stores, serving, tmp_path):
    record = accepted(stores)
    stored = stores / "strategies" / f"{record.strategy_hash}.yaml"
    edited = tmp_path / "edited.yaml"
    edited.write_text(stored.read_text().replace("top_k: 7", "top_k: 8"))
    code, out = run(capsys, "promote", edited, "--to", serving, "--stores", stores)
    assert code == 1 and f"has strategy hash {strategy_hash(load_strategy(edited))}" in out
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(dump_yaml({**load_strategy(stored), "name": "tuned"}))
    code, out = run(capsys, "promote", renamed, "--to", serving, "--stores", stores)
    assert code == 1 and "its policy equals r002-c00" in out
    stored.write_text(stored.read_text().replace("top_k: 7", "top_k: 9"))  # tamper with the stored copy
    code, out = run(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)
    assert code == 1 and "the stored file was edited" in out
    assert "PROMOTE" not in journal_types(stores)


def test_promote_refuses_a_schema_invalid_file(capsys, stores, serving, tmp_path):
    record = accepted(stores)
    invalid = tmp_path / "invalid.yaml"
    text = (stores / "strategies" / f"{record.strategy_hash}.yaml").read_text()
    invalid.write_text(text.replace("  candidate_pool: 50\n", "  candidate_pool: 50\n  colour: blue\n"))
    line = invalid.read_text().splitlines().index("  colour: blue") + 1
    code, out = run(capsys, "promote", invalid, "--to", serving, "--stores", stores)
    assert code == 1 and f"{invalid}:{line}: retrieval.colour: unknown field" in out


def test_promote_refuses_a_stale_harness_or_schema(capsys, stores, serving):
    state = read_json(stores / "state.json")
    stale = commit_accept_round(stores, {"retrieval.top_k": 8}, applied=False,
                                harness={**state["harness"], "schema_hash": "0" * 64})
    code, out = run(capsys, "promote", stale["candidate_id"], "--to", serving, "--stores", stores)
    assert code == 1 and "verified under schema 000000000000" in out and "re-verify" in out
    # a later run on a different harness (here: more questions) makes earlier verdicts stale
    with StoreSet(stores) as s:
        s.commit_round(s.last_committed_round + 1, RoundBundle(state={"harness": {**state["harness"],
                                                                                "n_questions": 240}}))
    code, out = run(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)
    assert code == 1 and "different harness" in out and "n_questions 120 vs 240" in out
    assert "PROMOTE" not in journal_types(stores)


def test_promote_is_refused_while_a_run_holds_the_stores(capsys, stores, serving):
    with StoreSet(stores):
        code, out = run(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)
    assert code == 2 and "store is locked by another run" in out


# ---------------------------------------------------------------- promote, rollback, serving


def test_dry_run_shows_the_diff_and_writes_nothing(capsys, stores, serving):
    before, entries = serving.read_bytes(), len(journal_types(stores))
    code, out = run(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores, "--dry-run")
    assert code == 0 and "dry run, nothing written" in out and "~ retrieval.top_k: 5 -> 7" in out
    assert serving.read_bytes() == before and len(journal_types(stores)) == entries
    assert not (stores / "serving").exists()


def test_promote_then_rollback_restores_byte_identical_files(capsys, stores, serving):
    original = serving.read_bytes()
    record = accepted(stores)
    stored = (stores / "strategies" / f"{record.strategy_hash}.yaml").read_bytes()
    code, out = run(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)
    assert code == 0 and "promoted r002-c00 (ACCEPT)" in out
    assert serving.read_bytes() == stored
    assert stat.S_IMODE(serving.stat().st_mode) == 0o640  # permissions of the replaced file are kept
    promote_entry = History(stores).journal.entries()[-1]
    assert promote_entry["type"] == "PROMOTE"
    p = promote_entry["payload"]
    assert (p["candidate_id"], p["strategy_hash"], p["target"]) == ("r002-c00", record.strategy_hash, str(serving))
    assert p["previous_hash"] == strategy_hash(load_strategy(BASELINE_PATH))
    assert (stores / p["previous_copy"]).read_bytes() == original

    code, out = run(capsys, "serving", "--path", serving, "--stores", stores)
    assert code == 0 and record.strategy_hash in out and f"entry {promote_entry['index']} PROMOTE" in out
    assert "runtime      loaded" in out

    code, out = run(capsys, "promote", "r003-c00", "--to", serving, "--stores", stores, "--accept-monitor")
    assert code == 0 and "ACCEPT_WITH_MONITOR" in out
    monitor_bytes = serving.read_bytes()

    assert run(capsys, "rollback", "--target", serving, "--stores", stores)[0] == 0
    assert serving.read_bytes() == stored
    code, out = run(capsys, "rollback", "--target", serving, "--stores", stores)
    assert code == 0 and serving.read_bytes() == original  # comment and all
    code, out = run(capsys, "rollback", "--target", serving, "--stores", stores)
    assert code == 1 and "nothing to roll back" in out and serving.read_bytes() == original

    last_promote = [e for e in History(stores).journal.entries() if e["type"] == "PROMOTE"][-1]
    assert run(capsys, "rollback", "--to", last_promote["index"], "--target", serving, "--stores", stores)[0] == 0
    assert serving.read_bytes() == monitor_bytes
    code, out = run(capsys, "rollback", "--to", 0, "--target", serving, "--stores", stores)
    assert code == 1 and "only PROMOTE/ROLLBACK entries record a served file" in out
    assert journal_types(stores)[-5:] == ["PROMOTE", "PROMOTE", "ROLLBACK", "ROLLBACK", "ROLLBACK"]
    code, out = run(capsys, "journal", "verify", "--stores", stores)
    assert code == 0 and out.startswith("ok: ") and "tracked" in out


def test_rollback_refuses_a_corrupted_restore_point(capsys, stores, serving):
    original = serving.read_bytes()
    assert run(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)[0] == 0
    promoted = serving.read_bytes()
    restore_point = stores / History(stores).journal.entries()[-1]["payload"]["previous_copy"]
    restore_point.write_bytes(original.replace(b"top_k: 5", b"top_k: 6"))
    code, out = run(capsys, "rollback", "--target", serving, "--stores", stores)
    assert code == 1 and "does not match its recorded sha256" in out
    assert serving.read_bytes() == promoted


# ---------------------------------------------------------------- journal verify and drift


def _promoted(capsys, stores: Path, serving: Path) -> list[bytes]:
    assert run(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)[0] == 0
    return (stores / "journal.jsonl").read_bytes().splitlines(keepends=True)


def test_journal_verify_detects_a_flipped_byte(capsys, stores, serving):
    lines = _promoted(capsys, stores, serving)
    code, out = run(capsys, "journal", "verify", "--stores", stores)
    assert code == 0 and out.startswith(f"ok: {len(lines)} entries")
    target = 2
    pos = lines[target].index(b'"hash":"') + 12
    flipped = bytearray(lines[target])
    flipped[pos] = ord("0") if flipped[pos] != ord("0") else ord("1")
    (stores / "journal.jsonl").write_bytes(b"".join(lines[:target] + [bytes(flipped)] + lines[target + 1:]))
    code, out = run(capsys, "journal", "verify", "--stores", stores)
    assert code == 1 and out.startswith(f"verification failed at entry {target}:")


def test_journal_verify_detects_a_deleted_line(capsys, stores, serving):
    lines = _promoted(capsys, stores, serving)
    (stores / "journal.jsonl").write_bytes(b"".join(lines[:3] + lines[4:]))
    code, out = run(capsys, "journal", "verify", "--stores", stores)
    assert code == 1 and "verification failed at entry 3:" in out and "deleted, inserted or reordered" in out


def test_journal_verify_detects_a_swapped_pair_of_lines(capsys, stores, serving):
    lines = _promoted(capsys, stores, serving)
    (stores / "journal.jsonl").write_bytes(b"".join(lines[:1] + [lines[2], lines[1]] + lines[3:]))
    code, out = run(capsys, "journal", "verify", "--stores", stores)
    assert code == 1 and "verification failed at entry 1:" in out
    # promotion and rollback refuse to act on a broken journal
    code, out = run(capsys, "rollback", "--target", serving, "--stores", stores)
    assert code == 1 and "journal verification failed at entry 1" in out


def test_journal_verify_and_serving_report_drift(capsys, stores, serving):
    _promoted(capsys, stores, serving)
    data = yaml.safe_load(serving.read_text())
    serving.write_text(dump_yaml(set_path(data, "retrieval.top_k", 9)))  # hand-edited in production
    code, out = run(capsys, "journal", "verify", "--stores", stores)
    assert code == 1 and "drift: the file differs from what entry" in out and "is not the installed" in out
    code, out = run(capsys, "serving", "--path", serving, "--stores", stores)
    assert code == 1 and "drift" in out
    untracked = serving.parent / "other.yaml"
    untracked.write_bytes(BASELINE_PATH.read_bytes())
    code, out = run(capsys, "serving", "--path", untracked, "--stores", stores)
    assert code == 0 and "untracked" in out
