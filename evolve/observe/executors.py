"""Executors: evaluate conversations away from the harness's process, results in task order.

:class:`Executor` is the contract (:class:`ProcessPool` here, :class:`evolve.observe.ray_pool.RayPool` on Ray);
each task is one conversation's questions, run by :func:`run_task` on an :class:`~evolve.observe.evaluator.Evaluator`
the executor's worker holds. An exception raised there comes back as a :class:`WorkerError`, rebuilt as raised.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Callable, Protocol

from evolve.benchmarks.types import Benchmark
from evolve.errors import EvolveError
from evolve.observe.evaluator import Evaluator, Roles
from evolve.observe.trace import Trace
from evolve.runtime import IngestionCache

#: One conversation's id and the ids of its questions to evaluate.
Task = tuple[str, list[str]]
#: A task's ``(traces, ingestion LLM usage, ingestion cache hits, misses)``.
TaskResult = tuple[list[Trace], dict, int, int]


class Executor(Protocol):
    """Evaluates conversations elsewhere (worker processes, Ray actors), results in task order."""

    def map(self, strategy: dict, tasks: list[Task], answer: bool,
            progress: Callable[[int], object]) -> list[TaskResult]: ...

    def close(self) -> None: ...


class WorkerError(EvolveError):
    """An exception raised in a worker, sent as (class, args, attributes, traceback): exceptions whose
    ``__init__`` takes other arguments than ``args`` (``StoreError``, ``StrategyError``) do not unpickle."""

    def __init__(self, cls: type, args: tuple, state: dict, trace: str):
        super().__init__(cls, args, state, trace)

    def rebuild(self) -> BaseException:
        """The worker's exception as it was raised there, with the worker traceback as a note."""
        cls, args, state, trace = self.args
        exc = cls.__new__(cls)
        exc.args = args
        exc.__dict__.update(state)
        exc.add_note(f"raised in a harness worker process:\n{trace}")
        return exc


def run_task(evaluator: Evaluator, strategy: dict, cid: str, question_ids: list[str], answer: bool) -> TaskResult:
    """A worker's task (process or Ray actor): the :data:`TaskResult` of one conversation; an exception comes back
    as a picklable :class:`WorkerError`."""
    try:
        hits, misses = evaluator.cache.hits, evaluator.cache.misses
        traces, usage = evaluator.conversation(evaluator.runtime(strategy), cid,
                                               [evaluator.questions[q] for q in question_ids], answer)
        return traces, usage, evaluator.cache.hits - hits, evaluator.cache.misses - misses
    except Exception as exc:
        raise WorkerError(type(exc), exc.args, dict(vars(exc)), "".join(traceback.format_exception(exc))) from None


_WORKER: Evaluator | None = None


def _init_worker(benchmark: Benchmark, roles: Roles, cache_dir: Path | None, include_adversarial: bool,
                 parent_pid: int) -> None:
    global _WORKER
    _WORKER = Evaluator(benchmark, roles, IngestionCache(cache_dir), include_adversarial)
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()


def _exit_with_parent(parent_pid: int) -> None:
    """A worker whose parent died (e.g. killed) exits instead of waiting for work forever."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(1)


def _work(strategy: dict, cid: str, question_ids: list[str], answer: bool) -> TaskResult:
    assert _WORKER is not None, "worker not initialised"
    return run_task(_WORKER, strategy, cid, question_ids, answer)


class ProcessPool:
    """``workers`` spawned worker processes, started on first use and reused by every later evaluation (the
    embedding model loads once per worker); they share the cache's directory on disk. Roles must be picklable."""

    def __init__(self, benchmark: Benchmark, roles: Roles, cache: IngestionCache, include_adversarial: bool,
                 workers: int):
        self.benchmark, self.roles, self.cache = benchmark, roles, cache
        self.include_adversarial, self.workers = include_adversarial, workers
        self._pool: ProcessPoolExecutor | None = None

    def map(self, strategy: dict, tasks: list[Task], answer: bool,
            progress: Callable[[int], object]) -> list[TaskResult]:
        """Each task in a worker process; results in task order."""
        pool = self._started()
        futures = [pool.submit(_work, strategy, cid, ids, answer) for cid, ids in tasks]
        out = []
        for future in futures:
            try:
                result = future.result()
            except WorkerError as exc:
                raise exc.rebuild() from None
            except BrokenProcessPool:
                self._pool = None  # a worker died; the next evaluation starts new ones
                raise
            out.append(result)
            progress(len(result[0]))
        return out

    def close(self) -> None:
        """Stop the worker processes (a later evaluation starts new ones)."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def _started(self) -> ProcessPoolExecutor:
        if self._pool is None:
            try:
                pickle.dumps(self.roles)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                raise ValueError(f"Harness workers={self.workers}: the roles cannot be sent to worker processes "
                                 f"({exc}); use workers=1") from None
            initargs = (self.benchmark, self.roles, self.cache.directory, self.include_adversarial, os.getpid())
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_init_worker, initargs=initargs)
        return self._pool
