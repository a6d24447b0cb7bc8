import re

import pytest

from evolve.improve.digest import Digest, Symptom
from evolve.improve.effects import DimensionEffects
from evolve.improve.hypotheses import HypothesisTree
from evolve.improve.planner import BundleError, Planner, load_bundles, move_values, parse_bundles
from evolve.data import BASELINE_PATH
from evolve.strategy.artifact import load_strategy
from evolve.strategy.schema import evolvable_dimensions
from evolve.strategy.moves import Move, Step
from evolve.strategy.paths import set_path
from evolve.verify.critic import out_of_scope

DIMS = evolvable_dimensions()


@pytest.fixture(scope="module")
def baseline():
    return load_strategy(BASELINE_PATH)


def make_digest(*symptoms: Symptom) -> Digest:
    cells = tuple(s for s in symptoms if s.category != "*")
    aggs = tuple(s for s in symptoms if s.category == "*")
    return Digest(20, sum(s.count for s in cells) or sum(s.count for s in aggs), cells, aggs, {})


def symptom(cause, category, count, share, qualifiers=None):
    return Symptom(cause, category, count, share, share, {"qualifiers": qualifiers or {}})


TABLE = parse_bundles("""
retrieval_gap/*:
  - retrieval.top_k::increase
  - retrieval.candidate_pool::increase
  - retrieval.rerank.top_n::increase
  - expansion.dates::enable
kf_filtered/*:
  - lifecycle.prune_threshold::decrease
kf_filtered[budget]/*:
  - assembly.token_budget::increase
  - assembly.reserved.profile::decrease
""", "test-table")


# ---------------------------------------------------------------- bundle table


def test_shipped_table_is_valid_and_covers_every_dimension():
    table = load_bundles()
    used = {key.split("::")[0] for keys in table.entries.values() for key in keys}
    assert used == set(DIMS)
    assert "retrieval.time_decay.half_life_days::increase" in table.entries["retrieval_gap/temporal"]
    assert table.relief[0] == "assembly.format::set:dialogue" and "cost_relief" not in table.entries


def test_shipped_table_lists_only_moves_the_critic_can_let_through():
    """A direction whose every step acts downstream of where its symptom lost the evidence is always refused by the
    critic (out of scope): the table must not offer it."""
    for table_key, keys in load_bundles().entries.items():
        root_cause = re.match(r"[a-z_]+", table_key)[0]
        for key in keys:
            assert out_of_scope(root_cause, Move.parse(key).paths) is None, (table_key, key)


@pytest.mark.parametrize("text, message", [
    ("retrieval_gap/*:\n  - retrieval.top_k::increase\n  - retrieval.nope::increase\n",
     r"test:3: retrieval_gap/\*: retrieval.nope::increase: 'retrieval.nope' is not an evolvable schema path"),
    ("retrieval_gap/*:\n  - retrieval.top_k::enable\n", r"test:2: .*not legal for a integer dimension"),
    ("retrieval_gap/*:\n  - expansion.dates::increase\n", r"test:2: .*not legal for a boolean dimension"),
    ("generation_error/*:\n  - answering.span::set:paragraph\n", r"test:2: .*'paragraph' is not one of"),
    ("ingestion_gap/*:\n  - assembly.token_budget::set:9000\n", r"test:2: .*outside \[32, 8192\]"),
    ("lost_gap/*:\n  - retrieval.top_k::increase\n", r"test:1: lost_gap/\*: unknown root cause"),
    ("kf_filtered[weather]/*:\n  - retrieval.top_k::increase\n", r"test:1: .*unknown qualifier 'weather'"),
    ("kf_filtered/weekly:\n  - retrieval.top_k::increase\n", r"test:1: .*unknown category 'weekly'"),
    ("kf_filtered/*:\n  - retrieval.top_k::increase\nkf_filtered/*:\n  - retrieval.top_k::decrease\n",
     r"test:3: kf_filtered/\*: duplicate key"),
    ("kf_filtered/*: []\n", r"test:1: .*non-empty list"),
    ("kf_filtered/*:\n  - retrieval.top_k::up\n", r"test:2: .*malformed direction key"),
    ("cost_relief:\n  - assembly.format::set:tiny\n", r"test:2: cost_relief: .*'tiny' is not one of"),
    ("generation_error/*:\n  - answering.prompt::edit:Say {context} twice.\n", r"test:2: .*may not contain '\{'"),
    ("generation_error/*:\n  - answering.prompt::increase\n", r"test:2: .*not legal for a prompt dimension .allowed: set:<value>, edit:<instruction>."),
])
def test_table_errors_name_the_line(text, message):
    with pytest.raises(BundleError, match=message):
        parse_bundles(text, "test")


