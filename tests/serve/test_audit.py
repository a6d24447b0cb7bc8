"""The access audit: a hash chain whose first broken line ``memevolve audit verify`` names (a line edited, deleted
or two reordered), a witnessed head that catches a log rewritten whole, and lines that hold no content."""
from __future__ import annotations

import json

import pytest

from evolve.cli.main import main
from evolve.serve.audit import AUDIT_FILE, AuditEvent, FileAudit, verify_audit, witness_head
from evolve.serve.pseudonym import Pseudonyms


def _audit(tmp_path, n: int = 5) -> FileAudit:
    audit = FileAudit(tmp_path / "data")
    for i in range(n):
        audit.record("RECALL", AuditEvent(key="0123456789ab", user=Pseudonyms().of("alice"), ids=[f"D1:{i}"],
                                          counts={"packed": i}))
    return audit


def _rewrite(tmp_path, change) -> None:
    path = tmp_path / "data" / AUDIT_FILE
    lines = path.read_text().splitlines(keepends=True)
    change(lines)
    path.write_text("".join(lines))


def _edit(lines):
    lines[2] = lines[2].replace('"packed":2', '"packed":7')


def _delete(lines):
    del lines[2]


def _reorder(lines):
    lines[2], lines[3] = lines[3], lines[2]


@pytest.mark.parametrize("change, reason", [
    (_edit, "payload does not match payload_hash"),
    (_delete, "index is 3, expected 2"),
    (_reorder, "index is 3, expected 2"),
])
def test_verify_names_the_first_broken_line(tmp_path, capsys, change, reason):
    _audit(tmp_path)
    assert main(["audit", "verify", "--data", str(tmp_path / "data")]) == 0
    assert capsys.readouterr().out.startswith("ok: 5 lines chain")
    _rewrite(tmp_path, change)
    assert main(["audit", "verify", "--data", str(tmp_path / "data")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("verification failed at entry 2: entry 2 (line 3): ") and reason in out


def test_a_witnessed_head_catches_a_log_rewritten_whole(tmp_path, capsys):
    audit = _audit(tmp_path)
    witness = tmp_path / "elsewhere" / "audit.witness"
    assert witness_head(audit, witness)["index"] == 4
    result, problems, checked = verify_audit(audit, [witness])
    assert result.ok and problems == [] and checked == 1
    (tmp_path / "data" / AUDIT_FILE).unlink()  # rewritten from scratch: it chains, but lacks the witnessed head
    _audit(tmp_path, 3)
    assert main(["audit", "verify", "--data", str(tmp_path / "data"), "--witness", str(witness)]) == 1
    out = capsys.readouterr().out
    assert "the audit's 3 lines chain, but" in out and "witnessed entry 4, but the audit has 3 entries" in out


def test_a_line_holds_ids_and_counts_never_text_and_the_chain_resumes_after_a_restart(tmp_path, capsys):
    _audit(tmp_path, 2)
    reopened = FileAudit(tmp_path / "data")  # a restart: the head read back from the file
    entry = reopened.record("ERASE", AuditEvent(key=None, user=Pseudonyms().of("alice"), counts={"turns": 3}))
    assert entry["index"] == 2 and reopened.verify().ok
    assert main(["audit", "show", "--data", str(tmp_path / "data"), "--user", "alice", "--type", "erase"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [s["type"] for s in shown] == ["ERASE"] and shown[0]["payload"]["user"] == Pseudonyms().of("alice")
    assert "alice" not in (tmp_path / "data" / AUDIT_FILE).read_text()
    with pytest.raises(ValueError, match="unknown audit log entry type 'READ'"):
        reopened.record("READ", AuditEvent())
    assert main(["audit", "verify", "--data", str(tmp_path / "nowhere")]) == 2
    assert "no audit here" in capsys.readouterr().err


def test_a_torn_last_line_is_reported_with_what_happens_to_it_not_as_a_command_to_run_again(tmp_path, capsys):
    """A crash mid-append leaves a torn tail: verify names it and says the writer drops it at its next open (before,
    opening the audit failed with advice to run the very command that failed); the writer then drops it."""
    _audit(tmp_path)
    with open(tmp_path / "data" / AUDIT_FILE, "ab") as fh:
        fh.write(b'{"index":5,"tor')
    assert main(["audit", "verify", "--data", str(tmp_path / "data")]) == 1
    out = capsys.readouterr()
    assert out.out.startswith("verification failed at entry 5: line 6: torn (no trailing newline)")
    assert "drops it when it next opens" in out.out and "run `memevolve audit verify`" not in out.out + out.err
    FileAudit(tmp_path / "data")  # the service opening it
    assert main(["audit", "verify", "--data", str(tmp_path / "data")]) == 0
    assert capsys.readouterr().out.startswith("ok: 5 lines chain")
