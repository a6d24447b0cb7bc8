"""The optimizer's LLM advisors: a planner that proposes schema-bounded changes from a failure digest, and a critic
that labels a candidate change. Both use the framework's versioned prompts and pydantic-validated JSON replies
(re-asked with the errors, then dropped with a recorded reason)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from evolve.improve.digest import Digest
from evolve.improve.effects import DimensionEffects
from evolve.improve.planner import Direction
from evolve.llm.client import LLMClient
from evolve.llm.prompting import ask_json, fill, json_payload, load_prompt, pretty, validation_errors
from evolve.strategy.moves import EDIT, MOVES, SET, VALUED, IllegalValue, Move, Step, set_value, value_text
from evolve.strategy.prompts import MAX_CHARS, MIN_CHARS, check_instruction
from evolve.strategy.paths import get_path
from evolve.strategy.schema import EvolvableDimension, evolvable_dimensions
from evolve.verify.critic import CriticPacket, fixing_groups
from evolve.verify.critic import CriticReview

PLANNER_PROMPT, CRITIC_PROMPT = "planner.v2", "critic.v2"
CriticLabel = Literal["actionable", "risky", "duplicate", "out_of_scope"]
CRITIC_LABELS: tuple[str, ...] = get_args(CriticLabel)


# ---------------------------------------------------------------- planner


def _legal_value(dim: EvolvableDimension, direction: str, value: Any) -> Any:
    """``value`` checked against the dimension by :func:`~evolve.strategy.moves.set_value` (None where the direction
    needs none), with the problem phrased for the model; a prompt edit's value is its instruction line."""
    if dim.kind == "prompt":
        try:
            return check_instruction(value)
        except ValueError as exc:
            raise ValueError(f"value for {dim.path!r} (edit): {exc}") from None
    if dim.kind == "boolean" or value is None and direction != SET and dim.kind != "enum":
        return None
    if value is None and dim.kind != "enum":
        raise ValueError(f"direction 'set' on {dim.path!r} needs a value")
    try:
        return set_value(dim, value)
    except IllegalValue as exc:
        if exc.problem == "choices":
            raise ValueError(f"value {value!r} for {dim.path!r} must be one of {dim.choices}") from None
        if exc.problem == "integer":
            raise ValueError(f"value {value!r} for {dim.path!r} must be an integer") from None
        raise ValueError(f"value {value!r} for {dim.path!r} must be a number in [{dim.low:g}, {dim.high:g}]") from None


class ProposalReply(BaseModel):
    """One schema-bounded change. Validate with ``context={"dimensions": {...}}``."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    path: str
    direction: str
    value: Any = None
    why: str = ""

    @model_validator(mode="before")
    @classmethod
    def _legal(cls, data: Any, info: ValidationInfo) -> Any:
        """Normalise ``set:<value>`` directions and check path, direction and value against the schema."""
        if not isinstance(data, dict):
            raise ValueError(f"a proposal must be a JSON object, got {type(data).__name__}")
        path, direction, value = data.get("path"), data.get("direction"), data.get("value")
        if not isinstance(path, str) or not isinstance(direction, str):
            raise ValueError("a proposal needs string fields 'path' and 'direction'")
        direction = direction.strip()
        verb, colon, rest = direction.partition(":")
        if colon and verb.lower() in VALUED:
            direction, value = verb.lower(), rest if value is None else value
        direction = direction.lower()
        context = info.context or {}
        dims: dict[str, EvolvableDimension] = context["dimensions"] if "dimensions" in context else evolvable_dimensions()
        dim = dims.get(path)
        if dim is None:
            raise ValueError(f"path {path!r} is not evolvable")
        legal = _directions(dim)
        if direction not in legal:
            raise ValueError(f"direction {direction!r} is illegal for {dim.kind} path {path!r}; use one of {legal}")
        return {**data, "direction": direction, "value": _legal_value(dim, direction, value)}

    @property
    def step(self) -> Step:
        if self.direction in VALUED:
            return Step(self.path, self.direction, value_text(self.value))
        return Step(self.path, self.direction)

    @property
    def key(self) -> str:
        """The dimension-effects key: the step's text."""
        return str(self.step)


