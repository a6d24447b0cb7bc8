"""``memevolve erase --export``: the export a manifest names is reached only when it checks out. A linked export is
rewritten at its target (the link stays a link), an edited manifest (another file, a path outside its folder, a hash
that does not match) or an export that is not a regular file is refused before anything is erased."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evolve.files import atomic_write_json
from evolve.ops.manifest import manifest_of, read_manifest, write_manifest
from workflow_fixtures import cli

MARKER = "Quillibrant"


def _sample(user: str, text: str) -> dict:
    return {"sample_id": user, "conversation": {"speaker_a": user, "speaker_b": "bot",
                                                "session_1_date_time": "1:00 pm on 8 May, 2023",
                                                "session_1": [{"speaker": user, "dia_id": "D1:1", "text": text}]},
            "qa": []}


def _export(folder: Path, export: Path) -> Path:
    """An export of ann (holding the marker) and bo (written where ``export`` leads), with its manifest in
    ``folder``."""
    samples = [_sample("ann", f"My locker code word is {MARKER}"), _sample("bo", "I keep bees")]
    atomic_write_json(export.resolve(), samples)
    manifest = folder / "night.manifest.json"
    write_manifest(manifest, manifest_of(export, manifest, samples, ["ann", "bo"]))
    return manifest


def _erase(capsys, stores, manifest, *extra) -> tuple[int, str]:
    return cli(capsys, "erase", "--user", "ann", "--export", manifest, "--stores", stores, "--no-tracking", *extra)


def test_a_linked_export_is_rewritten_at_its_target_and_stays_a_link(tmp_path, stores, capsys):
    archive = tmp_path / "archive"
    archive.mkdir()
    exports = tmp_path / "exports"
    exports.mkdir()
    target = archive / "night-2026.json"
    link = exports / "night.json"
    os.symlink(target, link)
    manifest = _export(exports, link)
    code, out = _erase(capsys, stores, manifest)
    assert code == 2 and "outside the manifest's folder" in out, out  # the target lies elsewhere: said, not done
    assert MARKER in target.read_text()
    code, out = _erase(capsys, stores, manifest, "--follow-outside")
    assert code == 0 and "1 sample(s) removed" in out, out
    assert link.is_symlink() and MARKER not in target.read_text()
    assert [s["sample_id"] for s in json.loads(target.read_text())] == ["bo"]
    assert read_manifest(manifest).sha256 and [u.user for u in read_manifest(manifest).users] == ["bo"]


@pytest.mark.parametrize("edit", ["other file", "outside", "hash"])
def test_an_edited_manifest_is_refused_and_nothing_is_erased(tmp_path, stores, capsys, edit):
    exports = tmp_path / "exports"
    exports.mkdir()
    manifest = _export(exports, exports / "night.json")
    other = exports / "other.json" if edit == "other file" else tmp_path / "other_benchmark.json"
    atomic_write_json(other, [_sample("ann", f"{MARKER} in a file never exported")])
    data = json.loads(manifest.read_text())
    if edit == "hash":
        data["sha256"] = "0" * 64
    else:
        data["export"] = "other.json" if edit == "other file" else "../other_benchmark.json"
    manifest.write_text(json.dumps(data))
    journal_before = (stores / "journal.jsonl").read_text()
    code, out = _erase(capsys, stores, manifest)
    assert code == 2, out
    expected = {"other file": "does not hash to the manifest's sha256", "outside": "outside the manifest's folder",
                "hash": "does not hash to the manifest's sha256"}[edit]
    assert expected in out, out
    assert MARKER in other.read_text() and MARKER in (exports / "night.json").read_text()
    assert (stores / "journal.jsonl").read_text() == journal_before  # no ERASE journaled


def test_an_export_that_is_not_a_regular_file_is_refused(tmp_path, stores, capsys):
    exports = tmp_path / "exports"
    exports.mkdir()
    manifest = _export(exports, exports / "night.json")
    data = json.loads(manifest.read_text())
    for export, said in ((".", "is not a regular file"), ("moved.json", "does not exist")):
        manifest.write_text(json.dumps({**data, "export": export}))
        code, out = _erase(capsys, stores, manifest)
        assert code == 2 and said in out, out
        assert read_manifest(manifest).users and not read_manifest(manifest).erased  # ann not marked erased


def test_a_user_found_nowhere_is_said_and_a_path_is_no_user_id(stores, capsys):
    code, out = cli(capsys, "erase", "--user", "nobody", "--stores", stores, "--no-tracking")
    assert code == 0 and "found nowhere" in out, out
    before = (stores / "journal.jsonl").read_text()
    code, out = cli(capsys, "erase", "--user", "../../etc", "--stores", stores, "--no-tracking")
    assert code == 2 and "not a user id" in out, out
    assert (stores / "journal.jsonl").read_text() == before
