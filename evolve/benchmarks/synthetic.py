"""Embedded synthetic lifecycle benchmark, deterministic from a seed, plus export to the LoCoMo layout.

Each conversation is a persona chatting with a friend over dated sessions. Facts are planted to exercise
memory lifecycle: superseded preferences, moved appointments, retractions, multi-version counts, numeric
details, multi-hop links, dated events, world-knowledge inferences and adversarial questions about things
the persona never said. Gold evidence is the turn stating the current truth (plus linking turns).

The module is long because most of it is the generator's vocabulary and one small planting function per
lifecycle pattern; splitting the patterns apart would scatter one seeded random stream over several files.
"""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

from evolve.benchmarks.locomo import CODE_BY_CATEGORY, NOT_MENTIONED, format_locomo_date
from evolve.benchmarks.types import (LIFECYCLE_CATEGORIES, Benchmark, BenchmarkError, Conversation, Question, Session,
                                     Turn)
from evolve.files import atomic_write_text

#: Lifecycle attack vectors (:mod:`evolve.benchmarks.lifecycle`), the category of each question that tests one.
AV = LIFECYCLE_CATEGORIES
PERSONAS = ("Alice", "Priya", "Marco", "Hannah", "Diego", "Yuki", "Omar", "Sofia", "Liam", "Grace",
            "Noah", "Zara", "Tomas", "Ingrid", "Kwame", "Mei", "Rafael", "Leila", "Jonas", "Amara")
WOMEN = ("Carol", "Erin", "Gina", "Iris", "Kate", "Maya", "Nina", "Paula", "Rosa", "Tara")
MEN = ("Bob", "Dan", "Frank", "Hugo", "Jack", "Leo", "Oscar", "Quinn", "Sam", "Victor")
PREFERENCES = {
    "color": ("blue", "green", "red", "yellow", "purple", "orange", "teal"),
    "food": ("sushi", "pizza", "tacos", "ramen", "curry", "paella", "dumplings"),
    "sport": ("tennis", "soccer", "basketball", "swimming", "cycling", "volleyball"),
    "drink": ("coffee", "lemonade", "espresso", "chai", "cocoa"),
    "season": ("spring", "summer", "autumn", "winter"),
    "board game": ("chess", "Catan", "Scrabble", "Monopoly", "backgammon"),
    "fruit": ("mango", "apple", "banana", "cherry", "peach"),
    "flower": ("tulip", "rose", "sunflower", "daisy", "orchid"),
}
CITIES = {"Lyon": "France", "Osaka": "Japan", "Porto": "Portugal", "Toronto": "Canada", "Melbourne": "Australia",
          "Munich": "Germany", "Seville": "Spain", "Bologna": "Italy", "Gothenburg": "Sweden", "Krakow": "Poland",
          "Denver": "United States", "Cusco": "Peru"}
JOBS = ("teacher", "nurse", "architect", "chef", "librarian", "accountant", "pharmacist", "photographer", "pilot")
PLACES = ("library", "cafe", "park", "museum", "bakery", "bookstore", "office", "gym")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
APPOINTMENTS = ("meeting with {who}", "lunch with {who}", "book club meeting", "study session with {who}")
RELATIONS = ("sister", "brother", "cousin", "best friend", "neighbor", "boss")
DOG_NAMES = ("Biscuit", "Rex", "Luna", "Pepper", "Mochi", "Scout")
INSTRUMENTS = {"cello": "string", "violin": "string", "trumpet": "brass", "trombone": "brass",
               "flute": "woodwind", "clarinet": "woodwind"}
COUNTABLES = (("cat", "cats"), ("houseplant", "houseplants"), ("bike", "bikes"), ("guitar", "guitars"),
              ("chicken", "chickens"))
