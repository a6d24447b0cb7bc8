"""The shared store: every user's memory in PostgreSQL (psycopg 3, a connection pool), so several service replicas
serve the same users.

Tables (created if missing): ``mem_users``; ``mem_events`` - the capture log, ``(user, seq)`` numbered without gaps
under a per-user advisory lock, one row per acknowledged request, committed before the reply; ``mem_steps`` - one
row per organisation step (the provenance a Git commit gives the file store) with ``mem_records`` (one per turn,
with the sha256 of its text) and ``mem_facts`` (the facts as that step left them, supersession and retraction
marks included); ``mem_organised``; ``mem_recalls`` - the recall
log, bounded per user; ``mem_tombstones`` - content-free, keyed by the user's name (the sha256 of the id, keyed
under ``MEMEVOLVE_USER_KEY``: :mod:`evolve.serve.pseudonym`; ``mem_naming`` says which); ``mem_generations`` -
each user id's erasure generation, by the same name. Erasure deletes every row of the user and advances its
generation in one transaction; erasing one turn rewrites its capture-log row and deletes the rows derived from it
(its session's records, the facts it is a source of, in every step) in one. Rows deleted or rewritten stay in the
database's files as dead row versions until ``VACUUM`` reclaims them, and in its write-ahead log and backups. When
the database cannot be reached, every call raises :class:`evolve.serve.backend.StoreUnavailable` (the service
answers 503) and the pool reconnects once it is back. Keying the names renames the tombstones, generations and audit
lines and records the naming in one transaction.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from evolve.benchmarks.types import Turn
from evolve.files import now_iso
from evolve.runtime.live import CaptureError
from evolve.runtime.store import MemoryStore
from evolve.serve.backend import StoreUnavailable, UnknownTurn, valid_user
from evolve.serve.pseudonym import LEGACY, Naming, Pseudonyms
from evolve.serve.filestore import _fact
from evolve.serve.records import (CaptureEvent, RecallRecord, RecordError, Tombstone, TurnErased, TurnMeta,
                                  TurnsEvent, load_record, read_event, turns_in, without_turn)

#: Recall records kept per user (older ones are deleted as new ones arrive, checked every ``min(100, kept)``
#: appends of all users).
RECALLS_KEPT = 10_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS mem_users (user_id text PRIMARY KEY, created timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS mem_events (user_id text NOT NULL, seq bigint NOT NULL, event jsonb NOT NULL,
                                       PRIMARY KEY (user_id, seq));
CREATE TABLE IF NOT EXISTS mem_steps (step bigserial PRIMARY KEY, user_id text NOT NULL, session text NOT NULL,
                                      strategy text NOT NULL, turns int NOT NULL, facts int NOT NULL,
                                      at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS mem_records (user_id text NOT NULL, session text NOT NULL, n int NOT NULL,
                                        turn_id text NOT NULL, meta jsonb NOT NULL, body text NOT NULL,
                                        PRIMARY KEY (user_id, session, n));
CREATE TABLE IF NOT EXISTS mem_facts (user_id text NOT NULL, step bigint NOT NULL, fact jsonb NOT NULL);
CREATE INDEX IF NOT EXISTS mem_facts_user ON mem_facts (user_id, step);
CREATE TABLE IF NOT EXISTS mem_organised (user_id text NOT NULL, session text NOT NULL, step bigint NOT NULL,
                                          PRIMARY KEY (user_id, session));
CREATE TABLE IF NOT EXISTS mem_recalls (seq bigserial PRIMARY KEY, user_id text NOT NULL, record jsonb NOT NULL);
CREATE INDEX IF NOT EXISTS mem_recalls_user ON mem_recalls (user_id, seq);
CREATE TABLE IF NOT EXISTS mem_tombstones (user_sha256 text PRIMARY KEY, tombstone jsonb NOT NULL);
CREATE TABLE IF NOT EXISTS mem_generations (user_sha256 text PRIMARY KEY, generation bigint NOT NULL);
CREATE TABLE IF NOT EXISTS mem_naming (one boolean PRIMARY KEY DEFAULT true CHECK (one), naming jsonb NOT NULL);
"""
_USER_TABLES = ("mem_events", "mem_steps", "mem_records", "mem_facts", "mem_organised", "mem_recalls", "mem_users")