# ---------------------------------------------------------------- legal moves


def test_move_values_respect_step_bounds_and_invariants(baseline):
    assert move_values(baseline, DIMS["retrieval.top_k"], Step.parse("retrieval.top_k::increase")) == list(range(6, 16))
    near_top = set_path(set_path(baseline, "retrieval.candidate_pool", 100), "retrieval.top_k", 97)
    assert move_values(near_top, DIMS["retrieval.top_k"], Step.parse("retrieval.top_k::increase")) == [98, 99, 100]
    # rerank.top_n == top_k: increasing it would break top_n <= top_k
    assert move_values(baseline, DIMS["retrieval.rerank.top_n"], Step.parse("retrieval.rerank.top_n::increase")) == []
    assert move_values(baseline, DIMS["expansion.dates"], Step.parse("expansion.dates::enable")) == []
    assert move_values(baseline, DIMS["answering.span"], Step.parse("answering.span::set:sentence")) == ["sentence"]
    assert move_values(baseline, DIMS["extraction.dedup_threshold"],
                       Step.parse("extraction.dedup_threshold::increase")) == [0.92, 0.94, 0.96, 0.98, 1.0]


# ---------------------------------------------------------------- planning


def test_reverted_direction_ranks_below_fresh_one(baseline):
    d = make_digest(symptom("retrieval_gap", "*", 8, 0.8))
    effects = DimensionEffects()
    fresh = Planner(TABLE, effects).plan(d, baseline)
    assert [x.key for x in fresh][:2] == ["retrieval.top_k::increase", "retrieval.candidate_pool::increase"]
    effects.record("retrieval.top_k::increase", "retrieval_gap/*", accepted=False, delta=-0.01)
    after = Planner(TABLE, effects).plan(d, baseline)
    keys = [x.key for x in after]
    assert keys.index("retrieval.candidate_pool::increase") < keys.index("retrieval.top_k::increase")
    assert "1 revert(s)" in after[keys.index("retrieval.top_k::increase")].why


def test_a_symptom_the_table_has_no_move_for_takes_no_place(baseline):
    """The planner reads the ``max_symptoms`` most severe symptoms it can act on: a larger cell with nothing in the
    table (ingestion here) does not push the next one out."""
    d = make_digest(symptom("ingestion_gap", "*", 9, 0.6), symptom("retrieval_gap", "*", 6, 0.4))
    plan = Planner(TABLE, DimensionEffects(), max_symptoms=1).plan(d, baseline)
    assert plan and {x.symptom_key for x in plan} == {"retrieval_gap/*"}


def test_directions_at_bounds_are_skipped(baseline):
    at_top = set_path(set_path(baseline, "retrieval.candidate_pool", 500), "retrieval.top_k", 100)
    at_top = set_path(at_top, "retrieval.rerank.enabled", True)
    plan = Planner(TABLE, DimensionEffects()).plan(make_digest(symptom("retrieval_gap", "*", 8, 0.8)), at_top)
    keys = {x.key for x in plan}
    assert "retrieval.top_k::increase" not in keys  # at schema maximum
    assert "expansion.dates::enable" not in keys  # already enabled
    assert "retrieval.candidate_pool::increase" not in keys  # at schema maximum
    assert "retrieval.rerank.top_n::increase" in keys  # 5 < top_k = 100 now


