"""The replay's neutral referee: staleness is judged by one reference lifecycle pass over the captured turns, not by
each strategy's own store, so switching detection off no longer wins and a real lifecycle gain still shows."""
from __future__ import annotations

import copy
from datetime import datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evolve.benchmarks.types import Turn
from evolve.data import BASELINE_PATH
from evolve.runtime.live import LiveConversation
from evolve.serve.app import create_app
from evolve.serve.filestore import FileBackend
from evolve.serve.memory import MemoryService
from evolve.serve.referee import Referee
from evolve.serve.replay import replay, stored_recalls
from evolve.serve.strategy import Loaded, RuntimeParts, StrategySlot
from evolve.strategy.artifact import load_strategy, strategy_hash

#: (what Ann said first, her correction months later, a question about now, a question about before).
FACTS = [
    ("I live in Porto with my two cats.", "Actually I moved with my two cats from Porto to Lisbon.",
     "Where does Ann live with her cats?", "Where did Ann live before she moved?"),
    ("My favorite fruit is mango.", "Actually my favorite fruit is kiwi now, not mango.",
     "What is Ann's favorite fruit?", "What was Ann's favorite fruit before?"),
    ("My car is a red Toyota Corolla.", "Actually I switched my red Toyota Corolla for a blue Honda.",
     "What car does Ann drive?", "What car did Ann drive before?"),
    ("I train at the Iron Temple gym downtown.",
     "Actually I switched from the Iron Temple gym to yoga classes downtown.",
     "Where does Ann train?", "Where did Ann train previously?"),
    ("My dentist is Doctor Silva in Braga.", "Actually my dentist is now Doctor Costa, not Doctor Silva in Braga.",
     "Who is Ann's dentist?", "Who was Ann's dentist before?"),
    ("I drink green tea every morning at breakfast.",
     "Actually I drink black coffee every morning at breakfast now, no more green tea.",
     "What does Ann drink at breakfast?", "What did Ann drink at breakfast before?"),
    ("My sister Maria lives in Madrid with her husband.",
     "Actually my sister Maria moved from Madrid to Paris with her husband.",
     "Where does Ann's sister live now?", "Where did Maria live before?"),
    ("I am learning Spanish with an online tutor.",
     "Actually I stopped learning Spanish, I am learning Japanese with an online tutor.",
     "Which language is Ann learning?", "Which language was Ann learning before?"),
]
NOW = [f[2] for f in FACTS]
BEFORE = [f[3] for f in FACTS]


def _turns() -> list[dict]:
    out = []
    for session, day, said in (("s1", "2024-03-01T10:00:00", 0), ("s2", "2024-06-01T10:00:00", 1)):
        for i, fact in enumerate(FACTS):
            out += [{"id": f"{session}:{2 * i}", "speaker": "Ann", "text": fact[said], "session": session, "time": day},
                    {"id": f"{session}:{2 * i + 1}", "speaker": "Bob", "text": "Good to know.", "session": session,
                     "time": day}]
    return out


def _detection_off() -> dict:
    """The baseline with supersession, slots, the forget guard and expiry off: its own store marks nothing stale."""
    strategy = copy.deepcopy(load_strategy(BASELINE_PATH))
    lc = strategy["lifecycle"]
    lc["supersession"] = lc["forget_guard"] = lc["slots"]["enabled"] = lc["expiry"]["enabled"] = False
    return strategy


def _loaded(strategy: dict, parts: RuntimeParts) -> Loaded:
    return Loaded(parts.runtime(strategy), strategy_hash(strategy), "test", None, "candidate", None)


@pytest.fixture(scope="module")
def captured(tmp_path_factory, embedder) -> Path:
    """Ann's turns captured by the service (serving the baseline), then every question recalled without asked_at."""
    root = tmp_path_factory.mktemp("referee")
    serving = root / "serving.yaml"
    serving.write_bytes(BASELINE_PATH.read_bytes())
    slot = StrategySlot(None, serving, RuntimeParts(embedder), allow_untracked=True)
    memory = MemoryService(FileBackend(root / "data"), lambda: slot.current)
    with TestClient(create_app(slot, memory)) as client:
        assert client.post("/v1/users/ann/turns", json={"turns": _turns()}).status_code == 201
        for question in NOW + BEFORE:
            assert client.post("/v1/users/ann/recall", json={"question": question}).status_code == 200
    return root / "data"


def _replay(data: Path, serving: dict, candidate: dict, embedder, **kwargs):
    backend, parts = FileBackend(data), RuntimeParts(embedder)
    return replay(stored_recalls(backend), backend, _loaded(serving, parts), _loaded(candidate, parts), **kwargs)