@dataclass(frozen=True)
class PlannerResult:
    proposals: tuple[ProposalReply, ...]
    dropped_reasons: tuple[str, ...]
    attempts: int


def _directions(dim: EvolvableDimension) -> tuple[str, ...]:
    if dim.kind == "prompt":
        return (EDIT,)
    return MOVES[dim.kind] + (() if dim.kind == "boolean" else (SET,))


def proposals_schema(dims: dict[str, EvolvableDimension], max_proposals: int) -> dict:
    """JSON schema of a planner reply: 1..``max_proposals`` proposals on evolvable paths (values are checked by
    :class:`ProposalReply`, which knows each path's range)."""
    directions = sorted({d for dim in dims.values() for d in _directions(dim)})
    item = {"type": "object", "required": ["path", "direction", "why"],
            "properties": {"path": {"type": "string", "enum": sorted(dims)},
                           "direction": {"type": "string", "enum": directions},
                           "value": {"type": ["number", "string", "boolean", "null"]},
                           "why": {"type": "string", "maxLength": 200}}}
    return {"type": "array", "minItems": 1, "maxItems": max_proposals, "items": item}


def _describe(dim: EvolvableDimension, strategy: dict | None) -> str:
    if dim.kind == "prompt":
        text = (f"{dim.path}: prompt template of the {dim.role}; direction edit, value = one instruction line "
                f"({MIN_CHARS}-{MAX_CHARS} characters, no braces, no WORD: markers) added before its last line")
        if strategy is not None:
            prompt = get_path(strategy, dim.path)
            text += f"; now (v{prompt['version']}):\n" + "\n".join("    | " + l for l in prompt["template"].splitlines())
        return text
    if dim.kind == "enum":
        return f"{dim.path}: enum, one of {'|'.join(dim.choices)}"
    if dim.kind == "boolean":
        return f"{dim.path}: boolean"
    return f"{dim.path}: {dim.kind} in [{dim.low:g}, {dim.high:g}], step {dim.step:g}, at most {dim.max_step:g} per change"


class LLMPlanner:
    """JSON change proposals from a failure digest; invalid ones are re-asked, then dropped with a reason."""

    def __init__(self, client: LLMClient, max_attempts: int = 3):
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.client, self.max_attempts = client, max_attempts
        self.name = f"llm-planner/{client.model}"
        self._template = load_prompt(PLANNER_PROMPT)

    def plan(self, digest: dict, reputations: dict, dimensions: dict[str, EvolvableDimension] | None = None,
             max_proposals: int = 3, strategy: dict | None = None) -> PlannerResult:
        """Proposals for ``digest``; given the current ``strategy``, its prompt templates are shown beside their
        paths."""
        dims = dimensions if dimensions is not None else evolvable_dimensions()
        prompt = fill(self._template, digest=pretty(digest), reputations=pretty(reputations),
                      dimensions="\n".join(_describe(d, strategy) for d in dims.values()),
                      max_proposals=str(max_proposals))

        def parse(reply: str) -> tuple[list[ProposalReply], list[str]]:
            try:
                items = json_payload(reply)
            except ValueError as exc:
                return [], [str(exc)]
            if not isinstance(items, list):
                return [], [f"expected a JSON array of proposals, got {type(items).__name__}"]
            valid, errors = [], []
            for i, item in enumerate(items, 1):
                try:
                    valid.append(ProposalReply.model_validate(item, context={"dimensions": dims}))
                except ValidationError as exc:
                    errors.append(f"proposal {i}: {validation_errors(exc)}")
            return valid, errors

        valid, errors, attempts = ask_json(self.client, prompt, parse, self.max_attempts,
                                           proposals_schema(dims, max_proposals))
        dropped = [f"invalid after {attempts} attempt(s): {e}" for e in errors]
        kept: list[ProposalReply] = []
        for proposal in valid:
            if any(p.key == proposal.key for p in kept):
                dropped.append(f"{proposal.key}: duplicate proposal")
            elif len(kept) >= max_proposals:
                dropped.append(f"{proposal.key}: beyond the limit of {max_proposals} proposals")
            else:
                kept.append(proposal)
        return PlannerResult(tuple(kept), tuple(dropped), attempts)


