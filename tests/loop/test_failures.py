"""Hard failure behaviour through the real CLI: bad strategies, configs and benchmark files, a corrupted best-ever
checkpoint, and unwritable stores. Bad input exits with code 2 and a message naming the file, the path and the
rule, and leaves the stores exactly as they were."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from evolve.cli import main
from evolve.files import read_json
from evolve.state.stores import RoundBundle, StoreSet
from evolve.data import BASELINE_PATH
from evolve.strategy.artifact import derive, strategy_hash
from workflow_fixtures import cli, cli_subprocess, journal, snapshot, write_config

BASELINE_TEXT = BASELINE_PATH.read_text(encoding="utf-8")
#: What the engine may change in a round that fails before its commit: search state and caches, not results.
VOLATILE = ("cache/", "optuna.db")


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> Path:
    """Stores holding two engine rounds (tiny config, deterministic backends); treat as read-only."""
    base = tmp_path_factory.mktemp("committed")
    assert main(["run", "--config", str(write_config(base / "run.yaml", stores=base / "stores")), "--no-tracking"]) == 0
    return base / "stores"


@pytest.fixture
def stores(committed: Path, tmp_path: Path) -> Path:
    """A private copy of the two-round stores."""
    return Path(shutil.copytree(committed, tmp_path / "stores"))


# ---------------------------------------------------------------- strategy files


def line_of(needle: str) -> str:
    """``":N:"`` for the 1-based line of the baseline holding ``needle``."""
    return f":{BASELINE_TEXT[: BASELINE_TEXT.index(needle)].count(chr(10)) + 1}:"


def replaced(old: str, new: str) -> str:
    assert BASELINE_TEXT.count(old) == 1, old
    return BASELINE_TEXT.replace(old, new)


#: case -> (file text, what follows the file name, dotted path, rule)
STRATEGY_CASES = {
    "malformed YAML": (replaced("top_k: 5", "top_k: [5"), ":", "<root>", "malformed YAML: expected ',' or ']'"),
    "unknown field": (replaced("  top_k: 5\n", "  top_k: 5\n  topk: 6\n"), line_of("candidate_pool"),
                      "retrieval.topk", "unknown field"),
    "wrong type": (replaced("top_k: 5", "top_k: five"), line_of("top_k: 5"), "retrieval.top_k",
                   "type: 'five' is not of type 'integer'"),
    "boolean for integer": (replaced("top_k: 5", "top_k: true"), line_of("top_k: 5"), "retrieval.top_k",
                            "type: True is not of type 'integer'"),
    "NaN": (replaced("bm25: 1.0", "bm25: .nan"), line_of("bm25: 1.0"), "retrieval.weights.bm25",
            "must be a finite number (value: nan)"),
    "infinity": (replaced("token_budget: 160", "token_budget: .inf"), line_of("token_budget: 160"),
                 "assembly.token_budget", "must be a finite number (value: inf)"),
    "out of range": (replaced("top_k: 5", "top_k: 0"), line_of("top_k: 5"), "retrieval.top_k",
                     "minimum: 0 is less than the minimum of 1"),
    "broken invariant": (replaced("window_overlap: 1", "window_overlap: 4"), line_of("window_overlap: 1"),
                         "extraction.window_overlap", "must be < extraction.window_size (value: 4)"),
    "a list": ("- retrieval\n- assembly\n", ":", "<root>", "a strategy must be a mapping, got list"),
    "empty": ("", ":", "<root>", "a strategy must be a mapping, got empty"),
    "not UTF-8": (replaced("name: baseline", "name: base\udcffline"), ":", "<root>", "not UTF-8 text"),
}


@pytest.mark.parametrize("case", list(STRATEGY_CASES))
def test_bad_strategy_is_refused_and_stores_stay_byte_identical(case, capsys, tmp_path, stores):
    text, line, path, rule = STRATEGY_CASES[case]
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(text.encode("utf-8", "surrogateescape"))
    before = snapshot(stores)
    code, out = cli(capsys, "run", "--config", write_config(tmp_path / "run.yaml", strategy=bad, stores=stores),
                    "--no-tracking")
    assert code == 2
    assert f"error: {bad}{line}" in out and f" {path}: {rule}" in out, out
    assert snapshot(stores) == before
    code, out = cli(capsys, "eval", "--strategy", bad, "--bench", "synthetic:0", "--out", tmp_path / "eval")
    assert code == 2 and rule in out and not (tmp_path / "eval").exists()


def test_bad_strategy_creates_no_stores_directory(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BASELINE_TEXT.replace("top_k: 5", "top_k: 0"))
    code, out = cli(capsys, "run", "--config",
                    write_config(tmp_path / "run.yaml", strategy=bad, stores=tmp_path / "stores"), "--no-tracking")
    assert code == 2 and "retrieval.top_k" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "run.yaml"]


# ---------------------------------------------------------------- run configs


CONFIG_CASES = {
    "unknown field": ("roundz: 3\n", "roundz", "Extra inputs are not permitted"),
    "wrong type": ("rounds: three\n", "rounds", "valid integer"),
    "fraction for integer": ("rounds: 1.5\n", "rounds", "valid integer"),
    "NaN": ("judge_threshold: .nan\n", "judge_threshold", "finite number"),
    "out of range": ("probe_size: 0\n", "probe_size", "greater than or equal to 10"),
    "nested out of range": ("acceptance: {alpha: 1.5}\n", "acceptance.alpha", "less than 1"),
}


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_bad_run_config_is_refused(case, capsys, tmp_path):
    text, field, rule = CONFIG_CASES[case]
    config = tmp_path / "run.yaml"
    config.write_text(f"stores: {tmp_path / 'stores'}\n{text}")
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and f"{config}:2: {field}: " in out and rule in out, out
    assert not (tmp_path / "stores").exists()


@pytest.mark.parametrize("text, field", [("planner: {exploration: .inf}\n", "planner.exploration"),
                                         ("acceptance: {epsilon_default: .inf}\n", "acceptance.epsilon_default"),
                                         ("acceptance: {alpha: .nan}\n", "acceptance.alpha: Input should be a finite"),
                                         ("- stores\n", "<root>")])
def test_non_finite_or_non_mapping_config_is_refused_by_name(text, field, capsys, tmp_path):
    config = tmp_path / "run.yaml"  # a missing strategy keeps a config that wrongly passes from starting a run
    config.write_text(text if text.startswith("-") else f"strategy: {tmp_path / 'missing.yaml'}\n{text}")
    code, out = cli(capsys, "run", "--config", config, "--stores", tmp_path / "stores", "--no-tracking")
    where = f"{config}: " if text.startswith("-") else f"{config}:2: "
    assert code == 2 and f"{where}{field}" in out, out


# ---------------------------------------------------------------- benchmark files


def locomo_sample(sample_id: str = "s1") -> dict:
    turns = [("D1:1", "Ann", "I adopted a beagle named Rex from the shelter."),
             ("D1:2", "Ben", "I started learning the cello at the music school."),
             ("D2:1", "Ann", "Rex learned to fetch sticks at the lake.")]
    conversation: dict = {"speaker_a": "Ann", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
                          "session_2_date_time": "10:00 am on 20 June, 2023", "session_1": [], "session_2": []}
    for dia_id, speaker, text in turns:
        conversation[f"session_{dia_id[1]}"].append({"speaker": speaker, "dia_id": dia_id, "text": text})
    qa = [{"question": "What is the name of Ann's beagle?", "answer": "Rex", "evidence": ["D1:1"], "category": 4},
          {"question": "Which instrument is Ben learning?", "answer": "cello", "evidence": ["D1:2"], "category": 4},
          {"question": "What did Rex learn at the lake?", "answer": "to fetch sticks", "evidence": ["D2:1"],
           "category": 4}]
    return {"sample_id": sample_id, "conversation": conversation, "qa": qa}


def _without_qa() -> bytes:
    sample = locomo_sample()
    del sample["qa"]
    return json.dumps([sample]).encode()


BENCHMARK_CASES = {
    "duplicate sample ids": ("locomo", json.dumps([locomo_sample(), locomo_sample()]).encode(),
                             "sample 1 (s1): duplicate sample_id (also sample 0)"),
    "duplicate question ids": ("longmemeval", None, "item 1: duplicate question_id 'q1'"),
    "not UTF-8": ("locomo", json.dumps([locomo_sample()]).encode().replace(b"beagle named", b"beagle \xe9named"),
                  "not valid UTF-8 at byte"),
    "truncated JSON": ("locomo", json.dumps([locomo_sample()]).encode()[:-5], "invalid JSON at line 1"),
}


def _longmemeval_duplicates() -> bytes:
    item = {"question_id": "q1", "question_type": "single-session-user", "question": "Where does the user live?",
            "answer": "Oslo", "question_date": "2023/05/20 (Sat) 02:21", "haystack_dates": ["2023/05/01 (Mon) 10:00"],
            "haystack_session_ids": ["a"], "answer_session_ids": ["a"],
            "haystack_sessions": [[{"role": "user", "content": "I live in Oslo.", "has_answer": True}]]}
    return json.dumps([item, item]).encode()


@pytest.mark.parametrize("case", list(BENCHMARK_CASES))
def test_malformed_benchmark_is_refused(case, capsys, tmp_path):
    scheme, data, message = BENCHMARK_CASES[case]
    path = tmp_path / "bench.json"
    path.write_bytes(data if data is not None else _longmemeval_duplicates())
    code, out = cli(capsys, "eval", "--bench", f"{scheme}:{path}", "--out", tmp_path / "eval")
    assert code == 2 and f"error: {path}" in out and message in out, out
    code, out = cli(capsys, "run", "--config",
                    write_config(tmp_path / "run.yaml", benchmark=f"{scheme}:{path}", stores=tmp_path / "stores"),
                    "--no-tracking")
    assert code == 2 and message in out, out
    assert not (tmp_path / "stores").exists() and not (tmp_path / "eval").exists()


def test_a_file_without_qa_is_read_and_eval_says_it_has_nothing_to_score(capsys, tmp_path):
    """No qa is no labelled question, not a malformed file (a run evolves on its probes: tests/loop/test_label_free.py);
    eval, which scores labelled questions, says so."""
    path = tmp_path / "bench.json"
    path.write_bytes(_without_qa())
    code, out = cli(capsys, "eval", "--bench", f"locomo:{path}", "--out", tmp_path / "eval")
    assert code == 2 and "nothing to score: no questions" in out, out
    assert not (tmp_path / "eval").exists()


def test_unknown_evidence_ids_are_counted_and_excluded_from_recall(capsys, tmp_path):
    sample = locomo_sample()
    sample["qa"][1]["evidence"] = ["D9:9"]
    sample["qa"][2]["evidence"] = ["D2:1", "D7:1", "no id"]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps([sample]))
    code, out = cli(capsys, "eval", "--bench", f"locomo:{path}", "--out", tmp_path / "eval")
    assert code == 0
    assert ("warning: bench.json: 2 evidence id(s) kept but absent from their conversation: "
            "s1/q1 D9:9; s1/q2 D7:1") in out
    assert "warning: bench.json: 1 unparseable evidence id(s) skipped: s1/q2 'no id'" in out
    assert "warning: bench.json: 1 question(s) without known gold evidence: s1/q1" in out
    rows = (tmp_path / "eval" / "traces.jsonl").read_text().splitlines()
    traces = {t["question_id"]: t for t in map(json.loads, rows)}
    assert [traces[q]["evidence_known"] for q in ("s1/q0", "s1/q1", "s1/q2")] == [True, False, True]
    assert traces["s1/q1"]["root_cause"] in (None, "unresolved")  # never blamed on a stage it could not be traced to
    summary = read_json(tmp_path / "eval" / "summary.json")
    known = [traces[q]["evidence_recall"]["10"] for q in ("s1/q0", "s1/q2")]
    assert summary["n_scored"] == 3 and summary["evidence_recall"]["10"] == round(sum(known) / 2, 4)


# ---------------------------------------------------------------- best-ever checkpoint


def _commit_better_checkpoint(root: Path) -> dict:
    """Commit the next round the way the engine does when a strategy beats the best-ever: a new generation."""
    with StoreSet(root) as s:
        n, best = s.last_committed_round + 1, s.checkpoint.load()
        better = derive(best.strategy, {"retrieval.top_k": best.strategy["retrieval"]["top_k"] + 1})
        summary = {"round": n, "from": strategy_hash(best.strategy), "to": strategy_hash(better), "accuracy": None,
                   "harness": {}, "accepted": None}
        s.commit_round(n, RoundBundle(strategies=[better], journal=[("ROUND", summary)],
                                      checkpoint={"strategy": better, "score": best.score + 0.05,
                                                  "meta": {"round": n}}))
    return best.strategy


def _truncate_strategy(gen: Path) -> str:
    data = (gen / "strategy.yaml").read_bytes()
    (gen / "strategy.yaml").write_bytes(data[: len(data) // 2])
    return "does not match the manifest's file_sha256"


def _edit_manifest(gen: Path) -> str:
    manifest = json.loads((gen / "manifest.json").read_text())
    manifest["score"] = 0.99
    (gen / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return "manifest content does not match its hash"


@pytest.mark.parametrize("corrupt", [_truncate_strategy, _edit_manifest], ids=["truncated", "edited"])
def test_corrupted_checkpoint_falls_back_to_the_last_good_generation(corrupt, capsys, tmp_path, stores):
    good = _commit_better_checkpoint(stores)
    assert (stores / "best" / "CURRENT").read_text() == "gen-0002\n"
    reason = corrupt(stores / "best" / "gen-0002")
    code, out = cli(capsys, "run", "--config", write_config(tmp_path / "run.yaml", stores=stores), "--rounds", 1,
                    "--no-tracking", "--json")
    assert code == 0, out
    restores = [e for e in journal(stores) if e["type"] == "RESTORE" and e["round"] == 4]
    assert len(restores) == 1
    payload = restores[0]["payload"]
    assert payload["what"] == "checkpoint" and payload["fallback_from"] == "gen-0002"
    assert payload["using"] == strategy_hash(good)
    assert payload["refused"][0][0] == "gen-0002" and reason in payload["refused"][0][1]
    assert json.JSONDecoder().raw_decode(out, out.index("{"))[0]["best"]["hash"] == strategy_hash(good)
    assert cli(capsys, "journal", "verify", "--stores", stores)[0] == 0


def test_no_intact_checkpoint_is_refused_and_nothing_is_committed(capsys, tmp_path, stores):
    reason = _truncate_strategy(stores / "best" / "gen-0001")
    before = snapshot(stores, VOLATILE)
    code, out = cli(capsys, "run", "--config", write_config(tmp_path / "run.yaml", stores=stores), "--rounds", 1,
                    "--no-tracking")
    assert code == 2
    assert f"error: {stores / 'best'}: no intact checkpoint generation (gen-0001: " in out and reason in out, out
    assert snapshot(stores, VOLATILE) == before


# ---------------------------------------------------------------- unwritable stores


def test_stores_path_under_a_regular_file_is_refused(capsys, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file\n")
    code, out = cli(capsys, "run", "--config", write_config(tmp_path / "run.yaml", stores=blocker / "stores"),
                    "--no-tracking")
    assert code == 2 and f"{blocker / 'stores'}: cannot create directory: a parent path is not a directory" in out, out
    assert blocker.read_text() == "a file\n"


def _can_mount_tmpfs(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", f"mount -t tmpfs -o size=4k probe {tmp_path}"],
                           capture_output=True)
    return probe.returncode == 0


def test_disk_full_at_commit_leaves_the_previous_state_and_a_rerun_commits_once(capsys, tmp_path, stores):
    """``rounds/`` on a 4 KiB tmpfs (private mount namespace): the round's write-ahead log cannot be written."""
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("needs unshare and permission to mount a tmpfs")
    config = write_config(tmp_path / "run.yaml", stores=stores)
    before = snapshot(stores, VOLATILE)
    mount_then_exec = 'mount -t tmpfs -o size=4k full "$0" && exec "$@"'
    full = ["unshare", "--mount", "sh", "-c", mount_then_exec, str(stores / "rounds")]
    proc = cli_subprocess(tmp_path, "run", "--config", config, "--rounds", 1, "--no-tracking", wrap=full)
    assert proc.returncode == 2, proc.stderr
    assert f"error: {stores / 'rounds' / 'round-0003.json'}: cannot write: disk full" in proc.stderr
    assert snapshot(stores, VOLATILE) == before
    code, out = cli(capsys, "run", "--config", config, "--rounds", 1, "--no-tracking")
    assert code == 0, out
    assert read_json(stores / "state.json")["last_committed_round"] == 3
    assert [e["payload"]["round"] for e in journal(stores) if e["type"] == "ROUND"] == [1, 2, 3]
    assert cli(capsys, "journal", "verify", "--stores", stores)[0] == 0


