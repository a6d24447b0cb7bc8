"""The strategy a service runs: the serving file, loaded only once it checks out against the journal and its
witness (what ``memevolve serving`` and ``journal verify`` check), reloaded when it changes, and the candidate a
shadow or canary runs beside it."""
from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from evolve.canonical import sha256_hex
from evolve.errors import EvolveError
from evolve.files import StoreError, now_iso
from evolve.ops.drift import read_optional, serving_status
from evolve.ops.history import History
from evolve.ops.witness import anchor_problems, witness_anchors
from evolve.runtime import IngestionCache, MemoryRuntime
from evolve.runtime.embedder import Embedder
from evolve.runtime.roles import Answerer, Expander, Extractor
from evolve.strategy.artifact import ingestion_key, parse_strategy, strategy_hash


class ServingRefused(EvolveError):
    """A serving file or candidate that must not be served; the message says why."""


@dataclass(frozen=True)
class Loaded:
    """One strategy ready to serve."""

    runtime: MemoryRuntime
    strategy_hash: str
    source: str  # the serving file, or ``candidate <id>``
    file_sha256: str | None
    state: str  # tracked | untracked | candidate
    entry: dict | None  # the journal entry that installed the file
    lineage: list[str] = field(default_factory=list)  # accepted candidate ids from the baseline, oldest first
    loaded_at: str = field(default_factory=now_iso)

    @property
    def key(self) -> str:
        """Identity of the derived memory this strategy builds (ingestion policy, extractor, embedder)."""
        rt = self.runtime
        return hashlib.sha256(f"{ingestion_key(rt.strategy)}\0{rt.extractor.name}\0{rt.embedder.name}".encode()
                              ).hexdigest()

    def describe(self) -> dict:
        s = self.runtime.strategy
        entry = None if self.entry is None else {k: self.entry.get(k) for k in ("index", "type", "ts", "hash")}
        return {"hash": self.strategy_hash, "name": s.get("name"), "version": s.get("version"),
                "source": self.source, "file_sha256": self.file_sha256, "state": self.state,
                "lineage": self.lineage, "journal_entry": entry, "loaded_at": self.loaded_at}


def _view(stores: str | Path | None) -> History | None:
    if stores is None:
        return None
    try:
        return History(stores)
    except StoreError:
        return None


#: Question vectors a served strategy keeps in memory (about 1.5 kB each for MiniLM; least recently asked out).
QUESTION_VECTORS = 50_000


@dataclass(frozen=True)
class RuntimeParts:
    """What every served strategy's runtime is built with besides the strategy: the embedder and the model roles
    (``None``: the embedded default of that role)."""

    embedder: Embedder
    extractor: Extractor | None = None
    expander: Expander | None = None
    answerer: Answerer | None = None

    def runtime(self, strategy: dict) -> MemoryRuntime:
        """The served runtime. Users' memories are built through their own caches; this one's embedding cache holds
        only the questions asked, bounded and in memory (never a shard written on the request path)."""
        return MemoryRuntime(strategy, extractor=self.extractor, expander=self.expander, answerer=self.answerer,
                             embedder=self.embedder, cache=IngestionCache(max_vectors=QUESTION_VECTORS))


def load_serving(stores: str | Path | None, path: str | Path, parts: RuntimeParts,
                 allow_untracked: bool = False) -> Loaded:
    """The serving file as a runtime, or :class:`ServingRefused` unless its journal chains, its witness heads match and
    the file is the one the last PROMOTE/ROLLBACK installed (``allow_untracked``: also a file no journal tracks)."""
    try:
        path = Path(path).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before Python 3.13)
        raise ServingRefused(f"{path}: cannot resolve the serving file: {exc}") from None
    data = read_optional(path)
    if data is None:
        raise ServingRefused(f"{path}: serving file does not exist")
    view = _view(stores)
    if view is not None:
        result = view.verify_journal()
        if not result.ok:
            raise ServingRefused(f"journal of {stores} fails verification at entry {result.first_bad_index}: "
                                 f"{result.reason}")
        problems = anchor_problems(witness_anchors(path, view.root), result.hashes)
        if problems:
            raise ServingRefused(f"witness of {path}: {problems[0]}")
    status = serving_status(view, path)
    if not (status.state == "tracked" or (allow_untracked and status.state == "untracked")):
        raise ServingRefused(f"{path}: {status.describe()}")
    sha = sha256_hex(data)
    if status.current is None or status.current.file_sha256 != sha:
        raise ServingRefused(f"{path} changed while it was being verified")
    try:
        strategy = parse_strategy(data.decode("utf-8"), str(path))
    except (EvolveError, UnicodeDecodeError) as exc:
        raise ServingRefused(f"{path}: {exc}") from None
    digest = strategy_hash(strategy)
    lineage = [r.candidate_id for r in view.lineage(digest)] if view is not None else []
    return Loaded(parts.runtime(strategy), digest, str(path), sha, status.state, status.entry, lineage)


