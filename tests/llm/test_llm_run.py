"""End to end: every role on the LLM backend against a loopback OpenAI-compatible server; a second
identical run is served entirely from the response cache and takes identical decisions."""
import json
import re
from pathlib import Path

import pytest
from llm_server import LoopbackLLMServer

from evolve.loop.config import RunConfig
from evolve.loop.engine import Engine
from evolve.observe.judge import normalize

ROLES = ("extractor", "expander", "answerer", "judge", "planner", "critic")


def _overlap(a: str, b: str) -> int:
    return len(set(normalize(a)) & set(normalize(b)))


def scripted(body: dict) -> str:
    """A deterministic stand-in model that follows each framework/strategy prompt's output contract."""
    text = "\n".join(m["content"] for m in body["messages"])
    if "GOLD ANSWER:" in text:
        gold = re.search(r"GOLD ANSWER: (.*)", text).group(1)
        answer = re.search(r"GENERATED ANSWER: (.*)", text).group(1)
        label = "CORRECT" if _overlap(gold, answer) else "WRONG"
        return json.dumps({"reasoning": "token overlap", "label": label})
    if "You tune the policy" in text:
        return json.dumps([{"path": "extraction.min_fact_tokens", "direction": "decrease", "why": "short facts lost"},
                           {"path": "answering.span", "direction": "set", "value": "keywords", "why": "long answers"}])
    if "REVIEW PACKET" in text:
        return json.dumps({"label": "actionable", "reasons": ["targets the diagnosed stage"]})
    if "FACTS:" in text:
        turns = re.findall(r"^(\S+) \([^)]*\) \[([^\]]+)\]: (.*)$", text, flags=re.M)
        return "FACTS:\n" + "\n".join(f"{speaker} said {line} [{tid}]" for speaker, tid, line in turns)
    if "SUBQUERIES:" in text:
        question = re.search(r"QUESTION: (.*)", text).group(1)
        return "SUBQUERIES:\n" + "\n".join(w for w in question.split() if w[:1].isupper())
    if "ANSWER:" in text:
        question = re.search(r"QUESTION: (.*)", text).group(1)
        memory = text.split("MEMORY:", 1)[1].split("QUESTION:", 1)[0].strip().splitlines() or [""]
        best = max(memory, key=lambda line: _overlap(line, question))
        words = [w for w in best.split() if not _overlap(w, question)]
        return "ANSWER: " + " ".join(words[-4:])
    return "unexpected prompt"


def _config(tmp: Path, base_url: str) -> RunConfig:
    roles = {role: {"backend": "llm", "base_url": base_url, "model": "judge-model" if role == "judge" else "test-model",
                    "timeout_s": 5, "max_retries": 1} for role in ROLES}
    return RunConfig(benchmark="synthetic:0", limit=24, probe_size=10, rounds=1, candidates_per_round=2,
                     stores=tmp / "stores", roles=roles)


def _decisions(stores: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (stores / "candidate_outcomes.jsonl").read_text().splitlines()]
    return [(r["candidate_id"], tuple(r["change_keys"]), r["decided_by"], r["decision"]["verdict"]) for r in rows]


def test_all_llm_roles_run_end_to_end_and_replay_from_cache(tmp_path):
    with LoopbackLLMServer(scripted, models=("test-model", "judge-model")) as server:
        config = _config(tmp_path, server.base_url)
        first = Engine(config, track=False, progress=False).run()
        calls = server.request_count
        assert calls > 0
        kinds = {r["messages"][-1]["content"][:30] for r in server.requests}
        assert len(kinds) > 3  # several distinct roles were exercised

        # Same night again on a fresh stores dir but the same response cache: zero HTTP calls.
        replay_stores = tmp_path / "replay"
        replay_stores.mkdir()
        (replay_stores / "cache").symlink_to(config.stores / "cache")
        second = Engine(config.model_copy(update={"stores": replay_stores}), track=False, progress=False).run()
        assert server.request_count == calls
    assert _decisions(config.stores) == _decisions(replay_stores)
    assert first["current"]["accuracy"] == second["current"]["accuracy"]
    assert first["current"]["hash"] == second["current"]["hash"]
    planner_keys = {r[1] for r in _decisions(config.stores)}
    assert ("extraction.min_fact_tokens::decrease",) in planner_keys or ("answering.span::set:keywords",) in planner_keys


def test_same_model_for_planner_and_judge_is_refused(tmp_path):
    from evolve.llm import ConfigError

    roles = {r: {"backend": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "same"} for r in ("planner", "judge")}
    with pytest.raises(ConfigError, match="judge"):
        Engine(RunConfig(benchmark="synthetic:0", limit=10, stores=tmp_path / "s", roles=roles), track=False)
    assert not (tmp_path / "s").exists()  # refused before the stores were touched


@pytest.mark.parametrize("on_error", ["stop", "mark"])
def test_a_failing_role_stops_or_marks_questions(on_error, tmp_path):
    from evolve.benchmarks import load_benchmark
    from evolve.observe.harness import Harness
    from evolve.llm import LLMError, RolesConfig
    from evolve.loop.backends import build_backends
    from evolve.data import BASELINE_PATH
    from evolve.strategy.artifact import load_strategy

    with LoopbackLLMServer(scripted) as server:
        cfg = RolesConfig.from_sources({"answerer": {"backend": "llm", "base_url": server.base_url,
                                                     "model": "test-model", "max_retries": 0}}, env={})
        backends = build_backends(cfg, 0.5, tmp_path / "llm", on_error)
        roles, stats = backends.roles, backends.usage
        bench = load_benchmark("synthetic:0")
        ids = [q.id for q in bench.questions if q.category != "adversarial"][:4]
        server.fail_next("500", n=100)
        harness = Harness(bench, roles, progress=False)
        if on_error == "stop":
            with pytest.raises(LLMError, match="answerer"):
                harness.evaluate(load_strategy(BASELINE_PATH), ids)
            return
        run = harness.evaluate(load_strategy(BASELINE_PATH), ids)
    assert run.summary.role_failures == 4 and run.outcomes() == {}
    assert all(t.error["stage"] == "question" and "answerer" in t.error["message"] for t in run.traces)
    assert stats.to_dict()["llm.answerer.failures"] == 4
    assert not list((tmp_path / "llm").rglob("*.json"))  # nothing half-written to the response cache
