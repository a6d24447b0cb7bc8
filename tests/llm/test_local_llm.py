"""The LLM roles against a real engine: llama.cpp's OpenAI-compatible server (``llama-cpp-python[server]``) with the
packaged SmolLM2-135M-Instruct model, on loopback. Skipped, with the reason, when the local-llm extra is missing."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Iterator

import pytest

from evolve.benchmarks.types import Turn
from evolve.cli import main
from evolve.data import BASELINE_PATH
from evolve.llm import (LLMAnswerer, LLMClient, LLMExpander, LLMExtractor, LLMJudge, LLMPlanner, ResponseCache,
                        RoleConfig, UsageStats)
from evolve.llm.local import PORTABLE_CMAKE_ARGS, LocalLLMError, LocalLLMServer, missing_requirements
from evolve.llm.prompting import json_payload
from evolve.llm.roles import ANSWER_STOP, JUDGE_LABELS, JUDGE_SCHEMA, answer_tokens
from evolve.loop.config import RunConfig
from evolve.loop.engine import Engine
from evolve.runtime.roles import ContextItem
from evolve.strategy.artifact import load_strategy
from evolve.strategy.policy import Policy

MODEL = "smollm2"
POLICY = Policy.from_strategy(load_strategy(BASELINE_PATH))
DAY = datetime(2023, 5, 8)
WINDOW = [Turn(id="D1:1", session_id="S1", speaker="Caroline", timestamp=DAY,
               text="I went to the LGBTQ support group yesterday, it was so powerful."),
          Turn(id="D1:2", session_id="S1", speaker="Melanie", timestamp=DAY,
               text="That's great! I painted a sunrise over the lake last week."),
          Turn(id="D1:3", session_id="S1", speaker="Caroline", timestamp=DAY,
               text="I want to become a counselor for trans youth.")]
CONTEXT = [ContextItem("m1", "Caroline wants to become a counselor for trans youth.", "L1", ("D1:3",), DAY),
           ContextItem("m2", "Melanie painted a sunrise over the lake.", "L1", ("D1:2",), DAY),
           ContextItem("m3", "Anna bought a red car in April.", "L1", ("D2:1",), DAY)]
QUESTIONS = ("What did Melanie paint?", "What color is Anna's car?", "What does Caroline want to become?")


@pytest.fixture(scope="session")
def local_llm() -> Iterator[LocalLLMServer]:
    """The packaged SmolLM2 model behind llama.cpp's server on 127.0.0.1, stopped after the session."""
    reason = missing_requirements(MODEL)
    if reason:
        pytest.skip(reason)
    with LocalLLMServer(MODEL) as server:
        yield server
    assert not server.running


def entries(cache: Path, role: str) -> list[dict]:
    found = [json.loads(p.read_text()) for p in cache.rglob("*.json")]
    return [e for e in found if e["role"] == role]


def client(server: LocalLLMServer, cache: Path, stats: UsageStats, role: str, **settings: object) -> LLMClient:
    cfg = RoleConfig(backend="llm", base_url=server.base_url, model=server.model, seed=0, **settings)
    return LLMClient(cfg, ResponseCache(cache), stats, role=role)


