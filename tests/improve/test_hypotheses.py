import json
import math

import pytest

from evolve.improve.hypotheses import HypothesisTree, reward_of

A, B, C = "retrieval.top_k::increase", "retrieval.weights.bm25::increase", "expansion.keywords::enable"
P = "retrieval_gap/temporal"


def visit(tree, key, rewards, parent=P):
    for r in rewards:
        tree.update(key, r, 0.01, accepted=False, parent=parent)


def test_unvisited_first_in_input_order():
    tree = HypothesisTree()
    visit(tree, A, [1.0])
    assert tree.select([A, B, C], c=1.0, parent=P) == [B, C, A]
    assert tree.select([C, A, B], c=1.0, parent=P) == [C, B, A]


def test_ucb1_math_and_exploration_flip():
    tree = HypothesisTree()
    visit(tree, A, [0.0])  # 1 visit, mean 0
    visit(tree, B, [0.6] * 9)  # 9 visits, mean 0.6
    n = 10
    assert tree.parent_visits(P) == n
    assert tree.ucb(A, 1.0, P) == pytest.approx(0 + math.sqrt(math.log(n) / 1))
    assert tree.ucb(B, 1.0, P) == pytest.approx(0.6 + math.sqrt(math.log(n) / 9))
    assert tree.select([A, B], c=0.0, parent=P) == [B, A]  # pure exploitation
    assert tree.select([A, B], c=1.0, parent=P) == [A, B]  # exploration bonus of the rarely tried one wins


def test_parents_keep_separate_statistics():
    tree = HypothesisTree()
    visit(tree, A, [1.0], parent="kf_filtered/*")
    assert tree.select([A, B], c=1.0, parent=P) == [A, B]  # A unvisited under P
    assert tree.select([A, B], c=1.0, parent="kf_filtered/*") == [B, A]


def test_status_transitions():
    tree = HypothesisTree(refute_after=2)
    assert tree.status(A, P) == "active"
    assert tree.update(A, 1.0, 0.03, accepted=True, parent=P) == "confirmed"
    assert tree.update(A, 0.2, 0.005, accepted=False, parent=P) == "confirmed"  # a gain, not counted
    assert tree.update(A, 0.0, 0.0, accepted=False, parent=P) == "confirmed"
    assert tree.update(A, 0.0, -0.01, accepted=False, parent=P) == "refuted"
    assert tree.node(A, P).best_delta == pytest.approx(0.03)
    assert tree.select([A, B], c=1.0, parent=P) == [B]

    tree.mark_bound(B, True, parent=P)
    assert tree.status(B, P) == "exhausted"
    assert tree.select([A, B, C], c=1.0, parent=P) == [C]
    tree.mark_bound(B, False, parent=P)
    assert tree.status(B, P) == "active"


def test_accept_resets_no_gain_count():
    tree = HypothesisTree(refute_after=2)
    tree.update(A, 0.0, -0.01, accepted=False, parent=P)
    tree.update(A, 1.0, 0.02, accepted=True, parent=P)
    assert tree.update(A, 0.0, -0.01, accepted=False, parent=P) == "confirmed"


def test_exploration_coupled_to_actionability():
    tree = HypothesisTree(c0=2.0, window=4)
    assert tree.exploration() == pytest.approx(2.0)  # no verdicts yet: explore fully
    for verdict in (False, True, True, True):
        tree.record_critique(verdict)
    assert tree.actionability == pytest.approx(0.75)
    assert tree.exploration() == pytest.approx(0.5)
    tree.record_critique(True)  # window drops the oldest (False)
    assert tree.exploration() == pytest.approx(0.0)
    visit(tree, A, [0.0])
    visit(tree, B, [0.6] * 9)
    assert tree.select([A, B], parent=P) == [B, A]  # c = 0 now: exploit


def test_round_trip_and_bad_input():
    tree = HypothesisTree(c0=1.5, refute_after=3, window=5)
    tree.record_critique(True)
    tree.update(A, 1.0, 0.02, accepted=True, parent=P)
    tree.mark_bound(C, True, parent=P)
    data = json.loads(json.dumps(tree.to_dict()))
    assert data["parents"][P][A]["status"] == "confirmed"
    again = HypothesisTree.from_dict(data)
    assert again.to_dict() == tree.to_dict()
    assert again.exploration() == pytest.approx(0.0)
    del data["parents"][P][A]["visits"]
    with pytest.raises(ValueError, match="missing field 'visits'"):
        HypothesisTree.from_dict(data)
    with pytest.raises(ValueError, match="malformed direction key"):
        tree.update("top_k+", 1.0, 0.0, accepted=True)
    with pytest.raises(ValueError, match=r"reward .* must lie in \[0, 1\]"):
        tree.update(A, 2.0, 0.0, accepted=True)


def test_reward_of():
    assert reward_of(True, -0.01) == 1.0
    assert reward_of(False, -0.02) == 0.0
    assert reward_of(False, 0.025) == pytest.approx(0.25)
    assert reward_of(False, 0.5) == 0.5
