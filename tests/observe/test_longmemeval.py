"""LongMemEval end to end on a small file of the public ``longmemeval_s_cleaned.json`` shape: question types as
categories, abstention questions scored (declining is correct), turn- and session-level recall_any / recall_all."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

import pytest

from evolve.benchmarks import LONGMEMEVAL_CATEGORIES, load_benchmark
from evolve.observe.evaluator import Roles
from evolve.observe.harness import Harness
from evolve.observe.judge import first_seen, recall_any_all
from evolve.observe.trace import RECALL_KS
from evolve.runtime.roles import AnswerResult, ContextItem
from evolve.strategy.policy import Answering

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from make_longmemeval_s import PATH, build  # noqa: E402

SPEC = f"longmemeval:{PATH}"
FIELDS = ["question_id", "question_type", "question", "answer", "question_date", "haystack_session_ids",
          "haystack_dates", "haystack_sessions", "answer_session_ids"]


class Declining:
    """An answerer that never answers."""

    name = "declining"

    def answer(self, question: str, context: Sequence[ContextItem], policy: Answering, intent: str) -> AnswerResult:
        return AnswerResult("I don't know")


class Asserting:
    """An answerer that always names the same thing."""

    name = "asserting"

    def answer(self, question: str, context: Sequence[ContextItem], policy: Answering, intent: str) -> AnswerResult:
        return AnswerResult("Biscuit")


def test_the_fixture_is_generated_in_the_public_files_shape():
    items = json.loads(PATH.read_text())
    assert items == build()  # regenerate with: python tests/fixtures/make_longmemeval_s.py
    assert all(list(item) == FIELDS for item in items)
    assert {item["question_type"] for item in items} == {c.replace("_", "-") for c in LONGMEMEVAL_CATEGORIES}
    for item in items:
        flagged = [sid for sid, turns in zip(item["haystack_session_ids"], item["haystack_sessions"])
                   if any(t.get("has_answer") for t in turns)]
        assert flagged == item["answer_session_ids"]
        assert all(set(t) <= {"role", "content", "has_answer"} for s in item["haystack_sessions"] for t in s)


@pytest.fixture(scope="module")
def run():
    bench = load_benchmark(SPEC)
    harness = Harness(bench, progress=False)
    from evolve.data import BASELINE_PATH
    from evolve.strategy.artifact import load_strategy

    return bench, harness.evaluate(load_strategy(BASELINE_PATH))


def test_question_types_are_categories_and_abstention_questions_are_scored(run, tmp_path):
    bench, result = run
    summary = result.summary
    assert summary.n_by_category == {"knowledge_update": 2, "multi_session": 1, "single_session_assistant": 1,
                                     "single_session_preference": 1, "single_session_user": 2,
                                     "temporal_reasoning": 1}
    assert summary.n_scored == len(bench.questions) == 8  # abstention questions are no longer left unscored
    abstaining = [t for t in result.traces if t.abstention]
    assert sorted(t.question_id for t in abstaining) == ["lme_ku_2_abs", "lme_ssu_2_abs"]
    assert summary.abstention == {"n": 2, "correct": sum(t.correct for t in abstaining),
                                  "accuracy": round(sum(t.correct for t in abstaining) / 2, 4)}
    written = json.loads((result.write(tmp_path) / "summary.json").read_text())
    assert written["abstention"] == summary.abstention and written["retrieval_recall"] == summary.retrieval_recall
    assert set(written["accuracy_by_category"]) == set(LONGMEMEVAL_CATEGORIES)


def test_turn_and_session_recall_any_and_all(run):
    bench, result = run
    recall = result.summary.retrieval_recall
    measured = [t for t in result.traces if t.retrieval_recall]
    assert recall["n"] == len(measured) == 6  # abstention questions are not measured
    names = {f"recall_{kind}@{k}" for kind in ("any", "all") for k in RECALL_KS}
    assert set(recall["turn"]) == set(recall["session"]) == names
    session_of = {t.id: t.session_id for c in bench.conversations.values() for t in c.turns()}
    for trace in measured:  # each figure from the trace's retrieved sources, recomputed here
        sources = [hit["source_ids"] for hit in trace.retrieved]
        turns, sessions = first_seen(sources), first_seen(sources, session_of.__getitem__)
        gold_sessions = {session_of[t] for t in trace.gold_evidence}
        for k in RECALL_KS:
            assert recall_any_all(trace.gold_evidence, turns, k) == (
                trace.retrieval_recall["turn"][f"recall_any@{k}"], trace.retrieval_recall["turn"][f"recall_all@{k}"])
            assert recall_any_all(gold_sessions, sessions, k) == (
                trace.retrieval_recall["session"][f"recall_any@{k}"],
                trace.retrieval_recall["session"][f"recall_all@{k}"])
    for level in ("turn", "session"):
        for k in RECALL_KS:
            assert recall[level][f"recall_all@{k}"] <= recall[level][f"recall_any@{k}"]
            assert recall[level][f"recall_any@{k}"] == round(
                sum(t.retrieval_recall[level][f"recall_any@{k}"] for t in measured) / len(measured), 4)
    # one gold session in a three-session haystack, stated in words the question shares: found first
    single = next(t for t in measured if t.question_id == "lme_ssu_1")
    assert single.retrieval_recall["session"]["recall_any@1"] == 1.0
    assert result.summary.metrics()["session_recall_any_at_5"] == recall["session"]["recall_any@5"]


def test_recall_any_and_all_differ_when_the_gold_spans_several_units():
    ranked = ["S1", "S3", "S2"]
    assert recall_any_all({"S1", "S2"}, ranked, 1) == (1.0, 0.0)
    assert recall_any_all({"S1", "S2"}, ranked, 3) == (1.0, 1.0)
    assert recall_any_all({"S4"}, ranked, 3) == (0.0, 0.0)
    assert first_seen([("S1:1", "S1:2"), ("S3:1",), ("S1:2",)], lambda t: t.split(":")[0]) == ["S1", "S3"]


def test_an_abstaining_answer_is_correct_only_on_abstention_questions():
    bench = load_benchmark(SPEC)
    from evolve.data import BASELINE_PATH
    from evolve.strategy.artifact import load_strategy

    strategy = load_strategy(BASELINE_PATH)
    declined = Harness(bench, Roles(answerer=Declining()), progress=False).evaluate(strategy)
    assert {t.question_id for t in declined.traces if t.correct} == {"lme_ku_2_abs", "lme_ssu_2_abs"}
    assert all(t.verdict == "correct" and not t.confabulated for t in declined.traces if t.abstention)
    assert declined.summary.abstention == {"n": 2, "correct": 2, "accuracy": 1.0}
    asserted = Harness(bench, Roles(answerer=Asserting()), progress=False).evaluate(strategy)
    assert asserted.summary.abstention == {"n": 2, "correct": 0, "accuracy": 0.0}
    for t in (t for t in asserted.traces if t.abstention):  # flagged when the packed context never names it
        invented = "biscuit" not in " ".join(p["text"] for p in t.packed).lower()
        assert t.verdict == "wrong" and t.confabulated == invented
