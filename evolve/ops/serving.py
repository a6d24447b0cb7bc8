"""The serving strategy file: promotion of recorded accepts, rollback, and drift detection.

The serving file (e.g. ``strategies/serving.yaml``) is what production loads. Every change to it goes
through :func:`promote` or :func:`rollback`, which, after checking the target (:mod:`evolve.ops.targets`) and under
the stores' run lock,

* keep byte-exact copies of the old and the new file under ``<stores>/serving/<sha256 of bytes>.yaml``,
* record the intended change, replace the serving file atomically,
* append a ``PROMOTE`` / ``ROLLBACK`` journal entry with the strategy hash, byte hash and copy of both, and
* witness the new journal head beside the serving file (:mod:`evolve.ops.witness`),

crash-atomically: a change a crash interrupted is finished or abandoned by the next one (:mod:`evolve.ops.change`).

The journal is thereby the serving history. A serving file whose bytes differ from what the last entry for
its path installed has *drifted*; a history whose entries do not check out (a promotion of a strategy no
journaled ACCEPT decided, a rollback to a file never served) is *unverified*. Rollback without ``--to`` undoes
the latest change not yet undone (stack order); ``--to N`` re-serves exactly the file that journal entry ``N``
installed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evolve.state.entries import JournalEntry
from evolve.state.record import CandidateRecord
from evolve.ops.drift import (
    SERVING_TYPES, Served, history_problem, read_optional, serving_entries, strategy_hash_of,
)
from evolve.ops.change import Recovered, apply_change, pending_change, recover_change
from evolve.ops.history import History
from evolve.ops.promotable import promotability
from evolve.ops.review import CANDIDATE_ID_RE
from evolve.ops.targets import Refused, check_target
from evolve.files import atomic_write_bytes, ensure_dir, require_writable_dir
from evolve.canonical import sha256_hex
from evolve.state.stores import StoreSet
from evolve.strategy import strict_yaml
from evolve.strategy.artifact import StrategyError, parse_strategy, policy_hash, strategy_hash
from evolve.strategy.diff import StrategyDiff, diff_strategies
from evolve.strategy.schema import schema_hash
from evolve.verify.decision import Verdict, changes_strategy

__all__ = ["Refused", "promote", "rollback", "recover", "ChangeResult"]


@dataclass
class ChangeResult:
    """What a promote or rollback did (``entry`` is ``None`` for a dry run)."""

    target: Path
    served: Served
    previous: Served | None
    diff: StrategyDiff | None
    entry: JournalEntry | None
    record: CandidateRecord | None = None


def recover(stores: str | Path) -> Recovered | None:
    """Finish or abandon a promote or rollback a crash interrupted (:mod:`evolve.ops.change`); ``None`` if none."""
    if pending_change(History(stores).layout) is None:  # History refuses a non-stores directory
        return None
    with StoreSet(stores) as store_set:
        return recover_change(store_set)


# ---------------------------------------------------------------- helpers


def _validated(data: bytes, source: Path) -> dict:
    try:
        return parse_strategy(data.decode("utf-8"), str(source))
    except UnicodeDecodeError as exc:
        raise Refused(f"refused: {source} is not UTF-8 text (byte {exc.start})") from None
    except StrategyError as exc:  # where and which rule, but never the file's content
        where = f"{exc.source}:{exc.line}" if exc.line else exc.source
        rule = exc.rule.replace(repr(exc.value), "the value") if exc.value is not None else exc.rule
        raise Refused(f"refused: not a valid strategy under the current schema: {where}: {exc.path or '<root>'}: "
                      f"{rule[:160]}") from None


def _keep(root: Path, data: bytes) -> Served:
    """Store a byte-exact copy (content-addressed, never overwritten) and describe it."""
    served = Served.of(data)
    path = root / served.copy
    if not path.exists() or sha256_hex(path.read_bytes()) != served.file_sha256:
        ensure_dir(path.parent)
        atomic_write_bytes(path, data)
    return served


def _payload(target: Path, served: Served, previous: Served | None) -> dict:
    before = (None, None, None) if previous is None else (previous.strategy_hash, previous.file_sha256, previous.copy)
    return {"target": str(target), "strategy_hash": served.strategy_hash, "file_sha256": served.file_sha256,
            "copy": served.copy, **dict(zip(("previous_hash", "previous_file_sha256", "previous_copy"), before))}


def _diff(old: bytes | None, new: bytes) -> StrategyDiff | None:
    try:
        before = strict_yaml.load(old.decode("utf-8"))[0] if old is not None else None
    except (UnicodeDecodeError, ValueError):
        return None
    return diff_strategies(before if isinstance(before, dict) else {}, strict_yaml.load(new.decode("utf-8"))[0])


def require_journal(view: History) -> None:
    """:class:`Refused` unless the stores' journal verifies."""
    result = view.verify_journal()
    if not result.ok:
        raise Refused(f"refused: journal verification failed at entry {result.first_bad_index}: {result.reason}; "
                      "the serving history cannot be trusted")


