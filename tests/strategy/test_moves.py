"""Moves: the one text form of a change (parse / format round trip, errors naming the text), set-value legality and
the schema-bound test."""
import pytest

from evolve.strategy.moves import IllegalValue, Move, Step, set_value
from evolve.strategy.schema import evolvable_dimensions

DIMS = evolvable_dimensions()


@pytest.mark.parametrize("text", [
    "retrieval.top_k::increase",
    "expansion.dates::disable",
    "assembly.format::set:dialogue",
    "extraction.prompt::set:extraction.default@v2",
    "retrieval.top_k::increase&assembly.token_budget::increase",
    "lifecycle.supersession::disable&assembly.format::set:dialogue&retrieval.weights.bm25::set:1.25",
])
def test_text_round_trips(text):
    move = Move.parse(text)
    assert str(move) == text and Move.parse(str(move)) == move
    assert move.coupled == ("&" in text) and len(move.paths) == len(move.steps)


def test_steps_carry_path_direction_and_set_value():
    move = Move.parse("assembly.format::set:dialogue&retrieval.top_k::decrease")
    assert move.first == Step("assembly.format", "set", "dialogue") and move.first.verb == "set:dialogue"
    assert move.steps[1] == Step("retrieval.top_k", "decrease") and move.steps[1].relative
    assert move.paths == {"assembly.format", "retrieval.top_k"}
    # A set value may itself contain the separator's colon: only the first '::' splits.
    assert Step.parse("a.b::set:x::y") == Step("a.b", "set", "x::y")


def test_setting_a_value_encodes_booleans_as_switches_and_others_as_text():
    move = Move.setting([("lifecycle.supersession", False), ("retrieval.top_k", 7), ("retrieval.weights.bm25", 1.25),
                         ("assembly.format", "dialogue"), ("features.profile_layer", True)])
    assert str(move) == ("lifecycle.supersession::disable&retrieval.top_k::set:7&retrieval.weights.bm25::set:1.25"
                         "&assembly.format::set:dialogue&features.profile_layer::enable")
    joined = Move.parse("a.x::set:1").then(Move.parse("b.y::decrease"))
    assert str(joined) == "a.x::set:1&b.y::decrease"


@pytest.mark.parametrize("text, offending", [
    ("retrieval.top_k", "retrieval.top_k"),
    ("retrieval.top_k::up", "retrieval.top_k::up"),
    ("::increase", "::increase"),
    ("retrieval.top_k::set:", "retrieval.top_k::set:"),
    ("retrieval.top_k::increase&assembly.token_budget", "assembly.token_budget"),
    ("retrieval.top_k::increase&", ""),
])
def test_malformed_text_is_refused_naming_the_offending_part(text, offending):
    with pytest.raises(ValueError, match="malformed direction key") as info:
        Move.parse(text)
    assert repr(offending) in str(info.value)


def test_a_coupled_move_moves_each_path_once():
    with pytest.raises(ValueError, match="moves each path once") as info:
        Move.parse("retrieval.top_k::increase&retrieval.top_k::decrease")
    assert "retrieval.top_k::increase&retrieval.top_k::decrease" in str(info.value)
    with pytest.raises(ValueError, match="at least one step"):
        Move(())


def test_set_values_are_typed_and_checked_against_the_schema():
    assert set_value(DIMS["retrieval.top_k"], "7") == 7 and set_value(DIMS["retrieval.top_k"], 7.0) == 7
    bm25 = DIMS["retrieval.weights.bm25"]
    assert set_value(bm25, "1.25") == 1.25 and set_value(bm25, 2) == 2.0
    assert set_value(DIMS["assembly.format"], "dialogue") == "dialogue"
    for dim, value, problem in [("assembly.format", "xml", "choices"), ("retrieval.top_k", "2.5", "integer"),
                                ("retrieval.top_k", "1000", "range"), ("retrieval.top_k", "many", "number"),
                                ("retrieval.top_k", True, "number"), ("retrieval.top_k", "nan", "number"),
                                ("expansion.dates", "true", "kind")]:
        with pytest.raises(IllegalValue) as info:
            set_value(DIMS[dim], value)
        assert info.value.problem == problem and dim in str(info.value)


def test_legality_and_schema_bound_of_a_step():
    Step.parse("retrieval.top_k::increase").check(DIMS["retrieval.top_k"])
    with pytest.raises(ValueError, match="'enable' is not legal for a integer dimension"):
        Step.parse("retrieval.top_k::enable").check(DIMS["retrieval.top_k"])
    with pytest.raises(ValueError, match="'paragraph' is not one of"):
        Step.parse("answering.span::set:paragraph").check(DIMS["answering.span"])
    top_k = DIMS["retrieval.top_k"]
    assert Step("retrieval.top_k", "increase").at_bound(top_k, 100)
    assert not Step("retrieval.top_k", "increase").at_bound(top_k, 99)
    assert Step("retrieval.top_k", "decrease").at_bound(top_k, 1)
    assert not Step("retrieval.top_k", "set", "100").at_bound(top_k, 100)  # a set never goes past the range
