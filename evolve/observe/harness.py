"""The fixed benchmark harness: runs the locked runtime over a benchmark and produces traces and a summary."""
from __future__ import annotations

import contextvars
import json
import multiprocessing
import os
import pickle
import sys
import threading
import time
import traceback
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Callable, Iterable, Literal, Protocol

import numpy as np
from tqdm import tqdm

from evolve.benchmarks.types import Benchmark, Question
from evolve.errors import EvolveError
from evolve.observe.answer import answer_check, content_words
from evolve.observe.diagnosis import answer_loss, dcr_by_tau, diagnose, root_cause_counts
from evolve.observe.evidence import packed_evidence
from evolve.observe.objective import Objective, outcomes as objective_outcomes, score as objective_score
from evolve.observe.judge import TokenF1Judge, answer_kind, evidence_recall, first_seen, recall_any_all
from evolve.observe.trace import RECALL_KS, Summary, Trace
from evolve.runtime.roles import Answerer, Expander, Extractor, Judge, Judgment, RoleError
from evolve.runtime import IngestionCache, MemoryRuntime
from evolve.runtime.assembly import raw_turn
from evolve.runtime.render import render
from evolve.runtime.store import MemoryStore
from evolve.runtime.usage import question_usage
from evolve.state.files import atomic_write_json, atomic_write_text
from evolve.strategy.artifact import policy_hash, strategy_hash



class Executor(Protocol):
    """Evaluates conversations elsewhere (e.g. on Ray actors), results in task order."""

    def map(self, strategy: dict, tasks: list[tuple[str, list[str]]], answer: bool,
            progress: Callable[[int], object]) -> list[tuple[list[Trace], dict, int, int]]: ...

    def close(self) -> None: ...


@dataclass
class Roles:
    """Which implementation plays each runtime role; ``None`` means the deterministic default."""

    extractor: Extractor | None = None
    expander: Expander | None = None
    answerer: Answerer | None = None
    judge: Judge = field(default_factory=TokenF1Judge)
    #: When a role fails (:class:`RoleError`): "stop" the evaluation, or "mark" the question as failed (its
    #: trace carries the error and it is left out of scoring, so a paired comparison sees it as missing).
    on_error: Literal["stop", "mark"] = "stop"

    def answers_call_models(self) -> bool:
        """Whether answering or judging waits on a model server (an LLM answerer or judge)."""
        return any(hasattr(r, "concurrency") for r in (self.answerer, self.judge) if r is not None)

    def concurrency(self) -> int:
        """How many questions may be in flight at once: the largest ``concurrency`` of a role that waits on a
        model server (LLM roles); 1 when every role is local and deterministic."""
        return max([getattr(r, "concurrency", 1) for r in (self.extractor, self.expander, self.answerer, self.judge)
                    if r is not None])


@dataclass
class EvalRun:
    """Traces (one per question) and the run summary of one strategy on one harness."""

    traces: list[Trace]
    summary: Summary

    def outcomes(self, objective: Objective = "accuracy") -> dict[str, dict]:
        """``{question_id: {correct, category}}`` of the questions that count under ``objective``."""
        return objective_outcomes(self.traces, objective)

    def score(self, objective: Objective = "accuracy") -> float | None:
        """The run's success rate under ``objective``."""
        return objective_score(self.summary, objective)

    def by_id(self) -> dict[str, Trace]:
        return {t.question_id: t for t in self.traces}

    def traces_jsonl(self) -> str:
        """The traces as ``traces.jsonl`` text (one JSON object a line)."""
        return "".join(json.dumps(t.to_dict(), default=str) + "\n" for t in self.traces)

    def write(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "traces.jsonl", self.traces_jsonl())
        atomic_write_json(out / "summary.json", self.summary.to_dict())
        return out


