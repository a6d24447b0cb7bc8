"""Fact metadata and lifecycle masks on everyday phrasings: dates in the forms people write them (resolved against
the day they were said), retractions in their usual words, and questions that ask about what was withdrawn."""
from __future__ import annotations

from datetime import datetime

import pytest

from evolve.runtime.dates import event_time
from evolve.runtime.facts import annotate
from evolve.runtime.lifecycle import Cues
from evolve.runtime.text import classify_kind, retraction_topic
from test_lifecycle_policies import conversation, runtime, states

SAID = datetime(2025, 8, 27, 14, 30)  # a Wednesday


@pytest.mark.parametrize("body, expected", [
    ("ACA exam 2025-09-03", datetime(2025, 9, 3)),
    ("My flight at 6am tomorrow", datetime(2025, 8, 28, 6, 0)),
    ("The party is this Saturday", datetime(2025, 8, 30)),
    ("I need a hotel for March", datetime(2026, 3, 31)),  # a month alone: its last day, the next March
    ("The thesis deadline is in March 2026", datetime(2026, 3, 31)),
    ("We're moving next week", datetime(2025, 9, 3)),
    ("The package arrives in two days", datetime(2025, 8, 29)),
    ("Dinner with Nina at 7:30 pm on Friday", datetime(2025, 8, 29, 19, 30)),
    ("I have a dentist appointment on 5 September 2025", datetime(2025, 9, 5)),
    ("My interview is on September 12th", datetime(2025, 9, 12)),
    ("I went hiking last Saturday", datetime(2025, 8, 23)),
    ("I went to a concert on Saturday", datetime(2025, 8, 23)),  # past tense: the Saturday that has been
    ("We saw the doctor two weeks ago", datetime(2025, 8, 13)),
    ("See you this weekend", datetime(2025, 8, 30)),
])
def test_each_date_form_names_the_day_it_means(body, expected):
    assert event_time(body, SAID) == expected
    assert annotate(body, "Tomas", SAID).event_time == expected
    assert not annotate(body, "Tomas", SAID).numeric  # a date or a time of day is not a quantity


@pytest.mark.parametrize("body", ["I go running every Saturday", "I woke up at 6am", "I may go later",
                                  "My sister April visited", "I have 3 cats"])
def test_habits_bare_times_and_words_that_look_like_months_name_no_day(body):
    assert event_time(body, SAID) is None


def test_without_the_day_it_was_said_only_dates_with_a_year_resolve():
    assert event_time("ACA exam 2025-09-03", None) == datetime(2025, 9, 3)
    assert event_time("My flight is tomorrow", None) is None
    assert event_time("The party is this Saturday", None) is None


def test_numbers_stay_numeric_beside_dates():
    assert annotate("The new laptop cost me $1450 on 2025-08-01", "Tomas", SAID).numeric
    assert annotate("I have 3 cats since March 2020", "Tomas", SAID).numeric
    assert not annotate("ACA exam 2025-09-03 at 9:00", "Tomas", SAID).numeric


def test_a_relative_date_resolves_against_the_session_it_was_said_in():
    rt = runtime()
    conv = conversation((datetime(2025, 8, 27, 10), ["My flight to Lisbon is at 6am tomorrow."]))
    store = rt.ingest(conv)
    flight = next(i for i in store.items if i.layer == "L0" and "flight" in i.text)
    assert flight.meta.event_time == datetime(2025, 8, 28, 6, 0) and flight.meta.category == "logistics"
    assert not flight.meta.numeric
    assert flight.meta.to_dict()["event_time"] == "2025-08-28T06:00"


RETRACTIONS = ["We cancelled the Denver move.", "We scrapped the Denver move.", "We dropped the Denver move.",
               "Forget about the Denver move.", "The Denver move is dead.", "The Denver move got called off.",
               "We're no longer moving to Denver.", "I changed my mind about the Denver move."]


