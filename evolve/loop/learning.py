"""What a round teaches the Improve half: dimension effects, the hypothesis tree, and the Optuna results to tell
once the round is committed (telling them earlier would break exact replay after a crash)."""
from __future__ import annotations

from evolve.improve.effects import DimensionEffects
from evolve.improve.hypotheses import HypothesisTree, reward_of
from evolve.loop.candidate import CandidateResult


def learn(results: list[CandidateResult], winner: CandidateResult | None, effects: DimensionEffects,
          tree: HypothesisTree) -> list[dict]:
    """Record each screened candidate's effect (under each path it changed, and under its coupled key when it moved
    several); return ``[{study, trial, value, outcome}]`` (value ``None``: trial abandoned; outcome "accepted" or
    "inert" makes the next move along the direction larger)."""
    pending = []
    for r in results:
        if r.proposal is None:
            continue
        record = r.record
        evaluated = r.run is not None
        if evaluated or record.decided_by == "probe":
            delta = record.delta if evaluated else record.probe["delta"]
            won = r.accepted and r is winner
            for key in dict.fromkeys(record.change_keys + [r.proposal.key]):
                effects.record(key, record.symptom, won, delta)
                tree.update(key, reward_of(won, delta), delta, won, parent=record.symptom)
            outcome = "accepted" if r.accepted else "inert" if record.decision.get("rule") == "probe-inert" else None
            pending.append({"study": r.proposal.study, "trial": r.proposal.trial_number, "value": delta,
                            "outcome": outcome})
        else:
            pending.append({"study": r.proposal.study, "trial": r.proposal.trial_number, "value": None})
    return pending
