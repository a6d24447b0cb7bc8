"""Multiple testing across a round's fully compared candidates: Holm (step-down) or Bonferroni adjusted p-values.

Each fully compared candidate of a round is one test of "this change gains"; with several of them, the chance that
one unadjusted p <= alpha is a false accept grows with their number. The adjusted p is stored in the candidate's
record (:class:`Adjustment`) and read by :func:`evolve.verify.decision.decide` in place of the raw McNemar p for the
gain test; a one-candidate family keeps its raw p.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Mapping

Method = Literal["holm", "bonferroni", "none"]


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
    over the ascending p-values (ties in input order); ``none`` returns them unchanged."""
    if method == "none":
        return dict(pvalues)
    m = len(pvalues)
    if method == "bonferroni":
        return {key: min(1.0, m * p) for key, p in pvalues.items()}
    if method != "holm":
        raise ValueError(f"multiple_testing: expected holm, bonferroni or none, got {method!r}")
    out, running = {}, 0.0
    for rank, (key, p) in enumerate(sorted(pvalues.items(), key=lambda kv: kv[1])):
        running = max(running, min(1.0, (m - rank) * p))
        out[key] = running
    return {key: out[key] for key in pvalues}
