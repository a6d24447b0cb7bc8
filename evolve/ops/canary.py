"""A canary in the journal: starting, changing and stopping one is a ``CANARY`` entry with an approval, and the
journal is where every service replica reads which canary runs beside a serving file.

A canary serves a share of users (a stable hash of their id) with a candidate instead of the serving file, so it
is held to what ``promote`` holds a candidate to: a record the journal agrees with, a verdict of ACCEPT or
ACCEPT_WITH_MONITOR, the current schema and harness, and a journal that verifies. Its fraction is capped at
:data:`CANARY_CAP` unless the operator overrides the cap with a reason, and the override is journaled. A stop names
who stopped it: an operator, or the canary guard (:mod:`evolve.serve.guard`) with its evidence.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evolve.files import StoreError
from evolve.ops.history import History
from evolve.ops.drift import serving_status
from evolve.ops.serving import check_decision, check_harness, require_journal
from evolve.ops.targets import Refused
from evolve.state.entries import CanaryPayload, JournalEntry, read_entry
from evolve.state.record import CandidateRecord
from evolve.state.stores import StoreSet

#: Largest share of users a canary may serve without ``override_cap``.
CANARY_CAP = 0.5
#: Seconds a canary change waits for the stores' run lock (a night holds it for its whole run).
LOCK_WAIT_S = 10.0


class NoCanary(Refused):
    """No canary (or not the one named) runs beside the serving file."""


@dataclass(frozen=True)
class Canary:
    """The canary running beside a serving file, as the journal says."""

    candidate_id: str
    strategy_hash: str
    fraction: float
    start_index: int  # the CANARY start entry: the identity of this canary run
    entry: JournalEntry  # the entry that set the fraction (the start or the latest change)

    def describe(self) -> dict:
        return {"candidate_id": self.candidate_id, "fraction": self.fraction, "start_entry": self.start_index,
                "entry": self.entry.index, "approval": self.entry.payload.approval}


def running(entries: list[JournalEntry], target: str | Path) -> Canary | None:
    """The canary the ``CANARY`` entries among ``entries`` leave running beside ``target`` (None: none)."""
    target, state = str(Path(target).resolve()), None
    for e in entries:
        p = e.payload
        if not isinstance(p, CanaryPayload) or p.target != target:
            continue
        if p.action == "start":
            state = Canary(p.candidate_id, p.strategy_hash, p.fraction, e.index, e)
        elif p.action == "change" and state is not None:
            state = Canary(state.candidate_id, state.strategy_hash, p.fraction, state.start_index, e)
        elif p.action == "stop":
            state = None
    return state


def latest(entries: list[JournalEntry], target: str | Path) -> JournalEntry | None:
    """The last ``CANARY`` entry for ``target``."""
    target = str(Path(target).resolve())
    return next((e for e in reversed(entries) if isinstance(e.payload, CanaryPayload) and e.payload.target == target),
                None)


def servable(view: History, candidate_id: str) -> CandidateRecord:
    """The record of ``candidate_id`` if its strategy may serve users; :class:`Refused` saying why not."""
    require_journal(view)
    record = view.record(candidate_id)
    if record is None:
        raise Refused(f"refused: no candidate {candidate_id!r} in {view.layout.store('candidate_outcomes')}")
    check_decision(view, record, accept_monitor=True, use="served to users")
    check_harness(view, record)
    return record


def check_fraction(fraction: float, approval: dict, override_cap: bool) -> None:
    """:class:`Refused` unless ``0 < fraction <= 1`` and within :data:`CANARY_CAP` (or over it with
    ``override_cap`` and a reason)."""
    if not 0 < fraction <= 1:
        raise Refused(f"refused: canary fraction {fraction} is not in (0, 1]")
    if fraction > CANARY_CAP and not override_cap:
        raise Refused(f"refused: canary fraction {fraction} exceeds the cap {CANARY_CAP}; pass --override-cap with a "
                      "--reason to exceed it (the override is journaled)")
    if fraction > CANARY_CAP and not approval.get("reason"):
        raise Refused(f"refused: overriding the canary cap {CANARY_CAP} needs a --reason (journaled with it)")


def _journal(stores: str | Path, target: str | Path, build, lock_wait: float) -> JournalEntry:
    """Under the run lock (opening verifies the journal): ``build(view, running canary)`` gives the payload of the
    entry to append, or raises :class:`Refused`."""
    try:
        with StoreSet(stores, lock_timeout=lock_wait) as store_set:
            view = History(stores)
            payload = build(view, running(view.entries, target))
            return read_entry(store_set.append_journal("CANARY", {"target": str(Path(target).resolve()), **payload}))
    except StoreError as exc:
        raise Refused(f"refused: {exc}") from None


def start(stores: str | Path, target: str | Path, candidate_id: str, fraction: float, approval: dict,
          override_cap: bool = False, lock_wait: float = LOCK_WAIT_S, allow_untracked: bool = False) -> JournalEntry:
    """Journal the start of a canary of ``candidate_id`` serving ``fraction`` of the users of ``target``: a serving
    file that exists and that these stores installed (``allow_untracked``: or one they do not track, as
    ``serve --allow-untracked`` serves it)."""
    check_fraction(fraction, approval, override_cap)

    def build(view: History, current: Canary | None) -> dict:
        status = serving_status(view, target)
        if status.current is None:
            raise Refused(f"refused: serving file {target} does not exist; a canary runs beside the file that serves")
        if status.state != "tracked" and not allow_untracked:
            raise Refused(f"refused: {target}: {status.describe()}; a canary runs beside a serving file these "
                          "stores promoted (or pass --allow-untracked, as the service was told)")
        if current is not None:
            raise Refused(f"refused: a canary of {current.candidate_id} already runs beside {target} (entry "
                          f"{current.start_index}); stop it first (memevolve canary stop) or change its fraction")
        record = servable(view, candidate_id)
        return {"action": "start", "candidate_id": candidate_id, "strategy_hash": record.strategy_hash,
                "verdict": record.verdict, "fraction": fraction, "cap": CANARY_CAP,
                "cap_override": fraction > CANARY_CAP, "by": "operator", "approval": approval}

    return _journal(stores, target, build, lock_wait)


def change(stores: str | Path, target: str | Path, fraction: float, approval: dict, override_cap: bool = False,
           lock_wait: float = LOCK_WAIT_S) -> JournalEntry:
    """Journal a new fraction for the canary running beside ``target``."""
    check_fraction(fraction, approval, override_cap)

    def build(view: History, current: Canary | None) -> dict:
        if current is None:
            raise NoCanary(f"refused: no canary runs beside {target}; start one (memevolve canary start)")
        servable(view, current.candidate_id)
        return {"action": "change", "candidate_id": current.candidate_id, "strategy_hash": current.strategy_hash,
                "fraction": fraction, "previous_fraction": current.fraction, "cap": CANARY_CAP,
                "cap_override": fraction > CANARY_CAP, "start_entry": current.start_index, "by": "operator",
                "approval": approval}

    return _journal(stores, target, build, lock_wait)


def stop(stores: str | Path, target: str | Path, approval: dict, *, by: str = "operator",
         evidence: dict | None = None, start_index: int | None = None, lock_wait: float = LOCK_WAIT_S) -> JournalEntry:
    """Journal the stop of the canary running beside ``target`` (``start_index``: only if it is that run)."""

    def build(_: History, current: Canary | None) -> dict:
        if current is None or (start_index is not None and current.start_index != start_index):
            raise NoCanary(f"refused: no canary {'' if start_index is None else f'started at entry {start_index} '}"
                          f"runs beside {target}")
        return {"action": "stop", "candidate_id": current.candidate_id, "strategy_hash": current.strategy_hash,
                "fraction": current.fraction, "start_entry": current.start_index, "by": by, "approval": approval,
                **({"evidence": evidence} if evidence is not None else {})}

    return _journal(stores, target, build, lock_wait)
