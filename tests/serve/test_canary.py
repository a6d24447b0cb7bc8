"""A governed canary: only an accepted candidate serves users, and only while the journal verifies; starting,
changing and stopping it are journal entries with an approver; its fraction is capped unless the override is
journaled; a shadow of a rejected candidate is allowed (it serves nobody); and the guard stops a worse canary by
itself: journaled, its users back on the serving strategy, shown on /metrics and /v1/strategy."""
from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from evolve.ops import canary
from evolve.ops.history import History
from evolve.serve.app import create_app
from evolve.serve.filestore import FileBackend
from evolve.serve.answers import Answer
from evolve.serve.guard import GuardPlan
from evolve.serve.memory import MemoryService
from evolve.serve.strategy import CanaryRefused, RuntimeParts, StrategySlot, canary_share
from workflow_fixtures import cli, commit_accept_round, journal

SAID = ["I moved to Porto for a new job at a bakery.", "My sister Lena visits in June.",
        "Actually my favourite bread is rye now.", "I run every Tuesday with my neighbour."]
TURNS = [{"id": f"t{i}", "speaker": "Ann", "text": text, "session": "s1", "time": f"2024-03-0{i + 1}T10:00:00"}
         for i, text in enumerate(SAID)]
QUESTION = "Who visits Ann in June?"
OPS = {"approver": "ops", "reason": "canary for the night's accept"}


def _not_accepted(stores) -> tuple[str, str]:
    record = next(r for r in History(stores).records if r.verdict in ("REJECT", "FEATURE_FLAG") and r.strategy_hash)
    return record.candidate_id, record.verdict


def _canary_entries(stores) -> list[dict]:
    return [e for e in journal(stores) if e["type"] == "CANARY"]


def test_a_canary_of_a_candidate_the_contract_did_not_accept_is_refused_and_nothing_is_journaled(
        capsys, stores, serving, tmp_path):
    cid, verdict = _not_accepted(stores)
    before = journal(stores)
    code, out = cli(capsys, "serve", "--data", tmp_path / "data", "--serving", serving, "--stores", stores,
                    "--allow-untracked", "--canary", f"{cid}:0.1", "--approver", "ops")
    assert code == 2 and f"{cid} was not accepted: {verdict}" in out and "served to users" in out
    code, out = cli(capsys, "serve", "--data", tmp_path / "data", "--serving", serving, "--stores", stores,
                    "--canary", "r003-c00:0.1")
    assert code == 2 and "needs --approver" in out
    assert journal(stores) == before


def test_start_change_and_stop_are_journaled_with_the_approver_and_the_cap_override_is_recorded(
        capsys, stores, serving):
    code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)
    assert code == 0, out
    where = ("--stores", stores, "--serving", serving)
    code, out = cli(capsys, "canary", "start", "r003-c00", "--fraction", "0.8", "--approver", "ops", *where)
    assert code == 2 and "exceeds the cap 0.5" in out
    code, out = cli(capsys, "canary", "start", "r003-c00", "--fraction", "0.8", "--approver", "ops",
                    "--override-cap", *where)
    assert code == 2 and "needs a --reason" in out
    assert _canary_entries(stores) == []
    code, out = cli(capsys, "canary", "start", "r003-c00", "--fraction", "0.8", "--approver", "ops", "--override-cap",
                    "--reason", "small user base", *where)
    assert code == 0 and "cap      overridden: 0.8 > 0.5" in out
    code, out = cli(capsys, "canary", "start", "r003-c00", "--fraction", "0.1", "--approver", "ops", *where)
    assert code == 2 and "already runs" in out
    code, out = cli(capsys, "canary", "set", "--fraction", "0.2", "--approver", "bob", *where)
    assert code == 0, out
    code, out = cli(capsys, "canary", "stop", "--approver", "carol", "--reason", "enough", *where)
    assert code == 0, out
    start, change, stop = (e["payload"] for e in _canary_entries(stores))
    assert (start["action"], start["candidate_id"], start["verdict"], start["fraction"]) == \
        ("start", "r003-c00", "ACCEPT_WITH_MONITOR", 0.8)
    assert start["cap_override"] is True and start["approval"] == {"approver": "ops", "reason": "small user base"}
    assert (change["action"], change["fraction"], change["previous_fraction"], change["cap_override"]) == \
        ("change", 0.2, 0.8, False)
    assert change["approval"]["approver"] == "bob"
    assert (stop["action"], stop["by"], stop["approval"]) == ("stop", "operator",
                                                              {"approver": "carol", "reason": "enough"})
    code, out = cli(capsys, "canary", "status", *where)
    assert "no canary runs" in out and "stopped by operator" in out
    code, out = cli(capsys, "journal", "verify", "--stores", stores, "--serving", serving)
    assert code == 0 and out.startswith("ok"), out


