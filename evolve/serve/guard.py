"""The canary guard: the decision contract's harm rule applied to a canary's paired log as it grows.

Every recall of a canary user is answered by the canary and, off the response path, asked again of the serving
strategy on the same request, so each judged recall is one pair of binary outcomes (serving good, canary good).
The harm rule is the contract's ``significant_harm`` (:meth:`~evolve.verify.statistics.PairedBrief.harms`: a loss,
exact McNemar p <= the level and a bootstrap interval wholly below 0), tested at fixed checkpoints: when the
discordant pairs reach each of :data:`LOOKS`. McNemar's test conditions on the discordant pairs, so under no
difference their split is a fair coin whatever the share of concordant pairs, and the looks fall at the same points
of that coin's walk in every run. Each look is tested at ``alpha / len(looks)`` (Bonferroni), so the chance that a
canary no worse than serving is ever stopped is at most ``alpha``; experiments/bench/canary_guard_simulation.md
shows the rate reached. After the last look the guard tests no more: the canary was not found harmful within its
horizon, and what happens next is the operator's decision. The guard only ever stops; it never promotes.
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import asdict, dataclass

from evolve.verify.statistics import mcnemar_exact, paired_comparison

#: Discordant pairs at which the harm rule is applied (doubling: early looks stop a plainly bad canary within tens
#: of judged recalls, later ones find a small harm).
LOOKS = (10, 20, 40, 80, 160, 320, 640)
#: Bootstrap resamples of the interval at a look (only looks whose McNemar p already meets the level compute it).
RESAMPLES = 10_000


@dataclass(frozen=True)
class GuardPlan:
    """The guard's test: family-wise level ``alpha`` split evenly over the ``looks`` (discordant pairs)."""

    alpha: float = 0.05
    looks: tuple[int, ...] = LOOKS

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"guard alpha: must be in (0, 1), got {self.alpha}")
        if not self.looks or list(self.looks) != sorted(set(self.looks)) or self.looks[0] < 1:
            raise ValueError(f"guard looks: must be increasing positive counts, got {self.looks}")

    @property
    def level(self) -> float:
        """The level each look is tested at."""
        return self.alpha / len(self.looks)


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

    def reason(self) -> str:
        t = self.tally
        return (f"significant harm at the look of {self.look} discordant pairs: on {t.pairs} paired recalls the "
                f"canary's context was worse on {t.harmed} and better on {t.helped} (delta {self.delta:+.4f}, "
                f"McNemar p={self.mcnemar_p:.3g} <= {self.level:.4g}, {1 - self.level:.2%} CI "
                f"[{self.ci[0]:+.4f}, {self.ci[1]:+.4f}])")

    def to_dict(self) -> dict:
        return {"look": self.look, **asdict(self.tally), "pairs": self.tally.pairs, "level": self.level,
                "delta": self.delta, "mcnemar_p": self.mcnemar_p, "ci": list(self.ci)}


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


class CanaryGuard:
    """The paired log of one canary as it grows (thread-safe); :meth:`add` returns the stop once, at the look that
    finds significant harm. Pairs come from recalls the operator's answers cover (source ``answers``) and from probe
    questions of the canary users' own turns (:mod:`evolve.serve.probeguard`; their LoCoMo category), counted per
    source and tested pooled."""

    def __init__(self, plan: GuardPlan | None = None):
        self.plan = plan or GuardPlan()
        self.tally = Tally()
        self.looked = 0  # looks reached so far
        self.stop: GuardStop | None = None
        self.judged: Counter[str] = Counter()  # pairs by source
        self._lock = threading.Lock()

    def add(self, serving_good: bool, canary_good: bool, source: str = "answers") -> GuardStop | None:
        with self._lock:
            if self.stop is not None:
                return None
            self.judged[source] += 1
            self.tally = tally = self.tally.add(serving_good, canary_good)
            looks = self.plan.looks
            if self.looked >= len(looks) or tally.discordant < looks[self.looked]:
                return None
            look = looks[self.looked]
            self.looked += 1
            self.stop = harm_at(tally, self.plan.level, look)
            return self.stop

    @property
    def done(self) -> bool:
        """Whether every look was made without finding harm (the guard's horizon is reached)."""
        return self.stop is None and self.looked >= len(self.plan.looks)

    def status(self) -> dict:
        with self._lock:
            t = self.tally
            return {"alpha": self.plan.alpha, "level_per_look": self.plan.level, "looks": list(self.plan.looks),
                    "looks_made": self.looked, "pairs": t.pairs, **asdict(t), "discordant": t.discordant,
                    "judged": dict(sorted(self.judged.items())),
                    "horizon_reached": self.done, "stop": None if self.stop is None else self.stop.to_dict()}
