"""LLM roles end-to-end through the real ``openai`` client against the loopback server."""
from __future__ import annotations

import json
import logging
import threading
import time
from datetime import datetime

import pytest

from evolve.benchmarks.types import Turn
from evolve.llm import (ConfigError, LLMAnswerer, LLMAuthError, LLMClient, LLMCritic, LLMExpander,
                        LLMExtractor, LLMJudge, LLMModelNotFoundError, LLMPlanner, LLMUnavailableError, ProposalReply,
                        ResponseCache, RoleConfig, RolesConfig, UsageStats, build_llm_roles)
from evolve.strategy.policy import Policy
from evolve.runtime.roles import ContextItem
from evolve.data import BASELINE_PATH
from evolve.strategy.artifact import load_strategy
from llm_server import LoopbackLLMServer

POLICY = Policy.from_strategy(load_strategy(BASELINE_PATH))
MESSAGES = [{"role": "user", "content": "hello there"}]


def role_cfg(server: LoopbackLLMServer, **overrides: object) -> RoleConfig:
    settings = dict(backend="llm", base_url=server.base_url, model="test-model", timeout_s=0.5, max_retries=3,
                    backoff_s=0.01, max_backoff_s=0.2, api_key_env="MEMEVOLVE_TEST_KEY")
    return RoleConfig(**{**settings, **overrides})


def make_client(server: LoopbackLLMServer, tmp_path, role: str = "answerer", **overrides: object):
    stats = UsageStats()
    return LLMClient(role_cfg(server, **overrides), ResponseCache(tmp_path / "cache"), stats, role=role), stats


def cache_files(tmp_path) -> list:
    root = tmp_path / "cache"
    return sorted(root.rglob("*")) if root.exists() else []


def last_user(body: dict) -> str:
    return body["messages"][-1]["content"]


# ---------------------------------------------------------------- client


def test_complete_sends_role_settings_and_counts_usage(llm_server, tmp_path):
    client, stats = make_client(llm_server, tmp_path, temperature=0.3, max_tokens=77)
    assert client.complete(MESSAGES) == "echo: hello there"
    body = llm_server.requests[0]
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("test-model", 0.3, 77)
    assert stats.get("answerer", "prompt_tokens") == 2 and stats.get("answerer", "completion_tokens") == 3
    metrics = stats.to_dict()
    assert metrics["llm.answerer.requests"] == 1 and metrics["llm.total.cache_misses"] == 1


def test_cache_replays_exactly_without_http(llm_server, tmp_path):
    client, stats = make_client(llm_server, tmp_path)
    first = client.complete(MESSAGES)
    [entry] = [p for p in cache_files(tmp_path) if p.is_file()]
    assert entry.parent.name == entry.stem[:2] and json.loads(entry.read_text())["content"] == first
    llm_server.stop()  # replay must not need the endpoint
    replay_stats = UsageStats()
    elsewhere = role_cfg(llm_server, base_url="http://127.0.0.1:9/v1")  # base_url is not part of the key
    replay = LLMClient(elsewhere, ResponseCache(tmp_path / "cache"), replay_stats, role="answerer")
    assert replay.complete(MESSAGES) == first
    assert replay_stats.get("answerer", "cache_hits") == 1 and replay_stats.get("answerer", "requests") == 0
    assert llm_server.request_count == 1
    with pytest.raises(LLMUnavailableError):  # other parameters are another key
        replay.complete(MESSAGES, seed=5)


