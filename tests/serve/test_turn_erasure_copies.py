"""``memevolve erase --turn USER:ID``: one turn carrying a marker word, held by an export, a stores directory's
candidate examples (side files and inline rows), its LLM and ingestion caches and an MLflow run's artifacts, erased;
no file holds the marker after, the other turns, questions, rows and users are kept, the journal still verifies, and
a second run finds nothing and changes nothing. A run cut short is finished by running it again; bad input is named
and changes nothing. ``--from-service`` carries the turns the service erased or purged, as its audit records them."""
from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evolve.files import CRASH_ENV, atomic_write_json
from evolve.llm.cache import ResponseCache
from evolve.ops.erasure_turn import FoundTurn, TurnReach, _quote
from evolve.ops.history import History
from evolve.ops.manifest import checked_export, manifest_of, read_manifest, turn_sha256, write_manifest
from evolve.runtime.subject import subject, subject_key
from evolve.serve.server import ServeConfig, Service
from evolve.state.content import ContentStore
from evolve.state.journal import STORES_TAG
from workflow_fixtures import cli, cli_subprocess

MARKER = "Quillibrant"
OLD_STORES = Path(__file__).parents[1] / "fixtures" / "stores_6991b56" / "evidence"
USER = "synth0-2"  # a conversation the fixture's inline example rows speak of
ERASED = f"Big news today. I got promoted to head baker at {MARKER} Bakery! Thanks!"
QUOTED = f"I got promoted to head baker at {MARKER} Bakery"  # one sentence of the erased turn


def _sample(user: str, turns: list[str], qa: list[dict]) -> dict:
    return {"sample_id": user, "conversation": {
        "speaker_a": user, "speaker_b": "bot", "session_1_date_time": "1:00 pm on 8 May, 2023",
        "session_1": [{"speaker": user, "dia_id": f"D1:{n}", "text": t} for n, t in enumerate(turns, start=1)],
        "session_2_date_time": "2:00 pm on 9 May, 2023",
        "session_2": [{"speaker": "bot", "dia_id": "D2:1", "text": "Thanks! See you soon."}]}, "qa": qa}


def _export(folder: Path) -> Path:
    """Two users' samples; turn D1:2 of USER holds the marker, a question cites it, another cites D1:1."""
    samples = [_sample(USER, ["My favorite season used to be summer. Thanks!", ERASED, "Thanks!"], [
        {"question": "When did Ingrid get a promotion?", "answer": "8 May 2023", "evidence": ["D1:2"], "category": 2},
        {"question": "What was Ingrid's favorite season before winter?", "answer": "summer", "evidence": ["D1:1"],
         "category": 2}]),
        _sample("bo", ["I keep bees in my garden, they are lovely. Thanks!"], [])]
    folder.mkdir(exist_ok=True)
    export = folder / "night.json"
    atomic_write_json(export, samples)
    manifest = folder / "night.manifest.json"
    write_manifest(manifest, manifest_of(export, manifest, samples, [USER, "bo"]))
    return manifest


def _copies(tmp_path: Path, stores: Path) -> tuple[str, str]:
    """The stores' side files, caches and an MLflow run holding the marker (and things that do not); the tracking
    URI and the run id."""
    from mlflow.tracking import MlflowClient

    content = ContentStore(stores / "content")
    content.put(USER, {"question": "Where does Ingrid work?", "gold": "a bakery", "candidate_answer": "a bakery",
                       "baseline_answer": f"She said: {QUOTED.lower()}."})
    content.put(USER, {"question": "What did Ingrid say?", "gold": "Thanks!", "baseline_answer": "Thanks! She got "
                       "promoted", "candidate_answer": "Big news today."})  # common words and short sentences only
    content.put("bo", {"question": "What does bo keep?", "gold": "bees", "baseline_answer": "bees",
                       "candidate_answer": "Bakery"})
    llm = ResponseCache(stores / "cache" / "llm")
    llm.put("a" * 64, {"messages": [{"role": "user", "content": f"Critique: {ERASED}"}], "content": "ok"})
    with subject(USER):
        llm.put("b" * 64, {"messages": [{"role": "user", "content": "Thanks! What season?"}], "content": "summer"})
    llm.put("c" * 64, {"messages": [{"role": "user", "content": "I got promoted too. Thanks!"}], "content": "yay"})
    ingested = stores / "cache" / "ingestion" / "stores"
    ingested.mkdir(parents=True)
    (ingested / f"{subject_key(USER)}-{'d' * 64}.pkl").write_bytes(pickle.dumps({"items": [ERASED]}))
    (ingested / f"{subject_key('bo')}-{'e' * 64}.pkl").write_bytes(pickle.dumps({"items": ["bees"]}))

    tracking = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    (tmp_path / "mlruns").mkdir()
    client = MlflowClient(tracking_uri=tracking)
    experiment = client.create_experiment("night", artifact_location=(tmp_path / "mlruns" / "art").as_uri())
    run = client.create_run(experiment, tags={STORES_TAG: str(stores.resolve())}).info.run_id
    traces = [{"question_id": f"{USER}/q0", "conversation_id": USER, "question": "When did Ingrid get a promotion?",
               "gold_evidence": ["D1:2"], "packed": [{"id": "m1", "source_ids": ["D1:2"], "text": "promoted (baker)"}]},
              {"question_id": f"{USER}/q1", "conversation_id": USER, "question": "What season?",
               "packed": [{"id": "m2", "source_ids": ["D1:1"], "text": "My favorite season used to be summer."}]},
              {"question_id": f"{USER}/q2", "conversation_id": USER, "question": "Where?",
               "packed": [{"id": "m3", "source_ids": ["D9:9"], "text": f"Ingrid: {QUOTED}"}]},
              {"question_id": "bo/q0", "conversation_id": "bo", "question": "What does bo keep?", "packed": []}]
    client.log_text(run, "".join(json.dumps(t) + "\n" for t in traces), "traces.jsonl")
    client.log_text(run, f"Notes: the failure quoted '{QUOTED}' verbatim.", "notes.md")
    client.log_text(run, json.dumps({"accuracy": 0.5}), "summary.json")
    return tracking, run


