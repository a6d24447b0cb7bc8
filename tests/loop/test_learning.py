"""What a round teaches: accepted runners-up come back as exact moves on the new current strategy."""
from __future__ import annotations

from evolve.improve.evolver import Evolver
from evolve.loop.learning import runners_up
from evolve.loop.record import CandidateRecord
from evolve.strategy.artifact import derive, validate_strategy


def record(cid: str, changes: dict, verdict: str, applied: bool = False, round_no: int = 1) -> CandidateRecord:
    r = CandidateRecord(cid, round_no, {"key": "x"}, "retrieval_gap/*", "0" * 64, {}, changes=changes, applied=applied,
                        paired={"delta": 0.02})
    r.decision = {"verdict": verdict, "rule": "accept", "reason": "test"}
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
