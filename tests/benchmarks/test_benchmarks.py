"""Benchmark adapters: LoCoMo, LongMemEval, the synthetic lifecycle benchmark and the spec loader."""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from evolve.benchmarks import (
    LOCOMO_CATEGORIES,
    BenchmarkError,
    generate_synthetic,
    load_benchmark,
    load_locomo,
    load_longmemeval,
    write_locomo,
)
from evolve.benchmarks.locomo import NOT_MENTIONED

REPO = Path(__file__).resolve().parents[2]
LOCOMO_DEV4 = REPO / "../shared/data/locomo/locomo_dev4.json"
LME_MINI = REPO / "tests/fixtures/longmemeval_mini.json"
needs_locomo = pytest.mark.skipif(not LOCOMO_DEV4.is_file(), reason=f"LoCoMo data not present at {LOCOMO_DEV4}")
MARKERS = re.compile(r"\b(actually|no longer|now|moved to|switched to|forget what i said about)\b", re.IGNORECASE)


# --- LoCoMo on the real data ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def locomo():
    return load_locomo(LOCOMO_DEV4)


@needs_locomo
def test_locomo_real_counts(locomo):
    assert len(locomo.questions) == 757
    assert list(locomo.conversations) == ["conv-26", "conv-30", "conv-41", "conv-42"]
    assert Counter(q.category for q in locomo.questions) == {
        "single_hop": 311, "adversarial": 173, "temporal": 130, "multi_hop": 111, "open_domain": 32}
    assert len({q.id for q in locomo.questions}) == 757


@needs_locomo
def test_locomo_real_evidence_known_or_warned(locomo):
    unknown_warning = next(w for w in locomo.warnings if "without known gold evidence" in w)
    for q in locomo.questions:
        known = {t.id for t in locomo.conversations[q.conversation_id].turns()}
        assert known.intersection(q.evidence) or q.id in unknown_warning.split(": ")[-1].split("; "), q.id
    by_id = {q.id: q for q in locomo.questions}
    assert by_id["conv-26/q37"].evidence == ("D8:6", "D9:17")
    assert by_id["conv-42/q88"].evidence == ("D1:18", "D1:20")
    assert "D10:19" in by_id["conv-42/q58"].evidence
    joined = "\n".join(locomo.warnings)
    assert "1 malformed evidence id(s) normalised: conv-26/q37" in joined
    assert "1 unparseable evidence id(s) skipped: conv-42/q88 'D'" in joined
    assert "conv-42/q58 D10:19" in joined
    assert "2 question(s) without known gold evidence: conv-26/q30; conv-26/q46" in joined


@needs_locomo
def test_locomo_real_turns_dates_answers(locomo):
    conv = locomo.conversations["conv-26"]
    assert conv.speakers == ("Caroline", "Melanie")
    assert conv.sessions[0].id == "D1" and conv.sessions[0].timestamp == datetime(2023, 5, 8, 13, 56)
    assert [s.id for s in conv.sessions] == [f"D{n}" for n in range(1, 20)]
    turn = next(t for t in conv.turns() if t.id == "D1:5")
    assert turn.text.endswith("support. [shares a photo of a dog walking past a wall with a painting of a woman]")
    assert turn.timestamp == conv.sessions[0].timestamp and turn.session_id == "D1"
    by_id = {q.id: q for q in locomo.questions}
    assert by_id["conv-26/q1"].answer == "2022"  # int in the source
    adversarial = [q for q in locomo.questions if q.category == "adversarial"]
    assert sum(q.answer == NOT_MENTIONED for q in adversarial) == 171
    assert {q.answer for q in adversarial if q.answer != NOT_MENTIONED} == {"No"}


# --- LoCoMo malformed input -----------------------------------------------------------------------------

def _sample(sample_id="s1", **changes):
    sample = {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Ben",
            "session_1_date_time": "9:05 am on 3 March, 2023",
            "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I live in Oslo."},
                          {"speaker": "Ben", "dia_id": "D1:2", "text": "Nice!"}],
        },
        "qa": [{"question": "Where does Ann live?", "answer": "Oslo", "evidence": ["D1:1"], "category": 4}],
    }
    sample.update(changes)
    return sample


def _write(tmp_path, payload, name="bench.json") -> Path:
    path = tmp_path / name
    path.write_bytes(payload if isinstance(payload, bytes) else json.dumps(payload, indent=1).encode())
    return path


