"""Lifecycle filtering before the top-k cut (``lifecycle.refill``): superseded facts no longer crowd the current one
out of the retrieved set, and where the filters remove nothing the retrieved set is the same."""
from __future__ import annotations

from datetime import datetime

from test_lifecycle_policies import conversation, runtime

CITIES = ("Boston", "Denver", "Austin", "Seattle", "Chicago", "Portland", "Miami")
MOVES = conversation(*[(datetime(2023, m, 10, 10), [f"I moved to {city}."]) for m, city in enumerate(CITIES, 1)])
CURRENT = "said (10 July 2023): I moved to Miami."


def test_seven_moves_the_current_fact_is_packed_only_when_filtering_precedes_the_cut():
    question = "Where does Tomas live?"
    cut = runtime()
    store = cut.ingest(MOVES)
    before = cut.ask(store, question)
    assert len(before.retrieved) == 5 and len(before.filtered) == 4  # 4 of 5 hits superseded, one item packed
    assert len(before.packed) == 1
    assert not any(store.item(h.id).layer == "L0" and CURRENT in store.item(h.id).text for h in before.retrieved)

    refill = runtime(lifecycle__refill=True)
    after = refill.ask(refill.ingest(MOVES), question)
    kept = [h for h in after.retrieved if h.standing.state == "active"]
    assert len(kept) == 5 and len(after.retrieved) == 5 + len(after.filtered)
    assert {reason for _, reason in after.filtered} <= {"superseded", "slot_superseded"}
    assert any(item.layer == "L0" and CURRENT in item.text for item in after.packed)
    assert [h.id for h in after.retrieved[:5]] == [h.id for h in before.retrieved]  # the same ranking, walked on


def test_where_nothing_is_filtered_refill_retrieves_the_same():
    conv = conversation((datetime(2023, 5, 1, 10), ["I adopted a cat named Miso.", "I play the cello on Sundays.",
                                                    "My sister Ana lives in Porto.", "I work as a nurse."]))
    question = "What instrument does Tomas play?"
    plain, refill = runtime(), runtime(lifecycle__refill=True)
    before, after = (rt.ask(rt.ingest(conv), question) for rt in (plain, refill))
    assert before.filtered == after.filtered == []
    assert [h.to_dict() for h in after.retrieved] == [h.to_dict() for h in before.retrieved]
    assert [c.text for c in after.packed] == [c.text for c in before.packed]
