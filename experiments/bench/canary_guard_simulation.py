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

The per-category family: each discordant pair falls in a LoCoMo category with dev4's mix, the pooled log and each
category's log are looked at as :class:`CanaryGuard` looks at them (pooled at ``alpha / 2 / looks``, a category at
``alpha / 2 / categories / looks``), over a stream of :data:`STREAM` discordant pairs; under no difference in every
category, the rate of any stop, and the power for a canary worse in one category only (with and without another
category where it is better, so that pooled it is about even) and worse everywhere, against the pooled test alone
(the plan without categories). Run from the repository root:

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
#: Discordant pairs a simulated canary log runs to in the per-category family (the pooled log's looks end at 640).
STREAM = 2000
#: dev4's share of each LoCoMo category among its answerable questions, in the plan's category order.
MIX = {"single_hop": 0.53, "temporal": 0.22, "multi_hop": 0.19, "open_domain": 0.06}
#: ``(name, harm share per category)`` of the per-category scenarios.
SCENARIOS = (("no difference anywhere", {}),
             ("worse in temporal only (h 0.8)", {"temporal": 0.8}),
             ("worse in temporal (h 0.8), better in single-hop (h 0.35): pooled about even",
              {"temporal": 0.8, "single_hop": 0.35}),
             ("worse everywhere (h 0.6)", {c: 0.6 for c in MIX}),
             ("worse everywhere (h 0.7)", {c: 0.7 for c in MIX}))


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


def simulate_family(plan: GuardPlan, harms: dict[str, float], q: float, runs: int, seed: int) -> dict:
    """Stops of the pooled log and the category logs of ``plan`` over ``runs`` streams of :data:`STREAM` discordant
    pairs (category drawn from :data:`MIX`, a harm with the category's share in ``harms``, else 1/2); the stop rate,
    which log stopped first, and the median judged pairs at the stop."""
    rng = np.random.default_rng(seed)
    names = list(MIX)
    shares = np.array([harms.get(c, 0.5) for c in names])
    logs = [(None, plan.level)] + [(c, plan.category_level) for c in plan.categories]
    bounds = {(level, d): boundary(d, level) for _, level in logs for d in plan.looks}
    stopped, by_log, pairs = 0, {}, []
    for _ in range(runs):
        category = rng.choice(len(names), size=STREAM, p=np.array(list(MIX.values())) / sum(MIX.values()))
        harm = rng.random(STREAM) < shares[category]
        first = None  # (position in the stream, log name, pairs)
        for name, level in logs:
            mine = np.ones(STREAM, dtype=bool) if name is None else category == names.index(name)
            positions, harmed = np.flatnonzero(mine), np.cumsum(harm[mine])
            for d in plan.looks:
                if d > len(positions) or (first is not None and positions[d - 1] >= first[0]):
                    break
                k, b = int(harmed[d - 1]), bounds[(level, d)]
                if b is None or k < b:
                    continue
                concordant = int(rng.negative_binomial(d, q)) if q < 1 else 0
                if harm_at(Tally(both_good=concordant, harmed=k, helped=d - k), level, d) is not None:
                    total = int(positions[d - 1]) + 1
                    first = (positions[d - 1], name or "pooled", total + int(rng.negative_binomial(total, q)))
                    break
        if first is not None:
            stopped += 1
            by_log[first[1]] = by_log.get(first[1], 0) + 1
            pairs.append(first[2])
    low, high = stats.binomtest(stopped, runs).proportion_ci(0.95, method="exact")
    return {"runs": runs, "stops": stopped, "rate": stopped / runs, "ci": (low, high), "by_log": by_log,
            "median_pairs": float(np.median(pairs)) if pairs else None}


def family_lines(plan: GuardPlan, runs: int) -> list[str]:
    """The per-category section of the report."""
    bound = exact_mcnemar_crossing(GuardPlan(plan.alpha / 2, plan.looks, ())) + len(plan.categories) * \
        exact_mcnemar_crossing(GuardPlan(plan.alpha / 2 / len(plan.categories), plan.looks, ()))
    lines = ["## Per category: the pooled test and the category family together", "",
             f"The pooled log at {plan.level:.5f} per look, each of {len(plan.categories)} categories "
             f"({', '.join(plan.categories)}) at {plan.category_level:.5f} per look (Holm's first step over the "
             f"categories); categories drawn with dev4's mix ({', '.join(f'{c} {s}' for c, s in MIX.items())}), "
             f"q {POWER_DISCORDANCE}, streams of {STREAM} discordant pairs. Union of the exact McNemar crossings "
             f"(an upper bound of the false-stop rate): **{bound:.5f}**.", "",
             "| scenario | plan | runs | stopped | rate | 95% CI | stopped by | median judged pairs at the stop |",
             "|---|---|---|---|---|---|---|---|"]
    pooled_only = GuardPlan(plan.alpha, plan.looks, ())
    for i, (name, harms) in enumerate(SCENARIOS):
        n = runs if not harms else max(runs // 10, 200)
        for label, p in (("pooled + categories (shipped)", plan), ("pooled only", pooled_only)):
            r = simulate_family(p, harms, POWER_DISCORDANCE, n, seed=200 + i)
            logs = ", ".join(f"{k} {v}" for k, v in sorted(r["by_log"].items(), key=lambda kv: -kv[1])) or "-"
            lines.append(f"| {name} | {label} | {r['runs']} | {r['stops']} | {r['rate']:.4f} | "
                         f"[{r['ci'][0]:.4f}, {r['ci'][1]:.4f}] | {logs} | {_pairs(r['median_pairs'])} |")
    return lines + [""]


def _pairs(median: float | None) -> str:
    return "-" if median is None else f"{median:.0f}"


def report(plan: GuardPlan, runs: int, command: str) -> str:
    started = time.perf_counter()
    exact_null = exact_mcnemar_crossing(plan)
    nulls = [simulate(plan, q, 0.5, runs, seed=i) for i, q in enumerate(NULL_DISCORDANCE)]
    naive = simulate(plan, 0.10, 0.5, max(runs // 10, 200), seed=99, every_pair=True)
    power = [simulate(plan, POWER_DISCORDANCE, h, max(runs // 10, 200), seed=100 + i) for i, h in enumerate(HARMS)]
    checked = cross_check(plan, 0.3, 0.8, CROSS_CHECK_RUNS, seed=7)
    family = family_lines(plan, max(runs // 4, 400))
    seconds = time.perf_counter() - started
    bounds = ", ".join(f"{d}: {boundary(d, plan.level)}" for d in plan.looks)
    lines = [
        "# Canary guard: false-stop rate and power",
        "",
        f"Command: `{command}` ({seconds:.0f} s).",
        "",
        f"The guard applies the contract's harm rule (loss, exact McNemar p <= level, bootstrap CI wholly below 0) "
        f"when the discordant pairs reach {', '.join(map(str, plan.looks))}; the pooled log takes half of alpha "
        f"{plan.alpha}, each look at alpha / 2 / {len(plan.looks)} = {plan.level:.5f}, the category family the other "
        f"half (below). Harms needed at each pooled look for McNemar alone (discordant: harms): {bounds}.",
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
        *family,
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
