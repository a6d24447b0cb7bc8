"""The locked memory runtime: layered ingestion, lifecycle filtering, budgeted assembly, answering, caching,
determinism, speed, and that every evolvable policy field changes behaviour."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import numpy as np
import pytest

from evolve.benchmarks.lifecycle import generate_lifecycle
from evolve.benchmarks.types import Conversation, Session, Turn
from evolve.improve.planner import REQUIRES, requirements
from evolve.runtime import IngestionCache, MemoryRuntime, RuleExpander, classify_intent
from evolve.runtime.cache import SHARED_EMBEDDINGS_ENV, EmbeddingCache
from evolve.runtime.ingest import windows
from evolve.runtime.text import resolve_relative_dates, sentences
from evolve.strategy.policy import Policy
from evolve.strategy.artifact import StrategyError, validate_strategy
from evolve.strategy.schema import live_dimensions
from evolve.strategy.paths import set_path, value_at, with_value
from image_fixtures import PETS

pytestmark = pytest.mark.heavy


def conversation(cid: str, sessions: list[tuple[datetime, list[tuple[str, str]]]]) -> Conversation:
    built = []
    for n, (when, turns) in enumerate(sessions, start=1):
        built.append(Session(f"S{n}", when, tuple(Turn(f"D{n}:{i}", speaker, text, f"S{n}")
                                                    for i, (speaker, text) in enumerate(turns, start=1))))
    speakers = tuple(dict.fromkeys(t.speaker for s in built for t in s.turns))
    return Conversation(cid, speakers, tuple(built))


CONV = conversation("c1", [
    (datetime(2023, 5, 1, 10, 0), [
        ("Alice", "Hi Bob! I am a nurse at the busy city hospital downtown. I love hiking in the mountains with my dog."),
        ("Bob", "Nice to meet you. My favorite drink is strong black coffee every single morning."),
        ("Alice", "Yesterday I adopted a golden retriever puppy named Max from the animal shelter."),
        ("Bob", "Ok."),
        ("Alice", "I really love hiking in the mountains with my dog Max. I paint watercolor landscapes on weekends."),
        ("Bob", "I work as a software engineer, building spreadsheet tools for regional banks."),
    ]),
    (datetime(2023, 6, 15, 18, 30), [
        ("Bob", "Actually, my favorite drink is now fresh orange juice, since black coffee makes me jittery."),
        ("Alice", "Last week I ran a charity marathon in Boston with my sister Emma."),
        ("Bob", "I travelled to Paris with my brother last month to see the famous art museums."),
        ("Alice", "Forget what I said about the watercolor landscapes, I quit that hobby."),
        ("Bob", "Sure."),
    ]),
    (datetime(2023, 8, 20, 9, 15), [
        ("Alice", "Max the puppy learned to fetch sticks at the lake yesterday, he was so proud."),
        ("Bob", "I moved to Denver for a new job at a small robotics startup."),
        ("Alice", "Emma and I are planning a camping trip to Yosemite next month, in September."),
        ("Bob", "Cool."),
    ]),
])

QUESTIONS = [
    "What is Bob's favorite drink?",
    "What does Alice paint on weekends?",
    "When did Alice adopt the puppy Max?",
    "Where did Bob and Alice travel?",
    "Why would Alice enjoy camping in Yosemite?",
    "What did Alice do with Emma in June 2023?",
    "What job does Bob have at the robotics startup?",
]


@pytest.fixture(scope="module")
def cache() -> IngestionCache:
    return IngestionCache()


@pytest.fixture
def run(baseline_strategy, embedder, cache):
    """``run(changes) -> (runtime, store)`` for the baseline with ``{path: value}`` changes applied."""

    def make(changes: dict | None = None, conv: Conversation = CONV):
        strategy = baseline_strategy
        for path, value in (changes or {}).items():
            strategy = set_path(strategy, path, value)
        runtime = MemoryRuntime(strategy, embedder=embedder, cache=cache)
        return runtime, runtime.ingest(conv)

    return make


def by_text(store, fragment: str, layer: str = "L0"):
    return [item for item in store.items if item.layer == layer and fragment in item.text]


# ---------------------------------------------------------------- ingestion


def test_layers_text_and_sources(run):
    _, store = run()
    nurse = by_text(store, "I am a nurse")
    assert [i.text for i in nurse] == ["Alice said (1 May 2023): I am a nurse at the busy city hospital downtown."]
    assert nurse[0].source_ids == ("D1:1",) and nurse[0].kind == "profile"
    assert by_text(store, "I am a nurse", "L2"), "profile facts are copied to the L2 layer"
    assert sum(1 for i in store.items if i.layer == "L1") == 3, "one rollup per session"
    assert {s for i in store.items if i.layer == "SM" for s in i.source_ids} == {"D3:1", "D3:2", "D3:3", "D3:4"}
    assert not by_text(store, "Ok."), "turns without enough content words yield no fact"
    from_turn = store.items_from_sources(["D1:1"])
    assert nurse[0].id in from_turn and all("D1:1" in store.item(i).source_ids for i in from_turn)


def test_windows_slide_with_overlap():
    turns = CONV.sessions[0].turns
    assert [[t.id for t in w] for w in windows(turns, 4, 1)] == [
        ["D1:1", "D1:2", "D1:3", "D1:4"], ["D1:4", "D1:5", "D1:6"]]
    assert len(windows(turns, 2, 0)) == 3 and windows([], 4, 1) == []


def test_relative_dates_are_resolved_against_the_session_date():
    ref = datetime(2023, 5, 8, 13, 56)  # a Monday
    assert resolve_relative_dates("I went yesterday.", ref) == "I went on 7 May 2023."
    assert resolve_relative_dates("I moved 2 years ago", ref) == "I moved in 2021"
    assert resolve_relative_dates("since last year", ref) == "since 2022"
    assert resolve_relative_dates("last month", ref) == "in April 2023"
    assert resolve_relative_dates("Last week I ran", ref) == "the week of 1 May 2023 I ran"
    assert resolve_relative_dates("last Friday", ref) == "on Friday 5 May 2023"


MONDAY, SUNDAY = datetime(2023, 7, 17, 13), datetime(2023, 7, 16)


@pytest.mark.parametrize("text,ref,style,resolved", [
    ("Last Fri I took my kids", MONDAY, "replace", "on Friday 14 July 2023 I took my kids"),
    ("a group last Tues.", MONDAY, "replace", "a group on Tuesday 11 July 2023."),
    ("when I last sat down", MONDAY, "replace", "when I last sat down"),
    ("last weekend we hiked", MONDAY, "replace", "the weekend of 15 July 2023 we hiked"),
    ("this weekend", MONDAY, "replace", "the weekend of 22 July 2023"),
    ("next weekend", MONDAY, "replace", "the weekend of 29 July 2023"),
    ("two weekends ago", MONDAY, "replace", "the weekend of 8 July 2023"),
    ("this weekend", SUNDAY, "replace", "the weekend of 15 July 2023"),
    ("last weekend", SUNDAY, "replace", "the weekend of 8 July 2023"),
    ("last weekend", MONDAY, "annotate", "last weekend (the weekend of 15 July 2023)"),
    ("this past weekend was insane", MONDAY, "replace", "the weekend of 15 July 2023 was insane"),
    ("fun over the weekend?", MONDAY, "replace", "fun over the weekend of 15 July 2023?"),
    ("Last night we sang", MONDAY, "replace", "on 16 July 2023 we sang"),
    ("camping last summer", MONDAY, "replace", "camping in the summer of 2022"),
    ("last spring", MONDAY, "replace", "in the spring of 2023"),  # over by July
])
def test_resolved_dates_keep_a_named_weekday_and_a_weekend(text, ref, style, resolved):
    assert resolve_relative_dates(text, ref, style) == resolved
    assert resolve_relative_dates(resolved, ref, style) == resolved  # resolving twice changes nothing more


def test_annotated_dates_keep_the_speakers_words_and_add_the_date_once():
    ref = datetime(2023, 5, 8, 13, 56)  # a Monday
    annotate = lambda text: resolve_relative_dates(text, ref, "annotate")  # noqa: E731
    assert annotate("I went yesterday.") == "I went yesterday (7 May 2023)."
    assert annotate("last Friday") == "last Friday (5 May 2023)"
    assert annotate("last Fri") == "last Fri (Friday 5 May 2023)"
    assert annotate("last Fri (Friday 5 May 2023)") == "last Fri (Friday 5 May 2023)"
    assert annotate("Last week I ran") == "Last week (the week of 1 May 2023) I ran"
    assert annotate("since last year") == "since last year (2022)"
    # "yesterday" inside "the day before yesterday" is not annotated a second time
    assert annotate("the day before yesterday") == "the day before yesterday (6 May 2023)"
    # a parenthesis of the speaker's own is not taken for an annotation
    assert annotate("yesterday (it rained)") == "yesterday (7 May 2023) (it rained)"
    assert annotate("no date here") == "no date here"
    with pytest.raises(ValueError, match="date style 'inline'"):
        resolve_relative_dates("yesterday", ref, "inline")


def test_supersession_hides_the_corrected_fact(run):
    runtime, store = run({"retrieval.top_k": 10, "retrieval.rerank.top_n": 5})
    old = by_text(store, "strong black coffee")[0]
    new = by_text(store, "fresh orange juice")[0]
    assert old.superseded_by == new.id and new.kind == "correction"
    result = runtime.ask(store, "What is Bob's favorite drink?")
    assert (old.id, "superseded") in result.filtered
    assert old.id not in {c.id for c in result.packed}
    assert "orange juice" in result.answer.text

    runtime, store = run({"retrieval.top_k": 10, "retrieval.rerank.top_n": 5, "lifecycle.supersession": False,
                          "lifecycle.slots.enabled": False})
    assert by_text(store, "strong black coffee")[0].superseded_by is None
    assert not [r for r in runtime.ask(store, "What is Bob's favorite drink?").filtered if r[1] == "superseded"]


def test_retraction_hides_the_retracted_topic(run):
    runtime, store = run({"retrieval.top_k": 10})
    painting = by_text(store, "watercolor landscapes on weekends")[0]
    assert painting.retracted
    assert not by_text(store, "hiking in the mountains with my dog.")[0].retracted
    result = runtime.ask(store, "What does Alice paint on weekends?")
    assert (painting.id, "retracted") in result.filtered
    _, store = run({"retrieval.top_k": 10, "lifecycle.forget_guard": False})
    assert not any(i.retracted for i in store.items)


def test_near_duplicates_are_deduplicated_by_threshold(run):
    _, strict = run({"extraction.dedup_threshold": 1.0})
    _, loose = run({"extraction.dedup_threshold": 0.6})
    assert by_text(strict, "really love hiking") and not by_text(loose, "really love hiking")


def test_supplement_and_min_tokens_control_coverage(run):
    _, plain = run()
    _, supplemented = run({"extraction.supplement": True})
    assert "D1:4" not in {s for i in plain.items if i.layer == "L0" for s in i.source_ids}
    assert by_text(supplemented, "Bob said (1 May 2023): Ok.")
    _, strict = run({"extraction.min_fact_tokens": 8})
    assert len(strict.in_layers(["L0"])) < len(plain.in_layers(["L0"]))


def test_fact_cap_keeps_most_salient_per_window(run):
    _, one = run({"extraction.max_facts_per_window": 1, "extraction.window_size": 2, "extraction.window_overlap": 0})
    facts = one.in_layers(["L0"])
    assert len(facts) <= 8  # 8 windows of two turns
    assert by_text(one, "golden retriever puppy"), "the most informative sentence of its window survives"


def test_prune_threshold_filters_low_salience(run):
    runtime, store = run({"lifecycle.prune_threshold": 0.99})
    assert not store.in_layers(["L1"]), "rollups summarise surviving facts only"
    result = runtime.ask(store, "What job does Bob have at the robotics startup?")
    assert result.retrieved and result.filtered == [(h.id, "pruned") for h in result.retrieved]
    assert result.packed == [] and result.answer.text == ""


# ---------------------------------------------------------------- retrieval


@pytest.mark.parametrize("question, intent", [
    ("When did Alice adopt Max?", "temporal"),
    ("How long ago did Bob move?", "temporal"),
    ("Why did Bob move to Denver?", "open_domain"),
    ("Would Alice likely enjoy a museum?", "open_domain"),
    ("What do Alice and Bob both like?", "multi_hop"),
    ("What is Bob's job?", "single_hop"),
])
def test_intent(question, intent):
    assert classify_intent(question) == intent


def test_expander_follows_policy(baseline_strategy):
    expander = RuleExpander()
    question = "What did Alice and Emma do in June 2023?"
    policy = Policy.from_strategy(set_path(baseline_strategy, "expansion.max_subqueries", 8)).expansion
    subs = expander.expand(question, policy)
    assert subs == ["Alice june 2023", "Emma june 2023", "June 2023"]
    keywords = expander.expand(question, policy.model_copy(update={"keywords": True}))
    assert keywords == subs + ["alice emma", "emma june", "june 2023"]
    assert expander.expand(question, policy.model_copy(update={"max_subqueries": 2})) == subs[:2]
    assert expander.expand(question, policy.model_copy(update={"max_subqueries": 0})) == []
    assert expander.expand(question, policy.model_copy(update={"entities": False, "dates": False})) == []


def test_hits_carry_channel_ranks_and_respect_top_k(run):
    runtime, store = run({"retrieval.top_k": 3, "retrieval.rerank.top_n": 3})
    result = runtime.ask(store, "What job does Bob have at the robotics startup?")
    assert [h.rank for h in result.retrieved] == [1, 2, 3]
    scores = [h.score for h in result.retrieved]
    assert scores == sorted(scores, reverse=True)
    top = result.retrieved[0]
    assert store.item(top.id).source_ids == ("D3:2",) or "robotics" in store.item(top.id).text
    assert set(top.channels) <= {"bm25", "vector", "subquery"} and "bm25" in top.channels
    assert all({"rank", "score"} == set(v) for v in top.channels.values())


def test_session_memory_toggle(run):
    runtime, store = run({"retrieval.top_k": 20, "retrieval.candidate_pool": 60})
    question = "What is Alice planning with Emma?"
    assert any(h.id.startswith("SM:") for h in runtime.ask(store, question).retrieved)
    runtime, store = run({"retrieval.top_k": 20, "retrieval.candidate_pool": 60, "features.session_memory": False})
    assert not any(h.id.startswith("SM:") for h in runtime.ask(store, question).retrieved)


def test_time_decay_prefers_recent_memories(run):
    question = "What did Alice do with her dog Max?"
    runtime, store = run({"retrieval.top_k": 10})
    plain = runtime.ask(store, question).retrieved
    runtime, store = run({"retrieval.top_k": 10, "retrieval.time_decay.enabled": True,
                          "retrieval.time_decay.half_life_days": 10})
    decayed = runtime.ask(store, question).retrieved
    newest = store.newest_day()

    def mean_age(hits):
        return float(np.nanmean([newest - store.days[store.position[h.id]] for h in hits[:3]]))

    assert mean_age(decayed) < mean_age(plain)


# ---------------------------------------------------------------- assembly and answering


def test_budget_drops_are_recorded(run):
    runtime, store = run({"retrieval.top_k": 10, "retrieval.rerank.top_n": 5, "assembly.token_budget": 32})
    result = runtime.ask(store, "What job does Bob have at the robotics startup?")
    assert result.context_tokens <= 32 and result.token_budget == 32
    assert result.context_tokens == sum(len(c.text.split()) for c in result.packed)
    assert any(reason == "budget" for _, reason in result.dropped)
    handled = {c.id for c in result.packed} | {i for i, _ in result.dropped} | {i for i, _ in result.filtered}
    assert {h.id for h in result.retrieved} == handled


def test_conflicting_copies_keep_one(run):
    runtime, store = run({"retrieval.top_k": 10, "retrieval.rerank.top_n": 5})
    result = runtime.ask(store, "Where does Alice work as a nurse?")
    assert any(reason == "conflict" for _, reason in result.dropped)
    runtime, store = run({"retrieval.top_k": 10, "retrieval.rerank.top_n": 5, "features.conflict_handling": False})
    assert not any(reason == "conflict" for _, reason in runtime.ask(store, "Where does Alice work as a nurse?").dropped)


def test_source_window_and_backfill_add_raw_turns(run):
    question = "What job does Bob have at the robotics startup?"
    runtime, store = run({"assembly.source_window": 1, "assembly.token_budget": 400})
    raw = [c for c in runtime.ask(store, question).packed if c.layer == "RAW"]
    assert raw and all(c.id == f"RAW:{c.source_ids[0]}" for c in raw)
    runtime, store = run({"features.raw_dialogue_backfill": True, "assembly.token_budget": 400})
    packed = runtime.ask(store, question).packed
    backfilled = [c for c in packed if c.layer == "RAW"]
    assert backfilled and packed[-1].layer == "RAW"


def test_turn_units_pack_each_dated_source_turn_once(run):
    question = "What does Alice paint on weekends?"
    runtime, store = run({"retrieval.top_k": 8})
    memory = runtime.ask(store, question).packed
    assert {c.layer for c in memory} <= {"L0", "L1", "L2", "SM"}
    runtime, store = run({"retrieval.top_k": 8, "assembly.unit": "turn"})
    packed = runtime.ask(store, question).packed
    raw = [c for c in packed if c.layer != "L1"]
    assert raw and all(c.layer == "RAW" and c.id == f"RAW:{c.source_ids[0]}" for c in raw)
    assert len({c.id for c in raw}) == len(raw)  # facts of one turn pack that turn once
    turn = store.turns["D1:5"]
    assert f"- Alice said (1 May 2023): {turn.text}" in [c.text for c in raw]
    # sentences_per_turn only matters when turns are compressed
    runtime, store = run({"retrieval.top_k": 8, "assembly.sentences_per_turn": 1})
    assert [c.text for c in runtime.ask(store, question).packed] == [c.text for c in memory]


def test_sentence_units_keep_the_sentences_the_question_asks_about(run):
    question = "What does Alice paint on weekends?"
    runtime, store = run({"retrieval.top_k": 8, "assembly.unit": "sentences", "assembly.sentences_per_turn": 1})
    texts = {c.source_ids[0]: c.text for c in runtime.ask(store, question).packed if c.layer == "RAW"}
    assert texts["D1:5"] == "- Alice said (1 May 2023): I paint watercolor landscapes on weekends."
    runtime, store = run({"retrieval.top_k": 8, "assembly.unit": "turn"})
    whole = {c.source_ids[0]: c.text for c in runtime.ask(store, question).packed if c.layer == "RAW"}
    assert "hiking" in whole["D1:5"]
    # a one-sentence turn is packed whole either way; two sentences kept of a two-sentence turn is the whole turn
    one = [tid for tid in texts if tid in whole and len(sentences(store.turns[tid].text)) == 1]
    assert one and all(texts[t] == whole[t] for t in one)
    runtime, store = run({"retrieval.top_k": 8, "assembly.unit": "sentences", "assembly.sentences_per_turn": 2})
    two = {c.source_ids[0]: c.text for c in runtime.ask(store, question).packed if c.layer == "RAW"}
    assert two["D1:5"] == whole["D1:5"]


SEASIDE = conversation("c3", [
    (datetime(2023, 5, 1, 10, 0), [
        ("Ann", "We went to the coast last weekend. The weather was perfect for a long walk. I found a tiny starfish "
                "in a rock pool. My brother took photos of the lighthouse all afternoon. Then we ate fish and chips "
                "by the harbour."),
        ("Bob", "That sounds like a lovely weekend by the sea."),
    ]),
    (datetime(2023, 5, 9, 10, 0), [("Bob", "Ok.")]),  # the latest session's turns are stored whole (SM): not these
])


def test_fact_units_pack_the_facts_turn_or_its_span_as_the_budget_allows(run, baseline_strategy):
    from evolve.runtime.assembly import assemble
    from evolve.runtime.retrieval import Hit

    runtime, store = run(conv=SEASIDE)
    starfish, harbour = by_text(store, "starfish")[0], by_text(store, "harbour")[0]
    turn = store.turns["D1:1"]
    hits = [Hit(item.id, rank, 1.0 / rank, item.source_ids) for rank, item in enumerate((starfish, harbour), 1)]

    def packed(unit: str, budget: int = 160, which=hits, around: int | None = None):
        strategy = set_path(set_path(baseline_strategy, "assembly.fact_unit", unit), "assembly.token_budget", budget)
        if around is not None:
            strategy = set_path(strategy, "assembly.fact_span.around", around)
        return assemble(store, which, Policy.from_strategy(strategy)).packed

    assert [c.text for c in packed("fact")] == [f"- {starfish.text}", f"- {harbour.text}"]
    # span: the fact's own sentence and one on each side, citing its turn
    cut = packed("span")[0]
    assert cut.text == ("- Ann said (1 May 2023): The weather was perfect for a long walk. I found a tiny starfish in "
                        "a rock pool. My brother took photos of the lighthouse all afternoon.")
    assert cut.source_ids == ("D1:1",) and cut.id == starfish.id
    # fact_span.around: how many sentences on each side (absent: one, as above)
    def around(n: int) -> str:
        return packed("span", which=hits[:1], around=n)[0].text

    assert around(1) == cut.text
    assert around(0) == "- Ann said (1 May 2023): I found a tiny starfish in a rock pool."
    assert around(2) == ("- Ann said (1 May 2023): We went to the coast last weekend. The weather was perfect for a "
                         "long walk. I found a tiny starfish in a rock pool. My brother took photos of the lighthouse "
                         "all afternoon. Then we ate fish and chips by the harbour.")
    # turn: the whole dated turn, once however many of its facts are hits
    whole = packed("turn")
    assert [c.id for c in whole] == ["RAW:D1:1"] and whole[0].text == f"- Ann said (1 May 2023): {turn.text}"
    # what does not fit falls back to the next smaller unit
    words = len(whole[0].text.split())
    assert [c.text for c in packed("turn", words - 1, hits[:1])] == [cut.text]
    assert [c.text for c in packed("turn", len(cut.text.split()) - 1, hits[:1])] == [f"- {starfish.text}"]
    # under another packing unit the dimension does nothing
    for unit in ("turn", "sentences"):
        strategy = set_path(baseline_strategy, "assembly.unit", unit)
        same = [assemble(store, hits, Policy.from_strategy(set_path(strategy, "assembly.fact_unit", f))).packed
                for f in ("fact", "turn")]
        assert same[0] == same[1]


def test_a_fact_without_a_known_turn_packs_its_own_text_under_every_fact_unit(baseline_strategy):
    from evolve.runtime.assembly import assemble
    from evolve.runtime.retrieval import Hit
    from evolve.runtime.store import MemoryItem, MemoryStore

    items = [MemoryItem("L0:0", "L0", "Ann said: the starfish was tiny", (), "Ann", None, "fact", 0.5),
             MemoryItem("L0:1", "L0", "Ann said: the lighthouse was red", ("D9:9",), "Ann", None, "fact", 0.5)]
    store = MemoryStore("c", items, [], np.zeros((2, 4), dtype=np.float32), "none")
    hits = [Hit(item.id, n, 1.0, item.source_ids) for n, item in enumerate(items, 1)]
    for unit in ("fact", "span", "turn"):
        policy = Policy.from_strategy(set_path(baseline_strategy, "assembly.fact_unit", unit))
        assert [c.id for c in assemble(store, hits, policy).packed] == ["L0:0", "L0:1"]


def test_a_turn_packed_word_for_word_is_not_packed_again_by_its_facts(run, baseline_strategy):
    from evolve.runtime.assembly import assemble
    from evolve.runtime.retrieval import Hit

    runtime, store = run({"features.turn_layer": True}, conv=SEASIDE)
    turn_item = next(i for i in store.items if i.layer == "RT" and i.source_ids == ("D1:1",))
    starfish = by_text(store, "starfish")[0]
    for unit in ("span", "turn"):
        strategy = set_path(set_path(baseline_strategy, "assembly.fact_unit", unit), "features.turn_layer", True)
        policy = Policy.from_strategy(strategy)
        turn_first = assemble(store, [Hit(turn_item.id, 1, 1.0, turn_item.source_ids),
                                      Hit(starfish.id, 2, 0.5, starfish.source_ids)], policy).packed
        assert [c.id for c in turn_first] == [turn_item.id]
        fact_first = assemble(store, [Hit(starfish.id, 1, 1.0, starfish.source_ids),
                                      Hit(turn_item.id, 2, 0.5, turn_item.source_ids)], policy).packed
        assert [c.id for c in fact_first] == (["RAW:D1:1"] if unit == "turn" else [starfish.id, turn_item.id])


def test_turn_layer_stores_every_turn_and_competes_in_the_ranking(run):
    runtime, store = run()
    assert not store.in_layers(["RT"])
    runtime, store = run({"features.turn_layer": True})
    turns = store.in_layers(["RT"])
    assert [t.source_ids[0] for t in turns] == list(store.turns) and not store.in_layers(["SM"])
    assert turns[3].text == "Bob said (1 May 2023): Ok."  # a turn too short to yield a fact is still stored
    hits = runtime.ask(store, "What did Alice say about Emma and Yosemite?").retrieved
    assert {h.id.split(":")[0] for h in hits} >= {"RT", "L0"}


MARRIED = conversation("c2", [
    (datetime(2023, 7, 2, 12, 0), [
        ("Anna", "Your wedding photo is lovely! How long have you been married?"),
        ("Ben", "Five years already, time flies."),
        ("Anna", "I started a pottery class at the community center downtown."),
        ("Ben", "That sounds relaxing, my cousin teaches ceramics there."),
        ("Anna", "We should visit the lake cabin again in spring."),
    ]),
])


def test_replies_follow_a_question_turn(run):
    question = "How long have Ben and his wife been married?"
    changes = {"features.turn_layer": True, "assembly.unit": "turn", "retrieval.top_k": 1, "retrieval.rerank.top_n": 1}
    runtime, store = run(changes, MARRIED)
    assert [c.id for c in runtime.ask(store, question).packed] == ["RAW:D1:1"]
    runtime, store = run({**changes, "assembly.replies": 1}, MARRIED)
    assert [c.id for c in runtime.ask(store, question).packed] == ["RAW:D1:1", "RAW:D1:2"]
    # a turn that asks nothing brings no reply
    runtime, store = run({**changes, "assembly.replies": 1}, MARRIED)
    assert [c.id for c in runtime.ask(store, "Where is Anna's pottery class?").packed] == ["RAW:D1:3"]


def test_turn_context_finds_a_reply_by_the_question_it_answers(run):
    question = "How long have Ben and his wife been married?"
    changes = {"features.turn_layer": True, "assembly.unit": "turn", "retrieval.top_k": 1, "retrieval.rerank.top_n": 1}
    runtime, store = run(changes, MARRIED)
    assert store.item("RT:1").context == ""
    assert [c.id for c in runtime.ask(store, question).packed] == ["RAW:D1:1"]
    runtime, store = run({**changes, "features.turn_context": 1}, MARRIED)
    reply = store.item("RT:1")
    assert reply.context == "Anna: Your wedding photo is lovely! How long have you been married?"
    assert reply.text == "Ben said (2 July 2023): Five years already, time flies."  # the context is never packed
    assert store.item("RT:0").context == ""  # the first turn of a session has none
    packed = runtime.ask(store, question).packed
    assert [c.id for c in packed] == ["RAW:D1:2"] and "wedding" not in packed[0].text


def test_formats_render_differently(run):
    question = "What job does Bob have at the robotics startup?"
    lines = {}
    for fmt in ("bullets", "dialogue", "json"):
        runtime, store = run({"assembly.format": fmt})
        lines[fmt] = runtime.ask(store, question).packed[0].text
    assert lines["bullets"].startswith("- ")
    assert lines["dialogue"].startswith("[20 August 2023] Bob: ")
    assert json.loads(lines["json"])["speaker"] == "Bob"


def test_temporal_answer_uses_resolved_date(run):
    runtime, store = run()
    assert runtime.ask(store, "When did Alice adopt the puppy Max?").answer.text == "1 May 2023"
    runtime, store = run({"extraction.resolve_relative_dates": True})
    assert runtime.ask(store, "When did Alice adopt the puppy Max?").answer.text == "30 April 2023"
    runtime, store = run({"answering.temporal_dates": False})
    assert "golden retriever" in runtime.ask(store, "When did Alice adopt the puppy Max?").answer.text


def test_answer_span_and_length(run):
    question = "What job does Bob have at the robotics startup?"
    runtime, store = run({"answering.span": "sentence", "answering.max_answer_tokens": 64})
    sentence = runtime.ask(store, question)
    assert sentence.answer.support_ids and sentence.answer.support_ids[0] in {c.id for c in sentence.packed}
    runtime, store = run({"answering.max_answer_tokens": 2})
    assert len(runtime.ask(store, question).answer.text.split()) <= 2


# ---------------------------------------------------------------- every field matters


#: Settings a dimension acts only under: the planner's switches, and the switches, packing unit and retrieval depth
#: the rest read (deep enough for a superseded fact to be a hit).
ACTS_UNDER = {
    **REQUIRES,
    "features.turn_context": {"features.turn_layer": True},
    "features.raw_dialogue_backfill": {"assembly.unit": "memory"},
    "assembly.replies": {"assembly.unit": "turn", "features.turn_layer": True},
    "lifecycle.slots": {"retrieval.time_decay.enabled": False, "retrieval.top_k": 10},  # the older fact is a hit
}
#: One slot per fact category, set in January and set again, plainly (confidence between the replace and the
#: accumulate thresholds), in June: whether the June fact supersedes depends on the category's slot mode.
SLOTS = conversation("c4", [
    (datetime(2023, 1, 10, 9, 0), [
        ("Ann", "My hometown is Porto, the old northern city where I was born."),
        ("Ann", "My sister is Lena, the tall quiet painter from my school days."),
        ("Ann", "My course is French literature at the evening university."),
        ("Ann", "My doctor is Silva, the calm older physician near the station."),
        ("Ann", "My company is Acme Robotics, a small startup building warehouse arms."),
        ("Ann", "My hobby is pottery with glazed blue bowls and tall vases."),
        ("Ann", "My favorite fruit is mango, sweet and ripe from the market."),
        ("Ann", "My rent is 900 dollars for the small flat downtown."),
        ("Ann", "My interview is with Hartley Bank for the analyst role."),
    ]),
    (datetime(2023, 6, 10, 9, 0), [
        ("Ann", "My hometown is Braga, the green northern city where I was born."),
        ("Ann", "My sister is Mara, the short loud singer from my school days."),
        ("Ann", "My course is German grammar at the evening university."),
        ("Ann", "My doctor is Costa, the young friendly physician near the station."),
        ("Ann", "My company is Zeta Labs, a small startup building farm sensors."),
        ("Ann", "My hobby is chess with carved wooden pieces and a clock."),
        ("Ann", "My favorite fruit is papaya, sweet and ripe from the market."),
        ("Ann", "My rent is 1200 dollars for the small flat downtown."),
        ("Ann", "My interview is with Norden Bank for the analyst role."),
    ]),
])
SLOT_QUESTIONS = ["What is Ann's hometown?", "Who is Ann's sister?", "What course is Ann taking?",
                  "Who is Ann's doctor?", "What company does Ann work for?", "What is Ann's hobby?",
                  "What is Ann's favorite fruit?", "How much is Ann's rent?", "Which bank is Ann's interview with?"]

#: A dated fact of no event category and an appointment, both long past when asked about (expiry scope, the kernel
#: with the date filter).
DATED = conversation("c5", [(datetime(2023, 5, 2, 9, 0), [
    ("Ann", "Greg's birthday party is this Saturday at the lake house."),
    ("Ann", "I have a dentist appointment on 10 May 2023 at the clinic."),
])])
DATED_QUESTIONS = [("What is happening at the lake house?", datetime(2023, 6, 20)),
                   ("When is Ann's dentist appointment?", datetime(2023, 6, 20))]


#: Questions the image route answers from PETS's image knowledge base: a count, names, a list.
PET_QUESTIONS = ["How many dogs does Ana have?", "What are the names of Ana's puppies?",
                 "What kinds of pottery has Ben made?"]


def _fixtures() -> list[tuple[Conversation, list[tuple[str, datetime | None]]]]:
    """What the signature asks about: CONV, RACE, SLOTS, DATED, PETS and the lifecycle benchmark's first two
    personas."""
    life = generate_lifecycle(0, 2)
    return [(CONV, [(q, None) for q in QUESTIONS]), (RACE, [("When did Mel run a charity race?", None)]),
            (SLOTS, [(q, None) for q in SLOT_QUESTIONS]),
            (DATED, DATED_QUESTIONS), (PETS, [(q, None) for q in PET_QUESTIONS]),
            *[(conv, [(q.question, q.asked_at) for q in life.questions if q.conversation_id == cid])
              for cid, conv in life.conversations.items()]]


def _signature(runtime: MemoryRuntime, fixtures) -> str:
    """Stored items and traces (without their clock readings) of every fixture question."""
    out = []
    for conv, questions in fixtures:
        store = runtime.ingest(conv)
        traces = [{k: v for k, v in runtime.ask(store, q, at).to_trace().items() if k != "retrieval_ms"}
                  for q, at in questions]
        out.append([[list(map(str, (i.id, i.text, i.source_ids, i.kind, i.salience, i.superseded_by, i.retracted)))
                     for i in store.items], traces])
    return json.dumps(out, default=str)


def _candidates(dim, current):
    if dim.kind == "boolean":
        return [not current]
    if dim.kind == "enum":
        return [c for c in dim.choices if c != current]
    raw = [dim.low, dim.high, current - dim.step, current + dim.step, current - dim.max_step, current + dim.max_step]
    cast = int if dim.kind == "integer" else float
    return sorted({cast(min(dim.high, max(dim.low, v))) for v in raw} - {current})


def test_every_evolvable_field_changes_behaviour(baseline_strategy, embedder, cache):
    probe = baseline_strategy
    for path, value in {"retrieval.rerank.enabled": True, "retrieval.rerank.top_n": 3, "retrieval.top_k": 6,
                        "retrieval.candidate_pool": 10, "retrieval.time_decay.enabled": True,
                        "assembly.token_budget": 96, "expansion.max_subqueries": 4,
                        "assembly.unit": "sentences", "assembly.sentences_per_turn": 1}.items():
        probe = set_path(probe, path, value)
    fixtures = _fixtures()
    references: dict[str, str] = {}
    inert = []
    for path, dim in live_dimensions(set()).items():  # the embedded roles read no prompt (see test_prompt_evolution)
        settings = requirements(path, ACTS_UNDER)
        point = probe
        for where, value in settings.items():
            point = with_value(point, where, value)
        key = json.dumps(settings, sort_keys=True)
        if key not in references:
            runtime = MemoryRuntime(point, embedder=embedder, cache=cache)
            references[key] = _signature(runtime, fixtures)
        changed = False
        for value in _candidates(dim, value_at(point, path)):
            variant = with_value(point, path, value)
            try:
                validate_strategy(variant)
            except StrategyError:
                continue
            runtime = MemoryRuntime(variant, embedder=embedder, cache=cache)
            if _signature(runtime, fixtures) != references[key]:
                changed = True
                break
        if not changed:
            inert.append(path)
    assert inert == [], ", ".join(inert)


# ---------------------------------------------------------------- caching, determinism, speed


def test_ingestion_cache_reuses_stores_across_retrieval_changes(baseline_strategy, embedder, tmp_path, monkeypatch):
    monkeypatch.delenv(SHARED_EMBEDDINGS_ENV)  # the stores' own embeddings, not the session's
    cache = IngestionCache(tmp_path)
    store = MemoryRuntime(baseline_strategy, embedder=embedder, cache=cache).ingest(CONV)
    assert (cache.hits, cache.misses) == (0, 1)
    retrieval_only = set_path(set_path(baseline_strategy, "retrieval.weights.vector", 2.0), "assembly.token_budget", 64)
    assert MemoryRuntime(retrieval_only, embedder=embedder, cache=cache).ingest(CONV) is store
    assert (cache.hits, cache.misses) == (1, 1)

    embedded = cache.embeddings.misses
    changed = set_path(baseline_strategy, "extraction.min_fact_tokens", 2)
    bigger = MemoryRuntime(changed, embedder=embedder, cache=cache).ingest(CONV)
    assert cache.misses == 2 and len(bigger) > len(store)
    assert 0 < cache.embeddings.misses - embedded < len(bigger), "only texts never seen before are embedded"

    reopened = IngestionCache(tmp_path)
    again = MemoryRuntime(baseline_strategy, embedder=embedder, cache=reopened).ingest(CONV)
    assert (reopened.hits, reopened.misses) == (1, 0)
    assert again.items == store.items and np.array_equal(again.embeddings, store.embeddings)
    assert len(reopened.embeddings) == len(cache.embeddings)
    assert not list(tmp_path.rglob("*.tmp"))


def test_caches_of_other_stores_share_the_machine_embedding_cache(baseline_strategy, embedder, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv(SHARED_EMBEDDINGS_ENV, str(tmp_path / "shared"))
    first = IngestionCache(tmp_path / "night1")
    store = MemoryRuntime(baseline_strategy, embedder=embedder, cache=first).ingest(CONV)
    assert first.embeddings.misses > 0 and list((tmp_path / "shared").glob("*.npz"))
    second = IngestionCache(tmp_path / "night2")  # other stores, a cold ingestion cache: no text embedded again
    again = MemoryRuntime(baseline_strategy, embedder=embedder, cache=second).ingest(CONV)
    assert (second.misses, second.embeddings.misses) == (1, 0)
    assert np.array_equal(again.embeddings, store.embeddings)
    assert not (tmp_path / "night1" / "embeddings").exists()


def test_a_bounded_vector_cache_keeps_the_most_recently_used_in_memory(embedder, tmp_path, monkeypatch):
    monkeypatch.setenv(SHARED_EMBEDDINGS_ENV, str(tmp_path / "shared"))
    cache = IngestionCache(max_vectors=2).embeddings  # memory only, whatever the environment says
    first = cache.encode(embedder, ["a cat", "a dog"])
    cache.encode(embedder, ["a cat"])  # used last: "a dog" goes first
    cache.encode(embedder, ["a bird"])
    assert (len(cache), cache.misses) == (2, 3)
    assert np.array_equal(cache.encode(embedder, ["a cat"])[0], first[0]) and cache.misses == 3
    cache.encode(embedder, ["a dog"])
    assert cache.misses == 4 and not (tmp_path / "shared").exists()
    with pytest.raises(ValueError, match="in-memory cache only"):
        EmbeddingCache(tmp_path, max_vectors=2)


def test_same_input_gives_identical_results(baseline_strategy, embedder):
    traces = []
    for _ in range(2):
        runtime = MemoryRuntime(baseline_strategy, embedder=embedder, cache=IngestionCache())
        store = runtime.ingest(CONV)
        results = [runtime.ask(store, q).to_trace() for q in QUESTIONS]
        assert all(r.pop("retrieval_ms") >= 0 for r in results)  # a measured time: the one field that may differ
        traces.append((store.items, results))
    assert traces[0] == traces[1]
    json.dumps(traces[0][1])  # traces are plain JSON


def test_embedder_is_semantic(embedder):
    vectors = embedder.encode(["dog", "puppy", "spreadsheet"])
    assert vectors.shape == (3, embedder.dim) == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


def test_invalid_strategy_is_rejected(baseline_strategy, embedder):
    with pytest.raises(StrategyError, match="retrieval.rerank.top_n"):
        MemoryRuntime(set_path(baseline_strategy, "retrieval.rerank.top_n", 50), embedder=embedder)


def test_empty_conversation(baseline_strategy, embedder):
    runtime = MemoryRuntime(baseline_strategy, embedder=embedder)
    store = runtime.ingest(Conversation("empty", (), ()))
    result = runtime.ask(store, "What is anything?")
    assert len(store) == 0 and result.retrieved == [] and result.answer.text == ""


def _synthetic(turns: int) -> Conversation:
    people = ["Ana", "Ben"]
    places = ["Lisbon", "Oslo", "Kyoto", "Lima", "Cairo", "Quebec", "Hanoi", "Perth", "Austin", "Dublin"]
    hobbies = ["pottery", "climbing", "chess", "baking", "surfing", "violin", "gardening", "running", "poetry"]
    pets = ["a parrot", "two cats", "a beagle", "a turtle", "a hamster"]
    sessions, n = [], 0
    start = datetime(2022, 1, 3, 12, 0)
    for s in range(turns // 20):
        rows = []
        for i in range(20):
            k = n * 7 + i
            who = people[i % 2]
            rows.append((who, f"Last week I went to {places[k % 10]} for {hobbies[k % 9]} with {pets[k % 5]}. "
                              f"It took {k % 13 + 2} hours and cost {k % 17 * 10 + 20} dollars, "
                              f"and I met {people[(i + 1) % 2]}'s friend number {k}."))
            n += 1
        sessions.append((start + timedelta(days=9 * s), rows))
    return conversation("synthetic", sessions)


def test_four_hundred_turn_conversation_ingests_and_answers(baseline_strategy, embedder):
    # Speed is measured by experiments/bench/bench_eval.py, not asserted here.
    big = _synthetic(400)
    runtime = MemoryRuntime(set_path(baseline_strategy, "extraction.resolve_relative_dates", True),
                            embedder=embedder, cache=IngestionCache())
    store = runtime.ingest(big)
    results = [runtime.ask(store, f"When did Ana go to {place} for pottery?") for place in ("Lisbon", "Oslo", "Kyoto")]
    assert len(big.turns()) == 400 and len(store) > 400
    assert all(r.retrieved for r in results)


RACE = conversation("c3", [
    (datetime(2023, 5, 25, 12, 0), [
        ("Mel", "I ran a charity race for mental health last Saturday, it was rewarding."),
        ("Caro", "My cat sleeps on the sofa all afternoon."),
    ]),
])


def test_turn_units_carry_resolved_dates_when_extraction_resolves_them(run):
    question = "When did Mel run a charity race?"
    changes = {"features.turn_layer": True, "features.session_rollups": False, "assembly.unit": "turn",
               "retrieval.top_k": 1, "retrieval.rerank.top_n": 1}
    runtime, store = run(changes, RACE)
    packed = runtime.ask(store, question).packed
    assert [c.id for c in packed] == ["RAW:D1:1"] and "last Saturday" in packed[0].text
    runtime, store = run({**changes, "extraction.resolve_relative_dates": True}, RACE)
    text = runtime.ask(store, question).packed[0].text
    assert "on Saturday 20 May 2023" in text and "last Saturday" not in text
    # compressed turns are cut from the resolved words too
    runtime, store = run({**changes, "extraction.resolve_relative_dates": True, "assembly.unit": "sentences",
                          "assembly.sentences_per_turn": 1}, RACE)
    assert "on Saturday 20 May 2023" in runtime.ask(store, question).packed[0].text


def test_date_style_annotate_keeps_the_weekday_in_turns_and_facts_and_is_inert_without_resolution(run):
    question = "When did Mel run a charity race?"
    changes = {"features.turn_layer": True, "features.session_rollups": False, "assembly.unit": "turn",
               "retrieval.top_k": 1, "retrieval.rerank.top_n": 1, "extraction.resolve_relative_dates": True}
    runtime, store = run({**changes, "extraction.date_style": "annotate"}, RACE)
    text = runtime.ask(store, question).packed[0].text
    assert "last Saturday (20 May 2023)" in text
    assert any("last Saturday (20 May 2023)" in item.text for item in store.items if item.layer == "L0")
    # the same strategy with resolution off packs the very same context as the replace style does
    off = {**changes, "extraction.resolve_relative_dates": False}
    contexts = []
    for style in ("replace", "annotate"):
        runtime, store = run({**off, "extraction.date_style": style}, RACE)
        contexts.append([c.text for c in runtime.ask(store, question).packed])
    assert contexts[0] == contexts[1] and "last Saturday," in contexts[0][0]
