"""The fixed benchmark harness: runs the locked runtime over a benchmark and produces traces and a summary."""
from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tqdm import tqdm

from evolve.benchmarks.types import Benchmark, Question
from evolve.observe.evaluator import Evaluator, Roles
from evolve.observe.executors import Executor, ProcessPool
from evolve.observe.objective import Objective, outcomes as objective_outcomes, score as objective_score
from evolve.observe.summarize import summarize, usage_totals
from evolve.observe.trace import Summary, Trace
from evolve.runtime import IngestionCache
from evolve.files import atomic_write_json, atomic_write_text


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
                 executor: Executor | None = None):
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ValueError(f"Harness workers: expected an integer >= 1, got {workers!r}")
        self.benchmark = benchmark
        self.roles = roles or Roles()
        self.cache = cache or IngestionCache()
        self.include_adversarial = include_adversarial
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.workers, self.executor = workers, executor
        self._evaluator = Evaluator(benchmark, self.roles, self.cache, include_adversarial)
        self._benchmark_hash = benchmark.content_hash()
        self._processes = ProcessPool(benchmark, self.roles, self.cache, include_adversarial, workers)

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
            executor = self.executor
            if executor is None and self.workers > 1 and len(by_conv) > 1:
                executor = self._processes
            if executor is not None:
                for part, usage, h, m in executor.map(strategy, tasks, answer, bar.update):
                    traces.extend(part)
                    ingestion.append(usage)
                    hits, misses = hits + h, misses + m
            else:
                for part, usage in self._evaluator.conversations(runtime, by_conv, answer, bar.update):
                    traces.extend(part)
                    ingestion.append(usage)
        summary = summarize(strategy, self.benchmark.name, self._benchmark_hash, self.roles.judge.name, traces,
                            time.perf_counter() - started, hits + self.cache.hits - hits0,
                            misses + self.cache.misses - misses0, usage_totals([*ingestion, *(t.llm for t in traces)]))
        return EvalRun(traces, summary)

    def close(self) -> None:
        """Stop the worker processes (a later parallel evaluation starts new ones) and the executor's workers."""
        if self.executor is not None:
            self.executor.close()
        self._processes.close()