def test_file_size_limit_on_a_cache_write_is_a_clear_error(tmp_path, stores):
    """Rebuilding ingested stores under a file-size limit below their pickle size (EFBIG)."""
    pickles = sorted((stores / "cache" / "ingestion" / "stores").glob("*.pkl"))
    limit = (stores / "optuna.db").stat().st_size + 32 * 1024  # room for the round's Optuna trials
    assert pickles and min(p.stat().st_size for p in pickles) > limit
    for p in pickles:
        p.unlink()
    before = snapshot(stores, VOLATILE)
    proc = cli_subprocess(tmp_path, "run", "--config", write_config(tmp_path / "run.yaml", stores=stores),
                          "--rounds", 1, "--no-tracking", limit_bytes=limit)
    assert proc.returncode == 2, proc.stderr
    assert f"{stores / 'cache' / 'ingestion' / 'stores'}/" in proc.stderr
    assert "cannot write: file too large (file size limit exceeded)" in proc.stderr
    assert snapshot(stores, VOLATILE) == before


def test_unwritable_optuna_database_is_a_clear_error(tmp_path):
    """A 16 KiB file-size limit: the run lock's owner file fits, creating the Optuna tables does not."""
    stores = tmp_path / "stores"
    proc = cli_subprocess(tmp_path, "run", "--config", write_config(tmp_path / "run.yaml", stores=stores),
                          "--no-tracking", limit_bytes=16 * 1024)
    assert not (stores / "state.json").exists() and not (stores / "journal.jsonl").exists()
    assert proc.returncode == 2 and f"error: {stores / 'optuna.db'}" in proc.stderr, proc.stderr[-600:]
