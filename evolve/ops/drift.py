"""Serving files against the journal: which entry installed a file, whether it drifted since, and whether the
file's serving history checks out (every PROMOTE installs what a journaled ACCEPT decided; every ROLLBACK re-serves
a file the history installed or replaced; every stored copy matches its hash)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evolve.ops.history import History
from evolve.state.entries import JournalEntry, PromotePayload
from evolve.files import MAX_TEXT_BYTES, StoreError, read_bounded
from evolve.canonical import sha256_hex
from evolve.safe_text import escaped
from evolve.strategy import strict_yaml
from evolve.strategy.artifact import strategy_hash
from evolve.verify.decision import changes_strategy

#: Journal entry types that change a serving file.
SERVING_TYPES = ("PROMOTE", "ROLLBACK")


@dataclass(frozen=True)
class Served:
    """One version of a serving file: strategy hash (``None`` if not a YAML mapping), byte hash, stored copy."""

    strategy_hash: str | None
    file_sha256: str
    copy: str  # relative to the stores root

    @classmethod
    def of(cls, data: bytes) -> "Served":
        sha = sha256_hex(data)
        return cls(strategy_hash_of(data), sha, f"serving/{sha}.yaml")


@dataclass(frozen=True)
class ServingStatus:
    """A serving file against the journal: ``tracked``, ``untracked``, ``unjournaled``, ``drift``, ``missing`` or
    ``unverified``. ``unjournaled``: no entry installed the file, yet it holds a strategy these stores accepted
    (a promotion whose journal entry is missing: interrupted, or copied by hand)."""

    target: Path
    state: str
    entry: JournalEntry | None
    current: Served | None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.state in ("tracked", "untracked")

    def describe(self) -> str:
        e = self.entry
        if self.state == "untracked":
            return "untracked: no PROMOTE/ROLLBACK journal entry for this file"
        if self.state == "unjournaled":
            return (f"unjournaled: holds strategy {self.current.strategy_hash} of {self.problem}, which no PROMOTE/"
                    "ROLLBACK entry installed here (an interrupted promote, or copied by hand)")
        if self.state == "unverified":
            return f"unverified: its serving history does not check out: {self.problem}"
        installed = f"entry {e.index} {e.type} ({e.ts})"
        if self.state == "tracked":
            return f"tracked: put there by {installed}: {_what(e)}"
        if self.state == "missing":
            return f"drift: the file is missing; {installed} installed strategy {e.payload.strategy_hash}"
        same = self.current.strategy_hash == e.payload.strategy_hash
        what = "bytes differ but the strategy content is the same" if same else \
            f"strategy {self.current.strategy_hash or '(not a YAML mapping)'} is not the installed " \
            f"{e.payload.strategy_hash}"
        return f"drift: the file differs from what {installed} installed ({what})"


# ---------------------------------------------------------------- helpers


def _what(entry: JournalEntry) -> str:
    """What a PROMOTE/ROLLBACK entry did, in words."""
    p = entry.payload
    if isinstance(p, PromotePayload):
        return f"promotion of {p.candidate_id} ({p.verdict}), {approval_text(p.approval)}"
    if p.undoes is not None:
        return f"rollback undoing entry {p.undoes}"
    return f"rollback to the file entry {p.to_entry} served"


def approval(approver: str, reason: str | None) -> dict:
    """A promotion's approval as journaled: who approved it (a non-empty name) and why (``None``: not given)."""
    return {"approver": approver.strip(), "reason": reason.strip() if reason and reason.strip() else None}


def approval_text(given: dict | None) -> str:
    """Who approved a PROMOTE entry (its ``approval``), or that nobody did; the operator's text escaped for a
    terminal."""
    if not given:
        return "UNAPPROVED (promoted without --approver)"
    reason = f": {escaped(given['reason'])}" if given.get("reason") else ""
    return f"approved by {escaped(given['approver'])}{reason}"