def undo_stack(entries: list[JournalEntry], target: Path) -> list[JournalEntry]:
    """Changes to ``target`` not yet undone: promotions and ``--to`` rollbacks, minus undone ones."""
    stack: list[JournalEntry] = []
    for e in serving_entries(entries, target):
        undoes = getattr(e.payload, "undoes", None)  # a PROMOTE undoes nothing
        if undoes is None:
            stack.append(e)
        elif stack and stack[-1].index == undoes:
            stack.pop()
    return stack


# ---------------------------------------------------------------- promotion


def _resolve(view: History, ref: str) -> tuple[CandidateRecord, bytes]:
    """The record and exact bytes of the strategy that ``ref`` (candidate id or path) names."""
    record = view.record(ref)
    if record is not None:
        if not record.strategy_hash:
            raise Refused(f"refused: {ref} produced no strategy ({record.reason})")
        source = view.strategy_path(record.strategy_hash)
        data = read_optional(source)
        if data is None:
            raise Refused(f"refused: {source} (the stored strategy of {ref}) is missing")
        actual = strategy_hash_of(data)
        if actual != record.strategy_hash:
            raise Refused(f"refused: {source} hashes to {actual}, but {ref} recorded {record.strategy_hash} "
                          "(the stored file was edited)")
        _validated(data, source)
        return record, data
    source = Path(ref)
    if not source.is_file():
        if CANDIDATE_ID_RE.match(ref):
            raise Refused(f"refused: no candidate {ref} in {view.layout.store('candidate_outcomes')}; only recorded "
                          "ACCEPT decisions can be promoted")
        raise FileNotFoundError(f"{ref}: neither a candidate id in {view.root} nor an existing file")
    data = source.read_bytes()
    strategy = _validated(data, source)
    digest = strategy_hash(strategy)
    matches = [r for r in view.records if r.strategy_hash == digest]
    if not matches:
        raise Refused(_no_record_reason(view, source, strategy, digest))
    accepted = [r for r in matches if changes_strategy(r.verdict)]
    return (accepted or matches)[-1], data


def _no_record_reason(view: History, source: Path, strategy: dict, digest: str) -> str:
    if digest == view.state.get("baseline_strategy"):
        return (f"refused: {source} is the baseline strategy ({digest[:12]}); only strategies with a recorded "
                "ACCEPT decision can be promoted (use `memevolve rollback` to serve an earlier file again)")
    same_policy = [r.candidate_id for r in view.records if r.policy_hash == policy_hash(strategy)]
    hint = (f"; its policy equals {same_policy[-1]} but parent/name/version differ: promote by candidate id"
            if same_policy else " (edited after it was recorded, or from other stores)")
    return (f"refused: no candidate in {view.layout.store('candidate_outcomes')} has strategy hash {digest}: "
            f"{source} was never evaluated{hint}; only recorded ACCEPT decisions can be promoted")


