"""The lifecycle benchmark (``lifecycle:SEED[:PERSONAS]``): the synthetic conversations plus three more planted
patterns, asking only questions that test one lifecycle attack vector, which is the question's category.

- AV1 superseded preference — a favorite replaced later; the old one is outdated.
- AV2 expired logistics — an appointment whose date has passed, and a later upcoming one; "next" means the upcoming.
- AV3 stable identity — a fact stated once and never changed, buried under the other sessions.
- AV4 multi-version fact — a count or price restated with new values; only the latest holds.
- AV5 aggregation — items mentioned one per session; the answer lists them all.
- AV6 cross-session contradiction — a later session contradicts an earlier one (a move, a job change).
- AV7 selective forgetting — a plan the speaker later retracts.
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


def _extra(s: _Script, dates: list[datetime]) -> None:
    _expired(s, dates)
    _aggregation(s)
    _soft(s)


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

