"""Power check before a run spends anything: the smallest improvement the paired test could ever call significant.

The full comparison is an exact McNemar test (:func:`evolve.verify.statistics.paired_comparison`). With ``n``
paired questions its best case is ``k`` improved and none regressed, where ``p = 2 * 0.5**k``; the smallest such
``k`` with ``p <= alpha`` is the fewest questions a candidate must fix, i.e. a gain of ``k / n``. A benchmark with
fewer scored questions than ``k``, or fewer failing ones, can never produce a significant gain, so no candidate can
be accepted (unless ``acceptance.require_significance`` is off). The probe is a screen, not a test: it rejects a
candidate whose probe score falls more than ``probe_delta``, and one probe question weighs ``1 / probe_n``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from scipy import stats

from evolve.verify.decision import TOLERANCE


def min_improved(alpha: float) -> int:
    """The fewest improved questions (none regressed) whose exact two-sided McNemar p-value is ``<= alpha``."""
    k = 1
    while stats.binomtest(k, k, 0.5).pvalue > alpha:
        k += 1
    return k


@dataclass(frozen=True)
class PowerCheck:
    """What the benchmark, the probe and ``alpha`` allow a run to conclude."""

    n: int  # questions the objective scores (the full paired comparison)
    alpha: float
    min_improved: int
    probe_n: int
    probe_size: int  # as configured; more than probe_n when the benchmark is smaller
    probe_delta: float
    require_significance: bool = True
    failing: int | None = None  # of the baseline under the objective, once observed
    observed: int | None = None  # questions the baseline's observation scored (``failing`` is out of these)

    @classmethod
    def of(cls, n: int, alpha: float, probe_n: int, probe_size: int, probe_delta: float,
           require_significance: bool = True) -> "PowerCheck":
        return cls(n, alpha, min_improved(alpha), probe_n, probe_size, probe_delta, require_significance)

    @property
    def min_delta_pp(self) -> float | None:
        """The smallest significant gain in percentage points (``None`` when ``n`` is too small for any)."""
        return 100 * self.min_improved / self.n if self.n >= self.min_improved else None

    @property
    def best_p(self) -> float:
        """The McNemar p-value of fixing every failing (else every scored) question with no regression."""
        k = self.failing if self.failing is not None else self.n
        return float(stats.binomtest(k, k, 0.5).pvalue) if k else 1.0

    @property
    def probe_tolerated(self) -> int:
        """Net probe questions a candidate may lose before the probe rejects it."""
        return math.floor(self.probe_delta * self.probe_n + TOLERANCE) if self.probe_n else 0

    def describe(self) -> str:
        """One line for the start of a run."""
        gain = (f"a significant gain needs >= {self.min_improved} improved questions with none regressed "
                f"(p = 2*0.5^{self.min_improved} <= alpha {self.alpha:g}): at least {self.min_delta_pp:+.1f} pp"
                if self.min_delta_pp is not None else
                f"no gain can be significant (needs >= {self.min_improved} questions at alpha {self.alpha:g})")
        probe = (f"probe {self.probe_n} questions (1 question = {100 / self.probe_n:.1f} pp; rejects a net loss "
                 f"of more than {self.probe_tolerated})" if self.probe_n else "no probe")
        return f"power: {self.n} scored questions; {gain}; {probe}"

    def warnings(self) -> list[str]:
        """Why the run can never accept, and a probe larger than the benchmark allows."""
        out = []
        if self.probe_size > self.probe_n:
            out.append(f"probe_size {self.probe_size} is larger than the {self.n} scored questions; the probe uses "
                       f"{self.probe_n}")
        if not self.require_significance:
            return out
        if self.n < self.min_improved:
            out.append(f"benchmark too small to ever accept: {self.n} scored question(s), but a significant gain at "
                       f"alpha {self.alpha:g} needs at least {self.min_improved} improved with none regressed; use a "
                       "larger benchmark (or acceptance.require_significance: false)")
        elif self.observed == 0:
            out.append(f"no question was scored when the baseline was observed (0 of {self.n}): every answer failed "
                       "or was left unscored, so no candidate can be compared; check the roles' errors")
        elif self.failing is not None and self.failing < self.min_improved:
            scored = self.n if self.observed is None else self.observed
            out.append(f"benchmark too small to ever accept: only {self.failing} of {scored} question(s) fail, and "
                       f"fixing all of them gives p = {self.best_p:.3g} > alpha {self.alpha:g} (needs "
                       f"{self.min_improved}); use a larger benchmark (or acceptance.require_significance: false)")
        return out

    def to_dict(self) -> dict:
        return {**asdict(self), "min_delta_pp": self.min_delta_pp, "probe_tolerated": self.probe_tolerated,
                "warnings": self.warnings()}
