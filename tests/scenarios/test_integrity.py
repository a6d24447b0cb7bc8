"""Hard edges, integrity half (issue 14, items 1-6, 16, 17): no command destroys or forges history.

Each test replays one defect found by adversarial testing through the CLI: tampered candidate records, serving
targets inside the stores, outside the serving directory or behind symlinks, damaged committed journal entries, a
different benchmark on existing stores, a journal re-chained by a forger, a forged PROMOTE entry. Every refused
operation leaves the stores byte-identical.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from evolve.canonical import canonical_hash, canonical_json, sha256_hex
from evolve.state.journal import GENESIS_HASH, KEY_ENV, entry_hash
from workflow_fixtures import cli, journal, snapshot, write_config

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(benchmark="synthetic:0:3", limit=40, probe_size=10, rounds=1, candidates_per_round=2)


# ---------------------------------------------------------------- helpers


def rechain(entries: list[dict]) -> bytes:
    """What a forger without the key writes: ``entries`` re-indexed and re-hashed into a valid-looking chain."""
    prev, lines = GENESIS_HASH, []
    for i, e in enumerate(entries):
        e = {k: v for k, v in e.items() if k not in ("mac", "hash")}
        e.update(index=i, prev_hash=prev, payload_hash=canonical_hash(e["payload"]))
        e["hash"] = prev = entry_hash(e)
        lines.append(canonical_json(e) + "\n")
    return "".join(lines).encode()


def forge(stores: Path, entries: list[dict]) -> None:
    """Replace the journal by a re-chained ``entries`` and move the recorded head to match, as a forger would."""
    (stores / "journal.jsonl").write_bytes(rechain(entries))
    state = json.loads((stores / "state.json").read_text())
    last = journal(stores)[-1] if entries else None
    state["journal_head"] = {"index": last["index"], "hash": last["hash"]} if last else None
    (stores / "state.json").write_text(json.dumps(state))


def promoted(capsys, stores: Path, serving: Path) -> None:
    code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)
    assert code == 0, out


@pytest.fixture(scope="module")
def small_built(tmp_path_factory) -> Path:
    """Stores after one small round on ``synthetic:0:3`` (read-only; copy with ``small_stores``)."""
    from evolve.cli import main

    base = tmp_path_factory.mktemp("small")
    config = write_config(base / "run.yaml", **SMALL, stores=base / "stores")
    assert main(["run", "--config", str(config), "--no-tracking"]) == 0
    return base / "stores"


@pytest.fixture
def small_stores(small_built: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A private copy of ``small_built`` and a config for one more round on it."""
    stores = Path(shutil.copytree(small_built, tmp_path / "stores"))
    return stores, write_config(tmp_path / "run.yaml", **{**SMALL, "rounds": 2}, stores=stores)


# ---------------------------------------------------------------- 1. promote trusts only what the journal decided


def test_a_verdict_edited_in_the_candidate_records_is_not_promoted(capsys, stores, serving):
    outcomes = stores / "candidate_outcomes.jsonl"
    lines = outcomes.read_text().splitlines(keepends=True)
    i = next(i for i, line in enumerate(lines) if json.loads(line)["decision"]["verdict"] in ("FEATURE_FLAG", "REJECT"))
    cid, verdict = json.loads(lines[i])["candidate_id"], json.loads(lines[i])["decision"]["verdict"]
    lines[i] = lines[i].replace(f'"verdict":"{verdict}"', '"verdict":"ACCEPT"')  # the sed of the report
    outcomes.write_text("".join(lines))
    before, served = snapshot(stores), serving.read_bytes()
    code, out = cli(capsys, "promote", cid, "--to", serving, "--stores", stores)
    assert code == 1 and "disagrees with the journal" in out and "the record says ACCEPT" in out, out
    assert snapshot(stores) == before and serving.read_bytes() == served
    code, out = cli(capsys, "journal", "verify", "--stores", stores)
    assert code == 1 and f"{cid}: the record says ACCEPT, journal entry" in out and verdict in out, out


def test_verify_reports_a_deleted_candidate_record(capsys, stores):
    outcomes = stores / "candidate_outcomes.jsonl"
    lines = outcomes.read_text().splitlines(keepends=True)
    outcomes.write_text("".join(lines[1:]))
    cid = json.loads(lines[0])["candidate_id"]
    code, out = cli(capsys, "journal", "verify", "--stores", stores)
    assert code == 1 and f"{cid}: journal entry" in out and "has no record" in out, out


# ---------------------------------------------------------------- 2, 3. serving targets


