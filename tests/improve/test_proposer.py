"""The round plan: one queue over runners-up, the advisor, the planner and the in-round follow-ups, in one order and
with one de-duplication rule."""
from evolve.improve.digest import Digest
from evolve.improve.planner import Direction
from evolve.improve.proposer import RULED, RoundPlan
from evolve.strategy.moves import Move

DIGEST = Digest(10, 0, (), (), {})


def d(key: str, symptom: str = "retrieval_gap/*", priority: float = 1.0) -> Direction:
    return Direction(Move.parse(key), symptom, priority, "test")


class Fixed:
    """A proposer that returns a fixed ranking and remembers what it was asked for."""

    def __init__(self, *keys: str):
        self.directions, self.asked = [d(k) for k in keys], []

    def plan(self, digest: Digest, strategy: dict, n: int, *, words: float | None = None) -> list[Direction]:
        self.asked.append((n, words))
        return self.directions[:n]


def drain(plan: RoundPlan) -> list[str]:
    out = []
    while (direction := plan.next()) is not None:
        out.append(direction.key)
    return out


def test_the_plan_puts_runners_up_first_then_the_advisor_then_the_planner_without_duplicates():
    planner = Fixed("a.x::increase", "b.y::decrease", "c.z::increase", "d.w::enable", "e.v::increase")
    advisor = Fixed("b.y::decrease", "a.x::decrease", "f.u::set:3")
    plan = RoundPlan(planner, advisor, max_directions=4)
    carried = [d("c.z::set:5&g.t::disable", priority=RULED)]
    queue = plan.plan(DIGEST, {}, 2, words=120.0, carried=carried)
    # The planner is asked for at least max_directions (and three per candidate), the advisor for n.
    assert planner.asked == [(6, 120.0)] and advisor.asked == [(2, 120.0)]
    # a.x::decrease stays (another key on the same path); b.y::decrease from the planner is the advisor's already;
    # c.z::increase moves a path the runner-up re-applies.
    assert [x.key for x in queue] == ["c.z::set:5&g.t::disable", "b.y::decrease", "a.x::decrease", "a.x::increase",
                                      "d.w::enable", "e.v::increase"]
    assert drain(plan) == [x.key for x in queue]


def test_relief_goes_to_the_head_newest_first_and_a_merge_takes_the_next_slot():
    plan = RoundPlan(Fixed("a.x::increase", "b.y::increase", "c.z::increase"))
    plan.plan(DIGEST, {}, 1)
    assert plan.next().key == "a.x::increase"
    plan.follow_up(relief=d("a.x::set:2&r.s::decrease"))
    plan.follow_up(relief=d("a.x::set:3&r.s::decrease"))
    assert plan.next().key == "a.x::set:3&r.s::decrease"
    plan.follow_up(merge=d("a.x::set:3&b.y::set:1"))
    assert plan.next().key == "a.x::set:3&b.y::set:1"  # the merge before the waiting relief
    # The same merge offered again, and a relief already queued, are not admitted twice.
    plan.follow_up(relief=d("a.x::set:2&r.s::decrease"), merge=d("a.x::set:3&b.y::set:1"))
    assert drain(plan) == ["a.x::set:2&r.s::decrease", "b.y::increase", "c.z::increase"]


def test_a_merge_needs_a_waiting_direction_and_follow_ups_may_move_a_runner_ups_path():
    plan = RoundPlan(Fixed("b.y::increase"))
    plan.plan(DIGEST, {}, 1, carried=[d("a.x::set:4", priority=RULED)])
    assert plan.next().key == "a.x::set:4"
    plan.follow_up(relief=d("a.x::set:4&r.s::decrease"))  # a runner-up's path claims only the start plan
    assert plan.next().key == "a.x::set:4&r.s::decrease"
    assert plan.next().key == "b.y::increase"
    plan.follow_up(merge=d("a.x::set:4&b.y::set:2"))
    assert plan.next() is None  # nothing waits: the round ends, merge or not
    # A new plan starts from an empty queue and forgets the last round's keys.
    plan.plan(DIGEST, {}, 1)
    assert drain(plan) == ["b.y::increase"]
