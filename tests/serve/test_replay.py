"""memevolve replay and capture-export on traffic captured by the real service app (in process): the replay
reproduces the logged contexts, journals its verdict, and rolls back only when asked and triggered; the export
loads as a LoCoMo benchmark."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from evolve.benchmarks.locomo import load_locomo
from evolve.benchmarks.synthetic import generate_synthetic
from evolve.data import BASELINE_PATH
from evolve.loop.monitor import SliceCheck
from evolve.ops.history import History
from evolve.ops.serving import promote
from evolve.serve.app import create_app
from evolve.serve.filestore import FileBackend
from evolve.serve.memory import MemoryService
from evolve.serve.replay import ReplayReport
from evolve.serve.strategy import RuntimeParts, StrategySlot, load_serving
from evolve.serve.verdict import rollback_triggers
from evolve.state.stores import StoreSet
from workflow_fixtures import cli, journal

BENCH = generate_synthetic(0, n_personas=1, n_sessions=5)
CONVERSATION = next(iter(BENCH.conversations.values()))
QUESTIONS = [q for q in BENCH.questions if q.conversation_id == CONVERSATION.id][:8]


def _turns() -> list[dict]:
    return [{"id": t.id, "speaker": t.speaker, "text": t.text, "session": s.id,
             "time": (t.timestamp or s.timestamp).isoformat() if (t.timestamp or s.timestamp) else None}
            for s in CONVERSATION.sessions for t in s.turns]


def _capture_and_recall(slot: StrategySlot, data: Path) -> Path:
    """Half the turns, three recalls, the other half, the other recalls, through the service app."""
    memory = MemoryService(FileBackend(data), lambda: slot.current)
    with TestClient(create_app(slot, memory)) as client:
        turns = _turns()
        half = len(turns) // 2
        assert client.post("/v1/users/ann/turns", json={"turns": turns[:half]}).status_code == 201
        for q in QUESTIONS[:3]:  # asked before the rest was captured: replay must rebuild memory as it stood
            assert client.post("/v1/users/ann/recall", json={"question": q.question}).status_code == 200
        assert client.post("/v1/users/ann/turns", json={"turns": turns[half:]}).status_code == 201
        for q in QUESTIONS[3:]:
            assert client.post("/v1/users/ann/recall", json={"question": q.question}).status_code == 200
    return data


@pytest.fixture(scope="module")
def captured(tmp_path_factory, embedder) -> Path:
    """A data directory captured under the baseline (no stores)."""
    root = tmp_path_factory.mktemp("captured")
    serving = root / "serving.yaml"
    serving.write_bytes(BASELINE_PATH.read_bytes())
    return _capture_and_recall(StrategySlot(None, serving, RuntimeParts(embedder), allow_untracked=True), root / "data")


def test_replay_journals_its_verdict_and_rolls_back_on_a_monitor_regression_only_when_asked(
        capsys, stores, serving, embedder, tmp_path):
    promote(stores, "r003-c00", serving, accept_monitor=True)  # ACCEPT_WITH_MONITOR over the baseline
    served = _capture_and_recall(StrategySlot(stores, serving, RuntimeParts(embedder), shadow="r002-c00"), tmp_path / "data")
    answers = tmp_path / "answers.yaml"
    answers.write_text(yaml.safe_dump([{"user": "ann", "question": q.question, "answer": q.answer,
                                        "category": q.category} for q in QUESTIONS]))
    before = serving.read_bytes()
    code, out = cli(capsys, "replay", "--log", served, "--serving", serving, "--candidate", "r002-c00",
                    "--stores", stores, "--answers", answers, "--json", tmp_path / "replay.json")
    assert code == 0, out
    entry = journal(stores)[-1]
    assert entry["type"] == "REPLAY"
    payload = entry["payload"]
    assert payload == json.loads((tmp_path / "replay.json").read_text())
    assert payload["n"] == len(QUESTIONS) and payload["users"] == 1
    assert payload["reproduced"] == {"serving_reproduced": {"checked": len(QUESTIONS), "equal": len(QUESTIONS)},
                                     "shadow_reproduced": {"checked": len(QUESTIONS), "equal": len(QUESTIONS)}}
    assert payload["answer_in_context"]["n"] == len(QUESTIONS)
    # judged by the referee, sliced by the answers' categories, held to the floors of the stores' contract
    assert payload["referee"]["lifecycle"] == "reference v1" and payload["referee"]["version"] == 1 and payload["referee"]["supersession"]
    assert set(payload["slices"]["answer_in_context"]) == {q.category for q in QUESTIONS}
    assert sum(row["n"] for row in payload["slices"]["answer_in_context"].values()) == len(QUESTIONS)
    contract = History(stores).harness["rules"]["acceptance"]
    assert payload["floors"]["alpha"] == contract["alpha"]
    assert payload["floors"]["epsilon_default"] == contract["epsilon_default"]
    assert payload["verdict"] in ("serving_regresses", "candidate_regresses", "mixed", "no_difference")
    assert 0 <= payload["overlap"]["ids_jaccard"] <= 1 and payload["words"]["n"] == len(QUESTIONS)
    assert not any(q.question in json.dumps(payload) for q in QUESTIONS)  # no user content in the journal
    assert f"journaled: REPLAY entry {entry['index']}" in out
    assert serving.read_bytes() == before  # no trigger, no rollback

    # a slice the promotion was accepted with monitoring for regresses: a trigger, acted on only when asked
    check = SliceCheck("r003-c00", "temporal", "dev", 4, 0.8, 0.5, 0.05)
    with StoreSet(stores) as store_set:
        store_set.append_journal("MONITOR", check.to_dict())
    promoted = serving.read_bytes()
    code, out = cli(capsys, "replay", "--log", served, "--serving", serving, "--candidate", BASELINE_PATH,
                    "--stores", stores)
    assert code == 0 and "rollback trigger: monitor regression: r003-c00 temporal" in out
    assert "pass --auto-rollback" in out and serving.read_bytes() == promoted
    code, out = cli(capsys, "replay", "--log", served, "--serving", serving, "--candidate", BASELINE_PATH,
                    "--stores", stores, "--auto-rollback")
    assert code == 0, out
    assert serving.read_bytes() == BASELINE_PATH.read_bytes()
    replay_entry, rollback = journal(stores)[-2:]
    assert (replay_entry["type"], rollback["type"]) == ("REPLAY", "ROLLBACK")
    assert rollback["payload"]["trigger"]["by"] == "replay --auto-rollback"
    assert rollback["payload"]["trigger"]["replay_entry"] == replay_entry["index"]
    assert "r003-c00 temporal" in rollback["payload"]["trigger"]["reasons"][0]
    assert cli(capsys, "journal", "verify", "--stores", stores)[0] == 0


def test_a_replay_regression_triggers_only_against_the_rollback_target(stores, serving, embedder, tmp_path):
    promote(stores, "r002-c00", serving)
    loaded = load_serving(stores, serving, RuntimeParts(embedder))
    other = tmp_path / "other.yaml"
    other.write_text(BASELINE_PATH.read_text().replace("top_k: 5", "top_k: 9", 1))
    from evolve.cli.replay import _candidate

    parts = RuntimeParts(embedder)
    previous, unrelated = _candidate(str(stores), str(BASELINE_PATH), parts), _candidate(str(stores), str(other), parts)
    assert previous.strategy_hash != unrelated.strategy_hash
    report = ReplayReport(loaded.strategy_hash, previous.strategy_hash, 30, 1, verdict="serving_regresses",
                          reasons=["answer in context: serving 0.40 vs candidate 0.70"])
    triggers, notes = rollback_triggers(stores, serving, loaded, previous, report)
    assert triggers == ["replay regression: answer in context: serving 0.40 vs candidate 0.70"] and not notes
    triggers, notes = rollback_triggers(stores, serving, loaded, unrelated, report)
    assert not triggers and "promote the candidate instead" in notes[0]


def test_capture_export_writes_a_locomo_benchmark(capsys, captured, tmp_path):
    answers = tmp_path / "answers.yaml"
    first = QUESTIONS[0]
    answers.write_text(yaml.safe_dump([{"user": "ann", "question": first.question, "answer": first.answer,
                                        "category": first.category, "evidence": list(first.evidence)}]))
    out = tmp_path / "bench.json"
    code, text = cli(capsys, "capture-export", "--data", captured, "--user", "ann", "--out", out, "--answers", answers)
    assert code == 0, text
    bench = load_locomo(out)
    [conversation] = bench.conversations.values()
    assert [(t.id, t.speaker, t.text) for t in conversation.turns()] == \
        [(t.id, t.speaker, t.text) for t in CONVERSATION.turns()]
    assert len(conversation.sessions) == len(CONVERSATION.sessions)
    [question] = bench.questions
    assert (question.question, question.answer, question.evidence) == (first.question, first.answer,
                                                                        first.evidence)
    unanswered = [q["question"] for q in json.loads(out.read_text())[0]["unanswered"]]
    assert unanswered == list(dict.fromkeys(q.question for q in QUESTIONS[1:]))


@pytest.mark.parametrize("entry, words", [
    ({"user": "ann", "question": "q?", "answer": "a", "evidence": ["nope"]}, "evidence 'nope' is not a captured"),
    ({"user": "ann", "question": "q?", "answer": "a", "category": "gossip"}, "entry 0: category 'gossip'"),
    ({"user": "ann", "question": "q?"}, "entry 0: answer: Field required"),
    ({"user": "ann", "question": "q?", "answer": float("nan")},
     "entry 0: answer: Value error, must be text or a finite number, got nan"),
    ({"user": "ann", "question": "q?", "answer": float("inf")}, "entry 0: answer: Value error, must be text or a"),
    ({"user": "ann", "question": "q?", "answer": True}, "entry 0: answer: Value error, must be text or a finite "
                                                         "number, got True (quote it"),
])
def test_capture_export_names_bad_answers(capsys, captured, tmp_path, entry, words):
    answers = tmp_path / "answers.yaml"
    answers.write_text(yaml.safe_dump([entry]))
    code, text = cli(capsys, "capture-export", "--data", captured, "--out", tmp_path / "b.json", "--answers", answers)
    assert code == 2 and words in text and not (tmp_path / "b.json").exists()


def test_capture_export_refuses_an_unknown_user(capsys, captured, tmp_path):
    code, text = cli(capsys, "capture-export", "--data", captured, "--user", "bob", "--out", tmp_path / "b.json")
    assert code == 2 and "user 'bob': no captured turns" in text


def test_replay_names_a_bad_recall_log_line(capsys, captured, stores, serving, tmp_path):
    log = tmp_path / "recalls.jsonl"
    log.write_text((captured / "users/ann/recalls.jsonl").read_text() + '{"user": "ann"\n')
    lines = len(log.read_text().splitlines())
    code, out = cli(capsys, "replay", "--log", log, "--data", captured, "--serving", serving, "--candidate",
                    BASELINE_PATH, "--stores", stores)
    assert code == 2 and f"{log}: line {lines}: corrupt JSON" in out


def _copy(captured: Path, tmp_path: Path) -> Path:
    """A private copy of the captured data directory."""
    import shutil

    return Path(shutil.copytree(captured, tmp_path / "data"))


def _replay(capsys, stores, serving, *args) -> tuple[int, str]:
    return cli(capsys, "replay", "--serving", serving, "--candidate", BASELINE_PATH, "--stores", stores,
               "--allow-untracked", *args)


def test_replay_json_and_capture_export_out_refuse_what_report_refuses(capsys, captured, stores, serving, tmp_path):
    """The journal, a serving file, a file of the service's data, a directory: refused before anything is journaled
    or written; a --json file in a missing directory likewise (it is written after the verdict is journaled)."""
    data = _copy(captured, tmp_path)
    promote(stores, "r002-c00", serving)
    served = tmp_path / "elsewhere" / "serving.yaml"  # a serving file the journal names, not the one replayed
    served.parent.mkdir()
    promote(stores, "r002-c00", served, allow_outside=True)
    entries = len(journal(stores))
    capture = data / "users/ann/capture.jsonl"
    targets = {stores / "journal.jsonl": "lies inside the stores", serving: "is the serving file",
               served: "is a serving file the journal names", capture: "lies in the service's data directory",
               tmp_path: "exists and is not a regular file"}
    kept = {path: path.read_bytes() for path in targets if path.is_file()}
    for target, words in targets.items():
        code, out = _replay(capsys, stores, serving, "--log", data, "--json", target)
        assert code == 2 and f"--json {target}: refused: {words}" in out, out
        code, out = cli(capsys, "capture-export", "--data", data, "--out", target)
        assert code == 2 and "refused" in out, out
    code, out = _replay(capsys, stores, serving, "--log", data, "--json", tmp_path / "missing" / "replay.json")
    assert code == 2 and f"its directory {tmp_path / 'missing'} does not exist" in out, out
    assert len(journal(stores)) == entries and {path: path.read_bytes() for path in kept} == kept
    assert cli(capsys, "journal", "verify", "--stores", stores)[0] == 0


def test_replay_and_capture_export_skip_a_torn_last_line_with_a_warning(capsys, captured, stores, serving, tmp_path):
    """A crash can cut the service's last append short (the recall log is not fsynced): the readers skip that line,
    say so, and leave the service's files as they found them."""
    data = _copy(captured, tmp_path)
    recalls, capture = data / "users/ann/recalls.jsonl", data / "users/ann/capture.jsonl"
    lines = len(recalls.read_text().splitlines())
    with recalls.open("a") as fh:
        fh.write('{"user": "ann", "question": "Where did')
    with capture.open("a") as fh:
        fh.write('{"turns": [{"id": "D9:1", "spea')
    before = {path: path.read_bytes() for path in (recalls, capture)}
    for source in (("--log", data), ("--data", data)):  # the log files named, or every recall the store holds
        code, out = _replay(capsys, stores, serving, *source)
        assert code == 0, out
        assert f"warning: {recalls}: line {lines + 1}: torn last line skipped" in out
        assert f"warning: {capture}: line " in out
        assert journal(stores)[-1]["payload"]["n"] == len(QUESTIONS)
    out_file = tmp_path / "bench.json"
    code, out = cli(capsys, "capture-export", "--data", data, "--out", out_file)
    assert code == 0, out
    assert f"warning: {recalls}: line {lines + 1}: torn last line skipped" in out
    assert f"warning: {capture}: line " in out
    [sample] = json.loads(out_file.read_text())
    assert len([t for k, v in sample["conversation"].items() if k.startswith("session_") and isinstance(v, list)
                for t in v]) == len(_turns())
    assert {path: path.read_bytes() for path in before} == before


