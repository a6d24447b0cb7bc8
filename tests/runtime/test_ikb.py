"""The image knowledge base built at ingestion: registry, categories with synonyms, names recovered from the dialogue,
over-merged groups split, related turns; kept with the ingested store, and image ids carried to packed items and
traces."""
from __future__ import annotations

from evolve.benchmarks.types import Benchmark, Question
from evolve.data import BASELINE_PATH
from evolve.observe.harness import Harness
from evolve.runtime import IngestionCache, MemoryRuntime
from evolve.runtime.ikb import build_ikb, category_table, head_noun, split_entities
from evolve.strategy.artifact import load_strategy
from image_fixtures import D1, PETS

def test_head_nouns_and_categories_with_synonyms():
    assert head_noun("a photo of a black dog laying in the grass") == "dog"
    assert head_noun("a photo of a stack of bowls with different designs") == "bowl"  # a container's "of" followed
    assert head_noun("a painting of a sunset over a lake") == "paint"
    table = category_table()
    assert table.categories_in("a black puppy and a pup") == ["dog"]  # synonyms are one category
    assert table.asked("What pets does she have?")[:2] == ["dog", "cat"]  # a group word stands for its members


def test_the_passes_register_categorise_name_split_and_relate():
    kb = build_ikb(PETS.images(), PETS.turns())
    assert [i.id for i in kb.images] == ["D1:IMG_001", "D1:IMG_002", "D2:IMG_001", "D2:IMG_002"]
    luna, sunset, oliver, bowls = kb.images
    assert (luna.image.session, luna.image.time, luna.image.source_turn, luna.image.speaker) == ("D1", D1, "D1:1", "Ana")
    assert luna.categories == ("dog",) and oliver.categories == ("dog",) and bowls.categories[0] == "pottery"
    assert sunset.categories == ("painting", "landscape")
    # the name said two turns after the photo, the one said in the photo's own turn
    assert (luna.name(reach=1), luna.name(reach=2), oliver.name(reach=0)) == (None, "Luna", "Oliver")
    # one dog category, two named dogs: the group is split into two entities
    dogs = {e.name: e.image_ids for e in kb.entities if e.category == "dog"}
    assert dogs == {"Luna": ("D1:IMG_001",), "Oliver": ("D2:IMG_001",)}
    assert {e.name for e in split_entities(kb.images, reach=1) if e.category == "dog"} == {None, "Oliver"}
    assert luna.turns == ("D1:1", "D1:3")  # its own turn, and the turn that names it
    assert bowls.turns == ("D2:2", "D2:3") and {"bowl", "design"} <= bowls.terms
    assert kb.image_ids(["D2:2", "D1:2", "D1:1"]) == ("D2:IMG_002", "D1:IMG_001")


def test_the_ikb_is_cached_with_the_store_and_packed_items_carry_image_ids(tmp_path):
    strategy = load_strategy(BASELINE_PATH)
    store = MemoryRuntime(strategy, cache=IngestionCache(tmp_path)).ingest(PETS)
    again = MemoryRuntime(strategy, cache=IngestionCache(tmp_path)).ingest(PETS)  # read back from disk
    assert again is not store and again.ikb == store.ikb and len(again.ikb) == 4
    result = MemoryRuntime(strategy).ask(store, "What did Ben make in pottery class?")
    citing = [c for c in result.packed if "D2:2" in c.source_ids]
    assert citing and all("D2:IMG_002" in c.image_ids for c in citing)
    assert all(not c.image_ids for c in result.packed if not {"D1:1", "D1:4", "D2:1", "D2:2"} & set(c.source_ids))


def test_traces_say_which_gold_images_were_packed():
    question = Question("pets/q0", "pets", "What did Ben make in pottery class?", "bowls", "single_hop", ("D2:2",))
    run = Harness(Benchmark("pets", {"pets": PETS}, [question])).evaluate(load_strategy(BASELINE_PATH))
    trace = run.traces[0]
    assert trace.gold_images == ["D2:IMG_002"] and "D2:IMG_002" in trace.packed_images
    packed = next(p for p in trace.packed if "D2:2" in p["source_ids"])
    assert "D2:IMG_002" in packed["image_ids"]
