"""LLM implementations of the runtime roles (``evolve.runtime.roles``) and of the judge.

Runtime roles fill the strategy's own prompt templates; a short system message carries the policy knobs and the
reply format the parser relies on. The judge uses the framework's versioned prompt in ``evolve/data/prompts/``.
"""
from __future__ import annotations

import contextvars
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from evolve.benchmarks.types import Turn
from evolve.llm.cache import ResponseCache
from evolve.llm.client import DryRun, LLMClient
from evolve.runtime.usage import UsageStats
from evolve.llm.config import RolesConfig
from evolve.llm.advisors import LLMCritic, LLMPlanner
from evolve.llm.fuser import LLMFusionJudge
from evolve.llm.questions import LLMQuestioner
from evolve.llm.prompting import (after_marker, fill, json_payload, load_prompt, reply_lines, strip_citations,
                                  structured, user_message)
from evolve.runtime.roles import FACT_KINDS, AnswerResult, ContextItem, ExtractedFact, Judgment
from evolve.strategy.policy import Answering, Expansion, Extraction

#: The judge's frame prompt; the criteria it is filled with are prompts of their own.
JUDGE_PROMPT = "judge.v2"
#: Criteria for questions of no benchmark-specific type (LoCoMo's generous judgment), against the gold answer.
DEFAULT_CRITERIA = ("judge-default.v2", "GOLD ANSWER")
#: Criteria for an unanswerable question (LongMemEval's ``_abs`` questions): the answer should decline.
ABSTENTION_CRITERIA = ("judge-lme-abstention.v2", "EXPLANATION")
#: LongMemEval's per-type criteria (the evaluation prompts of Wu et al., "LongMemEval: Benchmarking Chat Assistants
#: on Long-Term Interactive Memory", ICLR 2025, restated with a four-way label): temporal reasoning forgives
#: off-by-one counts of days, knowledge update accepts the updated answer beside earlier information, preference
#: questions are judged on a rubric.
LONGMEMEVAL_CRITERIA = {
    "single_session_user": ("judge-lme-answer.v2", "CORRECT ANSWER"),
    "single_session_assistant": ("judge-lme-answer.v2", "CORRECT ANSWER"),
    "multi_session": ("judge-lme-answer.v2", "CORRECT ANSWER"),
    "temporal_reasoning": ("judge-lme-temporal.v2", "CORRECT ANSWER"),
    "knowledge_update": ("judge-lme-update.v2", "CORRECT ANSWER"),
    "single_session_preference": ("judge-lme-preference.v2", "RUBRIC"),
}
JUDGE_LABELS = ("CORRECT", "PARTIAL", "WRONG", "ABSTAIN")
_TIE_ORDER = ("WRONG", "PARTIAL", "ABSTAIN")
_KIND_TAG = re.compile(r"^\[(" + "|".join(FACT_KINDS) + r")\]\s*", re.IGNORECASE)
_VERDICT = re.compile(r"\b(" + "|".join(JUDGE_LABELS) + r")\b")
JUDGE_SCHEMA = {"type": "object", "required": ["reasoning", "label"],
                "properties": {"reasoning": {"type": "string", "maxLength": 200},
                               "label": {"type": "string", "enum": list(JUDGE_LABELS)}}}
#: Where the answerer's reply ends at the latest: a model that goes on writes the prompt's next section.
ANSWER_STOP = ["\nQUESTION:", "\nMEMORY:"]


# ---------------------------------------------------------------- runtime roles


def _date(turn_time: Any) -> str:
    return turn_time.strftime("%Y-%m-%d") if turn_time else "undated"


class _LLMRole:
    """A role backed by an :class:`LLMClient`; ``concurrency`` is the role's configured limit of calls in flight."""

    client: LLMClient

    @property
    def concurrency(self) -> int:
        return self.client.cfg.concurrency


class LLMExtractor(_LLMRole):
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
            rules.append("Rewrite relative dates (yesterday, last week) as calendar dates using the turn's date."
                         if policy.date_style == "replace" else "After each relative date (yesterday, last week) add "
                         "its calendar date in parentheses, from the turn's date; keep the words as said.")
        reply = self.client.complete(user_message(fill(policy.prompt.template, window=lines), " ".join(rules)))
        facts = [self._fact(line, window) for line in reply_lines(after_marker(reply, "FACTS:"))]
        kept = [f for f in facts if f is not None and len(f.text.split()) >= policy.min_fact_tokens]
        return kept[: policy.max_facts_per_window]

    @staticmethod
    def _fact(line: str, window: Sequence[Turn]) -> ExtractedFact | None:
        by_id = {t.id: t for t in window}
        kind = "fact"
        tag = _KIND_TAG.match(line)
        if tag:
            kind, line = tag.group(1).lower(), line[tag.end():]
        text, cited = strip_citations(line, by_id)
        text = text.strip(" :-")
        if not text or text.lower() in ("none", "n/a"):
            return None
        turns = [t for t in window if t.id in cited] or list(window)
        source = next((t for t in turns if t.speaker and t.speaker.lower() in text.lower()), turns[0])
        return ExtractedFact(text=text, source_ids=tuple(t.id for t in turns), speaker=source.speaker,
                             timestamp=source.timestamp, kind=kind)


class LLMExpander(_LLMRole):
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
        reply = self.client.complete(user_message(fill(policy.prompt.template, question=question), rules))
        out: list[str] = []
        for line in reply_lines(after_marker(reply, "SUBQUERIES:")):
            if line.lower() not in (q.lower() for q in out):
                out.append(line)
        return out[: policy.max_subqueries]


def answer_tokens(policy: Answering) -> int:
    """Completion tokens an answer may take: two a word of ``max_answer_tokens`` plus room for citations."""
    return 2 * policy.max_answer_tokens + 24


