"""Every run config shipped under experiments/ loads and validates (benchmark, roles, budget, holdout), so the
commands the README gives for them start."""
from __future__ import annotations

from pathlib import Path

import pytest

from evolve.loop.config import load_config
from evolve.loop.setup import RunSetup

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "experiments").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_run_configs_validate(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # their paths are relative to the repository root, where the README runs them
    config = load_config(path.relative_to(ROOT))
    scheme, _, data = config.benchmark.partition(":")
    if scheme == "locomo" and not Path(data).is_file():
        pytest.skip(f"{data} is not on this machine")
    setup = RunSetup.prepare(config)
    assert setup.question_ids and setup.probe_ids


def test_there_are_configs_to_check():
    assert {p.name for p in CONFIGS} >= {"nightly.yaml", "locomo.yaml", "locomo_evidence.yaml", "llm.yaml"}
