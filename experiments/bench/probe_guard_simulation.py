"""False-stop rate and power of the label-free canary guard, whose pairs come from probes of a few users' own turns.

The guard's harm test (:mod:`evolve.serve.guard`) treats each discordant pair as an independent fair coin under no
difference. Probe pairs are not independent: each canary user contributes many, and a canary may be worse for some
users' memories and better for others' while no worse on average. Here each of ``U`` canary users gets a harm share
``h_u`` (a discordant pair of that user is a harm with probability ``h_u``), drawn around the mean ``h`` with spread
``s`` (a Beta with that mean and standard deviation); a user's probes are discordant with
probability ``q`` and the users are judged as :class:`~evolve.serve.probeguard.ProbeJudge` judges them: in passes,
``per_user`` new probes of each user per pass, each user holding ``probes`` in all. Every pair goes through
:class:`~evolve.serve.guard.CanaryGuard` itself (the shipped plan: alpha 0.05 over looks at 10 ... 640 discordant
pairs). Two nulls, by users and spread:

* **the canary's own users, on average**: half the users' shares are drawn and the other half mirror them
  (``1 - h_u``), so these very users' discordant pairs are harms half the time in expectation, the canary worse
  for some of them and better for as many others. The spread-0 column is the guard's own null (no worse for any
  user): its false-stop rate. With a spread, the users judged first (a pass takes each user's probes in turn, and
  the first looks come within a few users) may be the harmed ones, and the guard stops on their harm;
* **the population**: each user's share drawn around 1/2 independently, so the users a canary happens to serve may
  be harmed on average (four users with shares 0.7, 0.6, 0.5, 0.4 are). A stop there protects them; it is counted
  to show how often a canary neutral for the population is stopped for harming the few it serves.

And the share stopped for a worse canary (``h`` 0.7, 0.8). Run from the repository root:

    python experiments/bench/probe_guard_simulation.py [--runs N] [--report PATH.md]
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from evolve.files import atomic_write_text  # noqa: E402
from evolve.serve.guard import CanaryGuard, GuardPlan  # noqa: E402
from evolve.serve.probeguard import PER_USER  # noqa: E402

USERS = (4, 20, 100)
SPREADS = (0.0, 0.1, 0.2, 0.3)
HARMS = (0.7, 0.8)
DISCORDANCE = 0.15  # dev4's label-free canary at top_k 1 against the serving strategy is far more discordant
PROBES = 150  # probes a LoCoMo conversation keeps, about


def _shares(rng: np.random.Generator, users: int, mean: float, spread: float, mirrored: bool = False) -> np.ndarray:
    """Each user's harm share: a Beta with ``mean`` and standard deviation ``spread`` (``mean`` itself at 0);
    ``mirrored``: half drawn, the other half their mirror images (mean 1/2 among these users)."""
    if spread == 0:
        return np.full(users, mean)
    common = mean * (1 - mean) / spread ** 2 - 1
    drawn = rng.beta(mean * common, (1 - mean) * common, size=(users + 1) // 2 if mirrored else users)
    return np.concatenate([drawn, 1 - drawn])[:users] if mirrored else drawn


def run_once(rng: np.random.Generator, users: int, mean: float, spread: float, q: float, probes: int,
             per_user: int, plan: GuardPlan, mirrored: bool = False) -> bool:
    """Whether the guard stopped one simulated canary."""
    guard, shares = CanaryGuard(plan), rng.permutation(_shares(rng, users, mean, spread, mirrored))
    for start in range(0, probes, per_user):
        for share in shares:
            n = min(per_user, probes - start)
            discordant = rng.random(n) < q
            harm = rng.random(n) < share
            serving_good = rng.random(n) < 0.5  # concordant pairs: both good or both bad, no matter which
            for d, hm, good in zip(discordant, harm, serving_good):
                pair = (hm, not hm) if d else (good, good)
                if guard.add(*pair, source="sim") is not None:
                    return True
                if guard.done:
                    return False
    return False


def _rate(rng: np.random.Generator, runs: int, users: int, mean: float, spread: float, plan: GuardPlan,
          mirrored: bool = False) -> float:
    return float(np.mean([run_once(rng, users, mean, spread, DISCORDANCE, PROBES, PER_USER, plan, mirrored)
                          for _ in range(runs)]))


def table(runs: int, seed: int, plan: GuardPlan) -> tuple[list[list[str]], ...]:
    rng = np.random.default_rng(seed)
    own = [[str(u), *[f"{_rate(rng, runs, u, 0.5, s, plan, mirrored=True):.4f}" for s in SPREADS]] for u in USERS]
    population = [[str(u), *[f"{_rate(rng, runs, u, 0.5, s, plan):.4f}" for s in SPREADS]] for u in USERS]
    power = [[str(u), *[f"{_rate(rng, runs, u, h, s, plan):.3f}" for h in HARMS for s in (0.0, 0.2)]] for u in USERS]
    return own, population, power


def _by_spread(rows: list[list[str]]) -> list[str]:
    """A table of stop rates, a row of users and a column of spread each."""
    return ["| canary users | " + " | ".join(f"spread {s}" for s in SPREADS) + " |", "|---|" + "---|" * len(SPREADS),
            *[f"| {' | '.join(row)} |" for row in rows]]


def report(runs: int, seed: int, command: str) -> str:
    plan = GuardPlan()
    started = time.perf_counter()
    own, population, power = table(runs, seed, plan)
    lines = [
        "# The label-free canary guard: false stops and power when pairs come from a few users' probes",
        "",
        f"Command: `{command}` ({runs} simulated canaries per cell, seed {seed}, {time.perf_counter() - started:.0f} s). "
        f"Each canary user holds {PROBES} probes, judged {PER_USER} per pass in user order; a probe pair is "
        f"discordant with probability {DISCORDANCE}; the guard is the shipped one (alpha {plan.alpha} over looks at "
        f"{', '.join(map(str, plan.looks))} discordant pairs).",
        "",
        "Spread: the standard deviation of the users' harm shares (0: every user's discordant pairs are fair coins).",
        "",
        "## No worse for the users it serves, on average: share of canaries stopped",
        "",
        "Spread 0: no worse for any user, the guard's null (its false-stop rate). A wider spread: worse for some "
        "served users and better for as many others; a stop is the guard acting on the harm to the users judged "
        "first.",
        "",
        *_by_spread(own),
        "",
        "## No worse for the population, the served users drawn from it: share stopped",
        "",
        "A stop here is a canary that harms the users it happens to serve; with few users and a wide spread that is "
        "common, and the guard stops it, as it should for those users.",
        "",
        *_by_spread(population),
        "",
        "## Worse on average: share of canaries stopped",
        "",
        "| canary users | " + " | ".join(f"harm {h}, spread {s}" for h in HARMS for s in (0.0, 0.2)) + " |",
        "|---|" + "---|" * (2 * len(HARMS)),
        *[f"| {' | '.join(row)} |" for row in power],
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report", type=Path)
    args = parser.parse_args(argv)
    command = "python experiments/bench/probe_guard_simulation.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    text = report(args.runs, args.seed, command.strip())
    print(text)
    if args.report:
        atomic_write_text(args.report, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