def test_a_recall_time_without_a_zone_is_read_as_utc(capsys, captured, stores, serving, tmp_path):
    data = _copy(captured, tmp_path)
    recalls = data / "users/ann/recalls.jsonl"
    records = [json.loads(line) for line in recalls.read_text().splitlines()]
    assert records[2]["time"].endswith("Z")
    records[2]["time"] = records[2]["time"].removesuffix("Z")  # naive: sorted among the others as UTC
    recalls.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, out = _replay(capsys, stores, serving, "--log", data)
    assert code == 0, out
    assert journal(stores)[-1]["payload"]["n"] == len(QUESTIONS)


def test_a_recall_of_another_user_in_a_users_log_is_refused(capsys, captured, stores, serving, tmp_path):
    """A record in ann's log naming bob would be replayed against bob's memory: refused naming the line."""
    import shutil

    data = _copy(captured, tmp_path)
    shutil.copytree(data / "users/ann", data / "users/bob")
    recalls = data / "users/ann/recalls.jsonl"
    records = [json.loads(line) for line in recalls.read_text().splitlines()]
    records[3]["user"] = "bob"
    recalls.write_text("".join(json.dumps(r) + "\n" for r in records))
    entries = len(journal(stores))
    for source, where in ((("--log", data), f"{recalls}:4"), (("--data", data), "user ann recall 3")):
        code, out = _replay(capsys, stores, serving, *source)
        assert code == 2 and f"{where}: recall record of user 'bob' in the recall log of user 'ann'" in out, out
    assert len(journal(stores)) == entries