RETRACTABLE = (
    ("I'm planning a trip to {x} next summer.", "the trip to {x}", "Is {p} planning a trip to {x}?",
     ("Iceland", "Peru", "Kenya", "Norway", "Vietnam")),
    ("I signed up for a {x} class.", "the {x} class", "Did {p} sign up for a {x} class?",
     ("salsa", "tango", "swing dance", "glassblowing")),
    ("I bought a {x} last week.", "the {x}", "Does {p} own a {x}?", ("motorcycle", "sailboat", "camper van")),
)
#: (statement, question, answer), each with a value drawn from the range.
DETAILS = (
    ("The new laptop cost me ${x}.", "How much did {p}'s new laptop cost?", "${x}", range(700, 2001, 50)),
    ("My commute to work is {x} kilometers each way.", "How long is {p}'s commute to work?", "{x} kilometers",
     range(3, 41)),
    ("My apartment is on floor {x}.", "Which floor is {p}'s apartment on?", "{x}", range(2, 21)),
    ("My book club has {x} members.", "How many members does {p}'s book club have?", "{x}", range(5, 16)),
    ("I finished the 10k race in {x} minutes.", "How many minutes did {p} take to finish the 10k race?", "{x}",
     range(42, 71)),
    ("My car is {x} years old.", "How old is {p}'s car?", "{x} years", range(2, 16)),
    ("The couch we ordered cost ${x}.", "How much did {p}'s couch cost?", "${x}", range(300, 1501, 25)),
)
EVENTS = (("adopted a dog", "adopt a dog"), ("ran a half marathon", "run a half marathon"),
          ("got a promotion at work", "get a promotion"), ("planted a vegetable garden", "plant a vegetable garden"),
          ("went to a jazz concert", "go to a jazz concert"), ("passed my driving test", "pass the driving test"),
          ("visited the aquarium", "visit the aquarium"), ("baked my first sourdough loaf", "bake a sourdough loaf"))
TRAPS = (
    ("I just bought a {x} kayak.", "What color is {p}'s kayak?", ("red", "yellow", "green")),
    ("My parrot is named {x}.", "What is the name of {p}'s parrot?", ("Kiwi", "Mango", "Polly")),
    ("I'm learning {x} for my trip.", "Which language is {p} learning?", ("Portuguese", "Korean", "Greek")),
    ("I'm training for a triathlon in {x}.", "When is {p}'s triathlon?", ("June", "August", "October")),
    ("My daughter just started playing the {x}.", "Which instrument does {p}'s daughter play?",
     ("piano", "drums", "harp")),
    ("I got a tattoo of a {x} on my arm.", "What is {p}'s tattoo of?", ("fox", "whale", "rose")),
)
GREETINGS = (("Hey {p}! How have you been?", "Hi {f}! Pretty good, it's been a busy week."),
             ("Hi {p}, good to hear from you!", "Hey {f}! Good to talk again."),
             ("{p}! Long time no talk. What's new?", "Hi {f}! Quite a lot, let me tell you."))
FAREWELLS = (("I should get going. Talk soon!", "Bye {p}, take care!"),
             ("This was fun, let's catch up again soon.", "Definitely, have a good one {p}!"))
SMALL_TALK = (("The weather has been lovely lately.", "Yes, I've been trying to get outside more."),
              ("Have you watched anything good recently?", "A couple of documentaries, nothing amazing."),
              ("How's your week going?", "Busy, but manageable."),
              ("I tried a new recipe last weekend.", "Oh fun, how did it turn out?"),
              ("Did you see the game on Sunday?", "I missed it, was it close?"),
              ("I'm so tired today.", "Same story here, long week."),
              ("Any plans for the weekend?", "Nothing big, maybe a walk and some reading."))
PROMPTS = ("So, any news?", "What else is going on with you?", "Tell me something new!", "How are things otherwise?")
ACKS = ("Oh nice!", "Good to know.", "That's great!", "Ha, I'll remember that.", "Thanks for telling me.",
        "Interesting!", "Wow, good for you!")
UPDATE_ACKS = ("Thanks for the update.", "Got it, noted.", "Oh, okay. Good to know.", "Ah, thanks for telling me.")
#: Phrases that mark a correction or retraction (what a rule-based extractor keys on).
UPDATE_MARKERS = re.compile(r"\b(actually|no longer|moved to|switched to|forget what I said about)\b", re.IGNORECASE)


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _day(moment: datetime) -> str:
    return f"{moment.day} {moment:%B} {moment.year}"


@dataclass
class _Line:
    """A planned utterance; ``turn_id`` is assigned once its session is laid out."""

    by_persona: bool
    text: str
    turn_id: str = ""