def check_decision(view: History, record: CandidateRecord, accept_monitor: bool, use: str = "promoted") -> None:
    """:class:`Refused` unless ``record`` agrees with the journal and holds a strategy-changing verdict
    (ACCEPT_WITH_MONITOR only with ``accept_monitor``) that the contract confirmed at a sound level
    (:mod:`evolve.ops.promotable`); ``use`` names what is refused in the message."""
    cid = record.candidate_id
    problem = view.record_problem(record)
    if problem is not None:
        raise Refused(f"refused: the candidate record disagrees with the journal: {problem}; "
                      f"candidate_outcomes.jsonl was edited, so nothing in it is {use}")
    if record.verdict == Verdict.ACCEPT_WITH_MONITOR and not accept_monitor:
        raise Refused(f"refused: {cid} is ACCEPT_WITH_MONITOR ({record.reason}); pass --accept-monitor to promote it")
    if not changes_strategy(record.verdict):
        raise Refused(f"refused: {cid} was not accepted: {record.verdict} by {record.decided_by} ({record.reason}); "
                      f"only recorded ACCEPT decisions can be {use}")
    sound = promotability(view, record)
    if not sound.ok:
        raise Refused(f"refused: {sound.why}; nothing is {use}")


def check_harness(view: History, record: CandidateRecord) -> None:
    """:class:`Refused` unless ``record`` was verified under the current schema and the stores' harness."""
    cid, recorded = record.candidate_id, record.harness
    if not recorded:
        raise Refused(f"refused: {cid} has no recorded harness identity (recorded by an older version); "
                      "re-verify it with `memevolve run`")
    current_schema = schema_hash()
    if recorded.get("schema_hash") != current_schema:
        raise Refused(f"refused: {cid} was verified under schema {str(recorded.get('schema_hash'))[:12]}, but the "
                      f"current schema is {current_schema[:12]}; re-verify it under the current schema")
    stores_harness = view.harness or {}
    differs = sorted(k for k in {*recorded, *stores_harness} if recorded.get(k) != stores_harness.get(k))
    if differs:
        shown = ", ".join(f"{k} {recorded.get(k)!r} vs {stores_harness.get(k)!r}" for k in differs)
        raise Refused(f"refused: {cid} was verified on a different harness than the stores' current one "
                      f"({shown}); re-verify it on the current harness")


def promote(stores: str | Path, ref: str, target: str | Path, *, accept_monitor: bool = False,
            dry_run: bool = False, serving_dir: str | Path | None = None,
            allow_outside: bool = False, approval: dict | None = None) -> ChangeResult:
    """Serve the strategy of a recorded accept (candidate id or file) at ``target``; :class:`Refused` if not allowed.

    ``target`` must meet :func:`evolve.ops.targets.check_target` (inside ``serving_dir`` unless ``allow_outside``).
    ``approval`` (``{"approver", "reason"}``, see :func:`evolve.ops.drift.approval`) is journaled with the promotion
    and witnessed beside the serving file; ``None`` journals the promotion as unapproved.
    """
    view = History(stores)  # refuses a non-stores directory before the lock creates one
    path = check_target(view.layout, target, directory=serving_dir, allow_outside=allow_outside)
    require_journal(view)
    if dry_run:
        return _promote(view, None, ref, path, accept_monitor, approval)
    with StoreSet(stores) as store_set:
        recover_change(store_set)
        return _promote(History(stores), store_set, ref, path, accept_monitor, approval)


def _promote(view: History, store_set: StoreSet | None, ref: str, target: Path,
             accept_monitor: bool, approval: dict | None) -> ChangeResult:
    """Checks and (with ``store_set``) the promotion; the journal was verified (again when the lock was taken)."""
    record, data = _resolve(view, ref)
    check_decision(view, record, accept_monitor)
    check_harness(view, record)
    old = read_optional(target)
    if old == data:
        raise Refused(f"refused: {target} already holds exactly this file ({record.candidate_id}); nothing to do")
    result = ChangeResult(target, Served.of(data), Served.of(old) if old is not None else None, _diff(old, data),
                          None, record)
    if store_set is None:
        return result
    require_writable_dir(target.parent)  # before the copies, so a refused change leaves the stores as they were
    result.previous = _keep(view.root, old) if old is not None else None
    _keep(view.root, data)
    result.entry = apply_change(store_set, "PROMOTE", target, data, {
        "candidate_id": record.candidate_id, "verdict": record.verdict, "approval": approval,
        **_payload(target, result.served, result.previous)})
    return result


