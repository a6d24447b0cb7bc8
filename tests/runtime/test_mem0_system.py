"""Mem0 OSS as an external system (evolve.systems.mem0), offline on a tiny conversation: turns are added as the
ingestion knobs say, recalled with Mem0's own search under the query knobs, and what it stored is listed."""
from __future__ import annotations

from datetime import datetime

import pytest

from evolve.benchmarks.types import Conversation, Session, Turn
from evolve.runtime.external import ExternalSystem, load_knob_schema
from evolve.systems.mem0 import chunks
import yaml

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "experiments" / "mem0" / "knobs.schema.json"


def _conversation() -> Conversation:
    day1, day2 = datetime(2023, 5, 8, 13, 56), datetime(2023, 6, 9, 10, 0)
    lines = [("Caroline", "I went to the LGBTQ support group yesterday, it was powerful."),
             ("Melanie", "That sounds great! I painted a lake sunrise last week."),
             ("Caroline", "My adoption agency interview is next month."),
             ("Melanie", "I ran a charity race for mental health on Saturday.")]
    turns1 = tuple(Turn(f"D1:{i + 1}", s, t, "S1", day1) for i, (s, t) in enumerate(lines[:3]))
    turns2 = (Turn("D2:1", *lines[3], "S2", day2),)
    return Conversation("tiny", ("Caroline", "Melanie"), (Session("S1", day1, turns1), Session("S2", day2, turns2)))


@pytest.fixture(scope="module")
def system() -> ExternalSystem:
    return ExternalSystem("evolve.systems.mem0:Mem0Session", load_knob_schema(SCHEMA), timeout_s=300)


def test_windows_and_dates_shape_what_is_added():
    conv = _conversation()
    assert chunks(conv, 1, True, False)[0] == ("Caroline: I went to the LGBTQ support group yesterday, it was "
                                               "powerful.", ["D1:1"])
    windowed = chunks(conv, 2, False, True)  # windows stay inside a session
    assert [ids for _, ids in windowed] == [["D1:1", "D1:2"], ["D1:3"], ["D2:1"]]
    assert windowed[0][0].startswith("(08 May 2023) I went to the LGBTQ")


def test_mem0_recalls_the_turn_that_answers_under_the_search_knobs(system):
    baseline = yaml.safe_load((ROOT / "experiments" / "mem0" / "baseline.yaml").read_text())
    conv = _conversation()
    runtime = system.runtime(baseline)
    store = runtime.ingest(conv)
    assert sorted(sid for item in store.items for sid in item.source_ids) == ["D1:1", "D1:2", "D1:3", "D2:1"]
    result = runtime.ask(store, "When did Caroline go to the LGBTQ support group?")
    assert result.packed[0].source_ids == ("D1:1",) and "support group" in result.packed[0].text
    assert len(result.packed) <= baseline["search"]["top_k"]
    assert [h.rank for h in result.retrieved] == list(range(1, len(result.retrieved) + 1))
    strict = {**baseline, "search": {"top_k": 1, "threshold": 0.6}}
    narrow = system.runtime(strict).ask(store, "When did Caroline go to the LGBTQ support group?")
    assert len(narrow.packed) <= 1 and all(h.score >= 0.6 for h in narrow.retrieved)
    assert system.runtime(strict).ingest(conv) is store  # query knobs reuse the ingested session


def test_dated_ingestion_is_a_new_session_whose_memories_carry_the_date(system):
    baseline = yaml.safe_load((ROOT / "experiments" / "mem0" / "baseline.yaml").read_text())
    dated = {**baseline, "ingest": {**baseline["ingest"], "dated": True, "window": 2}}
    conv = _conversation()
    store = system.runtime(dated).ingest(conv)
    assert store is not system.runtime(baseline).ingest(conv)
    assert any(item.text.startswith("(09 June 2023) ") for item in store.items)
    assert {len(item.source_ids) for item in store.items} == {1, 2}
