"""The lifecycle benchmark (``lifecycle:SEED[:PERSONAS]``): the synthetic conversations plus three more planted
patterns, asking only questions that test one lifecycle attack vector, which is the question's category.

- AV1 superseded preference — a favorite replaced later; the old one is outdated.
- AV2 expired logistics — an appointment whose date has passed, and a later upcoming one; "next" means the upcoming.
  Also in everyday date forms: an event said "tomorrow at 9am" that has passed, and the next one said "in two days",
  "this Saturday", "next week", as an ISO date, with a time of day, or as a month ("for March", "in March 2024").
- AV3 stable identity — a fact stated once and never changed, buried under the other sessions.
- AV4 multi-version fact — a count or price restated with new values; only the latest holds.
- AV5 aggregation — items mentioned one per session; the answer lists them all.
- AV6 cross-session contradiction — a later session contradicts an earlier one (a move, a job change).
- AV7 selective forgetting — a plan the speaker later retracts; also in everyday phrasings (cancelled, forget
  about, is dead, called off, changed my mind, scrapped, dropped), with a question about what was called off that
  must still see the retracted plan.
- AV8 numeric preservation — a specific number stated once.
- AV9 soft supersession — a tentative "thinking about switching" must not replace the committed fact.

Every question is asked the day after the conversation's last session; gold evidence names the turns stating the
current truth, ``outdated`` the turns it made stale.
"""
from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from evolve.benchmarks.synthetic import AV, _Script, generate
from evolve.benchmarks.types import Benchmark

APPOINTMENT_KINDS = ("dentist", "doctor", "haircut", "eye exam", "vet")
HOBBIES = ("pottery", "archery", "knitting", "rock climbing", "birdwatching", "chess", "salsa", "origami")
GYMS = ("Riverside Gym", "Summit Fitness", "Iron Works", "Peak Club", "Harbor Gym")


def _day(moment: datetime) -> str:
    return f"{moment.day} {moment:%B} {moment.year}"


def _expired(s: _Script, dates: list[datetime]) -> None:
    """AV2: a past appointment and an upcoming one of the same kind."""
    kind = s.rng.choice(APPOINTMENT_KINDS)
    first, later = s.sessions(2)
    past = dates[first] + timedelta(days=s.rng.randint(1, 2))
    upcoming = dates[-1] + timedelta(days=s.rng.randint(5, 20))
    old = s.say(first, f"I have a {kind} appointment on {_day(past)}.")
    new = s.say(later, f"I booked another {kind} appointment for {_day(upcoming)}.")
    s.ask(f"When is {s.p}'s next {kind} appointment?", _day(upcoming), "temporal", new, outdated=(old,), av=AV[1])


def _aggregation(s: _Script) -> None:
    """AV5: three hobbies taken up in three sessions."""
    hobbies = s.rng.sample(HOBBIES, 3)
    lines = [s.say(session, f"I just took up {hobby} as a new hobby.")
             for session, hobby in zip(s.sessions(3), hobbies)]
    s.ask(f"Which new hobbies has {s.p} taken up?", ", ".join(hobbies), "multi_hop", *lines, av=AV[4])


def _soft(s: _Script) -> None:
    """AV9: a committed fact, then a tentative thought of changing it."""
    gym, other = s.rng.sample(GYMS, 2)
    first, later = s.sessions(2)
    fact = s.say(first, f"I work out at {gym} every week.")
    s.say(later, f"I'm thinking about maybe switching to {other} at some point, but I haven't decided.")
    s.ask(f"Which gym does {s.p} work out at?", gym, "single_hop", fact, av=AV[8])


