"""The roles a harness runs with, and the evaluator that turns conversations' questions into traces; the same
code runs in-process, in worker processes and on Ray actors (:mod:`evolve.observe.executors`)."""
from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Literal

from evolve.benchmarks.types import Benchmark, Question
from evolve.observe.abstention import abstains
from evolve.observe.judge import TokenF1Judge, confabulated, support
from evolve.observe.measures import measure
from evolve.observe.trace import STAGE_FIELDS, Trace
from evolve.runtime import IngestionCache, MemoryRuntime
from evolve.runtime.external import AdapterError, ExternalSystem
from evolve.runtime.fusion import FusionJudge
from evolve.runtime.runtime import Runtime
from evolve.runtime.roles import Answerer, Expander, Extractor, Judge, Judgment, RoleError
from evolve.runtime.store import MemoryStore
from evolve.runtime.subject import subject
from evolve.runtime.usage import question_usage


@dataclass
class Roles:
    """Which implementation plays each runtime role; ``None`` means the deterministic default."""

    extractor: Extractor | None = None
    expander: Expander | None = None
    answerer: Answerer | None = None
    #: The fusion judge of ``features.fusion`` (``None``: the rule judge).
    fuser: FusionJudge | None = None
    judge: Judge = field(default_factory=TokenF1Judge)
    #: When a role fails (:class:`RoleError`): "stop" the evaluation, or "mark" the question as failed (its
    #: trace carries the error and it is left out of scoring, so a paired comparison sees it as missing).
    on_error: Literal["stop", "mark"] = "stop"
    #: An external memory system that replaces the embedded runtime (run config ``runtime:``); ``None``: ours.
    runtime: ExternalSystem | None = None

    def model_roles(self) -> set[str]:
        """The runtime roles a model plays (their strategy prompts are read, so they can evolve)."""
        return {name for name in ("extractor", "expander", "answerer") if getattr(self, name) is not None}

    def answers_call_models(self) -> bool:
        """Whether answering or judging waits on a model server (an LLM answerer or judge)."""
        return any(hasattr(r, "concurrency") for r in (self.answerer, self.judge) if r is not None)

    def concurrency(self) -> int:
        """How many questions may be in flight at once: the largest ``concurrency`` of a role that waits on a
        model server (LLM roles); 1 when every role is local and deterministic."""
        return max([getattr(r, "concurrency", 1) for r in (self.extractor, self.expander, self.answerer, self.judge)
                    if r is not None])


