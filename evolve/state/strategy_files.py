"""Strategies as stored YAML: written only when they round-trip to the same hash, read back only when they still
hash to the name they are stored under."""
from __future__ import annotations

from pathlib import Path

import yaml

from evolve.files import StoreError
from evolve.strategy import strict_yaml
from evolve.strategy.artifact import dump_yaml, strategy_hash
from evolve.strategy.strict_yaml import YAMLInputError


def strategy_to_yaml(strategy: dict, source: str | Path = "<strategy>") -> str:
    """Canonical YAML that is known to load back to a strategy with the same hash."""
    text = dump_yaml(strategy)
    if strategy_hash(yaml.safe_load(text)) != strategy_hash(strategy):
        raise StoreError(source, "strategy does not round-trip through YAML unchanged; refusing to store it")
    return text


def strategy_from_yaml(text: str, expected_hash: str, source: str | Path) -> dict:
    """Load stored strategy YAML and check it still hashes to ``expected_hash``."""
    try:
        data, _ = strict_yaml.load(text)
    except YAMLInputError as exc:
        raise StoreError(source, f"corrupt strategy YAML: line {exc.line}: {exc.problem}") from None
    if not isinstance(data, dict):
        raise StoreError(source, f"corrupt strategy: expected a mapping, got {type(data).__name__}")
    actual = strategy_hash(data)
    if actual != expected_hash:
        raise StoreError(source, f"strategy hash mismatch: expected {expected_hash}, content hashes to {actual}")
    return data
