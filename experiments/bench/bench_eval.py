"""Evaluation speed (cold / warm / retrieval-only) and retrieval quality against plain BM25 over raw turns.

One process, in order:

1. cold: ``strategies/baseline.yaml`` (or ``--strategy``) evaluated by a fresh harness on empty on-disk caches in a temporary
   directory (includes loading the embedding model and, with ``--workers N > 1``, starting the workers);
2. warm: the same strategy again (same process, caches populated);
3. retrieval-only: ``retrieval.weights.vector`` changed, so the ingested stores are reused;
4. retrieval quality: the pipeline's hybrid retrieval (``retrieval.top_k = 10``; BM25 + vector + sub-query
   channels fused by RRF) against plain ``bm25s`` top-10 over raw turns, on the same questions (scored,
   gold evidence known). Plain BM25 indexes one document per turn, ``"<speaker>: <text>"``, one index per
   conversation, default ``bm25s`` parameters, and tokenises documents and questions with the runtime's own
   ``content_tokens`` (lower-cased words, stopwords removed, light stemming). Both sides are timed at
   query time with their indexes built (BM25 index time and the pipeline's one-off ingestion are shown
   apart); the pipeline's query vectors come from the warm embedding cache, and its stores remember the channel
   results of earlier passes over the same questions, as a night's later candidates find them (a first pass over
   copies of the stores, which remember none, is timed apart, best of 3 copies: what a store new to the night costs;
   and, apart, the two products every first pass must compute: the query vector against the store's embeddings and
   the BM25 scores of the question's terms);
5. packed evidence at equal word budgets (100, 160, 400): the pipeline (baseline with ``token_budget`` set to the
   budget and ``top_k = 50``, so the budget binds) against plain ``bm25s`` packing raw turns in rank order, first
   fit, into the same number of words; a gold turn counts when the context carries its content
   (:mod:`evolve.observe.evidence`), for BM25 when the turn itself is packed.

Peak memory is ``ru_maxrss`` of this process and of its largest child (worker processes). Run from the
repository root:

    python experiments/bench/bench_eval.py [--bench locomo:PATH] [--strategy PATH] [--workers N] [--check-workers]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, TypeVar

import bm25s
import numpy as np

from evolve.benchmarks import Benchmark, Question, load_benchmark
from evolve.observe.harness import EvalRun, Harness
from evolve.observe.judge import evidence_recall
from evolve.runtime import IngestionCache, MemoryRuntime, classify_intent
from evolve.runtime.lexical import Analyzer
from evolve.runtime.retrieval import Query, retrieve
from evolve.runtime.store import MemoryStore
from evolve.runtime.text import content_tokens, count_words
from evolve.strategy.artifact import derive, load_strategy
from evolve.strategy.paths import get_path, set_path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BENCH = "locomo:../shared/data/locomo/locomo_dev4.json"
FALLBACK_BENCH = "synthetic:0:12"
TOP = 10
#: Word budgets at which the pipeline's packed context and plain BM25 packing are compared.
BUDGETS = (100, 160, 400)
#: top_k for the budget comparison: large enough that the word budget, not the item count, binds.
BUDGET_TOP_K = 50
T = TypeVar("T")


def resolve_bench(spec: str) -> tuple[str, str | None]:
    """``(spec with an absolute path, note)``; the default LoCoMo file falls back to synthetic if absent."""
    scheme, _, rest = spec.partition(":")
    if scheme not in ("locomo", "longmemeval"):
        return spec, None
    path = Path(rest) if Path(rest).is_absolute() else (ROOT / rest).resolve()
    if path.is_file():
        return f"{scheme}:{path}", None
    if spec == DEFAULT_BENCH:
        return FALLBACK_BENCH, f"{path} not found; using {FALLBACK_BENCH} instead"
    raise SystemExit(f"error: benchmark file not found: {path}")


def timed(harness: Harness, strategy: dict) -> tuple[EvalRun, float]:
    started = time.perf_counter()
    run = harness.evaluate(strategy)
    return run, time.perf_counter() - started


def traces_hash(run: EvalRun) -> str:
    """Hash of the traces but their measured retrieval times."""
    rows = [t.deterministic_dict() for t in run.traces]
    return hashlib.sha256("".join(json.dumps(r, default=str) + "\n" for r in rows).encode()).hexdigest()


def recall_questions(bench: Benchmark) -> list[tuple[Question, list[str]]]:
    """Scored questions with known gold evidence, each with its known gold turn ids."""
    return [(q, known) for q in bench.questions if q.category != "adversarial" and (known := bench.known_evidence(q))]


def best_of(repeats: int, run: Callable[[], T]) -> tuple[T, float]:
    """``(result of the last call, fastest seconds)`` of ``repeats`` calls (the first also warms caches)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return result, min(times)


