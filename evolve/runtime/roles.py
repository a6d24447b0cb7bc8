"""The runtime's pluggable roles. Deterministic defaults live in ``evolve.runtime``; LLM-backed
implementations (``evolve.llm``) satisfy the same protocols and are chosen by run configuration."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, Sequence

from evolve.benchmarks.types import Turn
from evolve.errors import EvolveError
from evolve.runtime.facts import FactMeta
from evolve.strategy.policy import Answering, Expansion, Extraction

class RoleError(EvolveError, RuntimeError):
    """A role implementation could not produce its output (e.g. an LLM endpoint kept failing)."""


#: Fact kinds an extractor may emit; the runtime routes them to memory layers.
FACT_KINDS = ("fact", "profile", "correction", "retraction")


@dataclass(frozen=True)
class ExtractedFact:
    text: str
    source_ids: tuple[str, ...]
    speaker: str
    timestamp: datetime | None
    kind: str = "fact"  # one of FACT_KINDS
    salience: float = 1.0  # 0..1, compared with lifecycle.prune_threshold
    meta: FactMeta | None = None  # lifecycle metadata; read from the text at ingestion when not given


@dataclass(frozen=True)
class ContextItem:
    """One packed piece of context, as the answerer sees it."""

    id: str
    text: str
    layer: str  # L0 | L1 | L2 | SM | RT | RAW | IKB
    source_ids: tuple[str, ...]
    timestamp: datetime | None = None
    score: float = 0.0
    #: Ids of the images its source turns share (:class:`~evolve.benchmarks.observations.ImageObservation`).
    image_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class AnswerResult:
    text: str
    support_ids: tuple[str, ...] = ()  # context item ids the answer came from


#: The four answer verdicts a judge gives: the answer is right, right in part, wrong, or declines.
ANSWER_VERDICTS = ("correct", "partial", "wrong", "abstain")


@dataclass(frozen=True)
class Judgment:
    correct: bool
    score: float  # judge-specific, e.g. token F1
    judge: str  # name of the judge that produced this
    votes: tuple[bool, ...] = field(default=())
    #: One of :data:`ANSWER_VERDICTS` ("correct" exactly when ``correct``); ``None`` when nothing was judged.
    verdict: str | None = None


class Extractor(Protocol):
    name: str

    def extract(self, window: Sequence[Turn], policy: Extraction) -> list[ExtractedFact]: ...


class Expander(Protocol):
    name: str

    def expand(self, question: str, policy: Expansion) -> list[str]: ...


class Answerer(Protocol):
    name: str

    def answer(self, question: str, context: Sequence[ContextItem], policy: Answering, intent: str) -> AnswerResult: ...


class Judge(Protocol):
    name: str

    def judge(self, question: str, gold: str, answer: str, *, category: str = "",
              abstention: bool = False) -> Judgment:
        """``category`` is the question's category, ``abstention`` whether the question is unanswerable (the
        gold answer then explains why); a judge may judge by them (e.g. LongMemEval's per-type criteria)."""
        ...
