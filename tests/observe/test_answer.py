"""The answer-bearing-context check: content words, answer in evidence / anywhere, the summary, the loss ladder."""
from __future__ import annotations

import pytest

from evolve.observe.answer import answer_check, content_words
from evolve.observe.diagnosis import answer_loss
from evolve.observe.ladder import ANSWER_LOSSES, ROOT_CAUSES
from evolve.observe.objective import failure_view, outcomes, score, success
from evolve.observe.trace import Trace


def item(text: str, *sources: str) -> dict:
    return {"id": f"x{len(text)}", "text": text, "source_ids": list(sources)}


@pytest.mark.parametrize("text, words", [
    ("Caroline's dog", {"caroline", "dog"}),
    ("1,000 dollars", {"1000", "dollars"}),
    ("twenty-five", {"25"}),
    ("Three kids", {"3", "kids"}),
    ("one hundred", {"1", "100"}),
    ("the 7th of Sept. 2023", {"7", "september", "2023"}),
    ("the seventh of september", {"7", "september"}),
    ("the twenty-first", {"21"}),
    ("1st, 2nd and 3rd", {"1", "2", "3"}),
    ("It may rain in Aug", {"may", "rain", "august"}),
    ("Yes, she did that", set()),
])
def test_content_words_normalise_numbers_dates_and_possessives(text, words):
    assert content_words(text) == words


def test_answer_in_an_evidence_item():
    packed = [item("(8 May 2023) Caroline: I went to the LGBTQ support group yesterday", "D1:3"),
               item("Melanie likes painting", "D1:5")]
    assert answer_check("LGBTQ support group", ["D1:3"], packed) == (True, True)


def test_answer_only_in_an_unrelated_item_is_anywhere_but_not_in_evidence():
    packed = [item("Caroline talked about her week", "D1:3"), item("Caroline joined a LGBTQ support group", "D2:1")]
    assert answer_check("LGBTQ support group", ["D1:3"], packed) == (False, True)
    assert answer_check("LGBTQ support group", ["D1:3"], packed[:1]) == (False, False)


def test_answer_split_across_two_evidence_items_counts():
    packed = [item("Caroline adopted a kitten called Luna", "D1:1"), item("the kitten is grey and shy", "D4:2")]
    assert answer_check("a grey kitten, Luna", ["D1:1", "D4:2"], packed) == (True, True)
    assert answer_check("a grey kitten, Luna", ["D1:1"], packed) == (False, True)  # grey only outside evidence


def test_answer_without_a_content_word_or_without_evidence_is_left_out():
    packed = [item("Caroline said yes", "D1:1")]
    assert answer_check("Yes", ["D1:1"], packed) == (None, None)
    assert answer_check("Luna", [], packed) == (None, None)


def test_numbers_and_dates_match_across_forms():
    packed = [item("[7 May 2023] Melanie: we ran the twenty-five km charity race, raised 1,000 dollars", "D3:4")]
    assert answer_check("25", ["D3:4"], packed) == (True, True)
    assert answer_check("1000 dollars", ["D3:4"], packed) == (True, True)
    assert answer_check("The seventh of May, 2023", ["D3:4"], packed) == (True, True)
    assert answer_check("8 May 2023", ["D3:4"], packed) == (False, False)
    assert answer_check("7 June 2023", ["D3:4"], packed) == (False, False)


def trace(qid: str, category: str, in_evidence: bool | None, anywhere: bool | None = None,
          loss: str | None = None, **kw) -> Trace:
    return Trace(qid, category, evidence_known=in_evidence is not None, answer_in_evidence=in_evidence,
                 answer_anywhere=anywhere if anywhere is not None else in_evidence, answer_loss=loss, **kw)


def test_answer_objective_outcomes_score_and_failure_view():
    ts = [trace("a", "temporal", True), trace("b", "temporal", False, False, "not_retrieved"),
          trace("c", "single_hop", None), trace("d", "single_hop", True, scored=False),
          trace("e", "multi_hop", False, True, "packed_not_from_evidence", correct=True)]
    assert success(ts[0], "answer") is True and success(ts[2], "answer") is None and success(ts[3], "answer") is None
    assert outcomes(ts, "answer") == {"a": {"correct": True, "category": "temporal"},
                                      "b": {"correct": False, "category": "temporal"},
                                      "e": {"correct": False, "category": "multi_hop"}}
    view = {t.question_id: t for t in failure_view(ts, "answer")}
    assert view["a"].correct and view["a"].root_cause is None
    assert not view["b"].correct and view["b"].root_cause == "retrieval_gap"
    assert not view["e"].correct and view["e"].root_cause == "generation_error"  # the judge's verdict is not used
    assert not view["c"].scored
    assert set(ANSWER_LOSSES.values()) <= set(ROOT_CAUSES)


