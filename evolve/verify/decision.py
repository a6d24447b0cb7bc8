"""The decision contract: a deterministic verdict from a comparison dossier alone.

``decide`` reads a :class:`~evolve.verify.comparison.Comparison` (the objective's paired report and DCR; the context
cost, needed only under cost limits; optional confabulation, secondary, multiple-testing, holdout and hypothesis
entries, below), or a stored report of one (``Comparison.to_report``), and applies these rules, first match wins:

1. ``incomplete``      report fields missing, ``n == 0``, or ids missing on either side -> FEATURE_FLAG
2. ``significant_harm`` delta < 0, p <= alpha and ci_high < 0                            -> REJECT
   ``category_floor``   any category (protected or not) drops more than epsilon_c and its own exact McNemar p,
                        Holm-adjusted over the candidate's categories, is <= alpha: a significant regression
                        (reports whose category rows carry ``mcnemar_p``; categories in ``floor_exempt`` are
                        named in the reason instead)                                       -> REJECT
3. ``confabulation``    with a ``confabulation`` brief (candidate vs. parent on "the answer is flagged as
                        confabulated": a wrong or partial answer asserting content the packed context lacks,
                        paired by question; accuracy objective only), a significant rise there
                        (delta > 0, p <= alpha, ci_low > 0)                                  -> REJECT
4. ``dcr_floor``        candidate's DCR@tau (``dcr_tau``) below ``rho_min``              -> FEATURE_FLAG
5. ``inconclusive``     not a significant gain (p > alpha or ci_low <= 0), p being the round's
                        multiple-testing adjusted p when the report carries ``multiple_testing``
                        (:mod:`evolve.verify.multiplicity`; its ``p_adjusted``, held to ``fdr_q`` instead of
                        alpha when the method is ``bh``)                                   -> FEATURE_FLAG
                        With ``require_significance=False`` a result with delta > 0 goes on
                        to rules 6-9 instead (useful on small benchmarks where no gain can be
                        significant); delta <= 0 stays FEATURE_FLAG.
                        With ``secondary`` set (a second outcome, e.g. ``evidence`` under the answer
                        objective) and the report's ``secondary`` brief, an inconclusive result goes on
                        to rules 6-9 when it is non-inferior on the objective (delta >= 0 and ci_low >
                        -``non_inferiority_margin``) and gains significantly on the secondary outcome
                        (its p, adjusted over the round as ``secondary_testing`` says, <= ``secondary_alpha``
                        and its ci_low > 0). Its accept's rule is ``accept_secondary``. The objective's
                        gain is then tested at alpha - ``secondary_alpha``: Wiens' (2003) fallback
                        procedure, whose two levels add up to alpha, so a change that moves neither
                        outcome is accepted with probability <= alpha per comparison (and per round under
                        Holm). ``secondary_alpha: null`` is the procedure before the split (both at alpha,
                        the secondary read only where the objective fails): up to ~2 alpha; records decided
                        under it replay with it (experiments/bench/contract_simulation.md).
6. ``category_regression`` a vetoing category has delta_c < -epsilon_c                  -> REJECT
                        (``veto: all_categories``: every category; else those in ``veto_slices``)
7. ``cost``            with :class:`CostLimits`, the candidate's mean packed context words exceed
                        ``max_context_words``, or grow over the parent's by more than
                        ``max_relative_increase`` (report field ``cost``)                  -> FEATURE_FLAG
8. ``holdout``         with a holdout comparison in the report (field ``holdout``: n, delta, mcnemar_p, ci_low,
                        ci_high of candidate vs. parent on held-out questions), a significant regression
                        there (delta < 0, p <= alpha, ci_high < 0)                            -> FEATURE_FLAG
   ``hypothesis_mismatch`` with a ``hypothesis`` check (:mod:`evolve.verify.hypothesis`), the candidate's target
                        failure category (root cause, optionally x category) did not move as predicted under
                        the paired test (exact McNemar at alpha; a record made before the test: its question
                        category did not move at all) (``hypothesis_check: flag``; ``record`` names it in the
                        accept's reason, ``off`` skips it). Read only here, for a would-be accept: a
                        mismatch adds a flag, a match never accepts                        -> FEATURE_FLAG
                        Only an engineer's prediction (``gate``) flags: the night's planner predicts a
                        mechanism for its own move, and its mismatch is named in the reason and refutes
                        that mechanism in the planner's tree and reputation (:mod:`evolve.loop.learning`)
9. ``protected_slice_regression`` a protected slice has delta_c < -epsilon_c            -> ACCEPT_WITH_MONITOR
10. ``accept``                                                                           -> ACCEPT

Every category has a floor (E²MEND's per-category non-regression, made a test): a significant drop beyond epsilon_c
rejects, whichever the category. Slices follow D²ACCI above that floor: ``protected_slices`` are pre-specified
important categories whose drop beyond epsilon_c, not significant, makes an otherwise good change
ACCEPT_WITH_MONITOR (later rounds and the holdout check them again, :mod:`evolve.loop.monitor`); such a drop in any
other category does not veto (the accept's reason names it).
E²MEND's per-category non-regression (for all c: delta_c >= -epsilon_c, else REJECT) is ``veto: all_categories``;
``veto_slices`` vetoes only the listed categories. A vetoing category's regression is REJECT even when the category
is also protected. Only ACCEPT and ACCEPT_WITH_MONITOR change the strategy. ``restore_threshold`` is the drop below
the best-ever accuracy at which a checkpoint is restored; it is carried here so that all acceptance settings live in
one model.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evolve.benchmarks.types import CATEGORIES
from evolve.numbers import is_real
from evolve.observe.objective import Objective
from evolve.verify.comparison import Comparison, ReportError
from evolve.verify.multiplicity import Adjustment, adjust
from evolve.verify.statistics import PairedReport

#: Slack for float comparisons of accuracy differences (k/n arithmetic is not exact).
TOLERANCE = 1e-12


class Verdict(StrEnum):
    ACCEPT = "ACCEPT"
    ACCEPT_WITH_MONITOR = "ACCEPT_WITH_MONITOR"
    FEATURE_FLAG = "FEATURE_FLAG"
    REJECT = "REJECT"


class Rule(StrEnum):
    """The rule behind a decision, as recorded (a gate's rule is its stage, ``gate:NAME``: :meth:`Stage.gate`)."""

    INCOMPLETE = "incomplete"
    SIGNIFICANT_HARM = "significant_harm"
    CATEGORY_FLOOR = "category_floor"
    CONFABULATION = "confabulation"
    DCR_FLOOR = "dcr_floor"
    INCONCLUSIVE = "inconclusive"
    CATEGORY_REGRESSION = "category_regression"
    COST = "cost"
    HOLDOUT = "holdout"
    HYPOTHESIS_MISMATCH = "hypothesis_mismatch"
    PROTECTED_SLICE_REGRESSION = "protected_slice_regression"
    ACCEPT = "accept"
    ACCEPT_SECONDARY = "accept_secondary"
    EVIDENCE_SCREEN = "evidence_screen"
    PROBE_SCREEN = "probe_screen"
    PROBE_INERT = "probe-inert"
    CRITIC = "critic"
    EVOLVER = "evolver"


class Stage(StrEnum):
    """The stage of the candidate pipeline that decided a candidate (a record's ``decided_by``; a gate's is
    ``gate:NAME``)."""

    PLANNER = "planner"
    EVIDENCE_SCREEN = "evidence-screen"
    PROBE = "probe"
    CRITIC = "critic"
    DECISION = "decision"
    GATE_PREFIX = "gate:"

    @staticmethod
    def gate(name: str) -> str:
        return f"{Stage.GATE_PREFIX}{name}"


def _require_categories(names: Any) -> None:
    unknown = [n for n in names if n not in CATEGORIES]
    if unknown:
        raise ValueError(f"unknown category {unknown[0]!r}; expected one of {', '.join(CATEGORIES)}")


class AcceptanceRules(BaseModel):
    """Thresholds of the decision contract."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    alpha: float = Field(0.05, gt=0, lt=1, description="significance level of every paired test")
    rho_min: float = Field(0.9, ge=0, le=1, description="floor of DCR at dcr_tau")
    dcr_tau: Literal[1, 3, 5, 6] = Field(3, description="stages a trace must record to count towards DCR")
    epsilon_default: float = Field(0.02, ge=0, le=1, description="tolerated per-category accuracy drop (a share of "
                                                                  "questions: at most 1, any drop)")
    epsilon_by_category: dict[str, float] = Field(default_factory=dict, description="per-category overrides of "
                                                                                   "epsilon_default")
    protected_slices: list[str] = Field(default_factory=list, description="important categories: a regression "
                                                                          "there is ACCEPT_WITH_MONITOR (D²ACCI)")
    veto: Literal["none", "all_categories"] = Field("none", description="all_categories: a regression in any "
                                                                        "category is REJECT (E²MEND's for-all-c rule)")
    veto_slices: list[str] = Field(default_factory=list, description="categories whose regression is REJECT")
    category_floor: bool = Field(True, description="a significant regression beyond epsilon in any category is REJECT "
                                                   "(rule category_floor; false: only veto rules reject on a category)")
    floor_exempt: list[str] = Field(default_factory=list, description="categories whose significant regression "
                                                                      "beyond epsilon does not reject (named in the "
                                                                      "reason instead)")
    multiple_testing: Literal["holm", "bonferroni", "bh", "none"] = Field(
        "holm", description="adjustment of the gain test's p over each round's candidates (fully compared ones and "
                            "those the probe stopped): holm and bonferroni hold the family-wise error at alpha, bh "
                            "(Benjamini-Hochberg) the false discovery rate at fdr_q")
    fdr_q: float = Field(0.01, gt=0, lt=1, description="false discovery rate bh holds (D²ACCI's 0.01); the adjusted p "
                                                        "is compared with it instead of alpha")
    probe_delta: float = Field(0.02, ge=0, le=1, description="delta_1: largest tolerated probe accuracy drop (a "
                                                              "share of questions: at most 1, any drop)")
    restore_threshold: float = Field(0.03, ge=0, le=1, description="drop below best-ever that triggers restore (a "
                                                                    "share of questions: at most 1, never)")
    require_significance: bool = Field(True, description="false: a positive delta goes on to rules 6-9 without "
                                                         "significance (rule 5)")
    hypothesis_check: Literal["flag", "record", "off"] = Field(
        "flag", description="a would-be accept whose target failure category did not move as an engineer predicted "
                            "(gate; paired exact McNemar at alpha): FEATURE_FLAG (flag), named in the reason (record), "
                            "or not checked (off). A night's planner predicts its own moves' mechanism: its mismatch "
                            "is named in the reason and refutes that mechanism in the planner, never flags")
    secondary: Objective | None = Field(None, description="second outcome that decides where the objective's gain is "
                                                          "inconclusive but non-inferior (rule 5)")
    non_inferiority_margin: float = Field(0.02, ge=0, le=0.2, description=(
        "largest objective loss the CI may allow for an accept on the secondary outcome; at most 0.2 (a fifth of "
        "the questions), beyond which 'non-inferior' would accept a change that loses one answer in five"))
    secondary_alpha: float | None = Field(None, gt=0, description="level of the secondary outcome's test; the "
                                                                  "objective's gain is tested at alpha minus it. "
                                                                  "Left out with secondary set: alpha / 5")
    promotion_level: float = Field(0.05, gt=0, lt=1, description=(
        "highest alpha a candidate may have been decided at for promote or canary to take it; a night's final that "
        "its confirmation CONFIRMED is promotable whatever alpha the search ran at"))
    bootstrap_resamples: int = Field(10_000, ge=200, le=100_000, description=(
        "resamples of the paired BCa confidence interval: at least 200 (fewer leave the 2.5% tails of the BCa "
        "interval to a handful of resamples, so the CI is noise), at most 100,000 (the CI's Monte Carlo error is then "
        "far below one question in a thousand, and memory and time grow linearly with the count)"))

    @field_validator("protected_slices", "veto_slices", "floor_exempt")
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

    @model_validator(mode="before")
    @classmethod
    def _secondary_split(cls, data: Any) -> Any:
        """With ``secondary`` set and ``secondary_alpha`` left out, the secondary test gets alpha / 5 (an explicit
        ``null`` keeps the procedure before the split, under which older records were decided)."""
        if isinstance(data, Mapping) and data.get("secondary") is not None and "secondary_alpha" not in data:
            alpha = data.get("alpha", cls.model_fields["alpha"].default)
            return {**data, "secondary_alpha": alpha / 5 if is_real(alpha) else None}
        return data

    @model_validator(mode="after")
    def _secondary_level(self) -> "AcceptanceRules":
        if self.secondary_alpha is not None:
            if self.secondary is None:
                raise ValueError("secondary_alpha: set only with secondary (the outcome it tests)")
            if not self.secondary_alpha < self.alpha:
                raise ValueError(f"secondary_alpha: must be below alpha ({self.alpha:g}), got {self.secondary_alpha:g}")
        return self

    @property
    def objective_alpha(self) -> float:
        """Level of the objective's gain test: alpha less the secondary's share under a split secondary rule."""
        return self.alpha - (self.secondary_alpha or 0.0)

    @property
    def secondary_level(self) -> float:
        """Level of the secondary outcome's test (alpha under the unsplit procedure of ``secondary_alpha: null``)."""
        return self.alpha if self.secondary_alpha is None else self.secondary_alpha

    @model_validator(mode="after")
    def _one_veto(self) -> "AcceptanceRules":
        if self.veto == "all_categories" and self.veto_slices:
            raise ValueError("veto_slices: leave it empty with veto: all_categories (every category vetoes)")
        return self

    def epsilon(self, category: str) -> float:
        return self.epsilon_by_category.get(category, self.epsilon_default)

    def gain_level(self, method: str | None) -> float:
        """The level the objective's (adjusted) gain p is held to: ``fdr_q`` under Benjamini-Hochberg, else alpha;
        under a split secondary rule, the objective's share of it (:attr:`objective_alpha` over alpha)."""
        return (self.fdr_q if method == "bh" else self.alpha) * self.objective_alpha / self.alpha

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


def holm_by_category(per_category: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Each category's exact McNemar p Holm-adjusted over the categories whose rows carry one (none for reports
    written before the floor existed)."""
    return adjust({c: float(row["mcnemar_p"]) for c, row in per_category.items() if is_real(row.get("mcnemar_p"))},
                  "holm")


def floor_breaches(per_category: Mapping[str, Mapping[str, Any]], rules: AcceptanceRules) -> dict[str, float]:
    """The categories that regress significantly beyond their epsilon (``delta`` below -epsilon and the Holm-adjusted
    p, :func:`holm_by_category`, <= alpha), each with that adjusted p; none with ``category_floor`` off."""
    if not rules.category_floor:
        return {}
    adjusted = holm_by_category(per_category)
    return {c: p for c, p in sorted(adjusted.items())
            if per_category[c]["delta"] < -rules.epsilon(c) - TOLERANCE and p <= rules.alpha}


def _category_floor(paired: PairedReport, rules: AcceptanceRules) -> tuple[list[str], list[str]]:
    """The categories of :func:`floor_breaches`, described and split into ``(floored, exempt)``."""
    rows = paired.per_category
    family = sum(is_real(row.get("mcnemar_p")) for row in rows.values())
    floored, exempt = [], []
    for category, p in floor_breaches(rows, rules).items():
        row = rows[category]
        entry = (f"{category} {row['delta']:+.4f} (epsilon {rules.epsilon(category):.3f}, n={row['n']}, "
                 f"p={row['mcnemar_p']:.4g}, Holm-adjusted over {family} categories {p:.4g})")
        (exempt if category in rules.floor_exempt else floored).append(entry)
    return floored, exempt


def _adjusted(adjustment: Adjustment | None) -> tuple[float, str, int] | None:
    """An adjustment's p, method and family size."""
    return (adjustment.p_adjusted, adjustment.method, len(adjustment.family)) if adjustment is not None else None


def _secondary_gain(comparison: Comparison, rules: AcceptanceRules) -> tuple[bool, str] | None:
    """Rule 5's fallback step: ``(True, figures)`` when the candidate is non-inferior on the objective and gains
    significantly (at ``secondary_alpha``) on the secondary outcome, ``(False, why)`` when the report's secondary
    entries are malformed, else ``None``."""
    paired = comparison.paired
    if rules.secondary is None or paired.delta < 0 or paired.ci_low <= -rules.non_inferiority_margin:
        return None
    for name in ("secondary", "secondary_testing"):
        if name in comparison.problems:
            return False, comparison.problems[name]
    brief, adjusted = comparison.secondary, _adjusted(comparison.secondary_testing)
    if brief is None:
        return None
    p = adjusted[0] if adjusted is not None else brief.mcnemar_p
    if not (p <= rules.secondary_level and brief.ci_low > 0):
        return None
    shown = f", {adjusted[1]}-adjusted p={p:.4g} over {adjusted[2]} candidates" if adjusted is not None else ""
    level = f" <= secondary_alpha {rules.secondary_alpha:g}" if rules.secondary_alpha is not None else ""
    return True, (f"non-inferior (margin {rules.non_inferiority_margin:g}), secondary {rules.secondary}: "
                  f"delta={brief.delta:+.4f}, p={brief.mcnemar_p:.4g}{shown}{level}, "
                  f"CI=[{brief.ci_low:+.4f}, {brief.ci_high:+.4f}]")


def _incomplete(why: str) -> Decision:
    return Decision(Verdict.FEATURE_FLAG, f"incomplete report: {why}", Rule.INCOMPLETE)


def decide(report: Comparison | Mapping[str, Any], rules: AcceptanceRules, cost: CostLimits | None = None) -> Decision:
    """Verdict for a comparison, or for a stored report of one (see the module docstring for the rule order)."""
    if not isinstance(report, Comparison):
        try:
            report = Comparison.from_report(report)
        except ReportError as exc:
            return _incomplete(str(exc))
    comparison, paired = report, report.paired
    limited = cost is not None and cost.active
    if limited and (comparison.cost is None or "cost" in comparison.problems):
        return _incomplete(comparison.problems.get("cost") or "report lacks cost (context words of parent and "
                                                                "candidate) although cost limits are set")
    delta, p, low, high = paired.delta, paired.mcnemar_p, paired.ci_low, paired.ci_high
    stats = f"delta={delta:+.4f}, p={p:.4g}, CI=[{low:+.4f}, {high:+.4f}]"
    if paired.brief().harms(rules.alpha):
        return Decision(Verdict.REJECT, f"significant harm: {stats}", Rule.SIGNIFICANT_HARM)
    floored, exempt = _category_floor(paired, rules)
    if floored:
        return Decision(Verdict.REJECT, f"category floor: significant regression {'; '.join(floored)} ({stats})",
                        Rule.CATEGORY_FLOOR)
    if "confabulation" in comparison.problems:
        return _incomplete(comparison.problems["confabulation"])
    confab = comparison.confabulation
    if confab is not None and confab.rises(rules.alpha):
        return Decision(Verdict.REJECT, f"confabulation: answers flagged as confabulated rise on {confab.n} questions "
                                        f"(delta={confab.delta:+.4f}, p={confab.mcnemar_p:.4g}, "
                                        f"CI=[{confab.ci_low:+.4f}, {confab.ci_high:+.4f}]) ({stats})",
                        Rule.CONFABULATION)
    if comparison.dcr < rules.rho_min:
        return Decision(Verdict.FEATURE_FLAG, f"DCR@{rules.dcr_tau} {comparison.dcr:.3f} below floor "
                                              f"{rules.rho_min:.3f}", Rule.DCR_FLOOR)
    if "multiple_testing" in comparison.problems:
        return _incomplete(comparison.problems["multiple_testing"])
    adjusted = _adjusted(comparison.multiple_testing)
    level = rules.gain_level(adjusted[1] if adjusted is not None else None)
    if adjusted is not None:
        p = adjusted[0]
        stats += f", {adjusted[1]}-adjusted p={p:.4g} over {adjusted[2]} candidates"
    if rules.secondary_alpha is not None:
        stats += f" (objective at alpha {level:g}, secondary_alpha {rules.secondary_alpha:g})"
    secondary = None
    if not (p <= level and low > 0) and (rules.require_significance or delta <= 0):
        gain = _secondary_gain(comparison, rules)
        if gain is None:
            shown = f"q={rules.fdr_q}" if adjusted is not None and adjusted[1] == "bh" else f"alpha={rules.alpha}"
            return Decision(Verdict.FEATURE_FLAG, f"inconclusive: {stats} ({shown})", Rule.INCONCLUSIVE)
        if not gain[0]:
            return _incomplete(gain[1])
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
        return Decision(Verdict.REJECT, f"category regression: {'; '.join(vetoed)}", Rule.CATEGORY_REGRESSION)
    over = cost.violation(comparison.cost.words_parent, comparison.cost.words_candidate) if limited else None
    if over is not None:
        return Decision(Verdict.FEATURE_FLAG, f"{over} ({stats})", Rule.COST)
    if "holdout" in comparison.problems:
        return _incomplete(comparison.problems["holdout"])
    h = comparison.holdout
    if h is not None and h.harms(rules.alpha):
        return Decision(Verdict.FEATURE_FLAG, f"holdout: regresses on {h.n} held-out questions (delta="
                                              f"{h.delta:+.4f}, p={h.mcnemar_p:.4g}, CI=[{h.ci_low:+.4f}, "
                                              f"{h.ci_high:+.4f}]) although the dev data gain ({stats})", Rule.HOLDOUT)
    hypothesis = comparison.hypothesis if rules.hypothesis_check != "off" else None
    if rules.hypothesis_check != "off" and "hypothesis" in comparison.problems:
        return _incomplete(comparison.problems["hypothesis"])
    if hypothesis is not None and not hypothesis.matches and hypothesis.binding and rules.hypothesis_check == "flag":
        return Decision(Verdict.FEATURE_FLAG, f"hypothesis mismatch: {hypothesis.describe()} ({stats})",
                        Rule.HYPOTHESIS_MISMATCH)
    unvetoed = f"; unprotected category regressed (no veto): {'; '.join(noted)}" if noted else ""
    if hypothesis is not None and not hypothesis.matches:
        unvetoed += f"; {'' if hypothesis.binding else 'planner '}hypothesis {hypothesis.describe()}"
    if exempt:
        unvetoed += f"; significant regression in a floor-exempt category: {'; '.join(exempt)}"
    if monitored:
        return Decision(
            Verdict.ACCEPT_WITH_MONITOR,
            f"accepted ({stats}); protected slice regressed: {'; '.join(monitored)}{unvetoed}",
            Rule.PROTECTED_SLICE_REGRESSION,
        )
    if secondary is not None:
        return Decision(Verdict.ACCEPT, f"accepted on the secondary outcome: {stats}{unvetoed}", Rule.ACCEPT_SECONDARY)
    return Decision(Verdict.ACCEPT, f"accepted: {stats}{unvetoed}", Rule.ACCEPT)


def evidence_screen(paired: PairedReport, rules: AcceptanceRules) -> Decision | None:
    """REJECT a candidate whose packed context significantly loses gold evidence against its parent (same rule as
    ``significant_harm``, on the evidence outcome); found before any answerer or judge call is spent on it."""
    if paired.n and paired.brief().harms(rules.alpha):
        return Decision(Verdict.REJECT, f"evidence screen: the packed context loses gold evidence (delta="
                                        f"{paired.delta:+.4f}, p={paired.mcnemar_p:.4g}, CI=[{paired.ci_low:+.4f}, "
                                        f"{paired.ci_high:+.4f}]); rejected before any LLM answer or judgment",
                        Rule.EVIDENCE_SCREEN)
    return None


def probe_screen(base_acc: float, cand_acc: float, rules: AcceptanceRules) -> Decision | None:
    """REJECT when the candidate's probe accuracy is more than ``probe_delta`` below the baseline's."""
    drop = base_acc - cand_acc
    if drop > rules.probe_delta + TOLERANCE:
        return Decision(
            Verdict.REJECT,
            f"probe accuracy fell {drop:.4f} ({base_acc:.4f} -> {cand_acc:.4f}), more than {rules.probe_delta:.4f}",
            Rule.PROBE_SCREEN,
        )
    return None
