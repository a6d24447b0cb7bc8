"""The runtime and advisor roles against a real engine: llama.cpp's OpenAI-compatible server
(``llama-cpp-python[server]``) with the packaged SmolLM2-135M-Instruct model, on loopback (``local_llm``, from
``conftest.py``). Skipped, with the reason, when the local-llm extra is missing."""
from __future__ import annotations

import json

import pytest

from evolve.llm import LLMAnswerer, LLMExpander, LLMExtractor, LLMJudge, LLMPlanner, UsageStats
from evolve.llm.roles import ANSWER_STOP, JUDGE_LABELS, JUDGE_SCHEMA, answer_tokens
from evolve.strategy.schema import evolvable_dimensions
from local_model import CONTEXT, POLICY, QUESTIONS, WINDOW, client, entries

pytestmark = pytest.mark.heavy


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
    # The retrieval paths only: a far shorter prompt and grammar than all paths', constraining the reply the same way.
    retrieval = {path: dim for path, dim in evolvable_dimensions().items() if path.startswith("retrieval.")}
    result = planner.plan({"retrieval_gap/single_hop": 12}, {"retrieval.top_k::increase": 0.4}, retrieval,
                          max_proposals=1)
    [entry] = entries(tmp_path, "planner")
    proposals = json.loads(entry["content"])  # whatever the model meant, the grammar made it a valid reply shape
    assert isinstance(proposals, list) and len(proposals) == 1
    assert set(proposals[0]) >= {"path", "direction", "why"}
    assert result.attempts == 1 and len(result.proposals) + len(result.dropped_reasons) == 1
