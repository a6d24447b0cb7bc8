"""The hypothesis check: a candidate targets a symptom (``root_cause/category``), so it predicts that category's
outcome moves (up, for the loop's own candidates); the full comparison shows whether it did. A change that gains
overall while its target category does not move as predicted worked for a reason other than the one it was made
for; rule ``hypothesis_mismatch`` of :func:`evolve.verify.decision.decide` holds it back (FEATURE_FLAG) unless the
rules say only to record it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Mapping

from evolve.benchmarks.types import CATEGORIES

Direction = Literal["up", "down"]


@dataclass(frozen=True)
class HypothesisCheck:
    """The predicted movement of one category and the movement observed in the paired comparison."""

    category: str
    predicted: str  # "up" | "down"
    observed_delta: float
    n: int

    @property
    def matches(self) -> bool:
        return self.observed_delta > 0 if self.predicted == "up" else self.observed_delta < 0

    def describe(self) -> str:
        return (f"predicted {self.category} {self.predicted}, observed {self.observed_delta:+.4f} on {self.n} "
                f"questions ({'matches' if self.matches else 'mismatch'})")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "HypothesisCheck":
        return cls(str(data["category"]), str(data["predicted"]), float(data["observed_delta"]), int(data["n"]))


def predicted(symptom: str) -> tuple[str, Direction] | None:
    """The category a candidate aimed at ``symptom`` predicts to rise (``None`` for a symptom of no one category,
    e.g. ``retrieval_gap/*``)."""
    category = symptom.partition("/")[2]
    return (category, "up") if category in CATEGORIES else None


def check(prediction: tuple[str, Direction] | None, per_category: Mapping[str, Mapping[str, Any]]
          ) -> HypothesisCheck | None:
    """The prediction held against a paired report's per-category rows (``None`` without a prediction, or when the
    category has no compared question)."""
    if prediction is None:
        return None
    category, direction = prediction
    row = per_category.get(category)
    if not row or not row.get("n"):
        return None
    return HypothesisCheck(category, direction, float(row["delta"]), int(row["n"]))
