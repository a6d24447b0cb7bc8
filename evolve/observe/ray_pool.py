"""Evaluation of conversations on Ray actors (``executor: {kind: ray}``): each actor holds the benchmark, the roles,
the embedding model and an ingestion cache warm across candidates; results come back in task order, so traces equal
the local executor's. Ray is an optional extra (``pip install -e ".[ray]"``), imported only here."""
from __future__ import annotations

import os
import socket
from typing import Callable

from evolve.benchmarks.types import Benchmark
from evolve.errors import EvolveError
from evolve.observe.evaluator import Evaluator, Roles
from evolve.observe.executors import Task, TaskResult, WorkerError, run_task
from evolve.runtime import IngestionCache


class ExecutorError(EvolveError, RuntimeError):
    """Ray cannot be used as configured (not installed, or the cluster does not answer)."""


class WorkerLost(EvolveError, RuntimeError):
    """A Ray worker died during an evaluation and its retries ran out: the evaluation is abandoned whole."""


class _EvaluatorActor:
    """One Ray actor: the harness's evaluator with its own warm ingestion cache (sharing the directory on disk)."""

    def __init__(self, benchmark: Benchmark, roles: Roles, cache_dir: str | None, include_adversarial: bool):
        self.evaluator = Evaluator(benchmark, roles, IngestionCache(cache_dir), include_adversarial)

    def pid(self) -> int:
        return os.getpid()

    def work(self, strategy: dict, cid: str, question_ids: list[str], answer: bool) -> TaskResult:
        return run_task(self.evaluator, strategy, cid, question_ids, answer)


#: The HTTP/2 client connection preface and an empty SETTINGS frame: what a gRPC client sends first.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_H2_SETTINGS = 4


def _reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail fast (within about ``timeout_s``) when a ``host:port`` (or ``ray://host:port``) address does not accept
    connections or does not speak gRPC, as Ray's GCS and client servers do: a gRPC server answers the HTTP/2
    preface with a SETTINGS frame, where ``ray.init`` on any other server waits for minutes."""
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ExecutorError(f"executor.address: {address!r} is not 'auto', 'host:port' or 'ray://host:port'")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
            conn.sendall(_H2_PREFACE)
            head = conn.recv(9)
    except socket.timeout:
        head = b""
    except OSError as exc:
        raise ExecutorError(f"executor.address: cannot reach Ray at {address}: {exc}") from None
    if len(head) < 4 or head[3] != _H2_SETTINGS:
        raise ExecutorError(f"executor.address: {address} accepts connections but does not speak gRPC (no HTTP/2 "
                            f"answer within {timeout_s:g}s); it is not a Ray cluster address")


class RayPool:
    """An :class:`~evolve.observe.executors.Executor`: ``num_workers`` actors on the Ray cluster at ``address`` (``None``: a local Ray started for this process,
    ``"auto"``: the running cluster). A task whose actor dies is retried ``max_retries`` times on a restarted actor."""

    def __init__(self, benchmark: Benchmark, roles: Roles, cache: IngestionCache, include_adversarial: bool, *,
                 num_workers: int, address: str | None = None, max_retries: int = 1):
        try:
            import ray
        except ImportError:
            raise ExecutorError("executor.kind: ray needs Ray: pip install -e '.[ray]'") from None
        self._ray = ray
        self._started = False
        if address not in (None, "auto"):
            _reachable(address)
        if not ray.is_initialized():
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False,
                         **({"num_cpus": max(num_workers, os.cpu_count() or 1)} if address is None else {}))
            except ConnectionError as exc:
                raise ExecutorError(f"executor.address: cannot connect to Ray at {address}: {exc}") from None
            self._started = address is None
        actor = ray.remote(num_cpus=1, max_restarts=max_retries, max_task_retries=max_retries)(_EvaluatorActor)
        self._benchmark = ray.put(benchmark)  # held for the pool's life: a restarted actor is built from it again
        cache_dir = str(cache.directory) if cache.directory else None
        self.actors = [actor.remote(self._benchmark, roles, cache_dir, include_adversarial)
                       for _ in range(num_workers)]

    def pids(self) -> list[int]:
        """The process id of each actor (for tests that kill one)."""
        return self._ray.get([a.pid.remote() for a in self.actors])

    def map(self, strategy: dict, tasks: list[Task], answer: bool,
            progress: Callable[[int], object]) -> list[TaskResult]:
        """Each ``(conversation id, question ids)`` task on the next actor in turn; results in task order."""
        ray = self._ray
        refs = [self.actors[i % len(self.actors)].work.remote(strategy, cid, ids, answer)
                for i, (cid, ids) in enumerate(tasks)]
        out = []
        try:
            for (cid, ids), ref in zip(tasks, refs):
                try:
                    out.append(ray.get(ref))
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if isinstance(exc.cause, WorkerError) else None
                    if cause is None:
                        raise
                    raise cause.rebuild() from None
                except ray.exceptions.RayActorError as exc:
                    raise WorkerLost(f"a Ray worker died while evaluating conversation {cid} and its retries ran out "
                                     f"({type(exc).__name__}); the evaluation is abandoned, no partial score is "
                                     "recorded") from None
                progress(len(ids))
        except BaseException:
            for ref in refs:  # spend nothing more on an evaluation that is abandoned
                try:
                    ray.cancel(ref, force=False)
                except Exception:  # noqa: BLE001 - already finished, or not cancellable: nothing to stop
                    pass
            raise
        return out

    def close(self) -> None:
        """Stop the actors (and the local Ray this pool started)."""
        for actor in self.actors:
            self._ray.kill(actor)
        self.actors = []
        if self._started:
            self._ray.shutdown()
            self._started = False
