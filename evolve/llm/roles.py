"""LLM implementations of the runtime roles (``evolve.runtime.roles``) and of the optimizer's judge, planner and critic.

Runtime roles fill the strategy's own prompt templates; a short system message carries the policy
knobs and the reply format the parser relies on. Judge, planner and critic use the framework's
versioned prompts in ``evolve/data/prompts/``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Literal, Sequence, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from evolve.benchmarks.types import Turn
from evolve.data import PROMPTS_DIR
from evolve.llm.cache import ResponseCache
from evolve.llm.client import LLMClient, UsageStats
from evolve.llm.config import RolesConfig
from evolve.strategy.policy import Answering, Expansion, Extraction
from evolve.runtime.roles import FACT_KINDS, AnswerResult, ContextItem, ExtractedFact, Judgment
from evolve.strategy.artifact import EvolvableDimension, evolvable_dimensions

JUDGE_PROMPT, PLANNER_PROMPT, CRITIC_PROMPT, REPAIR_PROMPT = "judge.v1", "planner.v1", "critic.v1", "repair.v1"
CriticLabel = Literal["actionable", "risky", "duplicate", "out_of_scope"]
CRITIC_LABELS: tuple[str, ...] = get_args(CriticLabel)
DIRECTIONS = {"integer": ("increase", "decrease", "set"), "number": ("increase", "decrease", "set"),
              "boolean": ("enable", "disable"), "enum": ("set",)}

T = TypeVar("T")

_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")
_KIND_TAG = re.compile(r"^\[(" + "|".join(FACT_KINDS) + r")\]\s*", re.IGNORECASE)
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_VERDICT = re.compile(r"\b(CORRECT|WRONG)\b")


# ---------------------------------------------------------------- prompt and reply helpers


def load_prompt(name: str) -> str:
    """A framework prompt by versioned name, e.g. ``judge.v1``."""
    path = PROMPTS_DIR / f"{name}.txt"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no framework prompt named {name!r}") from None


def fill(template: str, **values: str) -> str:
    """Replace each ``{name}`` placeholder in one pass (other braces are left alone)."""
    missing = [k for k in values if "{" + k + "}" not in template]
    if missing:
        raise ValueError(f"prompt template lacks placeholder(s) {['{' + k + '}' for k in missing]}")
    pattern = re.compile(r"\{(" + "|".join(map(re.escape, values)) + r")\}")
    return pattern.sub(lambda m: values[m.group(1)], template)


def _after_marker(reply: str, marker: str) -> str:
    """The text after the last ``marker`` in ``reply`` (case-insensitive), or the whole reply."""
    at = reply.upper().rfind(marker.upper())
    return reply[at + len(marker):] if at >= 0 else reply


def _lines(text: str) -> list[str]:
    """Non-empty lines without bullets or numbering."""
    return [s for s in (_BULLET.sub("", line).strip() for line in text.splitlines()) if s]


def _strip_citations(text: str, ids: Collection[str]) -> tuple[str, list[str]]:
    """``text`` without bracketed groups naming known ``ids`` (whitespace collapsed), and the ids cited."""
    cited: list[str] = []

    def citation(m: re.Match) -> str:
        valid = [tok for tok in re.split(r"[,;\s]+", m.group(1)) if tok in ids]
        cited.extend(tok for tok in dict.fromkeys(valid) if tok not in cited)
        return "" if valid else m.group(0)

    return " ".join(_BRACKET.sub(citation, text).split()), cited


def _json_payload(reply: str) -> Any:
    """The first JSON value in ``reply`` (code fences and surrounding prose are ignored)."""
    text = re.sub(r"```(?:json)?", "", reply).strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
    for start in sorted(starts):
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0]
        except json.JSONDecodeError:
            continue
    raise ValueError("reply contains no valid JSON")


def _pretty(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False, default=str)


def _user(prompt: str, system: str | None = None) -> list[dict]:
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": prompt}]


def _ask_json(client: LLMClient, prompt: str, parse: Callable[[str], tuple[T, list[str]]],
              max_attempts: int) -> tuple[T, list[str], int]:
    """Ask, and re-ask with the validation errors until ``parse`` reports none or attempts run out.

    Returns the last parsed value, its remaining errors and the number of attempts made.
    """
    messages, attempt = _user(prompt), 1
    while True:
        reply = client.complete(messages)
        value, errors = parse(reply)
        if not errors or attempt >= max_attempts:
            return value, errors, attempt
        repair = fill(load_prompt(REPAIR_PROMPT), errors="\n".join(f"- {e}" for e in errors))
        messages = [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": repair}]
        attempt += 1


def _validation_errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"] else e["msg"] for e in exc.errors())


# ---------------------------------------------------------------- runtime roles


def _date(turn_time: Any) -> str:
    return turn_time.strftime("%Y-%m-%d") if turn_time else "undated"


class LLMExtractor:
    """Facts from a dialogue window through the strategy's extraction prompt."""

    def __init__(self, client: LLMClient):
        self.client = client
        self.name = f"llm-extractor/{client.model}"

    def extract(self, window: Sequence[Turn], policy: Extraction) -> list[ExtractedFact]:
        if not window:
            return []
        lines = "\n".join(f"{t.speaker} ({_date(t.timestamp)}) [{t.id}]: {t.text}" for t in window)
        rules = [f"Write at most {policy.max_facts_per_window} facts.",
                 "End each fact with the ids of the turns it comes from in brackets, e.g. [D1:3].",
                 "Start a fact with [profile] for a lasting trait or preference of a speaker, with [correction] "
                 "when it corrects an earlier statement, with [retraction] when a speaker withdraws one."]
        if policy.resolve_relative_dates:
            rules.append("Rewrite relative dates (yesterday, last week) as calendar dates using the turn's date.")
        reply = self.client.complete(_user(fill(policy.prompt.template, window=lines), " ".join(rules)))
        facts = [self._fact(line, window) for line in _lines(_after_marker(reply, "FACTS:"))]
        kept = [f for f in facts if f is not None and len(f.text.split()) >= policy.min_fact_tokens]
        return kept[: policy.max_facts_per_window]

    @staticmethod
    def _fact(line: str, window: Sequence[Turn]) -> ExtractedFact | None:
        by_id = {t.id: t for t in window}
        kind = "fact"
        tag = _KIND_TAG.match(line)
        if tag:
            kind, line = tag.group(1).lower(), line[tag.end():]
        text, cited = _strip_citations(line, by_id)
        text = text.strip(" :-")
        if not text or text.lower() in ("none", "n/a"):
            return None
        turns = [t for t in window if t.id in cited] or list(window)
        source = next((t for t in turns if t.speaker and t.speaker.lower() in text.lower()), turns[0])
        return ExtractedFact(text=text, source_ids=tuple(t.id for t in turns), speaker=source.speaker,
                             timestamp=source.timestamp, kind=kind)


