"""Caches that let candidates share work: ingested stores (by ingestion policy) and embeddings (by text).

Both are filed by subject (:mod:`evolve.runtime.subject`): an ingested store's key and an embedding shard's name
begin with the subject key of the conversation they were made for, so :func:`forget_subjects` removes every copy of
an erased conversation's words.
"""
from __future__ import annotations

import hashlib
import io
import os
import pickle
import threading
import warnings
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from evolve.benchmarks.types import Conversation
from evolve.files import atomic_write_bytes, os_error
from evolve.runtime.subject import KEY_LENGTH, current_subject, subject_key
from evolve.strategy.artifact import ingestion_key

if TYPE_CHECKING:
    from evolve.runtime.embedder import Embedder
    from evolve.runtime.store import MemoryStore

#: Bump when the ingestion pipeline's output changes for the same inputs; invalidates on-disk stores (3: fact metadata,
#: 4: dates resolved against the day a fact was said, everyday retraction phrasings, 5: three more of them, 6: BM25
#: term postings located and items' lifecycle settledness read at store build, 7: corrections' topics without dates, no
#: question a correction, 8: an item names the retraction that withdrew it, 9: the image knowledge base, 10: the
#: device events among the turns, 11: a weekday a speaker named and a weekend kept in resolved dates, 12: last night,
#: the past weekend, last summer).
STORE_FORMAT = 12
#: Bump when embedder output changes for the same text; invalidates cached vectors (2: batch-invariant rows).
EMBEDDING_FORMAT = 2
#: Names a directory of embedding shards that every :class:`IngestionCache` of the machine shares instead of its own
#: (a vector is keyed by format, embedder and text; nights over the same conversations then embed each text once, and
#: a process whose texts are all there never loads the model).
SHARED_EMBEDDINGS_ENV = "MEMEVOLVE_EMBEDDING_CACHE"


@lru_cache(maxsize=200_000)  # a night looks up the same question texts for every candidate
def _text_key(embedder_name: str, text: str) -> str:
    return hashlib.sha256(f"{EMBEDDING_FORMAT}\0{embedder_name}\0{text}".encode()).hexdigest()


class EmbeddingCache:
    """Vectors by (embedder name, text hash): in memory, plus ``.npz`` shards in ``directory`` if given.

    Several processes may share ``directory``: before encoding, shards written by others since the last
    look are loaded, so a text is encoded once per directory and every reader gets the vector first written.
    ``max_vectors`` bounds an in-memory cache (least recently used out), e.g. a service's question vectors.
    """

    def __init__(self, directory: str | Path | None = None, max_vectors: int | None = None):
        if max_vectors is not None and (directory or max_vectors < 1):
            raise ValueError("EmbeddingCache.max_vectors: a positive bound, for an in-memory cache only")
        self.directory = Path(directory) if directory else None
        self.max_vectors = max_vectors
        self.hits = 0
        self.misses = 0
        self._lock = threading.RLock()  # conversations may be ingested in threads (LLM path)
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._shards: set[str] = set()
        self._refresh()

    def _refresh(self) -> None:
        """Load shards in ``directory`` not loaded yet (none when the directory is gone, even while it is listed: an
        erasure removes it under a running build)."""
        try:
            shards = sorted(self.directory.glob("*.npz")) if self.directory and self.directory.is_dir() else []
        except FileNotFoundError:
            shards = []
        for shard in shards:
            if shard.name not in self._shards:
                self._load_shard(shard)

    def _load_shard(self, shard: Path) -> None:
        self._shards.add(shard.name)
        try:
            with np.load(shard, allow_pickle=False) as data:
                for key, vector in zip(data["keys"].tolist(), data["vectors"]):
                    self._vectors[key] = vector
        except (OSError, ValueError, KeyError) as exc:
            warnings.warn(f"{shard}: unreadable embedding shard ignored ({exc})", stacklevel=3)

    def __len__(self) -> int:
        return len(self._vectors)

    def encode(self, embedder: "Embedder", texts: Sequence[str]) -> np.ndarray:
        """Rows for ``texts`` in order; only texts never seen with this embedder are encoded. Thread-safe; the
        encoding runs outside the lock, so threads encode at once (the model releases the GIL), and when two
        encode one text the first vector stored is the one every caller gets."""
        keys = [_text_key(embedder.name, t) for t in texts]
        with self._lock:
            if self.directory and any(k not in self._vectors for k in keys):
                self._refresh()
            todo = sorted({t for t, k in zip(texts, keys) if k not in self._vectors})
            self.misses += len(todo)
            self.hits += len(texts) - sum(1 for k in keys if k not in self._vectors)
        if todo:
            vectors = embedder.encode(todo)
            with self._lock:
                fresh = [(k, v) for k, v in zip((_text_key(embedder.name, t) for t in todo), vectors)
                         if k not in self._vectors]
                self._vectors.update(fresh)
                if self.directory and fresh:
                    self._write_shard([k for k, _ in fresh], np.stack([v for _, v in fresh]))
        if not texts:
            return np.zeros((0, embedder.dim), dtype=np.float32)
        with self._lock:
            rows = [self._vectors.get(k) for k in keys]
            if self.max_vectors is not None:
                for k in keys:
                    if k in self._vectors:
                        self._vectors.move_to_end(k)
                while len(self._vectors) > self.max_vectors:
                    self._vectors.popitem(last=False)
        if any(row is None for row in rows):  # evicted by other texts of this very call: beyond the bound
            rows = [row if row is not None else vector
                    for row, vector in zip(rows, embedder.encode([t for t, r in zip(texts, rows) if r is None]))]
        return np.stack(rows).astype(np.float32, copy=False)

    def _write_shard(self, keys: list[str], vectors: np.ndarray) -> None:
        assert self.directory is not None
        buffer = io.BytesIO()
        np.savez(buffer, keys=np.array(keys), vectors=np.asarray(vectors, dtype=np.float32))
        name = _filed(f'{hashlib.sha256("".join(keys).encode()).hexdigest()[:32]}.npz', current_subject())
        atomic_write_bytes(self.directory / name, buffer.getvalue())
        self._shards.add(name)


