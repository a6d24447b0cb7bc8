"""experiments/bench/validity.py: the per-question values, a move's delta under each outcome and the agreement of
two sets of deltas."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from evolve.observe.trace import Trace

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "bench" / "validity.py"


@pytest.fixture(scope="module")
def validity():
    spec = importlib.util.spec_from_file_location("validity", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _trace(qid: str, category: str, packed: list[dict], in_evidence: bool | None) -> Trace:
    return Trace(qid, category, gold_answer="pottery workshop in Lisbon", gold_evidence=["D1:1"], evidence_known=True,
                 packed=packed, answer_in_evidence=in_evidence, all_evidence_packed=bool(packed))


def test_coverage_is_the_share_of_answer_words_packed_from_evidence(validity):
    packed = [{"text": "Ana went to a pottery workshop", "source_ids": ["D1:1"]},
              {"text": "Lisbon is lovely", "source_ids": ["D2:5"]}]  # not evidence: does not count
    assert validity.coverage(_trace("c/q0", "single_hop", packed, False)) == pytest.approx(2 / 3)
    assert validity.coverage(_trace("c/q0", "single_hop", [], None)) is None
    unscored = _trace("c/q1", "adversarial", packed, True)
    unscored.scored = False  # left out of every outcome, as the loop's objectives leave it out
    assert validity.record(unscored, []) == {"probe": False, "sets": [], "answer": None, "coverage": None,
                                             "evidence": None}


def test_delta_pairs_questions_per_outcome(validity):
    packed = [{"text": "pottery workshop Lisbon", "source_ids": ["D1:1"]}]
    parent = {"q0": validity.record(_trace("c/q0", "single_hop", [], False), []),
              "p0": validity.record(_trace("c/p0", "probe_image", [], False), ["probes"]),
              "p1": validity.record(_trace("c/p1", "probe_image", [], False), ["probes (drop trivial)"])}
    child = {"q0": validity.record(_trace("c/q0", "single_hop", packed, True), []),
             "p0": validity.record(_trace("c/p0", "probe_image", [], False), ["probes"]),
             "p1": validity.record(_trace("c/p1", "probe_image", packed, True), ["probes (drop trivial)"])}
    assert validity.delta(parent, child, "answer") == 1.0  # labelled only
    assert validity.delta(parent, child, "probes") == 0.0  # the default probes only
    assert validity.delta(parent, child, "probes (drop trivial)") == 1.0  # the filtered selection only
    assert validity.delta(parent, child, "probes+labelled") == 0.5  # labelled and the default probes
    assert validity.delta(parent, child, "coverage") == 1.0


def test_agreement_ranks_and_signs(validity):
    rho, sign, n = validity.agreement(np.array([0.1, -0.2, 0.0, 0.3]), np.array([0.2, -0.1, 0.05, 0.1]))
    assert rho == pytest.approx(0.8) and (sign, n) == (1.0, 3)
    rho, sign, n = validity.agreement(np.array([0.1, -0.2, 0.3]), np.array([-0.1, 0.2, -0.3]))
    assert rho == pytest.approx(-1.0) and sign == 0.0
