"""The strategy a service runs: the serving file, loaded only once it checks out against the journal and its
witness (what ``memevolve serving`` and ``journal verify`` check), reloaded when it changes; the candidate a shadow
runs beside it (any recorded candidate: it serves nobody); and the canary the journal says runs beside the serving
file (:mod:`evolve.ops.canary`: only an accepted candidate), followed as it is started, changed or stopped, and
stopped here when its guard finds significant harm."""
from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from evolve.canonical import sha256_hex
from evolve.errors import EvolveError
from evolve.files import StoreError, now_iso
from evolve.ops import canary as canary_ops
from evolve.ops.drift import read_optional, serving_status
from evolve.ops.history import History
from evolve.ops.targets import Refused
from evolve.ops.witness import anchor_problems, witness_anchors
from evolve.runtime import IngestionCache, MemoryRuntime
from evolve.runtime.embedder import Embedder
from evolve.runtime.fusion import FusionJudge
from evolve.runtime.roles import Answerer, Expander, Extractor
from evolve.serve.guard import CanaryGuard, GuardPlan, GuardStop
from evolve.state.layout import StoreLayout
from evolve.strategy.artifact import ingestion_key, parse_strategy, strategy_hash

log = logging.getLogger(__name__)


class ServingRefused(EvolveError):
    """A serving file or candidate that must not be served; the message says why."""


class CanaryRefused(ServingRefused):
    """A canary that must not serve users (not accepted, its record or the journal does not check out)."""


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
    verdict: str | None = None  # a candidate's recorded verdict

    @property
    def key(self) -> str:
        """Identity of the derived memory this strategy builds (ingestion policy, extractor and fusion judge,
        embedder)."""
        rt = self.runtime
        return hashlib.sha256(f"{ingestion_key(rt.strategy)}\0{rt.builders}\0{rt.embedder.name}".encode()
                              ).hexdigest()

    def describe(self) -> dict:
        s = self.runtime.strategy
        e = self.entry
        entry = None if e is None else {"index": e.index, "type": e.type.value, "ts": e.ts, "hash": e.hash}
        return {"hash": self.strategy_hash, "name": s.get("name"), "version": s.get("version"),
                "source": self.source, "file_sha256": self.file_sha256, "state": self.state,
                "lineage": self.lineage, "journal_entry": entry, "loaded_at": self.loaded_at,
                **({"verdict": self.verdict} if self.state == "candidate" else {})}


def _canary_problem(view: History, state: canary_ops.Canary | None) -> str | None:
    """Why the journal's running canary may not be served (its journal fails verification, or its fraction is past
    the cap without a journaled override), or ``None``."""
    if state is None:
        return None
    result = view.verify_journal()
    if not result.ok:
        return (f"canary {state.candidate_id}: journal of {view.root} fails verification at entry "
                f"{result.first_bad_index}: {result.reason}")
    payload = state.entry.payload
    try:
        canary_ops.check_fraction(state.fraction, payload.approval or {}, bool(payload.cap_override))
    except Refused as exc:
        return f"canary {state.candidate_id} (journal entry {state.entry.index}): {exc}"
    return None


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
    fuser: FusionJudge | None = None

    def runtime(self, strategy: dict) -> MemoryRuntime:
        """The served runtime. Users' memories are built through their own caches; this one's embedding cache holds
        only the questions asked, bounded and in memory (never a shard written on the request path)."""
        return MemoryRuntime(strategy, extractor=self.extractor, expander=self.expander, answerer=self.answerer,
                             embedder=self.embedder, cache=IngestionCache(max_vectors=QUESTION_VECTORS),
                             fuser=self.fuser)


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


def load_candidate(stores: str | Path | None, candidate_id: str, parts: RuntimeParts,
                   serves_users: bool = False) -> Loaded:
    """A recorded candidate's strategy, or :class:`ServingRefused`. ``serves_users`` (a canary): only if the journal
    verifies and the record, which it must agree with, holds ACCEPT or ACCEPT_WITH_MONITOR under the current
    harness (:class:`CanaryRefused` saying why not); otherwise (a shadow, a replay) any recorded candidate."""
    view = _view(stores)
    if view is None:
        raise (CanaryRefused if serves_users else ServingRefused)(f"no stores at {stores} to read candidate "
                                                                  f"{candidate_id!r} from")
    if serves_users:
        try:
            record = canary_ops.servable(view, candidate_id)
        except Refused as exc:
            raise CanaryRefused(f"canary {candidate_id}: {exc}") from None
    else:
        record = view.record(candidate_id)
        if record is None:
            raise ServingRefused(f"no candidate {candidate_id!r} in stores {stores}")
    if not record.strategy_hash:
        raise ServingRefused(f"candidate {candidate_id!r} produced no strategy ({record.reason})")
    strategy = view.get_strategy(record.strategy_hash)
    return Loaded(parts.runtime(strategy), record.strategy_hash, f"candidate {candidate_id}",
                  None, "candidate", None, [r.candidate_id for r in view.lineage(record.strategy_hash)],
                  verdict=record.verdict)


