"""What the roles ask of an engine (response format, stop sequences, length limit, seed), seen on the wire of the
loopback server, and the configuration rules of ``structured``."""
from __future__ import annotations

import json

import pytest

from evolve.data import BASELINE_PATH
from evolve.llm import (ConfigError, LLMAnswerer, LLMClient, LLMCritic, LLMJudge, LLMPlanner, ResponseCache,
                        RoleConfig, RolesConfig, UsageStats)
from evolve.llm.advisors import REVIEW_SCHEMA
from evolve.llm.roles import ANSWER_STOP, JUDGE_SCHEMA
from evolve.runtime.roles import ContextItem
from evolve.strategy.artifact import load_strategy
from evolve.strategy.policy import Policy

POLICY = Policy.from_strategy(load_strategy(BASELINE_PATH))


def make_client(server, tmp_path, role: str, **settings: object) -> LLMClient:
    cfg = RoleConfig(backend="llm", base_url=server.base_url, model="test-model", timeout_s=5, max_retries=0,
                     **settings)
    return LLMClient(cfg, ResponseCache(tmp_path / "cache"), UsageStats(), role=role)


@pytest.mark.parametrize("structured", ["off", "json_object"])
def test_json_roles_send_their_schema_only_when_structured(llm_server, tmp_path, structured):
    def responder(body: dict) -> str:
        text = body["messages"][-1]["content"]
        if "REVIEW PACKET" in text:
            return '{"label": "risky", "reasons": ["weak evidence"]}'
        if "GOLD ANSWER" in text:
            return '{"reasoning": "same", "label": "CORRECT"}'
        return json.dumps([{"path": "retrieval.top_k", "direction": "increase", "why": "gap"}])

    llm_server.responder = responder
    LLMJudge(make_client(llm_server, tmp_path, "judge", structured=structured)).judge("q", "a", "a")
    LLMCritic(make_client(llm_server, tmp_path, "critic", structured=structured)).review({})
    result = LLMPlanner(make_client(llm_server, tmp_path, "planner", structured=structured)).plan({}, {},
                                                                                                 max_proposals=2)
    assert [p.key for p in result.proposals] == ["retrieval.top_k::increase"]
    formats = [body.get("response_format") for body in llm_server.requests]
    if structured == "off":
        assert formats == [None] * 5
        return
    assert formats[:4] == [{"type": "json_object", "schema": JUDGE_SCHEMA}] * 3 + \
        [{"type": "json_object", "schema": REVIEW_SCHEMA}]
    planner_schema = formats[4]["schema"]
    assert planner_schema["type"] == "array" and planner_schema["maxItems"] == 2
    assert "retrieval.top_k" in planner_schema["items"]["properties"]["path"]["enum"]


def test_response_format_is_part_of_the_cache_key(llm_server, tmp_path):
    llm_server.responder = lambda body: '{"label": "actionable", "reasons": ["ok"]}'
    for structured in ("off", "json_object", "off"):
        LLMCritic(make_client(llm_server, tmp_path, "critic", structured=structured)).review({})
    assert llm_server.request_count == 2  # the third review replays the first


def test_answerer_stops_and_limits_its_length(llm_server, tmp_path):
    llm_server.responder = lambda body: "ANSWER: a red car [m1]"
    context = [ContextItem("m1", "Anna bought a red car.", "L1", ("D1:1",))]
    brief = POLICY.answering.model_copy(update={"max_answer_tokens": 5})
    for settings in ({"seed": 7}, {"max_tokens": 20}):
        LLMAnswerer(make_client(llm_server, tmp_path, "answerer", **settings)).answer("Which car?", context, brief,
                                                                                       "single_hop")
    (first, second) = llm_server.requests
    assert (first["stop"], first["max_tokens"], first["seed"]) == (ANSWER_STOP, 2 * 5 + 24, 7)
    assert second["max_tokens"] == 20 and "seed" not in second  # the role's own cap wins when lower


def test_structured_is_refused_for_roles_that_reply_in_text():
    with pytest.raises(ConfigError, match=r"answerer.structured: only the judge, planner, critic, questioner, fuser reply in JSON"):
        RolesConfig.from_sources({"answerer": {"backend": "llm", "model": "m", "structured": "json_object"}}, env={})
    with pytest.raises(ConfigError, match=r"roles.critic.structured: Input should be 'off' or 'json_object'"):
        RolesConfig.from_sources({"critic": {"structured": "json_schema"}}, env={})
