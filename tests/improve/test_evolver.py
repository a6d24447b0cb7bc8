import optuna
import pytest
from optuna.trial import TrialState

from evolve.improve.evolver import BLIND_STUDY, Evolver, EvolverError
from evolve.strategy.invariants import repair
from evolve.improve.planner import Direction
from evolve.data import BASELINE_PATH
from evolve.strategy.artifact import StrategyError, derive, load_strategy, validate_strategy
from evolve.strategy.schema import evolvable_dimensions
from evolve.strategy.moves import Move
from evolve.strategy.paths import get_path, set_path, value_at

DIMS = evolvable_dimensions()


@pytest.fixture(scope="module")
def baseline():
    return load_strategy(BASELINE_PATH)


def direction(key: str) -> Direction:
    return Direction(Move.parse(key), "retrieval_gap/*", 1.0, "test")


def url(tmp_path, name="optuna.db") -> str:
    return f"sqlite:///{tmp_path / name}"


@pytest.mark.filterwarnings("error::UserWarning")  # e.g. optuna's changing-distribution warnings
def test_directed_proposals_stay_in_range_and_direction(tmp_path, baseline):
    evolver = Evolver(url(tmp_path), seed=1)
    near_top = set_path(set_path(baseline, "retrieval.candidate_pool", 100), "retrieval.top_k", 97)
    cases = [(baseline, "retrieval.top_k::increase"), (near_top, "retrieval.top_k::increase"),
             (baseline, "assembly.token_budget::decrease"), (baseline, "extraction.dedup_threshold::increase"),
             (baseline, "retrieval.weights.vector::decrease"),
             (baseline, "retrieval.time_decay.half_life_days::increase")]
    for strategy, key in cases:
        dim = DIMS[key.split("::")[0]]
        current = get_path(strategy, dim.path)
        for i in range(8):
            proposal = evolver.propose(strategy, direction(key))
            (path, value), = proposal.changes.items()
            assert path == dim.path and proposal.key == key
            if key.endswith("increase"):
                assert current < value <= min(dim.high, current + dim.max_step)
            else:
                assert max(dim.low, current - dim.max_step) <= value < current
            assert isinstance(value, int) == (dim.kind == "integer")
            validate_strategy(derive(strategy, proposal.changes))
            evolver.tell(proposal, 0.01 * (i % 3))
    assert evolver.study("memevolve-retrieval").trials[-1].state == TrialState.COMPLETE


def test_deterministic_moves_and_impossible_directions(tmp_path, baseline):
    evolver = Evolver(url(tmp_path), seed=1)
    supplement = evolver.propose(baseline, direction("extraction.supplement::enable"))
    assert supplement.changes == {"extraction.supplement": True}
    span = evolver.propose(baseline, direction("answering.span::set:sentence"))
    assert span.changes == {"answering.span": "sentence"} and span.study == "memevolve-answering"
    before = len(evolver.study("memevolve-retrieval").trials)
    with pytest.raises(EvolverError, match="expansion.dates::enable: no legal move"):
        evolver.propose(baseline, direction("expansion.dates::enable"))
    with pytest.raises(EvolverError, match="rerank.top_n::increase: no legal move"):  # top_n == top_k
        evolver.propose(baseline, direction("retrieval.rerank.top_n::increase"))
    with pytest.raises(EvolverError, match="'increase' is not legal for a boolean dimension"):
        evolver.propose(baseline, direction("expansion.dates::increase"))
    assert len(evolver.study("memevolve-retrieval").trials) == before
    evolver.fail(span)
    assert evolver.study("memevolve-answering").trials[span.trial_number].state == TrialState.FAIL
    with pytest.raises(EvolverError, match="must be finite"):
        evolver.tell(span, float("nan"))


def test_same_seed_same_proposals(tmp_path, baseline):
    runs = []
    for name in ("a.db", "b.db"):
        evolver = Evolver(url(tmp_path, name), seed=7)
        seq = []
        for i in range(6):
            p = evolver.propose(baseline, direction("assembly.token_budget::increase"))
            evolver.tell(p, 0.01 * i)
            seq.append(p.changes["assembly.token_budget"])
        runs.append(seq)
    assert runs[0] == runs[1]
    assert len(set(runs[0])) > 1


