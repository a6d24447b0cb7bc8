"""The lexical tokenization dimension (``retrieval.lexical``): the default reads text exactly as the runtime always
has, the English stop list and the Snowball stemmer change the BM25 terms and what a question retrieves."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from evolve.runtime.lexical import DEFAULT, ENGLISH_STOPWORDS, Analyzer, snowball
from evolve.runtime.retrieval import Query, retrieve
from evolve.runtime.store import MemoryItem, MemoryStore
from evolve.runtime.text import content_tokens
from evolve.strategy.artifact import validate_strategy
from evolve.strategy.paths import set_path
from evolve.strategy.policy import Policy

LOCOMO = Path(__file__).parents[3] / "shared" / "data" / "locomo" / "locomo_dev4.json"
WHEN = datetime(2023, 5, 8, 13)
TEXTS = ("Caroline said (8 May 2023): I'm researching adoption agencies, it's been a journey!",
         "Melanie said (8 May 2023): We adopted a puppy last week and the kids love her.",
         "Caroline said (8 May 2023): Would you come to the LGBTQ support group with me?",
         "Melanie said (8 May 2023): I painted a sunrise over the lake; painting calms me.")


def store(texts: tuple[str, ...] = TEXTS) -> MemoryStore:
    items = [MemoryItem(f"m{i}", "L0", text, (f"D1:{i}",), text.split(" ")[0], WHEN, "fact", 0.5)
             for i, text in enumerate(texts)]
    return MemoryStore("c", items, (), np.zeros((len(items), 4), dtype=np.float32), "none")


def policy(strategy: dict, stopwords: str, stemmer: str) -> Policy:
    changed = set_path(strategy, "retrieval.lexical.stopwords", stopwords)
    changed = set_path(changed, "retrieval.lexical.stemmer", stemmer)
    return Policy.from_strategy(validate_strategy(changed))


def bm25_ids(memory: MemoryStore, question: str, pol: Policy) -> list[str]:
    hits = retrieve(memory, Query(question, "single_hop", (), None, WHEN), pol)
    return [h.id for h in hits if "bm25" in h.channels]


def test_the_default_reads_text_exactly_as_the_runtime_always_has():
    if not LOCOMO.exists():
        pytest.skip(f"{LOCOMO} not present")
    sample = json.loads(LOCOMO.read_text())[0]["conversation"]
    texts = [t["text"] for key, turns in sample.items() if key.startswith("session_") and isinstance(turns, list)
             for t in turns] + list(TEXTS)
    assert len(texts) > 100
    assert all(DEFAULT.terms(text) == content_tokens(text) for text in texts)
    assert Analyzer("english", "snowball").terms(TEXTS[0]) != content_tokens(TEXTS[0])


def test_english_snowball_drops_function_words_splits_contractions_and_stems_with_snowball():
    terms = Analyzer("english", "snowball").terms("Caroline's researching adoption; she'd adopted, didn't she?")
    assert terms == ["carolin", "research", "adopt", "adopt"]
    assert {"would", "could", "also", "s", "t", "don"} <= ENGLISH_STOPWORDS
    assert Analyzer("none", "suffix").terms("What did you do?") == ["what", "did", "you", "do"]
    assert snowball("agencies") == "agenc" and snowball("it's") == "it"
    with pytest.raises(ValueError, match="stemmer 'porter'"):
        Analyzer("runtime", "porter")


def test_the_snowball_stemmer_finds_what_the_suffix_stripper_misses(baseline_strategy):
    memory = store()
    question = "Did anyone mention adoption?"
    default = bm25_ids(memory, question, Policy.from_strategy(baseline_strategy))
    stemmed = bm25_ids(memory, question, policy(baseline_strategy, "runtime", "snowball"))
    assert default == ["m0"]  # the suffix stripper keeps "adoption" whole, apart from "adopted" -> "adopt"
    assert sorted(stemmed) == ["m0", "m1"]  # "adoption" and "adopted" both stem to "adopt"


def test_the_stop_list_decides_whether_question_words_are_terms(baseline_strategy):
    memory = store()
    question = "What would you paint?"
    kept = bm25_ids(memory, question, policy(baseline_strategy, "none", "suffix"))
    dropped = bm25_ids(memory, question, policy(baseline_strategy, "english", "suffix"))
    assert "m2" in kept  # matched on "would" and "you" alone
    assert dropped == ["m3"]
    assert memory.bm25_index(Analyzer("english", "suffix")) is memory.bm25_index(Analyzer("english", "suffix"))
    assert memory.bm25_index(DEFAULT) is not memory.bm25_index(Analyzer("english", "suffix"))


def test_the_rerank_overlap_reads_the_runtime_tokens_whatever_the_lexical_analyser(baseline_strategy):
    memory = store()
    question = "Did anyone mention adoption?"
    strategy = baseline_strategy
    for path, value in (("retrieval.rerank.enabled", True), ("retrieval.rerank.top_n", 4),
                        ("retrieval.rerank.overlap_weight", 1.0)):
        strategy = set_path(strategy, path, value)
    stemmed = policy(strategy, "english", "snowball")
    hits = {h.id: h for h in retrieve(memory, Query(question, "single_hop", (), None, WHEN), stemmed)}
    wanted = set(content_tokens(question))  # the store's token sets hold these, not Snowball stems
    overlap = len(wanted & memory.token_sets[0]) / len(wanted)
    assert overlap > 0 and hits["m0"].score == round(overlap, 8)