def test_a_journaled_canary_whose_record_no_longer_checks_out_is_refused_at_start(capsys, stores, serving, tmp_path,
                                                                                   embedder):
    canary.start(stores, serving, "r003-c00", 0.3, OPS, allow_untracked=True)
    outcomes = stores / "candidate_outcomes.jsonl"
    lines = outcomes.read_text().splitlines()
    edited = [json.dumps({**(r := json.loads(line)), "decision": {**r["decision"], "verdict": "ACCEPT"}})
              if json.loads(line)["candidate_id"] == "r003-c00" else line for line in lines]
    outcomes.write_text("\n".join(edited) + "\n")
    with pytest.raises(CanaryRefused, match="r003-c00: refused: the candidate record disagrees with the journal: r003-c00: the record says ACCEPT"):
        StrategySlot(stores, serving, RuntimeParts(embedder), allow_untracked=True)
    code, out = cli(capsys, "serve", "--data", tmp_path / "data", "--serving", serving, "--stores", stores,
                    "--allow-untracked", "--port", "0")
    assert code == 2 and "disagrees with the journal" in out


def test_the_guard_stops_a_worse_canary_by_itself(stores, serving, tmp_path, embedder):
    """A canary packing one item (top_k 1) loses the answer the serving strategy's context carries; at its look the
    guard stops it: journaled, users back on serving, shown on /metrics and /v1/strategy. A shadow of a rejected
    candidate runs beside it and serves nobody."""
    worse = commit_accept_round(stores, {"retrieval.top_k": 1, "retrieval.rerank.top_n": 1}, applied=False)
    canary.start(stores, serving, worse["candidate_id"], 0.5, OPS, allow_untracked=True)
    rejected, verdict = _not_accepted(stores)
    slot = StrategySlot(stores, serving, RuntimeParts(embedder), allow_untracked=True, shadow=rejected,
                        guard=GuardPlan(alpha=0.5, looks=(3,)))
    memory = MemoryService(FileBackend(tmp_path / "data"), lambda: slot.current)
    users = [u for u in (f"u{i}" for i in range(40)) if canary_share(u) < 0.5][:4]
    client = TestClient(create_app(slot, memory, answers={(u, QUESTION): Answer(user=u, question=QUESTION, answer="rye bread") for u in users}))
    shown = client.get("/v1/strategy").json()
    assert shown["canary"]["candidate_id"] == worse["candidate_id"] and shown["canary"]["fraction"] == 0.5
    assert (shown["shadow"]["verdict"], shown["shadow"]["serves"]) == (verdict, "nobody")
    roles = []
    for user in users:
        assert client.post(f"/v1/users/{user}/turns", json={"turns": TURNS}).status_code == 201
        reply = client.post(f"/v1/users/{user}/recall", json={"question": QUESTION})
        assert reply.status_code == 200
        roles.append(reply.json()["role"])
    assert roles == ["canary", "canary", "canary", "serving"]  # stopped at the third pair, the look
    stop = _canary_entries(stores)[-1]
    assert stop["payload"]["action"] == "stop" and stop["payload"]["by"] == "guard"
    assert stop["payload"]["approval"]["approver"] == "canary guard"
    assert (stop["payload"]["evidence"]["harmed"], stop["payload"]["evidence"]["helped"]) == (3, 0)
    shown = client.get("/v1/strategy").json()
    assert shown["canary"] is None and shown["canary_stopped"]["by"] == "guard"
    assert shown["canary_stopped"]["entry"] == stop["index"]
    metrics = client.get("/metrics").text
    assert "memevolve_canary_stopped_by_guard 1" in metrics and "memevolve_canary_fraction 0" in metrics
    assert 'memevolve_recalls_total{role="canary"} 3' in metrics
    assert 'memevolve_recalls_total{role="serving"} 1' in metrics
    log = [json.loads(line) for line in (tmp_path / "data" / "users" / users[0] / "recalls.jsonl").read_text()
           .splitlines()]
    assert log[0]["role"] == "canary" and log[0]["shadow"]["role"] == "serving"
    assert log[0]["guard"] == {"serving": True, "canary": False}
    slot.sync_canary()  # the journaled stop is not mistaken for a new start, nor the start restarted
    assert slot.canary is None
    code = History(stores).verify_journal()
    assert code.ok, code.reason