def test_search_state_survives_reopen(tmp_path, baseline):
    first = Evolver(url(tmp_path), seed=3)
    told = []
    for i in range(3):
        p = first.propose(baseline, direction("retrieval.top_k::increase"))
        first.tell(p, 0.02 * i)
        told.append((p.trial_number, p.changes["retrieval.top_k"], 0.02 * i))
    pending = first.propose(baseline, direction("retrieval.top_k::increase"))
    del first
    second = Evolver(url(tmp_path), seed=3)
    trials = second.study("memevolve-retrieval").trials
    assert [(t.number, t.user_attrs["to"], t.value) for t in trials[:3]] == told
    assert trials[3].state == TrialState.RUNNING
    second.tell(pending, 0.05)  # a proposal from before the restart can still be told
    assert optuna.load_study(study_name="memevolve-retrieval", storage=url(tmp_path)).trials[3].value == 0.05
    assert second.propose(baseline, direction("retrieval.top_k::increase")).trial_number == 4


def test_blind_trials_always_legal(tmp_path, baseline):
    evolver = Evolver(url(tmp_path), seed=11, n_startup_trials=4)
    repaired = 0
    for i in range(8):  # 4 random start-up trials, then TPE
        p = evolver.blind_trial(baseline)
        assert set(p.changes) == {path for path, dim in DIMS.items() if dim.kind != "prompt"}  # prompts have no range
        assert p.study == BLIND_STUDY
        child = validate_strategy(derive(baseline, p.changes))
        for path, dim in DIMS.items():
            if dim.kind in ("integer", "number"):
                assert dim.low <= get_path(child, path) <= dim.high
        evolver.tell(p, (i % 5) / 10)
        repaired += bool(evolver.study(BLIND_STUDY).trials[p.trial_number].user_attrs["repaired"])
    assert repaired > 0  # invariants such as rerank.top_n <= top_k needed repair at least once


def test_repair_fixes_every_invariant(baseline):
    full = {path: value_at(baseline, path) for path in DIMS}
    full.update({"extraction.window_size": 3, "extraction.window_overlap": 9, "retrieval.top_k": 20,
                 "retrieval.candidate_pool": 5, "retrieval.rerank.top_n": 50, "retrieval.weights.bm25": 0.0,
                 "retrieval.weights.vector": 0.0, "retrieval.weights.subquery": 0.0,
                 "assembly.reserved.profile": 0.5, "assembly.reserved.corrections": 0.5})
    with pytest.raises(StrategyError):
        validate_strategy(derive(baseline, full))
    fixed = repair(baseline, full, {path: dim.step for path, dim in DIMS.items()})
    validate_strategy(derive(baseline, fixed))
    assert {p: v for p, v in fixed.items() if v != full[p]} == {
        "extraction.window_overlap": 2, "retrieval.candidate_pool": 20, "retrieval.rerank.top_n": 20,
        "retrieval.weights.bm25": 0.25, "assembly.reserved.corrections": 0.45}


def test_first_move_is_smallest_step_and_rounds_replay_after_a_crash(tmp_path, baseline):
    key = "retrieval.top_k::increase"
    first = Evolver(url(tmp_path), seed=3)
    first.begin_round(1, [])
    p1 = first.propose(baseline, direction(key))
    assert p1.changes == {"retrieval.top_k": baseline["retrieval"]["top_k"] + 1}
    pending = [{"study": p1.study, "trial": p1.trial_number, "value": 0.04}]
    first.apply_pending(pending)
    first.begin_round(2, pending)  # applying the same results twice is a no-op
    crashed = first.propose(baseline, direction("retrieval.rrf_kappa::increase"))  # never told: process "dies"

    resumed = Evolver(url(tmp_path), seed=3)
    resumed.begin_round(2, pending)
    trials = resumed.study(p1.study).get_trials(deepcopy=False)
    assert trials[p1.trial_number].value == pytest.approx(0.04)
    assert trials[crashed.trial_number].state == TrialState.FAIL
    again = resumed.propose(baseline, direction("retrieval.rrf_kappa::increase"))

    fresh = Evolver(url(tmp_path, "other.db"), seed=3)
    fresh.begin_round(1, [])
    p = fresh.propose(baseline, direction(key))
    fresh.apply_pending([{"study": p.study, "trial": p.trial_number, "value": 0.04}])
    fresh.begin_round(2, [])
    assert fresh.propose(baseline, direction("retrieval.rrf_kappa::increase")).changes == again.changes


