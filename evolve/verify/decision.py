"""The decision contract: a deterministic verdict from a saved comparison report alone.

``decide`` reads ``{"paired": PairedReport.to_dict(), "dcr": float, "cost": {"words_parent", "words_candidate"}}``
(``cost`` only needed under cost limits; optional ``confabulation``, ``multiple_testing`` and ``holdout``, below) and
applies these rules, first match wins:

1. ``incomplete``      report fields missing, ``n == 0``, or ids missing on either side -> FEATURE_FLAG
2. ``significant_harm`` delta < 0, p <= alpha and ci_high < 0                            -> REJECT
3. ``confabulation``    with a ``confabulation`` brief (candidate vs. parent on "the answer is a confident wrong
                        one", paired by question; accuracy objective only), a significant rise there
                        (delta > 0, p <= alpha, ci_low > 0)                                  -> REJECT
4. ``dcr_floor``        candidate's DCR@tau (``dcr_tau``) below ``rho_min``              -> FEATURE_FLAG
5. ``inconclusive``     not a significant gain (p > alpha or ci_low <= 0), p being the round's
                        multiple-testing adjusted p when the report carries ``multiple_testing``
                        (:mod:`evolve.verify.multiplicity`; its ``p_adjusted``)            -> FEATURE_FLAG
                        With ``require_significance=False`` a result with delta > 0 goes on
                        to rules 6-9 instead (useful on small benchmarks where no gain can be
                        significant); delta <= 0 stays FEATURE_FLAG.
                        With ``secondary`` set (a second outcome, e.g. ``evidence`` under the answer
                        objective) and the report's ``secondary`` brief, an inconclusive result goes on
                        to rules 6-9 when it is non-inferior on the objective (delta >= 0 and ci_low >
                        -``non_inferiority_margin``) and gains significantly on the secondary outcome
                        (its p, adjusted over the round as ``secondary_testing`` says, <= alpha and its
                        ci_low > 0): a fixed-sequence test, the secondary tested only where the
                        objective cannot tell. Its accept's rule is ``accept_secondary``.
6. ``category_regression`` a vetoing category has delta_c < -epsilon_c                  -> REJECT
                        (``veto: all_categories``: every category; else those in ``veto_slices``)
7. ``cost``            with :class:`CostLimits`, the candidate's mean packed context words exceed
                        ``max_context_words``, or grow over the parent's by more than
                        ``max_relative_increase`` (report field ``cost``)                  -> FEATURE_FLAG
8. ``holdout``         with a holdout comparison in the report (field ``holdout``: n, delta, mcnemar_p, ci_low,
                        ci_high of candidate vs. parent on held-out questions), a significant regression
                        there (delta < 0, p <= alpha, ci_high < 0)                            -> FEATURE_FLAG
9. ``protected_slice_regression`` a protected slice has delta_c < -epsilon_c            -> ACCEPT_WITH_MONITOR
10. ``accept``                                                                           -> ACCEPT

Slices follow D²ACCI by default: ``protected_slices`` are pre-specified important categories whose regression
makes an otherwise good change ACCEPT_WITH_MONITOR (later rounds and the holdout check them again,
:mod:`evolve.loop.monitor`); a regression in any other category does not veto (the accept's reason names it).
E²MEND's per-category non-regression (for all c: delta_c >= -epsilon_c, else REJECT) is ``veto: all_categories``;
``veto_slices`` vetoes only the listed categories. A vetoing category's regression is REJECT even when the category
is also protected. Only ACCEPT and ACCEPT_WITH_MONITOR change the strategy. ``restore_threshold`` is the drop below
the best-ever accuracy at which a checkpoint is restored; it is carried here so that all acceptance settings live in
one model.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evolve.benchmarks.types import CATEGORIES
from evolve.numbers import is_real
from evolve.observe.objective import Objective
from evolve.verify.statistics import PairedBrief, PairedReport

#: Slack for float comparisons of accuracy differences (k/n arithmetic is not exact).
TOLERANCE = 1e-12


class Verdict(str, Enum):
    ACCEPT = "ACCEPT"
    ACCEPT_WITH_MONITOR = "ACCEPT_WITH_MONITOR"
    FEATURE_FLAG = "FEATURE_FLAG"
    REJECT = "REJECT"


def _require_categories(names: Any) -> None:
    unknown = [n for n in names if n not in CATEGORIES]
    if unknown:
        raise ValueError(f"unknown category {unknown[0]!r}; expected one of {', '.join(CATEGORIES)}")


class AcceptanceRules(BaseModel):
    """Thresholds of the decision contract."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    alpha: float = Field(0.05, gt=0, lt=1)
    rho_min: float = Field(0.9, ge=0, le=1, description="floor of DCR at dcr_tau")
    dcr_tau: Literal[1, 3, 5, 6] = Field(3, description="stages a trace must record to count towards DCR")
    epsilon_default: float = Field(0.02, ge=0, le=1, description="tolerated per-category accuracy drop (a share of "
                                                                  "questions: at most 1, any drop)")
    epsilon_by_category: dict[str, float] = Field(default_factory=dict)
    protected_slices: list[str] = Field(default_factory=list, description="important categories: a regression "
                                                                          "there is ACCEPT_WITH_MONITOR (D²ACCI)")
    veto: Literal["none", "all_categories"] = Field("none", description="all_categories: a regression in any "
                                                                        "category is REJECT (E²MEND's for-all-c rule)")
    veto_slices: list[str] = Field(default_factory=list, description="categories whose regression is REJECT")
    multiple_testing: Literal["holm", "bonferroni", "none"] = Field(
        "holm", description="adjustment of the gain test's p over each round's fully compared candidates")
    probe_delta: float = Field(0.02, ge=0, le=1, description="delta_1: largest tolerated probe accuracy drop (a "
                                                              "share of questions: at most 1, any drop)")
    restore_threshold: float = Field(0.03, ge=0, le=1, description="drop below best-ever that triggers restore (a "
                                                                    "share of questions: at most 1, never)")
    require_significance: bool = True
    secondary: Objective | None = Field(None, description="second outcome that decides where the objective's gain is "
                                                          "inconclusive but non-inferior (rule 5)")
    non_inferiority_margin: float = Field(0.02, ge=0, le=0.2, description=(
        "largest objective loss the CI may allow for an accept on the secondary outcome; at most 0.2 (a fifth of "
        "the questions), beyond which 'non-inferior' would accept a change that loses one answer in five"))
    bootstrap_resamples: int = Field(10_000, ge=200, le=100_000, description=(
        "resamples of the paired BCa confidence interval: at least 200 (fewer leave the 2.5% tails of the BCa "
        "interval to a handful of resamples, so the CI is noise), at most 100,000 (the CI's Monte Carlo error is then "
        "far below one question in a thousand, and memory and time grow linearly with the count)"))

    @field_validator("protected_slices", "veto_slices")
    @classmethod
    def _known_slices(cls, value: list[str]) -> list[str]:
        _require_categories(value)
        return value

    @field_validator("epsilon_by_category")
    @classmethod
    def _known_epsilons(cls, value: dict[str, float]) -> dict[str, float]:
        _require_categories(value)
        outside = next((k for k, v in value.items() if not 0 <= v <= 1), None)
        if outside is not None:
            raise ValueError(f"{outside}: {value[outside]} is not a share of questions in [0, 1]")
        return value

    @model_validator(mode="after")
    def _one_veto(self) -> "AcceptanceRules":
        if self.veto == "all_categories" and self.veto_slices:
            raise ValueError("veto_slices: leave it empty with veto: all_categories (every category vetoes)")
        return self

    def epsilon(self, category: str) -> float:
        return self.epsilon_by_category.get(category, self.epsilon_default)

    def vetoes(self, category: str) -> bool:
        """Whether a regression beyond epsilon in ``category`` rejects the candidate."""
        return self.veto == "all_categories" or category in self.veto_slices