@pytest.mark.parametrize("stored, retrieved, anywhere, expected", [
    ([], [], False, "never_stored"),
    (["Caroline went to a support group"], [], False, "never_stored"),  # stored, but without the answer's words
    (["[8 May 2023] Caroline: went to the LGBTQ support group"], [], False, "not_retrieved"),
    (["[8 May 2023] Caroline: went to the LGBTQ support group"],
     ["[8 May 2023] Caroline: went to the LGBTQ support group"], False, "cut_in_assembly"),
    (["Caroline: the LGBTQ group", "she found support there"], ["Caroline: the LGBTQ group"], False, "not_retrieved"),
    ([], [], True, "packed_not_from_evidence"),
])
def test_a_lost_answer_is_placed_on_the_ladder(stored, retrieved, anywhere, expected):
    assert answer_loss("LGBTQ support group", stored, retrieved, anywhere) == expected


@pytest.mark.parametrize("cited_gold, anywhere, expected", [
    (["Caroline: I went to the LGBTQ support group yesterday. It was powerful."], False, "words_cut"),
    (["Caroline: I went to the LGBTQ support group yesterday. It was powerful."], True, "words_cut"),
    (["Caroline: I went to a group yesterday."], False, "cut_in_assembly"),  # the turns lack a word: no cut
    ([], False, "cut_in_assembly"),  # a gold turn not cited
])
def test_words_cut_is_judged_by_the_words_the_cited_gold_turns_carry(cited_gold, anywhere, expected):
    stored = retrieved = ["[8 May 2023] Caroline: went to the LGBTQ support group"]
    assert answer_loss("LGBTQ support group", stored, retrieved, anywhere, cited_gold) == expected


@pytest.fixture(scope="module")
def synthetic_run():
    from evolve import BASELINE_PATH, Harness, load_benchmark, load_strategy

    return Harness(load_benchmark("synthetic:0:2")).evaluate(load_strategy(BASELINE_PATH))


def test_summary_reports_the_answer_check_overall_per_category_and_left_out(synthetic_run):
    run = synthetic_run
    m = run.summary
    scored = [t for t in run.traces if t.scored]
    counted = [t for t in scored if t.answer_in_evidence is not None]
    assert m.n_answer_known == len(counted) > 0
    assert m.n_answer_known + sum(m.answer_left_out.values()) == m.n_scored
    assert m.answer_left_out["no_evidence"] == m.n_scored - m.n_evidence_known
    assert m.answer_in_evidence == pytest.approx(sum(t.answer_in_evidence for t in counted) / len(counted), abs=1e-4)
    assert m.answer_anywhere == pytest.approx(sum(t.answer_anywhere for t in counted) / len(counted), abs=1e-4)
    assert 0 < m.answer_in_evidence <= m.answer_anywhere < 1
    assert score(m, "answer") == m.answer_in_evidence
    for cat, rate in m.answer_in_evidence_by_category.items():
        ts = [t for t in counted if t.category == cat]
        assert rate == pytest.approx(sum(t.answer_in_evidence for t in ts) / len(ts), abs=1e-4)
        assert rate <= m.answer_anywhere_by_category[cat]
    for t in counted:  # recheckable from the trace alone
        assert (t.answer_in_evidence, t.answer_anywhere) == answer_check(t.gold_answer, t.gold_evidence, t.packed)
        assert (t.answer_loss is None) == t.answer_in_evidence
        assert t.answer_loss is None or t.answer_loss in ANSWER_LOSSES
    assert {t.answer_loss for t in counted} - {None}, "some answer is lost on the synthetic benchmark"
    assert {"n_answer_known", "answer_in_evidence", "answer_left_out"} <= set(m.brief())
    assert m.metrics()["answer_in_evidence"] == m.answer_in_evidence


