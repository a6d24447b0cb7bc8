"""The executor contract: worker processes give the traces of an in-process evaluation, in the same order, and a
worker's exception comes back as it was raised there."""
from __future__ import annotations

import pickle

import pytest

from evolve import BASELINE_PATH, Harness, load_benchmark, load_strategy
from evolve.observe.evaluator import Evaluator, Roles
from evolve.observe.executors import WorkerError, run_task
from evolve.runtime import IngestionCache

BENCH = "synthetic:0:4"


def test_worker_processes_give_the_in_process_traces_in_order(tmp_path):
    bench, strategy = load_benchmark(BENCH), load_strategy(BASELINE_PATH)
    here = Harness(bench, cache=IngestionCache(tmp_path / "local"), progress=False).evaluate(strategy)
    parallel = Harness(bench, cache=IngestionCache(tmp_path / "workers"), progress=False, workers=2)
    try:
        there = parallel.evaluate(strategy)
    finally:
        parallel.close()
    assert len({t.conversation_id for t in here.traces}) > 1  # the tasks really went to the worker processes
    assert [t.deterministic_dict() for t in there.traces] == [t.deterministic_dict() for t in here.traces]
    assert there.summary.accuracy == here.summary.accuracy
    assert there.summary.ingestion_cache["misses"] == here.summary.ingestion_cache["misses"] > 0


def test_roles_that_cannot_be_pickled_are_refused_before_any_work(tmp_path):
    bench = load_benchmark(BENCH)
    roles = Roles()
    roles.answerer = lambda *a: None  # a lambda does not pickle
    harness = Harness(bench, roles, cache=IngestionCache(tmp_path), progress=False, workers=2)
    with pytest.raises(ValueError, match="workers=2: the roles cannot be sent to worker processes"):
        harness.evaluate(load_strategy(BASELINE_PATH))


def test_a_task_exception_comes_back_as_raised(tmp_path):
    bench = load_benchmark(BENCH)
    evaluator = Evaluator(bench, Roles(), IngestionCache(tmp_path), False)
    cid = bench.questions[0].conversation_id
    with pytest.raises(WorkerError) as caught:
        run_task(evaluator, load_strategy(BASELINE_PATH), cid, ["no such question"], True)
    rebuilt = pickle.loads(pickle.dumps(caught.value)).rebuild()
    assert type(rebuilt) is KeyError and rebuilt.args == ("no such question",)
    assert any("raised in a harness worker process" in note for note in rebuilt.__notes__)
