"""The optimizer's named stores under one root, committed round by round through a write-ahead log.

A round's changes are gathered in a :class:`RoundBundle` and committed by :meth:`StoreSet.commit_round`:

1. the bundle is written atomically to ``rounds/round-NNNN.json`` (the write-ahead log);
2. it is applied idempotently: strategy files and JSON documents are written atomically, JSONL records
   (each with a unique ``key``) are appended unless already present, journal entries carry
   ``(round, seq)`` and are appended unless already present, the checkpoint is saved unless already saved;
3. ``state.json`` is written with ``last_committed_round = N`` and the WAL file is removed.

Opening a :class:`StoreSet` takes the run lock, verifies the journal against the head recorded at the last
commit (damaged committed history is refused, never repaired) and runs :meth:`StoreSet.recover`, which finishes
any round whose WAL is newer than ``last_committed_round``, so after a crash at any point a round is either
fully visible or absent, and no record appears twice. Rounds are numbered from 1; 0 means none committed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from evolve.state.bundle import RoundBundle
from evolve.state.checkpoint import Checkpoint
from evolve.state.entries import validate_payload
from evolve.state.journal import KEY_ENV, Journal, VerifyResult
from evolve.canonical import canonical_hash, canonical_json
from evolve.files import (
    StoreError, append_lines, atomic_write_json, atomic_write_text, crash_point, ensure_dir, is_torn, iter_jsonl,
    now_iso, os_error, read_json,
    remove_stale_temps, repair_torn_tail, require_appendable,
)
from evolve.state.layout import JSONL_STORES, StoreLayout
from evolve.state.lock import RunLock
from evolve.state.strategy_files import strategy_to_yaml
from evolve.state.view import StoreReader
from evolve.strategy.artifact import strategy_hash

_WAL_RE = re.compile(r"^round-(\d{4,})\.json$")


@dataclass
class RecoveryReport:
    """What :meth:`StoreSet.recover` did; ``clean`` if there was nothing to recover."""

    reapplied: list[int] = field(default_factory=list)
    discarded: list[dict] = field(default_factory=list)  # {"file", "reason"} of invalid WAL files
    repaired: list[dict] = field(default_factory=list)   # {"file", "bytes"} of torn last lines dropped
    removed_temps: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.reapplied or self.discarded or self.repaired or self.removed_temps)

    def to_payload(self) -> dict:
        return {"reapplied": self.reapplied, "discarded": self.discarded, "repaired": self.repaired,
                "removed_temps": self.removed_temps}


class StoreSet(StoreReader):
    """All persistent optimizer state under ``root``; holds the run lock until :meth:`close`.

    Use as a context manager. Opening recovers from any interrupted commit; the result is in
    :attr:`recovery` (and, if anything was done, in a ``RECOVER`` journal entry).
    """

    def __init__(self, root: str | Path, lock_timeout: float = 0.0):
        created_root = not Path(root).exists()
        self.root = ensure_dir(Path(root))
        self.layout = StoreLayout(self.root)
        lock = RunLock(self.root, lock_timeout)
        created_lock = not lock.path.exists()
        self._lock = lock.acquire()
        self._keys: dict[str, set[str]] = {}
        try:
            for path in (self.layout.journal, *(self.path(name) for name in JSONL_STORES)):
                require_appendable(path)  # a read-only file fails here, before any work, not mid-commit
            anchor = self.state.get("journal_head")
            self.journal = Journal(self.layout.journal, anchor)
            self._check_key_mode()
            verified = self.journal.verify(anchor)
            if not verified.ok:
                raise StoreError(self.layout.journal, f"committed history is damaged at entry "
                                                      f"{verified.first_bad_index}: {verified.reason}; nothing was "
                                                      "written (see `memevolve journal verify`)")
            for sub in (self.layout.rounds, self.layout.strategies, self.layout.cache):
                ensure_dir(sub)
            self.checkpoint = Checkpoint(self.layout.checkpoint)
            self.recovery = self.recover()
        except BaseException:
            self._lock.release()
            self._remove_created(lock.path if created_lock else None, created_root)
            raise

    # ------------------------------------------------------------ paths

    @property
    def optuna_path(self) -> Path:
        """SQLite file for the planner's Optuna study (the planner owns its content)."""
        return self.layout.optuna

    @property
    def cache_dir(self) -> Path:
        return self.layout.cache

    @property
    def strategies_dir(self) -> Path:
        return self.layout.strategies

    @property
    def rounds_dir(self) -> Path:
        return self.layout.rounds

    @property
    def state_path(self) -> Path:
        return self.layout.state

    def path(self, name: str) -> Path:
        """File of a named JSONL or document store."""
        return self.layout.store(name)

    # ------------------------------------------------------------ readers

    @property
    def state(self) -> dict:
        return read_json(self.state_path, {})

    @property
    def last_committed_round(self) -> int:
        return int(self.state.get("last_committed_round", 0))

    @property
    def current_strategy(self) -> str | None:
        """Hash of the current strategy, as last set through ``RoundBundle.state``."""
        return self.state.get("current_strategy")

    def append_journal(self, kind: str, payload: dict, state: dict | None = None) -> dict:
        """Append an entry outside a round commit (PROMOTE, ROLLBACK, ...) and move the recorded journal head,
        so that deleting it later is detected like any committed entry; ``state`` fields are written with the head.
        The payload must fit its type's model (:class:`~evolve.state.entries.PayloadError` otherwise, nothing
        written)."""
        self._require_lock()
        validate_payload(kind, payload, "journal entry to append")
        entry = self.journal.append(kind, payload)
        atomic_write_json(self.state_path, {**self.state, **(state or {}),
                                            "journal_head": {"index": entry["index"], "hash": entry["hash"]}})
        return entry

    def verify_journal(self) -> VerifyResult:
        """Verify the journal chain and that the head recorded at the last commit is still in it."""
        return self.journal.verify(anchor=self.state.get("journal_head"))

    # ------------------------------------------------------------ strategies

    def put_strategy(self, strategy: dict) -> str:
        """Store ``strategy`` as ``strategies/<hash>.yaml`` (never overwritten) and return its hash."""
        digest = strategy_hash(strategy)
        path = self.strategy_path(digest)
        if path.exists():
            self.get_strategy(digest)  # an existing file must still match its name
        else:
            atomic_write_text(path, strategy_to_yaml(strategy, path))
        return digest

    # ------------------------------------------------------------ commit protocol

    def commit_round(self, round_no: int, bundle: RoundBundle) -> None:
        """Make ``bundle`` durable as round ``round_no`` (> last committed round), all or nothing."""
        self._require_lock()
        try:
            bundle.check()
        except ValueError as exc:
            raise StoreError(self.rounds_dir, f"round {round_no}: invalid bundle: {exc}") from None
        if self._pending_wals():
            self.recover()  # finish a commit that failed part-way before starting another
        last = self.last_committed_round
        if not isinstance(round_no, int) or round_no <= last:
            raise StoreError(self.state_path, f"cannot commit round {round_no}: rounds must increase "
                                              f"(last committed round is {last})")
        for name, records in bundle.records.items():
            clash = sorted(self._existing_keys(name) & {r["key"] for r in records})
            if clash:
                raise StoreError(self.path(name), f"round {round_no}: record key {clash[0]!r} already exists "
                                                  f"({len(clash)} clashing key(s)); keys must be unique across rounds")
        for strategy in bundle.strategies + ([bundle.checkpoint["strategy"]] if bundle.checkpoint else []):
            strategy_to_yaml(strategy)  # anything that can fail deterministically fails before the WAL
        body = {"round": round_no, "bundle": bundle.to_json()}
        try:
            digest = canonical_hash(body)
        except (TypeError, ValueError) as exc:
            raise StoreError(self._wal_path(round_no), f"round {round_no}: cannot serialise bundle: {exc}") from None
        atomic_write_json(self._wal_path(round_no), {**body, "written_at": now_iso(), "sha256": digest})
        self._apply(round_no, bundle, resume=False)

    def recover(self) -> RecoveryReport:
        """Finish interrupted commits, drop torn appends and stale temp files; journal a RECOVER entry if any."""
        self._require_lock()
        report = RecoveryReport()
        if self.journal.repaired_tail:
            report.repaired.append({"file": self.journal.path.name, "bytes": len(self.journal.repaired_tail)})
            self.journal.repaired_tail = b""
        pending = bool(self._pending_wals())
        for name in JSONL_STORES:
            if not pending and is_torn(self.path(name)):
                raise StoreError(self.path(name), "committed records are damaged: the last line is torn but no "
                                                  "round commit was interrupted (truncated by hand?); nothing was "
                                                  "repaired")
            torn = repair_torn_tail(self.path(name))
            if torn:
                report.repaired.append({"file": self.path(name).name, "bytes": len(torn)})
                self._keys.pop(name, None)
        temps = remove_stale_temps(self.root) + remove_stale_temps(self.rounds_dir)
        temps += remove_stale_temps(self.strategies_dir) + remove_stale_temps(self.checkpoint.dir, recursive=True)
        temps += remove_stale_temps(self.cache_dir, recursive=True)
        report.removed_temps = [str(p.relative_to(self.root)) for p in temps]
        last = self.last_committed_round
        for number, path in self._pending_wals(include_stale=True):
            if number <= last:
                self._unlink(path)  # committed; the crash came between state.json and removing the WAL
                continue
            try:
                bundle = self._load_wal(path, number)
            except StoreError as exc:
                discarded = self.rounds_dir / "discarded" / f"{path.name}.{now_iso().replace(':', '')}"
                ensure_dir(discarded.parent)
                try:
                    path.replace(discarded)
                except OSError as err:
                    raise os_error(path, err, "move aside invalid WAL file") from None
                report.discarded.append({"file": str(path.relative_to(self.root)), "reason": exc.cause,
                                         "moved_to": str(discarded.relative_to(self.root))})
                continue
            self._apply(number, bundle, resume=True)
            report.reapplied.append(number)
            last = number
        if not report.clean:
            self.journal.append("RECOVER", report.to_payload())
        return report

    def close(self) -> None:
        """Release the run lock."""
        self._lock.release()

    def __enter__(self) -> "StoreSet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ internals

    def _check_key_mode(self) -> None:
        """Refuse to write a keyed journal without the key, or an unkeyed one with it: either would leave entries
        of both kinds, after which every keyed verification (or keyed run) fails."""
        last = self.journal.last()
        if last is None:
            return
        if "mac" in last and self.journal.key is None:
            raise StoreError(self.layout.journal, f"these stores are keyed (their journal entries carry MACs) but "
                                                  f"{KEY_ENV} is not set; set it to write them (nothing was written)")
        if "mac" not in last and self.journal.key is not None:
            raise StoreError(self.layout.journal, f"these stores are unkeyed (their journal entries carry no MAC) but "
                                                  f"{KEY_ENV} is set; unset it to write them (nothing was written)")

    def _remove_created(self, lock_file: Path | None, root: bool) -> None:
        """After a refused open, remove the lock file (and the root, if empty) that opening created."""
        try:
            if lock_file is not None:
                lock_file.unlink(missing_ok=True)
            if root and not any(self.root.iterdir()):
                self.root.rmdir()
        except OSError:
            pass  # best effort: the refusal, not this clean-up, is what the caller reports

    def _require_lock(self) -> None:
        if not self._lock.held:
            raise StoreError(self._lock.path, "store set is closed; open a new StoreSet to write")

    def _wal_path(self, round_no: int) -> Path:
        return self.rounds_dir / f"round-{round_no:04d}.json"

    def _pending_wals(self, include_stale: bool = False) -> list[tuple[int, Path]]:
        found = sorted((int(m.group(1)), p) for p in self.rounds_dir.iterdir()
                       if p.is_file() and (m := _WAL_RE.match(p.name)))
        if include_stale:
            return found
        last = self.last_committed_round
        return [(n, p) for n, p in found if n > last]

    def _load_wal(self, path: Path, number: int) -> RoundBundle:
        data = read_json(path)
        if not isinstance(data, dict) or not {"round", "bundle", "sha256"} <= set(data):
            raise StoreError(path, "WAL file lacks round/bundle/sha256")
        if data["round"] != number:
            raise StoreError(path, f"WAL file names round {number} but holds round {data['round']}")
        if canonical_hash({"round": data["round"], "bundle": data["bundle"]}) != data["sha256"]:
            raise StoreError(path, "WAL content does not match its sha256")
        try:
            return RoundBundle.from_json(data["bundle"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(path, f"WAL bundle is malformed: {exc}") from None

    def _existing_keys(self, name: str) -> set[str]:
        if name not in self._keys:
            self._keys[name] = {str(r.get("key")) for _, r in iter_jsonl(self.path(name))}
        return self._keys[name]

    def _apply(self, round_no: int, bundle: RoundBundle, resume: bool) -> None:
        for strategy in bundle.strategies:
            self.put_strategy(strategy)
        for name, records in bundle.records.items():
            keys = self._existing_keys(name)
            fresh = [r for r in records if r["key"] not in keys]
            append_lines(self.path(name), [canonical_json(r) for r in fresh])
            keys.update(r["key"] for r in fresh)
        crash_point("commit-records")
        for name, doc in bundle.docs.items():
            atomic_write_json(self.path(name), doc)
        if bundle.checkpoint is not None:
            cp = bundle.checkpoint
            saved = self.checkpoint.current_manifest()
            if not (resume and saved and saved["round"] == round_no
                    and saved["strategy_hash"] == strategy_hash(cp["strategy"])):
                self.checkpoint.save(cp["strategy"], cp["score"], round_no, cp.get("meta", {}))
        present = ({e["seq"] for e in self.journal.entries() if e["round"] == round_no and e["seq"] is not None}
                   if resume else set())
        for seq, (kind, payload) in enumerate(bundle.journal):
            if seq not in present:
                self.journal.append(kind, payload, round=round_no, seq=seq)
        head = self.journal.last()
        state = {**self.state, **bundle.state, "last_committed_round": round_no, "committed_at": now_iso(),
                 "journal_head": None if head is None else {"index": head["index"], "hash": head["hash"]}}
        atomic_write_json(self.state_path, state)
        self._unlink(self._wal_path(round_no))

    @staticmethod
    def _unlink(path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise os_error(path, exc, "remove") from None