# ---------------------------------------------------------------- coupled moves and step growth


def coupled(key: str) -> Direction:
    return Direction(Move.parse(key), "kf_filtered/*", 1.0, "test")


COUPLED = "retrieval.top_k::increase&assembly.token_budget::increase"


def test_a_coupled_move_moves_both_paths_by_the_same_number_of_steps(tmp_path, baseline):
    evolver = Evolver(url(tmp_path), seed=3)
    top_k, budget = DIMS["retrieval.top_k"], DIMS["assembly.token_budget"]
    steps = set()
    for i in range(8):
        proposal = evolver.propose(baseline, coupled(COUPLED))
        assert set(proposal.changes) == {"retrieval.top_k", "assembly.token_budget"} and proposal.key == COUPLED
        k_top = (proposal.changes["retrieval.top_k"] - baseline["retrieval"]["top_k"]) / top_k.step
        k_budget = (proposal.changes["assembly.token_budget"] - baseline["assembly"]["token_budget"]) / budget.step
        assert k_top == k_budget >= 1 and k_top <= min(top_k.max_step / top_k.step, budget.max_step / budget.step)
        steps.add(k_top)
        validate_strategy(derive(baseline, proposal.changes))
        evolver.tell(proposal, 0.01 * (i % 3))
    assert len(steps) > 1  # TPE chooses the magnitude after the first, smallest move
    near = set_path(set_path(baseline, "retrieval.candidate_pool", 100), "retrieval.top_k", 99)
    clamped = evolver.propose(near, coupled(COUPLED))
    assert clamped.changes["retrieval.top_k"] == 100 and clamped.changes["assembly.token_budget"] > 160


def test_a_coupled_move_with_a_stuck_part_is_refused_before_a_trial(tmp_path, baseline):
    evolver = Evolver(url(tmp_path), seed=3)
    stuck = set_path(baseline, "assembly.token_budget", 8192)
    before = len(evolver.study("memevolve-retrieval").trials)
    with pytest.raises(EvolverError, match="no legal move of assembly.token_budget"):
        evolver.propose(stuck, coupled(COUPLED))
    assert len(evolver.study("memevolve-retrieval").trials) == before


@pytest.mark.parametrize("outcome, expected", [("accepted", [1, 2, 4, 8, 10, 10]), ("inert", [1, 2, 4, 8, 10, 10])])
def test_steps_double_after_a_paying_or_inert_move_up_to_max_step(tmp_path, baseline, outcome, expected):
    evolver = Evolver(url(tmp_path), seed=5)
    key = "retrieval.top_k::increase"
    sizes = []
    for _ in expected:
        proposal = evolver.propose(baseline, coupled(key))
        sizes.append(proposal.changes["retrieval.top_k"] - baseline["retrieval"]["top_k"])
        evolver.apply_pending([{"study": proposal.study, "trial": proposal.trial_number, "value": 0.02,
                                "outcome": outcome}])
    assert sizes[:5] == expected[:5] and sizes[5] <= 10  # at max_step: no forced growth, TPE samples again


def test_steps_do_not_grow_after_an_ordinary_result(tmp_path, baseline):
    evolver = Evolver(url(tmp_path), seed=5)
    first = evolver.propose(baseline, coupled("retrieval.top_k::increase"))
    evolver.apply_pending([{"study": first.study, "trial": first.trial_number, "value": -0.01, "outcome": None}])
    study = evolver.study(first.study)
    assert not study.get_trials(deepcopy=False, states=(TrialState.WAITING,))  # nothing enqueued: TPE decides
