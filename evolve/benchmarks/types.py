"""Benchmark-neutral data the runtime consumes; adapters normalise every source format into these."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime

from evolve.benchmarks.observations import DeviceEvent, ImageObservation
from evolve.errors import UserError

#: Category names used in reports; adapters map their own labels onto these.
#: LoCoMo's question categories (the synthetic benchmark uses them too).
LOCOMO_CATEGORIES = ("multi_hop", "temporal", "open_domain", "single_hop", "adversarial")
#: The lifecycle benchmark's categories, one per attack vector (:mod:`evolve.benchmarks.lifecycle`).
LIFECYCLE_CATEGORIES = ("av1_superseded_preference", "av2_expired_logistics", "av3_stable_identity",
                        "av4_multi_version", "av5_aggregation", "av6_contradiction", "av7_retraction", "av8_numeric",
                        "av9_soft_supersession")
#: LongMemEval's question types (``question_type``, with underscores: category names are identifiers).
LONGMEMEVAL_CATEGORIES = ("single_session_user", "single_session_assistant", "single_session_preference",
                          "multi_session", "temporal_reasoning", "knowledge_update")
#: Probe questions' categories, one per generator (:mod:`evolve.benchmarks.probes`).
#: ``probe_when``, ``probe_who`` and ``probe_cloze`` are no longer generated; records made with them still read.
PROBE_CATEGORIES = ("probe_paraphrase", "probe_temporal", "probe_aggregation", "probe_image", "probe_inference",
                    "probe_attribute", "probe_link", "probe_multi_hop", "probe_update", "probe_prior",
                    "probe_retraction", "probe_llm", "probe_when", "probe_who", "probe_cloze", "probe_photo_count",
                    "probe_photo_name")
#: Scene-to-sensor questions' categories, one per question kind (:mod:`evolve.benchmarks.scenes`).
SCENE_CATEGORIES = ("scene_event", "scene_device", "scene_causal", "scene_conflict")
#: Every category a question may have (acceptance rules and the planner table validate against it).
CATEGORIES = LOCOMO_CATEGORIES + LIFECYCLE_CATEGORIES + LONGMEMEVAL_CATEGORIES + PROBE_CATEGORIES + SCENE_CATEGORIES


@dataclass(frozen=True)
class Turn:
    """One utterance. ``id`` is unique within its conversation (LoCoMo ``dia_id``, e.g. ``D1:3``)."""

    id: str
    speaker: str
    text: str
    session_id: str
    timestamp: datetime | None = None


@dataclass(frozen=True)
class Session:
    id: str
    timestamp: datetime | None
    turns: tuple[Turn, ...]
    #: The photos its turns share, in turn order (a turn's caption is also folded into its text).
    images: tuple[ImageObservation, ...] = ()
    #: The device events among its turns (each also a turn, with the event's id), in turn order.
    events: tuple[DeviceEvent, ...] = ()


@dataclass(frozen=True)
class Conversation:
    id: str
    speakers: tuple[str, ...]
    sessions: tuple[Session, ...]

    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]

    def images(self) -> list[ImageObservation]:
        return [image for s in self.sessions for image in s.images]

    def events(self) -> list[DeviceEvent]:
        return [event for s in self.sessions for event in s.events]

    def observations_hash(self) -> str:
        """Identity of the image observations and device events (the content hash covers their captions, folded
        into the turns' texts, and the events' words, not their ids, URLs, paths or device fields); a conversation
        without events keeps the hash it had."""
        text, events = "\n".join(i.model_dump_json() for i in self.images()), self.events()
        if events:
            text += "\0" + "\n".join(e.model_dump_json() for e in events)
        return hashlib.sha256(text.encode()).hexdigest()

    def content_hash(self) -> str:
        payload = [[s.id, str(s.timestamp), [[t.id, t.speaker, t.text] for t in s.turns]] for s in self.sessions]
        return hashlib.sha256(json.dumps([self.id, payload]).encode()).hexdigest()


@dataclass(frozen=True)
class Question:
    """A question about one conversation. ``id`` is unique across the benchmark."""

    id: str
    conversation_id: str
    question: str
    answer: str
    category: str  # one of CATEGORIES
    evidence: tuple[str, ...] = ()  # gold turn ids
    asked_at: datetime | None = None
    #: Turn ids stating what is no longer true when the question is asked (a superseded preference, a moved
    #: appointment, a retracted plan, an earlier version of a number): context that carries them is stale.
    outdated: tuple[str, ...] = ()
    #: The conversation does not hold the answer (LongMemEval's ``_abs`` questions): declining to answer is correct.
    abstention: bool = False
    #: The evidence the context must carry, each item as words (scene questions;
    #: :func:`~evolve.benchmarks.scenes.coverage`).
    checklist: tuple[str, ...] = ()


@dataclass
class Benchmark:
    name: str
    conversations: dict[str, Conversation]
    questions: list[Question]
    warnings: list[str] = field(default_factory=list)
    _turn_ids: dict[str, set[str]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def known_evidence(self, question: Question) -> list[str]:
        """The question's gold evidence ids that name a turn of its conversation (the others cannot be checked)."""
        turns = self._turn_ids.get(question.conversation_id)
        if turns is None:
            turns = self._turn_ids[question.conversation_id] = {t.id for t in
                                                                self.conversations[question.conversation_id].turns()}
        return [e for e in question.evidence if e in turns]

    def content_hash(self) -> str:
        """Identity of the harness data: conversations and questions."""
        h = hashlib.sha256()
        for cid in sorted(self.conversations):
            h.update(self.conversations[cid].content_hash().encode())
        for q in self.questions:
            record = asdict(q)
            for name in ("outdated", "abstention", "checklist"):  # benchmarks without them keep their old hash
                if not record[name]:
                    del record[name]
            h.update(json.dumps(record, default=str, sort_keys=True).encode())
        return h.hexdigest()


#: Benchmark spec schemes whose part after the colon names a file: ``scheme:PATH[#CONV,...]``.
FILE_SCHEMES = ("locomo", "longmemeval", "probes", "scenes")


def file_spec(spec: str) -> tuple[str, str, str] | None:
    """``(scheme, path, selection)`` of a file benchmark spec (``selection``: the text after ``#``, the conversations
    to keep, or ``""``); ``None`` for any other spec."""
    scheme, _, rest = spec.partition(":")
    if scheme not in FILE_SCHEMES:
        return None
    path, _, selection = rest.partition("#")
    return scheme, path, selection


class BenchmarkError(UserError, ValueError):
    """A benchmark file is unusable; the message names the file and the offending record."""
