"""Atomic files, the run lock and the StoreSet round write-ahead log, including crashes at every write and kill -9."""
from __future__ import annotations

import errno
import json
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evolve.state import checkpoint as checkpoint_mod
from evolve.state import journal as journal_mod
from evolve.state import stores as stores_mod
from evolve.files import (
    StoreError, atomic_write_json, atomic_write_text, iter_jsonl, os_error, read_json, repair_torn_tail,
)
from evolve.state.lock import RunLock
from evolve.state.strategy_files import strategy_from_yaml, strategy_to_yaml
from evolve.state.layout import DOC_STORES, JSONL_STORES
from evolve.state.stores import RoundBundle, StoreSet
from evolve.state.view import StoreView
from evolve.data import BASELINE_PATH
from evolve.strategy.artifact import derive, load_strategy, strategy_hash

TESTS_DIR = Path(__file__).resolve().parent
BASELINE = load_strategy(BASELINE_PATH)


def make_bundle(n: int, width: int = 5) -> RoundBundle:
    """A deterministic round touching every kind of store."""
    child = derive(BASELINE, {"name": f"round-{n}"})
    digest = strategy_hash(child)
    return RoundBundle(
        records={name: [{"key": f"{name}-{n}-{i}", "round": n, "i": i} for i in range(width)] for name in JSONL_STORES},
        docs={"scoreboard": {"round": n, "best": digest},
              "question_histories": {f"q{i}": [{"round": r, "candidate_id": f"c{r}", "correct": (r + i) % 2 == 0}
                                               for r in range(1, n + 1)] for i in range(3)}},
        journal=[("ROUND", {"round": n, "phase": "start"}), ("CANDIDATE", {"strategy_hash": digest}),
                 ("ACCEPT", {"strategy_hash": digest, "delta": 0.01 * n}), ("ROUND", {"round": n, "phase": "end"})],
        strategies=[child],
        checkpoint={"strategy": child, "score": 0.5 + n / 100, "meta": {"round": n}},
        state={"current_strategy": digest},
    )


def snapshot(s: StoreSet) -> dict:
    """Everything committed rounds make visible, minus timestamps (and hashes that embed them)."""
    cp = s.checkpoint.load()
    return {
        "records": {name: s.read_jsonl(name) for name in JSONL_STORES},
        "docs": {name: s.read_doc(name) for name in DOC_STORES},
        "journal": [(e["type"], e["round"], e["seq"], e["payload"]) for e in s.journal.entries()
                    if e["type"] != "RECOVER"],
        "strategies": sorted(p.name for p in s.strategies_dir.iterdir()),
        "checkpoint": None if cp is None else (cp.strategy_hash, cp.round, cp.score, cp.fallback_from),
        "state": {k: v for k, v in s.state.items() if k not in ("committed_at", "journal_head")},
        "wal_files": sorted(p.name for p in s.rounds_dir.glob("round-*")),
    }


def expected_through(last: int) -> dict:
    """What rounds 1..last must leave behind, computed without any store."""
    bundles = [make_bundle(n) for n in range(1, last + 1)]
    return {
        "records": {name: [r for b in bundles for r in b.records[name]] for name in JSONL_STORES},
        "docs": {name: bundles[-1].docs.get(name) for name in DOC_STORES},
        "journal": [(t, n, seq, p) for n, b in enumerate(bundles, 1) for seq, (t, p) in enumerate(b.journal)],
        "strategies": sorted(f"{strategy_hash(b.strategies[0])}.yaml" for b in bundles),
        "checkpoint": (strategy_hash(bundles[-1].checkpoint["strategy"]), last, bundles[-1].checkpoint["score"], None),
        "state": {"last_committed_round": last, **bundles[-1].state},
        "wal_files": [],
    }


# ---------------------------------------------------------------- atomic primitives


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    target = tmp_path / "doc.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_json(target, {"a": 2, "b": [1.5, None]})
    assert read_json(target) == {"a": 2, "b": [1.5, None]}
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]


