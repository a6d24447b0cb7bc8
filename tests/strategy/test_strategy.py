"""Strategy artifact: schema rejection with file/path/line, canonical hashing, evolvable space."""
from pathlib import Path

import pytest
import yaml

from evolve.strategy.policy import Policy
from evolve.data import BASELINE_PATH
from evolve.strategy.invariants import INVARIANTS
from evolve.strategy.artifact import (StrategyError, derive, dump_yaml, ingestion_key, load_strategy, parse_strategy,
                                      policy_hash, strategy_hash, validate_strategy)
from evolve.strategy.paths import value_at, with_value
from evolve.strategy.schema import evolvable_dimensions, load_schema

BASE_TEXT = BASELINE_PATH.read_text()


def _error(text: str) -> StrategyError:
    with pytest.raises(StrategyError) as info:
        parse_strategy(text, "s.yaml")
    return info.value


def test_baseline_loads_and_is_typed():
    strategy = load_strategy(BASELINE_PATH)
    policy = Policy.from_strategy(strategy)
    assert policy.retrieval.rrf_kappa == 60
    assert policy.retrieval.top_k_for("temporal") == policy.retrieval.top_k


def test_bad_type_names_path_line_and_value():
    err = _error(BASE_TEXT.replace("top_k: 5", "top_k: five"))
    assert err.path == "retrieval.top_k" and err.value == "five"
    assert err.line == BASE_TEXT.splitlines().index("  top_k: 5") + 1
    assert str(err).startswith(f"s.yaml:{err.line}: retrieval.top_k")


def test_out_of_range_rejected():
    err = _error(BASE_TEXT.replace("rrf_kappa: 60", "rrf_kappa: 0"))
    assert err.path == "retrieval.rrf_kappa" and "minimum" in err.rule


def test_unknown_field_rejected():
    err = _error(BASE_TEXT.replace("  top_k: 5\n", "  top_k: 5\n  topk: 9\n"))
    assert err.path == "retrieval.topk" and err.rule == "unknown field"


@pytest.mark.parametrize("old,new,path", [
    ("top_n: 5", "top_n: 6", "retrieval.rerank.top_n"),
    ("window_overlap: 1", "window_overlap: 4", "extraction.window_overlap"),
    ("bm25: 1.0\n    vector: 0.5\n    subquery: 0.3", "bm25: 0.0\n    vector: 0.0\n    subquery: 0.0", "retrieval.weights"),
    ("corrections: 0.05", "corrections: 0.5\n    # keep", None),
    ("FACTS:\n", "FACTZ:\n", "extraction.prompt.template"),
])
def test_broken_invariants_rejected(old, new, path):
    text = BASE_TEXT.replace(old, new)
    if path is None:  # profile 0.1 + corrections 0.5 < 1 is legal
        parse_strategy(text, "s.yaml")
        return
    assert _error(text).path == path


@pytest.mark.parametrize("text,needle", [("", "empty"), ("- a\n- b\n", "list"), ("a: [1,\n", "malformed YAML"),
                                         (BASE_TEXT.replace("half_life_days: 180", "half_life_days: .inf"), "finite")])
def test_non_strategies_rejected(text, needle):
    assert needle in str(_error(text))


def test_non_utf8_file(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"version: 1\nname: \xff\xfe\n")
    with pytest.raises(StrategyError, match="not UTF-8"):
        load_strategy(bad)


def test_canonical_hash_ignores_key_order_and_formatting():
    a = load_strategy(BASELINE_PATH)
    reordered = yaml.safe_load(dump_yaml(dict(reversed(list(a.items())))))
    assert strategy_hash(a) == strategy_hash(reordered)
    assert dump_yaml(a) == dump_yaml(reordered)
    assert strategy_hash(derive(a, {"retrieval.top_k": 6})) != strategy_hash(a)


def test_policy_hash_ignores_lineage_but_not_behaviour():
    a = load_strategy(BASELINE_PATH)
    child = derive(a, {})
    assert child["parent"] == strategy_hash(a)
    assert policy_hash(child) == policy_hash(a) and strategy_hash(child) != strategy_hash(a)
    assert policy_hash(derive(a, {"assembly.token_budget": 192})) != policy_hash(a)


def test_ingestion_key_tracks_only_ingestion_sections():
    a = load_strategy(BASELINE_PATH)
    assert ingestion_key(derive(a, {"retrieval.top_k": 9})) == ingestion_key(a)
    assert ingestion_key(derive(a, {"extraction.max_facts_per_window": 9})) != ingestion_key(a)


def test_evolvable_dimensions_come_from_schema():
    dims = evolvable_dimensions()
    assert dims["retrieval.top_k"].kind == "integer" and dims["retrieval.top_k"].high == 100
    assert dims["answering.span"].choices == ("sentence", "clause", "keywords")
    assert not any(p.endswith("prompt.template") or p in ("version", "parent") for p in dims)


def test_schema_states_exactly_the_invariant_table():
    assert load_schema()["x-invariants"] == [inv.rule for inv in INVARIANTS]


def test_the_fact_span_section_is_optional_and_written_whole_by_a_move():
    strategy = load_strategy(BASELINE_PATH)
    assert "fact_span" not in strategy["assembly"]
    assert value_at(strategy, "assembly.fact_span.around") == 1 == Policy.from_strategy(strategy).assembly.fact_span.around
    wider = with_value(strategy, "assembly.fact_span.around", 2)
    assert wider["assembly"]["fact_span"] == {"around": 2}
    assert policy_hash(wider) != policy_hash(strategy)
    validate_strategy(wider)
    with pytest.raises(StrategyError, match=r"assembly\.fact_span\.around"):
        validate_strategy(with_value(strategy, "assembly.fact_span.around", 4))
