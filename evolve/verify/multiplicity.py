"""Multiple testing across a round's candidates: Holm (step-down), Bonferroni or Benjamini-Hochberg adjusted p-values.

Each candidate of a round that reached the probe is one test of "this change gains"; with several of them, the chance
that one unadjusted p <= alpha is a false accept grows with their number. Holm and Bonferroni hold the family-wise
error rate at alpha; Benjamini-Hochberg (``bh``, D²ACCI's choice at q = 0.01) holds the expected share of false
accepts among the accepts at ``fdr_q``, and so accepts more when several candidates gain. The adjusted p is stored in
the candidate's record (:class:`Adjustment`) and read by :func:`evolve.verify.decision.decide` in place of the raw
McNemar p for the gain test; a one-candidate family keeps its raw p.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Mapping

from scipy import stats

Method = Literal["holm", "bonferroni", "bh", "none"]


@dataclass(frozen=True)
class Adjustment:
    """A candidate's p-value adjusted over its round's family of fully compared candidates."""

    method: str
    family: list[str]  # candidate ids of the round's fully compared candidates
    p_raw: float
    p_adjusted: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Adjustment":
        return cls(data["method"], list(data["family"]), data["p_raw"], data["p_adjusted"])


def adjust(pvalues: Mapping[str, float], method: Method) -> dict[str, float]:
    """Adjusted p-value of each test: Bonferroni ``min(1, m·p)``; Holm's step-down ``max_{j<=i} min(1, (m-j+1)·p_(j))``
    over the ascending p-values (ties in input order); Benjamini-Hochberg's step-up (scipy's
    ``false_discovery_control``); ``none`` returns them unchanged."""
    if method == "none" or not pvalues:
        return dict(pvalues)
    m = len(pvalues)
    if method == "bh":
        return dict(zip(pvalues, map(float, stats.false_discovery_control(list(pvalues.values()), method="bh"))))
    if method == "bonferroni":
        return {key: min(1.0, m * p) for key, p in pvalues.items()}
    if method != "holm":
        raise ValueError(f"multiple_testing: expected holm, bonferroni, bh or none, got {method!r}")
    out, running = {}, 0.0
    for rank, (key, p) in enumerate(sorted(pvalues.items(), key=lambda kv: kv[1])):
        running = max(running, min(1.0, (m - rank) * p))
        out[key] = running
    return {key: out[key] for key in pvalues}