@dataclass(frozen=True)
class _Ask:
    question: str
    answer: str
    category: str
    evidence: tuple[_Line, ...]
    outdated: tuple[_Line, ...] = ()
    av: str | None = None  # the lifecycle attack vector the question tests (the lifecycle benchmark's category)


class _Script:
    """One persona's planted facts per session and the questions about them."""

    def __init__(self, rng: random.Random, persona: str, n_sessions: int):
        self.rng, self.p, self.n = rng, persona, n_sessions
        self.used = {persona}
        self.friend = self.name()
        self.facts: list[list[_Line]] = [[] for _ in range(n_sessions)]
        self.asks: list[_Ask] = []

    def name(self, pool: tuple[str, ...] = WOMEN + MEN) -> str:
        """A name not yet used in this conversation."""
        name = self.rng.choice([n for n in pool if n not in self.used])
        self.used.add(name)
        return name

    def say(self, session: int, text: str, by_persona: bool = True) -> _Line:
        line = _Line(by_persona, text)
        self.facts[session].append(line)
        return line

    def ask(self, question: str, answer: str, category: str, *evidence: _Line, outdated: tuple[_Line, ...] = (),
            av: str | None = None) -> None:
        self.asks.append(_Ask(question, answer, category, evidence, outdated, av))

    def sessions(self, k: int) -> list[int]:
        """``k`` distinct sessions in increasing order."""
        return sorted(self.rng.sample(range(self.n), k))


def _preferences(s: _Script) -> dict[str, _Line]:
    """Four superseded and two stable favorites; returns the stable ones for adversarial inversion."""
    things = s.rng.sample(sorted(PREFERENCES), 6)
    for i, thing in enumerate(things[:4]):
        old, new = s.rng.sample(PREFERENCES[thing], 2)
        first, later = s.sessions(2)
        before = s.say(first, f"My favorite {thing} is {old}.")
        after = s.say(later, s.rng.choice((
            f"Actually, my favorite {thing} is now {new}.",
            f"My favorite {thing} is no longer {old}; it's {new} now.",
            f"I switched to {new}, so that's my favorite {thing} now.",
        )))
        s.ask(f"What is {s.p}'s favorite {thing}?", new, "single_hop", after, outdated=(before,), av=AV[0])
        if i == 0:
            s.ask(f"What was {s.p}'s favorite {thing} before {new}?", old, "temporal", before, after)
    stable = {}
    for thing in things[4:]:
        value = s.rng.choice(PREFERENCES[thing])
        stable[thing] = s.say(s.rng.randrange(s.n), f"My favorite {thing} is {value}.")
        s.ask(f"What is {s.p}'s favorite {thing}?", value, "single_hop", stable[thing], av=AV[2])
    return stable


def _appointments(s: _Script) -> None:
    """One appointment changes place, another changes day; the unchanged detail stays answerable."""
    for kind, template in zip(("place", "day"), s.rng.sample(APPOINTMENTS, 2)):
        event = template.format(who=s.name())
        place, new_place = s.rng.sample(PLACES, 2)
        day, new_day = s.rng.sample(DAYS, 2)
        first, later = s.sessions(2)
        stated = s.say(first, f"The {event} is at the {place} on {day}.")
        where, when = f"Where is {s.p}'s {event}?", f"What day is {s.p}'s {event}?"
        if kind == "place":
            moved = s.say(later, f"The {event} moved to the {new_place}.")
            s.ask(where, new_place, "single_hop", moved, outdated=(stated,), av=AV[5])
            s.ask(when, day, "single_hop", stated)
        else:
            moved = s.say(later, f"The {event} moved to {new_day}.")
            s.ask(when, new_day, "single_hop", moved, outdated=(stated,), av=AV[5])
            s.ask(where, place, "single_hop", stated)


def _retractions(s: _Script) -> None:
    for claim, topic, question, values in s.rng.sample(RETRACTABLE, 2):
        value = s.rng.choice(values)
        first, later = s.sessions(2)
        claimed = s.say(first, claim.format(x=value))
        retraction = s.say(later, f"Forget what I said about {topic.format(x=value)}; that's not true anymore.")
        s.ask(question.format(p=s.p, x=value), "No", "single_hop", retraction, outdated=(claimed,), av=AV[6])


