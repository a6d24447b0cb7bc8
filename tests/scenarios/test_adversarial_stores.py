"""Hard edges II, stores half: output paths that would replace state, and a promote or rollback killed between its
writes. Through the CLI, on real stores; every refused operation leaves the stores byte-identical."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from evolve.data import BASELINE_PATH
from evolve.ops.change import STEPS
from evolve.files import CRASH_ENV
from evolve.state.journal import KEY_ENV
from workflow_fixtures import cli, cli_subprocess, journal, snapshot, write_config

BENCH = "synthetic:0:3"


@pytest.fixture
def serving(tmp_path: Path, monkeypatch) -> Path:
    """``<tmp>/strategies/serving.yaml`` holding the baseline with a comment; its directory is the serving directory."""
    path = tmp_path / "strategies" / "serving.yaml"
    path.parent.mkdir()
    path.write_bytes(b"# served since the last release\n" + BASELINE_PATH.read_bytes())
    monkeypatch.setenv("MEMEVOLVE_SERVING_DIR", str(path.parent))
    return path


def witness_lines(serving: Path) -> list[dict]:
    path = serving.with_name(serving.name + ".witness")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# ---------------------------------------------------------------- 1. output paths


def _hostile_outputs(stores: Path, serving: Path, tmp_path: Path) -> list[Path]:
    fifo = tmp_path / "fifo.html"
    os.mkfifo(fifo)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    link = tmp_path / "link.html"
    link.symlink_to(victim)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    return [stores / "journal.jsonl", stores / "state.json", stores / "new-report.html", stores / "strategies",
            serving, serving.with_name(serving.name + ".witness"), fifo, link, loop / "report.html", loop,
            tmp_path / "strategies"]


@pytest.mark.parametrize("option", ["--out", "--markdown"])
def test_report_refuses_outputs_that_would_replace_state(option, capsys, stores, serving, tmp_path):
    code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)
    assert code == 0, out
    hostile = _hostile_outputs(stores, serving, tmp_path)
    before = snapshot(stores)
    outside = {p: p.read_bytes() for p in (serving, serving.with_name(serving.name + ".witness"),
                                           tmp_path / "victim.txt")}
    fine = tmp_path / "report.html"
    for path in hostile:
        argv = ("--out", path) if option == "--out" else ("--out", fine, "--markdown", path)
        started = time.perf_counter()
        code, out = cli(capsys, "report", "--stores", stores, *argv)
        assert code == 2 and f"error: {option} {path}: refused: " in out and "Traceback" not in out, out
        assert time.perf_counter() - started < 60  # a ceiling: opening the FIFO for writing would block
    assert snapshot(stores) == before
    assert {p: p.read_bytes() for p in outside} == outside
    assert (tmp_path / "fifo.html").is_fifo() and not fine.exists()
    code, out = cli(capsys, "report", "--stores", stores, "--out", fine, "--markdown", tmp_path / "summary.md")
    assert code == 0 and fine.read_text().startswith("<!DOCTYPE html>") and snapshot(stores) == before, out


def test_eval_refuses_an_output_directory_in_the_stores_or_behind_a_link(capsys, stores, tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    traces_link = tmp_path / "out"
    traces_link.mkdir()
    (traces_link / "traces.jsonl").symlink_to(stores / "journal.jsonl")
    before = snapshot(stores)
    unread = tmp_path / "absent.yaml"  # read right after the output check: refusing --out first leaves it unread
    for out_dir, rule in ((stores, "lies inside the stores"), (stores / "rounds", "lies inside the stores"),
                          (loop, "is a symbolic link"), (loop / "sub", "cannot be resolved"),
                          (traces_link, "is a symbolic link")):
        code, out = cli(capsys, "eval", "--bench", BENCH, "--out", out_dir, "--cache", "", "--strategy", unread)
        assert code == 2 and "error: --out " in out and rule in out and "Traceback" not in out, out
        assert str(unread) not in out  # refused before the strategy was read, so before the evaluation
    assert snapshot(stores) == before


# ---------------------------------------------------------------- 2. a crash inside promote or rollback


@pytest.mark.parametrize("step", STEPS)
def test_a_promote_killed_between_its_writes_is_finished_or_abandoned(step, capsys, stores, serving, tmp_path,
                                                                       monkeypatch):
    original = serving.read_bytes()
    entries = len(journal(stores))
    monkeypatch.setenv(CRASH_ENV, step)
    killed = cli_subprocess(tmp_path, "promote", "r002-c00", "--to", serving, "--stores", stores)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    monkeypatch.delenv(CRASH_ENV)
    swapped = step != "intent"
    assert (serving.read_bytes() != original) == swapped

    code, out = cli(capsys, "journal", "verify", "--stores", stores)  # finds the intent and recovers
    assert code == 0, out
    assert f"recovered an interrupted PROMOTE of {serving}: " + ("finished" if swapped else "abandoned") in out
    types = [e["type"] for e in journal(stores)[entries:]]
    assert types == (["PROMOTE", "RECOVER"] if swapped else ["RECOVER"])
    promotes = [e for e in journal(stores) if e["type"] == "PROMOTE"]
    assert [w["index"] for w in witness_lines(serving)] == [e["index"] for e in promotes]  # witnessed once
    assert not (stores / "serving" / "intent.json").exists()

    if swapped:
        code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)  # a retry
        assert code == 1 and "already holds exactly this file" in out, out
        code, out = cli(capsys, "rollback", "--target", serving, "--stores", stores)
        assert code == 0 and serving.read_bytes() == original, out
    else:
        assert serving.read_bytes() == original
        code, out = cli(capsys, "rollback", "--target", serving, "--stores", stores)
        assert code == 1 and "nothing to roll back" in out
    code, out = cli(capsys, "journal", "verify", "--stores", stores)
    assert code == 0 and out.startswith("ok: "), out


def test_a_rollback_killed_after_the_swap_is_finished_by_the_next_command(capsys, stores, serving, tmp_path,
                                                                          monkeypatch):
    original = serving.read_bytes()
    assert cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)[0] == 0
    monkeypatch.setenv(CRASH_ENV, "swap")
    killed = cli_subprocess(tmp_path, "rollback", "--target", serving, "--stores", stores)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    monkeypatch.delenv(CRASH_ENV)
    assert serving.read_bytes() == original
    code, out = cli(capsys, "rollback", "--target", serving, "--stores", stores)  # finishes, then nothing to undo
    assert f"recovered an interrupted ROLLBACK of {serving}: finished" in out
    assert code == 1 and "already undone" in out, out
    assert [e["type"] for e in journal(stores)][-3:] == ["PROMOTE", "ROLLBACK", "RECOVER"]


def test_verify_flags_a_serving_file_no_entry_installed(capsys, stores, serving):
    accepted = next(json.loads(line) for line in (stores / "candidate_outcomes.jsonl").read_text().splitlines()
                    if json.loads(line)["candidate_id"] == "r002-c00")
    serving.write_bytes((stores / "strategies" / f"{accepted['strategy_hash']}.yaml").read_bytes())  # by hand
    before = snapshot(stores)
    code, out = cli(capsys, "journal", "verify", "--stores", stores, "--serving", serving)
    assert code == 1 and f"serving {serving}: unjournaled: holds strategy {accepted['strategy_hash']} of r002-c00" \
        in out, out
    code, out = cli(capsys, "serving", "--path", serving, "--stores", stores)
    assert code == 1 and "unjournaled" in out
    assert snapshot(stores) == before


# ---------------------------------------------------------------- 11. keyed and unkeyed writers


def test_keyed_stores_refuse_an_unkeyed_writer_and_the_reverse(capsys, tmp_path, monkeypatch):
    for keyed in (True, False):
        stores = tmp_path / f"stores-{keyed}"
        config = write_config(tmp_path / "run.yaml", benchmark=BENCH, limit=40, probe_size=10, rounds=1,
                              candidates_per_round=1, stores=stores)
        if keyed:
            monkeypatch.setenv(KEY_ENV, "s3cret")
        assert cli(capsys, "run", "--config", config, "--no-tracking")[0] == 0
        if keyed:
            monkeypatch.delenv(KEY_ENV)
        else:
            monkeypatch.setenv(KEY_ENV, "s3cret")
        before = snapshot(stores)
        code, out = cli(capsys, "run", "--config", config, "--rounds", 1, "--no-tracking")
        mode = f"these stores are keyed (their journal entries carry MACs) but {KEY_ENV} is not set" if keyed else \
            f"these stores are unkeyed (their journal entries carry no MAC) but {KEY_ENV} is set"
        assert code == 2 and f"error: {stores / 'journal.jsonl'}: {mode}" in out, out
        assert snapshot(stores) == before
        monkeypatch.delenv(KEY_ENV, raising=False)


# ---------------------------------------------------------------- 14. journal verify against a dead tracking server


def test_verify_against_a_dead_tracking_server_fails_in_bounded_time(capsys, stores):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: connection refused
        started = time.perf_counter()
        code, out = cli(capsys, "journal", "verify", "--stores", stores, "--tracking-uri", uri)
    assert code == 2 and f"error: {uri}: cannot read the tracking store: " in out, out
    assert "Traceback" not in out and time.perf_counter() - started < 30  # MLflow's own retries take minutes


# ---------------------------------------------------------------- 13. a witness that is a link or a directory


@pytest.mark.parametrize("kind", ["symlink", "directory"])
def test_a_witness_that_is_not_a_regular_file_refuses_the_promote(kind, capsys, stores, serving, tmp_path):
    other = tmp_path / "some-other-file"
    other.write_text("not yours\n")
    witness = serving.with_name(serving.name + ".witness")
    if kind == "symlink":
        witness.symlink_to(other)
    else:
        witness.mkdir()
    before, served = snapshot(stores), serving.read_bytes()
    for argv in (("promote", "r002-c00", "--to", serving), ("rollback", "--target", serving)):
        code, out = cli(capsys, *argv, "--stores", stores)
        assert code == 1 and f"refused: {witness} (the witness file of {serving}) is a symbolic link or not a " \
                              "regular file" in out, out
    assert snapshot(stores) == before and serving.read_bytes() == served and other.read_text() == "not yours\n"


# ---------------------------------------------------------------- 13. an empty stores path


@pytest.mark.parametrize("field", ["stores", "strategy"])
def test_an_empty_path_in_the_run_config_is_refused(field, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "run.yaml"
    config.write_text(f"benchmark: {BENCH}\nlimit: 40\nprobe_size: 10\nrounds: 1\n{field}: ''\n")
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and f"error: {config}:5: {field}: Value error, an empty path would mean the working " \
                          "directory" in out, out
    assert [p.name for p in tmp_path.iterdir()] == ["run.yaml"]


# ---------------------------------------------------------------- 14. journal verify during a round commit


def test_verify_in_the_middle_of_a_round_commit_does_not_fail_falsely(capsys, tmp_path, monkeypatch):
    stores = tmp_path / "stores"
    config = write_config(tmp_path / "run.yaml", benchmark=BENCH, limit=40, probe_size=10, rounds=1,
                          candidates_per_round=1, stores=stores)
    assert cli(capsys, "run", "--config", config, "--no-tracking")[0] == 0
    entries = len(journal(stores))
    monkeypatch.setenv(CRASH_ENV, "commit-records")  # round 2's records are appended, its journal entries are not
    killed = cli_subprocess(tmp_path, "run", "--config", config, "--rounds", 1, "--no-tracking")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    monkeypatch.delenv(CRASH_ENV)
    assert len(journal(stores)) == entries and '"round":2' in (stores / "candidate_outcomes.jsonl").read_text()
    code, out = cli(capsys, "journal", "verify", "--stores", stores, "--tracking-uri", "")
    assert code == 0 and "no decision entry" not in out, out
    assert cli(capsys, "run", "--config", config, "--rounds", 1, "--no-tracking")[0] == 0  # finished on open
    code, out = cli(capsys, "journal", "verify", "--stores", stores, "--tracking-uri", "")
    assert code == 0 and "candidate records match their journaled decisions" in out, out


# ---------------------------------------------------------------- 13. paths that loop or name the wrong kind of file


def test_a_stores_path_that_loops_is_one_line(capsys, tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    config = write_config(tmp_path / "run.yaml", benchmark=BENCH, limit=40, probe_size=10, rounds=1,
                          stores=tmp_path / "unused")
    code, out = cli(capsys, "run", "--config", config, "--stores", loop / "stores", "--no-tracking")
    assert code == 2 and f"error: --stores {loop / 'stores'}: cannot be resolved" in out and "Traceback" not in out


def test_a_serving_dir_that_is_a_file_is_named_as_such(capsys, stores, serving, tmp_path):
    not_a_dir = tmp_path / "serving-dir.txt"
    not_a_dir.write_text("a file\n")
    before = snapshot(stores)
    code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores, "--serving-dir", not_a_dir)
    assert code == 1 and f"refused: the serving directory {not_a_dir} is not a directory" in out, out
    assert snapshot(stores) == before


# ---------------------------------------------------------------- 3. stores sharing one Optuna database


def _decisions(stores: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (stores / "candidate_outcomes.jsonl").read_text().splitlines()]
    return [(r["candidate_id"], r["policy_hash"], r["decision"]["verdict"]) for r in rows]


def test_stores_sharing_an_optuna_database_get_the_candidates_of_their_own(capsys, tmp_path):
    import optuna

    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    for name, storage in (("own", None), ("first", shared), ("second", shared)):
        config = write_config(tmp_path / f"{name}.yaml", benchmark=BENCH, limit=40, probe_size=10, rounds=2,
                              candidates_per_round=2, stores=tmp_path / name,
                              **({"optuna_storage": storage} if storage else {}))
        assert cli(capsys, "run", "--config", config, "--no-tracking")[0] == 0
    assert _decisions(tmp_path / "first") == _decisions(tmp_path / "own") == _decisions(tmp_path / "second")
    studies = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(shared)}
    namespaces = {name.rpartition(":")[0] for name in studies}
    assert len(namespaces) == 2 and "" not in namespaces, studies  # one set of studies per stores directory
    own_url = f"sqlite:///{tmp_path / 'own' / 'optuna.db'}"
    own = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(own_url)}
    for namespace in namespaces:
        assert {n.rpartition(":")[2]: k for n, k in studies.items() if n.startswith(namespace)} == own


# ---------------------------------------------------------------- 14. a store file that cannot be written


@pytest.mark.parametrize("name", ["journal.jsonl", "candidate_outcomes.jsonl"])
def test_a_store_file_that_cannot_be_written_is_named_as_such(name, capsys, stores, serving):
    path = stores / name
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i (an immutable file, read-only even for root) is not supported here")
    try:
        before = snapshot(stores)
        code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)
        assert code == 2 and f"error: {path}: cannot open for appending: operation not permitted" in out, out
        assert "torn" not in out and snapshot(stores) == before
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


# ---------------------------------------------------------------- 13. a refused stores directory is left as it was


def test_a_directory_that_is_not_stores_is_refused_and_left_as_it_was(capsys, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "journal.jsonl").write_text('{"not": "a journal"}\n')
    (other / "state.json").write_text("{}\n")
    before = snapshot(other)
    config = write_config(tmp_path / "run.yaml", benchmark=BENCH, limit=40, probe_size=10, rounds=1,
                          stores=tmp_path / "unused")
    code, out = cli(capsys, "run", "--config", config, "--stores", other, "--no-tracking")
    assert code == 2 and f"error: {other / 'journal.jsonl'}: " in out, out
    assert snapshot(other) == before and sorted(p.name for p in other.iterdir()) == ["journal.jsonl", "state.json"]


# ---------------------------------------------------------------- 13. a serving directory that cannot be written


def test_a_serving_directory_that_cannot_be_written_leaves_the_stores_as_they_were(capsys, stores, serving):
    if subprocess.run(["chattr", "+i", str(serving.parent)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i (an immutable directory, read-only even for root) is not supported here")
    try:
        before, served = snapshot(stores), serving.read_bytes()
        code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)
        assert code == 2 and f"error: {serving.parent}: cannot create files in: operation not permitted" in out, out
        assert snapshot(stores) == before and serving.read_bytes() == served  # no copies kept in serving/
    finally:
        subprocess.run(["chattr", "-i", str(serving.parent)], check=True)