def strategy_hash_of(data: bytes) -> str | None:
    try:
        loaded, _ = strict_yaml.load(data.decode("utf-8"))
        return strategy_hash(loaded) if isinstance(loaded, dict) else None
    except (UnicodeDecodeError, TypeError, ValueError):  # not YAML, refused, or values JSON cannot hold (NaN)
        return None


def read_optional(path: Path) -> bytes | None:
    try:
        return read_bounded(path, MAX_TEXT_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(path, f"cannot read: {exc.strerror}") from None


def serving_entries(entries: list[JournalEntry], target: Path) -> list[JournalEntry]:
    """PROMOTE/ROLLBACK entries for ``target`` (an absolute path), oldest first."""
    return [e for e in entries if e.type in SERVING_TYPES and e.payload.target == str(target)]


def history_problem(view: History, mine: list[JournalEntry]) -> str | None:
    """The first entry of one file's serving history that does not check out, in words (``None`` if all do).

    A PROMOTE must install the strategy its candidate's record and journaled ACCEPT name; a ROLLBACK must re-serve
    a file an earlier entry of the same history installed or replaced; every stored copy must match its hash.
    """
    seen: set[tuple[str | None, str]] = set()
    for e in mine:
        p, at = e.payload, f"entry {e.index} {e.type}"
        served = (p.strategy_hash, p.file_sha256)
        if isinstance(p, PromotePayload):
            record = view.record(p.candidate_id)
            decided = view.decision_entries.get(p.candidate_id)
            if record is None or decided is None:
                return f"{at} promotes {p.candidate_id}, which was never decided in these stores"
            if not changes_strategy(record.verdict) or decided.type != "ACCEPT":
                return f"{at} promotes {record.candidate_id}, which was not accepted ({record.verdict})"
            if not p.strategy_hash == record.strategy_hash == decided.payload.strategy_hash:
                return (f"{at} installed strategy {p.strategy_hash[:12]}, but {record.candidate_id} was "
                        f"accepted as {record.strategy_hash[:12]}")
        elif served not in seen:
            return f"{at} re-served a file that no earlier entry installed or replaced"
        copy = view.root / p.copy_
        if not copy.is_file() or sha256_hex(copy.read_bytes()) != p.file_sha256:
            return f"{at}: its stored copy {copy} is missing or does not match {p.file_sha256[:12]}"
        seen.add(served)
        if p.previous_file_sha256 is not None:
            seen.add((p.previous_hash, p.previous_file_sha256))
    return None


def serving_status(view: History | None, target: str | Path) -> ServingStatus:
    """The serving file ``target`` against the journal of ``view`` (``None``: no stores, so untracked)."""
    target = Path(target).resolve()
    mine = serving_entries(view.entries, target) if view is not None else []
    data = read_optional(target)
    current = Served.of(data) if data is not None else None
    if not mine:
        accepted = [r.candidate_id for r in view.records if current is not None and changes_strategy(r.verdict)
                    and r.strategy_hash == current.strategy_hash] if view is not None else []
        if accepted:
            return ServingStatus(target, "unjournaled", None, current, accepted[-1])
        return ServingStatus(target, "untracked", None, current)
    last = mine[-1]
    problem = history_problem(view, mine)
    if problem is not None:
        return ServingStatus(target, "unverified", last, current, problem)
    if current is None:
        return ServingStatus(target, "missing", last, None)
    state = "tracked" if current.file_sha256 == last.payload.file_sha256 else "drift"
    return ServingStatus(target, state, last, current)


def serving_targets(entries: list[JournalEntry]) -> list[Path]:
    """Every serving file the journal's PROMOTE/ROLLBACK entries name, in first-seen order."""
    return list(dict.fromkeys(Path(e.payload.target) for e in entries if e.type in SERVING_TYPES))


def drift_report(view: History) -> list[ServingStatus]:
    """Status of every serving file the journal knows about."""
    return [serving_status(view, t) for t in serving_targets(view.entries)]
