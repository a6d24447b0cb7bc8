"""Every run config shipped under experiments/ loads and validates (benchmark, roles, budget, holdout), so the
commands the README gives for them start; every shipped strategy file validates against today's schema."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from evolve.benchmarks.types import file_spec
from evolve.loop.config import load_config
from evolve.loop.setup import RunSetup
from evolve.strategy.artifact import load_strategy

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "experiments").glob("*.yaml"))
STRATEGIES = sorted([*(ROOT / "experiments" / "strategies").glob("*.yaml"), *(ROOT / "strategies").glob("*.yaml")])


@pytest.mark.parametrize("where", ["root", "elsewhere"])
@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_run_configs_validate(path, where, monkeypatch, tmp_path):
    # Their paths are relative to the config file, so they load the same from the repository root (where the
    # README runs them) and from any other directory.
    monkeypatch.chdir(ROOT if where == "root" else tmp_path)
    raw = yaml.safe_load(path.read_text())
    spec = file_spec(raw.get("benchmark", ""))  # a file's benchmark (locomo:, probes:, ...), PATH#CONV,... included
    if spec is not None and not (path.parent / spec[1]).is_file():
        pytest.skip(f"{spec[1]} is not on this machine")
    config = load_config(path.relative_to(ROOT) if where == "root" else path)
    assert config.strategy.is_file() and config.stores.is_relative_to(ROOT / "stores")
    setup = RunSetup.prepare(config)
    assert setup.question_ids and setup.probe_ids


def test_there_are_configs_to_check():
    assert {p.name for p in CONFIGS} >= {"nightly.yaml", "locomo.yaml", "locomo_evidence.yaml", "llm.yaml"}


@pytest.mark.parametrize("path", STRATEGIES, ids=[p.name for p in STRATEGIES])
def test_shipped_strategies_validate(path):
    assert load_strategy(path)["name"]
