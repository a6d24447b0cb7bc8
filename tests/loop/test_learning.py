"""What a round teaches: accepted runners-up come back as exact moves on the new current strategy, and accepts found
side by side in one round are merged into one move."""
from __future__ import annotations

from dataclasses import replace

from evolve.improve.evolver import Evolver
from evolve.loop.candidate import CandidateResult
from evolve.improve.effects import DimensionEffects
from evolve.loop.learning import fitted, merged, relieved, runners_up
from evolve.state.record import CandidateRecord
from evolve.state.records import dump_record
from evolve.verify.decision import CostLimits, Decision, Verdict
from evolve.verify.outcomes import ContextCost
from evolve.verify.statistics import PairedReport, paired_comparison
from evolve.strategy.artifact import derive, validate_strategy


CAP = CostLimits(max_context_words=160)


def paired(delta: float) -> PairedReport:
    """A paired report with accuracy delta ``delta``."""
    one = paired_comparison({"q": {"correct": False, "category": "c"}}, {"q": {"correct": True, "category": "c"}})
    return replace(one, delta=delta)


def record(cid: str, changes: dict, verdict: str, applied: bool = False, round_no: int = 1) -> CandidateRecord:
    r = CandidateRecord(cid, round_no, {"key": "x"}, "retrieval_gap/*", "0" * 64, {}, changes=changes, applied=applied,
                        paired=paired(0.02))
    r.decision = Decision(Verdict(verdict), "test", "accept")
    return r


def test_accepted_runners_up_return_as_exact_moves_on_the_new_current(tmp_path, baseline_strategy):
    winner = {"retrieval.top_k": 6}
    current = derive(baseline_strategy, winner)
    records = [record("r001-c00", winner, "ACCEPT", applied=True),
               record("r001-c01", {"retrieval.intent_top_k_multiplier.single_hop": 1.25}, "ACCEPT"),
               record("r001-c02", {"lifecycle.supersession": False, "assembly.token_budget": 192}, "ACCEPT_WITH_MONITOR"),
               record("r001-c03", {"retrieval.top_k": 7}, "ACCEPT"),            # the winner moved its path
               record("r001-c04", {"retrieval.weights.bm25": 1.25}, "FEATURE_FLAG"),  # not accepted
               record("r000-c00", {"retrieval.weights.bm25": 1.5}, "ACCEPT", round_no=0)]  # another round
    directions = runners_up(records, 1, current)
    assert [d.key for d in directions] == [
        "retrieval.intent_top_k_multiplier.single_hop::set:1.25",
        "assembly.token_budget::set:192&lifecycle.supersession::disable"]
    assert "r001-c01 was accepted in round 1" in directions[0].why and directions[0].symptom_key == "retrieval_gap/*"
    evolver = Evolver(f"sqlite:///{tmp_path / 'optuna.db'}", seed=0)
    for d, expected in zip(directions, (records[1].changes, records[2].changes)):
        proposal = evolver.propose(current, d)
        assert proposal.changes == expected
        validate_strategy(derive(current, proposal.changes))


def accepted(cid: str, changes: dict, delta: float, verdict: str = "ACCEPT", merged_from=None) -> CandidateResult:
    r = record(cid, changes, verdict)
    r.paired, r.merged_from = paired(delta), merged_from
    return CandidateResult(r, {}, None)


def test_accepts_side_by_side_merge_into_one_move_best_first(tmp_path, baseline_strategy):
    results = [accepted("r001-c00", {"retrieval.top_k": 6}, 0.019),
               accepted("r001-c01", {"retrieval.top_k": 7, "assembly.token_budget": 192}, 0.021),  # shares top_k
               accepted("r001-c02", {"retrieval.intent_top_k_multiplier.single_hop": 1.25}, 0.015),
               accepted("r001-c03", {"lifecycle.supersession": False}, 0.03, verdict="FEATURE_FLAG")]  # not accepted
    assert merged(results[:1], baseline_strategy) is None  # one accept: nothing to merge
    direction = merged(results, baseline_strategy)
    assert direction.merged_from == ("r001-c01", "r001-c02")  # c00 touches the better c01's path
    assert direction.key == ("assembly.token_budget::set:192&retrieval.top_k::set:7"
                             "&retrieval.intent_top_k_multiplier.single_hop::set:1.25")
    proposal = Evolver(f"sqlite:///{tmp_path / 'optuna.db'}", seed=0).propose(baseline_strategy, direction)
    assert proposal.changes == {**results[1].record.changes, **results[2].record.changes}
    validate_strategy(derive(baseline_strategy, proposal.changes))
    # A merge is not merged again; with it and one accept left there is nothing new to join.
    merge = accepted("r001-c04", proposal.changes, 0.04, merged_from=["r001-c01", "r001-c02"])
    assert merged([results[1], merge], baseline_strategy) is None
    assert dump_record(merge.record)["merged_from"] == ["r001-c01", "r001-c02"]
    assert "merged_from" not in dump_record(results[0].record)  # records of other candidates keep their stored form