def _profile(s: _Script) -> None:
    """Job change, residence (maybe moved) with a world-knowledge country question, and an instrument."""
    old_job, new_job = s.rng.sample(JOBS, 2)
    first, later = s.sessions(2)
    old = s.say(first, f"I work as {_a(old_job)}.")
    job = s.say(later, f"I no longer work as {_a(old_job)}; I work as {_a(new_job)} now.")
    s.ask(f"What is {s.p}'s job?", new_job, "single_hop", job, outdated=(old,), av=AV[5])

    home, new_home = s.rng.sample(sorted(CITIES), 2)
    while CITIES[new_home] == CITIES[home]:
        new_home = s.rng.choice(sorted(CITIES))
    first, later = s.sessions(2)
    current = s.say(first, f"I live in {home}.")
    left: tuple[_Line, ...] = ()
    if s.rng.random() < 0.5:
        left = (current,)
        current, home = s.say(later, f"Actually, I live in {new_home} now; we moved there last month."), new_home
    s.ask(f"Which city does {s.p} live in?", home, "single_hop", current, outdated=left, av=AV[5] if left else AV[2])
    s.ask(f"In which country does {s.p} live?", CITIES[home], "open_domain", current, outdated=left)

    instrument = s.rng.choice(sorted(INSTRUMENTS))
    played = s.say(s.rng.randrange(s.n), f"I play the {instrument} in a community orchestra.")
    s.ask(f"Is the instrument {s.p} plays a string, brass or woodwind instrument?", INSTRUMENTS[instrument],
          "open_domain", played)


def _counts(s: _Script) -> None:
    """Two counts with two and three versions, and a rent that goes up; only the latest is gold."""
    for versions, (singular, plural) in zip((2, 3), s.rng.sample(COUNTABLES, 2)):
        count = s.rng.randint(1, 4)
        sessions = s.sessions(versions)
        latest = s.say(sessions[0], f"I have {count} {singular if count == 1 else plural}.")
        earlier: list[_Line] = []
        for session in sessions[1:]:
            earlier.append(latest)
            change = s.rng.choice([d for d in (-1, 1, 2) if count + d >= 1])
            count += change
            noun = singular if count == 1 else plural
            how = f"I got {('one', 'two')[change - 1]} more" if change > 0 else "I gave one away"
            latest = s.say(session, f"Actually, I have {count} {noun} now; {how}.")
        s.ask(f"How many {plural} does {s.p} have?", str(count), "single_hop", latest, outdated=tuple(earlier),
              av=AV[3])
    rent = s.rng.randrange(900, 2001, 50)
    first, later = s.sessions(2)
    old_rent = s.say(first, f"My rent is ${rent} a month.")
    rent += s.rng.randrange(50, 301, 25)
    raised = s.say(later, f"Actually, my rent is ${rent} a month now; it went up.")
    s.ask(f"How much is {s.p}'s monthly rent?", f"${rent}", "single_hop", raised, outdated=(old_rent,), av=AV[3])


def _details(s: _Script) -> None:
    for statement, question, answer, values in s.rng.sample(DETAILS, 5):
        value = s.rng.choice(values)
        line = s.say(s.rng.randrange(s.n), statement.format(x=value))
        s.ask(question.format(p=s.p), answer.format(x=value), "single_hop", line, av=AV[7])


def _relatives(s: _Script) -> None:
    """Relation + attribute links; the first relative later changes city (evidence: relation and move)."""
    for i, relation in enumerate(s.rng.sample(RELATIONS, 4)):
        name = s.name(WOMEN if relation == "sister" else MEN if relation == "brother" else WOMEN + MEN)
        sessions = s.sessions(3 if i == 0 else 2)
        link = s.say(sessions[0], f"My {relation} is {name}.")
        whose = f"{s.p}'s {relation}"
        kind = "city" if i < 2 else s.rng.choice(("job", "dog"))
        if kind == "city":
            city, new_city = s.rng.sample(sorted(CITIES), 2)
            fact = s.say(sessions[1], f"{name} lives in {city}.")
            left = ()
            if i == 0:
                left = (fact,)
                fact, city = s.say(sessions[2], f"{name} moved to {new_city} last month."), new_city
            s.ask(f"Where does {whose} live?", city, "multi_hop", link, fact, outdated=left, av=AV[5] if left else None)
            if i == 1:
                s.ask(f"In which country does {whose} live?", CITIES[city], "open_domain", link, fact)
        elif kind == "job":
            job = s.rng.choice(JOBS)
            fact = s.say(sessions[1], f"{name} works as {_a(job)}.")
            s.ask(f"What is the job of {whose}?", job, "multi_hop", link, fact)
        else:
            dog = s.rng.choice(DOG_NAMES)
            fact = s.say(sessions[1], f"{name} has a dog named {dog}.")
            s.ask(f"What is the name of the dog of {whose}?", dog, "multi_hop", link, fact)