def test_moves_of_switched_off_paths_are_skipped(baseline):
    table = parse_bundles("retrieval_gap/temporal:\n  - retrieval.time_decay.half_life_days::increase\n"
                          "  - retrieval.time_decay.enabled::disable\n", "t")
    d = make_digest(symptom("retrieval_gap", "temporal", 4, 0.4))
    assert Planner(table, DimensionEffects()).plan(d, baseline) == []  # decay off: half-life has no effect
    decaying = set_path(baseline, "retrieval.time_decay.enabled", True)
    keys = [x.key for x in Planner(table, DimensionEffects()).plan(d, decaying)]
    assert keys == ["retrieval.time_decay.half_life_days::increase", "retrieval.time_decay.enabled::disable"]


def test_a_coupled_move_that_turns_the_switch_on_may_move_what_it_guards(baseline):
    table = parse_bundles("ingestion_gap/temporal:\n"
                          "  - extraction.resolve_relative_dates::enable&extraction.date_style::set:annotate\n"
                          "  - extraction.date_style::set:annotate\n", "t")
    d = make_digest(symptom("ingestion_gap", "temporal", 4, 0.4))
    assert not baseline["extraction"]["resolve_relative_dates"]
    keys = [x.key for x in Planner(table, DimensionEffects()).plan(d, baseline)]
    assert keys == ["extraction.resolve_relative_dates::enable&extraction.date_style::set:annotate"]
    resolving = set_path(baseline, "extraction.resolve_relative_dates", True)
    keys = [x.key for x in Planner(table, DimensionEffects()).plan(d, resolving)]
    assert keys == ["extraction.date_style::set:annotate"]  # the switch is on already: the coupled move cannot move


def test_a_section_behind_a_switch_and_a_setting_behind_a_mode_wait_for_them(baseline):
    table = parse_bundles("retrieval_gap/temporal:\n"
                          "  - lifecycle.decay.half_life_days.logistics::decrease\n"
                          "  - lifecycle.decay.kind::set:blend\n"
                          "  - lifecycle.decay.enabled::enable&lifecycle.decay.kind::set:blend\n"
                          "  - lifecycle.expiry.lead_days::increase\n"
                          "  - lifecycle.expiry.mode::set:kernel&lifecycle.expiry.lead_days::increase\n", "t")
    d = make_digest(symptom("retrieval_gap", "temporal", 4, 0.4))
    assert not baseline["lifecycle"]["decay"]["enabled"] and baseline["lifecycle"]["expiry"]["mode"] == "hard"
    keys = [x.key for x in Planner(table, DimensionEffects()).plan(d, baseline)]
    assert keys == ["lifecycle.decay.enabled::enable&lifecycle.decay.kind::set:blend",
                    "lifecycle.expiry.mode::set:kernel&lifecycle.expiry.lead_days::increase"]
    ready = set_path(set_path(baseline, "lifecycle.decay.enabled", True), "lifecycle.expiry.mode", "kernel")
    keys = [x.key for x in Planner(table, DimensionEffects()).plan(d, ready)]
    assert keys == ["lifecycle.decay.half_life_days.logistics::decrease", "lifecycle.decay.kind::set:blend",
                    "lifecycle.expiry.lead_days::increase"]


def test_qualified_bundle_needs_enough_share(baseline):
    planner = Planner(TABLE, DimensionEffects())
    pruning = set_path(baseline, "lifecycle.prune_threshold", 0.2)
    strong = planner.plan(make_digest(symptom("kf_filtered", "*", 5, 0.5, {"budget": 0.8})), pruning)
    assert [x.key for x in strong] == ["assembly.token_budget::increase", "assembly.reserved.profile::decrease",
                                       "lifecycle.prune_threshold::decrease"]
    assert "via kf_filtered[budget]/*" in strong[0].why
    weak = planner.plan(make_digest(symptom("kf_filtered", "*", 5, 0.5, {"budget": 0.1})), pruning)
    assert [x.key for x in weak] == ["lifecycle.prune_threshold::decrease"]


