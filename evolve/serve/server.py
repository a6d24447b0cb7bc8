"""``memevolve serve``: the memory service on uvicorn, with its background workers (serving-file reload,
idle-session closing, organisation, retention purge and audit witness) and SIGHUP as an immediate reload."""
from __future__ import annotations

import ipaddress
import logging
import signal
import socket
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from evolve.errors import ConfigError
from evolve.files import StoreError
from evolve.llm import NoCache, RolesConfig, build_llm_roles, check_reachable
from evolve.llm.config import EndpointUnreachable
from evolve.runtime.embedder import default_embedder
from evolve.runtime.onnx_embedder import OnnxEmbedder
from evolve.runtime.usage import UsageStats
from evolve.serve.access import Access, AuditFailed
from evolve.serve.app import create_app
from evolve.serve.audit import audit_of, witness_head
from evolve.serve.keys import KeyStore
from evolve.serve.backend import StoreUnavailable
from evolve.serve.answers import answer_entries, load_answers
from evolve.serve.batching import BatchingEmbedder
from evolve.serve.guard import GuardPlan
from evolve.serve.stores import open_backend
from evolve.state.lock import ServiceLock
from evolve.serve.memory import MemoryService
from evolve.serve.tenants import Quarantined
from evolve.serve.probeguard import ProbeJudge
from evolve.serve.rekey import claim_naming
from evolve.serve.strategy import Loaded, RuntimeParts, StrategySlot

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeConfig:
    data: Path
    serving: Path
    stores: Path | None
    host: str = "127.0.0.1"
    port: int = 8420
    shadow: str | None = None
    allow_untracked: bool = False
    idle_seconds: float = 600.0
    reload_seconds: float = 1.0
    store: str | None = None  # a postgresql:// URL: the shared store instead of the files under ``data``
    roles: RolesConfig | None = None  # model endpoints of the runtime roles (extractor, expander, answerer)
    max_users: int | None = None  # users whose memory stays loaded (least recently used unloaded beyond it)
    guard: GuardPlan | None = None  # the canary guard's test (default: GuardPlan())
    answers: Path | None = None  # the operator's answers (answers.yaml): the guard judges recalls they cover
    auth: Path | None = None  # the keys file; None: no authentication (refused beyond loopback unless overridden)
    allow_unauthenticated: bool = False  # serve beyond loopback without --auth (logged and audited)
    retention_days: float | None = None  # turns are purged this long after their capture
    audit_witness: Path | None = None  # the audit's head is appended here (kept outside the data directory)
    housekeeping_seconds: float = 60.0  # how often expired turns are purged and the audit's head witnessed
    guard_probes: bool = True  # the canary guard also judges probes of the canary users' own turns (label-free)
    probe_seconds: float = 2.0  # pause between passes of the probe judge


def parse_canary(text: str) -> tuple[str, float]:
    """``CANDIDATE_ID:FRACTION`` (fraction in (0, 1]); ValueError saying what is wrong."""
    candidate, sep, share = text.rpartition(":")
    try:
        fraction = float(share)
    except ValueError:
        fraction = -1.0
    if not sep or not candidate or not 0 < fraction <= 1:
        raise ValueError(f"--canary {text!r}: expected CANDIDATE_ID:FRACTION with 0 < FRACTION <= 1, e.g. r002-c00:0.1")
    return candidate, fraction


#: The roles a served runtime plays; the others (judge, planner, critic, questioner) belong to the nightly run.
RUNTIME_ROLES = ("extractor", "expander", "answerer", "fuser")


