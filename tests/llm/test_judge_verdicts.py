"""The LLM judge's four-way verdict and LongMemEval's per-type criteria, against the loopback server."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from evolve.benchmarks import load_benchmark
from evolve.data import BASELINE_PATH
from evolve.llm.cache import ResponseCache
from evolve.llm.client import LLMClient
from evolve.llm.config import RoleConfig
from evolve.llm.roles import LLMJudge
from evolve.observe.evaluator import Roles
from evolve.observe.harness import Harness
from evolve.runtime.usage import UsageStats
from evolve.strategy.artifact import load_strategy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from make_longmemeval_s import PATH  # noqa: E402

#: What each criteria prompt says that no other does, and the reference it names.
MARKERS = {"temporal_reasoning": ("off-by-one", "CORRECT ANSWER"),
           "knowledge_update": ("updated answer", "CORRECT ANSWER"),
           "single_session_preference": ("rubric", "RUBRIC"),
           "single_session_user": ("intermediate step", "CORRECT ANSWER"),
           "single_session_assistant": ("intermediate step", "CORRECT ANSWER"),
           "multi_session": ("intermediate step", "CORRECT ANSWER"),
           "abstention": ("identifies the question as unanswerable", "EXPLANATION")}


def judge(server, tmp_path: Path, votes: int = 3) -> LLMJudge:
    cfg = RoleConfig(backend="llm", base_url=server.base_url, model="test-model", timeout_s=5, max_retries=0)
    return LLMJudge(LLMClient(cfg, ResponseCache(tmp_path / "cache"), UsageStats(), role="judge"), votes=votes)


def prompt_of(body: dict) -> str:
    return body["messages"][-1]["content"]


@pytest.mark.parametrize("labels, verdict", [
    (["CORRECT", "CORRECT", "WRONG"], "correct"),
    (["PARTIAL", "PARTIAL", "CORRECT"], "partial"),
    (["ABSTAIN", "WRONG", "ABSTAIN"], "abstain"),
    (["CORRECT", "PARTIAL", "WRONG"], "wrong"),       # a tie among the others goes to WRONG
    (["not json", "PARTIAL", "partial"], "partial"),  # labels read case-blind, from prose too
])
def test_votes_give_one_of_four_verdicts(llm_server, tmp_path, labels, verdict):
    llm_server.responder = lambda body: (json.dumps({"reasoning": "r", "label": labels[body["seed"]]})
                                         if body["seed"] else labels[0])
    judged = judge(llm_server, tmp_path).judge("Where did Melanie camp?", "the lake", "the lake and the sea")
    assert judged.verdict == verdict and judged.correct == (verdict == "correct")
    assert judged.votes == tuple(label == "CORRECT" for label in labels)
    assert "GOLD ANSWER: the lake" in prompt_of(llm_server.requests[0])  # LoCoMo's criteria by default
    assert "PARTIAL" in prompt_of(llm_server.requests[0])


def test_longmemeval_questions_reach_the_server_with_their_types_criteria(llm_server, tmp_path):
    """Each question's prompt carries its type's criteria (abstention questions: the unanswerable criteria), and
    the verdicts the server gives land in the traces and the summary."""
    def responder(body: dict) -> str:
        label = "ABSTAIN" if "EXPLANATION:" not in prompt_of(body) and "podcast" in prompt_of(body) else "PARTIAL"
        return json.dumps({"reasoning": "scripted", "label": label})

    llm_server.responder = responder
    bench = load_benchmark(f"longmemeval:{PATH}")
    run = Harness(bench, Roles(judge=judge(llm_server, tmp_path, votes=1)), progress=False).evaluate(
        load_strategy(BASELINE_PATH))
    prompts = {re.search(r"QUESTION: (.*)", prompt_of(b)).group(1): prompt_of(b) for b in llm_server.requests}
    assert len(prompts) == len(bench.questions)
    for q in bench.questions:
        marker, reference = MARKERS["abstention" if q.abstention else q.category]
        prompt = prompts[q.question]
        assert marker in prompt and f"{reference}: {q.answer}" in prompt, (q.id, prompt)
        others = {m for m, _ in MARKERS.values() if m not in (marker, "intermediate step")}  # the distinctive ones
        assert not any(m in prompt for m in others), (q.id, prompt)
    verdicts = {t.question_id: t.verdict for t in run.traces}
    assert verdicts["lme_ssp_1"] == "abstain" and verdicts["lme_ku_1"] == "partial"
    assert run.summary.judge == "llm-judge.v2/test-model"
    assert sum(run.summary.answers.values()) == len(bench.questions)