def test_plan_truncates_and_lists_each_key_once(baseline):
    d = make_digest(symptom("retrieval_gap", "*", 6, 0.6), symptom("kf_filtered", "*", 4, 0.4, {"budget": 1.0}))
    plan = Planner(TABLE, DimensionEffects()).plan(d, baseline, max_directions=3)
    assert len(plan) == 3
    assert len({x.key for x in plan}) == 3
    assert [x.priority for x in plan] == sorted((x.priority for x in plan), reverse=True)


FILL_TABLE = parse_bundles("""
budget_fill:
  - retrieval.top_k::increase&retrieval.rerank.top_n::increase
  - assembly.replies::increase
kf_filtered/*:
  - retrieval.candidate_pool::increase
""", "fill-table")


@pytest.mark.parametrize("words,filled", [(100.0, True), (150.0, False)])
def test_moves_that_pack_more_come_first_while_the_word_cap_is_unused(baseline, words, filled):
    """Under a 160-word cap, 100 words leave more than a tenth unused: the first movable budget_fill move leads the
    plan (one a round), for the top symptom; 150 words do not. A fill move whose path is switched off (rerank) is
    left out; with top_n equal to top_k the coupled move can still move (top_k first)."""
    d = make_digest(symptom("ingestion_gap", "*", 9, 0.6), symptom("kf_filtered", "*", 6, 0.4))
    planner = Planner(FILL_TABLE, DimensionEffects(), max_words=160)
    plan = planner.plan(d, set_path(baseline, "retrieval.rerank.enabled", False), words=words)
    keys = [x.key for x in plan]
    assert (keys[0] == "assembly.replies::increase") is filled
    assert "retrieval.top_k::increase&retrieval.rerank.top_n::increase" not in keys
    if filled:
        assert plan[0].symptom_key == "kf_filtered/*" and "100 of 160" in plan[0].why
    assert "assembly.replies::increase" not in keys[1:]
    on = planner.plan(d, set_path(baseline, "retrieval.rerank.enabled", True), words=words)
    assert baseline["retrieval"]["rerank"]["top_n"] == baseline["retrieval"]["top_k"]
    assert (on[0].key == "retrieval.top_k::increase&retrieval.rerank.top_n::increase") is filled
    assert "assembly.replies::increase" not in [x.key for x in on]
    assert [x.key for x in Planner(FILL_TABLE, DimensionEffects()).plan(d, baseline, words=words)] == [
        "retrieval.candidate_pool::increase"]  # no word cap: nothing to fill


def test_tree_skips_refuted_and_marks_bounds(baseline):
    baseline = set_path(baseline, "retrieval.rerank.enabled", True)
    tree = HypothesisTree(c0=1.0, refute_after=1)
    tree.update("retrieval.top_k::increase", 0.0, -0.02, accepted=False, parent="retrieval_gap/*")
    planner = Planner(TABLE, DimensionEffects(), tree, use_tree=True)
    keys = [x.key for x in planner.plan(make_digest(symptom("retrieval_gap", "*", 8, 0.8)), baseline)]
    assert "retrieval.top_k::increase" not in keys
    assert keys[0] == "retrieval.candidate_pool::increase"
    assert tree.status("expansion.dates::enable", "retrieval_gap/*") == "exhausted"
    assert tree.status("retrieval.rerank.top_n::increase", "retrieval_gap/*") == "exhausted"  # top_n == top_k
    assert "UCB rank 1" in planner.plan(make_digest(symptom("retrieval_gap", "*", 8, 0.8)), baseline)[0].why


def test_use_tree_requires_a_tree():
    with pytest.raises(ValueError, match="needs a HypothesisTree"):
        Planner(TABLE, DimensionEffects(), None, use_tree=True)


# ---------------------------------------------------------------- dimension effects