def load_candidate(stores: str | Path | None, candidate_id: str, parts: RuntimeParts) -> Loaded:
    """A recorded candidate's strategy (for a shadow or a canary), or :class:`ServingRefused`."""
    view = _view(stores)
    record = view.record(candidate_id) if view is not None else None
    if record is None:
        raise ServingRefused(f"no candidate {candidate_id!r} in stores {stores}")
    strategy = view.get_strategy(record.strategy_hash)
    return Loaded(parts.runtime(strategy), record.strategy_hash, f"candidate {candidate_id}",
                  None, "candidate", None, [r.candidate_id for r in view.lineage(record.strategy_hash)])


def canary_share(user: str) -> float:
    """Where ``user`` falls in [0, 1): a stable hash, the same in every process and replica."""
    return int(hashlib.sha256(user.encode("utf-8")).hexdigest()[:8], 16) / 2**32


class StrategySlot:
    """The serving strategy, swapped whole when the file changes and checks out; a refused file leaves the previous
    strategy serving and is reported (:attr:`refused`)."""

    def __init__(self, stores: str | Path | None, path: str | Path, parts: RuntimeParts, *,
                 allow_untracked: bool = False, shadow: str | None = None,
                 canary: tuple[str, float] | None = None):
        self.stores, self.path, self.parts, self.allow_untracked = stores, Path(path), parts, allow_untracked
        self.current = load_serving(stores, path, parts, allow_untracked)
        self.shadow = load_candidate(stores, shadow, parts) if shadow else None
        self.canary = (load_candidate(stores, canary[0], parts), canary[1]) if canary else None
        self.refused: dict | None = None
        self.reloads = 0
        self.refusals = 0
        self._seen = self._signature()
        self._lock = threading.Lock()

    def _signature(self) -> tuple | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def for_user(self, user: str) -> tuple[Loaded, str]:
        """The strategy serving ``user`` and its role: ``serving`` or ``canary``."""
        canary = self.canary
        if canary is not None and canary_share(user) < canary[1]:
            return canary[0], "canary"
        return self.current, "serving"

    def keys(self) -> set[str]:
        """Derived-memory keys of every strategy in use."""
        out = {self.current.key}
        if self.shadow is not None:
            out.add(self.shadow.key)
        if self.canary is not None:
            out.add(self.canary[0].key)
        return out

    def check(self, warm: Callable[[Loaded], None] | None = None, force: bool = False) -> bool:
        """Reload the serving file if it changed since the last look (``force``: whatever its stamp); ``warm``
        builds the new strategy's derived memory before the swap, while the old one serves. True on a swap."""
        with self._lock:
            signature = self._signature()
            if signature == self._seen and not force:
                return False
            self._seen = signature
            try:
                loaded = load_serving(self.stores, self.path, self.parts, self.allow_untracked)
            except (ServingRefused, StoreError, OSError) as exc:
                self.refusals += 1
                self.refused = {"at": now_iso(), "reason": str(exc)}
                return False
            self.refused = None
            if loaded.file_sha256 == self.current.file_sha256:
                return False
            if warm is not None and loaded.key != self.current.key:
                warm(loaded)
            self.current = loaded
            self.reloads += 1
            return True