def _events(s: _Script, dates: list[datetime]) -> None:
    """Dated events; a few are told the day after ("yesterday"), so the answer is the day before the session."""
    for session, (done, do) in zip(s.sessions(5), s.rng.sample(EVENTS, 5)):
        if s.rng.random() < 0.3:
            line, day = s.say(session, f"I {done} yesterday."), dates[session] - timedelta(days=1)
        else:
            line, day = s.say(session, f"Guess what, I {done} today!"), dates[session]
        s.ask(f"When did {s.p} {do}?", _day(day), "temporal", line)


def _traps(s: _Script, stable: dict[str, _Line]) -> None:
    """The friend's own facts asked about the persona, and one persona favorite asked about the friend."""
    for statement, question, values in s.rng.sample(TRAPS, 3):
        line = s.say(s.rng.randrange(s.n), statement.format(x=s.rng.choice(values)), by_persona=False)
        s.ask(question.format(p=s.p), NOT_MENTIONED, "adversarial", line)
    thing, line = s.rng.choice(sorted(stable.items()))
    s.ask(f"What is {s.friend}'s favorite {thing}?", NOT_MENTIONED, "adversarial", line)


def _session_lines(rng: random.Random, facts: list[_Line], p: str, f: str) -> list[_Line]:
    """Greeting, facts (each acknowledged) interleaved with small talk, farewell."""
    opener, reply = rng.choice(GREETINGS)
    lines = [_Line(False, opener.format(p=p)), _Line(True, reply.format(f=f))]
    rng.shuffle(facts)
    chat = rng.sample(SMALL_TALK, len(SMALL_TALK))
    for fact in facts:
        if chat and rng.random() < 0.35:
            starter, answer = chat.pop()
            by = rng.random() < 0.5
            lines += [_Line(by, starter), _Line(not by, answer)]
        if fact.by_persona and rng.random() < 0.3:
            lines.append(_Line(False, rng.choice(PROMPTS)))
        acks = UPDATE_ACKS if UPDATE_MARKERS.search(fact.text) else ACKS
        lines += [fact, _Line(not fact.by_persona, rng.choice(acks))]
    bye, answer = rng.choice(FAREWELLS)
    return lines + [_Line(True, bye), _Line(False, answer.format(p=p))]


#: Extra planting patterns run after the standard ones (the lifecycle benchmark's), given the session dates.
Extra = Callable[["_Script", list[datetime]], None]


def _conversation(rng: random.Random, cid: str, persona: str, n_sessions: int,
                  extra: Extra | None = None) -> tuple[Conversation, list[_Ask], list[Question]]:
    start = datetime(2023, 1, 1, rng.randint(8, 21), rng.randrange(60)) + timedelta(days=rng.randrange(240))
    dates = [start]
    for _ in range(n_sessions - 1):
        dates.append((dates[-1] + timedelta(days=rng.randint(3, 24))).replace(
            hour=rng.randint(8, 21), minute=rng.randrange(60)))
    script = _Script(rng, persona, n_sessions)
    stable = _preferences(script)
    _appointments(script)
    _retractions(script)
    _profile(script)
    _counts(script)
    _details(script)
    _relatives(script)
    _events(script, dates)
    _traps(script, stable)
    if extra is not None:
        extra(script, dates)
    sessions = []
    for index, (facts, stamp) in enumerate(zip(script.facts, dates), start=1):
        session_id = f"D{index}"
        turns = []
        for number, line in enumerate(_session_lines(rng, facts, persona, script.friend), start=1):
            line.turn_id = f"{session_id}:{number}"
            speaker = persona if line.by_persona else script.friend
            turns.append(Turn(line.turn_id, speaker, line.text, session_id, stamp))
        sessions.append(Session(session_id, stamp, tuple(turns)))
    questions = [
        Question(f"{cid}/q{i}", cid, a.question, a.answer, a.category, tuple(line.turn_id for line in a.evidence),
                 outdated=tuple(line.turn_id for line in a.outdated))
        for i, a in enumerate(script.asks)
    ]
    return Conversation(cid, (persona, script.friend), tuple(sessions)), script.asks, questions