class _Evaluator:
    """Turns one conversation's questions into traces; the same code runs in-process and in worker processes."""

    def __init__(self, benchmark: Benchmark, roles: Roles, cache: IngestionCache, include_adversarial: bool):
        self.benchmark, self.roles, self.cache = benchmark, roles, cache
        self.include_adversarial = include_adversarial
        self.questions = {q.id: q for q in benchmark.questions}
        self._turn_text = {cid: {t.id: t.text for t in c.turns()} for cid, c in benchmark.conversations.items()}
        self._session_of = {cid: {t.id: t.session_id for t in c.turns()} for cid, c in benchmark.conversations.items()}

    def runtime(self, strategy: dict) -> MemoryRuntime:
        return MemoryRuntime(strategy, extractor=self.roles.extractor, expander=self.roles.expander,
                             answerer=self.roles.answerer, cache=self.cache)

    def conversation(self, runtime: MemoryRuntime, cid: str, questions: list[Question],
                     answer: bool = True) -> tuple[list[Trace], dict[str, dict[str, int]]]:
        """The questions' traces, and the LLM usage of ingesting the conversation (per role; empty if cached)."""
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
            futures = [pool.submit(self._trace, q, store, runtime, answer) for q in questions]
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

    def _trace(self, q: Question, store, runtime: MemoryRuntime, answer: bool = True) -> Trace:
        with question_usage() as usage:
            try:
                result = runtime.ask(store, q.question, q.asked_at, answer=answer)
                judgment = (self.roles.judge.judge(q.question, q.answer, result.answer.text) if answer
                            else Judgment(False, 0.0, "none (context only)"))
            except RoleError as exc:
                if self.roles.on_error == "stop":
                    raise
                failed = self._failed(q, "question", exc)
                failed.llm = usage.by_role()
                return failed
        turn_text = self._turn_text[q.conversation_id]
        known = self.benchmark.known_evidence(q)
        # an abstention question is answered correctly by declining (the judge may also accept a stated refusal)
        correct = judgment.correct or (answer and q.abstention and answer_kind(result.answer.text, False) == "abstain")
        trace = Trace(q.id, q.category, q.conversation_id, q.question, q.answer, list(q.evidence),
                      evidence_known=bool(known), stored_ids=store.items_from_sources(known), **result.to_trace(),
                      judge={"name": judgment.judge, "correct": judgment.correct, "score": judgment.score,
                             "votes": list(judgment.votes)},
                      correct=correct, abstention=q.abstention, f1=judgment.score,
                      answer_kind=answer_kind(result.answer.text, correct) if answer else None,
                      scored=self.include_adversarial or q.category != "adversarial")
        trace.llm = usage.by_role()
        sources = [hit["source_ids"] for hit in trace.retrieved]
        trace.evidence_recall = {str(k): evidence_recall(known, sources, k) for k in RECALL_KS}
        if known and not q.abstention:
            session_of = self._session_of[q.conversation_id]
            units = {"turn": (set(known), first_seen(sources)),
                     "session": ({session_of[t] for t in known}, first_seen(sources, session_of.__getitem__))}
            trace.retrieval_recall = {
                level: {f"recall_{name}@{k}": value for k in RECALL_KS
                        for name, value in zip(("any", "all"), recall_any_all(gold, ranked, k))}
                for level, (gold, ranked) in units.items()}
        if q.outdated:
            trace.gold_outdated = list(q.outdated)
            hidden = {f["id"] for f in trace.filtered}  # what the lifecycle filter hid never reaches the answerer
            visible = [hit["source_ids"] for hit in trace.retrieved if hit["id"] not in hidden]
            trace.stale_retrieved = {str(k): any(set(q.outdated) & set(ids) for ids in visible[:k]) for k in (5, 10)}
            trace.stale_packed = packed_evidence(list(q.outdated), turn_text, trace.packed)
        if known:
            trace.packed_evidence = packed_evidence(known, turn_text, trace.packed)
            trace.evidence_share = round(len(trace.packed_evidence) / len(known), 4)
            trace.all_evidence_packed = len(trace.packed_evidence) == len(known)
            trace.answer_in_evidence, trace.answer_anywhere = answer_check(q.answer, known, trace.packed)
            if trace.answer_in_evidence is False:
                gold = set(known)
                retrieved = [hit["id"] for hit in trace.retrieved if gold & set(hit["source_ids"])]
                trace.answer_loss = answer_loss(q.answer, _dated_texts(store, trace.stored_ids),
                                                _dated_texts(store, retrieved), trace.answer_anywhere)
        return diagnose(trace)


def _dated_texts(store: MemoryStore, item_ids: Iterable[str]) -> list[str]:
    """The texts of stored items and of the turns they derive from (which ``assembly.unit: turn`` packs in their
    place), dated as a context line would show them."""
    items = [store.item(i) for i in item_ids if i in store.position]
    turns = dict.fromkeys(s for item in items for s in item.source_ids if s in store.turns)
    return ([render(item.id, item.layer, item.text, item.timestamp, "dialogue") for item in items]
            + [raw_turn(store.turns[t], "dialogue").text for t in turns])