def test_runtime_roles_on_the_real_model_replay_from_cache(local_llm, tmp_path):
    cache, stats = tmp_path / "cache", UsageStats()

    def run_roles(stats: UsageStats) -> tuple:
        facts = LLMExtractor(client(local_llm, cache, stats, "extractor", max_tokens=128)).extract(
            WINDOW, POLICY.extraction)
        subqueries = LLMExpander(client(local_llm, cache, stats, "expander", max_tokens=48)).expand(
            QUESTIONS[0], POLICY.expansion)
        answerer = LLMAnswerer(client(local_llm, cache, stats, "answerer"))
        brief = POLICY.answering.model_copy(update={"max_answer_tokens": 2})
        answers = [answerer.answer(q, CONTEXT, policy, "single_hop")
                   for q in QUESTIONS for policy in (POLICY.answering, brief)]
        judge = LLMJudge(client(local_llm, cache, stats, "judge", max_tokens=64, structured="json_object"))
        verdict = judge.judge(QUESTIONS[1], "red", answers[2].text)
        return facts, subqueries, answers, verdict

    facts, subqueries, answers, verdict = run_roles(stats)
    for role in ("extractor", "expander", "answerer", "judge"):  # usage as the real server reports it
        assert stats.get(role, "prompt_tokens") > 0 and stats.get(role, "completion_tokens") > 0, role
    assert all(f.text and set(f.source_ids) <= {t.id for t in WINDOW} for f in facts)
    assert len(subqueries) <= POLICY.expansion.max_subqueries and all(q.strip() for q in subqueries)
    for answer, limit in zip(answers, [POLICY.answering.max_answer_tokens, 2] * len(QUESTIONS)):
        assert len(answer.text.split()) <= limit and set(answer.support_ids) <= {c.id for c in CONTEXT}
    for entry in entries(cache, "answerer"):  # the length limit reached the engine, which kept to it
        assert entry["params"]["stop"] == ANSWER_STOP
        assert entry["usage"]["completion_tokens"] <= entry["params"]["max_tokens"] <= answer_tokens(POLICY.answering)
    assert any(e["params"]["max_tokens"] == 28 and e["usage"]["completion_tokens"] == 28
               for e in entries(cache, "answerer")), "a 2-word answer budget truncates this model's reply"
    votes = entries(cache, "judge")
    assert len(votes) == 3 and len(verdict.votes) == 3
    for vote in votes:  # constrained decoding: every vote is schema-valid JSON
        assert vote["params"]["response_format"] == {"type": "json_object", "schema": JUDGE_SCHEMA}
        reply = json.loads(vote["content"])
        assert reply["label"] in JUDGE_LABELS and len(reply["reasoning"]) <= 200
    labels = [json.loads(vote["content"])["label"] for vote in votes]
    assert sorted(verdict.votes) == sorted(label == "CORRECT" for label in labels)  # cache files in any order
    assert verdict.verdict == ("correct" if labels.count("CORRECT") >= 2 else
                               max(("WRONG", "PARTIAL", "ABSTAIN"), key=labels.count).lower())

    replay_stats = UsageStats()
    assert run_roles(replay_stats) == (facts, subqueries, answers, verdict)
    assert sum(replay_stats.get(r, "requests") for r in ("extractor", "expander", "answerer", "judge")) == 0


def test_planner_constrained_decoding_yields_schema_valid_json(local_llm, tmp_path):
    stats = UsageStats()
    planner = LLMPlanner(client(local_llm, tmp_path, stats, "planner", max_tokens=96, structured="json_object"),
                         max_attempts=1)
    result = planner.plan({"retrieval_gap/single_hop": 12}, {"retrieval.top_k::increase": 0.4}, max_proposals=1)
    [entry] = entries(tmp_path, "planner")
    proposals = json.loads(entry["content"])  # whatever the model meant, the grammar made it a valid reply shape
    assert isinstance(proposals, list) and len(proposals) == 1
    assert set(proposals[0]) >= {"path", "direction", "why"}
    assert result.attempts == 1 and len(result.proposals) + len(result.dropped_reasons) == 1


def _run_config(server: LocalLLMServer, stores: Path) -> RunConfig:
    local = {"backend": "llm", "base_url": server.base_url, "model": server.model, "seed": 0, "timeout_s": 600}
    # Planner and critic without constrained decoding and 8 tokens to answer: their real replies are cut short.
    truncated = {**local, "max_tokens": 8, "structured": "off"}
    return RunConfig(benchmark="synthetic:0", limit=10, probe_size=10, rounds=1, candidates_per_round=1,
                     stores=stores, roles={"answerer": local, "planner": truncated, "critic": truncated})


def _decisions(stores: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (stores / "candidate_outcomes.jsonl").read_text().splitlines()]
    return [(r["candidate_id"], tuple(r["change_keys"]), r["decided_by"], r["decision"]["verdict"], r["critic"])
            for r in rows]


def test_one_round_with_the_local_answerer_replays_without_calls(local_llm, tmp_path):
    config = _run_config(local_llm, tmp_path / "stores")
    first = Engine(config, track=False, progress=False).run()
    assert first["rounds"] == 1 and first["llm"]["answerer"]["requests"] > 0

    # The planner's and the critic's replies were real and invalid: re-asked, then dropped with a recorded reason.
    cache = config.stores / "cache" / "llm"
    planner_replies = entries(cache, "planner")  # one cached reply per distinct prompt: three attempts
    planner = first["llm"]["planner"]  # a timeout under load is retried: a retry, not another attempt
    assert planner["requests"] - planner.get("retries", 0) == len(planner_replies) == 3
    for entry in planner_replies:
        assert entry["usage"]["completion_tokens"] == 8 and entry["content"].strip()
        with pytest.raises(ValueError):
            json_payload(entry["content"])
    [log] = [json.loads(line) for line in (config.stores / "diagnosis_log.jsonl").read_text().splitlines()]
    assert log["planner_notes"] == ["llm planner dropped: invalid after 3 attempt(s): reply contains no valid JSON"]
    decisions = _decisions(config.stores)
    critics = [critic for *_, critic in decisions if critic is not None]
    assert critics and all(c["label"] == "risky" and c["reasons"][0].startswith("critic output invalid after 3")
                           for c in critics)

    # A second night on fresh stores sharing the response cache: no HTTP call, the same decisions.
    replay = tmp_path / "replay"
    replay.mkdir()
    (replay / "cache").symlink_to(config.stores / "cache")
    second = Engine(config.model_copy(update={"stores": replay}), track=False, progress=False).run()
    assert {role: usage.get("requests", 0) for role, usage in second["llm"].items()} == \
        {role: 0 for role in second["llm"]}
    assert second["llm"]["answerer"]["cache_hits"] > 0
    assert _decisions(replay) == decisions
    assert (first["current"]["hash"], first["decisions"]) == (second["current"]["hash"], second["decisions"])


