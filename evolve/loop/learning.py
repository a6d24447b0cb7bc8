"""What a round teaches the Improve half: dimension effects, the hypothesis tree, the Optuna results to tell
once the round is committed (telling them earlier would break exact replay after a crash), and the accepted
runners-up to verify again in the next round."""
from __future__ import annotations

from evolve.improve.effects import COUPLE, DimensionEffects
from evolve.improve.hypotheses import HypothesisTree, reward_of
from evolve.improve.planner import Direction
from evolve.loop.candidate import CandidateResult
from evolve.loop.record import CandidateRecord
from evolve.strategy.diff import SET_PREFIX
from evolve.strategy.paths import get_path
from evolve.verify.decision import changes_strategy


def learn(results: list[CandidateResult], effects: DimensionEffects, tree: HypothesisTree) -> list[dict]:
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
            won = r.accepted  # an accept that lost the round to a better one still paid off
            for key in dict.fromkeys(record.change_keys + [r.proposal.key]):
                effects.record(key, record.symptom, won, delta)
                tree.update(key, reward_of(won, delta), delta, won, parent=record.symptom)
            pending.append({"study": r.proposal.study, "trial": r.proposal.trial_number, "value": delta,
                            "outcome": record.step_outcome})
        else:
            pending.append({"study": r.proposal.study, "trial": r.proposal.trial_number, "value": None})
    return pending


def runners_up(records: list[CandidateRecord], round_no: int, current: dict) -> list[Direction]:
    """Accepted candidates of round ``round_no`` that lost the round to a better accept, as directions to verify again
    on top of ``current`` (the round's outcome): each re-applies the candidate's own changes as ``set:`` moves, so
    gains found in one round stack instead of being rediscovered. Runners-up that touch a path the winner changed are
    left to the planner."""
    mine = [r for r in records if r.round == round_no]
    taken = {path for r in mine if r.applied for path in r.changes}
    out = []
    for r in mine:
        if r.applied or not changes_strategy(r.verdict) or taken & set(r.changes):
            continue  # not accepted, or the winner moved one of its paths: not the same change any more
        moves = [(path, value) for path, value in sorted(r.changes.items()) if get_path(current, path) != value]
        if not moves:
            continue
        parts = [_move(path, value) for path, value in moves]
        out.append(Direction(COUPLE.join(f"{p}::{m}" for p, m in parts), *parts[0], r.symptom, 1e6,
                             f"{r.candidate_id} was accepted in round {round_no} (delta {r.delta:+.4f}) but another "
                             "accept won the round; verified again on the new current strategy"))
    return out


def _move(path: str, value: object) -> tuple[str, str]:
    """The direction that sets ``path`` to ``value``: enable / disable for booleans, ``set:<value>`` otherwise."""
    if isinstance(value, bool):
        return path, "enable" if value else "disable"
    return path, f"{SET_PREFIX}{value}"