def _spread(values: list[float], *stats: str) -> dict[str, float]:
    """``stats`` ("mean", "p50", "p95") of ``values`` (0.0 for none), rounded for summaries."""
    values = values or [0.0]
    return {name: round(float(np.mean(values) if name == "mean" else np.percentile(values, int(name[1:]))), 3)
            for name in stats}


def _staleness(traces: list[Trace]) -> dict[str, float | int]:
    """Share of ``traces`` (questions with outdated evidence) whose top 5 / 10 retrieved items that passed the
    filter, or whose packed context, carry an outdated turn."""
    if not traces:
        return {}
    return {"n": len(traces),
            **{f"retrieved@{k}": round(mean(t.stale_retrieved[str(k)] for t in traces), 4) for k in (5, 10)},
            "packed": round(mean(bool(t.stale_packed) for t in traces), 4)}


def _abstention(traces: list[Trace]) -> dict[str, float | int]:
    if not traces:
        return {}
    correct = sum(t.correct for t in traces)
    return {"n": len(traces), "correct": correct, "accuracy": round(correct / len(traces), 4)}


def _retrieval_recall(traces: list[Trace]) -> dict:
    """Means of the traces' turn- and session-level recall_any / recall_all at every k."""
    if not traces:
        return {}
    first = traces[0].retrieval_recall or {}
    return {"n": len(traces), **{level: {name: round(mean(t.retrieval_recall[level][name] for t in traces), 4)
                                         for name in names} for level, names in first.items()}}