def test_cli_serves_until_sigterm(local_llm):
    proc = subprocess.Popen([sys.executable, "-m", "evolve.cli", "local-llm", "--model", MODEL],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while not lines or not lines[-1].startswith("serving"):
            line = proc.stdout.readline()
            assert line, f"local-llm ended early: {proc.stderr.read()}"
            lines.append(line.strip())
        base_url = lines[0].removeprefix("base_url: ")
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        assert f"MEMEVOLVE_ANSWERER_BASE_URL={base_url} MEMEVOLVE_ANSWERER_MODEL={MODEL}" in "\n".join(lines)
        with urllib.request.urlopen(f"{base_url}/models", timeout=5) as response:
            assert MODEL in response.read().decode()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    with pytest.raises(urllib.error.URLError):  # the server went with it
        urllib.request.urlopen(f"{base_url}/models", timeout=2)


@pytest.mark.skipif(sys.platform != "linux", reason="the server follows its parent through PR_SET_PDEATHSIG")
def test_a_killed_caller_leaves_no_server(local_llm):
    script = ("from evolve.llm.local import LocalLLMServer; import time; s = LocalLLMServer('smollm2').start(); "
              "print(s.base_url, flush=True); time.sleep(600)")
    caller = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        base_url = caller.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        urllib.request.urlopen(f"{base_url}/models", timeout=5).close()
    finally:
        caller.kill()  # SIGKILL: no cleanup code of the caller runs
        caller.wait()
    for _ in range(50):
        try:
            urllib.request.urlopen(f"{base_url}/models", timeout=1).close()
        except (urllib.error.URLError, OSError):
            return
        time.sleep(0.2)
    pytest.fail(f"the server at {base_url} outlived its caller")


def test_cli_without_the_extra_exits_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as if llama-cpp-python were not installed
    assert main(["local-llm"]) == 2
    err = capsys.readouterr().err
    assert "llama_cpp" in err and 'pip install -e ".[local-llm]"' in err


def test_cli_refuses_a_taken_port(local_llm, capsys):
    port = int(local_llm.base_url.rsplit(":", 1)[1].split("/")[0])
    assert main(["local-llm", "--port", str(port)]) == 2
    assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err


def test_gemma3_base_model_serves_with_usage(tmp_path):
    reason = missing_requirements("gemma3-270m")
    if reason:
        pytest.skip(reason)
    stats = UsageStats()
    with LocalLLMServer("gemma3-270m") as server:
        reply = client(server, tmp_path, stats, "answerer", max_tokens=16).complete(
            [{"role": "user", "content": "Name the capital of France."}])
    assert isinstance(reply, str) and stats.get("answerer", "prompt_tokens") > 0
    assert 0 < stats.get("answerer", "completion_tokens") <= 16  # 0 without the gemma chat format


#: A server that answers ``/v1/models`` like llama.cpp's and dies of SIGSEGV on its first completion, as a llama.cpp
#: built for another CPU does.
CRASHING_SERVER = """
import os, signal, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"object": "list", "data": [{"id": "smollm2"}]}'
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        os.kill(os.getpid(), signal.SIGSEGV)

HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


class CrashingServer(LocalLLMServer):
    def command(self, model_path: Path) -> list[str]:
        return [sys.executable, "-c", CRASHING_SERVER, str(self.port)]


def test_a_server_that_crashes_on_its_first_completion_names_the_cause():
    reason = missing_requirements(MODEL)
    if reason:
        pytest.skip(reason)
    server = CrashingServer(MODEL, startup_timeout_s=30)
    with pytest.raises(LocalLLMError) as caught:
        server.start()
    message = str(caught.value)
    assert "killed by SIGSEGV on its first completion" in message
    assert f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}"' in message and "--force-reinstall" in message
    assert not server.running


def test_the_readme_builds_llama_cpp_with_the_portable_flags():
    """The README's install commands (and so CI's) build llama.cpp with the flags the error message recommends."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    tests_command = next(line for line in readme.splitlines() if line.rstrip().endswith("python -m pytest -q"))
    assert f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}"' in tests_command