class LLMExpander:
    """Sub-queries for a question through the strategy's expansion prompt."""

    def __init__(self, client: LLMClient):
        self.client = client
        self.name = f"llm-expander/{client.model}"

    def expand(self, question: str, policy: Expansion) -> list[str]:
        if policy.max_subqueries == 0:
            return []
        focus = [name for name, on in (("named entities", policy.entities), ("dates and times", policy.dates),
                                       ("keywords", policy.keywords)) if on]
        rules = f"Write at most {policy.max_subqueries} sub-queries, one per line."
        if focus:
            rules += f" Cover the question's {', '.join(focus)}."
        reply = self.client.complete(_user(fill(policy.prompt.template, question=question), rules))
        out: list[str] = []
        for line in _lines(_after_marker(reply, "SUBQUERIES:")):
            if line.lower() not in (q.lower() for q in out):
                out.append(line)
        return out[: policy.max_subqueries]


class LLMAnswerer:
    """An answer from packed context through the strategy's answering prompt."""

    def __init__(self, client: LLMClient):
        self.client = client
        self.name = f"llm-answerer/{client.model}"

    def answer(self, question: str, context: Sequence[ContextItem], policy: Answering, intent: str) -> AnswerResult:
        memory = "\n".join(f"[{c.id}] ({_date(c.timestamp)}) {c.text}" for c in context) or "(no memory)"
        shape = "a short clause" if policy.span == "clause" else "one sentence"
        rules = [f"Answer in at most {policy.max_answer_tokens} words, as {shape}.",
                 "After the answer you may cite the ids of the memory items you used in brackets."]
        if policy.temporal_dates and intent == "temporal":
            rules.append("Give times as calendar dates (e.g. 7 May 2023), resolved against the memory's dates.")
        prompt = fill(policy.prompt.template, context=memory, question=question)
        reply = self.client.complete(_user(prompt, " ".join(rules)))
        text, cited = _strip_citations(_after_marker(reply, "ANSWER:"), {c.id for c in context})
        text = " ".join(text.split()[: policy.max_answer_tokens])
        support = tuple(cited) or tuple(c.id for c in context)
        return AnswerResult(text=text, support_ids=support)


