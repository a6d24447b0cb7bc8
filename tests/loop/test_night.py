"""A night: when it ends, the confirmation split, the one-sided confirmation, and a refused night's restore."""
import json
from pathlib import Path

import pytest

from evolve.loop.config import ConfirmationConfig, NightConfig, RunConfig
from evolve.loop.engine import Engine
from evolve.loop.night import NightState
from evolve.loop.setup import RunSetup, confirmation_split
from evolve.data import BASELINE_PATH
from evolve.state.stores import RoundBundle, StoreSet
from evolve.strategy.artifact import derive, load_strategy, strategy_hash
from evolve.verify.confirmation import confirm
from evolve.verify.statistics import mcnemar_exact


def test_a_night_ends_on_patience_evaluations_minutes_or_its_last_round():
    night = NightState(start="s", first_round=1)
    assert night.ends(NightConfig(), minutes=0, last=False) is None
    assert night.ends(NightConfig(), minutes=0, last=True) == "rounds"
    idle = night.after_round(False, 3).after_round(False, 2)
    assert (idle.rounds, idle.idle, idle.evaluations) == (2, 2, 5)
    assert idle.ends(NightConfig(patience=2), minutes=0, last=False) == "patience"
    assert idle.after_round(True, 1).idle == 0  # a round that applied a change starts the count again
    assert idle.ends(NightConfig(patience=3), minutes=0, last=False) is None
    assert idle.ends(NightConfig(max_evaluations=5), minutes=0, last=False) == "evaluations"
    assert idle.ends(NightConfig(max_minutes=1.5), minutes=1.6, last=False) == "minutes"


def test_the_confirmation_split_is_stratified_seeded_and_stable():
    scored = {f"s{i}": "single_hop" for i in range(50)} | {f"t{i}": "temporal" for i in range(10)} | {"o0": "open"}
    held = confirmation_split(scored, 0.4, 0)
    assert sum(q.startswith("s") for q in held) == 20 and sum(q.startswith("t") for q in held) == 4
    assert "o0" not in held  # a category of one question keeps it for the search
    assert confirmation_split(scored, 0.4, 0) == held and confirmation_split(scored, 0.4, 1) != held
    # a question's side does not depend on the other questions: drop one held question, the rest stay held
    fewer = {q: c for q, c in scored.items() if q != held[0]}
    assert set(confirmation_split(fewer, 0.4, 0)) - set(held) <= {q for q in fewer if q not in held} and \
        len(set(confirmation_split(fewer, 0.4, 0)) & set(held)) >= len(held) - 2


def _outcomes(bits: str) -> dict[str, dict]:
    return {f"q{i}": {"correct": b == "1"} for i, b in enumerate(bits)}


def test_confirm_is_one_sided_and_keeps_the_word_cap():
    start, final = _outcomes("0" * 12 + "1" * 8), _outcomes("1" * 10 + "00" + "1" * 8)
    assert mcnemar_exact(10, 0, "greater") == pytest.approx(0.5 ** 10)
    ok = confirm(start, final, alpha=0.05, start_hash="a", final_hash="b", words=(100.0, 150.0), max_words=160)
    assert ok.verdict == "CONFIRMED" and (ok.improved, ok.regressed) == (10, 0) and ok.delta == pytest.approx(0.5)
    worse = confirm(final, start, alpha=0.05, start_hash="b", final_hash="a", words=(100.0, 100.0))
    assert worse.verdict == "REFUSED" and worse.p == pytest.approx(1.0)
    costly = confirm(start, final, alpha=0.05, start_hash="a", final_hash="b", words=(100.0, 170.0), max_words=160)
    assert costly.verdict == "REFUSED" and "max_context_words" in costly.reason
    with pytest.raises(ValueError, match="share no scored question"):
        confirm(start, {}, alpha=0.05, start_hash="a", final_hash="b", words=(0, 0))


def tiny(stores: Path, **night) -> RunConfig:
    return RunConfig(benchmark="synthetic:0", limit=80, probe_size=20, rounds=4, candidates_per_round=2,
                     stores=stores, night=NightConfig(**night))