# ---------------------------------------------------------------- critic


class CriticReply(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    label: CriticLabel
    reasons: tuple[str, ...] = Field(min_length=1)


REVIEW_SCHEMA = {"type": "object", "required": ["label", "reasons"],
                 "properties": {"label": {"type": "string", "enum": list(CRITIC_LABELS)},
                                "reasons": {"type": "array", "minItems": 1, "maxItems": 3,
                                            "items": {"type": "string", "maxLength": 200}}}}


@dataclass(frozen=True)
class CriticVerdict:
    label: str  # one of CRITIC_LABELS
    reasons: tuple[str, ...]
    attempts: int


class LLMCritic:
    """Labels a candidate change from its review packet; unusable output becomes "risky" with the reason."""

    def __init__(self, client: LLMClient, max_attempts: int = 3):
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.client, self.max_attempts = client, max_attempts
        self.name = f"llm-critic/{client.model}"
        self._template = load_prompt(CRITIC_PROMPT)

    def review(self, packet: dict) -> CriticVerdict:
        def parse(reply: str) -> tuple[CriticReply | None, list[str]]:
            try:
                payload = json_payload(reply)
            except ValueError as exc:
                return None, [str(exc)]
            try:
                return CriticReply.model_validate(payload), []
            except ValidationError as exc:
                return None, [validation_errors(exc)]

        review, errors, attempts = ask_json(self.client, fill(self._template, packet=pretty(packet)), parse,
                                             self.max_attempts, REVIEW_SCHEMA)
        if review is None:
            return CriticVerdict("risky", tuple(f"critic output invalid after {attempts} attempt(s): {e}"
                                                for e in errors), attempts)
        return CriticVerdict(review.label, review.reasons, attempts)


# ---------------------------------------------------------------- the engine's seams


class CriticAdvisor:
    """The LLM critic behind the engine's critic seam (:class:`evolve.verify.critic.Critic`)."""

    def __init__(self, critic: LLMCritic):
        self.critic = critic

    def review(self, packet: CriticPacket) -> CriticReview:
        verdict = self.critic.review(packet.to_dict())
        return CriticReview(verdict.label, list(verdict.reasons))


class PlannerAdvisor:
    """The LLM planner behind the planner seam (:class:`evolve.improve.proposer.Proposer`). Each proposal becomes a
    direction aimed at the most severe symptom its group can fix; dropped output is kept in :attr:`notes`."""

    def __init__(self, planner: LLMPlanner, effects: DimensionEffects, dims: dict[str, EvolvableDimension]):
        self.planner, self.effects, self.dims = planner, effects, dims
        self.notes: list[str] = []

    def plan(self, digest: Digest, strategy: dict, n: int, *, words: float | None = None) -> list[Direction]:
        """Up to ``n`` directions from the model's proposals (of ``strategy`` it sees the prompt templates it may
        edit; ``words`` is not shown to it)."""
        ranked = digest.ranked()
        result = self.planner.plan(digest.to_dict(), self.effects.to_dict(), self.dims, n, strategy)
        self.notes = [f"llm planner dropped: {r}" for r in result.dropped_reasons]
        directions = []
        for rank, proposal in enumerate(result.proposals):
            group = self.dims[proposal.path].group
            symptom = next((sy.key for sy in ranked if group in fixing_groups(sy.root_cause)),
                           ranked[0].key if ranked else "unresolved/*")
            directions.append(Direction(Move.of(proposal.step), symptom, 1.0 - 0.01 * rank,
                                        f"llm planner: {proposal.why}"))
        return directions