@pytest.mark.parametrize("name", ["journal.jsonl", "state.json", "strategies/x.yaml", "serving/y.yaml"])
def test_a_target_inside_the_stores_is_refused(capsys, stores, name, monkeypatch):
    monkeypatch.setenv("MEMEVOLVE_SERVING_DIR", str(stores))  # even a serving directory around the stores
    before = snapshot(stores)
    code, out = cli(capsys, "promote", "r002-c00", "--to", stores / name, "--stores", stores)
    assert code == 1 and "lies inside the stores" in out, out
    assert snapshot(stores) == before


def test_targets_outside_the_serving_directory_need_allow_outside(capsys, stores, serving, tmp_path):
    for target in (tmp_path / "elsewhere" / "x.yaml", serving.parent / ".." / ".." / "x.yaml"):
        code, out = cli(capsys, "promote", "r002-c00", "--to", target, "--stores", stores)
        assert code == 1 and "is outside the serving directory" in out and "--allow-outside" in out, out
        assert not target.exists()
    assert "PROMOTE" not in [e["type"] for e in journal(stores)]
    target = tmp_path / "elsewhere" / "x.yaml"
    target.parent.mkdir()
    code, out = cli(capsys, "promote", "r002-c00", "--to", target, "--stores", stores, "--allow-outside")
    assert code == 0 and target.is_file(), out


def test_a_non_strategy_file_or_a_symlink_is_never_overwritten(capsys, stores, serving, tmp_path):
    secret = tmp_path / "secret.yaml"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    victim = serving.parent / "notes.yaml"
    victim.write_text("- shopping list\n- milk\n")
    code, out = cli(capsys, "promote", "r002-c00", "--to", victim, "--stores", stores)
    assert code == 1 and "is not a strategy file" in out and "milk" not in out, out
    link = serving.parent / "link.yaml"
    link.symlink_to(secret)
    code, out = cli(capsys, "promote", "r002-c00", "--to", link, "--stores", stores)
    assert code == 1 and "is a symbolic link" in out and "root:x" not in out, out
    code, out = cli(capsys, "promote", secret, "--to", serving, "--stores", stores)  # as the source
    assert code == 1 and "root:x" not in out and "/bin/bash" not in out, out
    assert secret.read_text() == "root:x:0:0:root:/root:/bin/bash\n" and "milk" in victim.read_text()
    assert "PROMOTE" not in [e["type"] for e in journal(stores)]


# ---------------------------------------------------------------- 4. damaged committed history is refused


@pytest.mark.parametrize("damage", ["delete last line", "truncate 120 bytes", "flip a byte mid-chain"])
def test_run_refuses_damaged_committed_history(capsys, small_stores, damage):
    stores, config = small_stores
    path = stores / "journal.jsonl"
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    if damage == "delete last line":
        path.write_bytes(b"".join(lines[:-1]))
    elif damage == "truncate 120 bytes":
        path.write_bytes(data[:-120])
    else:
        pos = len(b"".join(lines[:2])) + lines[2].index(b'"ts":"') + 8
        path.write_bytes(data[:pos] + (b"9" if data[pos:pos + 1] != b"9" else b"8") + data[pos + 1:])
    before = snapshot(stores)
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and "committed history is damaged" in out, out
    assert snapshot(stores) == before
    code, _ = cli(capsys, "journal", "verify", "--stores", stores)
    assert code == 1


def test_a_torn_uncommitted_tail_is_repaired_and_journaled(capsys, small_stores):
    stores, config = small_stores
    path = stores / "journal.jsonl"
    committed = path.read_bytes()
    torn = b'{"index":99,"type":"PROM'
    path.write_bytes(committed + torn)  # a crash mid-append after the last commit
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 0, out
    entries = journal(stores)
    assert path.read_bytes().startswith(committed)
    recover = next(e for e in entries if e["type"] == "RECOVER")
    assert recover["payload"]["repaired"] == [{"file": "journal.jsonl", "bytes": len(torn)}]
    assert cli(capsys, "journal", "verify", "--stores", stores)[0] == 0


def test_a_torn_committed_record_is_not_repaired_away(capsys, small_stores):
    stores, config = small_stores
    path = stores / "candidate_outcomes.jsonl"
    path.write_bytes(path.read_bytes()[:-50])
    before = snapshot(stores)
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and "committed records are damaged" in out, out
    assert snapshot(stores) == before


# ---------------------------------------------------------------- 5. one harness per stores directory


def test_a_different_benchmark_on_existing_stores_is_refused(capsys, small_stores, tmp_path):
    stores, _ = small_stores
    other = write_config(tmp_path / "other.yaml", **{**SMALL, "benchmark": "synthetic:5:3", "rounds": 2},
                         stores=stores)
    before = snapshot(stores)
    code, out = cli(capsys, "run", "--config", other, "--no-tracking")
    assert code == 2 and "different harness" in out and "benchmark_hash" in out, out
    assert "synthetic:0:3" in out and "synthetic:5:3" in out
    assert snapshot(stores) == before


