"""Cold ingestion and evaluation throughput at scale, local executor vs. Ray, and the workers a LongMemEval-S night
would need.

A long-haystack benchmark is generated from the seeded synthetic generator: ``--seeds`` generations of
``--personas`` personas with ``--sessions`` sessions each (distinct conversation ids per seed), at least
``--min-turns`` turns in all. Each executor evaluates the baseline strategy cold (fresh caches in a temporary
directory, so every conversation is ingested: facts extracted and embedded), then a retrieval-only change warm. Printed
per executor: wall time, turns/s and questions/s of the cold evaluation, the warm evaluation's questions/s, and peak
memory (this process, and the largest Ray worker when Ray runs); the traces of both executors are compared. Then the
workers a night would need to finish in ``--hours`` at the measured per-worker cold throughput, for a benchmark of
``--night-turns`` turns re-ingested ``--reingest`` times (the baseline plus every candidate whose ingestion settings
changed). Ray's overhead on a small benchmark (``--small``, e.g. LoCoMo dev) is measured the same way. Run from the
repository root:

    python experiments/bench/bench_scale.py [--seeds 7] [--personas 20] [--sessions 60] [--small locomo:PATH]
"""
from __future__ import annotations

import argparse
import math
import resource
import sys
import tempfile
import time
from pathlib import Path

from evolve import BASELINE_PATH, Harness, load_benchmark, load_strategy
from evolve.benchmarks.synthetic import generate_synthetic
from evolve.benchmarks.types import Benchmark
from evolve.runtime import IngestionCache
from evolve.strategy.artifact import derive

ROOT = Path(__file__).resolve().parents[2]
#: LongMemEval-S: 500 questions, each with its own haystack of about 115k tokens (~50 sessions); at ~100 tokens a
#: turn that is about 1,150 turns a question.
LME_S_TURNS = 500 * 1150


def long_haystack(seeds: int, personas: int, sessions: int) -> Benchmark:
    parts = [generate_synthetic(seed, personas, sessions) for seed in range(seeds)]
    conversations = {cid: c for b in parts for cid, c in b.conversations.items()}
    return Benchmark(f"long-haystack:{seeds}x{personas}x{sessions}", conversations,
                     [q for b in parts for q in b.questions])


def peak_mb() -> tuple[float, float]:
    """Peak RSS of this process and of its largest finished child, in MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, children


def ray_worker_peak_mb(pool) -> float:
    import ray

    @ray.remote(num_cpus=0)
    def noop() -> None:
        return None

    ray.get(noop.remote())
    return max(ray.get([a.__ray_call__.remote(lambda self: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
                        for a in pool.actors]))


def measure(bench: Benchmark, executor: str, workers: int, tmp: Path) -> dict:
    strategy = load_strategy(BASELINE_PATH)
    cache = IngestionCache(tmp / f"{bench.name.replace('/', '_')}-{executor}-{workers}")
    pool = None
    if executor == "ray":
        from evolve.observe.ray_pool import RayPool

        pool = RayPool(bench, Harness(bench).roles, cache, False, num_workers=workers)
    harness = Harness(bench, cache=cache, progress=False, executor=pool)
    try:
        started = time.perf_counter()
        cold = harness.evaluate(strategy)
        cold_s = time.perf_counter() - started
        started = time.perf_counter()
        harness.evaluate(derive(strategy, {"retrieval.weights.vector": 0.7}))
        warm_s = time.perf_counter() - started
        worker_mb = ray_worker_peak_mb(pool) if pool is not None else 0.0
    finally:
        harness.close()
    turns = sum(len(c.turns()) for c in bench.conversations.values())
    return {"executor": f"{executor} x{workers}", "cold_s": cold_s, "turns_per_s": turns / cold_s,
            "questions_per_s": len(cold.traces) / cold_s, "warm_questions_per_s": len(cold.traces) / warm_s,
            "driver_mb": peak_mb()[0], "worker_mb": worker_mb, "traces": [t.deterministic_dict() for t in cold.traces],
            "per_worker_turns_per_s": turns / cold_s / workers}


def table(rows: list[dict]) -> None:
    print(f"{'executor':<10} {'cold s':>8} {'turns/s':>9} {'q/s cold':>9} {'q/s warm':>9} {'driver MB':>10} "
          f"{'worker MB':>10} {'traces':>10}")
    for r in rows:
        same = "identical" if r["traces"] == rows[0]["traces"] else "DIFFER"
        print(f"{r['executor']:<10} {r['cold_s']:>8.1f} {r['turns_per_s']:>9.0f} {r['questions_per_s']:>9.1f} "
              f"{r['warm_questions_per_s']:>9.0f} {r['driver_mb']:>10.0f} {r['worker_mb']:>10.0f} {same:>10}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=7)
    p.add_argument("--personas", type=int, default=20)
    p.add_argument("--sessions", type=int, default=60)
    p.add_argument("--min-turns", type=int, default=50_000)
    p.add_argument("--ray-workers", type=int, default=2)
    p.add_argument("--small", default=f"locomo:{ROOT.parent / 'shared/data/locomo/locomo_dev4.json'}")
    p.add_argument("--night-turns", type=int, default=LME_S_TURNS)
    p.add_argument("--reingest", type=int, default=17, help="ingestions per night (baseline + 16 candidates)")
    p.add_argument("--hours", type=float, default=1.0)
    args = p.parse_args(argv)

    import ray

    big = long_haystack(args.seeds, args.personas, args.sessions)
    turns = sum(len(c.turns()) for c in big.conversations.values())
    if turns < args.min_turns:
        raise SystemExit(f"{big.name} has {turns} turns, fewer than --min-turns {args.min_turns}; raise --seeds")
    print(f"{big.name}: {len(big.conversations)} conversations, {turns} turns, {len(big.questions)} questions")
    ray.init(num_cpus=args.ray_workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
            rows = [measure(big, "local", 1, Path(tmp)), measure(big, "ray", args.ray_workers, Path(tmp))]
            table(rows)
            per_worker = rows[0]["per_worker_turns_per_s"]
            need = args.night_turns * args.reingest
            print(f"night: {args.night_turns} turns x {args.reingest} ingestions = {need} turns; at {per_worker:.0f} "
                  f"turns/s per worker (local, cold) that is {need / per_worker / 3600:.1f} worker-hours, so "
                  f"{math.ceil(need / per_worker / 3600 / args.hours)} workers to finish in {args.hours:g} h")
            scheme, _, path = args.small.partition(":")
            if scheme != "locomo" or Path(path).is_file():
                small = load_benchmark(args.small)
                print(f"\n{args.small}: Ray overhead on a small benchmark")
                table([measure(small, "local", 1, Path(tmp)), measure(small, "ray", args.ray_workers, Path(tmp))])
            else:
                print(f"\n{path} not found: small-benchmark overhead skipped")
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
