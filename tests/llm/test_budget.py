"""Budgets of a night on an LLM endpoint: a stop between rounds when the next evaluation's expected spend does not
fit (never half a round), journaled with its figures; the next run resumes to the decisions an unbudgeted run
takes; bad budget settings refused before the stores are opened."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from llm_server import LoopbackLLMServer
from test_llm_run import scripted as responder
from workflow_fixtures import cli, journal, write_config

from evolve import Harness
from evolve.cli.summary import warnings
from evolve.loop.backends import build_backends
from evolve.loop.budget import BudgetConfig, Spend
from evolve.loop.config import RunConfig, load_config
from evolve.loop.engine import Engine
from evolve.loop.setup import RunSetup
from evolve.verify.decision import CostLimits

pytestmark = pytest.mark.heavy

MODELS = ("answerer-model", "judge-model")


def llm_roles(base_url: str) -> dict:
    return {role: {"backend": "llm", "base_url": base_url, "model": f"{role}-model", "timeout_s": 5,
                   "max_retries": 1, "concurrency": 8} for role in ("answerer", "judge")}


def config(tmp: Path, base_url: str, name: str, **budget) -> RunConfig:
    return RunConfig(benchmark="synthetic:0:2", probe_size=10, rounds=2, candidates_per_round=2, seed=0,
                     stores=tmp / name, roles=llm_roles(base_url), budget=BudgetConfig(**budget))


def free_questions(tmp: Path) -> int:
    """Questions of one full evaluation in the unbudgeted run (the harness identity in its state)."""
    return json.loads((tmp / "free" / "state.json").read_text())["harness"]["n_questions"]


def decisions(stores: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (stores / "candidate_outcomes.jsonl").read_text().splitlines()]
    return [(r["candidate_id"], r["policy_hash"], r["decided_by"], r["decision"]["verdict"]) for r in rows]


def test_a_budget_stops_the_night_between_rounds_and_the_next_run_resumes_to_the_same_decisions(capsys, tmp_path):
    with LoopbackLLMServer(responder, models=MODELS) as server:
        Engine(config(tmp_path, server.base_url, "free"), track=False).run(1)
        round_one = server.request_count
        free = Engine(config(tmp_path, server.base_url, "free"), track=False).run()
        night = server.request_count  # both rounds on a fresh cache
        assert free["budget_stop"] is None and night > round_one
        records = [json.loads(line) for line in (tmp_path / "free" / "candidate_outcomes.jsonl").read_text()
                   .splitlines()]
        for r in records:  # each candidate's own usage: one answer per question of each evaluation it reached
            answered = {"probe": 10, "decision": 10 + free_questions(tmp_path)}.get(r["decided_by"], 0)
            counts = r.get("llm", {}).get("answerer", {})
            assert counts.get("requests", 0) + counts.get("cache_hits", 0) == answered, r["candidate_id"]

        limit = round_one + (night - round_one) // 3  # enough for round 1, not for round 2
        before = server.request_count
        stopped = Engine(config(tmp_path, server.base_url, "budget", max_llm_calls=limit), track=False).run()
        spent = server.request_count - before
        stop = stopped["budget_stop"]
        assert spent <= limit and stopped["rounds"] == 1  # round 2 neither committed nor half written
        assert stop["round"] == 2 and stop["exceeded"] == ["max_llm_calls"] and stop["spent"]["calls"] == spent
        assert stop["spent"]["calls"] + stop["expected"]["calls"] > limit
        assert [line for line in warnings(stopped, CostLimits()) if "budget" in line] == [
            f"warning: budget stop before round 2 (max_llm_calls would be exceeded; journal entry "
            f"{stop['journal_index']}); the next run starts that round again"]
        stores = tmp_path / "budget"
        assert [r[0][:4] for r in decisions(stores)] == ["r001"] * len([r for r in decisions(stores)])
        assert not list(stores.glob("rounds/*.wal*")) and journal(stores)[-1]["type"] == "BUDGET_STOP"
        assert journal(stores)[-1]["payload"]["spent"]["calls"] == spent
        code, out = cli(capsys, "journal", "verify", "--stores", stores, "--tracking-uri", "")
        assert code == 0, out  # the stop is an ordinary, verified entry of the history

        resumed = Engine(config(tmp_path, server.base_url, "budget"), track=False).run()
    assert resumed["budget_stop"] is None and resumed["rounds"] == 2
    assert decisions(tmp_path / "budget") == decisions(tmp_path / "free")
    assert resumed["current"]["hash"] == free["current"]["hash"]


def test_cache_hits_cost_nothing(tmp_path):
    with LoopbackLLMServer(responder, models=MODELS) as server:
        Engine(config(tmp_path, server.base_url, "stores"), track=False).run(1)
        calls = server.request_count
        # The same round again from a copy of the cache costs no call, so a budget of zero calls lets it run.
        again = config(tmp_path, server.base_url, "again", max_llm_calls=0)
        shutil.copytree(tmp_path / "stores" / "cache" / "llm", tmp_path / "again" / "cache" / "llm")
        out = Engine(again, track=False).run(1)
        assert server.request_count == calls and out["budget_stop"] is None and out["rounds"] == 1


def test_spend_prices_tokens_per_model():
    prices = BudgetConfig(max_cost=1.0, prices={"a": {"input": 2.0, "output": 10.0}}).prices
    usage = {"answerer": {"requests": 3, "prompt_tokens": 1000, "completion_tokens": 100, "cache_hits": 5}}
    spend = Spend.of(usage, {"answerer": "a"}, prices)
    assert (spend.calls, spend.tokens) == (3, 1100) and spend.cost == pytest.approx((2000 + 1000) / 1e6)


@pytest.mark.parametrize("budget, where, rule", [
    ({"max_llm_calls": -1}, "budget.max_llm_calls", "greater than or equal to 0"),
    ({"max_tokens": "many"}, "budget.max_tokens", "Input should be a valid integer"),
    ({"max_cost": 5.0, "prices": {"gpt-x": {"input": 1.0, "output": 2.0}}}, "budget.prices.gpt-x",
     "no role uses model 'gpt-x'"),
    ({"max_cost": 5.0}, "budget.max_cost", "no price for model 'answerer-model'"),
    ({"prices": {"answerer-model": {"input": -1.0, "output": 2.0}}}, "budget.prices.answerer-model.input",
     "greater than or equal to 0"),
])
def test_bad_budget_settings_are_refused_naming_file_and_field(capsys, tmp_path, budget, where, rule):
    roles = llm_roles("http://127.0.0.1:9/v1")  # never reached: the settings are refused first
    path = write_config(tmp_path / "run.yaml", stores=tmp_path / "stores", roles=roles, budget=budget)
    code, out = cli(capsys, "run", "--config", path, "--no-tracking")
    assert code == 2 and str(path) in out and where in out and rule in out, out
    assert not (tmp_path / "stores").exists()


def test_estimate_predicts_the_calls_of_an_evaluation_on_a_fresh_cache_without_calling(capsys, tmp_path):
    with LoopbackLLMServer(responder, models=MODELS) as server:
        path = write_config(tmp_path / "run.yaml", benchmark="synthetic:0:2", stores=tmp_path / "stores",
                            roles=llm_roles(server.base_url), rounds=1, candidates_per_round=2, probe_size=10,
                            limit=None, budget={"max_llm_calls": 100000})
        code, out = cli(capsys, "run", "--config", path, "--estimate")
        assert code == 0 and server.request_count == 0 and not (tmp_path / "stores").exists()
        figures = json.loads(out)

        setup = RunSetup.prepare(load_config(path))  # one real evaluation of the baseline on a fresh cache
        backends = build_backends(setup.roles, 0.5, tmp_path / "fresh-cache")
        Harness(setup.benchmark, backends.roles, progress=False).evaluate(setup.baseline, setup.question_ids)
        one_evaluation = server.request_count

        code, _ = cli(capsys, "run", "--config", path, "--no-tracking")
        night = server.request_count - one_evaluation
        code, again = cli(capsys, "run", "--config", path, "--estimate", "--rounds", "1")
    fresh = figures["evaluation"]["fresh_cache"]["calls"]
    assert abs(fresh - one_evaluation) <= 0.1 * one_evaluation
    assert figures["evaluation"]["cache_coverage"] == 0.0 and json.loads(again)["evaluation"]["cache_coverage"] == 1.0
    assert figures["night"]["expected"]["calls"] <= figures["night"]["at_most"]["calls"]
    assert 0 < night <= figures["night"]["at_most"]["calls"]
    assert figures["budget"]["max_llm_calls"] == {"limit": 100000, "expected_fits": True, "at_most_fits": True}
