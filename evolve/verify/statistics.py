"""Paired comparison of two evaluations of the same questions, aligned by question id.

Inputs are Outcome maps ``{question_id: {"correct": bool, "category": str}}``. The report holds
exact McNemar p (two-sided binomial test on the discordant pairs), a paired bootstrap confidence
interval of the accuracy difference, and per-category accuracies. It is plain data, so a decision
can be replayed from the saved JSON alone. Each category's row carries its own discordant counts and exact McNemar p
(``improved``, ``regressed``, ``mcnemar_p``), which the category floor of the decision contract reads.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, Mapping

import numpy as np
from scipy import special, stats


@dataclass(frozen=True)
class PairedBrief:
    """The headline of a paired comparison, as screens and the holdout record it."""

    n: int
    delta: float | None
    mcnemar_p: float
    ci_low: float | None
    ci_high: float | None

    def harms(self, alpha: float) -> bool:
        """Significant harm: a loss with McNemar p <= ``alpha`` and a confidence interval wholly below 0."""
        return self.delta < 0 and self.mcnemar_p <= alpha and self.ci_high < 0

    def rises(self, alpha: float) -> bool:
        """Significant rise (of a rate counting something bad): a gain with p <= ``alpha`` and a CI wholly above 0."""
        return self.delta > 0 and self.mcnemar_p <= alpha and self.ci_low > 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PairedBrief":
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class PairedReport:
    """Candidate vs baseline on the questions both evaluated. Accuracy fields are ``None`` when ``n == 0``."""

    n: int
    missing_in_candidate: list[str]
    missing_in_baseline: list[str]
    acc_baseline: float | None
    acc_candidate: float | None
    delta: float | None
    improved: list[str]  # wrong in baseline, right in candidate
    regressed: list[str]  # right in baseline, wrong in candidate
    both_correct: list[str]
    both_wrong: list[str]
    mcnemar_p: float
    ci_low: float | None
    ci_high: float | None
    ci_method: str  # "BCa" | "percentile" | "constant" | "none"
    confidence: float
    alpha: float
    significant: bool  # mcnemar_p <= alpha and the CI excludes 0
    n_resamples: int
    seed: int
    per_category: dict[str, dict[str, float | int]]

    def brief(self) -> PairedBrief:
        return PairedBrief(self.n, self.delta, self.mcnemar_p, self.ci_low, self.ci_high)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PairedReport":
        """Rebuild from :meth:`to_dict` output; raises ``ValueError`` naming any missing field."""
        if not isinstance(data, Mapping):
            raise ValueError(f"paired report must be a mapping, got {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        missing = [name for name in names if name not in data]
        if missing:
            raise ValueError(f"paired report: missing field(s) {', '.join(missing)}")
        return cls(**{name: data[name] for name in names})


def _check_outcomes(label: str, outcomes: Mapping[str, Any]) -> None:
    for qid, outcome in outcomes.items():
        if not isinstance(outcome, Mapping):
            raise ValueError(f"{label}[{qid!r}]: outcome must be a mapping, got {type(outcome).__name__}")
        if not isinstance(outcome.get("correct"), bool):
            raise ValueError(f"{label}[{qid!r}].correct: must be a bool, got {outcome.get('correct')!r}")
        if not isinstance(outcome.get("category"), str):
            raise ValueError(f"{label}[{qid!r}].category: must be a string, got {outcome.get('category')!r}")


def mcnemar_exact(improved: int, regressed: int, alternative: Literal["two-sided", "greater"] = "two-sided") -> float:
    """Exact McNemar p: a binomial test of ``improved`` among the discordant pairs at 1/2 (1.0 without any);
    ``greater``: one-sided for a gain, P(at least ``improved`` of them improve)."""
    discordant = improved + regressed
    return float(stats.binomtest(improved, discordant, 0.5, alternative=alternative).pvalue) if discordant else 1.0


def _bca_levels(theta_b: np.ndarray, theta: float, values: np.ndarray, counts: np.ndarray,
                alpha: float) -> np.ndarray:
    """The BCa interval's two quantile levels (Efron & Tibshirani 1993, 14.3), as :func:`scipy.stats.bootstrap`
    computes them, with the jackknife in closed form: leaving pair i out gives the mean (S - d_i) / (n - 1), so the
    jackknife's influence of pair i, (n - 1) * (mean of the leave-one-out means - the one without i), is d_i - mean(d)
    and the acceleration is sum(u^3) / (6 sum(u^2)^1.5) over the pairs, one term per distinct difference."""
    z0 = special.ndtri(((theta_b < theta).sum() + (theta_b <= theta).sum()) / (2 * len(theta_b)))
    u = values - theta
    acceleration = (counts @ u**3) / (6 * (counts @ u**2) ** 1.5)
    z = z0 + special.ndtri(np.array([alpha, 1 - alpha]))
    with np.errstate(invalid="ignore"):  # an infinite z0 (every resample on one side) gives NaN: no BCa interval
        return special.ndtr(z0 + z / (1 - acceleration * z))


def _bootstrap_ci(
    cand: np.ndarray, base: np.ndarray, *, confidence: float, n_resamples: int, seed: int
) -> tuple[float, float, str]:
    """Paired BCa interval of mean(cand - base); percentile when BCa is degenerate; exact when constant.

    The differences take few values (-1, 0 and 1 for binary outcomes), so a resample of the n pairs is drawn as how
    many times it holds each value (multinomial, the distribution resampling the pairs gives) and the jackknife has
    a closed form (:func:`_bca_levels`): memory and time grow with ``n_resamples`` times the distinct values, and
    with n only through one pass over the differences.
    """
    values, counts = np.unique(cand - base, return_counts=True)
    if len(values) == 1:
        value = float(values[0])
        return value, value, "constant"
    n = int(counts.sum())
    theta = float(counts @ values / n)
    theta_b = np.random.default_rng(seed).multinomial(n, counts / n, size=n_resamples) @ values / n
    alpha = (1 - confidence) / 2
    for method, levels in (("BCa", _bca_levels(theta_b, theta, values, counts, alpha)),
                           ("percentile", np.array([alpha, 1 - alpha]))):
        if np.all(np.isfinite(levels)):
            low, high = np.quantile(theta_b, levels)
            return float(low), float(high), method
    raise ArithmeticError("bootstrap produced no finite confidence interval")


def paired_comparison(
    baseline: Mapping[str, dict],
    candidate: Mapping[str, dict],
    *,
    alpha: float = 0.05,
    n_resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> PairedReport:
    """Compare ``candidate`` with ``baseline`` on the question ids both contain.

    Categories come from the baseline; a question whose category differs between the two maps is an
    error (the inputs are not the same benchmark). The bootstrap is seeded, so reports are reproducible.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be in (0, 1), got {alpha}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples: must be >= 1, got {n_resamples}")
    _check_outcomes("baseline", baseline)
    _check_outcomes("candidate", candidate)
    ids = sorted(set(baseline) & set(candidate))
    for qid in ids:
        if baseline[qid]["category"] != candidate[qid]["category"]:
            raise ValueError(
                f"candidate[{qid!r}].category: {candidate[qid]['category']!r} differs from baseline "
                f"{baseline[qid]['category']!r}"
            )
    base = np.array([baseline[q]["correct"] for q in ids], dtype=float)
    cand = np.array([candidate[q]["correct"] for q in ids], dtype=float)
    groups: dict[tuple[bool, bool], list[str]] = {(b, c): [] for b in (True, False) for c in (True, False)}
    for qid in ids:
        groups[(baseline[qid]["correct"], candidate[qid]["correct"])].append(qid)
    improved, regressed = groups[(False, True)], groups[(True, False)]
    p_value = mcnemar_exact(len(improved), len(regressed))

    n = len(ids)
    if n:
        acc_b, acc_c = float(base.mean()), float(cand.mean())
        delta: float | None = acc_c - acc_b
        ci_low, ci_high, ci_method = _bootstrap_ci(
            cand, base, confidence=confidence, n_resamples=n_resamples, seed=seed
        )
    else:
        acc_b = acc_c = delta = ci_low = ci_high = None
        ci_method = "none"
    significant = bool(n and p_value <= alpha and (ci_low > 0 or ci_high < 0))

    per_category: dict[str, dict[str, float | int]] = {}
    for category in sorted({baseline[q]["category"] for q in ids}):
        members = [i for i, q in enumerate(ids) if baseline[q]["category"] == category]
        cb, cc = float(base[members].mean()), float(cand[members].mean())
        up = int(np.sum(cand[members] > base[members]))
        down = int(np.sum(cand[members] < base[members]))
        per_category[category] = {"n": len(members), "acc_baseline": cb, "acc_candidate": cc, "delta": cc - cb,
                                  "improved": up, "regressed": down, "mcnemar_p": mcnemar_exact(up, down)}

    return PairedReport(
        n=n,
        missing_in_candidate=sorted(set(baseline) - set(candidate)),
        missing_in_baseline=sorted(set(candidate) - set(baseline)),
        acc_baseline=acc_b,
        acc_candidate=acc_c,
        delta=delta,
        improved=improved,
        regressed=regressed,
        both_correct=groups[(True, True)],
        both_wrong=groups[(False, False)],
        mcnemar_p=p_value,
        ci_low=ci_low,
        ci_high=ci_high,
        ci_method=ci_method,
        confidence=confidence,
        alpha=alpha,
        significant=significant,
        n_resamples=n_resamples,
        seed=seed,
        per_category=per_category,
    )
