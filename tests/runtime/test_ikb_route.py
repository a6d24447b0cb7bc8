"""The image route (``images`` in the strategy): counting, listing and naming questions answered by one item drawn
from the image knowledge base; every other question, and every question with the route off, packed as before."""
from __future__ import annotations

from evolve.data import BASELINE_PATH
from evolve.runtime import MemoryRuntime
from evolve.runtime.ikb import build_ikb
from evolve.runtime.ikb_query import IKB_LAYER, query, route_of
from evolve.strategy.artifact import load_strategy
from evolve.strategy.paths import set_path
from evolve.strategy.policy import Policy
from image_fixtures import PETS

KB = build_ikb(PETS.images(), PETS.turns())


def _strategy(**changes) -> dict:
    strategy = set_path(load_strategy(BASELINE_PATH), "images.route.enabled", True)
    for path, value in changes.items():
        strategy = set_path(strategy, path.replace("__", "."), value)
    return strategy


def _images(**changes):
    return Policy.from_strategy(_strategy(**changes)).images


def test_the_router_sends_counting_naming_and_listing_questions():
    rules = _images().route
    assert route_of("How many dogs does Ana have?", rules) == "counting"
    assert route_of("What is the name of Ana's puppy?", rules) == "naming"
    assert route_of("What kinds of pottery has Ben made?", rules) == "enumeration"
    assert route_of("What pets does Ana have?", rules) == "enumeration"  # a category named in the plural
    assert route_of("What does Ana's necklace mean?", rules) is None  # one thing asked about, not a list
    assert route_of("How many dogs does Ana have?", _images(images__route__counting=False).route) is None
    assert route_of("How many dogs does Ana have?", _images(images__route__enabled=False).route) is None


def test_the_query_counts_names_and_splits_by_category_synonyms():
    answer = query(KB, "How many dogs does Ana have?", _images(images__names__reach=2))
    assert answer is not None and answer.route == "counting" and answer.speakers == ("Ana",)
    assert [e.id for e in answer.images] == ["D1:IMG_001", "D2:IMG_001"] and answer.names == ("Luna", "Oliver")
    assert query(KB, "How many dogs does Ana have?", _images()).names == ("Oliver",)  # Luna is named 2 turns on
    assert query(KB, "How many dogs does Ana have?", _images(images__names__enabled=False)).names == ()
    # "puppies": by synonyms both dogs, by head noun only the caption that says puppy
    assert len(query(KB, "What are the names of Ana's puppies?", _images()).images) == 2
    assert len(query(KB, "What are the names of Ana's puppies?", _images(images__categories="head")).images) == 1
    assert query(KB, "How many cats does Ana have?", _images()) is None  # nothing filed: normal retrieval


def test_a_routed_question_packs_one_ikb_item_first_within_the_budget():
    strategy = _strategy(images__names__reach=2)
    runtime = MemoryRuntime(strategy)
    store = runtime.ingest(PETS)
    result = runtime.ask(store, "How many dogs does Ana have?", answer=False)
    first = result.packed[0]
    assert result.route == "counting" and first.layer == IKB_LAYER and first.id == "IKB:counting"
    assert first.image_ids == ("D1:IMG_001", "D2:IMG_001") and first.source_ids == ("D1:1", "D2:1")
    assert "2 photos; 2 named: Luna, Oliver" in first.text and "9 June 2023" in first.text
    assert len(result.packed) > 1 and result.context_tokens <= result.token_budget
    assert result.to_trace()["route"] == "counting"
    alone = MemoryRuntime(set_path(strategy, "images.packing.mode", "alone")).ask(store, "How many dogs does Ana "
                                                                                         "have?", answer=False)
    assert [c.id for c in alone.packed] == ["IKB:counting"]
    one = MemoryRuntime(set_path(strategy, "images.packing.max_images", 1)).ask(store, "How many dogs does Ana "
                                                                                      "have?", answer=False)
    assert one.packed[0].image_ids == ("D1:IMG_001",) and "2 photos" in one.packed[0].text  # counted, not listed
    said = MemoryRuntime(set_path(strategy, "images.packing.text", "turn")).ask(store, "How many dogs does Ana "
                                                                                     "have?", answer=False)
    assert "Ana: We got a new puppy last weekend!" in said.packed[0].text


def test_other_questions_and_the_route_off_pack_as_before():
    off = MemoryRuntime(load_strategy(BASELINE_PATH))
    on = MemoryRuntime(_strategy())
    store = off.ingest(PETS)
    for question in ("Where did Ben paint?", "How many dogs does Ana have?"):
        plain = off.ask(store, question, answer=False)
        assert plain.route is None and all(c.layer != IKB_LAYER for c in plain.packed)
    routed_off = on.ask(store, "Where did Ben paint?", answer=False)
    assert routed_off.packed == off.ask(store, "Where did Ben paint?", answer=False).packed