class CostLimits(BaseModel):
    """Context cost an accepted step may have: mean packed context words per question, absolute and relative."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    max_context_words: float | None = Field(None, gt=0, le=1_000_000, description=(
        "hard cap on mean context words per question; at most 1,000,000, beyond any model's context window"))
    max_relative_increase: float | None = Field(None, ge=0, le=100, description=(
        "largest growth of mean context words over the parent per accepted step (0.25 = +25%); at most 100 "
        "(+10,000%), beyond which the limit limits nothing"))

    @property
    def active(self) -> bool:
        return self.max_context_words is not None or self.max_relative_increase is not None

    def violation(self, words_parent: float, words_candidate: float) -> str | None:
        """Why the candidate's context cost is over the limits, or ``None``."""
        if self.max_context_words is not None and words_candidate > self.max_context_words + TOLERANCE:
            return (f"cost: {words_candidate:.1f} context words per question exceed max_context_words "
                    f"{self.max_context_words:g}")
        if (self.max_relative_increase is not None and words_parent > 0
                and words_candidate > words_parent * (1 + self.max_relative_increase) + TOLERANCE):
            return (f"cost: context words grow {words_parent:.1f} -> {words_candidate:.1f} "
                    f"({words_candidate / words_parent - 1:+.1%}), more than max_relative_increase "
                    f"{self.max_relative_increase:+.0%}")
        return None