def _marked(*roots: Path) -> list[str]:
    return [str(p) for root in roots for p in sorted(root.rglob("*"))
            if p.is_file() and MARKER.lower().encode() in p.read_bytes().lower()]


def _bytes(*roots: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for root in roots for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_turn_erasure_reaches_every_copy_and_a_second_run_changes_nothing(tmp_path, capsys):
    stores = Path(shutil.copytree(OLD_STORES, tmp_path / "stores"))
    manifest = _export(tmp_path / "export")
    tracking, run = _copies(tmp_path, stores)
    roots = (tmp_path / "export", stores, tmp_path / "mlruns")
    assert len(_marked(*roots)) >= 6

    code, out = cli(capsys, "erase", "--turn", f"{USER}:D1:2", "--export", manifest, "--stores", stores,
                    "--tracking-uri", tracking)
    assert code == 0, out
    assert "1 turn(s) and 1 question(s) citing or quoting them removed" in out, out
    assert _marked(*roots) == []

    samples = {s["sample_id"]: s for s in json.loads((tmp_path / "export" / "night.json").read_text())}
    conversation = samples[USER]["conversation"]
    assert [t["dia_id"] for t in conversation["session_1"]] == ["D1:1", "D1:3"]
    assert [t["dia_id"] for t in conversation["session_2"]] == ["D2:1"]
    assert [q["evidence"] for q in samples[USER]["qa"]] == [["D1:1"]]
    assert samples["bo"]["conversation"]["session_1"][0]["text"].startswith("I keep bees")
    after = read_manifest(manifest)
    checked_export(manifest, after)  # the manifest's hash follows the rewrite
    assert [e.turn_sha256 for e in after.erased_turns] == [turn_sha256(USER, "D1:2")]
    assert [(u.user, u.turns, u.questions) for u in after.users] == [(USER, ["D1:1", "D1:3", "D2:1"], 1),
                                                                     ("bo", ["D1:1", "D2:1"], 0)]

    side = {p.parent.name: [] for p in (stores / "content").rglob("*.json")}
    for p in sorted((stores / "content").rglob("*.json")):
        side[p.parent.name].append(json.loads(p.read_text()))
    mine = side[subject_key(USER)]
    assert sorted("erased_at" in d for d in mine) == [False, True]  # the row quoting the turn; not the common one
    assert all("words" in d for d in side[subject_key("bo")])
    history = History(stores)
    assert history.verify_journal().ok and history.record_problems() == []
    rows = [r for rec in history.records if rec.examples for rows in rec.examples.values() for r in rows
            if r["question_id"].startswith(f"{USER}/")]
    assert any(r.get("question") == "What was Ingrid's favorite season before winter?" for r in rows)
    assert any("erased" in r and r["question_id"] == f"{USER}/q32" for r in rows)  # asked the removed question
    [erase] = history.journal.find("ERASE")
    assert erase["payload"]["turns"] == [turn_sha256(USER, "D1:2")] and erase["payload"]["side_files"] == 1
    assert erase["payload"]["records"] and run in erase["payload"]["artifacts"]

    llm = ResponseCache(stores / "cache" / "llm")
    assert [llm.get(k * 64) is not None for k in "abc"] == [False, True, True]
    assert [p.name[:16] for p in (stores / "cache" / "ingestion" / "stores").iterdir()] == [subject_key("bo")]
    held = (tmp_path / "mlruns" / "art" / run / "artifacts")
    assert [json.loads(line)["question_id"] for line in (held / "traces.jsonl").read_text().splitlines()] == \
        [f"{USER}/q1", "bo/q0"]
    assert not (held / "notes.md").exists() and (held / "summary.json").is_file()
    code, out = cli(capsys, "journal", "verify", "--stores", stores, "--tracking-uri", tracking)
    assert code == 0 and out.startswith("ok:"), out

    before = _bytes(*roots)
    code, out = cli(capsys, "erase", "--turn", f"{USER}:D1:2", "--export", manifest, "--stores", stores,
                    "--tracking-uri", tracking)
    assert code == 0 and "0 turn(s)" in out and "1 erased before" in out and "found nowhere" in out, out
    assert _bytes(*roots) == before


def test_what_quotes_a_turn_reaches_rows_quoting_it_and_keeps_rows_sharing_common_words():
    samples = {Path("x"): [_sample(USER, ["Thanks!", ERASED, "I am so happy for you, really I am."], []),
                           _sample("bo", ["I am so happy for you, really I am. Thanks!"], [])]}
    turns = [FoundTurn(USER, "D1:2", {USER}, [ERASED]), FoundTurn(USER, "D1:3", {USER}, [
        "I am so happy for you, really I am."]), FoundTurn(USER, "D1:1", {USER}, ["Thanks!"])]
    _quote(turns, samples)
    assert turns[0].quotes == {QUOTED.lower(), "big news today i got promoted to head baker at quillibrant bakery "
                                               "thanks"}
    assert turns[1].quotes == set() and turns[2].quotes == set()  # bo says it too; too short
    reach = TurnReach(turns)
    other = subject_key("bo")
    assert reach.side_file(other, {"gold": f"he told me: {QUOTED.upper()}!!"})  # case and punctuation aside
    assert not reach.side_file(other, {"gold": "Thanks! I am so happy for you, really I am."})
    assert not reach.side_file(other, {"gold": "He got promoted to head baker at the Bakery"})  # words, no quote
    assert not reach.side_file(other, {"gold": f"got promoted to head baker at {MARKER} Bakery"})  # part of one
    assert reach.cache_entry(subject_key(USER), "User: Thanks!")  # the conversation's own cache: its whole text
    assert not reach.cache_entry(other, "User: Thanks!")
    assert reach.quoted(json.dumps({"text": f"caf\u00e9 {QUOTED}"}))  # escapes decoded


@pytest.mark.parametrize("turn, words", [
    ("synth0-2D1", "--turn 'synth0-2D1': not USER:ID"),
    ("nobody:D1:1", "--turn nobody:D1:1: user 'nobody' is in none of the exports"),
    (f"{USER}:D9:9", f"--turn {USER}:D9:9: user '{USER}' has no turn 'D9:9' in the export of"),
])
def test_a_bad_turn_is_named_and_nothing_changes(tmp_path, capsys, monkeypatch, turn, words):
    monkeypatch.chdir(tmp_path)
    stores = Path(shutil.copytree(OLD_STORES, tmp_path / "stores"))
    manifest = _export(tmp_path / "export")
    before = _bytes(tmp_path)
    code, out = cli(capsys, "erase", "--turn", turn, "--export", manifest, "--stores", stores, "--no-tracking")
    assert code == 2 and words in out, out
    assert _bytes(tmp_path) == before
    code, out = cli(capsys, "erase", "--turn", f"{USER}:D1:2", "--stores", stores, "--no-tracking")
    assert code == 2 and "--turn needs --export" in out, out


def test_a_turn_erasure_cut_short_is_finished_by_running_it_again(tmp_path, small_fs, capsys):
    """The export on a file system gone read-only: every other copy is erased, the export cannot be rewritten (the
    command fails, naming it); run again once writable, the export loses the turn and the journal verifies."""
    stores = Path(shutil.copytree(OLD_STORES, tmp_path / "stores"))
    manifest = _export(small_fs / "export")
    _copies(tmp_path, stores)
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    code, out = cli(capsys, "erase", "--turn", f"{USER}:D1:2", "--export", manifest, "--stores", stores,
                    "--no-tracking")
    assert code == 2 and "night.json" in out, out
    assert _marked(stores) == [] and _marked(small_fs) != []
    subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=True)
    code, out = cli(capsys, "erase", "--turn", f"{USER}:D1:2", "--export", manifest, "--stores", stores,
                    "--no-tracking")
    assert code == 0 and "1 turn(s) and 1 question(s)" in out, out
    assert _marked(stores, small_fs) == []
    history = History(stores)
    assert history.verify_journal().ok and history.record_problems() == []
    assert [len(e["payload"]["turns"]) for e in history.journal.find("ERASE")] == [1, 1]


