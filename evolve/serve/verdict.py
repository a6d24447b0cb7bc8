"""A replay's verdict in the journal (``REPLAY``), and the automatic rollback an operator may opt into: when the
serving strategy regresses against the strategy a rollback would restore, or a slice its promotion was accepted
with monitoring for regressed (a ``MONITOR`` entry after the promotion), the serving file is rolled back and the
``ROLLBACK`` entry names the trigger."""
from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from evolve.errors import first_problem
from evolve.ops.drift import serving_status
from evolve.ops.history import History
from evolve.ops.monitors import monitor_regressions, regression_text
from evolve.ops.serving import ChangeResult, rollback, undo_stack
from evolve.state.entries import JournalEntry, read_entry
from evolve.state.stores import StoreSet
from evolve.serve.replay import ReplayError, ReplayReport
from evolve.serve.strategy import Loaded
from evolve.verify.decision import AcceptanceRules


def contract_rules(view: History) -> AcceptanceRules:
    """The decision contract the stores were made under (their recorded ``acceptance:`` rules; the defaults when
    none are recorded), whose floors a replay's slices are held to; :class:`ReplayError` naming a bad record."""
    recorded = ((view.harness or {}).get("rules") or {}).get("acceptance")
    try:
        return AcceptanceRules.model_validate(recorded or {})
    except ValidationError as exc:
        raise ReplayError("{}: harness.rules.acceptance.{}: {}".format(view.layout.state, *first_problem(exc))) \
            from None


def journal_replay(stores: str | Path, report: ReplayReport, logs: list[Path], candidate_ref: str) -> JournalEntry:
    """Append the ``REPLAY`` entry (figures and verdict, no user content); the entry."""
    with StoreSet(stores) as store_set:
        return read_entry(store_set.append_journal("REPLAY", report.payload(logs, candidate_ref)))


def rollback_triggers(stores: str | Path, serving_path: str | Path, serving: Loaded, candidate: Loaded,
                      report: ReplayReport) -> tuple[list[str], list[str]]:
    """``(triggers, notes)``: why the serving file should be rolled back now (empty: it should not), and why a
    regression found does not trigger it."""
    view = History(stores)
    status = serving_status(view, serving_path)
    since = status.entry.index if status.entry is not None else -1
    accepted = {r.candidate_id for r in view.records if r.strategy_hash == serving.strategy_hash}
    triggers = [f"monitor regression: {regression_text(e)}" for cid in sorted(accepted)
                for e in monitor_regressions(view, cid) if e.index > since]
    notes = []
    if report.verdict == "serving_regresses":
        stack = undo_stack(view.entries, Path(serving_path).resolve())
        previous = stack[-1].payload.previous_hash if stack else None
        if previous == candidate.strategy_hash:
            triggers += [f"replay regression: {r}" for r in report.reasons]
        else:
            notes.append(f"the serving strategy regresses against {candidate.source}, but a rollback would restore "
                         f"{(previous or 'nothing')[:12]}, not it: promote the candidate instead")
    return triggers, notes


def auto_rollback(stores: str | Path, serving_path: str | Path, triggers: list[str], replay_entry: JournalEntry | None,
                  serving_dir: str | Path | None = None, allow_outside: bool = False) -> ChangeResult:
    """Roll the serving file back, journaled as automatic with its triggers."""
    trigger = {"by": "replay --auto-rollback", "reasons": triggers,
               "replay_entry": None if replay_entry is None else replay_entry.index}
    return rollback(stores, serving_path, serving_dir=serving_dir, allow_outside=allow_outside, trigger=trigger)