# ---------------------------------------------------------------- rollback


def rollback(stores: str | Path, target: str | Path, to_entry: int | None = None, *,
             serving_dir: str | Path | None = None, allow_outside: bool = False,
             trigger: dict | None = None) -> ChangeResult:
    """Re-serve the previous serving file (or the one journal entry ``to_entry`` installed), verified byte-exact.
    ``trigger`` (what started an automatic rollback and why) is journaled with it."""
    view = History(stores)
    target = check_target(view.layout, target, directory=serving_dir, allow_outside=allow_outside)
    require_journal(view)
    with StoreSet(stores) as store_set:  # opening verifies the journal again under the lock
        recover_change(store_set)
        view = History(stores)
        entries = view.entries
        problem = history_problem(view, serving_entries(entries, target))
        if problem is not None:
            raise Refused(f"refused: the serving history of {target} does not check out: {problem}")
        if to_entry is None:
            restore, undoes = _undo_target(entries, target)
        else:
            restore, undoes = _entry_target(entries, target, to_entry), None
        data = _verified_copy(view.root, restore)
        _validated(data, view.root / restore.copy)
        old = read_optional(target)
        require_writable_dir(target.parent)
        previous = _keep(view.root, old) if old is not None else None
        entry = apply_change(store_set, "ROLLBACK", target, data, {**_payload(target, restore, previous),
                                                                   "undoes": undoes, "to_entry": to_entry,
                                                                   **({"trigger": trigger} if trigger else {})})
        return ChangeResult(target, restore, previous, _diff(old, data), entry)


def _undo_target(entries: list[JournalEntry], target: Path) -> tuple[Served, int]:
    stack = undo_stack(entries, target)
    if not stack:
        why = "every change to it in the journal is already undone" if serving_entries(entries, target) else \
            "the journal has no promotion of it"
        raise Refused(f"refused: nothing to roll back for {target}: {why} (use --to ENTRY_INDEX)")
    last = stack[-1]
    p = last.payload
    if p.previous_file_sha256 is None:
        raise Refused(f"refused: entry {last.index} ({last.type}) created {target}; there is no earlier "
                      "serving file to restore")
    return Served(p.previous_hash, p.previous_file_sha256, p.previous_copy), last.index


def _entry_target(entries: list[JournalEntry], target: Path, index: int) -> Served:
    if not 0 <= index < len(entries):
        raise Refused(f"refused: no journal entry {index} (the journal has {len(entries)} entries)")
    e = entries[index]
    if e.type not in SERVING_TYPES:
        raise Refused(f"refused: entry {index} is a {e.type} entry; only PROMOTE/ROLLBACK entries record a "
                      "served file")
    p = e.payload
    if p.target != str(target):
        raise Refused(f"refused: entry {index} served {p.target}, not {target} (pass --target)")
    return Served(p.strategy_hash, p.file_sha256, p.copy_)


def _verified_copy(root: Path, served: Served) -> bytes:
    path = root / served.copy
    data = read_optional(path)
    if data is None:
        raise Refused(f"refused: restore point {path} is missing")
    if sha256_hex(data) != served.file_sha256:
        raise Refused(f"refused: restore point {path} does not match its recorded sha256 {served.file_sha256} "
                      "(edited or corrupted)")
    if strategy_hash_of(data) != served.strategy_hash:
        raise Refused(f"refused: restore point {path} does not hash to the recorded strategy {served.strategy_hash}")
    return data