@pytest.mark.parametrize("payload, expected", [
    ({"sample_id": "s1"}, "expected a JSON list of samples, got dict"),
    ([{k: v for k, v in _sample().items() if k != "conversation"}], "sample 0 (s1): missing field 'conversation'"),
    ([_sample(), _sample()], "sample 1 (s1): duplicate sample_id (also sample 0), its question ids would repeat"),
    ([_sample(qa="none")], "sample 0 (s1): field 'qa' has type str"),
    ([_sample(qa=[{"question": "Q?", "answer": "A", "evidence": [], "category": 9}])],
     "sample 0 (s1).qa[0]: field 'category' is 9, expected 1..5"),
    ([_sample(qa=[{"question": "Q?", "evidence": [], "category": 4}])], "sample 0 (s1).qa[0]: missing field 'answer'"),
    ([_sample(conversation={**_sample()["conversation"], "session_1_date_time": "sometime"})],
     "sample 0 (s1).conversation.session_1_date_time: unparseable date 'sometime'"),
    ([_sample(conversation={**_sample()["conversation"],
                            "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "a"},
                                          {"speaker": "Ben", "dia_id": "D1:1", "text": "b"}]})],
     "sample 0 (s1).conversation.session_1[1]: duplicate dia_id 'D1:1'"),
    (b'[{"sample_id": "s1",\n  "qa": [caf\xe9]}]', "not valid UTF-8 at byte 33 (line 2)"),
    (b'[\n {"sample_id": "s1",\n  "qa": [1,, 2]}\n]', "invalid JSON at line 3, column 12: Expecting value"),
])
def test_locomo_malformed(tmp_path, payload, expected):
    path = _write(tmp_path, payload)
    with pytest.raises(BenchmarkError) as err:
        load_locomo(path)
    assert str(err.value).startswith(str(path)) and expected in str(err.value)


def test_locomo_evidence_repairs_are_counted(tmp_path):
    qa = [{"question": "Q1?", "answer": 7, "evidence": ["D:1:2", "D1:1; D1:2"], "category": 1},
          {"question": "Q2?", "answer": "x", "evidence": ["?", "D9:9"], "category": 2},
          {"question": "Q3?", "adversarial_answer": "trap", "evidence": [], "category": 5}]
    bench = load_locomo(_write(tmp_path, [_sample(qa=qa)]))
    assert [q.evidence for q in bench.questions] == [("D1:2", "D1:1"), ("D9:9",), ()]
    assert [q.answer for q in bench.questions] == ["7", "x", NOT_MENTIONED]
    assert [q.category for q in bench.questions] == ["multi_hop", "temporal", "adversarial"]
    assert bench.warnings == [
        "bench.json: 2 malformed evidence id(s) normalised: s1/q0 'D:1:2' -> D1:2; s1/q0 'D1:1; D1:2' -> D1:1, D1:2",
        "bench.json: 1 unparseable evidence id(s) skipped: s1/q1 '?'",
        "bench.json: 1 evidence id(s) kept but absent from their conversation: s1/q1 D9:9",
        "bench.json: 2 question(s) without known gold evidence: s1/q1; s1/q2",
    ]


# --- LongMemEval ------------------------------------------------------------------------------------

def test_longmemeval_fixture_mapping():
    bench = load_longmemeval(LME_MINI)
    by_id = {q.id: q for q in bench.questions}
    assert {qid: q.category for qid, q in by_id.items()} == {  # LongMemEval's question types
        "e47becba": "single_session_user", "gpt4_7f6b06db": "multi_session", "gpt4_2a1f3c11": "temporal_reasoning",
        "5a7937c8_abs": "knowledge_update"}
    assert [qid for qid, q in by_id.items() if q.abstention] == ["5a7937c8_abs"]
    assert set(bench.conversations) == set(by_id) and all(q.conversation_id == q.id for q in bench.questions)
    assert by_id["e47becba"].evidence == ("S2:1",)
    assert by_id["gpt4_7f6b06db"].evidence == ("S1:1", "S3:2") and by_id["gpt4_7f6b06db"].answer == "3"
    assert by_id["gpt4_2a1f3c11"].evidence == ("S1:1", "S1:2", "S2:1", "S2:2")
    assert by_id["5a7937c8_abs"].evidence == ()
    assert by_id["e47becba"].asked_at == datetime(2023, 5, 30, 23, 40)
    conv = bench.conversations["e47becba"]
    assert [s.id for s in conv.sessions] == ["S2", "S3", "S1"]  # date order, ids keep haystack position
    assert conv.sessions[0].timestamp == datetime(2023, 5, 20, 2, 21)
    assert conv.speakers == ("user", "assistant")
    assert [(t.id, t.speaker) for t in conv.sessions[0].turns] == [("S2:1", "user"), ("S2:2", "assistant"),
                                                                   ("S2:3", "user")]
    assert bench.warnings == [
        "longmemeval_mini.json: 1 question(s) without has_answer turns, gold evidence falls back to all turns "
        "of their answer sessions: gpt4_2a1f3c11",
        "longmemeval_mini.json: 1 question(s) without known gold evidence: 5a7937c8_abs",
    ]


