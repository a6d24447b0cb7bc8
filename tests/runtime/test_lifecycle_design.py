"""The lifecycle design's rules as choosable values: expiry of any dated fact (``expiry.scope: dated``), the event
kernel with the date filter (``expiry.hide_passed``) and blend decay that keeps the floor (``decay.kind:
blend_floor``); each changes the context where it must, and the defaults leave it as it was."""
from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from evolve.runtime.lifecycle import rescore
from evolve.runtime.store import day_number
from test_lifecycle_policies import conversation, runtime, states

SAID, LATER = datetime(2025, 8, 27, 10), datetime(2025, 9, 20, 10)  # Greg's Saturday is 30 August
EVENTS = conversation((SAID, ["Greg's birthday is this Saturday.", "The demo is scheduled for March."]))


def test_any_dated_fact_expires_with_the_dated_scope_and_only_then():
    events, dated = runtime(), runtime(lifecycle__expiry__scope="dated")
    store = events.ingest(EVENTS)
    birthday = next(i for i in store.items if i.layer == "L0" and "birthday" in i.text)
    assert birthday.meta.category == "other" and birthday.meta.event_time == datetime(2025, 8, 30)
    question = "What is coming up for Greg?"
    assert states(events, EVENTS, question, "birthday", LATER) == {"active"}  # not an event category
    assert states(dated, EVENTS, question, "birthday", LATER) == {"expired"}
    assert states(dated, EVENTS, question, "demo", LATER) == {"active"}  # March is still ahead
    assert states(dated, EVENTS, "When was Greg's birthday?", "birthday", LATER) == {"active"}  # a past question
    packed = [c.text for c in dated.ask(dated.ingest(EVENTS), question, LATER).packed]
    assert not any("birthday" in text for text in packed if text.startswith("- Tomas said"))


DEADLINES = conversation((datetime(2023, 4, 20, 10), ["I have a dentist appointment on 1 May 2023."]),
                         (datetime(2023, 5, 25, 10), ["I booked another dentist appointment for 20 June 2023."]))


def test_the_event_kernel_and_the_date_filter_compose():
    asked, question = datetime(2023, 6, 1), "When is Tomas's next dentist appointment?"
    base = dict(lifecycle__slots__enabled=False, lifecycle__expiry__mode="kernel", retrieval__top_k=10)
    kernel, both = runtime(**base), runtime(**base, lifecycle__expiry__hide_passed=True)
    assert states(kernel, DEADLINES, question, "1 May", asked) == {"active"}  # rescored, not hidden
    assert states(both, DEADLINES, question, "1 May", asked) == {"expired"}  # and now hidden too
    store = both.ingest(DEADLINES)
    kept = [store.item(h.id).text for h in both.ask(store, question, asked).retrieved
            if h.standing.state == "active" and store.item(h.id).layer == "L0"]
    assert "20 June" in kept[0]  # the kernel still ranks the upcoming one first
    assert both.ask(store, question, asked).answer.text == "20 June 2023"


def test_blend_floor_keeps_the_floor_blend_drops():
    conv = conversation((datetime(2023, 1, 5, 10), ["I have a meeting with the design team about the launch."]),
                        (datetime(2023, 6, 10, 10), ["I live in Lyon with my partner."]))
    changes = dict(lifecycle__decay__enabled=True, lifecycle__decay__alpha__obligations=0.9,
                   lifecycle__decay__floor__obligations=0.7)
    blend = runtime(**changes, lifecycle__decay__kind="blend")
    floored = runtime(**changes, lifecycle__decay__kind="blend_floor")
    store = blend.ingest(conv)
    ref = day_number(datetime(2023, 6, 10, 10))
    meeting = next(i for i, item in enumerate(store.items) if item.layer == "L0" and "meeting" in item.text)
    relevance = np.full(len(store), 0.8)
    dropped = rescore(relevance, store, blend.policy.lifecycle, ref)
    kept = rescore(relevance, store, floored.policy.lifecycle, ref)
    assert dropped[meeting] < 0.7 * 0.8  # the old meeting's activation is near 0: the blend falls below the floor
    assert kept[meeting] == pytest.approx(0.7 * 0.8)
    assert np.all(kept >= dropped) and np.allclose(kept[dropped >= 0.7 * 0.8], dropped[dropped >= 0.7 * 0.8])
