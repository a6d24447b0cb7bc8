"""Lifecycle layer on constructed facts: fact metadata, each mask (slot supersession and its bypass cues, soft
supersession, event-time expiry, retraction, numeric rescue), the per-category decay kernel, schema bounds, and
the planner moves the stale-evidence symptoms call for."""
from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from evolve.benchmarks.types import Conversation, Session, Turn
from evolve.data import BASELINE_PATH
from evolve.improve.digest import Symptom, digest
from evolve.improve.planner import load_bundles
from evolve.runtime import MemoryRuntime
from evolve.runtime.facts import EXPLICIT, PLAIN, TENTATIVE, annotate
from evolve.runtime.lifecycle import Cues, decay_multipliers
from evolve.runtime.store import day_number
from evolve.strategy.artifact import StrategyError, load_strategy, parse_strategy
from evolve.strategy.paths import set_path
from evolve.strategy.policy import FACT_CATEGORIES, Policy
from evolve.strategy.schema import evolvable_dimensions, load_schema

BASE_TEXT = BASELINE_PATH.read_text()


def conversation(*sessions: tuple[datetime, list[str]]) -> Conversation:
    """Tomas states each fact; Hugo acknowledges it."""
    built = []
    for n, (when, facts) in enumerate(sessions, start=1):
        turns = []
        for text in facts:
            turns += [("Tomas", text), ("Hugo", "Good to know.")]
        built.append(Session(f"S{n}", when, tuple(Turn(f"D{n}:{i}", who, text, f"S{n}", when)
                                                  for i, (who, text) in enumerate(turns, start=1))))
    return Conversation("c", ("Tomas", "Hugo"), tuple(built))


def runtime(**changes) -> MemoryRuntime:
    """The baseline runtime (keeping facts of two content words and more) with ``changes`` (``a__b=v``: ``a.b``)."""
    strategy = set_path(load_strategy(BASELINE_PATH), "extraction.min_fact_tokens", 2)
    for path, value in changes.items():
        strategy = set_path(strategy, path.replace("__", "."), value)
    return MemoryRuntime(strategy)


def states(rt: MemoryRuntime, conv: Conversation, question: str, fragment: str,
           asked_at: datetime | None = None) -> set[str]:
    """Lifecycle states of the retrieved facts (not session summaries) whose text contains ``fragment``."""
    store = rt.ingest(conv)
    result = rt.ask(store, question, asked_at)
    found = {h.standing.state for h in result.retrieved
             if store.item(h.id).layer != "L1" and fragment in store.item(h.id).text}
    assert found, f"no retrieved fact mentions {fragment!r}"
    return found


D1, D2, D3 = datetime(2023, 4, 20, 10), datetime(2023, 5, 25, 10), datetime(2023, 6, 10, 10)


def test_fact_metadata_is_read_from_the_text():
    old = annotate("I have a dentist appointment on 1 May 2023.", "Tomas")
    assert (old.category, old.slot, old.event_time) == ("logistics", "tomas|dentist appointment", datetime(2023, 5, 1))
    assert not old.numeric  # a date is not a number to preserve
    rent = annotate("Actually, my rent is $1300 a month now.", "Tomas")
    assert (rent.category, rent.slot, rent.confidence, rent.numeric) == ("financial", "tomas|rent", EXPLICIT, True)
    assert annotate("Nina moved to Porto last month.", "Tomas").slot == "nina|residence"
    assert annotate("I'm thinking about moving to Porto next year.", "Tomas").confidence == TENTATIVE
    assert annotate("My favorite fruit is mango.", "Tomas").confidence == PLAIN
    assert annotate("I just took up pottery as a new hobby.", "Tomas").slot is None  # hobbies accumulate
    assert Cues.of("What was Tomas's favorite fruit before banana?") == Cues(back=True, current=False)
    assert Cues.of("When did Tomas go to the dentist?") == Cues(back=False, current=False)
    assert Cues.of("What is Tomas's job?") == Cues(back=False, current=True)


FRUIT = conversation((D1, ["My favorite fruit is the sweet mango."]), (D2, ["My favorite fruit is the ripe banana."]))