@pytest.mark.parametrize("retraction", RETRACTIONS)
def test_each_retraction_phrasing_retracts_the_plan_it_names(retraction):
    assert classify_kind(retraction) == "retraction"
    assert retraction_topic(retraction) == frozenset({"denver"})
    conv = conversation((datetime(2025, 3, 1, 10), ["We're moving to Denver in the spring.",
                                                    "I bought new hiking boots."]),
                        (datetime(2025, 3, 20, 10), [retraction]))
    rt = runtime()
    assert states(rt, conv, "Is Tomas moving to Denver?", "Denver in the spring") == {"retracted"}
    assert states(rt, conv, "What did Tomas buy?", "hiking boots") == {"active"}


def test_the_dog_thing_is_dead_retracts_the_latest_mention_of_the_dog():
    assert classify_kind("The dog thing is dead.") == "retraction"
    conv = conversation((datetime(2025, 3, 1, 10), ["My sister has a dog named Rex."]),
                        (datetime(2025, 3, 10, 10), ["We're thinking of getting a dog this summer."]),
                        (datetime(2025, 3, 20, 10), ["The dog thing is dead."]))
    rt = runtime()
    assert states(rt, conv, "Is Tomas getting a dog?", "getting a dog") == {"retracted"}
    assert states(rt, conv, "What is the name of the dog of Tomas's sister?", "Rex") == {"active"}


@pytest.mark.parametrize("sentence, kind", [
    ("I no longer work as a teacher; I work as a nurse now.", "correction"),  # a replacement follows
    ("I changed my mind, I prefer tea now.", "correction"),
    ("Should I cancel my gym membership?", "fact"),  # asked, not done
    ("I didn't cancel the trip.", "fact"),  # negated
    ("I dropped off the kids at school.", "fact"),
])
def test_phrasings_that_do_not_retract(sentence, kind):
    assert classify_kind(sentence) == kind


@pytest.mark.parametrize("question", ["What did Tomas cancel?", "What did Tomas change his mind about?",
                                      "Which plans did Tomas call off?", "What did Tomas retract?",
                                      "Which move did Tomas drop?"])
def test_retraction_questions_are_recognised(question):
    cues = Cues.of(question)
    assert cues.retracted and cues.back and not cues.current


def test_a_retraction_question_sees_the_retracted_fact_and_the_trace_says_why():
    conv = conversation((datetime(2025, 3, 1, 10), ["We're moving to Denver in the spring.",
                                                    "I bought new hiking boots."]),
                        (datetime(2025, 3, 20, 10), ["Forget about the Denver move."]))
    rt = runtime()
    store = rt.ingest(conv)
    for question in ("Which move did Tomas call off?", "What did Tomas change his mind about?"):
        result = rt.ask(store, question)
        hit = next(h for h in result.retrieved if store.item(h.id).layer != "L1"
                   and "Denver in the spring" in store.item(h.id).text)
        assert hit.to_dict()["fact"]["state"] == "active"
        assert hit.to_dict()["fact"]["shown_because"] == "retraction_question"
        assert hit.id not in {f["id"] for f in result.to_trace()["filtered"]}
    plain = rt.ask(store, "Where is Tomas moving?")
    hit = next(h for h in plain.retrieved if "Denver in the spring" in store.item(h.id).text
               and store.item(h.id).layer != "L1")
    assert hit.standing.state == "retracted" and "shown_because" not in hit.to_dict()["fact"]
    closed = runtime(lifecycle__bypass_cues=False)
    assert states(closed, conv, "Which move did Tomas call off?", "Denver in the spring") == {"retracted"}


def test_a_change_question_sees_the_superseded_value_and_the_trace_names_its_successor():
    conv = conversation((datetime(2025, 3, 1, 10), ["My favorite fruit is the sweet mango."]),
                        (datetime(2025, 3, 20, 10), ["My favorite fruit is the ripe banana."]))
    rt = runtime()
    store = rt.ingest(conv)
    hit = next(h for h in rt.ask(store, "What was Tomas's favorite fruit before he changed it?").retrieved
               if store.item(h.id).layer != "L1" and "mango" in store.item(h.id).text)
    fact = hit.to_dict()["fact"]
    assert fact["state"] == "active" and fact["shown_because"] == "change_question"
    assert "banana" in store.item(fact["by"]).text