#: Verdicts whose candidate may serve users (as a canary).
SERVABLE = ("ACCEPT", "ACCEPT_WITH_MONITOR")
#: The approver a guard stop is journaled under.
GUARD = "canary guard"


def canary_share(user: str) -> float:
    """Where ``user`` falls in [0, 1): a stable hash, the same in every process and replica."""
    return int(hashlib.sha256(user.encode("utf-8")).hexdigest()[:8], 16) / 2**32


@dataclass
class CanaryRun:
    """One canary run (a journal ``CANARY`` start) in service: its strategy, share of users and guard."""

    loaded: Loaded
    candidate_id: str
    fraction: float
    start_index: int
    guard: CanaryGuard

    def describe(self) -> dict:
        return {**self.loaded.describe(), "candidate_id": self.candidate_id, "fraction": self.fraction,
                "start_entry": self.start_index, "guard": self.guard.status()}


def _stamp(path: Path) -> tuple | None:
    """A file's modification time, size and inode (``None``: it cannot be read): what changes when it is rewritten."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class StrategySlot:
    """The serving strategy, swapped whole when the file changes and checks out; a refused file leaves the previous
    strategy serving and is reported (:attr:`refused`). The canary follows the journal (:meth:`sync_canary`); a
    canary the journal names that does not check out is refused at start (:class:`CanaryRefused`) and, later, not
    served (:attr:`canary_refused`)."""

    def __init__(self, stores: str | Path | None, path: str | Path, parts: RuntimeParts, *,
                 allow_untracked: bool = False, shadow: str | None = None, guard: GuardPlan | None = None):
        self.stores, self.path, self.parts, self.allow_untracked = stores, Path(path), parts, allow_untracked
        self.current = load_serving(stores, path, parts, allow_untracked)
        self.shadow = load_candidate(stores, shadow, parts) if shadow else None
        if self.shadow is not None and self.shadow.verdict not in SERVABLE:
            log.warning("shadow %s is %s: its contexts are computed and logged, and serve nobody", shadow,
                        self.shadow.verdict)
        self.guard_plan = guard or GuardPlan()
        self.canary: CanaryRun | None = None
        self.canary_stopped: dict | None = None  # the last stop: who, when, why, its journal entry
        self.canary_refused: dict | None = None
        self.refused: dict | None = None
        self.reloads = 0
        self.refusals = 0
        self._seen = self._signature()
        self._lock = threading.Lock()
        self._ended: set[int] = set()  # canary runs (start entries) stopped here
        self._pending_stop: tuple[CanaryRun, dict] | None = None  # a guard stop not yet journaled
        self._journal_seen: tuple | None = None
        self.sync_canary(strict=True)

    def _signature(self) -> tuple:
        """The serving file's stamp and the journal's: a file refused while its PROMOTE or ROLLBACK entry was still
        being appended (the swap comes first) is looked at again once the entry lands."""
        return _stamp(self.path), self._journal_signature()

    def canary_for(self, user: str) -> CanaryRun | None:
        """The canary run serving ``user``, if ``user`` falls in its share."""
        run = self.canary
        return run if run is not None and canary_share(user) < run.fraction else None

    def for_user(self, user: str) -> tuple[Loaded, str]:
        """The strategy serving ``user`` and its role: ``serving`` or ``canary``."""
        run = self.canary_for(user)
        return (run.loaded, "canary") if run is not None else (self.current, "serving")

    def keys(self) -> set[str]:
        """Derived-memory keys of every strategy in use."""
        out = {self.current.key}
        if self.shadow is not None:
            out.add(self.shadow.key)
        if self.canary is not None:
            out.add(self.canary.loaded.key)
        return out

    def _journal_signature(self) -> tuple | None:
        return None if self.stores is None else _stamp(StoreLayout(Path(self.stores)).journal)

    def sync_canary(self, strict: bool = False) -> bool:
        """Follow the journal's canary for the serving file if the journal changed since the last look: start,
        change the fraction of, or stop the canary. ``strict`` (at start): a canary that does not check out raises
        :class:`CanaryRefused`; later it is not served and is reported. True when the canary changed."""
        if self._pending_stop is not None:
            self._journal_stop(*self._pending_stop)
        if self.stores is None:
            return False
        signature = self._journal_signature()
        if signature == self._journal_seen or signature is None:
            return False
        self._journal_seen = signature
        view = _view(self.stores)
        if view is None:
            return False
        state = canary_ops.running(view.entries, self.path)
        problem = _canary_problem(view, state)
        if problem is not None:  # an edited journal or fraction: nobody is served by it, whatever it says now
            if strict:
                raise CanaryRefused(problem)
            with self._lock:
                changed = self.canary is not None
                self.canary, self.canary_refused = None, {"at": now_iso(), "reason": problem}
            log.warning("canary refused, nobody is served by it: %s", problem)
            return changed
        with self._lock:
            run = self.canary
            if state is None or state.start_index in self._ended:
                if run is None:
                    return False
                last = canary_ops.latest(view.entries, self.path)
                self.canary = None
                self.canary_stopped = {"at": now_iso(), "by": last.payload.by if last else None,
                                       "candidate_id": run.candidate_id, "entry": last.index if last else None,
                                       "approval": last.payload.approval if last else None}
                log.warning("canary %s stopped (journal entry %s)", run.candidate_id, self.canary_stopped["entry"])
                return True
            if run is not None and run.start_index == state.start_index:
                changed = run.fraction != state.fraction
                run.fraction = state.fraction
                return changed
        try:
            loaded = load_candidate(self.stores, state.candidate_id, self.parts, serves_users=True)
            if loaded.strategy_hash != state.strategy_hash:
                raise CanaryRefused(f"canary {state.candidate_id}: its record holds strategy "
                                    f"{loaded.strategy_hash[:12]}, not the {state.strategy_hash[:12]} journal entry "
                                    f"{state.start_index} started")
        except ServingRefused as exc:
            if strict:
                raise CanaryRefused(str(exc)) from None
            with self._lock:
                self.canary, self.canary_refused = None, {"at": now_iso(), "reason": str(exc)}
            log.warning("canary refused, nobody is served by it: %s", exc)
            return True
        with self._lock:
            self.canary = CanaryRun(loaded, state.candidate_id, state.fraction, state.start_index,
                                    CanaryGuard(self.guard_plan))
            self.canary_refused = None
        log.warning("canary %s serves %.3g of users (journal entry %s)", state.candidate_id, state.fraction,
                    state.start_index)
        return True

    def guard_stop(self, run: CanaryRun, stop: GuardStop) -> None:
        """The guard found significant harm: ``run``'s users go back to serving at once, then the stop is journaled
        (retried at the next :meth:`sync_canary` if the journal cannot be written now)."""
        with self._lock:
            if self.canary is not run:
                return
            self.canary = None
            self._ended.add(run.start_index)
            self.canary_stopped = info = {"at": now_iso(), "by": "guard", "candidate_id": run.candidate_id,
                                          "entry": None, "approval": {"approver": GUARD, "reason": stop.reason()},
                                          "evidence": stop.to_dict()}
        log.warning("canary %s stopped by its guard: %s", run.candidate_id, stop.reason())
        self._journal_stop(run, info)

    def _journal_stop(self, run: CanaryRun, info: dict) -> None:
        if self.stores is None:
            return
        try:
            entry = canary_ops.stop(self.stores, self.path, info["approval"], by="guard", evidence=info["evidence"],
                                    start_index=run.start_index)
        except canary_ops.NoCanary as exc:  # stopped in the journal meanwhile: nothing left to record
            info["journal_note"] = str(exc)
            self._pending_stop = None
            return
        except Refused as exc:
            info["journal_error"] = str(exc)
            self._pending_stop = (run, info)
            log.warning("canary stop not journaled yet (retried): %s", exc)
            return
        info["entry"], self._pending_stop = entry.index, None
        info.pop("journal_error", None)

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
