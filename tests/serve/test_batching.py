"""The service's embedder: concurrent callers share forward passes and each gets its own rows."""
from __future__ import annotations

import pickle
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from evolve.runtime.onnx_embedder import OnnxEmbedder
from evolve.serve.batching import MAX_QUEUED, BatchingEmbedder

QUESTIONS = [f"What did {name} say about the {thing} in {month}?" for name in ("Caroline", "Mel", "Jon", "Gina")
             for thing in ("garden", "race", "painting", "concert") for month in ("May", "the summer")]


@pytest.mark.parametrize("passes", ["inner", "onnx"])
def test_concurrent_callers_share_passes_and_get_their_own_rows(embedder, passes):
    inner = embedder
    inner.encode(QUESTIONS[:1])  # loads the model before the callers start
    batcher = BatchingEmbedder(inner, passes=OnnxEmbedder(inner) if passes == "onnx" else None)
    batcher.encode(["load the model where the passes run"])
    start = threading.Barrier(len(QUESTIONS))

    def ask(question: str) -> np.ndarray:
        start.wait()
        return batcher.encode([question])

    with ThreadPoolExecutor(len(QUESTIONS)) as pool:
        rows = np.concatenate(list(pool.map(ask, QUESTIONS)))
    singles = np.concatenate([inner.encode([q]) for q in QUESTIONS])
    assert np.allclose(rows, singles, atol=1e-6) and not np.allclose(singles[0], singles[1], atol=1e-3)
    assert batcher.texts == len(QUESTIONS) + 1 and batcher.passes < len(QUESTIONS)  # some questions shared a pass
    ingestion = [f"turn {i}" for i in range(MAX_QUEUED + 1)]
    assert np.allclose(batcher.encode(ingestion), inner.encode(ingestion), atol=1e-6)
    assert batcher.texts == len(QUESTIONS) + 1  # a store's ingestion encodes in its caller's thread, never queued


class _Failing:
    name, dim = "failing", 4

    def encode(self, texts):
        raise RuntimeError(f"model failed on {len(texts)} texts")


def test_a_model_error_reaches_every_waiting_caller_and_the_worker_goes_on():
    batcher = BatchingEmbedder(_Failing())
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(batcher.encode, [f"q{i}"]) for i in range(4)]
    for future in futures:
        with pytest.raises(RuntimeError, match="model failed"):
            future.result()
    with pytest.raises(RuntimeError, match="model failed on 1 texts"):
        batcher.encode(["again"])


def test_onnx_passes_embed_as_the_model_does_and_must_name_it(embedder):
    onnx = OnnxEmbedder(embedder)
    texts = [*QUESTIONS[:6], "a much longer turn that pads every other text of its batch " * 4]
    rows, alone = onnx.encode(texts), np.concatenate([onnx.encode([t]) for t in texts])
    assert rows.shape == (len(texts), embedder.dim) and np.allclose(np.linalg.norm(rows, axis=1), 1, atol=1e-6)
    assert np.allclose(rows, embedder.encode(texts), atol=1e-6) and np.allclose(rows, alone, atol=1e-6)
    copy = pickle.loads(pickle.dumps(onnx))
    assert onnx.name == embedder.name and np.allclose(copy.encode(texts[:2]), rows[:2], atol=1e-6)
    with pytest.raises(ValueError, match="rows would differ"):
        BatchingEmbedder(embedder, passes=_Failing())