def test_the_search_never_sees_the_confirmation_questions(tmp_path):
    config = tiny(tmp_path / "stores", confirmation=ConfirmationConfig(share=0.4))
    setup, plain = RunSetup.prepare(config), RunSetup.prepare(tiny(tmp_path / "other"))
    held = set(setup.confirmation_ids)
    assert held and held <= set(plain.scored)
    assert not held & set(setup.question_ids) and not held & set(setup.probe_ids) and not held & set(setup.scored)
    assert set(setup.question_ids) | held == set(plain.question_ids)


def journal(stores: Path) -> list[dict]:
    return [json.loads(line) for line in (stores / "journal.jsonl").read_text().splitlines()]


def test_a_night_ends_after_its_evaluation_count(tmp_path):
    stores = tmp_path / "stores"
    summary = Engine(tiny(stores, max_evaluations=1), track=False, progress=False).run()
    nights = [e for e in journal(stores) if e["type"] == "NIGHT"]
    assert summary["rounds"] == 1 and len(nights) == 1 and nights[0]["round"] == 1
    assert nights[0]["payload"]["ended"] == "evaluations" and nights[0]["payload"]["evaluations"] >= 1
    assert summary["night"]["ended"] == "evaluations" and summary["night"]["minutes"] >= 0
    assert json.loads((stores / "state.json").read_text())["night"] is None


def _night_on(stores: Path, start: dict, final: dict) -> None:
    """Stores whose open night started on ``start`` and whose round 1 made ``final`` current."""
    with StoreSet(stores) as s:
        s.commit_round(1, RoundBundle(strategies=[start, final], state={
            "current_strategy": strategy_hash(final),
            "night": NightState(start=strategy_hash(start), first_round=1, rounds=1).model_dump()}))


#: A strategy that retrieves one item where the baseline retrieves five.
NARROW = {"retrieval.top_k": 1, "retrieval.rerank.top_n": 1}


@pytest.mark.parametrize("alpha,verdict", [(0.2, "CONFIRMED"), (1e-12, "REFUSED")])
def test_the_night_s_last_round_confirms_or_restores_its_start(tmp_path, alpha, verdict):
    """A night that went from a narrow retrieval to the baseline's: confirmed at a reachable level; refused at a level
    no gain reaches, which makes the start current again and its best-ever checkpoint (so no later round restores
    the refused final), and the journal says so."""
    stores = tmp_path / "stores"
    baseline = load_strategy(BASELINE_PATH)
    narrow = derive(baseline, NARROW)
    _night_on(stores, narrow, baseline)
    config = tiny(stores, confirmation=ConfirmationConfig(share=0.4, alpha=alpha)).model_copy(
        update={"rounds": 2, "candidates_per_round": 1})
    engine = Engine(config, track=False, progress=False)
    summary = engine.run()
    night = summary["night"]
    assert (night["first_round"], night["last_round"], night["start"]) == (1, 2, strategy_hash(narrow))
    # the word cap is read on the search's questions, where every candidate was held to it
    search = engine.harness.evaluate(baseline, engine.question_ids)
    every = engine.harness.evaluate(baseline, [*engine.question_ids, *engine.confirmation_ids])
    assert search.summary.context_words["mean"] != every.summary.context_words["mean"]
    assert night["confirmation"]["words_final"] == pytest.approx(search.summary.context_words["mean"], abs=1e-3)
    assert night["confirmation"]["verdict"] == verdict, night["confirmation"]["reason"]
    assert night["confirmation"]["improved"] > night["confirmation"]["regressed"]
    assert night["diff"]["retrieval.top_k"][0] == 1
    assert night["confirmation"]["questions"] == len(RunSetup.prepare(config).confirmation_ids)
    entry = [e for e in journal(stores) if e["type"] == "NIGHT"][-1]
    assert entry["round"] == 2 and entry["payload"]["confirmation"] == night["confirmation"]
    with StoreSet(stores) as s:
        if verdict == "REFUSED":
            assert night["restored"] == s.current_strategy == strategy_hash(narrow)
            assert s.checkpoint.load().strategy_hash == strategy_hash(narrow)
        else:
            assert night["restored"] is None and s.current_strategy == night["final"] != strategy_hash(narrow)
