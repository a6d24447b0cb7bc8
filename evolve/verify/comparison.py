"""The comparison dossier: everything the decision contract reads about one candidate against its parent, as one
typed value.

:func:`evolve.verify.dossier.compare` builds it from the two evaluations (the objective's paired report, DCR, context
cost, and under the rules the confabulation, secondary-outcome and hypothesis comparisons); the loop adds the holdout
comparison and the round's multiple-testing adjustments. :func:`evolve.verify.decision.decide` reads it, and a
stored record's report (``Comparison.from_report``) reads back as the same value, so a decision replays from the record alone. An optional
entry that is malformed in a stored report is kept as a problem (:attr:`Comparison.problems`), which the contract
reports as ``incomplete`` at that entry's rule, as it always has.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

from evolve.errors import EvolveError
from evolve.numbers import is_real
from evolve.verify.hypothesis import HypothesisCheck
from evolve.verify.multiplicity import Adjustment
from evolve.verify.outcomes import ContextCost
from evolve.verify.statistics import PairedBrief, PairedReport


class ReportError(EvolveError, ValueError):
    """A stored report the contract cannot decide on; the message says what is wrong."""


def _brief(data: Any, name: str) -> PairedBrief:
    if not isinstance(data, Mapping) or not all(is_real(data.get(f.name)) for f in fields(PairedBrief)):
        raise ReportError(f"{name} must carry numbers n, delta, mcnemar_p, ci_low, ci_high, got {data!r}")
    return PairedBrief.from_dict(data)


def _adjustment(data: Any, name: str) -> Adjustment:
    if not isinstance(data, Mapping) or not is_real(data.get("p_adjusted")) or not isinstance(data.get("family"), list):
        raise ReportError(f"{name} must carry p_adjusted and family, got {data!r}")
    return Adjustment(str(data.get("method")), list(data["family"]), data.get("p_raw"), float(data["p_adjusted"]))


def _hypothesis(data: Any, name: str) -> HypothesisCheck:
    try:
        return HypothesisCheck.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportError(f"{name} must carry category, predicted, observed_delta and n, got {data!r} "
                          f"({exc})") from None


def _cost(data: Any, name: str) -> ContextCost:
    if not isinstance(data, Mapping):
        raise ReportError("report lacks cost (context words of parent and candidate) although cost limits are set")
    values = data.get("words_parent"), data.get("words_candidate")
    if not all(map(is_real, values)):
        raise ReportError(f"cost.words_parent / cost.words_candidate must be numbers, got {values!r}")
    return ContextCost(float(values[0]), float(values[1]))


#: How each optional entry of a stored report is read.
_OPTIONAL: dict[str, Callable[[Any, str], Any]] = {
    "cost": _cost, "confabulation": _brief, "multiple_testing": _adjustment, "holdout": _brief,
    "secondary": _brief, "secondary_testing": _adjustment, "hypothesis": _hypothesis,
}


def _paired(report: Mapping[str, Any]) -> tuple[PairedReport, float]:
    missing = [key for key in ("paired", "dcr") if report.get(key) is None]
    if missing:
        raise ReportError(f"report lacks {', '.join(missing)}")
    dcr = report["dcr"]
    if not is_real(dcr):
        raise ReportError(f"dcr must be a number, got {dcr!r}")
    try:
        paired = PairedReport.from_dict(report["paired"])
    except (TypeError, ValueError) as exc:
        raise ReportError(str(exc)) from None
    if paired.n == 0:
        raise ReportError("no question was evaluated by both strategies (n = 0)")
    if paired.missing_in_candidate or paired.missing_in_baseline:
        raise ReportError(f"ids not aligned: {len(paired.missing_in_candidate)} missing in candidate, "
                          f"{len(paired.missing_in_baseline)} missing in baseline")
    if not isinstance(paired.per_category, Mapping) or not all(
            isinstance(row, Mapping) for row in paired.per_category.values()):
        raise ReportError("paired.per_category must map each category to a mapping")
    numbers = {"delta": paired.delta, "mcnemar_p": paired.mcnemar_p, "ci_low": paired.ci_low, "ci_high": paired.ci_high}
    numbers.update({f"per_category.{c}.delta": row.get("delta") for c, row in paired.per_category.items()})
    for name, value in numbers.items():
        if not is_real(value):
            raise ReportError(f"paired.{name} must be a number, got {value!r}")
    return paired, float(dcr)


@dataclass
class Comparison:
    """Candidate vs. parent: the objective's paired report and DCR, and each further comparison the contract reads
    when present."""

    paired: PairedReport
    dcr: float
    cost: ContextCost | None = None
    confabulation: PairedBrief | None = None
    secondary: PairedBrief | None = None
    hypothesis: HypothesisCheck | None = None
    holdout: PairedBrief | None = None
    multiple_testing: Adjustment | None = None
    secondary_testing: Adjustment | None = None
    #: Optional entries of a stored report that could not be read: name -> why.
    problems: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_report(cls, report: Any) -> "Comparison":
        """A stored report read back; raises :class:`ReportError` when the objective's comparison cannot be read (an
        optional entry that cannot be read becomes a problem)."""
        if not isinstance(report, Mapping):
            raise ReportError(f"report must be a mapping, got {type(report).__name__}")
        paired, dcr = _paired(report)
        values, problems = {}, {}
        for name, read in _OPTIONAL.items():
            if report.get(name) is None:
                continue
            try:
                values[name] = read(report[name], name)
            except ReportError as exc:
                problems[name] = str(exc)
        return cls(paired, dcr, **values, problems=problems)

    def to_report(self) -> dict[str, Any]:
        """The report as stored: ``paired``, ``dcr``, ``cost`` and each optional entry that is present."""
        out: dict[str, Any] = {"paired": self.paired.to_dict(), "dcr": self.dcr,
                               "cost": self.cost.to_dict() if self.cost else None}
        for name in _OPTIONAL:
            value = getattr(self, name)
            if name != "cost" and value is not None:
                out[name] = value.to_dict()
        return out
