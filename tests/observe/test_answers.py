"""Judged answers: the four verdicts, the confabulation flag against the packed context, the summaries' counts and
both confabulation denominators, and traces written before verdicts."""
from __future__ import annotations

import json

import pytest

from evolve import BASELINE_PATH, Harness, load_benchmark, load_strategy
from evolve.observe.judge import SUPPORT_FLOOR, TokenF1Judge, confabulated, support
from evolve.observe.trace import Trace, TraceError
from evolve.verify.confabulation import confabulation_brief, confabulations, flagged

JUDGE = TokenF1Judge(0.5)
CONTEXT = ["Melanie went camping with her kids at the lake in June 2023.",
           "Caroline works as a counselor and paints sunsets."]
QUESTION = "Where did Melanie go camping?"


@pytest.mark.parametrize("answer, verdict", [
    ("at the lake", "correct"),
    ("the lake near the mountains", "correct"),
    ("a lake house in Ohio", "partial"),
    ("in the desert", "wrong"),
    ("I'm not sure.", "abstain"),
    ("The memory does not mention this.", "abstain"),
    ("not mentioned, but probably the desert", "wrong"),
])
def test_four_verdicts(answer, verdict):
    judged = JUDGE.judge(QUESTION, "the lake", answer)
    assert judged.verdict == verdict and judged.correct == (verdict == "correct")


def test_the_flag_is_set_on_wrong_or_partial_answers_the_context_does_not_support():
    invented = support("In the Sahara desert with Jon", QUESTION, CONTEXT)
    picked = support("With her kids in June", QUESTION, CONTEXT)  # wrong pick from the context
    assert invented == 0.0 and picked == 1.0
    assert confabulated("wrong", invented) and confabulated("partial", invented)
    assert not confabulated("wrong", picked)
    assert not confabulated("correct", invented) and not confabulated("abstain", invented)
    # words of the question are not asserted, and suffixes are compared stemmed
    assert support("Melanie camped", QUESTION, CONTEXT) is None
    assert support("camps at lakes", "Where?", CONTEXT) == 1.0
    half = support("the lake in Peru", QUESTION, CONTEXT)  # lake held, peru not
    assert half == 0.5 and not confabulated("wrong", half) and half >= SUPPORT_FLOOR


def test_summaries_count_verdicts_and_both_denominators():
    harness = Harness(load_benchmark("lifecycle:0:2"), progress=False)
    run = harness.evaluate(load_strategy(BASELINE_PATH))
    answers, confab = run.summary.answers, run.summary.confabulation
    scored = [t for t in run.traces if t.scored]
    assert set(answers) == {"correct", "partial", "wrong", "abstain"} and sum(answers.values()) == len(scored)
    assert answers["correct"] == sum(t.correct for t in scored)
    assert confab["flagged"] == sum(bool(t.confabulated) for t in scored) and confab["answers"] == len(scored)
    assert confab["non_abstentions"] == len(scored) - answers["abstain"]
    assert confab["over_answers"] == round(confab["flagged"] / len(scored), 4)
    assert flagged(run.summary.brief()) == confab["flagged"]
    assert all(t.confabulated == confabulated(t.verdict, t.support) for t in scored)
    assert set(confabulations(run.traces)) == {t.question_id for t in scored}
    context_only = harness.evaluate(load_strategy(BASELINE_PATH), answer=False)
    assert context_only.summary.answers == {} and context_only.summary.confabulation == {}
    assert all(t.verdict is None and t.confabulated is None for t in context_only.traces)


def test_traces_written_before_verdicts_still_load():
    old = {"question_id": "q1", "category": "temporal", "correct": False, "answer": "Lyon",
           "answer_kind": "confabulated"}
    trace = Trace.from_dict(json.loads(json.dumps(old)))
    assert (trace.verdict, trace.confabulated) == ("wrong", None)
    assert Trace.from_dict({**old, "answer_kind": "abstain"}).verdict == "abstain"
    assert confabulations([trace]) == {}  # an unchecked flag is left out of the guard
    with pytest.raises(TraceError, match="'answer_kind' is 'maybe'"):
        Trace.from_dict({**old, "answer_kind": "maybe"})
    assert flagged({"answers": {"correct": 33, "confabulated": 37}}) == 37  # a summary written before the flag
    assert flagged({"answers": {}}) is None


def test_the_guard_pairs_the_flag_not_wrongness():
    """A candidate whose extra wrong answers come from the context leaves the guard flat; invented ones raise it."""
    def traces(wrong: int, flagged_: int) -> list[Trace]:
        return [Trace(f"q{i}", "single_hop", correct=i >= wrong, verdict="correct" if i >= wrong else "wrong",
                      confabulated=i < flagged_) for i in range(40)]

    picked = confabulation_brief(traces(2, 0), traces(20, 0), alpha=0.05, n_resamples=200, seed=0)
    invented = confabulation_brief(traces(2, 0), traces(20, 20), alpha=0.05, n_resamples=200, seed=0)
    assert picked.delta == 0 and not picked.rises(0.05)
    assert invented.delta == 0.5 and invented.rises(0.05)
