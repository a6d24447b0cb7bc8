"""The night's confirmation holds the contract's category floor on its held-back questions: a final that gains
overall while one category falls significantly beyond its epsilon is refused; a drop within the noise is not."""
from __future__ import annotations

from evolve.verify.confirmation import confirm
from evolve.verify.decision import AcceptanceRules


def _outcomes(rows: list[tuple[str, bool, bool, int]]) -> tuple[dict, dict]:
    """``(category, start correct, final correct, count)`` rows as the two outcome maps."""
    start, final, i = {}, {}, 0
    for category, s, f, count in rows:
        for _ in range(count):
            start[f"q{i}"], final[f"q{i}"] = ({"correct": s, "category": category}, {"correct": f, "category": category})
            i += 1
    return start, final


def _confirm(rows, floors):
    return confirm(*_outcomes(rows), alpha=0.05, start_hash="s", final_hash="f", words=(100.0, 120.0), floors=floors)


def test_a_gain_that_sinks_a_category_is_refused_and_one_within_the_noise_is_confirmed():
    sinks = [("single_hop", False, True, 50), ("single_hop", True, True, 50), ("temporal", True, False, 25),
             ("temporal", True, True, 5)]
    assert _confirm(sinks, None).verdict == "CONFIRMED"  # the overall test alone: +25 net
    refused = _confirm(sinks, AcceptanceRules(alpha=0.2))  # the search's alpha; the floor is tested at the night's
    assert refused.verdict == "REFUSED" and refused.reason.startswith("category floor: temporal (Holm-adjusted p=")
    noise = [("single_hop", False, True, 50), ("single_hop", True, True, 50), ("temporal", True, False, 2),
             ("temporal", True, True, 28)]
    assert _confirm(noise, AcceptanceRules(alpha=0.2)).verdict == "CONFIRMED"  # p of 2 down, 0 up: 0.5
    exempt = _confirm(sinks, AcceptanceRules(alpha=0.2, floor_exempt=["temporal"]))
    assert exempt.verdict == "CONFIRMED"