def test_failed_write_mid_file_keeps_old_content(tmp_path):
    """A size limit makes the write fail after the temp file got partial data: the old file must survive."""
    target = tmp_path / "scoreboard.json"
    atomic_write_text(target, '{"old": true}\n')
    code = textwrap.dedent("""
        import resource, signal, sys
        from evolve.files import StoreError, atomic_write_json
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        try:
            atomic_write_json(sys.argv[1], {"big": "x" * 100000})
        except StoreError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert str(target) in out.stdout and "file too large" in out.stdout
    assert target.read_text() == '{"old": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["scoreboard.json"]  # temp file cleaned up


def test_write_under_a_file_gives_clear_error(tmp_path):
    blocker = tmp_path / "stores"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match="a file is in the way") as info:
        atomic_write_json(blocker / "state.json", {})
    assert str(blocker) in str(info.value)
    assert blocker.read_text() == "not a directory"


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "disk full"), (errno.EACCES, "permission denied"),
                                         (errno.EROFS, "read-only file system")])
def test_os_errors_are_named_in_words(code, words):
    exc = os_error("/x/state.json", OSError(code, "raw"), "write")
    assert isinstance(exc, StoreError) and str(exc).startswith("/x/state.json: cannot write: " + words)


def test_read_json_missing_and_corrupt(tmp_path):
    path = tmp_path / "effects.json"
    assert read_json(path, {"d": 1}) == {"d": 1}
    with pytest.raises(StoreError, match="does not exist"):
        read_json(path)
    path.write_text('{\n  "a": 1,\n  "b": \n}')
    with pytest.raises(StoreError, match=r"effects\.json: corrupt JSON at line 4"):
        read_json(path, {})


def test_torn_tail_repaired_and_corrupt_line_named(tmp_path, caplog):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"key": "a"}\n{"key": "b"}\n{"key": "c", "x"')
    assert repair_torn_tail(path) == b'{"key": "c", "x"'
    assert "torn last line" in caplog.text
    assert [r["key"] for _, r in iter_jsonl(path)] == ["a", "b"]
    assert repair_torn_tail(path) == b""
    path.write_bytes(b'{"key": "a"}\n{"key": oops}\n')
    with pytest.raises(StoreError, match=r"log\.jsonl: line 2: corrupt JSON"):
        list(iter_jsonl(path))


def test_strategy_yaml_roundtrip_and_hash_check(tmp_path):
    text = strategy_to_yaml(BASELINE)
    assert strategy_from_yaml(text, strategy_hash(BASELINE), "s.yaml") == BASELINE
    with pytest.raises(StoreError, match="hash mismatch"):
        strategy_from_yaml(text.replace("window_size: 4", "window_size: 5"), strategy_hash(BASELINE), "s.yaml")


# ---------------------------------------------------------------- run lock


def test_run_lock_refuses_second_holder_and_names_pid(tmp_path):
    code = "import sys, time\nfrom evolve.state.lock import RunLock\nlock = RunLock(sys.argv[1]).acquire()\n" \
           "print('locked', flush=True)\ntime.sleep(60)\n"
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(StoreError) as info:
            RunLock(tmp_path).acquire()
        assert str(tmp_path / "run.lock") in str(info.value) and f"pid {proc.pid}" in str(info.value)
        with pytest.raises(StoreError, match="locked by another run"):
            StoreSet(tmp_path)
    finally:
        proc.kill()
        proc.wait()
    with RunLock(tmp_path) as lock:  # the OS released the dead holder's lock
        assert lock.held


def test_storeset_holds_lock_until_closed(tmp_path):
    s = StoreSet(tmp_path)
    with pytest.raises(StoreError, match="run.lock"):
        StoreSet(tmp_path)
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.commit_round(1, make_bundle(1))
    StoreSet(tmp_path).close()


# ---------------------------------------------------------------- StoreSet


def test_commit_rounds_visible_and_verified(tmp_path):
    with StoreSet(tmp_path) as s:
        assert s.last_committed_round == 0 and s.recovery.clean
        for n in (1, 2, 3):
            s.commit_round(n, make_bundle(n))
        assert snapshot(s) == expected_through(3)
        assert s.verify_journal().ok
        assert s.get_strategy(s.current_strategy)["name"] == "round-3"
        assert s.optuna_path == tmp_path / "optuna.db" and s.cache_dir.is_dir()


def test_commit_rejects_bad_bundles_before_writing(tmp_path):
    with StoreSet(tmp_path) as s:
        s.commit_round(1, make_bundle(1))
        before = snapshot(s)
        with pytest.raises(StoreError, match="rounds must increase"):
            s.commit_round(1, make_bundle(2))
        clash = make_bundle(2)
        clash.records["stage_audits"].append({"key": "stage_audits-1-0"})
        with pytest.raises(StoreError, match="'stage_audits-1-0' already exists"):
            s.commit_round(2, clash)
        with pytest.raises(StoreError, match="unknown JSONL store 'traces'"):
            s.commit_round(2, RoundBundle(records={"traces": [{"key": "a"}]}))
        with pytest.raises(StoreError, match=r"records.diagnosis_log\[0\]: every record needs"):
            s.commit_round(2, RoundBundle(records={"diagnosis_log": [{"id": 1}]}))
        with pytest.raises(StoreError, match="cannot serialise"):
            s.commit_round(2, RoundBundle(docs={"scoreboard": {"x": float("nan")}}))
        assert snapshot(s) == before


def test_strategy_files_are_content_addressed_and_verified(tmp_path):
    with StoreSet(tmp_path) as s:
        digest = s.put_strategy(BASELINE)
        assert s.put_strategy(BASELINE) == digest and s.get_strategy(digest) == BASELINE
        path = s.strategies_dir / f"{digest}.yaml"
        path.write_text(path.read_text().replace("window_size: 4", "window_size: 5"))
        with pytest.raises(StoreError, match="hash mismatch"):
            s.get_strategy(digest)
        with pytest.raises(StoreError, match="hash mismatch"):
            s.put_strategy(BASELINE)  # never overwritten, and never trusted blindly
        with pytest.raises(StoreError, match="not a strategy hash"):
            s.get_strategy("../state")


class Crash(Exception):
    """Stands for the process dying at this instant."""


def install_crash(mp: pytest.MonkeyPatch, at: int, torn: bool) -> list[bool]:
    """Make the ``at``-th durable write of the commit path die (before writing, or half-way for appends).

    Returns the kinds of writes seen so far (``True`` for appends).
    """
    calls: list[bool] = []

    def wrap(fn, is_append):
        def inner(*args, **kwargs):
            calls.append(is_append)
            if len(calls) == at:
                if torn and is_append:
                    path, lines = args
                    data = "".join(line + "\n" for line in lines).encode()
                    with open(path, "ab") as fh:
                        fh.write(data[: max(1, len(data) // 2)])
                raise Crash(f"write {at}")
            return fn(*args, **kwargs)
        return inner

    for mod in (stores_mod, journal_mod, checkpoint_mod):
        for name in ("append_lines", "atomic_write_json", "atomic_write_text"):
            if hasattr(mod, name):
                mp.setattr(mod, name, wrap(getattr(mod, name), name == "append_lines"))
    mp.setattr(StoreSet, "_unlink", staticmethod(wrap(StoreSet._unlink, False)))
    return calls


def test_crash_at_every_write_of_a_commit_recovers_exactly(tmp_path):
    base = tmp_path / "base"
    with StoreSet(base) as s:
        s.commit_round(1, make_bundle(1))
        s.commit_round(2, make_bundle(2))
    with StoreSet(tmp_path / "count") as s:
        with pytest.MonkeyPatch.context() as mp:
            calls = install_crash(mp, at=0, torn=False)
            s.commit_round(1, make_bundle(1))
    writes = len(calls)
    assert writes >= 15  # WAL + strategy + 3 stores + 2 docs + checkpoint + 4 journal + state + WAL removal
    expected = expected_through(3)
    for at in range(1, writes + 1):
        for torn in (False, True) if calls[at - 1] else (False,):
            root = tmp_path / f"crash-{at}-{torn}"
            shutil.copytree(base, root)
            s = StoreSet(root)
            with pytest.MonkeyPatch.context() as mp:
                install_crash(mp, at, torn)
                with pytest.raises(Crash):
                    s.commit_round(3, make_bundle(3))
            s.close()  # the dead process's lock goes away
            with StoreSet(root) as s:
                recovered = s.recovery
                wal_written_state_not = 1 < at < writes  # the last write removes the WAL after state.json
                assert recovered.reapplied == ([3] if wal_written_state_not else []), (at, torn)
                if s.last_committed_round == 2:
                    s.commit_round(3, make_bundle(3))
                assert snapshot(s) == expected, (at, torn)
                assert s.verify_journal().ok
                if not recovered.clean:
                    assert s.journal.find("RECOVER")[-1]["payload"] == recovered.to_payload()


def test_invalid_wal_is_discarded_and_reported(tmp_path):
    with StoreSet(tmp_path) as s:
        s.commit_round(1, make_bundle(1))
    wal = tmp_path / "rounds" / "round-0002.json"
    wal.write_text('{"round": 2, "bundle": {"records": {')
    (tmp_path / "rounds" / ".round-0003.json.abc.tmp").write_text("{")
    with StoreSet(tmp_path) as s:
        report = s.recovery
        assert report.reapplied == [] and s.last_committed_round == 1
        assert report.discarded[0]["file"] == "rounds/round-0002.json"
        assert "corrupt JSON" in report.discarded[0]["reason"]
        assert report.removed_temps == ["rounds/.round-0003.json.abc.tmp"]
        assert (tmp_path / report.discarded[0]["moved_to"]).exists() and not wal.exists()
        assert s.journal.last()["type"] == "RECOVER"
        s.commit_round(2, make_bundle(2))
        assert snapshot(s) == expected_through(2)


def test_wal_with_wrong_checksum_is_discarded(tmp_path):
    with StoreSet(tmp_path) as s:
        s.commit_round(1, make_bundle(1))
        with pytest.MonkeyPatch.context() as mp:
            install_crash(mp, at=2, torn=False)  # WAL written, nothing applied
            with pytest.raises(Crash):
                s.commit_round(2, make_bundle(2))
    wal = tmp_path / "rounds" / "round-0002.json"
    data = json.loads(wal.read_text())
    data["bundle"]["records"]["stage_audits"][0]["i"] = 9  # edited, checksum left as it was
    wal.write_text(json.dumps(data))
    with StoreSet(tmp_path) as s:
        assert "does not match its sha256" in s.recovery.discarded[0]["reason"]
        assert snapshot(s) == expected_through(1)


def test_journal_truncated_after_commit_is_detected(tmp_path):
    with StoreSet(tmp_path) as s:
        s.commit_round(1, make_bundle(1))
        s.commit_round(2, make_bundle(2))
    path = tmp_path / "journal.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))
    result = StoreView(tmp_path).verify_journal()
    assert not result.ok and result.first_bad_index == len(lines) - 1 and "removed from the end" in result.reason
    before = path.read_bytes()
    with pytest.raises(StoreError, match=f"entry {len(lines) - 1} was recorded as committed"):
        StoreSet(tmp_path)  # opening for writing refuses damaged committed history instead of "repairing" it
    assert path.read_bytes() == before


# ---------------------------------------------------------------- real kill -9

CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from test_storage import make_bundle
from evolve.state.stores import StoreSet
with StoreSet(sys.argv[2], lock_timeout=10) as s:
    print("ready", s.last_committed_round, int(s.recovery.clean), flush=True)
    n = s.last_committed_round + 1
    while True:
        s.commit_round(n, make_bundle(n))
        n += 1
"""


def test_sigkill_during_commits_loses_and_duplicates_nothing(tmp_path):
    rng = random.Random(20240607)
    root = tmp_path / "stores"
    seen: list[int] = []
    for _ in range(7):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(TESTS_DIR), str(root)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline().split()
            assert line and line[0] == "ready", proc.stderr.read() if proc.poll() is not None else line
            seen.append(int(line[1]))
            time.sleep(rng.uniform(0.05, 0.4))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read()  # it was still committing, not failing
    assert seen == sorted(seen)
    with StoreSet(root) as s:
        last = s.last_committed_round
        assert last >= seen[-1] and last >= 1
        for name in JSONL_STORES:
            keys = [r["key"] for r in s.read_jsonl(name)]
            assert len(keys) == len(set(keys))
        assert snapshot(s) == expected_through(last)
        assert s.verify_journal().ok
        assert max(e["round"] for e in s.journal.entries() if e["round"] is not None) == last
        assert json.loads((root / "state.json").read_text())["journal_head"]["index"] <= s.journal.last()["index"]


def test_atomic_write_keeps_permissions_and_new_files_follow_umask(tmp_path):
    import os
    import stat

    from evolve.files import atomic_write_text

    old = os.umask(0o022)
    try:
        fresh = tmp_path / "fresh.txt"
        atomic_write_text(fresh, "a")
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
        os.chmod(fresh, 0o600)
        atomic_write_text(fresh, "b")
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o600 and fresh.read_text() == "b"
    finally:
        os.umask(old)