def _drop_recalls(c, user: str, turns: set[str]) -> None:
    """Delete the user's recalls whose context packed one of ``turns`` (their answers may hold its words)."""
    stale = [seq for seq, record in c.execute("SELECT seq, record FROM mem_recalls WHERE user_id = %s", (user,))
             if load_record(RecallRecord, record, f"user {user} recall {seq}").packs(turns)]
    if stale:
        c.execute("DELETE FROM mem_recalls WHERE seq = ANY(%s)", (stale,))


def _lock_id(user: str) -> int:
    return int.from_bytes(hashlib.sha256(user.encode("utf-8")).digest()[:8], "big", signed=True)


class PostgresBackend:
    """:class:`evolve.serve.backend.Backend` over one PostgreSQL database, shared by every replica."""

    #: Other processes write the same users: the service re-reads the capture log before using its copy.
    shared = True
    #: The audit's table (:class:`evolve.serve.audit.PgAudit`) and the advisory lock every replica appends under.
    AUDIT_TABLE = "CREATE TABLE IF NOT EXISTS mem_audit (index bigint PRIMARY KEY, line text NOT NULL)"
    AUDIT_LOCK = 0x6D656D61756474

    def __init__(self, url: str, max_size: int = 8, timeout: float = 5.0, recalls_kept: int = RECALLS_KEPT,
                 names: Pseudonyms | None = None):
        self.url, self.timeout, self.recalls_kept = url, timeout, recalls_kept
        self.names = names or Pseudonyms.from_env()
        self.pool = ConnectionPool(url, min_size=1, max_size=max_size, timeout=timeout, open=False,
                                   kwargs={"connect_timeout": max(1, int(timeout))})
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(timeout))) as conn:
                conn.execute(SCHEMA)
            self.pool.open(wait=True, timeout=timeout)
        except (psycopg.Error, PoolTimeout) as exc:
            self.pool.close()
            raise StoreUnavailable(f"memory store {self._where()} unavailable: {exc}") from None

    def _where(self) -> str:
        """The database without credentials."""
        info = psycopg.conninfo.conninfo_to_dict(self.url)
        return f"{info.get('dbname', '?')} at {info.get('host', 'localhost')}"

    @property
    def where(self) -> str:
        return self._where()

    def run(self, work):
        """``work(conn)`` in one transaction, for tables kept beside the users' (the audit)."""
        return self._run(work)

    def _run(self, work):
        """``work(conn)`` in one transaction; :class:`StoreUnavailable` when the database cannot be reached."""
        try:
            with self.pool.connection() as conn:
                with conn.transaction():
                    return work(conn)
        except (psycopg.OperationalError, PoolTimeout) as exc:
            self.pool.check()  # drop broken connections so the next call reconnects
            raise StoreUnavailable(f"memory store {self._where()} unavailable: {str(exc).strip() or type(exc).__name__}"
                                   ) from None

    @staticmethod
    def _check(user: str) -> str:
        if not valid_user(user):
            raise ValueError(f"invalid user id {user!r}")
        return user

    def users(self) -> list[str]:
        return self._run(lambda c: [r[0] for r in c.execute("SELECT user_id FROM mem_users ORDER BY 1")])

    def exists(self, user: str) -> bool:
        return self._run(lambda c: c.execute("SELECT 1 FROM mem_users WHERE user_id = %s",
                                             (self._check(user),)).fetchone() is not None)

    # ---------------------------------------------------------------- capture log

    def append(self, user: str, event: CaptureEvent) -> int:
        """Append one event, committed on return; its sequence number."""
        self._check(user)

        def work(c):
            c.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(user),))
            c.execute("INSERT INTO mem_users (user_id) VALUES (%s) ON CONFLICT DO NOTHING", (user,))
            ids = [t.id for t in event.turns] if isinstance(event, TurnsEvent) else []
            if ids:  # another replica may have taken an id since this one read the log
                taken = c.execute("SELECT t->>'id' FROM mem_events e, jsonb_array_elements(e.event->'turns') t "
                                  "WHERE e.user_id = %s AND t->>'id' = ANY(%s) LIMIT 1", (user, ids)).fetchone()
                if taken:
                    raise CaptureError(f"turn id {taken[0]!r} was already captured")
            stamped = event.model_copy(update={"at": now_iso()})
            return c.execute("INSERT INTO mem_events SELECT %s, coalesce(max(seq), 0) + 1, %s FROM mem_events "
                             "WHERE user_id = %s RETURNING seq", (user, Jsonb(stamped.stored()), user)).fetchone()[0]
        return self._run(work)

    def events(self, user: str, since: int = 0) -> list[CaptureEvent]:
        """The user's events after the first ``since``, in order."""
        self._check(user)
        rows = self._run(lambda c: c.execute("SELECT seq, event FROM mem_events WHERE user_id = %s AND seq > %s "
                                             "ORDER BY seq", (user, since)).fetchall())
        return [read_event(event, f"user {user} capture log event {seq}") for seq, event in rows]

    def generation(self, user: str) -> int:
        self._check(user)
        return self._run(lambda c: self._generation(c, user))

    def _generation(self, c, user: str) -> int:
        row = c.execute("SELECT generation FROM mem_generations WHERE user_sha256 = %s",
                        (self.names.of(user),)).fetchone()
        return row[0] if row else 0

    def _advance(self, c, user: str) -> None:
        """Advance the user's generation (in the caller's transaction)."""
        c.execute("INSERT INTO mem_generations VALUES (%s, 1) ON CONFLICT (user_sha256) DO UPDATE SET generation = "
                  "mem_generations.generation + 1", (self.names.of(user),))

    # ---------------------------------------------------------------- organisation

    def organise(self, user: str, session: str, turns: list[Turn], store: MemoryStore, strategy_hash: str) -> None:
        self._check(user)
        chosen = [item for item in store.items if item.layer in ("L0", "L2")]

        def work(c):
            c.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(user),))
            if c.execute("SELECT 1 FROM mem_organised WHERE user_id = %s AND session = %s", (user, session)).fetchone():
                return  # another replica organised it
            step = c.execute("INSERT INTO mem_steps (user_id, session, strategy, turns, facts) VALUES "
                             "(%s, %s, %s, %s, %s) RETURNING step",
                             (user, session, strategy_hash, len(turns), len(chosen))).fetchone()[0]
            with c.cursor() as cur:
                cur.executemany("INSERT INTO mem_records VALUES (%s, %s, %s, %s, %s, %s)", [
                    (user, session, n, t.id, Jsonb(TurnMeta.of(t, session, store.ikb).stored()), t.text)
                    for n, t in enumerate(turns)])
                cur.executemany("INSERT INTO mem_facts (user_id, step, fact) VALUES (%s, %s, %s)",
                                [(user, step, Jsonb(_fact(item))) for item in chosen])
            c.execute("INSERT INTO mem_organised VALUES (%s, %s, %s)", (user, session, step))
        self._run(work)

    def organised(self, user: str) -> set[str]:
        return self._run(lambda c: {r[0] for r in c.execute("SELECT session FROM mem_organised WHERE user_id = %s",
                                                            (self._check(user),))})

    def embeddings_dir(self, user: str) -> Path | None:
        return None

    # ---------------------------------------------------------------- recall log

    def log_recall(self, user: str, record: RecallRecord) -> None:
        self._check(user)

        def work(c):
            seq = c.execute("INSERT INTO mem_recalls (user_id, record) VALUES (%s, %s) RETURNING seq",
                            (user, Jsonb(record.stored()))).fetchone()[0]
            if seq % min(100, self.recalls_kept) == 0:
                c.execute("DELETE FROM mem_recalls WHERE user_id = %s AND seq <= (SELECT seq FROM mem_recalls WHERE "
                          "user_id = %s ORDER BY seq DESC OFFSET %s LIMIT 1)", (user, user, self.recalls_kept))
        self._run(work)

    def recalls(self, user: str) -> list[RecallRecord]:
        rows = self._run(lambda c: c.execute("SELECT seq, record FROM mem_recalls WHERE user_id = %s ORDER BY seq",
                                             (self._check(user),)).fetchall())
        return [load_record(RecallRecord, record, f"user {user} recall {seq}") for seq, record in rows]

    # ---------------------------------------------------------------- erasure and verification

    def erase(self, user: str) -> Tombstone:
        self._check(user)

        def work(c):
            c.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(user),))
            return self._erase(c, user)
        return self._run(work)

    def _erase(self, c, user: str) -> Tombstone:
        """Every row of the user deleted, the generation advanced, the tombstone written (the user's lock held)."""
        turns = c.execute("SELECT coalesce(sum(jsonb_array_length(event->'turns')), 0) FROM mem_events "
                          "WHERE user_id = %s AND event ? 'turns'", (user,)).fetchone()[0]
        tombstone = Tombstone(user_sha256=self.names.of(user), erased_at=now_iso(), turns_erased=turns)
        for table in _USER_TABLES:
            c.execute(f"DELETE FROM {table} WHERE user_id = %s", (user,))
        self._advance(c, user)
        c.execute("INSERT INTO mem_tombstones VALUES (%s, %s) ON CONFLICT (user_sha256) DO UPDATE SET "
                  "tombstone = excluded.tombstone", (tombstone.user_sha256, Jsonb(tombstone.stored())))
        return tombstone

    def rewrite(self, user: str, events: list[CaptureEvent], purged: set[str], through: int, generation: int) -> bool:
        """In one transaction under the user's lock, so an event another replica appends meanwhile is kept."""
        self._check(user)

        def work(c):
            c.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(user),))
            if self._generation(c, user) != generation:
                return False
            log = [*events, *(read_event(e, f"user {user} capture log event {seq}") for seq, e in c.execute(
                "SELECT seq, event FROM mem_events WHERE user_id = %s AND seq > %s ORDER BY seq", (user, through)))]
            if not turns_in(log):
                self._erase(c, user)
                return True
            for table in ("mem_events", "mem_steps", "mem_records", "mem_facts", "mem_organised"):
                c.execute(f"DELETE FROM {table} WHERE user_id = %s", (user,))
            with c.cursor() as cur:
                cur.executemany("INSERT INTO mem_events VALUES (%s, %s, %s)",
                                [(user, n, Jsonb(e.stored())) for n, e in enumerate(log, 1)])
            _drop_recalls(c, user, purged)
            self._advance(c, user)
            return True
        return self._run(work)

    def erase_turn(self, user: str, turn: str) -> TurnErased:
        """In one transaction: the turn left out of its capture-log event, its session's records and organised mark
        deleted (organised again without it), every fact it is a source of deleted from every step, the recalls that
        packed it deleted, the generation advanced."""
        self._check(user)

        def work(c):
            c.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_id(user),))
            row = c.execute("SELECT seq, event FROM mem_events WHERE user_id = %s AND event->'turns' @> %s LIMIT 1",
                            (user, Jsonb([{"id": turn}]))).fetchone()
            if row is None:
                raise UnknownTurn(user, turn)
            event = read_event(row[1], f"user {user} capture log event {row[0]}")
            session = next(t.session for t in turns_in([event]) if t.id == turn)
            [kept] = without_turn([event], turn)
            c.execute("UPDATE mem_events SET event = %s WHERE user_id = %s AND seq = %s",
                      (Jsonb(kept.stored()), user, row[0]))
            organised = c.execute("DELETE FROM mem_organised WHERE user_id = %s AND session = %s RETURNING 1",
                                  (user, session)).fetchone() is not None
            c.execute("DELETE FROM mem_records WHERE user_id = %s AND session = %s", (user, session))
            c.execute("DELETE FROM mem_facts WHERE user_id = %s AND fact->'source_ids' ? %s", (user, turn))
            _drop_recalls(c, user, {turn})
            self._advance(c, user)
            return TurnErased(turn=turn, session=session, erased_at=now_iso(), organised=organised)
        return self._run(work)

    # ---------------------------------------------------------------- how users are named

    def naming(self) -> Naming | None:
        """How the store names users: as recorded, else unkeyed if it holds any name, else ``None`` (a new store)."""
        def work(c):
            row = c.execute("SELECT naming FROM mem_naming").fetchone()
            if row:
                return load_record(Naming, row[0], f"mem_naming of {self.where}")
            held = c.execute("SELECT EXISTS (SELECT 1 FROM mem_tombstones) OR EXISTS (SELECT 1 FROM mem_generations)"
                             ).fetchone()[0]
            if not held and c.execute("SELECT to_regclass('mem_audit')").fetchone()[0] is not None:
                held = c.execute("SELECT EXISTS (SELECT 1 FROM mem_audit)").fetchone()[0]
            return LEGACY if held else None
        return self._run(work)

    def set_naming(self, naming: Naming) -> None:
        self._run(lambda c: self._set_naming(c, naming))

    @staticmethod
    def _set_naming(c, naming: Naming) -> None:
        c.execute("INSERT INTO mem_naming (naming) VALUES (%s) ON CONFLICT (one) DO UPDATE SET naming = "
                  "excluded.naming", (Jsonb(naming.stored()),))

    def rekey(self, names: Pseudonyms, audit_lines: list[str]) -> int:
        """Name users under ``names`` (from unkeyed sha256): the tombstones and generations renamed, the audit
        replaced by ``audit_lines`` and the naming recorded, in one transaction under the audit's lock. Names
        renamed."""
        def work(c):
            c.execute("SELECT pg_advisory_xact_lock(%s)", (self.AUDIT_LOCK,))
            stones = c.execute("SELECT user_sha256, tombstone FROM mem_tombstones").fetchall()
            generations = c.execute("SELECT user_sha256, generation FROM mem_generations").fetchall()
            c.execute("DELETE FROM mem_tombstones")
            c.execute("DELETE FROM mem_generations")
            for digest, raw in stones:
                stone = load_record(Tombstone, raw, f"tombstone {digest}")
                name = names.keyed(digest)
                c.execute("INSERT INTO mem_tombstones VALUES (%s, %s)",
                          (name, Jsonb(stone.model_copy(update={"user_sha256": name}).stored())))
            for digest, generation in generations:
                c.execute("INSERT INTO mem_generations VALUES (%s, %s)", (names.keyed(digest), generation))
            c.execute(self.AUDIT_TABLE)
            c.execute("DELETE FROM mem_audit")
            for index, line in enumerate(audit_lines):
                c.execute("INSERT INTO mem_audit VALUES (%s, %s)", (index, line))
            self._set_naming(c, names.naming)
            return len(stones) + len(generations)
        renamed = self._run(work)
        self.names = names
        return renamed

    def tombstone(self, user: str) -> Tombstone | None:
        row = self._run(lambda c: c.execute("SELECT tombstone FROM mem_tombstones WHERE user_sha256 = %s",
                                            (self.names.of(user),)).fetchone())
        return load_record(Tombstone, row[0], f"tombstone of user sha256 {self.names.of(user)}") if row else None

    def verify(self, user: str) -> list[str]:
        self._check(user)

        def work(c):
            problems = []
            seqs = [r[0] for r in c.execute("SELECT seq FROM mem_events WHERE user_id = %s ORDER BY seq", (user,))]
            if seqs != list(range(1, len(seqs) + 1)):
                problems.append(f"user {user}: capture log sequence has gaps")
            try:
                events = [read_event(e, f"user {user} capture log event {seq}") for seq, e in c.execute(
                    "SELECT seq, event FROM mem_events WHERE user_id = %s ORDER BY seq", (user,))]
            except RecordError as exc:
                return problems + [str(exc)]
            texts = {t.id: t.text for t in turns_in(events)}
            for session, turn_id, meta, body in c.execute(
                    "SELECT session, turn_id, meta, body FROM mem_records WHERE user_id = %s", (user,)):
                where = f"user {user}: record of turn {turn_id!r} (session {session})"
                try:
                    held = load_record(TurnMeta, meta, where).holds(body, texts.get(turn_id))
                except RecordError as exc:
                    problems.append(str(exc))
                    continue
                if not held:
                    problems.append(f"{where} does not match the capture log")
            return problems
        return self._run(work)

    def close(self) -> None:
        self.pool.close()

