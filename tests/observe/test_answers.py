"""Answers by kind: correct, abstain (declining) or confabulated (a wrong assertion)."""
from __future__ import annotations

from evolve import BASELINE_PATH, Harness, load_benchmark, load_strategy
from evolve.observe.judge import answer_kind


def test_answer_kinds():
    assert answer_kind("Paris", True) == "correct"
    for declined in ("", "Not mentioned in the conversation.", "Unknown", "I don't know", "  none "):
        assert answer_kind(declined, False) == "abstain", declined
    assert answer_kind("Lyon", False) == "confabulated"
    assert answer_kind("not mentioned, but probably Lyon", False) == "confabulated"


def test_summaries_count_every_scored_answer_once():
    harness = Harness(load_benchmark("lifecycle:0:2"), progress=False)
    run = harness.evaluate(load_strategy(BASELINE_PATH))
    assert sum(run.summary.answers.values()) == run.summary.n_scored
    assert run.summary.answers["correct"] == sum(t.correct for t in run.traces if t.scored)
    context_only = harness.evaluate(load_strategy(BASELINE_PATH), answer=False)
    assert context_only.summary.answers == {} and all(t.answer_kind is None for t in context_only.traces)