def usage_totals(usages: Iterable[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """Per-role sums of LLM usage records (empty when no role calls a model server)."""
    totals: dict[str, Counter] = defaultdict(Counter)
    for usage in usages:
        for role, counts in usage.items():
            totals[role].update(counts)
    return {role: dict(counts) for role, counts in sorted(totals.items())}


_WORKER: _Evaluator | None = None


def _init_worker(benchmark: Benchmark, roles: Roles, cache_dir: Path | None, include_adversarial: bool,
                 parent_pid: int) -> None:
    global _WORKER
    _WORKER = _Evaluator(benchmark, roles, IngestionCache(cache_dir), include_adversarial)
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()


def _exit_with_parent(parent_pid: int) -> None:
    """A worker whose parent died (e.g. killed) exits instead of waiting for work forever."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(1)


class _WorkerError(EvolveError):
    """An exception raised in a worker, sent as (class, args, attributes, traceback): exceptions whose
    ``__init__`` takes other arguments than ``args`` (``StoreError``, ``StrategyError``) do not unpickle."""

    def __init__(self, cls: type, args: tuple, state: dict, trace: str):
        super().__init__(cls, args, state, trace)

    def rebuild(self) -> BaseException:
        """The worker's exception as it was raised there, with the worker traceback as a note."""
        cls, args, state, trace = self.args
        exc = cls.__new__(cls)
        exc.args = args
        exc.__dict__.update(state)
        exc.add_note(f"raised in a harness worker process:\n{trace}")
        return exc


def evaluate_conversation(evaluator: _Evaluator, strategy: dict, cid: str, question_ids: list[str],
                          answer: bool) -> tuple[list[Trace], dict, int, int]:
    """A worker's task (process or Ray actor): ``(traces, ingestion LLM usage, ingestion cache hits, misses)`` of one
    conversation; an exception comes back as a picklable :class:`_WorkerError`."""
    try:
        hits, misses = evaluator.cache.hits, evaluator.cache.misses
        traces, usage = evaluator.conversation(evaluator.runtime(strategy), cid,
                                               [evaluator.questions[q] for q in question_ids], answer)
        return traces, usage, evaluator.cache.hits - hits, evaluator.cache.misses - misses
    except Exception as exc:
        raise _WorkerError(type(exc), exc.args, dict(vars(exc)), "".join(traceback.format_exception(exc))) from None


def _work(strategy: dict, cid: str, question_ids: list[str], answer: bool) -> tuple[list[Trace], dict, int, int]:
    assert _WORKER is not None, "worker not initialised"
    return evaluate_conversation(_WORKER, strategy, cid, question_ids, answer)


class Harness:
    """Evaluate strategies on one benchmark with fixed roles and judge; reuses ingested memory across strategies.

    With ``workers > 1`` conversations are evaluated in that many worker processes, started on first use and
    reused by every later evaluation (the embedding model loads once per worker); they share the cache's
    directory on disk. With an ``executor`` (e.g. :class:`evolve.observe.ray_pool.RayPool`) conversations go to it
    instead. Traces, their order and the exceptions raised are those of ``workers=1``. Roles must be picklable;
    workers are spawned, so a script using them needs the ``if __name__ == "__main__":`` guard.
    """

    def __init__(self, benchmark: Benchmark, roles: Roles | None = None, *, cache: IngestionCache | None = None,
                 include_adversarial: bool = False, progress: bool | None = None, workers: int = 1,
                 executor: "Executor | None" = None):
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ValueError(f"Harness workers: expected an integer >= 1, got {workers!r}")
        self.benchmark = benchmark
        self.roles = roles or Roles()
        self.cache = cache or IngestionCache()
        self.include_adversarial = include_adversarial
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.workers, self.executor = workers, executor
        self._evaluator = _Evaluator(benchmark, self.roles, self.cache, include_adversarial)
        self._benchmark_hash = benchmark.content_hash()
        self._pool: ProcessPoolExecutor | None = None

    def evaluate(self, strategy: dict, question_ids: Iterable[str] | None = None, desc: str = "eval", *,
                 answer: bool = True) -> EvalRun:
        """Traces and summary of ``strategy`` on the questions (all by default). With ``answer=False`` questions stop
        at the packed context: no answerer or judge call is made, and only the retrieval, context and evidence
        fields mean anything (an LLM-free screen)."""
        wanted = set(question_ids) if question_ids is not None else None
        questions = [q for q in self.benchmark.questions if wanted is None or q.id in wanted]
        by_conv: dict[str, list[Question]] = defaultdict(list)
        for q in questions:
            by_conv[q.conversation_id].append(q)
        runtime = self._evaluator.runtime(strategy)  # validates the strategy before any work is handed out
        hits0, misses0 = self.cache.hits, self.cache.misses
        started = time.perf_counter()
        traces: list[Trace] = []
        ingestion: list[dict] = []  # LLM usage of ingesting each conversation
        hits = misses = 0
        with tqdm(total=len(questions), desc=desc, disable=not self.progress, leave=False) as bar:
            tasks = [(cid, [q.id for q in qs]) for cid, qs in by_conv.items()]
            if self.executor is not None:
                for part, usage, h, m in self.executor.map(strategy, tasks, answer, bar.update):
                    traces.extend(part)
                    ingestion.append(usage)
                    hits, misses = hits + h, misses + m
            elif self.workers > 1 and len(by_conv) > 1:
                pool = self._worker_pool()
                futures = [pool.submit(_work, strategy, cid, ids, answer) for cid, ids in tasks]
                for future in futures:
                    try:
                        part, usage, h, m = future.result()
                    except _WorkerError as exc:
                        raise exc.rebuild() from None
                    except BrokenProcessPool:
                        self._pool = None  # a worker died; the next parallel evaluation starts new ones
                        raise
                    traces.extend(part)
                    ingestion.append(usage)
                    hits, misses = hits + h, misses + m
                    bar.update(len(part))
            else:
                for part, usage in self._conversations(runtime, by_conv, answer, bar):
                    traces.extend(part)
                    ingestion.append(usage)
        summary = self._summary(strategy, traces, time.perf_counter() - started,
                                hits + self.cache.hits - hits0, misses + self.cache.misses - misses0,
                                usage_totals([*ingestion, *(t.llm for t in traces)]))
        return EvalRun(traces, summary)

    def _conversations(self, runtime: MemoryRuntime, by_conv: dict[str, list[Question]], answer: bool,
                       bar: tqdm) -> list[tuple[list[Trace], dict]]:
        """Each conversation's traces and ingestion usage, in conversation order. When roles wait on a model server,
        conversations run in threads too (every role's client still bounds its own calls in flight)."""
        def one(cid: str) -> tuple[list[Trace], dict]:
            out = self._evaluator.conversation(runtime, cid, by_conv[cid], answer)
            bar.update(len(by_conv[cid]))
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

    def close(self) -> None:
        """Stop the worker processes (a later parallel evaluation starts new ones) and the executor's workers."""
        if self.executor is not None:
            self.executor.close()
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def _worker_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            try:
                pickle.dumps(self.roles)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                raise ValueError(f"Harness workers={self.workers}: the roles cannot be sent to worker processes "
                                 f"({exc}); use workers=1") from None
            initargs = (self.benchmark, self.roles, self.cache.directory, self.include_adversarial, os.getpid())
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_init_worker, initargs=initargs)
        return self._pool

    def _summary(self, strategy: dict, traces: list[Trace], wall: float, hits: int, misses: int,
                 llm: dict[str, dict[str, int]]) -> Summary:
        scored = [t for t in traces if t.scored]
        known = [t for t in scored if t.evidence_known]
        by_cat: dict[str, list[Trace]] = defaultdict(list)
        for t in scored:
            by_cat[t.category].append(t)
        causes, causes_by_cat = root_cause_counts(traces)
        adversarial = [t for t in traces if t.category == "adversarial"]

        counted = [t for t in known if t.answer_in_evidence is not None]

        def rate(ts: list[Trace], name: str) -> float | None:
            """Mean of the answer check ``name`` over the questions of ``ts`` it counts (``None``: none)."""
            values = [getattr(t, name) for t in ts if t.answer_in_evidence is not None]
            return round(mean(values), 4) if values else None

        def recall(ts: list[Trace], k: int) -> float | None:
            ts = [t for t in ts if t.evidence_known]
            return round(mean(t.evidence_recall[str(k)] for t in ts), 4) if ts else None

        return Summary(
            strategy_hash=strategy_hash(strategy), policy_hash=policy_hash(strategy),
            benchmark=self.benchmark.name, benchmark_hash=self._benchmark_hash, judge=self.roles.judge.name,
            n_questions=len(traces), n_scored=len(scored),
            accuracy=round(mean(t.correct for t in scored), 4) if scored else None,
            f1=round(mean(t.f1 for t in scored), 4) if scored else None,
            accuracy_by_category={c: round(mean(t.correct for t in ts), 4) for c, ts in sorted(by_cat.items())},
            f1_by_category={c: round(mean(t.f1 for t in ts), 4) for c, ts in sorted(by_cat.items())},
            n_by_category={c: len(ts) for c, ts in sorted(by_cat.items())},
            evidence_recall={str(k): recall(known, k) for k in RECALL_KS},
            evidence_recall_by_category={c: {str(k): recall(ts, k) for k in RECALL_KS}
                                         for c, ts in sorted(by_cat.items())},
            root_causes=causes, root_causes_by_category=causes_by_cat,
            n_evidence_known=len(known),
            evidence_share=round(mean(t.evidence_share for t in known), 4) if known else None,
            all_evidence_packed=round(mean(t.all_evidence_packed for t in known), 4) if known else None,
            all_evidence_packed_by_category={c: round(mean(t.all_evidence_packed for t in ts if t.evidence_known), 4)
                                             for c, ts in sorted(by_cat.items()) if any(t.evidence_known for t in ts)},
            n_answer_known=len(counted),
            answer_left_out={"no_evidence": len(scored) - len(known),
                             "no_content_word": sum(1 for t in known if not content_words(t.gold_answer))},
            answer_in_evidence=rate(counted, "answer_in_evidence"),
            answer_in_evidence_by_category={c: r for c, ts in sorted(by_cat.items())
                                            if (r := rate(ts, "answer_in_evidence")) is not None},
            answer_anywhere=rate(counted, "answer_anywhere"),
            answer_anywhere_by_category={c: r for c, ts in sorted(by_cat.items())
                                         if (r := rate(ts, "answer_anywhere")) is not None},
            context_words=_spread([t.context_tokens for t in scored], "mean", "p95"),
            staleness=_staleness([t for t in scored if t.gold_outdated]),
            answers=dict(Counter(t.answer_kind for t in scored if t.answer_kind)),
            retrieval_ms=_spread([t.retrieval_ms for t in scored], "p50", "p95"),
            dcr=dcr_by_tau(traces),
            adversarial={"n": len(adversarial), "scored": bool(adversarial and adversarial[0].scored),
                         "evidence_recall@10": recall(adversarial, 10)},
            role_failures=sum(1 for t in traces if t.error is not None),
            llm=llm,
            ingestion_cache={"hits": hits, "misses": misses},
            wall_time_s=round(wall, 3),
            abstention=_abstention([t for t in scored if t.abstention]),
            retrieval_recall=_retrieval_recall([t for t in scored if t.retrieval_recall]),
        )