def test_an_erasure_cut_between_its_entry_and_the_rewrite_is_named_and_finished_by_running_it_again(
        tmp_path, capsys, monkeypatch):
    stores = Path(shutil.copytree(OLD_STORES, tmp_path / "stores"))
    manifest = _export(tmp_path / "export")
    argv = ("erase", "--user", USER, "--export", manifest, "--stores", stores, "--no-tracking")  # inline rows
    records = (stores / "candidate_outcomes.jsonl").read_bytes()
    monkeypatch.setenv(CRASH_ENV, "erase.journaled")
    done = cli_subprocess(tmp_path, *argv)
    monkeypatch.delenv(CRASH_ENV)
    assert done.returncode != 0 and (stores / "candidate_outcomes.jsonl").read_bytes() == records, done.stderr
    code, out = cli(capsys, "journal", "verify", "--stores", stores)
    assert code != 0 and "but the rewrite was not written (the erasure was cut short): run the same `memevolve " \
        "erase` again" in out, out
    code, out = cli(capsys, *argv)
    assert code == 0 and "record(s) with inline words rewritten" in out and " 0 record(s)" not in out, out
    code, out = cli(capsys, "journal", "verify", "--stores", stores)
    assert code == 0, out
    assert (stores / "candidate_outcomes.jsonl").read_bytes() != records


