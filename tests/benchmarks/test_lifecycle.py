"""The lifecycle benchmark: seeded conversations whose questions each test one lifecycle attack vector, with gold
current and outdated evidence; the synthetic benchmark it extends keeps its content."""
from __future__ import annotations

import re
from collections import Counter
from datetime import datetime

from evolve.benchmarks import LIFECYCLE_CATEGORIES, load_benchmark
from evolve.verify.decision import AcceptanceRules

#: Content hash of ``synthetic:0:2``: the figures in the README come from this content.
SYNTHETIC_0_2 = "c572c0741bcc"
#: Content hash of ``lifecycle:0:6`` since it gained the everyday date forms (AV2) and retraction phrasings (AV7);
#: figures measured on earlier content are not comparable.
LIFECYCLE_0_6 = "e11cb25b50bb"


def test_every_question_tests_one_attack_vector_asked_after_the_conversation():
    bench = load_benchmark("lifecycle:0:6")
    counts = Counter(q.category for q in bench.questions)
    assert set(counts) == set(LIFECYCLE_CATEGORIES) and min(counts.values()) >= 6
    for q in bench.questions:
        last = bench.conversations[q.conversation_id].sessions[-1].timestamp
        assert q.asked_at > last and q.evidence
    assert load_benchmark("lifecycle:0:6").content_hash() == bench.content_hash()
    assert load_benchmark("lifecycle:1:6").content_hash() != bench.content_hash()


def test_expired_soft_and_aggregated_facts_have_the_right_evidence():
    bench = load_benchmark("lifecycle:3:4")
    text = {(cid, t.id): t.text for cid, c in bench.conversations.items() for t in c.turns()}
    for q in bench.questions:
        said = [text[q.conversation_id, e] for e in q.evidence]
        if q.category == "av2_expired_logistics" and "tomorrow" in text[q.conversation_id, q.outdated[0]]:
            # everyday forms: the event said "tomorrow" has passed, the gold day (or month) is still ahead
            fmt = "%d %B %Y" if q.answer[0].isdigit() else "%B %Y"
            ahead = datetime.strptime(q.answer, fmt)
            assert ahead.date() >= q.asked_at.date() if fmt == "%d %B %Y" else ahead.month != q.asked_at.month
            assert q.answer not in said[0]
        elif q.category == "av2_expired_logistics":  # the past appointment is outdated, the upcoming one is gold
            (old,), (new,) = [text[q.conversation_id, e] for e in q.outdated], said
            when = [datetime.strptime(re.search(r"\d+ \w+ \d{4}", t).group(), "%d %B %Y") for t in (old, new)]
            assert when[0] < q.asked_at < when[1] and q.answer in new
        elif q.category == "av9_soft_supersession":  # the tentative switch is neither gold nor outdated
            assert not q.outdated and "work out at" in said[0] and q.answer in said[0]
        elif q.category == "av5_aggregation":
            assert len(said) == 3 and all(item in " ".join(said) for item in q.answer.split(", "))
        elif q.category == "av7_retraction" and q.question.startswith("Which plan"):
            assert not q.outdated and len(said) == 2  # what was called off: the retracted plan is gold
        elif q.category in ("av1_superseded_preference", "av4_multi_version", "av7_retraction"):
            assert q.outdated


def test_the_synthetic_benchmark_keeps_its_content():
    assert load_benchmark("synthetic:0:2").content_hash().startswith(SYNTHETIC_0_2)


def test_the_lifecycle_benchmark_content_is_pinned():
    assert load_benchmark("lifecycle:0:6").content_hash().startswith(LIFECYCLE_0_6)


def test_everyday_date_forms_resolve_to_the_gold_day():
    from evolve.runtime.facts import annotate

    bench = load_benchmark("lifecycle:0:6")
    turns = {(cid, t.id): t for cid, c in bench.conversations.items() for t in c.turns()}
    checked = 0
    for q in bench.questions:
        turn = turns[q.conversation_id, q.evidence[0]]
        if q.category != "av2_expired_logistics" or not turn.text.startswith("The next"):
            continue
        when = annotate(turn.text, turn.speaker, turn.timestamp).event_time
        assert when is not None and q.answer in (f"{when.day} {when:%B} {when.year}", f"{when:%B} {when.year}")
        checked += 1
    assert checked == len(bench.conversations)


def test_attack_vectors_can_be_protected_slices():
    rules = AcceptanceRules(protected_slices=["av3_stable_identity"], epsilon_by_category={"av8_numeric": 0.05})
    assert rules.epsilon("av8_numeric") == 0.05


def test_locomo_export_keeps_outdated_turns_and_refuses_categories_it_cannot_code(tmp_path):
    import json

    import pytest

    from evolve.benchmarks import BenchmarkError, load_locomo, write_locomo

    synthetic = load_benchmark("synthetic:0:1")
    write_locomo(synthetic, tmp_path / "s.json")
    assert [q.outdated for q in load_locomo(tmp_path / "s.json").questions] == [q.outdated for q in synthetic.questions]
    data = json.loads((tmp_path / "s.json").read_text())
    data[0]["qa"][0]["outdated_evidence"] = ["D99:1"]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(BenchmarkError, match=r"qa\[0\].*outdated_evidence' must list turn ids"):
        load_locomo(tmp_path / "bad.json")
    with pytest.raises(BenchmarkError, match="have no LoCoMo code"):
        write_locomo(load_benchmark("lifecycle:0:1"), tmp_path / "l.json")
