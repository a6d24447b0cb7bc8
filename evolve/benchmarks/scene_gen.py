"""A seeded, deterministic scene-to-sensor generator (``scenegen[:SEED[:HOMES]]``): first what happened in each home over
two weeks, then what each device observed of it, then questions with checklists.

What happens: two adults share a home with a child. The child trains three times a week (a calendar entry; the
training bag seen by the door camera; the car's route with a detour home), a coach's message sometimes moves a
training (a conflict with the calendar), each adult runs and sleeps (the wearable, private), the speaker takes
shopping-list commands and bill reminders, one adult drives to the shops on Saturday, and a trip at the end of the
second week (the flight in a calendar, the suitcase seen by the camera, sometimes an airline's message that moves it).
Around it, what nobody asks about: commutes, work meetings, deliveries, music, friends' messages, and the child's
weekly lesson whose own bag waits by the same door. Devices miss some of it (the camera misses one training bag in
five) and word what they saw in their own terms, so a question rarely shares its words with the evidence.

Questions, asked by one adult at a moment after their evidence:

* ``event``: when or where something happened (the calendar's training, the car's parking, the run's distance);
* ``device``: which device observed something;
* ``causal``: what to check before an event, reached only through another device's observation (the bag by the
  door before training; the detour that keeps the arrival on time);
* ``conflict``: what holds when two observations disagree (the coach's later message over the calendar).
"""
from __future__ import annotations

import random
from datetime import datetime, timedelta

from evolve.benchmarks.observations import DeviceEvent, Provenance
from evolve.benchmarks.scenes import FORMAT, CheckItem, Happening, Home, SceneFile, SceneQuestion, scenes_benchmark
from evolve.benchmarks.types import Benchmark

ADULTS = [("Ana", "Ben"), ("Clara", "Diego"), ("Elif", "Farid"), ("Grace", "Hugo"), ("Ines", "Jonas"),
          ("Kira", "Liam"), ("Maya", "Nils"), ("Olga", "Pavel")]
CHILDREN = ["Mia", "Noah", "Lena", "Omar", "Sofia", "Theo", "Zoe", "Ivan"]
SPORTS = [("football", "football boots", "Riverside field"), ("swimming", "swim bag", "Northgate pool"),
          ("basketball", "basketball kit", "Elm Street gym"), ("judo", "judo gi", "Harbour dojo")]
#: Other words for an event, so a question does not repeat the evidence.
SESSION_WORDS = ["practice", "session", "class"]
SHOPS = ["Lidl on Mill Road", "the farmers market", "Costco in Westfield", "Aldi by the station"]
ITEMS = ["oat milk", "coffee beans", "dish soap", "rye bread", "tomatoes", "batteries", "olive oil", "rice"]
BILLS = ["electricity", "water", "internet", "phone"]
CITIES = ["Lisbon", "Vienna", "Krakow", "Dublin", "Seville", "Oslo"]
COACHES = ["Coach Patel", "Coach Rivera", "Coach Okafor", "Coach Berg"]
WORKPLACES = ["the office garage on King Street", "the hospital car park", "the university lot", "the depot"]
MEETINGS = ["budget review", "team stand-up", "client call", "design review", "one-to-one", "planning meeting"]
COLLEAGUES = ["Priya", "Marco", "Yuki", "Sam", "Fatima", "Lukas"]
FRIENDS = ["Rosa", "Tom", "Aisha", "Ken"]
CHATTER = ["are we still on for dinner next week?", "look at this video of a cat", "happy birthday to your mum!",
           "can you send me that recipe?", "the match last night was unreal"]
MUSIC = ["jazz radio", "a morning playlist", "the news podcast", "classical piano"]
#: The child's other weekly lesson, whose own bag also waits by the door (a distractor for "what to check").
LESSONS = [("piano", "music folder"), ("art", "sketchbook bag"), ("chess", "chess set")]
START = datetime(2024, 5, 6)  # a Monday
DAYS = 14


def _day(moment: datetime) -> str:
    return f"{moment:%A} {moment.day} {moment:%B}"


def _hhmm(moment: datetime) -> str:
    return f"{moment:%H:%M}"