def test_accepts_that_agree_on_a_shared_path_merge(baseline_strategy):
    """Both turn the turn layer on (the generalise night's round 1): joined, the shared path set once; an accept that
    sets a shared path to another value is left out."""
    results = [accepted("r001-c01", {"features.turn_layer": True, "features.turn_context": 1}, 0.11),
               accepted("r001-c02", {"features.turn_layer": True, "assembly.unit": "turn"}, 0.18),
               accepted("r001-c03", {"features.turn_context": 2}, 0.05)]
    direction = merged(results, baseline_strategy)
    assert direction.merged_from == ("r001-c02", "r001-c01")
    assert direction.key == "assembly.unit::set:turn&features.turn_layer::enable&features.turn_context::set:1"


def test_a_gain_blocked_by_cost_is_joined_with_the_first_relief_move_that_can_shrink_the_context(tmp_path,
                                                                                                  baseline_strategy):
    blocked = accepted("r004-c01", {"lifecycle.supersession": False}, 0.02, verdict="FEATURE_FLAG")
    blocked.record.decision = Decision(Verdict.FEATURE_FLAG, "cost: 160.2 context words per question exceed 160", "cost")
    relief = ("assembly.format::set:dialogue", "assembly.token_budget::decrease")
    effects = DimensionEffects()
    direction = relieved(blocked, relief, effects, baseline_strategy, CAP)
    assert direction.key == "lifecycle.supersession::disable&assembly.format::set:dialogue"
    assert "r004-c01 gained (delta +0.0200) but cost: 160.2" in direction.why
    proposal = Evolver(f"sqlite:///{tmp_path / 'optuna.db'}", seed=0).propose(baseline_strategy, direction)
    assert proposal.changes == {"lifecycle.supersession": False, "assembly.format": "dialogue"}
    # A relief move seen to grow the context is passed over; one the candidate itself moves is too.
    effects.record("assembly.format::set:dialogue", "kf_filtered/*", False, 0.0, growth=0.02)
    assert relieved(blocked, relief, effects, baseline_strategy, CAP).key == \
        "lifecycle.supersession::disable&assembly.token_budget::decrease"
    assert relieved(blocked, relief[1:], DimensionEffects(), derive(baseline_strategy, {"assembly.token_budget": 32}),
                    CAP) \
        is None  # at its schema minimum: nothing left to relieve with
    # Only the cost rule asks for relief.
    assert relieved(accepted("r004-c02", {"lifecycle.supersession": False}, 0.02), relief, effects,
                    baseline_strategy, CAP) is None


def test_a_budget_raised_past_the_word_cap_is_verified_again_at_the_budget_that_fits(baseline_strategy):
    """Budget 160 -> 192 packed 162.3 words against the parent's 136.8: the line through the two points meets 158
    words, 1.25 % under the 160-word cap, at budget 186."""
    current = derive(baseline_strategy, {"assembly.token_budget": 160})
    blocked = accepted("r004-c02", {"assembly.token_budget": 192, "assembly.format": "dialogue"}, 0.0335,
                       verdict="FEATURE_FLAG")
    blocked.record.decision = Decision(Verdict.FEATURE_FLAG, "cost: 162.3 context words per question exceed 160", "cost")
    blocked.record.cost = ContextCost(136.8, 162.3)
    relief = ("assembly.format::set:dialogue", "assembly.token_budget::decrease")
    direction = relieved(blocked, relief, DimensionEffects(), current, CAP)
    assert direction.key == "assembly.format::set:dialogue&assembly.token_budget::set:186"
    assert "verified again at budget 186, where the two measured points put 158.0 words" in direction.why
    # Nothing to fit: the parent already over the cap, no word cap, the budget lowered, a change without the budget.
    for cost, limits, changes in ((ContextCost(161.0, 170.0), CAP, blocked.record.changes),
                                  (ContextCost(136.8, 162.3), CostLimits(max_relative_increase=0.1),
                                   blocked.record.changes),
                                  (ContextCost(136.8, 162.3), CAP, {"assembly.token_budget": 128}),
                                  (ContextCost(136.8, 162.3), CAP, {"retrieval.top_k": 8})):
        r = replace(blocked.record, cost=cost, changes=changes)
        assert fitted(r, current, limits) is None