def test_the_turns_the_service_erased_or_purged_are_carried_to_the_exports(tmp_path, serving, capsys):
    service = Service(ServeConfig(tmp_path / "data", serving, None, allow_untracked=True, reload_seconds=3600.0))
    client = TestClient(service.app)

    def turns(user: str, session: str, texts: list[str]) -> list[dict]:
        return [{"id": f"{session}:{i}", "speaker": user, "text": text, "session": session,
                 "time": f"2023-05-0{1 + int(session[1])}T10:0{i}:00"} for i, text in enumerate(texts)]

    soon = datetime.now(timezone.utc) + timedelta(seconds=1.5)
    assert client.post("/v1/users/ann/turns", json={"turns": turns("ann", "D1", [
        "I keep bees in my garden.", f"My code word is {MARKER} and nobody else knows it."]),
        "retain_until": soon.isoformat()}).status_code == 201
    assert client.post("/v1/users/ann/turns", json={"turns": turns("ann", "D2", [
        "We went to the lake on Sunday.", f"My parrot is called {MARKER} and she sings all day."])}).status_code == 201
    assert client.post("/v1/users/bo/turns", json={"turns": turns("bo", "D1", [
        "Hello there, nice to meet you all."])}).status_code == 201
    export = tmp_path / "export"
    export.mkdir()
    code, out = cli(capsys, "capture-export", "--data", tmp_path / "data", "--out", export / "night.json")
    assert code == 0, out
    stores = Path(shutil.copytree(OLD_STORES, tmp_path / "stores"))
    code, out = cli(capsys, "erase", "--from-service", tmp_path / "data", "--export", export, "--stores", stores,
                    "--no-tracking")
    assert code == 0 and "nothing to erase" in out, out  # the service erased nothing yet

    assert client.delete("/v1/users/ann/turns/D2:1").status_code == 200
    time.sleep(max(0.0, (soon - datetime.now(timezone.utc)).total_seconds()) + 0.05)
    service.housekeeping()  # purges D1:0 and D1:1
    assert _marked(export) != []
    others = tmp_path / "others"  # an export of another user only: the audit's turns match nobody there
    others.mkdir()
    code, out = cli(capsys, "capture-export", "--data", tmp_path / "data", "--user", "bo", "--out",
                    others / "bo.json")
    assert code == 0, out
    code, out = cli(capsys, "erase", "--from-service", tmp_path / "data", "--export", others, "--stores", stores,
                    "--no-tracking")
    assert code == 1 and "name 3 erased or purged turn(s) of 1 user(s), none of a user these exports hold" in out, out
    code, out = cli(capsys, "erase", "--from-service", tmp_path / "data", "--export", export, "--stores", stores,
                    "--no-tracking")
    assert code == 0 and "3 turn(s) of 1 conversation(s)" in out, out
    assert _marked(export) == []
    samples = {s["sample_id"]: s for s in json.loads((export / "night.json").read_text())}
    assert [t["dia_id"] for key, value in samples["ann"]["conversation"].items() if key.startswith("session_")
            and isinstance(value, list) for t in value] == ["D2:0"]
    assert samples["bo"]["conversation"]["session_1"][0]["dia_id"] == "D1:0"
    assert len(read_manifest(export / "night.manifest.json").erased_turns) == 3
    before = _bytes(export, stores)
    code, out = cli(capsys, "erase", "--from-service", tmp_path / "data", "--export", export, "--stores", stores,
                    "--no-tracking")
    assert code == 0 and "3 erased before" in out and "found nowhere" in out, out
    assert _bytes(export, stores) == before
