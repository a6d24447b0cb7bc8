"""Best-ever checkpoint: generations, verification, corruption fallback."""
from __future__ import annotations

import hashlib
import json

import pytest

from evolve.state.checkpoint import Checkpoint
from evolve.files import StoreError
from evolve.canonical import canonical_hash
from evolve.data import BASELINE_PATH
from evolve.strategy.artifact import derive, load_strategy, strategy_hash

BASELINE = load_strategy(BASELINE_PATH)


def strategy(n: int) -> dict:
    return derive(BASELINE, {"name": f"best-{n}"})


def saved(tmp_path, count: int) -> Checkpoint:
    cp = Checkpoint(tmp_path / "best")
    for n in range(1, count + 1):
        cp.save(strategy(n), 0.5 + n / 100, round=n, meta={"n": n})
    return cp


def test_empty_checkpoint_loads_none(tmp_path):
    assert Checkpoint(tmp_path / "best").load() is None


def test_save_load_roundtrip_and_keeps_three_generations(tmp_path):
    cp = saved(tmp_path, 5)
    record = cp.load()
    assert record.strategy == strategy(5) and record.strategy_hash == strategy_hash(strategy(5))
    assert (record.score, record.round, record.meta, record.generation) == (0.55, 5, {"n": 5}, "gen-0005")
    assert record.fallback_from is None and record.refused == ()
    assert cp.generations() == [3, 4, 5]
    assert (cp.dir / "CURRENT").read_text() == "gen-0005\n"
    manifest = json.loads((cp.dir / "gen-0005" / "manifest.json").read_text())
    assert {"strategy_hash", "file_sha256", "score", "round", "meta", "saved_at"} <= set(manifest)


def test_truncated_strategy_falls_back_to_previous_generation(tmp_path):
    cp = saved(tmp_path, 3)
    path = cp.dir / "gen-0003" / "strategy.yaml"
    path.write_bytes(path.read_bytes()[:100])
    record = cp.load()
    assert record.generation == "gen-0002" and record.strategy == strategy(2)
    assert record.fallback_from == "gen-0003"
    assert "truncated or edited" in dict(record.refused)["gen-0003"]


def test_edited_manifest_is_refused(tmp_path):
    cp = saved(tmp_path, 2)
    path = cp.dir / "gen-0002" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["score"] = 0.99
    path.write_text(json.dumps(manifest))
    record = cp.load()
    assert (record.generation, record.fallback_from) == ("gen-0001", "gen-0002")
    assert "edited" in record.refused[0][1]


def test_consistently_edited_strategy_and_file_hash_is_refused(tmp_path):
    """Changing the YAML and its file hash but not the strategy hash is still caught."""
    cp = saved(tmp_path, 2)
    gen = cp.dir / "gen-0002"
    text = (gen / "strategy.yaml").read_text().replace("window_size: 4", "window_size: 5")
    (gen / "strategy.yaml").write_text(text)
    manifest = json.loads((gen / "manifest.json").read_text())
    manifest["file_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    manifest["manifest_sha256"] = canonical_hash({k: v for k, v in manifest.items() if k != "manifest_sha256"})
    (gen / "manifest.json").write_text(json.dumps(manifest))
    record = cp.load()
    assert record.generation == "gen-0001" and "hash mismatch" in record.refused[0][1]


def test_corrupt_current_pointer_uses_newest_intact_generation(tmp_path):
    cp = saved(tmp_path, 2)
    (cp.dir / "CURRENT").write_text("gen-00")
    record = cp.load()
    assert (record.generation, record.fallback_from) == ("gen-0002", "CURRENT")
    (cp.dir / "CURRENT").unlink()
    assert cp.load().refused == (("CURRENT", "CURRENT pointer is missing"),)


def test_nothing_intact_is_an_error_not_a_fresh_start(tmp_path):
    cp = saved(tmp_path, 2)
    for gen in ("gen-0001", "gen-0002"):
        (cp.dir / gen / "strategy.yaml").write_text("")
    with pytest.raises(StoreError, match="no intact checkpoint generation.*gen-0002.*gen-0001"):
        cp.load()


def test_interrupted_save_keeps_old_checkpoint_and_orphan_is_pruned(tmp_path):
    cp = saved(tmp_path, 2)
    cp.save(strategy(3), 0.9, round=3)
    (cp.dir / "CURRENT").write_text("gen-0002\n")  # as if the process died before CURRENT was replaced
    record = cp.load()
    assert (record.generation, record.fallback_from) == ("gen-0002", None)  # the orphan is not trusted
    cp.save(strategy(4), 0.95, round=4)
    assert cp.generations() == [1, 2, 4]
    assert cp.load().strategy == strategy(4)


def test_bad_score_is_refused(tmp_path):
    with pytest.raises(ValueError, match="finite number"):
        Checkpoint(tmp_path / "best").save(BASELINE, float("nan"), round=1)
    with pytest.raises(StoreError, match="meta is not JSON-serialisable"):
        Checkpoint(tmp_path / "best").save(BASELINE, 0.5, round=1, meta={"when": object()})
    assert not (tmp_path / "best").exists()