def runtime_parts(roles: RolesConfig | None, usage: UsageStats) -> RuntimeParts:
    """The embedder every served runtime shares (concurrent questions batched into ONNX Runtime passes) and a model
    client for each runtime role ``roles`` puts on an endpoint, counting into ``usage``. Replies are not cached:
    prompts hold users' words."""
    llm = build_llm_roles(roles, NoCache(), usage) if roles is not None else {}
    if llm:
        try:
            check_reachable(roles)
        except EndpointUnreachable as exc:  # serve anyway: requests needing the role get 503 until it answers
            log.warning("%s", exc)
    embedder = default_embedder()  # questions: ONNX Runtime passes; a store's ingestion: the harness's own encoding
    return RuntimeParts(BatchingEmbedder(embedder, passes=OnnxEmbedder(embedder)),
                        **{r: llm.get(r) for r in RUNTIME_ROLES})


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: any free port), before the model loads, so a taken or forbidden
    address fails at once; :class:`ConfigError` saying which."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(f"--host {host!r}: {exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def url_of(sock: socket.socket) -> str:
    """The address ``sock`` is bound to, as a URL (the real port when 0 was asked for)."""
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


class Service:
    """The app and its workers; :meth:`start_workers` before serving, :meth:`stop` after. ``reload_now``: the event
    SIGHUP sets (installed before the model loads by :func:`run`, so a SIGHUP during start-up is a reload)."""

    #: Seconds :meth:`stop` waits for each worker to finish its current step.
    STOP_WAIT_S = 60.0

    def __init__(self, config: ServeConfig, reload_now: threading.Event | None = None):
        self.config = config
        check_witness(config)
        # A file store has one writer: a second service on the data directory is refused before it loads anything.
        self._lock = ServiceLock(config.data).acquire() if config.store is None else None
        try:
            self._start(config, reload_now)
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise

    def _start(self, config: ServeConfig, reload_now: threading.Event | None) -> None:
        keys = KeyStore(config.auth) if config.auth is not None else None  # before the model: a bad file fails now
        self.usage = UsageStats()
        self.slot = StrategySlot(config.stores, config.serving, runtime_parts(config.roles, self.usage),
                                 allow_untracked=config.allow_untracked, shadow=config.shadow, guard=config.guard)
        self.slot.current.runtime.embedder.encode(["warm up"])  # load the model now, not on the first recall
        retention = timedelta(days=config.retention_days) if config.retention_days is not None else None
        self.memory = MemoryService(open_backend(config.store or str(config.data)), lambda: self.slot.current,
                                    config.max_users, retention)
        claim_naming(self.memory.backend)  # the names this service writes are the store's
        self.access = Access(keys, audit_of(self.memory.backend))
        self.access.record("START", None, None, reason=start_note(config))
        self.users = self.memory.recover()
        answers = answer_entries(load_answers(config.answers)) if config.answers else None
        self.app = create_app(self.slot, self.memory, self.usage, answers, self.access)
        self.probes = ProbeJudge(self.memory, self.slot) if config.guard_probes else None
        self._stop = threading.Event()
        self._reload_now = reload_now or threading.Event()
        self._workers: list[threading.Thread] = []
        self._witnessed: str | None = None
        if config.audit_witness is not None:
            try:  # the START line witnessed now: a witness that cannot be written is said at start, not every minute
                self.housekeeping()
            except (StoreError, OSError) as exc:
                raise ConfigError(f"--audit-witness {config.audit_witness}: cannot be written ({exc})") from None

    def _warm(self, loaded: Loaded) -> None:
        """Build every loaded user's memory under ``loaded`` while the old strategy serves."""
        for user in self.memory.loaded():
            if self._stop.is_set():
                return
            try:
                self.memory.store(user, loaded)
            except (LookupError, Quarantined):
                continue

    def _watch(self) -> None:
        while not self._stop.is_set():
            forced = self._reload_now.wait(self.config.reload_seconds)
            self._reload_now.clear()
            if self._stop.is_set():
                return
            try:
                if self.slot.check(self._warm, force=forced):
                    log.warning("serving strategy reloaded: %s", self.slot.current.strategy_hash)
                    self.memory.forget_strategies(self.slot.keys())
                if self.slot.sync_canary():
                    self.memory.forget_strategies(self.slot.keys())
                elif self.slot.refused:
                    log.warning("serving file refused, previous strategy keeps serving: %s",
                                self.slot.refused["reason"])
                self.memory.close_idle(self.config.idle_seconds)
                self.memory.release()
            except Exception:  # noqa: BLE001 - the watcher must outlive any one bad look
                log.exception("serving-file watch failed")

    def _organise(self) -> None:
        while not self._stop.is_set():
            try:
                self.memory.organise_pending(block=True)
            except StoreUnavailable as exc:  # the step is queued again at the next start (recover)
                log.warning("organisation paused: %s", exc)
                self._stop.wait(self.config.reload_seconds)

    def _build_captured(self) -> None:
        while not self._stop.is_set():
            self.memory.warm_captured(lambda user: self.slot.for_user(user)[0])

    def _probe(self) -> None:
        while not self._stop.wait(self.config.probe_seconds):
            try:
                self.probes.run_pass()
            except Exception:  # noqa: BLE001 - judged again at the next pass; the service keeps serving
                log.exception("probe pass of the canary guard failed")

    def housekeeping(self) -> None:
        """Purge the turns whose retention ended (each user's purge audited before it is written) and witness the
        audit's head if it moved."""
        self.memory.purge_expired(lambda user, ids: self.access.record("PURGE", None, user, ids=ids,
                                                                       counts={"turns": len(ids)}))
        self.access.flush()  # refusals repeated in a minute now over: one line each
        if self.config.audit_witness is not None and self.access.audit is not None:
            head = self.access.audit.last()
            if head is not None and head["hash"] != self._witnessed:
                witness_head(self.access.audit, self.config.audit_witness)
                self._witnessed = head["hash"]

    def _keep(self) -> None:
        while not self._stop.wait(self.config.housekeeping_seconds):
            try:
                self.housekeeping()
            except Exception:  # noqa: BLE001 - tried again at the next look
                log.exception("retention purge or audit witness failed")

    def start_workers(self) -> None:
        for target in (self._watch, self._organise, self._build_captured, self._keep,
                       *([self._probe] if self.probes is not None else [])):
            worker = threading.Thread(target=target, daemon=True, name=f"serve{target.__name__}")
            worker.start()
            self._workers.append(worker)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGHUP, lambda *_: self._reload_now.set())

    def stop(self) -> None:
        """Stop the workers and wait for each to finish its step: none is inside the model or a store write when
        the interpreter exits (a thread still encoding then aborts the process from C++)."""
        self._stop.set()
        self._reload_now.set()  # wakes the watcher now
        for worker in self._workers:
            worker.join(self.STOP_WAIT_S)
            if worker.is_alive():
                log.warning("worker %s still running after %.0f s at stop", worker.name, self.STOP_WAIT_S)
        try:
            self.access.flush(float("inf"))
        except AuditFailed as exc:
            log.warning("repeated refusals not audited at stop: %s", exc)
        if self._lock is not None:
            self._lock.release()