def test_a_later_slot_value_supersedes_unless_the_question_asks_about_the_change():
    rt = runtime()
    assert states(rt, FRUIT, "What is Tomas's favorite fruit?", "mango") == {"superseded"}
    assert states(rt, FRUIT, "What is Tomas's favorite fruit?", "banana") == {"active"}
    assert "banana" in rt.ask(rt.ingest(FRUIT), "What is Tomas's favorite fruit?").answer.text
    assert states(rt, FRUIT, "What was Tomas's favorite fruit before banana?", "mango") == {"active"}
    assert states(runtime(lifecycle__bypass_cues=False), FRUIT, "What was Tomas's favorite fruit before banana?",
                  "mango") == {"superseded"}
    assert states(runtime(lifecycle__slots__enabled=False), FRUIT, "What is Tomas's favorite fruit?",
                  "mango") == {"active"}


def test_the_superseding_fact_is_named_in_the_trace():
    rt = runtime()
    store = rt.ingest(FRUIT)
    hit = next(h for h in rt.ask(store, "What is Tomas's favorite fruit?").retrieved
               if store.item(h.id).layer != "L1" and "mango" in store.item(h.id).text)
    fact = hit.to_dict()["fact"]
    assert fact["state"] == "superseded" and "banana" in store.item(fact["by"]).text
    assert hit.standing.reason == "slot_superseded"  # the filter tells it from an ingestion-time correction
    assert fact["category"] == "preferences" and fact["slot"] == "tomas|favorite fruit"


def test_a_tentative_statement_does_not_supersede_a_committed_one():
    conv = conversation((D1, ["I live in Lyon near the old town."]), (D2, ["I'm thinking about moving to Porto."]))
    assert states(runtime(), conv, "Which city does Tomas live in?", "Lyon") == {"active"}
    eager = runtime(lifecycle__slots__replace_confidence=0.45, lifecycle__slots__mode__identity="replace")
    assert states(eager, conv, "Which city does Tomas live in?", "Lyon") == {"superseded"}


APPOINTMENTS = conversation((D1, ["I have a dentist appointment on 1 May 2023."]),
                            (D2, ["I booked another dentist appointment for 20 June 2023."]))


def test_an_appointment_expires_after_its_day_plus_the_buffer_but_an_upcoming_one_does_not():
    rt = runtime(lifecycle__slots__enabled=False)  # expiry alone
    asked = "When is Tomas's next dentist appointment?"
    assert states(rt, APPOINTMENTS, asked, "1 May", datetime(2023, 6, 1)) == {"expired"}
    assert states(rt, APPOINTMENTS, asked, "20 June", datetime(2023, 6, 1)) == {"active"}
    assert rt.ask(rt.ingest(APPOINTMENTS), asked, datetime(2023, 6, 1)).answer.text == "20 June 2023"
    assert states(rt, APPOINTMENTS, asked, "1 May", datetime(2023, 5, 10)) == {"active"}  # within 14 days
    assert states(rt, APPOINTMENTS, "When did Tomas go to the dentist?", "1 May", datetime(2023, 6, 1)) == {"active"}
    patient = runtime(lifecycle__slots__enabled=False, lifecycle__expiry__buffer_days=40)
    assert states(patient, APPOINTMENTS, asked, "1 May", datetime(2023, 6, 1)) == {"active"}


def test_a_retracted_plan_is_hidden_and_a_yes_no_question_about_it_answered_no():
    conv = conversation((D1, ["I'm planning a trip to Iceland next summer."]),
                        (D2, ["Forget what I said about the trip to Iceland; that's not true anymore."]))
    rt = runtime()
    assert states(rt, conv, "Is Tomas planning a trip to Iceland?", "planning a trip") == {"retracted"}
    assert rt.ask(rt.ingest(conv), "Is Tomas planning a trip to Iceland?").answer.text == "No"
    assert states(runtime(lifecycle__forget_guard=False), conv, "Is Tomas planning a trip to Iceland?",
                  "planning a trip") == {"active"}


@pytest.mark.parametrize("retraction", ["We scrapped the kayak trip to Norway.", "The kayak trip to Norway is cancelled.",
                                        "Forget I mentioned the kayak trip to Norway."])
def test_retraction_cues_name_what_they_retract_before_or_after_the_cue(retraction):
    conv = conversation((D1, ["I'm planning a kayak trip to Norway in June.", "I bought new hiking boots."]),
                        (D2, [retraction]))
    rt = runtime()
    assert states(rt, conv, "Is Tomas planning a kayak trip to Norway?", "planning a kayak") == {"retracted"}
    assert states(rt, conv, "What did Tomas buy?", "hiking boots") == {"active"}


