"""Probes that know the lifecycle: asked at a session where their answer holds, and the probes of each change the
reference lifecycle reads (a slot's new value, its value before, a retraction)."""
from __future__ import annotations

from datetime import datetime

from evolve.benchmarks.probe_base import Probe
from evolve.benchmarks.probe_time import LifecycleEvent, event_probes, place
from evolve.benchmarks.probes import ProbeSettings, probe_questions
from evolve.benchmarks.types import Benchmark, Conversation
from evolve.runtime.reference import ReferenceLifecycle
from test_lifecycle_policies import conversation, runtime

D = [datetime(2023, 4, 20, 10), datetime(2023, 5, 2, 10), datetime(2023, 5, 25, 10), datetime(2023, 6, 10, 10)]


def _conversation(*sessions: list[str]) -> Conversation:
    return conversation(*zip(D, sessions))


FRUIT = _conversation(["My favorite fruit is the sweet mango."], ["We watched a long film about trains."],
                      ["My favorite fruit is the ripe banana."], ["The weather was grey all week."])


def test_the_reference_lifecycle_reads_a_later_value_of_a_slot():
    events = ReferenceLifecycle().events(FRUIT)
    assert [(e.state, e.old, e.new, e.slot) for e in events] == [("superseded", "D1:1", "D3:1", "tomas|favorite fruit")]
    assert events[0].stales("sweet mango") and not events[0].stales("ripe banana")


def test_a_probe_is_asked_at_the_last_session_its_answer_holds_and_left_out_when_none():
    events = ReferenceLifecycle().events(FRUIT)
    old = Probe("attribute", "Which fruit does Tomas like best?", "sweet mango", ("D1:1",))
    new = Probe("attribute", "Which fruit does Tomas like best?", "ripe banana", ("D3:1",))
    unrelated = Probe("paraphrase", "What did Tomas watch?", "film about trains", ("D2:1",))
    placed = {p.answer: p.asked_at for p in place(FRUIT, [old, new, unrelated], events, "latest")}
    assert placed == {"sweet mango": D[1], "ripe banana": D[3], "film about trains": D[3]}
    drawn = place(FRUIT, [old], events, "drawn")
    assert drawn and D[0] <= drawn[0].asked_at < D[2]
    soon = LifecycleEvent("superseded", "D1:1", "D2:1", "My favorite fruit is the sweet mango.",
                          "My favorite fruit is the sour lime.", "tomas|favorite fruit")
    assert place(FRUIT, [Probe("attribute", "q?", "sweet mango", ("D2:1", "D1:1"))], [soon], "latest") == []


def test_a_change_yields_its_new_value_asked_after_it_and_its_old_value_asked_before():
    probes = {p.kind: p for p in event_probes(FRUIT, ReferenceLifecycle().events(FRUIT))}
    update, prior = probes["update"], probes["prior"]
    assert update.question == prior.question == "What is Tomas's favorite fruit?"
    assert (update.answer, update.evidence, update.outdated) == ("ripe banana", ("D3:1",), ("D1:1",))
    assert (prior.answer, prior.evidence, prior.asked_at) == ("sweet mango", ("D1:1",), D[1])
    # the runtime asked then answers with the value current then
    rt = runtime()
    store = rt.ingest(FRUIT)
    assert "mango" in rt.ask(store, prior.question, prior.asked_at).answer.text
    assert "banana" in rt.ask(store, update.question, D[3]).answer.text


def test_a_retraction_yields_what_it_says_instead():
    conv = _conversation(["I'm planning a kayak trip to Norway next summer."], ["We watched a long film."],
                         ["We scrapped the kayak trip to Norway, we're going to Sweden instead."], ["Grey weather."])
    probes = [p for p in event_probes(conv, ReferenceLifecycle().events(conv)) if p.kind == "retraction"]
    assert len(probes) == 1
    assert probes[0].question == "What became of Tomas's kayak trip to Norway?"
    assert probes[0].answer == "scrapped going Sweden" and probes[0].outdated == ("D1:1",)


def test_probe_questions_carry_the_session_they_are_asked_at_and_what_they_outdate():
    bench = Benchmark("t", {"c": FRUIT}, [])
    with_time = probe_questions(bench, ProbeSettings(per_turns=1), timeline=ReferenceLifecycle())
    update = [q for q in with_time if q.category == "probe_update"]
    assert update and update[0].outdated == ("D1:1",) and update[0].asked_at == D[3]
    assert any(q.category == "probe_prior" and q.asked_at == D[1] for q in with_time)
    assert all(q.asked_at == D[3] for q in probe_questions(bench, ProbeSettings(per_turns=1)))  # no timeline


def test_every_probe_kind_is_a_known_probe_category():
    """A kind missing from PROBE_CATEGORIES would count as a labelled question (and a label-free run as labelled)."""
    from evolve.benchmarks.probe_mix import KIND_CATEGORY
    from evolve.benchmarks.types import PROBE_CATEGORIES
    assert {f"probe_{kind}" for kind in KIND_CATEGORY} <= set(PROBE_CATEGORIES)