def pipeline_retrieval(runtime: MemoryRuntime, stores: dict[str, MemoryStore],
                       questions: list[tuple[Question, list[str]]]) -> float:
    """Mean recall@10 of intent + expansion + hybrid retrieval (cached query vectors) over ``questions``."""
    policy, recalls = runtime.policy, []
    for q, known in questions:
        intent = classify_intent(q.question)
        subqueries = tuple(runtime.expander.expand(q.question, policy.expansion))[: policy.expansion.max_subqueries]
        vector = None
        if policy.retrieval.weights_for(intent).vector > 0:
            vector = runtime.cache.embeddings.encode(runtime.embedder, [q.question])[0]
        hits = retrieve(stores[q.conversation_id], Query(q.question, intent, subqueries, vector, q.asked_at), policy)
        recalls.append(evidence_recall(known, [h.source_ids for h in hits], TOP))
    return float(np.mean(recalls))


def scoring_floor(runtime: MemoryRuntime, stores: dict[str, MemoryStore],
                  questions: list[tuple[Question, list[str]]]) -> None:
    """What no first pass can skip: each question's vector against its store's embeddings and the BM25 scores of
    its terms (its cached query vector looked up, as the pipeline does)."""
    lexical = runtime.policy.retrieval.lexical
    analyzer = Analyzer(lexical.stopwords, lexical.stemmer)
    for q, _ in questions:
        store = stores[q.conversation_id]
        store.embeddings @ runtime.cache.embeddings.encode(runtime.embedder, [q.question])[0]
        store.bm25_scores_many([tuple(analyzer.terms(q.question))], analyzer)


def bm25_indexes(bench: Benchmark) -> dict[str, tuple[bm25s.BM25, list[str]]]:
    """One plain bm25s index per conversation: a document per turn, ``"<speaker>: <text>"``."""
    indexes = {}
    for cid, conv in bench.conversations.items():
        turns = conv.turns()
        index = bm25s.BM25()
        index.index([content_tokens(f"{t.speaker}: {t.text}") for t in turns], show_progress=False)
        indexes[cid] = (index, [t.id for t in turns])
    return indexes


def plain_bm25(indexes: dict[str, tuple[bm25s.BM25, list[str]]], questions: list[tuple[Question, list[str]]]) -> float:
    """Mean recall@10 of bm25s top-10 turns (ties by turn order) over ``questions``."""
    recalls = []
    for q, known in questions:
        index, ids = indexes[q.conversation_id]
        tokens = content_tokens(q.question)
        scores = np.asarray(index.get_scores(tokens)) if tokens else np.zeros(len(ids))
        order = np.lexsort((np.arange(len(ids)), -scores))[:TOP]
        recalls.append(evidence_recall(known, [(ids[i],) for i in order if scores[i] > 0], TOP))
    return float(np.mean(recalls))


