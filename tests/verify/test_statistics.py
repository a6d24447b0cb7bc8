"""Paired comparison: alignment, McNemar, bootstrap CI, per-category rows, serialisation."""
from __future__ import annotations

import json
from math import comb

import numpy as np
import pytest

from evolve.ops.contract_cases import outcomes
from evolve.verify.statistics import PairedReport, paired_comparison


def test_counts_accuracies_and_id_lists():
    base, cand = outcomes([("temporal", False, True, 3), ("temporal", True, False, 1),
                           ("single_hop", True, True, 4), ("single_hop", False, False, 2)])
    r = paired_comparison(base, cand, n_resamples=200)
    assert r.n == 10
    assert r.acc_baseline == pytest.approx(0.5) and r.acc_candidate == pytest.approx(0.7)
    assert r.delta == pytest.approx(0.2)
    assert r.improved == ["q0000", "q0001", "q0002"] and r.regressed == ["q0003"]
    assert len(r.both_correct) == 4 and len(r.both_wrong) == 2
    assert r.per_category == {
        "single_hop": {"n": 6, "acc_baseline": pytest.approx(4 / 6), "acc_candidate": pytest.approx(4 / 6),
                       "delta": pytest.approx(0.0), "improved": 0, "regressed": 0, "mcnemar_p": 1.0},
        "temporal": {"n": 4, "acc_baseline": pytest.approx(0.25), "acc_candidate": pytest.approx(0.75),
                     "delta": pytest.approx(0.5), "improved": 3, "regressed": 1, "mcnemar_p": pytest.approx(0.625)},
    }


def test_alignment_by_question_id():
    base, cand = outcomes([("temporal", True, True, 5)])
    base["only_base"] = {"correct": True, "category": "temporal"}
    cand["only_cand"] = {"correct": False, "category": "temporal"}
    r = paired_comparison(base, cand, n_resamples=100)
    assert r.n == 5
    assert r.missing_in_candidate == ["only_base"] and r.missing_in_baseline == ["only_cand"]
    assert r.acc_baseline == 1.0 and r.acc_candidate == 1.0


def test_mcnemar_matches_hand_computed_binomial():
    # 8 improved, 2 regressed: two-sided exact p = 2 * P(X <= 2), X ~ Bin(10, 0.5) = 2 * 56 / 1024
    base, cand = outcomes([("multi_hop", False, True, 8), ("multi_hop", True, False, 2),
                           ("multi_hop", True, True, 30)])
    r = paired_comparison(base, cand, n_resamples=200)
    expected = 2 * sum(comb(10, k) for k in range(3)) / 2**10
    assert expected == 0.109375
    assert r.mcnemar_p == pytest.approx(expected, abs=1e-12)


def test_mcnemar_is_one_without_discordant_pairs():
    base, cand = outcomes([("temporal", True, True, 6), ("temporal", False, False, 4)])
    r = paired_comparison(base, cand, n_resamples=100)
    assert r.mcnemar_p == 1.0
    assert (r.ci_low, r.ci_high, r.ci_method) == (0.0, 0.0, "constant")
    assert not r.significant


def test_identical_differences_give_a_point_interval():
    base, cand = outcomes([("temporal", False, True, 12)])
    r = paired_comparison(base, cand)
    assert (r.ci_low, r.ci_high, r.ci_method) == (1.0, 1.0, "constant")
    assert r.mcnemar_p == pytest.approx(2 / 2**12)
    assert r.significant


def test_bootstrap_ci_covers_true_delta_and_is_seeded():
    rng = np.random.default_rng(7)
    true_delta, covered, trials = 0.1, 0, 40
    for trial in range(trials):
        base_correct = rng.random(300) < 0.5
        cand_correct = np.where(base_correct, rng.random(300) < 0.9, rng.random(300) < 0.3)
        # P(cand) = 0.5 * 0.9 + 0.5 * 0.3 = 0.6, so the population delta is 0.1
        base = {f"q{i}": {"correct": bool(b), "category": "c"} for i, b in enumerate(base_correct)}
        cand = {f"q{i}": {"correct": bool(c), "category": "c"} for i, c in enumerate(cand_correct)}
        r = paired_comparison(base, cand, n_resamples=1000, seed=trial)
        assert r.ci_method == "BCa"
        assert r.ci_low <= r.delta <= r.ci_high
        covered += r.ci_low <= true_delta <= r.ci_high
    assert covered >= 34  # nominal 95 % of 40


def test_bootstrap_is_deterministic_for_a_seed():
    base, cand = outcomes([("a", False, True, 61), ("a", True, False, 37),
                           ("a", True, True, 211), ("a", False, False, 93)])
    first = paired_comparison(base, cand, seed=3)
    assert paired_comparison(base, cand, seed=3) == first
    assert len({(r.ci_low, r.ci_high) for r in (paired_comparison(base, cand, seed=s) for s in range(8))}) > 1
    assert first.ci_low < first.delta < first.ci_high


