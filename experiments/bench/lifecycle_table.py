"""Per attack vector: pass rate and staleness of several strategies on the lifecycle benchmark, each paired by
question id with the first (McNemar p per attack vector and overall). Writes a markdown table beside this script.
Run from the repository root:

    python experiments/bench/lifecycle_table.py [--bench lifecycle:0:12] A.yaml B.yaml [C.yaml ...]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from evolve import Harness, load_benchmark, load_strategy, paired_comparison
from evolve.benchmarks.types import LIFECYCLE_CATEGORIES
from evolve.observe.harness import EvalRun

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).with_name("lifecycle_report.md")


def _stale(run: EvalRun, ids: set[str]) -> tuple[float | None, float | None]:
    """Shares of the questions in ``ids`` with outdated evidence whose context / top 5 carried an outdated turn."""
    marked = [t for t in run.traces if t.question_id in ids and t.gold_outdated]
    if not marked:
        return None, None
    return (sum(bool(t.stale_packed) for t in marked) / len(marked),
            sum(t.stale_retrieved["5"] for t in marked) / len(marked))


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("strategies", nargs="+", help="strategy files; the first is the reference of every pairing")
    parser.add_argument("--bench", default="lifecycle:0:12")
    args = parser.parse_args(argv)
    benchmark = load_benchmark(args.bench)
    harness = Harness(benchmark)
    runs = [harness.evaluate(load_strategy(path)) for path in args.strategies]
    names = [Path(p).stem for p in args.strategies]
    slices = [(av, {q.id for q in benchmark.questions if q.category == av}) for av in LIFECYCLE_CATEGORIES]
    slices.append(("all", {q.id for q in benchmark.questions}))
    head = ["attack vector", "n"] + [f"pass {n}" for n in names] + [f"Δ {n} (p)" for n in names[1:]]
    head += [f"stale context {n}" for n in names] + [f"stale top-5 {n}" for n in names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for av, ids in slices:
        outcomes = [{q: o for q, o in run.outcomes().items() if q in ids} for run in runs]
        passes = [sum(x["correct"] for x in o.values()) / len(o) for o in outcomes]
        deltas = []
        for other in outcomes[1:]:
            paired = paired_comparison(outcomes[0], other, alpha=0.05, seed=0)
            deltas.append(f"{paired.delta:+.3f} ({paired.mcnemar_p:.2g})")
        stale = [_stale(run, ids) for run in runs]
        row = [av.replace("_", " "), str(len(ids))] + [f"{p:.3f}" for p in passes] + deltas
        row += [_cell(s[0]) for s in stale] + [_cell(s[1]) for s in stale]
        lines.append("| " + " | ".join(row) + " |")
    table = "\n".join(lines)
    OUT.write_text(f"# Lifecycle attack vectors on `{args.bench}`\n\nStrategies: "
                   + ", ".join(f"`{p}`" for p in args.strategies) + "\n\n" + table + "\n", encoding="utf-8")
    print(table)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