def test_a_hand_edited_canary_fraction_is_not_followed_by_a_running_service(stores, serving, embedder):
    """The last CANARY entry's fraction edited to 1.0 under a running service: the journal no longer verifies, so
    the service stops serving the canary (nobody gets it) instead of widening it; the journal's own change widens it."""
    canary.start(stores, serving, "r003-c00", 0.3, OPS, allow_untracked=True)
    slot = StrategySlot(stores, serving, RuntimeParts(embedder), allow_untracked=True)
    users = [f"u{i}" for i in range(40)]
    served = sum(slot.canary is not None and canary_share(u) < slot.canary.fraction for u in users)
    assert slot.canary is not None and slot.canary.fraction == 0.3 and 0 < served < 40
    path = stores / "journal.jsonl"
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    assert last["type"] == "CANARY"
    last["payload"]["fraction"] = 1.0
    path.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    assert slot.sync_canary() is True
    assert slot.canary is None and "fails verification" in slot.canary_refused["reason"]
    path.write_text("\n".join(lines) + "\n")  # the edit undone: the journaled canary serves again
    assert slot.sync_canary() is True and slot.canary is not None and slot.canary.fraction == 0.3


def test_a_canary_beside_a_serving_file_the_stores_do_not_track_or_that_does_not_exist_is_refused(
        capsys, stores, serving, tmp_path):
    before = journal(stores)
    code, out = cli(capsys, "canary", "start", "r003-c00", "--fraction", "0.1", "--approver", "ops",
                    "--stores", stores, "--serving", serving)
    assert code == 2 and "a canary runs beside a serving file these stores promoted" in out, out
    missing = tmp_path / "strategies" / "nowhere.yaml"
    code, out = cli(capsys, "canary", "start", "r003-c00", "--fraction", "0.1", "--approver", "ops",
                    "--stores", stores, "--serving", missing, "--allow-untracked")
    assert code == 2 and "does not exist" in out, out
    assert journal(stores) == before
    code, out = cli(capsys, "canary", "start", "r003-c00", "--fraction", "0.1", "--approver", "ops",
                    "--stores", stores, "--serving", serving, "--allow-untracked")
    assert code == 0, out


def _probed_canary(capsys, stores, serving, embedder, data, worse: bool = False, max_users: int | None = None):
    """A canary of the stores' current strategy (``worse``: packing one item; else a no-op change) started on
    ``serving``, its slot, and a memory service on ``data`` holding the synthetic conversations captured by two users
    inside the canary's share and one outside: ``(slot, memory, inside, outside)``."""
    from evolve.benchmarks.synthetic import generate_synthetic
    from server_process import turns_of

    code, out = cli(capsys, "promote", "r002-c00", "--to", serving, "--stores", stores)  # the stores' current
    assert code == 0, out
    view = History(stores)
    k = view.get_strategy(view.state["current_strategy"])["retrieval"]["top_k"]
    changes = {"retrieval.top_k": 1, "retrieval.rerank.top_n": 1} if worse else {"retrieval.top_k": k}
    candidate = commit_accept_round(stores, changes, applied=False)
    canary.start(stores, serving, candidate["candidate_id"], 0.5, OPS, allow_untracked=True)
    slot = StrategySlot(stores, serving, RuntimeParts(embedder), allow_untracked=True,
                        guard=GuardPlan(alpha=0.5, looks=(3, 6)))
    memory = MemoryService(FileBackend(data), lambda: slot.current, max_users=max_users)
    inside = [u for u in (f"u{i}" for i in range(40)) if canary_share(u) < 0.5][:2]
    outside = next(u for u in (f"u{i}" for i in range(40)) if canary_share(u) >= 0.5)
    conversations = generate_synthetic(3, n_personas=3, n_sessions=6).conversations.values()
    for user, conversation in zip([*inside, outside], conversations):
        memory.capture(user, turns_of(conversation))
    return slot, memory, inside, outside