def packed_bm25(bench: Benchmark, indexes: dict[str, tuple[bm25s.BM25, list[str]]],
                budget: int) -> tuple[float, float, float]:
    """Plain bm25s packing: raw turns ``"<speaker>: <text>"`` in rank order, first fit, into ``budget`` words, over
    the scored questions with known gold evidence; (mean share of gold turns packed, all-packed rate, mean words)."""
    shares, words = [], []
    turns = {cid: {t.id: f"{t.speaker}: {t.text}" for t in conv.turns()} for cid, conv in bench.conversations.items()}
    for q, known in recall_questions(bench):
        index, ids = indexes[q.conversation_id]
        tokens = content_tokens(q.question)
        scores = np.asarray(index.get_scores(tokens)) if tokens else np.zeros(len(ids))
        used, packed = 0, set()
        for i in np.lexsort((np.arange(len(ids)), -scores)):
            if scores[i] <= 0:
                break
            cost = count_words(turns[q.conversation_id][ids[i]])
            if used + cost <= budget:
                used += cost
                packed.add(ids[i])
        shares.append(len(packed & set(known)) / len(known))
        words.append(used)
    return float(np.mean(shares)), float(np.mean([s == 1.0 for s in shares])), float(np.mean(words))


def mb(kilobytes: int) -> str:
    return f"{kilobytes / 1024:.0f} MB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", default=DEFAULT_BENCH, help=f"benchmark spec (default {DEFAULT_BENCH})")
    parser.add_argument("--strategy", type=Path, default=ROOT / "strategies" / "baseline.yaml",
                        help="strategy timed and measured (default strategies/baseline.yaml)")
    parser.add_argument("--workers", type=int, default=1, help="harness worker processes (default 1)")
    parser.add_argument("--check-workers", action="store_true",
                        help="with --workers > 1: re-run cold with workers=1 on fresh caches and compare traces")
    args = parser.parse_args(argv)
    spec, note = resolve_bench(args.bench)
    if note:
        print(f"note: {note}")
    bench = load_benchmark(spec)
    baseline = load_strategy(args.strategy)
    vector = get_path(baseline, "retrieval.weights.vector")
    retrieval_only = set_path(baseline, "retrieval.weights.vector", round(vector + 0.2, 4))
    n = len(bench.questions)
    print(f"benchmark {bench.name}: {len(bench.conversations)} conversations, {n} questions | workers {args.workers} "
          f"| strategy {args.strategy.name}")

    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        harness = Harness(bench, cache=IngestionCache(Path(tmp) / "ingestion"), progress=False, workers=args.workers)
        cold, cold_s = timed(harness, baseline)
        warm, warm_s = timed(harness, baseline)
        retr, retr_s = timed(harness, retrieval_only)
        top10 = derive(baseline, {"retrieval.top_k": TOP,
                                  "retrieval.rerank.top_n": min(TOP, get_path(baseline, "retrieval.rerank.top_n"))})
        harness_recall = harness.evaluate(top10).summary.evidence_recall["10"]
        packed = {budget: harness.evaluate(derive(baseline, {"assembly.token_budget": budget,
                                                             "retrieval.top_k": BUDGET_TOP_K})).summary
                  for budget in BUDGETS}
        harness.close()
        print(f"{'evaluation':<44}{'seconds':>9}{'q/s':>9}{'accuracy':>10}")
        for label, run, secs in (("cold (fresh process, empty caches)", cold, cold_s),
                                 ("warm (same process, caches populated)", warm, warm_s),
                                 (f"retrieval-only (weights.vector {vector} -> {vector + 0.2:g})", retr, retr_s)):
            print(f"{label:<44}{secs:>9.2f}{n / secs:>9.1f}{run.summary.accuracy:>10.3f}")
        print(f"speed-up over cold: warm {cold_s / warm_s:.0f}x, retrieval-only {cold_s / retr_s:.0f}x (target >= 10x)")
        assert traces_hash(cold) == traces_hash(warm), "warm traces differ from cold traces"

        if args.check_workers and args.workers > 1:
            with tempfile.TemporaryDirectory(prefix="bench-eval-seq-") as seq_tmp:
                seq = Harness(bench, cache=IngestionCache(Path(seq_tmp) / "ingestion"), progress=False)
                seq_run, seq_s = timed(seq, baseline)
            same = traces_hash(seq_run) == traces_hash(cold)
            print(f"workers=1 cold on fresh caches: {seq_s:.2f}s; traces {'identical to' if same else 'DIFFER from'} "
                  f"workers={args.workers}")

        runtime = MemoryRuntime(top10, cache=harness.cache)
        started = time.perf_counter()
        stores = {cid: runtime.ingest(conv) for cid, conv in bench.conversations.items()}
        load_s = time.perf_counter() - started
        questions = recall_questions(bench)
        texts = [q.question for q, _ in questions]
        runtime.prefetch(texts)
        copies = iter([{cid: pickle.loads(pickle.dumps(store)) for cid, store in stores.items()}  # remember nothing
                       for _ in range(3)])
        first, first_s = best_of(3, lambda: pipeline_retrieval(runtime, next(copies), questions))
        ours, ours_s = best_of(3, lambda: pipeline_retrieval(runtime, stores, questions))
        _, floor_s = best_of(3, lambda: scoring_floor(runtime, stores, questions))
        indexes, index_s = best_of(1, lambda: bm25_indexes(bench))
        theirs, theirs_s = best_of(3, lambda: plain_bm25(indexes, questions))
        runtime.embedder.encode(texts[:1])  # the model is loaded (it is not in this process with workers)
        _, embed_s = best_of(1, lambda: runtime.embedder.encode(texts))
        assert round(ours, 4) == harness_recall == round(first, 4), \
            f"recall@10 {ours:.4f} (first pass {first:.4f}) differs from the harness's {harness_recall}"
        print(f"retrieval on {len(questions)} questions (scored, gold evidence known); query time, best of 3")
        print(f"{'':<44}{'recall@10':>10}{'ms/q':>8}")
        for label, recall, secs in (("pipeline, top_k=10 (bm25+vector+subquery)", ours, ours_s),
                                    ("  its first pass on fresh stores", first, first_s),
                                    ("plain bm25s top-10 over raw turns", theirs, theirs_s)):
            print(f"{label:<44}{recall:>10.3f}{1000 * secs / len(questions):>8.2f}")
        baseline_recall = cold.summary.evidence_recall["10"]
        print(f"pipeline vs BM25: recall {ours - theirs:+.3f}, time {ours_s / theirs_s:.1f}x "
              f"(target: better recall at <= 3x; first pass on fresh stores {first_s / theirs_s:.1f}x); "
              f"baseline (top_k=5) recall@10 {baseline_recall:.3f}")
        print(f"of any first pass, the vector product and the BM25 term scores alone: "
              f"{1000 * floor_s / len(questions):.2f} ms/q ({floor_s / theirs_s:.1f}x plain bm25s)")
        print(f"not in the query time: query embedding {1000 * embed_s / len(texts):.1f} ms/q uncached (one batch); "
              f"index build: BM25 {index_s:.2f}s, pipeline stores = the cold run ({load_s:.2f}s from cache)")

        print(f"packed evidence at equal word budgets on {packed[BUDGETS[0]].n_evidence_known} questions (mean share of "
              "the gold turns the context carries; all = every gold turn carried)")
        print(f"{'budget (words)':<16}{'pipeline share':>15}{'all':>7}{'words':>8}{'bm25s share':>13}{'all':>7}{'words':>8}")
        base = cold.summary
        print(f"{'baseline 160':<16}{base.evidence_share:>15.3f}{base.all_evidence_packed:>7.3f}"
              f"{base.context_words['mean']:>8.1f}{'(top_k 5)':>13}")
        for budget in BUDGETS:
            m = packed[budget]
            share, every, words = packed_bm25(bench, indexes, budget)
            print(f"{budget:<16}{m.evidence_share:>15.3f}{m.all_evidence_packed:>7.3f}{m.context_words['mean']:>8.1f}"
                  f"{share:>13.3f}{every:>7.3f}{words:>8.1f}")

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"peak memory (maxrss): this process {mb(own)}, largest child {mb(children)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
