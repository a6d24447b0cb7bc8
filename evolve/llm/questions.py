"""The question-generation role: probe questions about a conversation written by an LLM, one call per session.

Replies are pydantic-validated JSON (re-asked with the errors); every question then passes the same quality filter
as the deterministic generators (:func:`evolve.benchmarks.probes.probe_quality`): evidence ids must name turns of
the session, the answer must be recoverable from them and not already in the question.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evolve.benchmarks.probes import Probe, format_date, probe_quality
from evolve.benchmarks.types import Conversation, Session
from evolve.llm.client import LLMClient
from evolve.llm.prompting import ask_json, fill, json_payload, load_prompt, validation_errors

QUESTIONS_PROMPT = "questions.v1"
QUESTIONS_SCHEMA = {"type": "object", "required": ["questions"], "properties": {"questions": {
    "type": "array", "items": {"type": "object", "required": ["question", "answer", "evidence"], "properties": {
        "question": {"type": "string"}, "answer": {"type": "string"},
        "evidence": {"type": "array", "items": {"type": "string"}}}}}}}


class _Item(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    question: str = Field(min_length=5, max_length=300)
    answer: str = Field(min_length=1, max_length=100)
    evidence: list[str] = Field(min_length=1, max_length=4)


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    questions: list[_Item]


class LLMQuestioner:
    """Writes up to ``per_session`` probe questions per session through the framework's questions prompt."""

    def __init__(self, client: LLMClient, per_session: int = 5, max_attempts: int = 2):
        if per_session < 1 or max_attempts < 1:
            raise ValueError(f"per_session and max_attempts must be >= 1, got {per_session}, {max_attempts}")
        self.client, self.per_session, self.max_attempts = client, per_session, max_attempts
        self.name = f"llm-questioner/{client.model}"
        self._template = load_prompt(QUESTIONS_PROMPT)

    def session_probes(self, session: Session) -> tuple[list[Probe], list[str]]:
        """The usable probes of one session and why the others were dropped."""
        turns = "\n".join(f"[{t.id}] {t.speaker}: {t.text}" for t in session.turns)
        prompt = fill(self._template, date=format_date(session.timestamp) if session.timestamp else "undated",
                      turns=turns, n=str(self.per_session))

        def parse(reply: str) -> tuple[_Reply | None, list[str]]:
            try:
                return _Reply.model_validate(json_payload(reply)), []
            except ValueError as exc:
                return None, [validation_errors(exc) if isinstance(exc, ValidationError) else str(exc)]

        reply, errors, _ = ask_json(self.client, prompt, parse, self.max_attempts, QUESTIONS_SCHEMA)
        if reply is None:
            return [], [f"session {session.id}: reply unusable: {'; '.join(errors)}"]
        by_id = {t.id: t for t in session.turns}
        probes, dropped = [], []
        for item in reply.questions[:self.per_session]:
            unknown = [e for e in item.evidence if e not in by_id]
            why = (f"evidence {unknown} names no turn of the session" if unknown else
                   probe_quality(item.question, item.answer, [by_id[e] for e in item.evidence]))
            if why is None:
                probes.append(Probe("llm", item.question.strip(), item.answer.strip(), tuple(item.evidence)))
            else:
                dropped.append(f"session {session.id}: {item.question!r}: {why}")
        return probes, dropped

    def probes(self, conversation: Conversation) -> list[Probe]:
        """The usable probes of every session of ``conversation``, in session order."""
        return [p for session in conversation.sessions for p in self.session_probes(session)[0]]
