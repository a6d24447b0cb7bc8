"""Concurrent callers' texts share forward passes: the service's embedder under load."""
from __future__ import annotations

import multiprocessing
import queue
import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Sequence

import numpy as np

from evolve.runtime.embedder import Embedder

#: Calls with more texts than this (a store's ingestion) encode in their own thread, grouped by length as the inner
#: embedder groups them, never queued behind questions nor padded to their longest text.
MAX_QUEUED = 8
#: Texts one forward pass takes at most.
MAX_BATCH = 64


class BatchingEmbedder:
    """An :class:`Embedder` for many threads at once. A call's texts join a queue; one worker encodes everything
    queued in one call (the inner embedder's ``encode_padded`` where it has one) and hands each caller its rows.

    Alone, a call waits only for the hand-off; under load, texts that arrive while the model runs share its next
    forward pass, several times cheaper per text than a pass each. Rows equal the inner embedder's up to float
    rounding, as the protocol allows. ``passes`` and ``texts`` count the worker's encodes and the texts in them.

    With ``process``, the passes run in a child process (started by the first; one that ends is replaced and its
    pass tried again), where the model's many small operators never wait for this process's interpreter lock;
    ``inner`` must pickle.
    """

    def __init__(self, inner: Embedder, max_batch: int = MAX_BATCH, process: bool = False):
        self.inner, self.name, self.max_batch = inner, inner.name, max_batch
        self._encode = self._in_child if process else getattr(inner, "encode_padded", inner.encode)
        self._child: tuple[multiprocessing.process.BaseProcess, Connection] | None = None
        self._queue: queue.SimpleQueue[tuple[list[str], Future]] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._start = threading.Lock()
        self.passes = self.texts = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts or len(texts) > MAX_QUEUED:
            return self.inner.encode(texts)
        result: Future = Future()
        self._queue.put((texts, result))
        with self._start:
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, daemon=True, name="embed-batches")
                self._worker.start()
        return result.result()

    def _run(self) -> None:
        while True:
            jobs = [self._queue.get()]
            size = len(jobs[0][0])
            while size < self.max_batch:
                try:
                    jobs.append(self._queue.get_nowait())
                except queue.Empty:
                    break
                size += len(jobs[-1][0])
            try:
                rows = self._encode([text for texts, _ in jobs for text in texts])
            except BaseException as exc:  # every waiting caller sees the model's error
                for _, result in jobs:
                    result.set_exception(exc)
                continue
            self.passes, self.texts = self.passes + 1, self.texts + size
            start = 0
            for texts, result in jobs:
                result.set_result(rows[start:start + len(texts)])
                start += len(texts)

    def _in_child(self, texts: list[str], retry: bool = True) -> np.ndarray:
        """``texts`` encoded by the child process (only the worker thread calls this); a child that has ended is
        replaced and the pass tried once more."""
        child, conn = self._child or self._spawn()
        try:
            conn.send(texts)
            ok, payload = conn.recv()
        except (EOFError, OSError) as exc:
            self._child = None
            conn.close()
            child.join(5)
            if retry:
                return self._in_child(texts, retry=False)
            raise RuntimeError(f"the encoding process ended twice (exit code {child.exitcode}): {exc!r}") from None
        if not ok:
            raise RuntimeError(f"the encoding process failed: {payload}")
        return payload

    def _spawn(self) -> tuple[multiprocessing.process.BaseProcess, Connection]:
        context = multiprocessing.get_context("spawn")
        mine, theirs = context.Pipe()
        child = context.Process(target=_encode_forever, args=(theirs, self.inner), daemon=True, name="memevolve-embed")
        child.start()
        theirs.close()
        self._child = (child, mine)
        return self._child

    @property
    def child_pid(self) -> int | None:
        """The encoding process's pid, once started."""
        return self._child[0].pid if self._child is not None else None


def _encode_forever(conn: Connection, inner: Embedder) -> None:
    """The encoding process: each list of texts received is answered with ``(True, rows)`` or ``(False, error)``;
    ends when the service's end of the pipe closes."""
    encode = getattr(inner, "encode_padded", inner.encode)
    while True:
        try:
            texts = conn.recv()
        except EOFError:
            return
        try:
            conn.send((True, encode(texts)))
        except Exception as exc:  # noqa: BLE001 - reported to the waiting callers
            conn.send((False, f"{type(exc).__name__}: {exc}"))
