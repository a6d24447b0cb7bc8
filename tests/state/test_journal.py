"""The hash-chained journal: chaining, tamper detection, torn-line repair, queries."""
from __future__ import annotations

import hashlib
import re

import pytest

from evolve.state.journal import ENTRY_TYPES, GENESIS_HASH, Journal
from evolve.files import StoreError
from evolve.canonical import canonical_json


def filled(tmp_path, n: int = 6) -> Journal:
    journal = Journal(tmp_path / "journal.jsonl")
    for i in range(n):
        journal.append(ENTRY_TYPES[i % len(ENTRY_TYPES)], {"i": i, "strategy_hash": f"h{i % 2}", "diff": {"x": i}},
                       round=i // 2)
    return journal


def lines_of(journal: Journal) -> list[bytes]:
    return journal.path.read_bytes().splitlines(keepends=True)


def test_entries_chain_and_hash_their_content(tmp_path):
    journal = filled(tmp_path)
    entries = journal.entries()
    assert [e["index"] for e in entries] == list(range(6))
    assert entries[0]["prev_hash"] == GENESIS_HASH
    for prev, entry in zip(entries, entries[1:]):
        assert entry["prev_hash"] == prev["hash"]
    for entry in entries:
        body = {k: v for k, v in entry.items() if k != "hash"}
        assert entry["hash"] == hashlib.sha256(canonical_json(body).encode()).hexdigest()
        assert entry["payload_hash"] == hashlib.sha256(canonical_json(entry["payload"]).encode()).hexdigest()
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", entry["ts"])
    assert journal.verify().ok and journal.verify().n == 6


def test_reopen_continues_the_chain(tmp_path):
    last = filled(tmp_path).last()
    again = Journal(tmp_path / "journal.jsonl")
    entry = again.append("FLAG", {"note": "after reopen"}, round=9)
    assert entry["index"] == last["index"] + 1 and entry["prev_hash"] == last["hash"]
    assert again.verify().ok and again.last() == entry


def test_every_flipped_byte_is_caught_at_its_entry(tmp_path):
    journal = filled(tmp_path)
    original = lines_of(journal)
    target = 3
    for pos in range(len(original[target]) - 1):  # every byte except the newline
        line = bytearray(original[target])
        line[pos] ^= 0x01
        journal.path.write_bytes(b"".join(original[:target] + [bytes(line)] + original[target + 1:]))
        result = journal.verify()
        assert not result.ok and result.first_bad_index == target, (pos, result)


def test_deleted_line_is_caught(tmp_path):
    journal = filled(tmp_path)
    lines = lines_of(journal)
    journal.path.write_bytes(b"".join(lines[:2] + lines[3:]))
    result = journal.verify()
    assert (result.ok, result.first_bad_index) == (False, 2) and "deleted, inserted or reordered" in result.reason


def test_swapped_pair_is_caught_at_the_first(tmp_path):
    journal = filled(tmp_path)
    lines = lines_of(journal)
    lines[3], lines[4] = lines[4], lines[3]
    journal.path.write_bytes(b"".join(lines))
    result = journal.verify()
    assert (result.ok, result.first_bad_index) == (False, 3)


def test_inserted_line_is_caught(tmp_path):
    journal = filled(tmp_path)
    lines = lines_of(journal)
    journal.path.write_bytes(b"".join(lines[:4] + [lines[1]] + lines[4:]))
    assert journal.verify().first_bad_index == 4


def test_rechained_forgery_without_recomputing_hash_is_caught(tmp_path):
    """An edited payload with a recomputed payload_hash still breaks the entry hash."""
    journal = filled(tmp_path)
    entries = journal.entries()
    forged = dict(entries[2], payload={"i": 2, "strategy_hash": "evil", "diff": {"x": 2}})
    forged["payload_hash"] = hashlib.sha256(canonical_json(forged["payload"]).encode()).hexdigest()
    lines = lines_of(journal)
    lines[2] = (canonical_json(forged) + "\n").encode()
    journal.path.write_bytes(b"".join(lines))
    result = journal.verify()
    assert result.first_bad_index == 2 and "entry edited" in result.reason


def test_anchor_catches_removed_tail(tmp_path):
    journal = filled(tmp_path)
    head = journal.last()
    anchor = {"index": head["index"], "hash": head["hash"]}
    assert journal.verify(anchor).ok
    journal.path.write_bytes(b"".join(lines_of(journal)[:-2]))
    assert journal.verify().ok  # the chain alone cannot see a cut tail
    result = journal.verify(anchor)
    assert (result.ok, result.first_bad_index) == (False, 4)


def test_torn_last_line_is_truncated_with_warning(tmp_path, caplog):
    journal = filled(tmp_path, 3)
    good = journal.path.read_bytes()
    with open(journal.path, "ab") as fh:
        fh.write(b'{"hash":"abc","index":3,"pay')
    assert not journal.verify().ok  # the torn line is reported, not silently accepted
    reopened = Journal(journal.path)
    assert reopened.repaired_tail == b'{"hash":"abc","index":3,"pay'
    assert "torn last line" in caplog.text
    assert journal.path.read_bytes() == good
    assert reopened.append("ROUND", {"n": 3})["index"] == 3
    assert reopened.verify().ok


def test_find_by_type_and_payload(tmp_path):
    journal = filled(tmp_path)
    assert [e["index"] for e in journal.find(strategy_hash="h1")] == [1, 3, 5]
    assert [e["index"] for e in journal.find(ENTRY_TYPES[2])] == [2]
    assert journal.find("ROUND", strategy_hash="h1") == []
    assert journal.find(missing_key=1) == []


def test_bad_appends_are_refused(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    with pytest.raises(ValueError, match="unknown journal entry type 'ACCEPTED'"):
        journal.append("ACCEPTED", {})
    with pytest.raises(ValueError, match="payload must be a dict"):
        journal.append("FLAG", ["x"])
    with pytest.raises(StoreError, match="not JSON-serialisable"):
        journal.append("FLAG", {"bad": object()})
    assert journal.entries() == [] and journal.last() is None and journal.verify().ok


def test_unreadable_head_fails_on_open(tmp_path):
    journal = filled(tmp_path, 2)
    journal.path.write_bytes(journal.path.read_bytes()[:-10] + b"garbage!!\n")
    with pytest.raises(StoreError, match="journal.jsonl: last entry is corrupt"):
        Journal(journal.path)
