"""Bad input through the real CLI: clear errors naming file, path and rule, exit code 2, stores untouched;
a corrupted best-ever checkpoint is refused and the engine falls back with a journal entry."""
import json
from pathlib import Path

import pytest
import yaml

from evolve.cli import main
from evolve.config import RunConfig
from evolve.engine import Engine
from evolve.stores import RoundBundle, StoreSet
from evolve.strategy import BASELINE_PATH, derive, load_strategy

BASE = BASELINE_PATH.read_text()


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def populated_stores(tmp_path_factory) -> Path:
    stores = tmp_path_factory.mktemp("populated") / "stores"
    Engine(RunConfig(benchmark="synthetic:0", limit=40, probe_size=12, rounds=1, candidates_per_round=1,
                     stores=stores), track=False, progress=False).run()
    return stores


BAD_STRATEGIES = {
    "malformed": ("version: 1\nretrieval: [top_k: 5\n", "malformed YAML"),
    "unknown_field": (BASE.replace("  top_k: 5\n", "  top_k: 5\n  topk: 7\n"), "retrieval.topk: unknown field"),
    "wrong_type": (BASE.replace("top_k: 5", "top_k: five"), "retrieval.top_k"),
    "nan": (BASE.replace("half_life_days: 180", "half_life_days: .nan"), "must be a finite number"),
    "inf": (BASE.replace("dedup_threshold: 0.9", "dedup_threshold: .inf"), "must be a finite number"),
    "out_of_range": (BASE.replace("token_budget: 160", "token_budget: 100000"), "assembly.token_budget: maximum"),
    "list": ("- version: 1\n", "must be a mapping, got list"),
    "empty": ("", "must be a mapping, got empty"),
}


@pytest.mark.parametrize("case", sorted(BAD_STRATEGIES))
def test_bad_strategy_exits_2_and_leaves_stores_untouched(case, tmp_path, populated_stores, capsys):
    text, needle = BAD_STRATEGIES[case]
    bad = tmp_path / f"{case}.yaml"
    bad.write_text(text)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"benchmark": "synthetic:0", "limit": 40, "strategy": str(bad),
                                      "stores": str(populated_stores)}))
    before = snapshot(populated_stores)
    assert main(["run", "--config", str(config), "--no-tracking"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and needle in err
    assert snapshot(populated_stores) == before
    assert main(["eval", "--strategy", str(bad), "--bench", "synthetic", "--limit", "5",
                 "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def _locomo_file(tmp_path: Path, samples: list) -> Path:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(samples))
    return path


def _tiny_sample(**qa_overrides) -> dict:
    qa = {"question": "What did Ann buy?", "answer": "a bike", "evidence": ["D1:1"], "category": 4}
    qa.update(qa_overrides)
    return {"sample_id": "s1", "qa": [qa], "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo", "session_1_date_time": "1:00 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I bought a bike yesterday."},
                      {"speaker": "Bo", "dia_id": "D1:2", "text": "Nice, what colour is the bike?"}]}}


def test_malformed_benchmarks_fail_clearly(tmp_path, capsys):
    no_qa = _tiny_sample()
    del no_qa["qa"]
    (tmp_path / "dup").mkdir()
    cases = {
        "missing qa": (_locomo_file(tmp_path, [no_qa]), "qa"),
        "duplicate question ids": (_locomo_file(tmp_path / "dup", [_tiny_sample(), _tiny_sample()]), "duplicate"),
    }
    non_utf8 = tmp_path / "latin1.json"
    non_utf8.write_bytes(json.dumps([_tiny_sample()]).encode().replace(b"bike yesterday", b"v\xe9lo hier"))
    cases["non-utf8"] = (non_utf8, "UTF-8")
    for name, (path, needle) in cases.items():
        assert main(["eval", "--bench", f"locomo:{path}", "--out", str(tmp_path / name)]) == 2, name
        err = capsys.readouterr().err
        assert str(path) in err and needle in err, (name, err)


def test_unknown_evidence_is_counted_not_silently_scored(tmp_path, capsys):
    path = _locomo_file(tmp_path, [_tiny_sample(evidence=["D9:9"])])
    assert main(["eval", "--bench", f"locomo:{path}", "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "absent from their conversation" in err and "s1/q0" in err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["root_causes"] in ({}, {"unresolved": 1})  # unknown evidence is never blamed on a stage


def test_stores_path_that_cannot_be_created_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the stores' parent should be")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"benchmark": "synthetic:0", "limit": 20, "strategy": str(BASELINE_PATH),
                                      "stores": str(blocker / "stores")}))
    assert main(["run", "--config", str(config), "--no-tracking"]) == 2
    err = capsys.readouterr().err
    assert "not_a_dir" in err and "Traceback" not in err
    assert blocker.read_text().startswith("a file")


def test_corrupted_checkpoint_is_refused_and_the_engine_falls_back(tmp_path):
    stores = tmp_path / "stores"
    config = RunConfig(benchmark="synthetic:0", limit=40, probe_size=12, rounds=1, candidates_per_round=1,
                       stores=stores)
    Engine(config, track=False, progress=False).run()
    first = json.loads((stores / "state.json").read_text())["current_strategy"]
    better = derive(load_strategy(BASELINE_PATH), {"extraction.min_fact_tokens": 3})
    with StoreSet(stores) as s:  # a second, higher-scoring generation, committed like any round
        s.commit_round(2, RoundBundle(strategies=[better], checkpoint={"strategy": better, "score": 0.99, "meta": {}}))
    current = (stores / "best" / "CURRENT").read_text().strip()
    strategy_file = stores / "best" / current / "strategy.yaml"
    strategy_file.write_text(strategy_file.read_text()[:-20])  # truncated

    Engine(config.model_copy(update={"rounds": 3}), track=False, progress=False).run()
    journal = [json.loads(line) for line in (stores / "journal.jsonl").read_text().splitlines()]
    restores = [e for e in journal if e["type"] == "RESTORE" and e["payload"].get("what") == "checkpoint"]
    assert restores and restores[0]["payload"]["fallback_from"] == current
    assert restores[0]["payload"]["using"] == first
    with StoreSet(stores) as s:
        assert s.checkpoint.load().fallback_from is None  # the intact generation was saved again
        assert s.verify_journal().ok


def test_full_disk_during_a_run_is_a_clear_error_and_committed_state_survives(tmp_path, populated_stores):
    import resource
    import shutil
    import subprocess
    import sys

    stores = tmp_path / "stores"
    shutil.copytree(populated_stores, stores)
    (stores / "run.lock").unlink(missing_ok=True)
    committed = {k: v for k, v in snapshot(stores).items() if not k.startswith(("cache", "optuna", "run.lock"))}
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"benchmark": "synthetic:0", "limit": 40, "probe_size": 12, "rounds": 2,
                                      "candidates_per_round": 1, "strategy": str(BASELINE_PATH),
                                      "stores": str(stores)}))
    shutil.rmtree(stores / "cache")  # force fresh cache writes, which hit the limit first

    def small_disk() -> None:  # every file this process writes may hold at most 8 KiB
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    proc = subprocess.run([sys.executable, "-m", "evolve.cli", "run", "--config", str(config), "--no-tracking"],
                          preexec_fn=small_disk, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "too large" in proc.stderr and "Traceback" not in proc.stderr
    after = snapshot(stores)
    assert {k: after.get(k) for k in committed} == committed
