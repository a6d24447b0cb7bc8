"""``memevolve compare``: two strategy files paired question by question on a benchmark; ``eval --cache`` shares
ingested memory across processes."""
from __future__ import annotations

import json

import pytest
import yaml
from workflow_fixtures import cli

from evolve import BASELINE_PATH, load_strategy
from evolve.strategy.artifact import derive

BENCH = "synthetic:0:2"


def write_strategy(path, changes: dict):
    strategy = derive(load_strategy(BASELINE_PATH), changes)
    path.write_text(yaml.safe_dump(strategy, sort_keys=False))
    return path


def test_compare_pairs_two_strategies_by_question_on_the_chosen_objective(capsys, tmp_path):
    # two hits a question instead of five: some gold turns are no longer packed
    narrow = write_strategy(tmp_path / "narrow.yaml", {"retrieval.top_k": 2, "retrieval.rerank.top_n": 2})
    cache = tmp_path / "cache"
    code, out = cli(capsys, "compare", narrow, BASELINE_PATH, "--bench", BENCH, "--objective", "evidence",
                    "--cache", cache, "--json")
    report = json.loads(out)
    assert code == 0 and report["objective"] == "evidence" and report["n"] > 50
    assert report["delta"] > 0 and len(report["improved"]) > len(report["regressed"])
    assert set(report["per_category"]) <= {"multi_hop", "temporal", "open_domain", "single_hop"}
    code, text = cli(capsys, "compare", narrow, BASELINE_PATH, "--bench", BENCH, "--objective", "evidence",
                     "--cache", cache, "--show", "3")
    assert code == 0 and f"delta {report['delta']:+.4f}" in text and f"McNemar p={report['mcnemar_p']:.4g}" in text
    assert f"improved ({len(report['improved'])}): {', '.join(report['improved'][:3])}" in text
    code, same = cli(capsys, "compare", BASELINE_PATH, BASELINE_PATH, "--bench", BENCH, "--json", "--cache", "")
    same = json.loads(same)
    assert code == 0 and same["delta"] == 0 and same["mcnemar_p"] == 1.0 and not same["improved"] + same["regressed"]


def test_compare_on_the_answer_objective_pairs_the_questions_the_answer_check_counts(capsys, tmp_path):
    tight = write_strategy(tmp_path / "tight.yaml", {"assembly.token_budget": 40})
    cache = tmp_path / "cache"
    code, out = cli(capsys, "compare", BASELINE_PATH, tight, "--bench", BENCH, "--objective", "answer",
                    "--cache", cache, "--json")
    report = json.loads(out)
    code_eval, _ = cli(capsys, "eval", "--bench", BENCH, "--cache", cache, "--out", tmp_path / "base")
    summary = json.loads((tmp_path / "base" / "summary.json").read_text())
    assert code == 0 == code_eval and report["objective"] == "answer"
    assert report["n"] == summary["n_answer_known"] > 50
    assert report["acc_baseline"] == pytest.approx(summary["answer_in_evidence"], abs=1e-4)
    assert report["delta"] < 0 and len(report["regressed"]) > len(report["improved"])  # a 40-word context loses
    code, text = cli(capsys, "compare", BASELINE_PATH, tight, "--bench", BENCH, "--objective", "answer",
                     "--cache", cache)
    assert code == 0 and "objective answer (answer in evidence)" in text and f"delta {report['delta']:+.4f}" in text


def test_compare_refuses_bad_input_with_exit_2(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("retrieval: {top_k: -3}\n")
    code, out = cli(capsys, "compare", BASELINE_PATH, bad, "--bench", BENCH)
    assert code == 2 and str(bad) in out
    code, out = cli(capsys, "compare", BASELINE_PATH, BASELINE_PATH, "--bench", "locomo:/nowhere.json")
    assert code == 2 and "/nowhere.json" in out


def test_eval_cache_reuses_ingested_memory_across_invocations(capsys, tmp_path):
    cache = tmp_path / "cache"
    for name in ("first", "second"):
        code, _ = cli(capsys, "eval", "--bench", BENCH, "--limit", 20, "--cache", cache, "--out", tmp_path / name)
        assert code == 0
    first, second = (json.loads((tmp_path / n / "summary.json").read_text()) for n in ("first", "second"))
    assert first["ingestion_cache"]["hits"] == 0 and first["ingestion_cache"]["misses"] > 0
    assert second["ingestion_cache"] == {"hits": first["ingestion_cache"]["misses"], "misses": 0}
    assert first["accuracy"] == second["accuracy"] and any((cache / "stores").iterdir())
