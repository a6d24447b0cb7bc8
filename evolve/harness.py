"""The fixed benchmark harness: runs the locked runtime over a benchmark and produces traces and a summary."""
from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
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


class Harness:
    """Evaluate strategies on one benchmark with fixed roles and judge; reuses ingested memory across strategies."""

    def __init__(self, benchmark: Benchmark, roles: Roles | None = None, *, cache: IngestionCache | None = None,
                 include_adversarial: bool = False, progress: bool | None = None):
        self.benchmark = benchmark
        self.roles = roles or Roles()
        self.cache = cache or IngestionCache()
        self.include_adversarial = include_adversarial
        self.progress = sys.stderr.isatty() if progress is None else progress
        self._turn_ids = {cid: {t.id for t in c.turns()} for cid, c in benchmark.conversations.items()}

    def evaluate(self, strategy: dict, question_ids: Iterable[str] | None = None, desc: str = "eval") -> EvalRun:
        wanted = set(question_ids) if question_ids is not None else None
        questions = [q for q in self.benchmark.questions if wanted is None or q.id in wanted]
        by_conv: dict[str, list[Question]] = defaultdict(list)
        for q in questions:
            by_conv[q.conversation_id].append(q)
        runtime = MemoryRuntime(strategy, extractor=self.roles.extractor, expander=self.roles.expander,
                                answerer=self.roles.answerer, cache=self.cache)
        hits0, misses0 = self.cache.hits, self.cache.misses
        started = time.perf_counter()
        traces: list[dict] = []
        with tqdm(total=len(questions), desc=desc, disable=not self.progress, leave=False) as bar:
            for cid, conv_questions in by_conv.items():
                store = runtime.ingest(self.benchmark.conversations[cid])
                for q in conv_questions:
                    traces.append(self._trace(q, store, runtime))
                    bar.update()
        summary = self._summary(strategy, traces, time.perf_counter() - started,
                                self.cache.hits - hits0, self.cache.misses - misses0)
        return EvalRun(traces, summary)

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
            "benchmark": self.benchmark.name, "benchmark_hash": self.benchmark.content_hash(),
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