def check_witness(config: ServeConfig) -> None:
    """:class:`ConfigError` unless ``--audit-witness`` names a file (or a new one) in an existing folder outside the
    data directory: a witness kept beside the audit could be rewritten with it."""
    if config.audit_witness is None:
        return
    path = config.audit_witness.resolve()
    if path.exists() and not path.is_file():
        raise ConfigError(f"--audit-witness {config.audit_witness}: not a regular file")
    data = Path(config.data).resolve()
    if config.store is None and (path == data or data in path.parents):
        raise ConfigError(f"--audit-witness {config.audit_witness}: inside the data directory {data}; keep the "
                          "witness elsewhere (whoever can rewrite the audit could rewrite it too)")
    if not path.parent.is_dir():
        raise ConfigError(f"--audit-witness {config.audit_witness}: its folder {path.parent} does not exist")


def start_note(config: ServeConfig) -> str:
    """How the service was started, for the audit's START line (no secret: the keys file's path)."""
    note = f"host {config.host}, auth {config.auth or 'off'}"
    if config.auth is None and config.allow_unauthenticated:
        note += ", --allow-unauthenticated"
    return note + (f", retention {config.retention_days:g} days" if config.retention_days is not None else "")


def guard_note(config: ServeConfig, plan: GuardPlan) -> str:
    """What the canary guard will judge, said at start (a guard with nothing to judge says so)."""
    sources = [s for s, on in (("probes of the canary users' own turns", config.guard_probes),
                               ("recalls the operator's answers cover", config.answers is not None)) if on]
    if not sources:
        return "its guard judges nothing (--no-guard-probes and no --answers): it can never stop the canary"
    return f"its guard tests at alpha {plan.alpha} on {' and '.join(sources)}; 0 pairs judged yet"


def check_open(host: str, config: ServeConfig) -> None:
    """Refuse (:class:`ConfigError`) to serve without ``--auth`` on the bound address ``host`` if it lies beyond
    loopback, unless ``--allow-unauthenticated`` says so (then logged)."""
    if config.auth is not None or ipaddress.ip_address(host).is_loopback:
        return
    if not config.allow_unauthenticated:
        raise ConfigError(f"--host {config.host}: refusing to serve beyond loopback without --auth (any client that "
                          "reaches the port could read or erase any user); pass --auth FILE, or "
                          "--allow-unauthenticated to serve it open anyway")
    log.warning("serving %s without authentication (--allow-unauthenticated): any client that reaches the port can "
                "read or erase any user", host)


def run(config: ServeConfig, reload_now: threading.Event | None = None) -> None:
    """Serve until interrupted (SIGINT or SIGTERM); the address is bound before anything loads."""
    import uvicorn

    sock = bind(config.host, config.port)
    try:
        check_open(sock.getsockname()[0], config)
        service = Service(config, reload_now)
        service.start_workers()
        print(f"serving {service.slot.current.strategy_hash[:12]} ({service.slot.current.state}) from "
              f"{config.serving}; {service.users} user(s) in {config.data}; {url_of(sock)}/docs", flush=True)
        canary = service.slot.canary
        if canary is not None:
            print(f"canary {canary.candidate_id} ({canary.loaded.verdict}) serves {canary.fraction:g} of users "
                  f"(journal entry {canary.start_index}); {guard_note(config, service.slot.guard_plan)}", flush=True)
        try:
            uvicorn.Server(uvicorn.Config(service.app, log_level="warning")).run(sockets=[sock])
        finally:
            service.stop()
    finally:
        sock.close()