def test_effects_reputation_and_contract_round_trip():
    effects = DimensionEffects()
    key = "retrieval.top_k::increase"
    assert effects.reputation(key) == 0.0
    effects.record(key, "retrieval_gap/temporal", accepted=False, delta=-0.02)
    assert effects.reputation(key) == pytest.approx(1 / 3 - 0.5 - 0.02)
    effects.record(key, "retrieval_gap/*", accepted=True, delta=0.04)
    assert effects.reputation(key) == pytest.approx(2 / 4 - 0.5 + 0.01)
    assert effects.reverts(key) == 1
    assert effects.reverts(key, "retrieval_gap/temporal") == 1
    assert effects.reverts(key, "retrieval_gap/*") == 0
    data = effects.to_dict()
    assert data[key] == {"tries": 2, "accepts": 1, "reverts": 1, "reverts_by_symptom": {"retrieval_gap/temporal": 1},
                         "sum_delta": pytest.approx(0.02), "reputation": pytest.approx(0.01)}
    assert DimensionEffects.from_dict(data).to_dict() == data


@pytest.mark.parametrize("entry, message", [
    ({"tries": 1, "accepts": 1, "reverts": 1, "sum_delta": 0.0}, "tries must equal accepts \\+ reverts"),
    ({"tries": -1, "accepts": 0, "reverts": 0, "sum_delta": 0.0}, "tries: expected a non-negative integer"),
    ({"tries": 0, "accepts": 0, "reverts": 0, "sum_delta": "x"}, "sum_delta: expected a number"),
    ({"tries": 1, "accepts": 1, "reverts": 0, "sum_delta": 0.0, "costed": 2, "sum_growth": 0.1},
     "costed: expected an integer between 0 and tries"),
])
def test_effects_from_dict_names_bad_field(entry, message):
    with pytest.raises(ValueError, match=f"effects.json: retrieval.top_k::increase: {message}"):
        DimensionEffects.from_dict({"retrieval.top_k::increase": entry}, "effects.json")


def test_context_growth_is_learned_per_key_and_summed_over_the_parts_of_a_coupled_key():
    effects = DimensionEffects()
    top_k, budget = "retrieval.top_k::increase", "assembly.token_budget::increase"
    effects.record(top_k, "retrieval_gap/*", True, 0.02, growth=0.10)
    effects.record(top_k, "retrieval_gap/*", False, 0.0, growth=0.20)
    effects.record(top_k, "retrieval_gap/*", False, -0.01)  # decided at the probe: no cost measured
    effects.record(budget, "kf_filtered/*", True, 0.01, growth=0.05)
    assert effects.growth(top_k) == pytest.approx(0.15) and effects.growth("retrieval.top_k::decrease") is None
    assert effects.growth(f"{top_k}&{budget}") == pytest.approx(0.20)
    effects.record(f"{top_k}&{budget}", "retrieval_gap/*", True, 0.03, growth=0.12)  # its own record wins
    assert effects.growth(f"{top_k}&{budget}") == pytest.approx(0.12)
    data = effects.to_dict()
    assert data[top_k]["costed"] == 2 and DimensionEffects.from_dict(data).to_dict() == data


def test_moves_whose_recorded_growth_breaks_the_cost_limits_go_last(baseline):
    from evolve.verify.decision import CostLimits

    d = make_digest(symptom("retrieval_gap", "*", 8, 0.8))
    effects = DimensionEffects()
    free = Planner(TABLE, effects).plan(d, baseline, max_directions=50)
    assert free[0].key == "retrieval.top_k::increase"
    effects.record("retrieval.top_k::increase", "retrieval_gap/*", True, 0.02, growth=0.15)
    limits = CostLimits(max_context_words=160)
    planner = Planner(TABLE, effects, cost_violation=limits.violation)
    roomy = planner.plan(d, baseline, max_directions=50, words=100.0)  # 115 words fit: order unchanged
    assert [x.key for x in roomy] == [x.key for x in free]
    tight = planner.plan(d, baseline, max_directions=50, words=150.0)  # 172.5 words would not
    assert [x.key for x in tight] == [x.key for x in free if x.key != "retrieval.top_k::increase"] + [
        "retrieval.top_k::increase"]
    assert "deferred: its recorded context growth (+15%) would take 150 words past" in tight[-1].why