class _Home:
    """One home's generation: its events, happenings and questions, in the order they are made."""

    def __init__(self, index: int, rng: random.Random):
        self.rng = rng
        self.id = f"home-{index}"
        self.a, self.b = ADULTS[index % len(ADULTS)]
        self.child = CHILDREN[index % len(CHILDREN)]
        self.sport, self.gear, self.venue = SPORTS[index % len(SPORTS)]
        self.start = START + timedelta(days=7 * index)
        self.events: list[DeviceEvent] = []
        self.happenings: list[Happening] = []
        self.questions: list[SceneQuestion] = []

    def event(self, device: str, owner: str | None, kind: str, when: datetime, text: str, *, private: bool = False,
              importance: float = 0.5, urgency: float = 0.0) -> str:
        eid = f"{self.id}:E{len(self.events) + 1:03d}"
        self.events.append(DeviceEvent(id=eid, device=device, owner=owner, event=kind, time=when, text=text,
                                       importance=importance, urgency=urgency,
                                       visibility="private" if private else "household",
                                       provenance=Provenance(source=f"scenegen:{self.id}", record=eid)))
        return eid

    def happened(self, what: str, seen_by: list[str], leads_to: list[str] = ()) -> str:
        hid = f"{self.id}:H{len(self.happenings) + 1:03d}"
        self.happenings.append(Happening(id=hid, what=what, seen_by=seen_by, leads_to=list(leads_to)))
        return hid

    def ask(self, user: str, asked_at: datetime, kind: str, question: str, answer: str, evidence: list[str],
            checklist: list[tuple[str, str]]) -> None:
        self.questions.append(SceneQuestion(
            id=f"{self.id}/q{len(self.questions)}", user=user, asked_at=asked_at, question=question, answer=answer,
            kind=kind, evidence=evidence, checklist=[CheckItem(role=r, words=w) for r, w in checklist]))

    # ------------------------------------------------------------ what happens, and what is asked of it

    def training(self, day: datetime, moved: bool) -> None:
        rng, a, child = self.rng, self.a, self.child
        start = day.replace(hour=rng.choice([17, 18]), minute=rng.choice([0, 30]))
        word = rng.choice(SESSION_WORDS)
        calendar = self.event("phone_calendar", a, "calendar_entry", day.replace(hour=7),
                              f"Calendar: {child} {self.sport} training at {self.venue}, {_hhmm(start)}",
                              importance=0.7)
        when, evidence = start, [calendar]
        if moved:
            when = start + timedelta(minutes=rng.choice([30, 60]))
            coach = COACHES[rng.randrange(len(COACHES))]
            message = self.event("phone_messages", a, "message", day.replace(hour=12, minute=rng.randrange(60)),
                                 f"Message from {coach}: today's {self.sport} starts at {_hhmm(when)} instead",
                                 importance=0.8, urgency=0.6)
            self.happened(f"{child}'s training moved to {_hhmm(when)}", [calendar, message])
            self.ask(a, day.replace(hour=14), "conflict",
                     f"What time does {child}'s {word} begin on {_day(day)}?", _hhmm(when), [calendar, message],
                     [("event", f"{self.sport} training {self.venue}"), ("conflict", f"starts {_hhmm(when)} instead"),
                      ("answer", _hhmm(when))])
            evidence = [calendar, message]
        else:
            for user in (a, self.b):
                self.ask(user, day.replace(hour=9), "event", f"When is {child}'s {word} on {_day(day)}?",
                         _hhmm(start), [calendar], [("event", f"{self.sport} training {self.venue}"),
                                                    ("answer", _hhmm(start))])
        bag = None
        if rng.random() >= 0.2:  # the camera misses one bag in five
            bag = self.event("camera", None, "object_seen", when - timedelta(minutes=rng.randrange(55, 80)),
                             f"Front door camera: {self.gear} left on the floor near the doorway", importance=0.6)
        drive = when - timedelta(minutes=rng.randrange(30, 40))  # when the question before leaving is asked
        car = self.event("car", a, "route", drive - timedelta(minutes=rng.randrange(5, 15)),
                         f"Car: trip to {self.venue} planned; a 6 minute detour home still arrives by {_hhmm(when)}",
                         importance=0.5)
        need = self.happened(f"{child} needs the {self.gear} at training", [calendar] + ([bag] if bag else []))
        self.happened(f"{a} drives {child} to {self.venue}", [car], [need])
        if bag is None:
            return
        self.ask(self.b, when - timedelta(minutes=50), "device",
                 f"Which device noticed {child}'s {self.sport} gear lying by the entrance on {_day(day)}?", "camera",
                 [bag], [("device", f"camera {self.gear} doorway"), ("answer", "camera")])
        self.ask(a, drive, "causal",
                 f"Is there anything to check before driving {child} to {word} on {_day(day)}?", self.gear,
                 [*evidence, bag, car], [("event", f"{self.sport} training {self.venue}"),
                                         ("device", f"{self.gear} doorway"), ("link", "detour home arrives"),
                                         ("answer", self.gear)])

    def wearables(self, day: datetime) -> None:
        rng = self.rng
        for owner in (self.a, self.b):
            km = round(rng.uniform(3.0, 11.0), 1)
            run = self.event("wearable", owner, "workout", day.replace(hour=6, minute=rng.randrange(10, 50)),
                             f"Watch: outdoor run {km} km, average heart rate {rng.randrange(130, 165)} bpm",
                             private=True, importance=0.2)
            sleep = self.event("wearable", owner, "sleep", day.replace(hour=5, minute=rng.randrange(50)),
                               f"Watch: slept {rng.randrange(5, 9)} h {rng.randrange(60)} min", private=True,
                               importance=0.1)
            self.happened(f"{owner} ran {km} km", [run])
            if rng.random() < 0.5:
                self.ask(owner, day.replace(hour=20), "event", f"How far did {owner} jog on {_day(day)}?",
                         f"{km} km", [run], [("event", "outdoor run"), ("answer", f"{km} km")])
            elif rng.random() < 0.5:
                self.ask(owner, day.replace(hour=21), "device",
                         f"What kept track of {owner}'s night before {_day(day)}?", "watch", [sleep],
                         [("device", "watch slept"), ("answer", "watch")])

    def routine(self, day: datetime, weekday: int) -> None:
        """What the devices see on any day that nobody asks about: commutes, meetings, deliveries, music, chatter."""
        rng = self.rng
        if weekday < 5:
            for owner in (self.a, self.b):
                place = WORKPLACES[rng.randrange(len(WORKPLACES))]
                self.event("car", owner, "parking", day.replace(hour=8, minute=rng.randrange(60)),
                           f"Car: parked at {place} for {rng.randrange(7, 10)} hours", importance=0.1)
                self.event("car", owner, "route", day.replace(hour=17, minute=rng.randrange(60)),
                           f"Car: route home, arrival {rng.randrange(17, 19)}:{rng.randrange(10, 60)}",
                           importance=0.1)
                for _ in range(2):
                    self.event("phone_calendar", owner, "calendar_entry", day.replace(hour=7, minute=30),
                               f"Calendar: {MEETINGS[rng.randrange(len(MEETINGS))]} with "
                               f"{COLLEAGUES[rng.randrange(len(COLLEAGUES))]} at {rng.randrange(9, 17)}:00",
                               private=True, importance=0.3)
        if weekday == 2:
            lesson, bag = LESSONS[rng.randrange(len(LESSONS))]
            self.event("phone_calendar", self.b, "calendar_entry", day.replace(hour=7, minute=15),
                       f"Calendar: {self.child} {lesson} lesson at 16:00", importance=0.5)
            self.event("camera", None, "object_seen", day.replace(hour=15, minute=rng.randrange(10, 40)),
                       f"Front door camera: {bag} left on the floor near the doorway", importance=0.4)
        if rng.random() < 0.5:
            self.event("camera", None, "person_seen", day.replace(hour=rng.randrange(10, 16), minute=rng.randrange(60)),
                       "Front door camera: courier delivered a parcel at the door", importance=0.3)
        self.event("speaker", None, "voice_command", day.replace(hour=7, minute=rng.randrange(60)),
                   f"Speaker: played {MUSIC[rng.randrange(len(MUSIC))]}", importance=0.1)
        for owner in (self.a, self.b):
            if rng.random() < 0.6:
                friend = FRIENDS[rng.randrange(len(FRIENDS))]
                self.event("phone_messages", owner, "message", day.replace(hour=rng.randrange(9, 22),
                                                                           minute=rng.randrange(60)),
                           f"Message from {friend}: {CHATTER[rng.randrange(len(CHATTER))]}", private=True,
                           importance=0.2)

    def errands(self, day: datetime) -> None:
        rng = self.rng
        item = ITEMS[rng.randrange(len(ITEMS))]
        shop = SHOPS[rng.randrange(len(SHOPS))]
        command = self.event("speaker", None, "voice_command", day.replace(hour=8, minute=rng.randrange(60)),
                             f"Speaker: added {item} to the shopping list")
        park = self.event("car", self.b, "parking", day.replace(hour=10, minute=rng.randrange(60)),
                          f"Car: parked at {shop} for {rng.randrange(25, 70)} minutes")
        self.happened(f"{self.b} shopped at {shop}", [command, park])
        for user in (self.a, self.b):
            self.ask(user, day.replace(hour=18), "event", f"Where did {self.b} leave the car on {_day(day)}?", shop,
                     [park], [("event", "parked"), ("answer", shop)])
            self.ask(user, day.replace(hour=18, minute=5), "device",
                     f"Which gadget took note that we needed {item} on {_day(day)}?", "speaker", [command],
                     [("device", f"speaker {item}"), ("answer", "speaker")])
        bill = BILLS[rng.randrange(len(BILLS))]
        reminder = self.event("speaker", None, "reminder", day.replace(hour=9), f"Speaker: reminder set to pay the "
                              f"{bill} bill on Friday", importance=0.6, urgency=0.4)
        self.ask(self.a, day.replace(hour=19), "event", f"Which payment is due on Friday after {_day(day)}?",
                 f"{bill} bill", [reminder], [("event", "reminder pay"), ("answer", f"{bill} bill")])

    def trip(self, day: datetime) -> None:
        rng = self.rng
        city = CITIES[rng.randrange(len(CITIES))]
        flight = day.replace(hour=rng.choice([6, 7, 9]), minute=rng.choice([5, 20, 45]))
        calendar = self.event("phone_calendar", self.b, "calendar_entry", day - timedelta(days=2, hours=-8),
                              f"Calendar: flight to {city} at {_hhmm(flight)} on {_day(flight)}", importance=0.9)
        case = self.event("camera", None, "object_seen", day - timedelta(hours=10),
                          "Hallway camera: suitcase standing next to the coat rack")
        self.happened(f"{self.b} flies to {city}", [calendar, case])
        if rng.random() < 0.5:  # the airline moves the flight: the calendar is not updated
            later = flight + timedelta(minutes=rng.choice([45, 90, 150]))
            notice = self.event("phone_messages", self.b, "message", day - timedelta(hours=12),
                                f"Message from the airline: your departure to {city} is rescheduled to "
                                f"{_hhmm(later)}", importance=0.9, urgency=0.8)
            self.happened(f"{self.b}'s flight moved to {_hhmm(later)}", [calendar, notice])
            for user in (self.a, self.b):
                self.ask(user, day - timedelta(hours=9), "conflict", f"At what time does {self.b}'s plane to "
                         f"{city} leave?", _hhmm(later), [calendar, notice],
                         [("event", f"flight {city}"), ("conflict", f"rescheduled {_hhmm(later)}"),
                          ("answer", _hhmm(later))])
        for user in (self.a, self.b):
            self.ask(user, day - timedelta(hours=9), "event", f"Where is {self.b} travelling to on {_day(day)}?", city,
                     [calendar], [("event", "flight"), ("answer", city)])
        self.ask(self.a, day - timedelta(hours=9), "causal",
                 f"What has {self.b} already got ready for the journey to {city}?", "suitcase", [calendar, case],
                 [("event", f"flight {city}"), ("device", "suitcase coat rack"), ("answer", "suitcase")])

    def build(self) -> Home:
        training_days = sorted(self.rng.sample([0, 1, 2, 3, 4], 3))
        moved = {(week, d) for week in range(2) for d in training_days if self.rng.random() < 0.4}
        for offset in range(DAYS):
            day = self.start + timedelta(days=offset)
            self.wearables(day)
            week, weekday = divmod(offset, 7)
            self.routine(day, weekday)
            if weekday in training_days:
                self.training(day, (week, weekday) in moved)
            if weekday == 5:
                self.errands(day)
        self.trip(self.start + timedelta(days=DAYS - 2))
        return Home(id=self.id, users=[self.a, self.b], events=self.events, happenings=self.happenings,
                    questions=self.questions)


def generate_scenes(seed: int = 0, homes: int = 6) -> SceneFile:
    """``homes`` homes over two weeks each, from ``seed``."""
    rng = random.Random(f"scenes:{seed}")
    return SceneFile(format=FORMAT, seed=seed, homes=[_Home(i, rng).build() for i in range(homes)])


def scenes_bench(seed: int = 0, homes: int = 6) -> Benchmark:
    """The generated scenes as a benchmark (``scenegen[:SEED[:HOMES]]``)."""
    return scenes_benchmark(generate_scenes(seed, homes), f"scenegen:{seed}:{homes}")
