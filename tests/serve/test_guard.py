"""The canary guard's test: the contract's harm rule at fixed looks on the discordant pairs, each at alpha / looks."""
from __future__ import annotations

import pytest

from evolve.serve.guard import CanaryGuard, GuardPlan, Tally, harm_at
from evolve.verify.statistics import paired_comparison


def _feed(guard: CanaryGuard, harmed: int, helped: int, concordant: int = 0) -> list:
    pairs = [(True, True)] * concordant + [(True, False)] * harmed + [(False, True)] * helped
    return [stop for pair in pairs if (stop := guard.add(*pair)) is not None]


def test_a_plainly_worse_canary_is_stopped_at_the_first_look_and_only_once():
    guard = CanaryGuard()
    stops = _feed(guard, harmed=15, helped=0, concordant=30)
    assert len(stops) == 1 and stops[0].look == 10
    assert (stops[0].tally.harmed, stops[0].tally.helped, stops[0].tally.pairs) == (10, 0, 40)
    assert stops[0].level == pytest.approx(0.05 / 2 / 7) and stops[0].ci[1] < 0 and stops[0].category is None
    assert guard.tally.pairs == 40  # pairs after the stop are not counted
    assert "significant harm at the look of 10 discordant pairs" in stops[0].reason()


def test_a_canary_as_good_as_serving_is_never_stopped_and_the_horizon_ends_the_looks():
    guard = CanaryGuard(GuardPlan(looks=(10, 20)))
    pairs = [(True, False), (False, True)] * 15
    assert [guard.add(*p) for p in pairs] == [None] * 30
    assert guard.done and guard.status()["looks_made"] == 2


def test_nine_of_ten_harmed_is_not_enough_at_the_first_look_but_ten_of_ten_is():
    """At alpha 0.05, half of it pooled over 7 looks, a look's level is 0.00357: McNemar p of 9 vs 1 is 0.0215, of
    10 vs 0 0.00195."""
    level = GuardPlan().level
    assert harm_at(Tally(both_good=50, harmed=9, helped=1), level, 10) is None
    assert harm_at(Tally(both_good=50, harmed=10), level, 10) is not None
    assert harm_at(Tally(both_good=50, helped=10), level, 10) is None  # a better canary is never stopped


@pytest.mark.parametrize("tally", [Tally(both_good=30, both_bad=5, harmed=17, helped=3),
                                   Tally(both_good=2000, harmed=17, helped=3), Tally(harmed=20, helped=20)])
def test_the_stop_is_the_contracts_harm_rule(tally):
    level = 0.01
    ids = [f"q{i}" for i in range(tally.pairs)]
    outcomes = ([(True, True)] * tally.both_good + [(False, False)] * tally.both_bad + [(True, False)] * tally.harmed
                + [(False, True)] * tally.helped)
    serving = {q: {"correct": s, "category": "canary"} for q, (s, _) in zip(ids, outcomes)}
    canary = {q: {"correct": c, "category": "canary"} for q, (_, c) in zip(ids, outcomes)}
    expected = paired_comparison(serving, canary, alpha=level, confidence=1 - level).brief().harms(level)
    assert (harm_at(tally, level, tally.discordant) is not None) == expected


def test_a_plan_refuses_levels_and_looks_that_are_not_a_test():
    with pytest.raises(ValueError, match="alpha"):
        GuardPlan(alpha=1.0)
    with pytest.raises(ValueError, match="looks"):
        GuardPlan(looks=(20, 10))


def test_a_canary_harmful_in_one_category_only_is_stopped_by_that_categorys_log():
    """Temporal pairs all harmed, single-hop ones all helped: pooled the canary is even, in temporal it is not."""
    guard = CanaryGuard()
    stops = []
    for _ in range(40):
        for category, pair in (("temporal", (True, False)), ("single_hop", (False, True))):
            if (stop := guard.add(*pair, source=category, category=category)) is not None:
                stops.append(stop)
    assert len(stops) == 1 and stops[0].category == "temporal" and stops[0].look == 20
    assert stops[0].level == pytest.approx(0.05 / 2 / 4 / 7)  # Holm's first step over 4 categories, 7 looks
    assert "significant harm in category temporal" in stops[0].reason()
    status = guard.status()
    assert status["categories"]["temporal"]["harmed"] == 20 and status["stop"]["category"] == "temporal"
    assert CanaryGuard(GuardPlan(categories=())).plan.level == pytest.approx(0.05 / 7)  # pooled only: all of alpha


def test_a_category_the_plan_does_not_test_apart_counts_pooled_only():
    guard = CanaryGuard()
    for _ in range(30):
        guard.add(True, False, source="answers", category="adversarial")
    assert guard.stop is not None and guard.stop.category is None
    assert all(c["pairs"] == 0 for c in guard.status()["categories"].values())
