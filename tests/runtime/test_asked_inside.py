"""A question asked inside a conversation sees what was said by then: later turns are not retrieved, and a later
correction, slot value or retraction does not yet make an earlier statement stale."""
from __future__ import annotations

from datetime import datetime

from test_lifecycle_policies import FRUIT, D1, D2, D3, conversation, runtime, states


def _packed(rt, conv, question: str, asked_at: datetime | None) -> str:
    return " ".join(item.text for item in rt.ask(rt.ingest(conv), question, asked_at).packed)


def test_a_question_asked_between_two_values_gets_the_value_current_then():
    rt = runtime()
    between = datetime(2023, 5, 1, 12)
    assert states(rt, FRUIT, "What is Tomas's favorite fruit?", "mango", between) == {"active"}
    assert "banana" not in _packed(rt, FRUIT, "What is Tomas's favorite fruit?", between)
    assert "mango" in rt.ask(rt.ingest(FRUIT), "What is Tomas's favorite fruit?", between).answer.text
    # asked when the second value was said (a session's time is when its turns were said): it holds
    assert states(rt, FRUIT, "What is Tomas's favorite fruit?", "mango", D2) == {"superseded"}
    assert states(rt, FRUIT, "What is Tomas's favorite fruit?", "mango") == {"superseded"}


def test_a_plan_is_not_retracted_before_the_retraction_was_said():
    conv = conversation((D1, ["I'm planning a trip to Iceland next summer."]),
                        (D3, ["Forget what I said about the trip to Iceland; that's not true anymore."]))
    rt = runtime()
    assert states(rt, conv, "Is Tomas planning a trip to Iceland?", "planning a trip", D2) == {"active"}
    assert states(rt, conv, "Is Tomas planning a trip to Iceland?", "planning a trip", D3) == {"retracted"}
    assert "Forget" not in _packed(rt, conv, "Is Tomas planning a trip to Iceland?", D2)