def test_a_candidate_that_turns_detection_off_no_longer_wins_on_staleness(captured, embedder):
    """Its own store marks nothing, yet it packs the superseded statements: the referee counts them against it, and
    the questions about before (where the serving strategy rightly shows old facts) are exempt."""
    report = _replay(captured, load_strategy(BASELINE_PATH), _detection_off(), embedder)
    assert report.n == len(NOW + BEFORE) and report.overlap["exempt"] == len(BEFORE)
    assert report.overlap["stale_serving"]["total"] == 0
    assert report.overlap["stale_candidate"]["superseded"] >= 6
    assert report.clean.n == len(NOW) and len(report.clean.regressed) >= 6 and not report.clean.improved
    assert report.verdict == "candidate_regresses", report.reasons
    assert any(r.startswith("candidate worse on clean context") for r in report.reasons)
    [(name, row)] = report.slices["clean_context"].items()  # every question here is single-hop by intent
    assert name == "single_hop" and row["floor"] == "candidate" and row["holm_p"] <= 0.05
    assert report.referee["lifecycle"] == "reference v1" and report.referee["hide_passed"]


def test_a_real_lifecycle_gain_still_shows(captured, embedder):
    """The serving strategy without detection against a candidate with it: the candidate wins on clean context, in
    the slices the operator's categories name and in those the intent names."""
    categories = {("ann", q): "multi_hop" for q in NOW[:3]}
    report = _replay(captured, _detection_off(), load_strategy(BASELINE_PATH), embedder, categories=categories)
    assert report.verdict == "serving_regresses", report.reasons
    assert report.clean.delta > 0 and report.clean.significant
    table = report.slices["clean_context"]
    assert set(table) == {"multi_hop", "single_hop"} and table["multi_hop"]["n"] == 3
    assert table["single_hop"]["n"] == len(NOW) - 3


def _ann(*said: str) -> LiveConversation:
    live = LiveConversation("ann")
    for i, (text, day) in enumerate(zip(said, (datetime(2024, 3, 1), datetime(2024, 6, 1)))):
        live.add(Turn(f"D{i + 1}:1", "Ann", text, f"s{i + 1}", day))
    return live


def test_a_paraphrase_of_the_superseded_value_is_stale_and_the_current_value_is_not():
    """An item of the old turn that says the old value in other words (not every word of the statement) is stale;
    one saying the new value is not, nor an item of the old turn about something else."""
    from evolve.runtime.roles import ContextItem

    referee = Referee()
    live = _ann("I live in Porto with my two cats and I love jazz.", "Actually I live in Lisbon now with my two cats.")
    marks = referee.marks(referee.live_store(live), "Where does Ann live?", None, datetime(2024, 7, 1))
    [mark] = [m for m in marks.by_turn["D1:1"] if m.state == "superseded"]
    assert "porto" in mark.value and "cat" in mark.slot
    items = [ContextItem("a", "Ann lived in Porto.", "L0", ("D1:1",)),  # a paraphrase: no cats, no jazz
             ContextItem("b", "Ann lives in Lisbon with two cats.", "L0", ("D2:1",)),
             ContextItem("c", "Ann loves jazz.", "L0", ("D1:1",)),
             ContextItem("d", "Ann lived in Porto.", "L0", ("D9:9",))]  # not from the marked turn
    assert marks.judge(items) == ["superseded", None, None, None]


def test_the_referee_judges_a_recall_without_asked_at_at_its_time_and_exempts_the_past():
    live = LiveConversation("bob")
    live.add(Turn("D1:1", "Bob", "I have a dentist appointment on 10 March 2024 at 9am.", "s1", datetime(2024, 3, 1)))
    live.add(Turn("D1:2", "Ann", "Good luck with it.", "s1", datetime(2024, 3, 1)))
    referee = Referee()
    store = referee.live_store(live)
    question, later = "When is Bob's dentist appointment?", datetime(2026, 1, 1)
    assert referee.marks(store, question, datetime(2024, 3, 5), later).by_turn == {}  # asked before the day
    marks = referee.marks(store, question, None, later)  # no asked_at: judged at the recall's time
    assert {mark.state for mark in marks.by_turn["D1:1"]} == {"expired"}
    assert referee.marks(store, "When did Bob go to the dentist?", None, later) is None  # about the past: exempt


def test_the_floors_are_the_contract_the_stores_were_made_under(stores):
    """The stores' recorded acceptance rules set alpha and epsilon; a bad recorded rule is named with its file."""
    import json

    from evolve.ops.history import History
    from evolve.serve.replay import ReplayError
    from evolve.serve.verdict import contract_rules

    state_path = stores / "state.json"
    state = json.loads(state_path.read_text())
    state["harness"]["rules"]["acceptance"].update(alpha=0.1, epsilon_by_category={"temporal": 0.2})
    state_path.write_text(json.dumps(state))
    rules = contract_rules(History(stores))
    assert rules.alpha == 0.1 and rules.epsilon("temporal") == 0.2 and rules.epsilon("single_hop") == 0.02
    state["harness"]["rules"]["acceptance"]["alpha"] = 2
    state_path.write_text(json.dumps(state))
    with pytest.raises(ReplayError, match=r"state\.json: harness\.rules\.acceptance\.alpha: Input should be less"):
        contract_rules(History(stores))