def test_percentile_fallback_when_bca_is_degenerate():
    # one discordant pair and 3 resamples: some seeds draw no resample below the estimate -> BCa is NaN
    base, cand = outcomes([("a", False, True, 1), ("a", False, False, 39)])
    methods = {paired_comparison(base, cand, n_resamples=3, seed=s).ci_method for s in range(100)}
    assert methods == {"BCa", "percentile"}
    for s in range(100):
        r = paired_comparison(base, cand, n_resamples=3, seed=s)
        assert np.isfinite(r.ci_low) and np.isfinite(r.ci_high)



def test_the_bca_interval_is_scipys_with_the_jackknife_in_closed_form():
    """The levels equal those of a brute-force jackknife (every leave-one-out mean), and the interval agrees with
    scipy.stats.bootstrap's BCa to within one step of the lattice the mean difference lives on."""
    import warnings

    from scipy import stats

    from evolve.verify.statistics import _bca_levels, _bootstrap_ci

    rng = np.random.default_rng(5)
    diffs = rng.choice([-1.0, 0.0, 1.0], p=[0.15, 0.6, 0.25], size=60)
    values, counts = np.unique(diffs, return_counts=True)
    theta_b = rng.choice(diffs, size=(500, len(diffs))).mean(axis=1)
    loo = (diffs.sum() - diffs) / (len(diffs) - 1)
    u = (len(diffs) - 1) * (loo.mean() - loo)
    acceleration = (u**3).sum() / (6 * ((u**2).sum()) ** 1.5)
    z0 = stats.norm.ppf(((theta_b < diffs.mean()).sum() + (theta_b <= diffs.mean()).sum()) / 1000)
    z = z0 + stats.norm.ppf([0.025, 0.975])
    expected = stats.norm.cdf(z0 + z / (1 - acceleration * z))
    assert _bca_levels(theta_b, diffs.mean(), values, counts, 0.025) == pytest.approx(expected, abs=1e-12)

    base = (rng.random(200) < 0.5).astype(float)
    cand = np.where(base == 1, rng.random(200) < 0.85, rng.random(200) < 0.35).astype(float)
    low, high, method = _bootstrap_ci(cand, base, confidence=0.95, n_resamples=20_000, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = stats.bootstrap((cand, base), lambda c, b, axis=-1: np.mean(c - b, axis=axis), paired=True,
                                    vectorized=True, n_resamples=20_000, method="BCa", rng=0).confidence_interval
    assert method == "BCa"
    assert (low, high) == pytest.approx((reference.low, reference.high), abs=1 / 200 + 1e-9)


def test_the_bootstrap_memory_grows_linearly_with_the_samples():
    """The jackknife once held n x (n - 1) values and the resamples n_resamples x n: 4,000 samples took hundreds of
    MiB. Now a few MiB: the resamples are counts of the distinct differences."""
    import tracemalloc

    base, cand = outcomes([("a", False, True, 700), ("a", True, False, 500), ("a", True, True, 1800),
                           ("a", False, False, 1000)])
    paired_comparison(base, cand, n_resamples=1_000)  # imports and caches first
    tracemalloc.start()
    try:
        report = paired_comparison(base, cand, n_resamples=1_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.n == 4_000 and report.ci_method == "BCa"
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB for 4,000 samples"


def test_report_round_trips_through_json():
    base, cand = outcomes([("temporal", False, True, 5), ("single_hop", True, False, 2), ("single_hop", True, True, 9)])
    r = paired_comparison(base, cand, n_resamples=300)
    text = json.dumps(r.to_dict(), allow_nan=False)
    assert PairedReport.from_dict(json.loads(text)) == r


def test_empty_alignment_is_serialisable():
    base, _ = outcomes([("temporal", True, True, 2)])
    r = paired_comparison(base, {})
    assert r.n == 0 and r.delta is None and r.ci_method == "none" and r.mcnemar_p == 1.0
    assert r.missing_in_candidate == ["q0000", "q0001"]
    json.dumps(r.to_dict(), allow_nan=False)


def test_from_dict_names_missing_fields():
    data = paired_comparison(*outcomes([("a", True, True, 2)]), n_resamples=50).to_dict()
    del data["mcnemar_p"], data["per_category"]
    with pytest.raises(ValueError, match="mcnemar_p, per_category"):
        PairedReport.from_dict(data)


def test_bad_outcomes_are_named():
    base, cand = outcomes([("a", True, True, 2)])
    cand["q0001"] = {"correct": 1, "category": "a"}
    with pytest.raises(ValueError, match=r"candidate\['q0001'\]\.correct"):
        paired_comparison(base, cand)
    cand["q0001"] = {"correct": True, "category": "b"}
    with pytest.raises(ValueError, match=r"candidate\['q0001'\]\.category.*differs"):
        paired_comparison(base, cand)
    with pytest.raises(ValueError, match="alpha"):
        paired_comparison(base, base, alpha=0)
