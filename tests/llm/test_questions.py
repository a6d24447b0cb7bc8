"""The question-generation role against the loopback OpenAI-compatible server: what it asks, what it keeps."""
from __future__ import annotations

import json
from datetime import datetime

import yaml

from evolve.benchmarks import Benchmark, Conversation, Session, Turn, write_locomo
from evolve.benchmarks.probes import augment
from evolve.llm import LLMClient, ResponseCache, RoleConfig, RolesConfig, UsageStats, build_llm_roles
from evolve.llm.questions import LLMQuestioner
from evolve.loop.config import load_config
from evolve.loop.setup import RunSetup

WHEN = datetime(2023, 5, 8, 13, 56)
SESSION = Session("1", WHEN, (Turn("D1:1", "Ana", "We adopted a grey kitten called Pixel.", "1", WHEN),
                              Turn("D1:2", "Ben", "Lovely. Our band plays at the Blue Note on Friday.", "1", WHEN)))
CONVERSATION = Conversation("c1", ("Ana", "Ben"), (SESSION,))
GOOD = {"question": "What is the name of Ana's kitten?", "answer": "Pixel", "evidence": ["D1:1"]}
REPLY = {"questions": [GOOD,
                       {"question": "Where does Ben's band play?", "answer": "the Blue Note", "evidence": ["D1:2"]},
                       {"question": "What colour is the kitten?", "answer": "orange", "evidence": ["D1:1"]},
                       {"question": "What is Pixel?", "answer": "Pixel", "evidence": ["D1:1"]},
                       {"question": "Who plays in a band?", "answer": "Ben", "evidence": ["D9:9"]}]}


def _questioner(server, tmp_path, **kwargs) -> LLMQuestioner:
    cfg = RoleConfig(backend="llm", base_url=server.base_url, model="test-model", timeout_s=5, max_retries=0)
    return LLMQuestioner(LLMClient(cfg, ResponseCache(tmp_path / "cache"), UsageStats(), role="questioner"), **kwargs)


def test_questioner_keeps_only_questions_that_pass_the_probe_filter(llm_server, tmp_path):
    llm_server.responder = lambda body: json.dumps(REPLY)
    probes, dropped = _questioner(llm_server, tmp_path).session_probes(SESSION)
    assert [(p.question, p.answer, p.evidence, p.kind) for p in probes] == [
        (GOOD["question"], "Pixel", ("D1:1",), "llm"), ("Where does Ben's band play?", "the Blue Note", ("D1:2",), "llm")]
    reasons = " | ".join(dropped)
    assert "['orange'] are not in the evidence turns" in reasons
    assert "answer is in the question" in reasons and "names no turn of the session" in reasons
    prompt = llm_server.requests[0]["messages"][-1]["content"]
    assert "[D1:1] Ana: We adopted a grey kitten called Pixel." in prompt and "8 May 2023" in prompt


def test_questioner_reasks_an_invalid_reply_then_gives_up_cleanly(llm_server, tmp_path):
    replies = iter(["not json at all", json.dumps({"questions": [GOOD]})])
    llm_server.responder = lambda body: next(replies)
    probes, _ = _questioner(llm_server, tmp_path).session_probes(SESSION)
    assert [p.answer for p in probes] == ["Pixel"] and len(llm_server.requests) == 2
    llm_server.responder = lambda body: "still not json"
    probes, dropped = _questioner(llm_server, tmp_path / "other", max_attempts=1).session_probes(SESSION)
    assert probes == [] and "reply unusable" in dropped[0]


def test_questioner_role_is_built_from_config_and_augments_a_benchmark(llm_server, tmp_path):
    llm_server.responder = lambda body: json.dumps(REPLY)
    roles = RolesConfig.from_sources({"questioner": {"backend": "llm", "base_url": llm_server.base_url,
                                                     "model": "test-model", "structured": "json_object"}})
    questioner = build_llm_roles(roles, ResponseCache(tmp_path / "cache"), UsageStats())["questioner"]
    assert isinstance(questioner, LLMQuestioner)
    bench = augment(Benchmark("mini", {"c1": CONVERSATION}, []), questioner=questioner)
    llm = [q for q in bench.questions if q.category == "probe_llm"]
    assert [q.question for q in llm] == [GOOD["question"], "Where does Ben's band play?"]
    assert llm_server.requests[0]["response_format"]["type"] == "json_object"


def test_a_run_on_unlabelled_conversations_scores_the_questioners_probes_and_an_estimate_reads_them_cached(
        llm_server, tmp_path):
    llm_server.responder = lambda body: json.dumps(REPLY)
    write_locomo(Benchmark("mini", {"c1": CONVERSATION}, []), tmp_path / "conv.json")  # no labelled question
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump({
        "benchmark": f"locomo:{tmp_path / 'conv.json'}", "stores": str(tmp_path / "stores"), "objective": "answer",
        "augment": "probes", "roles": {"questioner": {"backend": "llm", "base_url": llm_server.base_url,
                                                      "model": "test-model", "max_retries": 0}}}))
    config = load_config(config_path)
    setup = RunSetup.for_run(config)
    written = {q.id: q.question for q in setup.benchmark.questions if q.category == "probe_llm"}
    assert sorted(written.values()) == sorted([GOOD["question"], "Where does Ben's band play?"])
    assert set(written) <= set(setup.scored) and len(llm_server.requests) == 1
    llm_server.responder = lambda body: json.dumps({"questions": []})  # a dry setup must not ask again
    dry = RunSetup.for_run(config, dry=True)
    assert dry.question_ids == setup.question_ids and dry.scored == setup.scored and len(llm_server.requests) == 1
    plain = RunSetup.prepare(config)  # without the role: the deterministic probes only
    assert not set(written) & set(plain.scored) and set(plain.scored) < set(setup.scored)