@pytest.mark.parametrize("change, expected", [
    ({"question_type": "single-session-opinion"}, "item 0 (e47becba): unknown question_type 'single-session-opinion'"),
    ({"haystack_dates": ["2023/05/22 (Mon) 10:05"]}, "haystack_sessions (3), haystack_session_ids (3) and "
                                                     "haystack_dates (1) differ in length"),
    ({"question_date": "yesterday"}, "item 0 (e47becba): field 'question_date' is an unparseable date 'yesterday'"),
    ({"answer": None}, "item 0 (e47becba): field 'answer' has type NoneType"),
])
def test_longmemeval_malformed(tmp_path, change, expected):
    item = {**json.loads(LME_MINI.read_text())[0], **change}
    path = _write(tmp_path, [item])
    with pytest.raises(BenchmarkError, match=re.escape(expected)):
        load_longmemeval(path)


def test_longmemeval_duplicate_question_id(tmp_path):
    item = json.loads(LME_MINI.read_text())[0]
    with pytest.raises(BenchmarkError, match=re.escape("item 1: duplicate question_id 'e47becba'")):
        load_longmemeval(_write(tmp_path, [item, item]))


# --- synthetic lifecycle benchmark -------------------------------------------------------------------

@pytest.fixture(scope="module")
def synthetic():
    return generate_synthetic()


def test_synthetic_deterministic(synthetic):
    assert generate_synthetic(0).content_hash() == synthetic.content_hash()
    assert load_benchmark("synthetic").content_hash() == synthetic.content_hash()
    assert load_benchmark("synthetic:0:6").content_hash() == synthetic.content_hash()
    assert generate_synthetic(1).content_hash() != synthetic.content_hash()
    assert load_benchmark("synthetic:0:3").content_hash() != synthetic.content_hash()


def test_synthetic_shape(synthetic):
    assert len(synthetic.conversations) == 6 and 200 <= len(synthetic.questions) <= 400
    assert set(q.category for q in synthetic.questions) == set(LOCOMO_CATEGORIES)
    assert len({q.id for q in synthetic.questions}) == len(synthetic.questions)
    assert synthetic.warnings == []
    for conv in synthetic.conversations.values():
        assert len(conv.sessions) == 8 and len(conv.speakers) == 2
        stamps = [s.timestamp for s in conv.sessions]
        assert all(timedelta(days=3) <= b.date() - a.date() for a, b in zip(stamps, stamps[1:]))
        assert {t.speaker for t in conv.turns()} == set(conv.speakers)


def test_synthetic_evidence_exists_and_states_current_truth(synthetic):
    for q in synthetic.questions:
        turns = {t.id: t for t in synthetic.conversations[q.conversation_id].turns()}
        assert q.evidence and all(e in turns for e in q.evidence), q.id
        last = turns[q.evidence[-1]].text
        if q.category in ("single_hop", "multi_hop") and q.answer != "No":
            assert q.answer.split()[0] in last, (q.id, q.answer, last)
        if q.answer == "No":
            assert last.startswith("Forget what I said about"), q.id


def test_synthetic_superseded_facts_point_at_latest_statement(synthetic):
    checked = 0
    for q in synthetic.questions:
        match = re.fullmatch(r"What is (\w+)'s favorite (.+)\?", q.question)
        if not match or q.category != "single_hop":
            continue
        conv = synthetic.conversations[q.conversation_id]
        stated = [t for t in conv.turns() if t.speaker == match[1] and f"favorite {match[2]}" in t.text]
        assert stated[-1].id == q.evidence[0]
        if len(stated) > 1:
            checked += 1
            assert MARKERS.search(stated[-1].text) and not MARKERS.search(stated[0].text)
    assert checked >= 20


def test_synthetic_temporal_answers_are_session_dates(synthetic):
    events = [q for q in synthetic.questions if q.question.startswith("When did")]
    assert len(events) == 30
    for q in events:
        conv = synthetic.conversations[q.conversation_id]
        turn = next(t for t in conv.turns() if t.id == q.evidence[0])
        day = turn.timestamp - timedelta(days=1) if "yesterday" in turn.text else turn.timestamp
        assert q.answer == f"{day.day} {day:%B} {day.year}" and q.category == "temporal"