# ---------------------------------------------------------------- judge


class LLMJudge:
    """LoCoMo-style CORRECT/WRONG judgment: ``votes`` calls with distinct seeds, majority wins."""

    def __init__(self, client: LLMClient, votes: int = 3):
        if votes < 1 or votes % 2 == 0:
            raise ValueError(f"votes must be odd and positive, got {votes}")
        self.client, self.votes = client, votes
        self.name = f"llm-judge/{client.model}"
        self._template = load_prompt(JUDGE_PROMPT)

    def judge(self, question: str, gold: str, answer: str) -> Judgment:
        prompt = fill(self._template, question=question, gold=str(gold), answer=answer)
        votes = tuple(self._vote(self.client.complete(_user(prompt), seed=seed)) for seed in range(self.votes))
        share = sum(votes) / len(votes)
        return Judgment(correct=share > 0.5, score=share, judge=self.name, votes=votes)

    @staticmethod
    def _vote(reply: str) -> bool:
        """True for CORRECT; an unreadable reply counts as WRONG."""
        try:
            payload = _json_payload(reply)
            label = payload.get("label") if isinstance(payload, dict) else None
        except ValueError:
            label = None
        if not isinstance(label, str):
            found = _VERDICT.findall(reply.upper())
            label = found[-1] if found else "WRONG"
        return label.strip().upper() == "CORRECT"


# ---------------------------------------------------------------- planner


def _legal_value(dim: EvolvableDimension, direction: str, value: Any) -> Any:
    """``value`` checked against the dimension (None where the direction needs none)."""
    if dim.kind == "boolean":
        return None
    if dim.kind == "enum":
        if value not in dim.choices:
            raise ValueError(f"value {value!r} for {dim.path!r} must be one of {dim.choices}")
        return value
    if value is None:
        if direction == "set":
            raise ValueError(f"direction 'set' on {dim.path!r} needs a value")
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if isinstance(value, bool) or number is None or not dim.low <= number <= dim.high:
        raise ValueError(f"value {value!r} for {dim.path!r} must be a number in [{dim.low:g}, {dim.high:g}]")
    if dim.kind == "integer":
        if number != int(number):
            raise ValueError(f"value {value!r} for {dim.path!r} must be an integer")
        return int(number)
    return number


