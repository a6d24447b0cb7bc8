"""Every journal entry reads as its type's payload model: the journals the workflow writes (a run, accepts, a
promotion, a canary started, changed and stopped, a rollback, a monitor regression, a night) and the shipped stores;
a payload whose key was renamed is refused, naming the entry and the field."""
from __future__ import annotations

from pathlib import Path

import pytest

from evolve.files import StoreError
from evolve.loop.monitor import SliceCheck
from evolve.ops import canary
from evolve.ops.serving import promote, rollback
from evolve.state.entries import (
    CanaryPayload, EntryType, JournalEntry, NightRecord, PayloadError, PromotePayload, RollbackPayload,
    validate_payload,
)
from evolve.state.journal import ENTRY_TYPES, Journal
from evolve.state.stores import StoreSet
from evolve.state.view import ReadOnlyJournal

FIXTURES = Path(__file__).parent / "fixtures"
OPS = {"approver": "ops", "reason": "try it"}


def _typed(path: Path) -> list[JournalEntry]:
    entries = ReadOnlyJournal(path).typed_entries()
    assert entries and [e.index for e in entries] == list(range(len(entries)))
    return entries


def test_the_entry_type_enum_is_the_journal_s_types():
    assert ENTRY_TYPES == tuple(t.value for t in EntryType)
    assert EntryType.PROMOTE == "PROMOTE" and f"{EntryType.NIGHT}" == "NIGHT"


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("journal*.jsonl")), ids=lambda p: p.parent.name)
def test_every_entry_of_a_shipped_journal_fits_its_model(path: Path):
    assert {e.type for e in _typed(path)} >= {EntryType.CANDIDATE, EntryType.ROUND}


def test_every_entry_the_workflow_journals_fits_its_model(stores: Path, serving: Path):
    promote(stores, "r002-c00", serving, approval=OPS)
    canary.start(stores, serving, "r003-c00", 0.3, OPS)
    canary.change(stores, serving, 0.4, OPS)
    canary.stop(stores, serving, OPS)
    rollback(stores, serving)
    night = NightRecord(ended="rounds", first_round=1, last_round=3, rounds=3, evaluations=4, start="0" * 64,
                        final="1" * 64, diff={"retrieval.top_k": [5, 7]})
    with StoreSet(stores) as store_set:
        store_set.append_journal("MONITOR", SliceCheck("r003-c00", "temporal", "dev", 4, 0.8, 0.5, 0.05).to_dict())
        store_set.append_journal("NIGHT", night.model_dump())
    entries = _typed(stores / "journal.jsonl")
    assert {e.type for e in entries} >= {"CANDIDATE", "ACCEPT", "ROUND", "PROMOTE", "CANARY", "ROLLBACK", "MONITOR",
                                         "NIGHT"}
    promoted = next(e for e in entries if e.type == "PROMOTE")
    assert isinstance(promoted.payload, PromotePayload) and promoted.payload.approval == OPS
    assert [e.payload.action for e in entries if isinstance(e.payload, CanaryPayload)] == ["start", "change", "stop"]
    undone = entries[-3]
    assert isinstance(undone.payload, RollbackPayload) and undone.payload.undoes == promoted.index
    assert entries[-1].payload == night


def test_a_renamed_payload_key_is_refused_naming_the_entry_and_the_field(stores: Path, serving: Path, tmp_path):
    promote(stores, "r002-c00", serving, approval=OPS)
    raw = Journal(stores / "journal.jsonl").entries()
    payload = dict(raw[-1]["payload"])
    payload["candidate"] = payload.pop("candidate_id")
    journal = Journal(tmp_path / "journal.jsonl")
    for entry in raw[:-1]:
        journal.append(entry["type"], entry["payload"], round=entry["round"], seq=entry["seq"])
    journal.append("PROMOTE", payload)
    at = len(raw) - 1
    with pytest.raises(StoreError, match=rf"journal entry {at} \(PROMOTE\) payload: field 'candidate_id': Field "
                                         r"required; field 'candidate': Extra inputs are not permitted"):
        journal.typed_entries()
    with pytest.raises(PayloadError, match=r"journal entry \(CANARY\) payload: .*field 'action'"):
        validate_payload("CANARY", {**payload, "action": "pause"})
