"""Erasure reach: a conversation carrying a marker word, captured by the service, exported, evolved on by a night,
gated on, then erased; no copy the project made holds the marker, the journal still verifies, recall is 404. And
records written before words were kept by reference: still read, and erased with a journaled rewrite."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from evolve.benchmarks.synthetic import generate_synthetic
from evolve.data import BASELINE_PATH
from evolve.ops.history import History
from evolve.ops.manifest import read_manifest, user_sha256
from evolve.runtime.subject import subject_key
from evolve.serve.export import CODE_BY_NAME
from evolve.serve.strategy import RuntimeParts
from evolve.state.content import ContentStore, resolved
from service_fixtures import in_process
from workflow_fixtures import cli

MARKER = "Quillfeather"
BENCH = generate_synthetic(0, n_personas=1, n_sessions=5)
CONVERSATION = next(iter(BENCH.conversations.values()))
QUESTIONS = [q for q in BENCH.questions if q.conversation_id == CONVERSATION.id and q.category in CODE_BY_NAME]
OLD_STORES = Path(__file__).parents[1] / "fixtures" / "stores_6991b56"


def _turns() -> list[dict]:
    return [{"id": t.id, "speaker": t.speaker, "text": f"{t.text} {MARKER}" if n == 0 else t.text, "session": s.id,
             "time": (t.timestamp or s.timestamp).isoformat() if (t.timestamp or s.timestamp) else None}
            for s in CONVERSATION.sessions for n, t in enumerate(s.turns)]


def _marked(*roots: Path) -> list[str]:
    """Every file under ``roots`` whose bytes hold the marker."""
    return [str(p) for root in roots for p in sorted(root.rglob("*"))
            if p.is_file() and MARKER.lower().encode() in p.read_bytes().lower()]


def test_an_erasure_reaches_every_copy(tmp_path, serving, embedder, capsys):
    service = in_process(tmp_path / "data", serving, RuntimeParts(embedder))
    client = service.client
    assert client.post("/v1/users/ann/turns", json={"turns": _turns()}).status_code == 201
    assert client.post("/v1/users/ann/recall", json={"question": f"What about {MARKER}?"}).status_code == 200
    answers = tmp_path / "operator" / "answers.yaml"  # the operator's own file, outside what the erasure reaches
    answers.parent.mkdir()
    answers.write_text(yaml.safe_dump([{"user": "ann", "question": f"{q.question} ({MARKER})", "answer": q.answer,
                                        "category": q.category, "evidence": list(q.evidence)} for q in QUESTIONS]))
    export = tmp_path / "export"
    export.mkdir()
    code, out = cli(capsys, "capture-export", "--data", tmp_path / "data", "--out", export / "night.json",
                    "--answers", answers)
    assert code == 0, out
    manifest = read_manifest(export / "night.manifest.json")
    assert [(u.user, u.sample_id, len(u.turns)) for u in manifest.users] == [("ann", "ann", len(_turns()))]

    stores = tmp_path / "stores"
    config = tmp_path / "run.yaml"
    mlruns = tmp_path / "mlruns"  # a local tracking store: its database and artifacts (mlruns/mlartifacts)
    tracking = f"sqlite:///{mlruns / 'mlflow.db'}"
    config.write_text(yaml.safe_dump({"benchmark": f"locomo:{export / 'night.json'}", "strategy": str(BASELINE_PATH),
                                      "stores": str(stores), "rounds": 1, "candidates_per_round": 1, "seed": 0,
                                      "probe_size": 10, "objective": "answer", "tracking_uri": tracking}))
    code, out = cli(capsys, "run", "--config", config)
    assert code == 0, out
    small = yaml.safe_load(BASELINE_PATH.read_text())
    small["assembly"]["token_budget"] = 40
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(small))
    runs = tmp_path / "runs"  # an engineer's eval outputs: files of their own, outside the stores
    for name, strategy in (("base", BASELINE_PATH), ("small", tmp_path / "small.yaml")):
        code, out = cli(capsys, "eval", "--strategy", strategy, "--bench", f"locomo:{export / 'night.json'}",
                        "--out", runs / name, "--cache", stores / "cache" / "ingestion")
        assert code == 0, out
    code, out = cli(capsys, "gate", runs / "base" / "traces.jsonl", runs / "small" / "traces.jsonl", "--adapter",
                    "memevolve", "--rules", config, "--no-hypothesis", "--stores", stores / "gate")
    assert code in (0, 1), out
    gate = History(stores / "gate").records[0]
    assert gate.examples["regressed"] and all("question" not in r and "content" in r
                                              for r in gate.examples["regressed"])
    before = _marked(tmp_path / "data", export, stores, mlruns)
    assert any(p.endswith(".pkl") for p in before), before
    assert any(p.startswith(str(mlruns / "mlartifacts")) and p.endswith("traces.jsonl") for p in before), before
    side = sorted((stores / "gate" / "content").rglob("*.json"))
    assert side and all("words" in json.loads(p.read_text()) for p in side)
    assert str(export / "night.json") in before

    assert client.delete("/v1/users/ann").status_code == 200
    code, out = cli(capsys, "erase", "--user", "ann", "--export", export, "--stores", stores, "--tracking-uri",
                    tracking)
    assert code == 0 and "artifact(s) redacted" in out, out

    assert _marked(tmp_path / "data", export, stores, mlruns) == []
    assert all(set(json.loads(p.read_text())) == {"erased_at", "request"} for p in side)
    assert client.post("/v1/users/ann/recall", json={"question": "anything?"}).status_code == 404
    code, out = cli(capsys, "journal", "verify", "--stores", stores, "--config", config)
    assert code == 0 and out.startswith("ok:"), out
    code, out = cli(capsys, "journal", "verify", "--stores", stores / "gate", "--config", config)
    assert code == 0 and out.startswith("ok:"), out
    [night_erase] = History(stores).journal.find("ERASE")
    artifacts = night_erase["payload"]["artifacts"]
    assert artifacts and all(a["redacted"] or a["deleted"] for a in artifacts.values())
    assert any(p.endswith("traces.jsonl") for a in artifacts.values() for p in a["redacted"] + a["deleted"])
    [erase] = History(stores / "gate").journal.find("ERASE")
    assert erase["payload"]["subjects"] == [subject_key("ann")] and erase["payload"]["side_files"] > 0
    shown = resolved(History(stores / "gate").records[0].examples, ContentStore(stores / "gate" / "content"))
    assert all(r["erased"] == erase["payload"]["erased_at"] and r["question"].startswith("[erased at ")
               for r in shown["regressed"])
    code, out = cli(capsys, "show", "gate-0001", "--stores", stores / "gate", "--config", config)
    assert code == 0 and f"[erased at {erase['payload']['erased_at']}]" in out, out
    after = read_manifest(export / "night.manifest.json")
    assert after.users == [] and [e.user_sha256 for e in after.erased] == [user_sha256("ann")]
    assert json.loads((export / "night.json").read_text()) == []


def test_records_with_inline_words_still_read_and_are_erased_with_a_journaled_rewrite(tmp_path, capsys):
    root = tmp_path / "evidence"
    shutil.copytree(OLD_STORES / "evidence", root)
    [record] = [r for r in History(root).records if r.examples and r.examples["improved"]]
    rows = record.examples["improved"]
    assert rows[0]["question"] and resolved(record.examples, History(root).content) == record.examples
    erased = {r["question_id"].rpartition("/")[0] for r in rows}
    victim = sorted(erased)[0]
    code, out = cli(capsys, "erase", "--user", victim, "--stores", root)
    assert code == 0 and "1 record(s) with inline words rewritten" in out, out
    history = History(root)
    assert history.verify_journal().ok and history.record_problems() == []
    after = next(r for r in history.records if r.candidate_id == record.candidate_id)
    for old, new in zip(rows, after.examples["improved"]):
        if old["question_id"].startswith(f"{victim}/"):
            assert "question" not in new and "gold" not in new and new["erased"]
        else:
            assert new == old
    lines = (root / "candidate_outcomes.jsonl").read_text()
    assert not any(r["question"] in lines for r in rows if r["question_id"].startswith(f"{victim}/"))


def test_a_rewrite_the_journal_did_not_record_is_caught(tmp_path, capsys):
    root = tmp_path / "evidence"
    shutil.copytree(OLD_STORES / "evidence", root)
    victim = next(r for r in History(root).records if r.examples and r.examples["improved"]).examples["improved"][0]
    code, out = cli(capsys, "erase", "--user", victim["question_id"].rpartition("/")[0], "--stores", root)
    assert code == 0, out
    journal = root / "journal.jsonl"
    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    assert entries[-1]["type"] == "ERASE"
    path = root / "candidate_outcomes.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    changed = next(r for r in rows if r["candidate_id"] in entries[-1]["payload"]["records"])
    changed["examples"]["improved"][-1]["category"] = "edited"
    path.write_text("".join(json.dumps(r, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
                            for r in rows))
    assert any("does not hash to the record_hash" in p for p in History(root).record_problems())


@pytest.mark.parametrize("argv, words", [
    ([], "name the users to erase (--user) or the exports"),
    (["--user", "ann", "--export", "nowhere"], "--export nowhere: no such manifest or folder"),
])
def test_erase_names_what_is_missing(tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(OLD_STORES / "evidence", tmp_path / "stores")
    code, out = cli(capsys, "erase", *argv, "--stores", tmp_path / "stores")
    assert code == 2 and words in out, out


def test_an_artifact_its_store_cannot_rewrite_is_named_and_the_erasure_exits_1(tmp_path, small_fs, capsys):
    """Artifacts on a file system gone read-only: the erasure says which artifact of which run still holds the
    words, and exits 1; the artifact of a conversation not erased is left alone."""
    import subprocess

    from mlflow.tracking import MlflowClient

    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=tracking)
    experiment = client.create_experiment("night", artifact_location=(small_fs / "mlartifacts").as_uri())
    run = client.create_run(experiment).info.run_id
    client.log_text(run, "".join(json.dumps({"question_id": f"{c}/q0", "conversation_id": c,
                                             "question": f"Where did {c} go?"}) + "\n" for c in ("ann", "bo")),
                    "traces.jsonl")
    client.log_text(run, json.dumps({"accuracy": 0.5}), "summary.json")
    shutil.copytree(OLD_STORES / "evidence", tmp_path / "stores")
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    code, out = cli(capsys, "erase", "--user", "ann", "--stores", tmp_path / "stores", "--tracking-uri", tracking)
    assert code == 1, out
    assert f"NOT ERASED: artifact traces.jsonl of MLflow run {run} still holds the words" in out, out
    assert "summary.json" not in out
    subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=True)
    code, out = cli(capsys, "erase", "--user", "ann", "--stores", tmp_path / "stores", "--tracking-uri", tracking)
    assert code == 0 and f"run {run}: 1 artifact(s) redacted, 0 deleted" in out, out
    held = (small_fs / "mlartifacts" / run / "artifacts" / "traces.jsonl").read_text()
    assert [json.loads(line)["conversation_id"] for line in held.splitlines()] == ["bo"]