def test_synthetic_friend_never_states_corrections_and_traps_quote_the_friend(synthetic):
    for q in synthetic.questions:
        conv = synthetic.conversations[q.conversation_id]
        friend = conv.speakers[1]
        assert not any(MARKERS.search(t.text) for t in conv.turns() if t.speaker == friend)
        if q.category == "adversarial":
            turn = next(t for t in conv.turns() if t.id == q.evidence[0])
            assert q.answer == NOT_MENTIONED
            assert turn.speaker == friend or q.question.startswith(f"What is {friend}'s")


def test_synthetic_round_trip_through_locomo(synthetic, tmp_path):
    path = tmp_path / "synthetic_locomo.json"
    write_locomo(synthetic, path)
    assert [p.name for p in tmp_path.iterdir()] == ["synthetic_locomo.json"]
    back = load_locomo(path)
    assert back.warnings == []
    assert back.questions == synthetic.questions
    assert back.conversations == synthetic.conversations
    assert back.content_hash() == synthetic.content_hash()
    assert load_benchmark(f"locomo:{path}").content_hash() == synthetic.content_hash()


def test_spec_selects_conversations_of_a_file(synthetic, tmp_path):
    path = tmp_path / "synthetic_locomo.json"
    write_locomo(synthetic, path)
    ids = list(synthetic.conversations)
    part = load_benchmark(f"locomo:{path}#{ids[2]},{ids[0]}")
    assert list(part.conversations) == [ids[0], ids[2]]  # the file's order
    assert part.questions == [q for q in synthetic.questions if q.conversation_id in (ids[0], ids[2])]
    assert part.content_hash() != synthetic.content_hash()
    with pytest.raises(BenchmarkError, match=r"no conversation 'conv-x' in the file; it has " + ids[0]):
        load_benchmark(f"locomo:{path}#conv-x")
    with pytest.raises(BenchmarkError, match="no conversation id after '#'"):
        load_benchmark(f"locomo:{path}#")


def test_write_locomo_other_sources(tmp_path):
    lme = load_longmemeval(LME_MINI)
    with pytest.raises(BenchmarkError, match=re.escape("categories ['single_session_user'] have no LoCoMo code")):
        write_locomo(lme, tmp_path / "lme.json")  # LongMemEval's question types are not LoCoMo's
    as_locomo = {"single_session_user": "single_hop", "multi_session": "multi_hop",
                 "temporal_reasoning": "temporal", "knowledge_update": "single_hop"}
    lme.questions = [replace(q, category=as_locomo[q.category]) for q in lme.questions]
    write_locomo(lme, tmp_path / "lme.json")
    back = load_locomo(tmp_path / "lme.json")
    assert [(q.answer, q.category, q.evidence) for q in back.questions] == [
        (q.answer, q.category, q.evidence) for q in lme.questions]
    assert [[t.text for t in c.turns()] for c in back.conversations.values()] == [
        [t.text for t in c.turns()] for c in lme.conversations.values()]
    lme.questions.append(replace(lme.questions[0], conversation_id="missing"))
    with pytest.raises(BenchmarkError, match=re.escape("unknown conversation(s) ['missing']")):
        write_locomo(lme, tmp_path / "orphan.json")
    assert not (tmp_path / "orphan.json").exists()


@pytest.mark.parametrize("seed, personas", [(7, 2), (-3, 1)])
def test_synthetic_other_seeds_are_well_formed(seed, personas):
    bench = load_benchmark(f"synthetic:{seed}:{personas}")
    assert len(bench.conversations) == personas and bench.name == f"synthetic:{seed}:{personas}"
    for q in bench.questions:
        ids = {t.id for t in bench.conversations[q.conversation_id].turns()}
        assert q.evidence and set(q.evidence) <= ids


# --- spec loader -------------------------------------------------------------------------------------

def test_load_benchmark_file_schemes():
    assert load_benchmark(f"longmemeval:{LME_MINI}").name == "longmemeval:longmemeval_mini.json"


@needs_locomo
def test_load_benchmark_locomo():
    assert len(load_benchmark(f"locomo:{LOCOMO_DEV4}").questions) == 757


@pytest.mark.parametrize("spec, expected", [
    ("hotpot:data.json", "unknown scheme 'hotpot'"),
    ("locomo:", "missing path"),
    ("locomo:/nonexistent/locomo10.json", "locomo file not found: /nonexistent/locomo10.json"),
    ("longmemeval:/nonexistent/lme.json", "longmemeval file not found"),
    ("synthetic:zero", "SEED and N_PERSONAS must be integers"),
    ("synthetic:0:6:1", "too many fields"),
    ("synthetic:0:0", "n_personas must be 1..20, got 0"),
])
def test_load_benchmark_errors(spec, expected):
    with pytest.raises(BenchmarkError, match=re.escape(expected)):
        load_benchmark(spec)
