"""The canary guard: the decision contract's harm rule applied to a canary's paired log as it grows.

Every recall of a canary user is answered by the canary and, off the response path, asked again of the serving
strategy on the same request, so each judged recall is one pair of binary outcomes (serving good, canary good).
The harm rule is the contract's ``significant_harm`` (:meth:`~evolve.verify.statistics.PairedBrief.harms`: a loss,
exact McNemar p <= the level and a bootstrap interval wholly below 0), tested at fixed checkpoints: when the
discordant pairs reach each of :data:`LOOKS`. McNemar's test conditions on the discordant pairs, so under no
difference their split is a fair coin whatever the share of concordant pairs, and the looks fall at the same points
of that coin's walk in every run.

Two tests share the level ``alpha``, half each. The **pooled** test looks at every pair, each look at
``alpha / 2 / len(looks)``. The **per-category** family (the contract's "no category falls", over LoCoMo's answerable
categories, :data:`CATEGORIES`) keeps a log per category with the same looks on its own discordant pairs; over the
categories it is Holm's procedure, whose first step is the only one a guard that stops at its first rejection ever
takes: a category's look at ``alpha / 2 / len(categories) / len(looks)``. So the chance that a canary no worse than
serving in any category is ever stopped is at most ``alpha``; experiments/bench/canary_guard_simulation.md shows the
rate reached. After the last look of a log that log tests no more: the canary was not found harmful within its
horizon, and what happens next is the operator's decision. The guard only ever stops; it never promotes.
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import asdict, dataclass, replace

from evolve.verify.statistics import mcnemar_exact, paired_comparison

#: Discordant pairs at which the harm rule is applied (doubling: early looks stop a plainly bad canary within tens
#: of judged recalls, later ones find a small harm).
LOOKS = (10, 20, 40, 80, 160, 320, 640)
#: Bootstrap resamples of the interval at a look (only looks whose McNemar p already meets the level compute it).
RESAMPLES = 10_000


#: The categories the guard also tests apart: LoCoMo's answerable ones (a pair of another category counts pooled).
CATEGORIES = ("single_hop", "temporal", "multi_hop", "open_domain")


@dataclass(frozen=True)
class GuardPlan:
    """The guard's test: family-wise level ``alpha``, half to the pooled test and half to the per-category family
    (Holm over ``categories``; none: the pooled test takes it all), each split evenly over the ``looks``
    (discordant pairs)."""

    alpha: float = 0.05
    looks: tuple[int, ...] = LOOKS
    categories: tuple[str, ...] = CATEGORIES

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"guard alpha: must be in (0, 1), got {self.alpha}")
        if not self.looks or list(self.looks) != sorted(set(self.looks)) or self.looks[0] < 1:
            raise ValueError(f"guard looks: must be increasing positive counts, got {self.looks}")

    @property
    def level(self) -> float:
        """The level each look of the pooled test is tested at."""
        return (self.alpha / 2 if self.categories else self.alpha) / len(self.looks)

    @property
    def category_level(self) -> float:
        """The level each look of one category is tested at (Holm's first step over the categories)."""
        return self.alpha / 2 / max(1, len(self.categories)) / len(self.looks)


@dataclass(frozen=True)
class Tally:
    """The paired log's counts: both good, both bad, serving good and canary bad (harmed), the reverse (helped)."""

    both_good: int = 0
    both_bad: int = 0
    harmed: int = 0
    helped: int = 0

    @property
    def pairs(self) -> int:
        return self.both_good + self.both_bad + self.harmed + self.helped

    @property
    def discordant(self) -> int:
        return self.harmed + self.helped

    def add(self, serving_good: bool, canary_good: bool) -> "Tally":
        key = {(True, True): "both_good", (False, False): "both_bad", (True, False): "harmed",
               (False, True): "helped"}[(bool(serving_good), bool(canary_good))]
        return Tally(**{**asdict(self), key: getattr(self, key) + 1})


@dataclass(frozen=True)
class GuardStop:
    """The evidence a look stopped the canary on."""

    look: int  # the discordant pairs of the look
    tally: Tally
    level: float
    delta: float  # canary minus serving, share of pairs good
    mcnemar_p: float
    ci: tuple[float, float]
    category: str | None = None  # the category whose log stopped it; None: the pooled log

    def reason(self) -> str:
        t, where = self.tally, f" in category {self.category}" if self.category else ""
        return (f"significant harm{where} at the look of {self.look} discordant pairs: on {t.pairs} paired recalls the "
                f"canary's context was worse on {t.harmed} and better on {t.helped} (delta {self.delta:+.4f}, "
                f"McNemar p={self.mcnemar_p:.3g} <= {self.level:.4g}, {1 - self.level:.2%} CI "
                f"[{self.ci[0]:+.4f}, {self.ci[1]:+.4f}])")

    def to_dict(self) -> dict:
        return {"look": self.look, **asdict(self.tally), "pairs": self.tally.pairs, "level": self.level,
                "delta": self.delta, "mcnemar_p": self.mcnemar_p, "ci": list(self.ci), "category": self.category}


def harm_at(tally: Tally, level: float, look: int, seed: int = 0) -> GuardStop | None:
    """The contract's harm rule on ``tally`` at ``level``: the stop, or ``None``. The interval is computed only when
    McNemar already meets the level with more harmed than helped pairs."""
    if tally.harmed <= tally.helped or mcnemar_exact(tally.helped, tally.harmed) > level:
        return None
    serving, canary = {}, {}
    for name, (s, c) in (("both_good", (True, True)), ("both_bad", (False, False)), ("harmed", (True, False)),
                         ("helped", (False, True))):
        for i in range(getattr(tally, name)):
            serving[f"{name}{i}"], canary[f"{name}{i}"] = {"correct": s, "category": "canary"}, \
                {"correct": c, "category": "canary"}
    report = paired_comparison(serving, canary, alpha=level, confidence=1 - level, n_resamples=RESAMPLES, seed=seed)
    if not report.brief().harms(level):
        return None
    return GuardStop(look, tally, level, report.delta, report.mcnemar_p, (report.ci_low, report.ci_high))


@dataclass
class _Log:
    """One paired log (pooled, or one category's) and the looks made on it."""

    tally: Tally = Tally()
    looked: int = 0


class CanaryGuard:
    """The paired log of one canary as it grows (thread-safe); :meth:`add` returns the stop once, at the look that
    finds significant harm, pooled or in a category. Pairs come from recalls the operator's answers cover (source
    ``answers``) and from probe questions of the canary users' own turns (:mod:`evolve.serve.probeguard`; source:
    their LoCoMo category), counted per source."""

    def __init__(self, plan: GuardPlan | None = None):
        self.plan = plan or GuardPlan()
        self.pooled = _Log()
        self.categories = {c: _Log() for c in self.plan.categories}
        self.stop: GuardStop | None = None
        self.judged: Counter[str] = Counter()  # pairs by source
        self._lock = threading.Lock()

    @property
    def tally(self) -> Tally:
        return self.pooled.tally

    def add(self, serving_good: bool, canary_good: bool, source: str = "answers",
            category: str | None = None) -> GuardStop | None:
        """Count one pair (of ``category``, if the plan tests it apart); the stop, if a look finds harm."""
        with self._lock:
            if self.stop is not None:
                return None
            self.judged[source] += 1
            logs = [(self.pooled, self.plan.level, None)]
            if category in self.categories:
                logs.append((self.categories[category], self.plan.category_level, category))
            for log, level, name in logs:
                log.tally = log.tally.add(serving_good, canary_good)
                looks = self.plan.looks
                if log.looked < len(looks) and log.tally.discordant >= looks[log.looked]:
                    look = looks[log.looked]
                    log.looked += 1
                    stop = harm_at(log.tally, level, look)
                    if stop is not None and self.stop is None:
                        self.stop = replace(stop, category=name)
            return self.stop

    @property
    def done(self) -> bool:
        """Whether every look of the pooled log was made without finding harm (the guard's horizon is reached)."""
        return self.stop is None and self.pooled.looked >= len(self.plan.looks)

    def status(self) -> dict:
        with self._lock:
            t = self.pooled.tally
            return {"alpha": self.plan.alpha, "level_per_look": self.plan.level,
                    "level_per_category_look": self.plan.category_level, "looks": list(self.plan.looks),
                    "looks_made": self.pooled.looked, "pairs": t.pairs, **asdict(t), "discordant": t.discordant,
                    "categories": {c: {"pairs": log.tally.pairs, "harmed": log.tally.harmed,
                                       "helped": log.tally.helped, "looks_made": log.looked}
                                   for c, log in self.categories.items()},
                    "judged": dict(sorted(self.judged.items())),
                    "horizon_reached": self.done, "stop": None if self.stop is None else self.stop.to_dict()}
