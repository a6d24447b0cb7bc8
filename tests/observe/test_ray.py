"""The Ray executor on a local Ray started here (127.0.0.1): conversations evaluated on actors give the traces of
the local executor, in the same order; a worker killed mid-evaluation is retried, or the evaluation fails whole."""
from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from workflow_fixtures import cli, write_config  # noqa: E402

from evolve import BASELINE_PATH, Harness, load_benchmark, load_strategy  # noqa: E402
from evolve.observe.ray_pool import RayPool, WorkerLost  # noqa: E402
from evolve.runtime import IngestionCache  # noqa: E402
from evolve.runtime.cache import SHARED_EMBEDDINGS_ENV  # noqa: E402
from evolve.strategy.artifact import derive  # noqa: E402

pytestmark = pytest.mark.heavy

BENCH = "synthetic:0:4"


@pytest.fixture(scope="module")
def local_ray():
    with pytest.MonkeyPatch.context() as patch:
        # Actors embed for themselves: a cold evaluation then lasts long enough to kill a worker in the middle of it.
        patch.delenv(SHARED_EMBEDDINGS_ENV, raising=False)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def traces(run) -> list[dict]:
    return [t.deterministic_dict() for t in run.traces]


def ray_harness(bench, tmp_path, name: str, max_retries: int = 1) -> Harness:
    cache = IngestionCache(tmp_path / name)
    pool = RayPool(bench, Harness(bench).roles, cache, False, num_workers=2, max_retries=max_retries)
    return Harness(bench, cache=cache, progress=False, executor=pool)


def test_ray_traces_equal_the_local_executor_in_order(local_ray, tmp_path):
    bench = load_benchmark(BENCH)
    baseline = load_strategy(BASELINE_PATH)
    wider = derive(baseline, {"retrieval.top_k": 8, "extraction.min_fact_tokens": 3})
    local = Harness(bench, cache=IngestionCache(tmp_path / "local"), progress=False)
    remote = ray_harness(bench, tmp_path, "ray")
    try:
        for strategy in (baseline, wider, baseline):  # the last one from the actors' warm caches
            here, there = local.evaluate(strategy), remote.evaluate(strategy)
            assert traces(there) == traces(here)
            assert [t.question_id for t in there.traces] == [t.question_id for t in here.traces]
            assert there.summary.accuracy == here.summary.accuracy
        assert there.summary.ingestion_cache["misses"] == 0  # warm on the actors
    finally:
        remote.close()


def kill_one_actor_soon(pool: RayPool, delay_s: float) -> threading.Thread:
    pid = pool.pids()[0]

    def kill() -> None:
        time.sleep(delay_s)
        os.kill(pid, signal.SIGKILL)

    thread = threading.Thread(target=kill)
    thread.start()
    return thread


def test_a_worker_killed_mid_evaluation_is_retried_to_the_same_traces(local_ray, tmp_path):
    bench = load_benchmark(BENCH)
    baseline = load_strategy(BASELINE_PATH)
    reference = Harness(bench, progress=False).evaluate(baseline)
    remote = ray_harness(bench, tmp_path, "retry", max_retries=1)
    try:
        killer = kill_one_actor_soon(remote.executor, 0.5)  # cold: ingestion takes seconds
        run = remote.evaluate(baseline)
        killer.join()
    finally:
        remote.close()
    assert traces(run) == traces(reference)


def test_a_worker_lost_without_retries_fails_the_evaluation_whole(local_ray, tmp_path):
    bench = load_benchmark(BENCH)
    remote = ray_harness(bench, tmp_path, "lost", max_retries=0)
    try:
        killer = kill_one_actor_soon(remote.executor, 0.5)
        with pytest.raises(WorkerLost, match="no partial score is recorded"):
            remote.evaluate(load_strategy(BASELINE_PATH))
        killer.join()
    finally:
        remote.close()


def test_an_unreachable_ray_address_is_refused_before_the_stores(capsys, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = write_config(tmp_path / "run.yaml", stores=tmp_path / "stores",
                          executor={"kind": "ray", "address": f"127.0.0.1:{port}"})
    code, out = cli(capsys, "run", "--config", config, "--no-tracking")
    assert code == 2 and f"{config}: executor.address: cannot reach Ray at 127.0.0.1:{port}" in out
    assert not (tmp_path / "stores").exists()


def test_a_run_on_the_ray_executor_takes_the_local_runs_decisions(local_ray, tmp_path):
    import json

    from evolve.loop.config import ExecutorConfig, RunConfig
    from evolve.loop.engine import Engine

    def run(name: str, executor: ExecutorConfig) -> list[tuple]:
        config = RunConfig(benchmark="synthetic:0:3", probe_size=20, rounds=1, candidates_per_round=2,
                           stores=tmp_path / name, executor=executor)
        Engine(config, track=False, progress=False).run()
        rows = [json.loads(line) for line in (tmp_path / name / "candidate_outcomes.jsonl").read_text().splitlines()]
        return [(r["candidate_id"], r["policy_hash"], r["decided_by"], r["decision"]["verdict"]) for r in rows]

    assert run("ray", ExecutorConfig(kind="ray", num_workers=2)) == run("local", ExecutorConfig())
