"""Probe questions: what each generator asks of a conversation, the quality filter, and the benchmark spec and run
config that use them."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
import yaml

from evolve.benchmarks import Benchmark, BenchmarkError, Conversation, Session, Turn, load_benchmark, write_locomo
from evolve.benchmarks.probes import augment, conversation_probes, probe_quality, probe_questions, resolve_time
from evolve.benchmarks.types import PROBE_CATEGORIES
from evolve.loop.config import load_config
from evolve.loop.setup import RunSetup
from evolve.words import content_words

DEV4 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo" / "locomo_dev4.json"
FIRST, SECOND = datetime(2023, 5, 8, 13, 56), datetime(2023, 5, 25, 13, 14)


def _session(sid: str, when: datetime, lines: list[tuple[str, str]]) -> Session:
    return Session(sid, when, tuple(Turn(f"D{sid}:{i}", who, text, sid, when) for i, (who, text) in enumerate(lines, 1)))


CONVERSATION = Conversation("c1", ("Ana", "Ben"), (
    _session("1", FIRST, [
        ("Ana", "Hi Ben! I went to a pottery workshop yesterday with my sister."),
        ("Ben", "Nice! My favorite hobby is birdwatching in the marsh."),
        ("Ana", "I adopted a puppy named Biscuit, he is so fluffy."),
        ("Ben", "I visited Lisbon last year and loved the tiled facades."),
    ]),
    _session("2", SECOND, [
        ("Ana", "I took Biscuit to the lakeside park last week and he chased geese."),
        ("Ben", "Honestly, Lisbon keeps calling me back, the custard tarts were unforgettable."),
        ("Ana", "I finished a watercolour of the harbour at dawn."),
    ]),
))


def _by_kind(conversation: Conversation = CONVERSATION) -> dict[str, list]:
    out: dict[str, list] = {}
    for probe in conversation_probes(conversation):
        out.setdefault(probe.kind, []).append(probe)
    return out


def test_when_probes_resolve_relative_times_against_the_session_date():
    when = {p.question: p for p in _by_kind()["when"]}
    workshop = when["When was it that Ana went to a pottery workshop?"]
    assert (workshop.answer, workshop.evidence) == ("7 May 2023", ("D1:1",))
    assert when["When was it that Ana took Biscuit to the lakeside park?"].answer == "the week before 25 May 2023"
    assert when["When was it that Ben visited Lisbon?"].answer == "2022"
    assert resolve_time("last Saturday", SECOND) == "the Saturday before 25 May 2023"
    assert resolve_time("two days ago", SECOND) == "23 May 2023"
    assert resolve_time("last month", SECOND) == "April 2023"


def test_who_attribute_and_link_probes():
    kinds = _by_kind()
    who = {p.question: p.answer for p in kinds["who"]}
    assert who["Who finished a watercolour of the harbour at dawn?"] == "Ana"
    attributes = {p.question: p.answer for p in kinds["attribute"]}
    assert attributes["What is Ben's favorite hobby?"] == "birdwatching in the marsh"
    assert attributes["What is the name of Ana's puppy?"] == "Biscuit"
    links = {p.question: (p.answer, p.evidence) for p in kinds["link"]}
    assert links["Lisbon came up again on 25 May 2023. On what date was Lisbon first mentioned?"] == (
        "8 May 2023", ("D1:4", "D2:2"))


def test_multi_hop_probes_chain_a_name_fact_to_an_event():
    chained = {p.question: p for p in _by_kind()["multi_hop"]}
    park = chained["When was it that Ana took their puppy to the lakeside park?"]
    assert park.evidence == ("D1:3", "D2:1") and park.answer == "the week before 25 May 2023"


def test_cloze_blanks_a_word_said_in_no_other_turn():
    clozes = _by_kind()["cloze"]
    assert clozes
    turns = {t.id: t for t in CONVERSATION.turns()}
    for probe in clozes:
        assert "___" in probe.question and probe.answer.lower() not in probe.question.lower()
        others = [t for t in turns.values() if t.id != probe.evidence[0]]
        assert all(not content_words(probe.answer) <= content_words(t.text) for t in others)


def test_every_probe_passes_the_quality_filter_and_generation_is_deterministic():
    turns = {t.id: t for t in CONVERSATION.turns()}
    probes = conversation_probes(CONVERSATION)
    assert {p.kind for p in probes} >= {"attribute", "when", "who", "cloze", "link", "multi_hop"}
    for p in probes:
        assert probe_quality(p.question, p.answer, [turns[e] for e in p.evidence]) is None
    assert conversation_probes(CONVERSATION) == probes
    assert len({p.question for p in probes}) == len(probes)


def test_quality_filter_rejects_unrecoverable_trivial_and_empty_answers():
    turn = CONVERSATION.sessions[0].turns[0]
    assert "not in the evidence" in probe_quality("Where did Ana go?", "a ceramics fair", [turn])
    assert probe_quality("Where did Ana go with her sister?", "her sister", [turn]) == "answer is in the question"
    assert probe_quality("What did Ana say?", "the", [turn]) == "answer has no content word"
    assert probe_quality("When did Ana go to a workshop?", "7 May 2023", [turn]) is None  # resolved date
    assert probe_quality("Who went to a pottery workshop?", "Ana", [turn]) is None  # the speaker


def test_probes_spec_and_augment(tmp_path):
    path = tmp_path / "conv.json"
    write_locomo(Benchmark("mini", {"c1": CONVERSATION}, []), path)
    bench = load_benchmark(f"probes:{path}")
    assert bench.questions and all(q.category in PROBE_CATEGORIES for q in bench.questions)
    assert [q.id for q in bench.questions] == [f"c1/p{i}" for i in range(len(bench.questions))]
    assert all(q.asked_at == SECOND for q in bench.questions)
    with pytest.raises(BenchmarkError, match="no conversation 'c9'"):
        load_benchmark(f"probes:{path}#c9")
    empty = Conversation("c2", ("A", "B"), (_session("1", FIRST, [("A", "ok"), ("B", "fine")]),))
    write_locomo(Benchmark("bare", {"c2": empty}, []), tmp_path / "bare.json")
    with pytest.raises(BenchmarkError, match="no probe question"):
        load_benchmark(f"probes:{tmp_path / 'bare.json'}")
    labelled = load_benchmark("synthetic:0:2")
    both = augment(labelled)
    assert both.questions[:len(labelled.questions)] == labelled.questions
    assert len(both.questions) == len(labelled.questions) + len(probe_questions(labelled))


def test_run_config_augment_adds_probes_to_the_search_and_never_to_the_holdout(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"benchmark": "synthetic:0:4", "stores": "stores", "objective": "answer",
                                      "augment": "probes", "holdout": {"split": {"holdout_fraction": 0.5, "seed": 0}}}))
    setup = RunSetup.prepare(load_config(config))
    categories = {q.id: q.category for q in setup.benchmark.questions}
    assert any(categories[q].startswith("probe_") for q in setup.question_ids)
    assert setup.holdout_ids and not any(categories[q].startswith("probe_") for q in setup.holdout_ids)
    held = {q.conversation_id for q in setup.benchmark.questions if q.id in set(setup.holdout_ids)}
    assert not any(q.conversation_id in held for q in setup.benchmark.questions if q.id in set(setup.question_ids))


@pytest.mark.skipif(not DEV4.exists(), reason="LoCoMo dev4 not available")
def test_dev4_probes_are_usable():
    bench = load_benchmark(f"probes:{DEV4}")
    assert len(bench.questions) >= 300
    for q in bench.questions:
        conv = bench.conversations[q.conversation_id]
        turns = {t.id: t for t in conv.turns()}
        assert probe_quality(q.question, q.answer, [turns[e] for e in q.evidence]) is None
