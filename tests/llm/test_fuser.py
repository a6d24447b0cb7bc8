"""The fusion judge role against the loopback OpenAI-compatible server: it decides CreatePack, UpdatePack or
Standalone for each observation that has candidate packs, an unusable reply keeps the observation atomic, and the
run configuration's ``fuser`` role reaches ingestion with a store key of its own."""
from __future__ import annotations

import json
from datetime import datetime

from evolve.benchmarks import Conversation, Session, Turn
from evolve.data import BASELINE_PATH
from evolve.llm import LLMClient, ResponseCache, RoleConfig, RolesConfig, UsageStats
from evolve.llm.fuser import LLMFusionJudge
from evolve.loop.backends import build_backends
from evolve.runtime import MemoryRuntime
from evolve.strategy.artifact import load_strategy
from evolve.strategy.paths import with_value

DAY = datetime(2024, 3, 8)
EVENTS = [(8, "Ana's calendar", "Mia football training at Riverside field at 17:00"),
          (9, "Door camera", "Mia football bag left near the doorway"),
          (10, "Ana's speaker", "Playing a football podcast for Mia"),
          (16, "Ana's car", "Trip to Riverside field planned with a detour home for Mia's bag")]
HOME = Conversation("home", ("Ana",), (Session("S1", DAY, tuple(
    Turn(f"E{n}", who, text, "S1", DAY.replace(hour=hour)) for n, (hour, who, text) in enumerate(EVENTS, 1))),))


def observation(body: dict) -> str:
    prompt = body["messages"][0]["content"]
    return prompt.split("NEW OBSERVATION (", 1)[1].split("OPEN PACKS", 1)[0]


def packs_of(runtime: MemoryRuntime) -> list[tuple[str, ...]]:
    return [item.source_ids for item in runtime.ingest(HOME).items if item.layer == "PK"]


def judge(server, tmp_path, **kwargs) -> LLMFusionJudge:
    cfg = RoleConfig(backend="llm", base_url=server.base_url, model="test-model", timeout_s=5, max_retries=0)
    return LLMFusionJudge(LLMClient(cfg, ResponseCache(tmp_path / "cache"), UsageStats(), role="fuser"), **kwargs)


def fused() -> dict:
    return with_value(load_strategy(BASELINE_PATH), "features.fusion.enabled", True)


def test_the_llm_judge_keeps_a_routine_observation_out_of_the_pack_the_rule_judge_puts_it_in(llm_server, tmp_path):
    llm_server.responder = lambda body: json.dumps(
        {"decision": "standalone"} if "podcast" in observation(body) else {"decision": "update", "pack": 1})
    assert packs_of(MemoryRuntime(fused())) == [("E1", "E2", "E3", "E4")]
    runtime = MemoryRuntime(fused(), fuser=judge(llm_server, tmp_path))
    assert packs_of(runtime) == [("E1", "E2", "E4")]
    assert len(llm_server.requests) == 3  # the first observation had no candidate: opened without a call
    prompt = llm_server.requests[-1]["messages"][0]["content"]
    assert "Ana's car: Trip to Riverside field" in prompt and "1. (2024-03-08 08:00) Ana's calendar" in prompt
    assert "podcast" not in prompt.split("OPEN PACKS", 1)[1]  # the standalone observation joined nothing
    assert runtime.builders == "rule-extractor/v1+llm-fuser/test-model" != MemoryRuntime(fused()).builders


def test_an_unusable_reply_is_asked_again_then_keeps_the_observation_standalone(llm_server, tmp_path):
    llm_server.responder = lambda body: "not json" if len(body["messages"]) == 1 else json.dumps(
        {"decision": "update", "pack": 7})
    fuser = judge(llm_server, tmp_path)
    assert packs_of(MemoryRuntime(fused(), fuser=fuser)) == []  # every observation kept atomic
    assert fuser.unusable == 3 and len(llm_server.requests) == 6  # one repair turn each
    assert "no valid JSON" in llm_server.requests[1]["messages"][-1]["content"]


def test_the_fuser_role_is_built_from_the_run_config_and_reaches_ingestion(llm_server, tmp_path):
    llm_server.responder = lambda body: json.dumps({"decision": "create"})
    roles = RolesConfig.from_sources({"fuser": {"backend": "llm", "base_url": llm_server.base_url,
                                                "model": "test-model", "structured": "json_object"}})
    backends = build_backends(roles, 0.5, tmp_path / "cache")
    assert isinstance(backends.roles.fuser, LLMFusionJudge)
    runtime = MemoryRuntime(fused(), fuser=backends.roles.fuser)
    assert packs_of(runtime) == []  # each observation opened its own pack and none joined
    assert llm_server.requests and llm_server.requests[0]["response_format"]["type"] == "json_object"
    assert backends.usage is not None and backends.usage.get("fuser", "requests") == 3


def test_the_llm_judge_is_shown_the_recent_happenings_and_the_rule_judge_ignores_them(llm_server, tmp_path):
    days = [[(8, "Ana's calendar", "Mia training at Riverside"), (9, "Door camera", "Riverside jersey by the door")],
            [(8, "Ana's calendar", "Mia match at Hillside"), (9, "Door camera", "Hillside boots by the door")]]
    two_days = Conversation("home", ("Ana",), tuple(
        Session(f"S{d}", DAY.replace(day=7 + d), tuple(
            Turn(f"E{2 * d - 2 + n}", who, text, f"S{d}", DAY.replace(day=7 + d, hour=hour))
            for n, (hour, who, text) in enumerate(day, 1))) for d, day in enumerate(days, 1)))
    llm_server.responder = lambda body: json.dumps({"decision": "update", "pack": 1})
    runtime = MemoryRuntime(fused(), fuser=judge(llm_server, tmp_path))
    packs = [item.source_ids for item in runtime.ingest(two_days).items if item.layer == "PK"]
    assert packs == [("E1", "E2"), ("E3", "E4")]
    first, second = (body["messages"][0]["content"] for body in llm_server.requests)
    assert "RECENT HAPPENINGS" in first and "(none)" in first.split("NEW OBSERVATION (")[0]
    recent = second.split("NEW OBSERVATION (")[0]
    assert "Mia training at Riverside (and 1 more until 2024-03-08 09:00)" in recent
    no_zone = with_value(fused(), "features.fusion.recent", 0)
    assert [i.source_ids for i in MemoryRuntime(no_zone).ingest(two_days).items if i.layer == "PK"] == packs
