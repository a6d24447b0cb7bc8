"""Keyed user names (``MEMEVOLVE_USER_KEY``): a store written unkeyed is re-keyed once by ``memevolve audit rekey``
(audit chained again, tombstones and generations renamed, witnesses moved to the new heads) on both stores; after it
no stored byte holds the unkeyed sha256 of an id, the audit and its witness verify, and a service whose key differs
is refused at start. A crash mid-rekey leaves the file store as it was or re-keyed, never between."""
from __future__ import annotations

import hashlib
import signal
from pathlib import Path

import pytest

from evolve.errors import ConfigError
from evolve.files import CRASH_ENV
from evolve.serve.access import Access
from evolve.serve.audit import audit_of, verify_audit, witness_head
from evolve.serve.filestore import FileBackend
from evolve.serve.pseudonym import LEGACY, USER_KEY_ENV, Pseudonyms
from evolve.serve.records import TurnRecord, TurnsEvent
from evolve.serve.rekey import claim_naming, rekey
from workflow_fixtures import cli, cli_subprocess

KEY = b"k" * 32


def _digest(user: str) -> str:
    return hashlib.sha256(user.encode()).hexdigest()


def _open(kind: str, where: str, names: Pseudonyms = Pseudonyms()):
    if kind == "files":
        return FileBackend(where, names=names)
    from evolve.serve.pgstore import PostgresBackend

    return PostgresBackend(where, names=names)


def _stored_bytes(kind: str, where: str) -> bytes:
    """Every byte the store holds (every file; every row of every table)."""
    if kind == "files":
        return b"".join(p.read_bytes() for p in Path(where).rglob("*") if p.is_file())
    import psycopg

    with psycopg.connect(where) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        return "".join(str(row) for t in tables for row in conn.execute(f"SELECT * FROM {t}")).encode()


def _seed(backend) -> None:
    """ann captured then erased, bob captured; the audit names both (unkeyed)."""
    access = Access(None, audit_of(backend))
    for user in ("ann", "bob"):
        backend.append(user, TurnsEvent(turns=[TurnRecord(id="D1:1", speaker="A", text="I live in Lisbon.", session="D1")]))
        access.record("CAPTURE", None, user, ids=["D1:1"])
    backend.erase("ann")
    access.record("ERASE", None, "ann", counts={"turns": 1})


@pytest.fixture(params=["files", "postgres"])
def store(request, tmp_path) -> tuple[str, str]:
    if request.param == "files":
        return "files", str(tmp_path / "data")
    return "postgres", request.getfixturevalue("pg_url")


def test_rekey_names_every_user_by_the_key_and_keeps_the_audit_and_its_witness(store, tmp_path):
    kind, where = store
    backend = _open(kind, where)
    claim_naming(backend)  # a new store records its scheme
    _seed(backend)
    witness = tmp_path / "audit.witness"
    witness_head(audit_of(backend), witness)
    generation, lines = backend.generation("ann"), len(audit_of(backend).entries())
    assert _digest("ann").encode() in _stored_bytes(kind, where)

    names = Pseudonyms(KEY)
    done = rekey(backend, names, [witness])
    backend.close()
    assert (done.lines, done.renamed, done.witnesses) == (lines, 2, [str(witness)])  # ann's tombstone, generation

    keyed = _open(kind, where, names)
    try:
        stored = _stored_bytes(kind, where)
        assert _digest("ann").encode() not in stored and _digest("bob").encode() not in stored
        assert keyed.naming() == names.naming != LEGACY
        stone = keyed.tombstone("ann")
        assert stone is not None and stone.user_sha256 == names.of("ann") == names.keyed(_digest("ann"))
        assert keyed.generation("ann") == generation
        audit = audit_of(keyed)
        entries = audit.entries()
        assert [e["type"] for e in entries] == ["CAPTURE", "CAPTURE", "ERASE", "REKEY"]
        assert [e["payload"]["user"] for e in entries[:3]] == [names.of("ann"), names.of("bob"), names.of("ann")]
        result, problems, checked = verify_audit(audit, [witness])
        assert result.ok and not problems and checked == 1
        claim_naming(keyed)  # the same key: accepted
        with pytest.raises(ConfigError, match="set MEMEVOLVE_USER_KEY"):
            claim_naming(_open(kind, where))
        with pytest.raises(ConfigError, match="cannot change once set"):
            claim_naming(_open(kind, where, Pseudonyms(b"other key")))
        with pytest.raises(ConfigError, match="keyed already"):
            rekey(keyed, names, [witness])
    finally:
        keyed.close()


