"""``memevolve sweep``: every recorded comparison of some stores decided again over a grid of alpha and epsilon, and
the decisions that flip.

D²ACCI reports its decisions stable for alpha >= 0.005. Each fully compared record (a loop candidate's or a gate
run's) is decided again from its stored report (:func:`evolve.verify.decision.decide`) under the rules it was
recorded with, alpha and ``epsilon_default`` replaced by each grid point (``fdr_q`` under ``bh`` and a split
``secondary_alpha`` scaled with alpha, so the secondary step keeps its share). A decision flips when its verdict
differs from the one under the recorded rules. Records stopped before the full comparison (planner, screen, probe,
critic) are not re-decided: their stage decided them, not the contract's thresholds.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from evolve.loop.rules import recorded_rules
from evolve.ops.history import History
from evolve.state.record import CandidateRecord
from evolve.verify.decision import AcceptanceRules, CostLimits, Decision, decide

#: The default grid: D²ACCI's robustness range of alpha, and tolerated category drops around the default 0.02.
ALPHAS = (0.005, 0.01, 0.02, 0.05)
EPSILONS = (0.01, 0.02, 0.05)


@dataclass(frozen=True)
class Flip:
    """One record whose verdict at a grid point differs from its verdict under its recorded rules."""

    stores: str
    candidate_id: str
    alpha: float
    epsilon: float
    recorded: Decision
    swept: Decision


@dataclass(frozen=True)
class Sweep:
    """The re-decided records per stores directory, and every flip."""

    decided: dict[str, int]
    skipped: dict[str, int]
    flips: list[Flip]
    alphas: tuple[float, ...]
    epsilons: tuple[float, ...]


def at(rules: AcceptanceRules, alpha: float, epsilon: float) -> AcceptanceRules:
    """``rules`` with alpha and ``epsilon_default`` replaced (``fdr_q`` under ``bh`` and ``secondary_alpha`` scaled
    with alpha)."""
    scale = alpha / rules.alpha
    update = {"alpha": alpha, "epsilon_default": epsilon,
              "fdr_q": min(rules.fdr_q * scale, 0.5) if rules.multiple_testing == "bh" else rules.fdr_q,
              "secondary_alpha": rules.secondary_alpha * scale if rules.secondary_alpha is not None else None}
    return AcceptanceRules.model_validate({**rules.model_dump(), **update}, strict=False)


def _decide(record: CandidateRecord, rules: AcceptanceRules, cost: CostLimits) -> Decision:
    return decide(record.comparison, rules, cost if cost.active else None)


def sweep(stores: Sequence[str | Path], alphas: Sequence[float] = ALPHAS,
          epsilons: Sequence[float] = EPSILONS) -> Sweep:
    """Every fully compared record of ``stores`` decided at each (alpha, epsilon) of the grid."""
    decided, skipped, flips = {}, {}, []
    for path in map(str, stores):
        records = History(path).records
        full = [r for r in records if r.comparison is not None and r.rules is not None]
        decided[path], skipped[path] = len(full), len(records) - len(full)
        for record in full:
            rules, cost = recorded_rules(record.rules)
            base = _decide(record, rules, cost)
            for alpha in alphas:
                for epsilon in epsilons:
                    swept = _decide(record, at(rules, alpha, epsilon), cost)
                    if swept.verdict != base.verdict:
                        flips.append(Flip(path, record.candidate_id, alpha, epsilon, base, swept))
    return Sweep(decided, skipped, flips, tuple(alphas), tuple(epsilons))


def text(result: Sweep) -> str:
    """The sweep in words: per stores directory the records re-decided, then each flip, or that none flips."""
    grid = (f"alpha {', '.join(f'{a:g}' for a in result.alphas)} x epsilon "
            f"{', '.join(f'{e:g}' for e in result.epsilons)}")
    lines = [f"sweep over {grid}:"]
    for path, n in result.decided.items():
        flips = [f for f in result.flips if f.stores == path]
        moved = sorted({f.candidate_id for f in flips})
        lines.append(f"{path}: {n} fully compared record(s) re-decided ({result.skipped[path]} stopped earlier, not "
                     f"re-decided); {len(moved)} flip somewhere on the grid")
        lines += [f"  {f.candidate_id} at alpha {f.alpha:g}, epsilon {f.epsilon:g}: {f.recorded.verdict} "
                  f"({f.recorded.rule}) -> {f.swept.verdict} ({f.swept.rule})" for f in flips]
    return "\n".join(lines)