class LLMAnswerer(_LLMRole):
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
        reply = self.client.complete(user_message(prompt, " ".join(rules)), stop=ANSWER_STOP,
                                     max_tokens=min(self.client.cfg.max_tokens, answer_tokens(policy)))
        text, cited = strip_citations(after_marker(reply, "ANSWER:"), {c.id for c in context})
        text = " ".join(text.split()[: policy.max_answer_tokens])
        support = tuple(cited) or tuple(c.id for c in context)
        return AnswerResult(text=text, support_ids=support)


# ---------------------------------------------------------------- judge


class LLMJudge(_LLMRole):
    """A four-way verdict (:data:`JUDGE_LABELS`) from ``votes`` calls with distinct seeds: correct when a majority
    says CORRECT, otherwise the most frequent other label (ties: WRONG, PARTIAL, ABSTAIN in that order). The
    criteria follow the question (:func:`judge_criteria`)."""

    def __init__(self, client: LLMClient, votes: int = 3):
        if votes < 1 or votes % 2 == 0:
            raise ValueError(f"votes must be odd and positive, got {votes}")
        self.client, self.votes = client, votes
        self.name = f"llm-{JUDGE_PROMPT}/{client.model}"
        self._template = load_prompt(JUDGE_PROMPT)
        self._criteria = {name: load_prompt(name) for name, _ in {DEFAULT_CRITERIA, ABSTENTION_CRITERIA,
                                                                   *LONGMEMEVAL_CRITERIA.values()}}

    def judge(self, question: str, gold: str, answer: str, *, category: str = "",
              abstention: bool = False) -> Judgment:
        criteria, reference = judge_criteria(category, abstention)
        prompt = fill(self._template, criteria=self._criteria[criteria].strip(), question=question,
                      reference=reference, gold=str(gold), answer=answer)
        params = structured(self.client, JUDGE_SCHEMA)
        contexts = [contextvars.copy_context() for _ in range(self.votes)]  # each vote tallied to this question
        with ThreadPoolExecutor(min(self.votes, self.concurrency)) as pool:  # votes in parallel, kept in seed order
            replies = list(pool.map(lambda seed: contexts[seed].run(self.client.complete, user_message(prompt),
                                                                     seed=seed, **params), range(self.votes)))
        labels = [self._label(reply) for reply in replies]
        votes = tuple(label == "CORRECT" for label in labels)
        share = sum(votes) / len(votes)
        others = Counter(label for label in labels if label != "CORRECT")
        verdict = "correct" if share > 0.5 else max(_TIE_ORDER, key=lambda label: others[label]).lower()
        return Judgment(correct=share > 0.5, score=share, judge=self.name, votes=votes, verdict=verdict)

    @staticmethod
    def _label(reply: str) -> str:
        """The reply's label; an unreadable reply counts as WRONG."""
        try:
            payload = json_payload(reply)
            label = payload.get("label") if isinstance(payload, dict) else None
        except ValueError:
            label = None
        if not isinstance(label, str) or label.strip().upper() not in JUDGE_LABELS:
            found = _VERDICT.findall(reply.upper())
            label = found[-1] if found else "WRONG"
        return label.strip().upper()


def judge_criteria(category: str, abstention: bool) -> tuple[str, str]:
    """``(criteria prompt, name of the reference)`` for a question: an unanswerable question is judged on whether
    the answer declines; a LongMemEval question by its type's criteria (:data:`LONGMEMEVAL_CRITERIA`); any other by
    :data:`DEFAULT_CRITERIA` against the gold answer."""
    if abstention:
        return ABSTENTION_CRITERIA
    return LONGMEMEVAL_CRITERIA.get(category, DEFAULT_CRITERIA)


# ---------------------------------------------------------------- wiring

ROLE_CLASSES: dict[str, type] = {"extractor": LLMExtractor, "expander": LLMExpander, "answerer": LLMAnswerer,
                                 "judge": LLMJudge, "planner": LLMPlanner, "critic": LLMCritic,
                                 "questioner": LLMQuestioner, "fuser": LLMFusionJudge}


#: What a dry run (:class:`~evolve.llm.client.DryRun`) answers in place of a call, in each role's reply format:
#: no facts, no sub-queries, a non-answer, a WRONG verdict.
DRY_REPLIES = {"extractor": "FACTS:", "expander": "SUBQUERIES:", "answerer": "ANSWER: (dry run)",
               "judge": '{"label": "WRONG"}', "planner": "{}", "critic": "{}", "questioner": '{"questions": []}',
               "fuser": '{"decision": "standalone"}'}


def build_llm_role(role: str, config: RolesConfig, cache: ResponseCache, stats: UsageStats, *,
                   dry_observing: UsageStats | None = None, dry: bool = False) -> Any:
    """The LLM object of ``role`` on its configured endpoint. With ``dry`` it calls no endpoint: cache misses are
    tallied in ``stats`` as the requests they would be (``dry_observing``: the real calls whose completion sizes the
    estimate follows)."""
    return ROLE_CLASSES[role](LLMClient(config.role(role), cache, stats, role=role,
                                        dry=DryRun(DRY_REPLIES[role], dry_observing) if dry else None))


def build_llm_roles(config: RolesConfig, cache: ResponseCache, stats: UsageStats, *,
                    dry_observing: UsageStats | None = None, dry: bool = False) -> dict[str, Any]:
    """:func:`build_llm_role` for every role whose backend is ``llm``, by role name."""
    return {role: build_llm_role(role, config, cache, stats, dry_observing=dry_observing, dry=dry)
            for role in ROLE_CLASSES if config.role(role).backend == "llm"}