def _with_check(r: CandidateRecord, author: str, matches: bool) -> CandidateRecord:
    from evolve.verify.hypothesis import HypothesisCheck
    r.hypothesis = HypothesisCheck("retrieval_gap/*", "down", -0.05 if matches else 0.0, 100, 20, 15 if matches else 20,
                                   5 if matches else 0, 0, 0.06 if matches else 1.0, 0.2, author)
    return r


def test_a_gain_whose_planner_hypothesis_did_not_hold_refutes_the_mechanism_not_the_move():
    """The planner aimed top_k 5 -> 6 at retrieval_gap/*; it was accepted, but retrieval gaps did not fall. The move
    keeps its accept (reputation, reward); the mechanism is refuted for that symptom after refute_after such gains
    (the tree no longer selects it there, the planner's per-symptom penalty grows), and stays live for others. A
    matched gain clears the count; an engineer's check or a non-accept teaches nothing about mechanisms."""
    from evolve.improve.evolver import Proposal
    from evolve.improve.hypotheses import HypothesisTree
    from evolve.loop.learning import learn

    key = "retrieval.top_k::increase"
    effects, tree = DimensionEffects(), HypothesisTree(refute_after=2)

    def result(cid: str, verdict: str, author: str, matches: bool) -> CandidateResult:
        r = _with_check(record(cid, {"retrieval.top_k": 6}, verdict), author, matches)
        r.direction = {"key": key}
        # ``run`` only says the candidate was fully compared; learning reads the record alone
        return CandidateResult(r, {}, Proposal({"retrieval.top_k": 6}, key, "memevolve-retrieval", 0), run=object())

    learn([result("r001-c00", "ACCEPT", "planner", matches=False)], effects, tree)
    assert effects.get(key).accepts == 1 and effects.mismatches(key, "retrieval_gap/*") == 1
    assert tree.node(key, "retrieval_gap/*").mismatches == 1 and tree.status(key, "retrieval_gap/*") == "confirmed"
    learn([result("r002-c00", "ACCEPT", "planner", matches=False)], effects, tree)
    assert tree.status(key, "retrieval_gap/*") == "refuted" and effects.reputation(key) > 0
    assert tree.select([key], parent="retrieval_gap/*") == [] and tree.select([key], parent="kf_filtered/*") == [key]
    assert tree.to_dict()["parents"]["retrieval_gap/*"][key]["mismatches"] == 2
    assert DimensionEffects.from_dict(effects.to_dict()).mismatches(key, "retrieval_gap/*") == 2
    learn([result("r003-c00", "FEATURE_FLAG", "planner", matches=False),   # not accepted: reverts speak for it
           result("r003-c01", "ACCEPT", "engineer", matches=False)], effects, tree)
    assert effects.mismatches(key, "retrieval_gap/*") == 2
    learn([result("r004-c00", "ACCEPT", "planner", matches=True)], effects, tree)
    assert tree.status(key, "retrieval_gap/*") == "confirmed" and tree.node(key, "retrieval_gap/*").mismatches == 0


def test_a_policy_met_before_is_named_by_its_first_evaluation_else_its_first_refusal():
    from evolve.loop.candidate import policies_met
    from evolve.verify.outcomes import ProbeOutcome

    def met(cid: str, policy: str, by: str, screened: bool) -> CandidateRecord:
        r = CandidateRecord(cid, 1, {"key": "x"}, "retrieval_gap/*", "0" * 64, {}, policy_hash=policy, decided_by=by)
        r.probe = ProbeOutcome(100, 0.4, 0.4, 0.0) if screened else None
        return r

    history = [met("r001-c00", "a", "critic", False), met("r001-c01", "a", "decision", True),
               met("r002-c00", "a", "gate:novelty", False), met("r002-c01", "b", "critic", False),
               met("r003-c00", "b", "gate:novelty", False)]
    assert policies_met(history) == {"a": "evaluated in r001-c01", "b": "refused in r002-c01 by critic"}