DEADLINES = ("ACA exam", "flight to Lisbon", "tax filing", "passport renewal", "piano recital")
WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
#: A plan, its topic as a retraction names it, the yes/no question about it, and how the question about what was
#: withdrawn names it (the gold answer).
PLANS = (("We're moving to {x} in the spring.", "the {x} move", "Is {p} moving to {x}?", "moving to {x}",
          ("Denver", "Tucson", "Halifax")),
         ("We're getting a {x} this summer.", "the {x} thing", "Is {p} getting a {x}?", "getting a {x}",
          ("dog", "puppy", "kitten")),
         ("I'm renovating the {x} next month.", "the {x} renovation", "Is {p} renovating the {x}?",
          "renovating the {x}", ("kitchen", "bathroom", "attic")))
RETRACTIONS = ("We cancelled {t}.", "Forget about {t}.", "{T} is dead.", "{T} got called off.",
               "I changed my mind about {t}.", "We scrapped {t}.", "We dropped {t}.")


def _upcoming(s: _Script, said: datetime) -> tuple[str, str]:
    """An expression for a day after ``said`` in one of the forms people write, and the day (or month) it means."""
    form = s.rng.randrange(6)
    if form == 0:
        return "in two days", _day(said + timedelta(days=2))
    if form == 1:
        ahead = (5 - said.weekday()) % 7 or 7
        return f"this {WEEKDAY_NAMES[5]}", _day(said + timedelta(days=ahead))
    if form == 2:
        return "next week", _day(said + timedelta(days=7))
    if form == 3:
        day = said + timedelta(days=s.rng.randint(5, 20))
        return f"on {day:%Y-%m-%d}", _day(day)
    if form == 4:
        return "at 6pm the day after tomorrow", _day(said + timedelta(days=2))
    month = (said.replace(day=1) + timedelta(days=62)).replace(day=1)
    return (f"for {month:%B}", f"{month:%B} {month.year}") if s.rng.random() < 0.5 else \
        (f"in {month:%B} {month.year}", f"{month:%B} {month.year}")


def _deadline(s: _Script, dates: list[datetime]) -> None:
    """AV2 in everyday date forms: a dated event said "tomorrow" that has passed, and the next one said relatively
    (or as an ISO date, or a month) in the last session: the deadline question asks for the upcoming one."""
    thing = s.rng.choice(DEADLINES)
    first = s.rng.randrange(s.n - 1)
    old = s.say(first, f"The {thing} is tomorrow at 9am.")
    when, answer = _upcoming(s, dates[-1])
    new = s.say(s.n - 1, f"The next {thing} is {when}.")
    s.ask(f"When is {s.p}'s next {thing}?", answer, "temporal", new, outdated=(old,), av=AV[1])


def _withdrawn(s: _Script) -> None:
    """AV7 in everyday retraction phrasings: the plan is gone for a yes/no question, and a question about what was
    withdrawn must still see it."""
    claim, topic, question, named, values = s.rng.choice(PLANS)
    value = s.rng.choice(values)
    first, later = s.sessions(2)
    planned = s.say(first, claim.format(x=value))
    said = topic.format(x=value)
    retraction = s.say(later, s.rng.choice(RETRACTIONS).format(t=said, T=said[0].upper() + said[1:]))
    s.ask(question.format(p=s.p, x=value), "No", "single_hop", retraction, outdated=(planned,), av=AV[6])
    s.ask(f"Which plan did {s.p} call off?", named.format(x=value), "single_hop", planned, retraction, av=AV[6])


def _extra(s: _Script, dates: list[datetime]) -> None:
    _expired(s, dates)
    _aggregation(s)
    _soft(s)
    _deadline(s, dates)
    _withdrawn(s)


def generate_lifecycle(seed: int = 0, n_personas: int = 6, n_sessions: int = 8) -> Benchmark:
    """The lifecycle benchmark; the same arguments always give the same content."""
    conversations, asked = generate(seed, n_personas, n_sessions, _extra)
    questions = []
    for q, plan in asked:
        if plan.av is None:
            continue
        when = conversations[q.conversation_id].sessions[-1].timestamp + timedelta(days=1)
        questions.append(dataclasses.replace(q, category=plan.av, asked_at=when.replace(hour=12, minute=0)))
    return Benchmark(f"lifecycle:{seed}:{n_personas}", conversations, questions)

