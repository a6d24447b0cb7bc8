"""How often a replay names a difference that is not there: its verdict on simulated null traffic.

Each simulated replay pairs two strategies that differ by chance only: per request of slice s, the serving
strategy's outcome is Bernoulli(p_s) and the candidate's equals it with probability ``rho``, else is drawn again
from Bernoulli(p_s) (exchangeable pairs: no side is better). The slices, their sizes and rates are dev4's answer in
context (``replay_referee.json``). The replay's own summary and verdict (:mod:`evolve.serve.replay`: the overall
McNemar + BCa test and the per-slice floors, Holm over the slices, each way) decide; the false-difference rate is the
share of replays whose verdict is not ``no_difference``, with its 95 % Clopper-Pearson interval.

    python experiments/bench/replay_null_simulation.py [--replays 1000] [--alpha 0.05 0.2]
"""
from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from evolve.serve.replay import ReplayReport, _summarise
from evolve.verify.decision import AcceptanceRules

#: dev4's slices: (name, recalls, serving's answer-in-context rate).
SLICES = (("multi_hop", 111, 0.09), ("open_domain", 32, 0.06), ("single_hop", 311, 0.35), ("temporal", 130, 0.34))


def _rows(rng: np.random.Generator, rho: float) -> list[dict]:
    rows = []
    for name, n, p in SLICES:
        serving = rng.random(n) < p
        candidate = np.where(rng.random(n) < rho, serving, rng.random(n) < p)
        rows += [{"id": f"{name}/{i}", "user": "u", "slice": name, "stale": (None, None),
                  "answer_in": (bool(a), bool(b)), "words": (1, 1), "latency_ms": (1.0, 1.0), "ids_jaccard": 1.0,
                  "sources_jaccard": 1.0, "words_jaccard": 1.0, "serving_reproduced": None,
                  "shadow_reproduced": None} for i, (a, b) in enumerate(zip(serving, candidate))]
    return rows


def simulate(replays: int, alpha: float, rho: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    rules = AcceptanceRules(alpha=alpha, bootstrap_resamples=1000)
    verdicts: dict[str, int] = {}
    for i in range(replays):
        report = ReplayReport("s", "c", 0, 1, requests=_rows(rng, rho), rules=rules)
        _summarise(report, seed=i)
        verdicts[report.verdict] = verdicts.get(report.verdict, 0) + 1
    false = replays - verdicts.get("no_difference", 0)
    ci = stats.binomtest(false, replays).proportion_ci(0.95, method="exact")
    return {"alpha": alpha, "rho": rho, "replays": replays, "verdicts": verdicts, "false_difference": false / replays,
            "ci95": [round(ci.low, 4), round(ci.high, 4)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=1000)
    parser.add_argument("--alpha", type=float, nargs="+", default=[0.05, 0.2])
    parser.add_argument("--rho", type=float, default=0.8, help="share of requests whose outcomes agree by design")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for alpha in args.alpha:
        print(simulate(args.replays, alpha, args.rho, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