def test_a_numeric_fact_survives_a_later_statement_without_a_number_but_not_a_new_number():
    vague = conversation((D1, ["My rent is $1200 a month."]), (D2, ["My rent is a pain to pay every month."]))
    asked = "How much is Tomas's rent?"
    assert states(runtime(), vague, asked, "$1200") == {"active"}
    assert states(runtime(lifecycle__numeric_rescue__enabled=False), vague, asked, "$1200") == {"superseded"}
    raised = conversation((D1, ["My rent is $1200 a month."]), (D2, ["Actually, my rent is $1300 a month now."]))
    assert states(runtime(lifecycle__supersession=False), raised, asked, "$1200") == {"superseded"}


def test_a_numeric_fact_survives_a_correction_without_a_number_but_not_one_with_a_new_number():
    asked = "How many members does Tomas's book club have?"
    moved = conversation((D1, ["Our book club has 7 members."]),
                         (D2, ["Actually, the book club meeting moved to Monday."]))
    correction_only = {"lifecycle__slots__enabled": False}
    assert states(runtime(**correction_only), moved, asked, "7 members") == {"active"}
    assert states(runtime(**correction_only, lifecycle__numeric_rescue__enabled=False), moved, asked,
                  "7 members") == {"superseded"}
    grown = conversation((D1, ["Our book club has 7 members."]),
                         (D2, ["Actually, the book club has 9 members now."]))
    assert states(runtime(**correction_only), grown, asked, "7 members") == {"superseded"}


def test_decay_keeps_the_share_the_category_kernel_gives():
    conv = conversation((D1, ["I have a dentist appointment on 1 May 2023.", "I live in Lyon with my partner.",
                              "The new laptop cost me $1450."]), (D3, ["My favorite color is teal."]))
    rt = runtime(lifecycle__decay__enabled=True)
    store = rt.ingest(conv)
    lc = rt.policy.lifecycle
    ref = day_number(D3)
    keep = decay_multipliers(store, lc, ref)
    for i, item in enumerate(store.items):
        age = ref - day_number(item.timestamp)
        alpha, half_life, floor = (np.mean([values.of(c) for c in item.meta.members])  # soft membership
                                   for values in (lc.decay.alpha, lc.decay.half_life_days, lc.decay.floor))
        assert keep[i] == pytest.approx(max(1 - alpha * (1 - 0.5 ** (age / half_life)), floor))
    by_text = {store.items[i].text.split(": ", 1)[1]: keep[i] for i in range(len(store)) if store.items[i].layer == "L0"}
    # an appointment at the dentist is logistics and health: alpha, half-life and floor are their means
    assert by_text["I have a dentist appointment on 1 May 2023."] == pytest.approx(1 - 0.25 * (1 - 0.5 ** (51 / 8)))
    assert by_text["I live in Lyon with my partner."] >= 0.95
    assert by_text["My favorite color is teal."] == pytest.approx(1.0)
    off = runtime()
    assert np.all(decay_multipliers(store, off.policy.lifecycle, ref) == 1.0)


def test_decay_rescores_current_state_questions_only():
    conv = conversation((D1, ["I have a dentist appointment on 1 May 2023.", "My favorite color is red."]),
                        (D3, ["My favorite color is teal.", "I went to the dentist with my sister."]))
    on, off = runtime(lifecycle__decay__enabled=True), runtime()

    def ranking(rt: MemoryRuntime, question: str) -> list[tuple[str, float]]:
        return [(h.id, h.score) for h in rt.ask(rt.ingest(conv), question).retrieved]

    assert ranking(on, "What is Tomas's favorite color?") != ranking(off, "What is Tomas's favorite color?")
    assert ranking(on, "When did Tomas go to the dentist?") == ranking(off, "When did Tomas go to the dentist?")


def _error(text: str) -> StrategyError:
    with pytest.raises(StrategyError) as info:
        parse_strategy(text, "s.yaml")
    return info.value