@pytest.mark.parametrize("kind", ["worse", "null"])
def test_the_probe_guard_judges_canary_users_own_turns_without_answers(kind, capsys, stores, serving, tmp_path,
                                                                       embedder):
    """No answers file: probes made from each canary user's captured turns give the guard its pairs. A canary
    packing one item is stopped by them; one packing what serving packs (a no-op change) is judged and never
    stopped (every pair concordant). Users outside the canary's share are not probed."""
    from evolve.serve.probeguard import ProbeJudge

    slot, memory, inside, outside = _probed_canary(capsys, stores, serving, embedder, tmp_path / "data",
                                                   worse=kind == "worse")
    run = slot.canary
    judge = ProbeJudge(memory, slot, per_user=1000)
    judged = judge.run_pass()
    status = run.guard.status()
    assert judged == status["pairs"] > 0 and "answers" not in status["judged"]
    assert set(status["judged"]) <= {"single_hop", "temporal", "multi_hop", "open_domain"}
    assert set(judge._probed) <= {(run.start_index, u) for u in inside}  # nobody outside the share
    if kind == "worse":
        assert slot.canary is None and slot.canary_stopped["by"] == "guard"
        stop = _canary_entries(stores)[-1]
        assert stop["payload"]["action"] == "stop" and stop["payload"]["evidence"]["harmed"] >= 3
    else:
        assert slot.canary is run and status["discordant"] == 0 and status["stop"] is None
        assert judge.run_pass() == 0  # nothing new captured: nothing judged again


def test_the_probe_guard_judges_only_users_held_in_memory_and_never_loads_or_evicts_one(capsys, stores, serving,
                                                                                       tmp_path, embedder):
    """Under max_users 1 only the last user captured stays in memory (here one outside the canary's share): a pass
    judges nothing then; with a canary user held, it probes that user alone. The users held (and the evictions
    counted) are the same after each pass as before."""
    from evolve.serve.probeguard import ProbeJudge

    slot, memory, inside, outside = _probed_canary(capsys, stores, serving, embedder, tmp_path / "data", max_users=1)
    judge = ProbeJudge(memory, slot, per_user=1000)
    assert memory.loaded() == [outside] and judge.run_pass() == 0 and not judge._probed
    memory.conversation(inside[1])  # a request loads it
    held, evictions = memory.loaded(), memory.evictions
    assert held == [inside[1]]
    assert judge.run_pass() > 0
    assert set(judge._probed) == {(slot.canary.start_index, inside[1])}
    assert (memory.loaded(), memory.evictions) == (held, evictions)


def test_the_probe_guard_forgets_an_erased_user_and_the_probes_of_an_erased_turn(capsys, stores, serving, tmp_path,
                                                                                 embedder):
    """After a pass, one canary user loses a turn a judged probe quotes and the other is erased: the next pass holds
    nothing of the erased user, no probe built on the erased turn, and no digest of a probe no longer asked."""
    from evolve.serve.probeguard import ProbeJudge, _key

    slot, memory, (kept, gone), _ = _probed_canary(capsys, stores, serving, embedder, tmp_path / "data")
    judge = ProbeJudge(memory, slot, per_user=1000)
    assert judge.run_pass() > 0
    start = slot.canary.start_index
    quoted = judge._probed[(start, kept)].probes[0]
    memory.erase_turn(kept, quoted.evidence[0])
    memory.erase(gone)
    judge.run_pass()
    assert set(judge._probed) == {(start, kept)}
    probed = judge._probed[(start, kept)]
    assert not any(quoted.evidence[0] in p.evidence for p in probed.probes)
    assert probed.judged <= {_key(p) for p in probed.probes}


def test_the_start_line_says_what_the_guard_judges_and_a_guard_with_nothing_to_judge_says_so():
    from dataclasses import replace
    from pathlib import Path

    from evolve.serve.server import ServeConfig, guard_note

    base = ServeConfig(Path("data"), Path("serving.yaml"), None)
    assert guard_note(base, GuardPlan()) == ("its guard tests at alpha 0.05 on probes of the canary users' own turns; "
                                             "0 pairs judged yet")
    both = guard_note(replace(base, answers=Path("answers.yaml")), GuardPlan(alpha=0.01))
    assert both.endswith("at alpha 0.01 on probes of the canary users' own turns and recalls the operator's answers "
                         "cover; 0 pairs judged yet")
    assert "judges nothing" in guard_note(replace(base, guard_probes=False), GuardPlan())