def generate_synthetic(seed: int = 0, n_personas: int = 6, n_sessions: int = 8) -> Benchmark:
    """Build the synthetic lifecycle benchmark; the same arguments always give the same content."""
    conversations, questions = generate(seed, n_personas, n_sessions)
    return Benchmark(f"synthetic:{seed}:{n_personas}", conversations, [q for q, _ in questions])


def generate(seed: int, n_personas: int, n_sessions: int,
             extra: Extra | None = None) -> tuple[dict[str, Conversation], list[tuple[Question, _Ask]]]:
    """The seeded conversations, and every question with the plan it was asked from."""
    if not 1 <= n_personas <= len(PERSONAS):
        raise BenchmarkError(f"synthetic benchmark: n_personas must be 1..{len(PERSONAS)}, got {n_personas}")
    if n_sessions < 5:
        raise BenchmarkError(f"synthetic benchmark: n_sessions must be at least 5, got {n_sessions}")
    rng = random.Random(seed)
    conversations: dict[str, Conversation] = {}
    questions: list[tuple[Question, _Ask]] = []
    for k, persona in enumerate(rng.sample(PERSONAS, n_personas), start=1):
        cid = f"synth{seed}-{k}"
        conversations[cid], asks, asked = _conversation(rng, cid, persona, n_sessions, extra)
        questions += list(zip(asked, asks))
    return conversations, questions


def write_locomo(benchmark: Benchmark, path: str | Path) -> None:
    """Write ``benchmark`` in the ``locomo10.json`` layout (atomically). Sessions become ``session_1..N`` in
    order; reading the file back renumbers question ids as ``"{sample_id}/q{index}"``. Outdated turns go to an extra
    per-question field ``outdated_evidence``, which :func:`~evolve.benchmarks.locomo.load_locomo` reads back."""
    orphans = sorted({q.conversation_id for q in benchmark.questions} - set(benchmark.conversations))
    if orphans:
        raise BenchmarkError(f"benchmark {benchmark.name!r}: questions refer to unknown conversation(s) {orphans}")
    asked: dict[str, list[Question]] = {cid: [] for cid in benchmark.conversations}
    for question in benchmark.questions:
        asked[question.conversation_id].append(question)
    samples = []
    for cid, conversation in benchmark.conversations.items():
        if len(conversation.speakers) != 2:
            raise BenchmarkError(f"conversation {cid!r}: LoCoMo needs exactly two speakers, "
                                 f"got {len(conversation.speakers)}")
        data: dict = {"speaker_a": conversation.speakers[0], "speaker_b": conversation.speakers[1]}
        for number, session in enumerate(conversation.sessions, start=1):
            if session.timestamp is not None:
                data[f"session_{number}_date_time"] = format_locomo_date(session.timestamp)
            data[f"session_{number}"] = [{"speaker": t.speaker, "dia_id": t.id, "text": t.text}
                                         for t in session.turns]
        unknown = sorted({q.category for q in asked[cid]} - set(CODE_BY_CATEGORY))
        if unknown:
            raise BenchmarkError(f"conversation {cid!r}: categories {unknown} have no LoCoMo code")
        qa = [{"question": q.question, "answer": q.answer, "evidence": list(q.evidence),
               "category": CODE_BY_CATEGORY[q.category], **({"outdated_evidence": list(q.outdated)} if q.outdated else {})}
              for q in asked[cid]]
        samples.append({"sample_id": cid, "conversation": data, "qa": qa})
    atomic_write_text(path, json.dumps(samples, indent=1, ensure_ascii=False) + "\n")

