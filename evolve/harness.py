"""The fixed benchmark harness: runs the locked runtime over a benchmark and produces traces and a summary."""
from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Iterable

from tqdm import tqdm

from evolve.benchmarks.types import Benchmark, Question
from evolve.diagnosis import dcr, diagnose, root_cause_counts
from evolve.judge import TokenF1Judge, evidence_recall
from evolve.roles import Answerer, Expander, Extractor, Judge
from evolve.runtime import IngestionCache, MemoryRuntime
from evolve.storage import atomic_write_json, atomic_write_text
from evolve.strategy import policy_hash, strategy_hash

RECALL_KS = (1, 5, 10)


@dataclass
class Roles:
    """Which implementation plays each runtime role; ``None`` means the deterministic default."""

    extractor: Extractor | None = None
    expander: Expander | None = None
    answerer: Answerer | None = None
    judge: Judge = field(default_factory=TokenF1Judge)


@dataclass
class EvalRun:
    """Traces (one per question) and the run summary of one strategy on one harness."""

    traces: list[dict]
    summary: dict

    def outcomes(self) -> dict[str, dict]:
        """``{question_id: {correct, category}}`` over scored questions, for paired statistics."""
        return {t["question_id"]: {"correct": t["correct"], "category": t["category"]} for t in self.traces if t["scored"]}

    def write(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "traces.jsonl", "".join(json.dumps(t, default=str) + "\n" for t in self.traces))
        atomic_write_json(out / "summary.json", self.summary)
        return out


class _Evaluator:
    """Turns one conversation's questions into traces; the same code runs in-process and in worker processes."""

    def __init__(self, benchmark: Benchmark, roles: Roles, cache: IngestionCache, include_adversarial: bool):
        self.benchmark, self.roles, self.cache = benchmark, roles, cache
        self.include_adversarial = include_adversarial
        self.questions = {q.id: q for q in benchmark.questions}
        self._turn_ids = {cid: {t.id for t in c.turns()} for cid, c in benchmark.conversations.items()}

    def runtime(self, strategy: dict) -> MemoryRuntime:
        return MemoryRuntime(strategy, extractor=self.roles.extractor, expander=self.roles.expander,
                             answerer=self.roles.answerer, cache=self.cache)

    def conversation(self, runtime: MemoryRuntime, cid: str, questions: list[Question]) -> list[dict]:
        store = runtime.ingest(self.benchmark.conversations[cid])
        runtime.prefetch([q.question for q in questions])
        return [self._trace(q, store, runtime) for q in questions]

    def _trace(self, q: Question, store, runtime: MemoryRuntime) -> dict:
        result = runtime.ask(store, q.question, q.asked_at)
        judgment = self.roles.judge.judge(q.question, q.answer, result.answer.text)
        known = [e for e in q.evidence if e in self._turn_ids[q.conversation_id]]
        trace = {
            "question_id": q.id, "conversation_id": q.conversation_id, "category": q.category,
            "question": q.question, "gold_answer": q.answer,
            "gold_evidence": list(q.evidence), "evidence_known": bool(known),
            "stored_ids": store.items_from_sources(known),
            **result.to_trace(),
            "judge": {"name": judgment.judge, "correct": judgment.correct, "score": judgment.score,
                      "votes": list(judgment.votes)},
            "correct": judgment.correct, "f1": judgment.score,
            "scored": self.include_adversarial or q.category != "adversarial",
        }
        sources = [hit["source_ids"] for hit in trace["retrieved"]]
        trace["evidence_recall"] = {str(k): evidence_recall(known, sources, k) for k in RECALL_KS}
        return diagnose(trace)


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


def _work(strategy: dict, cid: str, question_ids: list[str]) -> tuple[list[dict], int, int]:
    """Worker task: ``(traces, ingestion cache hits, misses)`` of one conversation."""
    assert _WORKER is not None, "worker not initialised"
    hits, misses = _WORKER.cache.hits, _WORKER.cache.misses
    traces = _WORKER.conversation(_WORKER.runtime(strategy), cid, [_WORKER.questions[q] for q in question_ids])
    return traces, _WORKER.cache.hits - hits, _WORKER.cache.misses - misses