def _cost_words(report: Mapping[str, Any]) -> tuple[float, float] | str:
    cost = report.get("cost")
    if not isinstance(cost, Mapping):
        return "report lacks cost (context words of parent and candidate) although cost limits are set"
    values = cost.get("words_parent"), cost.get("words_candidate")
    if not all(map(is_real, values)):
        return f"cost.words_parent / cost.words_candidate must be numbers, got {values!r}"
    return float(values[0]), float(values[1])


#: The verdicts that change the strategy; only these can be promoted to serving.
STRATEGY_CHANGING = (Verdict.ACCEPT, Verdict.ACCEPT_WITH_MONITOR)


def changes_strategy(verdict: str | Verdict) -> bool:
    """Whether a verdict (or its recorded string) changes the strategy."""
    return verdict in {v.value for v in STRATEGY_CHANGING}


#: Journal entry types that record a decision (see :func:`journal_type`).
DECISION_ENTRY_TYPES = ("ACCEPT", "FLAG", "REJECT")


def journal_type(verdict: str | Verdict) -> str:
    """The journal entry type recording a verdict: ACCEPT, FLAG or REJECT."""
    if changes_strategy(verdict):
        return "ACCEPT"
    return "FLAG" if verdict == Verdict.FEATURE_FLAG.value else "REJECT"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    rule: str

    @property
    def changes_strategy(self) -> bool:
        return changes_strategy(self.verdict)

    def to_dict(self) -> dict[str, str]:
        return {**asdict(self), "verdict": self.verdict.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Decision":
        return cls(Verdict(data["verdict"]), data["reason"], data["rule"])


def _parse(report: Any) -> tuple[PairedReport, float] | str:
    """The paired report and DCR, or why the report cannot be decided on."""
    if not isinstance(report, Mapping):
        return f"report must be a mapping, got {type(report).__name__}"
    missing = [key for key in ("paired", "dcr") if report.get(key) is None]
    if missing:
        return f"report lacks {', '.join(missing)}"
    dcr = report["dcr"]
    if not is_real(dcr):
        return f"dcr must be a number, got {dcr!r}"
    try:
        paired = PairedReport.from_dict(report["paired"])
    except (TypeError, ValueError) as exc:
        return str(exc)
    if paired.n == 0:
        return "no question was evaluated by both strategies (n = 0)"
    if paired.missing_in_candidate or paired.missing_in_baseline:
        return (
            f"ids not aligned: {len(paired.missing_in_candidate)} missing in candidate, "
            f"{len(paired.missing_in_baseline)} missing in baseline"
        )
    if not isinstance(paired.per_category, Mapping) or not all(
        isinstance(row, Mapping) for row in paired.per_category.values()
    ):
        return "paired.per_category must map each category to a mapping"
    numbers = {"delta": paired.delta, "mcnemar_p": paired.mcnemar_p, "ci_low": paired.ci_low, "ci_high": paired.ci_high}
    numbers.update({f"per_category.{c}.delta": row.get("delta") for c, row in paired.per_category.items()})
    for name, value in numbers.items():
        if not is_real(value):
            return f"paired.{name} must be a number, got {value!r}"
    return paired, float(dcr)


def _brief(report: Mapping[str, Any], name: str) -> PairedBrief | None | str:
    """The report's optional paired brief ``name``, or why it is malformed."""
    data = report.get(name)
    if data is None:
        return None
    if not isinstance(data, Mapping) or not all(is_real(data.get(f.name)) for f in fields(PairedBrief)):
        return f"{name} must carry numbers n, delta, mcnemar_p, ci_low, ci_high, got {data!r}"
    return PairedBrief.from_dict(data)


def _adjusted_p(report: Mapping[str, Any], name: str = "multiple_testing") -> tuple[float, str, int] | None | str:
    """The multiple-testing adjusted p (entry ``name``), its method and family size, or why the report's entry is
    malformed."""
    data = report.get(name)
    if data is None:
        return None
    if not isinstance(data, Mapping) or not is_real(data.get("p_adjusted")) or not isinstance(data.get("family"),
                                                                                              list):
        return f"{name} must carry p_adjusted and family, got {data!r}"
    return float(data["p_adjusted"]), str(data.get("method")), len(data["family"])


def _secondary_gain(report: Mapping[str, Any], rules: AcceptanceRules,
                    paired: PairedReport) -> tuple[bool, str] | None:
    """Rule 5's fixed-sequence step: ``(True, figures)`` when the candidate is non-inferior on the objective and
    gains significantly on the secondary outcome, ``(False, why)`` when the report's secondary entries are
    malformed, else ``None``."""
    if rules.secondary is None or paired.delta < 0 or paired.ci_low <= -rules.non_inferiority_margin:
        return None
    brief, adjusted = _brief(report, "secondary"), _adjusted_p(report, "secondary_testing")
    for problem in (brief, adjusted):
        if isinstance(problem, str):
            return False, problem
    if brief is None:
        return None
    p = adjusted[0] if adjusted is not None else brief.mcnemar_p
    if not (p <= rules.alpha and brief.ci_low > 0):
        return None
    shown = f", {adjusted[1]}-adjusted p={p:.4g} over {adjusted[2]} candidates" if adjusted is not None else ""
    return True, (f"non-inferior (margin {rules.non_inferiority_margin:g}), secondary {rules.secondary}: "
            f"delta={brief.delta:+.4f}, p={brief.mcnemar_p:.4g}{shown}, CI=[{brief.ci_low:+.4f}, {brief.ci_high:+.4f}]")


def decide(report: Mapping[str, Any], rules: AcceptanceRules, cost: CostLimits | None = None) -> Decision:
    """Verdict for ``report`` (see the module docstring for the rule order)."""
    parsed = _parse(report)
    words = _cost_words(report) if cost is not None and cost.active and not isinstance(parsed, str) else None
    if isinstance(parsed, str) or isinstance(words, str):
        return Decision(Verdict.FEATURE_FLAG, f"incomplete report: {parsed if isinstance(parsed, str) else words}",
                        "incomplete")
    paired, dcr = parsed
    delta, p, low, high = paired.delta, paired.mcnemar_p, paired.ci_low, paired.ci_high
    stats = f"delta={delta:+.4f}, p={p:.4g}, CI=[{low:+.4f}, {high:+.4f}]"
    if paired.brief().harms(rules.alpha):
        return Decision(Verdict.REJECT, f"significant harm: {stats}", "significant_harm")
    confab = _brief(report, "confabulation")
    if isinstance(confab, str):
        return Decision(Verdict.FEATURE_FLAG, f"incomplete report: {confab}", "incomplete")
    if confab is not None and confab.rises(rules.alpha):
        return Decision(Verdict.REJECT, f"confabulation: confident wrong answers rise on {confab.n} questions "
                                        f"(delta={confab.delta:+.4f}, p={confab.mcnemar_p:.4g}, "
                                        f"CI=[{confab.ci_low:+.4f}, {confab.ci_high:+.4f}]) ({stats})",
                        "confabulation")
    if dcr < rules.rho_min:
        return Decision(Verdict.FEATURE_FLAG, f"DCR@{rules.dcr_tau} {dcr:.3f} below floor {rules.rho_min:.3f}", "dcr_floor")
    adjusted = _adjusted_p(report)
    if isinstance(adjusted, str):
        return Decision(Verdict.FEATURE_FLAG, f"incomplete report: {adjusted}", "incomplete")
    if adjusted is not None:
        p = adjusted[0]
        stats += f", {adjusted[1]}-adjusted p={p:.4g} over {adjusted[2]} candidates"
    secondary = None
    if not (p <= rules.alpha and low > 0) and (rules.require_significance or delta <= 0):
        gain = _secondary_gain(report, rules, paired)
        if gain is None:
            return Decision(Verdict.FEATURE_FLAG, f"inconclusive: {stats} (alpha={rules.alpha})", "inconclusive")
        if not gain[0]:
            return Decision(Verdict.FEATURE_FLAG, f"incomplete report: {gain[1]}", "incomplete")
        secondary = gain[1]
        stats += f"; {secondary}"

    vetoed, monitored, noted = [], [], []
    for category, row in sorted(paired.per_category.items()):
        eps = rules.epsilon(category)
        if row["delta"] < -eps - TOLERANCE:
            entry = f"{category} {row['delta']:+.4f} (epsilon {eps:.3f}, n={row['n']})"
            (vetoed if rules.vetoes(category) else monitored if category in rules.protected_slices
             else noted).append(entry)
    if vetoed:
        return Decision(Verdict.REJECT, f"category regression: {'; '.join(vetoed)}", "category_regression")
    over = cost.violation(*words) if words is not None else None
    if over is not None:
        return Decision(Verdict.FEATURE_FLAG, f"{over} ({stats})", "cost")
    h = _brief(report, "holdout")
    if isinstance(h, str):
        return Decision(Verdict.FEATURE_FLAG, f"incomplete report: {h}", "incomplete")
    if h is not None and h.harms(rules.alpha):
        return Decision(Verdict.FEATURE_FLAG, f"holdout: regresses on {h.n} held-out questions (delta="
                                              f"{h.delta:+.4f}, p={h.mcnemar_p:.4g}, CI=[{h.ci_low:+.4f}, "
                                              f"{h.ci_high:+.4f}]) although the dev data gain ({stats})", "holdout")
    unvetoed = f"; unprotected category regressed (no veto): {'; '.join(noted)}" if noted else ""
    if monitored:
        return Decision(
            Verdict.ACCEPT_WITH_MONITOR,
            f"accepted ({stats}); protected slice regressed: {'; '.join(monitored)}{unvetoed}",
            "protected_slice_regression",
        )
    if secondary is not None:
        return Decision(Verdict.ACCEPT, f"accepted on the secondary outcome: {stats}{unvetoed}", "accept_secondary")
    return Decision(Verdict.ACCEPT, f"accepted: {stats}{unvetoed}", "accept")


def evidence_screen(paired: PairedReport, rules: AcceptanceRules) -> Decision | None:
    """REJECT a candidate whose packed context significantly loses gold evidence against its parent (same rule as
    ``significant_harm``, on the evidence outcome); found before any answerer or judge call is spent on it."""
    if paired.n and paired.brief().harms(rules.alpha):
        return Decision(Verdict.REJECT, f"evidence screen: the packed context loses gold evidence (delta="
                                        f"{paired.delta:+.4f}, p={paired.mcnemar_p:.4g}, CI=[{paired.ci_low:+.4f}, "
                                        f"{paired.ci_high:+.4f}]); rejected before any LLM answer or judgment",
                        "evidence_screen")
    return None


def probe_screen(base_acc: float, cand_acc: float, rules: AcceptanceRules) -> Decision | None:
    """REJECT when the candidate's probe accuracy is more than ``probe_delta`` below the baseline's."""
    drop = base_acc - cand_acc
    if drop > rules.probe_delta + TOLERANCE:
        return Decision(
            Verdict.REJECT,
            f"probe accuracy fell {drop:.4f} ({base_acc:.4f} -> {cand_acc:.4f}), more than {rules.probe_delta:.4f}",
            "probe_screen",
        )
    return None
