"""The power check: the fewest improved questions an exact McNemar test can call significant, and the warnings of a
benchmark that can never yield an accept."""
from __future__ import annotations

import pytest
from scipy import stats

from evolve.verify.power import PowerCheck, min_improved
from evolve.verify.statistics import paired_comparison


@pytest.mark.parametrize("alpha, k", [(0.05, 6), (0.01, 8), (0.5, 2), (0.25, 3)])
def test_min_improved_is_the_first_k_whose_best_case_is_significant(alpha, k):
    assert min_improved(alpha) == k
    assert stats.binomtest(k, k, 0.5).pvalue <= alpha < stats.binomtest(k - 1, k - 1, 0.5).pvalue


def test_the_paired_comparison_agrees_at_the_threshold():
    def compare(n: int, improved: int) -> float:
        """p of a candidate that fixes the first ``improved`` of ``n`` questions and breaks none."""
        base = {f"q{i}": {"correct": i >= improved, "category": "single_hop"} for i in range(n)}
        cand = {q: {**v, "correct": True} for q, v in base.items()}
        return paired_comparison(base, cand).mcnemar_p

    k = min_improved(0.05)
    assert compare(40, k) <= 0.05 < compare(40, k - 1)


def test_a_benchmark_with_too_few_failures_warns():
    check = PowerCheck.of(10, 0.05, 10, 80, 0.02)
    assert check.min_improved == 6 and check.min_delta_pp == pytest.approx(60.0)
    assert [w.split(";")[0] for w in check.warnings()] == [
        "probe_size 80 is larger than the 10 scored questions"]
    failing3 = PowerCheck(**{**check.__dict__, "failing": 3})
    warning = failing3.warnings()[-1]
    assert warning.startswith("benchmark too small to ever accept: only 3 of 10 question(s) fail, and fixing all of "
                              "them gives p = 0.25 > alpha 0.05 (needs 6)")
    assert failing3.to_dict()["warnings"][-1] == warning
    assert PowerCheck(**{**check.__dict__, "failing": 6}).warnings()[-1].startswith("probe_size")


def test_without_required_significance_only_the_probe_is_stated():
    check = PowerCheck.of(3, 0.05, 3, 3, 0.02, require_significance=False)
    assert check.warnings() == [] and check.min_delta_pp is None


def test_the_probe_grain_and_tolerance_are_described():
    check = PowerCheck.of(420, 0.05, 80, 80, 0.02)
    line = check.describe()
    assert line == ("power: 420 scored questions; a significant gain needs >= 6 improved questions with none "
                    "regressed (p = 2*0.5^6 <= alpha 0.05): at least +1.4 pp; probe 80 questions (1 question = "
                    "1.2 pp; rejects a net loss of more than 1)")
