"""Concurrent callers' texts share forward passes: the service's embedder under load."""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Sequence

import numpy as np

from evolve.runtime.embedder import Embedder

#: Calls with more texts than this (a store's ingestion) encode in their own thread with ``inner``, grouped by length
#: as it groups them, never queued behind questions nor padded to their longest text.
MAX_QUEUED = 8
#: Texts one forward pass takes at most.
MAX_BATCH = 64


class BatchingEmbedder:
    """An :class:`Embedder` for many threads at once. A call of up to :data:`MAX_QUEUED` texts (a question) joins a
    queue; one worker encodes everything queued in one call of ``passes`` (default ``inner``; its ``encode_padded``
    where it has one) and hands each caller its rows. Larger calls go to ``inner`` in the caller's thread.

    Alone, a call waits only for the hand-off; under load, texts that arrive while the model runs share its next
    forward pass, cheaper per text than a pass each. ``passes`` must embed as ``inner`` does (same name): rows equal
    ``inner``'s up to float rounding, as the protocol allows. ``passes`` and ``texts`` count the worker's encodes
    and the texts in them.
    """

    def __init__(self, inner: Embedder, max_batch: int = MAX_BATCH, passes: Embedder | None = None):
        if passes is not None and passes.name != inner.name:
            raise ValueError(f"passes embed with {passes.name!r}, larger calls with {inner.name!r}: rows would differ")
        self.inner, self.name, self.max_batch = inner, inner.name, max_batch
        by = passes or inner
        self._encode = getattr(by, "encode_padded", by.encode)
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
