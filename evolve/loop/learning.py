"""What a round teaches the Improve half: dimension effects, the hypothesis tree, the Optuna results to tell
once the round is committed (see :mod:`evolve.improve.evolver`, "Telling after the commit"), the accepted
runners-up to verify again in the next round, and the joined moves verified within a round (accepts found side by
side, and a cost-blocked gain with a move that shrinks the context), all queued by
:class:`~evolve.improve.proposer.RoundPlan`."""
from __future__ import annotations

from evolve.improve.effects import DimensionEffects
from evolve.improve.hypotheses import HypothesisTree, reward_of
from evolve.improve.planner import Direction, can_move
from evolve.improve.proposer import RULED
from evolve.loop.candidate import CandidateResult
from evolve.state.record import CandidateRecord
from evolve.strategy.moves import Move
from evolve.strategy.paths import value_at
from evolve.strategy.schema import evolvable_dimensions
from evolve.verify.decision import CostLimits, Stage, changes_strategy


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
        if evaluated or record.decided_by == Stage.PROBE:
            delta = record.delta if evaluated else record.probe.delta
            won = r.accepted  # an accept that lost the round to a better one still paid off
            growth = record.cost.growth if evaluated and record.cost else None
            mechanism = _mechanism(record)
            for key in dict.fromkeys(record.change_keys + [r.proposal.key]):
                # A change key shares the words of a move of several keys with the others: not its own cost.
                own = key == r.proposal.key or len(record.change_keys) == 1
                effects.record(key, record.symptom, won, delta, growth if own else None, mechanism)
                tree.update(key, reward_of(won, delta), delta, won, parent=record.symptom, mechanism=mechanism)
            pending.append({"study": r.proposal.study, "trial": r.proposal.trial_number, "value": delta,
                            "outcome": record.step_outcome})
        else:
            pending.append({"study": r.proposal.study, "trial": r.proposal.trial_number, "value": None})
    return pending


def _mechanism(record: CandidateRecord) -> bool | None:
    """For a gain the contract accepted, whether the failure category the planner predicted for it moved as predicted
    (``None``: not accepted, or no planner hypothesis tested): a mismatch refutes that mechanism for its symptom."""
    check = record.hypothesis
    if check is None or check.binding or not changes_strategy(record.verdict):
        return None
    return check.matches


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
        moves = [(path, value) for path, value in sorted(r.changes.items()) if value_at(current, path) != value]
        if not moves:
            continue
        out.append(Direction(Move.setting(moves), r.symptom, RULED,
                             f"{r.candidate_id} was accepted in round {round_no} (delta {r.delta:+.4f}) but another "
                             "accept won the round; verified again on the new current strategy"))
    return out


def merged(results: list[CandidateResult], current: dict) -> Direction | None:
    """The accepted candidates of this round, best first, that agree on every path they share (both turn the turn
    layer on), as one coupled ``set:`` move on ``current``, when there are at least two: gains found side by side in
    one round are verified together rather than one per round. ``None`` when fewer than two can be joined."""
    joined, values = [], {}
    for r in sorted((r for r in results if r.accepted and r.record.merged_from is None),
                    key=lambda r: -r.record.delta):
        if all(values.get(path, value) == value for path, value in r.record.changes.items()):
            joined.append(r.record)
            values |= r.record.changes
    if len(joined) < 2:
        return None
    moves = list({path: value for rec in joined for path, value in sorted(rec.changes.items())
                  if value_at(current, path) != value}.items())
    ids = tuple(rec.candidate_id for rec in joined)
    return Direction(Move.setting(moves), joined[0].symptom, RULED,
                     f"merge of {', '.join(ids)}, each accepted in this round", merged_from=ids)


#: The strategy path of the context's token budget.
BUDGET = "assembly.token_budget"
#: How far under the word cap a fitted budget aims, as a share of the cap: words grow concavely with the budget, so
#: the chord from the parent's point overshoots (the label-free night's probes: 192 -> 166.5 words, the chord's 184 ->
#: 160.7, 183 -> 160.2, all over a 160 cap; aimed at 158, 182 -> 159.6).
FIT_HEADROOM = 0.0125


def fitted(record: CandidateRecord, current: dict, cost: CostLimits) -> Direction | None:
    """A candidate that raised the token budget and gained, but packed more words than ``max_context_words``: the same
    change with the budget the two measured points (parent's words at its budget, the candidate's at its) put
    :data:`FIT_HEADROOM` under the cap, by linear interpolation, rounded down. ``None`` when the budget is not what
    grew, or nothing fits."""
    cap, measured = cost.max_context_words, record.cost
    if cap is None or measured is None or BUDGET not in record.changes:
        return None
    low, high = value_at(current, BUDGET), record.changes[BUDGET]
    w0, w1 = measured.words_parent, measured.words_candidate
    if not (high > low and w0 < cap < w1):
        return None
    aim = max(cap * (1 - FIT_HEADROOM), w0)
    budget = int(low + (high - low) * (aim - w0) / (w1 - w0))
    move = Move.setting([(path, budget if path == BUDGET else value) for path, value in sorted(record.changes.items())])
    if budget <= low or not can_move(current, move, evolvable_dimensions()):
        return None
    return Direction(move, record.symptom, RULED,
                     f"{record.candidate_id} gained (delta {record.delta:+.4f}) at token budget {high} but packed "
                     f"{w1:.1f} words per question over max_context_words {cap:g} ({w0:.1f} at {low}); verified "
                     f"again at budget {budget}, where the two measured points put {aim:.1f} words, just under the cap")


def relieved(result: CandidateResult, relief: tuple[str, ...], effects: DimensionEffects, current: dict,
             cost: CostLimits) -> Direction | None:
    """A candidate whose significant gain the cost rule blocked: when it raised the token budget past the word cap,
    the same change at the budget that fits (:func:`fitted`); else joined with the first relief move (bundle table
    ``cost_relief``) that touches none of its paths, can move from it, and has not been seen to grow the context."""
    if result.decision is None or result.decision.rule != "cost":
        return None
    record = result.record
    fit = fitted(record, current, cost)
    if fit is not None:
        return fit
    own = Move.setting(sorted(record.changes.items()))
    for key in relief:
        move = Move.parse(key)
        growth = effects.growth(key)
        if move.paths & set(record.changes) or (growth is not None and growth >= 0):
            continue
        joined = own.then(move)
        if can_move(current, joined, evolvable_dimensions()):
            return Direction(joined, record.symptom, RULED,
                             f"{record.candidate_id} gained (delta {record.delta:+.4f}) but {result.decision.reason}; "
                             f"verified again with {key} to stay within the cost limits")
    return None
