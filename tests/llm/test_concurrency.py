"""Concurrent evaluation on the LLM path: questions (and judge votes) in flight at once, bounded by each role's
``concurrency``, with traces identical to a one-at-a-time evaluation and in the same order."""
from __future__ import annotations

import json
import re
import time

from llm_server import LoopbackLLMServer

from evolve import BASELINE_PATH, Harness, load_benchmark, load_strategy
from evolve.llm import RolesConfig
from evolve.loop.backends import build_backends


def responder(body: dict) -> str:
    text = "\n".join(m["content"] for m in body["messages"])
    if "GOLD ANSWER:" in text:
        gold, answer = (re.search(rf"{k}: (.*)", text).group(1) for k in ("GOLD ANSWER", "GENERATED ANSWER"))
        return json.dumps({"reasoning": "overlap", "label": "CORRECT" if set(gold.split()) & set(answer.split())
                           else "WRONG"})
    question = re.search(r"QUESTION: (.*)", text).group(1)
    return "ANSWER: " + question.split()[-1].rstrip("?")


def evaluate(server: LoopbackLLMServer, tmp_path, concurrency: int, name: str):
    roles = {role: {"backend": "llm", "base_url": server.base_url, "model": f"{role}-model", "timeout_s": 5,
                    "max_retries": 2, "concurrency": concurrency} for role in ("answerer", "judge")}
    backends = build_backends(RolesConfig.from_sources(roles, source="test"), 0.5, tmp_path / name)
    bench = load_benchmark("synthetic:0:2")
    ids = [q.id for q in bench.questions if q.category != "adversarial"][:12]
    return Harness(bench, backends.roles, progress=False).evaluate(load_strategy(BASELINE_PATH), ids)


def comparable(run) -> list[dict]:
    return [t.deterministic_dict() for t in run.traces]


def test_questions_and_votes_run_concurrently_with_sequential_results(tmp_path):
    with LoopbackLLMServer(responder, models=("answerer-model", "judge-model"), delay_s=0.05) as server:
        one = evaluate(server, tmp_path, 1, "cache-1")
        assert server.max_in_flight == 1
        assert server.request_count == len(one.traces) * 4  # one answer and three judge votes per question
        four = evaluate(server, tmp_path, 4, "cache-4")
        assert 1 < server.max_in_flight <= 2 * 4  # two roles, each holding at most four calls in flight
    assert comparable(four) == comparable(one)
    assert [t.question_id for t in four.traces] == [t.question_id for t in one.traces]
    assert four.summary.accuracy == one.summary.accuracy and all(len(t.judge["votes"]) == 3 for t in four.traces)


def test_every_call_lands_in_its_question_trace_and_the_summary(tmp_path):
    with LoopbackLLMServer(responder, models=("answerer-model", "judge-model")) as server:
        run = evaluate(server, tmp_path, 4, "cache")
        calls = server.request_count
        again = evaluate(server, tmp_path, 4, "cache")  # same cache: served without HTTP
        assert server.request_count == calls
    for t in run.traces:  # one answer and three votes, each under its role, votes from the judge's own threads
        assert t.llm["answerer"]["requests"] == 1 and t.llm["judge"]["requests"] == 3
        assert t.llm["answerer"]["prompt_tokens"] > 0 and t.llm["answerer"]["cache_misses"] == 1
    totals = run.summary.llm
    assert totals["answerer"]["requests"] + totals["judge"]["requests"] == calls
    assert totals["judge"]["completion_tokens"] == sum(t.llm["judge"]["completion_tokens"] for t in run.traces)
    assert again.summary.llm["judge"]["cache_hits"] == 3 * len(run.traces) and "requests" not in again.summary.llm["judge"]
    assert run.summary.metrics()["llm.judge.requests"] == totals["judge"]["requests"]


def test_concurrency_zero_is_refused_naming_the_config_file(capsys, tmp_path):
    from workflow_fixtures import cli, write_config

    roles = {"answerer": {"backend": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "m", "concurrency": 0}}
    config = write_config(tmp_path / "run.yaml", stores=tmp_path / "stores", roles=roles)
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and f"{config}: roles.answerer.concurrency: Input should be greater than or equal to 1" in out
    assert not (tmp_path / "stores").exists()


def test_a_429_burst_under_concurrency_is_retried_after_the_servers_delay(tmp_path):
    with LoopbackLLMServer(responder, models=("answerer-model", "judge-model")) as server:
        reference = evaluate(server, tmp_path, 1, "cache-ref")
        server.fail_next("429", n=6, retry_after=0.3)
        started = time.perf_counter()
        burst = evaluate(server, tmp_path, 4, "cache-burst")
        waited = time.perf_counter() - started
    def content(run) -> list[dict]:  # what was answered and judged; the usage counters differ by the retries
        return [{k: v for k, v in row.items() if k != "llm"} for row in comparable(run)]

    assert content(burst) == content(reference)
    retries = sum(counts.get("retries", 0) for t in burst.traces for counts in t.llm.values())
    assert retries == 6 and waited >= 0.3  # every rejected call waited Retry-After, then went through


def extraction_responder(body: dict) -> str:
    """Extraction prompts get one fact per turn of the window (the turn's text, cited); others as ``responder``."""
    text = "\n".join(m["content"] for m in body["messages"])
    turns = re.findall(r"^(\S+) \([^)]*\) \[([^\]]+)\]: (.*)$", text, re.MULTILINE)
    if "QUESTION:" not in text and turns:
        return "FACTS:\n" + "\n".join(f"{speaker} said {said} [{tid}]" for speaker, tid, said in turns)
    return responder(body)


def test_extraction_windows_and_conversations_run_concurrently_with_sequential_memory(tmp_path):
    def run(server: LoopbackLLMServer, concurrency: int):
        roles = {"extractor": {"backend": "llm", "base_url": server.base_url, "model": "extractor-model",
                               "timeout_s": 5, "max_retries": 2, "concurrency": concurrency}}
        backends = build_backends(RolesConfig.from_sources(roles, source="test"), 0.5, tmp_path / f"c{concurrency}")
        bench = load_benchmark("synthetic:0:2")
        by_conv: dict[str, list[str]] = {}
        for q in bench.questions:
            if q.category != "adversarial":
                by_conv.setdefault(q.conversation_id, []).append(q.id)
        ids = [qid for qids in by_conv.values() for qid in qids[:4]]  # two conversations, ingested side by side
        return Harness(bench, backends.roles, progress=False).evaluate(load_strategy(BASELINE_PATH), ids)

    with LoopbackLLMServer(extraction_responder, models=("extractor-model",), delay_s=0.02) as server:
        one = run(server, 1)
        assert server.max_in_flight == 1
        calls = server.request_count
        server.max_in_flight = 0
        four = run(server, 4)
        assert 1 < server.max_in_flight <= 4 and server.request_count == 2 * calls
    assert calls > 4 and comparable(four) == comparable(one) and len({t.conversation_id for t in one.traces}) == 2
    assert [t.question_id for t in four.traces] == [t.question_id for t in one.traces]
    assert any(" said " in item["text"] for t in one.traces for item in t.packed)  # the extracted facts are used
