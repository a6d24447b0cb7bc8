"""``memevolve gate`` at scale: wall time and peak memory of the whole command on 10^5 and 10^6 samples.

For each size two trace files are written (contract records with a judge's verdict and, with ``--stages full``,
every stage of the ladder on one packed item), the candidate right on a seeded 2 % more of the samples, with four
categories. Then ``python -m evolve.cli gate BASE CANDIDATE --stores <tmp>`` runs in a child process under the default
rules (objective accuracy, 10,000 BCa resamples) and the script prints, per size: the files' size, the wall time,
the child's peak resident memory (``ru_maxrss``), and the time and traced peak (``tracemalloc``) of the paired
comparison alone (:func:`evolve.verify.statistics.paired_comparison`) on the same outcomes, in this process. Run from
the repository root:

    python experiments/bench/bench_gate_scale.py [--sizes 100000 1000000] [--stages results|full]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CATEGORIES = ("single_hop", "multi_hop", "temporal", "open_domain")


def record(i: int, correct: bool, stages: str = "full") -> dict:
    """One sample's contract record: the judge's verdict, and with ``full`` every stage on one packed item."""
    out = {"trace_version": "1", "id": f"q{i}", "category": CATEGORIES[i % 4], "question": f"question {i}",
           "gold": {"answer": f"answer {i}", "evidence": [f"D1:{i}"]}, "judge": {"correct": correct}}
    if stages == "full":
        out.update(stored=[f"m{i}"], retrieved=[{"id": f"m{i}", "rank": 1, "score": 0.5}],
                   filtered=[{"id": f"m{i}", "decision": "kept", "reason": "in budget"}],
                   packed=[{"text": f"answer {i}" if correct else "other", "source_ids": [f"D1:{i}"]}],
                   answer=f"answer {i}" if correct else "no idea")
    return out


def write_pair(directory: Path, n: int, stages: str, seed: int = 0) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """The base and candidate files of ``n`` samples, and their outcomes."""
    rng = np.random.default_rng(seed)
    base = rng.random(n) < 0.6
    cand = np.where(base, rng.random(n) < 0.97, rng.random(n) < 0.12)
    paths = directory / f"base-{n}.jsonl", directory / f"cand-{n}.jsonl"
    for path, outcome in zip(paths, (base, cand)):
        with path.open("w") as fh:
            for i, correct in enumerate(outcome):
                fh.write(json.dumps(record(i, bool(correct), stages)) + "\n")
    return *paths, base, cand


def run_gate(base: Path, cand: Path, stores: Path) -> tuple[float, float, str]:
    """Wall seconds, the child's peak resident MiB, and its first output line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "evolve.cli", "gate", str(base), str(cand), "--no-hypothesis", "--stores",
                              str(stores)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    out = child.stdout.read().decode()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if child.returncode != 0:
        raise SystemExit(f"gate exited {child.returncode}:\n{out}")
    return wall, usage.ru_maxrss / 1024, out.splitlines()[0]


def comparison_alone(base: np.ndarray, cand: np.ndarray) -> tuple[float, float]:
    """Seconds and traced peak MiB of the paired comparison on these outcomes (maps built beforehand)."""
    from evolve.verify.statistics import paired_comparison

    b = {f"q{i}": {"correct": bool(x), "category": CATEGORIES[i % 4]} for i, x in enumerate(base)}
    c = {f"q{i}": {"correct": bool(x), "category": CATEGORIES[i % 4]} for i, x in enumerate(cand)}
    tracemalloc.start()
    try:
        started = time.perf_counter()
        paired_comparison(b, c)
        seconds = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return seconds, peak / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--stages", choices=("results", "full"), default="results")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    print(f"{'samples':>9} {'files MiB':>10} {'gate wall s':>12} {'gate peak RSS MiB':>18} "
          f"{'comparison s':>13} {'comparison traced peak MiB':>27}  verdict")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            base, cand, b, c = write_pair(Path(tmp), n, args.stages)
            size = (base.stat().st_size + cand.stat().st_size) / 2**20
            wall, rss, verdict = run_gate(base, cand, Path(tmp) / f"gate-{n}")
            seconds, peak = comparison_alone(b, c)
            print(f"{n:>9,} {size:>10.0f} {wall:>12.1f} {rss:>18.0f} {seconds:>13.2f} {peak:>27.1f}  {verdict}",
                  flush=True)
            base.unlink()
            cand.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