class Proposal(BaseModel):
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
        direction = direction.strip().lower()
        if direction.startswith("set:"):
            direction, value = "set", direction[4:] if value is None else value
        context = info.context or {}
        dims: dict[str, EvolvableDimension] = context["dimensions"] if "dimensions" in context else evolvable_dimensions()
        dim = dims.get(path)
        if dim is None:
            raise ValueError(f"path {path!r} is not evolvable")
        legal = DIRECTIONS[dim.kind]
        if direction not in legal:
            raise ValueError(f"direction {direction!r} is illegal for {dim.kind} path {path!r}; use one of {legal}")
        return {**data, "direction": direction, "value": _legal_value(dim, direction, value)}

    @property
    def key(self) -> str:
        """Dimension-effects key ``<path>::<direction>`` (``set:<value>`` for sets)."""
        direction = f"set:{self.value}" if self.direction == "set" else self.direction
        return f"{self.path}::{direction}"


@dataclass(frozen=True)
class PlannerResult:
    proposals: tuple[Proposal, ...]
    dropped_reasons: tuple[str, ...]
    attempts: int


def _describe(dim: EvolvableDimension) -> str:
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
             max_proposals: int = 3) -> PlannerResult:
        dims = dimensions if dimensions is not None else evolvable_dimensions()
        prompt = fill(self._template, digest=_pretty(digest), reputations=_pretty(reputations),
                      dimensions="\n".join(_describe(d) for d in dims.values()), max_proposals=str(max_proposals))

        def parse(reply: str) -> tuple[list[Proposal], list[str]]:
            try:
                items = _json_payload(reply)
            except ValueError as exc:
                return [], [str(exc)]
            if not isinstance(items, list):
                return [], [f"expected a JSON array of proposals, got {type(items).__name__}"]
            valid, errors = [], []
            for i, item in enumerate(items, 1):
                try:
                    valid.append(Proposal.model_validate(item, context={"dimensions": dims}))
                except ValidationError as exc:
                    errors.append(f"proposal {i}: {_validation_errors(exc)}")
            return valid, errors

        valid, errors, attempts = _ask_json(self.client, prompt, parse, self.max_attempts)
        dropped = [f"invalid after {attempts} attempt(s): {e}" for e in errors]
        kept: list[Proposal] = []
        for proposal in valid:
            if any(p.key == proposal.key for p in kept):
                dropped.append(f"{proposal.key}: duplicate proposal")
            elif len(kept) >= max_proposals:
                dropped.append(f"{proposal.key}: beyond the limit of {max_proposals} proposals")
            else:
                kept.append(proposal)
        return PlannerResult(tuple(kept), tuple(dropped), attempts)


# ---------------------------------------------------------------- critic


class CriticReview(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    label: CriticLabel
    reasons: tuple[str, ...] = Field(min_length=1)


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
        def parse(reply: str) -> tuple[CriticReview | None, list[str]]:
            try:
                payload = _json_payload(reply)
            except ValueError as exc:
                return None, [str(exc)]
            try:
                return CriticReview.model_validate(payload), []
            except ValidationError as exc:
                return None, [_validation_errors(exc)]

        review, errors, attempts = _ask_json(self.client, fill(self._template, packet=_pretty(packet)), parse,
                                             self.max_attempts)
        if review is None:
            return CriticVerdict("risky", tuple(f"critic output invalid after {attempts} attempt(s): {e}"
                                                for e in errors), attempts)
        return CriticVerdict(review.label, review.reasons, attempts)


# ---------------------------------------------------------------- wiring

ROLE_CLASSES: dict[str, type] = {"extractor": LLMExtractor, "expander": LLMExpander, "answerer": LLMAnswerer,
                                 "judge": LLMJudge, "planner": LLMPlanner, "critic": LLMCritic}


def build_llm_roles(config: RolesConfig, cache: ResponseCache, stats: UsageStats) -> dict[str, Any]:
    """LLM role objects, by role name, for every role whose backend is ``llm``."""
    return {role: cls(LLMClient(config.role(role), cache, stats, role=role))
            for role, cls in ROLE_CLASSES.items() if config.role(role).backend == "llm"}