def test_cut_in_assembly_is_where_a_tight_budget_loses_the_answer():
    from evolve import BASELINE_PATH, Harness, load_benchmark, load_strategy
    from evolve.strategy.artifact import derive

    bench = load_benchmark("synthetic:0:2")
    harness = Harness(bench)
    base = harness.evaluate(load_strategy(BASELINE_PATH))
    tight = harness.evaluate(derive(load_strategy(BASELINE_PATH), {"assembly.token_budget": 40}))
    before = base.by_id()
    moved = [t for t in tight.traces if t.answer_loss == "cut_in_assembly"
             and before[t.question_id].answer_in_evidence]
    assert moved, "a tighter budget cuts answers the baseline packed from evidence"
    assert tight.summary.answer_in_evidence < base.summary.answer_in_evidence


def test_a_fact_that_lost_the_answer_words_its_turn_carries_is_words_cut_not_never_stored():
    """A gold turn's stored fact can bring the turn itself into the context (assembly.unit: turn, or
    assembly.fact_unit), so an answer its cited turn carries was cut by the unit packed, not lost at ingestion; the
    diagnosis names it ``words_cut``, and packing the fact's turn or its span brings the answer."""
    from datetime import datetime

    from evolve import BASELINE_PATH, Harness, load_strategy
    from evolve.benchmarks.types import Benchmark, Conversation, Question, Session, Turn
    from evolve.strategy.artifact import derive

    day = datetime(2023, 5, 8, 10, 0)
    turns = (Turn("D1:1", "Ann", "We adopted a golden retriever puppy from the animal shelter downtown. Five years!",
                  "S1", day),
             Turn("D1:2", "Bob", "My sister paints watercolor landscapes near the lake every weekend.", "S1", day))
    later = datetime(2023, 6, 1, 10, 0)  # the latest session's turns are stored whole (SM): not these
    last = (Turn("D2:1", "Bob", "The new bakery on Main Street sells excellent sourdough bread.", "S2", later),)
    sessions = (Session("S1", day, turns), Session("S2", later, last))
    bench = Benchmark("constructed", {"c1": Conversation("c1", ("Ann", "Bob"), sessions)},
                      [Question("c1/q0", "c1", "How long ago did Ann adopt the golden retriever puppy from the "
                                "shelter?", "five years", "single_hop", ("D1:1",))])
    trace = Harness(bench).evaluate(load_strategy(BASELINE_PATH)).traces[0]
    assert any("D1:1" in p["source_ids"] for p in trace.packed)  # the fact was packed, without "five years"
    assert trace.answer_in_evidence is False and trace.answer_loss == "words_cut"
    assert failure_view([trace], "answer")[0].root_cause == "kf_filtered"
    from evolve.improve.digest import digest
    cut = digest(failure_view([trace], "answer")).symptom("kf_filtered/*")
    assert cut.qualifiers["words_cut"] == 1.0 and cut.qualifiers["answer_cut"] == 0.0
    for changes in ({"assembly.unit": "turn"}, {"assembly.fact_unit": "turn"}, {"assembly.fact_unit": "span"}):
        fixed = Harness(bench).evaluate(derive(load_strategy(BASELINE_PATH), changes)).traces[0]
        assert fixed.answer_in_evidence, changes


def test_an_answer_packed_not_from_evidence_aims_the_planner_at_evidence_moves_only_under_the_answer_objective():
    from evolve.improve.digest import digest
    from evolve.improve.planner import load_bundles

    gold_item = {"id": "m1", "text": "Caroline talked about her week", "source_ids": ["D1:3"], "layer": "L0"}
    ts = [trace(f"q{i}", "single_hop", False, True, "packed_not_from_evidence", gold_evidence=["D1:3"],
                packed=[gold_item], answer_support=["m1"], f1=0.0, root_cause="generation_error")
          for i in range(3)]
    answer = digest(failure_view(ts, "answer")).symptom("generation_error/*")
    assert answer.qualifiers["not_from_evidence"] == 1.0
    accuracy = digest(failure_view(ts, "accuracy")).symptom("generation_error/*")
    assert accuracy.qualifiers["not_from_evidence"] == 0.0  # accuracy decisions do not see the answer ladder
    keys = [key for key, _, table_key in load_bundles().lookup(answer, 0.3)]
    assert keys[:5] == ["assembly.fact_unit::set:turn", "assembly.unit::set:turn",
                        "assembly.unit::set:turn&features.turn_context::decrease", "assembly.replies::increase",
                        "assembly.source_window::increase"] and "answering.span::set:keywords" in keys
    assert keys.index("features.raw_dialogue_backfill::enable") < keys.index("answering.span::set:keywords")