@pytest.mark.parametrize("old, new, path, rule", [
    ("half_life_days: {identity: 19,", "half_life_days: {identity: 0,", "lifecycle.decay.half_life_days.identity",
     "minimum"),
    ("alpha: {identity: 0.1,", "alpha: {identity: 1.5,", "lifecycle.decay.alpha.identity", "maximum"),
    ("floor: {identity: 0.95,", "floor: {identity: 0.95, hobby: 0.5,", "lifecycle.decay.floor.hobby", "unknown field"),
    ("alpha: {identity: 0.1,", "alpha: {", "lifecycle.decay.alpha", "'identity' is a required property"),
    ("mode: {identity: accumulate,", "mode: {identity: sometimes,", "lifecycle.slots.mode.identity", "one of"),
])
def test_bad_lifecycle_fields_name_the_path_and_rule(old, new, path, rule):
    assert old in BASE_TEXT
    err = _error(BASE_TEXT.replace(old, new))
    assert err.path == path and rule in err.rule, (err.path, err.rule)
    assert err.line == next(i for i, line in enumerate(BASE_TEXT.splitlines(), 1) if old in line)


def test_every_per_category_map_covers_exactly_the_fact_categories():
    lifecycle = load_schema()["properties"]["lifecycle"]["properties"]
    maps = [lifecycle["decay"]["properties"][k] for k in ("half_life_days", "alpha", "floor")]
    maps.append(lifecycle["slots"]["properties"]["mode"])
    for node in maps:
        assert tuple(node["properties"]) == FACT_CATEGORIES and node["required"] == list(FACT_CATEGORIES)
    dims = evolvable_dimensions()
    assert dims["lifecycle.decay.half_life_days.logistics"].low == 0.5
    assert dims["lifecycle.slots.mode.identity"].choices == ("replace", "accumulate")
    assert Policy.from_strategy(load_strategy(BASELINE_PATH)).lifecycle.slots.threshold("identity") == 0.95


def _record(qid: str, category: str, stale_category: str | None) -> dict:
    packed = [{"id": "m1", "layer": "L0", "tokens": 9, "source_ids": ["D1:1"]}]
    fact = {"category": stale_category or "other", "slot": None, "state": "active", "by": None, "confidence": 0.9,
            "numeric": False, "event_time": None}
    return {"question_id": qid, "conversation_id": "c1", "category": category, "question": "?", "gold_answer": "a",
            "gold_evidence": ["D2:1"], "evidence_known": True, "intent": "single_hop", "subqueries": ["s"],
            "stored_ids": [], "retrieved": [{"id": "m1", "rank": 1, "score": 1.0, "source_ids": ["D1:1"],
                                             "channels": {}, "fact": fact}],
            "filtered": [], "dropped": [], "packed": packed, "context_tokens": 9, "token_budget": 160, "answer": "x",
            "answer_support": ["m1"], "judge": {}, "correct": False, "f1": 0.0,
            "evidence_recall": {"1": 0.0, "5": 0.0, "10": 0.0}, "root_cause": "generation_error", "stages": [],
            "scored": True, "gold_outdated": ["D1:1"], "stale_packed": ["D1:1"] if stale_category else []}


def test_stale_evidence_of_one_category_calls_for_that_categorys_lifecycle_moves():
    records = [_record("q1", "single_hop", "logistics"), _record("q2", "single_hop", "logistics"),
               _record("q3", "single_hop", None)]
    symptom = digest(records).symptom("generation_error/*")
    assert symptom.qualifiers["stale"] == pytest.approx(2 / 3)
    assert symptom.qualifiers["stale_logistics"] == pytest.approx(2 / 3)
    assert symptom.qualifiers["stale_identity"] == 0.0
    moves = [key for key, _, _ in load_bundles().lookup(symptom, 0.25)]
    assert moves.index("lifecycle.expiry.enabled::enable") < moves.index("answering.span::set:keywords")
    assert "lifecycle.decay.half_life_days.logistics::decrease" in moves
    assert "lifecycle.decay.half_life_days.identity::decrease" not in moves


def test_attack_vector_failures_call_for_the_rule_guarding_them():
    table = load_bundles()
    expired = Symptom("generation_error", "av2_expired_logistics", 3, 0.1, 0.25)
    assert [k for k, _, _ in table.lookup(expired, 0.25)][0] == "lifecycle.expiry.enabled::enable"
    numeric = Symptom("retrieval_gap", "av8_numeric", 3, 0.1, 0.25)
    assert [k for k, _, _ in table.lookup(numeric, 0.25)][0].startswith("lifecycle.numeric_rescue.enabled::enable")