class IngestionCache:
    """Ingested :class:`MemoryStore` objects keyed by ingestion policy, conversation content and role names.

    An in-memory LRU of ``max_entries`` stores, backed by pickles in ``directory/stores`` when a directory
    is given; embeddings are cached alongside in ``directory/embeddings``, or in ``$MEMEVOLVE_EMBEDDING_CACHE``.
    """

    def __init__(self, directory: str | Path | None = None, max_entries: int = 32, *, max_vectors: int | None = None):
        if max_entries < 1:
            raise ValueError(f"IngestionCache.max_entries must be >= 1, got {max_entries}")
        self.directory = Path(directory) if directory else None
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._lock = threading.RLock()
        self._stores: OrderedDict[str, "MemoryStore"] = OrderedDict()
        if max_vectors is not None:  # a bounded in-memory cache, never on disk
            self.embeddings = EmbeddingCache(max_vectors=max_vectors)
        else:
            shared = os.environ.get(SHARED_EMBEDDINGS_ENV)
            self.embeddings = EmbeddingCache(shared or (self.directory / "embeddings" if self.directory else None))

    @staticmethod
    def key(strategy: dict, conversation: Conversation, extractor_name: str, embedder_name: str) -> str:
        """The store's key, filed under the conversation's subject key."""
        parts = (str(STORE_FORMAT), ingestion_key(strategy), conversation.content_hash(),
                 conversation.observations_hash(), extractor_name, embedder_name)
        return _filed(hashlib.sha256("\0".join(parts).encode()).hexdigest(), subject_key(conversation.id))

    def _path(self, key: str) -> Path | None:
        return self.directory / "stores" / f"{key}.pkl" if self.directory else None

    def get(self, key: str) -> "MemoryStore | None":
        """The cached store, counting a hit, or ``None``, counting a miss. Thread-safe, like :meth:`put`."""
        with self._lock:
            return self._get(key)

    def _get(self, key: str) -> "MemoryStore | None":
        store = self._stores.get(key)
        if store is None:
            store = self._read(key)
            if store is not None:
                self._remember(key, store)
        else:
            self._stores.move_to_end(key)
        if store is None:
            self.misses += 1
        else:
            self.hits += 1
        return store

    def put(self, key: str, store: "MemoryStore") -> None:
        with self._lock:
            self._remember(key, store)
        path = self._path(key)
        if path is not None:
            atomic_write_bytes(path, pickle.dumps(store, protocol=pickle.HIGHEST_PROTOCOL))

    def _remember(self, key: str, store: "MemoryStore") -> None:
        self._stores[key] = store
        self._stores.move_to_end(key)
        while len(self._stores) > self.max_entries:
            self._stores.popitem(last=False)

    def _read(self, key: str) -> "MemoryStore | None":
        path = self._path(key)
        if path is None or not path.exists():
            return None
        try:
            return pickle.loads(path.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            warnings.warn(f"{path}: unreadable cached store ignored ({exc})", stacklevel=3)
            return None


def _filed(name: str, subject: str | None) -> str:
    """``name`` filed under ``subject`` (``<subject>-<name>``), or as it is without one."""
    return f"{subject}-{name}" if subject else name


def _subject_of(name: str) -> str | None:
    """The subject a cache file is filed under, or ``None`` (written before filing, or outside any conversation)."""
    head, sep, _ = name.partition("-")
    return head if sep and len(head) == KEY_LENGTH else None


def forget_subjects(directory: str | Path, subjects: set[str]) -> list[Path]:
    """Delete the ingested stores (``stores/*.pkl``) and embedding shards (``*.npz``, ``embeddings/*.npz``) under
    ``directory`` filed under one of ``subjects``, and those filed under none (written before files were filed by
    subject: they may hold anyone's words; a cache, rebuilt when next needed); the files deleted."""
    root = Path(directory)
    gone = []
    for pattern in ("*.npz", "embeddings/*.npz", "stores/*.pkl"):
        for path in sorted(root.glob(pattern)):
            subject = _subject_of(path.name)
            if subject is None or subject in subjects:
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise os_error(path, exc, "erase a cache file") from None
                gone.append(path)
    return gone