def test_interleave_round_robins_over_symptoms():
    from evolve.improve.planner import Direction, interleave

    def d(key, symptom, priority):
        return Direction(Move.parse(key), symptom, priority, "")

    ranked = [d("a.x::increase", "s1", 0.9), d("a.y::increase", "s1", 0.8), d("a.z::increase", "s1", 0.7),
              d("b.x::increase", "s2", 0.5), d("c.x::increase", "s3", 0.4)]
    assert [x.key for x in interleave(ranked)] == ["a.x::increase", "b.x::increase", "c.x::increase",
                                                   "a.y::increase", "a.z::increase"]


def test_coupled_bundle_entries_are_validated_and_moved_only_when_every_part_can_move(baseline_strategy):
    from evolve.improve.planner import can_move

    key = "retrieval.top_k::increase&assembly.token_budget::increase"
    table = parse_bundles(f"kf_filtered/*:\n  - {key}\n", "t")
    assert table.entries["kf_filtered/*"] == (key,)
    for bad, needle in [("retrieval.top_k::increase&retrieval.top_k::decrease", "moves each path once"),
                        ("retrieval.top_k::increase&retrieval.nope::increase", "'retrieval.nope' is not an evolvable"),
                        ("retrieval.top_k::increase&expansion.dates::increase", "not legal for a boolean")]:
        with pytest.raises(BundleError, match=needle):
            parse_bundles(f"kf_filtered/*:\n  - {bad}\n", "t")
    dims = evolvable_dimensions()
    assert can_move(baseline_strategy, Move.parse(key), dims)
    assert not can_move(set_path(baseline_strategy, "assembly.token_budget", 8192), Move.parse(key), dims)


def test_library_prompt_edits_are_offered_only_where_a_model_reads_the_prompt(baseline):
    from evolve.strategy.schema import live_dimensions

    d = make_digest(symptom("generation_error", "*", 6, 0.6))
    table = load_bundles()
    embedded = [x.key for x in Planner(table, DimensionEffects(), dims=live_dimensions(set())).plan(d, baseline, 20)]
    with_model = [x.key for x in Planner(table, DimensionEffects(), dims=live_dimensions({"answerer"}))
                  .plan(d, baseline, 20)]
    edits = [k for k in with_model if k.startswith("answering.prompt::edit:")]
    assert edits and not any("prompt::" in k for k in embedded)
    assert [k for k in with_model if k not in edits] == embedded  # the other directions keep their order


def test_a_temporal_answer_cut_in_assembly_offers_the_resolved_date_after_the_speakers_words(baseline):
    """The shipped table: with resolved dates written in place of "last Sunday", a temporal answer ("the Sunday
    before 25 May 2023") stored and retrieved but not packed is met by writing the date after the words."""
    d = make_digest(symptom("kf_filtered", "temporal", 6, 0.3, {"answer_cut": 1.0}))
    planner = Planner(load_bundles(), DimensionEffects())
    resolving = set_path(baseline, "extraction.resolve_relative_dates", True)
    assert resolving["extraction"]["date_style"] == "replace"
    first = planner.plan(d, resolving)[0]
    assert first.key == "extraction.date_style::set:annotate"
    assert "via kf_filtered[answer_cut]/temporal" in first.why
    assert "extraction.date_style::set:annotate" not in [x.key for x in planner.plan(d, baseline)]  # nothing resolved


def test_words_cut_aims_at_packing_the_facts_turn_and_only_under_memory_units(baseline):
    """The shipped table: answers whose every gold turn was cited, but whose packed facts lost an answer word, are met
    first by packing a fact's whole turn (or its span); once the unit packs turns anyway, fact_unit cannot act."""
    d = make_digest(symptom("kf_filtered", "*", 8, 0.4, {"words_cut": 1.0}))
    planner = Planner(load_bundles(), DimensionEffects())
    keys = [x.key for x in planner.plan(d, baseline)]
    assert keys[:3] == ["assembly.fact_unit::set:turn", "assembly.fact_unit::set:span", "assembly.unit::set:turn"]
    turns = [x.key for x in planner.plan(d, set_path(baseline, "assembly.unit", "turn"))]
    assert not any(k.startswith("assembly.fact_unit") for k in turns)