class Evaluator:
    """Turns conversations' questions into traces with one benchmark, roles and ingestion cache."""

    def __init__(self, benchmark: Benchmark, roles: Roles, cache: IngestionCache, include_adversarial: bool):
        self.benchmark, self.roles, self.cache = benchmark, roles, cache
        self.include_adversarial = include_adversarial
        self.questions = {q.id: q for q in benchmark.questions}
        self._turn_text = {cid: {t.id: t.text for t in c.turns()} for cid, c in benchmark.conversations.items()}
        self._session_of = {cid: {t.id: t.session_id for t in c.turns()} for cid, c in benchmark.conversations.items()}
        self._images_of: dict[str, dict[str, tuple[str, ...]]] = {cid: {} for cid in benchmark.conversations}
        for cid, conversation in benchmark.conversations.items():
            for image in conversation.images():
                shared = self._images_of[cid]
                shared[image.source_turn] = shared.get(image.source_turn, ()) + (image.id,)

    def runtime(self, strategy: dict) -> Runtime:
        if self.roles.runtime is not None:
            return self.roles.runtime.runtime(strategy)
        return MemoryRuntime(strategy, extractor=self.roles.extractor, expander=self.roles.expander,
                             answerer=self.roles.answerer, cache=self.cache, fuser=self.roles.fuser)

    def conversations(self, runtime: Runtime, by_conv: dict[str, list[Question]], answer: bool,
                      progress: Callable[[int], object]) -> list[tuple[list[Trace], dict]]:
        """Each conversation's traces and ingestion usage, in conversation order. When roles wait on a model server,
        conversations run in threads too (every role's client still bounds its own calls in flight)."""
        def one(cid: str) -> tuple[list[Trace], dict]:
            out = self.conversation(runtime, cid, by_conv[cid], answer)
            progress(len(by_conv[cid]))
            return out

        if self.roles.concurrency() <= 1 or len(by_conv) <= 1:
            return [one(cid) for cid in by_conv]
        with ThreadPoolExecutor(len(by_conv)) as pool:
            futures = [pool.submit(contextvars.copy_context().run, one, cid) for cid in by_conv]
            try:
                return [f.result() for f in futures]
            except BaseException:
                for f in futures:
                    f.cancel()
                raise

    def conversation(self, runtime: Runtime, cid: str, questions: list[Question],
                     answer: bool = True) -> tuple[list[Trace], dict[str, dict[str, int]]]:
        """The questions' traces, and the LLM usage of ingesting the conversation (per role; empty if cached); the
        caches file what they keep of it under the conversation (:mod:`evolve.runtime.subject`)."""
        with subject(cid):
            return self._conversation(runtime, cid, questions, answer)

    def _conversation(self, runtime: Runtime, cid: str, questions: list[Question],
                      answer: bool) -> tuple[list[Trace], dict[str, dict[str, int]]]:
        with question_usage() as ingestion:
            try:
                store = runtime.ingest(self.benchmark.conversations[cid])
            except RoleError as exc:
                if self.roles.on_error == "stop":
                    raise
                return [self._failed(q, "ingestion", exc) for q in questions], ingestion.by_role()
        runtime.prefetch([q.question for q in questions])
        parallel = min(self.roles.concurrency(), len(questions))
        if parallel <= 1:
            return [self._trace(q, store, runtime, answer) for q in questions], ingestion.by_role()
        # Questions wait on the model server, not the CPU: run them in threads (each role's client still bounds
        # its own calls in flight) and keep the traces in question order, so results equal a sequential run.
        with ThreadPoolExecutor(parallel) as pool:
            futures = [pool.submit(contextvars.copy_context().run, self._trace, q, store, runtime, answer)
                       for q in questions]
            try:
                return [f.result() for f in futures], ingestion.by_role()
            except BaseException:
                for f in futures:
                    f.cancel()  # a stopping failure spends no further calls on questions not yet started
                raise

    def _failed(self, q: Question, stage: str, exc: Exception) -> Trace:
        """The trace of a question a role failed on: recorded, never scored."""
        return Trace(q.id, q.category, q.conversation_id, q.question, q.answer, list(q.evidence), scored=False,
                     error={"stage": stage, "type": type(exc).__name__, "message": str(exc)})

    def _trace(self, q: Question, store: MemoryStore, runtime: Runtime, answer: bool = True) -> Trace:
        with question_usage() as usage:
            try:
                result = runtime.ask(store, q.question, q.asked_at, answer=answer)
                judgment = (self.roles.judge.judge(q.question, q.answer, result.answer.text, category=q.category,
                                                   abstention=q.abstention) if answer
                            else Judgment(False, 0.0, "none (context only)"))
            except AdapterError as exc:
                raise AdapterError(f"question {q.id}: {exc}") from exc.__cause__
            except RoleError as exc:
                if self.roles.on_error == "stop":
                    raise
                failed = self._failed(q, "question", exc)
                failed.llm = usage.by_role()
                return failed
        known = self.benchmark.known_evidence(q)
        # an abstention question is answered correctly by declining (the judge may also accept a stated refusal)
        correct = judgment.correct or (answer and q.abstention and abstains(result.answer.text))
        fields = result.to_trace()
        verdict = _verdict(judgment, correct, result.answer.text) if answer else None
        backed = support(result.answer.text, q.question, (p["text"] for p in fields["packed"])) if answer else None
        trace = Trace(q.id, q.category, q.conversation_id, q.question, q.answer, list(q.evidence),
                      evidence_known=bool(known), known_evidence=list(known),
                      stored_ids=store.items_from_sources(known), **fields,
                      judge={"name": judgment.judge, "correct": judgment.correct, "score": judgment.score,
                             "votes": list(judgment.votes), "verdict": judgment.verdict},
                      correct=correct, abstention=q.abstention, f1=judgment.score,
                      verdict=verdict, support=backed,
                      confabulated=confabulated(verdict, backed) if answer else None,
                      scored=self.include_adversarial or q.category != "adversarial",
                      stages=list(STAGE_FIELDS) if answer else list(STAGE_FIELDS)[:len(STAGE_FIELDS) - 2])
        trace.llm = usage.by_role()
        return measure(trace, q, known, store, self._turn_text[q.conversation_id],
                       self._session_of[q.conversation_id], self._images_of[q.conversation_id])


def _verdict(judgment: Judgment, correct: bool, answer: str) -> str:
    """The trace's verdict: ``correct`` when the question counts as answered correctly, else the judge's (a judge
    that gives none: ``abstain`` for a declining answer, ``wrong`` otherwise)."""
    if correct:
        return "correct"
    return judgment.verdict or ("abstain" if abstains(answer) else "wrong")