# ---------------------------------------------------------------- 6. heads witnessed outside the stores


def test_a_rechained_journal_is_caught_by_the_witness_beside_the_serving_file(capsys, stores, serving):
    promoted(capsys, stores, serving)
    witness = serving.with_name(serving.name + ".witness")
    assert json.loads(witness.read_text().splitlines()[-1])["index"] == journal(stores)[-1]["index"]
    assert cli(capsys, "journal", "verify", "--stores", stores, "--serving", serving)[0] == 0
    forge(stores, journal(stores)[:-1])  # drop the PROMOTE entry, re-chain, fix the recorded head
    code, out = cli(capsys, "journal", "verify", "--stores", stores, "--serving", serving)
    assert code == 1 and f"{witness}:1 witnessed entry" in out and "truncated or replaced" in out, out
    forge(stores, [])  # delete everything, head null
    code, out = cli(capsys, "journal", "verify", "--stores", stores, "--serving", serving)
    assert code == 1 and "witnessed entry" in out, out


def test_a_rechained_journal_is_caught_by_the_tracked_round_runs(capsys, small_built, tmp_path):
    stores = Path(shutil.copytree(small_built, tmp_path / "stores"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = write_config(tmp_path / "run.yaml", **{**SMALL, "rounds": 2}, stores=stores, tracking_uri=uri)
    assert cli(capsys, "run", "--config", config)[0] == 0
    assert cli(capsys, "journal", "verify", "--stores", stores, "--tracking-uri", uri)[0] == 0
    entries = journal(stores)
    forged = [e if e["type"] != "ROUND" or e["round"] != 2 else {**e, "payload": {**e["payload"], "accuracy": 1.0}}
              for e in entries]
    forge(stores, forged)
    code, out = cli(capsys, "journal", "verify", "--stores", stores, "--tracking-uri", f"sqlite:///{tmp_path}/x.db")
    assert code == 2 and "no such tracking store" in out, out  # a missing witness is not a silent "ok"
    code, out = cli(capsys, "journal", "verify", "--stores", stores, "--tracking-uri", uri)
    assert code == 1 and "MLflow run" in out and "(round-002)" in out and "(rewritten)" in out, out


def test_with_a_key_a_rechained_journal_fails_verification(capsys, small_built, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "s3cret")
    stores = tmp_path / "stores"
    config = write_config(tmp_path / "run.yaml", **SMALL, stores=stores)
    assert cli(capsys, "run", "--config", config, "--no-tracking")[0] == 0
    assert all(len(e["mac"]) == 64 for e in journal(stores))
    code, out = cli(capsys, "journal", "verify", "--stores", stores)
    assert code == 0, out
    forge(stores, journal(stores)[:-1])
    code, out = cli(capsys, "journal", "verify", "--stores", stores)
    assert code == 1 and "entry 0 (line 1): no MAC" in out, out
    monkeypatch.delenv(KEY_ENV)
    (stores / "journal.jsonl").write_bytes(b"")
    assert cli(capsys, "journal", "verify", "--stores", stores)[0] == 1  # the recorded head is gone too


# ---------------------------------------------------------------- 16. a forged PROMOTE does not make a file tracked


def test_a_forged_promote_entry_leaves_a_hand_edited_serving_file_unverified(capsys, stores, serving):
    promoted(capsys, stores, serving)
    edited = serving.read_text().replace("top_k: 7", "top_k: 9")
    serving.write_text(edited)
    entries = journal(stores)
    fake = dict(entries[-1])
    copy = f"serving/{sha256_hex(edited.encode())}.yaml"
    (stores / copy).write_text(edited)
    from evolve.strategy.artifact import load_strategy, strategy_hash

    fake["payload"] = {**fake["payload"], "file_sha256": sha256_hex(edited.encode()), "copy": copy,
                       "strategy_hash": strategy_hash(load_strategy(serving))}
    forge(stores, entries + [fake])
    code, out = cli(capsys, "serving", "--path", serving, "--stores", stores)
    assert code == 1 and "unverified" in out and "r002-c00 was accepted as" in out, out
    code, out = cli(capsys, "journal", "verify", "--stores", stores)
    assert code == 1 and "unverified" in out, out


# ---------------------------------------------------------------- 17. docs name no machine's paths


def test_readme_and_docs_show_repository_relative_paths_only():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    absolute = {str(page.relative_to(ROOT)): found for page in pages
                if (found := re.findall(r"(?<![\w.])/(?:work|home|root|Users|tmp)/[\w./-]+",
                                        page.read_text(encoding="utf-8")))}
    assert len(pages) > 10 and not absolute, absolute
