"""False-stop rate and power of the canary guard (:mod:`evolve.serve.guard`), by simulation and exactly.

A canary's paired log is simulated as the guard sees it: each judged recall is discordant with probability ``q``
(the two contexts differ in carrying the answer), and a discordant pair is a harm (serving good, canary bad) with
probability ``h``. Under no difference ``h = 1/2``. Each run draws the walk of the first ``max(LOOKS)`` discordant
pairs and, at each look, the concordant pairs that came before it (negative binomial), and applies the shipped rule
:func:`evolve.serve.guard.harm_at` (exact McNemar, then the BCa interval) at the looks of :class:`GuardPlan`.
The McNemar part alone is also computed exactly (the probability that the walk meets a look's McNemar boundary, by
dynamic programming over the harm count): an upper bound of the false-stop rate that needs no simulation. For
contrast, the rule applied after every discordant pair at the contract's alpha (no correction for the looks).
A cross-check feeds the first runs pair by pair through :class:`CanaryGuard` itself and asserts the same stops.
Run from the repository root:

    python experiments/bench/canary_guard_simulation.py [--runs N] [--report experiments/bench/canary_guard_simulation.md]
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

from evolve.files import atomic_write_text
from evolve.serve.guard import CanaryGuard, GuardPlan, Tally, harm_at
from evolve.verify.statistics import mcnemar_exact

NULL_DISCORDANCE = (0.02, 0.10, 0.30)
HARMS = (0.60, 0.70, 0.80, 0.95)
POWER_DISCORDANCE = 0.10
CROSS_CHECK_RUNS = 200


def boundary(d: int, level: float) -> int | None:
    """The fewest harms among ``d`` discordant pairs whose McNemar p meets ``level`` (None: no count does)."""
    return next((h for h in range(d // 2 + 1, d + 1) if mcnemar_exact(d - h, h) <= level), None)


def exact_mcnemar_crossing(plan: GuardPlan, h: float = 0.5) -> float:
    """P(the harm count meets some look's McNemar boundary), by dynamic programming over the walk."""
    top = plan.looks[-1]
    alive = np.zeros(top + 1)
    alive[0] = 1.0
    crossed, done = 0.0, 0
    for look in plan.looks:
        for _ in range(look - done):  # one more discordant pair: a harm with probability h
            alive = np.concatenate([[alive[0] * (1 - h)], alive[1:] * (1 - h) + alive[:-1] * h])
        done = look
        b = boundary(look, plan.level)
        if b is not None:
            crossed += alive[b:].sum()
            alive[b:] = 0.0
    return float(crossed)


def simulate(plan: GuardPlan, q: float, h: float, runs: int, seed: int, every_pair: bool = False) -> dict:
    """Stops of the shipped rule over ``runs`` simulated logs; ``every_pair``: the uncorrected rule (alpha, after
    each discordant pair) instead of the plan's looks."""
    rng = np.random.default_rng(seed)
    top = plan.looks[-1]
    looks = np.arange(1, top + 1) if every_pair else np.asarray(plan.looks)
    level = plan.alpha if every_pair else plan.level
    bounds = {int(d): boundary(int(d), level) for d in looks}
    stops, pairs_at_stop = 0, []
    for _ in range(runs):
        harms = np.cumsum(rng.random(top) < h)
        concordant = np.cumsum(rng.negative_binomial(np.diff(np.concatenate([[0], looks])), q)) if q < 1 else \
            np.zeros(len(looks), dtype=int)
        for i, d in enumerate(looks):
            k = int(harms[d - 1])
            if bounds[int(d)] is None or k < bounds[int(d)]:
                continue
            c = int(concordant[i])
            stop = harm_at(Tally(both_good=c, harmed=k, helped=int(d) - k), level, int(d))
            if stop is not None:
                stops += 1
                pairs_at_stop.append(stop.tally.pairs)
                break
    low, high = stats.binomtest(stops, runs).proportion_ci(0.95, method="exact")
    return {"q": q, "h": h, "runs": runs, "stops": stops, "rate": stops / runs, "ci": (low, high),
            "median_pairs": float(np.median(pairs_at_stop)) if pairs_at_stop else None}


def cross_check(plan: GuardPlan, q: float, h: float, runs: int, seed: int) -> int:
    """Feed ``runs`` logs pair by pair through :class:`CanaryGuard` and through :func:`harm_at` at the looks, and
    assert both stop at the same pair; the number of stops."""
    rng = np.random.default_rng(seed)
    stops = 0
    for _ in range(runs):
        guard, tally, expected = CanaryGuard(plan), Tally(), None
        looked = 0
        while expected is None and looked < len(plan.looks):
            discordant = rng.random() < q
            harm = rng.random() < h
            pair = (True, not harm) if discordant and harm else (False, True) if discordant else (True, True)
            got = guard.add(*pair)
            tally = tally.add(*pair)
            if looked < len(plan.looks) and tally.discordant == plan.looks[looked]:
                expected = harm_at(tally, plan.level, plan.looks[looked])
                looked += 1
            assert (got is None) == (expected is None), (tally, got, expected)
        stops += expected is not None
    return stops


def _pairs(median: float | None) -> str:
    return "-" if median is None else f"{median:.0f}"


def report(plan: GuardPlan, runs: int, command: str) -> str:
    started = time.perf_counter()
    exact_null = exact_mcnemar_crossing(plan)
    nulls = [simulate(plan, q, 0.5, runs, seed=i) for i, q in enumerate(NULL_DISCORDANCE)]
    naive = simulate(plan, 0.10, 0.5, max(runs // 10, 200), seed=99, every_pair=True)
    power = [simulate(plan, POWER_DISCORDANCE, h, max(runs // 10, 200), seed=100 + i) for i, h in enumerate(HARMS)]
    checked = cross_check(plan, 0.3, 0.8, CROSS_CHECK_RUNS, seed=7)
    seconds = time.perf_counter() - started
    bounds = ", ".join(f"{d}: {boundary(d, plan.level)}" for d in plan.looks)
    lines = [
        "# Canary guard: false-stop rate and power",
        "",
        f"Command: `{command}` ({seconds:.0f} s).",
        "",
        f"The guard applies the contract's harm rule (loss, exact McNemar p <= level, bootstrap CI wholly below 0) "
        f"when the discordant pairs reach {', '.join(map(str, plan.looks))}, each look at alpha / {len(plan.looks)} "
        f"= {plan.level:.5f} (alpha {plan.alpha}). Harms needed at each look for McNemar alone (discordant: harms): "
        f"{bounds}.",
        "",
        "## No difference (a canary as good as serving): false stops",
        "",
        f"Exact probability that the walk meets a look's McNemar boundary (an upper bound of the false-stop rate, "
        f"whatever the share of concordant pairs): **{exact_null:.5f}** (alpha {plan.alpha}).",
        "",
        "| discordant share q | runs | stopped | false-stop rate | 95% CI |",
        "|---|---|---|---|---|",
        *[f"| {r['q']:.2f} | {r['runs']} | {r['stops']} | {r['rate']:.4f} | [{r['ci'][0]:.4f}, {r['ci'][1]:.4f}] |"
          for r in nulls],
        "",
        f"Uncorrected, the same rule after every discordant pair at alpha {plan.alpha} (q 0.10, {naive['runs']} "
        f"runs): false-stop rate **{naive['rate']:.3f}** [{naive['ci'][0]:.3f}, {naive['ci'][1]:.3f}]: why the "
        "looks are fixed and split alpha.",
        "",
        f"## A worse canary: power (q {POWER_DISCORDANCE})",
        "",
        "h is the share of discordant pairs where the canary is the worse one; pairs are judged recalls of canary "
        "users.",
        "",
        "| h | runs | stopped | power | median judged pairs at the stop |",
        "|---|---|---|---|---|",
        *[f"| {r['h']:.2f} | {r['runs']} | {r['stops']} | {r['rate']:.3f} | "
          f"{_pairs(r['median_pairs'])} |" for r in power],
        "",
        f"Cross-check: {CROSS_CHECK_RUNS} logs (q 0.3, h 0.8) fed pair by pair through `CanaryGuard` stop exactly "
        f"where `harm_at` at the looks stops them ({checked} stops).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000, help="simulated logs per null setting")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--report", type=Path, help="write the Markdown report here")
    args = parser.parse_args(argv)
    command = "python experiments/bench/canary_guard_simulation.py " + shlex.join(sys.argv[1:] if argv is None
                                                                                  else argv)
    text = report(GuardPlan(alpha=args.alpha), args.runs, command.strip())
    print(text)
    if args.report:
        atomic_write_text(args.report, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