def test_a_key_set_on_an_unkeyed_store_is_refused_at_start_until_rekeyed(tmp_path):
    backend = FileBackend(tmp_path / "data")
    _seed(backend)  # written before names were recorded: no naming.json
    assert backend.naming() == LEGACY and not (tmp_path / "data/naming.json").exists()
    with pytest.raises(ConfigError, match="audit rekey"):
        claim_naming(FileBackend(tmp_path / "data", names=Pseudonyms(KEY)))
    claim_naming(backend)  # unkeyed, as before: it records the scheme and goes on
    assert FileBackend(tmp_path / "data").naming() == LEGACY


def test_rekey_refuses_a_broken_audit_and_changes_nothing(tmp_path):
    backend = FileBackend(tmp_path / "data")
    _seed(backend)
    log = tmp_path / "data/audit.jsonl"
    log.write_bytes(log.read_bytes().replace(b'"ids":["D1:1"]', b'"ids":["D1:2"]', 1))
    before = {p: p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match="does not verify"):
        rekey(backend, Pseudonyms(KEY), [])
    assert {p: p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("step", ["serve.rekey.before_commit", "serve.rekey.after_commit"])
def test_a_rekey_killed_midway_is_undone_or_finished_when_the_store_is_next_opened(step, tmp_path, monkeypatch,
                                                                                    capsys):
    data = tmp_path / "data"
    _seed(FileBackend(data))
    witness = tmp_path / "audit.witness"
    witness_head(audit_of(FileBackend(data)), witness)
    before = {p: p.read_bytes() for p in data.rglob("*") if p.is_file() and "serve.lock" not in p.name}
    monkeypatch.setenv(USER_KEY_ENV, KEY.decode())
    monkeypatch.setenv(CRASH_ENV, step)
    killed = cli_subprocess(tmp_path, "audit", "rekey", "--data", data, "--witness", witness)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    monkeypatch.delenv(CRASH_ENV)
    names = Pseudonyms(KEY)
    if step.endswith("before_commit"):  # nothing committed: the store reads as before, and the rekey runs again
        assert FileBackend(data).naming() == LEGACY
        assert {p: p.read_bytes() for p in data.rglob("*") if p.is_file() and "serve.lock" not in p.name} == before
        code, out = cli(capsys, "audit", "rekey", "--data", data, "--witness", witness)
        assert code == 0 and out.startswith("re-keyed: 3 audit line(s)"), out
    else:  # committed: opening the store finishes it; a second run moves the staged witness in place
        code, out = cli(capsys, "audit", "rekey", "--data", data, "--witness", witness)
        assert code == 2 and "keyed already" in out, out
    keyed = FileBackend(data, names=names)
    assert keyed.naming() == names.naming and not (data / "rekey").exists()
    assert keyed.tombstone("ann") is not None and _digest("ann").encode() not in b"".join(
        p.read_bytes() for p in data.rglob("*") if p.is_file())
    code, out = cli(capsys, "audit", "verify", "--data", data, "--witness", witness)
    assert code == 0 and out.startswith("ok: 4 lines chain; 1 witnessed head(s) checked"), out
    code, out = cli(capsys, "audit", "show", "--data", data, "--user", "ann")
    assert code == 0 and len(out.splitlines()) == 2, out
