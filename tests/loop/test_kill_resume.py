"""Crash safety of ``memevolve run``: SIGKILL the process at chosen points, resume it with the same command,
and require intact stores and exactly the decisions and final strategy of one uninterrupted run."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import yaml

from evolve.files import CRASH_ENV
from evolve.state.content import REF, ContentStore, resolved
from evolve.state.layout import DOC_STORES, JSONL_STORES
from evolve.state.stores import StoreSet
from evolve.data import BASELINE_PATH
from evolve.strategy.artifact import strategy_hash

pytestmark = pytest.mark.heavy

ROUNDS = 3
POLL_S = 0.005
TIMEOUT_S = 300.0


# ---------------------------------------------------------------- running the CLI


def write_config(directory: Path) -> Path:
    config = directory / "run.yaml"
    config.write_text(yaml.safe_dump({
        "benchmark": "synthetic:0", "limit": 60, "probe_size": 20, "rounds": ROUNDS, "candidates_per_round": 2,
        "stores": str(directory / "stores"), "strategy": str(BASELINE_PATH)}))
    return config


def start(config: Path, tag: str, crash: str | None = None) -> subprocess.Popen:
    """The run in a child process; ``crash``: the step at which it kills itself (:func:`evolve.files.crash_point`)."""
    out, err = (open(config.parent / f"{tag}.{kind}", "wb") for kind in ("out", "err"))
    env = {**os.environ, CRASH_ENV: crash} if crash else None
    with out, err:
        return subprocess.Popen([sys.executable, "-m", "evolve.cli", "run", "--config", str(config), "--no-tracking",
                                 "--json"],
                                cwd=config.parent, stdout=out, stderr=err, env=env)


def stderr_tail(config: Path, tag: str) -> str:
    return (config.parent / f"{tag}.err").read_text(errors="replace")[-2000:]


def run_to_end(config: Path, tag: str) -> dict:
    """Run the command to completion; its printed summary."""
    proc = start(config, tag)
    try:
        code = proc.wait(TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, f"{tag}: exit code {code}\n{stderr_tail(config, tag)}"
    return json.loads((config.parent / f"{tag}.out").read_text())


# ---------------------------------------------------------------- observing the stores


def state_of(stores: Path) -> dict | None:
    try:
        return json.loads((stores / "state.json").read_text())
    except FileNotFoundError:
        return None


def committed(stores: Path) -> int:
    return (state_of(stores) or {}).get("last_committed_round", 0)


def wal(stores: Path, n: int) -> Path:
    return stores / "rounds" / f"round-{n:04d}.json"


def optuna_trials(stores: Path, state: str) -> set[tuple[str, int]]:
    """(study, trial number) of trials in ``state``; empty while the database is busy or not yet created."""
    db = stores / "optuna.db"
    if not db.exists():
        return set()
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.5) as conn:
            rows = conn.execute("SELECT s.study_name, t.number FROM trials t JOIN studies s USING (study_id) "
                                "WHERE t.state = ?", (state,)).fetchall()
    except sqlite3.OperationalError:
        return set()
    return {(name, number) for name, number in rows}


def open_round_trial(stores: Path, n: int) -> bool:
    """Round ``n - 1`` is committed and round ``n`` holds an Optuna trial that is asked but not yet told."""
    state = state_of(stores)
    if not state or state.get("last_committed_round") != n - 1:
        return False
    pending = {(p["study"], p["trial"]) for p in state.get("optuna_pending", [])}
    return bool(optuna_trials(stores, "RUNNING") - pending)


def ingestion_started(stores: Path) -> bool:
    directory = stores / "cache" / "ingestion" / "stores"
    return directory.is_dir() and any(directory.iterdir())


def records(stores: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (stores / f"{name}.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- kill points


@dataclass(frozen=True)
class KillPoint:
    """Kill when ``trigger`` holds; poll every ``POLL_S`` until ``armed`` holds, then without sleeping.

    ``landed`` names what the stores must look like right after the kill (proof the kill hit the intended
    window); ``reapplied`` is the round the resumed run must finish from its write-ahead log, if any.
    """

    trigger: Callable[[Path], bool]
    landed: Callable[[Path], bool]
    landed_doc: str
    warm_cache: bool = True
    armed: Callable[[Path], bool] = lambda stores: False
    reapplied: int | None = None
    #: The step at which the run kills itself (:func:`evolve.files.crash_point`), for a window too short to hit by
    #: polling from outside (the test then waits for the run to end, and ``trigger`` is not polled).
    crash: str | None = None


KILL_POINTS = {
    # Round 1 observe, cold cache: ingestion has written its first cached store, nothing is committed.
    "round1-evaluation": KillPoint(
        trigger=ingestion_started, landed=lambda s: state_of(s) is None and not wal(s, 1).exists(),
        landed_doc="no round committed and no write-ahead log yet", warm_cache=False),
    # Round 2 screening: round 1 committed, a round-2 Optuna trial asked and not yet told.
    "round2-open-trial": KillPoint(
        trigger=lambda s: open_round_trial(s, 2), armed=lambda s: committed(s) == 1,
        landed=lambda s: committed(s) == 1 and not wal(s, 2).exists(),
        landed_doc="round 1 committed, round 2 not yet written ahead"),
    # Between store writes: the round's write-ahead log exists, state.json does not yet say so.
    "round2-wal-applying": KillPoint(
        trigger=lambda s: wal(s, 2).exists(), armed=lambda s: committed(s) == 1,
        landed=lambda s: committed(s) == 1 and wal(s, 2).exists(),
        landed_doc="round 2 write-ahead log present, state.json still at round 1", reapplied=2),
    "round3-wal-applying": KillPoint(
        trigger=lambda s: wal(s, 3).exists(), armed=lambda s: committed(s) == 2,
        landed=lambda s: committed(s) == 2 and wal(s, 3).exists(),
        landed_doc="round 3 write-ahead log present, state.json still at round 2", reapplied=3),
    # Best-ever checkpoint write (round 1 always saves one): a generation started, CURRENT not yet written.
    "checkpoint-write": KillPoint(
        trigger=lambda s: (s / "best").exists(), armed=lambda s: wal(s, 1).exists(),
        landed=lambda s: state_of(s) is None and wal(s, 1).exists() and not (s / "best" / "CURRENT").exists(),
        landed_doc="round 1 write-ahead log present, checkpoint generation without CURRENT", reapplied=1,
        crash="checkpoint.generation"),
}


def kill_at(config: Path, point: str, tag: str) -> None:
    """Start the run and SIGKILL it as soon as the kill point's trigger holds (or let it kill itself at its crash
    step)."""
    kp, stores = KILL_POINTS[point], config.parent / "stores"
    proc = start(config, tag, kp.crash)
    started = time.monotonic()
    try:
        if kp.crash:
            proc.wait(TIMEOUT_S)
        else:
            armed = False
            while not kp.trigger(stores):
                if proc.poll() is not None:
                    pytest.fail(f"kill point {point!r} never reached: the run exited with code {proc.returncode} "
                                f"first\n{stderr_tail(config, tag)}")
                if time.monotonic() - started > TIMEOUT_S:
                    pytest.fail(f"kill point {point!r} not reached within {TIMEOUT_S:.0f} s")
                armed = armed or kp.armed(stores)
                time.sleep(0 if armed else POLL_S)
            proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, (
        f"kill point {point!r}: the run exited with code {proc.returncode} before the kill landed")
    assert kp.landed(stores), (f"kill point {point!r} was missed: expected {kp.landed_doc}; found state "
                               f"round {committed(stores)}, WAL files "
                               f"{sorted(p.name for p in (stores / 'rounds').glob('round-*.json'))}")


# ---------------------------------------------------------------- what must hold after the run finishes


def final_outcome(stores: Path) -> dict:
    """What must not depend on where (or whether) the run was interrupted."""
    with StoreSet(stores) as s:
        best = s.checkpoint.load()
        docs = {name: s.read_doc(name) for name in DOC_STORES}
        outcomes = s.read_jsonl("candidate_outcomes")
        current = s.current_strategy
        # a record's hash covers its examples' references into the content store, whose random nonces differ
        # between runs: the words they hold are compared instead
        committed_entries = [(e["type"], e["round"], e["seq"], {k: v for k, v in e["payload"].items()
                                                                 if k != "record_hash"})
                             for e in s.journal.entries() if e["seq"] is not None]
        content = ContentStore(stores / "content")
        examples = [{side: [{k: v for k, v in row.items() if k != REF} for row in rows]
                     for side, rows in (resolved(r["examples"], content) or {}).items()} for r in outcomes]
    return {"decisions": [(r["candidate_id"], r["change_keys"], r["decided_by"], r["decision"]["verdict"])
                          for r in outcomes], "examples": examples,
            "current_strategy": current, "best": best and (best.strategy_hash, best.score, best.round),
            "docs": docs, "journal": committed_entries}


def check_stores(stores: Path) -> None:
    with StoreSet(stores) as s:
        verified, recovery = s.verify_journal(), s.recovery
        entries, best, state = s.journal.entries(), s.checkpoint.load(), s.state
        jsonl = {name: s.read_jsonl(name) for name in JSONL_STORES}
        scoreboard = s.read_doc("scoreboard")
    assert verified.ok, verified.reason
    assert recovery.clean, f"a finished run left something to recover: {recovery.to_payload()}"
    assert state["last_committed_round"] == ROUNDS and not list((stores / "rounds").glob("round-*.json"))
    for name, rows in jsonl.items():
        keys = [r["key"] for r in rows]
        assert len(keys) == len(set(keys)), f"{name}: duplicate keys {sorted(k for k in keys if keys.count(k) > 1)}"
    rounds = list(range(1, ROUNDS + 1))
    assert [e["payload"]["round"] for e in entries if e["type"] == "ROUND"] == rounds
    assert [e["round"] for e in entries if e["type"] == "ROUND"] == rounds
    assert [r["round"] for r in scoreboard["rounds"]] == rounds
    in_rounds = [(e["round"], e["seq"]) for e in entries if e["seq"] is not None]
    assert len(in_rounds) == len(set(in_rounds)), "a round's journal entry was appended twice"
    assert sum(e["type"] == "CANDIDATE" for e in entries) == len(jsonl["candidate_outcomes"])
    assert best is not None and best.fallback_from is None
    assert strategy_hash(best.strategy) == best.strategy_hash
    open_trials = optuna_trials(stores, "RUNNING") | optuna_trials(stores, "WAITING")
    assert not open_trials, f"Optuna trials never told although their rounds are committed: {sorted(open_trials)}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """One uninterrupted run of the same config."""
    directory = tmp_path_factory.mktemp("reference")
    summary = run_to_end(write_config(directory), "reference")
    stores = directory / "stores"
    check_stores(stores)
    outcome = final_outcome(stores)
    assert outcome["decisions"], "the reference run decided nothing; the comparison would be empty"
    return {"summary": summary, "outcome": outcome, "cache": stores / "cache"}


def comparable(summary: dict) -> dict:
    """A summary without what differs between machines and runs: the strategy's path, the night's wall time."""
    return {**summary, "current": {k: v for k, v in summary["current"].items() if k != "path"},
            "night": {k: v for k, v in (summary["night"] or {}).items() if k != "minutes"}}


@pytest.mark.parametrize("points", [(p,) for p in KILL_POINTS] + [
    ("checkpoint-write", "round2-open-trial", "round3-wal-applying")], ids=lambda points: "+".join(points))
def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path, reference, points):
    config = write_config(tmp_path)
    stores = tmp_path / "stores"
    if KILL_POINTS[points[0]].warm_cache:  # content-addressed ingestion/embedding cache: saves the slow part
        shutil.copytree(reference["cache"], stores / "cache")
    for i, point in enumerate(points):  # each later kill interrupts a resumed run
        kill_at(config, point, f"killed-{i}")

    summary = run_to_end(config, "resumed")

    check_stores(stores)
    recovered = [e["payload"] for e in records(stores, "journal") if e["type"] == "RECOVER"]
    assert [n for r in recovered for n in r["reapplied"]] == [
        KILL_POINTS[p].reapplied for p in points if KILL_POINTS[p].reapplied is not None]
    assert final_outcome(stores) == reference["outcome"]
    assert comparable(summary) == comparable(reference["summary"])