def test_a_corrupt_cache_entry_is_dropped_with_a_warning_naming_it(llm_server, tmp_path, caplog):
    client, _ = make_client(llm_server, tmp_path)
    first = client.complete(MESSAGES)
    [entry] = [p for p in cache_files(tmp_path) if p.is_file()]
    entry.write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert client.complete(MESSAGES) == first  # asked again
    assert llm_server.request_count == 2 and json.loads(entry.read_text())["content"] == first
    assert any(str(entry) in r.getMessage() and "malformed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("fault", ["429", "500", "malformed"])
def test_transient_faults_are_retried(llm_server, tmp_path, fault):
    client, stats = make_client(llm_server, tmp_path)
    llm_server.fail_next(fault, 2)
    assert client.complete(MESSAGES) == "echo: hello there"
    assert llm_server.request_count == 3 and stats.get("answerer", "retries") == 2


def test_retry_after_is_honoured(llm_server, tmp_path):
    client, _ = make_client(llm_server, tmp_path)
    llm_server.fail_next("429", 2, retry_after=0.15)
    started = time.monotonic()
    client.complete(MESSAGES)
    assert time.monotonic() - started >= 0.3


def test_timeout_is_retried_then_succeeds(llm_server, tmp_path):
    client, _ = make_client(llm_server, tmp_path, timeout_s=0.3)
    llm_server.fail_next("hang", 1, hang_s=120)
    started = time.monotonic()
    assert client.complete(MESSAGES) == "echo: hello there"
    assert time.monotonic() - started < 60 and llm_server.request_count == 2  # gave up long before the hang ended


def test_exhausted_retries_raise_and_leave_no_cache(llm_server, tmp_path):
    client, stats = make_client(llm_server, tmp_path, timeout_s=0.3, max_retries=1)
    llm_server.fail_next("hang", 2, hang_s=3)
    with pytest.raises(LLMUnavailableError) as err:
        client.complete(MESSAGES)
    text = str(err.value)
    assert "'answerer'" in text and "test-model" in text and llm_server.base_url in text
    assert "gave up after 2 attempts" in text and "no response within 0.3s" in text
    assert cache_files(tmp_path) == [] and stats.get("answerer", "failures") == 1


def test_auth_error_is_immediate_and_clear(llm_server, tmp_path):
    client, _ = make_client(llm_server, tmp_path)
    llm_server.fail_next("401", 1)
    with pytest.raises(LLMAuthError, match=r"HTTP 401.*\$MEMEVOLVE_TEST_KEY") as err:
        client.complete(MESSAGES)
    assert err.value.role == "answerer" and err.value.model == "test-model"
    assert llm_server.request_count == 1 and cache_files(tmp_path) == []


def test_unknown_model_is_immediate_and_clear(llm_server, tmp_path):
    client, _ = make_client(llm_server, tmp_path, model="no-such-model")
    with pytest.raises(LLMModelNotFoundError, match="no-such-model.*HTTP 404"):
        client.complete(MESSAGES)
    assert llm_server.request_count == 1


def test_concurrency_limit_is_respected(tmp_path):
    with LoopbackLLMServer(delay_s=0.15) as server:
        client, _ = make_client(server, tmp_path, concurrency=2)
        threads = [threading.Thread(target=client.complete, args=([{"role": "user", "content": f"q{i}"}],))
                   for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert server.request_count == 6 and server.max_in_flight == 2


# ---------------------------------------------------------------- runtime roles


def window() -> list[Turn]:
    when = datetime(2023, 5, 8, 13, 56)
    return [Turn("D1:1", "Caroline", "I work as a counselor now.", "S1", when),
            Turn("D1:2", "Melanie", "We went camping last week!", "S1", when),
            Turn("D1:3", "Caroline", "Sounds fun.", "S1", when)]


def test_extractor_parses_ids_kinds_and_limits(llm_server, tmp_path):
    llm_server.responder = lambda body: (
        "Sure.\nFACTS:\n- [profile] Caroline works as a counselor [D1:1]\n"
        "- Melanie went camping in early May 2023 [D1:2, D1:9]\n- too short [D1:3]\n"
        "- [correction] Melanie's trip was a family camping trip\n- One fact too many for the cap [D1:3]")
    client, _ = make_client(llm_server, tmp_path, role="extractor")
    policy = POLICY.extraction.model_copy(update={"max_facts_per_window": 3})
    facts = LLMExtractor(client).extract(window(), policy)
    assert [(f.text, f.source_ids, f.kind, f.speaker) for f in facts] == [
        ("Caroline works as a counselor", ("D1:1",), "profile", "Caroline"),
        ("Melanie went camping in early May 2023", ("D1:2",), "fact", "Melanie"),
        ("Melanie's trip was a family camping trip", ("D1:1", "D1:2", "D1:3"), "correction", "Melanie"),
    ]
    assert facts[0].timestamp == datetime(2023, 5, 8, 13, 56)
    system, user = llm_server.requests[0]["messages"]
    assert "Caroline (2023-05-08) [D1:1]: I work as a counselor now." in user["content"]
    assert "{window}" not in user["content"] and "at most 3 facts" in system["content"]


def test_expander_caps_subqueries(llm_server, tmp_path):
    llm_server.responder = lambda body: "SUBQUERIES:\n1. camping trip date\n2. Melanie camping\n3. extra query"
    client, _ = make_client(llm_server, tmp_path, role="expander")
    expander = LLMExpander(client)
    assert expander.expand("When did Melanie go camping?", POLICY.expansion) == ["camping trip date",
                                                                                 "Melanie camping"]
    assert "QUESTION: When did Melanie go camping?" in last_user(llm_server.requests[0])
    assert expander.expand("x?", POLICY.expansion.model_copy(update={"max_subqueries": 0})) == []
    assert llm_server.request_count == 1


def test_answerer_extracts_answer_and_support(llm_server, tmp_path):
    context = [ContextItem("m1", "Caroline is a counselor", "L1", ("D1:1",)),
               ContextItem("m2", "Melanie camped on 1 May 2023", "L1", ("D1:2",), datetime(2023, 5, 8))]
    replies = {"When did Melanie camp?": "ANSWER: 1 May 2023 [m2]", "Who counsels?": "Caroline, per the notes"}
    llm_server.responder = lambda body: next(r for q, r in replies.items() if q in last_user(body))
    answerer = LLMAnswerer(make_client(llm_server, tmp_path)[0])
    dated = answerer.answer("When did Melanie camp?", context, POLICY.answering, "temporal")
    assert (dated.text, dated.support_ids) == ("1 May 2023", ("m2",))
    prompt = last_user(llm_server.requests[0])
    assert "[m2] (2023-05-08) Melanie camped on 1 May 2023" in prompt and "{context}" not in prompt
    brief = answerer.answer("Who counsels?", context, POLICY.answering.model_copy(update={"max_answer_tokens": 2}),
                            "single_hop")
    assert (brief.text, brief.support_ids) == ("Caroline, per", ("m1", "m2"))


# ---------------------------------------------------------------- judge, planner, critic


def test_judge_majority_with_recorded_votes(llm_server, tmp_path):
    replies = ['{"reasoning": "same date", "label": "CORRECT"}', '{"label": "WRONG"}', "The answer is CORRECT."]
    llm_server.responder = lambda body: replies[body["seed"]]
    judge = LLMJudge(make_client(llm_server, tmp_path, role="judge", temperature=0.7)[0])
    verdict = judge.judge("When did Melanie camp?", "1 May 2023", "May 1st, 2023")
    assert verdict.votes == (True, False, True) and verdict.correct and verdict.score == pytest.approx(2 / 3)
    assert verdict.judge == "llm-judge.v2/test-model" and verdict.verdict == "correct"
    assert sorted(b["seed"] for b in llm_server.requests) == [0, 1, 2]
    assert all(b["temperature"] == 0.7 for b in llm_server.requests)
    assert "GOLD ANSWER: 1 May 2023" in last_user(llm_server.requests[0])
    assert judge.judge("When did Melanie camp?", "1 May 2023", "May 1st, 2023") == verdict
    assert llm_server.request_count == 3  # the rerun replayed all three votes from the cache


def test_judge_minority_is_wrong(llm_server, tmp_path):
    llm_server.responder = lambda body: "INCORRECT, so WRONG" if body["seed"] else '{"label": "CORRECT"}'
    verdict = LLMJudge(make_client(llm_server, tmp_path, role="judge")[0]).judge("q", "a", "b")
    assert verdict.votes == (True, False, False) and not verdict.correct


GOOD = {"path": "retrieval.top_k", "direction": "increase", "value": 8, "why": "retrieval_gap/temporal"}
BAD = {"path": "retrieval.secret_knob", "direction": "increase", "why": "?"}


def test_planner_retries_invalid_json_with_the_error(llm_server, tmp_path):
    def responder(body: dict) -> str:
        return "I think top_k" if len(body["messages"]) == 1 else json.dumps([GOOD, {**GOOD, "value": 9}])

    llm_server.responder = responder
    planner = LLMPlanner(make_client(llm_server, tmp_path, role="planner")[0])
    result = planner.plan({"retrieval_gap": 12}, {"retrieval.top_k::increase": 0.4})
    assert [p.key for p in result.proposals] == ["retrieval.top_k::increase"] and result.proposals[0].value == 8
    assert result.attempts == 2 and result.dropped_reasons == ("retrieval.top_k::increase: duplicate proposal",)
    first, second = llm_server.requests
    assert '"retrieval_gap": 12' in last_user(first) and "retrieval.top_k: integer in [1, 100]" in last_user(first)
    assert second["messages"][1] == {"role": "assistant", "content": "I think top_k"}
    assert "reply contains no valid JSON" in last_user(second)


def test_planner_drops_persistently_invalid_proposals(llm_server, tmp_path):
    llm_server.responder = lambda body: "```json\n" + json.dumps([GOOD, BAD]) + "\n```"
    result = LLMPlanner(make_client(llm_server, tmp_path, role="planner")[0], max_attempts=2).plan({}, {})
    assert [p.key for p in result.proposals] == ["retrieval.top_k::increase"]
    assert result.attempts == 2 and llm_server.request_count == 2
    [reason] = result.dropped_reasons
    assert reason.startswith("invalid after 2 attempt(s): proposal 2:") and "'retrieval.secret_knob' is not evolvable" in reason


@pytest.mark.parametrize("item, error", [
    ({"path": "extraction.supplement", "direction": "increase"}, "illegal for boolean"),
    ({"path": "assembly.format", "direction": "set", "value": "xml"}, "must be one of"),
    ({"path": "retrieval.top_k", "direction": "set"}, "needs a value"),
    ({"path": "retrieval.top_k", "direction": "increase", "value": 2.5}, "must be an integer"),
    ({"path": "retrieval.top_k", "direction": "increase", "value": 1000}, r"in \[1, 100\]"),
])
def test_proposal_validation(item, error):
    with pytest.raises(ValueError, match=error):
        ProposalReply.model_validate(item)


def test_proposal_set_direction_forms():
    assert ProposalReply.model_validate({"path": "assembly.format", "direction": "set:json"}).key == "assembly.format::set:json"
    assert ProposalReply.model_validate({"path": "features.profile_layer", "direction": "Disable", "value": 1}).value is None


def test_critic_valid_review(llm_server, tmp_path):
    llm_server.responder = lambda body: '{"label": "actionable", "reasons": ["targets the temporal retrieval gap"]}'
    critic = LLMCritic(make_client(llm_server, tmp_path, role="critic")[0])
    verdict = critic.review({"diff": {"retrieval.top_k": [5, 8]}, "symptom": "retrieval_gap/temporal"})
    assert (verdict.label, verdict.reasons, verdict.attempts) == ("actionable", ("targets the temporal retrieval gap",), 1)
    assert '"retrieval.top_k": [' in last_user(llm_server.requests[0])


def test_critic_invalid_output_becomes_risky(llm_server, tmp_path):
    llm_server.responder = lambda body: '{"label": "great", "reasons": []}'
    verdict = LLMCritic(make_client(llm_server, tmp_path, role="critic")[0], max_attempts=3).review({})
    assert verdict.label == "risky" and verdict.attempts == 3 and llm_server.request_count == 3
    assert verdict.reasons[0].startswith("critic output invalid after 3 attempt(s): label:")


# ---------------------------------------------------------------- configuration


def test_shared_planner_judge_model_is_refused_unless_allowed(llm_server):
    same = {"backend": "llm", "base_url": "http://127.0.0.1:8000/v1", "model": "m"}
    with pytest.raises(ConfigError, match="must not be judged by the component that proposed it"):
        RolesConfig.from_sources({"planner": same, "judge": {**same, "base_url": "http://127.0.0.1:8000/v1/"}}, env={})
    allowed = RolesConfig.from_sources({"planner": same, "judge": same, "allow_shared_judge": True}, env={})
    assert allowed.judge.model == "m"
    RolesConfig.from_sources({"planner": same, "judge": {**same, "model": "other"}}, env={})


def test_config_precedence_and_errors(monkeypatch):
    env = {"MEMEVOLVE_JUDGE_BACKEND": "llm", "MEMEVOLVE_JUDGE_MODEL": "env-model",
           "MEMEVOLVE_JUDGE_BASE_URL": "http://env:1/v1"}
    cfg = RolesConfig.from_sources({"judge": {"model": "run-model"}}, env=env)
    assert (cfg.judge.backend, cfg.judge.model, cfg.judge.base_url) == ("llm", "run-model", "http://env:1/v1")
    assert cfg.extractor.backend == "deterministic"
    with pytest.raises(ConfigError, match=r"runs\.yaml: roles\.critic: .*needs a model"):
        RolesConfig.from_sources({"critic": {"backend": "llm"}}, env={}, source="runs.yaml")
    with pytest.raises(ConfigError, match=r"roles\.critic\.temprature: Extra inputs"):
        RolesConfig.from_sources({"critic": {"temprature": 1}}, env={})
    monkeypatch.delenv("MEMEVOLVE_TEST_KEY", raising=False)
    assert RoleConfig(api_key_env="MEMEVOLVE_TEST_KEY").api_key() == "not-needed"
    monkeypatch.setenv("MEMEVOLVE_TEST_KEY", "sk-test")
    assert RoleConfig(api_key_env="MEMEVOLVE_TEST_KEY").api_key() == "sk-test"


def test_build_llm_roles_only_for_llm_backends(llm_server, tmp_path):
    cfg = RolesConfig(answerer=role_cfg(llm_server), judge=role_cfg(llm_server, model="judge-model"))
    roles = build_llm_roles(cfg, ResponseCache(tmp_path / "cache"), UsageStats())
    assert sorted(roles) == ["answerer", "judge"]
    assert isinstance(roles["answerer"], LLMAnswerer) and roles["judge"].name == "llm-judge.v2/judge-model"
