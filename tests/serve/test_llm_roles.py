"""The service's model roles on a real OpenAI-compatible endpoint (the loopback server): capture extracts facts
through the extractor role, ``/answer`` answers through the answerer role, a failing endpoint is a 503 that names
the role, and the service recovers with it."""
from __future__ import annotations

import re

import httpx
import pytest
import yaml

from evolve.data import BASELINE_PATH
from llm_server import LoopbackLLMServer
from server_process import ServeProcess

TURN_LINE = re.compile(r"^(?P<speaker>\S+) \(.*?\) \[(?P<id>[^\]]+)\]: (?P<text>.*)$", re.MULTILINE)
TURNS = [{"id": "d1", "speaker": "Dana", "text": "My kayak is called Blue Heron.", "session": "s1",
          "time": "2024-05-02T10:00:00"},
         {"id": "d2", "speaker": "Eli", "text": "What a lovely name for a boat.", "session": "s1",
          "time": "2024-05-02T10:01:00"}]


def responder(body: dict) -> str:
    """Extraction: one fact per dialogue line, worded as no embedded extractor words it. Answering: the kayak's name
    when the memory in the prompt holds it."""
    prompt = "\n".join(m["content"] for m in body["messages"])
    if "FACTS:" in prompt:
        return "FACTS:\n" + "\n".join(f"{m['speaker']} noted that {m['text']} [{m['id']}]"
                                      for m in TURN_LINE.finditer(prompt))
    return "ANSWER: Blue Heron" if "Blue Heron" in prompt else "ANSWER: I do not know"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("llm-roles")
    with LoopbackLLMServer(responder) as llm:
        role = {"backend": "llm", "base_url": llm.base_url, "model": "test-model", "max_retries": 0, "timeout_s": 5}
        roles = root / "roles.yaml"
        roles.write_text(yaml.safe_dump({"roles": {"extractor": role, "answerer": role}}))
        serving = root / "serving.yaml"
        serving.write_bytes(BASELINE_PATH.read_bytes())
        with ServeProcess(root / "data", serving, None, "--allow-untracked", "--roles", str(roles)) as proc:
            yield proc, llm


def test_capture_extracts_and_answer_answers_through_the_configured_roles(served):
    server, llm = served
    assert httpx.post(f"{server.url}/v1/users/dana/turns", json={"turns": TURNS}, timeout=60).status_code == 201
    recall = httpx.post(f"{server.url}/v1/users/dana/recall", json={"question": "What is Dana's kayak called?"},
                        timeout=60).json()
    assert any("noted that My kayak is called Blue Heron" in p["text"] for p in recall["packed"])
    reply = httpx.post(f"{server.url}/v1/users/dana/answer", json={"question": "What is Dana's kayak called?"},
                       timeout=60)
    assert reply.status_code == 200 and reply.json()["answer"] == "Blue Heron"
    asked = [r for r in llm.requests if "What is Dana's kayak called?" in r["messages"][-1]["content"]]
    assert asked and "Blue Heron" in asked[-1]["messages"][-1]["content"]  # the packed memory reached the model
    metrics = httpx.get(f"{server.url}/metrics").text
    assert re.search(r'memevolve_llm_requests\{role="answerer"\} [1-9]', metrics)
    assert re.search(r'memevolve_llm_requests\{role="extractor"\} [1-9]', metrics)


def test_a_failing_answerer_is_a_503_naming_it_and_the_service_recovers(served):
    server, llm = served
    assert httpx.post(f"{server.url}/v1/users/erin/turns", json={"turns": TURNS}, timeout=60).status_code == 201
    question = {"question": "What is Dana's kayak called?"}
    assert httpx.post(f"{server.url}/v1/users/erin/recall", json=question, timeout=60).status_code == 200
    llm.fail_next("500")
    failed = httpx.post(f"{server.url}/v1/users/erin/answer", json=question, timeout=60)
    assert failed.status_code == 503 and "a model role failed" in failed.json()["error"]["message"]
    assert httpx.post(f"{server.url}/v1/users/erin/answer", json=question, timeout=60).json()["answer"] == "Blue Heron"
    assert re.search(r'memevolve_llm_failures\{role="answerer"\} 1', httpx.get(f"{server.url}/metrics").text)


def test_a_roles_file_without_roles_is_refused_before_serving(tmp_path):
    bad = tmp_path / "roles.yaml"
    bad.write_text("rounds: 3\n")
    serving = tmp_path / "serving.yaml"
    serving.write_bytes(BASELINE_PATH.read_bytes())
    proc = ServeProcess(tmp_path / "data", serving, None, "--allow-untracked", "--roles", str(bad))
    with pytest.raises(RuntimeError, match="no 'roles:' mapping"):
        proc.start(timeout=60)