class Harness:
    """Evaluate strategies on one benchmark with fixed roles and judge; reuses ingested memory across strategies.

    With ``workers > 1`` conversations are evaluated in that many worker processes, started on first use and
    reused by every later evaluation (the embedding model loads once per worker); they share the cache's
    directory on disk. Traces and their order are identical to ``workers=1``. Roles must be picklable.
    """

    def __init__(self, benchmark: Benchmark, roles: Roles | None = None, *, cache: IngestionCache | None = None,
                 include_adversarial: bool = False, progress: bool | None = None, workers: int = 1):
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ValueError(f"Harness workers: expected an integer >= 1, got {workers!r}")
        self.benchmark = benchmark
        self.roles = roles or Roles()
        self.cache = cache or IngestionCache()
        self.include_adversarial = include_adversarial
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.workers = workers
        self._evaluator = _Evaluator(benchmark, self.roles, self.cache, include_adversarial)
        self._benchmark_hash = benchmark.content_hash()
        self._pool: ProcessPoolExecutor | None = None

    def evaluate(self, strategy: dict, question_ids: Iterable[str] | None = None, desc: str = "eval") -> EvalRun:
        wanted = set(question_ids) if question_ids is not None else None
        questions = [q for q in self.benchmark.questions if wanted is None or q.id in wanted]
        by_conv: dict[str, list[Question]] = defaultdict(list)
        for q in questions:
            by_conv[q.conversation_id].append(q)
        runtime = self._evaluator.runtime(strategy)  # validates the strategy before any work is handed out
        hits0, misses0 = self.cache.hits, self.cache.misses
        started = time.perf_counter()
        traces: list[dict] = []
        hits = misses = 0
        with tqdm(total=len(questions), desc=desc, disable=not self.progress, leave=False) as bar:
            if self.workers > 1 and len(by_conv) > 1:
                pool = self._worker_pool()
                futures = [pool.submit(_work, strategy, cid, [q.id for q in qs]) for cid, qs in by_conv.items()]
                for future in futures:
                    part, h, m = future.result()
                    traces.extend(part)
                    hits, misses = hits + h, misses + m
                    bar.update(len(part))
            else:
                for cid, conv_questions in by_conv.items():
                    traces.extend(self._evaluator.conversation(runtime, cid, conv_questions))
                    bar.update(len(conv_questions))
        summary = self._summary(strategy, traces, time.perf_counter() - started,
                                hits + self.cache.hits - hits0, misses + self.cache.misses - misses0)
        return EvalRun(traces, summary)

    def close(self) -> None:
        """Stop the worker processes (a later parallel evaluation starts new ones)."""
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

    def _summary(self, strategy: dict, traces: list[dict], wall: float, hits: int, misses: int) -> dict:
        scored = [t for t in traces if t["scored"]]
        known = [t for t in scored if t["evidence_known"]]
        by_cat: dict[str, list[dict]] = defaultdict(list)
        for t in scored:
            by_cat[t["category"]].append(t)
        causes, causes_by_cat = root_cause_counts(traces)
        adversarial = [t for t in traces if t["category"] == "adversarial"]

        def recall(ts: list[dict], k: int) -> float | None:
            ts = [t for t in ts if t["evidence_known"]]
            return round(mean(t["evidence_recall"][str(k)] for t in ts), 4) if ts else None

        return {
            "strategy_hash": strategy_hash(strategy), "policy_hash": policy_hash(strategy),
            "benchmark": self.benchmark.name, "benchmark_hash": self._benchmark_hash,
            "judge": self.roles.judge.name,
            "n_questions": len(traces), "n_scored": len(scored),
            "accuracy": round(mean(t["correct"] for t in scored), 4) if scored else None,
            "f1": round(mean(t["f1"] for t in scored), 4) if scored else None,
            "accuracy_by_category": {c: round(mean(t["correct"] for t in ts), 4) for c, ts in sorted(by_cat.items())},
            "f1_by_category": {c: round(mean(t["f1"] for t in ts), 4) for c, ts in sorted(by_cat.items())},
            "n_by_category": {c: len(ts) for c, ts in sorted(by_cat.items())},
            "evidence_recall": {str(k): recall(known, k) for k in RECALL_KS},
            "evidence_recall_by_category": {c: {str(k): recall(ts, k) for k in RECALL_KS} for c, ts in sorted(by_cat.items())},
            "root_causes": causes, "root_causes_by_category": causes_by_cat,
            "dcr@3": round(dcr(traces, 3), 4),
            "adversarial": {"n": len(adversarial), "scored": bool(adversarial and adversarial[0]["scored"]),
                            "evidence_recall@10": recall(adversarial, 10)},
            "ingestion_cache": {"hits": hits, "misses": misses},
            "wall_time_s": round(wall, 3),
        }
