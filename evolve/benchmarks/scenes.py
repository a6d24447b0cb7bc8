"""Scene-to-sensor files: what the devices of a home observed, and questions judged by a checklist of evidence.

A file (``memevolve-scenes/1``, JSON) holds homes. Each home has its users, the device events of every device in it
(:class:`~evolve.benchmarks.observations.DeviceEvent`: device, owner, kind, time, words, importance, urgency,
visibility, provenance), what really happened (``happenings``, the generator's truth: which events saw it and what it
led to), and questions. A question is asked by one user at a moment, with its answer, its evidence (event ids) and a
checklist: the items the context must carry for the answer to be reached (the event, the device that saw it, the
causal link, the conflicting observation, the answer), each as words.

Memory reads a home per user: the events that user may see (the household's and the user's own), one session per
day, each event a turn whose id is the event's id and whose speaker is its source (``Ana's car``). So retrieval,
packing and traces keep the event ids, and every system packs the same words. Any file of this format is read
(:func:`load_scenes`); :mod:`evolve.benchmarks.scene_gen` writes them from a seed.
"""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evolve.benchmarks.locomo import read_json
from evolve.benchmarks.observations import DeviceEvent
from evolve.benchmarks.types import Benchmark, BenchmarkError, Conversation, Question, Session, Turn
from evolve.errors import first_problem
from evolve.words import content_words

FORMAT = "memevolve-scenes/1"
#: The question kinds, as benchmark categories.
SCENE_KINDS = ("event", "device", "causal", "conflict")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckItem(_Model):
    """One piece of evidence the context must carry: what it stands for and the words that show it."""

    role: Literal["event", "device", "link", "conflict", "answer"]
    words: str = Field(min_length=1)


class SceneQuestion(_Model):
    id: str
    user: str
    asked_at: datetime
    question: str
    answer: str
    kind: Literal["event", "device", "causal", "conflict"]
    evidence: list[str] = Field(min_length=1)
    checklist: list[CheckItem] = Field(min_length=1)


class Happening(_Model):
    """What really happened (the generator's truth): the events that observed it and the happenings it led to."""

    id: str
    what: str
    seen_by: list[str]
    leads_to: list[str] = []


class Home(_Model):
    id: str
    users: list[str] = Field(min_length=1)
    events: list[DeviceEvent]
    happenings: list[Happening] = []
    questions: list[SceneQuestion]

    @model_validator(mode="after")
    def _refers(self) -> "Home":
        ids = {e.id for e in self.events}
        if len(ids) != len(self.events):
            raise ValueError("event ids repeat")
        for i, q in enumerate(self.questions):
            if q.user not in self.users:
                raise ValueError(f"questions[{i}] ({q.id}): user {q.user!r} is not one of {self.users}")
            unknown = [e for e in q.evidence if e not in ids]
            if unknown:
                raise ValueError(f"questions[{i}] ({q.id}): evidence {unknown} is no event of the home")
        return self


class SceneFile(_Model):
    format: Literal["memevolve-scenes/1"]
    seed: int | None = None
    homes: list[Home] = Field(min_length=1)


def linked_pairs(home: Home) -> set[frozenset[str]]:
    """The pairs of events that belong together by the home's truth: seen by one happening, or by two happenings one
    leads to (the chain a pack should hold)."""
    group = {h.id: {h.id} for h in home.happenings}
    for h in home.happenings:
        for other in h.leads_to:
            merged = group[h.id] | group[other]
            for member in merged:
                group[member] = merged
    seen = {h.id: h.seen_by for h in home.happenings}
    out = set()
    for members in {frozenset(g) for g in group.values()}:
        events = sorted({e for h in members for e in seen[h]})
        out |= {frozenset((a, b)) for i, a in enumerate(events) for b in events[i + 1:]}
    return out


def admit_event(event: DeviceEvent) -> Turn:
    """The runtime's turn of a device event: its id, its source as the speaker, its words, its day as the session."""
    return Turn(event.id, event.source, event.text, event.time.strftime("%Y-%m-%d"), event.time)


def conversation_of(home: Home, user: str) -> Conversation:
    """What ``user`` of ``home`` may see, in time order, one session per day."""
    days: dict[str, list[tuple[DeviceEvent, Turn]]] = defaultdict(list)
    for event in sorted((e for e in home.events if e.visible_to(user)), key=lambda e: (e.time, e.id)):
        turn = admit_event(event)
        days[turn.session_id].append((event, turn))
    sessions = tuple(Session(day, admitted[0][0].time, tuple(t for _, t in admitted),
                             events=tuple(e for e, _ in admitted)) for day, admitted in days.items())
    speakers = tuple(dict.fromkeys(t.speaker for s in sessions for t in s.turns))
    return Conversation(f"{home.id}/{user}", speakers, sessions)


def scenes_benchmark(scenes: SceneFile, name: str) -> Benchmark:
    """A benchmark of one conversation per (home, user) and its questions (category ``scene_<kind>``)."""
    conversations, questions = {}, []
    for home in scenes.homes:
        for user in home.users:
            conversation = conversation_of(home, user)
            conversations[conversation.id] = conversation
            seen = {t.id for t in conversation.turns()}
            for q in home.questions:
                if q.user == user:
                    if any(e not in seen for e in q.evidence):
                        raise BenchmarkError(f"{name}: question {q.id}: evidence is not visible to {user}")
                    questions.append(Question(q.id, conversation.id, q.question, q.answer, f"scene_{q.kind}",
                                              tuple(q.evidence), asked_at=q.asked_at,
                                              checklist=tuple(c.words for c in q.checklist)))
    return Benchmark(name, conversations, questions)


def load_scenes(path: Path) -> Benchmark:
    """A scene file as a benchmark (``scenes:PATH``); :class:`BenchmarkError` naming the file and the field."""
    raw = read_json(path)
    try:
        scenes = SceneFile.model_validate(raw)
    except ValidationError as exc:
        where, problem = first_problem(exc, "<root>")
        raise BenchmarkError(f"{path}: not a {FORMAT} file: {where}: {problem}") from None
    return scenes_benchmark(scenes, f"scenes:{path}")


def carried(item: str, context: str) -> bool:
    """Whether every content word of a checklist ``item`` is in ``context`` (judged by content, any system)."""
    words = content_words(item)
    return bool(words) and words <= content_words(context)


def coverage(checklist: tuple[str, ...], context: str) -> float:
    """Share of a question's checklist items the ``context`` carries."""
    return sum(carried(item, context) for item in checklist) / len(checklist) if checklist else 0.0
