"""Typed, read-only access to a validated strategy for the runtime."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Prompt(_Frozen):
    id: str
    version: int
    template: str
    required_markers: tuple[str, ...]


class Extraction(_Frozen):
    prompt: Prompt
    max_facts_per_window: int
    window_size: int
    window_overlap: int
    min_fact_tokens: int
    dedup_threshold: float
    supplement: bool
    resolve_relative_dates: bool
    date_style: Literal["replace", "annotate"]


class Expansion(_Frozen):
    prompt: Prompt
    max_subqueries: int
    entities: bool
    dates: bool
    keywords: bool


class Weights(_Frozen):
    bm25: float
    vector: float
    subquery: float


class Rerank(_Frozen):
    enabled: bool
    top_n: int
    overlap_weight: float


class TimeDecay(_Frozen):
    enabled: bool
    half_life_days: float


class Lexical(_Frozen):
    stopwords: Literal["runtime", "english", "none"]
    stemmer: Literal["suffix", "snowball"]


class SecondHop(_Frozen):
    enabled: bool
    fan_out: int
    weight: float


EdgeType = Literal["belong", "causal", "semantic", "entity"]


class Graph(_Frozen):
    enabled: bool = False
    edges: tuple[EdgeType, ...] = ("belong",)
    hops: int = 1
    fan_out: int = 3
    per_node: int = 2
    min_shared: int = 2
    max_share: float = 0.01
    weight: float = 0.5


class IntentMultipliers(_Frozen):
    temporal: float
    multi_hop: float
    single_hop: float
    open_domain: float


class IntentOverride(_Frozen):
    weights: Weights


Intent = Literal["temporal", "multi_hop", "single_hop", "open_domain"]


class Retrieval(_Frozen):
    top_k: int
    candidate_pool: int
    weights: Weights
    rrf_kappa: int
    lexical: Lexical
    rerank: Rerank
    second_hop: SecondHop
    time_decay: TimeDecay
    intent_top_k_multiplier: IntentMultipliers
    intent_overrides: dict[Intent, IntentOverride]
    graph: Graph = Graph()  # optional in the artifact: absent is off

    def weights_for(self, intent: str) -> Weights:
        override = self.intent_overrides.get(intent)  # type: ignore[call-overload]
        return override.weights if override else self.weights

    def top_k_for(self, intent: str) -> int:
        return max(1, round(self.top_k * getattr(self.intent_top_k_multiplier, intent)))


class PerCategory(_Frozen):
    """One value per fact category (:data:`FACT_CATEGORIES`, the field names)."""

    identity: float
    relational: float
    intellectual: float
    health: float
    projects: float
    hobbies: float
    preferences: float
    financial: float
    obligations: float
    logistics: float
    other: float

    def of(self, category: str) -> float:
        return getattr(self, category)


#: Behavioural categories of facts (what a fact is about): the keys of every per-category map.
FACT_CATEGORIES: tuple[str, ...] = tuple(PerCategory.model_fields)

SlotMode = Literal["replace", "accumulate"]


class SlotModes(_Frozen):
    identity: SlotMode
    relational: SlotMode
    intellectual: SlotMode
    health: SlotMode
    projects: SlotMode
    hobbies: SlotMode
    preferences: SlotMode
    financial: SlotMode
    obligations: SlotMode
    logistics: SlotMode
    other: SlotMode


class Slots(_Frozen):
    enabled: bool
    replace_confidence: float
    accumulate_confidence: float
    mode: SlotModes

    def threshold(self, category: str) -> float:
        """Confidence a later statement of a slot needs to supersede an earlier fact of ``category``."""
        accumulate = getattr(self.mode, category) == "accumulate"
        return self.accumulate_confidence if accumulate else self.replace_confidence


class Expiry(_Frozen):
    enabled: bool
    buffer_days: float
    mode: Literal["hard", "kernel"]
    scope: Literal["events", "dated"]
    hide_passed: bool
    lead_days: float
    upcoming_floor: float
    after_half_life_days: float


class NumericRescue(_Frozen):
    enabled: bool
    floor: float
    min_relevance: float


class Decay(_Frozen):
    enabled: bool
    kind: Literal["multiplicative", "blend", "blend_floor"]
    half_life_days: PerCategory
    alpha: PerCategory
    floor: PerCategory


class CategoryChannel(_Frozen):
    enabled: bool
    weight: float
    depth: int


class Lifecycle(_Frozen):
    supersession: bool
    forget_guard: bool
    prune_threshold: float
    refill: bool
    slots: Slots
    bypass_cues: bool
    expiry: Expiry
    numeric_rescue: NumericRescue
    decay: Decay
    category_channel: CategoryChannel

    @property
    def rescores(self) -> bool:
        """Whether current-state questions rescore relevance (per-category decay or the event kernel)."""
        return self.decay.enabled or (self.expiry.enabled and self.expiry.mode == "kernel")

    @property
    def hides_passed(self) -> bool:
        """Whether current-state questions lose events past ``buffer_days`` (mode hard, or the kernel with
        ``hide_passed``)."""
        ex = self.expiry
        return ex.enabled and (ex.mode == "hard" or ex.hide_passed)


class Reserved(_Frozen):
    profile: float
    corrections: float


class FactSpan(_Frozen):
    around: int = 1


class Assembly(_Frozen):
    token_budget: int
    reserved: Reserved
    source_window: int
    replies: int
    format: Literal["bullets", "dialogue", "json"]
    unit: Literal["memory", "turn", "sentences"]
    sentences_per_turn: int
    fact_unit: Literal["fact", "span", "turn"]
    fact_span: FactSpan = FactSpan()  # optional in the artifact: absent keeps one sentence each side


class Answering(_Frozen):
    prompt: Prompt
    max_answer_tokens: int
    span: Literal["sentence", "clause", "keywords"]
    temporal_dates: bool


class Fusion(_Frozen):
    enabled: bool = False
    window_hours: float = 12.0
    min_shared: int = 1
    max_share: float = 0.4
    max_members: int = 6
    max_open: int = 32
    candidates: int = 5
    recent: int = 3


class Features(_Frozen):
    session_memory: bool
    session_rollups: bool
    profile_layer: bool
    conflict_handling: bool
    raw_dialogue_backfill: bool
    turn_layer: bool
    turn_context: int
    fusion: Fusion = Fusion()  # optional in the artifact: absent is off


class ImageNames(_Frozen):
    enabled: bool
    reach: int


class ImageRoute(_Frozen):
    enabled: bool
    counting: bool
    enumeration: bool
    naming: bool


class ImagePacking(_Frozen):
    mode: Literal["lead", "alone"]
    max_images: int
    text: Literal["caption", "turn"]


class Images(_Frozen):
    categories: Literal["head", "synonyms"]
    names: ImageNames
    route: ImageRoute
    packing: ImagePacking


class Policy(_Frozen):
    """The whole strategy, typed. Build with :meth:`from_strategy` after validation."""

    version: int
    parent: str | None
    name: str | None = None
    extraction: Extraction
    expansion: Expansion
    retrieval: Retrieval
    lifecycle: Lifecycle
    assembly: Assembly
    answering: Answering
    features: Features
    images: Images

    @classmethod
    def from_strategy(cls, strategy: dict) -> "Policy":
        return cls.model_validate(strategy)
